package cpupeak

import "golang.org/x/sys/cpu"

func supported() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

func avx512() bool { return cpu.X86.HasAVX512F }

func isa() string {
	if avx512() {
		return "AVX-512"
	}
	return "AVX2"
}

func vectorLanes() int {
	if avx512() {
		return 16
	}
	return 8
}

// chain runs n dependent YMM FMAs.
//
//go:noescape
func chain(n int)

// throughputY and throughputZ run n rounds of 24 independent YMM or ZMM FMAs.
//
//go:noescape
func throughputY(n int)

//go:noescape
func throughputZ(n int)

func throughput(n int) {
	if avx512() {
		throughputZ(n)
	} else {
		throughputY(n)
	}
}
