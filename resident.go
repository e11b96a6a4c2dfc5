package stemdot

import (
	"context"
	"errors"
	"time"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// Resident is a dataset whose frames are held in GPU memory (ToDevice), for interactive
// work that applies mask stacks to the same scan again and again: each Apply reads the
// frames at device-memory speed and moves only the mask stack and the results across
// PCIe. Close frees the device memory; a Resident may be used from several goroutines
// (its Applies run one at a time).
type Resident struct {
	ds  dataset.Dataset
	dev *cuda.Resident
}

// ToDevice reads every frame of ds into the memory of GPU device (an index as in option
// gpus) once, in its native dtype: NumFrames × FrameBytes bytes. The dataset stays open
// and owned by the caller; the Resident does not read it again.
//
// Errors: errs.CUDA for a build without CUDA or a machine without a GPU; errs.Argument
// for a device index the machine does not have; errs.DType for frames of a dtype the GPU
// kernels do not take (uint8, uint16, uint32 and float32 are taken); errs.Resources, with
// the bytes needed and free, when the frames and cuda.ResidentReserve of working space do
// not fit in the device's free memory (nothing is allocated then); the dataset's read
// errors (errs.IO, ...); errs.Cancelled when ctx is cancelled during the load.
func ToDevice(ctx context.Context, ds dataset.Dataset, device int) (resident *Resident, err error) {
	defer goErrs(&err)
	if ds == nil {
		return nil, errs.New(errs.Argument, "no dataset")
	}
	if !cuda.Built() {
		return nil, errs.New(errs.CUDA, "a dataset on the GPU needs a CUDA build of stemdot, and this one was built without CUDA support: %s", cudaBuildHint)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, errs.Wrap(errs.CUDA, err)
	}
	switch {
	case n == 0:
		return nil, errs.New(errs.CUDA, "a dataset on the GPU needs a GPU, but none was found")
	case device < 0 || device >= n:
		return nil, errs.New(errs.Argument, "GPU device %d does not exist: this machine has %d (0 to %d)", device, n, n-1)
	}
	switch dt := ds.DType(); dt {
	case dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Float32:
	default:
		return nil, errs.New(errs.DType, "%s holds %s frames; the GPU takes uint8, uint16, uint32 or float32 frames", describe(ds), dt)
	}
	r, err := cuda.LoadResident(ctx, device, ds)
	if err != nil {
		var me *cuda.MemoryError
		var ce *cuda.Error
		if errors.As(err, &me) || errors.As(err, &ce) && ce.Code == 2 { // cudaErrorMemoryAllocation
			return nil, errs.Wrap(errs.Resources, err)
		}
		return nil, err
	}
	return &Resident{ds: ds, dev: r}, nil
}

// Device is the GPU the frames are on.
func (r *Resident) Device() int { return r.dev.Device() }

// Bytes is the GPU memory the frames take.
func (r *Resident) Bytes() int64 { return r.dev.Bytes() }

// Dataset is the dataset the frames were read from.
func (r *Resident) Dataset() dataset.Dataset { return r.ds }

// Apply applies the mask stack to every resident frame and returns the same Result as
// stemdot.Apply on the dataset (shape NavShape + (NMasks,), float32 or float64 as
// opt.Float64, in opt.Out32/Out64 when given), computed on the GPU, in CSR form when
// stack.PreferSparse(). Its RunNotes are those of the frames ToDevice read, the frames
// every Apply computes. Stats describe one GPU worker with feed "resident"; Progress, when
// set, is called once at the end. Errors are those of Planner.Apply's checks (errs.Shape,
// errs.DType, errs.Argument), errs.Argument for opt.Shifts (shifted masks are applied by
// Apply only), errs.Cancelled when ctx is already cancelled, errs.Argument after Close,
// and a CUDA failure (unclassified).
func (r *Resident) Apply(ctx context.Context, stack *masks.Stack, opt ApplyOptions) (result *Result, err error) {
	defer goErrs(&err)
	if err := checkJob(r.ds, stack, opt); err != nil {
		return nil, err
	}
	if opt.Shifts != nil {
		return nil, errs.New(errs.Argument, "option shifts: shifted masks are not applied to a dataset held on the GPU: apply them to the dataset (Apply)")
	}
	if err := ctx.Err(); err != nil {
		return nil, errs.Wrap(errs.Cancelled, err)
	}
	n := r.ds.NumFrames()
	l := roiOf(r.ds, opt)
	res := engine.Result{NavShape: r.ds.NavShape(), NMasks: stack.N}
	res.F32, res.F64 = l.buffers(opt, stack.N)
	switch {
	case opt.Float64 && res.F64 == nil:
		res.F64 = make([]float64, n*stack.N)
	case !opt.Float64 && res.F32 == nil:
		res.F32 = make([]float32, n*stack.N)
	}
	t0 := time.Now()
	if err := r.dev.Apply(stack, 0, n, res.F32, res.F64); err != nil {
		if errors.Is(err, cuda.ErrClosed) {
			return nil, errs.New(errs.Argument, "Apply on a closed resident dataset")
		}
		return nil, err
	}
	elapsed := time.Since(t0)
	bytes := int64(n) * int64(r.ds.FrameBytes())
	res.Stats = engine.Stats{
		Frames: n, BytesRead: bytes, Elapsed: elapsed, Workers: 1, GPUWorkers: 1,
		FramesPerWorker: []int{n},
		PerWorker: []engine.WorkerStats{{Kind: planner.GPU, CPU: -1, GPU: r.Device(), Ready: true, Feed: "resident",
			Frames: n, Bytes: bytes, Claims: 1, Busy: elapsed}},
		Sparse:    stack.PreferSparse(),
		NonFinite: engine.CountNonFinite(engine.Output{F32: res.F32, F64: res.F64}, stack.N),
	}
	if opt.Progress != nil {
		opt.Progress(n, n)
	}
	return newResult(r.ds, &res, l, stack.MaskNames(), OpenWarnings(r.ds), dataset.RunNotes(r.ds, 0, n)), nil
}

// Close frees the GPU memory of the frames; the dataset stays open. Closing twice is a
// no-op.
func (r *Resident) Close() error { return r.dev.Close() }
