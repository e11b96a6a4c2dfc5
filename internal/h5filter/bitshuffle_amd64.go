package h5filter

import "golang.org/x/sys/cpu"

// haveAVX2 reports whether the kernels of bitshuffle_amd64.s run on this CPU.
// GODEBUG=cpu.avx2=off (read by golang.org/x/sys/cpu at start-up) clears it for a whole
// process, e.g. to run the tests on the pure-Go path.
var haveAVX2 = cpu.X86.HasAVX2

// untransPlaneAVX2 writes one byte of elements 0 to 256·groups−1 of a bitshuffle block
// from its 8 bit rows of rows bytes at plane (see bitshuffle_amd64.s).
//
//go:noescape
func untransPlaneAVX2(out, plane *byte, rows, groups int)

// interleave2AVX2 and interleave4AVX2 set out[s·i+j] = in[j·n+i] for i < 32·groups
// and j < s = 2 or 4.
//
//go:noescape
func interleave2AVX2(out, in *byte, n, groups int)

//go:noescape
func interleave4AVX2(out, in *byte, n, groups int)
