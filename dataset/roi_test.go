package dataset_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// checkSelection compares every sub-range of view (the positions pos of full, scan
// shape scan) with the frames read from full, one at a time, and checks the view's
// shapes, positions and optional interfaces.
func checkSelection(t *testing.T, full, view dataset.Dataset, scan, pos []int) {
	t.Helper()
	fb := full.FrameBytes()
	n := len(pos)
	assert.Equal(t, []int{n}, view.NavShape())
	assert.Equal(t, n, view.NumFrames())
	assert.Equal(t, full.SigShape(), view.SigShape())
	assert.Equal(t, full.DType(), view.DType())
	assert.True(t, dataset.IsROI(view))
	gotScan, gotPos := dataset.ScanPositions(view)
	assert.Equal(t, scan, gotScan)
	assert.Equal(t, pos, gotPos)

	want := make([]byte, n*fb)
	for i, p := range pos { // one frame at a time: an independent reference
		require.NoError(t, full.ReadFrames(p, p+1, want[i*fb:(i+1)*fb]))
	}
	for s := 0; s <= n; s++ {
		for e := s; e <= n; e++ {
			got := make([]byte, (e-s)*fb)
			require.NoError(t, view.ReadFrames(s, e, got))
			require.Equal(t, want[s*fb:e*fb], got, "ReadFrames(%d, %d)", s, e)
		}
	}
	consecutive := func(s, e int) bool { return pos[e-1]-pos[s] == e-1-s }

	_, fullViewer := full.(dataset.Viewer)
	v, viewer := view.(dataset.Viewer)
	assert.Equal(t, fullViewer, viewer, "Viewer forwarded exactly when the dataset is one")
	fullMapper, isFullMapper := full.(dataset.Mapper)
	m, mapper := view.(dataset.Mapper)
	assert.Equal(t, isFullMapper, mapper, "Mapper forwarded exactly when the dataset is one")
	assert.Equal(t, fullViewer && consecutive(0, n), dataset.ViewsInPlace(view))
	for s := range n {
		for e := s + 1; e <= n; e++ {
			if viewer {
				got, err := v.ViewFrames(s, e)
				require.NoError(t, err)
				if consecutive(s, e) {
					assert.Equal(t, want[s*fb:e*fb], got[:(e-s)*fb], "ViewFrames(%d, %d)", s, e)
				} else {
					assert.Nil(t, got, "ViewFrames(%d, %d) of positions not consecutive", s, e)
				}
			}
			if mapper {
				got, ok, err := m.MapFrames(s, e)
				require.NoError(t, err)
				ref, refOK, err := fullMapper.MapFrames(pos[s], pos[e-1]+1)
				require.NoError(t, err)
				assert.Equal(t, consecutive(s, e) && refOK, ok, "MapFrames(%d, %d)", s, e)
				if ok {
					assert.Equal(t, ref.Offset, got.Offset)
					assert.Equal(t, ref.Stride, got.Stride)
				}
			}
		}
	}
	assert.ErrorContains(t, view.ReadFrames(0, n+1, make([]byte, (n+1)*fb)), "out of range")
}

// writeROI writes a boolean NPY file of shape nav selecting pos.
func writeROI(t *testing.T, dir string, nav []int, pos []int) string {
	t.Helper()
	n := 1
	for _, s := range nav {
		n *= s
	}
	b := make([]byte, n)
	for _, p := range pos {
		b[p] = 1
	}
	path := filepath.Join(dir, fmt.Sprintf("roi%d.npy", len(pos)))
	require.NoError(t, os.WriteFile(path, frametest.NPYBytes("|b1", false, stemnpy.ShapeString(nav), b), 0o644))
	return path
}

func TestSelectRawNPYAndMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	nav, sig, dt := []int{4, 5}, [2]int{6, 4}, dataset.Uint16
	values := frametest.RandomValues(rng, dt, 20*6*4)
	stored := func(bo binary.ByteOrder) []byte { return frametest.Encode(values, dt, bo) }
	dir := t.TempDir()
	open := map[string]func(opt dataset.Options) (dataset.Dataset, error){
		"raw mapped": func(opt dataset.Options) (dataset.Dataset, error) {
			p := filepath.Join(dir, "le.raw")
			require.NoError(t, os.WriteFile(p, stored(binary.LittleEndian), 0o644))
			opt.SigShape, opt.DType, opt.NavShape = sig[:], dt, nav
			return dataset.Open(p, opt)
		},
		"raw big-endian (pread)": func(opt dataset.Options) (dataset.Dataset, error) {
			p := filepath.Join(dir, "be.raw")
			require.NoError(t, os.WriteFile(p, stored(binary.BigEndian), 0o644))
			opt.SigShape, opt.DType, opt.NavShape, opt.BigEndian = sig[:], dt, nav, true
			return dataset.Open(p, opt)
		},
		"npy": func(opt dataset.Options) (dataset.Dataset, error) {
			p := filepath.Join(dir, "a.npy")
			require.NoError(t, os.WriteFile(p, frametest.NPYBytes("<u2", false, "(4, 5, 6, 4)", stored(binary.LittleEndian)), 0o644))
			return dataset.Open(p, opt)
		},
		"memory": func(opt dataset.Options) (dataset.Dataset, error) {
			ds, err := dataset.FromMemory(stored(binary.NativeEndian), nav, sig, dt)
			if err != nil || opt.ROI.IsZero() {
				return ds, err
			}
			return dataset.Select(ds, opt.ROI)
		},
	}
	rect := dataset.ROI{}
	rect.Rect.X, rect.Rect.Y, rect.Rect.W, rect.Rect.H = 1, 1, 3, 2 // columns 1..3 of rows 1, 2
	rows := dataset.ROI{}
	rows.Rect.X, rows.Rect.Y, rows.Rect.W, rows.Rect.H = 0, 1, 5, 2 // whole rows: consecutive
	sparse := []int{0, 2, 3, 4, 9, 10, 19}
	for _, c := range []struct {
		name string
		roi  dataset.ROI
		pos  []int
	}{
		{"rect", rect, []int{6, 7, 8, 11, 12, 13}},
		{"whole rows", rows, []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}},
		{"npy file", dataset.ROI{Path: writeROI(t, dir, nav, sparse)}, sparse},
		{"mask", dataset.ROI{Mask: []bool{2: true, 17: true, 19: false}, Shape: nav}, []int{2, 17}},
		{"one", dataset.ROI{Mask: []bool{19: true}, Shape: nav}, []int{19}},
	} {
		for name, o := range open {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				full, err := o(dataset.Options{})
				require.NoError(t, err)
				defer full.Close()
				view, err := o(dataset.Options{ROI: c.roi})
				require.NoError(t, err)
				checkSelection(t, full, view, nav, c.pos)
				require.NoError(t, view.Close())
				assert.Error(t, view.ReadFrames(0, 1, make([]byte, view.FrameBytes())), "Close closed the dataset")
			})
		}
	}
}

// A scan of planes (2, 3, 4) from a 5-D NPY file: rect:X,Y,W,H selects the rectangle
// in every plane; a mask and an NPY file of the scan's 3-D nav shape select positions
// of any plane (#33).
func TestSelectScanOfPlanes(t *testing.T) {
	dir := t.TempDir()
	nav := []int{2, 3, 4}
	path := filepath.Join(dir, "planes.npy")
	px := make([]byte, 24*2*2*2)
	for i := range px {
		px[i] = byte(i * 5)
	}
	require.NoError(t, os.WriteFile(path, frametest.NPYBytes("<u2", false, "(2, 3, 4, 2, 2)", px), 0o644))
	full, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer full.Close()
	require.Equal(t, nav, full.NavShape())
	rect, err := dataset.ParseROI("rect:1,1,2,2") // columns 1, 2 of rows 1, 2 of each plane
	require.NoError(t, err)
	mask := make([]bool, 24)
	mask[3], mask[13], mask[23] = true, true, true
	for _, c := range []struct {
		name string
		roi  dataset.ROI
		pos  []int
	}{
		{"rect", rect, []int{5, 6, 9, 10, 17, 18, 21, 22}},
		{"mask", dataset.ROI{Mask: mask, Shape: nav}, []int{3, 13, 23}},
		{"npy file", dataset.ROI{Path: writeROI(t, dir, nav, []int{0, 12, 20})}, []int{0, 12, 20}},
	} {
		view, err := dataset.Open(path, dataset.Options{ROI: c.roi})
		require.NoError(t, err, c.name)
		checkSelection(t, full, view, nav, c.pos)
		require.NoError(t, view.Close())
	}
	_, err = dataset.Open(path, dataset.Options{ROI: dataset.ROI{Mask: make([]bool, 12), Shape: []int{3, 4}}})
	assert.ErrorContains(t, err, "option roi: the mask's shape (3, 4) is not the scan's nav shape (2, 3, 4)")
	rect, err = dataset.ParseROI("rect:0,2,1,2")
	require.NoError(t, err)
	_, err = dataset.Open(path, dataset.Options{ROI: rect})
	assert.ErrorContains(t, err, "option roi rect:0,2,1,2 (columns 0..0, rows 2..3) is not within the scan of nav shape (2, 3, 4) (3 rows of 4 columns)")
}

func TestSelectMIB(t *testing.T) {
	path := testfiles.File(t, "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib")
	full, err := dataset.Open(path, dataset.Options{NavShape: []int{3, 3}})
	require.NoError(t, err)
	defer full.Close()
	roi, err := dataset.ParseROI("rect:1,0,2,3")
	require.NoError(t, err)
	view, err := dataset.Open(path, dataset.Options{NavShape: []int{3, 3}, ROI: roi})
	require.NoError(t, err)
	defer view.Close()
	assert.Equal(t, "mib", view.Format())
	checkSelection(t, full, view, []int{3, 3}, []int{1, 2, 4, 5, 7, 8})
}

// guarded is a dataset whose frames outside allowed fail to read.
type guarded struct {
	dataset.Dataset
	allowed map[int]bool
	reads   *[][2]int
}

func (g guarded) ReadFrames(start, end int, dst []byte) error {
	*g.reads = append(*g.reads, [2]int{start, end})
	for f := start; f < end; f++ {
		if !g.allowed[f] {
			return fmt.Errorf("frame %d outside the ROI was read", f)
		}
	}
	return g.Dataset.ReadFrames(start, end, dst)
}

func TestSelectReadsOnlySelectedFrames(t *testing.T) {
	nav, sig := []int{3, 4}, [2]int{2, 2}
	data := make([]byte, 12*4)
	for i := range data {
		data[i] = byte(i / 4)
	}
	mem, err := dataset.FromMemory(data, nav, sig, dataset.Uint8)
	require.NoError(t, err)
	var reads [][2]int
	g := guarded{mem, map[int]bool{1: true, 2: true, 5: true, 9: true, 10: true, 11: true}, &reads}
	view, err := dataset.Select(g, dataset.ROI{Mask: []bool{1: true, 2: true, 5: true, 9: true, 10: true, 11: true}, Shape: nav})
	require.NoError(t, err)
	got := make([]byte, 6*4)
	require.NoError(t, view.ReadFrames(0, 6, got))
	for i, p := range []int{1, 2, 5, 9, 10, 11} {
		assert.Equal(t, []byte{byte(p), byte(p), byte(p), byte(p)}, got[4*i:4*i+4])
	}
	assert.Equal(t, [][2]int{{1, 3}, {5, 6}, {9, 12}}, reads, "one read per run of consecutive positions")
}

// TestOpenROIComposes checks the order of the options: nav_shape, sync_offset and
// flyback make the scan, roi selects from it, frames counts the selected positions.
func TestOpenROIComposes(t *testing.T) {
	// 2 leading frames, then a 3×4 scan with a flyback frame at the end of each row:
	// 2 + 3·5 frames; frame k holds k.
	sig := [2]int{2, 2}
	const n = 2 + 3*5
	data := make([]byte, n*4)
	for i := range data {
		data[i] = byte(i / 4)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "scan.raw")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	roiPath := writeROI(t, dir, []int{3, 4}, []int{1, 2, 5, 8, 9, 11})
	flyback, err := dataset.ParseFlyback("end")
	require.NoError(t, err)
	base := dataset.Options{SigShape: sig[:], DType: dataset.Uint8, NavShape: []int{3, 4}, SyncOffset: 2, Flyback: flyback}
	// Scan position p = 4r + c is the file's frame 2 + 5r + c.
	file := func(p int) byte { return byte(2 + 5*(p/4) + p%4) }
	for _, c := range []struct {
		name   string
		roi    string
		frames dataset.FrameSpan
		pos    []int
	}{
		{"roi", roiPath, dataset.FrameSpan{}, []int{1, 2, 5, 8, 9, 11}},
		{"roi then frames", roiPath, dataset.FrameSpan{First: 2, Count: 3}, []int{5, 8, 9}},
		{"rect then frames", "rect:2,1,2,2", dataset.FrameSpan{First: 1, Count: 2}, []int{7, 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := base
			opt.ROI, err = dataset.ParseROI(c.roi)
			require.NoError(t, err)
			opt.Frames = c.frames
			ds, err := dataset.Open(path, opt)
			require.NoError(t, err)
			defer ds.Close()
			got := make([]byte, ds.NumFrames()*4)
			require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), got))
			var want []byte
			for _, p := range c.pos {
				want = append(want, file(p), file(p), file(p), file(p))
			}
			assert.Equal(t, want, got)
			scan, pos := dataset.ScanPositions(ds)
			assert.Equal(t, []int{3, 4}, scan)
			assert.Equal(t, c.pos, pos)
			assert.True(t, dataset.IsROI(ds), "the frames of an ROI, or of a range of them, lie at ScanPositions in the scan")
		})
	}
	// frames counts the selected positions: a range past them is refused.
	opt := base
	opt.ROI, _ = dataset.ParseROI(roiPath)
	opt.Frames = dataset.FrameSpan{First: 4, Count: 3}
	_, err = dataset.Open(path, opt)
	assert.ErrorContains(t, err, "is not within its 6 frames")
}

func TestROIErrors(t *testing.T) {
	dir := t.TempDir()
	nav := []int{3, 4}
	data := make([]byte, 12*4)
	path := filepath.Join(dir, "scan.raw")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	write := func(name, descr, shape string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, frametest.NPYBytes(descr, false, shape, b), 0o644))
		return p
	}
	for _, c := range []struct {
		roi  string
		kind errs.Kind
		msg  []string
	}{
		{write("shape.npy", "|b1", "(4, 3)", make([]byte, 12)), errs.Shape, []string{"option roi", "shape (4, 3) is not the scan's nav shape (3, 4)"}},
		{write("flat.npy", "|b1", "(12,)", make([]byte, 12)), errs.Shape, []string{"option roi", "(12,)", "(3, 4)"}},
		{write("float.npy", "<f4", "(3, 4)", make([]byte, 48)), errs.Argument, []string{"option roi", "dtype '<f4' is not boolean"}},
		{write("escaped.npy", "\x1b[2J", "(3, 4)", make([]byte, 12)), errs.Argument, []string{"option roi", `dtype '\x1b[2J' is not boolean`}},
		{write("two.npy", "<i2", "(3, 4)", append([]byte{1, 0, 2}, make([]byte, 21)...)), errs.Argument, []string{"option roi", "position 1 holds 2"}},
		{write("max.npy", "<u8", "(3, 4)", append(bytes.Repeat([]byte{0xff}, 8), make([]byte, 88)...)), errs.Argument, []string{"option roi", "position 0 holds 18446744073709551615:"}},
		{write("minus.npy", "|i1", "(3, 4)", append([]byte{0, 0, 0xff}, make([]byte, 9)...)), errs.Argument, []string{"option roi", "position 2 holds -1:"}},
		{write("empty.npy", "|b1", "(3, 4)", make([]byte, 12)), errs.Argument, []string{"option roi", "selects no scan position"}},
		{"rect:2,1,3,1", errs.Shape, []string{"option roi rect:2,1,3,1", "not within the scan of nav shape (3, 4)"}},
		{"rect:0,3,1,1", errs.Shape, []string{"option roi", "rows 3..3"}},
		{"bits:3,4:ff", errs.Argument, []string{"roi bits:3,4: 1 hex bytes, but 12 positions take 2"}},
		{"bits:4,3:fff0", errs.Shape, []string{"option roi", "shape (4, 3) is not the scan's nav shape (3, 4)"}},
		{"rect:1,2,0,1", errs.Argument, []string{"want rect:X,Y,W,H"}},
		{filepath.Join(dir, "missing.npy"), errs.IO, []string{"option roi", "missing.npy"}},
	} {
		t.Run(filepath.Base(c.roi), func(t *testing.T) {
			roi, err := dataset.ParseROI(c.roi)
			if err == nil {
				var ds dataset.Dataset
				ds, err = dataset.Open(path, dataset.Options{SigShape: []int{2, 2}, DType: dataset.Uint8, NavShape: nav, ROI: roi})
				if err == nil {
					ds.Close()
				}
			}
			require.Error(t, err)
			assert.Equal(t, c.kind, errs.KindOf(err), "%v", err)
			for _, m := range c.msg {
				assert.ErrorContains(t, err, m)
			}
		})
	}
}

func TestROIString(t *testing.T) {
	for _, s := range []string{"rect:1,2,3,4", "bits:2,5:a540", "bits:3:e0", "/data/roi file.npy"} {
		r, err := dataset.ParseROI(s)
		require.NoError(t, err)
		assert.Equal(t, s, r.String())
	}
	r, err := dataset.ParseROI("bits:2,5:a540")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 5}, r.Shape)
	assert.Equal(t, []int{0, 2, 5, 7, 9}, slices.Collect(func(yield func(int) bool) {
		for i, b := range r.Mask {
			if b && !yield(i) {
				return
			}
		}
	}))
}
