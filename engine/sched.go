package engine

import (
	"sync"
	"time"

	"github.com/stemdot/stemdot/planner"
)

// scheduler hands out claims: contiguous frame ranges that one worker computes in one
// Process call. It keeps the plan's partitions as the unit of locality (a worker works
// through one partition at a time, in order) but not as the unit of work: claims are
// sized by each worker's measured rate, so that no worker, however slow, holds frames the
// others could have computed when the run would otherwise end.
//
// Policy (guided self-scheduling weighted by rate):
//   - A worker first finishes ranges that a failed GPU worker gave back, then claims from
//     the partition it owns; when that is exhausted it takes the next partition nobody has
//     started, and when none is left it shares the partition with the most unclaimed
//     frames (claims come from the same cursor, so frames stay contiguous).
//   - A worker whose rate is not yet known claims its first claim size (a CPU worker one
//     tile, a GPU worker one device tile). Afterwards a claim is what the worker computes
//     in half the predicted remaining time of the run (unclaimed frames / the summed rate
//     of the workers taking work), but at most its claim time (maxClaimTime for a CPU
//     worker, gpuClaimTime for a GPU worker, whose pipeline drains at the end of each
//     claim), for a CPU worker at most maxClaimBytes of frames, at least one frame,
//     rounded down to whole tiles when larger than one. Near the end claims
//     shrink, so all workers finish within about one small claim of each other; the cap
//     lets a worker that becomes ready late (a GPU worker after its start-up) find work.
//   - A worker takes work only once it is ready (created); one that never becomes ready
//     holds nothing.
//   - When nothing is left to claim but claims are still in flight, an idle worker waits:
//     a failing GPU worker may give its claim back.
//
// The scheduler is driven by the engine with wall-clock durations and by tests with a
// simulated clock; it does no I/O and starts no goroutine.
type scheduler struct {
	mu        sync.Mutex
	wake      sync.Cond // signalled when a claim is given back, the last one ends, or on stop
	inflight  int       // claims handed out and not yet finished or given back
	stopped   bool
	over      chan struct{} // closed when every frame is computed or on stop
	parts     []planner.Partition
	next      []int // per partition: its first unclaimed frame
	fresh     int   // the first partition no worker has started
	retry     []claim
	own       []int // per worker: the partition it works through (-1: none)
	sizing    []claimSizing
	rate      []float64 // per worker: frames per second, 0 while unknown
	ready     []bool
	unclaimed int // frames in partitions not yet claimed (retries not included)
	tile      int
}

// maxClaimTime bounds the time a CPU worker's claim is sized for: 10 ms is 50 MB at
// 5 GB/s, while the claim overhead (a mutex, a Process call) stays below 0.1%.
const maxClaimTime = 10 * time.Millisecond

// maxClaimBytes bounds a CPU worker's claims in native frame bytes: a worker reading a
// memory-mapped file in place drops the claim's pages when it is done, so the process's
// resident memory stays within about workers × maxClaimBytes, however fast the masks
// are (a point mask computes gigabytes in 10 ms).
const maxClaimBytes = 32 << 20

// gpuClaimTime bounds a GPU worker's claims: its pipeline of DMA, kernels and result
// copies drains at the end of each, so they are kept at many tiles of the device.
const gpuClaimTime = 100 * time.Millisecond

// claimSizing is how one worker's claims are sized.
type claimSizing struct {
	first     int // frames of the first claim, before the worker's rate is known
	maxTime   time.Duration
	maxFrames int // 0: no bound but time
}

// claim is a frame range handed to one worker.
type claim struct {
	planner.Partition
	// credit is the frames of this range that a failed attempt already reported to
	// progress (they are not counted again).
	credit int
}

// newScheduler returns the scheduler of the partitions for workers sized as given
// (first claims of at least one frame), with claims rounded to tiles of tile frames.
func newScheduler(parts []planner.Partition, sizing []claimSizing, tile int) *scheduler {
	workers := len(sizing)
	s := &scheduler{
		parts:  parts,
		next:   make([]int, len(parts)),
		own:    make([]int, workers),
		sizing: sizing,
		rate:   make([]float64, workers),
		ready:  make([]bool, workers),
		tile:   max(tile, 1),
	}
	for i, p := range parts {
		s.next[i] = p.Start
		s.unclaimed += p.Frames()
	}
	for i := range s.own {
		s.own[i] = -1
	}
	s.wake.L = &s.mu
	s.over = make(chan struct{})
	return s
}

// endLocked closes over once.
func (s *scheduler) endLocked() {
	select {
	case <-s.over:
	default:
		close(s.over)
	}
}

// The outcomes of tryTake.
const (
	claimed  = iota // a claim is returned
	wait            // nothing to claim now, but claims in flight may be given back
	finished        // every frame is computed, or the scheduler was stopped
)

// setReady marks worker w as taking work.
func (s *scheduler) setReady(w int) {
	s.mu.Lock()
	s.ready[w] = true
	s.mu.Unlock()
}

// take returns worker w's next claim, waiting while nothing is left to claim but claims
// are in flight; ok is false when every frame is computed or the scheduler was stopped.
func (s *scheduler) take(w int) (c claim, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		c, st := s.tryTakeLocked(w)
		switch st {
		case claimed:
			return c, true
		case finished:
			return claim{}, false
		}
		s.wake.Wait()
	}
}

// tryTake is take without waiting.
func (s *scheduler) tryTake(w int) (claim, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tryTakeLocked(w)
}

func (s *scheduler) tryTakeLocked(w int) (claim, int) {
	if s.stopped {
		return claim{}, finished
	}
	if len(s.retry) > 0 {
		c := s.retry[0]
		s.retry = s.retry[1:]
		s.inflight++
		return c, claimed
	}
	p := s.own[w]
	if p < 0 || s.next[p] == s.parts[p].End {
		p = s.pick()
		s.own[w] = p
		if p < 0 {
			if s.inflight > 0 {
				return claim{}, wait
			}
			return claim{}, finished
		}
	}
	n := min(s.size(w), s.parts[p].End-s.next[p])
	c := claim{Partition: planner.Partition{Start: s.next[p], End: s.next[p] + n}}
	s.next[p] += n
	s.unclaimed -= n
	s.inflight++
	return c, claimed
}

// pick returns the partition for a worker whose own is exhausted: the next fresh one,
// else the one with the most unclaimed frames, else -1.
func (s *scheduler) pick() int {
	if s.fresh < len(s.parts) {
		s.fresh++
		return s.fresh - 1
	}
	best, most := -1, 0
	for i := range s.parts {
		if left := s.parts[i].End - s.next[i]; left > most {
			best, most = i, left
		}
	}
	return best
}

// size is the frames of worker w's next claim (see the type's doc).
func (s *scheduler) size(w int) int {
	r := s.rate[w]
	if r <= 0 {
		return max(s.sizing[w].first, 1)
	}
	var sum, known float64
	var unknown int
	for i, ri := range s.rate {
		switch {
		case !s.ready[i]:
		case ri > 0:
			sum += ri
			known++
		default:
			unknown++
		}
	}
	if known == 0 {
		return max(s.sizing[w].first, 1)
	}
	sum += float64(unknown) * sum / known // a ready worker without a rate yet: the mean
	n := int(r * min(float64(s.unclaimed)/sum/2, s.sizing[w].maxTime.Seconds()))
	if mf := s.sizing[w].maxFrames; mf > 0 {
		n = min(n, mf)
	}
	if n > s.tile {
		n -= n % s.tile
	}
	return max(n, 1)
}

// done records that worker w computed claim c in elapsed.
func (s *scheduler) done(w int, c claim, elapsed time.Duration) {
	r := float64(c.Frames()) / max(elapsed.Seconds(), 1e-9)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rate[w] == 0 {
		s.rate[w] = r
	} else {
		s.rate[w] = (s.rate[w] + r) / 2
	}
	s.inflight--
	if s.inflight == 0 {
		s.wake.Broadcast()
		if s.unclaimed == 0 && len(s.retry) == 0 {
			s.endLocked()
		}
	}
}

// giveBack queues claim c, failed by worker w, for the other workers; w takes no more
// work.
func (s *scheduler) giveBack(w int, c claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry = append(s.retry, c)
	s.ready[w] = false
	s.rate[w] = 0
	s.inflight--
	s.wake.Broadcast()
}

// stop makes every take return ok == false (the run is cancelled).
func (s *scheduler) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.wake.Broadcast()
	s.endLocked()
}

// retire marks worker w as taking no more work.
func (s *scheduler) retire(w int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready[w] = false
	s.rate[w] = 0
}
