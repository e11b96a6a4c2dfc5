package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

var allDTypes = []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Uint32, dataset.Int32, dataset.Float32, dataset.Float64}

// reduceReference computes the sum, mean, max and std (ddof 0) frames of ds in float64
// with plain two-pass loops over ReadFrames, NaN propagating as in numpy.
func reduceReference(t *testing.T, ds dataset.Dataset) (sum, mean, mx, std []float64) {
	t.Helper()
	n, fb := ds.NumFrames(), ds.FrameBytes()
	px := ds.SigShape()[0] * ds.SigShape()[1]
	frames := make([]byte, n*fb)
	require.NoError(t, ds.ReadFrames(0, n, frames))
	sum, mean, mx, std = make([]float64, px), make([]float64, px), make([]float64, px), make([]float64, px)
	for i := range px {
		m := math.Inf(-1)
		for f := range n {
			v := pixel(frames, ds.DType(), f*px+i)
			sum[i] += v
			if math.IsNaN(v) || math.IsNaN(m) {
				m = math.NaN()
			} else {
				m = math.Max(m, v)
			}
		}
		mx[i] = m
		mean[i] = sum[i] / float64(n)
		var ss float64
		for f := range n {
			d := pixel(frames, ds.DType(), f*px+i) - mean[i]
			ss += d * d
		}
		std[i] = math.Sqrt(ss / float64(n))
	}
	return sum, mean, mx, std
}

// requireNear checks got against want: NaN where want is NaN, equal infinities, else
// within rel·scale[i] (exactly equal for rel 0).
func requireNear(t *testing.T, what string, got, want, scale []float64, rel float64) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i, w := range want {
		g := got[i]
		switch {
		case math.IsNaN(w):
			require.True(t, math.IsNaN(g), "%s pixel %d: got %v, want NaN", what, i, g)
		case math.IsInf(w, 0) || rel == 0:
			require.Equal(t, w, g, "%s pixel %d", what, i)
		default:
			require.LessOrEqual(t, math.Abs(g-w), rel*scale[i], "%s pixel %d: got %v, want %v", what, i, g, w)
		}
	}
}

// withNonFinite puts NaN, +Inf, -Inf and both infinities into pixels of a float dataset,
// in the first frame and in later ones.
func withNonFinite(ds *memDataset) {
	px := ds.sig[0] * ds.sig[1]
	set := func(f, i int, v float64) {
		b := ds.data[(f*px+i)*ds.dt.Size():]
		if ds.dt == dataset.Float32 {
			binary.NativeEndian.PutUint32(b, math.Float32bits(float32(v)))
		} else {
			binary.NativeEndian.PutUint64(b, math.Float64bits(v))
		}
	}
	n := ds.NumFrames()
	set(0, 0, math.NaN())
	set(n-1, 1, math.NaN())
	set(0, 2, math.Inf(1))
	set(n/2, 3, math.Inf(-1))
	set(1, 4, math.Inf(1))
	set(n-2, 4, math.Inf(-1))
}

func TestReduceMatchesReference(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(41, 42))
	sig := [2]int{9, 7}
	for _, dt := range allDTypes {
		for _, view := range []bool{false, true} {
			mem := randomDataset(rng, dt, []int{5, 11}, sig)
			if dt == dataset.Float32 || dt == dataset.Float64 {
				withNonFinite(mem)
			}
			var ds dataset.Dataset = mem
			if view {
				ds = viewDataset{mem}
			}
			sum, mean, mx, std := reduceReference(t, ds)
			scale := make([]float64, len(sum))
			for i := range scale {
				scale[i] = math.Abs(mean[i]) + std[i] + 1
			}
			var prog progressLog
			res, err := Reduce(context.Background(), ds, evenPlan(anyCPUs, 3, 55, 4), ReduceOptions{Sum: true, Mean: true, Max: true, Std: true, TileFrames: 3, NoPin: true, Progress: prog.record})
			require.NoError(t, err, dt)
			prog.check(t, 55)
			require.Equal(t, 55, res.Frames)
			require.Equal(t, sig, res.SigShape)
			exact := 0.0 // integer sums are exact
			if dt == dataset.Float32 || dt == dataset.Float64 {
				exact = 1e-13 * 55
			}
			requireNear(t, dt.String()+" sum", res.Sum, sum, scale, exact)
			requireNear(t, dt.String()+" mean", res.Mean, mean, scale, 1e-13)
			requireNear(t, dt.String()+" max", res.Max, mx, scale, 0)
			requireNear(t, dt.String()+" std", res.Std, std, scale, 1e-12)
			require.Equal(t, 55, res.Stats.Frames)
			require.Equal(t, 3, res.Stats.CPUWorkers)
		}
	}
}

// TestReduceOnlyWhatIsAsked checks each reduction alone: the others are nil, the one
// asked equals the reference.
func TestReduceOnlyWhatIsAsked(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	ds := randomDataset(rng, dataset.Uint16, []int{30}, [2]int{16, 16})
	sum, mean, mx, std := reduceReference(t, ds)
	scale := make([]float64, len(sum))
	for i := range scale {
		scale[i] = mean[i] + std[i]
	}
	plan := evenPlan(anyCPUs, 2, 30, 3)
	for _, c := range []struct {
		opt  ReduceOptions
		want []float64
		get  func(*Reduction) []float64
	}{
		{ReduceOptions{Sum: true}, sum, func(r *Reduction) []float64 { return r.Sum }},
		{ReduceOptions{Mean: true}, mean, func(r *Reduction) []float64 { return r.Mean }},
		{ReduceOptions{Max: true}, mx, func(r *Reduction) []float64 { return r.Max }},
		{ReduceOptions{Std: true}, std, func(r *Reduction) []float64 { return r.Std }},
	} {
		c.opt.NoPin = true
		res, err := Reduce(context.Background(), ds, plan, c.opt)
		require.NoError(t, err)
		requireNear(t, "asked", c.get(res), c.want, scale, 1e-13)
		n := 0
		for _, s := range [][]float64{res.Sum, res.Mean, res.Max, res.Std} {
			if s != nil {
				n++
			}
		}
		require.Equal(t, 1, n, "only what is asked: %+v", c.opt)
	}
}

// TestReduceStdStable checks the std of frames with a large offset and a small spread,
// where Σx² − (Σx)²/n in float64 loses every digit: values 1e9 + N(0, 1).
func TestReduceStdStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, dt := range []dataset.DType{dataset.Float64, dataset.Uint32} {
		ds := randomDataset(rng, dt, []int{200}, [2]int{4, 4})
		for i := range ds.NumFrames() * 16 {
			v := 1e9 + math.Round(rng.NormFloat64()*3)
			if dt == dataset.Float64 {
				binary.NativeEndian.PutUint64(ds.data[8*i:], math.Float64bits(v))
			} else {
				binary.NativeEndian.PutUint32(ds.data[4*i:], uint32(v))
			}
		}
		_, _, _, std := reduceReference(t, ds)
		res, err := Reduce(context.Background(), ds, evenPlan(anyCPUs, 3, 200, 5), ReduceOptions{Std: true, TileFrames: 7, NoPin: true})
		require.NoError(t, err)
		requireNear(t, dt.String()+" std", res.Std, std, std, 1e-8) // the means near 1e9 are held to 1.2e-7
	}
}

// TestReduceIntegerSumExact checks that uint32 sums beyond float64's 2⁵³ per worker
// stay exact up to the float64 result: 3 frames of 2³²−1 sum to an odd number < 2⁵³.
func TestReduceIntegerSumExact(t *testing.T) {
	ds := &memDataset{nav: []int{3}, sig: [2]int{1, 2}, dt: dataset.Uint32, data: make([]byte, 24)}
	for i := range 6 {
		binary.NativeEndian.PutUint32(ds.data[4*i:], math.MaxUint32-uint32(i))
	}
	res, err := Reduce(context.Background(), ds, evenPlan(anyCPUs, 1, 3, 1), ReduceOptions{Sum: true, Max: true, Std: true, NoPin: true})
	require.NoError(t, err)
	require.Equal(t, []float64{3*math.MaxUint32 - 6, 3*math.MaxUint32 - 9}, res.Sum)
	require.Equal(t, []float64{math.MaxUint32, math.MaxUint32 - 1}, res.Max)
	require.InDeltaSlice(t, []float64{math.Sqrt(8.0 / 3), math.Sqrt(8.0 / 3)}, res.Std, 1e-15)
}

func TestReduceValidation(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	ds := randomDataset(rng, dataset.Uint8, []int{10}, [2]int{4, 4})
	plan := evenPlan(anyCPUs, 1, 10, 1)
	_, err := Reduce(context.Background(), ds, plan, ReduceOptions{NoPin: true})
	require.ErrorContains(t, err, "nothing to compute")
	gpu := evenPlan(anyCPUs, 2, 10, 2)
	gpu.Workers[1].Kind, gpu.Workers[1].GPU = planner.GPU, 0
	_, err = Reduce(context.Background(), ds, gpu, ReduceOptions{Sum: true, NoPin: true})
	require.ErrorContains(t, err, "CPU workers only")
	_, err = Reduce(context.Background(), ds, evenPlan(anyCPUs, 1, 9, 1), ReduceOptions{Sum: true, NoPin: true})
	require.ErrorContains(t, err, "the dataset has 10 frames")
}

func TestReduceReadErrorAndCancel(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(49, 50))
	ds := randomDataset(rng, dataset.Uint16, []int{40}, [2]int{8, 8})
	ds.readErr, ds.errFrame = errors.New("disk on fire"), 25
	_, err := Reduce(context.Background(), ds, splitPlan(anyCPUs, 1, 20, 20), ReduceOptions{Sum: true, TileFrames: 4, NoPin: true})
	require.Regexp(t, `^worker 0 \(cpu 0\): frames \[2\d, \d\d\): memory dataset: frames \[24, 28\): disk on fire$`, err.Error())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cds := &cancellingDataset{memDataset: randomDataset(rng, dataset.Uint8, []int{1000}, [2]int{8, 8}), cancel: cancel, n: 5}
	_, err = Reduce(ctx, cds, evenPlan(anyCPUs, 2, 1000, 4), ReduceOptions{Std: true, TileFrames: 2, NoPin: true})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "reduce: stopped after")
}

// TestReduceStdHuge: the std of finite float64 frames is finite and right at any
// magnitude: pixels of values around 1e150 to 1e300 (where (x − mean)² overflows), of
// both signs up to ±1.7e308 (where x − mean overflows), beside a pixel whose first frame
// is ordinary and later ones huge, and ordinary pixels, with several workers and tiles;
// against a float64 two-pass reference on values scaled per pixel by a power of two
// (numpy's std of x·2⁻ᵉ, times 2ᵉ). Ordinary pixels keep the same sums and mean.
func TestReduceStdHuge(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	const frames, px = 40, 8
	ds := &memDataset{nav: []int{frames}, sig: [2]int{1, px}, dt: dataset.Float64, data: make([]byte, frames*px*8)}
	value := func(f, p int) float64 {
		switch p {
		case 0, 1, 2, 3: // 1e150, 1e200, 1e250, 1e300 with a spread of 10%
			return math.Pow(10, float64(150+50*p)) * (1 + 0.1*rng.NormFloat64())
		case 4: // both signs near the float64 limit
			return math.MaxFloat64 * (2*rng.Float64() - 1)
		case 5: // an ordinary first frame, the reference of the shifted sums, then huge
			if f == 0 {
				return 3
			}
			return 1e280 * rng.NormFloat64()
		case 6: // opposite signs from frame to frame
			return float64(1-2*(f%2)) * 1e300 * (1 + rng.Float64())
		}
		return 100 + rng.NormFloat64()
	}
	for f := range frames {
		for p := range px {
			ds.setFloat(f*px+p, value(f, p))
		}
	}
	want := make([]float64, px)
	for p := range px {
		c := 0.0
		for f := range frames {
			c = max(c, math.Abs(pixel(ds.data, dataset.Float64, f*px+p)))
		}
		_, e := math.Frexp(c)
		var mean, ss float64
		for f := range frames {
			mean += math.Ldexp(pixel(ds.data, dataset.Float64, f*px+p), -e)
		}
		mean /= frames
		for f := range frames {
			d := math.Ldexp(pixel(ds.data, dataset.Float64, f*px+p), -e) - mean
			ss += d * d
		}
		want[p] = math.Ldexp(math.Sqrt(ss/frames), e)
	}
	_, ordinaryMean, _, ordinaryStd := reduceReference(t, ds)
	for _, workers := range []int{1, 3} {
		res, err := Reduce(context.Background(), ds, evenPlan(anyCPUs, workers, frames, 5), ReduceOptions{Mean: true, Std: true, TileFrames: 3, NoPin: true})
		require.NoError(t, err)
		for p := range px {
			require.False(t, math.IsNaN(res.Std[p]) || math.IsInf(res.Std[p], 0), "pixel %d: std %v", p, res.Std[p])
			require.InEpsilon(t, want[p], res.Std[p], 1e-12, "pixel %d, %d workers", p, workers)
		}
		require.InEpsilon(t, ordinaryStd[7], res.Std[7], 1e-12)
		require.InEpsilon(t, ordinaryMean[7], res.Mean[7], 1e-14)
		require.InEpsilon(t, ordinaryMean[3], res.Mean[3], 1e-12)
	}
}
