package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
)

func TestReduceMemoryDataset(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2))
	const sy, sx = 9, 7
	nav := []int{5, 3}
	n := nav[0] * nav[1]
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Int16, dataset.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			buf, vals := randomFrames(t, rng, dt, n, sy, sx)
			ds, err := memoryDataset(buf, int(dt), nav, sy, sx)
			require.NoError(t, err)
			defer ds.Close()
			px := sy * sx
			sum, mean, mx, std := make([]float64, px), make([]float64, px), make([]float64, px), make([]float64, px)
			var reports [][2]uint64
			require.NoError(t, reduce(reduceRequest{ds: ds, sum: sum, mean: mean, max: mx, std: std,
				progress: func(done, total uint64) { reports = append(reports, [2]uint64{done, total}) }}))
			for i := range px {
				var s, m, ss float64
				m = math.Inf(-1)
				for f := range n {
					s += vals[f*px+i]
					m = math.Max(m, vals[f*px+i])
				}
				for f := range n {
					ss += (vals[f*px+i] - s/float64(n)) * (vals[f*px+i] - s/float64(n))
				}
				scale := math.Abs(s/float64(n)) + 1
				assert.InDelta(t, s, sum[i], 1e-12*scale*float64(n), "sum %d", i)
				assert.InDelta(t, s/float64(n), mean[i], 1e-12*scale, "mean %d", i)
				assert.Equal(t, m, mx[i], "max %d", i)
				assert.InDelta(t, math.Sqrt(ss/float64(n)), std[i], 1e-12*scale, "std %d", i)
			}
			require.NotEmpty(t, reports)
			assert.EqualValues(t, [2]uint64{uint64(n), uint64(n)}, reports[len(reports)-1])

			only := make([]float64, px)
			require.NoError(t, reduce(reduceRequest{ds: ds, max: only}))
			assert.Equal(t, mx, only)
		})
	}
}

func TestReduceErrors(t *testing.T) {
	ds, err := memoryDataset(make([]byte, 4*3*2), int(dataset.Uint16), []int{4}, 1, 3)
	require.NoError(t, err)
	defer ds.Close()
	requireCode(t, reduce(reduceRequest{ds: ds}), errInvalidArgument, "sum, mean, max and std are all NULL")
	requireCode(t, reduce(reduceRequest{ds: ds, sum: make([]float64, 4)}), errShape, "out_len 4, but the frames of sig shape (1, 3) need 3")
	pl, err := stemdot.Plan{GPUs: "auto"}.Planner()
	require.NoError(t, err)
	require.NoError(t, reduce(reduceRequest{ds: ds, plan: pl, sum: make([]float64, 3)}))

	r := &run{}
	cancelled := reduceRequest{ds: ds, run: r, sum: make([]float64, 3), progress: func(uint64, uint64) { r.stop() }}
	requireCode(t, reduce(cancelled), errCancelled, "reduce cancelled")
}

func TestPick(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 3))
	buf, _ := randomFrames(t, rng, dataset.Int16, 6, 2, 3)
	ds, err := memoryDataset(buf, int(dataset.Int16), []int{2, 3}, 2, 3)
	require.NoError(t, err)
	defer ds.Close()
	out := make([]byte, 2*12)
	require.NoError(t, pick(ds, [][]int{{1, 2}, {0, 1}}, out))
	assert.Equal(t, buf[5*12:6*12], out[:12])
	assert.Equal(t, buf[1*12:2*12], out[12:])
	requireCode(t, pick(ds, [][]int{{2, 0}, {0, 1}}, out), errShape, "option at: scan position (2, 0) is outside the nav shape (2, 3)")
	requireCode(t, pick(ds, [][]int{{1}}, out[:12]), errShape, "scan position (1) has 1 coordinate,")
	requireCode(t, pick(ds, [][]int{{1, 1}}, out), errShape, "out_bytes 24, but 1 frames of 12 bytes need 12")
}
