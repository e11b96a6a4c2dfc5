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
