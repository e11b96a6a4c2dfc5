package stemdot_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/descan"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/synth"
)

// descanScan writes a synthetic scan whose disc moves by a known plane across the scan
// (synth: the disc centre is (sig/2 + s·(2(i+0.5)/n − 1)) in continuous coordinates,
// pixel centres at +0.5) and returns its path and the plane of its centre-of-mass shifts
// about the com masks' reference point (sig/2).
func descanScan(t *testing.T, nav []int, sig [2]int, shift float64) (string, descan.Plane) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "descan.npy")
	_, err := synth.Write(context.Background(), path, synth.Options{NavShape: nav, SigShape: sig, Shift: new(shift), Background: new(1e-9), DiscCounts: new(400.0), Seed: 3})
	require.NoError(t, err)
	ny, nx := float64(nav[0]), float64(nav[1])
	return path, descan.Plane{
		Y: descan.Coeffs{A: -shift + shift/ny - 0.5, B: 2 * shift / ny},
		X: descan.Coeffs{A: -shift + shift/nx - 0.5, C: 2 * shift / nx},
	}
}

// DescanFit recovers the plane of a synthetic descan; applying the com masks with the
// fitted shifts leaves a flat centre-of-mass map where the plain one follows the descan.
func TestDescanFitAndCorrect(t *testing.T) {
	nav, sig := []int{12, 16}, [2]int{64, 64}
	path, want := descanScan(t, nav, sig, 5)
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	plan := stemdot.Plan{CPUs: "1"}
	got, err := stemdot.DescanFit(context.Background(), ds, "", plan)
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"y.A", got.Y.A, want.Y.A}, {"y.B", got.Y.B, want.Y.B}, {"y.C", got.Y.C, want.Y.C},
		{"x.A", got.X.A, want.X.A}, {"x.B", got.X.B, want.X.B}, {"x.C", got.X.C, want.X.C},
	} {
		require.InDelta(t, c.want, c.got, 0.02, c.name)
	}
	require.Equal(t, 12*16, got.Used)

	shifts, err := got.Eval(nav)
	require.NoError(t, err)
	stack, err := stemdot.Masks(sig, "com")
	require.NoError(t, err)
	spread := func(opt stemdot.ApplyOptions) float64 {
		res, err := stemdot.Apply(context.Background(), ds, stack, plan, opt)
		require.NoError(t, err)
		com, err := stemdot.COMShifts(res, 0)
		require.NoError(t, err)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range com {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi - lo
	}
	require.Greater(t, spread(stemdot.ApplyOptions{}), 8.0)             // ±(5 − 5/16) px in x
	require.Less(t, spread(stemdot.ApplyOptions{Shifts: shifts}), 0.25) // Poisson noise
}

// Per-scan-position shifts index the scan, also for a dataset opened with option frames;
// a constant shift is 2 values; LoadShifts reads NPY files of nav_shape + (2,).
func TestApplyShiftsScanPositions(t *testing.T) {
	nav, sig := []int{6, 5}, [2]int{32, 32}
	path, _ := descanScan(t, nav, sig, 3)
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	stack, err := stemdot.Masks(sig, "disk:16,16,5", "com")
	require.NoError(t, err)
	shifts := make([]float64, 60)
	for i := range shifts {
		shifts[i] = float64(i%7)*0.75 - 2
	}
	plan := stemdot.Plan{CPUs: "1"}
	full, err := stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{Shifts: shifts})
	require.NoError(t, err)
	part, err := stemdot.Open(path, stemdot.Options{Frames: dataset.FrameSpan{First: 5, Count: 11}})
	require.NoError(t, err)
	defer part.Close()
	res, err := stemdot.Apply(context.Background(), part, stack, plan, stemdot.ApplyOptions{Shifts: shifts})
	require.NoError(t, err)
	require.Equal(t, full.F32[5*4:16*4], res.F32)
	res, err = stemdot.Apply(context.Background(), part, stack, plan, stemdot.ApplyOptions{Shifts: shifts[10:32]})
	require.NoError(t, err)
	require.Equal(t, full.F32[5*4:16*4], res.F32, "shifts of the frames read")

	// One shift for all frames equals the same shift given per position.
	same := make([]float64, 60)
	for i := range same {
		same[i] = []float64{1.5, -0.25}[i%2]
	}
	a, err := stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{Shifts: same})
	require.NoError(t, err)
	b, err := stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{Shifts: []float64{1.5, -0.25}})
	require.NoError(t, err)
	require.Equal(t, a.F32, b.F32)

	dir := t.TempDir()
	file := filepath.Join(dir, "shifts.npy")
	require.NoError(t, npy.WriteFile(file, []int{6, 5, 2}, shifts))
	loaded, err := stemdot.LoadShifts(file, nav)
	require.NoError(t, err)
	require.Equal(t, shifts, loaded)
	f32 := make([]float32, 60)
	for i, v := range shifts {
		f32[i] = float32(v)
	}
	require.NoError(t, npy.WriteFile(file, []int{6, 5, 2}, f32))
	loaded, err = stemdot.LoadShifts(file, nav)
	require.NoError(t, err)
	require.Equal(t, shifts, loaded)

	for _, c := range []struct {
		shape []int
		data  any
		kind  errs.Kind
		want  string
	}{
		{[]int{5, 6, 2}, shifts, errs.Shape, "has shape (5, 6, 2), want nav_shape + (2,) = (6, 5, 2)"},
		{[]int{6, 5, 2}, append([]float64{0, 0, 0, math.NaN()}, make([]float64, 56)...), errs.Argument, "the x shift of scan position 1 is NaN: shifts must be finite"},
	} {
		require.NoError(t, npy.WriteFile(file, c.shape, c.data))
		_, err := stemdot.LoadShifts(file, nav)
		require.ErrorContains(t, err, c.want)
		require.Equal(t, c.kind, errs.KindOf(err))
	}
	header, err := npy.Header("<i4", []int{6, 5, 2})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, append(header, make([]byte, 240)...), 0o644))
	_, err = stemdot.LoadShifts(file, nav)
	require.ErrorContains(t, err, "has dtype '<i4', want float32 or float64")
	require.Equal(t, errs.DType, errs.KindOf(err))

	_, err = stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{Shifts: shifts[:10]})
	require.ErrorContains(t, err, "ApplyOptions.Shifts holds 10 values: want 2 (one shift dy, dx for every frame) or 2 per scan position, nav_shape (6, 5) + (2,) = 60 values")
	require.Equal(t, errs.Shape, errs.KindOf(err))
	_, err = stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{Shifts: []float64{0, math.Inf(1)}})
	require.ErrorContains(t, err, "ApplyOptions.Shifts: x shift 1 (scan position 0) is +Inf: shifts must be finite")
	require.Equal(t, errs.Argument, errs.KindOf(err))
}

// A descan fit of an ROI's frames (or a frames range's) is a plane in the whole scan's
// positions, fitted on the frames read only. com:auto weighs the frames about the
// centre of their sum frame: the same slopes, the offset relative to that centre.
func TestDescanFitROIAndAutoCom(t *testing.T) {
	nav, sig := []int{12, 16}, [2]int{64, 64}
	path, want := descanScan(t, nav, sig, 5)
	plan := stemdot.Plan{CPUs: "1"}
	roi, err := dataset.ParseROI("rect:2,1,9,8")
	require.NoError(t, err)
	for _, o := range []stemdot.Options{{ROI: roi}, {Frames: dataset.FrameSpan{First: 40, Count: 100}}} {
		ds, err := stemdot.Open(path, o)
		require.NoError(t, err)
		got, err := stemdot.DescanFit(context.Background(), ds, "com", plan)
		require.NoError(t, err)
		require.Equal(t, ds.NumFrames(), got.Used, "%+v", o)
		for _, c := range [][2]float64{{got.Y.A, want.Y.A}, {got.Y.B, want.Y.B}, {got.Y.C, want.Y.C},
			{got.X.A, want.X.A}, {got.X.B, want.X.B}, {got.X.C, want.X.C}} {
			require.InDelta(t, c[1], c[0], 0.03, "%+v", o)
		}
		auto, err := stemdot.DescanFit(context.Background(), ds, "com:auto", plan)
		require.NoError(t, err)
		centre, err := stemdot.Centre(context.Background(), ds, plan, nil)
		require.NoError(t, err)
		require.InDelta(t, got.Y.B, auto.Y.B, 1e-9)
		require.InDelta(t, got.X.C, auto.X.C, 1e-9)
		require.InDelta(t, got.Y.A+float64(sig[0]/2)-centre.Y, auto.Y.A, 1e-6, "offset about the centre found")
		require.InDelta(t, got.X.A+float64(sig[1]/2)-centre.X, auto.X.A, 1e-6)
		require.NoError(t, ds.Close())
	}
}
