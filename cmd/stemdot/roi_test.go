package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// --roi reads and computes the selected positions only: the result keeps the nav shape
// with NaN elsewhere (and so the COM shift maps), or, with --roi-compact, holds the
// selected rows and their positions beside.
func TestApplyROI(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	frames, sy, sx := mibFrames(t, path)
	cx, cy := float64(sx/2), float64(sy/2)
	ms := refMasks(sy, sx, cx, cy, 20, 40, 100)
	dir := t.TempDir()
	roi := filepath.Join(dir, "roi.npy")
	h, err := stemnpy.Header("|b1", []int{2, 4})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(roi, append(h, 0, 1, 1, 0, 1, 0, 0, 1), 0o644))
	selected := []int{1, 2, 4, 7}
	args := []string{"apply", path, "--nav-shape", "2,4", "--cpus", "1", "-q",
		"--mask", "disk:128,128,20", "--mask", "ring:128,128,40,100", "--mask", "com:128,128"}

	for _, spec := range []string{roi, "rect:1,0,2,2"} {
		want := selected
		if spec != roi {
			want = []int{1, 2, 5, 6}
		}
		out, shifts := filepath.Join(dir, "r.npy"), filepath.Join(dir, "s.npy")
		_, stderr, code := run(t, append(args, "--roi", spec, "--out", out, "--com-shifts", shifts, "--png", filepath.Join(dir, "img"))...)
		require.Zero(t, code, stderr)
		shape, got := readResult(t, out)
		require.Equal(t, []int{2, 4, 5}, shape)
		_, sh := readResult(t, shifts)
		var sel [][]float64
		for p := range 8 {
			if !slices.Contains(want, p) {
				for m := range 5 {
					require.True(t, math.IsNaN(got[p*5+m]), "position %d outside the ROI", p)
				}
				require.True(t, math.IsNaN(sh[2*p]) && math.IsNaN(sh[2*p+1]))
				continue
			}
			sel = append(sel, got[p*5:p*5+5])
			require.InDelta(t, got[p*5+3]/got[p*5+2], sh[2*p], 1e-9)
		}
		var flat []float64
		var ref [][]float64
		for i, p := range want {
			flat = append(flat, sel[i]...)
			ref = append(ref, frames[p])
		}
		checkResult(t, flat, ref, ms)

		_, stderr, code = run(t, append(args, "--roi", spec, "--roi-compact", "--out", out)...)
		require.Zero(t, code, stderr)
		shape, compact := readResult(t, out)
		require.Equal(t, []int{len(want), 5}, shape)
		require.Equal(t, flat, compact)
		f, err := os.Open(filepath.Join(dir, "r_positions.npy"))
		require.NoError(t, err)
		var pos []int64
		require.NoError(t, npyio.Read(f, &pos))
		f.Close()
		require.Len(t, pos, len(want))
		for i, p := range want {
			require.Equal(t, int64(p), pos[i])
		}
	}

	stdout, stderr, code := run(t, "info", path, "--nav-shape", "2,4", "--roi", roi)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (2, 4)\nroi:        "+roi+": 4 of 8 scan positions\n")
	require.Contains(t, stdout, "frames:     4\n")

	for _, c := range []struct{ args []string }{
		{[]string{"--roi", "rect:3,1,2,1"}},
		{[]string{"--roi-compact"}},
		{[]string{"--roi", "rect:1"}},
	} {
		_, stderr, code := run(t, append(append(args, "--out", filepath.Join(dir, "bad.npy")), c.args...)...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "--roi")
		require.NoFileExists(t, filepath.Join(dir, "bad.npy"))
	}
}

// The --roi and --shifts files are inputs of a run: no output replaces them.
func TestROIAndShiftsFilesAreInputs(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	roi, shifts := filepath.Join(dir, "roi.npy"), filepath.Join(dir, "shifts.npy")
	h, err := stemnpy.Header("|b1", []int{2, 4})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(roi, append(h, 0, 1, 1, 0, 1, 0, 0, 1), 0o644))
	require.NoError(t, stemnpy.WriteFile(shifts, []int{2, 4, 2}, make([]float64, 16)))
	for _, args := range [][]string{
		{"apply", path, "--mask", "disk:128,128,20", "--roi", roi, "--out", roi},
		{"apply", path, "--mask", "disk:128,128,20", "--shifts", shifts, "--out", shifts},
		{"apply", path, "--mask", "com", "--shifts", shifts, "--out", filepath.Join(dir, "r.npy"), "--com-shifts", shifts},
		{"sum", path, "--roi", roi, "--std", roi},
		{"pick", path, "--roi", roi, "--at", "0", "--out", roi},
	} {
		before := [2][]byte{}
		for i, f := range []string{roi, shifts} {
			before[i], err = os.ReadFile(f)
			require.NoError(t, err)
		}
		_, stderr, code := run(t, append(args, "--nav-shape", "2,4")...)
		require.Equal(t, 1, code, args)
		require.Contains(t, stderr, "is an input of this run", args)
		for i, f := range []string{roi, shifts} {
			after, err := os.ReadFile(f)
			require.NoError(t, err)
			require.Equal(t, before[i], after, args)
		}
	}
}
