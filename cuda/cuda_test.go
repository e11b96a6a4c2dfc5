//go:build cuda

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// requireDevice skips the test on a machine without a CUDA device.
func requireDevice(t *testing.T) {
	t.Helper()
	n, err := DeviceCount()
	require.NoError(t, err)
	if n == 0 {
		t.Skip("no CUDA device")
	}
}

func TestBuilt(t *testing.T) {
	assert.True(t, Built())
	_, err := DeviceCount()
	assert.NoError(t, err, "no device or no driver must read as 0 devices")
}

// frameSet is random frames in native bytes (host byte order) and as float64.
type frameSet struct {
	raw  []byte
	vals []float64
}

func randomFrames(rng *rand.Rand, dt dataset.DType, n, pixels int) frameSet {
	fs := frameSet{raw: make([]byte, n*pixels*dt.Size()), vals: make([]float64, n*pixels)}
	for i := range fs.vals {
		switch dt {
		case dataset.Uint8:
			v := uint8(rng.IntN(256))
			fs.raw[i], fs.vals[i] = v, float64(v)
		case dataset.Uint16:
			v := uint16(rng.IntN(1 << 16))
			binary.NativeEndian.PutUint16(fs.raw[2*i:], v)
			fs.vals[i] = float64(v)
		case dataset.Uint32:
			v := rng.Uint32()
			binary.NativeEndian.PutUint32(fs.raw[4*i:], v)
			fs.vals[i] = float64(v)
		case dataset.Float32:
			v := float32(rng.NormFloat64() * 100)
			binary.NativeEndian.PutUint32(fs.raw[4*i:], math.Float32bits(v))
			fs.vals[i] = float64(v)
		case dataset.Int8: // the dtypes of shifted runners only
			v := int8(rng.IntN(256) - 128)
			fs.raw[i], fs.vals[i] = byte(v), float64(v)
		case dataset.Int16:
			v := int16(rng.IntN(1<<16) - 1<<15)
			binary.NativeEndian.PutUint16(fs.raw[2*i:], uint16(v))
			fs.vals[i] = float64(v)
		case dataset.Int32:
			v := int32(rng.Uint32())
			binary.NativeEndian.PutUint32(fs.raw[4*i:], uint32(v))
			fs.vals[i] = float64(v)
		case dataset.Float64:
			v := rng.NormFloat64() * 100
			binary.NativeEndian.PutUint64(fs.raw[8*i:], math.Float64bits(v))
			fs.vals[i] = v
		}
	}
	return fs
}

// randomStack returns nMasks random masks; with sparse, about 5% of the weights are
// nonzero and mask 1 (if any) is empty.
func randomStack(rng *rand.Rand, nMasks, sigY, sigX int, sparse bool) *masks.Stack {
	s := &masks.Stack{N: nMasks, SigY: sigY, SigX: sigX, Data: make([]float32, nMasks*sigY*sigX)}
	for i := range s.Data {
		if sparse && (rng.Float64() > 0.05 || i/s.Pixels() == 1) {
			continue
		}
		s.Data[i] = float32(rng.NormFloat64())
	}
	return s
}

// checkResults compares out (frame-major, nMasks per frame) with the float64 reference
// over frames [start, end), and requires the other rows to be still NaN.
func checkResults(t *testing.T, fs frameSet, s *masks.Stack, start, end int, get func(i int) float64) {
	t.Helper()
	p, nm := s.Pixels(), s.N
	nFrames := len(fs.vals) / p
	bad := 0
	for f := range nFrames {
		for m := range nm {
			got := get(f*nm + m)
			if f < start || f >= end {
				if !math.IsNaN(got) {
					t.Fatalf("frame %d mask %d outside [%d, %d) was written: %g", f, m, start, end, got)
				}
				continue
			}
			var ref, abs float64
			w := s.Mask(m)
			for i, x := range fs.vals[f*p : (f+1)*p] {
				ref += float64(w[i]) * x
				abs += math.Abs(float64(w[i]) * x)
			}
			if !(math.Abs(got-ref) <= 1e-5*abs) {
				if bad++; bad <= 5 {
					t.Errorf("frame %d mask %d: got %.9g, want %.9g (Σ|w·x| = %.6g)", f, m, got, ref, abs)
				}
			}
		}
	}
	require.Zero(t, bad, "wrong results")
}

type kernelCase struct {
	dt                  dataset.DType
	nMasks              int
	sparse, f64         bool
	sigY, sigX          int
	frames, start, end  int
	tileFrames, streams int
}

func (c kernelCase) String() string {
	kind, acc := "dense", "f32"
	if c.sparse {
		kind = "sparse"
	}
	if c.f64 {
		acc = "f64"
	}
	return fmt.Sprintf("%s/%dmasks/%s/%s/%dx%d", c.dt, c.nMasks, kind, acc, c.sigY, c.sigX)
}

func runCase(t *testing.T, c kernelCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(c.nMasks)))
	fs := randomFrames(rng, c.dt, c.frames, c.sigY*c.sigX)
	s := randomStack(rng, c.nMasks, c.sigY, c.sigX, c.sparse)
	cfg := RunnerConfig{Device: 0, DType: c.dt, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data,
		TileFrames: c.tileFrames, Streams: c.streams, Float64: c.f64}
	if c.sparse {
		cfg.Sparse = s.ToCSR()
	}
	r, err := NewRunner(cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()

	fb := c.sigY * c.sigX * c.dt.Size()
	read := func(dst []byte, a, b int) error {
		if len(dst) != (b-a)*fb {
			return fmt.Errorf("dst holds %d bytes for frames [%d, %d)", len(dst), a, b)
		}
		copy(dst, fs.raw[a*fb:b*fb])
		return nil
	}
	n := c.frames * c.nMasks
	if c.f64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = math.NaN()
		}
		require.NoError(t, r.Run(context.Background(), c.start, c.end, read, nil, out))
		checkResults(t, fs, s, c.start, c.end, func(i int) float64 { return out[i] })
	} else {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(math.NaN())
		}
		require.NoError(t, r.Run(context.Background(), c.start, c.end, read, out, nil))
		checkResults(t, fs, s, c.start, c.end, func(i int) float64 { return float64(out[i]) })
	}
}

var gpuDTypes = []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Float32}

// TestKernels covers every kernel (dtype x mask count x dense/sparse x accumulation) on
// 128x128 frames: 16-byte loads, pixel splits with partial sums, several tiles through 2
// streams with a short last tile, and a frame range that starts and ends inside the scan.
func TestKernels(t *testing.T) {
	requireDevice(t)
	for _, dt := range gpuDTypes {
		for _, nm := range []int{1, 4, 16, 64} {
			for _, sparse := range []bool{false, true} {
				for _, f64 := range []bool{false, true} {
					c := kernelCase{dt: dt, nMasks: nm, sparse: sparse, f64: f64, sigY: 128, sigX: 128,
						frames: 17, start: 2, end: 15, tileFrames: 5, streams: 2}
					t.Run(c.String(), func(t *testing.T) { runCase(t, c, 1) })
				}
			}
		}
	}
}

// TestKernelsOddShapes covers scalar loads (143-pixel frames, not a multiple of 16
// bytes), mask counts that are not powers of two and more than 64 masks (two mask groups
// with zero padding), and a single stream.
func TestKernelsOddShapes(t *testing.T) {
	requireDevice(t)
	for _, dt := range gpuDTypes {
		for _, nm := range []int{3, 70} {
			for _, sparse := range []bool{false, true} {
				for _, f64 := range []bool{false, true} {
					c := kernelCase{dt: dt, nMasks: nm, sparse: sparse, f64: f64, sigY: 13, sigX: 11,
						frames: 23, start: 0, end: 23, tileFrames: 7, streams: 1}
					t.Run(c.String(), func(t *testing.T) { runCase(t, c, 2) })
				}
			}
		}
	}
}

// TestKernelsManyMasks covers the tiled dense kernel (kDenseChoice in kernels/mask_dot.cu:
// mask groups of 16 to 64), every dtype x {16, 32, 64, 100, 128} masks x float32/float64:
//   - 16x563 frames (9008 pixels): 16-byte loads, more pixels than one chunk (the
//     precision split) and a last stage of 16 pixels; a 260-frame tile (frame blocks of
//     64, 128 and 256 frames with a short last block) and a 32-frame tile (split-K to fill
//     the device);
//   - 67x67 frames (4489 pixels, not a multiple of 16 bytes): scalar loads, 5 chunks.
//
// 100 and 128 masks run two mask groups (100: zero padding). Emulated, 128 masks are left
// out (100 runs two groups too).
func TestKernelsManyMasks(t *testing.T) {
	requireDevice(t)
	shapes := []struct{ sigY, sigX, frames, start, end, tileFrames int }{
		{16, 563, 300, 5, 297, 260},
		{67, 67, 150, 0, 150, 100},
	}
	counts := []int{16, 32, 64, 100, 128}
	if emulated {
		counts = counts[:4]
	}
	for _, sh := range shapes {
		for _, dt := range gpuDTypes {
			for _, nm := range counts {
				for _, f64 := range []bool{false, true} {
					c := kernelCase{dt: dt, nMasks: nm, f64: f64, sigY: sh.sigY, sigX: sh.sigX,
						frames: sh.frames, start: sh.start, end: sh.end, tileFrames: sh.tileFrames, streams: 2}
					bothDenseKernels(t, c.String(), func(t *testing.T) { runCase(t, c, 8) })
				}
			}
		}
	}
}

// TestKernelsDetectorFrames runs 256x256 uint16 frames with the default tile size and
// streams, as a Merlin scan would: the streaming kernel (1-8 masks) and the tiled one (16
// and 64 masks, 64 pixel chunks).
func TestKernelsDetectorFrames(t *testing.T) {
	requireDevice(t)
	for _, nm := range []int{1, 3, 8, 16, 64} {
		c := kernelCase{dt: dataset.Uint16, nMasks: nm, sigY: 256, sigX: 256, frames: 300, start: 0, end: 300}
		bothDenseKernels(t, c.String(), func(t *testing.T) { runCase(t, c, 3) })
	}
}

// bothDenseKernels runs f as subtests name/streaming and name/tiled, with the tiled dense
// kernel off and on (UseTiledDense).
func bothDenseKernels(t *testing.T, name string, f func(t *testing.T)) {
	for _, tiled := range []bool{false, true} {
		t.Run(fmt.Sprintf("%s/tiled=%v", name, tiled), func(t *testing.T) {
			UseTiledDense(tiled)
			defer UseTiledDense(false)
			f(t)
		})
	}
}

func newTestRunner(t *testing.T, s *masks.Stack, tileFrames int) *Runner {
	t.Helper()
	r, err := NewRunner(RunnerConfig{DType: dataset.Uint8, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data,
		TileFrames: tileFrames, Streams: 2})
	require.NoError(t, err)
	return r
}

func TestRunnersShareMasks(t *testing.T) {
	requireDevice(t)
	rng := rand.New(rand.NewPCG(4, 4))
	s1 := randomStack(rng, 2, 16, 16, false)
	s2 := randomStack(rng, 2, 16, 16, false)
	r1 := newTestRunner(t, s1, 4)
	r2 := newTestRunner(t, s1, 4)
	r3 := newTestRunner(t, s2, 4)
	assert.Len(t, deviceMasks.m, 2, "runners given the same stack share one upload")
	require.NoError(t, r1.Close())
	require.NoError(t, r1.Close(), "second Close is a no-op")
	assert.Len(t, deviceMasks.m, 2)
	require.NoError(t, r2.Close())
	assert.Len(t, deviceMasks.m, 1, "the last runner frees the shared stack")
	require.NoError(t, r3.Close())
	assert.Empty(t, deviceMasks.m)
	assert.Error(t, r1.Run(context.Background(), 0, 1, func([]byte, int, int) error { return nil }, make([]float32, 2), nil))
}

func TestRunErrors(t *testing.T) {
	requireDevice(t)
	rng := rand.New(rand.NewPCG(5, 5))
	s := randomStack(rng, 3, 16, 16, false)
	fs := randomFrames(rng, dataset.Uint8, 20, s.Pixels())
	r := newTestRunner(t, s, 4)
	defer func() { require.NoError(t, r.Close()) }()
	out := make([]float32, 20*s.N)
	read := func(dst []byte, a, b int) error {
		copy(dst, fs.raw[a*s.Pixels():b*s.Pixels()])
		return nil
	}

	boom := errors.New("boom")
	err := r.Run(context.Background(), 0, 20, func(dst []byte, a, b int) error {
		if a >= 8 {
			return boom
		}
		return read(dst, a, b)
	}, out, nil)
	assert.ErrorIs(t, err, boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, r.Run(ctx, 0, 20, read, out, nil), context.Canceled)

	assert.ErrorContains(t, r.Run(context.Background(), 0, 20, read, out[:10], nil), "out32 holds 10 values")
	assert.ErrorContains(t, r.Run(context.Background(), 5, 4, read, out, nil), "frame range [5, 4)")

	// The runner still works after the failed runs.
	for i := range out {
		out[i] = float32(math.NaN())
	}
	require.NoError(t, r.Run(context.Background(), 0, 20, read, out, nil))
	checkResults(t, fs, s, 0, 20, func(i int) float64 { return float64(out[i]) })
}

func TestErrorNamesDeviceAndCall(t *testing.T) {
	requireDevice(t)
	n, err := DeviceCount()
	require.NoError(t, err)
	s := randomStack(rand.New(rand.NewPCG(6, 6)), 1, 8, 8, false)
	_, err = NewRunner(RunnerConfig{Device: n, DType: dataset.Uint8, Pixels: s.Pixels(), NMasks: 1, Masks: s.Data})
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, n, ce.Device)
	assert.Equal(t, "cudaSetDevice", ce.Call)
	assert.Contains(t, err.Error(), fmt.Sprintf("cuda device %d: cudaSetDevice: ", n))
	assert.Empty(t, deviceMasks.m)
}

func TestPropertiesAndTimings(t *testing.T) {
	requireDevice(t)
	p, err := Properties(0)
	require.NoError(t, err)
	t.Logf("%+v", p)
	assert.NotEmpty(t, p.Name)
	assert.Positive(t, p.Multiprocessors)
	assert.Positive(t, p.TotalMemory)
	assert.GreaterOrEqual(t, p.Major, 8, "kernels are built for compute capability 8.0 and newer")

	for _, kind := range []CopyKind{HostToDevicePinned, DeviceToDevice} {
		d, err := CopyTime(0, kind, 1<<20, 2)
		require.NoError(t, err)
		assert.Positive(t, d)
	}
	_, err = CopyTime(0, CopyKind(9), 1<<20, 2)
	assert.ErrorContains(t, err, "invalid argument")

	s := randomStack(rand.New(rand.NewPCG(7, 7)), 4, 64, 64, false)
	r := newTestRunner(t, s, 16)
	defer func() { require.NoError(t, r.Close()) }()
	d, err := r.KernelTime(100, 2)
	require.NoError(t, err)
	assert.Positive(t, d)
}

// TestKernelsFloat32Precision is case 06 of ../shared/cases (LiberTEM #227): virtual
// detectors over (nearly) the whole of 4096x4096 uint16 frames and centre-of-mass moments,
// whose sums cancel, accumulated in float32. The float results must be as precise as the
// CPU engine's (which adds its float sums of 1024-pixel blocks in double): sums within
// 2e-7 relative of the exact float64 sum (a float32 result's own rounding is up to 6e-8),
// the moments within 2e-7 of Σ|w·x|, and the centre-of-mass shifts within 1e-3 px. With
// float64 accumulation they agree to 1e-12. The disk of radius 100 also runs as a sparse
// (CSR) stack. Both dense kernels (streaming and tiled) run.
func TestKernelsFloat32Precision(t *testing.T) {
	requireDevice(t)
	const s, n = 4096, 4
	rng := rand.New(rand.NewPCG(227, 6))
	fs := frameSet{raw: make([]byte, n*s*s*2), vals: make([]float64, n*s*s)}
	shifts := [n][2]float64{{0, 0}, {3.5, -2}, {-7.25, 5.5}, {11, 11}}
	for f := range n {
		for y := range s {
			for x := range s {
				v := uint16(rng.IntN(4096))
				dy, dx := float64(y)-2048-shifts[f][0], float64(x)-2048-shifts[f][1]
				if dy*dy+dx*dx <= 80*80 {
					v = 60000 // the beam
				}
				i := (f*s+y)*s + x
				binary.NativeEndian.PutUint16(fs.raw[2*i:], v)
				fs.vals[i] = float64(v)
			}
		}
	}
	disk := func(r0, r1 float64) func(y, x int) float32 {
		return func(y, x int) float32 {
			r2 := float64((y-2048)*(y-2048) + (x-2048)*(x-2048))
			if r2 > r0*r0 && r2 <= r1*r1 {
				return 1
			}
			return 0
		}
	}
	weights := []func(y, x int) float32{
		disk(-1, 3000), disk(200, 2900), disk(-1, 100),
		func(int, int) float32 { return 1 },
		func(y, _ int) float32 { return float32(y - 2048) },
		func(_, x int) float32 { return float32(x - 2048) },
	}
	stack := &masks.Stack{N: len(weights), SigY: s, SigX: s, Data: make([]float32, len(weights)*s*s)}
	for m, w := range weights {
		for y := range s {
			for x := range s {
				stack.Data[(m*s+y)*s+x] = w(y, x)
			}
		}
	}
	ref := make([][2]float64, n*stack.N) // exact sum, Σ|w·x|
	for f := range n {
		for m := range stack.N {
			w := stack.Mask(m)
			for i, x := range fs.vals[f*s*s : (f+1)*s*s] {
				ref[f*stack.N+m][0] += float64(w[i]) * x
				ref[f*stack.N+m][1] += math.Abs(float64(w[i]) * x)
			}
		}
	}
	run := func(t *testing.T, st *masks.Stack, f64 bool) []float64 {
		cfg := RunnerConfig{DType: dataset.Uint16, Pixels: st.Pixels(), NMasks: st.N, Masks: st.Data, Float64: f64}
		if st.N == 1 {
			cfg.Sparse = st.ToCSR()
		}
		r, err := NewRunner(cfg)
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close()) }()
		read := func(dst []byte, a, b int) error { copy(dst, fs.raw[a*s*s*2:b*s*s*2]); return nil }
		got := make([]float64, n*st.N)
		if f64 {
			require.NoError(t, r.Run(context.Background(), 0, n, read, nil, got))
			return got
		}
		out := make([]float32, n*st.N)
		require.NoError(t, r.Run(context.Background(), 0, n, read, out, nil))
		for i, v := range out {
			got[i] = float64(v)
		}
		return got
	}
	check := func(t *testing.T, got []float64, tol float64) {
		for f := range n {
			for m := range stack.N {
				want, abs := ref[f*stack.N+m][0], ref[f*stack.N+m][1]
				assert.LessOrEqual(t, math.Abs(got[f*stack.N+m]-want), tol*abs, "frame %d mask %d: got %.9g, want %.9g", f, m, got[f*stack.N+m], want)
			}
			for k := range 2 {
				sh, want := got[f*stack.N+4+k]/got[f*stack.N+3], ref[f*stack.N+4+k][0]/ref[f*stack.N+3][0]
				assert.InDelta(t, want, sh, 1e-3, "frame %d: centre-of-mass shift %d", f, k)
			}
		}
	}
	bothDenseKernels(t, "dense", func(t *testing.T) {
		check(t, run(t, stack, false), 2e-7)
		check(t, run(t, stack, true), 1e-12)
	})
	t.Run("sparse disk r100", func(t *testing.T) {
		one := &masks.Stack{N: 1, SigY: s, SigX: s, Data: stack.Data[2*s*s : 3*s*s]}
		for _, f64 := range []bool{false, true} {
			got := run(t, one, f64)
			for f := range n {
				want, tol := ref[f*stack.N+2][0], map[bool]float64{false: 2e-7, true: 1e-12}[f64]
				assert.LessOrEqual(t, math.Abs(got[f]-want), tol*want, "float64 %v, frame %d: got %.9g, want %.9g", f64, f, got[f], want)
			}
		}
	})
}

// TestKernelsLoPairs: float64 weights (random, not float32-exact) run as a LoPairs stack,
// dense and sparse, on uint16 and float32 frames, give their float64 products to 1e-12 of
// Σ|w·x|, where their float32 rounding is off by far more.
func TestKernelsLoPairs(t *testing.T) {
	requireDevice(t)
	rng := rand.New(rand.NewPCG(48, 2))
	const sy, sx, nFrames = 64, 64, 40
	p := sy * sx
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		for _, sparse := range []bool{false, true} {
			fs := randomFrames(rng, dt, nFrames, p)
			w := make([]float64, 3*p)
			for i := range w {
				if !sparse || rng.Float64() < 0.05 {
					w[i] = rng.NormFloat64()
				}
			}
			stack, err := masks.New64(3, sy, sx, w, nil)
			require.NoError(t, err)
			pairs := stack.LoPairs()
			cfg := RunnerConfig{DType: dt, Pixels: p, NMasks: pairs.N, Masks: pairs.Data, Float64: true, LoPairs: true, TileFrames: 16}
			if sparse {
				cfg.Sparse = pairs.ToCSR()
			}
			r, err := NewRunner(cfg)
			require.NoError(t, err)
			out := make([]float64, nFrames*3)
			read := func(dst []byte, a, b int) error {
				copy(dst, fs.raw[a*p*dt.Size():b*p*dt.Size()])
				return nil
			}
			require.NoError(t, r.Run(context.Background(), 0, nFrames, read, nil, out))
			require.NoError(t, r.Close())
			for f := range nFrames {
				for m := range 3 {
					var want, abs float64
					for i, x := range fs.vals[f*p : (f+1)*p] {
						want += w[m*p+i] * x
						abs += math.Abs(w[m*p+i] * x)
					}
					require.InDelta(t, want, out[f*3+m], 1e-12*abs, "%s sparse %v frame %d mask %d", dt, sparse, f, m)
				}
			}
		}
	}
}
