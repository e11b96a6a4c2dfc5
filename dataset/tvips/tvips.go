// Package tvips reads TVIPS camera streams (.tvips; EM-Menu's recorder) as 4D-STEM
// datasets. Import it for its side effect (it registers format "tvips" with package
// dataset).
//
// The layout is the one LiberTEM (libertem.io.dataset.tvips) and RosettaSciIO
// (rsciio.tvips) read. An acquisition is one file, or several parts <name>_000.tvips,
// <name>_001.tvips, ... read in order as one stream; opening any part opens them all.
// The first part starts with a 256-byte series header of little-endian int32 words:
//
//	0 size (256)  4 version (1 or 2)  8 dimX  12 dimY  16 bits per pixel (8 or 16)
//	20 offsetX  24 offsetY  28 binX  32 binY  36 pixel size (nm)  40 high tension (kV)
//	44 total magnification  48 image header bytes (version 2; 12 in version 1)
//	52 204 unused bytes
//
// then, in every part, frame records of an image header and dimY×dimX pixels (uint8 or
// little-endian uint16): sig shape (dimY, dimX) in stored order. The version 2 image
// header starts with
//
//	0 counter  4 time (s)  8 ms  12 LUT index  16 Faraday  20 TEM mag  24 mag mode
//	28 stage x, y, z, alpha, beta (float32)  48 rotator index (uint32)  52 ...
//	68 scan x (float32)  72 scan y (float32)  (when the header has 76 bytes or more)
//
// A part that is not the last must hold whole records; the last may be cut inside one
// (an interrupted acquisition: that frame is not read).
//
// The scan is placed from the image headers, as LiberTEM and RosettaSciIO infer it. With
// scan x and y (LiberTEM): frame i is at scan position (y, x), the nav shape is (max y +
// 1, max x + 1), and frames before the last (0, 0) that precedes the scan's first other
// position were recorded before the scan. Else with the rotator index (RosettaSciIO): a
// frame of index r > 0 is at scan position r−1 of a scan of max r positions (index 0:
// no scan position, e.g. frames before the scan started); the scan is square when max r
// is a square (RosettaSciIO's assumption, noted), else (1, max r) with the warning that
// names option nav_shape. The first frame at a position is read there (later ones
// repeating it are not), positions no frame covers are blank frames, each noted; frames
// in scan order are read from the first scan frame on (a sync offset), in place from the
// file's mapping when the stream is one file. A file
// whose headers hold no scan position (version 1, all zero) gives no scan shape: (1,
// frames) with the warning. Format option rotator_index false, or option sync_offset,
// reads the frames in file order instead. The series header, as both readers lay it
// out, has no rotation or flip field (the "rotator" index is the scan's): frames are
// read as stored.
package tvips

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

func init() {
	dataset.Register(dataset.Format{Name: "tvips", Extensions: []string{".tvips"}, Open: Open,
		Describe: "tvips (TVIPS camera stream: .tvips, or its parts _000, _001, ...)",
		FormatOptions: []dataset.FormatOption{{Key: "rotator_index", Default: "true", Switch: true,
			Usage: "TVIPS streams: place frames at the scan positions their image headers give (rotator index, or scan x and y); false reads them in file order"}}})
}

// SeriesHeaderBytes is the size of the series header at the start of the first part.
const SeriesHeaderBytes = 256

// maxImageHeader bounds the image header bytes a series header may state (1 MiB).
const maxImageHeader = 1 << 20

// SeriesHeader is the series header of a TVIPS stream.
type SeriesHeader struct {
	// Version is 1 or 2.
	Version int
	// DimX, DimY are the frame's columns and rows.
	DimX, DimY int
	// DType is uint8 or uint16 (8 or 16 bits per pixel).
	DType dataset.DType
	// ImageHeader is the bytes of every frame's image header (12 in version 1).
	ImageHeader int
	// OffsetX, OffsetY, BinX, BinY are the camera's readout window and binning.
	OffsetX, OffsetY, BinX, BinY int
}

// ParseSeriesHeader parses the series header (b holds the first part's first bytes).
// Errors name the field: errs.DType for a pixel depth stemdot does not read,
// errs.Format for the rest.
func ParseSeriesHeader(b []byte) (SeriesHeader, error) {
	if len(b) < SeriesHeaderBytes {
		return SeriesHeader{}, errs.New(errs.Format, "the file of %d bytes is shorter than the %d-byte TVIPS series header", len(b), SeriesHeaderBytes)
	}
	word := func(i int) int { return int(int32(binary.LittleEndian.Uint32(b[4*i:]))) }
	if size := word(0); size != SeriesHeaderBytes {
		return SeriesHeader{}, errs.New(errs.Format, "TVIPS series header: size field %d, not %d: not the first part of a TVIPS stream", size, SeriesHeaderBytes)
	}
	h := SeriesHeader{Version: word(1), DimX: word(2), DimY: word(3), OffsetX: word(5), OffsetY: word(6), BinX: word(7), BinY: word(8)}
	switch h.Version {
	case 1:
		h.ImageHeader = 12
	case 2:
		h.ImageHeader = word(12)
		if h.ImageHeader < 0 || h.ImageHeader > maxImageHeader {
			return SeriesHeader{}, errs.New(errs.Format, "TVIPS series header: image header bytes %d outside 0 to %d", h.ImageHeader, maxImageHeader)
		}
	default:
		return SeriesHeader{}, errs.New(errs.Format, "TVIPS series header: unknown version %d (1 or 2)", h.Version)
	}
	if h.DimX <= 0 || h.DimY <= 0 {
		return SeriesHeader{}, errs.New(errs.Format, "TVIPS series header: frame size dimX=%d, dimY=%d is not positive", h.DimX, h.DimY)
	}
	switch bpp := word(4); bpp {
	case 8:
		h.DType = dataset.Uint8
	case 16:
		h.DType = dataset.Uint16
	case 32, 64:
		return SeriesHeader{}, errs.New(errs.DType, "TVIPS series header: %d bits per pixel: stemdot reads TVIPS frames of 8 or 16 bits", bpp)
	default:
		return SeriesHeader{}, errs.New(errs.Format, "TVIPS series header: bits per pixel %d (8 or 16)", bpp)
	}
	return h, nil
}

// partName matches the name of a part: <name>_NNN.tvips.
var partName = regexp.MustCompile(`^(.*)_([0-9]{3})(\.[^.]*)$`)

// streamParts returns the parts of the stream that path belongs to: <name>_000, _001, ... up
// to the first number missing, or path alone when its name does not end in _NNN or no
// <name>_000 is there. Errors (errs.IO) say that path's part is not among them.
func streamParts(path string) ([]string, error) {
	m := partName.FindStringSubmatch(path)
	if m == nil {
		return []string{path}, nil
	}
	var parts []string
	for i := 0; i < 1000; i++ {
		p := m[1] + fmt.Sprintf("_%03d", i) + m[3]
		if _, err := os.Stat(p); err != nil {
			break
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return []string{path}, nil // a file whose name merely ends in _NNN
	}
	if !slices.Contains(parts, path) {
		n, _ := strconv.Atoi(m[2])
		return nil, errs.New(errs.IO, "dataset: %s: part %d of a TVIPS stream whose parts are not all there: %s_000%s (with the series header) to %s_%03d%s are read in order, and %s",
			path, n, m[1], m[3], m[1], n, m[3], missingPart(parts, m[1], m[3]))
	}
	return parts, nil
}

func missingPart(parts []string, base, ext string) string {
	return fmt.Sprintf("%s_%03d%s is missing", filepath.Base(base), len(parts), ext)
}

// part is one file of a stream.
type part struct {
	path   string
	f      *os.File
	size   int64
	offset int64 // where its first record starts
	first  int   // its first frame's number in the stream
	frames int   // its whole records
}

// Open opens the TVIPS stream that the file at path is part of (see the package doc).
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	names, err := streamParts(path)
	if err != nil {
		return nil, err
	}
	var parts []part
	closeAll := func() {
		for _, p := range parts {
			p.f.Close()
		}
	}
	fail := func(name string, err error) (dataset.Dataset, error) {
		closeAll()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", name, err))
	}
	for _, name := range names {
		f, size, err := dataset.OpenFile(name)
		if err != nil {
			closeAll()
			return nil, err
		}
		parts = append(parts, part{path: name, f: f, size: size})
	}
	head, err := dataset.ReadHeader(parts[0].f, parts[0].size, SeriesHeaderBytes)
	if err != nil {
		return fail(names[0], err)
	}
	h, err := ParseSeriesHeader(head)
	if err != nil {
		return fail(names[0], err)
	}
	sig := [2]int{h.DimY, h.DimX}
	fb, err := dataset.CheckSig(sig, h.DType)
	if err != nil {
		return fail(names[0], err)
	}
	record := int64(h.ImageHeader) + int64(fb)
	parts[0].offset = SeriesHeaderBytes
	total, cut := 0, int64(0)
	for i := range parts {
		p := &parts[i]
		data := p.size - p.offset
		p.first, p.frames = total, int(data/record)
		total += p.frames
		if rest := data % record; rest != 0 {
			if i < len(parts)-1 {
				return fail(p.path, fmt.Errorf("the part holds %d bytes of frame records, not a whole number of %d-byte records (%d-byte image header, %d×%d pixels of %v), and is not the last part",
					data, record, h.ImageHeader, h.DimY, h.DimX, h.DType))
			}
			cut = rest
		}
	}
	if total == 0 {
		return fail(names[0], errs.New(errs.Format, "the stream holds no whole frame record of %d bytes", record))
	}
	var notes []string
	if len(parts) > 1 {
		notes = append(notes, fmt.Sprintf("a stream of %d parts (%s to %s): %d frames", len(parts), filepath.Base(names[0]), filepath.Base(names[len(names)-1]), total))
	}
	s := &stream{parts: parts, header: int64(h.ImageHeader), record: record, sig: sig, dt: h.DType, n: total}
	ff := dataset.FileFrames{Whole: total, CutBytes: cut, RecordBytes: record}
	sc, err := s.scan(h)
	if err != nil {
		return fail(names[0], err)
	}
	rotator, err := dataset.SwitchOption(opt, "rotator_index", true)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("dataset: %s: %w", path, err) // errs.Argument
	}
	useScan := sc != nil
	if useScan && !rotator {
		useScan = false
		notes = append(notes, "option rotator_index false: the frames are read in file order, not placed by "+sc.what)
	}
	if useScan && opt.SyncOffset != 0 {
		useScan = false
		notes = append(notes, "option sync_offset given: the frames are read in file order from it, not placed by "+sc.what)
	}
	// Option nav_shape of as many positions as the stream has frames reads them all in
	// file order (option nav_shape's contract), not only those the scan places.
	if n := 1; useScan && len(opt.NavShape) > 0 {
		for _, v := range opt.NavShape {
			n *= v
		}
		if n == total && len(sc.placement.FrameOf) != total {
			useScan = false
			notes = append(notes, fmt.Sprintf("nav shape %s (option nav_shape) has as many positions as the file has frames: they are read in file order, not placed by %s", npy.ShapeString(opt.NavShape), sc.what))
		}
	}
	var fileNav []int
	source := ""
	frameOf := []int(nil)
	if useScan {
		fileNav, source = sc.nav, sc.source
		notes = append(notes, sc.notes...)
		notes = append(notes, sc.placement.Notes...)
		if sc.placement.InOrder {
			opt.SyncOffset, ff.SyncOffsetNoted = sc.placement.First, true
		} else {
			frameOf = sc.placement.FrameOf
		}
	}
	ff.Notes = notes
	var all dataset.Dataset = s
	if len(parts) == 1 {
		fl := dataset.Flat{Format: "tvips", Path: names[0], File: parts[0].f, Size: parts[0].size, Offset: SeriesHeaderBytes,
			Header: int64(h.ImageHeader), Sig: sig, DType: h.DType}
		if frameOf == nil {
			return dataset.OpenFlat(fl, opt, fileNav, source, ff)
		}
		if all, err = dataset.OpenFlat(fl, dataset.Options{}, nil, "", dataset.FileFrames{Whole: total, RecordBytes: record}); err != nil {
			return nil, err
		}
	}
	if frameOf != nil {
		r, err := dataset.Reorder(all, frameOf)
		if err != nil {
			all.Close()
			return nil, err
		}
		ff.Whole, ff.CutBytes = len(frameOf), 0
		all = r
	}
	ds, err := dataset.Reconcile(all, opt, fileNav, source, ff)
	if err != nil {
		all.Close()
		return nil, err
	}
	return ds, nil
}

// scanInfo is the scan that the image headers describe.
type scanInfo struct {
	nav       []int  // nil: no scan shape (the warning names option nav_shape)
	source    string // where nav comes from
	what      string // what placed the frames, for notes
	placement dataset.Placement
	notes     []string
}

// scan reads the scan position of every frame from the image headers: scan x and y
// when the headers hold them and they are not all zero, else the rotator index; nil
// when the headers hold neither (version 1, too short, all zero) or the values are no
// scan index.
func (s *stream) scan(h SeriesHeader) (*scanInfo, error) {
	if h.Version != 2 || h.ImageHeader < 52 {
		return nil, nil
	}
	n := min(h.ImageHeader, 76)
	buf := make([]byte, n)
	rot := make([]int64, s.n)
	var xs, ys []float32
	if n >= 76 {
		xs, ys = make([]float32, s.n), make([]float32, s.n)
	}
	le := binary.LittleEndian
	for i := range s.n {
		p := s.part(i)
		if _, err := p.f.ReadAt(buf, p.offset+int64(i-p.first)*s.record); err != nil {
			return nil, dataset.ReadError(p.path, p.f, p.size, i, i+1, fmt.Errorf("reading the image header: %w", err))
		}
		rot[i] = int64(le.Uint32(buf[48:]))
		if xs != nil {
			xs[i], ys[i] = math.Float32frombits(le.Uint32(buf[68:])), math.Float32frombits(le.Uint32(buf[72:]))
		}
	}
	if sc := scanXY(xs, ys); sc != nil {
		return sc, nil
	}
	return scanRotator(rot), nil
}

// scanXY places frames by the scan x and y of their image headers (LiberTEM's
// detect_shape), or returns nil when they are all zero or not scan positions
// (non-negative integers below 2^16).
func scanXY(xs, ys []float32) *scanInfo {
	nx, ny, start := 0, 0, -1
	for i := range xs {
		x, y := float64(xs[i]), float64(ys[i])
		if x < 0 || y < 0 || x != math.Trunc(x) || y != math.Trunc(y) || x >= 1<<16 || y >= 1<<16 {
			return nil
		}
		nx, ny = max(nx, int(x)+1), max(ny, int(y)+1)
		if start < 0 && (x != 0 || y != 0) {
			start = i
		}
	}
	if start < 0 || nx*ny > 4*len(xs)+16 {
		return nil
	}
	// The scan starts at the last (0, 0) before its first other position.
	start = max(start-1, 0)
	posOf := make([]int, len(xs))
	for i := range posOf {
		posOf[i] = -1
		if i >= start {
			posOf[i] = int(ys[i])*nx + int(xs[i])
		}
	}
	what := "the scan x and y of the image headers"
	return &scanInfo{nav: []int{ny, nx}, source: fmt.Sprintf(" from %s (x up to %d, y up to %d)", what, nx-1, ny-1), what: what,
		placement: dataset.Place(posOf, nx*ny, what)}
}

// scanRotator places frames by the rotator index of their image headers (RosettaSciIO's
// scan_shape "auto"), or returns nil when it is zero for every frame or larger than a
// scan index of these frames could be (over 2·frames+16).
func scanRotator(rot []int64) *scanInfo {
	p := slices.Max(rot)
	if p == 0 || p > 2*int64(len(rot))+16 {
		return nil
	}
	posOf := make([]int, len(rot))
	for i, r := range rot {
		posOf[i] = int(r) - 1
	}
	what := "the rotator index of the image headers"
	sc := &scanInfo{what: what, placement: dataset.Place(posOf, int(p), what)}
	if k := int(math.Sqrt(float64(p))); k >= 2 && int64(k*k) == p {
		sc.nav = []int{k, k}
		sc.source = fmt.Sprintf(" from %s (%d scan positions, a square scan assumed)", what, p)
		sc.notes = append(sc.notes, fmt.Sprintf("%s counts %d scan positions: read as a square scan of %d×%d, as RosettaSciIO does; give option nav_shape if it is not square", what, p, k, k))
	} else {
		sc.notes = append(sc.notes, fmt.Sprintf("%s counts %d scan positions, which gives no scan shape", what, p))
	}
	return sc
}

// stream is the frames of every part of a stream, in order.
type stream struct {
	parts          []part
	header, record int64
	sig            [2]int
	dt             dataset.DType
	n              int
	closed         atomic.Bool
}

func (s *stream) Format() string       { return "tvips" }
func (s *stream) Path() string         { return s.parts[0].path }
func (s *stream) NavShape() []int      { return []int{1, s.n} }
func (s *stream) SigShape() [2]int     { return s.sig }
func (s *stream) DType() dataset.DType { return s.dt }
func (s *stream) NumFrames() int       { return s.n }
func (s *stream) FrameBytes() int      { return s.sig[0] * s.sig[1] * s.dt.Size() }
func (s *stream) part(frame int) *part {
	i, _ := slices.BinarySearchFunc(s.parts, frame, func(p part, f int) int {
		switch {
		case f < p.first:
			return 1
		case f >= p.first+p.frames:
			return -1
		}
		return 0
	})
	return &s.parts[i]
}

// ReadFrames reads frames [start, end) of the stream, part by part: the pixels of each
// record with one positioned read, converted to host byte order.
func (s *stream) ReadFrames(start, end int, dst []byte) error {
	fb := s.FrameBytes()
	if err := dataset.CheckRange(s.Path(), start, end, s.n, fb, len(dst)); err != nil {
		return err
	}
	if s.closed.Load() {
		return errs.New(errs.Argument, "dataset: %s: read after Close", s.Path())
	}
	for i := start; i < end; i++ {
		p := s.part(i)
		out := dst[(i-start)*fb : (i-start+1)*fb]
		if _, err := p.f.ReadAt(out, p.offset+int64(i-p.first)*s.record+s.header); err != nil {
			return dataset.ReadError(p.path, p.f, p.size, i-p.first, i-p.first+1, err)
		}
		dataset.CopyToHost(out, out, s.dt.Size(), false)
	}
	return nil
}

// Close closes every part.
func (s *stream) Close() error {
	if s.closed.Swap(true) {
		return errs.New(errs.Argument, "dataset: %s: already closed", s.Path())
	}
	var first error
	for _, p := range s.parts {
		if err := p.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
