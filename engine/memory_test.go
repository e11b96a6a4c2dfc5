package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// Item #17.10: a float64 run's GPU workers apply a stack with Lo parts as 2N float32
// masks (Job.loPairs): the estimate counts that copy beside the CPU workers' float64 one.
func TestEstimateCountsLoPairs(t *testing.T) {
	ds, err := dataset.FromMemory(make([]byte, 4*16*16*2), []int{2, 2}, [2]int{16, 16}, dataset.Uint16)
	require.NoError(t, err)
	data := make([]float64, 2*256)
	for i := range data {
		data[i] = 1.0 / 3
	}
	dense, err := masks.New64(2, 16, 16, data, nil)
	require.NoError(t, err)
	require.False(t, dense.Exact())
	cpu := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}}}
	hybrid := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}, {Kind: planner.GPU}}}
	f64 := Options{Float64: true}
	require.Equal(t, int64(8*2*256), EstimateMemory(ds, dense, cpu, f64).Masks, "the float64 copy")
	require.Equal(t, int64(8*2*256+8*2*256), EstimateMemory(ds, dense, hybrid, f64).Masks, "and the Lo pairs")
	require.Equal(t, int64(0), EstimateMemory(ds, dense, hybrid, Options{}).Masks, "a float32 run applies Data only")

	sparse := make([]float64, 2*256)
	sparse[3], sparse[256+7] = 1.0/3, 2.0/3
	s, err := masks.New64(2, 16, 16, sparse, nil)
	require.NoError(t, err)
	// The CSR copy of the dense stack (2 nonzeros, 3 row pointers), then the pairs: 4
	// nonzeros, 5 row pointers.
	require.Equal(t, int64(8*2+4*3), EstimateMemory(ds, s, cpu, f64).Masks)
	require.Equal(t, int64(8*2+4*3+8*4+4*5), EstimateMemory(ds, s, hybrid, f64).Masks)
}
