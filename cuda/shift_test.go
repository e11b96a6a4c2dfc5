//go:build cuda

package cuda

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

// shiftedRef is the shifted mask-dot product in float64 the direct way: mask m of frame
// f moved by (dy, dx) as its bilinear interpolation at (y − dy, x − dx), zero outside
// the mask, times the frame; and Σ|w·x| for the tolerance.
func shiftedRef(fs frameSet, s *masks.Stack, shifts []float64, f, m int) (ref, abs float64) {
	h, w := s.SigY, s.SigX
	at := func(y, x int) float64 {
		if y < 0 || y >= h || x < 0 || x >= w {
			return 0
		}
		return float64(s.Data[m*h*w+y*w+x])
	}
	dy, dx := shifts[2*f], shifts[2*f+1]
	for y := range h {
		for x := range w {
			ty, tx := float64(y)-dy, float64(x)-dx
			y0, x0 := math.Floor(ty), math.Floor(tx)
			b, c := ty-y0, tx-x0
			yi, xi := int(y0), int(x0)
			wt := (1-b)*(1-c)*at(yi, xi) + (1-b)*c*at(yi, xi+1) + b*(1-c)*at(yi+1, xi) + b*c*at(yi+1, xi+1)
			if wt != 0 {
				v := wt * fs.vals[f*h*w+y*w+x]
				ref += v
				abs += math.Abs(v)
			}
		}
	}
	return ref, abs
}

// testShifts returns per-frame shifts of n frames: sub-pixel ones, integer ones (also far
// outside the frame), and ones with a zero fraction in one axis only.
func testShifts(rng *rand.Rand, n int) []float64 {
	s := make([]float64, 2*n)
	for f := range n {
		dy, dx := rng.Float64()*9-4.5, rng.Float64()*9-4.5
		switch f % 5 {
		case 1:
			dy, dx = math.Round(dy), math.Round(dx)
		case 2:
			dy = math.Round(dy)
		case 3:
			dx = math.Round(dx)
		case 4:
			if f%10 == 4 {
				dy, dx = 1e9, -40 // the frame leaves the detector: a zero row
			}
		}
		s[2*f], s[2*f+1] = dy, dx
	}
	return s
}

// TestRunShifted: runners with per-frame shifts (RunnerConfig.Shifts) build each frame's
// g_f on the device from the native frames, staged (Run) and copy-free (RunMapped, MIB
// records: headers, big-endian, also for 8-byte pixels), for every dtype (int8, int16,
// int32 and float64 too, which only shifted runners take), dense and sparse stacks, tiles
// that start inside the scan; results against the float64 reference of the shifted masks.
func TestRunShifted(t *testing.T) {
	requireDevice(t)
	defer func(w int) { windowBytes = w }(windowBytes)
	windowBytes = 64 << 10
	const n, sigY, sigX, start, end = 40, 24, 20, 3, 37
	for _, dt := range append(gpuDTypes, dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float64) {
		for _, sparse := range []bool{false, true} {
			for _, mapped := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/sparse=%v/mapped=%v", dt, sparse, mapped), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(dt), 41))
					fs := randomFrames(rng, dt, n, sigY*sigX)
					s := randomStack(rng, 5, sigY, sigX, sparse)
					shifts := testShifts(rng, n)
					cfg := RunnerConfig{DType: dt, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data, TileFrames: 6, Streams: 2, Shifts: shifts, SigX: sigX}
					if sparse {
						cfg.Sparse = s.ToCSR()
					}
					var fm = mapRecords(t, fs, dt, n, 0, 384, 0, true, "MQ1,")
					if mapped {
						cfg.RecordStride = fm.Stride
					}
					r, err := NewRunner(cfg)
					require.NoError(t, err)
					defer func() { require.NoError(t, r.Close()) }()
					out, _ := nanOut(n*s.N, false)
					if mapped {
						sub := fm
						sub.Offset += start * fm.Stride
						require.NoError(t, r.RunMapped(context.Background(), start, end, sub, out, nil))
					} else {
						fb := sigY * sigX * dt.Size()
						read := func(dst []byte, a, b int) error { copy(dst, fs.raw[a*fb:b*fb]); return nil }
						require.NoError(t, r.Run(context.Background(), start, end, read, out, nil))
					}
					for f := range n {
						for m := range s.N {
							got := float64(out[f*s.N+m])
							if f < start || f >= end {
								require.True(t, math.IsNaN(got), "frame %d outside the range was written", f)
								continue
							}
							ref, abs := shiftedRef(fs, s, shifts, f, m)
							require.LessOrEqual(t, math.Abs(got-ref), 1e-5*abs+1e-30, "frame %d mask %d (shift %v, %v): got %.9g, want %.9g", f, m, shifts[2*f], shifts[2*f+1], got, ref)
						}
					}
				})
			}
		}
	}
}
