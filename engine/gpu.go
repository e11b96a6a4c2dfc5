package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// stagingReaders is the number of goroutines that read one tile into the pinned staging
// buffer when frames cannot be DMA'd from the file's mapping: one copy thread moves
// about 6 GB/s, four about 20 GB/s (measured on an H200 host).
const stagingReaders = 4

// procsPerGPUWorker is the Go processors (GOMAXPROCS) a run adds per GPU worker: CPU
// workers keep their processors busy in long kernels, and a GPU worker's thread and its
// feed's registrar threads each need one between their CUDA calls; without spare ones
// they wait up to milliseconds for a CPU worker to yield, and the device idles.
const procsPerGPUWorker = 3

// procs tracks the processors that running runs with GPU workers added.
var procs struct {
	sync.Mutex
	base, extra int
}

// addProcs raises GOMAXPROCS by n for the caller's run; restore takes them back.
func addProcs(n int) (restore func()) {
	if n == 0 {
		return func() {}
	}
	procs.Lock()
	defer procs.Unlock()
	if procs.extra == 0 {
		procs.base = runtime.GOMAXPROCS(0)
	}
	procs.extra += n
	runtime.GOMAXPROCS(procs.base + procs.extra)
	return func() {
		procs.Lock()
		defer procs.Unlock()
		procs.extra -= n
		runtime.GOMAXPROCS(procs.base + procs.extra)
	}
}

// gpuWorker computes frame ranges on one CUDA device through a cuda.Runner. Its feed is
// copy-free where the dataset maps its frames (dataset.Mapper: raw and NPY files in host
// byte order, MIB files): the runner registers windows of the mapping with the driver
// and DMAs frames straight from the page cache, skipping MIB headers and swapping bytes
// on the device. Otherwise, or when the driver refuses the registration, frames are
// staged: read by several goroutines into pinned buffers, then copied. Runners on one
// device share the job's mask upload. In a build without CUDA, creating one fails with
// cuda.ErrNoCUDA.
type gpuWorker struct {
	job    *Job
	runner *cuda.Runner
	mapper dataset.Mapper // nil: staged feed
	feed   string
	exact  *masks.Stack // for exact rows of float frames holding NaN or Inf (see exactRow)
	frame  []byte
	row    []float64
	ex     *shiftExact // a shifted job's exact rows of float frames (shiftExact), or nil
}

// newGPUWorker waits for the device's CUDA context (started early by cuda.Prewarm, or
// now), giving up with cuda.ErrNotReady when the run no longer needs the worker, then
// creates the runner.
func newGPUWorker(spec planner.Worker, job *Job) (Worker, error) {
	if err := cuda.WaitReady(spec.GPU, job.Done()); err != nil {
		return nil, fmt.Errorf("GPU worker on device %d: %w", spec.GPU, err)
	}
	cfg := cuda.RunnerConfig{
		Device:  spec.GPU,
		DType:   job.Dataset.DType(),
		Pixels:  job.Masks.Pixels(),
		NMasks:  job.NMasks,
		Masks:   job.Masks.Data,
		Sparse:  job.Sparse,
		Float64: job.Float64,
	}
	if p := job.loPairs(); p != nil {
		// Weights given in float64: the float32 weights and their Lo parts as twice the
		// masks, results added in pairs (cuda.RunnerConfig.LoPairs).
		cfg.NMasks, cfg.Masks, cfg.Sparse, cfg.LoPairs = p.N, p.Data, p.Sparse, true
	}
	w := &gpuWorker{job: job, feed: "staged"}
	floats := job.Dataset.DType() == dataset.Float32 || job.Dataset.DType() == dataset.Float64
	if floats && job.Shifts == nil && job.Sparse == nil && job.Masks.Data != nil {
		w.exact = job.Masks
	}
	if job.Shifts != nil {
		// Shifted masks: the frames go to the device as unshifted ones do, and a kernel
		// builds each frame's g_f (shift.go) there, in float32, before the masks are
		// applied to it (cuda.RunnerConfig.Shifts).
		if job.Float64 {
			return nil, fmt.Errorf("GPU worker on device %d: shifted masks with float64 results run on CPU workers only", spec.GPU)
		}
		if err := ValidateShifts(job.Shifts, job.Dataset.NumFrames()); err != nil {
			return nil, fmt.Errorf("GPU worker on device %d: %w", spec.GPU, err)
		}
		if floats {
			w.ex = newShiftExact(job.Masks)
		}
		cfg.Shifts, cfg.SigX = job.Shifts, job.Dataset.SigShape()[1]
	}
	if w.exact != nil || w.ex != nil {
		w.frame, w.row = make([]byte, job.Dataset.FrameBytes()), make([]float64, job.NMasks)
	}
	if m, ok := job.Dataset.(dataset.Mapper); ok {
		fm, mapped, err := m.MapFrames(0, 1)
		if err != nil {
			return nil, fmt.Errorf("GPU worker on device %d: %w", spec.GPU, err)
		}
		if mapped {
			w.mapper, w.feed = m, "mapped"
			cfg.Streams = cuda.MappedStreams
			if !fm.Packed(int64(job.Dataset.FrameBytes())) {
				cfg.RecordStride = fm.Stride
			}
		}
	}
	r, err := cuda.NewRunner(cfg)
	if err != nil {
		return nil, fmt.Errorf("GPU worker on device %d: %w", spec.GPU, err)
	}
	w.runner = r
	return w, nil
}

// Feed is "mapped" or "staged" (see WorkerStats.Feed); after a refused registration,
// "staged" with the reason.
func (w *gpuWorker) Feed() string { return w.feed }

func (w *gpuWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	if err := w.compute(ctx, p, out); err != nil {
		return err
	}
	if err := w.exactNonFinite(p, out); err != nil {
		return err
	}
	progress(p.Frames())
	return nil
}

// compute runs frames p on the device, copy-free where it can.
func (w *gpuWorker) compute(ctx context.Context, p planner.Partition, out Output) error {
	if w.mapper != nil {
		fm, ok, err := w.mapper.MapFrames(p.Start, p.End)
		if err != nil {
			return err
		}
		if ok {
			err = w.runner.RunMapped(ctx, p.Start, p.End, fm, out.F32, out.F64)
			if err == nil {
				// The device read the pages pinned by the driver, which a file cut
				// meanwhile leaves stale: check the file again (dataset.Mapper).
				_, _, err = w.mapper.MapFrames(p.Start, p.End)
			}
			if !errors.Is(err, cuda.ErrRegister) {
				return err
			}
			w.mapper, w.feed = nil, fmt.Sprintf("staged (%v)", err)
		}
	}
	return w.runner.Run(ctx, p.Start, p.End, w.read, out.F32, out.F64)
}

// exactNonFinite recomputes on the host, over the nonzero weights only (exactRow), the
// rows of float frames whose device results came out NaN or infinite.
func (w *gpuWorker) exactNonFinite(p planner.Partition, out Output) error {
	if w.ex != nil {
		return w.exactShifted(p, out)
	}
	if w.exact == nil {
		return nil
	}
	nm := w.job.NMasks
	for f := p.Start; f < p.End; f++ {
		row := w.row
		if out.F64 != nil {
			row = out.F64[f*nm : (f+1)*nm]
		} else {
			for m := range row {
				row[m] = float64(out.F32[f*nm+m])
			}
		}
		if finite(row) {
			continue
		}
		if err := w.job.Dataset.ReadFrames(f, f+1, w.frame); err != nil {
			return err
		}
		exactRow(w.exact, w.job.Dataset.DType(), w.frame, row)
		if out.F32 != nil {
			for m, v := range row {
				out.F32[f*nm+m] = float32(v)
			}
		}
	}
	return nil
}

// exactShifted is exactNonFinite for a shifted job (shiftExact).
func (w *gpuWorker) exactShifted(p planner.Partition, out Output) error {
	nm := w.job.NMasks
	shifts := w.job.Shifts
	for f := p.Start; f < p.End; f++ {
		row := out.F32[f*nm : (f+1)*nm]
		if finite32(row) {
			continue
		}
		if err := w.job.Dataset.ReadFrames(f, f+1, w.frame); err != nil {
			return err
		}
		if w.job.Dataset.DType() == dataset.Float32 {
			exactShiftedRow(w.ex, asNative[float32](w.frame), shifts[2*f], shifts[2*f+1], w.row)
		} else {
			exactShiftedRow(w.ex, asNative[float64](w.frame), shifts[2*f], shifts[2*f+1], w.row)
		}
		for m, v := range w.row {
			row[m] = float32(v)
		}
	}
	return nil
}

// finite32 tells whether every value is finite.
func finite32(v []float32) bool {
	for _, x := range v {
		if nonFinite(float64(x)) {
			return false
		}
	}
	return true
}

// read fills dst with frames [start, end), split among stagingReaders goroutines.
func (w *gpuWorker) read(dst []byte, start, end int) error {
	ds := w.job.Dataset
	fb := ds.FrameBytes()
	n := end - start
	parts := max(1, min(stagingReaders, n))
	readPart := func(a, b int) error {
		return ds.ReadFrames(a, b, dst[(a-start)*fb:(b-start)*fb])
	}
	if parts == 1 {
		return readPart(start, end)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		a, b := start+i*n/parts, start+(i+1)*n/parts
		wg.Go(func() { errs[i] = readPart(a, b) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (w *gpuWorker) Close() error { return w.runner.Close() }
