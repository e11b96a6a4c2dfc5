package dataset

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// ROI is a region of interest in nav space (Options.ROI): the scan positions to read.
// Exactly one of its forms is set; the zero value selects the whole scan.
//
// Open applies it after NavShape, SyncOffset and Flyback have made the scan, and before
// Frames: the ROI is of the scan's nav shape, and Frames then counts the selected
// positions (see Select).
type ROI struct {
	// Rect, when W and H are positive, selects the scan positions of columns X to X+W-1
	// and rows Y to Y+H-1 (x = column, y = row, as the mask spec rect:X,Y,W,H). A 1-D
	// scan (n,) is one row: Y = 0, H = 1; a scan of planes (nav_z, nav_y, nav_x) has the
	// rectangle selected in every plane (a mask or an NPY file selects within planes).
	// The rectangle must lie within the scan.
	Rect struct{ X, Y, W, H int }
	// Path is an NPY file holding a boolean array, or an integer array of 0 and 1, of the
	// scan's nav shape: true (1) selects the position.
	Path string
	// Mask, with Shape (the scan's nav shape), selects position p where Mask[p] is true,
	// p in C order over Shape.
	Mask  []bool
	Shape []int
}

// IsZero reports whether r selects the whole scan (no ROI given).
func (r ROI) IsZero() bool {
	return r.Rect.W <= 0 && r.Rect.H <= 0 && r.Path == "" && r.Mask == nil
}

// String is the ROI as option roi writes it (ParseROI): "rect:X,Y,W,H", the NPY path,
// or "bits:SHAPE:HEX" for a mask in memory.
func (r ROI) String() string {
	switch {
	case r.Path != "":
		return r.Path
	case r.Mask != nil:
		packed := make([]byte, (len(r.Mask)+7)/8)
		for i, sel := range r.Mask {
			if sel {
				packed[i/8] |= 0x80 >> (i % 8)
			}
		}
		sizes := make([]string, len(r.Shape))
		for i, n := range r.Shape {
			sizes[i] = strconv.Itoa(n)
		}
		return "bits:" + strings.Join(sizes, ",") + ":" + hex.EncodeToString(packed)
	case r.IsZero():
		return ""
	}
	return fmt.Sprintf("rect:%d,%d,%d,%d", r.Rect.X, r.Rect.Y, r.Rect.W, r.Rect.H)
}

// ParseROI parses option roi: "rect:X,Y,W,H" (scan columns X..X+W-1, rows Y..Y+H-1),
// "bits:SHAPE:HEX" (a mask of nav shape SHAPE, e.g. 64,64, packed 8 positions a byte
// in C order, the first position in the most significant bit, as hex: numpy's
// packbits(roi.ravel()).tobytes().hex()), or else the path of an NPY file (ROI.Path).
// Errors are errs.Argument.
func ParseROI(s string) (ROI, error) {
	var r ROI
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return r, errs.New(errs.Argument, "empty roi: give rect:X,Y,W,H or an NPY file of booleans")
	case strings.HasPrefix(t, "rect:"):
		f := strings.Split(t[len("rect:"):], ",")
		v := make([]int, len(f))
		for i := range f {
			n, err := strconv.Atoi(strings.TrimSpace(f[i]))
			if err != nil {
				return r, errs.New(errs.Argument, "roi %q: want rect:X,Y,W,H with whole numbers", t)
			}
			v[i] = n
		}
		if len(v) != 4 || v[0] < 0 || v[1] < 0 || v[2] < 1 || v[3] < 1 {
			return r, errs.New(errs.Argument, "roi %q: want rect:X,Y,W,H (X, Y >= 0: the first scan column and row; W, H >= 1)", t)
		}
		r.Rect.X, r.Rect.Y, r.Rect.W, r.Rect.H = v[0], v[1], v[2], v[3]
	case strings.HasPrefix(t, "bits:"):
		shapeText, digits, ok := strings.Cut(t[len("bits:"):], ":")
		shape, err := parseSizes(shapeText)
		packed, herr := hex.DecodeString(digits)
		if !ok || err != nil || herr != nil {
			return r, errs.New(errs.Argument, "roi bits: want bits:SHAPE:HEX (e.g. bits:2,4:f0: the first 4 of 8 positions)")
		}
		n := product(shape)
		if len(packed) != (n+7)/8 {
			return r, errs.New(errs.Argument, "roi bits:%s: %d hex bytes, but %d positions take %d", shapeText, len(packed), n, (n+7)/8)
		}
		r.Shape, r.Mask = shape, make([]bool, n)
		for i := range r.Mask {
			r.Mask[i] = packed[i/8]&(0x80>>(i%8)) != 0
		}
	default:
		r.Path = s // verbatim: a path may hold spaces
	}
	return r, nil
}

// parseSizes parses "64,64" into positive sizes.
func parseSizes(s string) ([]int, error) {
	var shape []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		shape = append(shape, n)
	}
	return shape, nil
}

// positions resolves r against a scan of nav shape nav: the selected positions (flat
// indices in C order over nav), ascending. Errors (naming option roi): errs.Shape for
// a mask or NPY array of another shape and a rectangle outside the scan; errs.Argument
// for an ROI that selects nothing and an NPY array that is not boolean (or of 0 and 1);
// errs.IO and errs.Format for an NPY file that cannot be read.
func (r ROI) positions(nav []int) ([]int, error) {
	var pos []int
	switch {
	case r.Path != "":
		mask, err := readROIFile(r.Path, nav)
		if err != nil {
			return nil, err
		}
		pos = selected(mask)
	case r.Mask != nil:
		if !slices.Equal(r.Shape, nav) {
			return nil, errs.New(errs.Shape, "option roi: the mask's shape %s is not the scan's nav shape %s", npy.ShapeString(r.Shape), npy.ShapeString(nav))
		}
		pos = selected(r.Mask)
	default:
		planes, rows, cols := 1, 1, nav[len(nav)-1]
		if len(nav) >= 2 {
			planes, rows = product(nav[:len(nav)-2]), nav[len(nav)-2]
		}
		x, y, w, h := r.Rect.X, r.Rect.Y, r.Rect.W, r.Rect.H
		if x < 0 || y < 0 || w > cols-x || h > rows-y {
			return nil, errs.New(errs.Shape, "option roi rect:%d,%d,%d,%d (columns %d..%d, rows %d..%d) is not within the scan of nav shape %s (%d rows of %d columns)",
				x, y, w, h, x, x+w-1, y, y+h-1, npy.ShapeString(nav), rows, cols)
		}
		for z := range planes {
			for row := y; row < y+h; row++ {
				for col := x; col < x+w; col++ {
					pos = append(pos, (z*rows+row)*cols+col)
				}
			}
		}
	}
	if len(pos) == 0 {
		return nil, errs.New(errs.Argument, "option roi %s selects no scan position", r)
	}
	return pos, nil
}

func selected(mask []bool) []int {
	var pos []int
	for i, sel := range mask {
		if sel {
			pos = append(pos, i)
		}
	}
	return pos
}

// readROIFile reads an NPY ROI file: a C-order array of nav shape nav, of bool or of an
// integer dtype holding 0 and 1 only.
func readROIFile(path string, nav []int) ([]bool, error) {
	f, size, err := regfile.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("option roi: %w", err))
	}
	defer f.Close()
	_, d, data, err := npy.ReadArray(f, size, func(h npy.Info, d npy.Descr) error {
		if d.Kind != 'b' && d.Kind != 'i' && d.Kind != 'u' || d.Kind == 'b' && d.Size != 1 || !(d.Size == 1 || d.Size == 2 || d.Size == 4 || d.Size == 8) {
			return errs.New(errs.Argument, "dtype %s is not boolean: want a bool array (or integers 0 and 1) of the scan's nav shape, e.g. numpy.save(path, roi.astype(bool))", npy.QuoteDescr(h.Descr))
		}
		if !slices.Equal(h.Shape, nav) {
			return errs.New(errs.Shape, "the array's shape %s is not the scan's nav shape %s", npy.ShapeString(h.Shape), npy.ShapeString(nav))
		}
		return nil
	})
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("option roi: %s: %w", path, err))
	}
	var order binary.ByteOrder = binary.LittleEndian
	if d.BigEndian {
		order = binary.BigEndian
	}
	mask := make([]bool, len(data)/d.Size)
	for i := range mask {
		var v uint64
		switch d.Size {
		case 1:
			v = uint64(data[i])
		case 2:
			v = uint64(order.Uint16(data[2*i:]))
		case 4:
			v = uint64(order.Uint32(data[4*i:]))
		default:
			v = order.Uint64(data[8*i:])
		}
		if v > 1 {
			stored := strconv.FormatUint(v, 10) // unsigned as stored: a uint64 2⁶⁴−1 is not -1
			if d.Kind == 'i' {
				shift := 64 - 8*d.Size // sign-extend: an int8 -1 (0xff) is -1, not 255
				stored = strconv.FormatInt(int64(v<<shift)>>shift, 10)
			}
			return nil, errs.New(errs.Argument, "option roi: %s: position %d holds %s: an ROI holds only 0 and 1 (false and true)", path, i, stored)
		}
		mask[i] = v == 1
	}
	return mask, nil
}

// Positioner is implemented by datasets that hold part of a scan: an ROI (Select) and a
// frame range (Range). Frame i of the dataset is the scan position Positions()[i].
type Positioner interface {
	// ScanShape is the nav shape of the whole scan.
	ScanShape() []int
	// Positions are the scan positions of the dataset's frames, one per frame, as flat
	// indices in C order over ScanShape, ascending. The slice is the caller's.
	Positions() []int
}

// ScanPositions returns the scan shape that ds's frames come from and their positions
// in it (Positioner); for a dataset of a whole scan, its nav shape and 0..n-1.
func ScanPositions(ds Dataset) (scan []int, positions []int) {
	if p, ok := ds.(Positioner); ok {
		return p.ScanShape(), p.Positions()
	}
	positions = make([]int, ds.NumFrames())
	for i := range positions {
		positions[i] = i
	}
	return ds.NavShape(), positions
}

// IsROI reports whether the frames of ds are scan positions that an ROI selects: ds is
// the view of an ROI (Select, Options.ROI), or a Range of one (options roi and frames):
// its frames lie at the positions of ScanShape that ScanPositions gives, and results of it
// are placed there.
func IsROI(ds Dataset) bool {
	if r, ok := ds.(interface{ ranged() Dataset }); ok {
		return IsROI(r.ranged())
	}
	_, ok := ds.(interface{ roiView() *selection })
	return ok
}

// ViewsInPlace reports whether ds is a Viewer whose ViewFrames returns every range of
// frames in place: an ROI's view returns nil for frames that are not consecutive in the
// file, which the reader then reads with ReadFrames into a buffer of its own.
func ViewsInPlace(ds Dataset) bool {
	if _, ok := ds.(Viewer); !ok {
		return false
	}
	p, ok := ds.(interface{ viewsAll() bool })
	return !ok || p.viewsAll()
}

// Select returns the scan positions of ds that roi selects as a dataset of their own:
// frame i of the view is the i-th selected position (in scan order), its nav shape is
// (n_selected,), its ScanShape (Positioner) is ds's nav shape, and sig shape, dtype and
// format are those of ds. ReadFrames reads only the selected frames, one ReadFrames of
// ds per run of consecutive positions.
//
// The view forwards Notes and RunNotes, and ViewFrames (Viewer) and MapFrames (Mapper)
// when ds implements them, for frames that are consecutive in ds (a run of an ROI's
// row): there in-place reads of mapped files and the copy-free GPU feed stay in use;
// ViewFrames returns nil and MapFrames ok == false for frames that are not. The view
// owns ds: its Close closes ds.
//
// Errors name option roi: errs.Shape for a mask of another shape than ds's nav shape
// (naming both) and a rectangle outside the scan, errs.Argument for an ROI that selects
// nothing or an NPY array that is not boolean, errs.IO or errs.Format for an unreadable
// file.
func Select(ds Dataset, roi ROI) (Dataset, error) {
	pos, err := roi.positions(ds.NavShape())
	if err != nil {
		return nil, errs.Wrap(errs.Argument, fmt.Errorf("dataset: %s: %w", describePath(ds), err))
	}
	return selectPositions(ds, pos), nil
}

// selectPositions is Select of the frames pos of ds (ascending, at least one).
func selectPositions(ds Dataset, pos []int) Dataset {
	s := &selection{Dataset: ds, scan: ds.NavShape(), pos: pos}
	s.contiguous = pos[len(pos)-1]-pos[0] == len(pos)-1
	_, view := ds.(Viewer)
	_, mapped := ds.(Mapper)
	switch {
	case view && mapped:
		return viewMapSelection{s}
	case view:
		return viewSelection{s}
	case mapped:
		return mapSelection{s}
	}
	return s
}

// selection is the view of Select; the embedded Dataset supplies Format, Path,
// SigShape, DType, FrameBytes and Close.
type selection struct {
	Dataset
	scan       []int
	pos        []int
	contiguous bool // every selected position follows the one before
}

func (s *selection) roiView() *selection { return s }
func (s *selection) viewsAll() bool      { return s.contiguous }

// NavShape is (n_selected,).
func (s *selection) NavShape() []int { return []int{len(s.pos)} }

// NumFrames is the number of selected positions.
func (s *selection) NumFrames() int { return len(s.pos) }

// Notes are the dataset's notes on how the file was read (Noter).
func (s *selection) Notes() []string { return Notes(s.Dataset) }

// Calibration is the calibration of the scan the ROI selects in (Calibrator).
func (s *selection) Calibration() Calibration { return CalibrationOf(s.Dataset) }

// RunNotes are the notes of selected positions [start, end) (RunNoter).
func (s *selection) RunNotes(start, end int) []RunNote {
	if start < 0 || end > len(s.pos) || start > end {
		return nil
	}
	return runNotesOf(s.Dataset, func(yield func(first, end int)) {
		for i := start; i < end; {
			j := i + 1
			for j < end && s.pos[j] == s.pos[j-1]+1 {
				j++
			}
			yield(s.pos[i], s.pos[j-1]+1)
			i = j
		}
	})
}

// ScanShape is ds's nav shape (Positioner).
func (s *selection) ScanShape() []int { return append([]int(nil), s.scan...) }

// Positions are the selected scan positions (Positioner).
func (s *selection) Positions() []int { return append([]int(nil), s.pos...) }

// ReadFrames reads selected positions [start, end), a run of consecutive scan positions
// at a time.
func (s *selection) ReadFrames(start, end int, dst []byte) error {
	fb := s.FrameBytes()
	if err := checkRange(describePath(s.Dataset), start, end, len(s.pos), fb, len(dst)); err != nil {
		return err
	}
	for i := start; i < end; {
		j := i + 1
		for j < end && s.pos[j] == s.pos[j-1]+1 {
			j++
		}
		if err := s.Dataset.ReadFrames(s.pos[i], s.pos[j-1]+1, dst[(i-start)*fb:(j-start)*fb]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// run returns the scan positions of frames [start, end) when they are consecutive.
func (s *selection) run(start, end int) (int, int, bool, error) {
	if err := checkRange(describePath(s.Dataset), start, end, len(s.pos), s.FrameBytes(), (end-start)*s.FrameBytes()); err != nil {
		return 0, 0, false, err
	}
	if end == start {
		return 0, 0, true, nil
	}
	return s.pos[start], s.pos[end-1] + 1, s.pos[end-1]-s.pos[start] == end-1-start, nil
}

func (s *selection) viewFrames(start, end int) ([]byte, error) {
	a, b, ok, err := s.run(start, end)
	if err != nil || !ok {
		return nil, err
	}
	return s.Dataset.(Viewer).ViewFrames(a, b)
}

func (s *selection) mapFrames(start, end int) (FrameMap, bool, error) {
	a, b, ok, err := s.run(start, end)
	if err != nil || !ok {
		return FrameMap{}, false, err
	}
	return s.Dataset.(Mapper).MapFrames(a, b)
}

// viewSelection, mapSelection and viewMapSelection are the views of datasets that are
// Viewers, Mappers or both: a view implements exactly the interfaces its dataset does.
type viewSelection struct{ *selection }

// ViewFrames returns frames [start, end) in place when they are consecutive scan
// positions, else nil (see Select).
func (s viewSelection) ViewFrames(start, end int) ([]byte, error) { return s.viewFrames(start, end) }

type mapSelection struct{ *selection }

// MapFrames locates frames [start, end) in the mapping when they are consecutive scan
// positions (see Mapper, Select).
func (s mapSelection) MapFrames(start, end int) (FrameMap, bool, error) {
	return s.mapFrames(start, end)
}

type viewMapSelection struct{ *selection }

// ViewFrames returns frames [start, end) in place when they are consecutive scan
// positions, else nil (see Select).
func (s viewMapSelection) ViewFrames(start, end int) ([]byte, error) {
	return s.viewFrames(start, end)
}

// MapFrames locates frames [start, end) in the mapping when they are consecutive scan
// positions (see Mapper, Select).
func (s viewMapSelection) MapFrames(start, end int) (FrameMap, bool, error) {
	return s.mapFrames(start, end)
}
