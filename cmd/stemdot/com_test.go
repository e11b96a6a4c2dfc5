package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// Item #18.6: stemdot com writes the CoM products of apply's --com-shifts, corrected by
// --flip-y and --rotation first; a frame summing to 0 is named in a warning.
func TestCOMCommand(t *testing.T) {
	dir := t.TempDir()
	shiftsFile := filepath.Join(dir, "s.npy")
	shifts := []float64{0, 1, 2, 0.5, -1, 3, 1, 1, 0.25, -2, 4, 0, math.NaN(), math.NaN(), 2, -1}
	require.NoError(t, npy.WriteFile(shiftsFile, []int{2, 4, 2}, shifts))
	o := func(name string) string { return filepath.Join(dir, name) }
	stdout, stderr, code := run(t, "com", shiftsFile, "--field", o("f.npy"), "--divergence", o("d.npy"), "--curl", o("c.npy"),
		"--magnitude", o("m.npy"), "--icom", o("i.npy"), "--png", o("p"), "--rotation", "90", "--flip-y")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape (2, 4)")
	require.Equal(t, "stemdot: warning: 1 of 8 scan positions have no finite CoM shift (NaN: frames summing to 0, or positions left out of an ROI), at (y, x) (1, 2): the iCoM reads them as 0; the magnitude, divergence and curl are NaN there, and the divergence and curl where their differences use them\n", stderr)
	// Flipped then rotated by 90°: (y, x) → (x, y).
	shape, field := readResult(t, o("f.npy"))
	require.Equal(t, []int{2, 4, 2}, shape)
	fy, fx := make([]float64, 8), make([]float64, 8)
	for i := range 8 {
		fy[i], fx[i] = shifts[2*i+1], shifts[2*i]
		require.InDelta(t, fy[i], field[2*i], 1e-12)
		require.InDelta(t, fx[i], field[2*i+1], 1e-12)
	}
	// divergence = ∂y/∂row + ∂x/∂column with 2 rows: one-sided along rows.
	_, div := readResult(t, o("d.npy"))
	for i := range 2 {
		for j := range 4 {
			dRow := fy[4+j] - fy[j]
			var dCol float64
			switch j {
			case 0:
				dCol = fx[i*4+1] - fx[i*4]
			case 3:
				dCol = fx[i*4+3] - fx[i*4+2]
			default:
				dCol = (fx[i*4+j+1] - fx[i*4+j-1]) / 2
			}
			want := dRow + dCol
			if math.IsNaN(want) {
				require.True(t, math.IsNaN(div[i*4+j]), "divergence at (%d, %d)", i, j)
			} else {
				require.InDelta(t, want, div[i*4+j], 1e-12, "divergence at (%d, %d)", i, j)
			}
		}
	}
	p, err := stemdot.NewCOMProducts(shifts, []int{2, 4}, stemdot.COMOptions{Rotation: 90, FlipY: true})
	require.NoError(t, err)
	_, icom := readResult(t, o("i.npy"))
	require.Equal(t, p.ICoM, icom)
	for _, name := range []string{"p_magnitude.png", "p_divergence.png", "p_curl.png", "p_icom.png"} {
		require.FileExists(t, o(name))
	}

	_, stderr, code = run(t, "com", shiftsFile)
	require.Equal(t, 1, code)
	require.Equal(t, "stemdot: no output: give --magnitude, --divergence, --curl, --icom, --field or --png\n", stderr)
	_, stderr, code = run(t, "com", shiftsFile, "--icom", shiftsFile)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "is an input of this run: not replacing it")
}

// The shifts of a real scan: apply --com-shifts, then com.
func TestCOMAfterApply(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	s := filepath.Join(dir, "s.npy")
	_, stderr, code := run(t, "apply", mib, "--nav-shape", "2,4", "--mask", "com", "--out", filepath.Join(dir, "r.npy"), "--com-shifts", s)
	require.Zero(t, code, stderr)
	_, stderr, code = run(t, "com", s, "--icom", filepath.Join(dir, "i.npy"), "-q")
	require.Zero(t, code, stderr)
	shape, icom := readResult(t, filepath.Join(dir, "i.npy"))
	require.Equal(t, []int{2, 4}, shape)
	sum := 0.0
	for _, v := range icom {
		sum += v
	}
	require.InDelta(t, 0, sum, 1e-9, "the iCoM has zero mean")
}
