package engine

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// ShiftedFrames reads g_f, the frame as the shifted masks see it: pixel (u, v) of g_f
// is the shifted product of the point mask at (u, v) (shiftedReference, the masks moved
// the direct way); its sum frame (Reduce) is the sum of those.
func TestShiftedFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sig := [2]int{7, 6}
	p := sig[0] * sig[1]
	points := &masks.Stack{N: p, SigY: sig[0], SigX: sig[1], Data: make([]float32, p*p)}
	for i := range p {
		points.Data[i*p+i] = 1
	}
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Int16, dataset.Uint32, dataset.Float32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{11}, sig)
		shifts := randomShifts(rng, 11, false)
		want, _ := shiftedReference(ds, points, shifts)
		view, err := ShiftedFrames(ds, shifts)
		require.NoError(t, err)
		require.Equal(t, dataset.Float64, view.DType())
		got := make([]byte, 11*view.FrameBytes())
		require.NoError(t, view.ReadFrames(0, 11, got))
		sum := make([]float64, p)
		for i, w := range want {
			g := math.Float64frombits(binary.NativeEndian.Uint64(got[8*i:]))
			require.InDelta(t, w, g, 1e-9*(1+math.Abs(w)), "%v: frame %d pixel %d", dt, i/p, i%p)
			sum[i%p] += w
		}
		red, err := Reduce(context.Background(), view, splitPlan(anyCPUs, 2, 4, 5, 2), ReduceOptions{Sum: true, NoPin: true})
		require.NoError(t, err)
		for i, w := range sum {
			require.InDelta(t, w, red.Sum[i], 1e-9*(1+math.Abs(w)), "%v: sum pixel %d", dt, i)
		}
	}
	_, err := ShiftedFrames(randomDataset(rng, dataset.Uint16, []int{3}, sig), []float64{1, 2})
	require.ErrorContains(t, err, "2 shift values for 3 frames")
}
