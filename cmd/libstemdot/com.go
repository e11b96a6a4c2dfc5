package main

/*
#include "shim.h"
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/safetext"
)

//export stemdot_go_com_products
func stemdot_go_com_products(shifts *C.stemdot_cdouble, navY, navX C.size_t, rotation C.double, flipY C.int,
	field, magnitude, divergence, curl, icom *C.double, warning *C.char, warningLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_com_products"
	defer guard(fn, &st)
	if shifts == nil {
		return fail(fn, failf(errs.Argument, "shifts must not be NULL"))
	}
	n, err := sizeProduct("shifts", 8, math.MaxInt32, navY, navX, 2)
	if err != nil {
		return fail(fn, err)
	}
	in := unsafe.Slice((*float64)(unsafe.Pointer(shifts)), n)
	p, err := stemdot.NewCOMProducts(in, []int{int(navY), int(navX)}, stemdot.COMOptions{Rotation: float64(rotation), FlipY: flipY != 0})
	if err != nil {
		return fail(fn, err)
	}
	put := func(dst *C.double, src []float64) {
		if dst != nil {
			copy(unsafe.Slice((*float64)(unsafe.Pointer(dst)), len(src)), src)
		}
	}
	if field != nil {
		out := unsafe.Slice((*float64)(unsafe.Pointer(field)), n)
		for i := range p.FieldY {
			out[2*i], out[2*i+1] = p.FieldY[i], p.FieldX[i]
		}
	}
	put(magnitude, p.Magnitude)
	put(divergence, p.Divergence)
	put(curl, p.Curl)
	put(icom, p.ICoM)
	if warning != nil && warningLen > 0 {
		text := ""
		if len(p.Warnings) > 0 {
			text = safetext.String(frontend.OptionKeys(p.Warnings[0]))
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(warning)), min(uint64(warningLen), uint64(len(text))+1))
		k := copy(dst[:len(dst)-1], text)
		dst[k] = 0
	}
	return succeed()
}
