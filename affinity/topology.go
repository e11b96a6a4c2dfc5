// Package affinity tells what CPUs this process may really use and pins OS threads.
//
// It reads the allowed CPU set (sched_getaffinity) intersected with the online CPUs, the
// physical-core topology from sysfs (SMT siblings of one core count as one core), and the
// CPU quota from cgroups (v2 cpu.max, v1 cpu.cfs_quota_us/cpu.cfs_period_us). The usable
// core count is min(allowed physical cores, ceil(quota)).
//
// It reads Linux interfaces: sysfs, the cgroup file system, /proc/self and
// sched_getaffinity(2)/sched_setaffinity(2).
//
// Affinity belongs to an OS thread, not a goroutine: Pin locks the calling goroutine to
// its thread first, and a goroutine started from a pinned one runs unpinned.
package affinity

import (
	"fmt"
	"slices"
	"strings"
)

// Core is one physical core with at least one allowed CPU.
type Core struct {
	// Key identifies the core: the lowest CPU id in its thread_siblings_list, allowed or
	// not (the kernel lists online siblings only). core_id alone is not unique across
	// sockets.
	Key int
	// Package is physical_package_id (the socket); CoreID is core_id within it.
	Package, CoreID int
	// Node is the NUMA node (-1 when unknown).
	Node int
	// CPUs are the allowed, online logical CPU ids of this core (SMT siblings), ascending.
	CPUs []int
}

// Topology is what this process may use.
type Topology struct {
	// Allowed are the allowed and online logical CPU ids, ascending.
	Allowed []int
	// Cores are the physical cores with at least one allowed CPU, ordered by Key.
	Cores []Core
	// Quota is the cgroup CPU quota in CPUs (e.g. 1.5); 0 means no limit.
	Quota float64
	// QuotaFile is the cgroup file that set Quota ("" without a limit).
	QuotaFile string
	// Usable is min(len(Cores), ceil(Quota)) (len(Cores) without a quota).
	Usable int
}

// AllowedList writes the allowed CPUs in Linux cpulist form ("0-3,8").
func (t *Topology) AllowedList() string { return FormatCPUList(t.Allowed) }

// CoreOf returns the core holding the allowed CPU cpu; false when cpu is not allowed.
func (t *Topology) CoreOf(cpu int) (Core, bool) {
	for _, c := range t.Cores {
		if slices.Contains(c.CPUs, cpu) {
			return c, true
		}
	}
	return Core{}, false
}

// String describes the topology over several lines: the allowed CPUs and their count,
// the physical core count and how many have SMT siblings, the package and NUMA node
// counts with their ids, one line per core (its Key, CPUs, package, core_id, node), the
// CPU quota and the usable core count.
func (t *Topology) String() string {
	var packages, nodes []int
	smt := 0
	for _, c := range t.Cores {
		packages = append(packages, c.Package)
		if c.Node >= 0 {
			nodes = append(nodes, c.Node)
		}
		if len(c.CPUs) > 1 {
			smt++
		}
	}
	packages = slices.Compact(slices.Sorted(slices.Values(packages)))
	nodes = slices.Compact(slices.Sorted(slices.Values(nodes)))
	var b strings.Builder
	fmt.Fprintf(&b, "allowed CPUs: %s (%d CPUs)\n", FormatCPUList(t.Allowed), len(t.Allowed))
	fmt.Fprintf(&b, "physical cores: %d (%d of them with SMT siblings)\n", len(t.Cores), smt)
	fmt.Fprintf(&b, "packages: %d (ids %s)\n", len(packages), FormatCPUList(packages))
	if len(nodes) == 0 {
		b.WriteString("NUMA nodes: unknown\n")
	} else {
		fmt.Fprintf(&b, "NUMA nodes: %d (ids %s)\n", len(nodes), FormatCPUList(nodes))
	}
	for _, c := range t.Cores {
		node := "unknown"
		if c.Node >= 0 {
			node = fmt.Sprint(c.Node)
		}
		fmt.Fprintf(&b, "  core %d: CPUs %s (package %d, core_id %d, node %s)\n", c.Key, FormatCPUList(c.CPUs), c.Package, c.CoreID, node)
	}
	if t.Quota > 0 {
		fmt.Fprintf(&b, "CPU quota: %g CPUs (%s)\n", t.Quota, t.QuotaFile)
	} else {
		b.WriteString("CPU quota: none\n")
	}
	fmt.Fprintf(&b, "usable cores: %d", t.Usable)
	return b.String()
}
