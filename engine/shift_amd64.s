#include "textflag.h"

// AVX2+FMA row helpers of the shifted-frame builder (shift.go, shift_amd64.go). Every
// function processes n values, n a positive multiple of 8.
//
//	func cvt<T>F32(dst *float32, src *T, n int)         dst[i] = float32(src[i])
//	func lerpF32(dst, a, b *float32, wa, wb float32, n int)  dst[i] = wa·a[i] + wb·b[i]
//
// (lerpF32 rounds once, FMA; its inputs are float32, its outputs feed the kernels.) The
// conversions and row shifts read frames straight from a file's mapping, so they
// prefetch 4 KiB ahead (the hardware prefetchers stop at 4 KiB pages): further than the
// kernels of simd_amd64.s (1 KiB), because the block kernels then run on the rows built
// while no load of the frame is in flight; on 256×256 uint16 frames in place, sub-pixel
// shifts of 1 and 4 masks ran 10-20% faster than with 1 KiB (BenchmarkCPUWorkerShifted).

#define CVT(NAME, LOAD, SCALE) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	XORQ AX, AX; \
loop: \
	PREFETCHT0 4096(SI)(AX*SCALE); \
	LOAD (SI)(AX*SCALE), Y0; \
	VCVTDQ2PS Y0, Y0; \
	VMOVUPS Y0, (DI)(AX*4); \
	ADDQ $8, AX; \
	CMPQ AX, CX; \
	JB loop; \
	VZEROUPPER; \
	RET

CVT(·cvtU8F32, VPMOVZXBD, 1)
CVT(·cvtI8F32, VPMOVSXBD, 1)
CVT(·cvtU16F32, VPMOVZXWD, 2)
CVT(·cvtI16F32, VPMOVSXWD, 2)
CVT(·cvtI32F32, VMOVDQU, 4)

// func lerpF32(dst, a, b *float32, wa, wb float32, n int)
TEXT ·lerpF32(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	MOVQ         b+16(FP), DX
	VBROADCASTSS wa+24(FP), Y14
	VBROADCASTSS wb+28(FP), Y15
	MOVQ         n+32(FP), CX
	XORQ         AX, AX

lerp:
	VMULPS      (SI)(AX*4), Y14, Y0
	VFMADD231PS (DX)(AX*4), Y15, Y0
	VMOVUPS     Y0, (DI)(AX*4)
	ADDQ        $8, AX
	CMPQ        AX, CX
	JB          lerp
	VZEROUPPER
	RET

// func shiftRow<T>(dst, hprev, hnext *float32, src *T, wx0, wx1, wy0, wy1 float32, n int)
// shifts source row src in x and blends it with the previous one in y, in one pass:
// hnext[i] = wx0·src[i] + wx1·src[i+1] (src[n] is read), g[i] = wy0·hprev[i] +
// wy1·hnext[i] (dst is g).
#define SHIFTROW(NAME, LOAD, CVT, SCALE) \
TEXT NAME(SB), NOSPLIT, $0-56; \
	MOVQ dst+0(FP), DI; \
	MOVQ hprev+8(FP), R8; \
	MOVQ hnext+16(FP), R9; \
	MOVQ src+24(FP), SI; \
	MOVQ SI, R10; \
	ADDQ $SCALE, R10; \
	VBROADCASTSS wx0+32(FP), Y12; \
	VBROADCASTSS wx1+36(FP), Y13; \
	VBROADCASTSS wy0+40(FP), Y14; \
	VBROADCASTSS wy1+44(FP), Y15; \
	MOVQ n+48(FP), CX; \
	XORQ AX, AX; \
shift: \
	PREFETCHT0 4096(SI)(AX*SCALE); \
	LOAD (SI)(AX*SCALE), Y0; \
	LOAD (R10)(AX*SCALE), Y1; \
	CVT Y0, Y0; \
	CVT Y1, Y1; \
	VMULPS Y0, Y12, Y0; \
	VFMADD231PS Y1, Y13, Y0; \
	VMOVUPS Y0, (R9)(AX*4); \
	VMULPS (R8)(AX*4), Y14, Y1; \
	VFMADD231PS Y0, Y15, Y1; \
	VMOVUPS Y1, (DI)(AX*4); \
	ADDQ $8, AX; \
	CMPQ AX, CX; \
	JB shift; \
	VZEROUPPER; \
	RET

SHIFTROW(·shiftRowU8, VPMOVZXBD, VCVTDQ2PS, 1)
SHIFTROW(·shiftRowI8, VPMOVSXBD, VCVTDQ2PS, 1)
SHIFTROW(·shiftRowU16, VPMOVZXWD, VCVTDQ2PS, 2)
SHIFTROW(·shiftRowI16, VPMOVSXWD, VCVTDQ2PS, 2)
SHIFTROW(·shiftRowI32, VMOVDQU, VCVTDQ2PS, 4)
SHIFTROW(·shiftRowF32, VMOVUPS, VMOVAPS, 4)

// func shiftRow1<T>(dst, hprev, hnext *float32, p, q *T, beta, alpha float32, ynext, n int)
// is shiftRow<T> for scaled weights (one weight of each axis 1): hnext[i] = p[i] +
// beta·q[i] (p and q: src and src+1, in either order), dst[i] = hprev[i] +
// alpha·hnext[i] (ynext = 0) or hnext[i] + alpha·hprev[i] (ynext ≠ 0): one multiply-add
// for each.
#define SHIFTROW1(NAME, LOAD, CVT, SCALE) \
TEXT NAME(SB), NOSPLIT, $0-64; \
	MOVQ dst+0(FP), DI; \
	MOVQ hprev+8(FP), R8; \
	MOVQ hnext+16(FP), R9; \
	MOVQ p+24(FP), SI; \
	MOVQ q+32(FP), R10; \
	VBROADCASTSS beta+40(FP), Y13; \
	VBROADCASTSS alpha+44(FP), Y14; \
	MOVQ ynext+48(FP), DX; \
	MOVQ n+56(FP), CX; \
	XORQ AX, AX; \
	TESTQ DX, DX; \
	JNZ next; \
prev: \
	PREFETCHT0 4096(SI)(AX*SCALE); \
	LOAD (SI)(AX*SCALE), Y0; \
	LOAD (R10)(AX*SCALE), Y1; \
	CVT Y0, Y0; \
	CVT Y1, Y1; \
	VFMADD231PS Y1, Y13, Y0; \
	VMOVUPS Y0, (R9)(AX*4); \
	VMOVUPS (R8)(AX*4), Y1; \
	VFMADD231PS Y0, Y14, Y1; \
	VMOVUPS Y1, (DI)(AX*4); \
	ADDQ $8, AX; \
	CMPQ AX, CX; \
	JB prev; \
	VZEROUPPER; \
	RET; \
next: \
	PREFETCHT0 4096(SI)(AX*SCALE); \
	LOAD (SI)(AX*SCALE), Y0; \
	LOAD (R10)(AX*SCALE), Y1; \
	CVT Y0, Y0; \
	CVT Y1, Y1; \
	VFMADD231PS Y1, Y13, Y0; \
	VMOVUPS Y0, (R9)(AX*4); \
	VFMADD231PS (R8)(AX*4), Y14, Y0; \
	VMOVUPS Y0, (DI)(AX*4); \
	ADDQ $8, AX; \
	CMPQ AX, CX; \
	JB next; \
	VZEROUPPER; \
	RET

SHIFTROW1(·shiftRow1U8, VPMOVZXBD, VCVTDQ2PS, 1)
SHIFTROW1(·shiftRow1I8, VPMOVSXBD, VCVTDQ2PS, 1)
SHIFTROW1(·shiftRow1U16, VPMOVZXWD, VCVTDQ2PS, 2)
SHIFTROW1(·shiftRow1I16, VPMOVSXWD, VCVTDQ2PS, 2)
SHIFTROW1(·shiftRow1I32, VMOVDQU, VCVTDQ2PS, 4)
SHIFTROW1(·shiftRow1F32, VMOVUPS, VMOVAPS, 4)
