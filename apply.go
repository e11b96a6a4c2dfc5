package stemdot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// ApplyOptions tune one Apply; the zero value computes float32 without progress reports.
type ApplyOptions struct {
	// Float64 computes and returns the result in float64 (frames and masks converted to
	// float64); by default the result is float32.
	Float64 bool
	// Progress, when set, is called with the frames done so far and the total, from the
	// workers' goroutines, one call at a time, never decreasing, reaching total on
	// success.
	Progress func(framesDone, total int)
	// Out32 (float32) or Out64 (Float64) is an optional caller-owned result buffer of
	// n_frames × n_masks values; it becomes Result.F32 or Result.F64.
	Out32 []float32
	Out64 []float64
	// ROICompact keeps the result of a dataset opened with an ROI (Options.ROI) compact:
	// NavShape (n_selected,), frame i the scan position Result.Positions[i]. By default
	// such a result has the whole scan's nav shape, NaN at the positions the ROI leaves
	// out (float32 and float64 alike), and Out32/Out64 hold the whole scan's values.
	ROICompact bool
	// Shifts moves the masks with the diffraction pattern (descan compensation): the
	// masks of frame f are applied moved by (dy, dx) pixels, out[f, m] = Σ_{y,x}
	// mask_m(y − dy, x − dx)·frame_f(y, x), mask pixels moved outside the frame dropped,
	// as LiberTEM's ApplyMasksUDF(shifts=...) (a positive dy moves the masks down, a
	// positive dx right); integer shifts exactly, sub-pixel ones by the bilinear
	// interpolation of the mask at (y − dy, x − dx) (engine's shift.go), where LiberTEM
	// truncates them to integers. Either 2 values, (dy, dx) for every frame, or 2 per
	// scan position, nav_shape + (2,) in C order (LoadShifts reads them from NPY;
	// descan.Plane.Eval computes them from a fit, see DescanFit): with Options.Frames, for
	// the whole scan, or 2 per frame of the range. Nil applies the masks unshifted.
	// Finite values only (errs.Argument); another length is errs.Shape.
	Shifts []float64
}

// Result is the outcome of Apply: one image of shape NavShape per mask, out[f, m] =
// Σ mask[m]·frame_f for every frame f (scan position, row-major over NavShape) and mask
// m; the run's Stats; the masks' Names; and the Warnings of the dataset, the plan and
// the frames read (RunNotes).
type Result struct {
	// NavShape is the dataset's nav shape (scan shape), e.g. (nav_y, nav_x), (n,) for a
	// 3-D input (n, sig_y, sig_x), or (nav_z, nav_y, nav_x) for a 5-D one.
	NavShape []int
	// NMasks is the number of masks.
	NMasks int
	// Positions, for a dataset opened with an ROI (Options.ROI, dataset.IsROI), are the
	// selected scan positions, flat indices in C order over ScanShape, ascending: a
	// compact result's frame i is scan position Positions[i] (ApplyOptions.ROICompact);
	// a whole one holds them at their places and NaN elsewhere. Nil without an ROI.
	Positions []int
	// ScanShape is the whole scan's nav shape of an ROI's result (nil without an ROI).
	ScanShape []int
	// F32 holds the images of a float32 run (the default; F64 is nil then): shape
	// NavShape + (NMasks,), C order, frame f and mask m at f*NMasks+m (see Value), in
	// the frames' units times the masks' weights.
	F32 []float32
	// F64 holds the images of a float64 run (ApplyOptions.Float64; F32 is nil then), as
	// F32 does.
	F64 []float64
	// Stats describe the run: frames and bytes read, time, each worker's share and
	// rate, retried partitions, NaN and infinite values (engine.Stats).
	Stats engine.Stats
	// Names are the masks' names, one per mask ("disk", "com_sum", ...).
	Names []string
	// RunNotes are what the reader counted in the frames of the run (dataset.RunNotes,
	// e.g. a DECTRIS detector's saturated pixels): those of the frames read, one per
	// key, summed over the processes that read them (ApplyElsewhere).
	RunNotes []dataset.RunNote
	// Warnings are OpenWarnings, the plan's warnings and those of RunNotes
	// (RunWarnings), one line each, and NonFiniteWarning's.
	Warnings []string
	// Info describes the result for its JSON sidecar (Save): columns, shapes, dtype,
	// dataset and workers. Apply fills it, naming the masks without their sources and
	// no open options: a front end that knows them adds them (ResultInfo.SetMasks,
	// ResultInfo.SetOptions).
	Info ResultInfo
}

// newResult is the Result of an engine run on ds, notes the run notes of its frames.
func newResult(ds dataset.Dataset, res *engine.Result, l roiLayout, names, warnings []string, notes []dataset.RunNote) *Result {
	l.place(res)
	r := &Result{NavShape: res.NavShape, NMasks: res.NMasks, Positions: l.pos, ScanShape: l.scan, F32: res.F32, F64: res.F64,
		Stats: res.Stats, Names: names, RunNotes: notes, Warnings: append(warnings, RunWarnings(ds, notes)...)}
	r.Info = newResultInfo(ds, r)
	if w := r.NonFiniteWarning(); w != "" {
		r.Warnings = append(r.Warnings, w)
	}
	return r
}

// NonFiniteWarning says, in one line, how many values of the result are NaN or infinite
// and why they can be; "" when there are none. Such values are written like the others.
func (r *Result) NonFiniteWarning() string {
	nf := r.Stats.NonFinite
	if nf.Count == 0 {
		return ""
	}
	name := ""
	if nf.Mask < len(r.Names) {
		name = fmt.Sprintf(" (%s)", r.Names[nf.Mask])
	}
	why := "the frames hold NaN or Inf under the masks' nonzero weights"
	if nf.Inf > 0 && r.F32 != nil {
		why += ", or sums exceed float32's range (a float64 result holds them)"
	}
	return fmt.Sprintf("%d result values are NaN or infinite, the first at frame %d, mask %d%s: %s", nf.Count, nf.Frame, nf.Mask, name, why)
}

// Value is the result of frame f (scan position, row-major over NavShape) and mask m,
// as float64. Like an index into a slice, f or m out of range (f < 0 or at least the
// frame count, m < 0 or at least NMasks) panics, naming both and the result's shape.
func (r *Result) Value(f, m int) float64 {
	if frames := (len(r.F32) + len(r.F64)) / max(r.NMasks, 1); f < 0 || f >= frames || m < 0 || m >= r.NMasks {
		panic(fmt.Sprintf("stemdot: Result.Value(%d, %d) outside the result's %d frames × %d masks", f, m, frames, r.NMasks))
	}
	if r.F64 != nil {
		return r.F64[f*r.NMasks+m]
	}
	return float64(r.F32[f*r.NMasks+m])
}

// Apply applies the mask stack to every frame of ds with the workers plan asks for on
// this machine: out[f, m] = Σ_{y,x} stack[m, y, x]·frame_f[y, x], as LiberTEM's
// ApplyMasksUDF. It is plan.Planner() followed by Planner.Apply.
func Apply(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, plan Plan, opt ApplyOptions) (result *Result, err error) {
	defer goErrs(&err)
	pl, err := plan.Planner()
	if err != nil {
		return nil, err
	}
	return pl.Apply(ctx, ds, stack, opt)
}

// planJob checks the job of stack over ds's frames with opt and plans it: the plan and
// each frame's shifts (nil without opt.Shifts).
func (pl *Planner) planJob(ds dataset.Dataset, stack *masks.Stack, opt ApplyOptions) (*planner.Plan, []float64, error) {
	if err := checkJob(ds, stack, opt); err != nil {
		return nil, nil, err
	}
	shifts, err := frameShifts(ds, opt.Shifts)
	if err != nil {
		return nil, nil, err
	}
	p, err := pl.Plan(ds, stack)
	return p, shifts, err
}

// Apply checks the job (the masks' sig_shape against the frames', the result buffer's
// length), plans it for ds and runs it (engine.ApplyMasks). Errors are classified:
// errs.Shape for a job whose sizes do not match, errs.Argument for a plan of a described
// machine (Plan.Cores, Plan.GPUInventory: plans only), errs.Resources for a plan that
// cannot be made, errs.IO for a read that failed during the run, errs.Cancelled when ctx
// is cancelled; a failure inside the engine is errs.Internal.
func (pl *Planner) Apply(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, opt ApplyOptions) (result *Result, err error) {
	defer goErrs(&err)
	if pl.machine.Described {
		return nil, errs.New(errs.Argument, "a plan for a described machine (option topology or option gpu_inventory) is for reading, not for running here: leave those options out to apply")
	}
	p, shifts, err := pl.planJob(ds, stack, opt)
	if err != nil {
		return nil, err
	}
	run := func(shifts []float64, out32 []float32, out64 []float64) (*engine.Result, []dataset.RunNote, error) {
		res, err := engine.ApplyMasks(ctx, ds, stack, p, engine.Options{Float64: opt.Float64, Progress: opt.Progress, Shifts: shifts, Out32: out32, Out64: out64})
		if err != nil {
			return nil, nil, err
		}
		return res, dataset.RunNotes(ds, 0, ds.NumFrames()), nil
	}
	return runJob(ds, stack, opt, shifts, append(OpenWarnings(ds), p.Warnings...), run)
}

// ApplyElsewhere is Planner.Apply for a job whose mask-dot products another process
// computes, e.g. the workers of a Dask cluster (python -m stemdot.dask): it checks the
// job as Apply does (ds need not be readable here: its ReadFrames is not called), calls
// run with the frames' shifts (nil without ApplyOptions.Shifts; else 2 per frame of ds,
// or the 2 of a constant shift) and the result buffer of ds's frames, frame f and mask m
// at f*stack.N+m (out32, or out64 with ApplyOptions.Float64; the other nil), for it to
// fill, and returns the Result as Apply would: placed at the scan positions of an ROI,
// NaN and infinite values counted here, Stats as run returns them (its Workers,
// CPUWorkers and GPUWorkers those that ran it), RunNotes those run returns (the run
// notes of the frames read, summed by key: dataset.SumRunNotes), Info describing them.
// The errors of run are returned as they are.
func ApplyElsewhere(ds dataset.Dataset, stack *masks.Stack, opt ApplyOptions, run func(shifts []float64, out32 []float32, out64 []float64) (engine.Stats, []dataset.RunNote, error)) (r *Result, err error) {
	defer goErrs(&err)
	if err := checkJob(ds, stack, opt); err != nil {
		return nil, err
	}
	shifts, err := frameShifts(ds, opt.Shifts)
	if err != nil {
		return nil, err
	}
	return runJob(ds, stack, opt, shifts, OpenWarnings(ds), func(shifts []float64, out32 []float32, out64 []float64) (*engine.Result, []dataset.RunNote, error) {
		if len(opt.Shifts) == 2 {
			shifts = opt.Shifts
		}
		switch n := ds.NumFrames() * stack.N; {
		case opt.Float64 && out64 == nil:
			out64 = make([]float64, n)
		case !opt.Float64 && out32 == nil:
			out32 = make([]float32, n)
		}
		stats, notes, err := run(shifts, out32, out64)
		if err != nil {
			return nil, nil, err
		}
		stats.NonFinite = engine.CountNonFinite(engine.Output{F32: out32, F64: out64}, stack.N)
		return &engine.Result{NavShape: slices.Clone(ds.NavShape()), NMasks: stack.N, F32: out32, F64: out64, Stats: stats}, notes, nil
	})
}

// runJob runs a checked job with run, given the frames' shifts and the result buffers
// (nil: run makes them), and returns its Result with warnings (and those of the run
// notes run returns, and the result's own).
func runJob(ds dataset.Dataset, stack *masks.Stack, opt ApplyOptions, shifts []float64, warnings []string,
	run func(shifts []float64, out32 []float32, out64 []float64) (*engine.Result, []dataset.RunNote, error)) (*Result, error) {
	l := roiOf(ds, opt)
	out32, out64 := l.buffers(opt, stack.N)
	res, notes, err := run(shifts, out32, out64)
	if err != nil {
		return nil, err
	}
	r := newResult(ds, res, l, stack.MaskNames(), warnings, notes)
	if shifts != nil {
		r.Info.Shifts = &ShiftsInfo{Mean: meanShift(shifts)}
		if len(opt.Shifts) == 2 {
			r.Info.Shifts.Constant = slices.Clone(opt.Shifts)
		}
	}
	return r, nil
}

// roiLayout is where the frames of a dataset opened with an ROI go in its result.
type roiLayout struct {
	scan, pos []int // nil without an ROI
	whole     bool  // the result has the scan's nav shape (not ApplyOptions.ROICompact)
}

func roiOf(ds dataset.Dataset, opt ApplyOptions) roiLayout {
	if !dataset.IsROI(ds) {
		return roiLayout{}
	}
	scan, pos := dataset.ScanPositions(ds)
	return roiLayout{scan: scan, pos: pos, whole: !opt.ROICompact}
}

// frames is the number of frames of the result.
func (l roiLayout) frames(ds dataset.Dataset) int {
	if l.whole {
		return product(l.scan)
	}
	return ds.NumFrames()
}

// buffers returns the result buffers for the frames computed: opt's, or, for a whole
// ROI result, the start of opt's (or of new ones) of the whole scan, which place fills.
func (l roiLayout) buffers(opt ApplyOptions, nMasks int) ([]float32, []float64) {
	out32, out64 := opt.Out32, opt.Out64
	if !l.whole {
		return out32, out64
	}
	full := product(l.scan) * nMasks
	if opt.Float64 {
		if out64 == nil {
			out64 = make([]float64, full)
		}
		return nil, out64[:len(l.pos)*nMasks]
	}
	if out32 == nil {
		out32 = make([]float32, full)
	}
	return out32[:len(l.pos)*nMasks], nil
}

// place moves the frames of res to their scan positions, NaN elsewhere, for a whole ROI
// result (the NaN and infinite values counted are the frames', named by scan position).
func (l roiLayout) place(res *engine.Result) {
	if !l.whole {
		return
	}
	full := product(l.scan) * res.NMasks
	res.NavShape = slices.Clone(l.scan)
	if res.F64 != nil {
		res.F64 = spread(res.F64[:full], l.pos, res.NMasks, math.NaN())
	} else {
		res.F32 = spread(res.F32[:full], l.pos, res.NMasks, float32(math.NaN()))
	}
	if nf := &res.Stats.NonFinite; nf.Count > 0 {
		nf.Frame = l.pos[nf.Frame]
	}
}

// spread moves the rows of n values of frames 0..len(pos)-1 at the start of buf to
// the rows pos[i], and fills the other rows with fill. pos ascends, so pos[i] >= i and
// moving the last row first overwrites no row still to be moved.
func spread[T float32 | float64](buf []T, pos []int, n int, fill T) []T {
	next := len(buf) / n // rows after the row being placed are done
	for i := len(pos) - 1; i >= 0; i-- {
		for r := pos[i] + 1; r < next; r++ {
			for m := range n {
				buf[r*n+m] = fill
			}
		}
		copy(buf[pos[i]*n:(pos[i]+1)*n], buf[i*n:(i+1)*n])
		next = pos[i]
	}
	for i := range next * n {
		buf[i] = fill
	}
	return buf
}

func product(s []int) int {
	p := 1
	for _, n := range s {
		p *= n
	}
	return p
}

// checkJob is the one validation of a job before planning: a dataset and a stack whose
// sig_shape matches the frames', and a result buffer, when given, of n_frames × n_masks.
// The stack's own consistency (sizes, finite weights) is checked again (masks.New checked
// it, but a Stack may be built by hand): errs.Shape for sizes, errs.Argument for weights.
func checkJob(ds dataset.Dataset, stack *masks.Stack, opt ApplyOptions) error {
	switch {
	case ds == nil:
		return errs.New(errs.Argument, "no dataset")
	case stack == nil || stack.N < 1:
		return errs.New(errs.Argument, "no masks")
	}
	sig := ds.SigShape()
	if stack.SigY != sig[0] || stack.SigX != sig[1] {
		return errs.New(errs.Shape, "masks of sig_shape (%d, %d) do not match the frames' sig_shape (%d, %d) of %s",
			stack.SigY, stack.SigX, sig[0], sig[1], describe(ds))
	}
	if err := stack.Validate(sig); err != nil {
		kind := errs.Shape
		if _, ok := errors.AsType[*masks.WeightError](err); ok {
			kind = errs.Argument
		}
		return errs.Wrap(kind, err)
	}
	// n_frames × n_masks values of 8 bytes must be addressable (a file of billions of tiny
	// frames and a deep stack could overflow the count).
	frames := roiOf(ds, opt).frames(ds)
	if frames > 0 && stack.N > math.MaxInt/8/frames {
		return errs.New(errs.Resources, "the result of %d frames × %d masks is too large to hold: use fewer masks or split the scan (option frames)", frames, stack.N)
	}
	want := frames * stack.N
	for _, b := range []struct {
		name string
		n    int
		set  bool
	}{{"float32", len(opt.Out32), opt.Out32 != nil}, {"float64", len(opt.Out64), opt.Out64 != nil}} {
		if b.set && b.n != want {
			return errs.New(errs.Shape, "the %s result buffer holds %d values, but %d frames × %d masks need %d", b.name, b.n, frames, stack.N, want)
		}
	}
	if opt.Out32 != nil && opt.Float64 || opt.Out64 != nil && !opt.Float64 {
		return errs.New(errs.DType, "the result buffer's dtype does not match ApplyOptions.Float64 (%v)", opt.Float64)
	}
	return nil
}

func describe(ds dataset.Dataset) string {
	if p := ds.Path(); p != "" {
		return p
	}
	return fmt.Sprintf("the %s dataset", ds.Format())
}
