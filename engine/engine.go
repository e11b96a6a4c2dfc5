// Package engine runs the mask-dot product over a 4D-STEM dataset: for every frame f
// and every mask m of a stack, out[f, m] = Σ_{y,x} mask[m, y, x]·frame_f[y, x], as
// LiberTEM's ApplyMasksUDF computes it.
//
// ApplyMasks executes a planner.Plan: one goroutine per planned worker, pinned to the
// worker's CPU, pulls partitions (contiguous frame ranges) from a shared queue, so that
// faster workers take more of them. A worker reads each partition tile by tile (a few
// frames at a time) into its own reusable buffers and writes its result rows straight
// into the preallocated result, indexed by frame: there is no reordering pass and no
// per-partition result buffer. Memory is therefore bounded by workers × tile buffers plus
// the result, never the whole dataset.
//
// A sparse dataset's frames (dataset.SparseOf: raw_csr, stempy's counted data) are read
// by the CPU workers as events and multiplied by a gather over them (gather.go), at a
// cost proportional to the events, not the pixels.
//
// The result has shape nav_shape + (n_masks,), C order, float32 by default or float64
// with Options.Float64.
//
// Reduce runs the same executor for the reductions over frames (the sum, mean, maximum
// and standard-deviation frames) on CPU workers, each accumulating into its own buffers,
// merged at the end.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// Options tune one ApplyMasks run. The zero value is a float32 run with automatic tile
// size, CPU workers, pinned threads and no progress reports.
type Options struct {
	// Float64 makes the result float64 and the whole product float64 (the frames and the
	// masks are converted to float64). By default the result is float32.
	Float64 bool
	// TileFrames is the number of frames a worker reads and processes at once (its
	// buffers hold at most the dataset's frames); 0 picks it from the frame size (see
	// AutoTileFrames), with larger tiles for dense masks (4 MiB and at least 32 frames for
	// 1 to 7 masks while they fit in 8 MiB, 8 MiB for more). Which kernels apply depends
	// on it (e.g. the pair kernels need 2 or more), and so may the last bit of a float32
	// result.
	TileFrames int
	// MaxTileFrames, when positive, bounds the tile that TileFrames 0 picks: a live run's
	// frames show in its snapshots a whole tile at a time, and a tile of 4 MiB of small
	// frames is hundreds of them.
	MaxTileFrames int
	// Progress, when set, is called with the number of frames done so far and the total.
	// It is called from the workers' goroutines, one call at a time; framesDone never
	// decreases, never exceeds total, and reaches total when the run succeeds.
	Progress func(framesDone, total int)
	// Out32 is an optional caller-owned result buffer for a float32 run, of length
	// n_frames*n_masks. It becomes Result.F32.
	Out32 []float32
	// Out64 is the same for a float64 run.
	Out64 []float64
	// NewWorker creates the workers; nil means DefaultWorkers.
	NewWorker WorkerFactory
	// NoPin leaves the worker threads unpinned (tests).
	NoPin bool
	// Shifts, when set, moves the masks of each frame (descan compensation, see
	// shift.go): (dy, dx) in pixels of frame f at Shifts[2f] and Shifts[2f+1], for every
	// frame of the dataset (2·NumFrames values, finite). Nil applies the masks unshifted.
	Shifts []float64
	// Done, when set, is called with each range of frames [start, end) whose result rows
	// are written (a CPU worker's tile, a GPU worker's claim), one call at a time and
	// after the rows are in the result buffer: a caller that reads the rows of the ranges
	// it was given, under the lock it holds in Done, reads them complete while the run
	// goes on (the snapshots of a live run). Every frame is in exactly one range when
	// the run succeeds.
	Done func(start, end int)
}

// Job is what every worker of one run computes: the dataset, the masks (dense, and in
// CSR form when the stack is sparse enough) and the numeric options.
type Job struct {
	// Dataset is the source of the frames.
	Dataset dataset.Dataset
	// Masks is the stack, shape (NMasks, sig_y, sig_x), float32 (with Lo parts for
	// weights given in float64, which Float64 runs use: masks.Stack.Lo): dense, or held in
	// CSR form only (Masks.Data nil; then Sparse must be set).
	Masks *masks.Stack
	// Sparse is the stack in CSR form, or nil to apply it dense.
	Sparse *masks.CSR
	// Float64 makes the product and result float64.
	Float64 bool
	// TileFrames is the number of frames per tile (at least 1).
	TileFrames int
	// NMasks is the number of masks (Masks.N), the length of one result row.
	NMasks int
	// Shifts are the per-frame mask shifts of Options.Shifts (2·NumFrames values), or
	// nil.
	Shifts []float64

	masks64Once sync.Once
	masks64     []float64
	over        <-chan struct{}
	packedOnce  sync.Once
	packed      []float32
	// the stack packed for the float64 broadcast kernels (packBcast64)
	packed64Once sync.Once
	packed64     []float64
	pairsOnce    sync.Once
	pairs        *masks.Stack
	// the pixel-major masks of the gather kernel (gather.go), float32 or float64
	gather32Once sync.Once
	gather32     *gatherMasks[float32]
	gather64Once sync.Once
	gather64     *gatherMasks[float64]
	// the stack's counts (masks.Stack.Count), taken once per run
	countsOnce sync.Once
	counts     masks.Counts

	// the dense stack and its box of the fused shifted-mask kernels (shiftDot)
	dotOnce sync.Once
	dot     *dotStack
}

// maskCounts returns the counts of the job's stack (masks.Stack.Count), scanned once per
// job: ApplyMasks sets them from its own scan.
func (j *Job) maskCounts() masks.Counts {
	j.countsOnce.Do(func() { j.counts = j.Masks.Count() })
	return j.counts
}

// loPairs returns, for a Float64 job whose weights have Lo parts, the stack its GPU
// workers run instead (masks.Stack.LoPairs, in the form the job applies: dense, or CSR
// in pairs.Sparse), shared by all of them; nil when the float32 weights are exact or the
// job is float32.
func (j *Job) loPairs() *masks.Stack {
	j.pairsOnce.Do(func() {
		switch {
		case !j.Float64:
		case j.Sparse != nil && j.Sparse.Lo != nil:
			j.pairs = &masks.Stack{N: 2 * j.NMasks, SigY: j.Masks.SigY, SigX: j.Masks.SigX, Sparse: j.Sparse.LoPairs()}
		case j.Sparse == nil && j.Masks.Lo != nil:
			j.pairs = j.Masks.LoPairs()
		}
	})
	return j.pairs
}

// packedMasks returns the masks laid out by pack (packMasks, packBcast or padStack: the
// same for every worker of a job, whose workers share one dtype), shared by all workers
// of the job.
func (j *Job) packedMasks(pack packer) []float32 {
	j.packedOnce.Do(func() { j.packed = pack(j.Masks.Data, j.NMasks, j.Masks.Pixels()) })
	return j.packed
}

// packedMasks64 returns the stack packed by packBcast64 for the float64 kernels k (the
// same for every worker of a job), shared by all workers of the job.
func (j *Job) packedMasks64(k *bcast64Kernels) []float64 {
	j.packed64Once.Do(func() { j.packed64 = packBcast64(j.Masks, simdBlock64, k.chunk(), k.lanes) })
	return j.packed64
}

// Done is closed when the run no longer needs new workers: every frame is computed, or
// the run failed or was cancelled. A WorkerFactory that waits for a device (a GPU
// worker waiting for its CUDA context) gives up then. Nil (never closed) for a Job not
// made by ApplyMasks.
func (j *Job) Done() <-chan struct{} { return j.over }

// denseMasks64 returns the masks in float64 with their Lo parts (masks.Stack.Dense64),
// shared by all workers of the job.
func (j *Job) denseMasks64() []float64 {
	j.masks64Once.Do(func() { j.masks64 = j.Masks.Dense64() })
	return j.masks64
}

// Output is the whole result of a run, frame-major: row f, of NMasks values, belongs to
// frame f. Exactly one of F32 and F64 is set.
type Output struct {
	F32 []float32
	F64 []float64
}

// Worker computes the mask-dot product for the partitions it is given.
type Worker interface {
	// Process computes frames [p.Start, p.End) and writes their rows into out. It runs on
	// the worker's own (pinned) goroutine/thread; it must return promptly (between tiles)
	// with ctx.Err() when ctx is cancelled. After each tile it calls progress with the
	// number of frames just completed.
	Process(ctx context.Context, p planner.Partition, out Output, progress func(frames int)) error
	// Close releases the worker's resources.
	Close() error
}

// WorkerFactory creates the worker for one planned worker. It is called on the worker's
// pinned goroutine, so that the worker's buffers are first touched there (NUMA-local).
type WorkerFactory func(spec planner.Worker, job *Job) (Worker, error)

// DefaultWorkers is the default WorkerFactory: a CPU worker for planner.CPU, a GPU
// worker (cuda.Runner) for planner.GPU; in a build without CUDA the latter fails with
// cuda.ErrNoCUDA.
func DefaultWorkers(spec planner.Worker, job *Job) (Worker, error) {
	switch spec.Kind {
	case planner.CPU:
		return NewCPUWorker(job)
	case planner.GPU:
		return newGPUWorker(spec, job)
	}
	return nil, fmt.Errorf("unknown worker kind %q", spec.Kind)
}

// Result is the outcome of ApplyMasks.
type Result struct {
	// NavShape is the dataset's navigation shape.
	NavShape []int
	// NMasks is the number of masks.
	NMasks int
	// F32 (float32 run) or F64 (Options.Float64) holds the result, shape
	// NavShape + (NMasks,), C order: frame f, mask m is at f*NMasks+m.
	F32 []float32
	F64 []float64
	// Stats describe the run.
	Stats Stats
}

// ApplyMasks computes, for every frame of ds and every mask of stack, the dot product of
// the frame with the mask, running the workers and partitions of plan.
//
// The stack's signal shape must equal ds.SigShape(); plan must have at least one worker
// and partitions covering the frames [0, ds.NumFrames()) in order, without gap or
// overlap. The stack is applied in CSR form when stack.PreferSparse(). The CPU workers
// of a run over a sparse dataset (dataset.SparseOf) without shifts read its frames as
// events and apply the masks as a gather over them (gather.go; Stats.Gather).
//
// Errors: invalid input, and a run whose memory (EstimateMemory) does not fit in what the
// process may still allocate (the machine's available memory, the cgroup limit, the
// address-space limit), are reported before any work starts. The first worker error
// cancels the run and is returned as "worker W (cpu C): partition [S, E): ...". A GPU
// worker's failure is not fatal: one that cannot be created is listed in
// Stats.NotStarted, and a partition it fails is re-run by the remaining workers and
// listed in Stats.Retried; the run fails only when no worker is left. When ctx is
// cancelled, the workers stop between tiles and the error satisfies
// errors.Is(err, context.Canceled) (or context.DeadlineExceeded). No goroutine started by
// ApplyMasks outlives it.
func ApplyMasks(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, plan *planner.Plan, opt Options) (*Result, error) {
	if ds == nil {
		return nil, errors.New("apply masks: no dataset")
	}
	if err := validateStack(stack, ds.SigShape()); err != nil {
		return nil, fmt.Errorf("apply masks to %s: %w", describe(ds), err)
	}
	if err := validateDataset(ds); err != nil {
		return nil, fmt.Errorf("apply masks: %w", err)
	}
	if err := validatePlan(plan, ds.NumFrames()); err != nil {
		return nil, fmt.Errorf("apply masks to %s: %w", describe(ds), err)
	}
	if opt.Shifts != nil {
		if err := ValidateShifts(opt.Shifts, ds.NumFrames()); err != nil {
			return nil, fmt.Errorf("apply masks to %s: %w", describe(ds), err)
		}
	}
	counts := stack.Count() // the one scan of the weights' counts in this run
	if err := checkMemory(ds, stack, counts, plan, opt); err != nil {
		return nil, fmt.Errorf("apply masks to %s: %w", describe(ds), err)
	}
	nMasks := stack.N
	out, err := resultBuffer(opt, ds.NumFrames()*nMasks)
	if err != nil {
		return nil, fmt.Errorf("apply masks: %w", err)
	}
	tile := opt.TileFrames
	if tile < 0 {
		return nil, fmt.Errorf("apply masks: TileFrames %d is negative", tile)
	}
	sparse := counts.PreferSparse
	if tile == 0 {
		tile = jobTileFrames(ds.FrameBytes(), nMasks, sparse)
		if opt.MaxTileFrames > 0 {
			tile = min(tile, opt.MaxTileFrames)
		}
	}
	job := &Job{Dataset: ds, Masks: stack, Float64: opt.Float64, TileFrames: tile, NMasks: nMasks, Shifts: opt.Shifts}
	job.countsOnce.Do(func() { job.counts = counts })
	if sparse {
		job.Sparse = stack.ToCSR()
	}
	newWorker := opt.NewWorker
	if newWorker == nil {
		newWorker = DefaultWorkers
	}

	defer addProcs(gpuWorkers(plan) * procsPerGPUWorker)()
	r := newRun(ctx, "apply masks", plan, ds, tile, out, opt.Progress)
	r.doneRange = opt.Done
	job.over = r.sched.over
	r.execute(func(spec planner.Worker) (Worker, error) { return newWorker(spec, job) }, !opt.NoPin)
	if err := r.err(ctx); err != nil {
		return nil, err
	}
	res := &Result{NavShape: slices.Clone(ds.NavShape()), NMasks: nMasks, F32: out.F32, F64: out.F64, Stats: r.stats(ds)}
	res.Stats.Sparse = job.Sparse != nil
	res.Stats.Gather = opt.Shifts == nil && res.Stats.CPUWorkers > 0 && dataset.SparseOf(ds) != nil
	res.Stats.NonFinite = CountNonFinite(out, nMasks)
	return res, nil
}

// gpuWorkers counts the plan's GPU workers.
func gpuWorkers(plan *planner.Plan) int {
	n := 0
	for _, w := range plan.Workers {
		if w.Kind == planner.GPU {
			n++
		}
	}
	return n
}

// stats are the Stats of a finished run over the frames of ds.
func (r *run) stats(ds dataset.Dataset) Stats {
	nFrames := ds.NumFrames()
	st := Stats{
		Frames:          nFrames,
		BytesRead:       int64(nFrames) * int64(ds.FrameBytes()),
		Elapsed:         time.Since(r.start),
		Workers:         len(r.plan.Workers),
		FramesPerWorker: make([]int, len(r.plan.Workers)),
		PerWorker:       r.workers,
		Retried:         r.retried,
		NotStarted:      r.notStarted,
	}
	for i := range r.workers {
		r.workers[i].Bytes = int64(r.workers[i].Frames) * int64(ds.FrameBytes())
		st.FramesPerWorker[i] = r.workers[i].Frames
	}
	st.GPUWorkers = gpuWorkers(r.plan)
	st.CPUWorkers = st.Workers - st.GPUWorkers
	return st
}

// CountNonFinite counts the NaN and infinite values of a result of nMasks values per
// frame and finds the first.
func CountNonFinite(out Output, nMasks int) NonFinite {
	var nf NonFinite
	note := func(i int, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if nf.Count == 0 {
				nf.Frame, nf.Mask = i/nMasks, i%nMasks
			}
			nf.Count++
			if math.IsInf(v, 0) {
				nf.Inf++
			}
		}
	}
	for i, v := range out.F32 {
		note(i, float64(v))
	}
	for i, v := range out.F64 {
		note(i, v)
	}
	return nf
}

func describe(ds dataset.Dataset) string {
	if p := ds.Path(); p != "" {
		return fmt.Sprintf("%s dataset %s", ds.Format(), p)
	}
	return ds.Format() + " dataset"
}

func validateStack(stack *masks.Stack, sig [2]int) error {
	if stack == nil {
		return errors.New("no mask stack")
	}
	if stack.N < 1 {
		return fmt.Errorf("mask stack has %d masks, need at least 1", stack.N)
	}
	if stack.SigY != sig[0] || stack.SigX != sig[1] {
		return fmt.Errorf("mask sig shape (%d, %d) does not match the dataset sig shape (%d, %d)", stack.SigY, stack.SigX, sig[0], sig[1])
	}
	if stack.Data == nil && stack.Sparse != nil {
		return stack.Sparse.Validate(stack.N, stack.Pixels())
	}
	if want := stack.N * stack.Pixels(); len(stack.Data) != want {
		return fmt.Errorf("mask stack of shape (%d, %d, %d) holds %d weights, want %d", stack.N, stack.SigY, stack.SigX, len(stack.Data), want)
	}
	return nil
}

func validateDataset(ds dataset.Dataset) error {
	sig := ds.SigShape()
	size := ds.DType().Size()
	if size == 0 {
		return fmt.Errorf("%s has invalid dtype %v", describe(ds), ds.DType())
	}
	if ds.NumFrames() < 1 {
		return fmt.Errorf("%s has no frames", describe(ds))
	}
	if want := sig[0] * sig[1] * size; ds.FrameBytes() != want {
		return fmt.Errorf("%s reports %d bytes per frame, but sig shape (%d, %d) of %v needs %d", describe(ds), ds.FrameBytes(), sig[0], sig[1], ds.DType(), want)
	}
	return nil
}

func validatePlan(plan *planner.Plan, nFrames int) error {
	if plan == nil || len(plan.Workers) == 0 {
		return errors.New("plan has no workers")
	}
	for i, w := range plan.Workers {
		if w.ID != i {
			return fmt.Errorf("plan worker %d has ID %d, want its index %d", i, w.ID, i)
		}
		if w.Kind != planner.CPU && w.Kind != planner.GPU {
			return fmt.Errorf("plan worker %d has unknown kind %q", i, w.Kind)
		}
	}
	if len(plan.Partitions) == 0 {
		return fmt.Errorf("plan has no partitions for the %d frames", nFrames)
	}
	next := 0
	for i, p := range plan.Partitions {
		if p.Start != next || p.End <= p.Start {
			return fmt.Errorf("plan partition %d is [%d, %d), want a non-empty range starting at frame %d: partitions must cover frames [0, %d) in order without gap or overlap", i, p.Start, p.End, next, nFrames)
		}
		next = p.End
	}
	if next != nFrames {
		return fmt.Errorf("plan partitions cover frames [0, %d), but the dataset has %d frames", next, nFrames)
	}
	return nil
}

func resultBuffer(opt Options, n int) (Output, error) {
	if opt.Float64 {
		if opt.Out32 != nil {
			return Output{}, errors.New("Out32 given for a float64 run (Options.Float64): use Out64")
		}
		if opt.Out64 == nil {
			return Output{F64: make([]float64, n)}, nil
		}
		if len(opt.Out64) != n {
			return Output{}, fmt.Errorf("Out64 has length %d, want n_frames*n_masks = %d", len(opt.Out64), n)
		}
		return Output{F64: opt.Out64}, nil
	}
	if opt.Out64 != nil {
		return Output{}, errors.New("Out64 given for a float32 run: set Options.Float64 or use Out32")
	}
	if opt.Out32 == nil {
		return Output{F32: make([]float32, n)}, nil
	}
	if len(opt.Out32) != n {
		return Output{}, fmt.Errorf("Out32 has length %d, want n_frames*n_masks = %d", len(opt.Out32), n)
	}
	return Output{F32: opt.Out32}, nil
}

// run is the shared state of one execution of a plan over a dataset's frames: the
// workers, their claims, progress, retries and cancellation, for ApplyMasks and Reduce
// alike.
type run struct {
	ctx    context.Context // cancelled by the first fatal error
	cancel context.CancelFunc
	what   string // "apply masks", "reduce": what stopped, in the error of a cancelled run
	plan   *planner.Plan
	out    Output
	sched  *scheduler
	start  time.Time

	mu         sync.Mutex
	alive      int // workers created or being created, not retired
	done       int // frames reported to progress
	progress   func(framesDone, total int)
	doneRange  func(start, end int) // Options.Done
	ds         dataset.Dataset
	total      int
	fatal      error // first fatal error
	workers    []WorkerStats
	retried    []RetriedPartition
	notStarted []WorkerError
}

// newRun prepares the run of plan over the frames of ds, read tile frames at a time by
// the workers, which write into out (Worker.Process).
func newRun(ctx context.Context, what string, plan *planner.Plan, ds dataset.Dataset, tile int, out Output, progress func(int, int)) *run {
	r := &run{
		what:     what,
		plan:     plan,
		out:      out,
		sched:    newScheduler(plan.Partitions, claimSizes(plan, ds.FrameBytes(), tile), tile),
		alive:    len(plan.Workers),
		progress: progress,
		ds:       ds,
		total:    ds.NumFrames(),
		workers:  make([]WorkerStats, len(plan.Workers)),
	}
	for i, w := range plan.Workers {
		r.workers[i] = WorkerStats{ID: w.ID, Kind: w.Kind, CPU: w.CPU, GPU: w.GPU}
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	return r
}

// claimSizes sizes the claims of the plan's workers, for frames of frameBytes bytes: a
// CPU worker starts with one tile (tile frames) and claims at most maxClaimTime of work
// and maxClaimBytes of frames, a GPU worker starts with one device tile
// (cuda.DefaultTileBytes of frames) and claims at most gpuClaimTime.
func claimSizes(plan *planner.Plan, frameBytes, tile int) []claimSizing {
	sizes := make([]claimSizing, len(plan.Workers))
	for i, w := range plan.Workers {
		sizes[i] = claimSizing{first: tile, maxTime: maxClaimTime, maxFrames: max(tile, maxClaimBytes/frameBytes)}
		if w.Kind == planner.GPU {
			sizes[i] = claimSizing{first: max(tile, cuda.DefaultTileBytes/frameBytes), maxTime: gpuClaimTime}
		}
	}
	return sizes
}

// execute runs one goroutine per planned worker and waits for all of them. A watcher
// stops the scheduler when the run is cancelled, so that idle workers stop waiting.
// newWorker creates the worker of one planned worker, on its pinned goroutine.
func (r *run) execute(newWorker func(spec planner.Worker) (Worker, error), pin bool) {
	r.start = time.Now()
	var workers, watcher sync.WaitGroup
	for _, spec := range r.plan.Workers {
		workers.Go(func() { r.work(spec, newWorker, pin) })
	}
	ended := make(chan struct{})
	watcher.Go(func() {
		select {
		case <-r.ctx.Done():
			r.sched.stop()
			if w, ok := r.ds.(dataset.Waiter); ok {
				w.Interrupt()
			}
		case <-ended:
		}
	})
	workers.Wait()
	close(ended)
	watcher.Wait()
	r.cancel()
}

// err is the run's outcome: the first fatal error, else the parent context's error when
// it was cancelled before every frame was done.
func (r *run) err(parent context.Context) error {
	if r.fatal != nil {
		return r.fatal
	}
	if err := parent.Err(); err != nil && r.done < r.total {
		return fmt.Errorf("%s: stopped after %d of %d frames: %w", r.what, r.done, r.total, err)
	}
	return nil
}

func workerName(spec planner.Worker) string {
	if spec.Kind == planner.GPU {
		return fmt.Sprintf("worker %d (gpu %d, cpu %d)", spec.ID, spec.GPU, spec.CPU)
	}
	return fmt.Sprintf("worker %d (cpu %d)", spec.ID, spec.CPU)
}

// fail records a fatal error and cancels the run.
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil && r.ctx.Err() == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.cancel()
}

// work is one worker's goroutine: pin, create the worker, then compute the claims the
// scheduler hands out until every frame is done or the run is cancelled.
func (r *run) work(spec planner.Worker, newWorker func(planner.Worker) (Worker, error), pin bool) {
	name := workerName(spec)
	defer func() {
		if v := recover(); v != nil { // from the factory or Close; Process has its own
			r.fail(fmt.Errorf("%s: panic: %v\n%s", name, v, debug.Stack()))
		}
	}()
	if pin {
		unpin, err := affinity.Pin([]int{spec.CPU})
		if err != nil {
			r.fail(fmt.Errorf("%s: pin thread: %w", name, err))
			return
		}
		defer func() {
			if err := unpin(); err != nil {
				r.fail(fmt.Errorf("%s: unpin thread: %w", name, err))
			}
		}()
	}
	w, err := newWorker(spec)
	if err != nil {
		err = fmt.Errorf("%s: create worker: %w", name, err)
		if spec.Kind == planner.GPU {
			r.retire(spec.ID, err)
		} else {
			r.fail(err)
		}
		return
	}
	r.mu.Lock()
	ws := &r.workers[spec.ID]
	ws.Ready = true
	ws.ReadyAfter = time.Since(r.start)
	r.mu.Unlock()
	defer func() {
		if f, ok := w.(interface{ Feed() string }); ok { // how it ended up feeding
			r.mu.Lock()
			ws.Feed = f.Feed()
			r.mu.Unlock()
		}
		if err := w.Close(); err != nil {
			r.fail(fmt.Errorf("%s: close worker: %w", name, err))
		}
	}()
	r.sched.setReady(spec.ID)
	for {
		c, ok := r.sched.take(spec.ID)
		if !ok {
			return
		}
		attempt := 0
		t0 := time.Now()
		err := process(r.ctx, w, c.Partition, r.out, func(frames int) { attempt = r.advance(&c, attempt, frames) })
		if err == nil {
			elapsed := time.Since(t0)
			r.advance(&c, attempt, c.Frames()) // in case the worker reported less than it did
			r.sched.done(spec.ID, c, elapsed)
			r.mu.Lock()
			ws.Frames += c.Frames()
			ws.Claims++
			ws.Busy += elapsed
			r.mu.Unlock()
			continue
		}
		if r.ctx.Err() != nil {
			return // cancelled: the cause is recorded elsewhere
		}
		err = fmt.Errorf("%s: frames [%d, %d): %w", name, c.Start, c.End, err)
		if spec.Kind != planner.GPU {
			r.fail(err)
			return
		}
		r.giveBack(spec.ID, c, err)
		return
	}
}

// process runs w.Process, turning a panic into an error: a library embedded in another
// program (the C ABI, Python) must not crash its host because one worker failed. Memory
// faults panic too (debug.SetPanicOnFault): one on a dataset's memory mapping, whose
// file shrank while a worker read its frames in place, is the dataset's I/O error
// (dataset.MappingFault), without a stack.
func process(ctx context.Context, w Worker, p planner.Partition, out Output, progress func(int)) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			if err = dataset.MappingFault(v); err == nil {
				err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
			}
		}
	}()
	return w.Process(ctx, p, out, progress)
}

// advance reports frames completed by an attempt at claim c that had reported `attempt`
// frames before, and returns the new attempt count. Frames a failed earlier attempt at
// the same range already reported (c.credit) are not counted again.
func (r *run) advance(c *claim, attempt, frames int) int {
	attempt = min(attempt+max(frames, 0), c.Frames())
	r.mu.Lock()
	defer r.mu.Unlock()
	if attempt > c.credit {
		r.done += attempt - c.credit
		if r.doneRange != nil {
			r.doneRange(c.Start+c.credit, c.Start+attempt)
		}
		c.credit = attempt
		if r.progress != nil {
			r.progress(r.done, r.total)
		}
	}
	return attempt
}

// retire records GPU worker id that could not be created; the others take its share.
// With no worker left the run fails.
func (r *run) retire(id int, err error) {
	r.sched.retire(id)
	r.mu.Lock()
	r.notStarted = append(r.notStarted, WorkerError{Worker: id, Err: err})
	r.alive--
	alive := r.alive
	r.mu.Unlock()
	if alive == 0 {
		r.fail(fmt.Errorf("no worker left: %w", err))
	}
}

// giveBack hands claim c, failed by GPU worker id, to the remaining workers; the failed
// worker stops. With no worker left the run fails.
func (r *run) giveBack(id int, c claim, err error) {
	r.mu.Lock()
	r.retried = append(r.retried, RetriedPartition{Partition: c.Partition, Worker: id, Err: err})
	r.alive--
	alive := r.alive
	r.mu.Unlock()
	r.sched.giveBack(id, c)
	if alive == 0 {
		r.fail(fmt.Errorf("no worker left to run frames [%d, %d): %w", c.Start, c.End, err))
	}
}
