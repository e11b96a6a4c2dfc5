// Command stemdot applies virtual detectors (mask stacks) to 4D-STEM datasets.
//
//	stemdot info FILE                       format, nav and sig shape, dtype, frames, size
//	stemdot plan [FILE] [--cpus] [--gpus]   the topology seen and the resource plan
//	stemdot apply FILE --mask ... --out R   virtual detector images as NPY (+ PNGs)
//	stemdot sum FILE --out S [--mean ...]   sum, mean, max and std frames in one pass
//	stemdot pick FILE --at Y,X --out F      the frames at scan positions
//	stemdot com SHIFTS.npy --icom F ...     CoM products: magnitude, divergence, curl, iCoM
//	stemdot descan fit FILE --out S.npy     the descan plane (CoM shift fit), per-position mask shifts
//	stemdot synth --out FILE ...            a synthetic 4D-STEM dataset
//	stemdot --version                       the version, and whether built with CUDA and HDF5
//
// Every command prints its errors as "stemdot: ..." on stderr, naming the flag that
// helps, and exits with status 1. An interrupt (Ctrl-C, SIGTERM, SIGHUP) ends every
// command with status 1 too, also one waiting in an open: apply and synth stop their
// work and write nothing, the other steps end at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
	_ "github.com/stemdot/stemdot/dataset/formats" // every format (the stemdot package imports it too)
	"github.com/stemdot/stemdot/internal/memlimit"
)

func main() {
	if err := memlimit.CheckStart(); err != nil { // before the first threads: ulimit -v
		fmt.Fprintf(os.Stderr, "stemdot: %s\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go onInterrupt(sigs, cancel, os.Stderr, os.Exit)
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
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
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return checkEmptyFlags(cmd)
		},
		// Unknown commands get suggestions (cobra); unknown flags too (suggestFlag).
		SuggestionsMinimumDistance: 2,
	}
	root.SetVersionTemplate("stemdot {{.Version}} (" + buildFlavour() + ")\n")
	root.SetFlagErrorFunc(suggestFlag)
	root.AddCommand(newInfoCmd(), newPlanCmd(), newApplyCmd(), newSumCmd(), newPickCmd(), newDescanCmd(), newSynthCmd(), newCOMCmd())
	return root
}

// buildFlavour says what this build can do, for --version: "CPU-only: built without
// CUDA; with HDF5 (libhdf5 1.10.8)", "with CUDA; without HDF5: built with -tags nohdf5".
func buildFlavour() string {
	build := "CPU-only: built without CUDA"
	if stemdot.BuiltWithCUDA() {
		build = "with CUDA"
	}
	if v, ok := stemdot.BuiltWithHDF5(); ok {
		return build + "; with HDF5 (libhdf5 " + v + ")"
	}
	return build + "; without HDF5: built with -tags nohdf5"
}

// interruptsHandled is set while a command runs a step that handles an interrupt itself
// (see handleInterrupts).
var interruptsHandled atomic.Bool

// handleInterrupts runs step with the first interrupt left to it: the interrupt only
// cancels the command's context, and step returns promptly when it is (apply's
// computation, synth's writing) or completes what must not be cut short (apply's
// writing of its outputs, all or nothing). A step stopped by the interrupt (an error of
// the cancelled context) ends the command with "interrupted: no result written".
func handleInterrupts(step func() error) error {
	interruptsHandled.Store(true)
	defer interruptsHandled.Store(false)
	err := step()
	if errors.Is(err, context.Canceled) {
		return errInterrupted
	}
	return err
}

// errInterrupted ends a command whose step an interrupt stopped.
var errInterrupted = errors.New("interrupted: no result written")

// onInterrupt handles SIGINT, SIGTERM and SIGHUP (sigs): the first cancels the command's
// context (cancel); outside a step of handleInterrupts, or at a second signal, it ends
// the process at once with status 1, through exit. A command may be blocked in a system
// call that no signal interrupts (opening or reading a file on a hung network file
// system, a library waiting in open(2)); it has written nothing then: results are
// written by steps of handleInterrupts.
func onInterrupt(sigs <-chan os.Signal, cancel context.CancelFunc, stderr io.Writer, exit func(int)) {
	handled := false
	for range sigs {
		cancel()
		if !handled && interruptsHandled.Load() {
			handled = true
			continue
		}
		fmt.Fprintln(stderr, "stemdot: interrupted")
		exit(1)
		return
	}
}
