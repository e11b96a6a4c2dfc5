//go:build !amd64

package engine

// simdKernels returns nil: the block kernels exist only in amd64 assembly
// (simd_amd64.s), so every product takes the pure-Go path.
func simdKernels[N native]() *groupKernels[N] { return nil }

// packedKernelsFor returns nil: the packed kernels exist only in amd64 assembly.
func packedKernelsFor[N native]() *packedKernels[N] { return nil }

// bcastKernelsFor returns nil: the broadcast kernels exist only in amd64 assembly.
func bcastKernelsFor[N native]() *[bcastVectors][bcastFrames]bcastKernel { return nil }

// sumKernelFor, maxKernelFor and stdKernelFor return nil: the reduction kernels exist
// only in amd64 assembly.
func sumKernelFor[N native, S int64 | float64]() (k func(px *N, stride, frames, n int, acc *S), group int) {
	return nil, 0
}

func maxKernelFor[N native]() (k func(px *N, stride, frames, n int, mx *N), group int) { return nil, 0 }

func stdKernelFor[N native, S int64 | float64, Q uint64 | float64]() (k func(px *N, stride, frames, n int, k *N, s1 *S, s2 *Q), group int) {
	return nil, 0
}

// bcast64KernelsFor returns nil: the float64 broadcast kernels exist only in amd64
// assembly.
func bcast64KernelsFor(nMasks int) *bcast64Kernels { return nil }

// bcast64KernelsY returns nil: no float64 SIMD kernels.
func bcast64KernelsY() *bcast64Kernels { return nil }

// cvt64KernelFor returns nil: the conversion kernels exist only in amd64 assembly.
func cvt64KernelFor[N native]() func(dst *float64, src *N, n int) { return nil }
