package stemdot_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// framesOf decodes every frame of ds with plain ReadFrames into float64, frame-major,
// independently of the engine.
func framesOf(t *testing.T, ds dataset.Dataset) [][]float64 {
	t.Helper()
	fb := ds.FrameBytes()
	buf := make([]byte, fb)
	var out [][]float64
	for f := range ds.NumFrames() {
		require.NoError(t, ds.ReadFrames(f, f+1, buf))
		px := make([]float64, fb/ds.DType().Size())
		for i := range px {
			b := buf[i*ds.DType().Size():]
			e := binary.NativeEndian
			switch ds.DType() {
			case dataset.Uint8:
				px[i] = float64(b[0])
			case dataset.Int8:
				px[i] = float64(int8(b[0]))
			case dataset.Uint16:
				px[i] = float64(e.Uint16(b))
			case dataset.Int16:
				px[i] = float64(int16(e.Uint16(b)))
			case dataset.Uint32:
				px[i] = float64(e.Uint32(b))
			case dataset.Int32:
				px[i] = float64(int32(e.Uint32(b)))
			case dataset.Float32:
				px[i] = float64(math.Float32frombits(e.Uint32(b)))
			case dataset.Float64:
				px[i] = math.Float64frombits(e.Uint64(b))
			}
		}
		out = append(out, px)
	}
	return out
}

// checkReduction compares red with two-pass float64 loops over frames: sums exact for
// integer frames, the rest within 1e-12 of |mean| + std.
func checkReduction(t *testing.T, red *stemdot.Reduction, frames [][]float64, intFrames bool) {
	t.Helper()
	n := float64(len(frames))
	require.Equal(t, len(frames), red.Frames)
	for i := range frames[0] {
		var sum float64
		mx := math.Inf(-1)
		for _, f := range frames {
			sum += f[i]
			if math.IsNaN(f[i]) || math.IsNaN(mx) {
				mx = math.NaN()
			} else {
				mx = math.Max(mx, f[i])
			}
		}
		mean := sum / n
		var ss float64
		for _, f := range frames {
			ss += (f[i] - mean) * (f[i] - mean)
		}
		std := math.Sqrt(ss / n)
		tol := 1e-12 * (math.Abs(mean) + std + 1)
		near := func(what string, got, want, tol float64) {
			if math.IsNaN(want) || math.IsInf(want, 0) {
				require.Equal(t, math.IsNaN(want), math.IsNaN(got), "%s pixel %d: got %v, want %v", what, i, got, want)
				if !math.IsNaN(want) {
					require.Equal(t, want, got, "%s pixel %d", what, i)
				}
				return
			}
			require.InDelta(t, want, got, tol, "%s pixel %d", what, i)
		}
		if red.Sum != nil {
			if intFrames {
				require.Equal(t, sum, red.Sum[i], "sum pixel %d", i)
			} else {
				near("sum", red.Sum[i], sum, tol*n)
			}
		}
		if red.Mean != nil {
			near("mean", red.Mean[i], mean, tol)
		}
		if red.Max != nil {
			near("max", red.Max[i], mx, 0)
		}
		if red.Std != nil {
			near("std", red.Std[i], std, tol)
		}
	}
}

func TestReduceRandomEveryDType(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Uint32, dataset.Int32, dataset.Float32, dataset.Float64} {
		nav, sig := []int{6, 7}, [2]int{5, 40}
		data := make([]byte, 42*200*dt.Size())
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if dt == dataset.Float32 || dt == dataset.Float64 { // normal values, then NaN and ±Inf pixels
			for i := range 42 * 200 {
				v := rng.NormFloat64() * 100
				switch i {
				case 3, 200*41 + 4:
					v = math.NaN()
				case 5, 200*7 + 6:
					v = math.Inf(1)
				case 200*9 + 6, 200*3 + 7:
					v = math.Inf(-1)
				}
				if dt == dataset.Float32 {
					binary.NativeEndian.PutUint32(data[4*i:], math.Float32bits(float32(v)))
				} else {
					binary.NativeEndian.PutUint64(data[8*i:], math.Float64bits(v))
				}
			}
		}
		ds, err := dataset.FromMemory(data, nav, sig, dt)
		require.NoError(t, err)
		red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{CPUs: "1", Oversubscribe: true, PartitionSize: "4KiB"}, stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Std: true})
		require.NoError(t, err, dt)
		require.Equal(t, sig, red.SigShape)
		checkReduction(t, red, framesOf(t, ds), dt != dataset.Float32 && dt != dataset.Float64)
		ds.Close()
	}
}

func TestReduceRealFiles(t *testing.T) {
	for _, c := range []struct {
		file string
		opt  stemdot.Options
	}{
		{"mib/001_4x2_6bit.mib", stemdot.Options{NavShape: []int{2, 4}}},
		{"mib/Single_9_Frame_CounterDepth_12_Rows_256.mib", stemdot.Options{}},
		{"mib/Quad_9_Frame_CounterDepth_6_Rows_256.mib", stemdot.Options{}},
		{"blo/test1.blo", stemdot.Options{}},
	} {
		path := testfiles.File(t, c.file)
		ds, err := stemdot.Open(path, c.opt)
		require.NoError(t, err, c.file)
		red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{GPUs: "auto"}, stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Std: true})
		require.NoError(t, err, c.file)
		checkReduction(t, red, framesOf(t, ds), true)
		require.Zero(t, red.Stats.GPUWorkers)
		ds.Close()
	}
}

func TestReduceErrors(t *testing.T) {
	ds, err := dataset.FromMemory(make([]byte, 4*16), []int{2, 2}, [2]int{4, 4}, dataset.Uint8)
	require.NoError(t, err)
	defer ds.Close()
	_, err = stemdot.Reduce(context.Background(), ds, stemdot.Plan{GPUs: "1"}, stemdot.ReduceOptions{Sum: true})
	require.ErrorContains(t, err, `Plan.GPUs "1": reductions (sum, mean, max, std) run on CPU workers only`)
	require.Equal(t, errs.Argument, errs.KindOf(err))
	_, err = stemdot.Reduce(context.Background(), ds, stemdot.Plan{}, stemdot.ReduceOptions{})
	require.ErrorContains(t, err, "nothing to reduce")
	require.Equal(t, errs.Argument, errs.KindOf(err))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = stemdot.Reduce(ctx, ds, stemdot.Plan{}, stemdot.ReduceOptions{Sum: true})
	require.Equal(t, errs.Cancelled, errs.KindOf(err))
}

func TestSaveReduction(t *testing.T) {
	data := make([]byte, 6*2*3)
	for i := range data {
		data[i] = byte(i)
	}
	ds, err := dataset.FromMemory(data, []int{6}, [2]int{2, 3}, dataset.Uint8)
	require.NoError(t, err)
	defer ds.Close()
	dir := t.TempDir()
	o := stemdot.Outputs{NPY: filepath.Join(dir, "sum.npy"), Max: filepath.Join(dir, "max.npy"), PNGPrefix: filepath.Join(dir, "img")}
	opt := stemdot.ReduceOptionsFor(o)
	require.Equal(t, stemdot.ReduceOptions{Sum: true, Max: true}, opt)
	red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{}, opt)
	require.NoError(t, err)
	require.NoError(t, stemdot.SaveReduction(red, o))
	var sum, mx []float64
	require.NoError(t, readNPYInto(filepath.Join(dir, "sum.npy"), &sum))
	require.NoError(t, readNPYInto(filepath.Join(dir, "max.npy"), &mx))
	// pixel i of frame f is 6f+i: sums 6i + 6·15·... = Σ_f (6f+i) = 90 + 6i, max 30 + i.
	require.Equal(t, []float64{90, 96, 102, 108, 114, 120}, sum)
	require.Equal(t, []float64{30, 31, 32, 33, 34, 35}, mx)
	for _, f := range []string{"img_sum.png", "img_max.png"} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	require.NoFileExists(t, filepath.Join(dir, "img_mean.png"))

	err = stemdot.SaveReduction(red, stemdot.Outputs{Std: filepath.Join(dir, "std.npy")})
	require.ErrorContains(t, err, "Outputs.Std "+filepath.Join(dir, "std.npy")+": the reduction holds no std frame")
	require.NoFileExists(t, filepath.Join(dir, "std.npy"))
	err = stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), Mean: filepath.Join(dir, "m.npy")}.Check([]string{"disk"})
	require.ErrorContains(t, err, "Outputs.Mean is an output of reductions")
	err = stemdot.Outputs{}.CheckReduction()
	require.ErrorContains(t, err, "no output")
}

func readNPYInto(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return npyio.Read(f, v)
}

// Frames.Pixels is exact for every pixel type, signs and extremes included.
func TestFramesPixels(t *testing.T) {
	cases := []struct {
		dt   dataset.DType
		put  func(b []byte, v float64)
		vals []float64
	}{
		{dataset.Uint8, func(b []byte, v float64) { b[0] = uint8(v) }, []float64{0, 1, 200, 255}},
		{dataset.Int8, func(b []byte, v float64) { b[0] = uint8(int8(v)) }, []float64{-128, -1, 0, 127}},
		{dataset.Int16, func(b []byte, v float64) { binary.NativeEndian.PutUint16(b, uint16(int16(v))) }, []float64{-32768, -3, 7, 32767}},
		{dataset.Uint32, func(b []byte, v float64) { binary.NativeEndian.PutUint32(b, uint32(v)) }, []float64{0, 1, 1 << 31, 1<<32 - 1}},
		{dataset.Int32, func(b []byte, v float64) { binary.NativeEndian.PutUint32(b, uint32(int32(v))) }, []float64{-1 << 31, -5, 5, 1<<31 - 1}},
		{dataset.Float32, func(b []byte, v float64) { binary.NativeEndian.PutUint32(b, math.Float32bits(float32(v))) }, []float64{-1.5, 0.25, 3e38, 1e-40}},
		{dataset.Float64, func(b []byte, v float64) { binary.NativeEndian.PutUint64(b, math.Float64bits(v)) }, []float64{-1e300, 1.0 / 3, 5e-324, 7}},
	}
	for _, c := range cases {
		size := c.dt.Size()
		data := make([]byte, 2*4*size) // 2 frames of 2×2
		for i, v := range c.vals {
			c.put(data[(4+i)*size:], v) // frame 1
		}
		ds, err := dataset.FromMemory(data, []int{2}, [2]int{2, 2}, c.dt)
		require.NoError(t, err)
		fr, err := stemdot.Pick(context.Background(), ds, [][]int{{1}, {0}})
		require.NoError(t, err)
		want := slices.Clone(c.vals)
		if c.dt == dataset.Float32 { // the values as stored: 3e38 rounded, 1e-40 subnormal
			for i, v := range want {
				want[i] = float64(float32(v))
			}
		}
		assert.Equal(t, want, fr.Pixels(0), c.dt.String())
		assert.Equal(t, []float64{0, 0, 0, 0}, fr.Pixels(1), c.dt.String())
		require.NoError(t, ds.Close())
	}
}

func TestPick(t *testing.T) {
	data := make([]byte, 12*2*2*2)
	for i := range 12 * 4 {
		binary.NativeEndian.PutUint16(data[2*i:], uint16(1000+i))
	}
	ds, err := dataset.FromMemory(data, []int{3, 4}, [2]int{2, 2}, dataset.Uint16)
	require.NoError(t, err)
	defer ds.Close()
	fr, err := stemdot.Pick(context.Background(), ds, [][]int{{2, 1}, {0, 0}})
	require.NoError(t, err)
	require.Equal(t, []int{9, 0}, fr.Indices)
	require.Equal(t, dataset.Uint16, fr.DType)
	require.Equal(t, data[9*8:10*8], fr.Data[:8])
	require.Equal(t, data[:8], fr.Data[8:])
	require.Equal(t, []float64{1036, 1037, 1038, 1039}, fr.Pixels(0))
	require.Equal(t, []float64{1000, 1001, 1002, 1003}, fr.Pixels(1))

	_, err = stemdot.Pick(context.Background(), ds, [][]int{{0, 0}, {3, 0}})
	require.EqualError(t, err, "Pick's positions: scan position (3, 0) is outside the nav shape (3, 4): each coordinate runs from 0 to its size − 1")
	require.Equal(t, errs.Shape, errs.KindOf(err))
	_, err = stemdot.Pick(context.Background(), ds, [][]int{{5}})
	require.ErrorContains(t, err, "scan position (5) has 1 coordinate, but the nav shape (3, 4) has 2 axes: give Y,X")
	require.Equal(t, errs.Shape, errs.KindOf(err))

	dir := t.TempDir()
	out := filepath.Join(dir, "frames.npy")
	require.NoError(t, stemdot.SaveFrames(fr, ds.NavShape(), out, filepath.Join(dir, "f")))
	var got []uint16
	require.NoError(t, readNPYInto(out, &got))
	require.Equal(t, []uint16{1036, 1037, 1038, 1039, 1000, 1001, 1002, 1003}, got)
	require.FileExists(t, filepath.Join(dir, "f_0_y2_x1.png"))
	require.FileExists(t, filepath.Join(dir, "f_1_y0_x0.png"))
}
