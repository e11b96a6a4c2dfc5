package engine

// The AVX2 kernels of the sum (simd_reduce_amd64.s): for n pixels (a positive multiple
// of sumGroup), acc[i] += Σ_{f<frames} px[f·stride/size + i].

//go:noescape
func sumU16(px *uint16, stride, frames, n int, acc *int64)

//go:noescape
func sumF32(px *float32, stride, frames, n int, acc *float64)

// sumKernelFor returns the AVX2 sum kernel for frames of N summed into S, and the pixel
// multiple it works on; nil on CPUs without AVX2, while useSIMD is off, and for the
// pixel types without one (those sum in Go: addSum).
func sumKernelFor[N native, S int64 | float64]() (k func(px *N, stride, frames, n int, acc *S), group int) {
	if !useSIMD || !haveAVX2FMA {
		return nil, 0
	}
	switch f := any(sumU16).(type) {
	case func(*N, int, int, int, *S):
		return f, 32
	}
	switch f := any(sumF32).(type) {
	case func(*N, int, int, int, *S):
		return f, 16
	}
	return nil, 0
}
