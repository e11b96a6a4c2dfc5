package planner

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/affinity"
)

// Shape is the dataset's extent as the planner needs it.
type Shape struct {
	// NumFrames is the number of frames (scan positions, prod(nav_shape)).
	NumFrames int
	// SigY and SigX are the frame's sig_shape in pixels.
	SigY, SigX int
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
// workers first (16 cores and 8 GPUs of up to 4 workers each give 2 per GPU). CPU
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

	if req.GPUAuto && (!req.CUDA || len(gpus) == 0) {
		p.Warnings = append(p.Warnings, map[bool]string{false: "gpus auto: this build has no CUDA support", true: "gpus auto: no GPU found"}[req.CUDA]+": CPU workers only")
		req.GPUAuto = false
	}
	gpuOrder, err := gpuWorkers(gpus, req, len(free), len(usable))
	if err != nil {
		return nil, err
	}

	// GPU workers reserve free usable cores.
	if len(gpuOrder) > len(free) {
		return nil, fmt.Errorf("planner: %d GPU workers requested but only %d usable cores are free for them (%d usable, %d taken by the CPU list); each GPU worker needs a core of its own",
			len(gpuOrder), len(free), len(usable), len(usable)-len(free))
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
		return nil, fmt.Errorf("planner: no workers: the request asks for no CPU worker (cpus 0) and no GPU worker")
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

// check refuses negative or contradictory request fields.
func (r Request) check() error {
	switch {
	case r.CPUs < 0:
		return fmt.Errorf("planner: %d CPU workers requested; want a count >= 0", r.CPUs)
	case r.GPUs < 0:
		return fmt.Errorf("planner: %d GPU workers requested; want a count >= 0", r.GPUs)
	case r.MaxWorkersPerGPU < 0:
		return fmt.Errorf("planner: at most %d GPU workers per GPU requested; want a count >= 0 (0: the default %d)", r.MaxWorkersPerGPU, DefaultMaxWorkersPerGPU)
	case r.PartitionBytes < 0:
		return fmt.Errorf("planner: partition size %d bytes requested; want a positive size (0: the default %s)", r.PartitionBytes, formatBytes(DefaultPartitionBytes))
	case r.NoCPU && r.CPUs > 0:
		return fmt.Errorf("planner: the request asks for no CPU worker and also for %d CPU workers", r.CPUs)
	case r.NoCPU && len(r.CPUList) > 0:
		return fmt.Errorf("planner: the request asks for no CPU worker and also for CPU workers on CPUs %s", joinInts(r.CPUList))
	case r.GPUAuto && r.GPUs > 0:
		return fmt.Errorf("planner: the request asks for automatic GPU workers (gpus auto) and also for %d GPU workers", r.GPUs)
	case r.GPUAuto && len(r.GPUList) > 0:
		return fmt.Errorf("planner: the request asks for automatic GPU workers (gpus auto) and also for GPU workers on GPUs %s", joinInts(r.GPUList))
	}
	seen := make(map[int]bool, len(r.CPUList))
	for _, id := range r.CPUList {
		if id < 0 {
			return fmt.Errorf("planner: CPU list %s: CPU id %d is negative", joinInts(r.CPUList), id)
		}
		if seen[id] {
			return fmt.Errorf("planner: CPU list %s names CPU %d twice", joinInts(r.CPUList), id)
		}
		seen[id] = true
	}
	return nil
}

func (r Request) partitionBytes() int64 {
	if r.PartitionBytes == 0 {
		return DefaultPartitionBytes
	}
	return r.PartitionBytes
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
			return nil, fmt.Errorf("planner: gpus auto: no GPU has the %s of free memory one GPU worker needs (free: %s); lower the memory per GPU worker (--ram-per-gpu-worker) or ask for a GPU count", formatBytes(ram), strings.Join(have, ", "))
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

// cpuCores maps each allowed CPU id of topo to its core's index in topo.Cores.
func cpuCores(topo *affinity.Topology) map[int]coreAt {
	m := make(map[int]coreAt, len(topo.Allowed))
	for i, c := range topo.Cores {
		for _, cpu := range c.CPUs {
			m[cpu] = coreAt{Core: c, index: i}
		}
	}
	return m
}

// coreAt is a core and its index in Topology.Cores.
type coreAt struct {
	affinity.Core
	index int
}

// listWorkers pins one CPU worker on each CPU of req.CPUList (all in coreOf, checked by
// Make), given nGPU GPU workers.
func listWorkers(topo *affinity.Topology, coreOf map[int]coreAt, req Request, nGPU int, warnings *[]string) ([]Worker, error) {
	var workers []Worker
	var beyond []int
	byCore := map[int][]int{}
	var coreOrder []int
	for _, cpu := range req.CPUList {
		c := coreOf[cpu]
		workers = append(workers, Worker{Kind: CPU, Core: c.Key, CPU: cpu, GPU: -1})
		if c.index >= topo.Usable {
			beyond = append(beyond, cpu)
		}
		if byCore[c.Key] == nil {
			coreOrder = append(coreOrder, c.Key)
		}
		byCore[c.Key] = append(byCore[c.Key], cpu)
	}
	var problems []string
	if total := len(workers) + nGPU; total > topo.Usable {
		problems = append(problems, fmt.Sprintf("%d workers (%d CPU, %d GPU) requested but only %d usable cores", total, len(workers), nGPU, topo.Usable))
	}
	if len(beyond) > 0 {
		problems = append(problems, fmt.Sprintf("CPUs %s lie on cores beyond the %d usable ones (CPU quota %g CPUs)", joinInts(beyond), topo.Usable, topo.Quota))
	}
	if problems != nil {
		problem := strings.Join(problems, "; ")
		if !req.Oversubscribe {
			return nil, fmt.Errorf("planner: %s; pass oversubscribe (--oversubscribe) to allow it", problem)
		}
		*warnings = append(*warnings, "oversubscribed: "+problem)
	}
	for _, key := range coreOrder {
		if cpus := byCore[key]; len(cpus) > 1 {
			*warnings = append(*warnings, fmt.Sprintf("CPUs %s share physical core %d (SMT siblings): their workers compete for one core", joinInts(cpus), key))
		}
	}
	return workers, nil
}

// countWorkers places req.CPUs CPU workers (one per free core when 0) on the free usable
// cores; with Oversubscribe, further workers go to the cores beyond the usable ones,
// then to SMT siblings, then to the cores reserved for GPU workers, then round again.
func countWorkers(topo *affinity.Topology, req Request, free, reserved []affinity.Core, warnings *[]string) ([]Worker, error) {
	n := req.CPUs
	if n == 0 {
		n = len(free)
	}
	if n > len(free) {
		problem := fmt.Sprintf("%d CPU workers requested but only %d usable cores are free (%d usable, %d reserved for GPU workers)",
			n, len(free), topo.Usable, len(reserved))
		if !req.Oversubscribe {
			return nil, fmt.Errorf("planner: %s; pass oversubscribe (--oversubscribe) to allow it", problem)
		}
		*warnings = append(*warnings, "oversubscribed: "+problem)
	}
	candidates := append(append(append([]affinity.Core{}, free...), topo.Cores[topo.Usable:]...), reserved...)
	var slots []Worker
	for sibling, added := 0, true; added; sibling++ {
		added = false
		for _, c := range candidates {
			if sibling < len(c.CPUs) {
				slots = append(slots, Worker{Kind: CPU, Core: c.Key, CPU: c.CPUs[sibling], GPU: -1})
				added = true
			}
		}
	}
	workers := make([]Worker, n)
	for i := range workers {
		workers[i] = slots[i%len(slots)]
	}
	return workers, nil
}

// partitions splits shape's frames for nWorkers workers at about target bytes of
// float32 frames per partition; it also returns the float32 bytes of one frame.
func partitions(shape Shape, nWorkers int, target int64) ([]Partition, int64, error) {
	if shape.NumFrames < 1 || shape.SigY < 1 || shape.SigX < 1 {
		return nil, 0, fmt.Errorf("planner: dataset shape %d frames of %dx%d pixels: want at least 1 frame of 1x1", shape.NumFrames, shape.SigY, shape.SigX)
	}
	if int64(shape.SigY) > math.MaxInt64/4/int64(shape.SigX) {
		return nil, 0, fmt.Errorf("planner: frame of %dx%d pixels is too large", shape.SigY, shape.SigX)
	}
	frameBytes := int64(shape.SigY) * int64(shape.SigX) * 4
	if int64(shape.NumFrames) > math.MaxInt64/frameBytes {
		return nil, 0, fmt.Errorf("planner: dataset of %d frames of %dx%d pixels is too large", shape.NumFrames, shape.SigY, shape.SigX)
	}
	total := int64(shape.NumFrames) * frameBytes
	frames := shape.NumFrames

	n := frames
	if frames >= nWorkers {
		n = int(min(total/target+btoi64(total%target != 0), int64(frames)))
		n = (n + nWorkers - 1) / nWorkers * nWorkers // at least nWorkers since n >= 1
		n = min(n, frames/nWorkers*nWorkers)
	}
	parts := make([]Partition, n)
	start := 0
	for i := range parts {
		end := start + frames/n + btoi(i < frames%n)
		parts[i] = Partition{Start: start, End: end}
		start = end
	}
	return parts, frameBytes, nil
}

func btoi64(b bool) int64 { return int64(btoi(b)) }

// joinInts writes ids as "0, 2, 5".
func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ", ")
}

// formatIDs writes ascending ids in Linux cpulist form ("0-3,8,10-11"); other orders
// are written item by item.
func formatIDs(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			fmt.Fprintf(&b, "-%d", ids[j])
		}
		i = j + 1
	}
	return b.String()
}

// formatBytes writes a byte count in GiB, MiB or KiB with one decimal, or in bytes.
func formatBytes(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
