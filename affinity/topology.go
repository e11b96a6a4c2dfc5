// Package affinity tells what CPUs this process may really use and pins OS threads.
//
// It reads the allowed CPU set (sched_getaffinity) intersected with the online CPUs, the
// physical-core topology from sysfs (SMT siblings of one core count as one core), and the
// CPU quota from cgroups (v2 cpu.max, v1 cpu.cfs_quota_us/cpu.cfs_period_us). The usable
// core count is min(allowed physical cores, ceil(quota)).
//
// Affinity belongs to an OS thread, not a goroutine: Pin locks the calling goroutine to
// its thread first, and a goroutine started from a pinned one runs unpinned.
package affinity

// Core is one physical core with at least one allowed CPU.
type Core struct {
	// Key identifies the core: the lowest CPU id among all its SMT siblings (allowed or
	// not). core_id alone is not unique across sockets.
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
	// Usable is min(len(Cores), ceil(Quota)) (len(Cores) without a quota).
	Usable int
}
