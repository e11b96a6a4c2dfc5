// Package planner turns a machine's resources and a user's request into a Plan: the
// workers (each pinned to one physical core, CPU or GPU worker) and the partitions of the
// dataset: contiguous frame ranges of at least one frame each, whose count is a multiple
// of the worker count when there are at least as many frames as workers, and one
// partition per frame otherwise.
//
// The planner is a pure function of (topology, GPU inventory, request, dataset shape):
// it can plan for the machine it runs on or for a described one.
package planner

// Kind is a worker kind.
type Kind string

// Worker kinds.
const (
	CPU Kind = "cpu"
	GPU Kind = "gpu"
)

// Worker is one planned worker.
type Worker struct {
	// ID is the worker's index in Plan.Workers.
	ID int
	// Kind is CPU or GPU.
	Kind Kind
	// Core is the Key of the physical core the worker's thread is pinned to (for a GPU
	// worker: the core reserved for it).
	Core int
	// CPU is the logical CPU id the worker's thread is pinned to.
	CPU int
	// GPU is the device index for a GPU worker (-1 for a CPU worker).
	GPU int
}

// Partition is a contiguous range of frames [Start, End).
type Partition struct {
	Start, End int
}

// Frames is End-Start.
func (p Partition) Frames() int { return p.End - p.Start }

// Plan is the resource plan of one run: which workers run where, and how the dataset's
// frames are split into partitions that the workers pull from a shared queue.
type Plan struct {
	// CoresUsable is the number of physical cores this process may use (see
	// affinity.Topology.Usable).
	CoresUsable int
	// Workers are the planned workers, GPU workers first.
	Workers []Worker
	// Partitions cover frames [0, n_frames) in order, without gaps or overlap. Their count
	// is a multiple of len(Workers) when there are at least that many frames. Empty when
	// the plan was made without a dataset.
	Partitions []Partition
	// FrameBytes is the size of one frame decoded to float32 (sig_y*sig_x*4 bytes); 0
	// when the plan was made without a dataset.
	FrameBytes int64
	// Warnings say what the plan allowed but the user should know (oversubscription,
	// SMT siblings used as separate workers, ...).
	Warnings []string
}
