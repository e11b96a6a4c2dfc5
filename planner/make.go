package planner

import (
	"fmt"
	"strings"

	"github.com/stemdot/stemdot/affinity"
)

// Shape is the dataset's extent as the planner needs it.
type Shape struct {
	// NumFrames is the number of frames (scan positions, prod(nav_shape)).
	NumFrames int
	// SigY and SigX are the frame's sig_shape in pixels.
	SigY, SigX int
	// DTypeSize is the bytes of one stored pixel; NMasks the masks of the job and Sparse
	// whether they are applied in CSR form. With NMasks > 0, "auto" GPU plans are chosen
	// by speed (see Predict); 0 leaves them sized by GPU memory and free cores alone.
	DTypeSize int
	NMasks    int
	Sparse    bool
}

// Make plans workers and partitions for the topology topo, the GPUs gpus (from
// affinity.DiscoverGPUs or ParseGPUInventory) and the request req; shape nil plans no
// partitions.
//
// Workers: the usable cores are the first topo.Usable cores (by Key). GPU workers come
// first, spread over their GPUs before stacking (gpu0, gpu1, gpu0, gpu1, ...); each
// reserves one usable core not taken by req.CPUList, preferring cores in its GPU's
// CPUAffinity and then the lowest Key, and is pinned on that core's first CPU. GPUAuto
// fits the cores: it plans at most as many GPU workers as there are usable cores free
// of req.CPUList and of req.CPUs (an explicit CPU worker count), dropping stacked
// workers first (16 cores and 8 GPUs of up to 4 workers each give 2 per GPU); with a shape
// that names its masks (Shape.NMasks), it keeps as many of those as the speed model
// predicts fastest (Shape.Predict; a note in Warnings when fewer). CPU
// workers take the remaining usable cores in Key order (pinned on each core's first
// CPU; none, with a warning, when the GPU workers took them all), or the listed CPUs.
// With req.Oversubscribe, CPU workers beyond the free usable cores go to cores beyond
// the quota, then to SMT siblings, then to cores reserved by GPU workers, then round
// again. Worker IDs are their index.
//
// Partitions: contiguous frame ranges covering [0, NumFrames), their sizes differing by
// at most one frame. With at least as many frames as workers, their count is
// ceil(NumFrames*SigY*SigX*4 / PartitionBytes) rounded up to a multiple of the worker
// count (at least one per worker) but never above NumFrames: then the largest multiple
// of the worker count that fits. With fewer frames than workers there are NumFrames
// partitions of one frame. A partition holds at least one frame, however small
// PartitionBytes is.
//
// Errors name the problem in the request's terms: an invalid topology, request or
// shape; no workers; GPU workers without CUDA support, without GPUs, on invisible GPU
// indices, or more than free cores (an explicit GPU count or list); automatic GPU
// workers without GPU memory for one worker or without a free core; a listed CPU that
// is not allowed; more workers than usable cores, or listed CPUs beyond them, without
// Oversubscribe.
func Make(topo *affinity.Topology, gpus []affinity.GPU, req Request, shape *Shape) (*Plan, error) {
	if err := checkTopology(topo); err != nil {
		return nil, err
	}
	if err := req.check(); err != nil {
		return nil, err
	}
	p := &Plan{CoresUsable: topo.Usable}
	usable := topo.Cores[:topo.Usable]

	// Cores taken by an explicit CPU list are not free for GPU workers.
	listed := make(map[int]bool, len(req.CPUList))
	coreOf := cpuCores(topo)
	for _, cpu := range req.CPUList {
		c, ok := coreOf[cpu]
		if !ok {
			return nil, fmt.Errorf("planner: CPU %d is not allowed; allowed CPUs: %s", cpu, formatIDs(topo.Allowed))
		}
		listed[c.Key] = true
	}
	var free []affinity.Core
	for _, c := range usable {
		if !listed[c.Key] {
			free = append(free, c)
		}
	}

	noGPU := "" // why "auto" found no GPU
	if req.GPUAuto && (!req.CUDA || len(gpus) == 0) {
		noGPU = map[bool]string{false: "this build of stemdot has no CUDA support", true: "no GPU was found"}[req.CUDA]
		p.Warnings = append(p.Warnings, "gpus auto: "+noGPU+": CPU workers only")
		req.GPUAuto = false
	}
	gpuOrder, err := gpuWorkers(gpus, req, len(free), len(usable))
	if err != nil {
		return nil, err
	}
	if req.GPUAuto && shape != nil && shape.NMasks > 0 {
		gpuOrder = fastestGPUPrefix(*shape, req, gpuOrder, len(free), len(usable), &p.Warnings)
	}

	// GPU workers reserve free usable cores.
	if len(gpuOrder) > len(free) {
		return nil, fmt.Errorf("planner: %d GPU workers requested but only %s for them (%d usable, %d taken by the CPU list); each GPU worker needs a core of its own",
			len(gpuOrder), freeCores(len(free)), len(usable), len(usable)-len(free))
	}
	var reserved []affinity.Core
	for _, g := range gpuOrder {
		i := pickCore(free, g.CPUAffinity)
		if i < 0 {
			i = 0
			if len(g.CPUAffinity) > 0 {
				p.Warnings = append(p.Warnings, fmt.Sprintf(
					"GPU worker on GPU %d: no free core in the GPU's CPU affinity (CPUs %s), reserved core %d instead",
					g.Index, formatIDs(g.CPUAffinity), free[i].Key))
			}
		}
		c := free[i]
		free = append(free[:i:i], free[i+1:]...)
		reserved = append(reserved, c)
		p.Workers = append(p.Workers, Worker{Kind: GPU, Core: c.Key, CPU: c.CPUs[0], GPU: g.Index})
	}

	// CPU workers.
	var cpus []Worker
	switch {
	case req.NoCPU:
	case len(req.CPUList) > 0:
		cpus, err = listWorkers(topo, coreOf, req, len(gpuOrder), &p.Warnings)
	case req.CPUs > 0:
		cpus, err = countWorkers(topo, req, free, reserved, &p.Warnings)
	case len(free) == 0:
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"no CPU workers: the %d GPU workers reserve all %d usable cores", len(gpuOrder), len(usable)))
	default:
		cpus, err = countWorkers(topo, req, free, reserved, &p.Warnings)
	}
	if err != nil {
		return nil, err
	}
	p.Workers = append(p.Workers, cpus...)
	if len(p.Workers) == 0 {
		if noGPU != "" {
			return nil, fmt.Errorf("planner: no workers: option gpus auto uses no GPU here (%s), and option cpus 0 leaves nothing to run on: give option cpus 1 or more", noGPU)
		}
		return nil, fmt.Errorf("planner: no workers: the request asks for no CPU worker (option cpus 0) and no GPU worker: give option cpus or option gpus")
	}
	for i := range p.Workers {
		p.Workers[i].ID = i
	}

	if shape != nil {
		if p.Partitions, p.FrameBytes, err = partitions(*shape, len(p.Workers), req.partitionBytes()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkTopology refuses a topology the planner cannot place workers on.
func checkTopology(topo *affinity.Topology) error {
	if topo == nil {
		return fmt.Errorf("planner: no topology")
	}
	if topo.Usable < 1 || topo.Usable > len(topo.Cores) {
		return fmt.Errorf("planner: topology has %d usable of %d cores; want 1 to %d", topo.Usable, len(topo.Cores), len(topo.Cores))
	}
	for _, c := range topo.Cores {
		if len(c.CPUs) == 0 {
			return fmt.Errorf("planner: topology core %d has no allowed CPU", c.Key)
		}
	}
	return nil
}

// gpuWorkers lists the GPU of each requested GPU worker, in worker order: the GPUs
// take turns (round-robin in order of first mention, or inventory order) until each
// has its count. free is the number of usable cores not taken by the CPU list, of
// usable: GPUAuto plans at most that many workers, less req.CPUs without a CPU list.
func gpuWorkers(gpus []affinity.GPU, req Request, free, usable int) ([]affinity.GPU, error) {
	if req.GPUs == 0 && len(req.GPUList) == 0 && !req.GPUAuto {
		return nil, nil
	}
	if !req.CUDA {
		return nil, fmt.Errorf("planner: GPU workers requested, but stemdot was built without CUDA support")
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("planner: GPU workers requested, but no GPU was found")
	}
	pos := make(map[int]int, len(gpus))
	visible := make([]int, len(gpus))
	for i, g := range gpus {
		if _, dup := pos[g.Index]; dup {
			return nil, fmt.Errorf("planner: GPU inventory lists GPU index %d twice", g.Index)
		}
		pos[g.Index] = i
		visible[i] = g.Index
	}

	var order []int // positions in gpus, in order of first mention
	counts := make(map[int]int, len(gpus))
	limit := -1 // the most GPU workers; -1: no limit
	switch {
	case len(req.GPUList) > 0:
		for _, id := range req.GPUList {
			i, ok := pos[id]
			if !ok {
				return nil, fmt.Errorf("planner: GPU %d is not visible; visible GPUs: %s", id, joinInts(visible))
			}
			if counts[i] == 0 {
				order = append(order, i)
			}
			counts[i]++
		}
	case req.GPUAuto:
		ram := req.RAMPerGPUWorker
		if ram == 0 {
			ram = DefaultRAMPerGPUWorker
		}
		perGPU := req.MaxWorkersPerGPU
		if perGPU == 0 {
			perGPU = DefaultMaxWorkersPerGPU
		}
		var have []string
		for i, g := range gpus {
			have = append(have, fmt.Sprintf("GPU %d: %s", g.Index, formatBytes(g.FreeBytes)))
			if n := int(min(uint64(perGPU), g.FreeBytes/ram)); n > 0 {
				order = append(order, i)
				counts[i] = n
			}
		}
		if len(order) == 0 {
			return nil, fmt.Errorf("planner: gpus auto: no GPU has the %s of free memory one GPU worker needs (free: %s); lower option ram_per_gpu_worker or ask for a GPU count", formatBytes(ram), strings.Join(have, ", "))
		}
		switch {
		case len(req.CPUList) > 0 && free == 0:
			return nil, fmt.Errorf("planner: gpus auto: no core left for a GPU worker: the CPU list takes all %d usable cores", usable)
		case len(req.CPUList) > 0:
			limit = free
		case req.CPUs >= free:
			return nil, fmt.Errorf("planner: gpus auto: no core left for a GPU worker: %d CPU workers requested on %d usable cores", req.CPUs, usable)
		default:
			limit = free - req.CPUs
		}
	default:
		for i := range gpus {
			if n := req.GPUs/len(gpus) + btoi(i < req.GPUs%len(gpus)); n > 0 {
				order = append(order, i)
				counts[i] = n
			}
		}
	}

	var workers []affinity.GPU
	for len(counts) > 0 && len(workers) != limit {
		for _, i := range order {
			if counts[i] > 0 && len(workers) != limit {
				workers = append(workers, gpus[i])
				if counts[i]--; counts[i] == 0 {
					delete(counts, i)
				}
			}
		}
	}
	return workers, nil
}

// fastestGPUPrefix returns the first G of the GPU workers that "auto" allows (in their
// round-robin order over the GPUs) with G chosen by the speed model: the shortest
// predicted run, fewer GPU workers unless more are at least 2% faster. A choice of fewer
// than allowed is noted in warnings.
func fastestGPUPrefix(s Shape, req Request, order []affinity.GPU, free, usable int, warnings *[]string) []affinity.GPU {
	cpuWorkers := func(g int) int {
		switch {
		case req.NoCPU:
			return 0
		case len(req.CPUList) > 0:
			return len(req.CPUList)
		case req.CPUs > 0:
			return req.CPUs
		}
		return free - g
	}
	gpuOf := make([]int, len(order))
	for i, g := range order {
		gpuOf[i] = g.Index
	}
	best, bestT, allT, err := s.FastestGPUCount(DefaultRates(), gpuOf, cpuWorkers, usable)
	if err != nil { // the default rates are complete and order is not empty
		return order
	}
	if best < len(order) {
		*warnings = append(*warnings, fmt.Sprintf("gpus auto: %d of the %d GPU workers that fit, by speed: predicted %.3g s, %.3g s with all (%d masks, %s of frames)",
			best, len(order), bestT.Seconds(), allT.Seconds(), s.NMasks, formatBytes(uint64(s.bytes()))))
	}
	return order[:best]
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pickCore is the index of the first core in cores with a CPU in affinity, -1 if none.
func pickCore(cores []affinity.Core, affinity []int) int {
	near := make(map[int]bool, len(affinity))
	for _, cpu := range affinity {
		near[cpu] = true
	}
	for i, c := range cores {
		for _, cpu := range c.CPUs {
			if near[cpu] {
				return i
			}
		}
	}
	return -1
}
