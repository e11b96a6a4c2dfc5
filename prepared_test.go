package stemdot_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// TestApplyPrepared: a prepared stack (masks.Stack.Prepared) gives results bit-identical
// to the stack it was made from, for random frames and several kinds of masks (dense
// with float64 weights, sparse enough to run in CSR form, held in CSR form), unshifted and
// shifted (whole-pixel constant, sub-pixel per frame), float32 and float64, on 1 and 2
// CPU workers, applied again and again.
func TestApplyPrepared(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sig := [2]int{24, 20}
	nav := []int{5, 6}
	frames := make([]byte, 30*24*20*2)
	for i := range frames {
		frames[i] = byte(rng.IntN(256))
	}
	ds, err := dataset.FromMemory(frames, nav, sig, dataset.Uint16)
	require.NoError(t, err)
	weights := make([]float64, 3*24*20)
	for i := range weights {
		weights[i] = rng.NormFloat64()
	}
	denseStack, err := masks.New64(3, 24, 20, weights, nil)
	require.NoError(t, err)
	few := make([]float64, 2*24*20)
	for range 20 {
		few[rng.IntN(len(few))] = rng.Float64()
	}
	fewStack, err := masks.New64(2, 24, 20, few, nil)
	require.NoError(t, err)
	csrStack, err := stemdot.Masks(sig, "ring:10,12,3,5", "com:10,12,4", "point:3,4")
	require.NoError(t, err)
	shifts := make([]float64, 60)
	for i := range shifts {
		shifts[i] = 3 * (rng.Float64() - 0.5)
	}
	for _, s := range []struct {
		name  string
		stack *masks.Stack
	}{{"dense float64 weights", denseStack}, {"dense sparse enough", fewStack}, {"csr", csrStack}} {
		prepared, err := s.stack.Prepared()
		require.NoError(t, err)
		for _, cpus := range []string{"1", "2"} {
			pl, err := stemdot.Plan{CPUs: cpus}.Planner()
			require.NoError(t, err)
			for _, sh := range [][]float64{nil, {2, -1}, shifts} {
				for _, f64 := range []bool{false, true} {
					opt := stemdot.ApplyOptions{Float64: f64, Shifts: sh}
					want, err := pl.Apply(context.Background(), ds, s.stack, opt)
					require.NoError(t, err)
					for range 2 {
						got, err := pl.Apply(context.Background(), ds, prepared, opt)
						require.NoError(t, err)
						assert.Equal(t, want.F32, got.F32, "%s, cpus %s, shifts %v", s.name, cpus, sh)
						assert.Equal(t, want.F64, got.F64, "%s, cpus %s, shifts %v", s.name, cpus, sh)
						assert.Equal(t, want.Stats.Sparse, got.Stats.Sparse)
					}
				}
			}
		}
	}
}

// benchDaskStack is the stack of make bench-dask (bench/dask/bench.py masks_of): bright
// field, annular dark field, centre of mass (3) and 123 one-pixel rings of a radial
// profile, 128 masks of 256×256, held dense as stemdot_apply receives them.
func benchDaskStack(tb testing.TB) *masks.Stack {
	sig := [2]int{256, 256}
	parts := []*masks.Stack{}
	add := func(s *masks.Stack, err error) {
		require.NoError(tb, err)
		parts = append(parts, s)
	}
	add(masks.Disk(sig, 128, 128, 20))
	add(masks.Ring(sig, 128, 128, 30, 100))
	add(masks.COM(sig, 128, 128, 0))
	for r := range 123 {
		add(masks.Ring(sig, 128, 128, float64(r)+0.5, float64(r)+1.5))
	}
	s, err := masks.Concat(parts...)
	require.NoError(tb, err)
	d, err := masks.New(s.N, s.SigY, s.SigX, s.Dense(), s.Names)
	require.NoError(tb, err)
	return d
}

// BenchmarkApplyFixedCost times an apply of 4 frames of 256×256 uint16 on one CPU worker
// with the 128 masks of make bench-dask, the cost of a short range of a Dask task that
// is not the frames' product: "dense" wraps the dense weights per apply as stemdot_apply
// does (masks.New), "prepared" applies a stack prepared once (masks.Stack.Prepared).
func BenchmarkApplyFixedCost(b *testing.B) {
	stack := benchDaskStack(b)
	frames := make([]byte, 4*256*256*2)
	for i := range frames {
		frames[i] = byte(i * 7)
	}
	ds, err := dataset.FromMemory(frames, []int{4}, [2]int{256, 256}, dataset.Uint16)
	require.NoError(b, err)
	pl, err := stemdot.Plan{CPUs: "1"}.Planner()
	require.NoError(b, err)
	out := make([]float32, 4*stack.N)
	b.Run("dense", func(b *testing.B) {
		for b.Loop() {
			s, err := masks.New(stack.N, stack.SigY, stack.SigX, stack.Data, stack.Names)
			require.NoError(b, err)
			_, err = pl.Apply(context.Background(), ds, s, stemdot.ApplyOptions{Out32: out})
			require.NoError(b, err)
		}
	})
	prepared, err := stack.Prepared()
	require.NoError(b, err)
	b.Run("prepared", func(b *testing.B) {
		for b.Loop() {
			_, err = pl.Apply(context.Background(), ds, prepared, stemdot.ApplyOptions{Out32: out})
			require.NoError(b, err)
		}
	})
}
