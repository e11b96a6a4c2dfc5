package main

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// synthFrames runs stemdot synth with args into a uint16 NPY of 4×5 frames of 32×32
// pixels and returns its frames' counts.
func synthFrames(t *testing.T, args ...string) [][]float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "s.npy")
	_, stderr, code := run(t, append([]string{"synth", "--out", out, "--nav-shape", "4,5", "--sig-shape", "32,32"}, args...)...)
	require.Zero(t, code, stderr)
	d, err := dataset.Open(out, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	buf := make([]byte, d.NumFrames()*d.FrameBytes())
	require.NoError(t, d.ReadFrames(0, d.NumFrames(), buf))
	frames := make([][]float64, d.NumFrames())
	for i := range frames {
		frames[i] = make([]float64, 32*32)
		for p := range frames[i] {
			frames[i][p] = float64(binary.NativeEndian.Uint16(buf[2*(i*32*32+p):]))
		}
	}
	return frames
}

// A model parameter given as 0 counts (#18 synth): --shift 0 makes a scan without
// descan (the disc's centre of mass is the frame centre at every position, where the
// default shift moves it by up to ±2.4 px), and --disc-counts 0 --ring-counts 0
// --background 0 one of zero counts only.
func TestSynthExplicitZeros(t *testing.T) {
	for i, frame := range synthFrames(t, "--shift", "0", "--disc-counts", "400", "--ring-counts", "0", "--background", "0") {
		var sum, sy, sx float64
		for p, c := range frame {
			y, x := float64(p/32)+0.5, float64(p%32)+0.5
			if math.Hypot(y-16, x-16) > 4+1.5 { // the disc: radius 32/8, one-pixel edge
				require.Zero(t, c, "frame %d pixel %d: no ring, no background", i, p)
			}
			sum, sy, sx = sum+c, sy+c*y, sx+c*x
		}
		assert.InDelta(t, 16, sy/sum, 0.2, "frame %d: y centre", i)
		assert.InDelta(t, 16, sx/sum, 0.2, "frame %d: x centre", i)
	}
	for i, frame := range synthFrames(t, "--disc-counts", "0", "--ring-counts", "0", "--background", "0") {
		require.Equal(t, make([]float64, 32*32), frame, "frame %d: no disc, ring or background", i)
	}
}
