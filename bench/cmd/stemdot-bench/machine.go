package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/internal/cpupeak"
	"github.com/stemdot/stemdot/planner"
)

const (
	dense      = bench.Dense
	sparseRing = bench.SparseRing
)

// machine is what the bench runs on: the topology and the GPUs as stemdot plans for
// them (GPUs are discovered in a CUDA build only: without it, or without a GPU, the GPU
// plans are listed as skipped with the reason).
type machine struct {
	stemdot.Machine
	gpuErr   error
	llcBytes int64
	ramBytes int64
	peak     cpupeak.Peak // one core's FMA peak (zero when not measured)
}

func detectMachine() (*machine, error) {
	m := &machine{llcBytes: lastLevelCache(), ramBytes: memTotal()}
	pl, err := stemdot.Plan{GPUs: "auto"}.Planner()
	if err != nil {
		m.gpuErr = err
		if pl, err = (stemdot.Plan{}).Planner(); err != nil {
			return nil, err
		}
	}
	m.Machine = pl.Machine()
	return m, nil
}

// blasName names the dense kernels of this build: "stemdot" (the engine's own: AVX2+FMA
// block kernels where the CPU has them, else gonum's pure-Go blas32) or "openblas" (the
// -tags openblas build: blas32 on OpenBLAS through gonum.org/v1/netlib and cgo).
func blasName() string {
	if strings.HasPrefix(fmt.Sprintf("%T", blas32.Implementation()), "netlib.") {
		return "openblas"
	}
	return "stemdot"
}

func (m *machine) describe() map[string]any {
	gpus := []string{}
	for _, g := range m.GPUs {
		gpus = append(gpus, fmt.Sprintf("%d: %s, %.0f GB", g.Index, g.Name, float64(g.TotalBytes)/1e9))
	}
	d := map[string]any{
		"cpu_model":      cpuModel(),
		"logical_cpus":   runtime.NumCPU(),
		"allowed_cpus":   m.Topology.AllowedList(),
		"physical_cores": len(m.Topology.Cores),
		"cores_usable":   m.Topology.Usable,
		"cpu_quota":      m.Topology.Quota,
		"llc_bytes":      m.llcBytes,
		"ram_bytes":      m.ramBytes,
		"gpus":           gpus,
		"go":             runtime.Version(),
		"goos_goarch":    runtime.GOOS + "/" + runtime.GOARCH,
	}
	if m.gpuErr != nil {
		d["gpu_discovery_error"] = m.gpuErr.Error()
	}
	return d
}

// namedPlan is a plan with its name in the report ("cpu-all", "cpu-1", "hybrid",
// "gpu-only").
type namedPlan struct {
	name string
	plan *planner.Plan
}

// plans makes every plan the machine allows for d and adds the others to skipped
// (once: a reason already listed is not repeated).
func (m *machine) plans(d *benchData, skipped *[]bench.Skip) []namedPlan {
	reqs := []struct {
		name string
		req  stemdot.Plan
		gpu  bool
	}{
		{"cpu-all", stemdot.Plan{}, false},
		{"cpu-1", stemdot.Plan{CPUs: "1"}, false},
		{"hybrid", stemdot.Plan{GPUs: "auto"}, true},
		{"gpu-only", stemdot.Plan{CPUs: "0", GPUs: "auto"}, true},
	}
	var out []namedPlan
	for _, r := range reqs {
		var reason string
		var p *planner.Plan
		switch {
		case r.gpu && !m.CUDA:
			reason = "built without CUDA (-tags cuda)"
		case r.gpu && len(m.GPUs) == 0:
			reason = "no GPU found (NVML)"
			if m.gpuErr != nil {
				reason += ": " + m.gpuErr.Error()
			}
		case r.name == "cpu-1" && m.Topology.Usable == 1:
			reason = "the machine has one usable core: same as cpu-all"
		default:
			pl, err := r.req.Planner()
			if err == nil {
				p, err = pl.Plan(d.ds, nil)
			}
			if err != nil {
				reason = err.Error()
			}
		}
		if reason != "" {
			s := bench.Skip{What: r.name, Reason: reason}
			if !containsSkip(*skipped, s) {
				*skipped = append(*skipped, s)
				log("skipped plan %s: %s", r.name, reason)
			}
			continue
		}
		out = append(out, namedPlan{r.name, p})
	}
	return out
}

func containsSkip(ss []bench.Skip, s bench.Skip) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// lastLevelCache is the largest cache size of CPU 0 in sysfs (0 if unknown).
func lastLevelCache() int64 {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	var best int64
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "size"))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		mult := int64(1)
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			best = max(best, n*mult)
		}
	}
	return best
}

// memTotal is MemTotal of /proc/meminfo in bytes (8 GiB if unknown).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 8 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 8 << 30
}
