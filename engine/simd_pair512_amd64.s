#include "textflag.h"

// AVX-512 kernels of the 4-mask × 2-frame product (pairKernel in kernels.go) for 8- and
// 16-bit pixels (on 32-bit pixels the AVX2 kernels were faster: float32 frames, 3 and 4
// masks, one core, 20.1-21.3 GB/s against 17.2-17.9, 3 pairs):
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
