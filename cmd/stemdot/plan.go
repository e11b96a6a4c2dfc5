package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// planFlags are the resource request, as in LiberTEM's Context.make_with.
type planFlags struct {
	cpus, gpus       string
	cpusSet, gpusSet bool // given on the command line (an empty value is an error)
	ramPerGPUWorker  string
	maxWorkersPerGPU int
	oversubscribe    bool
	partitionSize    string
	// A described machine instead of this one (stemdot plan only).
	topology     int
	gpuInventory string
}

func (f *planFlags) register(fs *pflag.FlagSet, described bool) {
	fs.StringVar(&f.cpus, "cpus", "", "CPU workers: a count (0 = none) or a list of CPU ids to pin on, e.g. 0,2-3 (default: all usable physical cores not reserved for GPU workers)")
	fs.StringVar(&f.gpus, "gpus", "", "GPU workers: a count (round-robin over GPUs), a list of GPU ids with repeats (0,0 = two workers on GPU 0), or auto")
	fs.StringVar(&f.ramPerGPUWorker, "ram-per-gpu-worker", "4GiB", "with --gpus auto: GPU memory each GPU worker needs")
	fs.IntVar(&f.maxWorkersPerGPU, "max-workers-per-gpu", planner.DefaultMaxWorkersPerGPU, "with --gpus auto: most workers on one GPU")
	fs.BoolVar(&f.oversubscribe, "oversubscribe", false, "allow more workers than usable physical cores (with a warning)")
	fs.StringVar(&f.partitionSize, "partition-size", "512MiB", "target partition size in decoded float32 bytes")
	if described {
		fs.IntVar(&f.topology, "topology", 0, "plan for a described machine with N physical cores, all allowed, instead of this one")
		fs.StringVar(&f.gpuInventory, "gpu-inventory", "", "plan for described GPUs, KxSIZE of free memory each, e.g. 2x141GB (implies a CUDA build)")
	}
}

// resources returns the topology and GPUs to plan for: this machine's, or the described
// one's, and whether the GPUs are described (then GPU workers can be planned whatever
// this build supports).
func (f *planFlags) resources() (*affinity.Topology, []affinity.GPU, bool, error) {
	described := f.gpuInventory != ""
	var topo *affinity.Topology
	var err error
	if f.topology > 0 && f.topology <= affinity.MaxCPUs {
		topo = planner.DescribedTopology(f.topology)
	} else if f.topology < 0 || f.topology > affinity.MaxCPUs {
		return nil, nil, false, fmt.Errorf("--topology %d: want a core count from 1 to %d", f.topology, affinity.MaxCPUs)
	} else if topo, err = affinity.Detect(); err != nil {
		return nil, nil, false, err
	}
	var gpus []affinity.GPU
	if f.gpuInventory != "" {
		if gpus, err = planner.ParseGPUInventory(f.gpuInventory); err != nil {
			return nil, nil, false, err
		}
	} else if f.topology == 0 {
		if gpus, err = affinity.DiscoverGPUs(); err != nil {
			return nil, nil, false, err
		}
	}
	return topo, gpus, described, nil
}

// plan makes the plan for ds (nil: workers only), with the flags of cmd.
func (f *planFlags) plan(cmd *cobra.Command, ds dataset.Dataset) (*planner.Plan, *affinity.Topology, error) {
	f.cpusSet, f.gpusSet = cmd.Flags().Changed("cpus"), cmd.Flags().Changed("gpus")
	topo, gpus, described, err := f.resources()
	if err != nil {
		return nil, nil, err
	}
	req := planner.Request{Oversubscribe: f.oversubscribe, MaxWorkersPerGPU: f.maxWorkersPerGPU, CUDA: cuda.Built() || described}
	if f.cpusSet {
		if err := req.ParseCPUs(f.cpus); err != nil {
			return nil, nil, fmt.Errorf("--cpus: %w", err)
		}
	}
	if f.gpusSet {
		if err := req.ParseGPUs(f.gpus); err != nil {
			return nil, nil, fmt.Errorf("--gpus: %w", err)
		}
	}
	if req.RAMPerGPUWorker, err = planner.ParseBytes(f.ramPerGPUWorker); err != nil {
		return nil, nil, fmt.Errorf("--ram-per-gpu-worker: %w", err)
	}
	pb, err := planner.ParseBytes(f.partitionSize)
	if err != nil {
		return nil, nil, fmt.Errorf("--partition-size: %w", err)
	}
	if pb == 0 {
		return nil, nil, fmt.Errorf("--partition-size %q: want a positive size such as 512MiB", f.partitionSize)
	}
	req.PartitionBytes = int64(pb)
	var shape *planner.Shape
	if ds != nil {
		sig := ds.SigShape()
		shape = &planner.Shape{NumFrames: ds.NumFrames(), SigY: sig[0], SigX: sig[1]}
	}
	p, err := planner.Make(topo, gpus, req, shape)
	return p, topo, err
}

func newPlanCmd() *cobra.Command {
	var pf planFlags
	var df datasetFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan [FILE]",
		Short: "Show the topology seen and the resource plan (workers, reserved cores, partitions)",
		Long: `plan shows the CPU topology and GPUs this process may use and the plan stemdot would run:
the workers (each pinned to one physical core; a GPU worker reserves its core) and, when a
dataset FILE is given, its partitions. --topology and --gpu-inventory plan for a described
machine instead, e.g. stemdot plan --topology 16 --gpu-inventory 2x141GB --gpus auto.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ds dataset.Dataset
			if len(args) == 1 {
				var err error
				if ds, err = df.open(args[0]); err != nil {
					return err
				}
				defer ds.Close()
			}
			p, topo, err := pf.plan(cmd, ds)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				b, err := json.Marshal(p)
				if err != nil {
					return err
				}
				fmt.Fprintln(w, string(b))
				return nil
			}
			fmt.Fprintln(w, strings.TrimRight(topo.String(), "\n"))
			fmt.Fprintln(w, strings.TrimRight(p.String(), "\n"))
			return nil
		},
	}
	pf.register(cmd.Flags(), true)
	df.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the plan as JSON: {"cores_usable": N, "workers": [...], "partitions": [[first_frame, end_frame], ...]}`)
	return cmd
}
