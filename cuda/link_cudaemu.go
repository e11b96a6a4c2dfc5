//go:build cuda && cudaemu

package cuda

// #cgo LDFLAGS: ${SRCDIR}/../build/kernels-emu/libstemdot_kernels.a -lpthread -lstdc++ -lm
import "C"
