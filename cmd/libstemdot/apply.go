package main

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// maxNavDims is STEMDOT_MAX_NAV_DIMS.
const maxNavDims = 8

// openDataset opens path with the stemdot_open option string "key=value;..." (the keys
// of stemdot.OpenOptions()).
func openDataset(path, options string) (dataset.Dataset, error) {
	if path == "" {
		return nil, failf(errs.Argument, "empty dataset path")
	}
	opt, err := stemdot.ParseOptions(options)
	if err != nil {
		return nil, err
	}
	return stemdot.Open(path, opt)
}

// memoryDataset wraps caller-owned frames (host byte order, C order, no copy) as a
// dataset; dtype is a stemdot_dtype value.
func memoryDataset(frames []byte, dtype int, nav []int, sigY, sigX int) (dataset.Dataset, error) {
	dt := dataset.DType(dtype)
	if dtype <= 0 || dt.Size() == 0 {
		return nil, failf(errs.DType, "invalid frame dtype %d (want STEMDOT_UINT8 .. STEMDOT_FLOAT64, 1..8)", dtype)
	}
	if len(nav) < 1 || len(nav) > maxNavDims {
		return nil, failf(errs.Argument, "nav_ndim %d is not in 1..%d", len(nav), maxNavDims)
	}
	ds, err := dataset.FromMemory(frames, nav, [2]int{sigY, sigX}, dt)
	return ds, errs.Wrap(errs.Shape, err)
}

// masksFrom builds the stack of NPY mask files and then CLI --mask specs, in order, for
// frames of sigY × sigX pixels, the auto specs (disk:auto, ...) about centre (nil: none,
// an auto spec is refused): stemdot.MasksFromCentred, the one definition that the CLI's
// apply uses too.
func masksFrom(files, specs []string, sigY, sigX int, centre *masks.Centre) (*masks.Stack, error) {
	if sigY <= 0 || sigX <= 0 {
		return nil, failf(errs.Shape, "sig shape (%d, %d) has a non-positive size", sigY, sigX)
	}
	return stemdot.MasksFromCentred([2]int{sigY, sigX}, centre, files, specs)
}

// newPlanner checks the cpus and gpus request strings ("" = default) on this machine.
func newPlanner(cpus, gpus string) (*stemdot.Planner, error) {
	return stemdot.Plan{CPUs: cpus, GPUs: gpus}.Planner()
}

// applyRequest is one stemdot_apply call, its buffers already wrapped as Go slices.
type applyRequest struct {
	ds    dataset.Dataset
	stack *masks.Stack
	plan  *stemdot.Planner // nil: the default plan
	run   *run             // nil: not cancellable
	out32 []float32        // exactly one of out32, out64 is set
	out64 []float64
	// shifts are stemdot.ApplyOptions.Shifts (nil: unshifted).
	shifts []float64
	// progress, when set, is called on the goroutine that called apply (so on the C
	// thread that called stemdot_apply), with strictly increasing done, and with done ==
	// total at the end of a successful run.
	progress func(done, total uint64)
}

// apply builds the stack and runs it with stemdot's Planner.Apply, which checks the job.
func apply(req applyRequest) error {
	var err error
	pl := req.plan
	if pl == nil {
		if pl, err = newPlanner("", ""); err != nil {
			return err
		}
	}
	// An ROI's frames are written as the dataset has them, in scan order (stemdot_dataset_scan).
	opt := stemdot.ApplyOptions{Float64: req.out64 != nil, Out32: req.out32, Out64: req.out64, ROICompact: true, Shifts: req.shifts}
	return onRun(req.run, "apply", func(ctx context.Context) error {
		return relayProgress(req.ds.NumFrames(), req.progress, func(p func(done, total int)) error {
			opt.Progress = p
			_, err := pl.Apply(ctx, req.ds, req.stack, opt)
			return err
		})
	})
}

// onRun runs job (an apply, a reduction) with the context of run r, or a background
// context for none. A cancel issued at any time during the call returns errCancelled,
// also when the engine finished meanwhile: callers see one outcome per cancel,
// deterministically.
func onRun(r *run, what string, job func(ctx context.Context) error) error {
	ctx := context.Background()
	if r != nil {
		var err error
		if ctx, err = r.start(); err != nil {
			return err
		}
	}
	err := job(ctx)
	if r != nil && r.finish() {
		return failf(errs.Cancelled, "%s cancelled", what)
	}
	return err
}

// relayProgress runs job, a run over total frames that reports its progress to the
// function it is given. Without progress it runs on the calling goroutine (given nil);
// with progress the engine runs on another goroutine while the calling one relays the
// workers' progress to the callback, so that a C callback runs on the thread that
// called stemdot_apply (stemdot_reduce) and a slow callback never stalls a worker.
func relayProgress(frames int, progress func(done, total uint64), job func(func(done, total int)) error) error {
	if progress == nil {
		return job(nil)
	}
	total := uint64(frames)
	var latest atomic.Uint64
	wake := make(chan struct{}, 1)
	onProgress := func(done, _ int) {
		latest.Store(uint64(done))
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	finished := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				finished <- panicError(r)
			}
		}()
		finished <- job(onProgress)
	}()
	var reported uint64
	report := func(done uint64) {
		if done > reported {
			reported = done
			progress(done, total)
		}
	}
	for {
		select {
		case <-wake:
			report(latest.Load())
		case err := <-finished:
			if err == nil {
				report(total)
			}
			return err
		}
	}
}

// describePlan is the JSON of plan h, with partitions for dataset ds (0: none).
func describePlan(h, ds uint64) ([]byte, error) {
	p, err := getPlan(h)
	if err != nil {
		return nil, err
	}
	var d dataset.Dataset
	if ds != 0 {
		if d, err = getDataset(ds); err != nil {
			return nil, err
		}
	}
	pl, err := p.Plan(d, nil)
	if err != nil {
		return nil, err
	}
	text, err := json.Marshal(pl)
	return text, errs.Wrap(errs.Internal, err)
}
