package engine

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// allowedCPUs is the calling thread's CPU affinity.
func allowedCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := threadCPUs()
	require.NoError(t, err)
	return cpus
}

// threadCPUs is the calling thread's CPU affinity, read with sched_getaffinity.
func threadCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// affinityWorker records its thread's affinity in every Process call. Its first call
// waits at barrier, so that every worker processes at least one partition.
type affinityWorker struct {
	Worker
	id      int
	mu      *sync.Mutex
	seen    map[int][][]int
	barrier *sync.WaitGroup
}

func (w affinityWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	cpus, err := threadCPUs()
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.seen[w.id] = append(w.seen[w.id], cpus)
	first := len(w.seen[w.id]) == 1
	w.mu.Unlock()
	if first {
		w.barrier.Done()
		w.barrier.Wait()
	}
	return w.Worker.Process(ctx, p, out, progress)
}

// TestApplyMasksPinsWorkers: each worker's thread runs on exactly its planned CPU, in
// the factory and in every Process call, and the pinned run is still exact.
func TestApplyMasksPinsWorkers(t *testing.T) {
	noLeak(t)
	allowed := allowedCPUs(t)
	rng := rand.New(rand.NewPCG(31, 32))
	sig := [2]int{20, 16}
	ds := randomDataset(rng, dataset.Uint16, []int{64}, sig)
	stack := randomStack(rng, 3, sig)
	want, mag := reference(ds, stack)
	// The CPUs of the workers in reverse order, so that pinning differs from the
	// scheduler's likely placement.
	cpus := make([]int, 0, len(allowed))
	for i := len(allowed) - 1; i >= 0; i-- {
		cpus = append(cpus, allowed[i])
	}
	plan := evenPlan(cpus, 2, 64, 8)
	var mu sync.Mutex
	seen := map[int][][]int{}
	var barrier sync.WaitGroup
	barrier.Add(len(plan.Workers))
	factory := func(spec planner.Worker, job *Job) (Worker, error) {
		cpus, err := threadCPUs()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		seen[-1-spec.ID] = append(seen[-1-spec.ID], cpus) // the factory's thread
		mu.Unlock()
		w, err := NewCPUWorker(job)
		return affinityWorker{w, spec.ID, &mu, seen, &barrier}, err
	}
	res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NewWorker: factory, TileFrames: 3})
	require.NoError(t, err)
	requireClose(t, res.F32, want, mag, 1e-5)
	for _, spec := range plan.Workers {
		require.Equal(t, [][]int{{spec.CPU}}, seen[-1-spec.ID], "factory of worker %d", spec.ID)
		require.NotEmpty(t, seen[spec.ID])
		for _, got := range seen[spec.ID] {
			require.Equal(t, []int{spec.CPU}, got, "worker %d", spec.ID)
		}
	}
	require.Equal(t, allowed, allowedCPUs(t), "the caller's thread affinity is unchanged")
}

func TestApplyMasksPinError(t *testing.T) {
	noLeak(t)
	allowed := allowedCPUs(t)
	rng := rand.New(rand.NewPCG(33, 34))
	sig := [2]int{4, 4}
	ds := randomDataset(rng, dataset.Uint8, []int{8}, sig)
	plan := evenPlan([]int{allowed[0], 1023}, 2, 8, 2)
	_, err := ApplyMasks(context.Background(), ds, randomStack(rng, 1, sig), plan, Options{})
	require.ErrorContains(t, err, "worker 1 (cpu 1023): pin thread: pin: cpu 1023 is not in this process's allowed CPUs")
}
