package stemdot

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// Plan is a resource request, in the forms of LiberTEM's Context.make_with and of the
// CLI's flags; the zero Plan is one CPU worker on every usable physical core and no GPU
// worker. Plan.Planner checks it against this machine (or a described one).
type Plan struct {
	// CPUs: "" for every usable core not reserved by a GPU worker, a count ("4"; "0" =
	// none), or a list of logical CPU ids to pin on ("0,2-3"; one id alone "5,").
	CPUs string
	// GPUs: "" or "0" for none, "auto" for as many as the GPUs' free memory and the free
	// cores allow (none, with a warning, on a machine without GPU or a build without
	// CUDA), a count spread over the GPUs, or a list of GPU indices with repeats ("0,0").
	// An explicit count or list without a GPU is an error (errs.CUDA).
	GPUs string
	// RAMPerGPUWorker is the GPU memory one worker needs under "auto" ("4GiB"; "" for
	// planner.DefaultRAMPerGPUWorker).
	RAMPerGPUWorker string
	// MaxWorkersPerGPU caps the workers per GPU under "auto" (0 for the default).
	MaxWorkersPerGPU int
	// Oversubscribe allows more CPU workers than usable physical cores (with a warning).
	Oversubscribe bool
	// PartitionSize is the target partition size in decoded float32 bytes ("512MiB";
	// "" for planner.DefaultPartitionBytes).
	PartitionSize string
	// Cores, when > 0, plans for a described machine of that many physical cores, all
	// usable, instead of this one: plans only (Planner.Apply refuses to run them).
	Cores int
	// GPUInventory plans for described GPUs, "KxSIZE" items such as "2x141GB", instead of
	// this machine's (as if built with CUDA): plans only, as Cores.
	GPUInventory string
}

// cudaBuildHint says how to get a build of stemdot with CUDA (doc/gpu.md, The CUDA build), for the
// messages of a build without.
const cudaBuildHint = "build it with CUDA (`make` where nvcc is found, which scripts/install-cuda-toolkit.sh installs; for Python, pip install ./python with STEMDOT_GO_TAGS=cuda after `make kernels`)"

// planKeys are the option keys of Plan's fields, as messages name them.
var planKeys = []string{"cpus", "gpus", "ram_per_gpu_worker", "max_workers_per_gpu", "oversubscribe", "partition_size", "topology", "gpu_inventory"}

// ParsePlan parses the plan option string of the C ABI's stemdot_plan_new_options and
// Python's plan keywords, "key=value;key=value" with the keys of planKeys, each setting
// the Plan field of that name (case-insensitive keys; empty items are skipped; a key
// given twice is an error): cpus, gpus, ram_per_gpu_worker and partition_size as
// strings, max_workers_per_gpu and topology (Cores) as counts, oversubscribe as a
// boolean (true/false, 1/0, yes/no), gpu_inventory as "KxSIZE". Errors: errs.Argument
// naming the option.
func ParsePlan(s string) (Plan, error) {
	var p Plan
	err := frontend.ParseKeyValues(s, "plan option", func(key, value string) error {
		value = strings.TrimSpace(value)
		var err error
		want := "a whole number"
		switch key {
		case "cpus":
			p.CPUs = value
		case "gpus":
			p.GPUs = value
		case "ram_per_gpu_worker":
			p.RAMPerGPUWorker = value
		case "partition_size":
			p.PartitionSize = value
		case "gpu_inventory":
			p.GPUInventory = value
		case "max_workers_per_gpu":
			p.MaxWorkersPerGPU, err = strconv.Atoi(value)
		case "topology":
			if p.Cores, err = strconv.Atoi(value); err == nil && p.Cores < 1 {
				return errs.New(errs.Argument, "option topology %q: want a core count of at least 1 (leave topology out to plan for this machine)", value)
			}
		case "oversubscribe":
			p.Oversubscribe, err = parseBool(value)
			want = "true or false"
		default:
			return errs.New(errs.Argument, "unknown plan option %q (known: %s)", key, strings.Join(planKeys, ", "))
		}
		if err != nil {
			return errs.New(errs.Argument, "option %s %q: want %s", key, value, want)
		}
		return nil
	})
	return p, err
}

// parseBool parses true/false, 1/0, yes/no, on/off (case-insensitive).
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", s)
}

// Machine is what plans are made for.
type Machine struct {
	// Topology is the CPU topology: allowed CPUs, physical cores, CPU quota, usable cores.
	Topology *affinity.Topology
	// GPUs are the GPUs found (NVML) or described; nil when the plan asks for no GPU
	// worker (discovery is skipped then).
	GPUs []affinity.GPU
	// CUDA tells whether GPU workers can run: a CUDA build, or described GPUs.
	CUDA bool
	// Described is true for a described machine (Plan.Cores or Plan.GPUInventory): its
	// plans are for reading, not for running here.
	Described bool
}

// Planner is a Plan checked against a machine: the resources are detected once, and
// Plan makes the plan for each dataset.
type Planner struct {
	machine    Machine
	req        planner.Request
	discovered bool // machine.GPUs is final
}

// Planner parses the request, detects this machine's CPUs (and GPUs, when GPU workers
// are asked for) or describes the given one, and checks the request by planning it
// without a dataset. Errors: errs.Argument for a malformed request, errs.CUDA for GPU
// workers asked for by count or list without a CUDA build or without a GPU,
// errs.Resources for a request the machine cannot serve.
func (p Plan) Planner() (pl *Planner, err error) {
	defer goErrs(&err)
	pl = &Planner{}
	req := &pl.req
	if p.CPUs != "" {
		if err := req.ParseCPUs(p.CPUs); err != nil {
			return nil, errs.Wrap(errs.Argument, fmt.Errorf("option cpus: %w", err))
		}
	}
	if p.GPUs != "" {
		if err := req.ParseGPUs(p.GPUs); err != nil {
			return nil, errs.Wrap(errs.Argument, fmt.Errorf("option gpus: %w", err))
		}
	}
	req.Oversubscribe, req.MaxWorkersPerGPU = p.Oversubscribe, p.MaxWorkersPerGPU
	if p.RAMPerGPUWorker != "" {
		b, err := planner.ParseBytes(p.RAMPerGPUWorker)
		if err != nil {
			return nil, errs.Wrap(errs.Argument, fmt.Errorf("option ram_per_gpu_worker: %w", err))
		}
		req.RAMPerGPUWorker = b
	}
	if p.PartitionSize != "" {
		b, err := planner.ParseBytes(p.PartitionSize)
		if err != nil || b > 1<<62 {
			return nil, errs.New(errs.Argument, "option partition_size %q: want a positive size such as 512MiB", p.PartitionSize)
		}
		req.PartitionBytes = int64(b)
	}
	if err := pl.detect(p); err != nil {
		return nil, err
	}
	req.CUDA = pl.machine.CUDA
	wantGPUs := req.GPUs > 0 || len(req.GPUList) > 0
	switch {
	case wantGPUs && !req.CUDA:
		return nil, errs.New(errs.CUDA, "option gpus %q: GPU workers requested, but stemdot was built without CUDA support: %s, or give option gpus auto to use GPUs only where there are", p.GPUs, cudaBuildHint)
	case wantGPUs && len(pl.machine.GPUs) == 0:
		return nil, errs.New(errs.CUDA, "option gpus %q: GPU workers requested, but no GPU was found (give option gpus auto to use GPUs only where there are)", p.GPUs)
	}
	check := pl.req
	pending := check.GPUAuto && !pl.discovered
	if pending {
		check = withoutGPUs(check) // "auto" is checked once the GPUs are looked for
	}
	if !pending || !check.NoCPU { // cpus 0 with gpus auto leaves nothing to check yet
		p, err := planner.Make(pl.machine.Topology, pl.machine.GPUs, check, nil)
		if err != nil {
			return nil, errs.Wrap(errs.Resources, err)
		}
		if !pl.machine.Described && !check.GPUAuto {
			prewarm(p) // GPU workers asked for by count or list: while the dataset opens
		}
	}
	return pl, nil
}

// detect fills the machine: described, or this one.
func (pl *Planner) detect(p Plan) error {
	m := &pl.machine
	m.CUDA = cuda.Built()
	switch {
	case p.Cores < 0 || p.Cores > affinity.MaxCPUs:
		return errs.New(errs.Argument, "option topology %d: want a core count from 1 to %d", p.Cores, affinity.MaxCPUs)
	case p.Cores > 0:
		m.Topology, m.Described = planner.DescribedTopology(p.Cores), true
	default:
		topo, err := affinity.Detect()
		if err != nil {
			return errs.Wrap(errs.Resources, err)
		}
		m.Topology = topo
	}
	switch {
	case p.GPUInventory != "":
		gpus, err := planner.ParseGPUInventory(p.GPUInventory)
		if err != nil {
			return errs.Wrap(errs.Argument, fmt.Errorf("option gpu_inventory: %w", err))
		}
		m.GPUs, m.CUDA, m.Described, pl.discovered = gpus, true, true, true
	case pl.req.GPUs > 0 || len(pl.req.GPUList) > 0:
		if err := pl.discover(); err != nil {
			return err
		}
	}
	return nil
}

// discover finds this machine's GPUs (NVML) once, when GPU workers may run here. "auto"
// discovers only when a job may need GPUs (see Plan).
func (pl *Planner) discover() error {
	m := &pl.machine
	if pl.discovered || m.Described || !m.CUDA {
		pl.discovered = true
		return nil
	}
	gpus, err := affinity.DiscoverGPUs()
	if err != nil {
		return errs.Wrap(errs.CUDA, err)
	}
	m.GPUs, pl.discovered = gpus, true
	return nil
}

// prewarm starts creating the CUDA contexts of the plan's GPUs in the background
// (cuda.Prewarm), so that its GPU workers are ready soon after the run starts; CPU
// workers do not wait for them.
func prewarm(p *planner.Plan) {
	for _, w := range p.Workers {
		if w.Kind == planner.GPU {
			cuda.Prewarm(w.GPU)
		}
	}
}

// Machine is the machine the planner plans for.
func (pl *Planner) Machine() Machine { return pl.machine }

// Plan makes the plan for applying stack to ds (ds nil: the workers only, no
// partitions; stack nil: a plan for any masks). Under "auto", GPU workers are chosen by
// the planner's speed model for this job (planner.Shape.Predict): none where they would
// not make it faster, and GPUs are not even looked for when the job is too small for a
// GPU worker's start-up to pay off, nor for a sparse dataset (dataset.SparseOf), whose
// frames CPU workers apply the masks to as a gather over their events while GPU workers
// would read them densified (explicit GPU workers for one get a warning that says so).
// Errors are errs.Resources or errs.CUDA. The plan's
// Warnings say what the user should know (oversubscription, "auto" without GPUs, ...).
func (pl *Planner) Plan(ds dataset.Dataset, stack *masks.Stack) (plan *planner.Plan, err error) {
	defer goErrs(&err)
	var shape *planner.Shape
	if ds != nil {
		sig := ds.SigShape()
		shape = &planner.Shape{NumFrames: ds.NumFrames(), SigY: sig[0], SigX: sig[1], DTypeSize: ds.DType().Size()}
		if stack != nil {
			shape.NMasks, shape.Sparse = stack.N, stack.PreferSparse()
		}
	}
	req := pl.req
	sparse := ds != nil && dataset.SparseOf(ds) != nil
	if sparse && req.GPUAuto && !req.NoCPU {
		p, err := planner.Make(pl.machine.Topology, nil, withoutGPUs(req), shape)
		if p != nil {
			p.Warnings = goWarnings(append(p.Warnings, "gpus auto: the dataset's frames are sparse: CPU workers apply the masks as a gather over their events, GPU workers would read every frame densified: CPU workers only"))
		}
		return p, errs.Wrap(errs.Resources, err)
	}
	if req.GPUAuto && !pl.discovered {
		if pl.machine.CUDA && !req.NoCPU && shape != nil && !shape.GPUsMayHelp(pl.machine.Topology.Usable) {
			p, err := planner.Make(pl.machine.Topology, nil, withoutGPUs(req), shape)
			if p != nil {
				p.Warnings = goWarnings(append(p.Warnings, fmt.Sprintf("gpus auto: GPUs not looked for: by the speed model, GPU workers cannot make this job faster (about %.3g s on CPU workers: too short for a GPU worker's start-up of %v, or bound by host memory): CPU workers only",
					shape.Predict(p.CoresUsable, nil, p.CoresUsable).Seconds(), planner.GPUStartup)))
			}
			return p, errs.Wrap(errs.Resources, err)
		}
		if err := pl.discover(); err != nil {
			return nil, err
		}
	}
	p, err := planner.Make(pl.machine.Topology, pl.machine.GPUs, req, shape)
	if err != nil {
		return nil, errs.Wrap(errs.Resources, err)
	}
	if !pl.machine.Described {
		prewarm(p)
	}
	if sparse && slices.ContainsFunc(p.Workers, func(w planner.Worker) bool { return w.Kind == planner.GPU }) {
		p.Warnings = append(p.Warnings, fmt.Sprintf("the dataset's frames are sparse: its CPU workers apply the masks as a gather over their events, its GPU workers read every frame densified (%d×%d pixels); give option gpus 0 for the gather alone",
			ds.SigShape()[0], ds.SigShape()[1]))
	}
	p.Warnings = goWarnings(p.Warnings)
	return p, nil
}

// withoutGPUs is req asking for no GPU worker.
func withoutGPUs(req planner.Request) planner.Request {
	req.GPUAuto, req.GPUs, req.GPUList = false, 0, nil
	return req
}
