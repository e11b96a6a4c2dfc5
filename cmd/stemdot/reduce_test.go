package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

func TestSumCommand(t *testing.T) {
	mib := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	frames, sigY, sigX := mibFrames(t, mib)
	dir := t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	stdout, stderr, code := run(t, "sum", mib, "--out", out("sum.npy"), "--mean", out("mean.npy"), "--max", out("max.npy"),
		"--std", out("std.npy"), "--png", out("img"), "--cpus", "1")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "9 frames")
	n := float64(len(frames))
	want := map[string][]float64{}
	for _, name := range []string{"sum", "mean", "max", "std"} {
		want[name] = make([]float64, sigY*sigX)
	}
	for i := range sigY * sigX {
		var s, m float64
		for _, f := range frames {
			s += f[i]
			m = math.Max(m, f[i])
		}
		var ss float64
		for _, f := range frames {
			ss += (f[i] - s/n) * (f[i] - s/n)
		}
		want["sum"][i], want["mean"][i], want["max"][i], want["std"][i] = s, s/n, m, math.Sqrt(ss/n)
	}
	for name, w := range want {
		shape, got := readResult(t, out(name+".npy"))
		require.Equal(t, []int{sigY, sigX}, shape, name)
		require.InDeltaSlice(t, w, got, 1e-9, name)
		require.FileExists(t, out("img_"+name+".png"))
	}
	require.Equal(t, want["sum"], func() []float64 { _, s := readResult(t, out("sum.npy")); return s }(), "integer sums are exact")

	// --png alone computes the sum.
	_, stderr, code = run(t, "sum", mib, "--png", out("only"), "-q")
	require.Zero(t, code, stderr)
	require.FileExists(t, out("only_sum.png"))
	require.NoFileExists(t, out("only_max.png"))
}

func TestSumCommandErrors(t *testing.T) {
	mib := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--gpus", "1", "--out", filepath.Join(dir, "s.npy")}, `stemdot: --gpus "1": reductions (sum, mean, max, std) run on CPU workers only`},
		{nil, "stemdot: no output: give --out (the sum frame), --mean, --max, --std or --png"},
		{[]string{"--out", filepath.Join(dir, "s.npy"), "--max", filepath.Join(dir, "s.npy")}, "are the same file"},
		{[]string{"--std", filepath.Join(dir, "std.txt")}, "--std " + filepath.Join(dir, "std.txt") + ": results are written as NPY"},
		{[]string{"--out", filepath.Join(dir, "s.npy"), "--mean", filepath.Join(dir, "missing", "m.npy")}, "--mean"},
		{[]string{"--out", filepath.Join(dir, "s.npy"), "--com-shifts", "x.npy"}, "unknown flag: --com-shifts"},
	} {
		_, stderr, code := run(t, append([]string{"sum", mib}, c.args...)...)
		require.Equal(t, 1, code, c.args)
		require.Contains(t, stderr, c.msg, c.args)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "a refused run writes nothing: %v", c.args)
	}
}

func TestPickCommand(t *testing.T) {
	mib := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	frames, sigY, sigX := mibFrames(t, mib)
	dir := t.TempDir()
	out := filepath.Join(dir, "frames.npy")
	_, stderr, code := run(t, "pick", mib, "--at", "0,7", "--at", "0,2", "--out", out, "--png", filepath.Join(dir, "f"))
	require.Zero(t, code, stderr)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	require.Equal(t, []int{2, sigY, sigX}, r.Header.Descr.Shape)
	require.Equal(t, "'<u2'", r.Header.Descr.Type)
	var got []uint16
	require.NoError(t, r.Read(&got))
	for k, idx := range []int{7, 2} {
		for i, v := range frames[idx] {
			require.Equal(t, v, float64(got[k*sigY*sigX+i]), "frame %d pixel %d", idx, i)
		}
	}
	require.FileExists(t, filepath.Join(dir, "f_0_y0_x7.png"))
	require.FileExists(t, filepath.Join(dir, "f_1_y0_x2.png"))

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--at", "0,9", "--out", filepath.Join(dir, "x.npy")}, "stemdot: --at: scan position (0, 9) is outside the nav shape (1, 9): each coordinate runs from 0 to its size − 1"},
		{[]string{"--at", "3", "--out", filepath.Join(dir, "x.npy")}, "scan position (3) has 1 coordinate, but the nav shape (1, 9) has 2 axes: give Y,X"},
		{[]string{"--at", "0,x", "--out", filepath.Join(dir, "x.npy")}, `--at "0,x": want a scan position Y,X`},
		{[]string{"--out", filepath.Join(dir, "x.npy")}, "--at Y,X is required"},
	} {
		_, stderr, code := run(t, append([]string{"pick", mib}, c.args...)...)
		require.Equal(t, 1, code, c.args)
		require.Contains(t, stderr, c.msg, c.args)
		require.NoFileExists(t, filepath.Join(dir, "x.npy"))
	}
}
