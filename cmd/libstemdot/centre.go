package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"slices"
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

//export stemdot_go_find_centre
func stemdot_go_find_centre(frame *C.stemdot_cdouble, sigY, sigX C.size_t, centre *C.double) (st C.stemdot_status) {
	const fn = "stemdot_find_centre"
	defer guard(fn, &st)
	if frame == nil || centre == nil {
		return fail(fn, failf(errs.Argument, "frame and centre must not be NULL"))
	}
	n, err := sizeProduct("sig_shape", 8, masks.MaxWeights, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	c, err := stemdot.FindCentre(unsafe.Slice((*float64)(unsafe.Pointer(frame)), n), [2]int{int(sigY), int(sigX)})
	if err != nil {
		return fail(fn, err)
	}
	out := unsafe.Slice((*float64)(unsafe.Pointer(centre)), 3)
	out[0], out[1], out[2] = c.X, c.Y, c.R
	return succeed()
}

//export stemdot_go_mask_parse_centred
func stemdot_go_mask_parse_centred(spec *C.stemdot_cchar, sigY, sigX C.size_t, centre *C.stemdot_cdouble, out *C.float, outLen C.size_t, nMasks *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_mask_parse_centred"
	defer guard(fn, &st)
	if centre == nil {
		return fail(fn, failf(errs.Argument, "centre must not be NULL (stemdot_mask_parse takes specs without auto)"))
	}
	c := unsafe.Slice((*float64)(unsafe.Pointer(centre)), 3)
	return maskParse(fn, spec, sigY, sigX, &masks.Centre{X: c[0], Y: c[1], R: c[2]}, out, outLen, nMasks)
}

// goCentre is the centre of 3 doubles x, y, r at c; nil for NULL.
func goCentre(c *C.stemdot_cdouble) *masks.Centre {
	if c == nil {
		return nil
	}
	v := unsafe.Slice((*float64)(unsafe.Pointer(c)), 3)
	return &masks.Centre{X: v[0], Y: v[1], R: v[2]}
}

//export stemdot_go_centre
func stemdot_go_centre(dsHandle C.stemdot_dataset, planHandle C.stemdot_plan, shifts *C.stemdot_cdouble, nShifts C.size_t, centre *C.double) (st C.stemdot_status) {
	const fn = "stemdot_centre"
	defer guard(fn, &st)
	if centre == nil || (shifts == nil && nShifts > 0) {
		return fail(fn, failf(errs.Argument, "centre must not be NULL (3 doubles), nor shifts when n_shifts is not 0"))
	}
	ds, pl, _, release, err := jobOf(uint64(dsHandle), uint64(planHandle), 0)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	var s []float64
	if nShifts > 0 {
		n, err := sizeProduct("n_shifts", 8, 0, nShifts)
		if err != nil {
			return fail(fn, err)
		}
		s = slices.Clone(unsafe.Slice((*float64)(unsafe.Pointer(shifts)), n))
	}
	c, err := pl.Centre(context.Background(), ds, s)
	if err != nil {
		return fail(fn, err)
	}
	copy(unsafe.Slice((*float64)(unsafe.Pointer(centre)), 3), []float64{c.X, c.Y, c.R})
	return succeed()
}
