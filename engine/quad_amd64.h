// The quad kernels' argument loads, shared by simd_amd64.s and simd_pair512_amd64.s.

// QUAD_ARGS loads the arguments of a four-frame kernel (SI, R10, R11, R12 px0-px3, CX n,
// DI w).
#define QUAD_ARGS \
	MOVQ px0+0(FP), SI; \
	MOVQ px1+8(FP), R10; \
	MOVQ px2+16(FP), R11; \
	MOVQ px3+24(FP), R12; \
	MOVQ n+32(FP), CX; \
	MOVQ w+40(FP), DI

// QUAD2_ARGS loads the arguments of a two-mask, four-frame kernel: QUAD_ARGS and DX ldw.
#define QUAD2_ARGS \
	QUAD_ARGS; \
	MOVQ ldw+48(FP), DX
