//go:build !amd64

package engine

// rowConvert returns the Go conversion loop: the vectorised helpers exist only in amd64
// assembly.
func rowConvert[N native, F float]() func(dst []F, src []N) { return convert[N, F] }

// rowLerp returns the Go loop (lerpGo).
func rowLerp[F float]() func(dst, a, b []F, wa, wb F) { return lerpGo[F] }

// rowShift returns nil: the fused row shift exists only in amd64 assembly.
func rowShift[N native, F float]() func(g, hprev, hnext []F, src []N, wx0, wx1, wy0, wy1 F) {
	return nil
}

// rowShift1 returns nil: the row shift for scaled weights exists only in amd64 assembly.
func rowShift1[N native, F float]() func(g, hprev, hnext *F, p, q *N, beta, alpha F, ynext, n int) {
	return nil
}

// shiftDotKernels returns nil: the fused shifted-mask kernels exist only in amd64
// assembly.
func shiftDotKernels[N native]() *[3]func(*shiftDotArgs) { return nil }
