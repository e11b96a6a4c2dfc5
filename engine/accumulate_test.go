package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// TestAccumulatorMatchesReduce: frames added to three accumulators in runs of 1 to 5, in
// a shuffled order, merge to Reduce's sum, mean and max, bit for bit for integer frames
// (against the float64 reference too), within rounding for float frames.
func TestAccumulatorMatchesReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	sig := [2]int{9, 7}
	opt := ReduceOptions{Sum: true, Mean: true, Max: true}
	for _, dt := range allDTypes {
		ds := randomDataset(rng, dt, []int{41}, sig)
		want, err := Reduce(context.Background(), ds, evenPlan(anyCPUs, 2, 41, 3), ReduceOptions{Sum: true, Mean: true, Max: true, NoPin: true})
		require.NoError(t, err)
		sum, mean, mx, _ := reduceReference(t, ds)

		accs := make([]*Accumulator, 3)
		for i := range accs {
			accs[i], err = NewAccumulator(sig, dt, opt)
			require.NoError(t, err)
		}
		fb := ds.FrameBytes()
		var runs [][2]int
		for s := 0; s < 41; {
			e := min(41, s+1+rng.IntN(5))
			runs = append(runs, [2]int{s, e})
			s = e
		}
		rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
		for k, r := range runs {
			buf := make([]byte, (r[1]-r[0])*fb)
			require.NoError(t, ds.ReadFrames(r[0], r[1], buf))
			accs[k%3].Add(buf)
		}
		got := Merge(accs...)
		require.Equal(t, 41, got.Frames, dt)
		require.Equal(t, sig, got.SigShape)
		require.Nil(t, got.Std)
		if dt == dataset.Float32 || dt == dataset.Float64 {
			scale := make([]float64, len(sum))
			for i := range scale {
				scale[i] = math.Abs(mean[i]) + 1
			}
			requireNear(t, dt.String()+" sum", got.Sum, sum, scale, 1e-13*41)
			requireNear(t, dt.String()+" mean", got.Mean, mean, scale, 1e-13)
		} else {
			require.Equal(t, want.Sum, got.Sum, dt)
			require.Equal(t, want.Mean, got.Mean, dt)
			require.Equal(t, sum, got.Sum, dt)
		}
		require.Equal(t, want.Max, got.Max, dt)
		require.Equal(t, mx, got.Max, dt)
	}
}

// TestAccumulatorEmptyAndMisuse: no frame merges to Frames 0 and no frames; nothing
// asked and an unknown dtype are refused; a partial frame panics.
func TestAccumulatorEmptyAndMisuse(t *testing.T) {
	a, err := NewAccumulator([2]int{4, 4}, dataset.Uint16, ReduceOptions{Sum: true, Max: true})
	require.NoError(t, err)
	a.Add(nil)
	r := Merge(a)
	require.Equal(t, 0, r.Frames)
	require.Nil(t, r.Sum)
	require.Nil(t, r.Max)
	require.Panics(t, func() { a.Add(make([]byte, 31)) })
	_, err = NewAccumulator([2]int{4, 4}, dataset.Uint16, ReduceOptions{})
	require.ErrorContains(t, err, "nothing to compute")
	_, err = NewAccumulator([2]int{4, 4}, dataset.DType(99), ReduceOptions{Sum: true})
	require.ErrorContains(t, err, "cannot be accumulated")
}
