package mib_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// The real MIB files of ../shared/data/mib, with what their frame headers and .hdr
// sidecars say. hdrNav is the nav shape LiberTEM's nav_shape_from_hdr gives: (ScanY,
// ScanX) when present, else (Frames in Acquisition / Frames per Trigger, Frames per
// Trigger); where that gives none (Frames per Trigger 1: 001), the rows of the frame
// timestamps, as RosettaSciIO 0.15 reads them (python/tests/test_formats.py compares).
// nav is the scan shape given in the data README (the acquisition's real one).
var realMIB = []struct {
	name     string
	sig      [2]int
	dt       dataset.DType
	frames   int
	maxValue uint32 // 2^counter depth - 1
	hdrNav   []int
	nav      []int
}{
	{"001_4x2_6bit.mib", [2]int{256, 256}, dataset.Uint8, 8, 63, []int{2, 4}, []int{2, 4}},
	{"002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", [2]int{128, 256}, dataset.Uint16, 8, 4095, []int{2, 4}, []int{2, 4}},
	{"Single_9_Frame_CounterDepth_1_Rows_256.mib", [2]int{256, 256}, dataset.Uint8, 9, 1, []int{1, 9}, []int{3, 3}},
	{"Single_9_Frame_CounterDepth_6_Rows_256.mib", [2]int{256, 256}, dataset.Uint8, 9, 63, []int{1, 9}, []int{3, 3}},
	{"Single_9_Frame_CounterDepth_12_Rows_256.mib", [2]int{256, 256}, dataset.Uint16, 9, 4095, []int{1, 9}, []int{3, 3}},
	{"Single_9_Frame_CounterDepth_24_Rows_256.mib", [2]int{256, 256}, dataset.Uint32, 9, 1<<24 - 1, []int{1, 9}, []int{3, 3}},
	{"Quad_9_Frame_CounterDepth_6_Rows_256.mib", [2]int{512, 512}, dataset.Uint8, 9, 63, []int{1, 9}, []int{3, 3}},
	{"Quad_9_Frame_CounterDepth_12_Rows_256.mib", [2]int{512, 512}, dataset.Uint16, 9, 4095, []int{1, 9}, []int{3, 3}},
}

// hostValues decodes host-order frames of dt into uint32 values.
func hostValues(b []byte, dt dataset.DType) []uint32 {
	n := len(b) / dt.Size()
	v := make([]uint32, n)
	for i := range v {
		switch dt.Size() {
		case 1:
			v[i] = uint32(b[i])
		case 2:
			v[i] = uint32(binary.NativeEndian.Uint16(b[2*i:]))
		case 4:
			v[i] = binary.NativeEndian.Uint32(b[4*i:])
		}
	}
	return v
}

func TestRealMIBFiles(t *testing.T) {
	for _, tc := range realMIB {
		t.Run(tc.name, func(t *testing.T) {
			path := testfiles.File(t, "mib/"+tc.name)
			d, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, "mib", d.Format())
			assert.Equal(t, path, d.Path())
			assert.Equal(t, tc.sig, d.SigShape())
			assert.Equal(t, tc.dt, d.DType())
			assert.Equal(t, tc.frames, d.NumFrames())
			assert.Equal(t, tc.hdrNav, d.NavShape(), "nav shape from the .hdr sidecar")
			assert.Equal(t, tc.sig[0]*tc.sig[1]*tc.dt.Size(), d.FrameBytes())

			want := testfiles.DecodeMIB(t, path).Frames
			require.Len(t, want, tc.frames)
			buf := make([]byte, tc.frames*d.FrameBytes())
			require.NoError(t, d.ReadFrames(0, tc.frames, buf))
			got := hostValues(buf, tc.dt)
			var maxSeen uint32
			nonzero := 0
			for i, w := range want {
				fr := got[i*len(w) : (i+1)*len(w)]
				require.Equal(t, w, fr, "frame %d", i)
				for _, v := range fr {
					maxSeen = max(maxSeen, v)
					if v != 0 {
						nonzero++
					}
				}
			}
			assert.LessOrEqual(t, maxSeen, tc.maxValue, "values fit the counter depth")
			assert.Positive(t, nonzero, "the file holds counts")

			// A sub-range read gives the same frames.
			sub := make([]byte, 2*d.FrameBytes())
			require.NoError(t, d.ReadFrames(tc.frames-2, tc.frames, sub))
			assert.Equal(t, buf[(tc.frames-2)*d.FrameBytes():], sub)

			// The README's scan shape overrides the .hdr's.
			d2, err := dataset.Open(path, dataset.Options{NavShape: tc.nav})
			require.NoError(t, err)
			assert.Equal(t, tc.nav, d2.NavShape())
			require.NoError(t, d2.Close())
		})
	}
}

func TestMIBHotPixel(t *testing.T) {
	path := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib")
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	buf := make([]byte, d.NumFrames()*d.FrameBytes())
	require.NoError(t, d.ReadFrames(0, d.NumFrames(), buf))
	v := hostValues(buf, d.DType())
	const row, col, sx = 39, 52, 256
	for f := range d.NumFrames() {
		frame := v[f*128*sx : (f+1)*128*sx]
		hot := frame[row*sx+col]
		for i, x := range frame {
			if i != row*sx+col {
				require.Less(t, 2*x, hot, "frame %d pixel (%d, %d) = %d is not far below the hot pixel %d", f, i/sx, i%sx, x, hot)
			}
		}
	}
}

func TestMIBHdrPathOpensMIB(t *testing.T) {
	hdr := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr")
	d, err := dataset.Open(hdr, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, strings.TrimSuffix(hdr, ".hdr")+".mib", d.Path())
	assert.Equal(t, []int{2, 4}, d.NavShape())
}

func TestMIBErrors(t *testing.T) {
	const stride = 384 + 256*128*2

	t.Run("truncated", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		require.NoError(t, os.WriteFile(path, raw[:len(raw)-100], 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, "the whole frames of a cut file are read")
		defer d.Close()
		assert.Equal(t, []int{1, 7}, d.NavShape())
		assert.Equal(t, []string{"the file ends inside frame 7 (65820 of its 65920 bytes are there): that frame is not read"}, dataset.Notes(d))
	})
	t.Run("no .hdr gives (1, n)", func(t *testing.T) {
		path, _ := frametest.CopyMIB(t, frametest.MIB002)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{1, 8}, d.NavShape())
		require.NoError(t, d.Close())
	})
	t.Run("middle frame header mismatch", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		// Frame 5's width field "0256" becomes "0255".
		copy(raw[5*stride+20:], "0255")
		require.NoError(t, os.WriteFile(path, raw, 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, "Open checks only the first and last headers")
		defer d.Close()
		buf := make([]byte, 8*d.FrameBytes())
		require.NoError(t, d.ReadFrames(0, 5, buf))
		require.NoError(t, d.ReadFrames(6, 8, buf))
		err = d.ReadFrames(3, 7, buf)
		require.Error(t, err)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), `frame 5: header mismatch between frames: width is "0255", frame 0 has "0256"`)
	})
	t.Run("middle frame without magic", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		copy(raw[2*stride:], "XQ1,")
		require.NoError(t, os.WriteFile(path, raw, 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer d.Close()
		err = d.ReadFrames(0, 8, make([]byte, 8*d.FrameBytes()))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "frame 2: header mismatch between frames")
	})
	t.Run("last frame header mismatch", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		copy(raw[7*stride+30:], "U08")
		require.NoError(t, os.WriteFile(path, raw, 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `frame 7: header mismatch between frames: pixel type is "U08", frame 0 has "U16"`)
	})
	t.Run("nav shape mismatch", func(t *testing.T) {
		path, _ := frametest.CopyMIB(t, frametest.MIB002) // without its .hdr: the file gives no scan shape
		d, err := dataset.Open(path, dataset.Options{NavShape: []int{3, 4}})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, []int{2, 4}, d.NavShape(), "the complete scan rows")
		assert.Equal(t, []string{"incomplete acquisition: nav shape (3, 4) (option nav_shape) has 12 positions but the file holds 8 frames: reading the 2 complete scan rows of 4 (nav shape (2, 4)); 4 positions are missing"}, dataset.Notes(d))
		_, err = dataset.Open(path, dataset.Options{NavShape: []int{1, 9}})
		assert.ErrorContains(t, err, "nav shape (1, 9) (option nav_shape) has 9 positions but the file holds 8 frames, less than one scan row of 9; give option nav_shape of at most 8 positions (e.g. 1,8)")
	})
	t.Run("nav shape contradicting the .hdr", func(t *testing.T) {
		// #17.5: the .hdr's ScanY=2, ScanX=4 and 8 frames; a nav shape of another number
		// of positions is refused, naming both; one of 8 positions reshapes the scan.
		path := testfiles.File(t, "mib/"+frametest.MIB002)
		hdr := strings.TrimSuffix(frametest.MIB002, ".mib") + ".hdr"
		for _, c := range []struct {
			nav       []int
			positions int
		}{{[]int{3, 4}, 12}, {[]int{4}, 4}, {[]int{1, 9}, 9}} {
			_, err := dataset.Open(path, dataset.Options{NavShape: c.nav})
			assert.EqualError(t, err, fmt.Sprintf("dataset: %s: nav shape %s (option nav_shape) has %d positions, but the file's scan shape (2, 4) from %s (ScanY=2, ScanX=4) has 8 and the file holds 8 frames: give option nav_shape of 8 positions (e.g. 2,4), or leave it out; option frames FIRST,COUNT reads part of the scan",
				path, stemnpy.ShapeString(c.nav), c.positions, hdr))
			assert.Equal(t, errs.Shape, errs.KindOf(err))
		}
		for _, nav := range [][]int{{8}, {4, 2}, {1, 8}} {
			d, err := dataset.Open(path, dataset.Options{NavShape: nav})
			require.NoError(t, err)
			assert.Equal(t, nav, d.NavShape())
			assert.Empty(t, dataset.Notes(d))
			require.NoError(t, d.Close())
		}
	})
	t.Run(".hdr nav shape mismatch", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		// Drop the last frame: the .hdr's ScanX=4, ScanY=2 no longer fits.
		require.NoError(t, os.WriteFile(path, raw[:7*stride], 0o644))
		hdr, err := os.ReadFile(testfiles.File(t, "mib/"+strings.TrimSuffix(frametest.MIB002, ".mib")+".hdr"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(strings.TrimSuffix(path, ".mib")+".hdr", hdr, 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{1, 4}, d.NavShape())
		assert.Equal(t, []string{"incomplete acquisition: nav shape (2, 4) from 002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr (ScanY=2, ScanX=4) has 8 positions but the file holds 7 frames: reading the 1 complete scan row of 4 (nav shape (1, 4)); 1 position is missing, and the 3 frames of the incomplete last row not read"}, dataset.Notes(d))
		require.NoError(t, d.Close())
		d, err = dataset.Open(path, dataset.Options{NavShape: []int{7}})
		require.NoError(t, err, "a user nav shape overrides the .hdr")
		assert.Equal(t, []int{7}, d.NavShape())
		require.NoError(t, d.Close())
	})
	t.Run("not a MIB", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.mib")
		require.NoError(t, os.WriteFile(path, []byte("hello, world"), 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `not a Merlin MIB frame header: it starts with "hell"`)
	})
}

func TestEmptyMIB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.mib")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	assert.EqualError(t, err, "dataset: "+path+": empty file (0 bytes): not a Merlin MIB file")
}
