//go:build !amd64

package h5filter

// haveAVX2 is false: the kernels exist only in amd64 assembly (bitshuffle_amd64.s).
var haveAVX2 = false

func untransPlaneAVX2(out, plane *byte, rows, groups int) { panic("h5filter: no AVX2 kernels") }

func interleave2AVX2(out, in *byte, n, groups int) { panic("h5filter: no AVX2 kernels") }

func interleave4AVX2(out, in *byte, n, groups int) { panic("h5filter: no AVX2 kernels") }
