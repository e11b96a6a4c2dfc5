//go:build cuda && cudaemu

package cuda

// emulated: the tests run on the CPU emulator of the kernels (kernels/emu), about a
// thousand times slower than a GPU; the heaviest cases are trimmed where they say so.
const emulated = true
