package engine

//go:generate go run gen_bcast64.go

var (
	bcast64Z = &bcast64Kernels{table: &bcast64TableZ, lanes: 8, maxV: 4, accMax: 24}
	bcast64Y = &bcast64Kernels{table: &bcast64TableY, lanes: 4, maxV: 3, accMax: 12}
)

// bcast64KernelsFor returns the float64 broadcast kernels of the CPU for a stack of nMasks
// masks: AVX-512 where it has AVX-512F (haveAVX512) and the stack more than
// bcast64NarrowMasks masks, else AVX2+FMA (haveAVX2FMA); nil without AVX2 and FMA
// (GODEBUG=cpu.avx2=off) and while useSIMD is off.
func bcast64KernelsFor(nMasks int) *bcast64Kernels {
	switch {
	case !useSIMD || !haveAVX2FMA:
		return nil
	case haveAVX512 && nMasks > bcast64NarrowMasks:
		return bcast64Z
	}
	return bcast64Y
}

// bcast64NarrowMasks is the most masks that take the 4-lane kernels on a CPU with AVX-512:
// 8-lane vectors would be half zeros. 4 masks, 256×256 uint16 frames in place, one Zen 4
// core: 3.4-3.7 GB/s with AVX-512, 4.9-5.3 with AVX2 (2-3 runs).
const bcast64NarrowMasks = 4

// bcast64KernelsY returns the AVX2 kernels whatever the CPU (tests run them also where
// the CPU has AVX-512).
func bcast64KernelsY() *bcast64Kernels { return bcast64Y }

// The conversion kernels of simd_cvt64_amd64.s: cvt<T>F64 sets dst[i] = float64(src[i])
// for i < n, n a positive multiple of 8 (AVX).

//go:noescape
func cvtU8F64(dst *float64, src *uint8, n int)

//go:noescape
func cvtI8F64(dst *float64, src *int8, n int)

//go:noescape
func cvtU16F64(dst *float64, src *uint16, n int)

//go:noescape
func cvtI16F64(dst *float64, src *int16, n int)

//go:noescape
func cvtI32F64(dst *float64, src *int32, n int)

//go:noescape
func cvtF32F64(dst *float64, src *float32, n int)

// cvt64KernelFor returns the conversion kernel for pixel type N, nil for uint32 and
// float64 (converted in Go, or not at all) and on CPUs without AVX2 and FMA.
func cvt64KernelFor[N native]() func(dst *float64, src *N, n int) {
	if !haveAVX2FMA {
		return nil
	}
	var k any
	switch any(*new(N)).(type) {
	case uint8:
		k = cvtU8F64
	case int8:
		k = cvtI8F64
	case uint16:
		k = cvtU16F64
	case int16:
		k = cvtI16F64
	case int32:
		k = cvtI32F64
	case float32:
		k = cvtF32F64
	default:
		return nil
	}
	return k.(func(dst *float64, src *N, n int))
}
