package stemdot_test

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
)

// sumFrame is the sum of every frame of ds in float64, by a plain loop over ReadFrames.
func sumFrame(t *testing.T, ds dataset.Dataset) []float64 {
	t.Helper()
	sig := ds.SigShape()
	sum := make([]float64, sig[0]*sig[1])
	buf := make([]byte, ds.FrameBytes())
	for f := range ds.NumFrames() {
		require.NoError(t, ds.ReadFrames(f, f+1, buf))
		for p := range sum {
			switch ds.DType() {
			case dataset.Uint8:
				sum[p] += float64(buf[p])
			case dataset.Uint16:
				sum[p] += float64(binary.NativeEndian.Uint16(buf[2*p:]))
			case dataset.Uint32:
				sum[p] += float64(binary.NativeEndian.Uint32(buf[4*p:]))
			default:
				t.Fatalf("dtype %s", ds.DType())
			}
		}
	}
	return sum
}

// boxCentre is an independent estimate of a whole disk: the 4-connected region of the
// raw frame above half way between its median and its maximum near the maximum of the
// frame smoothed by a 5×5 box (the disk, not a hot pixel); the centre of its bounding
// box and the radius of a disk of its area.
func boxCentre(frame []float64, sig [2]int) masks.Centre {
	sy, sx := sig[0], sig[1]
	smooth := func(y, x int) float64 {
		var s float64
		for yy := max(y-2, 0); yy <= min(y+2, sy-1); yy++ {
			for xx := max(x-2, 0); xx <= min(x+2, sx-1); xx++ {
				s += frame[yy*sx+xx]
			}
		}
		return s
	}
	peak := 0
	for i := range frame {
		if smooth(i/sx, i%sx) > smooth(peak/sx, peak%sx) {
			peak = i
		}
	}
	top := peak
	for y := max(peak/sx-2, 0); y <= min(peak/sx+2, sy-1); y++ {
		for x := max(peak%sx-2, 0); x <= min(peak%sx+2, sx-1); x++ {
			if frame[y*sx+x] > frame[top] {
				top = y*sx + x
			}
		}
	}
	blob := func(t float64) masks.Centre {
		seen := map[int]bool{top: true}
		queue := []int{top}
		x0, x1, y0, y1 := sx, 0, sy, 0
		for len(queue) > 0 {
			i := queue[0]
			queue = queue[1:]
			y, x := i/sx, i%sx
			x0, x1, y0, y1 = min(x0, x), max(x1, x), min(y0, y), max(y1, y)
			for _, d := range [][2]int{{0, 1}, {0, -1}, {1, 0}, {-1, 0}} {
				ny, nx := y+d[0], x+d[1]
				if j := ny*sx + nx; ny >= 0 && nx >= 0 && ny < sy && nx < sx && !seen[j] && frame[j] > t {
					seen[j] = true
					queue = append(queue, j)
				}
			}
		}
		return masks.Centre{X: float64(x0+x1) / 2, Y: float64(y0+y1) / 2, R: math.Sqrt(float64(len(seen)) / math.Pi)}
	}
	// Half way to the frame's median, then half way to the median of the ring from 1.5
	// to 2.5 radii around that blob (the disk's surroundings).
	c := blob((median(frame) + frame[top]) / 2)
	var ring []float64
	for i, v := range frame {
		if d := math.Hypot(float64(i%sx)-c.X, float64(i/sx)-c.Y); d >= 1.5*c.R && d <= 2.5*c.R {
			ring = append(ring, v)
		}
	}
	return blob((median(ring) + frame[top]) / 2)
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// saturatedChord is an independent estimate of a saturated disk cut by the frame's left
// or right edge: its vertical chords are whole, the longest (the diameter) gives the
// centre's column, the chord's middle row and half its length.
func saturatedChord(frame []float64, sig [2]int) masks.Centre {
	top := slices.Max(frame)
	var best masks.Centre
	var cols []float64
	for x := range sig[1] {
		run, start := 0, 0
		for y := 0; y <= sig[0]; y++ {
			if y < sig[0] && frame[y*sig[1]+x] >= top {
				run++
				continue
			}
			if l := float64(run) / 2; l > best.R+0.5 {
				best, cols = masks.Centre{Y: float64(start+y-1) / 2, R: l}, []float64{float64(x)}
			} else if l > best.R-0.5 {
				cols = append(cols, float64(x))
			}
			run, start = 0, y+1
		}
	}
	for _, c := range cols {
		best.X += c / float64(len(cols))
	}
	return best
}

func TestFindCentreRealFiles(t *testing.T) {
	for _, c := range []struct {
		file, ref string
		hdf5      bool
	}{
		{"mib/001_4x2_6bit.mib", "chord", false}, // a saturated disk cut by the left edge, in a bright halo
		{"blo/test1.blo", "box", false},          // a small direct beam among Bragg disks
		{"hdf5/fpd_file_test.hdf5", "box", true}, // a small direct beam inside a ring pattern
	} {
		t.Run(c.file, func(t *testing.T) {
			path := testfiles.File(t, c.file)
			if _, ok := stemdot.BuiltWithHDF5(); c.hdf5 && !ok {
				t.Skip("built without HDF5")
			}
			ds, err := stemdot.Open(path, stemdot.Options{})
			require.NoError(t, err)
			defer ds.Close()
			sum := sumFrame(t, ds)
			got, err := stemdot.FindCentre(sum, ds.SigShape())
			require.NoError(t, err)
			want := boxCentre(sum, ds.SigShape())
			if c.ref == "chord" {
				want = saturatedChord(sum, ds.SigShape())
			}
			t.Logf("found %+v, independent estimate %+v", got, want)
			require.InDelta(t, want.X, got.X, 1, "x")
			require.InDelta(t, want.Y, got.Y, 1, "y")
			require.InDelta(t, want.R, got.R, 1.5, "radius")
			// Centre: the same, from the engine's sum frame.
			viaSum, err := stemdot.Centre(context.Background(), ds, stemdot.Plan{CPUs: "1"}, nil)
			require.NoError(t, err)
			require.InDelta(t, got.X, viaSum.X, 1e-9)
			require.InDelta(t, got.Y, viaSum.Y, 1e-9)
			require.InDelta(t, got.R, viaSum.R, 1e-9)

			// The auto specs about it: the disk of its radius, and a ring.
			stack, err := stemdot.MasksCentred(ds.SigShape(), &got, "disk:auto", "ring:auto,40,60", "com:auto")
			require.NoError(t, err)
			ref, err := stemdot.Masks(ds.SigShape(), specf("disk", got.X, got.Y, got.R), specf("ring", got.X, got.Y, 40, 60), specf("com", got.X, got.Y))
			require.NoError(t, err)
			require.Equal(t, ref.Dense(), stack.Dense())
			require.Equal(t, ref.MaskNames(), stack.MaskNames())
		})
	}
	path := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib")
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	_, err = stemdot.FindCentre(sumFrame(t, ds), ds.SigShape())
	require.ErrorContains(t, err, "no bright disk", "dark frames with one hot pixel")
	require.Equal(t, errs.Argument, errs.KindOf(err))
	_, err = stemdot.Centre(context.Background(), ds, stemdot.Plan{GPUs: "auto"}, nil)
	require.ErrorContains(t, err, "the sum frame of "+path)
	require.ErrorContains(t, err, "no bright disk")
	require.Equal(t, errs.Argument, errs.KindOf(err))
	_, err = stemdot.FindCentre(make([]float64, 10), ds.SigShape())
	require.Equal(t, errs.Shape, errs.KindOf(err))
}

func specf(kind string, v ...float64) string {
	s := kind + ":"
	for i, x := range v {
		if i > 0 {
			s += ","
		}
		s += strconv.FormatFloat(x, 'g', -1, 64)
	}
	return s
}

func TestAutoMaskSpecs(t *testing.T) {
	sig := [2]int{64, 48}
	c := masks.Centre{X: 20.25, Y: 30.5, R: 7.5}
	for _, s := range []struct{ auto, explicit string }{
		{"disk:auto", "disk:20.25,30.5,7.5"},
		{"disk:auto,4", "disk:20.25,30.5,4"},
		{"ring:auto,9,15", "ring:20.25,30.5,9,15"},
		{"com:auto", "com:20.25,30.5"},
		{"com:auto,10", "com:20.25,30.5,10"},
	} {
		got, err := stemdot.MasksCentred(sig, &c, s.auto)
		require.NoError(t, err, s.auto)
		want, err := stemdot.Masks(sig, s.explicit)
		require.NoError(t, err)
		require.Equal(t, want.Dense(), got.Dense(), s.auto)
		require.True(t, masks.NeedsCentre(s.auto))
		require.False(t, masks.NeedsCentre(s.explicit))

		_, err = stemdot.Masks(sig, s.auto)
		require.ErrorContains(t, err, "auto needs the direct beam's centre, found from the scan's sum frame")
		require.Equal(t, errs.Argument, errs.KindOf(err))
	}
	for _, bad := range []struct{ spec, msg string }{
		{"point:auto", "only disk, ring and com masks take the direct beam's centre"},
		{"ring:auto,9", "got 1 arguments, want ring:auto,RI,RO"},
		{"disk:auto,x", `argument 1 "x" is not a finite number (disk:auto or disk:auto,R)`},
		{"com:auto,-2", "com: radius must be positive"},
	} {
		_, err := stemdot.MasksCentred(sig, &c, bad.spec)
		require.ErrorContains(t, err, bad.msg, bad.spec)
	}
}
