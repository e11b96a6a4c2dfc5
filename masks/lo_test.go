package masks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSplit: hi is the float32 rounding and hi + lo is the weight to 2⁻⁴⁸ of it, for
// random weights over many magnitudes and for weights exact in float32 (lo = 0).
func TestSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 48))
	for range 100000 {
		w := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
		hi, lo := Split(w)
		require.Equal(t, float32(w), hi)
		require.LessOrEqual(t, math.Abs(float64(hi)+float64(lo)-w), 0x1p-48*math.Abs(w), "weight %v", w)
	}
	for _, w := range []float64{0, 1, -3, 0.5, 1 << 24, float64(float32(0.1))} {
		hi, lo := Split(w)
		assert.Equal(t, w, float64(hi), "weight %v", w)
		assert.Zero(t, lo, "weight %v", w)
	}
}

// weights64 is n random float64 masks of p pixels with about a share of nonzeros, some
// exact in float32 (integers) and most not.
func weights64(rng *rand.Rand, n, p int, share float64) []float64 {
	w := make([]float64, n*p)
	for i := range w {
		if rng.Float64() < share {
			w[i] = rng.NormFloat64()
			if i%3 == 0 {
				w[i] = math.Round(w[i] * 4)
			}
		}
	}
	return w
}

// requireWeights64 requires s's weights with their Lo parts to be want's to 2⁻⁴⁸, and
// its float32 weights (Dense) to be want's rounding.
func requireWeights64(t *testing.T, want []float64, s *Stack) {
	t.Helper()
	got := s.Dense64()
	require.Len(t, got, len(want))
	for i, w := range want {
		require.LessOrEqual(t, math.Abs(got[i]-w), 0x1p-48*math.Abs(w), "weight %d", i)
	}
	for i, v := range s.Dense() {
		require.Equal(t, float32(want[i]), v, "float32 weight %d", i)
	}
}

// TestLoParts: weights given in float64 keep their float64 precision through New64,
// LoadNPY (dense and sparse), CSR form and back, Concat with float32 stacks, and LoPairs;
// float32-exact ones get no Lo parts.
func TestLoParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 48))
	const n, sy, sx = 3, 8, 9
	dense := weights64(rng, n, sy*sx, 0.9)
	sparse := weights64(rng, n, sy*sx, 0.03)

	s, err := New64(n, sy, sx, dense, nil)
	require.NoError(t, err)
	assert.False(t, s.Exact())
	requireWeights64(t, dense, s)
	assert.Equal(t, int64(n*sy*sx*8), s.Bytes(), "float32 weights and Lo parts")
	exact, err := New64(1, sy, sx, make([]float64, sy*sx), nil)
	require.NoError(t, err)
	assert.True(t, exact.Exact())
	assert.Nil(t, exact.Lo)

	// CSR form and back.
	c := s.ToCSR()
	require.NotNil(t, c.Lo)
	back := (&Stack{N: n, SigY: sy, SigX: sx, Sparse: c, Names: s.Names}).dense()
	requireWeights64(t, dense, back)

	// NPY, dense and sparse, in float64.
	dir := t.TempDir()
	nest := func(w []float64) [][][]float64 {
		out := make([][][]float64, n)
		for m := range out {
			out[m] = make([][]float64, sy)
			for y := range out[m] {
				out[m][y] = w[(m*sy+y)*sx : (m*sy+y+1)*sx]
			}
		}
		return out
	}
	for name, w := range map[string][]float64{"dense.npy": dense, "sparse.npy": sparse} {
		got, err := LoadNPY(writeNPY(t, dir, name, nest(w)))
		require.NoError(t, err)
		assert.Equal(t, name == "sparse.npy", got.Data == nil, "%s held in CSR form", name)
		requireWeights64(t, w, got)
	}

	// Concat with a float32 stack, dense and sparse.
	point, err := Point([2]int{sy, sx}, 2, 3)
	require.NoError(t, err)
	sp, err := LoadNPY(writeNPY(t, dir, "sparse2.npy", nest(sparse)))
	require.NoError(t, err)
	for _, parts := range [][]*Stack{{point, s}, {sp, point}} {
		cat, err := Concat(parts...)
		require.NoError(t, err)
		var want []float64
		for _, p := range parts {
			want = append(want, p.Dense64()...)
		}
		requireWeights64(t, want, cat)
	}

	// LoPairs: the float32 weights, then the Lo parts, dense and in CSR form.
	for _, st := range []*Stack{s, sp} {
		pairs := st.LoPairs()
		require.NoError(t, pairs.Validate([2]int{sy, sx}))
		require.Equal(t, 2*st.N, pairs.N)
		d, w := pairs.Dense(), st.Dense64()
		half := len(w)
		for i := range w {
			require.LessOrEqual(t, math.Abs(float64(d[i])+float64(d[half+i])-w[i]), 0x1p-48*math.Abs(w[i]), "weight %d", i)
		}
	}
}

// TestCOMFractionalCentre: centre-of-mass moments about a centre between pixels keep
// their float64 values to 2⁻⁴⁸ (y − 127.3 is not a float32), dense and in CSR form.
func TestCOMFractionalCentre(t *testing.T) {
	for _, r := range []float64{0, 20} { // whole frame (dense), small disk (CSR)
		s, err := COM([2]int{256, 256}, 128.6, 127.3, r)
		require.NoError(t, err)
		assert.False(t, s.Exact())
		w := s.Dense64()
		p := 256 * 256
		for i := range p {
			y, x := i/256, i%256
			if w[i] == 0 {
				continue
			}
			wy, wx := float64(y)-127.3, float64(x)-128.6
			require.InDelta(t, wy, w[p+i], 0x1p-48*math.Abs(wy), "y moment at (%d, %d)", y, x)
			require.InDelta(t, wx, w[2*p+i], 0x1p-48*math.Abs(wx), "x moment at (%d, %d)", y, x)
		}
	}
}

// TestTinyWeights: a mask given in float64 whose weights are not all 0 but all under
// 2⁻¹⁰² is refused, by New64 and LoadNPY (dense and sparse), naming the mask: in float32
// its weights would lose precision or round to 0 (1e-46). A mask whose largest weight is
// at least 2⁻¹⁰², and a mask of zeros, are taken.
func TestTinyWeights(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		w0, w1 float64
		bad    int // the mask refused, or -1
	}{
		{1, 1e-46, 1}, {1e-35, 1, 0}, {-0x1p-103, 0, 0}, {0x1p-102, 0, -1}, {1, 0, -1}, {-1e-40, 2, 0}, {0, 0, -1},
	} {
		for _, sparse := range []bool{false, true} {
			data := make([]float64, 32) // 2 masks of 4×4
			for i := range 16 {
				if !sparse || i == 5 {
					data[i], data[16+i] = c.w0, c.w1
				}
			}
			payload := make([]byte, 0, 8*len(data))
			for _, v := range data {
				payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(v))
			}
			path := writeRawNPY(t, dir, "tiny.npy", "<f8", false, "(2, 4, 4)", payload)
			fromNPY, errNPY := LoadNPY(path)
			s, err := New64(2, 4, 4, data, nil)
			for what, e := range map[string]error{"New64": err, "LoadNPY": errNPY} {
				msg := fmt.Sprintf("%s, sparse=%v, weights %g and %g", what, sparse, c.w0, c.w1)
				if c.bad < 0 {
					require.NoError(t, e, msg)
					continue
				}
				_, ok := errors.AsType[*WeightError](e)
				require.True(t, ok, "%s: %v", msg, e)
				require.ErrorContains(t, e, fmt.Sprintf("mask %d: its largest weight, %.4g, is under 2⁻¹⁰²", c.bad, math.Abs([2]float64{c.w0, c.w1}[c.bad])), msg)
			}
			if c.bad < 0 {
				requireWeights64(t, data, s)
				requireWeights64(t, data, fromNPY)
			}
		}
	}
}

// TestWeightBeyondFloat32: a finite float64 weight beyond float32's range is refused
// naming it as given (1e+300, -5e+39), its mask and pixel, and float32's limit — not as
// the +Inf of its float32 rounding — by New64 and by LoadNPY, dense and sparse.
func TestWeightBeyondFloat32(t *testing.T) {
	dir := t.TempDir()
	for _, w := range []float64{1e300, -5e39, math.MaxFloat64} {
		for _, sparse := range []bool{false, true} {
			data := make([]float64, 2*4*4)
			if !sparse {
				for i := range data {
					data[i] = 0.5
				}
			}
			data[16+2*4+3] = w // mask 1, pixel (y=2, x=3)
			payload := make([]byte, 0, 8*len(data))
			for _, v := range data {
				payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(v))
			}
			fromNPY, errNPY := LoadNPY(writeRawNPY(t, dir, "big.npy", "<f8", false, "(2, 4, 4)", payload))
			require.Nil(t, fromNPY)
			_, err := New64(2, 4, 4, data, []string{"a", "b"})
			for what, c := range map[string]struct {
				err  error
				name string
			}{"New64": {err, "b"}, "LoadNPY": {errNPY, "big[1]"}} {
				_, ok := errors.AsType[*WeightError](c.err)
				require.True(t, ok, "%s %g sparse=%v: %v", what, w, sparse, c.err)
				require.ErrorContains(t, c.err, fmt.Sprintf("mask 1 (%q) has weight %v at pixel (y=2, x=3): weights must be finite and within float32's range, ±3.403e+38", c.name, w), what)
			}
		}
	}
}
