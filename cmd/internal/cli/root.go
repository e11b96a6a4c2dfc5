// Package cli is the stemdot command line, one definition for its two front ends: the
// stemdot binary (cmd/stemdot, Main: every command, computed on this machine) and the C
// ABI's stemdot_cli_main (cmd/libstemdot, Run), which runs the apply and sum commands with the
// mask-dot products and reductions computed by a Backend of the caller's, e.g. on the
// workers of a Dask cluster (python -m stemdot.dask). Both take the same flags (a
// backend adds its own, such as --scheduler), make the same checks, mask stacks, centre,
// outputs (NPY, sidecar, PNGs, COM shift maps, all or nothing), warnings, messages and
// exit statuses; only the prefix of the messages differs ("stemdot:", "stemdot.dask:").
//
//	stemdot info FILE                       format, nav and sig shape, dtype, frames, size
//	stemdot plan [FILE] [--cpus] [--gpus]   the topology seen and the resource plan
//	stemdot apply FILE --mask ... --out R   virtual detector images as NPY (+ PNGs)
//	stemdot sum FILE --out S [--mean ...]   sum, mean, max and std frames in one pass
//	stemdot pick FILE --at Y,X --out F      the frames at scan positions
//	stemdot com SHIFTS.npy --icom F ...     CoM products: magnitude, divergence, curl, iCoM
//	stemdot descan fit FILE --out S.npy     the descan plane (CoM shift fit), per-position mask shifts
//	stemdot synth --out FILE ...            a synthetic 4D-STEM dataset
//	stemdot view FILE [--port N] [--gpu]    an interactive virtual detector in the browser
//	stemdot --version                       the version, and whether built with CUDA and HDF5
//
// Every command prints its errors as "stemdot: ..." on stderr, naming the flag that
// helps, and exits with status 1. An interrupt (Ctrl-C, SIGTERM, SIGHUP) ends every
// command with status 1 too, also one waiting in an open: apply and synth stop their
// work and write nothing, the other steps end at once; view, a server that Ctrl-C
// stops, stops cleanly with status 0.
package cli

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
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/safetext"
)

// Main runs the stemdot command line args (without the program name) on this machine
// and returns its exit status: 0, or 1 after an error or an interrupt (SIGINT, SIGTERM,
// SIGHUP: see onInterrupt), the error printed as "stemdot: ..." on stderr.
func Main(args []string) int {
	if err := memlimit.CheckStart(); err != nil { // before the first threads: ulimit -v
		fmt.Fprintf(stderr(), "%s: %s\n", prefix, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go onInterrupt(sigs, cancel, stderr(), os.Exit)
	return runRoot(ctx, NewRootCmd(), args)
}

// runRoot runs root with args and returns the exit status, printing its error. Every
// message and all output of the command go through safetext.Writer: a string from a file
// (a name, a path, a note) that reaches them never carries terminal control characters.
func runRoot(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	root.SetOut(safetext.Writer{W: root.OutOrStdout()})
	root.SetErr(safetext.Writer{W: root.ErrOrStderr()})
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(root.ErrOrStderr(), "%s: %s\n", prefix, frontend.FlagNames(err.Error()))
		if _, ok := errors.AsType[partialResult](err); ok {
			return 2
		}
		return 1
	}
	return 0
}

// stderr is os.Stderr for messages written outside a command (runRoot), escaped as the
// command's are.
func stderr() io.Writer { return safetext.Writer{W: os.Stderr} }

// prefix starts every message of the command: "stemdot", or the name of Run's front end.
var prefix = "stemdot"

// NewRootCmd is the stemdot command with every subcommand, computing on this machine.
func NewRootCmd() *cobra.Command {
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
	root.AddCommand(newInfoCmd(), newPlanCmd(), newApplyCmd(&local{}), newSumCmd(&local{}), newPickCmd(), newDescanCmd(), newSynthCmd(), newCOMCmd(), newViewCmd(), newReplayCmd(), newLiveCmd())
	return root
}

// Front is a front end of the command line that computes on a Backend of its own: the
// C ABI's stemdot_cli_main, e.g. python -m stemdot.dask.
type Front struct {
	// Name starts the command's messages ("stemdot.dask: warning: ...").
	Name string
	// Use is the command as a user types it, for the help ("python -m stemdot.dask").
	Use string
	// Backend computes the runs.
	Backend Backend
}

// Run runs the command line args (without the program name) of front and returns its
// exit status, 0 or 1, the error printed as "NAME: ..." on stderr. The command has the
// apply and sum subcommands of stemdot, computed on front.Backend; without a subcommand
// it is apply (python -m stemdot.dask FILE --mask ... --out R.npy). No signal is
// handled: a backend that sees an interrupt returns an error of the cancelled context
// (errs.Cancelled), and the command ends as stemdot's does after an interrupt.
func Run(front Front, args []string) int {
	prefix = front.Name
	defer func() { prefix = "stemdot" }()
	root := &cobra.Command{
		Use:   front.Use,
		Short: "stemdot apply and stemdot sum, computed by " + front.Name,
		Long: front.Use + ` runs stemdot's apply (the default) and sum commands with the mask-dot
products and reductions computed by ` + front.Name + `: the same flags, checks, outputs,
warnings and exit statuses as stemdot apply and stemdot sum, with the flags of ` + front.Name + `
added. See ` + front.Use + ` apply --help.`,
		Version:           stemdot.Version,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return checkEmptyFlags(cmd) },
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: front.Use},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(suggestFlag)
	root.AddCommand(newApplyCmd(front.Backend), newSumCmd(front.Backend))
	return runRoot(context.Background(), root, defaultCommand(root, args, "apply"))
}

// defaultCommand is args with name put first when they name no subcommand of root
// (flags may come before it) nor ask for the help or version of root.
func defaultCommand(root *cobra.Command, args []string, name string) []string {
	if len(args) == 0 {
		return args
	}
	switch args[0] {
	case "help", "-h", "--help", "--version", "-v":
		return args
	}
	if c, _, err := root.Find(args); err == nil && c != root {
		return args
	}
	return append([]string{name}, args...)
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
		fmt.Fprintf(stderr, "%s: interrupted\n", prefix)
		exit(1)
		return
	}
}
