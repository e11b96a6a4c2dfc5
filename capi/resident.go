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
	"github.com/stemdot/stemdot/masks"
)

// kindResident is the handle kind of a dataset held in GPU memory.
const kindResident = "resident"

//export stemdot_to_device
func stemdot_to_device(dsHandle C.stemdot_dataset, device C.int, out *C.stemdot_resident) (st C.stemdot_status) {
	const fn = "stemdot_to_device"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	v, release, err := handles.acquire(uint64(dsHandle), kindDataset)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	r, err := stemdot.ToDevice(context.Background(), v.(dataset.Dataset), int(device))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_resident(handles.add(kindResident, r))
	return succeed()
}

//export stemdot_resident_apply
func stemdot_resident_apply(h C.stemdot_resident, maskData *C.stemdot_cfloat, nMasks, sigY, sigX C.size_t,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_resident_apply"
	defer guard(fn, &st)
	if maskData == nil || out == nil {
		return fail(fn, failf(errs.Argument, "masks and out must not be NULL"))
	}
	v, release, err := handles.acquire(uint64(h), kindResident)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	weights, err := sizeProduct("masks", masks.MaxWeights, nMasks, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	stack, err := masks.New(int(nMasks), int(sigY), int(sigX), unsafe.Slice((*float32)(unsafe.Pointer(maskData)), weights), nil)
	if err != nil {
		return fail(fn, errs.Wrap(errs.Argument, err))
	}
	n, err := sizeProduct("out_len", 0, outLen)
	if err != nil {
		return fail(fn, err)
	}
	var opt stemdot.ApplyOptions
	switch outDType {
	case C.STEMDOT_FLOAT32:
		opt.Out32 = unsafe.Slice((*float32)(out), n)
	case C.STEMDOT_FLOAT64:
		opt.Float64, opt.Out64 = true, unsafe.Slice((*float64)(out), n)
	default:
		return fail(fn, failf(errs.DType, "result dtype %d is not STEMDOT_FLOAT32 (%d) or STEMDOT_FLOAT64 (%d)", outDType, C.STEMDOT_FLOAT32, C.STEMDOT_FLOAT64))
	}
	if _, err := v.(*stemdot.Resident).Apply(context.Background(), stack, opt); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_resident_free
func stemdot_resident_free(h C.stemdot_resident) (st C.stemdot_status) {
	const fn = "stemdot_resident_free"
	defer guard(fn, &st)
	v, err := handles.remove(uint64(h), kindResident, nil)
	if err != nil {
		return fail(fn, err)
	}
	if err := v.(*stemdot.Resident).Close(); err != nil {
		return fail(fn, err)
	}
	return succeed()
}
