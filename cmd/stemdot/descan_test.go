package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
)

// descan fit writes the plane it prints at every scan position; apply --shifts with it
// flattens the centre-of-mass map of the scan whose disc moves across it.
func TestDescanFitAndApplyShifts(t *testing.T) {
	dir := t.TempDir()
	scan := filepath.Join(dir, "scan.npy")
	_, stderr, code := run(t, "synth", "--out", scan, "--nav-shape", "10,12", "--sig-shape", "48,48")
	require.Zero(t, code, stderr)
	shiftsFile := filepath.Join(dir, "shifts.npy")
	stdout, stderr, code := run(t, "descan", "fit", scan, "--out", shiftsFile, "--json", "--cpus", "1", "--com", "com:24,24,12")
	require.Zero(t, code, stderr)
	var fit struct {
		DY, DX   struct{ A, B, C float64 }
		NavShape []int `json:"nav_shape"`
		Used     int
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &fit))
	require.Equal(t, []int{10, 12}, fit.NavShape)
	require.Equal(t, 120, fit.Used)
	require.Greater(t, fit.DY.B, 0.1) // synth's disc moves down the rows and along them
	require.Greater(t, fit.DX.C, 0.1)
	shape, shifts := readResult(t, shiftsFile)
	require.Equal(t, []int{10, 12, 2}, shape)
	for y := range 10 {
		for x := range 12 {
			i := 2 * (y*12 + x)
			require.InDelta(t, fit.DY.A+fit.DY.B*float64(y)+fit.DY.C*float64(x), shifts[i], 1e-12)
			require.InDelta(t, fit.DX.A+fit.DX.B*float64(y)+fit.DX.C*float64(x), shifts[i+1], 1e-12)
		}
	}
	stdout, stderr, code = run(t, "descan", "fit", scan, "--reference", scan, "--out", shiftsFile, "--cpus", "1", "--com", "com:24,24,12")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "fitted 120 scan positions; shifts of nav shape (10, 12) → "+shiftsFile)

	spread := func(args ...string) float64 {
		com := filepath.Join(dir, "com.npy")
		_, stderr, code := run(t, append([]string{"apply", scan, "--mask", "com:24,24,12", "--out", filepath.Join(dir, "r.npy"), "--com-shifts", com, "--cpus", "1", "-q"}, args...)...)
		require.Zero(t, code, stderr)
		_, c := readResult(t, com)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range c {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi - lo
	}
	plain, corrected := spread(), spread("--shifts", shiftsFile)
	require.Greater(t, plain, 3.0)
	// Not flat to the noise: synth's background pulls the centre of mass towards the
	// frame's centre, so the fit (of the uncorrected map) underestimates the descan
	// (stemdot's TestDescanFitAndCorrect fits a scan without background exactly).
	require.Less(t, corrected, plain/4)

	// --shift DY,DX is the same shift for every scan position.
	constant := make([]float64, 240)
	for i := range constant {
		constant[i] = []float64{2.5, -1}[i%2]
	}
	require.NoError(t, stemnpy.WriteFile(shiftsFile, []int{10, 12, 2}, constant))
	a := filepath.Join(dir, "a.npy")
	b := filepath.Join(dir, "b.npy")
	_, stderr, code = run(t, "apply", scan, "--mask", "disk:24,24,6", "--shift", "2.5,-1", "--out", a, "-q")
	require.Zero(t, code, stderr)
	_, stderr, code = run(t, "apply", scan, "--mask", "disk:24,24,6", "--shifts", shiftsFile, "--out", b, "-q")
	require.Zero(t, code, stderr)
	_, ra := readResult(t, a)
	_, rb := readResult(t, b)
	require.Equal(t, ra, rb)

	require.NoError(t, stemnpy.WriteFile(shiftsFile, []int{12, 10, 2}, constant))
	nan := append([]float64{math.NaN()}, constant[1:]...)
	nanFile := filepath.Join(dir, "nan.npy")
	require.NoError(t, stemnpy.WriteFile(nanFile, []int{10, 12, 2}, nan))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shift", "1"}, `--shift "1": want DY,DX in pixels, e.g. 1.5,-2`},
		{[]string{"--shift", "1,x"}, `--shift "1,x": "x" is not a finite number`},
		{[]string{"--shift", "1,nan"}, `--shift "1,nan": "nan" is not a finite number`},
		{[]string{"--shift", "1,2", "--shifts", shiftsFile}, "--shift and --shifts are both given"},
		{[]string{"--shifts", shiftsFile}, "has shape (12, 10, 2), want nav_shape + (2,) = (10, 12, 2)"},
		{[]string{"--shifts", nanFile}, "the y shift of scan position 0 is NaN: shifts must be finite"},
	} {
		_, stderr, code := run(t, append([]string{"apply", scan, "--mask", "disk:24,24,6", "--out", a}, c.args...)...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, c.want, strings.Join(c.args, " "))
	}
	_, stderr, code = run(t, "descan", "fit", scan, "--out", filepath.Join(dir, "s.txt"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--out "+filepath.Join(dir, "s.txt")+": results are written as NPY")
	// Its inputs are never replaced: the scan, a reference scan, an ROI file.
	roi := filepath.Join(dir, "roi.npy")
	require.NoError(t, os.WriteFile(roi, []byte("not read: the check comes first"), 0o644))
	for _, args := range [][]string{{scan, "--out", scan}, {scan, "--reference", a, "--out", a}, {scan, "--roi", roi, "--out", roi}} {
		before, err := os.ReadFile(args[len(args)-1])
		require.NoError(t, err)
		_, stderr, code = run(t, append([]string{"descan", "fit"}, args...)...)
		require.Equal(t, 1, code, args)
		require.Contains(t, stderr, "is an input of this run", args)
		after, err := os.ReadFile(args[len(args)-1])
		require.NoError(t, err)
		require.Equal(t, before, after, args)
	}
}
