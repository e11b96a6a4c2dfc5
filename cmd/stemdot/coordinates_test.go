package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"
)

// coordinateFlags are the flags that take coordinates or shapes, by command, with the
// order their help and doc/coordinates.md state: "x first" or "y first".
var coordinateFlags = []struct{ cmd, flag, order string }{
	{"apply", "--mask", "x first"},
	{"apply", "--centre", "x first"},
	{"apply", "--roi", "x first"},
	{"apply", "--nav-shape", "y first"},
	{"apply", "--sig-shape", "y first"},
	{"apply", "--shift", "y first"},
	{"apply", "--shifts", "y first"},
	{"apply", "--com-shifts", "y first"},
	{"pick", "--at", "y first"},
	{"com", "--field", "y first"},
	{"descan fit", "--out", "y first"},
	{"synth", "--nav-shape", "y first"},
	{"synth", "--sig-shape", "y first"},
	{"live", "--nav-shape", "y first"},
}

// #35: doc/coordinates.md names every flag that takes coordinates with the order its
// --help states, and its worked example runs and gives what the page says.
func TestCoordinatesPage(t *testing.T) {
	b, err := os.ReadFile("../../doc/coordinates.md")
	require.NoError(t, err)
	page := string(b)
	for _, f := range coordinateFlags {
		row := regexp.MustCompile("(?m)^\\| `(?:" + f.cmd + " )?" + regexp.QuoteMeta(f.flag) + "[ `].*$").FindString(page)
		require.NotEmpty(t, row, "doc/coordinates.md has no table row for %s %s", f.cmd, f.flag)
		require.Contains(t, row, "**"+f.order+"**", "doc/coordinates.md on %s", f.flag)
		help, stderr, code := run(t, append(strings.Fields(f.cmd), "--help")...)
		require.Zero(t, code, stderr)
		line := regexp.MustCompile("(?m)^ +(?:-[a-zA-Z], )?" + regexp.QuoteMeta(f.flag) + " .*$").FindString(help)
		require.Contains(t, line, f.order, "stemdot %s --help on %s", f.cmd, f.flag)
	}

	// The worked example's commands, run in a directory of their own.
	block := regexp.MustCompile("(?s)## Worked example.*?```sh\n(.*?)```").FindStringSubmatch(page)
	require.Len(t, block, 2)
	dir := t.TempDir()
	ran := 0
	for _, line := range strings.Split(block[1], "\n") {
		line, _, _ = strings.Cut(line, "#")
		args := strings.Fields(line)
		if len(args) == 0 {
			continue
		}
		require.Equal(t, "stemdot", args[0], line)
		cmd := exec.Command(stemdotBin, args[1:]...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", line, out)
		ran++
	}
	require.Equal(t, 5, ran)

	read := func(name string, v any) []int {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, name))
		require.NoError(t, err)
		defer f.Close()
		r, err := npyio.NewReader(f)
		require.NoError(t, err)
		require.NoError(t, r.Read(v))
		return r.Header.Descr.Shape
	}
	var scan, frame []uint16
	require.Equal(t, []int{4, 6, 64, 64}, read("scan.npy", &scan))
	require.Equal(t, []int{1, 64, 64}, read("frame.npy", &frame))
	require.Equal(t, scan[11*64*64:12*64*64], frame, "--at 1,5: scan row 1, column 5, frame 11")

	shape, point := readResult(t, filepath.Join(dir, "point.npy"))
	require.Equal(t, []int{4, 6, 1}, shape)
	for f := range 24 {
		require.Equal(t, float64(scan[f*64*64+20*64+40]), point[f], "point:40,20 is column 40, row 20: frame[20, 40]")
	}

	var positions []int64
	read("roi_positions.npy", &positions)
	require.Equal(t, []int64{10, 11, 16, 17, 22, 23}, positions, "rect:4,1,2,3: scan columns 4..5, rows 1..3")

	cmd := exec.Command(stemdotBin, "apply", "scan.npy", "--mask", "disk:29,34,8", "--out", "same.npy", "-q")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, moved := readResult(t, filepath.Join(dir, "moved.npy"))
	_, same := readResult(t, filepath.Join(dir, "same.npy"))
	require.Equal(t, same, moved, "disk:32,32,8 moved by --shift 2,-3 (y first) is disk:29,34,8 (x first)")
	var lit float64
	for _, v := range same {
		lit += v
	}
	require.Positive(t, lit)
}
