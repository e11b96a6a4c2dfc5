package affinity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Source says where DetectFrom reads the machine's description; tests point it at fake
// trees.
type Source struct {
	// SysRoot is the sysfs mount ("/sys"): the online CPUs come from
	// <SysRoot>/devices/system/cpu/online, the topology from
	// <SysRoot>/devices/system/cpu/cpuN/topology and the NUMA nodes from
	// <SysRoot>/devices/system/node/nodeK/cpulist.
	SysRoot string
	// CgroupRoot is the cgroup file system mount ("/sys/fs/cgroup"); empty skips the CPU
	// quota.
	CgroupRoot string
	// ProcCgroup is the contents of /proc/self/cgroup or the path of such a file; empty
	// skips the CPU quota.
	ProcCgroup string
	// Allowed are the CPUs this process may run on; nil means the process's real affinity
	// (sched_getaffinity of its threads).
	Allowed []int
}

// Detect describes the CPUs this process may use on this machine: DetectFrom with /sys,
// /sys/fs/cgroup, /proc/self/cgroup and the process's affinity.
func Detect() (*Topology, error) {
	return DetectFrom(Source{SysRoot: "/sys", CgroupRoot: "/sys/fs/cgroup", ProcCgroup: "/proc/self/cgroup"})
}

// DetectFrom describes the CPUs a process may use according to src:
//   - Allowed: src.Allowed (or the process's affinity) intersected with the online CPUs;
//     an empty intersection is an error;
//   - Cores: the allowed CPUs grouped into physical cores by thread_siblings_list, each
//     keyed by its lowest sibling, with physical_package_id, core_id and NUMA node. A CPU
//     without sysfs topology files (as in some containers) is a core of its own in
//     package 0 with core_id = its CPU id; a CPU in no node's cpulist has Node -1;
//   - Quota: the smallest cgroup CPU limit on the process's cgroup and its ancestors
//     (v2 cpu.max, v1 cpu.cfs_quota_us/cpu.cfs_period_us), in CPUs;
//   - Usable: min(len(Cores), ceil(Quota)).
//
// A missing online file means every allowed CPU is online. Malformed files give an
// error naming the file.
func DetectFrom(src Source) (*Topology, error) {
	allowed := src.Allowed
	if allowed == nil {
		var err error
		if allowed, err = processCPUs(); err != nil {
			return nil, err
		}
	}
	if len(allowed) == 0 {
		return nil, errors.New("the allowed CPU set is empty")
	}
	if c := slices.Min(allowed); c < 0 {
		return nil, fmt.Errorf("allowed CPU %d is not a CPU id (a non-negative integer)", c)
	}
	requested := FormatCPUList(allowed)
	allowed = slices.Compact(slices.Sorted(slices.Values(allowed)))
	cpuDir := filepath.Join(src.SysRoot, "devices", "system", "cpu")

	online, found, err := readCPUListFile(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, err
	}
	if found {
		allowed = slices.DeleteFunc(allowed, func(c int) bool { return !slices.Contains(online, c) })
		if len(allowed) == 0 {
			return nil, fmt.Errorf("none of the allowed CPUs %s is online (online: %s)", requested, FormatCPUList(online))
		}
	}

	nodes, err := readNUMANodes(filepath.Join(src.SysRoot, "devices", "system", "node"))
	if err != nil {
		return nil, err
	}
	topo := &Topology{Allowed: allowed}
	for _, c := range allowed {
		core, err := readCore(cpuDir, c)
		if err != nil {
			return nil, err
		}
		i, have := slices.BinarySearchFunc(topo.Cores, core.Key, func(c Core, key int) int { return c.Key - key })
		if !have {
			core.Node = -1
			if n, ok := nodes[c]; ok {
				core.Node = n
			}
			topo.Cores = slices.Insert(topo.Cores, i, core)
			continue
		}
		if have := topo.Cores[i]; have.Package != core.Package || have.CoreID != core.CoreID {
			return nil, fmt.Errorf("%s: cpu%d and cpu%d are thread siblings but in different cores (package %d core_id %d, package %d core_id %d)",
				cpuDir, have.CPUs[0], c, have.Package, have.CoreID, core.Package, core.CoreID)
		}
		topo.Cores[i].CPUs = append(topo.Cores[i].CPUs, c)
	}

	topo.Usable = len(topo.Cores)
	if src.CgroupRoot != "" && src.ProcCgroup != "" {
		entries, err := readProcCgroup(src.ProcCgroup)
		if err != nil {
			return nil, err
		}
		limit, ok, err := cgroupCPULimit(src.CgroupRoot, entries)
		if err != nil {
			return nil, err
		}
		if ok {
			topo.Quota, topo.QuotaFile = limit.cpus(), limit.file
			topo.Usable = min(topo.Usable, limit.ceilCPUs())
		}
	}
	return topo, nil
}

// readCore reads the topology of cpu from <cpuDir>/cpu<cpu>/topology. The returned Core
// holds cpu as its only CPU; its Node is not set.
func readCore(cpuDir string, cpu int) (Core, error) {
	dir := filepath.Join(cpuDir, "cpu"+strconv.Itoa(cpu), "topology")
	coreID, haveCoreID, err := readIntFile(filepath.Join(dir, "core_id"))
	if err != nil {
		return Core{}, err
	}
	pkg, havePkg, err := readIntFile(filepath.Join(dir, "physical_package_id"))
	if err != nil {
		return Core{}, err
	}
	siblings, haveSiblings, err := readCPUListFile(filepath.Join(dir, "thread_siblings_list"))
	if err != nil {
		return Core{}, err
	}
	if !haveCoreID || !havePkg || !haveSiblings {
		// No (or incomplete) topology: the CPU is a core of its own.
		return Core{Key: cpu, CoreID: cpu, CPUs: []int{cpu}}, nil
	}
	if !slices.Contains(siblings, cpu) {
		return Core{}, fmt.Errorf("%s: cpu%d is missing from its own thread_siblings_list %q", dir, cpu, FormatCPUList(siblings))
	}
	return Core{Key: siblings[0], Package: pkg, CoreID: coreID, CPUs: []int{cpu}}, nil
}

// readNUMANodes maps each CPU to its NUMA node from <nodeDir>/node<K>/cpulist. A missing
// nodeDir gives an empty map.
func readNUMANodes(nodeDir string) (map[int]int, error) {
	entries, err := os.ReadDir(nodeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[int]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	nodes := map[int]int{}
	for _, e := range entries {
		k, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if !strings.HasPrefix(e.Name(), "node") || err != nil {
			continue // has_cpu, online, possible, ...
		}
		cpus, _, err := readCPUListFile(filepath.Join(nodeDir, e.Name(), "cpulist"))
		if err != nil {
			return nil, err
		}
		for _, c := range cpus {
			nodes[c] = k
		}
	}
	return nodes, nil
}

// readCPUListFile reads a cpulist file; found is false when it does not exist.
func readCPUListFile(file string) (cpus []int, found bool, err error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if cpus, err = ParseCPUList(string(b)); err != nil {
		return nil, false, fmt.Errorf("%s: %w", file, err)
	}
	return cpus, true, nil
}

// readIntFile reads a file holding one integer; found is false when it does not exist.
func readIntFile(file string) (v int, found bool, err error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if v, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return 0, false, fmt.Errorf("%s: %q is not an integer", file, strings.TrimSpace(string(b)))
	}
	return v, true, nil
}
