package stemdot

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/planner"
)

// ReduceOptions select the frames Reduce computes over all frames of a dataset, in one
// pass: at least one of Sum, Mean, Max and Std; only those asked are computed. The
// frames are those of the file: scan positions without a frame (a sync offset's,
// dataset.Blanks) are left out, as LiberTEM's StdDevUDF leaves them out.
type ReduceOptions struct {
	// Sum is the sum frame Σ_f frame_f (LiberTEM's SumUDF).
	Sum bool
	// Mean is the sum frame divided by the number of frames.
	Mean bool
	// Max is the maximum frame, max_f frame_f per pixel.
	Max bool
	// Std is the standard-deviation frame, sqrt(Σ_f (frame_f − mean)²/n): the population
	// standard deviation (ddof 0), as LiberTEM's StdDevUDF and numpy's std.
	Std bool
	// Progress, when set, is called with the frames done so far and the total, as
	// ApplyOptions.Progress (the positions without a frame counted as done).
	Progress func(framesDone, total int)
}

// Reduction is the outcome of Reduce: the frames asked for, each of shape SigShape,
// float64, C order (row y, column x at y*SigShape[1]+x); nil where not asked. Integer
// frames are summed exactly; a NaN pixel in any frame makes that pixel NaN in every
// reduction, ±Inf gives ±Inf sums, means and maxima (NaN where both occur) and a NaN
// std, as numpy's sum, mean, max and std do. A dataset without a frame of the file (all
// its positions without one) reduces to a zero sum and a NaN mean, max and std, Frames
// 0, with a warning.
type Reduction struct {
	// SigShape is the frames' shape (sig_y, sig_x); Frames the number of frames reduced:
	// the dataset's frames but its positions without a frame (dataset.RealFrames).
	SigShape [2]int
	Frames   int
	// Sum, Mean, Max and Std are the frames asked for, in the frames' units.
	Sum, Mean, Max, Std []float64
	// Stats describe the run (frames and bytes read, time, each worker's share).
	Stats engine.Stats
	// Warnings are OpenWarnings and the plan's warnings, one line each.
	Warnings []string
}

// ReductionNames are the names of the reductions, in the order Reduction.Frame and the
// outputs list them.
var ReductionNames = []string{"sum", "mean", "max", "std"}

// Frame returns the reduction named name ("sum", "mean", "max" or "std"), nil when it
// was not asked.
func (r *Reduction) Frame(name string) []float64 {
	switch name {
	case "sum":
		return r.Sum
	case "mean":
		return r.Mean
	case "max":
		return r.Max
	case "std":
		return r.Std
	}
	return nil
}

// Reduce computes the sum, mean, maximum and standard-deviation frames of ds that opt
// asks for, in one pass over the frames on the CPU workers plan asks for on this
// machine (engine.Reduce). Reductions are bound by memory bandwidth: they run on CPU
// workers only; Plan.GPUs "auto" plans CPU workers, and GPU workers asked for by count
// or list are refused (errs.Argument, naming option gpus). It is plan.ReducePlanner()
// followed by Planner.Reduce.
func Reduce(ctx context.Context, ds dataset.Dataset, plan Plan, opt ReduceOptions) (res *Reduction, err error) {
	defer goErrs(&err)
	pl, err := plan.ReducePlanner()
	if err != nil {
		return nil, err
	}
	return pl.Reduce(ctx, ds, opt)
}

// ReducePlanner is Planner for a reduction: GPU workers asked for by count or list are
// refused first (errs.Argument, naming option gpus), before a build without CUDA or a
// machine without GPU would be.
func (p Plan) ReducePlanner() (pl *Planner, err error) {
	defer goErrs(&err)
	if err := checkReducePlan(p.GPUs); err != nil {
		return nil, err
	}
	return p.Planner()
}

// checkReducePlan refuses GPU workers asked for by count or list.
func checkReducePlan(gpus string) error {
	switch g := strings.TrimSpace(gpus); g {
	case "", "0", "auto":
		return nil
	default:
		return errs.New(errs.Argument, "option gpus %q: reductions (sum, mean, max, std) run on CPU workers only, being bound by memory bandwidth: leave option gpus out (or give auto)", g)
	}
}

// Reduce plans CPU workers for ds and runs the reduction (see the function Reduce).
// Errors are classified as Apply's: errs.Argument for nothing asked, GPU workers asked
// for or a described machine, errs.Resources for a plan that cannot be made or buffers
// that do not fit in memory, errs.IO for a failed read, errs.Cancelled when ctx is
// cancelled.
func (pl *Planner) Reduce(ctx context.Context, ds dataset.Dataset, opt ReduceOptions) (res *Reduction, err error) {
	defer goErrs(&err)
	switch {
	case pl.machine.Described:
		return nil, errs.New(errs.Argument, "a plan for a described machine (option topology or option gpu_inventory) is for reading, not for running here: leave those options out to reduce")
	case pl.req.GPUs > 0 || len(pl.req.GPUList) > 0:
		return nil, checkReducePlan("a count or list")
	}
	return pl.reduce(ctx, ds, opt)
}

// reduce is Reduce on the planner's CPU workers, whatever GPU workers it was asked for.
func (pl *Planner) reduce(ctx context.Context, ds dataset.Dataset, opt ReduceOptions) (*Reduction, error) {
	switch {
	case ds == nil:
		return nil, errs.New(errs.Argument, "no dataset")
	case !(opt.Sum || opt.Mean || opt.Max || opt.Std):
		return nil, errs.New(errs.Argument, "nothing to reduce: ask for at least one of ReduceOptions.Sum, Mean, Max and Std")
	}
	framed := dataset.RealFrames(ds)
	if framed == nil {
		return noFrames(ds, opt), nil
	}
	if skip := ds.NumFrames() - framed.NumFrames(); opt.Progress != nil && skip > 0 {
		progress := opt.Progress
		opt.Progress = func(done, _ int) { progress(skip+done, ds.NumFrames()) }
	}
	p, err := pl.cpuPlan(framed)
	if err != nil {
		return nil, err
	}
	r, err := engine.Reduce(ctx, framed, p, engine.ReduceOptions{Sum: opt.Sum, Mean: opt.Mean, Max: opt.Max, Std: opt.Std, Progress: opt.Progress})
	if err != nil {
		return nil, err
	}
	return &Reduction{SigShape: r.SigShape, Frames: r.Frames, Sum: r.Sum, Mean: r.Mean, Max: r.Max, Std: r.Std,
		Stats: r.Stats, Warnings: append(OpenWarnings(ds), p.Warnings...)}, nil
}

// noFrames is the reduction of ds, none of whose frames is one of the file: a zero
// sum, NaN elsewhere.
func noFrames(ds dataset.Dataset, opt ReduceOptions) *Reduction {
	sig := ds.SigShape()
	frame := func(asked bool, v float64) []float64 {
		if !asked {
			return nil
		}
		f := make([]float64, sig[0]*sig[1])
		for i := range f {
			f[i] = v
		}
		return f
	}
	return &Reduction{SigShape: sig, Sum: frame(opt.Sum, 0), Mean: frame(opt.Mean, math.NaN()), Max: frame(opt.Max, math.NaN()), Std: frame(opt.Std, math.NaN()),
		Warnings: append(OpenWarnings(ds), fmt.Sprintf("no frame to reduce: all %d frames of %s are scan positions without a frame in the file (option sync_offset): the mean, max and std are NaN", ds.NumFrames(), describe(ds)))}
}

// cpuPlan is the plan of CPU workers only for a reduction over ds ("auto" plans none).
func (pl *Planner) cpuPlan(ds dataset.Dataset) (*planner.Plan, error) {
	sig := ds.SigShape()
	shape := &planner.Shape{NumFrames: ds.NumFrames(), SigY: sig[0], SigX: sig[1], DTypeSize: ds.DType().Size()}
	p, err := planner.Make(pl.machine.Topology, nil, withoutGPUs(pl.req), shape)
	if err != nil {
		return nil, errs.Wrap(errs.Resources, err)
	}
	p.Warnings = goWarnings(p.Warnings)
	return p, nil
}

// reductionFiles lists the NPY outputs of o for a reduction: the sum (Outputs.NPY),
// mean, max and std files, by reduction name; "" where not given.
func reductionFiles(o Outputs) map[string]string {
	return map[string]string{"sum": o.NPY, "mean": o.Mean, "max": o.Max, "std": o.Std}
}

// ReduceOptionsFor returns the reductions the outputs o ask for: each NPY output given
// (Outputs.NPY is the sum frame; Mean, Max, Std), and the sum when only a PNG prefix is
// given.
func ReduceOptionsFor(o Outputs) ReduceOptions {
	opt := ReduceOptions{Sum: o.NPY != "", Mean: o.Mean != "", Max: o.Max != "", Std: o.Std != ""}
	if !(opt.Sum || opt.Mean || opt.Max || opt.Std) && o.PNGPrefix != "" {
		opt.Sum = true
	}
	return opt
}

// CheckReduction reports, before any work, why the outputs of a reduction cannot be
// written: no output at all, COMShifts given (errs.Argument), or a path that Check
// refuses for a result (errs.Argument, errs.IO). PNGs are PREFIX_<name>.png for each
// reduction ReduceOptionsFor(o) computes.
func (o Outputs) CheckReduction(inputs ...string) (err error) {
	defer goErrs(&err)
	if o.COMShifts != "" {
		return errs.New(errs.Argument, "option com_shifts is an output of mask applies, not of reductions: leave it out")
	}
	opt := ReduceOptionsFor(o)
	if !(opt.Sum || opt.Mean || opt.Max || opt.Std) {
		return errs.New(errs.Argument, "no output: give option out (the sum frame), option mean, option max, option std or option png")
	}
	if err := o.checkPNGPrefix(); err != nil {
		return err
	}
	return checkFiles(o.reductionOutputs([]bool{opt.Sum, opt.Mean, opt.Max, opt.Std}), inputs)
}

// reductionKeys are the options of the reductions' NPY files, in ReductionNames' order.
var reductionKeys = []string{"out", "mean", "max", "std"}

// reductionOutputs lists the files a reduction writes, PNGs first (PREFIX_<name>.png for
// the reductions png says, in ReductionNames' order), then the NPYs.
func (o Outputs) reductionOutputs(png []bool) []output {
	var out []output
	if o.PNGPrefix != "" {
		for i, name := range ReductionNames {
			if png[i] {
				out = append(out, output{"png", o.PNGPrefix + "_" + name + ".png", false})
			}
		}
	}
	files := reductionFiles(o)
	for i, name := range ReductionNames {
		if files[name] != "" {
			out = append(out, output{reductionKeys[i], files[name], true})
		}
	}
	return out
}

// SaveReduction writes the frames of red that o names, all or nothing (as Save): NPY of
// shape (sig_y, sig_x), float64: the sum to o.NPY, the mean, maximum and std to o.Mean,
// o.Max and o.Std; with o.PNGPrefix, one 8-bit greyscale PNG per frame red holds,
// PREFIX_sum.png, PREFIX_mean.png, PREFIX_max.png, PREFIX_std.png, from its finite
// minimum (black) to its maximum (white), scaled up as Outputs.PNGPrefix says. An NPY
// output for a frame red does not hold is errs.Argument; other errors as
// CheckReduction's.
func SaveReduction(red *Reduction, o Outputs) (err error) {
	defer goErrs(&err)
	if red == nil {
		return errs.New(errs.Argument, "no reduction to save (a nil *Reduction)")
	}
	if err := o.CheckReduction(); err != nil {
		return err
	}
	held := make([]bool, len(ReductionNames))
	for i, name := range ReductionNames {
		held[i] = red.Frame(name) != nil
		if f := reductionFiles(o)[name]; f != "" && !held[i] {
			return errs.New(errs.Argument, "option %s %s: the reduction holds no %s frame: ask for it (ReduceOptions)", reductionKeys[i], f, name)
		}
	}
	shape := []int{red.SigShape[0], red.SigShape[1]}
	var out outputBatch
	for _, f := range o.reductionOutputs(held) {
		if f.npy {
			err = out.npy(f.path, shape, red.Frame(ReductionNames[slices.Index(reductionKeys, f.option)]))
		} else {
			frame := red.Frame(strings.TrimSuffix(strings.TrimPrefix(f.path, o.PNGPrefix+"_"), ".png"))
			err = out.png(f.path, grey(shape, len(frame), func(i int) float64 { return frame[i] }))
		}
		if err != nil {
			break
		}
	}
	return out.commit(err)
}

// Frames are frames picked at scan positions (Pick): K frames in the dataset's native
// dtype, host byte order, shape (K, sig_y, sig_x), C order.
type Frames struct {
	// Indices are the frames' indices (scan positions, row-major over the nav shape), in
	// the order asked.
	Indices []int
	// SigShape is the frames' shape; DType their pixel type.
	SigShape [2]int
	DType    dataset.DType
	// Data holds the K frames, len(Indices) × sig_y × sig_x pixels of DType.
	Data []byte
}

// Pick reads the frames of ds at the scan positions at, as LiberTEM's PickUDF: each
// position as (y, x) for a 2-D nav shape, (n) for a 1-D one (a 3-D input), (z, y, x) for
// a 3-D one (a 5-D input), as many coordinates as the nav shape has axes, each from 0 to
// its size − 1. Errors:
// errs.Shape naming the position and option at for a position outside the nav shape
// or with the wrong number of coordinates, errs.Argument for no position; read errors
// as the dataset gives them (errs.IO); errs.Cancelled when ctx is cancelled between
// frames.
func Pick(ctx context.Context, ds dataset.Dataset, at [][]int) (fr *Frames, err error) {
	defer goErrs(&err)
	if ds == nil {
		return nil, errs.New(errs.Argument, "no dataset")
	}
	if len(at) == 0 {
		return nil, errs.New(errs.Argument, "no scan position to pick: give option at")
	}
	idx, err := frameIndices(ds.NavShape(), at)
	if err != nil {
		return nil, err
	}
	fb := ds.FrameBytes()
	if err := memlimit.Check(fmt.Sprintf("the %d picked frames", len(idx)), int64(len(idx))*int64(fb), "pick fewer frames"); err != nil {
		return nil, err
	}
	fr = &Frames{Indices: idx, SigShape: ds.SigShape(), DType: ds.DType(), Data: make([]byte, len(idx)*fb)}
	for k, f := range idx {
		if err := ctx.Err(); err != nil {
			return nil, errs.Wrap(errs.Cancelled, fmt.Errorf("pick: stopped after %d of %d frames: %w", k, len(idx), err))
		}
		if err := ds.ReadFrames(f, f+1, fr.Data[k*fb:(k+1)*fb]); err != nil {
			return nil, err
		}
	}
	return fr, nil
}

// frameIndices turns scan positions into frame indices, row-major over nav (see Pick
// for the positions' form and errors).
func frameIndices(nav []int, at [][]int) ([]int, error) {
	idx := make([]int, len(at))
	for k, pos := range at {
		if len(pos) != len(nav) {
			return nil, errs.New(errs.Shape, "option at: scan position %s has %d coordinate%s, but the nav shape %s has %d ax%s: give %s", posString(pos), len(pos), map[bool]string{true: "s"}[len(pos) != 1], npy.ShapeString(nav), len(nav), map[bool]string{true: "es", false: "is"}[len(nav) != 1], navForm(len(nav)))
		}
		f := 0
		for a, c := range pos {
			if c < 0 || c >= nav[a] {
				return nil, errs.New(errs.Shape, "option at: scan position %s is outside the nav shape %s: each coordinate runs from 0 to its size − 1", posString(pos), npy.ShapeString(nav))
			}
			f = f*nav[a] + c
		}
		idx[k] = f
	}
	return idx, nil
}

// navForm is how a position of n nav axes is written as an option: "N", "Y,X" or
// "Z,Y,X".
func navForm(n int) string {
	if n >= 1 && n <= 3 {
		return []string{"N", "Y,X", "Z,Y,X"}[n-1]
	}
	return fmt.Sprintf("%d coordinates", n)
}

func posString(pos []int) string {
	s := make([]string, len(pos))
	for i, c := range pos {
		s[i] = fmt.Sprint(c)
	}
	return "(" + strings.Join(s, ", ") + ")"
}

// SaveFrames writes picked frames as NPY of shape (K, sig_y, sig_x) in their native
// dtype (host byte order) at path (ending in .npy), and with pngPrefix ("" for none)
// one greyscale PNG per frame, PREFIX_<k>_y<Y>_x<X>.png (PREFIX_<k>_n<N>.png for a 1-D
// nav shape, PREFIX_<k>_z<Z>_y<Y>_x<X>.png for a 3-D one), all or nothing (as Save).
// Errors as Outputs.Check's, naming option out and option png.
func SaveFrames(fr *Frames, nav []int, path, pngPrefix string, inputs ...string) (err error) {
	defer goErrs(&err)
	if fr == nil {
		return errs.New(errs.Argument, "no frames to save (a nil *Frames)")
	}
	files := frameFiles(fr.Indices, nav, path, pngPrefix)
	if err := (Outputs{PNGPrefix: pngPrefix}).checkPNGPrefix(); err != nil {
		return err
	}
	if err := checkFiles(files, inputs); err != nil {
		return err
	}
	px := fr.SigShape[0] * fr.SigShape[1]
	fb := px * fr.DType.Size()
	var out outputBatch
	for i, f := range files {
		if f.npy {
			err = out.file(f.path, func(w io.Writer) error {
				h, err := npy.Header(npyDescr(fr.DType), []int{len(fr.Indices), fr.SigShape[0], fr.SigShape[1]})
				if err == nil {
					_, err = w.Write(h)
				}
				if err == nil {
					_, err = w.Write(fr.Data)
				}
				return err
			})
		} else {
			frame := fr.Data[i*fb : (i+1)*fb]
			err = out.png(f.path, grey(fr.SigShape[:], px, func(p int) float64 { return pixelValue(frame, fr.DType, p) }))
		}
		if err != nil {
			break
		}
	}
	return out.commit(err)
}

// frameFiles lists SaveFrames' outputs: the PNGs in the frames' order, then the NPY.
func frameFiles(indices, nav []int, path, pngPrefix string) []output {
	var out []output
	if pngPrefix != "" {
		for k, f := range indices {
			pos := fmt.Sprintf("n%d", f)
			if len(nav) == 2 || len(nav) == 3 { // y<Y>_x<X>, z<Z>_y<Y>_x<X>
				c := make([]string, len(nav))
				for a, rest := len(nav)-1, f; a >= 0; a-- {
					c[a], rest = fmt.Sprintf("%c%d", "zyx"[3-len(nav)+a], rest%nav[a]), rest/nav[a]
				}
				pos = strings.Join(c, "_")
			}
			out = append(out, output{"png", fmt.Sprintf("%s_%d_%s.png", pngPrefix, k, pos), false})
		}
	}
	if path != "" {
		out = append(out, output{"out", path, true})
	}
	return out
}

// npyDescr is the NPY descr of dt in host byte order ("<u2", "|u1", "<f4").
func npyDescr(dt dataset.DType) string {
	kind := byte('u')
	switch dt {
	case dataset.Int8, dataset.Int16, dataset.Int32:
		kind = 'i'
	case dataset.Float32, dataset.Float64:
		kind = 'f'
	}
	return npy.Descr{Kind: kind, Size: dt.Size(), BigEndian: npy.HostBigEndian}.String()
}

// Pixels is frame k of fr (0 ≤ k < len(fr.Indices)) as float64, sig_y × sig_x values,
// row-major: exact for every DType.
func (fr *Frames) Pixels(k int) []float64 {
	n := fr.SigShape[0] * fr.SigShape[1]
	frame := fr.Data[k*n*fr.DType.Size() : (k+1)*n*fr.DType.Size()]
	out := make([]float64, n)
	for i := range out {
		out[i] = pixelValue(frame, fr.DType, i)
	}
	return out
}

// pixelValue is pixel i of a frame of dt (host byte order) as float64.
func pixelValue(frame []byte, dt dataset.DType, i int) float64 {
	e := binary.NativeEndian
	switch b := frame[i*dt.Size():]; dt {
	case dataset.Uint8:
		return float64(b[0])
	case dataset.Int8:
		return float64(int8(b[0]))
	case dataset.Uint16:
		return float64(e.Uint16(b))
	case dataset.Int16:
		return float64(int16(e.Uint16(b)))
	case dataset.Uint32:
		return float64(e.Uint32(b))
	case dataset.Int32:
		return float64(int32(e.Uint32(b)))
	case dataset.Float32:
		return float64(math.Float32frombits(e.Uint32(b)))
	default:
		return math.Float64frombits(e.Uint64(b))
	}
}
