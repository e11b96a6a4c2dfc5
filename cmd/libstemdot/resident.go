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

// kindResident is the handle kind of a dataset held in GPU memory.
const kindResident = "resident"

//export stemdot_go_to_device
func stemdot_go_to_device(dsHandle C.stemdot_dataset, device C.int, out *C.stemdot_resident) (st C.stemdot_status) {
	const fn = "stemdot_to_device"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
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

//export stemdot_go_resident_apply
func stemdot_go_resident_apply(h C.stemdot_resident, maskData *C.stemdot_cfloat, nMasks, sigY, sigX C.size_t,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_resident_apply"
	defer guard(fn, &st)
	return residentApply(fn, h, unsafe.Pointer(maskData), false, nMasks, sigY, sigX, out, outDType, outLen)
}

//export stemdot_go_resident_apply64
func stemdot_go_resident_apply64(h C.stemdot_resident, maskData *C.stemdot_cdouble, nMasks, sigY, sigX C.size_t,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_resident_apply64"
	defer guard(fn, &st)
	return residentApply(fn, h, unsafe.Pointer(maskData), true, nMasks, sigY, sigX, out, outDType, outLen)
}

// residentApply is stemdot_resident_apply (masks of float) and stemdot_resident_apply64
// (masks of double, f64).
func residentApply(fn string, h C.stemdot_resident, maskData unsafe.Pointer, f64 bool, nMasks, sigY, sigX C.size_t,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) C.stemdot_status {
	if maskData == nil || out == nil {
		return fail(fn, failf(errs.Argument, "masks and out must not be NULL"))
	}
	v, release, err := handles.acquire(uint64(h), kindResident)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	stack, err := maskStack(maskData, f64, nMasks, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	n, err := sizeProduct("out_len", 8, 0, outLen) // float32 or float64: at most 8 bytes
	if err != nil {
		return fail(fn, err)
	}
	opt := stemdot.ApplyOptions{ROICompact: true} // as stemdot_apply: the dataset's frames
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

//export stemdot_go_resident_free
func stemdot_go_resident_free(h C.stemdot_resident) (st C.stemdot_status) {
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
