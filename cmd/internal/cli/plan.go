package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

func newPlanCmd() *cobra.Command {
	var pf planFlags
	var df datasetFlags
	var asJSON bool
	var maskSpecs, masksFiles []string
	cmd := &cobra.Command{
		Use:   "plan [FILE]",
		Short: "Show the topology seen and the resource plan (workers, reserved cores, partitions)",
		Long: `plan shows the CPU topology and GPUs this process may use and the plan stemdot would run:
the workers (each pinned to one physical core; a GPU worker reserves its core) and, when a
dataset FILE is given, its partitions. --topology and --gpu-inventory plan for a described
machine instead, e.g. stemdot plan --topology 16 --gpu-inventory 2x141GB --gpus auto.
With FILE and the masks of the job (--mask, --masks, as for apply), --gpus auto shows the GPU
workers the apply would get: the planner adds them only where its speed model says they
make the job faster (not for memory-bound few-mask jobs on small scans).
The plan ends with its warnings (oversubscription, --gpus auto without a GPU, ...).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ds dataset.Dataset
			var stack *masks.Stack
			if len(args) == 1 {
				var err error
				if ds, err = df.open(cmd, args[0]); err != nil {
					return err
				}
				defer ds.Close()
				if len(maskSpecs)+len(masksFiles) > 0 {
					if stack, err = stemdot.MasksFrom(ds.SigShape(), masksFiles, maskSpecs); err != nil {
						return err
					}
				}
			} else if len(maskSpecs)+len(masksFiles) > 0 {
				return fmt.Errorf("--mask and --masks need the dataset FILE (the masks' sig shape is the frames')")
			}
			pl, err := pf.Planner()
			if err != nil {
				return err
			}
			p, err := pl.Plan(ds, stack)
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
			fmt.Fprintln(w, strings.TrimRight(pl.Machine().Topology.String(), "\n"))
			fmt.Fprintln(w, strings.TrimRight(p.String(), "\n"))
			return nil
		},
	}
	pf.register(cmd.Flags(), true)
	df.register(cmd.Flags())
	registerMaskFlags(cmd.Flags(), &maskSpecs, &masksFiles)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the plan as JSON: {"cores_usable": N, "workers": [...], "partitions": [[first_frame, end_frame], ...]}`)
	return cmd
}
