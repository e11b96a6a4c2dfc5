//go:build cuda && !cudaemu

package cuda

// emulated: false, the tests run on a GPU (see emulated_test.go).
const emulated = false
