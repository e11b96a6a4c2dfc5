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
