//go:build !amd64

package engine

// gatherAsmKernels returns no kernels (nil functions): the gather's assembly kernels
// exist only for amd64 (gather_amd64.s), so every gather takes the pure-Go path.
func gatherAsmKernels[N native]() (oneGather[N], [4]rowGather[N]) { return nil, [4]rowGather[N]{} }
