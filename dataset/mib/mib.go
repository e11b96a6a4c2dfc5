// Package mib reads Quantum Detectors Merlin MIB files for package dataset: importing it
// registers the format "mib" (extensions .mib and .hdr, the Merlin .hdr sidecar opening
// the .mib beside it, or a file starting "MQ1,").
//
// The layout is read as LiberTEM (libertem.io.dataset.mib) and RosettaSciIO
// (rsciio.quantumdetector) read it: the file has no header of its own; every
// frame is an ASCII header of comma-separated fields, padded with NULs to the size given
// in its field 2 (384 bytes for a single chip, 768 for a quad), followed by the pixels,
// big-endian. Header fields: [0] "MQ1", [1] 1-based frame number, [2] header bytes,
// [3] number of chips, [4] width, [5] height, [6] pixel type (U08, U16, U32, or R64 for
// raw-packed counter data), [7] chip layout ("1x1", "2x2", "Nx1", optionally with a
// "G" suffix), ..., last field: counter depth in bits (1, 6, 12 or 24). Non-raw quad
// frames are stored as one assembled width×height image (512×512).
//
// Every frame header read is checked against the first frame's (header size, width,
// height, pixel type). Raw-packed R64 frames are decoded as mibraw.go describes.
//
// The nav shape is, in order of preference: option nav_shape; from the .hdr sidecar
// beside the file, (ScanY, ScanX) when present, else (Frames in Acquisition / Frames per
// Trigger, Frames per Trigger) as LiberTEM reads it when a trigger starts a scan line
// (Frames per Trigger > 1); else the scan rows that the frame timestamps show, with a
// note naming option nav_shape (timestamps.go, as RosettaSciIO guesses them); else
// (1, n_frames) with a warning naming option nav_shape.
// Flyback frames (Merlin's line skip) are told apart by the exposure time of the frame
// headers, as pyxem's Merlin reader does, else by a blank frame starting or ending every
// row; where neither tells, option flyback must say where they are (dataset.Flyback).
package mib

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/regfile"
)

func init() {
	dataset.Register(dataset.Format{Name: "mib", Extensions: []string{".mib", ".hdr"}, Magic: []string{"MQ1,"}, Open: open,
		Describe: "mib (Quantum Detectors Merlin: .mib, .hdr)"})
}

// mibMagic starts every MIB frame header.
var mibMagic = []byte("MQ1,")

// The frame header fields that must agree between frames, and their names in errors.
var mibCheckedFields = [...]struct {
	index int
	name  string
}{{2, "header size"}, {4, "width"}, {5, "height"}, {6, "pixel type"}}

// mibPixelTypes maps the MIB pixel type field to the stored dtype.
var mibPixelTypes = map[string]dataset.DType{"U08": dataset.Uint8, "U16": dataset.Uint16, "U32": dataset.Uint32}

// mibHeader is the parsed start of a MIB frame header.
type mibHeader struct {
	fields        []string // the comma-separated fields, NUL padding removed
	headerBytes   int
	width, height int
	pixelType     string
}

// parseMIBHeader parses the text of a frame header (h may hold more bytes than the
// header; the text ends at the first NUL).
func parseMIBHeader(h []byte) (mibHeader, error) {
	if !bytes.HasPrefix(h, mibMagic) {
		return mibHeader{}, fmt.Errorf("not a Merlin MIB frame header: it starts with %q, not \"MQ1,\"", h[:min(len(h), 4)])
	}
	if i := bytes.IndexByte(h, 0); i >= 0 {
		h = h[:i]
	}
	fields := strings.Split(strings.TrimRight(string(h), ","), ",")
	if len(fields) < 8 {
		return mibHeader{}, fmt.Errorf("MIB frame header has %d fields, want at least 8", len(fields))
	}
	var hd mibHeader
	hd.fields = fields
	hd.pixelType = fields[6]
	var err error
	for _, p := range []struct {
		dst  *int
		i    int
		name string
	}{{&hd.headerBytes, 2, "header size"}, {&hd.width, 4, "width"}, {&hd.height, 5, "height"}} {
		if *p.dst, err = strconv.Atoi(strings.TrimSpace(fields[p.i])); err != nil || *p.dst <= 0 {
			return mibHeader{}, fmt.Errorf("MIB frame header field %d (%s) is %q, not a positive number", p.i, p.name, fields[p.i])
		}
	}
	return hd, nil
}

// mibFile is a MIB file: the layout of its frames, read from its first frame header
// and checked against its last.
type mibFile struct {
	*Layout
	f         *os.File
	numFrames int // whole frames in the file
}

// open opens a Merlin .mib file (or the .mib beside a .hdr path).
func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	base := strings.TrimSuffix(path, filepath.Ext(path))
	if strings.EqualFold(filepath.Ext(path), ".hdr") {
		path = base + ".mib"
	}
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	d, err := newMIBFile(f, size)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	// The .hdr's scan shape is read also when option nav_shape is given, which must not
	// contradict it; a .hdr that cannot be read is then left out, with a note.
	hdrNav, source, hdrNote, err := mibNavFromHdr(base + ".hdr")
	if err != nil {
		if len(opt.NavShape) == 0 {
			f.Close()
			return nil, fmt.Errorf("dataset: %s: %w; give option nav_shape to read the file without it", path, err)
		}
		hdrNote = []string{fmt.Sprintf("the .hdr sidecar was not read (%v): the scan shape is option nav_shape's", err)}
	}
	// Neither the .hdr nor the user gives the scan shape: the frame timestamps may (not
	// with a sync offset or flyback frames stated, which shift the rows).
	if hdrNav == nil && len(opt.NavShape) == 0 && opt.SyncOffset == 0 && opt.Flyback.Place < dataset.FlybackStart {
		if rowLen, why := d.guessRowLen(); rowLen > 0 {
			hdrNav, source = []int{d.numFrames / rowLen, rowLen}, " guessed from the frame timestamps"
			hdrNote = append(hdrNote, fmt.Sprintf("the file gives no scan shape: nav shape (%d, %d) is guessed from the frame headers' timestamps: %s; give option nav_shape if the scan is another",
				hdrNav[0], hdrNav[1], why))
		}
	}
	fl := dataset.Flat{Format: "mib", Path: path, File: f, Size: size, Header: int64(d.HeaderBytes), Sig: d.Sig, DType: d.DType,
		BigEndian: true, Magic: mibMagic, CheckRecord: d.Check}
	if d.raw != nil {
		fl.PixelBytes = int64(d.PixelBytes)
		fl.Decode = d.Decode
	}
	stride := int64(d.RecordBytes())
	return dataset.OpenFlat(fl, opt, hdrNav, source, dataset.FileFrames{Whole: d.numFrames, CutBytes: size % stride,
		RecordBytes: stride, FlybackAtEnd: d.flybackAtEnd, Notes: hdrNote})
}

// flybackAtEnd tells whether the flyback frame of each of the rows scan rows of stride
// frames from frame first on ends the row or starts it, from the exposure times of the
// frame headers (field 10, in seconds, as pyxem's Merlin reader reads them): only when
// in every row checked (all, or dataset.FlybackRowsChecked spread from the first row to the
// last) the row's last frame, or its first, has another exposure time than the row's
// second and second-last frames, which agree. File frame 0, the first after arming, may
// have its own exposure time (a row ending with its flyback frame may start with it).
// why is the evidence, for the note; "" when the headers do not tell.
func (d *mibFile) flybackAtEnd(first, stride, rows int) (atEnd bool, why string) {
	if first < 0 || stride < 3 || rows < 2 || rows > (d.numFrames-first)/stride {
		return false, ""
	}
	exposure := func(frame int) string {
		h := make([]byte, d.HeaderBytes)
		if _, err := d.f.ReadAt(h, int64(frame)*int64(d.RecordBytes())); err != nil {
			return ""
		}
		if hd, err := parseMIBHeader(h); err == nil && len(hd.fields) > 10 {
			return strings.TrimSpace(hd.fields[10])
		}
		return ""
	}
	checked := min(rows, dataset.FlybackRowsChecked)
	ends, starts := 0, 0
	for i := range checked {
		row := first + i*(rows-1)/(checked-1)*stride
		head, second, secondLast, last := exposure(row), exposure(row+1), exposure(row+stride-2), exposure(row+stride-1)
		if second == "" || secondLast != second {
			return false, ""
		}
		if last != second && last != "" && (head == second || row == 0) {
			ends++
		}
		if head != second && head != "" && last == second {
			starts++
		}
	}
	if ends != checked && starts != checked {
		return false, ""
	}
	where := "every scan row"
	if checked < rows {
		where = fmt.Sprintf("each of %d scan rows spread over the %d", checked, rows)
	}
	why = "in " + where + ", its frame header's exposure time differs from the row's other frames'"
	return ends == checked, why
}

// Layout is the layout of the frames of a Merlin acquisition, read from a frame header.
// Merlin sends the same frame headers over TCP (package live/merlin) as it writes in
// MIB files, so that the file reader and the stream receiver decode frames alike.
type Layout struct {
	// HeaderBytes is the size of a frame header (field 2: 384 for a single chip, 768
	// for a quad); PixelBytes that of the pixels after it as stored (packed, for
	// raw-packed R64 frames).
	HeaderBytes, PixelBytes int
	// Sig is (sig_y, sig_x) of a decoded frame and DType its pixel dtype: U08, U16 and
	// U32 frames as stored; R64 frames uint8 (1 and 6 bits), uint16 (12 bits) or
	// uint32 (24 bits), quads assembled to (2·side, 2·side).
	Sig   [2]int
	DType dataset.DType
	raw   *mibRaw   // raw-packed (R64) pixels, or nil
	hd    mibHeader // the first frame's header, which every frame's must match (Check)
}

// ParseLayout reads the layout of a Merlin acquisition's frames from the frame header
// h (the header's bytes, possibly followed by more). Errors name the field at fault.
func ParseLayout(h []byte) (*Layout, error) {
	hd, err := parseMIBHeader(h)
	if err != nil {
		return nil, err
	}
	l := &Layout{HeaderBytes: hd.headerBytes, Sig: [2]int{hd.height, hd.width}, hd: hd}
	var ok bool
	l.DType, ok = mibPixelTypes[hd.pixelType]
	if hd.pixelType == "R64" {
		if l.raw, l.Sig, l.DType, err = newMIBRaw(hd); err != nil {
			return nil, err
		}
	} else if !ok {
		return nil, fmt.Errorf("unsupported MIB pixel type %q (want U08, U16, U32 or R64)", hd.pixelType)
	}
	if l.PixelBytes, err = dataset.CheckSig(l.Sig, l.DType); err != nil {
		return nil, fmt.Errorf("first frame header: %w", err)
	}
	if l.raw != nil {
		l.PixelBytes = l.raw.rawBytes
	}
	return l, nil
}

// String describes the frames as their header does: pixel type, counter depth and
// chip layout, e.g. "R64 12-bit 2x2"; a field of other than letters and digits quoted.
func (l *Layout) String() string {
	plain := func(v string) string {
		v = strings.TrimSpace(v)
		for _, c := range v {
			if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
				return strconv.Quote(v)
			}
		}
		return v
	}
	f := l.hd.fields
	return fmt.Sprintf("%s %s-bit %s", plain(l.hd.pixelType), plain(f[len(f)-1]), plain(f[7]))
}

// RecordBytes is the size of a frame's header and pixels.
func (l *Layout) RecordBytes() int { return l.HeaderBytes + l.PixelBytes }

// Decode decodes the stored pixels of one frame, src (PixelBytes), into dst
// (Sig[0]·Sig[1]·DType.Size() bytes), host byte order.
func (l *Layout) Decode(dst, src []byte) {
	if l.raw != nil {
		l.raw.decode(dst, src, l.Sig, l.DType)
	} else {
		dataset.CopyToHost(dst, src, l.DType.Size(), true)
	}
}

// doubleWidth24 tells whether the header may give twice the frame's width: LiberTEM
// reads the width of a 24-bit raw single-chip frame as twice the frame's (its two
// 12-bit halves side by side). halveWidth then takes the frame's true width.
func (l *Layout) doubleWidth24() bool {
	return l.raw != nil && l.raw.bits == 24 && !l.raw.quad && l.raw.rowPx%16 == 0
}

func (l *Layout) halveWidth() {
	l.raw.rowPx, l.raw.rawBytes = l.raw.rowPx/2, l.raw.rawBytes/2
	l.Sig[1] /= 2
	l.PixelBytes = l.raw.rawBytes
}

// FitPixelBytes takes n, the stored pixel bytes of a frame as its container tells them
// (a Merlin stream's message length), as the frame's size: it is PixelBytes, or half of
// it for a 24-bit raw frame whose header gives twice its width (the layout then takes
// the frame's true width). Another size is an error naming both.
func (l *Layout) FitPixelBytes(n int) error {
	switch {
	case n == l.PixelBytes:
		return nil
	case 2*n == l.PixelBytes && l.doubleWidth24():
		l.halveWidth()
		return nil
	}
	return fmt.Errorf("the frame has %d pixel bytes; its header says %d (%d×%d %s)", n, l.PixelBytes, l.hd.width, l.hd.height, l.hd.pixelType)
}

// newMIBFile reads the first and last frame headers of f (size bytes) and checks that
// they agree and that the file is a whole number of frames.
func newMIBFile(f *os.File, size int64) (*mibFile, error) {
	if size == 0 {
		return nil, errors.New("empty file (0 bytes): not a Merlin MIB file")
	}
	first := make([]byte, min(size, 768))
	if _, err := f.ReadAt(first, 0); err != nil {
		return nil, fmt.Errorf("reading the first frame header: %w", err)
	}
	l, err := ParseLayout(first)
	if err != nil {
		return nil, err
	}
	if l.doubleWidth24() {
		// Follow the next frame's magic to tell which width the header gives.
		next := make([]byte, len(mibMagic))
		if _, err := f.ReadAt(next, int64(l.HeaderBytes+l.PixelBytes/2)); err == nil && bytes.Equal(next, mibMagic) {
			l.halveWidth()
		}
	}
	if int64(l.HeaderBytes) > size-int64(l.PixelBytes) {
		return nil, fmt.Errorf("size %d bytes is less than one frame of %d-byte header + %d pixel bytes (%d×%d %s)",
			size, l.HeaderBytes, l.PixelBytes, l.hd.width, l.hd.height, l.hd.pixelType)
	}
	d := &mibFile{Layout: l, f: f}
	// A file cut inside a frame (an interrupted acquisition) is read up to its last whole
	// frame; dataset.Reconcile reports the rest.
	d.numFrames = int(size / int64(l.RecordBytes()))
	last := make([]byte, l.HeaderBytes)
	if _, err := f.ReadAt(last, int64(d.numFrames-1)*int64(l.RecordBytes())); err != nil {
		return nil, fmt.Errorf("reading the last frame header: %w", err)
	}
	if err := l.Check(last, d.numFrames-1); err != nil {
		return nil, err
	}
	return d, nil
}

// Check checks that frame's header h starts with "MQ1," and that its header size,
// width, height and pixel type fields equal the first frame's. It does not allocate.
func (l *Layout) Check(h []byte, frame int) error {
	if !bytes.HasPrefix(h, mibMagic) {
		return fmt.Errorf("frame %d: header mismatch between frames: frame header starts with %q, not \"MQ1,\"", frame, h[:min(len(h), 4)])
	}
	var fields [7][]byte
	field, from := 0, 0
	for i := 0; i < len(h) && field < len(fields); i++ {
		if h[i] == ',' || h[i] == 0 {
			fields[field] = h[from:i]
			field++
			from = i + 1
		}
	}
	for _, c := range mibCheckedFields {
		if want := l.hd.fields[c.index]; string(fields[c.index]) != want {
			return fmt.Errorf("frame %d: header mismatch between frames: %s is %q, frame 0 has %q", frame, c.name, fields[c.index], want)
		}
	}
	return nil
}

// Hdr is a Merlin acquisition header: the text of a .hdr sidecar, which Merlin also
// sends over TCP at the start of an acquisition (package live/merlin).
type Hdr struct {
	// Name names the header in messages (the sidecar's path).
	Name string
	// Fields maps the keys stemdot reads (hdrKeys), without their trailing colon, to
	// their values: the others are not kept, so that a header of any length takes no
	// more memory than these.
	Fields map[string]string
}

// hdrKeys are the keys of an acquisition header that stemdot reads.
var hdrKeys = []string{"ScanX", "ScanY", "Frames in Acquisition (Number)", "Frames per Trigger (Number)", RecordKey}

// hdrParser reads an acquisition header line by line: tab-separated "key:\tvalue" lines
// between a line starting "HDR," and one starting "End" (RosettaSciIO's and LiberTEM's
// reading).
type hdrParser struct {
	h          Hdr
	start, end bool
}

// line takes the next line; false once the "End" line came.
func (p *hdrParser) line(line []byte) (more bool, err error) {
	if !p.start {
		if !bytes.HasPrefix(line, []byte("HDR")) {
			return false, fmt.Errorf("%s is not a Merlin .hdr file: it does not start with \"HDR,\"", p.h.Name)
		}
		p.start = true
		return true, nil
	}
	line = bytes.TrimRight(line, "\r\x00")
	if bytes.HasPrefix(line, []byte("End")) {
		p.end = true
		return false, nil
	}
	k, v, ok := bytes.Cut(line, []byte("\t"))
	if !ok {
		return true, nil
	}
	k = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(k), []byte(":")))
	for _, key := range hdrKeys {
		if string(k) == key {
			p.h.Fields[key] = string(bytes.TrimSpace(v))
		}
	}
	return true, nil
}

// done is the header read, or an error for one without its "End" line.
func (p *hdrParser) done() (Hdr, error) {
	if !p.end {
		if !p.start {
			return Hdr{}, fmt.Errorf("%s is not a Merlin .hdr file: it is empty", p.h.Name)
		}
		return Hdr{}, fmt.Errorf("%s: no \"End\" line: truncated .hdr file", p.h.Name)
	}
	return p.h, nil
}

// ParseHdr parses an acquisition header b named name. Errors name it.
func ParseHdr(b []byte, name string) (Hdr, error) {
	p := hdrParser{h: Hdr{Name: name, Fields: map[string]string{}}}
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if more, err := p.line(line); err != nil || !more {
			if err != nil {
				return Hdr{}, err
			}
			break
		}
	}
	return p.done()
}

// maxHdrLine bounds a line of a .hdr sidecar (Merlin writes 2048 bytes in all).
const maxHdrLine = 1 << 20

// readMIBHdr reads the .hdr sidecar at path line by line, keeping the values of hdrKeys
// only: a sidecar of any length takes no more memory than its longest line (at most
// maxHdrLine).
func readMIBHdr(path string) (Hdr, error) {
	f, _, err := regfile.Open(path)
	if err != nil {
		return Hdr{}, err
	}
	defer f.Close()
	p := hdrParser{h: Hdr{Name: path, Fields: map[string]string{}}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxHdrLine)
	for sc.Scan() {
		if more, err := p.line(sc.Bytes()); err != nil {
			return Hdr{}, err
		} else if !more {
			break
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return Hdr{}, fmt.Errorf("%s: a line of more than %d bytes: not a Merlin .hdr file", path, maxHdrLine)
	} else if err != nil {
		return Hdr{}, err
	}
	return p.done()
}

// Number returns the whole number that key gives, and whether it gives one: Merlin
// writes 0 for a value it was not given (pixel-triggered scans: Frames per Trigger 0),
// so 0 means "not given". A value that is not a number is an error naming it.
func (h Hdr) Number(key string) (int, bool, error) {
	v, ok := h.Fields[key]
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s: %q is %q, not a number of frames", h.Name, key, v)
	}
	return n, n > 0, nil
}

// NavShape returns the scan shape the header gives, and a description of where it came
// from (" from NAME (ScanY=2, ScanX=4)"), or nil when it gives none: (ScanY, ScanX) when
// both are there, else (Frames in Acquisition / Frames per Trigger, Frames per Trigger)
// when a trigger starts each scan line (Frames per Trigger > 1), as LiberTEM reads it.
func (h Hdr) NavShape() ([]int, string, error) {
	scanX, okX, err := h.Number("ScanX")
	if err != nil {
		return nil, "", err
	}
	scanY, okY, err := h.Number("ScanY")
	if err != nil {
		return nil, "", err
	}
	name := filepath.Base(h.Name)
	if okX && okY {
		return []int{scanY, scanX}, fmt.Sprintf(" from %s (ScanY=%d, ScanX=%d)", name, scanY, scanX), nil
	}
	acq, okA, err := h.Number("Frames in Acquisition (Number)")
	if err != nil {
		return nil, "", err
	}
	perTrigger, okT, err := h.Number("Frames per Trigger (Number)")
	if err != nil {
		return nil, "", err
	}
	// Frames per Trigger is the scan line length when the scan was triggered per line;
	// 1 (one trigger per frame) says nothing about the scan shape.
	if !okA || !okT || perTrigger == 1 || acq%perTrigger != 0 {
		return nil, "", nil
	}
	return []int{acq / perTrigger, perTrigger}, fmt.Sprintf(" from %s (Frames in Acquisition %d, Frames per Trigger %d)", name, acq, perTrigger), nil
}

// RecordKey is the line of the .hdr sidecar of a Merlin acquisition recorded by stemdot
// (package live/merlin) that says whether the record is complete; one of a partial
// acquisition starts "partial".
const RecordKey = "Recorded by stemdot"

// mibNavFromHdr returns the nav shape that the .hdr sidecar at hdrPath gives, and a
// description of where it came from, or nil when there is no sidecar or it gives none;
// and a note when the sidecar says the file is the record of a partial acquisition.
func mibNavFromHdr(hdrPath string) ([]int, string, []string, error) {
	h, err := readMIBHdr(hdrPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil, nil
	}
	if err != nil {
		return nil, "", nil, err
	}
	var notes []string
	if rec := h.Fields[RecordKey]; strings.HasPrefix(rec, "partial") {
		notes = append(notes, fmt.Sprintf("%s says the file records a %s", filepath.Base(hdrPath), strconv.Quote(rec)))
	}
	nav, source, err := h.NavShape()
	return nav, source, notes, err
}
