package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// discScan writes an NPY scan of nav (3, 4) of 48×48 float32 frames, each a bright disk of
// radius r about (cx, cy) (pixel coverage by 8×8 sub-samples, 100 per pixel) on a
// background of 1, with a brightness that varies by frame.
func discScan(t *testing.T, cx, cy, r float64) string {
	const ny, nx, sy, sx, sub = 3, 4, 48, 48, 8
	frames := make([]float32, ny*nx*sy*sx)
	for f := range ny * nx {
		for y := range sy {
			for x := range sx {
				in := 0
				for i := range sub {
					for j := range sub {
						dy, dx := float64(y)-0.5+(float64(i)+0.5)/sub-cy, float64(x)-0.5+(float64(j)+0.5)/sub-cx
						if dy*dy+dx*dx <= r*r {
							in++
						}
					}
				}
				frames[(f*sy+y)*sx+x] = 1 + float32(100+f)*float32(in)/sub/sub
			}
		}
	}
	path := filepath.Join(t.TempDir(), "disc.npy")
	require.NoError(t, npy.WriteFile(path, []int{ny, nx, sy, sx}, frames))
	return path
}

// Item #18.2: info --centre finds the direct beam in the sum frame, and apply makes the
// auto specs about the same centre (or one given with --centre), recorded in the sidecar.
func TestCentreAndAutoSpecs(t *testing.T) {
	const cx, cy, r = 20.3, 26.6, 7.2
	scan := discScan(t, cx, cy, r)
	stdout, stderr, code := run(t, "info", scan, "--centre")
	require.Zero(t, code, stderr)
	var x, y, rr float64
	i := strings.Index(stdout, "centre:")
	require.GreaterOrEqual(t, i, 0, stdout)
	_, err := fmt.Sscanf(stdout[i:], "centre:     x %g, y %g, r %g px", &x, &y, &rr)
	require.NoError(t, err, stdout)
	require.InDelta(t, cx, x, 0.5)
	require.InDelta(t, cy, y, 0.5)
	require.InDelta(t, r, rr, 0.5)

	dir := t.TempDir()
	apply := func(out string, args ...string) (*stemdot.ResultInfo, []float64) {
		t.Helper()
		_, stderr, code := run(t, append([]string{"apply", scan, "--out", filepath.Join(dir, out), "--cpus", "1"}, args...)...)
		require.Zero(t, code, stderr)
		b, err := os.ReadFile(stemdot.SidecarPath(filepath.Join(dir, out)))
		require.NoError(t, err)
		var info stemdot.ResultInfo
		require.NoError(t, json.Unmarshal(b, &info))
		_, v := readResult(t, filepath.Join(dir, out))
		return &info, v
	}
	info, auto := apply("auto.npy", "--mask", "disk:auto", "--mask", "ring:auto,9,14", "--mask", "com:auto,10")
	c := info.Centre
	require.NotNil(t, c)
	require.Equal(t, "sum frame", c.Source)
	require.InDelta(t, x, c.X, 0.005) // info prints 2 decimals
	require.InDelta(t, y, c.Y, 0.005)
	require.InDelta(t, rr, c.R, 0.005)
	_, explicit := apply("explicit.npy", "--mask", fmt.Sprintf("disk:%v,%v,%v", c.X, c.Y, c.R),
		"--mask", fmt.Sprintf("ring:%v,%v,9,14", c.X, c.Y), "--mask", fmt.Sprintf("com:%v,%v,10", c.X, c.Y))
	require.Equal(t, explicit, auto)
	// The com masks within 10 px of the disk's centre: shifts of about 0 (the disk is centred there).
	for f := range 12 {
		sum, my, mx := auto[f*5+2], auto[f*5+3], auto[f*5+4]
		require.InDelta(t, 0, my/sum, 0.1)
		require.InDelta(t, 0, mx/sum, 0.1)
		beam := float64(100+f) * math.Pi * r * r
		require.InDelta(t, beam, auto[f*5], 0.1*beam, "frame %d: the auto disk holds the direct beam", f)
	}

	// With shifts, the centre at zero shift: found in the frames moved back by their
	// shifts, so that the masks moved by them hold the disk (here, where it is).
	info, shifted := apply("shifted.npy", "--mask", "disk:auto", "--shift", "2,-3")
	c = info.Centre
	require.Equal(t, "sum frame of the frames moved back by their shifts", c.Source)
	require.InDelta(t, cx+3, c.X, 0.5)
	require.InDelta(t, cy-2, c.Y, 0.5)
	_, explicit = apply("explicit-shifted.npy", "--mask", fmt.Sprintf("disk:%v,%v,%v", c.X, c.Y, c.R), "--shift", "2,-3")
	require.Equal(t, explicit, shifted)
	require.InDeltaSlice(t, auto[:1], shifted[:1], 0.02*auto[0])

	info, given := apply("given.npy", "--mask", "disk:auto,5", "--centre", "20,26,7")
	require.Equal(t, &stemdot.CentreInfo{X: 20, Y: 26, R: 7, Source: "given"}, info.Centre)
	_, want := apply("want.npy", "--mask", "disk:20,26,5")
	require.Equal(t, want, given)

	for _, bad := range []struct{ args []string }{
		{[]string{"--mask", "disk:20,26,5", "--centre", "20,26,7"}}, // no auto spec
		{[]string{"--mask", "disk:auto", "--centre", "20,26"}},
		{[]string{"--mask", "disk:auto", "--centre", "20,26,-1"}},
		{[]string{"--mask", "disk:auto", "--centre", "20,NaN,3"}},
	} {
		_, stderr, code := run(t, append([]string{"apply", scan, "--out", filepath.Join(dir, "bad.npy")}, bad.args...)...)
		require.Equal(t, 1, code, bad.args)
		require.Contains(t, stderr, "--centre", bad.args)
	}
	require.NoFileExists(t, filepath.Join(dir, "bad.npy"))
}

// #35: where the sum frame shows no disk (the TIA preview of 5 dark frames: pixel noise,
// column bands and a gradient, no beam), info --centre prints the info and a centre line
// saying why, exit status 2; apply's auto specs name --centre, and --centre makes them.
func TestCentreNotFound(t *testing.T) {
	path := testfiles.File(t, "ser/128x128x5-diffraction_preview_1.ser")
	stdout, stderr, code := run(t, "info", path, "--centre")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stdout, "sig_shape:  (128, 128)\ndtype:      int32\nframes:     5\n")
	require.Contains(t, stdout, "\ncentre:     not found: no bright disk stands out: the brightest region is 826 above the background 576, 3.8 times its noise (want 5 or more); nor binned 2×2 or more\n")
	require.Contains(t, stderr, "give apply --centre X,Y,R")
	stdout, stderr, code = run(t, "info", path, "--centre", "--json") // the info stands in JSON too
	require.Equal(t, 2, code, stderr)
	var info map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &info), stdout)
	require.Equal(t, float64(5), info["frames"])
	require.NotContains(t, info, "centre")

	out := filepath.Join(t.TempDir(), "vd.npy")
	_, stderr, code = run(t, "apply", path, "--mask", "disk:auto", "--out", out)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no bright disk stands out")
	require.True(t, strings.HasSuffix(strings.TrimSpace(stderr), "give --centre X,Y,R (e.g. from a look at stemdot sum --png)"), stderr)
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "no result written")
	_, stderr, code = run(t, "apply", path, "--mask", "disk:auto", "--centre", "64,64,10", "--out", out, "-q")
	require.Zero(t, code, stderr)

	// A random frame and a flat one are refused alike.
	dir := t.TempDir()
	noise, flat := make([]float32, 2*64*64), make([]float32, 2*64*64)
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range noise {
		noise[i], flat[i] = 100+float32(rng.NormFloat64()), 7
	}
	for name, frames := range map[string][]float32{"noise": noise, "flat": flat} {
		p := filepath.Join(dir, name+".npy")
		require.NoError(t, npy.WriteFile(p, []int{2, 64, 64}, frames))
		stdout, _, code := run(t, "info", p, "--centre")
		require.Equal(t, 2, code, name)
		require.Contains(t, stdout, "frames:     2\n")
		require.Contains(t, stdout, "\ncentre:     not found: no bright disk", name)
	}
}
