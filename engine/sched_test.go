package engine

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// simWorker is a worker of the simulated clock: it computes rate frames per second, and
// takes work from readyAt seconds on (never when readyAt is +Inf).
type simWorker struct {
	rate, readyAt float64
}

// event is a worker becoming ready or finishing a claim at time t.
type event struct {
	t float64
	w int
	c *claim // nil: the worker became ready
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].t < e[j].t || e[i].t == e[j].t && e[i].w < e[j].w }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// simulate drives the scheduler with a simulated clock: each worker takes a claim when it
// becomes ready and whenever it finishes one, and a claim of n frames takes n/rate
// seconds. It returns the time the last claim ends and how often each frame was
// computed.
func simulate(t *testing.T, frames, nParts, tile int, ws []simWorker) (float64, []int) {
	t.Helper()
	parts := evenPlan(anyCPUs, 1, frames, nParts).Partitions
	sizing := make([]claimSizing, len(ws))
	for i := range sizing {
		sizing[i] = claimSizing{first: tile, maxTime: maxClaimTime}
	}
	s := newScheduler(parts, sizing, tile)
	computed := make([]int, frames)
	var q events
	for i, w := range ws {
		if !math.IsInf(w.readyAt, 1) {
			heap.Push(&q, event{t: w.readyAt, w: i})
		}
	}
	var parked []int // workers told to wait
	end := 0.0
	startClaim := func(now float64, w int) bool {
		c, st := s.tryTake(w)
		switch st {
		case wait:
			parked = append(parked, w)
		case claimed:
			heap.Push(&q, event{t: now + float64(c.Frames())/ws[w].rate, w: w, c: &c})
		}
		return st != wait
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		if e.c == nil {
			s.setReady(e.w)
		} else {
			for f := e.c.Start; f < e.c.End; f++ {
				computed[f]++
			}
			s.done(e.w, *e.c, time.Duration(float64(e.c.Frames())/ws[e.w].rate*1e9))
			end = max(end, e.t)
			waiting := parked
			parked = nil
			for _, w := range waiting {
				startClaim(e.t, w)
			}
		}
		startClaim(e.t, e.w)
	}
	require.Empty(t, parked, "workers left waiting")
	select {
	case <-s.over:
	default:
		t.Fatal("the scheduler did not end")
	}
	return end, computed
}

func requireOnce(t *testing.T, computed []int) {
	t.Helper()
	for f, n := range computed {
		if n != 1 {
			t.Fatalf("frame %d computed %d times", f, n)
		}
	}
}

func cpuWorkers(n int, rate float64) []simWorker {
	ws := make([]simWorker, n)
	for i := range ws {
		ws[i] = simWorker{rate: rate}
	}
	return ws
}

// A worker 10× slower than the others, or one that never becomes ready, changes the run
// time by at most 10% (here: far less) compared with the run without it; every frame
// is computed exactly once.
func TestSchedulerSlowAndAbsentWorkers(t *testing.T) {
	const frames, tile = 200_000, 8
	for _, n := range []int{2, 4, 16} {
		t.Run(fmt.Sprint(n, "workers"), func(t *testing.T) {
			base, computed := simulate(t, frames, 2*n, tile, cpuWorkers(n, 10_000))
			requireOnce(t, computed)
			ideal := float64(frames) / (float64(n) * 10_000)
			assert.InDelta(t, 1, base/ideal, 0.01, "n equal workers: the ideal time")

			slow := append(cpuWorkers(n, 10_000), simWorker{rate: 1_000})
			withSlow, computed := simulate(t, frames, 2*(n+1), tile, slow)
			requireOnce(t, computed)
			assert.LessOrEqual(t, withSlow/base, 1.10, "a 10× slower worker")

			absent := append(cpuWorkers(n, 10_000), simWorker{readyAt: math.Inf(1)})
			withAbsent, computed := simulate(t, frames, 2*(n+1), tile, absent)
			requireOnce(t, computed)
			assert.LessOrEqual(t, withAbsent/base, 1.10, "a worker that never becomes ready")

			late := append(cpuWorkers(n, 10_000), simWorker{rate: 100_000, readyAt: ideal / 2})
			withLate, computed := simulate(t, frames, 2*(n+1), tile, late)
			requireOnce(t, computed)
			assert.Less(t, withLate, base, "a fast worker ready half-way through helps")
			t.Logf("run time vs %d equal workers: with a 10× slower one %.4f, with an absent one %.4f, with a late fast one %.4f",
				n, withSlow/base, withAbsent/base, withLate/base)
		})
	}
}

// A GPU-like worker 20× faster than each CPU worker: the run ends within 5% of the time
// the summed rates allow (a whole partition held by any worker would cost far more).
func TestSchedulerMixedRates(t *testing.T) {
	const frames, tile = 100_000, 8
	ws := append([]simWorker{{rate: 200_000, readyAt: 0.002}}, cpuWorkers(12, 10_000)...)
	end, computed := simulate(t, frames, 13, tile, ws)
	requireOnce(t, computed)
	ideal := 0.002*12*10_000/320_000 + float64(frames)/320_000
	assert.LessOrEqual(t, end/ideal, 1.05)
	t.Logf("run time / ideal: %.4f", end/ideal)
}

func TestSchedulerRetry(t *testing.T) {
	s := newScheduler([]planner.Partition{{Start: 0, End: 100}}, []claimSizing{{first: 10, maxTime: maxClaimTime}, {first: 10, maxTime: maxClaimTime}}, 10)
	s.setReady(0)
	s.setReady(1)
	c0, st := s.tryTake(0)
	require.Equal(t, claimed, st)
	c1, st := s.tryTake(1)
	require.Equal(t, claimed, st)
	require.Equal(t, planner.Partition{Start: 0, End: 10}, c0.Partition)
	require.Equal(t, planner.Partition{Start: 10, End: 20}, c1.Partition)
	c0.credit = 3
	s.giveBack(0, c0)
	c, st := s.tryTake(1)
	require.Equal(t, claimed, st)
	require.Equal(t, c0, c, "a given-back range comes first, with its credit")
	s.done(1, c1, time.Millisecond)
	s.done(1, c, time.Millisecond)
	for {
		c, st = s.tryTake(1)
		if st != claimed {
			break
		}
		s.done(1, c, time.Millisecond)
	}
	require.Equal(t, finished, st)
	_, st = s.tryTake(0)
	require.Equal(t, finished, st)
}

// sleepyWorker wraps a CPU worker, sleeps perFrame for every frame it computes and counts
// the computations of each frame.
type sleepyWorker struct {
	Worker
	perFrame time.Duration
	counts   []atomic.Int32
}

func (w sleepyWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	time.Sleep(time.Duration(p.Frames()) * w.perFrame)
	for f := p.Start; f < p.End; f++ {
		w.counts[f].Add(1)
	}
	return w.Worker.Process(ctx, p, out, progress)
}

// The engine with a 10× slower worker and a GPU worker that never becomes ready (its
// factory waits until the run no longer needs it): right results, every frame computed
// once, the slow worker computed less than its share, the absent one nothing.
func TestApplyMasksSlowAndAbsentWorkers(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(71, 72))
	sig := [2]int{6, 5}
	ds := randomDataset(rng, dataset.Uint16, []int{4000}, sig)
	stack := randomStack(rng, 3, sig)
	want, mag := reference(ds, stack)
	plan := evenPlan(anyCPUs, 4, 4000, 8)
	plan.Workers[3].Kind, plan.Workers[3].GPU = planner.GPU, 0
	counts := make([]atomic.Int32, 4000)
	factory := func(spec planner.Worker, job *Job) (Worker, error) {
		if spec.Kind == planner.GPU {
			<-job.Done()
			return nil, errors.New("the run ended before the device was ready")
		}
		w, err := NewCPUWorker(job)
		per := 20 * time.Microsecond
		if spec.ID == 2 {
			per *= 10
		}
		return sleepyWorker{Worker: w, perFrame: per, counts: counts}, err
	}
	var prog progressLog
	res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NewWorker: factory, NoPin: true, TileFrames: 16, Progress: prog.record})
	require.NoError(t, err)
	requireClose(t, res.F32, want, mag, 1e-5)
	prog.check(t, 4000)
	for f := range counts {
		require.Equal(t, int32(1), counts[f].Load(), "frame %d", f)
	}
	ws := res.Stats.PerWorker
	require.Len(t, ws, 4)
	assert.Less(t, ws[2].Frames, 4000/3, "the slow worker computed less than a third")
	assert.Positive(t, ws[2].Frames)
	assert.Equal(t, 0, ws[3].Frames)
	assert.False(t, ws[3].Ready)
	require.Len(t, res.Stats.NotStarted, 1)
	assert.Equal(t, 4000, ws[0].Frames+ws[1].Frames+ws[2].Frames)
	for _, w := range ws[:3] {
		assert.True(t, w.Ready)
		assert.Positive(t, w.Claims)
		assert.Equal(t, int64(w.Frames)*int64(ds.FrameBytes()), w.Bytes)
		assert.Positive(t, w.GBPerSecond())
	}
	assert.Contains(t, ws[3].String(), "worker 3 (gpu 0, cpu 3): not started")
	assert.Regexp(t, `^worker 0 \(cpu 0\): \d+ frames in \d+ claims, [0-9.]+ GB at [0-9.]+ GB/s, ready after [0-9.]+ s$`, ws[0].String())
}
