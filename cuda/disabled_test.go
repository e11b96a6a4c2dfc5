//go:build !cuda

package cuda

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stemdot/stemdot/dataset"
)

func TestWithoutCUDAEveryCallFails(t *testing.T) {
	assert.False(t, Built())
	n, err := DeviceCount()
	assert.Zero(t, n)
	assert.ErrorIs(t, err, ErrNoCUDA)
	_, err = Properties(0)
	assert.ErrorIs(t, err, ErrNoCUDA)
	_, err = CopyTime(0, HostToDevicePinned, 1<<20, 1)
	assert.ErrorIs(t, err, ErrNoCUDA)
	r, err := NewRunner(RunnerConfig{DType: dataset.Uint16, Pixels: 4, NMasks: 1, Masks: make([]float32, 4)})
	assert.Nil(t, r)
	assert.ErrorIs(t, err, ErrNoCUDA)
	assert.ErrorIs(t, r.Run(context.Background(), 0, 1, func([]byte, int, int) error { return nil }, make([]float32, 1), nil), ErrNoCUDA)
	_, err = r.KernelTime(1, 1)
	assert.ErrorIs(t, err, ErrNoCUDA)
	assert.ErrorIs(t, r.Close(), ErrNoCUDA)
	assert.EqualError(t, ErrNoCUDA, "stemdot was built without CUDA support")
}
