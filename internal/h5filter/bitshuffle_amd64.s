#include "textflag.h"

// AVX2 kernels of bitshuffle's inverse bit transposition and of HDF5's unshuffle
// (bitshuffle_amd64.go).
//
//	func untransPlaneAVX2(out, plane *byte, rows, groups int)
//
// plane holds the 8 bit rows k of one byte of the elements of a bitshuffle block, each
// rows bytes long (bit b of byte t of row k is bit k of that byte of element 8t+b); the
// kernel writes that byte of elements 0 to 256·groups−1 to out[0:256·groups], reading
// bytes 0 to 32·groups−1 of each row. Per group, the 8 rows' 32 bytes are 32 8×8 bit
// matrices (row k, column b), transposed in the registers by swapping 1×1, 2×2 then
// 4×4 blocks between pairs of rows (Hacker's Delight 7-3, on rows of bytes rather than
// bytes of a word); the transposed rows b (byte t: element 8t+b) are then interleaved
// byte by byte (unpacks, in each 128-bit lane: lane 0 holds t < 16, lane 1 t ≥ 16).
//
//	func interleave2AVX2(out, in *byte, n, groups int)
//	func interleave4AVX2(out, in *byte, n, groups int)
//
// in holds 2 (4) planes of n bytes; out[s·i+j] = in[j·n+i] for i < 32·groups, j < s.

DATA mask55<>+0(SB)/8, $0x5555555555555555
DATA mask55<>+8(SB)/8, $0x5555555555555555
DATA mask55<>+16(SB)/8, $0x5555555555555555
DATA mask55<>+24(SB)/8, $0x5555555555555555
GLOBL mask55<>(SB), RODATA|NOPTR, $32
DATA mask33<>+0(SB)/8, $0x3333333333333333
DATA mask33<>+8(SB)/8, $0x3333333333333333
DATA mask33<>+16(SB)/8, $0x3333333333333333
DATA mask33<>+24(SB)/8, $0x3333333333333333
GLOBL mask33<>(SB), RODATA|NOPTR, $32
DATA mask0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL mask0f<>(SB), RODATA|NOPTR, $32

// SWAP(A, B, S, M): t = ((A >> S) ^ B) & M; B ^= t; A ^= t << S (shifts of 16-bit
// words: the mask drops the bits shifted across a byte).
#define SWAP(A, B, S, M) \
	VPSRLW $S, A, Y8; \
	VPXOR B, Y8, Y8; \
	VPAND M, Y8, Y8; \
	VPXOR Y8, B, B; \
	VPSLLW $S, Y8, Y8; \
	VPXOR Y8, A, A

// func untransPlaneAVX2(out, plane *byte, rows, groups int)
TEXT ·untransPlaneAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ plane+8(FP), SI
	MOVQ rows+16(FP), BX
	MOVQ groups+24(FP), CX
	LEAQ (BX)(BX*2), R8 // 3·rows
	LEAQ (BX)(BX*4), R9 // 5·rows
	LEAQ (R8)(BX*4), R10 // 7·rows

loop:
	VMOVDQU (SI), Y0
	VMOVDQU (SI)(BX*1), Y1
	VMOVDQU (SI)(BX*2), Y2
	VMOVDQU (SI)(R8*1), Y3
	VMOVDQU (SI)(BX*4), Y4
	VMOVDQU (SI)(R9*1), Y5
	VMOVDQU (SI)(R8*2), Y6
	VMOVDQU (SI)(R10*1), Y7

	SWAP(Y0, Y1, 1, mask55<>(SB))
	SWAP(Y2, Y3, 1, mask55<>(SB))
	SWAP(Y4, Y5, 1, mask55<>(SB))
	SWAP(Y6, Y7, 1, mask55<>(SB))
	SWAP(Y0, Y2, 2, mask33<>(SB))
	SWAP(Y1, Y3, 2, mask33<>(SB))
	SWAP(Y4, Y6, 2, mask33<>(SB))
	SWAP(Y5, Y7, 2, mask33<>(SB))
	SWAP(Y0, Y4, 4, mask0f<>(SB))
	SWAP(Y1, Y5, 4, mask0f<>(SB))
	SWAP(Y2, Y6, 4, mask0f<>(SB))
	SWAP(Y3, Y7, 4, mask0f<>(SB))

	// Yb, byte t: element 8t+b. Interleave bytes, words, then dwords.
	VPUNPCKLBW Y1, Y0, Y8
	VPUNPCKHBW Y1, Y0, Y9
	VPUNPCKLBW Y3, Y2, Y10
	VPUNPCKHBW Y3, Y2, Y11
	VPUNPCKLBW Y5, Y4, Y12
	VPUNPCKHBW Y5, Y4, Y13
	VPUNPCKLBW Y7, Y6, Y14
	VPUNPCKHBW Y7, Y6, Y15

	VPUNPCKLWD Y10, Y8, Y0
	VPUNPCKHWD Y10, Y8, Y1
	VPUNPCKLWD Y11, Y9, Y2
	VPUNPCKHWD Y11, Y9, Y3
	VPUNPCKLWD Y14, Y12, Y4
	VPUNPCKHWD Y14, Y12, Y5
	VPUNPCKLWD Y15, Y13, Y6
	VPUNPCKHWD Y15, Y13, Y7

	// Yq (q = 0..7), lane L: elements 8t to 8t+15 for t = 16L+2q.
	VPUNPCKLDQ Y4, Y0, Y8
	VPUNPCKHDQ Y4, Y0, Y9
	VPUNPCKLDQ Y5, Y1, Y10
	VPUNPCKHDQ Y5, Y1, Y11
	VPUNPCKLDQ Y6, Y2, Y12
	VPUNPCKHDQ Y6, Y2, Y13
	VPUNPCKLDQ Y7, Y3, Y14
	VPUNPCKHDQ Y7, Y3, Y15

	VMOVDQU X8, 0(DI)
	VMOVDQU X9, 16(DI)
	VMOVDQU X10, 32(DI)
	VMOVDQU X11, 48(DI)
	VMOVDQU X12, 64(DI)
	VMOVDQU X13, 80(DI)
	VMOVDQU X14, 96(DI)
	VMOVDQU X15, 112(DI)
	VEXTRACTI128 $1, Y8, 128(DI)
	VEXTRACTI128 $1, Y9, 144(DI)
	VEXTRACTI128 $1, Y10, 160(DI)
	VEXTRACTI128 $1, Y11, 176(DI)
	VEXTRACTI128 $1, Y12, 192(DI)
	VEXTRACTI128 $1, Y13, 208(DI)
	VEXTRACTI128 $1, Y14, 224(DI)
	VEXTRACTI128 $1, Y15, 240(DI)

	ADDQ $32, SI
	ADDQ $256, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET

// func interleave2AVX2(out, in *byte, n, groups int)
TEXT ·interleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ groups+24(FP), CX

loop2:
	VMOVDQU (SI), Y0
	VMOVDQU (SI)(BX*1), Y1
	VPUNPCKLBW Y1, Y0, Y2 // elements 0-7 | 16-23
	VPUNPCKHBW Y1, Y0, Y3 // 8-15 | 24-31
	VPERM2I128 $0x20, Y3, Y2, Y4
	VPERM2I128 $0x31, Y3, Y2, Y5
	VMOVDQU Y4, 0(DI)
	VMOVDQU Y5, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop2
	VZEROUPPER
	RET

// func interleave4AVX2(out, in *byte, n, groups int)
TEXT ·interleave4AVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ groups+24(FP), CX
	LEAQ (BX)(BX*2), R8

loop4:
	VMOVDQU (SI), Y0
	VMOVDQU (SI)(BX*1), Y1
	VMOVDQU (SI)(BX*2), Y2
	VMOVDQU (SI)(R8*1), Y3
	VPUNPCKLBW Y1, Y0, Y4 // elements 0-7 | 16-23
	VPUNPCKHBW Y1, Y0, Y5 // 8-15 | 24-31
	VPUNPCKLBW Y3, Y2, Y6
	VPUNPCKHBW Y3, Y2, Y7
	VPUNPCKLWD Y6, Y4, Y0 // 0-3 | 16-19
	VPUNPCKHWD Y6, Y4, Y1 // 4-7 | 20-23
	VPUNPCKLWD Y7, Y5, Y2 // 8-11 | 24-27
	VPUNPCKHWD Y7, Y5, Y3 // 12-15 | 28-31
	VPERM2I128 $0x20, Y1, Y0, Y4
	VPERM2I128 $0x20, Y3, Y2, Y5
	VPERM2I128 $0x31, Y1, Y0, Y6
	VPERM2I128 $0x31, Y3, Y2, Y7
	VMOVDQU Y4, 0(DI)
	VMOVDQU Y5, 32(DI)
	VMOVDQU Y6, 64(DI)
	VMOVDQU Y7, 96(DI)
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop4
	VZEROUPPER
	RET
