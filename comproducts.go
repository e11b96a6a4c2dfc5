package stemdot

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stemdot/stemdot/comfield"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/atomicfile"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// COMOptions correct a centre-of-mass shift field before its products are computed,
// as LiberTEM's CoM analysis (scan_rotation, flip_y; see package comfield).
type COMOptions struct {
	// Rotation is the scan rotation in degrees: the shift vectors are rotated by it
	// (clockwise for positive angles), after FlipY.
	Rotation float64
	// FlipY flips the detector's y axis (y → −y) first, e.g. for a detector whose pixel
	// (0, 0) is at the lower left.
	FlipY bool
}

// COMProducts are the maps DPC users read from a centre-of-mass shift field, each of
// shape NavShape (nav_y, nav_x), row-major, float64 (see package comfield for the
// formulas and their sources):
type COMProducts struct {
	// NavShape is the scan shape (nav_y, nav_x).
	NavShape []int
	// FieldY and FieldX are the shifts after COMOptions' flip and rotation, in pixels.
	FieldY, FieldX []float64
	// Magnitude is √(FieldY² + FieldX²), in pixels.
	Magnitude []float64
	// Divergence is ∂FieldY/∂row + ∂FieldX/∂column (numpy.gradient), and Curl
	// ∂FieldY/∂column − ∂FieldX/∂row, in pixels per scan step.
	Divergence, Curl []float64
	// ICoM is the integrated centre of mass, the phase φ with ∇φ = (FieldY, FieldX) by
	// Fourier integration, zero mean, in pixels × scan steps.
	ICoM []float64
	// Warnings say what a user should know: positions without a finite shift (a frame
	// summing to 0), read as 0 by the iCoM.
	Warnings []string
}

// NewCOMProducts computes the COMProducts of the shift maps shifts, as COMShifts gives
// them (frame-major, y then x: shifts[2f], shifts[2f+1], in pixels) over a scan of
// navShape (nav_y, nav_x), corrected by opt first. Positions whose shift is NaN (a frame
// summing to 0, a position outside an ROI) give NaN magnitude, divergence and curl there
// and NaN divergence and curl where the differences use them (as numpy.gradient), an
// infinite one NaN or ±Inf magnitude, divergence and curl where they use it; both are
// read as 0 by the iCoM, with a
// warning naming how many and the first ones. Errors: errs.Shape for a nav shape that
// is not 2-D of at least 2×2 positions or that does not match the shifts' length,
// errs.Argument for a rotation that is not finite, errs.Resources for maps that do not
// fit in memory.
func NewCOMProducts(shifts []float64, navShape []int, opt COMOptions) (p *COMProducts, err error) {
	defer goErrs(&err)
	if len(navShape) > 2 {
		return nil, errs.New(errs.Shape, "CoM products need a 2-D scan (derivatives along its rows and columns), as LiberTEM's CoMUDF, got nav_shape %s: give one plane's shift maps, of shape (nav_y, nav_x, 2) (numpy: shifts[z])", npy.ShapeString(navShape))
	}
	if len(navShape) != 2 || navShape[0] < 2 || navShape[1] < 2 {
		return nil, errs.New(errs.Shape, "CoM products need a 2-D scan of at least 2×2 positions (derivatives along both scan axes), got nav_shape %s: give a scan's shift maps of shape (nav_y, nav_x, 2)", npy.ShapeString(navShape))
	}
	ny, nx := navShape[0], navShape[1]
	if ny > math.MaxInt/2/nx || len(shifts) != 2*ny*nx {
		return nil, errs.New(errs.Shape, "%d shift values do not fill nav_shape %s × 2 (y, x)", len(shifts), npy.ShapeString(navShape))
	}
	if math.IsNaN(opt.Rotation) || math.IsInf(opt.Rotation, 0) {
		return nil, errs.New(errs.Argument, "option rotation %v is not a finite angle in degrees", opt.Rotation)
	}
	// The field (2 maps), 4 products, and the iCoM's 2 complex spectra of 16 bytes.
	if err := memlimit.Check(fmt.Sprintf("the CoM products of %d × %d scan positions", ny, nx), int64(ny*nx)*(6*8+2*16), "use a smaller scan"); err != nil {
		return nil, err
	}
	f := comfield.FromShifts(shifts, ny, nx, opt.Rotation, opt.FlipY)
	p = &COMProducts{NavShape: []int{ny, nx}, FieldY: f.Y, FieldX: f.X, Magnitude: f.Magnitude(), Divergence: f.Divergence(), Curl: f.Curl()}
	var bad []int
	p.ICoM, bad = f.ICoM()
	if len(bad) > 0 {
		var first []string
		for _, i := range bad[:min(len(bad), 5)] {
			first = append(first, fmt.Sprintf("(%d, %d)", i/nx, i%nx))
		}
		more := ""
		if len(bad) > 5 {
			more = ", ..."
		}
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d of %d scan positions have no finite CoM shift (NaN: frames summing to 0, or positions left out of an ROI), at (y, x) %s%s: the iCoM reads them as 0; the magnitude, divergence and curl are NaN there, and the divergence and curl where their differences use them",
			len(bad), ny*nx, strings.Join(first, ", "), more))
	}
	return p, nil
}

// ReadCOMShifts reads shift maps as Outputs.COMShifts writes them: an NPY of shape
// (nav_y, nav_x, 2), float64 or float32 in either byte order, C order. It returns the
// shifts (frame-major, y then x) and the nav shape. Errors name the file: errs.IO,
// errs.Format (not an NPY file, truncated, Fortran order), errs.Shape (not (nav_y,
// nav_x, 2)), errs.DType (not float32 or float64).
func ReadCOMShifts(path string) (shifts []float64, navShape []int, err error) {
	defer goErrs(&err)
	f, size, err := regfile.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, d, raw, err := npy.ReadArray(f, size, func(info npy.Info, d npy.Descr) error {
		if len(info.Shape) == 4 && info.Shape[3] == 2 {
			return errs.New(errs.Shape, "shape %s is the shift maps of a scan of planes (nav_z, nav_y, nav_x, 2): CoM products are of a 2-D scan (derivatives along its rows and columns), as LiberTEM's CoMUDF: save one plane's maps, (nav_y, nav_x, 2) (numpy: shifts[z])", npy.ShapeString(info.Shape))
		}
		if len(info.Shape) != 3 || info.Shape[2] != 2 {
			return errs.New(errs.Shape, "shape %s is not the shift maps' (nav_y, nav_x, 2), as stemdot apply --com-shifts writes them", npy.ShapeString(info.Shape))
		}
		if d.Kind != 'f' || d.Size != 4 && d.Size != 8 {
			return errs.New(errs.DType, "dtype '%s' is not float32 or float64: the shift maps are floats", info.Descr)
		}
		n := int64(info.Shape[0]) * int64(info.Shape[1]) * 2
		if n <= 0 || n > size { // the file's size says no more (ReadArray checks exactly)
			return nil
		}
		return memlimit.Check(fmt.Sprintf("the shift maps of %s", path), n*(8+int64(d.Size)), "use a smaller scan")
	})
	if err != nil {
		return nil, nil, errs.Wrap(errs.Format, fmt.Errorf("%s: %w", path, err))
	}
	return npy.Floats(raw, d), info.Shape[:2], nil
}

// COMOutputs are the files SaveCOMProducts writes; empty fields are not written. NPY
// files must end in .npy, after a file name.
type COMOutputs struct {
	// Field is the corrected field, NPY of shape (nav_y, nav_x, 2), float64: y, x.
	Field string
	// Magnitude, Divergence, Curl and ICoM are NPY of shape (nav_y, nav_x), float64.
	Magnitude, Divergence, Curl, ICoM string
	// PNGPrefix, when set, adds an 8-bit greyscale PNG of each product,
	// PREFIX_magnitude.png, PREFIX_divergence.png, PREFIX_curl.png and PREFIX_icom.png,
	// mapped and scaled as Outputs.PNGPrefix's.
	PNGPrefix string
}

// comOutput is one file of COMOutputs: its option key, path, and data (NPY) or image.
type comOutput struct {
	option, path string
	shape        []int
	data         []float64
	png          bool
}

// files lists the outputs of p that o asks for.
func (o COMOutputs) files(p *COMProducts) []comOutput {
	nav := p.NavShape
	var field []float64
	if o.Field != "" {
		field = make([]float64, 2*len(p.FieldY))
		for i := range p.FieldY {
			field[2*i], field[2*i+1] = p.FieldY[i], p.FieldX[i]
		}
	}
	var out []comOutput
	for _, f := range []comOutput{
		{"field", o.Field, append(slices.Clone(nav), 2), field, false},
		{"magnitude", o.Magnitude, nav, p.Magnitude, false},
		{"divergence", o.Divergence, nav, p.Divergence, false},
		{"curl", o.Curl, nav, p.Curl, false},
		{"icom", o.ICoM, nav, p.ICoM, false},
	} {
		if f.path != "" {
			out = append(out, f)
		}
	}
	if o.PNGPrefix != "" {
		for _, f := range []comOutput{{"magnitude", "", nav, p.Magnitude, true}, {"divergence", "", nav, p.Divergence, true},
			{"curl", "", nav, p.Curl, true}, {"icom", "", nav, p.ICoM, true}} {
			f.path, f.option = o.PNGPrefix+"_"+f.option+".png", "png"
			out = append(out, f)
		}
	}
	return out
}

// Check reports, before any work, why the outputs cannot be written: as Outputs.Check
// (an NPY path not ending in .npy, a PNG prefix naming a directory, two outputs on one
// path, a path atomicfile.Check refuses, one of inputs), and no output at all
// (errs.Argument). Errors name the field (COMOutputs.ICoM, ...).
func (o COMOutputs) Check(inputs ...string) (err error) {
	defer goErrs(&err)
	if o == (COMOutputs{}) {
		return errs.New(errs.Argument, "no output: give option magnitude, option divergence, option curl, option icom, option field or option png")
	}
	if o.PNGPrefix != "" {
		if err := (Outputs{PNGPrefix: o.PNGPrefix}).Check(nil); err != nil {
			return err
		}
	}
	files := o.files(&COMProducts{NavShape: []int{0, 0}})
	for i, f := range files {
		for _, g := range files[:i] {
			if samePath(f.path, g.path) {
				return errs.New(errs.Argument, "option %s %s and option %s %s are the same file: give each output its own path", g.option, g.path, f.option, f.path)
			}
		}
		if !f.png && (!strings.EqualFold(pathExt(f.path), ".npy") || strings.EqualFold(filepath.Base(f.path), ".npy")) {
			return errs.New(errs.Argument, "option %s %s: products are written as NPY: give a path ending in .npy, after a file name", f.option, f.path)
		}
		if err := atomicfile.Check(f.path, inputs...); err != nil {
			return errs.Wrap(errs.IO, fmt.Errorf("option %s: %w", f.option, err))
		}
	}
	return nil
}

// SaveCOMProducts writes the outputs o of p all or nothing, as Save: every file under a
// temporary name, all renamed only when all were written; the files are as COMOutputs
// describes them (NPY, float64, of shape (nav_y, nav_x), the field (nav_y, nav_x, 2)).
// Errors: errs.Argument for a nil p, those of COMOutputs.Check (without inputs), and
// errs.IO for a file that cannot be written, after which none is left behind.
func SaveCOMProducts(p *COMProducts, o COMOutputs) (err error) {
	defer goErrs(&err)
	if p == nil {
		return errs.New(errs.Argument, "no CoM products to save (a nil *COMProducts)")
	}
	if err := o.Check(); err != nil {
		return err
	}
	var out outputBatch
	for _, f := range o.files(p) {
		if f.png {
			err = out.png(f.path, grey(f.shape, len(f.data), func(i int) float64 { return f.data[i] }))
		} else {
			err = out.npy(f.path, f.shape, f.data)
		}
		if err != nil {
			break
		}
	}
	return out.commit(err)
}
