package main

/*
#cgo CFLAGS: -I${SRCDIR} -I${SRCDIR}/../../include
#include "shim.h"
*/
import "C"

import (
	"slices"
	"unsafe"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// prepareMasks is stemdot_masks_new: the stack of nMasks masks of sigY×sigX weights at
// data (float, or double with f64), prepared once (masks.Stack.Prepared: a copy that
// owns its weights, checked, in the form a run applies it, its counts taken).
func prepareMasks(data unsafe.Pointer, f64 bool, nMasks, sigY, sigX C.size_t) (*masks.Stack, error) {
	if data == nil {
		return nil, failf(errs.Argument, "masks must not be NULL")
	}
	s, err := maskStack(data, f64, nMasks, sigY, sigX)
	if err != nil {
		return nil, err
	}
	return newStack(s.Prepared())
}

func getMasks(id uint64) (*masks.Stack, error) {
	v, err := handles.get(id, kindMasks)
	if err != nil {
		return nil, err
	}
	return v.(*masks.Stack), nil
}

//export stemdot_go_masks_new
func stemdot_go_masks_new(data *C.stemdot_cvoid, dtype C.stemdot_dtype, nMasks, sigY, sigX C.size_t, out *C.stemdot_masks) (st C.stemdot_status) {
	const fn = "stemdot_masks_new"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = 0
	f64, err := masksDType(dtype)
	if err != nil {
		return fail(fn, err)
	}
	s, err := prepareMasks(unsafe.Pointer(data), f64, nMasks, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_masks(handles.add(kindMasks, s))
	return succeed()
}

//export stemdot_go_masks_free
func stemdot_go_masks_free(h C.stemdot_masks) (st C.stemdot_status) {
	const fn = "stemdot_masks_free"
	defer guard(fn, &st)
	// An apply running with the stack holds it until it returns: freeing is safe at any
	// time.
	if _, err := handles.remove(uint64(h), kindMasks, nil); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_apply_masks
func stemdot_go_apply_masks(dsHandle C.stemdot_dataset, masksHandle C.stemdot_masks, shifts *C.stemdot_cdouble, nShifts C.size_t,
	planHandle C.stemdot_plan, runHandle C.stemdot_run, progress C.stemdot_progress_fn, progressUser unsafe.Pointer,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_apply_masks"
	defer guard(fn, &st)
	stack, err := getMasks(uint64(masksHandle))
	if err != nil {
		return fail(fn, err)
	}
	var sh []float64
	switch {
	case shifts == nil && nShifts != 0:
		return fail(fn, failf(errs.Argument, "shifts is NULL, but n_shifts is %d (NULL and 0 apply the masks unshifted)", nShifts))
	case shifts != nil:
		n, err := sizeProduct("n_shifts", 8, 0, nShifts)
		if err != nil {
			return fail(fn, err)
		}
		// Copied: the engine holds the shifts for the whole run, the caller's buffer only
		// during the call.
		if sh = slices.Clone(unsafe.Slice((*float64)(unsafe.Pointer(shifts)), n)); sh == nil {
			sh = []float64{}
		}
	}
	return applyStack(fn, dsHandle, stack, planHandle, runHandle, progress, progressUser, out, outDType, outLen, sh)
}
