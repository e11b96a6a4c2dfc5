package engine

import "golang.org/x/sys/cpu"

// haveAVX2FMA reports whether the CPU has AVX2 and FMA, which the kernels of
// simd_amd64.s need. GODEBUG=cpu.avx2=off (read by golang.org/x/sys/cpu at start-up)
// clears it for a whole process, e.g. to run the tests on the pure-Go path.
var haveAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly kernels: dot<T>x<M> sets out[m] = Σ_{i<n} float32(px[i])·w[m·ldw+i] for
// m < M, with n a positive multiple of 16 (see simd_amd64.s).

//go:noescape
func dotU8x1(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU8x2(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU8x4(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU8x8(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x1(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x2(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x4(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x8(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x1(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x2(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x4(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x8(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x1(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x2(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x4(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x8(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI32x1(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI32x2(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI32x4(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI32x8(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotF32x1(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotF32x2(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotF32x4(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotF32x8(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU8x4x2(px0, px1 *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x4x2(px0, px1 *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x4x2(px0, px1 *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x4x2(px0, px1 *int16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI32x4x2(px0, px1 *int32, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotF32x4x2(px0, px1 *float32, n int, w *float32, ldw int, pf *float32, out *float32)

// The AVX-512 pair kernels (simd_pair512_amd64.s): dot<T>x4x2 with 16 lanes for 8- and
// 16-bit pixels, for CPUs with AVX-512F (haveAVX512).

//go:noescape
func dotU8x4x2z(px0, px1 *uint8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI8x4x2z(px0, px1 *int8, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotU16x4x2z(px0, px1 *uint16, n int, w *float32, ldw int, pf *float32, out *float32)

//go:noescape
func dotI16x4x2z(px0, px1 *int16, n int, w *float32, ldw int, pf *float32, out *float32)

// The one-mask × four-frame kernels (DOT1X4 in simd_amd64.s): quadKernel.

//go:noescape
func dotU8x1x4(px0, px1, px2, px3 *uint8, n int, w *float32, out *float32)

//go:noescape
func dotI8x1x4(px0, px1, px2, px3 *int8, n int, w *float32, out *float32)

//go:noescape
func dotU16x1x4(px0, px1, px2, px3 *uint16, n int, w *float32, out *float32)

//go:noescape
func dotI16x1x4(px0, px1, px2, px3 *int16, n int, w *float32, out *float32)

//go:noescape
func dotI32x1x4(px0, px1, px2, px3 *int32, n int, w *float32, out *float32)

//go:noescape
func dotF32x1x4(px0, px1, px2, px3 *float32, n int, w *float32, out *float32)

// The AVX-512 quad kernels for float32 frames (simd_pair512_amd64.s), for CPUs with
// AVX-512F (haveAVX512).

//go:noescape
func dotF32x1x4z(px0, px1, px2, px3 *float32, n int, w *float32, out *float32)

//go:noescape
func dotF32x2x4z(px0, px1, px2, px3 *float32, n int, w *float32, ldw int, out *float32)

// The two-mask × four-frame kernels (DOT2X4 in simd_amd64.s): quad2Kernel.

//go:noescape
func dotU8x2x4(px0, px1, px2, px3 *uint8, n int, w *float32, ldw int, out *float32)

//go:noescape
func dotI8x2x4(px0, px1, px2, px3 *int8, n int, w *float32, ldw int, out *float32)

//go:noescape
func dotU16x2x4(px0, px1, px2, px3 *uint16, n int, w *float32, ldw int, out *float32)

//go:noescape
func dotI16x2x4(px0, px1, px2, px3 *int16, n int, w *float32, ldw int, out *float32)

//go:noescape
func dotI32x2x4(px0, px1, px2, px3 *int32, n int, w *float32, ldw int, out *float32)

//go:noescape
func dotF32x2x4(px0, px1, px2, px3 *float32, n int, w *float32, ldw int, out *float32)

// simdKernels returns the assembly kernels for pixel type N, for groups of 1, 2, 4 and
// 8 masks, the pair kernel (AVX-512 for 8- and 16-bit pixels where the CPU has it: 4
// masks on 256×256 uint16 frames in place, one Zen 5 core, 20.8-24.4 GB/s against
// 16.6-18.3 with AVX2) and the quad kernels for 1 and 2 masks (AVX-512 for float32
// pixels where the CPU has it, which then also serve stacks of up to 7 masks: one Zen 4
// core, frames in place, ×floor 1 mask 0.74-0.76 → 0.86-0.87, 2 masks 0.68-0.74 →
// 0.74-0.82, 4 pairs; an AVX-512 1-mask one for uint16 was slower); nil for the types
// they do not handle (uint32, float64), on CPUs without AVX2 and FMA, and while useSIMD
// is off.
func simdKernels[N native]() *groupKernels[N] {
	if !useSIMD || !haveAVX2FMA {
		return nil
	}
	z := haveAVX512
	var k any
	switch any(*new(N)).(type) {
	case uint8:
		k = &groupKernels[uint8]{[4]blockKernel[uint8]{dotU8x1, dotU8x2, dotU8x4, dotU8x8}, either(z, dotU8x4x2z, dotU8x4x2), dotU8x1x4, dotU8x2x4, 2}
	case int8:
		k = &groupKernels[int8]{[4]blockKernel[int8]{dotI8x1, dotI8x2, dotI8x4, dotI8x8}, either(z, dotI8x4x2z, dotI8x4x2), dotI8x1x4, dotI8x2x4, 2}
	case uint16:
		k = &groupKernels[uint16]{[4]blockKernel[uint16]{dotU16x1, dotU16x2, dotU16x4, dotU16x8}, either(z, dotU16x4x2z, dotU16x4x2), dotU16x1x4, dotU16x2x4, 2}
	case int16:
		k = &groupKernels[int16]{[4]blockKernel[int16]{dotI16x1, dotI16x2, dotI16x4, dotI16x8}, either(z, dotI16x4x2z, dotI16x4x2), dotI16x1x4, dotI16x2x4, 2}
	case int32:
		k = &groupKernels[int32]{[4]blockKernel[int32]{dotI32x1, dotI32x2, dotI32x4, dotI32x8}, dotI32x4x2, dotI32x1x4, dotI32x2x4, 2}
	case float32:
		k = &groupKernels[float32]{[4]blockKernel[float32]{dotF32x1, dotF32x2, dotF32x4, dotF32x8}, dotF32x4x2, either(z, dotF32x1x4z, dotF32x1x4), either(z, dotF32x2x4z, dotF32x2x4), either(z, packedMinMasks-1, 2)}
	default:
		return nil
	}
	return k.(*groupKernels[N])
}

// either returns a where cond holds, else b.
func either[F any](cond bool, a, b F) F {
	if cond {
		return a
	}
	return b
}
