package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

var anyCPUs = []int{0, 1, 2, 3}

// progressLog records progress calls without a lock: the race detector checks that the
// engine serialises them.
type progressLog struct {
	calls [][2]int
}

func (l *progressLog) record(done, total int) { l.calls = append(l.calls, [2]int{done, total}) }

// check asserts that progress was monotone, never above total, and ended at total.
func (l *progressLog) check(t *testing.T, total int) {
	t.Helper()
	require.NotEmpty(t, l.calls)
	prev := 0
	for _, c := range l.calls {
		require.Equal(t, total, c[1])
		require.GreaterOrEqual(t, c[0], prev, "progress went back: %v", l.calls)
		require.LessOrEqual(t, c[0], total)
		prev = c[0]
	}
	require.Equal(t, total, prev, "progress did not end at total")
}

// noLeak asserts that the goroutine count returns to what it was before the test.
func noLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// An exiting goroutine may still be counted for a moment after ApplyMasks returned.
		for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines outlived ApplyMasks")
	})
}

func TestApplyMasksMatchesReference(t *testing.T) {
	dtypes := []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float32, dataset.Float64}
	rng := rand.New(rand.NewPCG(1, 2))
	// 37 frames: odd partition sizes and tiles; sig 70×64 = 4480 pixels spans two pixel
	// chunks of the dense kernel.
	sig := [2]int{70, 64}
	for _, dt := range dtypes {
		ds := randomDataset(rng, dt, []int{37}, sig)
		for _, nMasks := range []int{1, 3, 16, 70} {
			for _, sparse := range []bool{false, true} {
				var stack *masks.Stack
				if sparse {
					stack = sparseStack(rng, nMasks, sig)
				} else {
					stack = randomStack(rng, nMasks, sig)
				}
				want, mag := reference(ds, stack)
				for _, f64 := range []bool{false, true} {
					name := fmt.Sprintf("%v/masks%d/sparse=%v/float64=%v", dt, nMasks, sparse, f64)
					t.Run(name, func(t *testing.T) {
						var prog progressLog
						plan := splitPlan(anyCPUs, 3, 5, 13, 1, 11, 7)
						res, err := ApplyMasks(context.Background(), ds, stack, plan,
							Options{Float64: f64, TileFrames: 4, Progress: prog.record, NoPin: true})
						require.NoError(t, err)
						assert.Equal(t, sparse, res.Stats.Sparse)
						assert.Equal(t, []int{37}, res.NavShape)
						assert.Equal(t, nMasks, res.NMasks)
						if f64 {
							require.Nil(t, res.F32)
							requireClose(t, res.F64, want, mag, 1e-13)
						} else {
							require.Nil(t, res.F64)
							requireClose(t, res.F32, want, mag, 1e-5)
						}
						prog.check(t, 37)
						sum := 0
						for _, n := range res.Stats.FramesPerWorker {
							sum += n
						}
						assert.Equal(t, 37, sum)
					})
				}
			}
		}
	}
}

// TestApplyMasksTiles covers automatic tiles and tiles above the Gemm row limit, with a
// 2-D nav shape and many partitions.
func TestApplyMasksTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sig := [2]int{16, 12}
	ds := randomDataset(rng, dataset.Uint16, []int{20, 23}, sig)
	stack := randomStack(rng, 5, sig)
	want, mag := reference(ds, stack)
	for _, tile := range []int{0, 1, 7, gemmRows + 9, 1000} {
		t.Run(fmt.Sprint("tile", tile), func(t *testing.T) {
			res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 2, 400, 37, 23), Options{TileFrames: tile, NoPin: true})
			require.NoError(t, err)
			assert.Equal(t, []int{20, 23}, res.NavShape)
			requireClose(t, res.F32, want, mag, 1e-5)
		})
	}
}

func TestApplyMasksViewer(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sig := [2]int{9, 11}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32, dataset.Float64} {
		for _, misaligned := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/misaligned=%v", dt, misaligned), func(t *testing.T) {
				mem := randomDataset(rng, dt, []int{19}, sig)
				if misaligned {
					shifted := make([]byte, len(mem.data)+1)
					copy(shifted[1:], mem.data)
					mem.data = shifted[1:]
				}
				ds := viewDataset{mem}
				for _, nMasks := range []int{1, 4} {
					stack := randomStack(rng, nMasks, sig)
					want, mag := reference(mem, stack)
					res, err := ApplyMasks(context.Background(), ds, stack, evenPlan(anyCPUs, 2, 19, 4), Options{TileFrames: 3, NoPin: true})
					require.NoError(t, err)
					requireClose(t, res.F32, want, mag, 1e-5)
				}
			})
		}
	}
}

func TestApplyMasksOutBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sig := [2]int{8, 8}
	ds := randomDataset(rng, dataset.Uint8, []int{10}, sig)
	stack := randomStack(rng, 3, sig)
	want, mag := reference(ds, stack)
	plan := evenPlan(anyCPUs, 2, 10, 2)

	out32 := make([]float32, 30)
	res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{Out32: out32, NoPin: true})
	require.NoError(t, err)
	require.Same(t, &out32[0], &res.F32[0], "result is not the caller's Out32")
	requireClose(t, out32, want, mag, 1e-5)

	out64 := make([]float64, 30)
	res, err = ApplyMasks(context.Background(), ds, stack, plan, Options{Float64: true, Out64: out64, NoPin: true})
	require.NoError(t, err)
	require.Same(t, &out64[0], &res.F64[0], "result is not the caller's Out64")
	requireClose(t, out64, want, mag, 1e-13)

	for name, opt := range map[string]Options{
		"Out32 has length 29":         {Out32: make([]float32, 29)},
		"Out64 has length 31":         {Float64: true, Out64: make([]float64, 31)},
		"Out32 given for a float64":   {Float64: true, Out32: out32},
		"Out64 given for a float32":   {Out64: out64},
		"TileFrames -1 is negative":   {TileFrames: -1},
		"create worker: no resources": {NewWorker: func(planner.Worker, *Job) (Worker, error) { return nil, errors.New("no resources") }},
	} {
		t.Run(name, func(t *testing.T) {
			opt.NoPin = true
			_, err := ApplyMasks(context.Background(), ds, stack, plan, opt)
			require.ErrorContains(t, err, name)
		})
	}
}

// A GPU worker that cannot be created (here: no CUDA support, or no device) is not
// fatal: the CPU workers take its share and Stats say so. Only GPU workers: the run fails.
func TestApplyMasksGPUWorkerNotStarted(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(61, 62))
	sig := [2]int{5, 6}
	ds := randomDataset(rng, dataset.Uint16, []int{10}, sig)
	stack := randomStack(rng, 3, sig)
	want, mag := reference(ds, stack)
	p := evenPlan(anyCPUs, 2, 10, 2)
	p.Workers[1].Kind, p.Workers[1].GPU = planner.GPU, 99 // no such device
	res, err := ApplyMasks(context.Background(), ds, stack, p, Options{NoPin: true})
	require.NoError(t, err)
	requireClose(t, res.F32, want, mag, 1e-5)
	require.Len(t, res.Stats.NotStarted, 1)
	require.Equal(t, 1, res.Stats.NotStarted[0].Worker)
	require.ErrorContains(t, res.Stats.NotStarted[0].Err, "GPU worker on device 99: ")
	require.Contains(t, res.Stats.Summary(), "worker 1 not started: ")
	require.Equal(t, []int{10, 0}, res.Stats.FramesPerWorker)

	p.Workers[0].Kind, p.Workers[0].GPU = planner.GPU, 99
	_, err = ApplyMasks(context.Background(), ds, stack, p, Options{NoPin: true})
	require.ErrorContains(t, err, "no worker left: ")
}

func TestApplyMasksValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	sig := [2]int{8, 6}
	ds := randomDataset(rng, dataset.Uint16, []int{10}, sig)
	stack := randomStack(rng, 2, sig)
	good := evenPlan(anyCPUs, 2, 10, 2)
	cases := []struct {
		name  string
		ds    dataset.Dataset
		stack *masks.Stack
		plan  *planner.Plan
		want  string
	}{
		{"sig mismatch", ds, randomStack(rng, 2, [2]int{6, 8}), good, "mask sig shape (6, 8) does not match the dataset sig shape (8, 6)"},
		{"no stack", ds, nil, good, "no mask stack"},
		{"no masks", ds, &masks.Stack{SigY: 8, SigX: 6}, good, "0 masks"},
		{"short stack data", ds, &masks.Stack{N: 2, SigY: 8, SigX: 6, Data: make([]float32, 95)}, good, "holds 95 weights, want 96"},
		{"nil plan", ds, stack, nil, "plan has no workers"},
		{"no workers", ds, stack, &planner.Plan{Partitions: good.Partitions}, "plan has no workers"},
		{"no partitions", ds, stack, &planner.Plan{Workers: good.Workers}, "plan has no partitions"},
		{"gap", ds, stack, splitPlanParts(good.Workers, [2]int{0, 4}, [2]int{5, 10}), "partition 1 is [5, 10), want a non-empty range starting at frame 4"},
		{"overlap", ds, stack, splitPlanParts(good.Workers, [2]int{0, 6}, [2]int{5, 10}), "partition 1 is [5, 10)"},
		{"empty partition", ds, stack, splitPlanParts(good.Workers, [2]int{0, 0}, [2]int{0, 10}), "partition 0 is [0, 0)"},
		{"short cover", ds, stack, splitPlan(anyCPUs, 2, 4, 5), "cover frames [0, 9), but the dataset has 10 frames"},
		{"long cover", ds, stack, splitPlan(anyCPUs, 2, 4, 7), "cover frames [0, 11), but the dataset has 10 frames"},
		{"worker id", ds, stack, &planner.Plan{Workers: []planner.Worker{{ID: 1, Kind: planner.CPU}}, Partitions: good.Partitions}, "worker 0 has ID 1"},
		{"worker kind", ds, stack, &planner.Plan{Workers: []planner.Worker{{Kind: "tpu"}}, Partitions: good.Partitions}, `unknown kind "tpu"`},
		{"no frames", &memDataset{nav: []int{0}, sig: sig, dt: dataset.Uint16}, stack, good, "has no frames"},
		{"bad dtype", &memDataset{nav: []int{1}, sig: sig, data: make([]byte, 96)}, stack, good, "invalid dtype"},
		{"no dataset", nil, stack, good, "no dataset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ApplyMasks(context.Background(), c.ds, c.stack, c.plan, Options{NoPin: true})
			require.ErrorContains(t, err, c.want)
		})
	}
}

func splitPlanParts(workers []planner.Worker, parts ...[2]int) *planner.Plan {
	plan := &planner.Plan{Workers: workers}
	for _, p := range parts {
		plan.Partitions = append(plan.Partitions, planner.Partition{Start: p[0], End: p[1]})
	}
	return plan
}

// TestApplyMasksReadError: a dataset error fails the run and names worker, partition and
// the dataset's own message.
func TestApplyMasksReadError(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(11, 12))
	sig := [2]int{8, 8}
	ds := randomDataset(rng, dataset.Uint16, []int{40}, sig)
	ds.readErr, ds.errFrame = errors.New("disk on fire"), 25
	_, err := ApplyMasks(context.Background(), ds, randomStack(rng, 2, sig), splitPlan(anyCPUs, 1, 20, 20), Options{TileFrames: 4, NoPin: true})
	require.Regexp(t, `^worker 0 \(cpu 0\): frames \[2\d, \d\d\): memory dataset: frames \[24, 28\): disk on fire$`, err.Error())
}

// blockingWorker reports one frame of its first partition, calls started, then blocks
// until ctx is cancelled: a run with it ends only if cancellation reaches every worker.
type blockingWorker struct {
	started func()
	closed  *atomic.Int32
}

func (w blockingWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	progress(1)
	w.started()
	<-ctx.Done()
	return ctx.Err()
}

func (w blockingWorker) Close() error { w.closed.Add(1); return nil }

func TestApplyMasksCancel(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(13, 14))
	sig := [2]int{8, 8}
	ds := randomDataset(rng, dataset.Uint16, []int{100}, sig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closed, started atomic.Int32
	onStart := func() {
		if started.Add(1) == 3 {
			cancel() // all 3 workers are blocked in Process
		}
	}
	var prog progressLog
	_, err := ApplyMasks(ctx, ds, randomStack(rng, 2, sig), evenPlan(anyCPUs, 3, 100, 6), Options{
		NoPin:     true,
		Progress:  prog.record,
		NewWorker: func(planner.Worker, *Job) (Worker, error) { return blockingWorker{onStart, &closed}, nil },
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "stopped after 3 of 100 frames")
	require.Equal(t, int32(3), closed.Load(), "every worker is closed")
}

// cancellingDataset cancels the run from inside its nth ReadFrames and counts the reads
// after that: CPU workers must stop at the next tile.
type cancellingDataset struct {
	*memDataset
	cancel       context.CancelFunc
	reads, after atomic.Int32 // reads started; reads started once cancel had returned
	cancelled    atomic.Bool
	n            int32
}

func (d *cancellingDataset) ReadFrames(start, end int, dst []byte) error {
	if d.cancelled.Load() {
		d.after.Add(1)
	}
	if d.reads.Add(1) == d.n {
		d.cancel()
		d.cancelled.Store(true)
	}
	return d.memDataset.ReadFrames(start, end, dst)
}

func TestApplyMasksCancelCPUWorkers(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(15, 16))
	sig := [2]int{8, 8}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds := &cancellingDataset{memDataset: randomDataset(rng, dataset.Uint8, []int{1000}, sig), cancel: cancel, n: 5}
	_, err := ApplyMasks(ctx, ds, randomStack(rng, 3, sig), evenPlan(anyCPUs, 2, 1000, 4), Options{TileFrames: 2, NoPin: true})
	require.ErrorIs(t, err, context.Canceled)
	// The other worker may have checked the context just before the cancel and start one
	// more read; none after that.
	require.LessOrEqual(t, ds.after.Load(), int32(1), "workers kept reading after cancel")
}

// failingWorker wraps a CPU worker and fails the frame range holding frame failAt after
// writing garbage into its rows and reporting some progress.
type failingWorker struct {
	Worker
	failAt int
	nMasks int
	calls  *atomic.Int32
}

func (w failingWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	if w.failAt < p.Start || w.failAt >= p.End {
		return w.Worker.Process(ctx, p, out, progress)
	}
	w.calls.Add(1)
	for i := p.Start * w.nMasks; i < p.End*w.nMasks; i++ {
		if out.F32 != nil {
			out.F32[i] = -12345
		} else {
			out.F64[i] = -12345
		}
	}
	progress(p.Frames() - 1)
	return errors.New("device lost")
}

func TestApplyMasksCPUWorkerError(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(17, 18))
	sig := [2]int{8, 8}
	ds := randomDataset(rng, dataset.Uint16, []int{60}, sig)
	stack := randomStack(rng, 2, sig)
	plan := splitPlan([]int{4, 5, 6}, 3, 10, 10, 10, 10, 10, 10)
	var calls, closed atomic.Int32
	blocked := make(chan struct{})
	factory := func(spec planner.Worker, job *Job) (Worker, error) {
		if spec.ID == 2 {
			// Takes partition 0 and stops only when the failure cancels the run.
			return blockingWorker{func() { close(blocked) }, &closed}, nil
		}
		<-blocked
		w, err := NewCPUWorker(job)
		return failingWorker{Worker: w, failAt: 35, nMasks: 2, calls: &calls}, err
	}
	_, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NewWorker: factory, NoPin: true, TileFrames: 3})
	require.Error(t, err)
	require.NotErrorIs(t, err, context.Canceled)
	require.Regexp(t, `^worker [01] \(cpu [45]\): frames \[\d+, \d+\): device lost$`, err.Error())
	require.Equal(t, int32(1), calls.Load(), "a CPU worker's failed frames must not be retried")
	require.Equal(t, int32(1), closed.Load())
}

// TestApplyMasksGPUWorkerRetry: the GPU worker takes partition 0 first (the CPU workers
// start pulling only after it failed), writes garbage into its rows, reports progress
// and fails; the CPU workers re-run it.
func TestApplyMasksGPUWorkerRetry(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(19, 20))
	sig := [2]int{12, 10}
	ds := randomDataset(rng, dataset.Int16, []int{90}, sig)
	stack := randomStack(rng, 4, sig)
	want, mag := reference(ds, stack)
	for _, f64 := range []bool{false, true} {
		t.Run(fmt.Sprint("float64=", f64), func(t *testing.T) {
			plan := evenPlan(anyCPUs, 3, 90, 9)
			plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
			var calls atomic.Int32
			var gpuPartitions []planner.Partition
			var mu sync.Mutex
			gpuFailed := make(chan struct{})
			factory := func(spec planner.Worker, job *Job) (Worker, error) {
				w, err := NewCPUWorker(job)
				if spec.Kind != planner.GPU {
					<-gpuFailed
					return w, err
				}
				failing := failingWorker{Worker: w, failAt: 0, nMasks: 4, calls: &calls}
				return recordingWorker{closeOnFail{failing, gpuFailed}, &mu, &gpuPartitions}, err
			}
			var prog progressLog
			res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{Float64: f64, NewWorker: factory, NoPin: true, TileFrames: 4, Progress: prog.record})
			require.NoError(t, err)
			if f64 {
				requireClose(t, res.F64, want, mag, 1e-13)
			} else {
				requireClose(t, res.F32, want, mag, 1e-5)
			}
			prog.check(t, 90)
			assert.Equal(t, 90, res.Stats.FramesPerWorker[1]+res.Stats.FramesPerWorker[2], "frames counted once")
			assert.Equal(t, 0, res.Stats.FramesPerWorker[0], "the failed GPU worker completed nothing")
			assert.Equal(t, 1, res.Stats.GPUWorkers)
			assert.Equal(t, 2, res.Stats.CPUWorkers)
			assert.Equal(t, int32(1), calls.Load())
			// The GPU worker's first claim is one device tile (32 MiB of frames), capped by its
			// first partition.
			failed := plan.Partitions[0]
			require.Len(t, res.Stats.Retried, 1)
			r := res.Stats.Retried[0]
			assert.Equal(t, failed, r.Partition)
			assert.Equal(t, 0, r.Worker)
			assert.EqualError(t, r.Err, "worker 0 (gpu 0, cpu 0): frames [0, 10): device lost")
			assert.Contains(t, res.Stats.Summary(), "1 frame ranges retried: [0, 10) after worker 0 failed: worker 0 (gpu 0, cpu 0): frames [0, 10): device lost")
			mu.Lock()
			assert.Equal(t, []planner.Partition{failed}, gpuPartitions, "the GPU worker stops after its failure")
			mu.Unlock()
		})
	}
}

// recordingWorker records the partitions it is given.
type recordingWorker struct {
	Worker
	mu   *sync.Mutex
	seen *[]planner.Partition
}

func (w recordingWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	w.mu.Lock()
	*w.seen = append(*w.seen, p)
	w.mu.Unlock()
	return w.Worker.Process(ctx, p, out, progress)
}

// closeOnFail closes a channel when its worker returns an error.
type closeOnFail struct {
	Worker
	failed chan struct{}
}

func (w closeOnFail) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	err := w.Worker.Process(ctx, p, out, progress)
	if err != nil {
		close(w.failed)
	}
	return err
}

func TestApplyMasksAllGPUWorkersFail(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(23, 24))
	sig := [2]int{6, 6}
	ds := randomDataset(rng, dataset.Uint8, []int{20}, sig)
	plan := evenPlan(anyCPUs, 2, 20, 2)
	for i := range plan.Workers {
		plan.Workers[i].Kind, plan.Workers[i].GPU = planner.GPU, i
	}
	factory := func(spec planner.Worker, job *Job) (Worker, error) {
		return failAll{}, nil
	}
	_, err := ApplyMasks(context.Background(), ds, randomStack(rng, 2, sig), plan, Options{NewWorker: factory, NoPin: true})
	require.Regexp(t, `no worker left to run frames \[(0, 10|10, 20)\): `, err.Error())
	require.ErrorContains(t, err, "out of memory")
}

type failAll struct{}

func (failAll) Process(context.Context, planner.Partition, Output, func(int)) error {
	return errors.New("out of memory")
}
func (failAll) Close() error { return nil }

func TestDefaultWorkersGPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sig := [2]int{4, 4}
	stack := randomStack(rng, 2, sig)
	job := &Job{Dataset: randomDataset(rng, dataset.Uint16, []int{3}, sig), Masks: stack, NMasks: stack.N}
	_, err := DefaultWorkers(planner.Worker{Kind: planner.GPU, GPU: 2}, job)
	require.ErrorContains(t, err, "GPU worker on device 2: ")
	if !cuda.Built() {
		require.ErrorIs(t, err, cuda.ErrNoCUDA)
		require.ErrorContains(t, err, "stemdot was built without CUDA support")
	}
	_, err = DefaultWorkers(planner.Worker{Kind: "fpga"}, &Job{})
	require.ErrorContains(t, err, `unknown worker kind "fpga"`)
}

func TestNewCPUWorkerValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	sig := [2]int{4, 4}
	ds := randomDataset(rng, dataset.Uint8, []int{3}, sig)
	stack := randomStack(rng, 2, sig)
	csr := sparseStack(rng, 2, sig).ToCSR()
	badCol := *csr
	badCol.Col = append([]int32{}, csr.Col...)
	badCol.Col[0] = 16
	cases := map[string]*Job{
		"job has no dataset":             {Masks: stack, NMasks: 2, TileFrames: 1},
		"NMasks 3 differs":               {Dataset: ds, Masks: stack, NMasks: 3, TileFrames: 1},
		"TileFrames 0":                   {Dataset: ds, Masks: stack, NMasks: 2},
		"pixel index 16 outside [0, 16)": {Dataset: ds, Masks: stack, NMasks: 2, TileFrames: 1, Sparse: &badCol},
		"sparse masks: CSR masks are 2 masks × 9 pixels, want 2 × 16": {Dataset: ds, Masks: stack, NMasks: 2, TileFrames: 1, Sparse: &masks.CSR{N: 2, Pixels: 9}},
		"CSR RowPtr has 0 entries (want 3":                            {Dataset: ds, Masks: stack, NMasks: 2, TileFrames: 1, Sparse: &masks.CSR{N: 2, Pixels: 16}},
	}
	for want, job := range cases {
		_, err := NewCPUWorker(job)
		require.ErrorContains(t, err, want)
	}
	w, err := NewCPUWorker(&Job{Dataset: ds, Masks: stack, NMasks: 2, TileFrames: 2})
	require.NoError(t, err)
	err = w.Process(context.Background(), planner.Partition{Start: 2, End: 4}, Output{F32: make([]float32, 6)}, nil)
	require.ErrorContains(t, err, "partition [2, 4) is empty or outside the 3 frames")
	err = w.Process(context.Background(), planner.Partition{Start: 0, End: 3}, Output{F32: make([]float32, 5)}, nil)
	require.ErrorContains(t, err, "output has length 5, want n_frames*n_masks = 6")
	err = w.Process(context.Background(), planner.Partition{Start: 0, End: 3}, Output{}, nil)
	require.ErrorContains(t, err, "exactly one of F32 and F64")
}

func TestStatsSummary(t *testing.T) {
	s := Stats{Frames: 65536, BytesRead: 8589934592, Elapsed: 2 * time.Second, Workers: 3, CPUWorkers: 2, GPUWorkers: 1, Sparse: true}
	require.Equal(t, "65536 frames, 8.590 GB in 2.000 s (4.29 GB/s), 3 workers (2 cpu, 1 gpu), sparse masks", s.Summary())
	s.Retried = []RetriedPartition{{Partition: planner.Partition{Start: 0, End: 10}, Worker: 0, Err: errors.New("x")}}
	require.True(t, strings.HasSuffix(s.Summary(), ", 1 frame ranges retried: [0, 10) after worker 0 failed: x"), s.Summary())
}

// A float32 result that overflows (weights near float32's largest value times counts)
// is an error suggesting float64, which holds it.
func TestApplyMasksFloat32Overflow(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	sig := [2]int{4, 4}
	ds := randomDataset(rng, dataset.Uint16, []int{6}, sig)
	stack := randomStack(rng, 2, sig)
	for i := range stack.Pixels() {
		stack.Data[stack.Pixels()+i] = 3e38
	}
	plan := evenPlan(allowedCPUs(t)[:1], 1, 6, 2)
	res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true})
	require.NoError(t, err, "a non-finite result is written and counted, not an error")
	require.True(t, math.IsInf(float64(res.F32[1]), 1))
	assert.Equal(t, NonFinite{Count: 6, Inf: 6, Frame: 0, Mask: 1}, res.Stats.NonFinite)
	res, err = ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, Float64: true})
	require.NoError(t, err)
	require.False(t, math.IsInf(res.F64[1], 0))
	assert.Zero(t, res.Stats.NonFinite.Count)
}

// A NaN or Inf pixel counts only for the masks that weigh it (case 10-nan-gap-pixels): a
// mask's value does not depend on the other masks of the stack nor on the kernel (dense
// stacks of 1, 3, 16 and 40 masks, sparse, float32 and float64 frames and results).
func TestApplyMasksNonFinitePixels(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	sig := [2]int{8, 10}
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{12}, sig)
		// A detector gap: column 9 NaN in every frame; frame 5 has +Inf at pixel 0.
		put := func(f, i int, v float64) { ds.setFloat(f*sig[0]*sig[1]+i, v) }
		for f := range 12 {
			for y := range sig[0] {
				put(f, y*sig[1]+9, math.NaN())
			}
		}
		put(5, 0, math.Inf(1))
		// Mask 0 avoids column 9 and pixel 0; mask 1 weighs column 9; mask 2 weighs pixel 0.
		for _, n := range []int{3, 16, 40} { // 40: the broadcast kernels for float32
			for _, sparse := range []bool{false, true} {
				stack := randomStack(rng, n, sig)
				for m := range n {
					for y := range sig[0] {
						stack.Data[m*80+y*sig[1]+9] = 0
					}
					stack.Data[m*80] = 0
					if sparse { // a sparse stack: most weights zero
						for i := range 80 {
							if i%7 != 0 {
								stack.Data[m*80+i] = 0
							}
						}
					}
				}
				stack.Data[1*80+3*sig[1]+9] = 1.5
				stack.Data[2*80] = 2
				alone := &masks.Stack{N: 1, SigY: sig[0], SigX: sig[1], Data: stack.Data[:80], Names: []string{"m0"}}
				for _, f64 := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/%dmasks/sparse=%v/float64=%v", dt, n, sparse, f64), func(t *testing.T) {
						opt := Options{NoPin: true, TileFrames: 5, Float64: f64}
						res, err := ApplyMasks(context.Background(), ds, stack, evenPlan(anyCPUs, 2, 12, 4), opt)
						require.NoError(t, err)
						one, err := ApplyMasks(context.Background(), ds, alone, evenPlan(anyCPUs, 1, 12, 2), opt)
						require.NoError(t, err)
						get := func(r *Result, i int) float64 {
							if f64 {
								return r.F64[i]
							}
							return float64(r.F32[i])
						}
						for f := range 12 {
							a, b := get(res, f*n), get(one, f)
							require.False(t, math.IsNaN(a) || math.IsInf(a, 0), "frame %d mask 0 = %v", f, a)
							require.InDelta(t, b, a, 1e-4*math.Abs(b)+1e-6, "mask 0 alone and in the stack")
							require.True(t, math.IsNaN(get(res, f*n+1)), "mask 1 weighs the NaN column")
							if f == 5 {
								require.True(t, math.IsInf(get(res, f*n+2), 1), "mask 2 weighs the +Inf pixel")
							} else {
								require.False(t, math.IsNaN(get(res, f*n+2)))
							}
						}
						require.Equal(t, 12+1, res.Stats.NonFinite.Count)
						require.Equal(t, 1, res.Stats.NonFinite.Inf)
						require.Equal(t, 0, res.Stats.NonFinite.Frame)
						require.Equal(t, 1, res.Stats.NonFinite.Mask)
					})
				}
			}
		}
	}
}

// panickingWorker panics in Process, as a bug in a worker would.
type panickingWorker struct{}

func (panickingWorker) Close() error { return nil }

// closePanickingWorker is a CPU worker whose Close panics.
type closePanickingWorker struct{ Worker }

func (closePanickingWorker) Close() error { panic("close failed") }

func (panickingWorker) Process(context.Context, planner.Partition, Output, func(int)) error {
	var m map[string]int
	m["boom"]++ // assignment to entry in nil map
	return nil
}

// A worker's panic becomes the run's error: an embedding program (C ABI, Python) must
// not crash.
func TestApplyMasksWorkerPanic(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(53, 54))
	sig := [2]int{4, 4}
	ds := randomDataset(rng, dataset.Uint8, []int{8}, sig)
	factory := func(spec planner.Worker, job *Job) (Worker, error) { return panickingWorker{}, nil }
	_, err := ApplyMasks(context.Background(), ds, randomStack(rng, 1, sig), evenPlan(anyCPUs, 1, 8, 2),
		Options{NewWorker: factory, NoPin: true})
	require.ErrorContains(t, err, "panic: assignment to entry in nil map")
	require.Regexp(t, `^worker 0 \(cpu \d+\): frames \[\d+, \d+\): panic`, err.Error())

	factory = func(spec planner.Worker, job *Job) (Worker, error) {
		w, err := NewCPUWorker(job)
		return closePanickingWorker{w}, err
	}
	_, err = ApplyMasks(context.Background(), ds, randomStack(rng, 1, sig), evenPlan(anyCPUs, 1, 8, 2),
		Options{NewWorker: factory, NoPin: true})
	require.ErrorContains(t, err, "worker 0 (cpu 0): panic: close failed")
}

// TestApplyMasksDeterministic: a frame's results do not depend on how the run's claims
// cut the frames into partitions and tiles (which differs from run to run): with tiles
// of 2 or more frames, a tile's odd last frame is paired with itself, a 1-mask stack's
// frames go four to a call of the quad kernel (a tile's last 1-3 with repeats), and the packed and
// broadcast kernels sum a frame in the same order in a call of any number of frames.
// Bit for bit, for each mask count that takes another kernel mix (1, 2, 3, 4 and 5-8
// masks: block and pair kernels; 8 and more: packed; 32 and more of float32: broadcast),
// for tiles of 29, 2, 7 and 13 frames, and for 1-frame tiles among themselves; also with
// shifted masks, whole-pixel and sub-pixel shifts (#20 B: the shifted kernels of fewer
// than 8 masks paired no odd frame).
func TestApplyMasksDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	sig := [2]int{24, 45} // 1080 pixels: a whole block, whole 16-pixel steps and a tail
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		ds := randomDataset(rng, dt, []int{29}, sig)
		for _, nMasks := range []int{1, 2, 3, 4, 5, 7, 8, 12, 40, 64} {
			stack := randomStack(rng, nMasks, sig)
			for _, shifted := range []string{"unshifted", "whole", "sub-pixel"} {
				var shifts []float64
				if shifted != "unshifted" {
					shifts = randomShifts(rng, 29, shifted == "whole")
				}
				t.Run(fmt.Sprintf("%v/masks%d/%s", dt, nMasks, shifted), func(t *testing.T) {
					for _, cases := range [][]struct {
						plan *planner.Plan
						tile int
					}{{
						{splitPlan(anyCPUs, 1, 29), 29},
						{splitPlan(anyCPUs, 2, 1, 28), 2},
						{splitPlan(anyCPUs, 2, 3, 5, 21), 7},
						{splitPlan(anyCPUs, 3, 13, 3, 13), 13},
					}, {
						{splitPlan(anyCPUs, 1, 29), 1},
						{splitPlan(anyCPUs, 2, 3, 5, 21), 1},
					}} {
						var first []float32
						for _, c := range cases {
							res, err := ApplyMasks(context.Background(), ds, stack, c.plan, Options{TileFrames: c.tile, NoPin: true, Shifts: shifts})
							require.NoError(t, err)
							if first == nil {
								first = res.F32
								continue
							}
							require.Equal(t, first, res.F32, "partitions %v, tiles of %d frames", c.plan.Partitions, c.tile)
						}
					}
				})
			}
		}
	}
}
