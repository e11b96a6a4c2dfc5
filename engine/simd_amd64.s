#include "textflag.h"
#include "quad_amd64.h"

// AVX2+FMA kernels of the dense mask-dot product on a block of one or two frames (see
// blockKernel and pairKernel in kernels.go). Every function
//
//	func dot<T>x<M>(px *T, n int, w *float32, ldw int, pf *float32, out *float32)
//
// sets out[m] = Σ_{i<n} float32(px[i])·w[m·ldw+i] for its M masks (m < M), in float32:
// per mask and per 8 pixel lanes, one or two accumulators, summed horizontally at the
// end. n must be a positive multiple of 16. For M ≥ 2 it also prefetches into L2 the
// line at pf + 4·i for every 16th pixel i (the weights the next calls will need).
// Every function
//
//	func dot<T>x4x2(px0, px1 *T, n int, w *float32, ldw int, pf *float32, out *float32)
//
// does the same for 4 masks and two frames, each loaded weight serving both:
// out[4f+m] = Σ_{i<n} float32(px_f[i])·w[m·ldw+i]. Registers: SI px (px0), R10 px1,
// CX n, DI w (mask 0), DX ldw in bytes, then mask m's base; R8 pf during the loop, then
// out; AX the pixel index.

// <T>_LO and <T>_HI load pixels AX..AX+7 and AX+8..AX+15 as 8 float32 into Y. <T>_LO
// also prefetches the frame 4 KiB ahead into L2 (PREFETCHT1). In place (a memory-mapped
// file) a kernel call starts on a frame block that is not in cache and the hardware
// prefetchers stop at each 4 KiB page, so the loads wait on memory; the loop's
// dependent converts and FMAs fill the reorder buffer after about 1 KiB of loads, and
// 1 KiB in flight at ~100 ns is ~10 GB/s. A PREFETCHT0 (into L1) takes one of L1's few
// miss buffers: 2 KiB and 4 KiB ahead into L1 left one core at 0.40-0.49 of the in-place
// sweep (BenchmarkCPUWorker's ×sweep, 256×256 uint16 frames, 1 mask; Zen 4, 2026-12-02).
// Into L2, the L1 misses become L2 hits: 1 mask 0.41-0.43 → 0.79-0.81, 4 masks
// 0.40-0.41 → 0.53-0.60, the sparse ring's spans 0.74-0.78 → 1.16-1.22 (3 pairs each;
// 8 KiB: 0.73-0.79 and 0.54-0.56; 16 KiB: 0.74-0.78 and 0.61-0.64). The distance is in
// bytes, the same for every pixel size: float32 frames, make bench's one core, 1 mask
// 0.37-0.51 → 0.66, 4 masks 0.40-0.42 → 0.52-0.65 (8 KiB the same).
#define U8_LO(P, Y) PREFETCHT1 4096(P)(AX*1); VPMOVZXBD (P)(AX*1), Y; VCVTDQ2PS Y, Y
#define U8_HI(P, Y) VPMOVZXBD 8(P)(AX*1), Y; VCVTDQ2PS Y, Y
#define I8_LO(P, Y) PREFETCHT1 4096(P)(AX*1); VPMOVSXBD (P)(AX*1), Y; VCVTDQ2PS Y, Y
#define I8_HI(P, Y) VPMOVSXBD 8(P)(AX*1), Y; VCVTDQ2PS Y, Y
#define U16_LO(P, Y) PREFETCHT1 4096(P)(AX*2); VPMOVZXWD (P)(AX*2), Y; VCVTDQ2PS Y, Y
#define U16_HI(P, Y) VPMOVZXWD 16(P)(AX*2), Y; VCVTDQ2PS Y, Y
#define I16_LO(P, Y) PREFETCHT1 4096(P)(AX*2); VPMOVSXWD (P)(AX*2), Y; VCVTDQ2PS Y, Y
#define I16_HI(P, Y) VPMOVSXWD 16(P)(AX*2), Y; VCVTDQ2PS Y, Y
#define I32_LO(P, Y) PREFETCHT1 4096(P)(AX*4); VCVTDQ2PS (P)(AX*4), Y
#define I32_HI(P, Y) VCVTDQ2PS 32(P)(AX*4), Y
#define F32_LO(P, Y) PREFETCHT1 4096(P)(AX*4); VMOVUPS (P)(AX*4), Y
#define F32_HI(P, Y) VMOVUPS 32(P)(AX*4), Y

// FMA2 adds pixels Y8 (lanes AX..AX+7) and Y9 (AX+8..AX+15) times the weights of the
// mask at BASE into the accumulators A and B.
#define FMA2(BASE, A, B) \
	VFMADD231PS (BASE)(AX*4), Y8, A; \
	VFMADD231PS 32(BASE)(AX*4), Y9, B

// HSUM stores the sum of the 8 lanes of Y (low half X) as out[OFF/4]; it uses X15.
#define HSUM(Y, X, OFF) \
	VEXTRACTF128 $1, Y, X15; \
	VADDPS       X15, X, X; \
	VHADDPS      X, X, X; \
	VHADDPS      X, X, X; \
	VMOVSS       X, OFF(R8)

// BASES computes the weight pointers of masks 1..7: R9..R13, BX, DX.
#define BASES \
	SHLQ $2, DX; \
	LEAQ (DI)(DX*1), R9; \
	LEAQ (R9)(DX*1), R10; \
	LEAQ (R10)(DX*1), R11; \
	LEAQ (R11)(DX*1), R12; \
	LEAQ (R12)(DX*1), R13; \
	LEAQ (R13)(DX*1), BX; \
	LEAQ (BX)(DX*1), DX

// FMA2R is FMA2 for the pixels in P0 and P1.
#define FMA2R(BASE, P0, P1, A, B) \
	VFMADD231PS (BASE)(AX*4), P0, A; \
	VFMADD231PS 32(BASE)(AX*4), P1, B

// DOT1: one mask, 32 pixels per iteration into four accumulators (Y0, Y1 for the first
// 16, Y2, Y3 for the next), then 16 more where n is not a multiple of 32; R9 is n rounded
// down to 32, R8 is out from the start (no prefetch). With two accumulators, each
// iteration waited for the FMA latency (4 cycles) of the one before: 16 pixels per 4
// cycles, about the read rate of uint16 frames on one core.
#define DOT1(LO, HI) \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	XORQ   AX, AX; \
	MOVQ   CX, R9; \
	ANDQ   $-32, R9; \
	JZ     tail; \
loop: \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA2(DI, Y0, Y1); \
	ADDQ   $16, AX; \
	LO(SI, Y10); \
	HI(SI, Y11); \
	FMA2R(DI, Y10, Y11, Y2, Y3); \
	ADDQ   $16, AX; \
	CMPQ   AX, R9; \
	JB     loop; \
tail: \
	CMPQ   AX, CX; \
	JAE    done; \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA2(DI, Y0, Y1); \
done: \
	VADDPS Y2, Y0, Y0; \
	VADDPS Y3, Y1, Y1; \
	VADDPS Y1, Y0, Y0; \
	HSUM(Y0, X0, 0); \
	VZEROUPPER

// DOT2: two masks, 32 pixels per iteration as in DOT1: mask m in Y(2m), Y(2m+1) for the
// first 16 pixels and Y(2m+4), Y(2m+5) for the next, then 16 more where n is not a
// multiple of 32; R10 is n rounded down to 32.
#define DOT2(LO, HI) \
	SHLQ   $2, DX; \
	LEAQ   (DI)(DX*1), R9; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	XORQ   AX, AX; \
	MOVQ   CX, R10; \
	ANDQ   $-32, R10; \
	JZ     tail; \
loop: \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA2(DI, Y0, Y1); \
	FMA2(R9, Y2, Y3); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	LO(SI, Y10); \
	HI(SI, Y11); \
	FMA2R(DI, Y10, Y11, Y4, Y5); \
	FMA2R(R9, Y10, Y11, Y6, Y7); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	CMPQ   AX, R10; \
	JB     loop; \
tail: \
	CMPQ   AX, CX; \
	JAE    done; \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA2(DI, Y0, Y1); \
	FMA2(R9, Y2, Y3); \
	PREFETCHT1 (R8)(AX*4); \
done: \
	MOVQ   out+40(FP), R8; \
	VADDPS Y4, Y0, Y0; \
	VADDPS Y5, Y1, Y1; \
	VADDPS Y6, Y2, Y2; \
	VADDPS Y7, Y3, Y3; \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	HSUM(Y0, X0, 0); \
	HSUM(Y2, X2, 4); \
	VZEROUPPER

// DOT4: four masks, mask m in Y(2m) and Y(2m+1).
#define DOT4(LO, HI) \
	BASES; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	XORQ   AX, AX; \
loop: \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA2(DI, Y0, Y1); \
	FMA2(R9, Y2, Y3); \
	FMA2(R10, Y4, Y5); \
	FMA2(R11, Y6, Y7); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	CMPQ   AX, CX; \
	JB     loop; \
	MOVQ   out+40(FP), R8; \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y5, Y4, Y4; \
	VADDPS Y7, Y6, Y6; \
	HSUM(Y0, X0, 0); \
	HSUM(Y2, X2, 4); \
	HSUM(Y4, X4, 8); \
	HSUM(Y6, X6, 12); \
	VZEROUPPER

// FMA1 adds pixels Y8 and Y9 times the weights of the mask at BASE into A.
#define FMA1(BASE, A) \
	VFMADD231PS (BASE)(AX*4), Y8, A; \
	VFMADD231PS 32(BASE)(AX*4), Y9, A

// DOT8: eight masks, mask m in Y(m): 8 independent FMA chains.
#define DOT8(LO, HI) \
	BASES; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	XORQ   AX, AX; \
loop: \
	LO(SI, Y8); \
	HI(SI, Y9); \
	FMA1(DI, Y0); \
	FMA1(R9, Y1); \
	FMA1(R10, Y2); \
	FMA1(R11, Y3); \
	FMA1(R12, Y4); \
	FMA1(R13, Y5); \
	FMA1(BX, Y6); \
	FMA1(DX, Y7); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	CMPQ   AX, CX; \
	JB     loop; \
	MOVQ   out+40(FP), R8; \
	HSUM(Y0, X0, 0); \
	HSUM(Y1, X1, 4); \
	HSUM(Y2, X2, 8); \
	HSUM(Y3, X3, 12); \
	HSUM(Y4, X4, 16); \
	HSUM(Y5, X5, 20); \
	HSUM(Y6, X6, 24); \
	HSUM(Y7, X7, 28); \
	VZEROUPPER

// WFMA2 loads the weights of the mask at BASE for pixels AX..AX+15 into Y12 and Y13 and
// adds them times frame 0's pixels (Y8, Y9) into A and times frame 1's (Y10, Y11) into B:
// each weight loaded serves both frames.
#define WFMA2(BASE, A, B) \
	VMOVUPS     (BASE)(AX*4), Y12; \
	VMOVUPS     32(BASE)(AX*4), Y13; \
	VFMADD231PS Y8, Y12, A; \
	VFMADD231PS Y9, Y13, A; \
	VFMADD231PS Y10, Y12, B; \
	VFMADD231PS Y11, Y13, B

// DOT4X2: four masks and two frames (SI, R10), mask m of frame f in Y(2m+f), stored
// as out[4f+m].
#define DOT4X2(LO, HI) \
	SHLQ   $2, DX; \
	LEAQ   (DI)(DX*1), R9; \
	LEAQ   (R9)(DX*1), R11; \
	LEAQ   (R11)(DX*1), R12; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	XORQ   AX, AX; \
loop: \
	LO(SI, Y8); \
	HI(SI, Y9); \
	LO(R10, Y10); \
	HI(R10, Y11); \
	WFMA2(DI, Y0, Y1); \
	WFMA2(R9, Y2, Y3); \
	WFMA2(R11, Y4, Y5); \
	WFMA2(R12, Y6, Y7); \
	PREFETCHT1 (R8)(AX*4); \
	ADDQ   $16, AX; \
	CMPQ   AX, CX; \
	JB     loop; \
	MOVQ   out+48(FP), R8; \
	HSUM(Y0, X0, 0); \
	HSUM(Y2, X2, 4); \
	HSUM(Y4, X4, 8); \
	HSUM(Y6, X6, 12); \
	HSUM(Y1, X1, 16); \
	HSUM(Y3, X3, 20); \
	HSUM(Y5, X5, 24); \
	HSUM(Y7, X7, 28); \
	VZEROUPPER

// BLOCK_ARGS loads the arguments of a one-frame kernel (SI px, CX n, DI w, DX ldw);
// the kernel then loads R8 (pf, or out for the 1-mask kernels, which do not prefetch).
#define BLOCK_ARGS \
	MOVQ px+0(FP), SI; \
	MOVQ n+8(FP), CX; \
	MOVQ w+16(FP), DI; \
	MOVQ ldw+24(FP), DX

// PAIR_ARGS loads the arguments of a two-frame kernel (SI px0, R10 px1, CX n, DI w,
// DX ldw, R8 pf).
#define PAIR_ARGS \
	MOVQ px0+0(FP), SI; \
	MOVQ px1+8(FP), R10; \
	MOVQ n+16(FP), CX; \
	MOVQ w+24(FP), DI; \
	MOVQ ldw+32(FP), DX; \
	MOVQ pf+40(FP), R8

// DOT1X4: one mask and four frames, 16 pixels per iteration: the 16 weights loaded once
// (Y8, Y9) serve the four frames (SI, R10, R11, R12), frame f into Y(2f) and Y(2f+1).
// Each LO prefetches its frame 4 KiB ahead, so four frames' streams are in flight at
// once; CX is n (a positive multiple of 16), DI w, R8 out at the end.
#define DOT1X4(LO, HI) \
	VXORPS  Y0, Y0, Y0; \
	VXORPS  Y1, Y1, Y1; \
	VXORPS  Y2, Y2, Y2; \
	VXORPS  Y3, Y3, Y3; \
	VXORPS  Y4, Y4, Y4; \
	VXORPS  Y5, Y5, Y5; \
	VXORPS  Y6, Y6, Y6; \
	VXORPS  Y7, Y7, Y7; \
	XORQ    AX, AX; \
loop: \
	VMOVUPS (DI)(AX*4), Y8; \
	VMOVUPS 32(DI)(AX*4), Y9; \
	LO(SI, Y10); \
	HI(SI, Y11); \
	VFMADD231PS Y8, Y10, Y0; \
	VFMADD231PS Y9, Y11, Y1; \
	LO(R10, Y12); \
	HI(R10, Y13); \
	VFMADD231PS Y8, Y12, Y2; \
	VFMADD231PS Y9, Y13, Y3; \
	LO(R11, Y10); \
	HI(R11, Y11); \
	VFMADD231PS Y8, Y10, Y4; \
	VFMADD231PS Y9, Y11, Y5; \
	LO(R12, Y12); \
	HI(R12, Y13); \
	VFMADD231PS Y8, Y12, Y6; \
	VFMADD231PS Y9, Y13, Y7; \
	ADDQ    $16, AX; \
	CMPQ    AX, CX; \
	JB      loop; \
	MOVQ    out+48(FP), R8; \
	VADDPS  Y1, Y0, Y0; \
	VADDPS  Y3, Y2, Y2; \
	VADDPS  Y5, Y4, Y4; \
	VADDPS  Y7, Y6, Y6; \
	HSUM(Y0, X0, 0); \
	HSUM(Y2, X2, 4); \
	HSUM(Y4, X4, 8); \
	HSUM(Y6, X6, 12); \
	VZEROUPPER

// DOT2X4: two masks (DI, R9 = DI + ldw) and four frames (SI, R10, R11, R12), 16 pixels
// per iteration in two steps of 8: each step loads both masks' 8 weights once (Y8, Y9)
// for the four frames, mask m of frame f into Y(2f+m), stored as out[2f+m]. Each LO
// prefetches its frame 4 KiB ahead, as in DOT1X4; CX is n (a positive multiple of 16),
// DX ldw, R8 out at the end.
#define DOT2X4(LO, HI) \
	SHLQ    $2, DX; \
	LEAQ    (DI)(DX*1), R9; \
	VXORPS  Y0, Y0, Y0; \
	VXORPS  Y1, Y1, Y1; \
	VXORPS  Y2, Y2, Y2; \
	VXORPS  Y3, Y3, Y3; \
	VXORPS  Y4, Y4, Y4; \
	VXORPS  Y5, Y5, Y5; \
	VXORPS  Y6, Y6, Y6; \
	VXORPS  Y7, Y7, Y7; \
	XORQ    AX, AX; \
loop: \
	VMOVUPS (DI)(AX*4), Y8; \
	VMOVUPS (R9)(AX*4), Y9; \
	LO(SI, Y10); \
	VFMADD231PS Y8, Y10, Y0; \
	VFMADD231PS Y9, Y10, Y1; \
	LO(R10, Y11); \
	VFMADD231PS Y8, Y11, Y2; \
	VFMADD231PS Y9, Y11, Y3; \
	LO(R11, Y10); \
	VFMADD231PS Y8, Y10, Y4; \
	VFMADD231PS Y9, Y10, Y5; \
	LO(R12, Y11); \
	VFMADD231PS Y8, Y11, Y6; \
	VFMADD231PS Y9, Y11, Y7; \
	VMOVUPS 32(DI)(AX*4), Y8; \
	VMOVUPS 32(R9)(AX*4), Y9; \
	HI(SI, Y10); \
	VFMADD231PS Y8, Y10, Y0; \
	VFMADD231PS Y9, Y10, Y1; \
	HI(R10, Y11); \
	VFMADD231PS Y8, Y11, Y2; \
	VFMADD231PS Y9, Y11, Y3; \
	HI(R11, Y10); \
	VFMADD231PS Y8, Y10, Y4; \
	VFMADD231PS Y9, Y10, Y5; \
	HI(R12, Y11); \
	VFMADD231PS Y8, Y11, Y6; \
	VFMADD231PS Y9, Y11, Y7; \
	ADDQ    $16, AX; \
	CMPQ    AX, CX; \
	JB      loop; \
	MOVQ    out+56(FP), R8; \
	HSUM(Y0, X0, 0); \
	HSUM(Y1, X1, 4); \
	HSUM(Y2, X2, 8); \
	HSUM(Y3, X3, 12); \
	HSUM(Y4, X4, 16); \
	HSUM(Y5, X5, 20); \
	HSUM(Y6, X6, 24); \
	HSUM(Y7, X7, 28); \
	VZEROUPPER

// func dotU8x1(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(U8_LO, U8_HI)
	RET

// func dotU8x2(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(U8_LO, U8_HI)
	RET

// func dotU8x4(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(U8_LO, U8_HI)
	RET

// func dotU8x8(px *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(U8_LO, U8_HI)
	RET

// func dotI8x1(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(I8_LO, I8_HI)
	RET

// func dotI8x2(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(I8_LO, I8_HI)
	RET

// func dotI8x4(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(I8_LO, I8_HI)
	RET

// func dotI8x8(px *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(I8_LO, I8_HI)
	RET

// func dotU16x1(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(U16_LO, U16_HI)
	RET

// func dotU16x2(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(U16_LO, U16_HI)
	RET

// func dotU16x4(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(U16_LO, U16_HI)
	RET

// func dotU16x8(px *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(U16_LO, U16_HI)
	RET

// func dotI16x1(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(I16_LO, I16_HI)
	RET

// func dotI16x2(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(I16_LO, I16_HI)
	RET

// func dotI16x4(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(I16_LO, I16_HI)
	RET

// func dotI16x8(px *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(I16_LO, I16_HI)
	RET

// func dotI32x1(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI32x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(I32_LO, I32_HI)
	RET

// func dotI32x2(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI32x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(I32_LO, I32_HI)
	RET

// func dotI32x4(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI32x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(I32_LO, I32_HI)
	RET

// func dotI32x8(px *int32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI32x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(I32_LO, I32_HI)
	RET

// func dotF32x1(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotF32x1(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ out+40(FP), R8
	DOT1(F32_LO, F32_HI)
	RET

// func dotF32x2(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotF32x2(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT2(F32_LO, F32_HI)
	RET

// func dotF32x4(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotF32x4(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT4(F32_LO, F32_HI)
	RET

// func dotF32x8(px *float32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotF32x8(SB), NOSPLIT, $0-48
	BLOCK_ARGS
	MOVQ pf+32(FP), R8
	DOT8(F32_LO, F32_HI)
	RET

// func dotU8x4x2(px0, px1 *uint8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU8x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(U8_LO, U8_HI)
	RET

// func dotI8x4x2(px0, px1 *int8, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI8x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(I8_LO, I8_HI)
	RET

// func dotU16x4x2(px0, px1 *uint16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotU16x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(U16_LO, U16_HI)
	RET

// func dotI16x4x2(px0, px1 *int16, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI16x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(I16_LO, I16_HI)
	RET

// func dotI32x4x2(px0, px1 *int32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotI32x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(I32_LO, I32_HI)
	RET

// func dotF32x4x2(px0, px1 *float32, n int, w *float32, ldw int, pf *float32, out *float32)
TEXT ·dotF32x4x2(SB), NOSPLIT, $0-56
	PAIR_ARGS
	DOT4X2(F32_LO, F32_HI)
	RET

// func dotU8x1x4(px0, px1, px2, px3 *uint8, n int, w *float32, out *float32)
TEXT ·dotU8x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(U8_LO, U8_HI)
	RET

// func dotI8x1x4(px0, px1, px2, px3 *int8, n int, w *float32, out *float32)
TEXT ·dotI8x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(I8_LO, I8_HI)
	RET

// func dotU16x1x4(px0, px1, px2, px3 *uint16, n int, w *float32, out *float32)
TEXT ·dotU16x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(U16_LO, U16_HI)
	RET

// func dotI16x1x4(px0, px1, px2, px3 *int16, n int, w *float32, out *float32)
TEXT ·dotI16x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(I16_LO, I16_HI)
	RET

// func dotI32x1x4(px0, px1, px2, px3 *int32, n int, w *float32, out *float32)
TEXT ·dotI32x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(I32_LO, I32_HI)
	RET

// func dotF32x1x4(px0, px1, px2, px3 *float32, n int, w *float32, out *float32)
TEXT ·dotF32x1x4(SB), NOSPLIT, $0-56
	QUAD_ARGS
	DOT1X4(F32_LO, F32_HI)
	RET

// func dotU8x2x4(px0, px1, px2, px3 *uint8, n int, w *float32, ldw int, out *float32)
TEXT ·dotU8x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(U8_LO, U8_HI)
	RET

// func dotI8x2x4(px0, px1, px2, px3 *int8, n int, w *float32, ldw int, out *float32)
TEXT ·dotI8x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(I8_LO, I8_HI)
	RET

// func dotU16x2x4(px0, px1, px2, px3 *uint16, n int, w *float32, ldw int, out *float32)
TEXT ·dotU16x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(U16_LO, U16_HI)
	RET

// func dotI16x2x4(px0, px1, px2, px3 *int16, n int, w *float32, ldw int, out *float32)
TEXT ·dotI16x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(I16_LO, I16_HI)
	RET

// func dotI32x2x4(px0, px1, px2, px3 *int32, n int, w *float32, ldw int, out *float32)
TEXT ·dotI32x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(I32_LO, I32_HI)
	RET

// func dotF32x2x4(px0, px1, px2, px3 *float32, n int, w *float32, ldw int, out *float32)
TEXT ·dotF32x2x4(SB), NOSPLIT, $0-64
	QUAD2_ARGS
	DOT2X4(F32_LO, F32_HI)
	RET
