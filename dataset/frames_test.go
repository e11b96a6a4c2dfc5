package dataset_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

func TestSyncOffset(t *testing.T) {
	path, frames := frametest.GappedRaw(t, 10, 0, 0, 0)
	base := dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16}
	blank := make([]byte, 60)
	for _, c := range []struct {
		offset int
		nav    []int
		want   [][]byte
		mapped bool // MapFrames(from, to) serves the range
	}{
		{3, nil, frames[3:], true},
		{2, []int{2, 4}, frames[2:], true},
		{-2, []int{3, 4}, append([][]byte{blank, blank}, frames...), false},
		{-1, nil, append([][]byte{blank}, frames...), false},
	} {
		opt := base
		opt.SyncOffset, opt.NavShape = c.offset, c.nav
		d, err := dataset.Open(path, opt)
		require.NoError(t, err, "%+v", c)
		n := d.NumFrames()
		if c.nav != nil {
			assert.Equal(t, c.nav, d.NavShape())
		} else {
			assert.Equal(t, []int{1, len(c.want)}, d.NavShape())
		}
		got := make([]byte, n*60)
		for i := range got {
			got[i] = 0x55 // blank frames must be written, not left
		}
		require.NoError(t, d.ReadFrames(0, n, got))
		assert.Equal(t, bytes.Join(c.want[:n], nil), got, "%+v", c)
		// A range that straddles the inserted blank frames.
		require.NoError(t, d.ReadFrames(1, 4, got[:180]))
		assert.Equal(t, bytes.Join(c.want[1:4], nil), got[:180], "%+v", c)
		m, ok, err := d.(dataset.Mapper).MapFrames(0, 2)
		require.NoError(t, err)
		assert.Equal(t, c.mapped, ok, "%+v", c)
		if ok {
			assert.Equal(t, c.want[0], m.Mapping[m.Offset:m.Offset+60])
			assert.Equal(t, c.want[1], m.Mapping[m.Offset+m.Stride:m.Offset+m.Stride+60])
		}
		m, ok, err = d.(dataset.Mapper).MapFrames(3, 5)
		require.NoError(t, err)
		require.True(t, ok, "frames of the file are mapped: %+v", c)
		assert.Equal(t, c.want[3], m.Mapping[m.Offset:m.Offset+60])
		if v, isViewer := d.(dataset.Viewer); isViewer {
			require.Positive(t, c.offset, "only a pure shift views in place")
			b, err := v.ViewFrames(1, 3)
			require.NoError(t, err)
			assert.Equal(t, bytes.Join(c.want[1:3], nil), b)
		}
		assert.NotEmpty(t, dataset.Notes(d))
		_, _, err = d.(dataset.Mapper).MapFrames(0, n+1)
		assert.ErrorContains(t, err, "out of range")
		require.NoError(t, d.Close())
	}
	// The extremes of an int too: -s overflows for math.MinInt.
	for _, s := range []int{10, -10, math.MinInt, math.MinInt + 1, math.MaxInt} {
		opt := base
		opt.SyncOffset = s
		_, err := dataset.Open(path, opt)
		assert.EqualError(t, err, fmt.Sprintf("dataset: %s: sync offset %d (option sync_offset) is outside -9 to 9: the file holds 10 frames and at least one must be read", path, s))
		assert.Equal(t, errs.Argument, errs.KindOf(err))
	}
	// A raw file's frame count must match the nav shape exactly, sync offset included.
	opt := base
	opt.SyncOffset, opt.NavShape = 1, []int{2, 4}
	_, err := dataset.Open(path, opt)
	assert.ErrorContains(t, err, "nav shape (2, 4) (option nav_shape) has 8 positions but the file holds 10 frames (9 scan positions with sync offset 1)")
	// The notes count one frame as one, not "the first 1 frame".
	for s, want := range map[int]string{
		1:  "sync offset 1: the first frame of the file is skipped",
		2:  "sync offset 2: the first 2 frames of the file are skipped",
		-1: "sync offset -1: 1 blank frame is inserted before the first frame of the file, so scan position (0, 0) has no frame: it reads as a blank (all-zero) frame, which reductions (mean, std, max) leave out",
		-2: "sync offset -2: 2 blank frames are inserted before the first frame of the file, so scan positions (0, 0) to (0, 1) have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out",
	} {
		opt := base
		opt.SyncOffset = s
		d, err := dataset.Open(path, opt)
		require.NoError(t, err)
		assert.Equal(t, want, dataset.Notes(d)[0])
		require.NoError(t, d.Close())
	}
}

// A nav shape that contradicts the scan shape a file gives is refused, naming both
// (#17.5); one of as many positions, or of as many as the file holds frames, reshapes
// it. An NPY array of rank 3 gives no scan shape: any nav shape fits its frames.
func TestNavShapeAgainstTheFile(t *testing.T) {
	dir := t.TempDir()
	px := make([]byte, 6*2*3*2)
	for i := range px {
		px[i] = byte(i)
	}
	npy4 := filepath.Join(dir, "scan4.npy")
	require.NoError(t, os.WriteFile(npy4, frametest.NPYBytes("<u2", false, "(2, 3, 2, 3)", px), 0o644))
	npy3 := filepath.Join(dir, "scan3.npy")
	require.NoError(t, os.WriteFile(npy3, frametest.NPYBytes("<u2", false, "(6, 2, 3)", px), 0o644))
	empadXML, _, _ := frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 7, 4) // acquire scan (2, 3), 7 frames
	for _, c := range []struct {
		path    string
		nav     []int
		refusal string // "" when opened, with nav shape want
		want    []int
		note    string
	}{
		{npy4, []int{3, 2}, "", []int{3, 2}, ""},
		{npy4, []int{6}, "", []int{6}, ""},
		{npy4, []int{2, 2}, "nav shape (2, 2) (option nav_shape) has 4 positions, but the file's scan shape (2, 3) from the NPY shape has 6 and the file holds 6 frames: give option nav_shape of 6 positions (e.g. 2,3), or leave it out; option frames FIRST,COUNT reads part of the scan", nil, ""},
		{npy4, []int{7}, "nav shape (7,) (option nav_shape) has 7 positions, but the file's scan shape (2, 3)", nil, ""},
		{npy3, []int{1, 4}, "", []int{1, 4}, "the last 2 are surplus and not read"},
		{npy3, []int{2, 4}, "", []int{1, 4}, "incomplete acquisition"},
		{empadXML, []int{3, 2}, "", []int{3, 2}, "the last 1 are surplus"},
		{empadXML, []int{7}, "", []int{7}, ""},
		{empadXML, []int{2, 4}, "nav shape (2, 4) (option nav_shape) has 8 positions, but the file's scan shape (2, 3) from acquisition_v122.xml's acquire scan (scan_resolution_y=2, scan_resolution_x=3) has 6 and the file holds 7 frames: give option nav_shape of 6 positions (e.g. 2,3), or of 7 to read each of its frames as a scan position, or leave it out", nil, ""},
	} {
		d, err := dataset.Open(c.path, dataset.Options{NavShape: c.nav})
		if c.refusal != "" {
			assert.ErrorContains(t, err, c.refusal, "%s %v", c.path, c.nav)
			assert.Equal(t, errs.Shape, errs.KindOf(err))
			continue
		}
		require.NoError(t, err, "%s %v", c.path, c.nav)
		assert.Equal(t, c.want, d.NavShape(), "%s %v", c.path, c.nav)
		if c.note == "" {
			assert.Empty(t, dataset.Notes(d))
		} else {
			require.Len(t, dataset.Notes(d), 1)
			assert.Contains(t, dataset.Notes(d)[0], c.note)
		}
		require.NoError(t, d.Close())
	}
	// With a sync offset the frames the file holds from the first scan position count.
	d, err := dataset.Open(npy4, dataset.Options{NavShape: []int{5}, SyncOffset: 1})
	require.NoError(t, err)
	assert.Equal(t, []int{5}, d.NavShape())
	require.NoError(t, d.Close())
}

// keptScan is what the rules of frames.go keep of a file of whole frames read as nav
// shape nav with sync offset s and k flyback frames per scan row (lead of them before
// the row's positions), worked out position by position: position p is the file's frame
// s + lead + p + (p/nav_x)·k (blank where negative) and has a frame when that is below
// whole. A file with a frame for every position keeps nav, and so does one whose last
// positions have none because of a positive sync offset only (the file holds a frame
// for each from its first frame on: frame(n-1) - s < whole), those positions blank
// (frames holds their frame, at least whole, and missing is 0). Else a 1-D scan keeps
// the positions that have a frame, a scan of rows keeps its complete rows as (rows,
// nav_x), and a scan of planes its complete planes as (planes, nav_y, nav_x), or short
// of one the complete rows of its first as (1, rows, nav_x); kept is nil when not even
// one row is complete (refused). missing counts the positions without a frame.
func keptScan(whole int, nav []int, s, k, lead int) (kept, frames []int, missing int) {
	n, rowLen := 1, nav[len(nav)-1]
	for _, x := range nav {
		n *= x
	}
	frame := func(p int) int { return s + lead + p + p/rowLen*k }
	for p := range n {
		if frame(p) >= whole {
			missing++
		}
	}
	keep := n
	switch {
	case missing > 0 && s > 0 && frame(n-1)-s < whole:
		kept, missing = nav, 0
	case missing == 0:
		kept = nav
	case len(nav) == 1:
		keep = 0
		for keep < n && frame(keep) < whole {
			keep++
		}
		kept = []int{keep}
	default:
		rows := 0
		for rows < n/rowLen && frame((rows+1)*rowLen-1) < whole {
			rows++
		}
		if rows == 0 {
			return nil, nil, missing
		}
		keep, kept = rows*rowLen, []int{rows, rowLen}
		if len(nav) == 3 && rows >= nav[1] { // complete planes
			keep, kept = rows/nav[1]*nav[1]*rowLen, []int{rows / nav[1], nav[1], rowLen}
		} else if len(nav) == 3 { // the complete rows of the first plane
			kept = []int{1, rows, rowLen}
		}
	}
	for p := range keep {
		frames = append(frames, frame(p))
	}
	return kept, frames, missing
}

// Every nav shape rank, sync offset and stated flyback against the rules of frames.go
// (#17r D1: a 1-D nav shape longer than the file kept 1 position, not every frame
// there is): the nav shape kept, the file frame read at each position, and the number
// of missing positions the note gives.
func TestFramesKeptByNavShape(t *testing.T) {
	const whole = 24
	px := make([]byte, whole*6*2) // frames of 3×2 uint16 pixels; pixel 0 holds frame+1
	for f := range whole {
		binary.LittleEndian.PutUint16(px[f*12:], uint16(f+1))
	}
	path := filepath.Join(t.TempDir(), "frames.npy")
	require.NoError(t, os.WriteFile(path, frametest.NPYBytes("<u2", false, fmt.Sprintf("(%d, 3, 2)", whole), px), 0o644))
	navs := [][]int{{24}, {25}, {30}, {64}, {23}, {4, 6}, {5, 6}, {8, 4}, {64, 1}, {1, 30}, {2, 3, 4}, {2, 3, 5}, {3, 2, 5},
		{4, 5}, {5, 4}, {2, 11}, {2, 2, 5}}
	flybacks := []dataset.Flyback{{}, {Place: dataset.FlybackNone}, {Place: dataset.FlybackEnd, Frames: 1}, {Place: dataset.FlybackStart, Frames: 2}}
	for _, nav := range navs {
		rowLen, rows := nav[len(nav)-1], 1
		for _, x := range nav[:len(nav)-1] {
			rows *= x
		}
		for _, s := range []int{0, 1, 5, -1, -3} {
			for _, fl := range flybacks {
				k, lead := 0, 0
				name := fmt.Sprintf("nav %v sync offset %d flyback %v", nav, s, fl)
				// auto: refused for 3 or more rows when the frames from the first position
				// on are one more per row, as nothing tells where (flyback.go); not looked
				// for with a negative sync offset, whose blank frames are no file frames.
				if fl.Place == dataset.FlybackAuto && len(nav) >= 2 && rows >= 3 && s >= 0 && whole-s == rows*(rowLen+1) {
					_, err := dataset.Open(path, dataset.Options{NavShape: nav, SyncOffset: s, Flyback: fl})
					assert.ErrorContains(t, err, "give option flyback start or option flyback end", name)
					continue
				}
				if fl.Place >= dataset.FlybackStart {
					if len(nav) < 2 {
						continue // refused: TestFlybackRawAndErrors
					}
					k = fl.Frames
					if fl.Place == dataset.FlybackStart {
						lead = k
					}
				}
				kept, frames, missing := keptScan(whole, nav, s, k, lead)
				d, err := dataset.Open(path, dataset.Options{NavShape: nav, SyncOffset: s, Flyback: fl})
				if kept == nil {
					assert.ErrorContains(t, err, "less than one scan row", name)
					assert.Equal(t, errs.Shape, errs.KindOf(err), name)
					continue
				}
				require.NoError(t, err, name)
				if assert.Equal(t, kept, d.NavShape(), name) {
					got := fileFrameOf(t, d)
					var blanks []dataset.FrameSpan
					for p, f := range frames {
						want := f + 1
						if f < 0 || f >= whole {
							want = 0
							if n := len(blanks); n > 0 && blanks[n-1].First+blanks[n-1].Count == p {
								blanks[n-1].Count++
							} else {
								blanks = append(blanks, dataset.FrameSpan{First: p, Count: 1})
							}
						}
						assert.Equal(t, want, got[p], "%s: position %d", name, p)
					}
					assert.Equal(t, blanks, dataset.Blanks(d), "%s: the positions without a frame", name)
				}
				notes := strings.Join(dataset.Notes(d), "\n")
				if missing > 0 {
					assert.Contains(t, notes, fmt.Sprintf("; %d position", missing), name)
					assert.Contains(t, notes, fmt.Sprintf("(nav shape %s)", stemnpy.ShapeString(kept)), name)
				} else {
					assert.NotContains(t, notes, "incomplete", name)
				}
				require.NoError(t, d.Close())
			}
		}
	}
}

// The report of #17r D1 on a real file: `--nav-shape 9` on 8 frames reads all 8, and
// `--nav-shape 8 --sync-offset 1` the 7 after the first, at the first 7 of the 8
// positions (the last has no frame: LiberTEM's sync_offset, #33), as does `--nav-shape 9
// --sync-offset 1`, an interrupted acquisition besides the offset.
func TestOneDNavShapeLongerThanTheFile(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	for _, c := range []struct {
		nav  int
		s    int
		want int
		note string
	}{
		{9, 0, 8, "incomplete acquisition: nav shape (9,) (option nav_shape) has 9 positions but the file holds 8 frames: reading the 8 positions with a frame (nav shape (8,)); 1 position is missing"},
		{8, 1, 8, "sync offset 1: the first frame of the file is skipped, so scan position 7 has no frame: it reads as a blank (all-zero) frame, which reductions (mean, std, max) leave out"},
		{9, 1, 7, "incomplete acquisition: nav shape (9,) (option nav_shape) has 9 positions but the file holds 8 frames (7 scan positions with sync offset 1): reading the 7 positions with a frame (nav shape (7,)); 2 positions are missing"},
	} {
		d, err := dataset.Open(path, dataset.Options{NavShape: []int{c.nav}, SyncOffset: c.s})
		require.NoError(t, err)
		assert.Equal(t, []int{c.want}, d.NavShape())
		notes := dataset.Notes(d)
		require.NotEmpty(t, notes)
		assert.Equal(t, c.note, notes[len(notes)-1])
		whole, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		fb := d.FrameBytes()
		want := append(frametest.ReadAll(t, whole)[c.s*fb:], make([]byte, (c.want+c.s-8)*fb)...)
		assert.Equal(t, want, frametest.ReadAll(t, d), "the file's frames from the sync offset on, a blank frame after them")
		require.NoError(t, whole.Close())
		require.NoError(t, d.Close())
	}
}

// An interrupted scan of planes keeps its complete planes, or the complete rows of its
// first plane, in 3 nav axes, and says what it left out (#33); a nav shape of more than
// 3 axes is refused naming option nav_shape.
func TestIncompleteScanOfPlanes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "frames.npy")
	px := make([]byte, 24*6*2) // 24 frames of 3×2 uint16 pixels
	require.NoError(t, os.WriteFile(path, frametest.NPYBytes("<u2", false, "(24, 3, 2)", px), 0o644))
	for _, c := range []struct {
		nav, kept []int
		note      string
	}{
		{[]int{2, 4, 4}, []int{1, 4, 4}, "incomplete acquisition: nav shape (2, 4, 4) (option nav_shape) has 32 positions but the file holds 24 frames: reading the 1 complete scan plane of 4×4 (nav shape (1, 4, 4)); 8 positions are missing, and the 8 frames of the incomplete last plane not read"},
		{[]int{3, 3, 3}, []int{2, 3, 3}, "incomplete acquisition: nav shape (3, 3, 3) (option nav_shape) has 27 positions but the file holds 24 frames: reading the 2 complete scan planes of 3×3 (nav shape (2, 3, 3)); 3 positions are missing, and the 6 frames of the incomplete last plane not read"},
		{[]int{2, 5, 6}, []int{1, 4, 6}, "incomplete acquisition: nav shape (2, 5, 6) (option nav_shape) has 60 positions but the file holds 24 frames: reading the 4 complete scan rows of 6 of the first scan plane (nav shape (1, 4, 6)); 36 positions are missing"},
		{[]int{2, 5, 5}, []int{1, 4, 5}, "incomplete acquisition: nav shape (2, 5, 5) (option nav_shape) has 50 positions but the file holds 24 frames: reading the 4 complete scan rows of 5 of the first scan plane (nav shape (1, 4, 5)); 26 positions are missing, and the 4 frames of the incomplete last row not read"},
	} {
		d, err := dataset.Open(path, dataset.Options{NavShape: c.nav})
		require.NoError(t, err, c.nav)
		assert.Equal(t, c.kept, d.NavShape())
		assert.Equal(t, []string{c.note}, dataset.Notes(d))
		require.NoError(t, d.Close())
	}
	_, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 3, 2, 2}})
	assert.EqualError(t, err, "dataset: "+path+": nav shape (2, 3, 2, 2) (option nav_shape) has 4 axes: stemdot reads scans of 1 to 3 (N, Y,X or Z,Y,X): give option nav_shape of its 24 positions in at most 3 axes (e.g. 6,2,2)")
	assert.ErrorIs(t, err, errs.Shape)
}

// TestSyncOffsetKeepsNavShape: a sync offset keeps the nav shape, as LiberTEM's
// sync_offset (#33): the positions whose frame lies outside the file read as blank
// frames and are reported (Blanks, through an ROI and a frame range too, the notes);
// RealFrames are the others. A raw file of as many frames as the scan takes opens with
// any sync offset (peer M53: 64 frames, nav (8, 8), ±3), as does one of as many from the
// offset on; another count is refused. A shortfall beyond the offset (an interrupted
// acquisition) keeps the complete rows.
func TestSyncOffsetKeepsNavShape(t *testing.T) {
	path, frames := frametest.GappedRaw(t, 10, 0, 0, 0)
	base := dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16, NavShape: []int{2, 5}}
	blank := make([]byte, 60)
	for _, c := range []struct {
		s      int
		nav    []int
		want   [][]byte
		blanks []dataset.FrameSpan
		note   string
	}{
		{3, []int{2, 5}, append(slices.Clone(frames[3:]), blank, blank, blank), []dataset.FrameSpan{{First: 7, Count: 3}},
			"sync offset 3: the first 3 frames of the file are skipped, so scan positions (1, 2) to (1, 4) have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out"},
		{-3, []int{2, 5}, append([][]byte{blank, blank, blank}, frames[:7]...), []dataset.FrameSpan{{First: 0, Count: 3}},
			"sync offset -3: 3 blank frames are inserted before the first frame of the file, so scan positions (0, 0) to (0, 2) have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out"},
		{1, []int{3, 3}, frames[1:], nil, "sync offset 1: the first frame of the file is skipped"}, // as many frames from the offset on
		{-1, []int{11}, append([][]byte{blank}, frames...), []dataset.FrameSpan{{First: 0, Count: 1}},
			"sync offset -1: 1 blank frame is inserted before the first frame of the file, so scan position 0 has no frame: it reads as a blank (all-zero) frame, which reductions (mean, std, max) leave out"},
	} {
		opt := base
		opt.SyncOffset, opt.NavShape = c.s, c.nav
		d, err := dataset.Open(path, opt)
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.nav, d.NavShape())
		assert.Equal(t, bytes.Join(c.want, nil), frametest.ReadAll(t, d), "%+v", c)
		assert.Equal(t, c.blanks, dataset.Blanks(d))
		assert.Equal(t, c.note, dataset.Notes(d)[0])
		framed := dataset.RealFrames(d)
		var held [][]byte
		for p, f := range c.want {
			if !slices.ContainsFunc(c.blanks, func(b dataset.FrameSpan) bool { return p >= b.First && p < b.First+b.Count }) {
				held = append(held, f)
			}
		}
		assert.Equal(t, len(held), framed.NumFrames())
		assert.Equal(t, bytes.Join(held, nil), frametest.ReadAll(t, framed), "%+v: the frames of the file", c)
		assert.Empty(t, dataset.Blanks(framed))
		require.NoError(t, d.Close())
	}
	for _, s := range []int{2, -2} { // neither 10 frames nor 10 from the offset on
		opt := base
		opt.SyncOffset, opt.NavShape = s, []int{3, 3}
		_, err := dataset.Open(path, opt)
		assert.ErrorContains(t, err, "nav shape (3, 3) (option nav_shape) has 9 positions but the file holds 10 frames", s)
		assert.Equal(t, errs.Shape, errs.KindOf(err))
	}

	// An NPY file of 12 frames read as a scan of (3, 4), mapped and viewed in place: a
	// positive offset keeps (3, 4), its last positions blank, viewed where they are the
	// file's and read where not; an ROI and a frame range report theirs.
	px := make([]byte, 12*6*2)
	for i := range px {
		px[i] = byte(i)
	}
	npyPath := filepath.Join(t.TempDir(), "scan.npy")
	require.NoError(t, os.WriteFile(npyPath, frametest.NPYBytes("<u2", false, "(12, 2, 3)", px), 0o644))
	d, err := dataset.Open(npyPath, dataset.Options{SyncOffset: 2, NavShape: []int{3, 4}})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, []int{3, 4}, d.NavShape())
	assert.Equal(t, []dataset.FrameSpan{{First: 10, Count: 2}}, dataset.Blanks(d))
	assert.Equal(t, append(slices.Clone(px[2*12:]), make([]byte, 2*12)...), frametest.ReadAll(t, d))
	v, ok := d.(dataset.Viewer)
	require.True(t, ok)
	assert.False(t, dataset.ViewsInPlace(d), "positions without a frame are not in the file")
	b, err := v.ViewFrames(0, 10)
	require.NoError(t, err)
	assert.Equal(t, px[2*12:], b)
	b, err = v.ViewFrames(9, 11)
	require.NoError(t, err)
	assert.Nil(t, b, "a range with a position without a frame is read, not viewed")
	_, ok, err = d.(dataset.Mapper).MapFrames(9, 11)
	require.NoError(t, err)
	assert.False(t, ok)
	m, ok, err := d.(dataset.Mapper).MapFrames(8, 10)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, px[10*12:11*12], m.Mapping[m.Offset:m.Offset+12])

	sel, err := dataset.Select(d, dataset.ROI{Mask: []bool{true, false, false, false, false, false, false, false, false, true, true, true}, Shape: []int{3, 4}})
	require.NoError(t, err)
	assert.Equal(t, []dataset.FrameSpan{{First: 2, Count: 2}}, dataset.Blanks(sel))
	r, err := dataset.Range(sel, 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []dataset.FrameSpan{{First: 1, Count: 1}}, dataset.Blanks(r))
	assert.Equal(t, px[11*12:12*12], frametest.ReadAll(t, dataset.RealFrames(r)), "frame 0 of the range: scan position 9, the file's frame 11")
	r, err = dataset.Range(sel, 2, 2)
	require.NoError(t, err)
	assert.Nil(t, dataset.RealFrames(r), "no frame of the file")

	// The peer report on a real file (R mib 001 sync_offset=2 nav (2,4)): LiberTEM's nav
	// shape (2, 4), the last 2 positions without a frame.
	mib, err := dataset.Open(testfiles.File(t, "mib/001_4x2_6bit.mib"), dataset.Options{NavShape: []int{2, 4}, SyncOffset: 2})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 4}, mib.NavShape())
	assert.Equal(t, []dataset.FrameSpan{{First: 6, Count: 2}}, dataset.Blanks(mib))
	require.NoError(t, mib.Close())

	// A shortfall beyond the offset: 12 frames for a scan of (4, 4) with offset 2 is an
	// interrupted acquisition; its complete rows are kept.
	d2, err := dataset.Open(npyPath, dataset.Options{SyncOffset: 2, NavShape: []int{4, 4}})
	if assert.NoError(t, err) {
		assert.Equal(t, []int{2, 4}, d2.NavShape())
		assert.Empty(t, dataset.Blanks(d2))
		assert.Contains(t, dataset.Notes(d2)[1], "incomplete acquisition")
		require.NoError(t, d2.Close())
	}
}

// The blank frames a negative sync offset inserts are no frames of the file: 221 frames
// read as a (17, 13) scan with sync offset -17 are 238 positions' worth with the blanks,
// (13+1)·17, which is not a flyback frame per row (peer X03: every later position took
// the wrong frame).
func TestNegativeSyncOffsetIsNoFlyback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "frames.npy")
	px := make([]byte, 221*6*2)
	for i := range px {
		px[i] = byte(i / 12)
	}
	require.NoError(t, os.WriteFile(path, frametest.NPYBytes("<u2", false, "(221, 2, 3)", px), 0o644))
	d, err := dataset.Open(path, dataset.Options{NavShape: []int{17, 13}, SyncOffset: -17})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, []int{17, 13}, d.NavShape())
	assert.Equal(t, []dataset.FrameSpan{{First: 0, Count: 17}}, dataset.Blanks(d))
	assert.NotContains(t, strings.Join(dataset.Notes(d), "\n"), "flyback")
	assert.Equal(t, append(make([]byte, 17*12), px[:204*12]...), frametest.ReadAll(t, d))
}
