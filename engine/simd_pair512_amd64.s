#include "textflag.h"
#include "quad_amd64.h"

// AVX-512 kernels of the 4-mask × 2-frame product (pairKernel in kernels.go) for 8- and
// 16-bit pixels (on 32-bit pixels the AVX2 kernels were faster: float32 frames, 3 and 4
// masks, one core, 20.1-21.3 GB/s against 17.2-17.9, 3 pairs), and of the 1- and 2-mask
// × 4-frame products (quadKernel, quad2Kernel) for float32 pixels (see the end of this
// file):
//
//	func dot<T>x4x2z(px0, px1 *T, n int, w *float32, ldw int, pf *float32, out *float32)
//
// set out[4f+m] = Σ_{i<n} float32(px_f[i])·w[m·ldw+i] for f < 2, m < 4, n a positive
// multiple of 16, as dot<T>x4x2 in simd_amd64.s does with AVX2, but 16 pixels per vector:
// one FMA per mask and frame per 16 pixels, each of the 8 accumulators (Z(2m+f)) taking
// one FMA per iteration, so that neither the FMA latency nor the FMA throughput holds
// the loop below 16 pixels of both frames per 4 cycles (the AVX2 kernel: 8 cycles). Each
// loaded weight vector serves both frames. The frames are prefetched 4 KiB ahead into L2
// (see simd_amd64.s), and
// pf's line at 4·i for every 16th pixel i into L2, as the AVX2 kernels do. Registers: SI
// px0, R10 px1, CX n, DI w (mask 0), R9, R11, R12 masks 1-3, DX ldw in bytes, R8 pf during
// the loop, then out; AX the pixel index.
#define U8_Z(P, Z) PREFETCHT1 4096(P)(AX*1); VPMOVZXBD (P)(AX*1), Z; VCVTDQ2PS Z, Z
#define I8_Z(P, Z) PREFETCHT1 4096(P)(AX*1); VPMOVSXBD (P)(AX*1), Z; VCVTDQ2PS Z, Z
#define U16_Z(P, Z) PREFETCHT1 4096(P)(AX*2); VPMOVZXWD (P)(AX*2), Z; VCVTDQ2PS Z, Z
#define I16_Z(P, Z) PREFETCHT1 4096(P)(AX*2); VPMOVSXWD (P)(AX*2), Z; VCVTDQ2PS Z, Z

// ZFMA2 loads the weights of the mask at BASE for pixels AX..AX+15 into Z12 and adds them
// times frame 0's pixels (Z8) into A and times frame 1's (Z9) into B.
#define ZFMA2(BASE, A, B) \
	VMOVUPS     (BASE)(AX*4), Z12; \
	VFMADD231PS Z8, Z12, A; \
	VFMADD231PS Z9, Z12, B

// ZSUM stores the sum of the 16 lanes of Z (low halves Y, X) as out[OFF/4]; it uses Y14
// and X15.
#define ZSUM(Z, Y, X, OFF) \
	VEXTRACTF64X4 $1, Z, Y14; \
	VADDPS        Y14, Y, Y; \
	VEXTRACTF128  $1, Y, X15; \
	VADDPS        X15, X, X; \
	VHADDPS       X, X, X; \
	VHADDPS       X, X, X; \
	VMOVSS        X, OFF(R8)

#define DOT4X2Z(LOAD) \
	MOVQ   px0+0(FP), SI; \
	MOVQ   px1+8(FP), R10; \
	MOVQ   n+16(FP), CX; \
	MOVQ   w+24(FP), DI; \
	MOVQ   ldw+32(FP), DX; \
	MOVQ   pf+40(FP), R8; \
	SHLQ   $2, DX; \
	LEAQ   (DI)(DX*1), R9; \
	LEAQ   (R9)(DX*1), R11; \
	LEAQ   (R11)(DX*1), R12; \
	VXORPS Z0, Z0, Z0; \
	VXORPS Z1, Z1, Z1; \
	VXORPS Z2, Z2, Z2; \
	VXORPS Z3, Z3, Z3; \
	VXORPS Z4, Z4, Z4; \
	VXORPS Z5, Z5, Z5; \
	VXORPS Z6, Z6, Z6; \
	VXORPS Z7, Z7, Z7; \
	XORQ   AX, AX; \
loop: \
	LOAD(SI, Z8); \
	LOAD(R10, Z9); \
	ZFMA2(DI, Z0, Z1); \
	ZFMA2(R9, Z2, Z3); \
	ZFMA2(R11, Z4, Z5); \
	ZFMA2(R12, Z6, Z7); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	CMPQ   AX, CX; \
	JB     loop; \
	MOVQ   out+48(FP), R8; \
	ZSUM(Z0, Y0, X0, 0); \
	ZSUM(Z2, Y2, X2, 4); \
	ZSUM(Z4, Y4, X4, 8); \
	ZSUM(Z6, Y6, X6, 12); \
	ZSUM(Z1, Y1, X1, 16); \
	ZSUM(Z3, Y3, X3, 20); \
	ZSUM(Z5, Y5, X5, 24); \
	ZSUM(Z7, Y7, X7, 28); \
	VZEROUPPER

// F32_ZFMA adds frame P's 16 pixels from AX times the weights W into A, prefetching the
// frame 4 KiB ahead into L2.
#define F32_ZFMA(P, W, A) \
	PREFETCHT1  4096(P)(AX*4); \
	VFMADD231PS (P)(AX*4), W, A

// func dotU8x4x2z(px0, px1 *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x4x2z(SB), NOSPLIT, $0-56
	DOT4X2Z(U8_Z)
	RET

// func dotI8x4x2z(px0, px1 *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x4x2z(SB), NOSPLIT, $0-56
	DOT4X2Z(I8_Z)
	RET

// func dotU16x4x2z(px0, px1 *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x4x2z(SB), NOSPLIT, $0-56
	DOT4X2Z(U16_Z)
	RET

// func dotI16x4x2z(px0, px1 *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x4x2z(SB), NOSPLIT, $0-56
	DOT4X2Z(I16_Z)
	RET

// dotF32x1x4z and dotF32x2x4z are dotF32x1x4 and dotF32x2x4 of simd_amd64.s with 16
// pixels per vector: per 16 pixels, one weight vector per mask for the four frames, each
// frame's vector loaded once (and prefetched 4 KiB ahead into L2), one FMA per mask and
// frame into its own accumulator (Z(f), Z(2f+m)). Half the loads and FMAs of the AVX2
// kernels per byte: in place, one Zen 4 core, 1 mask ran at 0.86-0.87 of the read floor
// against 0.74-0.76 (4 pairs).
//
// func dotF32x1x4z(px0, px1, px2, px3 *float32, n int, w *float32, out *float32)
TEXT ·dotF32x1x4z(SB), NOSPLIT, $0-56
	QUAD_ARGS
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	XORQ   AX, AX
loop1:
	VMOVUPS (DI)(AX*4), Z8
	F32_ZFMA(SI, Z8, Z0)
	F32_ZFMA(R10, Z8, Z1)
	F32_ZFMA(R11, Z8, Z2)
	F32_ZFMA(R12, Z8, Z3)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JB      loop1
	MOVQ    out+48(FP), R8
	ZSUM(Z0, Y0, X0, 0)
	ZSUM(Z1, Y1, X1, 4)
	ZSUM(Z2, Y2, X2, 8)
	ZSUM(Z3, Y3, X3, 12)
	VZEROUPPER
	RET

// func dotF32x2x4z(px0, px1, px2, px3 *float32, n int, w *float32, ldw int, out *float32)
TEXT ·dotF32x2x4z(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	SHLQ   $2, DX
	LEAQ   (DI)(DX*1), R9
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	XORQ   AX, AX
loop2:
	VMOVUPS     (DI)(AX*4), Z8
	VMOVUPS     (R9)(AX*4), Z9
	PREFETCHT1  4096(SI)(AX*4)
	VMOVUPS     (SI)(AX*4), Z10
	VFMADD231PS Z8, Z10, Z0
	VFMADD231PS Z9, Z10, Z1
	PREFETCHT1  4096(R10)(AX*4)
	VMOVUPS     (R10)(AX*4), Z11
	VFMADD231PS Z8, Z11, Z2
	VFMADD231PS Z9, Z11, Z3
	PREFETCHT1  4096(R11)(AX*4)
	VMOVUPS     (R11)(AX*4), Z10
	VFMADD231PS Z8, Z10, Z4
	VFMADD231PS Z9, Z10, Z5
	PREFETCHT1  4096(R12)(AX*4)
	VMOVUPS     (R12)(AX*4), Z11
	VFMADD231PS Z8, Z11, Z6
	VFMADD231PS Z9, Z11, Z7
	ADDQ        $16, AX
	CMPQ        AX, CX
	JB          loop2
	MOVQ        out+56(FP), R8
	ZSUM(Z0, Y0, X0, 0)
	ZSUM(Z1, Y1, X1, 4)
	ZSUM(Z2, Y2, X2, 8)
	ZSUM(Z3, Y3, X3, 12)
	ZSUM(Z4, Y4, X4, 16)
	ZSUM(Z5, Y5, X5, 20)
	ZSUM(Z6, Y6, X6, 24)
	ZSUM(Z7, Y7, X7, 28)
	VZEROUPPER
	RET
