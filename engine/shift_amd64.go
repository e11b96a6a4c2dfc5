package engine

import "unsafe"

// The row helpers of shift_amd64.s (n a positive multiple of 8; AVX2 and FMA).

//go:noescape
func cvtU8F32(dst *float32, src *uint8, n int)

//go:noescape
func cvtI8F32(dst *float32, src *int8, n int)

//go:noescape
func cvtU16F32(dst *float32, src *uint16, n int)

//go:noescape
func cvtI16F32(dst *float32, src *int16, n int)

//go:noescape
func cvtI32F32(dst *float32, src *int32, n int)

//go:noescape
func lerpF32(dst, a, b *float32, wa, wb float32, n int)

//go:noescape
func shiftRowU8(dst, hprev, hnext *float32, src *uint8, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRowI8(dst, hprev, hnext *float32, src *int8, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRowU16(dst, hprev, hnext *float32, src *uint16, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRowI16(dst, hprev, hnext *float32, src *int16, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRowI32(dst, hprev, hnext *float32, src *int32, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRowF32(dst, hprev, hnext *float32, src *float32, wx0, wx1, wy0, wy1 float32, n int)

//go:noescape
func shiftRow1U8(dst, hprev, hnext *float32, p, q *uint8, beta, alpha float32, ynext, n int)

//go:noescape
func shiftRow1I8(dst, hprev, hnext *float32, p, q *int8, beta, alpha float32, ynext, n int)

//go:noescape
func shiftRow1U16(dst, hprev, hnext *float32, p, q *uint16, beta, alpha float32, ynext, n int)

//go:noescape
func shiftRow1I16(dst, hprev, hnext *float32, p, q *int16, beta, alpha float32, ynext, n int)

//go:noescape
func shiftRow1I32(dst, hprev, hnext *float32, p, q *int32, beta, alpha float32, ynext, n int)

//go:noescape
func shiftRow1F32(dst, hprev, hnext *float32, p, q *float32, beta, alpha float32, ynext, n int)

// rowShift returns, for float32 rows of pixel type N on CPUs with AVX2 and FMA (while
// useSIMD is on), the function that sets hnext[i] = wx0·F(src[i]) + wx1·F(src[i+1]) and
// g[i] = wy0·hprev[i] + wy1·hnext[i] for i < len(g) (src holds len(g)+1 pixels) in one
// pass; nil elsewhere.
func rowShift[N native, F float]() func(g, hprev, hnext []F, src []N, wx0, wx1, wy0, wy1 F) {
	if !useSIMD || !haveAVX2FMA {
		return nil
	}
	if _, ok := any(*new(F)).(float32); !ok {
		return nil
	}
	var f any
	switch any(*new(N)).(type) {
	case uint8:
		f = fusedShift(shiftRowU8, shiftRow1U8)
	case int8:
		f = fusedShift(shiftRowI8, shiftRow1I8)
	case uint16:
		f = fusedShift(shiftRowU16, shiftRow1U16)
	case int16:
		f = fusedShift(shiftRowI16, shiftRow1I16)
	case int32:
		f = fusedShift(shiftRowI32, shiftRow1I32)
	case float32:
		f = fusedShift(shiftRowF32, shiftRow1F32)
	default:
		return nil
	}
	return f.(func(g, hprev, hnext []F, src []N, wx0, wx1, wy0, wy1 F))
}

// rowShift1 returns, for float32 rows of pixel type N on CPUs with AVX2 and FMA (while
// useSIMD is on), the assembly row shift for scaled weights shiftRow1<T> (n a positive
// multiple of 8); nil elsewhere.
func rowShift1[N native, F float]() func(g, hprev, hnext *F, p, q *N, beta, alpha F, ynext, n int) {
	if _, ok := any(*new(F)).(float32); !ok || !useSIMD || !haveAVX2FMA {
		return nil
	}
	var f any
	switch any(*new(N)).(type) {
	case uint8:
		f = shiftRow1U8
	case int8:
		f = shiftRow1I8
	case uint16:
		f = shiftRow1U16
	case int16:
		f = shiftRow1I16
	case int32:
		f = shiftRow1I32
	case float32:
		f = shiftRow1F32
	default:
		return nil
	}
	return f.(func(g, hprev, hnext *F, p, q *N, beta, alpha F, ynext, n int))
}

// fusedShift runs an assembly row shift on the whole groups of 8 values (the last group
// again for the rest), the rest of rows shorter than 8 in Go: asm1 for scaled weights
// (one weight of each axis 1, see shiftFrames.begin), asm for any others.
func fusedShift[N native](asm func(g, hprev, hnext *float32, src *N, wx0, wx1, wy0, wy1 float32, n int),
	asm1 func(g, hprev, hnext *float32, p, q *N, beta, alpha float32, ynext, n int)) func(g, hprev, hnext []float32, src []N, wx0, wx1, wy0, wy1 float32) {
	return func(g, hprev, hnext []float32, src []N, wx0, wx1, wy0, wy1 float32) {
		hprev, hnext, src = hprev[:len(g)], hnext[:len(g)], src[:len(g)+1]
		if len(g) < 8 {
			for i := range g {
				hnext[i] = wx0*float32(src[i]) + wx1*float32(src[i+1])
				g[i] = wy0*hprev[i] + wy1*hnext[i]
			}
			return
		}
		// run shifts the values [i, i+n): each depends only on src and hprev, which a
		// call does not write, so that the values of two calls may overlap.
		run := func(i, n int) {
			switch {
			case (wx0 == 1 || wx1 == 1) && (wy0 == 1 || wy1 == 1):
				p, q, beta := &src[i], &src[i+1], wx1
				if wx0 != 1 {
					p, q, beta = q, p, wx0
				}
				ynext, alpha := 0, wy1
				if wy0 != 1 {
					ynext, alpha = 1, wy0
				}
				asm1(&g[i], &hprev[i], &hnext[i], p, q, beta, alpha, ynext, n)
			default:
				asm(&g[i], &hprev[i], &hnext[i], &src[i], wx0, wx1, wy0, wy1, n)
			}
		}
		n := len(g) &^ 7
		run(0, n)
		if n < len(g) {
			run(len(g)-8, 8)
		}
	}
}

// rowConvert returns the vectorised conversion of a row of pixel type N to F: the
// assembly helpers for float32 rows of 8- to 32-bit integers on CPUs with AVX2 and FMA
// (while useSIMD is on), else the Go loop (convert).
func rowConvert[N native, F float]() func(dst []F, src []N) {
	if !useSIMD || !haveAVX2FMA {
		return convert[N, F]
	}
	var f any
	switch any(*new(F)).(type) {
	case float32:
		switch any(*new(N)).(type) {
		case uint8:
			f = vectorised(cvtU8F32)
		case int8:
			f = vectorised(cvtI8F32)
		case uint16:
			f = vectorised(cvtU16F32)
		case int16:
			f = vectorised(cvtI16F32)
		case int32:
			f = vectorised(cvtI32F32)
		case float32:
			f = func(dst, src []float32) { copy(dst, src) }
		}
	}
	if f == nil {
		return convert[N, F]
	}
	return f.(func([]F, []N))
}

// vectorised runs an assembly conversion on the whole groups of 8 values, the rest in Go.
func vectorised[N native](cvt func(dst *float32, src *N, n int)) func(dst []float32, src []N) {
	return func(dst []float32, src []N) {
		n := len(src) &^ 7
		if n > 0 {
			cvt(unsafe.SliceData(dst[:n]), unsafe.SliceData(src), n)
		}
		convert(dst[n:len(src)], src[n:])
	}
}

// rowLerp returns the function setting dst[i] = wa·a[i] + wb·b[i] for i < len(dst): the
// assembly helper for float32 on CPUs with AVX2 and FMA (while useSIMD is on), else Go.
func rowLerp[F float]() func(dst, a, b []F, wa, wb F) {
	var zero F
	if _, ok := any(zero).(float32); ok && useSIMD && haveAVX2FMA {
		return any(func(dst, a, b []float32, wa, wb float32) {
			n := len(dst) &^ 7
			a, b = a[:len(dst)], b[:len(dst)]
			if n > 0 {
				lerpF32(unsafe.SliceData(dst), unsafe.SliceData(a), unsafe.SliceData(b), wa, wb, n)
			}
			lerpGo(dst[n:], a[n:], b[n:], wa, wb)
		}).(func(dst, a, b []F, wa, wb F))
	}
	return lerpGo[F]
}

// The fused shifted-mask kernels of shiftdot_amd64.s (AVX2 and FMA), for 1, 2 and 4 masks.

//go:noescape
func shiftDotU8x1(a *shiftDotArgs)

//go:noescape
func shiftDotU8x2(a *shiftDotArgs)

//go:noescape
func shiftDotU8x4(a *shiftDotArgs)

//go:noescape
func shiftDotI8x1(a *shiftDotArgs)

//go:noescape
func shiftDotI8x2(a *shiftDotArgs)

//go:noescape
func shiftDotI8x4(a *shiftDotArgs)

//go:noescape
func shiftDotU16x1(a *shiftDotArgs)

//go:noescape
func shiftDotU16x2(a *shiftDotArgs)

//go:noescape
func shiftDotU16x4(a *shiftDotArgs)

//go:noescape
func shiftDotI16x1(a *shiftDotArgs)

//go:noescape
func shiftDotI16x2(a *shiftDotArgs)

//go:noescape
func shiftDotI16x4(a *shiftDotArgs)

//go:noescape
func shiftDotI32x1(a *shiftDotArgs)

//go:noescape
func shiftDotI32x2(a *shiftDotArgs)

//go:noescape
func shiftDotI32x4(a *shiftDotArgs)

//go:noescape
func shiftDotF32x1(a *shiftDotArgs)

//go:noescape
func shiftDotF32x2(a *shiftDotArgs)

//go:noescape
func shiftDotF32x4(a *shiftDotArgs)

// shiftDotKernels returns the fused shifted-mask kernels for 1, 2 and 4 masks of pixel
// type N on CPUs with AVX2 and FMA (while useSIMD is on); nil elsewhere.
func shiftDotKernels[N native]() *[3]func(*shiftDotArgs) {
	if !useSIMD || !haveAVX2FMA {
		return nil
	}
	var k [3]func(*shiftDotArgs)
	switch any(*new(N)).(type) {
	case uint8:
		k = [3]func(*shiftDotArgs){shiftDotU8x1, shiftDotU8x2, shiftDotU8x4}
	case int8:
		k = [3]func(*shiftDotArgs){shiftDotI8x1, shiftDotI8x2, shiftDotI8x4}
	case uint16:
		k = [3]func(*shiftDotArgs){shiftDotU16x1, shiftDotU16x2, shiftDotU16x4}
	case int16:
		k = [3]func(*shiftDotArgs){shiftDotI16x1, shiftDotI16x2, shiftDotI16x4}
	case int32:
		k = [3]func(*shiftDotArgs){shiftDotI32x1, shiftDotI32x2, shiftDotI32x4}
	case float32:
		k = [3]func(*shiftDotArgs){shiftDotF32x1, shiftDotF32x2, shiftDotF32x4}
	default:
		return nil
	}
	return &k
}
