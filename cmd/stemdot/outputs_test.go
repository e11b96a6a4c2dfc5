package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// Item #17.13: an output directory in which no file can be created (read-only; for
// root, whom permissions do not stop, /proc) is refused before the run, naming the flag,
// for each output; no output is written.
func TestUnwritableOutputDirectory(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	bad := "/proc"
	if os.Geteuid() != 0 {
		bad = filepath.Join(t.TempDir(), "ro")
		require.NoError(t, os.Mkdir(bad, 0o555))
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "r.npy")
	for _, c := range []struct{ args []string }{
		{[]string{"--out", filepath.Join(bad, "r.npy")}},
		{[]string{"--out", out, "--png", filepath.Join(bad, "img")}},
		{[]string{"--out", out, "--com-shifts", filepath.Join(bad, "s.npy")}},
	} {
		flag, path := c.args[len(c.args)-2], c.args[len(c.args)-1]
		if flag == "--png" {
			path += "_0_com_sum.png"
		}
		_, stderr, code := run(t, append([]string{"apply", mib, "--nav-shape", "2,4", "--mask", "com", "-q"}, c.args...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "stemdot: "+flag+": "+path+": cannot write in directory "+bad+": ")
		require.NoFileExists(t, out)
	}
}

// Item D10: a flag given an empty value (an output flag especially: --png "" wrote no PNG
// and said nothing) is refused, naming the flag; so is an output whose file name is only
// the extension (--out .npy wrote a hidden file named .npy) or a PNG prefix that names a
// directory. Nothing is written.
func TestEmptyAndNamelessOutputs(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	out := filepath.Join(dir, "r.npy")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", out, "--png", ""}, "--png is given an empty value: give a file name prefix, e.g. img for img_0_disk.png (see stemdot apply --help)"},
		{[]string{"--out", ""}, "--out is given an empty value: give a file name (see stemdot apply --help)"},
		{[]string{"--out", out, "--com-shifts", " "}, "--com-shifts is given an empty value: give a file name ending in .npy (see stemdot apply --help)"},
		{[]string{"--out", out, "--nav-shape", ""}, "--nav-shape is given an empty value: give a value (see stemdot apply --help)"},
		{[]string{"--out", out, "--masks", ""}, "--masks is given an empty value: give an NPY mask file (see stemdot apply --help)"},
		{[]string{"--out", out, "--cpus", ""}, "--cpus is given an empty value: give a count or a list (see stemdot apply --help)"},
		{[]string{"--out", filepath.Join(dir, ".npy")}, "--out " + dir + "/.npy: the file name is only the extension (a hidden file named .npy): give a name, e.g. " + dir + "/result.npy"},
		{[]string{"--out", out, "--com-shifts", filepath.Join(dir, ".NPY")}, "--com-shifts " + dir + "/.NPY: the file name is only the extension (a hidden file named .NPY): give a name, e.g. " + dir + "/shifts.npy"},
		{[]string{"--out", out, "--png", dir + "/"}, "--png " + dir + "/ names a directory, not a file name prefix: give one, e.g. " + dir + "/img"},
	} {
		_, stderr, code := run(t, append([]string{"apply", mib, "--nav-shape", "2,4", "--mask", "com", "-q"}, c.args...)...)
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "stemdot: "+c.want+"\n", stderr)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "%v wrote a file", c.args)
	}
	for _, c := range []struct{ out, want string }{
		{"", "--out is given an empty value: give a file name (see stemdot synth --help)"},
		{filepath.Join(dir, ".npy"), "--out " + dir + "/.npy: the file name is only the extension (a hidden file named .npy): give a name, e.g. " + dir + "/scan.npy"},
		{dir + "/", "--out " + dir + "/ names a directory: give a file name, e.g. " + dir + "/scan.npy"},
	} {
		_, stderr, code := run(t, "synth", "--out", c.out, "--nav-shape", "2,2", "--sig-shape", "8,8")
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "stemdot: "+c.want+"\n", stderr)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "synth --out %q wrote a file", c.out)
	}
}
