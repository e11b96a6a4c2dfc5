#include "textflag.h"

// The float64 conversion kernels of the float64 dense kernel (simdDense64): every
//
//	func cvt<T>F64(dst *float64, src *T, n int)
//
// sets dst[i] = float64(src[i]) for i < n, n a positive multiple of 8, exactly (every
// pixel of these types is a float64), with AVX (XMM loads widened to 4 int32, converted to
// 4 float64 in a YMM register), 8 pixels per iteration. Each iteration prefetches into L2
// the pixels 512 further: the same frame's next block of simdBlock64 pixels, which the
// next conversion pass reads (a block of 1 KiB of uint16 is too short for the hardware
// prefetchers; in L2, uint16 16 masks 29-32 → 33-40 GFLOP/s, 64 masks 40-43 → 43-45,
// BenchmarkSIMDDense64, 3 pairs). An x86 prefetch never faults. Registers: DI dst, SI
// src, CX the iterations left.

// CVT(LOAD, SIZE) is the body of one kernel: LOAD(OFF, R) puts 4 pixels at OFF(SI) into R
// as 4 float64; SIZE is the pixel size in bytes.
#define CVT(LOAD, SIZE) \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	SHRQ $3, CX; \
loop: \
	PREFETCHT1 (512*SIZE)(SI); \
	LOAD(0, X0, Y0); \
	LOAD(4*SIZE, X1, Y1); \
	VMOVUPD Y0, 0(DI); \
	VMOVUPD Y1, 32(DI); \
	ADDQ $(8*SIZE), SI; \
	ADDQ $64, DI; \
	DECQ CX; \
	JNZ loop; \
	VZEROUPPER; \
	RET

#define LU8(OFF, X, Y) VPMOVZXBD OFF(SI), X; VCVTDQ2PD X, Y
#define LI8(OFF, X, Y) VPMOVSXBD OFF(SI), X; VCVTDQ2PD X, Y
#define LU16(OFF, X, Y) VPMOVZXWD OFF(SI), X; VCVTDQ2PD X, Y
#define LI16(OFF, X, Y) VPMOVSXWD OFF(SI), X; VCVTDQ2PD X, Y
#define LI32(OFF, X, Y) VCVTDQ2PD OFF(SI), Y
#define LF32(OFF, X, Y) VCVTPS2PD OFF(SI), Y

// func cvtU8F64(dst *float64, src *uint8, n int)
TEXT ·cvtU8F64(SB), NOSPLIT, $0-24
	CVT(LU8, 1)

// func cvtI8F64(dst *float64, src *int8, n int)
TEXT ·cvtI8F64(SB), NOSPLIT, $0-24
	CVT(LI8, 1)

// func cvtU16F64(dst *float64, src *uint16, n int)
TEXT ·cvtU16F64(SB), NOSPLIT, $0-24
	CVT(LU16, 2)

// func cvtI16F64(dst *float64, src *int16, n int)
TEXT ·cvtI16F64(SB), NOSPLIT, $0-24
	CVT(LI16, 2)

// func cvtI32F64(dst *float64, src *int32, n int)
TEXT ·cvtI32F64(SB), NOSPLIT, $0-24
	CVT(LI32, 4)

// func cvtF32F64(dst *float64, src *float32, n int)
TEXT ·cvtF32F64(SB), NOSPLIT, $0-24
	CVT(LF32, 4)
