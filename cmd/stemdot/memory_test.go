package main

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// planPeakRSS runs plan and returns its peak resident memory (getrusage ru_maxrss) in
// bytes. The child's peak counts this process's resident memory at the fork, so callers
// keep theirs small.
func planPeakRSS(t *testing.T, args ...string) int64 {
	t.Helper()
	cmd := exec.Command(stemdotBin, append([]string{"plan"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// writeStackNPY writes n masks of 32×32 weights, weight i being weight(i), as NPY of
// descr "<f4" or "<f8", through a small buffer.
func writeStackNPY(t *testing.T, path, descr string, n int, weight func(i int) float64) {
	t.Helper()
	head, err := stemnpy.Header(descr, []int{n, 32, 32})
	require.NoError(t, err)
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriter(f)
	_, err = w.Write(head)
	require.NoError(t, err)
	buf := make([]byte, 0, 1<<16)
	for i := range n * 32 * 32 {
		if descr == "<f4" {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(weight(i))))
		} else {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(weight(i)))
		}
		if len(buf) == cap(buf) || i == n*32*32-1 {
			_, err = w.Write(buf)
			require.NoError(t, err)
			buf = buf[:0]
		}
	}
	require.NoError(t, w.Flush())
}

// Item #17.10: a dense NPY mask stack is read into the stack's memory once, with no
// second copy of the file's array: loading it (plan --masks) raises the peak resident
// memory by less than 1.3× the file's size over a one-disk plan (028a1ad: 3.45×, npyio's
// byte buffer, its decoded array, and the CSR form started before the stack proved
// dense). Float32 weights are read straight into the stack; float64 weights become their
// float32 roundings and rests (Lo), as many bytes as the file.
func TestLoadMasksOneCopy(t *testing.T) {
	dir := t.TempDir()
	scan := filepath.Join(dir, "scan.npy")
	_, stderr, code := run(t, "synth", "--out", scan, "--nav-shape", "2,2", "--sig-shape", "32,32", "--dtype", "uint16")
	require.Zero(t, code, stderr)
	baseline := planPeakRSS(t, scan, "--mask", "disk:16,16,4")
	for _, c := range []struct {
		descr  string
		n      int
		weight func(i int) float64
	}{
		{"<f4", 32768, func(i int) float64 { return float64(i%13 + 1) }},  // 128 MiB
		{"<f8", 8192, func(i int) float64 { return float64(i%13+1) / 3 }}, // 64 MiB, with Lo parts
	} {
		path := filepath.Join(dir, c.descr[1:]+".npy")
		writeStackNPY(t, path, c.descr, c.n, c.weight)
		st, err := os.Stat(path)
		require.NoError(t, err)
		grown := planPeakRSS(t, scan, "--masks", path) - baseline
		t.Logf("%s, %d MiB: peak RSS %.2f× the file above a one-disk plan's", c.descr, st.Size()>>20, float64(grown)/float64(st.Size()))
		require.Less(t, float64(grown), 1.3*float64(st.Size()), "%s: peak RSS grew by %d bytes for a file of %d", c.descr, grown, st.Size())
	}
}

// Item #17.11: a small job (8 frames, centre-of-mass masks, 2 workers) runs under
// ulimit -v 1.6 GiB, with the result of a run without limit. 028a1ad refused it below
// about 1.9 GiB: glibc gave threads that call C code a malloc arena each (64 MiB of
// address space apiece; now one arena under the limit), and the check kept 256 MiB of
// slack whatever the job (now it counts the run's threads and heap arenas).
func TestSmallJobUnderUlimit(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	args := []string{"apply", mib, "--nav-shape", "2,4", "--mask", "com", "--cpus", "2", "--oversubscribe", "-q"}
	want := filepath.Join(dir, "want.npy")
	_, stderr, code := run(t, append(args, "--out", want)...)
	require.Zero(t, code, stderr)
	got := filepath.Join(dir, "got.npy")
	cmd := exec.Command("bash", append([]string{"-c", `ulimit -v 1677721 && exec "$@"`, "x", stemdotBin}, append(args, "--out", got)...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, w := readResult(t, want)
	_, g := readResult(t, got)
	require.Equal(t, w, g)
}
