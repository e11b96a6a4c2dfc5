package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/stemdot/stemdot/planner"
)

// Stats describe one ApplyMasks run.
type Stats struct {
	// Frames is the number of frames processed.
	Frames int
	// BytesRead is the native size of those frames in bytes (Frames × frame bytes, the
	// densified size for a sparse dataset); re-runs of retried partitions are not
	// counted again.
	BytesRead int64
	// Elapsed is the wall time of the run, from starting the workers to the end of the
	// last one.
	Elapsed time.Duration
	// Workers is the number of planned workers, CPUWorkers + GPUWorkers.
	Workers                int
	CPUWorkers, GPUWorkers int
	// FramesPerWorker[i] is the number of frames worker i (plan.Workers[i]) completed.
	FramesPerWorker []int
	// PerWorker[i] describes worker i (plan.Workers[i]).
	PerWorker []WorkerStats
	// Retried lists the frame ranges re-run by other workers after a GPU worker failed.
	Retried []RetriedPartition
	// NotStarted lists the GPU workers that could not be created (no device memory, a
	// frame dtype without GPU kernels, ...); the other workers took their share.
	NotStarted []WorkerError
	// Sparse tells whether the masks were applied in CSR form.
	Sparse bool
	// Gather tells whether the dataset's frames are sparse (dataset.SparseOf) and the
	// CPU workers read them as events and applied the masks as a gather over them
	// (gather.go; tiles of events too dense for it to pay off are densified); GPU
	// workers read them densified.
	Gather bool
	// NonFinite counts the NaN and infinite values of the result: frames holding NaN or
	// Inf under a mask's nonzero weights, or float32 sums beyond ±3.4e38 (which float64
	// results hold). They are written, not an error.
	NonFinite NonFinite
}

// NonFinite counts a result's NaN and infinite values.
type NonFinite struct {
	// Count is the number of NaN or infinite values, Inf those of them infinite.
	Count, Inf int
	// Frame and Mask locate the first one (when Count > 0).
	Frame, Mask int
}

// WorkerStats describe one worker of a run.
type WorkerStats struct {
	// ID is the worker's index in the plan; Kind, CPU and GPU are its plan entry.
	ID   int
	Kind planner.Kind
	CPU  int
	GPU  int
	// Ready tells whether the worker was created; ReadyAfter is the time from the start
	// of the run until it was (a GPU worker's start-up: CUDA context, masks, buffers).
	Ready      bool
	ReadyAfter time.Duration
	// Feed is how a GPU worker moved frames to its device: "mapped" (DMA from the
	// dataset's registered memory mapping, no CPU copy), "staged" (copied by CPU threads
	// into pinned buffers); "" for CPU workers.
	Feed string
	// Frames and Bytes (native frame bytes) are what the worker computed, in Claims
	// claims (frame ranges); Busy is the time it spent in them.
	Frames int
	Bytes  int64
	Claims int
	Busy   time.Duration
}

// GBPerSecond is the worker's throughput while busy, Bytes/Busy in 10⁹ bytes per second
// (0 when it computed nothing).
func (w WorkerStats) GBPerSecond() float64 {
	if w.Busy <= 0 {
		return 0
	}
	return float64(w.Bytes) / 1e9 / w.Busy.Seconds()
}

// String is a one-line account: "worker 3 (gpu 0, cpu 12, mapped): 4096 frames in 12
// claims, 0.537 GB at 41.2 GB/s, ready after 0.131 s".
func (w WorkerStats) String() string {
	var b strings.Builder
	if w.Kind == planner.GPU {
		fmt.Fprintf(&b, "worker %d (gpu %d, cpu %d", w.ID, w.GPU, w.CPU)
		if w.Feed != "" {
			b.WriteString(", " + w.Feed)
		}
		b.WriteString(")")
	} else {
		fmt.Fprintf(&b, "worker %d (cpu %d)", w.ID, w.CPU)
	}
	if !w.Ready {
		b.WriteString(": not started")
		return b.String()
	}
	fmt.Fprintf(&b, ": %d frames in %d claims, %.3f GB at %.1f GB/s, ready after %.3f s",
		w.Frames, w.Claims, float64(w.Bytes)/1e9, w.GBPerSecond(), w.ReadyAfter.Seconds())
	return b.String()
}

// RetriedPartition is a frame range that a GPU worker failed and other workers re-ran.
type RetriedPartition struct {
	Partition planner.Partition
	// Worker is the ID of the worker that failed it.
	Worker int
	// Err is the worker's error.
	Err error
}

// WorkerError is a worker's error.
type WorkerError struct {
	// Worker is the worker's ID (its index in the plan).
	Worker int
	Err    error
}

// GBPerSecond is BytesRead/Elapsed in 10⁹ bytes per second (0 when Elapsed is 0).
func (s Stats) GBPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.BytesRead) / 1e9 / s.Elapsed.Seconds()
}

// Summary is a one-line account of the run: frames, GB read (10⁹ bytes), seconds, GB/s,
// workers (cpu/gpu), and the GPU workers not started and partitions retried, if any.
func (s Stats) Summary() string {
	var b strings.Builder
	workers := "workers"
	if s.Workers == 1 {
		workers = "worker"
	}
	fmt.Fprintf(&b, "%d frames, %.3f GB in %.3f s (%.2f GB/s), %d %s (%d cpu, %d gpu)",
		s.Frames, float64(s.BytesRead)/1e9, s.Elapsed.Seconds(), s.GBPerSecond(), s.Workers, workers, s.CPUWorkers, s.GPUWorkers)
	if s.Sparse {
		b.WriteString(", sparse masks")
	}
	if s.Gather {
		b.WriteString(", gather over sparse frames")
	}
	for _, w := range s.NotStarted {
		fmt.Fprintf(&b, ", worker %d not started: %v", w.Worker, w.Err)
	}
	if len(s.Retried) > 0 {
		fmt.Fprintf(&b, ", %d frame ranges retried:", len(s.Retried))
		for i, r := range s.Retried {
			if i > 0 {
				b.WriteByte(';')
			}
			fmt.Fprintf(&b, " [%d, %d) after worker %d failed: %v", r.Partition.Start, r.Partition.End, r.Worker, r.Err)
		}
	}
	return b.String()
}
