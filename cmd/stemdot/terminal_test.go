package main

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// controls are the terminal control characters that no output of stemdot may carry raw:
// C0 but newline and tab, DEL, C1 (U+0080 to U+009F).
var controls = regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]")

// A file name with escape sequences (legal on Linux) reaches stdout, errors and warnings
// escaped (#33.6): it cannot recolour the terminal, clear it or set its title.
func TestOutputEscapesControlCharacters(t *testing.T) {
	dir := t.TempDir()
	name := "scan\x1b[31mRED\x1b]0;title\x07\u009b2J.npy"
	shown := `scan\x1b[31mRED\x1b]0;title\x07\u009b2J.npy`
	path := filepath.Join(dir, name)
	for _, tc := range []struct {
		args       []string
		code       int
		stream, ok string // "out" or "err", and a line it must hold
	}{
		{[]string{"synth", "--out", path, "--nav-shape", "4,4", "--sig-shape", "8,8"}, 0, "out", "wrote " + filepath.Join(dir, shown) + ": nav_shape (4, 4)"},
		{[]string{"info", path}, 0, "out", "file:       " + filepath.Join(dir, shown) + "\n"},
		{[]string{"info", path, "--sync-offset", "2"}, 0, "err", "stemdot: warning: " + filepath.Join(dir, shown) + ": sync offset 2: the first 2 frames"},
		{[]string{"info", path, "--nav-shape", "15"}, 1, "err", "stemdot: dataset: " + filepath.Join(dir, shown) + ": nav shape (15,)"},
		{[]string{"info", path + ".missing"}, 1, "err", filepath.Join(dir, shown) + ".missing: file does not exist"},
		{[]string{"apply", path, "--mask", "disk:4,4,2\x1b[1m", "--out", filepath.Join(dir, "r.npy")}, 1, "err", `disk:4,4,2\x1b[1m`},
	} {
		stdout, stderr, code := run(t, tc.args...)
		require.Equal(t, tc.code, code, "stemdot %q: %s", tc.args, stderr)
		require.False(t, controls.MatchString(stdout), "stemdot %q: stdout %q", tc.args, stdout)
		require.False(t, controls.MatchString(stderr), "stemdot %q: stderr %q", tc.args, stderr)
		require.Contains(t, map[string]string{"out": stdout, "err": stderr}[tc.stream], tc.ok, "stemdot %q", tc.args)
	}
}
