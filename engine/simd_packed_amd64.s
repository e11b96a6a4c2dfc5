#include "textflag.h"

// Register-blocked kernels of the dense mask-dot product for many masks, on weights packed
// by packMasks (kernels.go): for each 16-pixel step of a block, the 16 weights of each of
// the group's 8 masks, one 64-byte vector per mask (512 bytes per step). Every function
//
//	func dot<T>p<F>x8Z(px0, px1, px2 *T, n int, w *float32, pf *float32, out *float32)
//
// (AVX-512F, ZMM registers) sets out[8f+m] = Σ_{i<n} float32(px_f[i])·w_m[i] for F = 1, 2
// or 3 frames px_f (the frames past F are ignored) and the 8 masks m of the packed group
// at w, in float32: one 16-lane accumulator per frame and mask (up to 24 of the 32 ZMM
// registers), each weight vector loaded once for the F frames, each 16 pixels converted
// to float32 once for the 8 masks. n ≥ 1 is any pixel count: the last n mod 16 pixels
// load under an opmask (K1), so the kernel reads no frame byte past px_f + n (the packed
// weights are zero-padded to 16 pixels). Every function
//
//	func dot<T>p<F>x4Y(px0, px1, px2 *T, n int, w *float32, pf *float32, out *float32)
//
// (AVX2+FMA, YMM registers) does the same for the 4 masks at w (the first or the second
// half of a packed group: w or w+64 floats) into out[4f+m], 8 pixels per half step, and
// needs n to be a positive multiple of 16. Both prefetch into L2 two 64-byte lines at pf
// per 16 pixels (pf advances 128 bytes per step): a part of the next group's weights.
//
// Registers: SI, R10, R11 the frames; CX n; DI the packed weights, advancing 512 bytes per
// step; R8 pf, then out; AX the pixel index; BX the end of the unmasked steps.

// Z<T>(P, R) loads pixels AX..AX+15 of frame P as 16 float32 into R, prefetching the frame
// 1024 pixels ahead into L2 (PREFETCHT1), as the quad kernels do; Z<T>M does the same under
// opmask K1 (masked-off lanes are 0 and not read). Y<T>_LO below prefetches alike. They
// prefetched 1 KiB ahead into L1 (PREFETCHT0) before, where the group's packed weights
// (32 KiB per block) are: make bench's rows, one Zen 4 core / two, medians over 5-8 pairs
// of the GB/s ratio new / old, float32 frames 8 masks 1.24 / 1.15, 16 masks 1.16 / 1.19; uint16 8 masks
// 1.28 / 1.29, 16 masks 1.08 / 1.01, 64 masks 1.02 / 1.08; with the AVX2 kernels
// (GODEBUG=cpu.avx512f=off) float32 16 masks 1.31 / 1.33, uint16 16 masks 1.09 / 1.10.

#define ZU8(P, R) PREFETCHT1 1024(P)(AX*1); VPMOVZXBD (P)(AX*1), R; VCVTDQ2PS R, R
#define ZU8M(P, R) VPMOVZXBD.Z (P)(AX*1), K1, R; VCVTDQ2PS R, R
#define ZI8(P, R) PREFETCHT1 1024(P)(AX*1); VPMOVSXBD (P)(AX*1), R; VCVTDQ2PS R, R
#define ZI8M(P, R) VPMOVSXBD.Z (P)(AX*1), K1, R; VCVTDQ2PS R, R
#define ZU16(P, R) PREFETCHT1 2048(P)(AX*2); VPMOVZXWD (P)(AX*2), R; VCVTDQ2PS R, R
#define ZU16M(P, R) VPMOVZXWD.Z (P)(AX*2), K1, R; VCVTDQ2PS R, R
#define ZI16(P, R) PREFETCHT1 2048(P)(AX*2); VPMOVSXWD (P)(AX*2), R; VCVTDQ2PS R, R
#define ZI16M(P, R) VPMOVSXWD.Z (P)(AX*2), K1, R; VCVTDQ2PS R, R
#define ZI32(P, R) PREFETCHT1 4096(P)(AX*4); VCVTDQ2PS (P)(AX*4), R
#define ZI32M(P, R) VCVTDQ2PS.Z (P)(AX*4), K1, R
#define ZF32(P, R) PREFETCHT1 4096(P)(AX*4); VMOVUPS (P)(AX*4), R
#define ZF32M(P, R) VMOVUPS.Z (P)(AX*4), K1, R

// ZW<F>(OFF, ...) loads the weights of one mask (OFF(DI)) into Z27 and adds them times
// the F frames' pixels (Z24, Z25, Z26) into that mask's accumulators.
#define ZW3(OFF, A, B, C) \
	VMOVUPS     OFF(DI), Z27; \
	VFMADD231PS Z27, Z24, A; \
	VFMADD231PS Z27, Z25, B; \
	VFMADD231PS Z27, Z26, C
#define ZW2(OFF, A, B) \
	VMOVUPS     OFF(DI), Z27; \
	VFMADD231PS Z27, Z24, A; \
	VFMADD231PS Z27, Z25, B
#define ZW1(OFF, A) VFMADD231PS OFF(DI), Z24, A

// ZSTEP<F> is one 16-pixel step of the 8 masks: frame f's mask m in Z(8f+m).
#define ZSTEP3 \
	ZW3(0, Z0, Z8, Z16); \
	ZW3(64, Z1, Z9, Z17); \
	ZW3(128, Z2, Z10, Z18); \
	ZW3(192, Z3, Z11, Z19); \
	ZW3(256, Z4, Z12, Z20); \
	ZW3(320, Z5, Z13, Z21); \
	ZW3(384, Z6, Z14, Z22); \
	ZW3(448, Z7, Z15, Z23)
#define ZSTEP2 \
	ZW2(0, Z0, Z8); \
	ZW2(64, Z1, Z9); \
	ZW2(128, Z2, Z10); \
	ZW2(192, Z3, Z11); \
	ZW2(256, Z4, Z12); \
	ZW2(320, Z5, Z13); \
	ZW2(384, Z6, Z14); \
	ZW2(448, Z7, Z15)
#define ZSTEP1 \
	ZW1(0, Z0); \
	ZW1(64, Z1); \
	ZW1(128, Z2); \
	ZW1(192, Z3); \
	ZW1(256, Z4); \
	ZW1(320, Z5); \
	ZW1(384, Z6); \
	ZW1(448, Z7)

// ZLOAD<F>(LD) loads the F frames' pixels with loader LD.
#define ZLOAD3(LD) LD(SI, Z24); LD(R10, Z25); LD(R11, Z26)
#define ZLOAD2(LD) LD(SI, Z24); LD(R10, Z25)
#define ZLOAD1(LD) LD(SI, Z24)

// ZZERO<K> zeroes accumulators Z0..Z(K-1).
#define ZZERO8 \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7
#define ZZERO16 \
	ZZERO8; \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15
#define ZZERO24 \
	ZZERO16; \
	VPXORD Z16, Z16, Z16; VPXORD Z17, Z17, Z17; VPXORD Z18, Z18, Z18; VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; VPXORD Z21, Z21, Z21; VPXORD Z22, Z22, Z22; VPXORD Z23, Z23, Z23

// ZSUM(Z, X, OFF) stores the sum of Z's 16 lanes (low lane X) as out[OFF/4]; uses Z28.
#define ZSUM(Z, X, OFF) \
	VEXTRACTF64X4 $1, Z, Y28; \
	VADDPS        Z28, Z, Z; \
	VEXTRACTF32X4 $1, Z, X28; \
	VADDPS        Z28, Z, Z; \
	VPERMILPS     $0x4e, Z, Z28; \
	VADDPS        Z28, Z, Z; \
	VPERMILPS     $0xb1, Z, Z28; \
	VADDPS        Z28, Z, Z; \
	VMOVSS        X, OFF(R8)

#define ZSUM8(A0, A1, A2, A3, A4, A5, A6, A7, X0, X1, X2, X3, X4, X5, X6, X7, OFF) \
	ZSUM(A0, X0, OFF); \
	ZSUM(A1, X1, OFF+4); \
	ZSUM(A2, X2, OFF+8); \
	ZSUM(A3, X3, OFF+12); \
	ZSUM(A4, X4, OFF+16); \
	ZSUM(A5, X5, OFF+20); \
	ZSUM(A6, X6, OFF+24); \
	ZSUM(A7, X7, OFF+28)
#define ZSUMS1 ZSUM8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, X0, X1, X2, X3, X4, X5, X6, X7, 0)
#define ZSUMS2 \
	ZSUMS1; \
	ZSUM8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, X8, X9, X10, X11, X12, X13, X14, X15, 32)
#define ZSUMS3 \
	ZSUMS2; \
	ZSUM8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, X16, X17, X18, X19, X20, X21, X22, X23, 64)

// PACKED_ARGS loads the arguments (SI, R10, R11 px0..px2, CX n, DI w, R8 pf) and sets
// AX = 0 and BX = n rounded down to 16.
#define PACKED_ARGS \
	MOVQ px0+0(FP), SI; \
	MOVQ px1+8(FP), R10; \
	MOVQ px2+16(FP), R11; \
	MOVQ n+24(FP), CX; \
	MOVQ w+32(FP), DI; \
	MOVQ pf+40(FP), R8; \
	XORQ AX, AX; \
	MOVQ CX, BX; \
	ANDQ $-16, BX

// DOTZ(LOAD, STEP, LD, LDM, ZERO, SUMS): the AVX-512 kernel body.
#define DOTZ(LOAD, STEP, LD, LDM, ZERO, SUMS) \
	PACKED_ARGS; \
	ZERO; \
	CMPQ AX, BX; \
	JAE  tail; \
loop: \
	LOAD(LD); \
	STEP; \
	PREFETCHT1 (R8); \
	PREFETCHT1 64(R8); \
	ADDQ $128, R8; \
	ADDQ $512, DI; \
	ADDQ $16, AX; \
	CMPQ AX, BX; \
	JB   loop; \
tail: \
	CMPQ AX, CX; \
	JAE  done; \
	MOVQ CX, R9; \
	SUBQ AX, R9; \
	MOVQ $16, CX; \
	SUBQ R9, CX; \
	MOVL $0xffff, R9; \
	SHRL CX, R9; \
	KMOVW R9, K1; \
	LOAD(LDM); \
	STEP; \
done: \
	MOVQ out+48(FP), R8; \
	SUMS; \
	VZEROUPPER

// YW<F>(OFF, ...) loads 8 weights of one mask (OFF(DI)) into Y15 and adds them times the
// F frames' 8 pixels (Y12, Y13, Y14) into that mask's accumulators.
#define YW3(OFF, A, B, C) \
	VMOVUPS     OFF(DI), Y15; \
	VFMADD231PS Y15, Y12, A; \
	VFMADD231PS Y15, Y13, B; \
	VFMADD231PS Y15, Y14, C
#define YW2(OFF, A, B) \
	VMOVUPS     OFF(DI), Y15; \
	VFMADD231PS Y15, Y12, A; \
	VFMADD231PS Y15, Y13, B
#define YW1(OFF, A) VFMADD231PS OFF(DI), Y12, A

// YHALF<F>(H) is one 8-pixel half step (H = 0: lanes 0-7 of each mask's vector, 32: lanes
// 8-15) of the 4 masks: frame f's mask m in Y(4f+m).
#define YHALF3(H) \
	YW3(H, Y0, Y4, Y8); \
	YW3(64+H, Y1, Y5, Y9); \
	YW3(128+H, Y2, Y6, Y10); \
	YW3(192+H, Y3, Y7, Y11)
#define YHALF2(H) \
	YW2(H, Y0, Y4); \
	YW2(64+H, Y1, Y5); \
	YW2(128+H, Y2, Y6); \
	YW2(192+H, Y3, Y7)
#define YHALF1(H) \
	YW1(H, Y0); \
	YW1(64+H, Y1); \
	YW1(128+H, Y2); \
	YW1(192+H, Y3)

#define YLOAD3(LD) LD(SI, Y12); LD(R10, Y13); LD(R11, Y14)
#define YLOAD2(LD) LD(SI, Y12); LD(R10, Y13)
#define YLOAD1(LD) LD(SI, Y12)

#define YZERO4 VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3
#define YZERO8 YZERO4; VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7
#define YZERO12 YZERO8; VXORPS Y8, Y8, Y8; VXORPS Y9, Y9, Y9; VXORPS Y10, Y10, Y10; VXORPS Y11, Y11, Y11

// HSUM (simd_amd64.s) is not visible here: YSUM is the same, the sum of Y's 8 lanes as
// out[OFF/4], using X15.
#define YSUM(Y, X, OFF) \
	VEXTRACTF128 $1, Y, X15; \
	VADDPS       X15, X, X; \
	VHADDPS      X, X, X; \
	VHADDPS      X, X, X; \
	VMOVSS       X, OFF(R8)
#define YSUMS1 YSUM(Y0, X0, 0); YSUM(Y1, X1, 4); YSUM(Y2, X2, 8); YSUM(Y3, X3, 12)
#define YSUMS2 YSUMS1; YSUM(Y4, X4, 16); YSUM(Y5, X5, 20); YSUM(Y6, X6, 24); YSUM(Y7, X7, 28)
#define YSUMS3 YSUMS2; YSUM(Y8, X8, 32); YSUM(Y9, X9, 36); YSUM(Y10, X10, 40); YSUM(Y11, X11, 44)

// DOTY(LOAD, HALF, LO, HI, ZERO, SUMS): the AVX2 kernel body; LO and HI are the 8-pixel
// loaders of simd_amd64.s (pixels AX..AX+7 and AX+8..AX+15), repeated here.
#define DOTY(LOAD, HALF, LO, HI, ZERO, SUMS) \
	PACKED_ARGS; \
	ZERO; \
loop: \
	LOAD(LO); \
	HALF(0); \
	LOAD(HI); \
	HALF(32); \
	PREFETCHT1 (R8); \
	PREFETCHT1 64(R8); \
	ADDQ $128, R8; \
	ADDQ $512, DI; \
	ADDQ $16, AX; \
	CMPQ AX, BX; \
	JB   loop; \
	MOVQ out+48(FP), R8; \
	SUMS; \
	VZEROUPPER


// Y<T>_LO and Y<T>_HI: 8 pixels at AX and at AX+8 as float32 (as <T>_LO, <T>_HI in simd_amd64.s).
#define YU8_LO(P, Y) PREFETCHT1 1024(P)(AX*1); VPMOVZXBD (P)(AX*1), Y; VCVTDQ2PS Y, Y
#define YU8_HI(P, Y) VPMOVZXBD 8(P)(AX*1), Y; VCVTDQ2PS Y, Y
#define YI8_LO(P, Y) PREFETCHT1 1024(P)(AX*1); VPMOVSXBD (P)(AX*1), Y; VCVTDQ2PS Y, Y
#define YI8_HI(P, Y) VPMOVSXBD 8(P)(AX*1), Y; VCVTDQ2PS Y, Y
#define YU16_LO(P, Y) PREFETCHT1 2048(P)(AX*2); VPMOVZXWD (P)(AX*2), Y; VCVTDQ2PS Y, Y
#define YU16_HI(P, Y) VPMOVZXWD 16(P)(AX*2), Y; VCVTDQ2PS Y, Y
#define YI16_LO(P, Y) PREFETCHT1 2048(P)(AX*2); VPMOVSXWD (P)(AX*2), Y; VCVTDQ2PS Y, Y
#define YI16_HI(P, Y) VPMOVSXWD 16(P)(AX*2), Y; VCVTDQ2PS Y, Y
#define YI32_LO(P, Y) PREFETCHT1 4096(P)(AX*4); VCVTDQ2PS (P)(AX*4), Y
#define YI32_HI(P, Y) VCVTDQ2PS 32(P)(AX*4), Y
#define YF32_LO(P, Y) PREFETCHT1 4096(P)(AX*4); VMOVUPS (P)(AX*4), Y
#define YF32_HI(P, Y) VMOVUPS 32(P)(AX*4), Y

// func dotU8p1x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZU8, ZU8M, ZZERO8, ZSUMS1)
	RET

// func dotU8p2x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZU8, ZU8M, ZZERO16, ZSUMS2)
	RET

// func dotU8p3x8Z(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZU8, ZU8M, ZZERO24, ZSUMS3)
	RET

// func dotU8p1x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YU8_LO, YU8_HI, YZERO4, YSUMS1)
	RET

// func dotU8p2x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YU8_LO, YU8_HI, YZERO8, YSUMS2)
	RET

// func dotU8p3x4Y(px0, px1, px2 *uint8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU8p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YU8_LO, YU8_HI, YZERO12, YSUMS3)
	RET

// func dotI8p1x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZI8, ZI8M, ZZERO8, ZSUMS1)
	RET

// func dotI8p2x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZI8, ZI8M, ZZERO16, ZSUMS2)
	RET

// func dotI8p3x8Z(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZI8, ZI8M, ZZERO24, ZSUMS3)
	RET

// func dotI8p1x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YI8_LO, YI8_HI, YZERO4, YSUMS1)
	RET

// func dotI8p2x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YI8_LO, YI8_HI, YZERO8, YSUMS2)
	RET

// func dotI8p3x4Y(px0, px1, px2 *int8, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI8p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YI8_LO, YI8_HI, YZERO12, YSUMS3)
	RET

// func dotU16p1x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZU16, ZU16M, ZZERO8, ZSUMS1)
	RET

// func dotU16p2x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZU16, ZU16M, ZZERO16, ZSUMS2)
	RET

// func dotU16p3x8Z(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZU16, ZU16M, ZZERO24, ZSUMS3)
	RET

// func dotU16p1x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YU16_LO, YU16_HI, YZERO4, YSUMS1)
	RET

// func dotU16p2x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YU16_LO, YU16_HI, YZERO8, YSUMS2)
	RET

// func dotU16p3x4Y(px0, px1, px2 *uint16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotU16p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YU16_LO, YU16_HI, YZERO12, YSUMS3)
	RET

// func dotI16p1x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZI16, ZI16M, ZZERO8, ZSUMS1)
	RET

// func dotI16p2x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZI16, ZI16M, ZZERO16, ZSUMS2)
	RET

// func dotI16p3x8Z(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZI16, ZI16M, ZZERO24, ZSUMS3)
	RET

// func dotI16p1x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YI16_LO, YI16_HI, YZERO4, YSUMS1)
	RET

// func dotI16p2x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YI16_LO, YI16_HI, YZERO8, YSUMS2)
	RET

// func dotI16p3x4Y(px0, px1, px2 *int16, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI16p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YI16_LO, YI16_HI, YZERO12, YSUMS3)
	RET

// func dotI32p1x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZI32, ZI32M, ZZERO8, ZSUMS1)
	RET

// func dotI32p2x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZI32, ZI32M, ZZERO16, ZSUMS2)
	RET

// func dotI32p3x8Z(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZI32, ZI32M, ZZERO24, ZSUMS3)
	RET

// func dotI32p1x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YI32_LO, YI32_HI, YZERO4, YSUMS1)
	RET

// func dotI32p2x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YI32_LO, YI32_HI, YZERO8, YSUMS2)
	RET

// func dotI32p3x4Y(px0, px1, px2 *int32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotI32p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YI32_LO, YI32_HI, YZERO12, YSUMS3)
	RET

// func dotF32p1x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p1x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD1, ZSTEP1, ZF32, ZF32M, ZZERO8, ZSUMS1)
	RET

// func dotF32p2x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p2x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD2, ZSTEP2, ZF32, ZF32M, ZZERO16, ZSUMS2)
	RET

// func dotF32p3x8Z(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p3x8Z(SB), NOSPLIT, $0-56
	DOTZ(ZLOAD3, ZSTEP3, ZF32, ZF32M, ZZERO24, ZSUMS3)
	RET

// func dotF32p1x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p1x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD1, YHALF1, YF32_LO, YF32_HI, YZERO4, YSUMS1)
	RET

// func dotF32p2x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p2x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD2, YHALF2, YF32_LO, YF32_HI, YZERO8, YSUMS2)
	RET

// func dotF32p3x4Y(px0, px1, px2 *float32, n int, w *float32, pf *float32, out *float32)
TEXT ·dotF32p3x4Y(SB), NOSPLIT, $0-56
	DOTY(YLOAD3, YHALF3, YF32_LO, YF32_HI, YZERO12, YSUMS3)
	RET
