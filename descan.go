package stemdot

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/descan"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
	"github.com/stemdot/stemdot/masks"
)

// frameShifts turns ApplyOptions.Shifts into the engine's per-frame shifts of ds
// (engine.Options.Shifts): a constant shift for every frame; the shift of each frame's
// scan position (dataset.ScanPositions: with option frames, the shifts cover the whole
// scan); or, for a dataset that reads part of its scan, one shift per frame read. nil
// for none. Errors: errs.Shape for another length, errs.Argument for a NaN or infinite
// shift.
func frameShifts(ds dataset.Dataset, shifts []float64) ([]float64, error) {
	if shifts == nil {
		return nil, nil
	}
	for i, v := range shifts {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errs.New(errs.Argument, "option shifts: %s shift %d (scan position %d) is %v: shifts must be finite", [2]string{"y", "x"}[i%2], i, i/2, v)
		}
	}
	n := ds.NumFrames()
	out := make([]float64, 2*n)
	scan, pos := dataset.ScanPositions(ds)
	positions := 1
	for _, s := range scan {
		positions *= s
	}
	switch len(shifts) {
	case 2:
		pos = make([]int, n) // every frame takes shift 0
	case 2 * positions:
	case 2 * n:
		return slices.Clone(shifts), nil
	default:
		return nil, errs.New(errs.Shape, "option shifts holds %d values: want 2 (one shift dy, dx for every frame) or 2 per scan position, nav_shape %s + (2,) = %d values", len(shifts), npy.ShapeString(scan), 2*positions)
	}
	for f, p := range pos {
		out[2*f], out[2*f+1] = shifts[2*p], shifts[2*p+1]
	}
	return out, nil
}

// meanShift is the mean (dy, dx) of per-frame shifts, 2 per frame, as a running mean
// (finite for any finite shifts, 1e308 included).
func meanShift(f []float64) []float64 {
	var dy, dx float64
	for i := 0; i < len(f); i += 2 {
		k := float64(i/2 + 1)
		dy += f[i]/k - dy/k
		dx += f[i+1]/k - dx/k
	}
	return []float64{dy, dx}
}

// LoadShifts reads per-scan-position mask shifts (ApplyOptions.Shifts) from an NPY
// file for a scan of nav shape nav: shape nav + (2,), y then x in pixels (for a nav
// shape (n,), (n, 2)), float32 or float64 in either byte order, C order. Errors:
// errs.IO for a file that cannot be read, errs.Format for one that is not such an
// NPY file, errs.DType for another dtype, errs.Shape for another shape (naming both),
// errs.Argument for a NaN or infinite shift (naming its scan position).
func LoadShifts(path string, nav []int) (shifts []float64, err error) {
	defer goErrs(&err)
	f, size, err := regfile.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("shifts file %s: %w", path, err))
	}
	defer f.Close()
	want := append(slices.Clone(nav), 2)
	_, d, raw, err := npy.ReadArray(f, size, func(h npy.Info, d npy.Descr) error {
		if d.Kind != 'f' || (d.Size != 4 && d.Size != 8) {
			return errs.New(errs.DType, "has dtype '%s', want float32 or float64 (save shifts.astype(np.float64))", h.Descr)
		}
		if !slices.Equal(h.Shape, want) {
			return errs.New(errs.Shape, "has shape %s, want nav_shape + (2,) = %s (y, x per scan position)", npy.ShapeString(h.Shape), npy.ShapeString(want))
		}
		return nil
	})
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("shifts file %s: %w", path, err))
	}
	shifts = npy.Floats(raw, d)
	for i, v := range shifts {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errs.New(errs.Argument, "shifts file %s: the %s shift of scan position %d is %v: shifts must be finite", path, [2]string{"y", "x"}[i%2], i/2, v)
		}
	}
	return shifts, nil
}

// DescanFit fits the descan plane (package descan) to the centre-of-mass shift map of
// ds: the com masks of spec com ("com", "com:CX,CY[,R]": see Masks; "com:auto[,R]"
// about the direct beam's centre in the sum frame, Planner.Centre; "" is "com") applied
// with plan, their shifts (COMShifts) fitted by least squares per component, leaving out
// frames without counts. The plane is in positions of the scan ds's frames come from
// (dataset.ScanPositions: the whole scan of an ROI or a frames range, whose other
// positions are left out), (nav_y, nav_x) or (n,) (a scan of planes is errs.Shape,
// naming the option nav_shape that reads it as one scan); descan.Plane.Eval gives the
// shifts of every scan position (ApplyOptions.Shifts) that make the masks follow the
// pattern.
// Fit the data itself, or a reference scan in vacuum with the same scan settings.
// Errors: those of Masks and Apply, and errs.Argument for a shift map that does not
// determine a plane (too few frames with counts).
func DescanFit(ctx context.Context, ds dataset.Dataset, com string, plan Plan) (p descan.Plane, err error) {
	defer goErrs(&err)
	pl, err := plan.Planner()
	if err != nil {
		return p, err
	}
	return pl.DescanFit(ctx, ds, com)
}

// DescanFit is DescanFit with the workers of pl.
func (pl *Planner) DescanFit(ctx context.Context, ds dataset.Dataset, com string) (p descan.Plane, err error) {
	defer goErrs(&err)
	if com == "" {
		com = "com"
	}
	if ds == nil {
		return p, errs.New(errs.Argument, "no dataset")
	}
	if scan, _ := dataset.ScanPositions(ds); len(scan) > 2 {
		return p, needs2D(scan, "descan fit: the plane is fitted in the scan positions")
	}
	var centre *masks.Centre
	if masks.NeedsCentre(com) { // com:auto[,R]: about the direct beam of the sum frame
		c, err := pl.Centre(ctx, ds, nil)
		if err != nil {
			return p, err
		}
		centre = &c
	}
	stack, err := MasksCentred(ds.SigShape(), centre, com)
	if err != nil {
		return p, err
	}
	sum, ok := frontend.FindCOM(stack.MaskNames())
	if !ok || stack.N != 3 {
		return p, errs.New(errs.Argument, "descan fit: mask spec %q is not one com spec (com, com:CX,CY[,R] or com:auto[,R])", com)
	}
	res, err := pl.Apply(ctx, ds, stack, ApplyOptions{Float64: true, ROICompact: true}) // one row per frame
	if err != nil {
		return p, err
	}
	shifts, err := COMShifts(res, sum)
	if err != nil {
		return p, err
	}
	// Fitted in the scan's positions (an ROI's or a frames range's frames lie where
	// dataset.ScanPositions says; the positions not read are left out, as NaN).
	scan, pos := dataset.ScanPositions(ds)
	whole := make([]float64, 2*product(scan))
	for i := range whole {
		whole[i] = math.NaN()
	}
	for f, q := range pos {
		whole[2*q], whole[2*q+1] = shifts[2*f], shifts[2*f+1]
	}
	p, err = descan.Fit(whole, scan)
	if err != nil {
		return p, errs.Wrap(errs.Argument, fmt.Errorf("descan fit of %s: %w", describe(ds), err))
	}
	return p, nil
}

// SaveShifts writes per-scan-position shifts (2 per position, y then x, as
// descan.Plane.Eval gives them) to path as NPY of shape nav + (2,), float64, the file
// LoadShifts reads; atomically (a failed write leaves nothing at path). Errors:
// errs.Argument for a path not ending in .npy, errs.Shape for shifts of another length,
// errs.IO for a path that cannot receive the file or is one of inputs (checkShiftsFile).
func SaveShifts(path string, nav []int, shifts []float64, inputs ...string) (err error) {
	defer goErrs(&err)
	if err := checkShiftsFile(path, inputs...); err != nil {
		return err
	}
	if n := 2 * product(nav); len(shifts) != n {
		return errs.New(errs.Shape, "%d shift values for nav shape %s: want 2 per scan position, %d", len(shifts), npy.ShapeString(nav), n)
	}
	var out outputBatch
	return out.commit(out.npy(path, append(slices.Clone(nav), 2), shifts))
}

// checkShiftsFile reports, before any work, why SaveShifts cannot write path
// (frontend.CheckShiftsFile).
func checkShiftsFile(path string, inputs ...string) (err error) {
	defer goErrs(&err)
	return checkFiles([]output{{"out", path, true}}, inputs)
}
