//go:build !cuda

package cuda

import (
	"context"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// Resident is a dataset held in device memory; this build has none (see the cuda build
// tag).
type Resident struct{}

// LoadResident returns ErrNoCUDA: this build has no CUDA support.
func LoadResident(ctx context.Context, dev int, ds dataset.Dataset) (*Resident, error) {
	return nil, ErrNoCUDA
}

// Apply returns ErrNoCUDA: this build has no CUDA support.
func (r *Resident) Apply(stack *masks.Stack, start, end int, out32 []float32, out64 []float64) error {
	return ErrNoCUDA
}

// Close returns ErrNoCUDA: this build has no CUDA support.
func (r *Resident) Close() error { return ErrNoCUDA }

// Device returns -1: this build has no resident datasets.
func (r *Resident) Device() int { return -1 }

// Bytes returns 0: this build has no resident datasets.
func (r *Resident) Bytes() int64 { return 0 }
