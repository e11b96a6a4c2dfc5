package cli

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// Backend is what the apply and sum commands compute on: this machine's pinned workers
// (local, stemdot.Planner), or the workers of a cluster that a front end of the C ABI
// drives (remote, stemdot_cli_main). Everything else of the commands (flags, checks,
// mask stack, outputs, messages) is the same for all backends.
type Backend interface {
	// Flags registers the backend's own flags on the flag set of the apply (reduce
	// false) or sum (reduce true) command, e.g. --cpus and --gpus.
	Flags(fs *pflag.FlagSet, reduce bool)
	// Check checks the values of the backend's flags: sum calls it before opening the
	// dataset, apply after.
	Check(reduce bool) error
	// Open opens the dataset at path with opt (the open options given as flags; given:
	// the same, by option key, values as given), or describes it where the frames are
	// read elsewhere (a dataset whose ReadFrames is never called), and returns the
	// dataset's warnings (stemdot.OpenWarnings), one line each.
	Open(ctx context.Context, path string, opt stemdot.Options, given map[string]string) (dataset.Dataset, []string, error)
	// Centre finds the direct beam's centre and radius in the sum frame of ds (with
	// shifts, as stemdot.ApplyOptions.Shifts, of the frames moved back by them), as
	// stemdot.Planner.Centre.
	Centre(ctx context.Context, ds dataset.Dataset, shifts []float64) (masks.Centre, error)
	// Apply applies stack to every frame of ds, as stemdot.Planner.Apply, warning (warn)
	// of the plan's warnings before the run.
	Apply(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, opt stemdot.ApplyOptions, warn func(string)) (*stemdot.Result, error)
	// Workers describes the workers that ran Apply's run (res its result), one line
	// each, for apply --workers: frames, claims or ranges, throughput while busy.
	Workers(res *stemdot.Result) []string
	// Reduce computes the reductions opt asks for over every frame of ds, as
	// stemdot.Planner.Reduce; the Reduction's Warnings start with the dataset's.
	Reduce(ctx context.Context, ds dataset.Dataset, opt stemdot.ReduceOptions) (*stemdot.Reduction, error)
}

// local is the Backend of the stemdot binary: the pinned CPU (and GPU) workers of this
// machine that --cpus, --gpus, ... ask for.
type local struct {
	pf planFlags
	pl *stemdot.Planner
}

func (b *local) Flags(fs *pflag.FlagSet, reduce bool) { b.pf.register(fs, false) }

func (b *local) Check(reduce bool) (err error) {
	if reduce {
		b.pl, err = b.pf.ReducePlanner()
	} else {
		b.pl, err = b.pf.Planner()
	}
	return err
}

func (b *local) Open(ctx context.Context, path string, opt stemdot.Options, given map[string]string) (dataset.Dataset, []string, error) {
	ds, err := stemdot.Open(path, opt)
	if err != nil {
		return nil, nil, err
	}
	return ds, stemdot.OpenWarnings(ds), nil
}

func (b *local) Centre(ctx context.Context, ds dataset.Dataset, shifts []float64) (masks.Centre, error) {
	return b.pl.Centre(ctx, ds, shifts)
}

func (b *local) Apply(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, opt stemdot.ApplyOptions, warn func(string)) (*stemdot.Result, error) {
	p, err := b.pl.Plan(ds, stack)
	if err != nil {
		return nil, err
	}
	for _, w := range p.Warnings {
		warn(w)
	}
	return b.pl.Apply(ctx, ds, stack, opt)
}

func (b *local) Workers(res *stemdot.Result) []string {
	lines := make([]string, len(res.Stats.PerWorker))
	for i, w := range res.Stats.PerWorker {
		lines[i] = w.String()
	}
	return lines
}

func (b *local) Reduce(ctx context.Context, ds dataset.Dataset, opt stemdot.ReduceOptions) (*stemdot.Reduction, error) {
	return b.pl.Reduce(ctx, ds, opt)
}

// Local is the Backend of the stemdot binary: this machine's pinned workers, with the
// flags --cpus, --gpus, ... of stemdot apply.
func Local() Backend { return &local{} }
