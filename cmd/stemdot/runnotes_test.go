//go:build !nohdf5

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/h5ref"
)

// Issue #33: after a run, the CLI prints what the DECTRIS reader counted in the frames
// the run read (its saturated pixels: values 65535 that pixel_mask does not flag), as it
// prints other warnings, once, counted over those frames only (apply, apply --frames,
// sum, pick, info --centre), and the sidecar records it.
func TestRunNotesPrinted(t *testing.T) {
	const ny, nx, sy, sx = 3, 4, 16, 16
	dir := t.TempDir()
	frames := make([]uint16, ny*nx*sy*sx)
	flagged := make([]uint8, sy*sx)
	flagged[2*sx+13] = 1
	counts := make([]int, ny*nx)
	for f := range ny * nx {
		px := frames[f*sy*sx : (f+1)*sy*sx]
		for y := range sy {
			for x := range sx {
				if (y-8)*(y-8)+(x-8)*(x-8) <= 16 {
					px[y*sx+x] = 900 // the direct beam
				} else {
					px[y*sx+x] = uint16(1 + (f+y*x)%7)
				}
			}
		}
		px[2*sx+13] = 65535
		for i := range f % 4 { // 0 to 3 saturated pixels at the beam's centre
			px[8*sx+7+i] = 65535
			counts[f]++
		}
	}
	master, err := h5ref.DECTRIS(dir, "scan", frames, ny*nx, sy, sx, flagged)
	require.NoError(t, err)
	note := func(frames ...int) string {
		n, k := 0, 0
		for _, f := range frames {
			n += counts[f]
			if counts[f] > 0 {
				k++
			}
		}
		return fmt.Sprintf("stemdot: warning: %s: saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the detector's count overflowed: %d, in %d of the frames read", master, n, k)
	}
	span := func(first, end int) []int {
		var s []int
		for f := first; f < end; f++ {
			s = append(s, f)
		}
		return s
	}
	noted := func(stderr string) []string {
		var lines []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "saturated pixels, kept") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	out := filepath.Join(dir, "r.npy")
	nav := fmt.Sprintf("%d,%d", ny, nx)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", master, "--nav-shape", nav, "--mask", "disk:8,8,4", "--out", out, "--cpus", "2"}, note(span(0, 12)...)},
		{[]string{"apply", master, "--nav-shape", nav, "--mask", "disk:auto", "--out", out, "--frames", "5,6"}, note(span(5, 11)...)},
		{[]string{"sum", master, "--nav-shape", nav, "--out", out, "--roi", "rect:1,0,2,3", "--cpus", "2"}, note(1, 2, 5, 6, 9, 10)},
		{[]string{"pick", master, "--nav-shape", nav, "--at", "0,3", "--at", "2,1", "--at", "0,3", "--out", out}, note(3, 9)},
		{[]string{"info", master, "--nav-shape", nav, "--centre"}, note(span(0, 12)...)},
	} {
		_, stderr, code := run(t, c.args...)
		require.Zero(t, code, stderr)
		assert.Equal(t, []string{c.want}, noted(stderr), "%v", c.args)
		if c.args[0] == "apply" {
			b, err := os.ReadFile(strings.TrimSuffix(out, ".npy") + ".json")
			require.NoError(t, err)
			var info struct {
				RunNotes []struct{ Warning string } `json:"run_notes"`
			}
			require.NoError(t, json.Unmarshal(b, &info))
			require.Len(t, info.RunNotes, 1)
			assert.Equal(t, strings.TrimPrefix(c.want, "stemdot: warning: "), info.RunNotes[0].Warning)
		}
	}
}
