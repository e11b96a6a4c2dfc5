package planner

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/affinity"
)

// Defaults of a Request's zero fields.
const (
	// DefaultPartitionBytes is the target partition size in decoded float32 bytes
	// (LiberTEM's default partition size, 512 MiB).
	DefaultPartitionBytes = 512 << 20
	// DefaultRAMPerGPUWorker is the GPU memory reserved for one GPU worker by GPUAuto
	// (4 GiB).
	DefaultRAMPerGPUWorker = 4 << 30
	// DefaultMaxWorkersPerGPU caps the GPU workers per GPU under GPUAuto.
	DefaultMaxWorkersPerGPU = 4
)

// Request is what the user asks for, following the forms of LiberTEM's
// Context.make_with(cpus=..., gpus=...). The zero Request is the default plan: one CPU
// worker on every usable physical core and no GPU worker.
//
// CPU workers: NoCPU asks for none (allowed only with GPU workers); CPUList pins one
// worker on each listed logical CPU id (it overrides CPUs); CPUs > 0 asks for that many
// workers on distinct physical cores; otherwise every usable core not reserved by a GPU
// worker gets one.
//
// GPU workers: GPUList puts one worker per entry on that GPU index (repeats allowed,
// "0,0" = two workers on GPU 0; it overrides GPUs); GPUs > 0 asks for that many, spread
// round-robin over the visible GPUs; GPUAuto puts up to min(MaxWorkersPerGPU,
// floor(FreeBytes/RAMPerGPUWorker)) workers on every visible GPU, as many as the free
// usable cores allow (see Make), and excludes GPUs and GPUList. Each GPU worker
// reserves one physical core.
type Request struct {
	// CPUs is the number of CPU workers; 0 means the default.
	CPUs int
	// CPUList are logical CPU ids, one CPU worker pinned on each, in this order.
	CPUList []int
	// NoCPU asks for no CPU worker.
	NoCPU bool

	// GPUs is the number of GPU workers; 0 means none.
	GPUs int
	// GPUList are GPU indices (affinity.GPU.Index), one GPU worker on each entry.
	GPUList []int
	// GPUAuto sizes the GPU workers per GPU from its free memory and the free cores.
	GPUAuto bool
	// RAMPerGPUWorker is the GPU memory in bytes one worker needs under GPUAuto; 0 means
	// DefaultRAMPerGPUWorker.
	RAMPerGPUWorker uint64
	// MaxWorkersPerGPU caps the workers per GPU under GPUAuto; 0 means
	// DefaultMaxWorkersPerGPU.
	MaxWorkersPerGPU int

	// Oversubscribe allows CPU workers beyond the usable cores (more workers than usable
	// cores, or listed CPUs outside them); the plan then carries a warning.
	Oversubscribe bool
	// PartitionBytes is the target partition size in decoded float32 bytes; 0 means
	// DefaultPartitionBytes.
	PartitionBytes int64
	// CUDA tells whether this build can run GPU workers; GPU workers are refused without.
	CUDA bool
}

// ParseCPUs sets the CPU worker fields of r from a command-line value (the CLI's
// --cpus, the C ABI's and Python's cpus) and clears the others: "N" asks for N CPU
// workers ("0" = none, NoCPU), a list "0,2,5-7" pins workers on those logical CPU ids
// (ranges inclusive; one id alone is written "5," or "5-5" since "5" is a count). Ids
// may not repeat. An empty value or an empty list item ("0,,1", ",1") is an error; one
// trailing comma is not.
func (r *Request) ParseCPUs(s string) error {
	count, list, err := parseCountOrList(s, "cpus", "a count (4) or a list of CPU ids (0,2,5-7)")
	if err != nil {
		return err
	}
	seen := make(map[int]bool, len(list))
	for _, id := range list {
		if seen[id] {
			return fmt.Errorf("planner: cpus %q names CPU %d twice", s, id)
		}
		seen[id] = true
	}
	r.CPUs, r.CPUList, r.NoCPU = count, list, list == nil && count == 0
	return nil
}

// ParseGPUs sets the GPU worker fields of r from a command-line value (the CLI's
// --gpus, the C ABI's and Python's gpus) and clears the others: "auto" sets GPUAuto,
// "N" asks for N GPU workers ("0" = none), a list "0,0,1" or "0-1" puts one worker on
// each entry's GPU index (repeats allowed; one index alone is written "1,"). Empty
// values and items are errors as for ParseCPUs.
func (r *Request) ParseGPUs(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		r.GPUs, r.GPUList, r.GPUAuto = 0, nil, true
		return nil
	}
	count, list, err := parseCountOrList(s, "gpus", `"auto", a count (2) or a list of GPU indices (0,0,1)`)
	if err != nil {
		return err
	}
	r.GPUs, r.GPUList, r.GPUAuto = count, list, false
	return nil
}

// parseCountOrList parses "N" into a count or "a,b,c-d" into a list of non-negative ids
// (list nil for a count); one trailing comma is allowed, other empty items are not.
// option names the request in errors ("cpus"), forms says what it accepts.
func parseCountOrList(s, option, forms string) (count int, list []int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil, fmt.Errorf("planner: %s is empty; want %s", option, forms)
	}
	if !strings.ContainsAny(s, ",-") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, nil, fmt.Errorf("planner: %s %q: want %s", option, s, forms)
		}
		if n > affinity.MaxCPUs {
			return 0, nil, fmt.Errorf("planner: %s %q: at most %d workers", option, s, affinity.MaxCPUs)
		}
		return n, nil, nil
	}
	for i, item := range strings.Split(strings.TrimSuffix(s, ","), ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return 0, nil, fmt.Errorf("planner: %s %q: item %d is empty; want ids or ranges a-b separated by single commas (one id alone: \"5,\")", option, s, i+1)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		first, err1 := strconv.Atoi(strings.TrimSpace(lo))
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || first < 0 || last < first {
			return 0, nil, fmt.Errorf("planner: %s %q: bad item %q; want an id or an ascending range a-b", option, s, item)
		}
		if last >= affinity.MaxCPUs || len(list)+last-first >= affinity.MaxCPUs {
			return 0, nil, fmt.Errorf("planner: %s %q: item %q: ids and workers are limited to %d", option, s, item, affinity.MaxCPUs)
		}
		for id := first; id <= last; id++ {
			list = append(list, id)
		}
	}
	return 0, list, nil
}

// byteUnits are the size suffixes ParseBytes accepts (case-insensitive): decimal SI and
// binary IEC multiples of bytes.
var byteUnits = map[string]float64{
	"b":  1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseBytes parses a positive size: a plain number of bytes ("512"), or a number with a
// unit: "141GB" (decimal: KB, MB, GB, TB = 10^3..10^12), "80GiB" (binary: KiB, MiB, GiB,
// TiB = 2^10..2^40), "512B"; fractions are allowed ("1.5GiB") and rounded down to whole
// bytes. Units are case-insensitive. A size below 1 byte is an error.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	number, unit := t, "b"
	if i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }); i >= 0 {
		number, unit = t[:i], strings.TrimSpace(t[i:])
	}
	scale, ok := byteUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("planner: size %q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, or none for bytes)", s, unit)
	}
	v, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return 0, fmt.Errorf("planner: size %q: bad number %q", s, number)
	}
	b := math.Floor(v * scale)
	if b < 1 || b >= math.MaxUint64 {
		return 0, fmt.Errorf("planner: size %q out of range (1 byte to 16 EiB)", s)
	}
	return uint64(b), nil
}

// ParseGPUInventory describes GPUs from a command-line value, for planning for another
// machine: "2x141GB" is 2 GPUs with 141 GB free and total memory each; items may be
// joined by commas ("1x80GB,1x40GB"). Sizes are read by ParseBytes but need a unit
// ("2x141" is refused, not read as 141 bytes). The GPUs get indices 0, 1, ... in
// order, the name "described GPU", and unknown CPU affinity.
func ParseGPUInventory(s string) ([]affinity.GPU, error) {
	var gpus []affinity.GPU
	for item := range strings.SplitSeq(s, ",") {
		count, size, ok := strings.Cut(strings.TrimSpace(item), "x")
		k, err := strconv.Atoi(count)
		if !ok || err != nil || k < 1 {
			return nil, fmt.Errorf("planner: GPU inventory %q: item %q is not COUNTxSIZE (e.g. 2x141GB)", s, item)
		}
		if strings.TrimRight(size, "0123456789. ") == "" {
			return nil, fmt.Errorf("planner: GPU inventory %q: size %q has no unit (e.g. 141GB or 80GiB)", s, size)
		}
		bytes, err := ParseBytes(size)
		if err != nil {
			return nil, fmt.Errorf("planner: GPU inventory %q: %w", s, err)
		}
		for range k {
			gpus = append(gpus, affinity.GPU{
				Index: len(gpus), Name: "described GPU", TotalBytes: bytes, FreeBytes: bytes,
			})
		}
	}
	return gpus, nil
}

// DescribedTopology is a machine of the given number of physical cores without SMT,
// all allowed and without CPU quota: core i has Key i and the single CPU i, on package
// 0 and an unknown NUMA node. It lets Make plan for a described machine; cores < 1
// gives an empty topology, which Make refuses.
func DescribedTopology(cores int) *affinity.Topology {
	topo := &affinity.Topology{}
	for i := range max(cores, 0) {
		topo.Allowed = append(topo.Allowed, i)
		topo.Cores = append(topo.Cores, affinity.Core{Key: i, CoreID: i, Node: -1, CPUs: []int{i}})
	}
	topo.Usable = len(topo.Cores)
	return topo
}

// check refuses negative or contradictory request fields.
func (r Request) check() error {
	switch {
	case r.CPUs < 0:
		return fmt.Errorf("planner: %d CPU workers requested; want a count >= 0", r.CPUs)
	case r.GPUs < 0:
		return fmt.Errorf("planner: %d GPU workers requested; want a count >= 0", r.GPUs)
	case r.MaxWorkersPerGPU < 0:
		return fmt.Errorf("planner: option max_workers_per_gpu %d: want a count >= 0 (0: the default %d)", r.MaxWorkersPerGPU, DefaultMaxWorkersPerGPU)
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
