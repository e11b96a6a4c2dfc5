//go:build !(cgo && linux)

package memlimit

// capMallocArenas does nothing without cgo: no glibc malloc runs in a pure Go program.
func capMallocArenas() {}

// threadStackBytes is what a new thread maps without cgo: the Go runtime allocates its
// stack (a few KiB) on its own heap.
func threadStackBytes() int64 { return 0 }
