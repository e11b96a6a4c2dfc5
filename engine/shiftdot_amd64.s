#include "textflag.h"

// AVX2+FMA fused kernels of sub-pixel shifted masks (shiftDot, shiftdot.go): each builds
// the rows of g (shift.go) in registers and multiplies them into its M masks in the same
// pass, so that no shifted frame is stored:
//
//	func shiftDot<T>x<M>(a *shiftDotArgs)
//
// For rows r < a.rows, columns i < a.n (n ≥ 8), with P, Q the pixels at a.p and a.p +
// a.dq (row r at a.stride bytes further) and H the row buffer a.h:
//
//	hn = float32(P[i]) + β·float32(Q[i]);  hp = H[i];  H[i] = hn
//	g  = hp + α·hn (a.ynext = 0)  or  hn + α·hp (a.ynext ≠ 0)
//	acc_m += g·w_m[i]   (w_m: a.w + m·a.ldw bytes, rows a.wstride bytes apart)
//
// 16 columns per iteration, 8 more where n holds them, and the last 8 again (a vector
// ending at n, its lanes done already zeroed by a.tail) where n is not a multiple of 8.
// The float32 lane sums (two accumulators per mask) are added in float64 into a.out
// (M × 8 lanes) every a.flush rows and at the end. Registers: R9 a; SI P, R10 Q, DX
// stride, R8 H, DI R11 R12 R13 w_0..w_3, BX rows left, CX n,
// AX the column (at a row's end, scratch); Y8 β, Y9 α, Y10 the tail mask, Y0-Y3 and
// Y4-Y7 the accumulators, Y11-Y15 scratch.

// HSTEP loads 8 pixels of P and Q at column AX (+SOFF bytes), sets YP = hn, YQ = hp and
// stores hn into H (+HOFF bytes).
#define HSTEP(LOAD, CVT, SCALE, SOFF, HOFF, YP, YQ) \
	LOAD SOFF(SI)(AX*SCALE), YP; \
	CVT YP, YP; \
	LOAD SOFF(R10)(AX*SCALE), YQ; \
	CVT YQ, YQ; \
	VFMADD231PS YQ, Y8, YP; \
	VMOVUPS HOFF(R8)(AX*4), YQ; \
	VMOVUPS YP, HOFF(R8)(AX*4)

// BLEND0 sets YQ = g = hp + α·hn, BLEND1 YP = g = hn + α·hp.
#define BLEND0(YP, YQ) VFMADD231PS YP, Y9, YQ
#define BLEND1(YP, YQ) VFMADD231PS YQ, Y9, YP

// ACC<M> adds g (G) times the weights at column AX (+OFF bytes) into A0..A3.
#define ACC1(G, OFF, A0, A1, A2, A3) \
	VFMADD231PS OFF(DI)(AX*4), G, A0
#define ACC2(G, OFF, A0, A1, A2, A3) \
	ACC1(G, OFF, A0, A1, A2, A3); \
	VFMADD231PS OFF(R11)(AX*4), G, A1
#define ACC4(G, OFF, A0, A1, A2, A3) \
	ACC2(G, OFF, A0, A1, A2, A3); \
	VFMADD231PS OFF(R12)(AX*4), G, A2; \
	VFMADD231PS OFF(R13)(AX*4), G, A3

// FLUSH adds the lanes of A + B in float64 to out (AX) + OFF and clears A and B.
#define FLUSH(A, XA, B, OFF) \
	VADDPS B, A, A; \
	VCVTPS2PD XA, Y15; \
	VADDPD OFF(AX), Y15, Y15; \
	VMOVUPD Y15, OFF(AX); \
	VEXTRACTF128 $1, A, XA; \
	VCVTPS2PD XA, Y15; \
	VADDPD OFF+32(AX), Y15, Y15; \
	VMOVUPD Y15, OFF+32(AX); \
	VXORPS A, A, A; \
	VXORPS B, B, B
#define FLUSH1 FLUSH(Y0, X0, Y4, 0)
#define FLUSH2 FLUSH1; FLUSH(Y1, X1, Y5, 64)
#define FLUSH4 FLUSH2; FLUSH(Y2, X2, Y6, 128); FLUSH(Y3, X3, Y7, 192)

// ROWS is the row loop for one blend (BLEND, with g in GA and GB for the two vectors of
// an iteration; the labels given).
#define ROWS(LOAD, CVT, SCALE, SOFF2, ACC, FLUSHM, BLEND, GA, GB, LROW, L16, L8, LTAIL, LEND, LNOFLUSH) \
LROW: \
	XORQ AX, AX; \
L16: \
	CMPQ AX, 120(R9); \
	JAE L8; \
	PREFETCHT1 4096(SI)(AX*SCALE); \
	HSTEP(LOAD, CVT, SCALE, 0, 0, Y11, Y12); \
	BLEND(Y11, Y12); \
	ACC(GA, 0, Y0, Y1, Y2, Y3); \
	HSTEP(LOAD, CVT, SCALE, SOFF2, 32, Y13, Y14); \
	BLEND(Y13, Y14); \
	ACC(GB, 32, Y4, Y5, Y6, Y7); \
	ADDQ $16, AX; \
	JMP L16; \
L8: \
	TESTQ $8, CX; \
	JZ LTAIL; \
	HSTEP(LOAD, CVT, SCALE, 0, 0, Y11, Y12); \
	BLEND(Y11, Y12); \
	ACC(GA, 0, Y0, Y1, Y2, Y3); \
LTAIL: \
	TESTQ $7, CX; \
	JZ LEND; \
	LEAQ -8(CX), AX; \
	HSTEP(LOAD, CVT, SCALE, 0, 0, Y11, Y12); \
	BLEND(Y11, Y12); \
	VANDPS Y10, GA, GA; \
	ACC(GA, 0, Y4, Y5, Y6, Y7); \
LEND: \
	ADDQ DX, SI; \
	ADDQ DX, R10; \
	MOVQ 48(R9), AX; \
	ADDQ AX, DI; \
	ADDQ AX, R11; \
	ADDQ AX, R12; \
	ADDQ AX, R13; \
	DECQ 112(R9); \
	JNZ LNOFLUSH; \
	MOVQ 104(R9), AX; \
	FLUSHM; \
	MOVQ 96(R9), AX; \
	MOVQ AX, 112(R9); \
LNOFLUSH: \
	DECQ BX; \
	JNZ LROW

#define SHIFTDOT(NAME, LOAD, CVT, SCALE, SOFF2, ACC, FLUSHM) \
TEXT NAME(SB), NOSPLIT, $0-8; \
	MOVQ a+0(FP), R9; \
	MOVQ 0(R9), SI; \
	MOVQ 8(R9), R10; \
	ADDQ SI, R10; \
	MOVQ 16(R9), DX; \
	MOVQ 24(R9), R8; \
	MOVQ 32(R9), DI; \
	MOVQ 40(R9), AX; \
	LEAQ (DI)(AX*1), R11; \
	LEAQ (R11)(AX*1), R12; \
	LEAQ (R12)(AX*1), R13; \
	MOVQ 56(R9), BX; \
	MOVQ 64(R9), CX; \
	MOVQ CX, AX; \
	ANDQ $-16, AX; \
	MOVQ AX, 120(R9); \
	MOVQ 72(R9), AX; \
	VMOVDQU (AX), Y10; \
	VBROADCASTSS 80(R9), Y8; \
	VBROADCASTSS 84(R9), Y9; \
	MOVQ 96(R9), AX; \
	MOVQ AX, 112(R9); \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	CMPQ 88(R9), $0; \
	JNE next; \
	ROWS(LOAD, CVT, SCALE, SOFF2, ACC, FLUSHM, BLEND0, Y12, Y14, prow, p16, p8, ptail, pend, pnoflush); \
	JMP done; \
next: \
	ROWS(LOAD, CVT, SCALE, SOFF2, ACC, FLUSHM, BLEND1, Y11, Y13, nrow, n16, n8, ntail, nend, nnoflush); \
done: \
	MOVQ 104(R9), AX; \
	FLUSHM; \
	VZEROUPPER; \
	RET

SHIFTDOT(·shiftDotU8x1, VPMOVZXBD, VCVTDQ2PS, 1, 8, ACC1, FLUSH1)
SHIFTDOT(·shiftDotU8x2, VPMOVZXBD, VCVTDQ2PS, 1, 8, ACC2, FLUSH2)
SHIFTDOT(·shiftDotU8x4, VPMOVZXBD, VCVTDQ2PS, 1, 8, ACC4, FLUSH4)
SHIFTDOT(·shiftDotI8x1, VPMOVSXBD, VCVTDQ2PS, 1, 8, ACC1, FLUSH1)
SHIFTDOT(·shiftDotI8x2, VPMOVSXBD, VCVTDQ2PS, 1, 8, ACC2, FLUSH2)
SHIFTDOT(·shiftDotI8x4, VPMOVSXBD, VCVTDQ2PS, 1, 8, ACC4, FLUSH4)
SHIFTDOT(·shiftDotU16x1, VPMOVZXWD, VCVTDQ2PS, 2, 16, ACC1, FLUSH1)
SHIFTDOT(·shiftDotU16x2, VPMOVZXWD, VCVTDQ2PS, 2, 16, ACC2, FLUSH2)
SHIFTDOT(·shiftDotU16x4, VPMOVZXWD, VCVTDQ2PS, 2, 16, ACC4, FLUSH4)
SHIFTDOT(·shiftDotI16x1, VPMOVSXWD, VCVTDQ2PS, 2, 16, ACC1, FLUSH1)
SHIFTDOT(·shiftDotI16x2, VPMOVSXWD, VCVTDQ2PS, 2, 16, ACC2, FLUSH2)
SHIFTDOT(·shiftDotI16x4, VPMOVSXWD, VCVTDQ2PS, 2, 16, ACC4, FLUSH4)
SHIFTDOT(·shiftDotI32x1, VMOVDQU, VCVTDQ2PS, 4, 32, ACC1, FLUSH1)
SHIFTDOT(·shiftDotI32x2, VMOVDQU, VCVTDQ2PS, 4, 32, ACC2, FLUSH2)
SHIFTDOT(·shiftDotI32x4, VMOVDQU, VCVTDQ2PS, 4, 32, ACC4, FLUSH4)
SHIFTDOT(·shiftDotF32x1, VMOVUPS, VMOVAPS, 4, 32, ACC1, FLUSH1)
SHIFTDOT(·shiftDotF32x2, VMOVUPS, VMOVAPS, 4, 32, ACC2, FLUSH2)
SHIFTDOT(·shiftDotF32x4, VMOVUPS, VMOVAPS, 4, 32, ACC4, FLUSH4)
