package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// #35: a new user's MIB file whose .hdr gives no scan shape (001_4x2_6bit: Frames per
// Trigger 1) is read in the 2 rows of 4 its frame timestamps show, so that the README's
// pick --at Y,X, com of apply's shift maps and --roi rect: work without --nav-shape.
func TestMIBNavShapeFromTimestampsCLI(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	frames, sy, sx := mibFrames(t, path)
	dir := t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	const guessed = "nav shape (2, 4) is guessed from the frame headers' timestamps"

	stdout, stderr, code := run(t, "info", path)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (2, 4)\n")
	require.Contains(t, stderr, guessed)
	require.Contains(t, stderr, "give --nav-shape if the scan is another")

	// pick --at 1,2: row 1, column 2, the file's frame 1·4+2.
	_, stderr, code = run(t, "pick", path, "--at", "1,2", "--out", out("frame.npy"))
	require.Zero(t, code, stderr)
	f, err := os.Open(out("frame.npy"))
	require.NoError(t, err)
	var picked []uint8
	require.NoError(t, npyio.Read(f, &picked))
	f.Close()
	require.Len(t, picked, sy*sx)
	for i, v := range picked {
		require.Equal(t, frames[6][i], float64(v), "pixel %d", i)
	}

	// apply's CoM shift maps are (2, 4, 2), and com takes them (a 1-row scan it refuses).
	_, stderr, code = run(t, "apply", path, "--cpus", "1", "-q", "--mask", "com:128,128", "--out", out("vd.npy"), "--com-shifts", out("shifts.npy"))
	require.Zero(t, code, stderr)
	shape, shifts := readResult(t, out("shifts.npy"))
	require.Equal(t, []int{2, 4, 2}, shape)
	stdout, stderr, code = run(t, "com", out("shifts.npy"), "--magnitude", out("mag.npy"))
	require.Zero(t, code, stderr)
	require.True(t, strings.Contains(stdout, "nav_shape (2, 4)"), stdout)
	shape, mag := readResult(t, out("mag.npy"))
	require.Equal(t, []int{2, 4}, shape)
	for p := range 8 {
		require.InDelta(t, math.Hypot(shifts[2*p], shifts[2*p+1]), mag[p], 1e-9, "position %d", p)
	}

	// --roi rect:1,0,2,2: columns 1..2 of rows 0..1, the file's frames 1, 2, 5, 6.
	_, stderr, code = run(t, "apply", path, "--cpus", "1", "-q", "--mask", "disk:128,128,20", "--roi", "rect:1,0,2,2", "--roi-compact", "--out", out("roi.npy"))
	require.Zero(t, code, stderr)
	shape, got := readResult(t, out("roi.npy"))
	require.Equal(t, []int{4, 1}, shape)
	ms := refMasks(sy, sx, 128, 128, 20, 0, 0)[:1]
	checkResult(t, got, [][]float64{frames[1], frames[2], frames[5], frames[6]}, ms)

	// --nav-shape still wins.
	stdout, stderr, code = run(t, "info", path, "--nav-shape", "4,2")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (4, 2)\n")
	require.NotContains(t, stderr, "timestamps")
}
