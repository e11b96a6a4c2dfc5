package engine

import "golang.org/x/sys/cpu"

//go:generate go run gen_bcast.go
//go:generate go run gen_gather.go

// haveAVX512 reports whether the CPU has AVX-512F and the OS saves the ZMM state
// (golang.org/x/sys/cpu checks XCR0), which the ZMM kernels of simd_packed_amd64.s need.
// GODEBUG=cpu.avx512f=off clears it for a whole process.
var haveAVX512 = cpu.X86.HasAVX512F

// The packed-weight kernels of simd_packed_amd64.s: dot<T>p<F>x8Z (AVX-512) and
// dot<T>p<F>x4Y (AVX2+FMA) for F = 1, 2, 3 frames.

//go:noescape
func dotU8p1x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU8p1x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU8p2x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU8p2x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU8p3x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU8p3x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p1x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p1x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p2x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p2x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p3x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI8p3x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p1x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p1x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p2x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p2x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p3x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotU16p3x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p1x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p1x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p2x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p2x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p3x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI16p3x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p1x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p1x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p2x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p2x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p3x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotI32p3x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p1x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p1x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p2x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p2x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p3x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

//go:noescape
func dotF32p3x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)

// packedKernelsFor returns the packed-weight kernels for pixel type N: AVX-512 where the
// CPU and OS have it, else AVX2+FMA; nil for the types they do not handle (uint32,
// float64), on CPUs without AVX2 and FMA, and while useSIMD is off.
func packedKernelsFor[N native]() *packedKernels[N] {
	if !useSIMD || !haveAVX2FMA {
		return nil
	}
	z := haveAVX512
	var k any
	switch any(*new(N)).(type) {
	case uint8:
		k = pick(z, [3]packedKernel[uint8]{dotU8p1x8Z, dotU8p2x8Z, dotU8p3x8Z}, [3]packedKernel[uint8]{dotU8p1x4Y, dotU8p2x4Y, dotU8p3x4Y})
	case int8:
		k = pick(z, [3]packedKernel[int8]{dotI8p1x8Z, dotI8p2x8Z, dotI8p3x8Z}, [3]packedKernel[int8]{dotI8p1x4Y, dotI8p2x4Y, dotI8p3x4Y})
	case uint16:
		k = pick(z, [3]packedKernel[uint16]{dotU16p1x8Z, dotU16p2x8Z, dotU16p3x8Z}, [3]packedKernel[uint16]{dotU16p1x4Y, dotU16p2x4Y, dotU16p3x4Y})
	case int16:
		k = pick(z, [3]packedKernel[int16]{dotI16p1x8Z, dotI16p2x8Z, dotI16p3x8Z}, [3]packedKernel[int16]{dotI16p1x4Y, dotI16p2x4Y, dotI16p3x4Y})
	case int32:
		k = pick(z, [3]packedKernel[int32]{dotI32p1x8Z, dotI32p2x8Z, dotI32p3x8Z}, [3]packedKernel[int32]{dotI32p1x4Y, dotI32p2x4Y, dotI32p3x4Y})
	case float32:
		k = pick(z, [3]packedKernel[float32]{dotF32p1x8Z, dotF32p2x8Z, dotF32p3x8Z}, [3]packedKernel[float32]{dotF32p1x4Y, dotF32p2x4Y, dotF32p3x4Y})
	default:
		return nil
	}
	return k.(*packedKernels[N])
}

// pick returns the ZMM kernels (8 masks per call, tails under an opmask) when z, else the
// YMM ones (4 masks per call, whole 16-pixel steps).
func pick[N native](z bool, zmm, ymm [3]packedKernel[N]) *packedKernels[N] {
	if z {
		return &packedKernels[N]{frames: zmm, masks: 8, tails: true}
	}
	return &packedKernels[N]{frames: ymm, masks: 4}
}

// bcastKernelsFor returns the broadcast kernels (simd_bcast_amd64.s) for pixel type N:
// for float32 frames on CPUs and OSes with AVX-512, while useSIMD is on; else nil.
func bcastKernelsFor[N native]() *[bcastVectors][bcastFrames]bcastKernel {
	if _, f32 := any(*new(N)).(float32); !f32 || !useSIMD || !haveAVX2FMA || !haveAVX512 {
		return nil
	}
	return &bcastKernelTable
}
