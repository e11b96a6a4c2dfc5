//go:build openblas

package engine

// Built with -tags openblas, the dense mask-dot product runs on OpenBLAS through cgo
// instead of gonum's pure-Go kernels: blas32 and blas64 dispatch every call (Gemm, Gemv,
// Dot) to gonum.org/v1/netlib's CBLAS binding. Link a thread-safe OpenBLAS (Debian's
// libopenblas-pthread-dev, CGO_LDFLAGS=-lopenblas; see mk/bench.mk) and run with
// OPENBLAS_NUM_THREADS=1, so that each pinned worker computes on its own thread. Debian's
// serial OpenBLAS is built without locking and gave wrong sgemm results when two workers
// called it at once.

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// The build exists to compare OpenBLAS's Gemm with stemdot's own AVX2 block kernels,
// so the dense float32 product goes through blas32 here too (useSIMD off).
func init() {
	blas32.Use(netlib.Implementation{})
	blas64.Use(netlib.Implementation{})
	useSIMD = false
}
