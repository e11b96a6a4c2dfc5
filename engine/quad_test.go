package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// TestQuadFramesAttack: stacks of one and two masks (the quad kernels, four frames per
// call, a tile's last 1-3 repeated), and of three, four and seven (float32 frames on
// AVX-512: the quad kernels; else the pair kernels, a tile's odd last frame paired with
// itself), on every dtype of the block kernels, sig shapes of fewer than 16 pixels, not
// a multiple of 16, a multiple of 1024 ± 1 and more than one block; 1, 2, 3 and 5
// frames; tiles of 1 to 9 frames (three or more masks: 2 to 9); one worker and several
// with partitions cut at odd places; frames read and viewed in place (starting off their
// alignment); float32 frames with NaN and ±Inf (also where the weight is 0). Against a
// float64 reference over the nonzero weights, and bit for bit the same whatever the
// tiles and partitions.
func TestQuadFramesAttack(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sigs := [][2]int{{1, 1}, {3, 5}, {4, 4}, {32, 32}, {31, 33}, {41, 25}, {17, 241}, {1, 4097}}
	dts := []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Int32, dataset.Float32}
	for _, dt := range dts {
		if testing.Short() && dt != dataset.Float32 && dt != dataset.Uint16 {
			continue
		}
		for _, sig := range sigs {
			for _, c := range [][2]int{{1, 1}, {1, 2}, {1, 3}, {1, 5}, {2, 1}, {2, 3}, {2, 5}, {3, 5}, {4, 3}, {4, 5}, {7, 3}} {
				nMasks, n := c[0], c[1]
				t.Run(fmt.Sprintf("%v/%dx%d/%dmasks/%dframes", dt, sig[0], sig[1], nMasks, n), func(t *testing.T) {
					ds := randomDataset(rng, dt, []int{n}, sig)
					stack := randomStack(rng, nMasks, sig)
					p := sig[0] * sig[1]
					for i := range stack.Data {
						if rng.IntN(5) == 0 {
							stack.Data[i] = 0
						}
					}
					if dt == dataset.Float32 && p > 1 {
						for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
							ds.setFloat(rng.IntN(n*p), v)
						}
						ds.setFloat((n-1)*p+p-1, math.Inf(1)) // the last pixel: a tail or 16-pixel step
					}
					want := make([]float64, n*nMasks) // frame f, mask m at f·nMasks+m
					mag := make([]float64, n*nMasks)
					for f := range n {
						for m := range nMasks {
							for i := range p {
								w := float64(stack.Data[m*p+i])
								if w == 0 {
									continue
								}
								v := pixel(ds.data, dt, f*p+i) * w
								want[f*nMasks+m] += v
								mag[f*nMasks+m] += math.Abs(v)
							}
						}
					}
					// Frames viewed in place, starting 1 byte off the slice's alignment.
					buf := make([]byte, len(ds.data)+1)
					copy(buf[1:], ds.data)
					view := viewDataset{&memDataset{nav: ds.nav, sig: ds.sig, dt: ds.dt, data: buf[1:]}}
					var first []float32
					for _, src := range []dataset.Dataset{ds, view} {
						// Three or more masks: tiles of 1 frame may take the one-frame kernels
						// by design (simdDense.odd), whose float32 sums may differ in the last
						// bit.
						for tile := 1 + min(nMasks/3, 1); tile <= 9; tile++ {
							plans := [][]int{{n}}
							if n >= 3 {
								plans = append(plans, []int{1, n - 1}, []int{n - 2, 1, 1})
							}
							if n >= 5 {
								plans = append(plans, []int{2, 3})
							}
							for _, cut := range plans {
								for _, workers := range []int{1, 3} {
									res, err := ApplyMasks(context.Background(), src, stack, splitPlan(anyCPUs, workers, cut...), Options{TileFrames: tile, NoPin: true})
									require.NoError(t, err)
									for j := range want {
										f, g := j/nMasks, float64(res.F32[j])
										switch {
										case math.IsNaN(want[j]):
											require.True(t, math.IsNaN(g), "frame %d, mask %d: got %v, want NaN (tile %d, cut %v)", f, j%nMasks, g, tile, cut)
										case math.IsInf(want[j], 0):
											require.Equal(t, want[j], g, "frame %d, mask %d (tile %d, cut %v)", f, j%nMasks, tile, cut)
										default:
											require.InDelta(t, want[j], g, 2e-6*mag[j]+1e-30, "frame %d, mask %d (tile %d, cut %v, %d workers)", f, j%nMasks, tile, cut, workers)
										}
									}
									if first == nil {
										first = res.F32
										continue
									}
									for j := range want {
										require.Equal(t, math.Float32bits(first[j]), math.Float32bits(res.F32[j]), "frame %d, mask %d: %v against %v (tile %d, cut %v, %d workers)", j/nMasks, j%nMasks, res.F32[j], first[j], tile, cut, workers)
									}
								}
							}
						}
					}
				})
			}
		}
	}
}
