// Command stemdot applies virtual detectors (mask stacks) to 4D-STEM datasets.
//
//	stemdot info FILE                       format, nav and sig shape, dtype, frames, size
//	stemdot plan [FILE] [--cpus] [--gpus]   the topology seen and the resource plan
//	stemdot apply FILE --mask ... --out R   virtual detector images as NPY (+ PNGs)
//	stemdot synth --out FILE ...            a synthetic 4D-STEM dataset
//	stemdot --version                       the version, and whether built with CUDA
//
// Every command prints its errors as "stemdot: ..." on stderr, naming the flag that
// helps, and exits with status 1.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "stemdot: %s\n", stemdot.FlagNames(err.Error()))
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "stemdot",
		Short: "Virtual detector images from 4D-STEM data: mask-dot products on pinned CPU and GPU workers",
		Long: `stemdot applies a stack of masks (virtual detectors: bright field, annular dark
field, centre of mass, or any NPY stack) to every frame of a 4D-STEM scan and writes
one image of shape nav_shape per mask.`,
		Version:       stemdot.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Unknown commands get suggestions (cobra); unknown flags too (suggestFlag).
		SuggestionsMinimumDistance: 2,
	}
	build := "CPU-only: built without CUDA"
	if stemdot.BuiltWithCUDA() {
		build = "with CUDA"
	}
	root.SetVersionTemplate("stemdot {{.Version}} (" + build + ")\n")
	root.SetFlagErrorFunc(suggestFlag)
	root.AddCommand(newInfoCmd(), newPlanCmd(), newApplyCmd(), newSynthCmd())
	return root
}
