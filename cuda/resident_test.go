//go:build cuda

package cuda

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// TestResident loads random frames of every dtype onto the device (uint16: 64 MiB and 3
// frames, three staging chunks, so that a slot is reused), then applies dense and sparse
// stacks (1, 4 and 70 masks: one group, a padded one, two groups) with float32 and float64
// accumulation to a frame range inside the scan, twice each, against the float64
// reference. Emulated, uint16 runs 1 mask only (70 masks over its 4099 frames take
// minutes there; the other dtypes run them).
func TestResident(t *testing.T) {
	requireDevice(t)
	const sigY, sigX = 128, 128
	for _, dt := range gpuDTypes {
		rng := rand.New(rand.NewPCG(7, uint64(dt)))
		frames, counts := 37, []int{1, 4, 70}
		if dt == dataset.Uint16 {
			frames, counts = (64<<20)/(sigY*sigX*2)+3, []int{1, 70}
			if emulated {
				counts = counts[:1]
			}
		}
		fs := randomFrames(rng, dt, frames, sigY*sigX)
		ds, err := dataset.FromMemory(fs.raw, nil, [2]int{sigY, sigX}, dt)
		require.NoError(t, err)
		r, err := LoadResident(context.Background(), 0, ds)
		require.NoError(t, err)
		assert.Equal(t, int64(len(fs.raw)), r.Bytes())
		start, end := 5, frames-2
		for _, nm := range counts {
			for _, sparse := range []bool{false, true} {
				s := randomStack(rng, nm, sigY, sigX, sparse)
				ref, abs := reference(fs, s, start, end)
				if sparse { // held in CSR form only
					s = &masks.Stack{N: s.N, SigY: sigY, SigX: sigX, Sparse: s.ToCSR()}
				}
				for _, f64 := range []bool{false, true} {
					c := kernelCase{dt: dt, nMasks: nm, sparse: sparse, f64: f64, sigY: sigY, sigX: sigX}
					t.Run(c.String(), func(t *testing.T) {
						for range 2 {
							get := residentApply(t, r, s, frames, start, end, f64)
							compare(t, nm, frames, start, end, ref, abs, get)
						}
					})
				}
			}
		}
		require.NoError(t, r.Close())
		require.NoError(t, r.Close(), "closing twice")
		assert.Error(t, r.Apply(randomStack(rng, 1, sigY, sigX, false), 0, 1, make([]float32, frames), nil))
	}
}

// reference returns Σ_p w[m,p]·x[f,p] and Σ_p |w[m,p]·x[f,p]| in float64 for frames
// [start, end), (f-start)*N+m.
func reference(fs frameSet, s *masks.Stack, start, end int) (ref, abs []float64) {
	p, nm := s.Pixels(), s.N
	ref, abs = make([]float64, (end-start)*nm), make([]float64, (end-start)*nm)
	for m := range nm {
		w := s.Mask(m)
		for f := start; f < end; f++ {
			var r, a float64
			for i, x := range fs.vals[f*p : (f+1)*p] {
				if w[i] != 0 {
					r += float64(w[i]) * x
					a += math.Abs(float64(w[i]) * x)
				}
			}
			ref[(f-start)*nm+m], abs[(f-start)*nm+m] = r, a
		}
	}
	return ref, abs
}

// compare requires get(f*nm+m) within 1e-5·Σ|w·x| of the reference for frames
// [start, end), and NaN (untouched) for the other frames.
func compare(t *testing.T, nm, frames, start, end int, ref, abs []float64, get func(int) float64) {
	t.Helper()
	bad := 0
	for f := range frames {
		for m := range nm {
			got := get(f*nm + m)
			if f < start || f >= end {
				require.True(t, math.IsNaN(got), "frame %d mask %d outside [%d, %d) was written: %g", f, m, start, end, got)
				continue
			}
			i := (f-start)*nm + m
			if !(math.Abs(got-ref[i]) <= 1e-5*abs[i]) {
				if bad++; bad <= 5 {
					t.Errorf("frame %d mask %d: got %.9g, want %.9g (Σ|w·x| = %.6g)", f, m, got, ref[i], abs[i])
				}
			}
		}
	}
	require.Zero(t, bad, "wrong results")
}

// residentApply runs r.Apply over [start, end) into a NaN-filled buffer of every frame.
func residentApply(t *testing.T, r *Resident, s *masks.Stack, frames, start, end int, f64 bool) func(int) float64 {
	n := frames * s.N
	if f64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = math.NaN()
		}
		require.NoError(t, r.Apply(s, start, end, nil, out))
		return func(i int) float64 { return out[i] }
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	require.NoError(t, r.Apply(s, start, end, out, nil))
	return func(i int) float64 { return float64(out[i]) }
}

// TestResidentRefusals: a dataset larger than the device's free memory is refused with
// the sizes, and bad Apply arguments are errors.
func TestResidentRefusals(t *testing.T) {
	requireDevice(t)
	p, err := Properties(0)
	require.NoError(t, err)
	// A lazily-read dataset claiming more frames than the device holds: refused before
	// any read.
	ds := hugeDataset{frames: int(p.TotalMemory/(256*256*2)) + 1}
	_, err = LoadResident(context.Background(), 0, ds)
	var me *MemoryError
	require.True(t, errors.As(err, &me), "got %v", err)
	assert.Equal(t, int64(ds.frames)*256*256*2, me.Need)
	assert.Greater(t, me.Total, int64(0))
	assert.Contains(t, err.Error(), "GiB of device memory")

	rng := rand.New(rand.NewPCG(3, 4))
	fs := randomFrames(rng, dataset.Uint16, 8, 64)
	small, err := dataset.FromMemory(fs.raw, nil, [2]int{8, 8}, dataset.Uint16)
	require.NoError(t, err)
	r, err := LoadResident(context.Background(), 0, small)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	assert.Error(t, r.Apply(randomStack(rng, 1, 4, 4, false), 0, 8, make([]float32, 8), nil), "wrong sig shape")
	assert.Error(t, r.Apply(randomStack(rng, 2, 8, 8, false), 0, 8, make([]float32, 8), nil), "short output")
	assert.Error(t, r.Apply(randomStack(rng, 1, 8, 8, false), 0, 9, make([]float32, 9), nil), "beyond the frames")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = LoadResident(ctx, 0, small)
	assert.ErrorIs(t, err, context.Canceled)
}

// hugeDataset has frames of 256x256 uint16 whose reads fail.
type hugeDataset struct{ frames int }

func (hugeDataset) Format() string       { return "memory" }
func (hugeDataset) Path() string         { return "" }
func (d hugeDataset) NavShape() []int    { return []int{d.frames} }
func (hugeDataset) SigShape() [2]int     { return [2]int{256, 256} }
func (hugeDataset) DType() dataset.DType { return dataset.Uint16 }
func (d hugeDataset) NumFrames() int     { return d.frames }
func (hugeDataset) FrameBytes() int      { return 256 * 256 * 2 }
func (hugeDataset) ReadFrames(int, int, []byte) error {
	return errors.New("hugeDataset: no frames to read")
}
func (hugeDataset) Close() error { return nil }
