package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// spanStack returns, on frames of sig, the masks that the sparse kernel applies as dense
// spans (an annulus, a small disk, a run of 16 pixels, a run of 1037 pixels that ends in a
// partial block) and those it gathers (3% random pixels; two pixels far apart), with
// weights in [-1, 1), and which of them are spans.
func spanStack(rng *rand.Rand, sig [2]int) (*masks.Stack, []bool) {
	p := sig[0] * sig[1]
	s := &masks.Stack{N: 6, SigY: sig[0], SigX: sig[1], Data: make([]float32, 6*p)}
	w := func() float32 { return float32(rng.Float64()*2 - 1) }
	cy, cx := float64(sig[0])/2, float64(sig[1])/2
	for y := range sig[0] {
		for x := range sig[1] {
			d := math.Hypot(float64(y)-cy, float64(x)-cx)
			if d > 20 && d <= 26 {
				s.Data[0*p+y*sig[1]+x] = w()
			}
			if d <= 5 {
				s.Data[1*p+y*sig[1]+x] = w()
			}
		}
	}
	for i := range 16 {
		s.Data[2*p+300+i] = w()
	}
	for i := range 1037 {
		if i%3 == 0 {
			s.Data[3*p+1000+i] = w()
		}
	}
	for i := range p {
		if rng.Float64() < 0.03 {
			s.Data[4*p+i] = w()
		}
	}
	s.Data[5*p+7], s.Data[5*p+p-9] = w(), w()
	for i := range s.N {
		s.Names = append(s.Names, fmt.Sprintf("m%d", i))
	}
	return s, []bool{true, true, true, true, false, false}
}

// A sparse stack's masks whose nonzeros are dense enough between their first and last
// pixel are applied as dense spans through the block kernels (float32 results on a CPU
// with them), the others gathered: both agree with a float64 reference for every dtype.
// A NaN or ±Inf pixel inside a span but outside the mask leaves the mask's value finite,
// as a gather of its nonzeros gives it.
func TestSparseSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	sig := [2]int{64, 64}
	stack, spans := spanStack(rng, sig)
	csr := stack.ToCSR()
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float32, dataset.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			ds := randomDataset(rng, dt, []int{21}, sig)
			if dt == dataset.Float32 || dt == dataset.Float64 {
				// Frame 3: NaN at the annulus' centre (in its span, not in the mask) and +Inf
				// in the disk.
				ds.setFloat(3*64*64+32*64+32, math.NaN())
				ds.setFloat(3*64*64+31*64+31, math.Inf(1))
			}
			// The reference over each mask's nonzeros: a pixel a mask does not weigh does not
			// count, NaN or not (as in the dense kernels).
			want, mag := make([]float64, 21*stack.N), make([]float64, 21*stack.N)
			for f := range 21 {
				for m := range stack.N {
					for i, w := range stack.Mask(m) {
						if w != 0 {
							v := pixel(ds.data, dt, f*stack.Pixels()+i) * float64(w)
							want[f*stack.N+m] += v
							mag[f*stack.N+m] += math.Abs(v)
						}
					}
				}
			}
			for _, f64 := range []bool{false, true} {
				k := kernelFor[uint16](&Job{Masks: stack, NMasks: stack.N, Sparse: csr, Float64: f64}).(*sparse[uint16])
				for m, span := range spans {
					require.Equal(t, span && !f64 && simdKernels[uint16]() != nil, k.spans != nil && k.spans[m] != nil, "mask %d float64=%v", m, f64)
				}
				res, err := ApplyMasks(context.Background(), ds, stack, evenPlan(anyCPUs, 2, 21, 3), Options{NoPin: true, TileFrames: 4, Float64: f64})
				require.NoError(t, err)
				require.True(t, res.Stats.Sparse)
				got := res.F64
				if !f64 {
					got = make([]float64, len(res.F32))
					for i, v := range res.F32 {
						got[i] = float64(v)
					}
				}
				for i, v := range want {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						require.Equal(t, math.IsNaN(v), math.IsNaN(got[i]), "result %d: %v, want %v", i, got[i], v)
						require.Equal(t, math.IsInf(v, 1), math.IsInf(got[i], 1), "result %d: %v, want %v", i, got[i], v)
						continue
					}
					require.InDelta(t, v, got[i], 1e-5*mag[i]+1e-30, "result %d (frame %d, mask %d), float64=%v", i, i/stack.N, i%stack.N, f64)
				}
			}
		})
	}
}
