package planner

import (
	"fmt"
	"strings"

	"github.com/stemdot/stemdot/affinity"
)

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
		problems = append(problems, fmt.Sprintf("%d workers (%d CPU, %d GPU) requested but only %s", total, len(workers), nGPU, plural(topo.Usable, "usable core")))
	}
	if len(beyond) > 0 {
		problems = append(problems, fmt.Sprintf("CPUs %s lie on cores beyond the %d usable ones (CPU quota %g CPUs)", joinInts(beyond), topo.Usable, topo.Quota))
	}
	if problems != nil {
		problem := strings.Join(problems, "; ")
		if !req.Oversubscribe {
			return nil, fmt.Errorf("planner: %s; pass option oversubscribe to allow it", problem)
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
		problem := fmt.Sprintf("%d CPU workers requested but only %s (%d usable, %d reserved for GPU workers)",
			n, freeCores(len(free)), topo.Usable, len(reserved))
		if !req.Oversubscribe {
			return nil, fmt.Errorf("planner: %s; pass option oversubscribe to allow it", problem)
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

// freeCores is "1 usable core is free" or "2 usable cores are free".
func freeCores(n int) string {
	if n == 1 {
		return "1 usable core is free"
	}
	return plural(n, "usable core") + " are free"
}
