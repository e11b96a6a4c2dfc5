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
//   - 67x67 frames (4489 pixels, not a multiple of 16 bytes): scalar loads, two chunks.
//
// 100 and 128 masks run two mask groups (100: zero padding).
func TestKernelsManyMasks(t *testing.T) {
	requireDevice(t)
	shapes := []struct{ sigY, sigX, frames, start, end, tileFrames int }{
		{16, 563, 300, 5, 297, 260},
		{67, 67, 150, 0, 150, 100},
	}
	for _, sh := range shapes {
		for _, dt := range gpuDTypes {
			for _, nm := range []int{16, 32, 64, 100, 128} {
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
// and 64 masks, 16 pixel chunks).
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
