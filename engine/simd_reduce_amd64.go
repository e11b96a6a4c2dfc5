package engine

// The AVX2 kernels of the reductions (simd_reduce_amd64.s), each over n pixels (a
// positive multiple of the group its lookup returns) of frames frames, frame f's pixels
// stride bytes after frame f−1's, at most kernelFrames of them:
//
//	sum<T>: acc[i] += Σ_f px_f[i]
//	max<T>: mx[i] = max(mx[i], max_f px_f[i]) (float32: NaN once a NaN is met)
//	std<T>: s1[i] += Σ_f (px_f[i] − k[i]), s2[i] += Σ_f (px_f[i] − k[i])²

//go:noescape
func sumU16(px *uint16, stride, frames, n int, acc *int64)

//go:noescape
func sumF32(px *float32, stride, frames, n int, acc *float64)

//go:noescape
func maxU16(px *uint16, stride, frames, n int, mx *uint16)

//go:noescape
func maxF32(px *float32, stride, frames, n int, mx *float32)

//go:noescape
func stdU16(px *uint16, stride, frames, n int, k *uint16, s1 *int64, s2 *uint64)

//go:noescape
func stdF32(px *float32, stride, frames, n int, k *float32, s1, s2 *float64)

// simdReduce tells whether the reduction kernels may run: AVX2 (and FMA, which stdF32
// uses), and useSIMD on.
func simdReduce() bool { return useSIMD && haveAVX2FMA }

// sumKernelFor returns the sum kernel for frames of N summed into S and its pixel
// group; nil for the pixel types without one (they sum in Go: addSum) and where
// simdReduce is false. maxKernelFor and stdKernelFor do the same for the maximum and
// the shifted sums of the std.
func sumKernelFor[N native, S int64 | float64]() (k func(px *N, stride, frames, n int, acc *S), group int) {
	if !simdReduce() {
		return nil, 0
	}
	if f, ok := any(sumU16).(func(*N, int, int, int, *S)); ok {
		return f, 32
	}
	if f, ok := any(sumF32).(func(*N, int, int, int, *S)); ok {
		return f, 16
	}
	return nil, 0
}

func maxKernelFor[N native]() (k func(px *N, stride, frames, n int, mx *N), group int) {
	if !simdReduce() {
		return nil, 0
	}
	if f, ok := any(maxU16).(func(*N, int, int, int, *N)); ok {
		return f, 32
	}
	if f, ok := any(maxF32).(func(*N, int, int, int, *N)); ok {
		return f, 16
	}
	return nil, 0
}

func stdKernelFor[N native, S int64 | float64, Q uint64 | float64]() (k func(px *N, stride, frames, n int, k *N, s1 *S, s2 *Q), group int) {
	if !simdReduce() {
		return nil, 0
	}
	if f, ok := any(stdU16).(func(*N, int, int, int, *N, *S, *Q)); ok {
		return f, 8
	}
	if f, ok := any(stdF32).(func(*N, int, int, int, *N, *S, *Q)); ok {
		return f, 8
	}
	return nil, 0
}
