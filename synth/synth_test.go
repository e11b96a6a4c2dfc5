package synth

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats" // the tests read the files written back
)

// readFloat opens path and returns the dataset and every frame as float64 values.
func readFloat(t *testing.T, path string, opt dataset.Options) (dataset.Dataset, []float64) {
	t.Helper()
	d, err := dataset.Open(path, opt)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	buf := make([]byte, d.NumFrames()*d.FrameBytes())
	require.NoError(t, d.ReadFrames(0, d.NumFrames(), buf))
	n := len(buf) / d.DType().Size()
	v := make([]float64, n)
	ne := binary.NativeEndian
	for i := range v {
		switch d.DType() {
		case dataset.Uint8:
			v[i] = float64(buf[i])
		case dataset.Uint16:
			v[i] = float64(ne.Uint16(buf[2*i:]))
		case dataset.Uint32:
			v[i] = float64(ne.Uint32(buf[4*i:]))
		case dataset.Float32:
			v[i] = float64(math.Float32frombits(ne.Uint32(buf[4*i:])))
		default:
			t.Fatalf("dtype %v not decoded by this test", d.DType())
		}
	}
	return d, v
}

func TestShapesAndFormats(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file string
		opt  Options
		read dataset.Options
		nav  []int
	}{
		{"a.npy", Options{NavShape: []int{3, 4}, SigShape: [2]int{32, 48}, DType: dataset.Float32}, dataset.Options{}, []int{3, 4}},
		{"a.mib", Options{NavShape: []int{2, 5}, SigShape: [2]int{40, 32}, DType: dataset.Uint8}, dataset.Options{}, []int{2, 5}},
		{"a.mib", Options{NavShape: []int{7}, SigShape: [2]int{16, 16}}, dataset.Options{}, []int{1, 7}},
		{"a.raw", Options{NavShape: []int{3, 3}, SigShape: [2]int{24, 24}, DType: dataset.Uint32},
			dataset.Options{NavShape: []int{3, 3}, SigShape: []int{24, 24}, DType: dataset.Uint32}, []int{3, 3}},
		{"a.dat", Options{NavShape: []int{2, 2}, SigShape: [2]int{16, 16}, Format: "npy"}, dataset.Options{Format: "npy"}, []int{2, 2}},
		{"planes.npy", Options{NavShape: []int{2, 3, 4}, SigShape: [2]int{16, 16}}, dataset.Options{}, []int{2, 3, 4}},
	} {
		path := filepath.Join(dir, tc.file)
		_, err := Write(context.Background(), path, tc.opt)
		require.NoError(t, err, tc.file)
		d, v := readFloat(t, path, tc.read)
		assert.Equal(t, tc.nav, d.NavShape())
		assert.Equal(t, tc.opt.SigShape, d.SigShape())
		want := tc.opt.DType
		if want == dataset.Invalid {
			want = dataset.Uint16
		}
		assert.Equal(t, want, d.DType())
		sum := 0.0
		for _, x := range v {
			require.GreaterOrEqual(t, x, 0.0)
			require.Equal(t, math.Round(x), x, "counts are integers")
			sum += x
		}
		assert.Positive(t, sum)
	}
}

func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	opt := Options{NavShape: []int{4, 6}, SigShape: [2]int{32, 32}, Seed: 42}
	read := func(name string, opt Options) []float64 {
		path := filepath.Join(dir, name)
		_, err := Write(context.Background(), path, opt)
		require.NoError(t, err)
		_, v := readFloat(t, path, dataset.Options{})
		return v
	}
	a := read("a.npy", opt)
	prev := runtime.GOMAXPROCS(1)
	b := read("b.npy", opt)
	runtime.GOMAXPROCS(prev)
	assert.Equal(t, a, b, "same seed, different CPU count: same data")

	opt.Seed = 43
	c := read("c.npy", opt)
	assert.NotEqual(t, a, c, "another seed gives other noise")

	// The float32 variant stores the same counts as floats.
	opt.Seed, opt.DType = 42, dataset.Float32
	assert.Equal(t, a, read("f.npy", opt))
}

func TestDiscCentreOfMassMoves(t *testing.T) {
	opt := Options{NavShape: []int{5, 5}, SigShape: [2]int{64, 64}, Seed: 7}
	path := filepath.Join(t.TempDir(), "com.npy")
	_, err := Write(context.Background(), path, opt)
	require.NoError(t, err)
	m, err := newModel(opt)
	require.NoError(t, err)
	_, v := readFloat(t, path, dataset.Options{})
	// Within a window that holds the disc at every position and none of the ring, the
	// centre of mass of the counts above background is the disc centre.
	window := m.discRadius + m.shift + 2
	require.Less(t, window+3*m.ringWidth, m.ringRadius)
	for i := range 25 {
		frame := v[i*64*64 : (i+1)*64*64]
		var sum, sy, sx float64
		for y := range 64 {
			for x := range 64 {
				py, px := float64(y)+0.5, float64(x)+0.5
				if math.Hypot(py-32, px-32) > window {
					continue
				}
				c := frame[y*64+x] - m.background
				sum += c
				sy += c * py
				sx += c * px
			}
		}
		// Documented model: centre (32 + 3(2v−1), 32 + 3(2u−1)), u = (ix+½)/5, v = (iy+½)/5.
		u, vv := (float64(i%5)+0.5)/5, (float64(i/5)+0.5)/5
		assert.InDelta(t, 32+3*(2*vv-1), sy/sum, 0.2, "frame %d: y centre", i)
		assert.InDelta(t, 32+3*(2*u-1), sx/sum, 0.2, "frame %d: x centre", i)
	}
}

func TestFrameStatistics(t *testing.T) {
	// Frames against the model: (count − λ)/√λ must have mean 0 and variance 1 over
	// the disc, the ring and the flat background alike.
	opt := Options{NavShape: []int{4, 4}, SigShape: [2]int{64, 64}, Seed: 9}
	path := filepath.Join(t.TempDir(), "stats.npy")
	_, err := Write(context.Background(), path, opt)
	require.NoError(t, err)
	m, err := newModel(opt)
	require.NoError(t, err)
	_, v := readFloat(t, path, dataset.Options{})
	lam := make([]float64, 64*64)
	var n, sz, szz float64
	var nBG, sBG, ssBG float64
	for i := range 16 {
		m.lambda(i, lam)
		for j, l := range lam {
			c := v[i*64*64+j]
			z := (c - l) / math.Sqrt(l)
			n++
			sz += z
			szz += z * z
			if y, x := j/64, j%64; (y < 6 || y >= 58) && (x < 6 || x >= 58) {
				// corners: beyond the ring, the flat background region
				require.InDelta(t, m.background, l, 1e-6)
				nBG++
				sBG += c
				ssBG += c * c
			}
		}
	}
	mean, variance := sz/n, szz/n-(sz/n)*(sz/n)
	// n = 65536 samples: the standard error of the mean is 1/√n ≈ 0.004.
	assert.InDelta(t, 0, mean, 0.03)
	assert.InDelta(t, 1, variance, 0.05)
	bgMean := sBG / nBG
	bgVar := ssBG/nBG - bgMean*bgMean
	// 2304 background samples of λ = 0.5: standard errors ≈ 0.015 (mean), 0.03 (variance).
	assert.InDelta(t, 0.5, bgMean, 0.08)
	assert.InDelta(t, 0.5, bgVar, 0.15)
}

func TestPoissonSampler(t *testing.T) {
	pt := poisson()
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 200000
	for _, lam := range []float64{0, 0.2, 0.5, 2.5, 17.3, 63.9, 150, 4000} {
		var s, ss float64
		for range n {
			k := float64(pt.sample(rng, lam))
			s += k
			ss += k * k
		}
		mean := s / n
		variance := ss/n - mean*mean
		// λ is rounded to the 1/64 grid below 64; 6 standard errors otherwise.
		assert.InDelta(t, lam, mean, 1.0/128+6*math.Sqrt(lam/n), "λ=%v mean", lam)
		assert.InDelta(t, lam, variance, 0.1+6*math.Sqrt((lam+2*lam*lam)/n), "λ=%v variance", lam)
	}
	// The distribution itself, for λ = 2.5 (on the grid, so exact): each frequency
	// within 6 binomial standard errors of the Poisson pmf.
	const lam = 2.5
	counts := make([]float64, 30)
	for range n {
		counts[min(int(pt.sample(rng, lam)), 29)]++
	}
	pmf := math.Exp(-lam)
	for k := range 12 {
		se := math.Sqrt(pmf * (1 - pmf) / n)
		assert.InDelta(t, pmf, counts[k]/n, 6*se+1e-9, "P(k=%d)", k)
		pmf *= lam / float64(k+1)
	}
}

func TestWriteErrorsLeaveNoFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"a.mib", Options{NavShape: []int{2, 2}, SigShape: [2]int{16, 16}, DType: dataset.Float32}, "MIB stores uint8, uint16 or uint32"},
		{"a.tif", Options{NavShape: []int{2, 2}, SigShape: [2]int{16, 16}}, "give option format (raw, npy or mib)"},
		{"a.npy", Options{NavShape: []int{2, 2, 2, 2}, SigShape: [2]int{16, 16}}, "want (nav_y, nav_x), (n,) or (nav_z, nav_y, nav_x)"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{0, 16}}, "non-positive"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{16, 16}, Shift: new(-1.0)}, "shift -1: want a finite, non-negative value"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{8, 8}, DiscCounts: new(1e18)}, "disc counts 1e+18: want a value in [0, 4.294967296e+09]"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{8, 8}, Background: new(math.NaN())}, "background NaN"},
		// The product wraps around to 0 in int64.
		{"a.npy", Options{NavShape: []int{4294967296, 4294967296}, SigShape: [2]int{16, 16}}, "synth: nav shape (4294967296, 4294967296) is too large"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{4611686018427387904, 4}}, "synth: sig shape (4611686018427387904, 4) is too large"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{8192, 8192}, DType: dataset.Uint8}, "frames of at most 33554432 pixels"},
		{"a.npy", Options{NavShape: []int{2, 2}, SigShape: [2]int{16, 32}, RingWidth: new(17.0)}, "ring width 17 pixels exceeds the frame's smaller side, 16 pixels"},
		// 2^57 bytes: a valid shape, but no file system holds it.
		{"a.npy", Options{NavShape: []int{1 << 20, 1 << 20}, SigShape: [2]int{256, 256}}, "synth: " + filepath.Join(dir, "a.npy") + ": the file needs 144115188075856000 bytes (1.44e+08 GB) but the file system of " + dir + " has only"},
	} {
		_, err := Write(context.Background(), filepath.Join(dir, tc.name), tc.opt)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// countdownContext is a context whose Err is context.Canceled from its n-th call on: it
// cancels a Write after a known number of ctx checks.
type countdownContext struct {
	context.Context
	n atomic.Int64
}

func (c *countdownContext) Err() error {
	if c.n.Add(-1) <= 0 {
		return context.Canceled
	}
	return nil
}

func TestWriteCancelled(t *testing.T) {
	dir := t.TempDir()
	opt := Options{NavShape: []int{16, 16}, SigShape: [2]int{32, 32}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Write(ctx, filepath.Join(dir, "a.npy"), opt)
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualError(t, err, "synth: "+filepath.Join(dir, "a.npy")+": context canceled")

	// Cancelled in the middle, after frames were written to the temporary file.
	for _, checks := range []int64{1, 2, 50, 200} {
		ctx := &countdownContext{Context: context.Background()}
		ctx.n.Store(checks)
		_, err = Write(ctx, filepath.Join(dir, "b.mib"), opt)
		require.True(t, errors.Is(err, context.Canceled), "cancelled at check %d: %v", checks, err)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "no file, no temporary file")
}

// TestHugeShift checks that a disc shifted far out of the frame gives background only.
func TestHugeShift(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.npy")
	_, err := Write(context.Background(), path, Options{NavShape: []int{1, 2}, SigShape: [2]int{16, 16}, Shift: new(1e300), Background: new(3.0)})
	require.NoError(t, err)
	_, v := readFloat(t, path, dataset.Options{})
	mean := 0.0
	for _, x := range v {
		mean += x / float64(len(v))
	}
	assert.InDelta(t, 3, mean, 6*math.Sqrt(3/float64(len(v))), "background only")
}

// BenchmarkWrite measures synthetic data generation and writing (bytes/s of frames).
func BenchmarkWrite(b *testing.B) {
	opt := Options{NavShape: []int{16, 16}, SigShape: [2]int{256, 256}, Seed: 1}
	path := filepath.Join(b.TempDir(), "bench.npy")
	poisson()
	b.SetBytes(16 * 16 * 256 * 256 * 2)
	for b.Loop() {
		if _, err := Write(context.Background(), path, opt); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSaturatedCounts: counts above the dtype's range are clipped to its largest value
// and counted: the same scan as uint16 and as uint8 with a disc of 400 counts per pixel.
func TestSaturatedCounts(t *testing.T) {
	dir := t.TempDir()
	opt := Options{NavShape: []int{3, 4}, SigShape: [2]int{32, 32}, DiscCounts: new(400.0), Seed: 5}
	sat16, err := Write(context.Background(), filepath.Join(dir, "a.npy"), opt)
	require.NoError(t, err)
	assert.Zero(t, sat16)
	_, wide := readFloat(t, filepath.Join(dir, "a.npy"), dataset.Options{})
	opt.DType = dataset.Uint8
	sat8, err := Write(context.Background(), filepath.Join(dir, "b.npy"), opt)
	require.NoError(t, err)
	_, narrow := readFloat(t, filepath.Join(dir, "b.npy"), dataset.Options{})
	var want int64
	for i, v := range wide {
		if v > 255 {
			want++
		}
		require.Equal(t, min(v, 255), narrow[i], "pixel %d", i)
	}
	require.Positive(t, want)
	assert.Equal(t, want, sat8)
}

// TestExplicitZeroParameters checks that a parameter given as 0 counts (#18 synth): a
// scan with Shift 0 has its disc at the frame centre at every position (no descan), and
// one without disc, ring and background is all zeros; RingWidth 0 is refused.
func TestExplicitZeroParameters(t *testing.T) {
	dir := t.TempDir()
	still := Options{NavShape: []int{4, 5}, SigShape: [2]int{32, 32}, Seed: 3, Shift: new(0.0), DiscCounts: new(400.0),
		RingCounts: new(0.0), Background: new(0.0)}
	_, err := Write(context.Background(), filepath.Join(dir, "still.npy"), still)
	require.NoError(t, err)
	_, v := readFloat(t, filepath.Join(dir, "still.npy"), dataset.Options{})
	for i := range 20 {
		frame := v[i*32*32 : (i+1)*32*32]
		var sum, sy, sx float64
		for y := range 32 {
			for x := range 32 {
				c := frame[y*32+x]
				if math.Hypot(float64(y)+0.5-16, float64(x)+0.5-16) > 4+1.5 { // disc radius 32/8 = 4, edge 1
					require.Zero(t, c, "frame %d (%d, %d): no background, no ring", i, y, x)
				}
				sum, sy, sx = sum+c, sy+c*(float64(y)+0.5), sx+c*(float64(x)+0.5)
			}
		}
		// The disc's centre is (16, 16) at every position (with Shift 3 it moves by up to
		// ±2.4 px); the Poisson noise of ≥ 200 counts on ~60 pixels moves the centre of
		// mass by ~0.04 px.
		assert.InDelta(t, 16, sy/sum, 0.2, "frame %d: y centre", i)
		assert.InDelta(t, 16, sx/sum, 0.2, "frame %d: x centre", i)
	}

	dark := Options{NavShape: []int{2, 3}, SigShape: [2]int{16, 16}, DiscCounts: new(0.0), RingCounts: new(0.0),
		Background: new(0.0)}
	_, err = Write(context.Background(), filepath.Join(dir, "dark.npy"), dark)
	require.NoError(t, err)
	_, v = readFloat(t, filepath.Join(dir, "dark.npy"), dataset.Options{})
	assert.Equal(t, make([]float64, 6*16*16), v, "no disc, ring or background: every count 0")

	_, err = Write(context.Background(), filepath.Join(dir, "w.npy"), Options{NavShape: []int{2}, SigShape: [2]int{16, 16},
		RingWidth: new(0.0)})
	require.ErrorContains(t, err, "synth: ring width 0: want a width above 0 pixels")
}

// A scan of planes repeats the scan's model in every plane (#33): the expected counts of
// frame i and of the same position one plane on are equal, and differ along the scan.
func TestScanOfPlanes(t *testing.T) {
	m, err := newModel(Options{NavShape: []int{2, 3, 4}, SigShape: [2]int{32, 32}})
	require.NoError(t, err)
	assert.Equal(t, 24, m.frames)
	a, b := make([]float64, 32*32), make([]float64, 32*32)
	for i := range 12 {
		m.lambda(i, a)
		m.lambda(i+12, b)
		require.Equal(t, a, b, "position %d of both planes", i)
	}
	m.lambda(5, b)
	m.lambda(0, a)
	assert.NotEqual(t, a, b, "the scan's positions differ")
}
