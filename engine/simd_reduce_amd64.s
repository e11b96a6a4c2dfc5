#include "textflag.h"

// AVX2 kernels of the sum reduction (see reduce.go's sumKernel): each adds, for n pixels
// (a positive multiple of 32 for uint16, 16 for float32), the sum over frames frames of
// pixel i into acc[i]; frame f's pixels start stride bytes after frame f−1's. The sums
// of one call are held in registers: per 32 uint16 pixels in uint32 (exact for at most
// 65537 frames; the caller passes fewer), widened to int64 and added to acc; per 16
// float32 pixels in float64, added to acc. Registers: SI px, DX stride, CX frames, BX
// n, DI acc, R8 the pixel index, R9 the frame pointer, R10 the frames left.

// func sumU16(px *uint16, stride, frames, n int, acc *int64)
TEXT ·sumU16(SB), NOSPLIT, $0-40
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ acc+32(FP), DI
	MOVL $0xffff, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	XORQ R8, R8

u16group:
	// Y0, Y2: sums of the even pixels of the group's two halves (dword j: pixel 2j),
	// Y1, Y3: of the odd pixels (dword j: pixel 2j+1).
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	LEAQ  (SI)(R8*2), R9
	MOVQ  CX, R10

u16frame:
	PREFETCHT0 512(R9)
	VMOVDQU    (R9), Y4
	VMOVDQU    32(R9), Y6
	VPAND      Y15, Y4, Y5
	VPSRLD     $16, Y4, Y4
	VPAND      Y15, Y6, Y7
	VPSRLD     $16, Y6, Y6
	VPADDD     Y5, Y0, Y0
	VPADDD     Y4, Y1, Y1
	VPADDD     Y7, Y2, Y2
	VPADDD     Y6, Y3, Y3
	ADDQ       DX, R9
	DECQ       R10
	JNZ        u16frame

	// Interleave even and odd sums back into pixel order, widen to int64 and add:
	// unpack-low gives pixels 0-3 (low lane) and 8-11 (high lane), unpack-high 4-7 and
	// 12-15.
	LEAQ       (DI)(R8*8), R11
	VPUNPCKLDQ Y1, Y0, Y4
	VPUNPCKHDQ Y1, Y0, Y5
	VPMOVZXDQ  X4, Y8
	VPADDQ     (R11), Y8, Y8
	VMOVDQU    Y8, (R11)
	VPMOVZXDQ  X5, Y8
	VPADDQ     32(R11), Y8, Y8
	VMOVDQU    Y8, 32(R11)
	VEXTRACTI128 $1, Y4, X4
	VPMOVZXDQ  X4, Y8
	VPADDQ     64(R11), Y8, Y8
	VMOVDQU    Y8, 64(R11)
	VEXTRACTI128 $1, Y5, X5
	VPMOVZXDQ  X5, Y8
	VPADDQ     96(R11), Y8, Y8
	VMOVDQU    Y8, 96(R11)

	VPUNPCKLDQ Y3, Y2, Y4
	VPUNPCKHDQ Y3, Y2, Y5
	VPMOVZXDQ  X4, Y8
	VPADDQ     128(R11), Y8, Y8
	VMOVDQU    Y8, 128(R11)
	VPMOVZXDQ  X5, Y8
	VPADDQ     160(R11), Y8, Y8
	VMOVDQU    Y8, 160(R11)
	VEXTRACTI128 $1, Y4, X4
	VPMOVZXDQ  X4, Y8
	VPADDQ     192(R11), Y8, Y8
	VMOVDQU    Y8, 192(R11)
	VEXTRACTI128 $1, Y5, X5
	VPMOVZXDQ  X5, Y8
	VPADDQ     224(R11), Y8, Y8
	VMOVDQU    Y8, 224(R11)

	ADDQ $32, R8
	CMPQ R8, BX
	JB   u16group
	VZEROUPPER
	RET

// func sumF32(px *float32, stride, frames, n int, acc *float64)
TEXT ·sumF32(SB), NOSPLIT, $0-40
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ acc+32(FP), DI
	XORQ R8, R8

f32group:
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	LEAQ   (SI)(R8*4), R9
	MOVQ   CX, R10

f32frame:
	PREFETCHT0 512(R9)
	VCVTPS2PD  (R9), Y4
	VCVTPS2PD  16(R9), Y5
	VCVTPS2PD  32(R9), Y6
	VCVTPS2PD  48(R9), Y7
	VADDPD     Y4, Y0, Y0
	VADDPD     Y5, Y1, Y1
	VADDPD     Y6, Y2, Y2
	VADDPD     Y7, Y3, Y3
	ADDQ       DX, R9
	DECQ       R10
	JNZ        f32frame

	LEAQ    (DI)(R8*8), R11
	VADDPD  (R11), Y0, Y0
	VMOVUPD Y0, (R11)
	VADDPD  32(R11), Y1, Y1
	VMOVUPD Y1, 32(R11)
	VADDPD  64(R11), Y2, Y2
	VMOVUPD Y2, 64(R11)
	VADDPD  96(R11), Y3, Y3
	VMOVUPD Y3, 96(R11)

	ADDQ $16, R8
	CMPQ R8, BX
	JB   f32group
	VZEROUPPER
	RET

// func maxU16(px *uint16, stride, frames, n int, mx *uint16)
// mx[i] = max(mx[i], px[f·stride/2 + i]) over the frames, n a positive multiple of 32.
TEXT ·maxU16(SB), NOSPLIT, $0-40
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ mx+32(FP), DI
	XORQ R8, R8

maxu16group:
	LEAQ    (DI)(R8*2), R11
	VMOVDQU (R11), Y0
	VMOVDQU 32(R11), Y1
	LEAQ    (SI)(R8*2), R9
	MOVQ    CX, R10

maxu16frame:
	PREFETCHT0 512(R9)
	VPMAXUW    (R9), Y0, Y0
	VPMAXUW    32(R9), Y1, Y1
	ADDQ       DX, R9
	DECQ       R10
	JNZ        maxu16frame

	VMOVDQU Y0, (R11)
	VMOVDQU Y1, 32(R11)
	ADDQ    $32, R8
	CMPQ    R8, BX
	JB      maxu16group
	VZEROUPPER
	RET

// func maxF32(px *float32, stride, frames, n int, mx *float32)
// mx[i] = max(mx[i], px[f·stride/4 + i]) over the frames, NaN once a NaN is met (in mx
// or a frame), n a positive multiple of 16. VMAXPS gives its second operand, the
// pixel, when either is NaN; the NaN lanes are kept apart (Y2, Y3: all ones where a
// NaN was seen) and ORed in at the end (all ones is a NaN).
TEXT ·maxF32(SB), NOSPLIT, $0-40
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ mx+32(FP), DI
	XORQ R8, R8

maxf32group:
	LEAQ    (DI)(R8*4), R11
	VMOVUPS (R11), Y0
	VMOVUPS 32(R11), Y1
	VCMPPS  $3, Y0, Y0, Y2
	VCMPPS  $3, Y1, Y1, Y3
	LEAQ    (SI)(R8*4), R9
	MOVQ    CX, R10

maxf32frame:
	PREFETCHT0 512(R9)
	VMOVUPS    (R9), Y4
	VMOVUPS    32(R9), Y5
	VMAXPS     Y4, Y0, Y0
	VMAXPS     Y5, Y1, Y1
	VCMPPS     $3, Y4, Y4, Y6
	VCMPPS     $3, Y5, Y5, Y7
	VORPS      Y6, Y2, Y2
	VORPS      Y7, Y3, Y3
	ADDQ       DX, R9
	DECQ       R10
	JNZ        maxf32frame

	VORPS   Y2, Y0, Y0
	VORPS   Y3, Y1, Y1
	VMOVUPS Y0, (R11)
	VMOVUPS Y1, 32(R11)
	ADDQ    $16, R8
	CMPQ    R8, BX
	JB      maxf32group
	VZEROUPPER
	RET

// func stdU16(px *uint16, stride, frames, n int, k *uint16, s1 *int64, s2 *uint64)
// For n pixels (a positive multiple of 8) and d = px − k: s1[i] += Σ d, s2[i] += Σ d²
// over the frames (at most 32768: the sums of d are held in int32), exactly. Per 8
// pixels: Y15 k, Y0 Σd (int32), Y1 Σd² of pixels 0, 2, 4, 6 and Y2 of 1, 3, 5, 7
// (int64, VPMULDQ of the even dwords; the odd ones shifted down first).
TEXT ·stdU16(SB), NOSPLIT, $0-56
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ k+32(FP), DI
	MOVQ s1+40(FP), R12
	MOVQ s2+48(FP), R13
	XORQ R8, R8

stdu16group:
	VPMOVZXWD (DI)(R8*2), Y15
	VPXOR     Y0, Y0, Y0
	VPXOR     Y1, Y1, Y1
	VPXOR     Y2, Y2, Y2
	LEAQ      (SI)(R8*2), R9
	MOVQ      CX, R10

stdu16frame:
	PREFETCHT0 512(R9)
	VPMOVZXWD  (R9), Y3
	VPSUBD     Y15, Y3, Y3
	VPADDD     Y3, Y0, Y0
	VPMULDQ    Y3, Y3, Y4
	VPADDQ     Y4, Y1, Y1
	VPSRLQ     $32, Y3, Y5
	VPMULDQ    Y5, Y5, Y5
	VPADDQ     Y5, Y2, Y2
	ADDQ       DX, R9
	DECQ       R10
	JNZ        stdu16frame

	// s1: Σd widened to int64, pixels 0-3 then 4-7.
	LEAQ         (R12)(R8*8), R11
	VPMOVSXDQ    X0, Y6
	VPADDQ       (R11), Y6, Y6
	VMOVDQU      Y6, (R11)
	VEXTRACTI128 $1, Y0, X0
	VPMOVSXDQ    X0, Y6
	VPADDQ       32(R11), Y6, Y6
	VMOVDQU      Y6, 32(R11)

	// s2: interleave the even and odd pixels' Σd² back into pixel order.
	LEAQ        (R13)(R8*8), R11
	VPUNPCKLQDQ Y2, Y1, Y6 // pixels 0, 1 | 4, 5
	VPUNPCKHQDQ Y2, Y1, Y7 // pixels 2, 3 | 6, 7
	VPERM2I128  $0x20, Y7, Y6, Y8
	VPERM2I128  $0x31, Y7, Y6, Y9
	VPADDQ      (R11), Y8, Y8
	VMOVDQU     Y8, (R11)
	VPADDQ      32(R11), Y9, Y9
	VMOVDQU     Y9, 32(R11)

	ADDQ $8, R8
	CMPQ R8, BX
	JB   stdu16group
	VZEROUPPER
	RET

// func stdF32(px *float32, stride, frames, n int, k *float32, s1, s2 *float64)
// For n pixels (a positive multiple of 8) and d = px − k in float64: s1[i] += Σ d,
// s2[i] += Σ d² over the frames. Per 8 pixels: Y14, Y15 k, Y0, Y1 Σd, Y2, Y3 Σd².
TEXT ·stdF32(SB), NOSPLIT, $0-56
	MOVQ px+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ frames+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ k+32(FP), DI
	MOVQ s1+40(FP), R12
	MOVQ s2+48(FP), R13
	XORQ R8, R8

stdf32group:
	VCVTPS2PD (DI)(R8*4), Y14
	VCVTPS2PD 16(DI)(R8*4), Y15
	VXORPD    Y0, Y0, Y0
	VXORPD    Y1, Y1, Y1
	VXORPD    Y2, Y2, Y2
	VXORPD    Y3, Y3, Y3
	LEAQ      (SI)(R8*4), R9
	MOVQ      CX, R10

stdf32frame:
	PREFETCHT0  512(R9)
	VCVTPS2PD   (R9), Y4
	VCVTPS2PD   16(R9), Y5
	VSUBPD      Y14, Y4, Y4
	VSUBPD      Y15, Y5, Y5
	VADDPD      Y4, Y0, Y0
	VADDPD      Y5, Y1, Y1
	VFMADD231PD Y4, Y4, Y2
	VFMADD231PD Y5, Y5, Y3
	ADDQ        DX, R9
	DECQ        R10
	JNZ         stdf32frame

	LEAQ    (R12)(R8*8), R11
	VADDPD  (R11), Y0, Y0
	VMOVUPD Y0, (R11)
	VADDPD  32(R11), Y1, Y1
	VMOVUPD Y1, 32(R11)
	LEAQ    (R13)(R8*8), R11
	VADDPD  (R11), Y2, Y2
	VMOVUPD Y2, (R11)
	VADDPD  32(R11), Y3, Y3
	VMOVUPD Y3, 32(R11)

	ADDQ $8, R8
	CMPQ R8, BX
	JB   stdf32group
	VZEROUPPER
	RET
