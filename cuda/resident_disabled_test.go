//go:build !cuda

package cuda

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stemdot/stemdot/dataset"
)

func TestResidentWithoutCUDA(t *testing.T) {
	ds, err := dataset.FromMemory(make([]byte, 8), nil, [2]int{2, 2}, dataset.Uint16)
	assert.NoError(t, err)
	r, err := LoadResident(context.Background(), 0, ds)
	assert.Nil(t, r)
	assert.ErrorIs(t, err, ErrNoCUDA)
	assert.ErrorIs(t, r.Apply(nil, 0, 1, make([]float32, 1), nil), ErrNoCUDA)
	assert.ErrorIs(t, r.Close(), ErrNoCUDA)
}
