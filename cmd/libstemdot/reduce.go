package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// reduceRequest is one stemdot_reduce call, its buffers already wrapped as Go slices.
type reduceRequest struct {
	ds                  dataset.Dataset
	plan                *stemdot.Planner // nil: the default plan
	run                 *run             // nil: not cancellable
	sum, mean, max, std []float64        // nil: not asked
	progress            func(done, total uint64)
}

// reduce runs stemdot's Planner.Reduce for the frames asked (non-nil buffers) and copies
// them into the caller's buffers, each of sig_y × sig_x values.
func reduce(req reduceRequest) error {
	var err error
	pl := req.plan
	if pl == nil {
		if pl, err = newPlanner("", ""); err != nil {
			return err
		}
	}
	opt := stemdot.ReduceOptions{Sum: req.sum != nil, Mean: req.mean != nil, Max: req.max != nil, Std: req.std != nil}
	if !(opt.Sum || opt.Mean || opt.Max || opt.Std) {
		return failf(errs.Argument, "sum, mean, max and std are all NULL: give the buffer of at least one")
	}
	sig := req.ds.SigShape()
	for _, b := range [][]float64{req.sum, req.mean, req.max, req.std} {
		if b != nil && len(b) != sig[0]*sig[1] {
			return failf(errs.Shape, "out_len %d, but the frames of sig shape (%d, %d) need %d values", len(b), sig[0], sig[1], sig[0]*sig[1])
		}
	}
	return onRun(req.run, "reduce", func(ctx context.Context) error {
		return relayProgress(req.ds.NumFrames(), req.progress, func(p func(done, total int)) error {
			opt.Progress = p
			red, err := pl.Reduce(ctx, req.ds, opt)
			if err == nil {
				copy(req.sum, red.Sum)
				copy(req.mean, red.Mean)
				copy(req.max, red.Max)
				copy(req.std, red.Std)
			}
			return err
		})
	})
}

//export stemdot_go_reduce
func stemdot_go_reduce(dsHandle C.stemdot_dataset, planHandle C.stemdot_plan, runHandle C.stemdot_run,
	progress C.stemdot_progress_fn, progressUser unsafe.Pointer, sum, mean, max, std *C.double, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_reduce"
	defer guard(fn, &st)
	req := reduceRequest{}
	var release func()
	var err error
	if req.ds, req.plan, req.run, release, err = jobOf(uint64(dsHandle), uint64(planHandle), uint64(runHandle)); err != nil {
		return fail(fn, err)
	}
	defer release()
	n, err := sizeProduct("out_len", 8, 0, outLen)
	if err != nil {
		return fail(fn, err)
	}
	buf := func(p *C.double) []float64 {
		if p == nil {
			return nil
		}
		return unsafe.Slice((*float64)(unsafe.Pointer(p)), n)
	}
	req.sum, req.mean, req.max, req.std = buf(sum), buf(mean), buf(max), buf(std)
	if progress != nil {
		req.progress = func(done, total uint64) {
			C.stemdot_capi_call_progress(progress, C.uint64_t(done), C.uint64_t(total), progressUser)
		}
	}
	if err := reduce(req); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_pick
func stemdot_go_pick(dsHandle C.stemdot_dataset, positions *C.stemdot_csize, nPositions, ndim C.size_t, out unsafe.Pointer, outBytes C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_pick"
	defer guard(fn, &st)
	if positions == nil || out == nil {
		return fail(fn, failf(errs.Argument, "positions and out must not be NULL"))
	}
	v, release, err := handles.acquire(uint64(dsHandle), kindDataset)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	ds := v.(dataset.Dataset)
	if ndim > maxNavDims {
		return fail(fn, failf(errs.Shape, "ndim %d: a scan position has at most %d coordinates", ndim, maxNavDims))
	}
	n, err := sizeProduct("positions", 8, 0, nPositions, ndim)
	if err != nil {
		return fail(fn, err)
	}
	// the positions as Go holds them below: a slice of ndim ints each
	if _, err := sizeProduct("n_positions", 24+8*int(ndim), 0, nPositions); err != nil {
		return fail(fn, err)
	}
	nb, err := sizeProduct("out_bytes", 1, 0, outBytes)
	if err != nil {
		return fail(fn, err)
	}
	flat := unsafe.Slice((*C.size_t)(unsafe.Pointer(positions)), n)
	at := make([][]int, nPositions)
	for k := range at {
		at[k] = make([]int, ndim)
		for a := range at[k] {
			c := uint64(flat[k*int(ndim)+a])
			at[k][a] = int(min(c, uint64(1<<62))) // beyond any nav size: refused as outside
		}
	}
	if err := pick(ds, at, unsafe.Slice((*byte)(out), nb)); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

// pick copies the frames of ds at the scan positions at into out, which must hold them
// exactly (stemdot.Pick checks the positions).
func pick(ds dataset.Dataset, at [][]int, out []byte) error {
	if fb := ds.FrameBytes(); len(at) > maxBytes/fb || len(out) != len(at)*fb {
		return failf(errs.Shape, "out_bytes %d, but %d frames of %d bytes need %.0f", len(out), len(at), fb, float64(len(at))*float64(fb))
	}
	fr, err := stemdot.Pick(context.Background(), ds, at)
	if err != nil {
		return err
	}
	copy(out, fr.Data)
	return nil
}
