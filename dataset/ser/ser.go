// Package ser reads FEI/Thermo Fisher TIA series files (.ser, opened by their .ser or
// their .emi) for package dataset, which it registers as format "ser".
//
// The layout is TIA's "SER file format" as RosettaSciIO (rsciio.tia) and LiberTEM
// (libertem.io.dataset.ser) read it; every field is little-endian:
//
//	0 ByteOrder u16 (0x4949)  2 SeriesID u16 (0x0197)  4 SeriesVersion u16 (0x0210:
//	32-bit offsets, 0x0220: 64-bit)  6 DataTypeID u32 (0x4120 1-D elements, 0x4122 2-D)
//	10 TagTypeID u32 (0x4152 time, 0x4142 time and position)  14 TotalNumberElements u32
//	18 ValidNumberElements u32  22 OffsetArrayOffset (u32 or u64)  then NumberDimensions
//	u32 and per dimension: DimensionSize i32, CalibrationOffset f64, CalibrationDelta
//	f64, CalibrationElement i32, DescriptionLength i32, Description, UnitsLength i32,
//	Units.
//
// At OffsetArrayOffset, TotalNumberElements data element offsets (u32 or u64), then as
// many tag offsets. A 2-D data element is a 50-byte header, CalibrationOffsetX f64,
// CalibrationDeltaX f64, CalibrationElementX i32, the same for Y, DataType u16 (1 uint8,
// 2 uint16, 3 uint32, 4 int8, 5 int16, 6 int32, 7 float32, 8 float64; 9 and 10 complex,
// refused with errs.DType), ArraySizeX u32, ArraySizeY u32, then ArraySizeY rows of
// ArraySizeX pixels: a frame of sig shape (ArraySizeY, ArraySizeX). TIA stores the rows
// bottom-up: row 0 of a frame is the last stored row, as ncempy 1.16 (fileSER.getDataset
// of ncempy.io.ser: np.flipud), and so LiberTEM, and RosettaSciIO 0.15 (rsciio.tia:
// dc[..., ::-1, :]) read it, so that masks and positions carry over between them and
// stemdot. A tag is TagTypeID u16, 2 bytes, Time u32, and with 0x4142 PositionX f64 and
// PositionY f64.
//
// Only the first ValidNumberElements elements were recorded. The nav shape is the
// dimension array's: one dimension (a series or a line scan) gives (n,), which any nav
// shape of n positions may reshape; two give the scan, (Dim2, Dim1) when the first two
// elements' positions share PositionY (the scan runs along x first), else (Dim1, Dim2),
// as RosettaSciIO reads them; none gives no scan shape (give option nav_shape). A scan
// cut short (ValidNumberElements < TotalNumberElements) is reconciled as every format's
// (its complete rows are kept). Frames at a fixed stride are read with one positioned
// read per range (dataset.OpenFlat; the first and last elements' headers are checked at
// open), others element by element, each element's header checked; either way the rows
// are copied out in reverse (the frames are never served in place from a mapping).
//
// Calibrations (dataset.Calibration): a scan's nav axes from the dimension array
// (CalibrationDelta, and CalibrationOffset at CalibrationElement: index 0 at offset −
// element·delta, the pixels' edge as the elements' position tags show; units as stored,
// TIA's "meters" in nm); the frames' axes from element 0's calibration, in the units the
// EMI file's microscope mode implies (emiUnits). RosettaSciIO reads the same scales.
//
// A SER file of 1-D elements holds spectra (an EDS or EELS spectrum image) and is
// refused. An EMI file (TIA's metadata) is opened through the SER files beside it,
// <name>_1.ser, <name>_2.ser, ...: the first that holds 2-D elements, with a note when
// there are several.
package ser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

func init() {
	dataset.Register(dataset.Format{Name: "ser", Extensions: []string{".ser", ".emi"}, Magic: []string{"II\x97\x01"}, Open: Open,
		Describe: "ser (FEI/Thermo TIA: .ser, or the .emi beside its _N.ser files)"})
}

// The constants of the SER header.
const (
	byteOrderMark = 0x4949
	seriesID      = 0x0197
	data1D        = 0x4120
	data2D        = 0x4122
	tagXY         = 0x4142
	elementHeader = 50 // bytes before a 2-D element's pixels
)

var dtypes = map[uint16]dataset.DType{1: dataset.Uint8, 2: dataset.Uint16, 3: dataset.Uint32, 4: dataset.Int8,
	5: dataset.Int16, 6: dataset.Int32, 7: dataset.Float32, 8: dataset.Float64}

// serHeader is the parsed header of a SER file.
type serHeader struct {
	version       uint16
	dataType      uint32 // DataTypeID
	tagType       uint32
	total, valid  int
	offsetArray   int64
	offsetBytes   int64 // 4 or 8
	dims          []int // DimensionSize of each dimension, as stored
	dimsDescribed []string
	dimsCal       []serCal // the calibration of each dimension
}

// serCal is a dimension's calibration: index i lies at offset + (i − element)·delta
// units, as RosettaSciIO reads it (offset − element·delta, scale delta).
type serCal struct {
	offset, delta float64
	element       int32
	units         string
}

// axis is the calibration as a dataset.Axis named name in units (SI: "meters" and
// "1/meters" become nm and 1/nm).
func (c serCal) axis(name, units string) dataset.Axis {
	return dataset.NewAxis(name, c.delta, c.offset-float64(c.element)*c.delta, units)
}

// parseHeader parses the header and dimension array at the start of a SER file (b holds
// its first bytes).
func parseHeader(b []byte) (serHeader, error) {
	le := binary.LittleEndian
	if len(b) < 30 || le.Uint16(b) != byteOrderMark || le.Uint16(b[2:]) != seriesID {
		return serHeader{}, fmt.Errorf("not a TIA SER file: it does not start with byte order 0x4949 and series ID 0x0197")
	}
	h := serHeader{version: le.Uint16(b[4:]), dataType: le.Uint32(b[6:]), tagType: le.Uint32(b[10:]),
		total: int(le.Uint32(b[14:])), valid: int(le.Uint32(b[18:]))}
	pos := 22
	switch h.version {
	case 0x0210:
		h.offsetBytes, h.offsetArray = 4, int64(le.Uint32(b[22:]))
		pos += 4
	case 0x0220:
		if len(b) < 34 {
			return serHeader{}, fmt.Errorf("SER header cut short (%d bytes)", len(b))
		}
		if v := le.Uint64(b[22:]); v > math.MaxInt64 {
			return serHeader{}, fmt.Errorf("SER header: OffsetArrayOffset %d is past the end of any file", v)
		}
		h.offsetBytes, h.offsetArray = 8, int64(le.Uint64(b[22:]))
		pos += 8
	default:
		return serHeader{}, fmt.Errorf("SER header: SeriesVersion %#04x (want 0x0210 or 0x0220)", h.version)
	}
	nd := le.Uint32(b[pos:])
	pos += 4
	if nd > 8 {
		return serHeader{}, fmt.Errorf("SER header: NumberDimensions %d (stemdot reads 0 to 2)", nd)
	}
	for i := range int(nd) {
		if pos+28 > len(b) {
			return serHeader{}, fmt.Errorf("SER header: dimension %d cut short", i+1)
		}
		size := int32(le.Uint32(b[pos:]))
		cal := serCal{offset: math.Float64frombits(le.Uint64(b[pos+4:])), delta: math.Float64frombits(le.Uint64(b[pos+12:])),
			element: int32(le.Uint32(b[pos+20:]))}
		descLen := int32(le.Uint32(b[pos+24:]))
		pos += 28
		if descLen < 0 || int(descLen) > len(b)-pos-4 {
			return serHeader{}, fmt.Errorf("SER header: dimension %d: DescriptionLength %d outside the header", i+1, descLen)
		}
		desc := string(b[pos : pos+int(descLen)])
		pos += int(descLen)
		unitsLen := int32(le.Uint32(b[pos:]))
		pos += 4
		if unitsLen < 0 || int(unitsLen) > len(b)-pos {
			return serHeader{}, fmt.Errorf("SER header: dimension %d: UnitsLength %d outside the header", i+1, unitsLen)
		}
		cal.units = string(b[pos : pos+int(unitsLen)])
		pos += int(unitsLen)
		if size < 1 {
			return serHeader{}, fmt.Errorf("SER header: dimension %d (%q) has DimensionSize %d", i+1, desc, size)
		}
		h.dims = append(h.dims, int(size))
		h.dimsDescribed = append(h.dimsDescribed, desc)
		h.dimsCal = append(h.dimsCal, cal)
	}
	if h.dataType != data1D && h.dataType != data2D {
		return serHeader{}, fmt.Errorf("SER header: DataTypeID %#x (want 0x4120 for 1-D or 0x4122 for 2-D data elements)", h.dataType)
	}
	return h, nil
}

// headerBytes is how much of a file parseHeader is given: the fixed header and the
// dimension array with its strings.
const headerBytes = 1 << 16

// readHeader reads and parses the header of the open SER file f of size bytes.
func readHeader(f *os.File, size int64) (serHeader, error) {
	b, err := dataset.ReadHeader(f, size, headerBytes)
	if err != nil {
		return serHeader{}, err
	}
	return parseHeader(b)
}

// Open opens a SER file, or the SER file of frames beside an EMI file (dataset.Format.Open
// of format "ser").
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	var notes []string
	if strings.EqualFold(filepath.Ext(path), ".emi") {
		serPath, n, err := serOfEMI(path)
		if err != nil {
			return nil, err
		}
		path, notes = serPath, n
	}
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	s, err := parse(f, size)
	if err != nil {
		f.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	if units := emiUnits(path); units != "" {
		s.cal.Sig = []dataset.Axis{s.first.y.axis(dataset.SigNames[0], units), s.first.x.axis(dataset.SigNames[1], units)}
	}
	ff := dataset.FileFrames{Whole: len(s.offsets), CutBytes: s.cut, RecordBytes: int64(elementHeader + s.frameBytes),
		Series: len(s.hdr.dims) == 1, Notes: notes, Calibration: s.cal}
	if stride, ok := fixedStride(s.offsets, ff.RecordBytes, size); ok {
		return dataset.OpenFlat(dataset.Flat{Format: "ser", Path: path, File: f, Size: size, Offset: s.offsets[0],
			Header: elementHeader, Footer: stride - ff.RecordBytes, Sig: s.sig, DType: s.dt, Decode: flipRows(s.sig, s.dt)},
			opt, s.fileNav, s.source, ff)
	}
	d := &elements{path: path, f: f, size: size, offsets: s.offsets, sig: s.sig, dt: s.dt, head: s.head, flip: flipRows(s.sig, s.dt)}
	ds, err := dataset.Reconcile(d, opt, s.fileNav, s.source, ff)
	if err != nil {
		f.Close()
		return nil, err
	}
	return ds, nil
}

// serName matches the SER files of an EMI file: <name>_<n>.ser.
var serName = regexp.MustCompile(`^_([0-9]+)\.[sS][eE][rR]$`)

// serOfEMI returns the SER file of frames of the EMI file at path: the first of the
// <name>_N.ser beside it (by N) that holds 2-D data elements, with a note when there are
// several.
func serOfEMI(path string) (string, []string, error) {
	f, _, err := dataset.OpenFile(path)
	if err != nil {
		return "", nil, err
	}
	f.Close()
	base := strings.TrimSuffix(path, filepath.Ext(path))
	matches, _ := filepath.Glob(globEscape(base) + "_*.[sS][eE][rR]")
	type candidate struct {
		path string
		n    int
	}
	var list []candidate
	for _, m := range matches {
		if sub := serName.FindStringSubmatch(m[len(base):]); sub != nil {
			if n, err := strconv.Atoi(sub[1]); err == nil {
				list = append(list, candidate{m, n})
			}
		}
	}
	if len(list) == 0 {
		return "", nil, errs.New(errs.IO, "dataset: %s: no SER file beside this EMI file (its data are in %s_1.ser, %s_2.ser, ...): %w",
			path, filepath.Base(base), filepath.Base(base), os.ErrNotExist)
	}
	slices.SortFunc(list, func(a, b candidate) int { return a.n - b.n })
	var kinds []string
	chosen := ""
	for _, c := range list {
		kind, err := serKind(c.path)
		if err != nil {
			kind = "unreadable: " + err.Error()
		} else if chosen == "" && kind == kindFrames {
			chosen = c.path
		}
		kinds = append(kinds, filepath.Base(c.path)+" "+kind)
	}
	if chosen == "" {
		return "", nil, errs.New(errs.Format, "dataset: %s: no SER file of this EMI file holds frames (2-D data elements): %s",
			path, strings.Join(kinds, "; "))
	}
	var notes []string
	if len(list) > 1 {
		notes = append(notes, fmt.Sprintf("the EMI file %s has %d SER files (%s): %s, the first that holds frames, is read (open another by its path)",
			filepath.Base(path), len(list), strings.Join(kinds, "; "), filepath.Base(chosen)))
	}
	return chosen, notes, nil
}

// serSuffix matches the end of a SER file's path that the EMI file's lacks: _<n>.ser.
var serSuffix = regexp.MustCompile(`_[0-9]+\.[sS][eE][rR]$`)

// emiMode matches the microscope's mode in an EMI file's ObjectInfo XML.
var emiMode = regexp.MustCompile(`<Label>Mode</Label><Value>([^<]*)</Value>`)

// emiUnits returns the units of the frames' pixels (data element calibration) that the
// EMI file beside the SER file at path (<name>.emi for <name>_N.ser) says: "1/m" when
// its ExperimentalDescription's Mode says Diffraction, "m" in a TEM imaging mode, ""
// when there is no EMI file, no Mode, or the mode is STEM (where RosettaSciIO guesses
// from the camera; stemdot does not guess). RosettaSciIO (rsciio.tia's
// _guess_units_from_mode) reads Diffraction and TEM modes the same way.
func emiUnits(path string) string {
	at := serSuffix.FindStringIndex(path)
	if at == nil {
		return ""
	}
	base := path[:at[0]]
	for _, ext := range []string{".emi", ".EMI"} {
		f, size, err := dataset.OpenFile(base + ext)
		if err != nil {
			continue
		}
		b, err := dataset.ReadHeader(f, size, 64<<20)
		f.Close()
		if err != nil {
			return ""
		}
		m := emiMode.FindSubmatch(b)
		switch {
		case m == nil || bytes.Contains(m[1], []byte("STEM")):
			return ""
		case bytes.Contains(m[1], []byte("Diffraction")):
			return "1/m"
		}
		return "m"
	}
	return ""
}

// What a SER file holds, for serOfEMI's note.
const (
	kindFrames  = "holds frames"
	kindSpectra = "holds spectra (1-D data elements), not frames"
)

// serKind tells what the SER file at path holds.
func serKind(path string) (string, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h, err := readHeader(f, size)
	if err != nil {
		return "", err
	}
	if h.dataType == data1D {
		return kindSpectra, nil
	}
	return kindFrames, nil
}

// globEscape escapes the pattern characters of a path for filepath.Glob.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// file is what parse found in a SER file of frames.
type file struct {
	hdr        serHeader
	offsets    []int64 // of the elements recorded whole
	cut        int64   // bytes of an element cut off by the end of the file
	sig        [2]int
	dt         dataset.DType
	frameBytes int
	head       []byte // element 0's DataType, ArraySizeX, ArraySizeY
	fileNav    []int
	source     string
	cal        dataset.Calibration // nav axes; Open adds the signal axes
	first      element
}

// parse reads the header, offset arrays and element headers of the SER file f.
func parse(f *os.File, size int64) (file, error) {
	h, err := readHeader(f, size)
	if err != nil {
		return file{}, err
	}
	if h.dataType == data1D {
		return file{}, fmt.Errorf("the file holds spectra (1-D data elements), not frames: %d spectra on a scan of %v; stemdot reads SER files of 2-D data elements (diffraction patterns or images)", h.valid, h.dims)
	}
	if len(h.dims) > 2 {
		return file{}, fmt.Errorf("SER header: %d dimensions %v: stemdot reads series of 1 or scans of 2 dimensions", len(h.dims), h.dims)
	}
	if h.valid == 0 {
		return file{}, fmt.Errorf("the file holds no recorded data element (ValidNumberElements 0 of TotalNumberElements %d)", h.total)
	}
	if h.valid > h.total {
		return file{}, fmt.Errorf("SER header: ValidNumberElements %d exceeds TotalNumberElements %d", h.valid, h.total)
	}
	// The offset arrays: data offsets, then tag offsets, TotalNumberElements each.
	if h.offsetArray < 0 || h.offsetArray > size || int64(h.total) > (size-h.offsetArray)/(2*h.offsetBytes) {
		return file{}, fmt.Errorf("SER header: the offset arrays of 2×%d entries at OffsetArrayOffset %d do not fit in the file of %d bytes", h.total, h.offsetArray, size)
	}
	raw := make([]byte, 2*int64(h.total)*h.offsetBytes)
	if _, err := f.ReadAt(raw, h.offsetArray); err != nil {
		return file{}, errs.Wrap(errs.IO, fmt.Errorf("reading the offset arrays: %w", err))
	}
	offset := func(i int) int64 {
		if h.offsetBytes == 4 {
			return int64(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return int64(binary.LittleEndian.Uint64(raw[8*i:])) // above 2⁶³−1: negative, refused as outside the file
	}
	offsets := make([]int64, h.valid)
	for i := range offsets {
		offsets[i] = offset(i)
	}
	// The first element gives the frame's dtype and shape.
	first, err := readElementHeader(f, size, offsets[0], 0)
	if err != nil {
		return file{}, err
	}
	dt, ok := dtypes[first.dataType]
	if !ok {
		name := map[uint16]string{9: "complex64", 10: "complex128"}[first.dataType]
		if name == "" {
			name = "unknown"
		}
		return file{}, errs.New(errs.DType, "data element 0 has DataType %d (%s), which stemdot does not read (it reads DataType 1 to 8: uint8, uint16, uint32, int8, int16, int32, float32, float64)", first.dataType, name)
	}
	sig := [2]int{first.sizeY, first.sizeX}
	fb, err := dataset.CheckSig(sig, dt)
	if err != nil {
		return file{}, err
	}
	record := int64(elementHeader + fb)
	// Elements recorded whole: those before the first one the file cuts off.
	whole := len(offsets)
	var cut int64
	for i, o := range offsets {
		if o < 0 || o > size-record {
			whole = i
			if o >= 0 && o < size {
				cut = size - o
			}
			break
		}
	}
	if whole == 0 {
		return file{}, fmt.Errorf("data element 0 at byte %d (a %d-byte header and %d pixel bytes) does not fit in the file of %d bytes", offsets[0], elementHeader, fb, size)
	}
	offsets = offsets[:whole]
	last, err := readElementHeader(f, size, offsets[whole-1], whole-1)
	if err != nil {
		return file{}, err
	}
	if last.dataType != first.dataType || last.sizeX != first.sizeX || last.sizeY != first.sizeY {
		return file{}, fmt.Errorf("data element %d (DataType %d, %d×%d pixels) differs from element 0 (DataType %d, %d×%d pixels)",
			whole-1, last.dataType, last.sizeX, last.sizeY, first.dataType, first.sizeX, first.sizeY)
	}
	fileNav, navDims, source := navShape(f, h, raw, offset)
	return file{hdr: h, offsets: offsets, cut: cut, sig: sig, dt: dt, frameBytes: fb, head: first.raw, fileNav: fileNav, source: source,
		cal: dataset.Calibration{Nav: navAxes(h, navDims)}, first: first}, nil
}

// navAxes are the nav axes of the scan whose axes are the dimensions navDims of h, in
// numpy order, calibrated by the dimension array.
func navAxes(h serHeader, navDims []int) []dataset.Axis {
	var axes []dataset.Axis
	for i, name := range dataset.NavNames(len(navDims)) {
		c := h.dimsCal[navDims[i]]
		axes = append(axes, c.axis(name, c.units))
	}
	return axes
}

// flipRows returns the decoder of a stored frame of sig shape and dtype dt (little-endian)
// into a frame in host byte order whose row y is stored row sig_y−1−y.
func flipRows(sig [2]int, dt dataset.DType) func(dst, src []byte) {
	row := sig[1] * dt.Size()
	return func(dst, src []byte) {
		for y := range sig[0] {
			dataset.CopyToHost(dst[y*row:(y+1)*row], src[(sig[0]-1-y)*row:(sig[0]-y)*row], dt.Size(), false)
		}
	}
}

// fixedStride returns the stride of the elements when they lie at one and the last
// record (pixels and what follows up to the stride) is in the file.
func fixedStride(offsets []int64, record, size int64) (int64, bool) {
	stride := record
	if len(offsets) > 1 {
		stride = offsets[1] - offsets[0]
	}
	if stride < record {
		return 0, false
	}
	for i, o := range offsets {
		if o != offsets[0]+int64(i)*stride {
			return 0, false
		}
	}
	return stride, offsets[len(offsets)-1] <= size-stride
}

// navShape returns the scan shape the dimension array gives (nil for none), the
// dimension of each of its axes and where it came from.
func navShape(f *os.File, h serHeader, raw []byte, offset func(int) int64) ([]int, []int, string) {
	switch len(h.dims) {
	case 0:
		return nil, nil, ""
	case 1:
		return []int{h.dims[0]}, []int{0}, fmt.Sprintf(" from the SER dimension array (%q: %d)", h.dimsDescribed[0], h.dims[0])
	}
	// Two dimensions: x runs first when the first two elements share PositionY.
	xFirst := false
	if h.tagType == tagXY && h.valid > 1 {
		b := make([]byte, 2*24)
		_, err0 := f.ReadAt(b[:24], offset(h.total))
		_, err1 := f.ReadAt(b[24:], offset(h.total+1))
		xFirst = err0 == nil && err1 == nil && binary.LittleEndian.Uint64(b[16:]) == binary.LittleEndian.Uint64(b[40:])
	}
	if xFirst {
		return []int{h.dims[1], h.dims[0]}, []int{1, 0}, fmt.Sprintf(" from the SER dimension array (%d×%d, x first)", h.dims[0], h.dims[1])
	}
	return []int{h.dims[0], h.dims[1]}, []int{0, 1}, fmt.Sprintf(" from the SER dimension array (%d×%d)", h.dims[0], h.dims[1])
}

// element is the parsed header of a 2-D data element.
type element struct {
	dataType     uint16
	sizeX, sizeY int
	x, y         serCal // CalibrationOffsetX, CalibrationDeltaX, CalibrationElementX; the same for Y
	raw          []byte // the bytes that must match between elements: DataType and sizes
}

// readElementHeader reads the header of data element i at byte off.
func readElementHeader(f *os.File, size, off int64, i int) (element, error) {
	if off < 0 || off > size-elementHeader {
		return element{}, fmt.Errorf("data element %d at byte %d: its %d-byte header is outside the file of %d bytes", i, uint64(off), elementHeader, size)
	}
	b := make([]byte, elementHeader)
	if _, err := f.ReadAt(b, off); err != nil {
		return element{}, errs.Wrap(errs.IO, fmt.Errorf("reading data element %d's header: %w", i, err))
	}
	le := binary.LittleEndian
	cal := func(at int) serCal {
		return serCal{offset: math.Float64frombits(le.Uint64(b[at:])), delta: math.Float64frombits(le.Uint64(b[at+8:])), element: int32(le.Uint32(b[at+16:]))}
	}
	e := element{dataType: le.Uint16(b[40:]), raw: b[40:], x: cal(0), y: cal(20)}
	x, y := le.Uint32(b[42:]), le.Uint32(b[46:])
	if x == 0 || y == 0 || x > math.MaxInt32 || y > math.MaxInt32 {
		return element{}, fmt.Errorf("data element %d: ArraySizeX %d, ArraySizeY %d (want 1 to %d)", i, x, y, math.MaxInt32)
	}
	e.sizeX, e.sizeY = int(x), int(y)
	return e, nil
}

// elements is a SER file whose data elements are not at a fixed stride: each is read
// with its own positioned read.
type elements struct {
	path    string
	f       *os.File
	size    int64
	offsets []int64
	sig     [2]int
	dt      dataset.DType
	head    []byte // DataType, ArraySizeX, ArraySizeY of element 0, which every element repeats
	flip    func(dst, src []byte)
	closed  atomic.Bool
}

func (d *elements) Format() string       { return "ser" }
func (d *elements) Path() string         { return d.path }
func (d *elements) NavShape() []int      { return []int{len(d.offsets)} }
func (d *elements) SigShape() [2]int     { return d.sig }
func (d *elements) DType() dataset.DType { return d.dt }
func (d *elements) NumFrames() int       { return len(d.offsets) }
func (d *elements) FrameBytes() int      { return d.sig[0] * d.sig[1] * d.dt.Size() }

// ReadFrames reads frames [start, end), each element's header and pixels with one
// positioned read, checking that the header repeats element 0's data type and shape, and
// copies its rows out bottom-up.
func (d *elements) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := dataset.CheckRange(d.path, start, end, len(d.offsets), fb, len(dst)); err != nil {
		return err
	}
	if d.closed.Load() {
		return errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	rec := make([]byte, elementHeader+fb)
	for i := start; i < end; i++ {
		if _, err := d.f.ReadAt(rec, d.offsets[i]); err != nil {
			return dataset.ReadError(d.path, d.f, d.size, i, i+1, err)
		}
		if string(rec[40:elementHeader]) != string(d.head) {
			return errs.New(errs.Format, "dataset: %s: data element %d at byte %d: its header (DataType, ArraySizeX, ArraySizeY: % X) differs from element 0's (% X): the file is damaged",
				d.path, i, d.offsets[i], rec[40:elementHeader], d.head)
		}
		d.flip(dst[(i-start)*fb:(i-start+1)*fb], rec[elementHeader:])
	}
	return nil
}

// Close closes the file.
func (d *elements) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	return d.f.Close()
}
