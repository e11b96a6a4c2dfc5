package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
)

// A scan of planes end to end (#33): a 5-D NPY file (2, 3, 4, 5, 6) keeps its nav shape
// (2, 3, 4), as LiberTEM 0.16 does, in info, apply (the result, its sidecar, the com
// shift maps), --roi, --shifts, pick --at Z,Y,X, sum and --nav-shape Z,Y,X; the
// commands of 2-D scans (--png, descan fit, com, view) refuse it before any work,
// naming the --nav-shape that reads it as a 2-D scan; more than 3 nav axes are refused
// naming --nav-shape.
func TestScanOfPlanesCLI(t *testing.T) {
	const sy, sx = 5, 6
	frames := make([]float64, 24*sy*sx)
	for i := range frames {
		frames[i] = float64(i%23) + 1
	}
	dir := t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	path := out("planes.npy")
	require.NoError(t, stemnpy.WriteFile(path, []int{2, 3, 4, sy, sx}, frames))
	frame := func(f int) []float64 { return frames[f*sy*sx : (f+1)*sy*sx] }
	// ref is frame f's point:1,2 and com (sum, y and x moments about (3, 2)).
	ref := func(f int) []float64 {
		want := []float64{frame(f)[2*sx+1], 0, 0, 0}
		for i, v := range frame(f) {
			want[1] += v
			want[2] += float64(i/sx-sy/2) * v
			want[3] += float64(i%sx-sx/2) * v
		}
		return want
	}

	stdout, stderr, code := run(t, "info", path)
	require.Zero(t, code, stderr)
	require.Empty(t, stderr, "the file's nav shape, read without a word")
	require.Contains(t, stdout, "nav_shape:  (2, 3, 4)\n")

	masks := []string{"--mask", "point:1,2", "--mask", "com", "--float64"}
	shape, got, stderr := applyCase(t, append([]string{path, "--com-shifts", out("s.npy")}, masks...)...)
	require.Empty(t, stderr)
	require.Equal(t, []int{2, 3, 4, 4}, shape)
	sshape, shifts := readResult(t, out("s.npy"))
	require.Equal(t, []int{2, 3, 4, 2}, sshape)
	for f := range 24 {
		want := ref(f)
		require.Equal(t, want, got[4*f:4*f+4], "frame %d", f)
		require.InDelta(t, want[2]/want[1], shifts[2*f], 1e-12)
		require.InDelta(t, want[3]/want[1], shifts[2*f+1], 1e-12)
	}
	result := out("r.npy")
	_, stderr, code = run(t, append([]string{"apply", path, "--out", result, "-q"}, masks...)...)
	require.Zero(t, code, stderr)
	var side struct {
		Shape    []int `json:"shape"`
		NavShape []int `json:"nav_shape"`
	}
	b, err := os.ReadFile(out("r.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &side))
	require.Equal(t, []int{2, 3, 4, 4}, side.Shape)
	require.Equal(t, []int{2, 3, 4}, side.NavShape)

	// --nav-shape Z,Y,X reshapes a series, and Y,X reads the planes as one scan.
	series := out("series.npy")
	require.NoError(t, stemnpy.WriteFile(series, []int{24, sy, sx}, frames))
	for _, c := range []struct {
		file, nav string
		shape     []int
	}{{series, "2,3,4", []int{2, 3, 4, 4}}, {series, "(4, 3, 2)", []int{4, 3, 2, 4}}, {path, "6,4", []int{6, 4, 4}}} {
		shape, again, _ := applyCase(t, append([]string{c.file, "--nav-shape", c.nav}, masks...)...)
		require.Equal(t, c.shape, shape, c.nav)
		require.Equal(t, got, again, c.nav)
	}

	// --roi rect: the rectangle in every plane, NaN elsewhere; --shifts of nav_shape + (2,).
	shape, part, _ := applyCase(t, append([]string{path, "--roi", "rect:1,2,2,1"}, masks...)...)
	require.Equal(t, []int{2, 3, 4, 4}, shape)
	for f := range 24 {
		if f == 9 || f == 10 || f == 21 || f == 22 {
			require.Equal(t, ref(f), part[4*f:4*f+4], "frame %d", f)
		} else {
			require.True(t, math.IsNaN(part[4*f]), "frame %d outside the ROI", f)
		}
	}
	move := make([]float64, 48)
	for f := range 24 {
		move[2*f] = 1 // down a row: the point mask reads (y=3, x=1)
	}
	require.NoError(t, stemnpy.WriteFile(out("shifts.npy"), []int{2, 3, 4, 2}, move))
	shape, moved, _ := applyCase(t, path, "--mask", "point:1,2", "--shifts", out("shifts.npy"), "--float64")
	require.Equal(t, []int{2, 3, 4, 1}, shape)
	for f := range 24 {
		require.Equal(t, frame(f)[3*sx+1], moved[f], "frame %d", f)
	}

	// pick --at Z,Y,X, its PNG names; sum of every frame.
	stdout, stderr, code = run(t, "pick", path, "--at", "1,2,3", "--at", "0,1,0", "--out", out("picked.npy"), "--png", out("pick"))
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "2 frames")
	pshape, picked := readResult(t, out("picked.npy"))
	require.Equal(t, []int{2, sy, sx}, pshape)
	require.Equal(t, append(append([]float64{}, frame(23)...), frame(4)...), picked)
	require.FileExists(t, out("pick_0_z1_y2_x3.png"))
	require.FileExists(t, out("pick_1_z0_y1_x0.png"))
	_, stderr, code = run(t, "pick", path, "--at", "1,2", "--out", out("bad.npy"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--at: scan position (1, 2) has 2 coordinates, but the nav shape (2, 3, 4) has 3 axes: give Z,Y,X")
	_, stderr, code = run(t, "sum", path, "--out", out("sum.npy"), "-q")
	require.Zero(t, code, stderr)
	_, sum := readResult(t, out("sum.npy"))
	for p := range sy * sx {
		var s float64
		for f := range 24 {
			s += frame(f)[p]
		}
		require.Equal(t, s, sum[p], "pixel %d", p)
	}

	// Of 2-D scans only: refused before any output, naming the --nav-shape to give.
	const flat = "of 1-D and 2-D scans, not of nav shape (2, 3, 4): give --nav-shape 6,4 to read the scan as a 2-D one, its 2 planes one below the other"
	refuseCase(t, "--png: PNG images are "+flat, path, "--mask", "point:1,2", "--png", out("img"))
	require.NoFileExists(t, out("img_0_point.png"))
	_, stderr, code = run(t, "descan", "fit", path, "--out", out("fit.npy"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "descan fit: the plane is fitted in the scan positions "+flat)
	_, stderr, code = run(t, "com", out("s.npy"), "--magnitude", out("mag.npy"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "shape (2, 3, 4, 2) is the shift maps of a scan of planes (nav_z, nav_y, nav_x, 2): CoM products are of a 2-D scan")
	_, stderr, code = run(t, "view", path, "--no-browser")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "view: the virtual images are "+flat)

	// More than 3 nav axes.
	six := out("six.npy")
	require.NoError(t, stemnpy.WriteFile(six, []int{2, 1, 3, 4, sy, sx}, frames))
	refuseCase(t, "nav shape (2, 1, 3, 4) from the NPY shape has 4 axes: stemdot reads scans of 1 to 3 (N, Y,X or Z,Y,X): give --nav-shape of its 24 positions in at most 3 axes (e.g. 2,3,4)",
		six, "--mask", "point:1,2")
	shape, again, _ := applyCase(t, append([]string{six, "--nav-shape", "2,3,4"}, masks...)...)
	require.Equal(t, []int{2, 3, 4, 4}, shape)
	require.Equal(t, got, again)
	refuseCase(t, `--nav-shape "2,1,3,4": want Y,X, N or Z,Y,X, got 4 sizes`, six, "--nav-shape", "2,1,3,4", "--mask", "point:1,2")
}
