//go:build !amd64

package engine

// gatherRowKernels returns no kernels (nil functions): the gather's row kernels exist only in amd64
// assembly (gather_amd64.s), so every gather takes the pure-Go path.
func gatherRowKernels[N native]() [4]rowGather[N] { return [4]rowGather[N]{} }
