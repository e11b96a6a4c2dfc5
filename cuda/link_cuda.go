//go:build cuda && !cudaemu

package cuda

// #cgo LDFLAGS: ${SRCDIR}/../build/kernels/libstemdot_kernels.a -lcudart_static -lrt -ldl -lpthread -lstdc++ -lm
import "C"
