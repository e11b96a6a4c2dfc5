package cuda

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by Resident.Apply after Close.
var ErrClosed = errors.New("cuda: the resident dataset was closed")

// ResidentReserve is the device memory a resident dataset leaves free beside its frames
// for its working space: the results and split-K partial sums of one apply chunk and the
// mask stacks (STEMDOT_RESIDENT_RESERVE of kernels/stemdot_kernels.h).
const ResidentReserve = 256 << 20

// MemoryError is a resident dataset refused because its frames do not fit in the free
// memory of the device (cudaMemGetInfo) beside ResidentReserve.
type MemoryError struct {
	// Device is the device index.
	Device int
	// Need is the frames' bytes, Reserve the working space; Free and Total are the
	// device's free and total memory in bytes when the dataset was refused.
	Need, Reserve, Free, Total int64
}

// Error says what was asked and what is free, in GiB.
func (e *MemoryError) Error() string {
	return fmt.Sprintf("cuda device %d: the dataset's frames need %.2f GiB of device memory plus %d MiB of working space, but only %.2f GiB of its %.2f GiB are free",
		e.Device, gib(e.Need), e.Reserve>>20, gib(e.Free), gib(e.Total))
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }
