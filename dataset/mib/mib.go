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
// (Frames per Trigger > 1); else (1, n_frames) with a warning naming option nav_shape.
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

// mibFile is the layout of a MIB file, read from its first and last frame headers.
type mibFile struct {
	f         *os.File
	sig       [2]int
	dt        dataset.DType
	header    int       // frame header bytes
	stride    int       // header + pixel bytes of one frame
	checked   [4]string // first frame's values of mibCheckedFields
	numFrames int       // whole frames in the file
	raw       *mibRaw   // raw-packed (R64) pixels, or nil
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
	hdrNav, source, err := mibNavFromHdr(base + ".hdr")
	var hdrNote []string
	if err != nil {
		if len(opt.NavShape) == 0 {
			f.Close()
			return nil, fmt.Errorf("dataset: %s: %w; give option nav_shape to read the file without it", path, err)
		}
		hdrNote = []string{fmt.Sprintf("the .hdr sidecar was not read (%v): the scan shape is option nav_shape's", err)}
	}
	fl := dataset.Flat{Format: "mib", Path: path, File: f, Size: size, Header: int64(d.header), Sig: d.sig, DType: d.dt,
		BigEndian: true, Magic: mibMagic, CheckRecord: d.checkHeader}
	if r := d.raw; r != nil {
		fl.PixelBytes = int64(r.rawBytes)
		fl.Decode = func(dst, src []byte) { r.decode(dst, src, d.sig, d.dt) }
	}
	return dataset.OpenFlat(fl, opt, hdrNav, source, dataset.FileFrames{Whole: d.numFrames, CutBytes: size % int64(d.stride),
		RecordBytes: int64(d.stride), FlybackAtEnd: d.flybackAtEnd, Notes: hdrNote})
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
		h := make([]byte, d.header)
		if _, err := d.f.ReadAt(h, int64(frame)*int64(d.stride)); err != nil {
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
	hd, err := parseMIBHeader(first)
	if err != nil {
		return nil, err
	}
	var raw *mibRaw
	sig := [2]int{hd.height, hd.width}
	dt, ok := mibPixelTypes[hd.pixelType]
	if hd.pixelType == "R64" {
		if raw, sig, dt, err = newMIBRaw(hd); err != nil {
			return nil, err
		}
		if raw.bits == 24 && !raw.quad && raw.rowPx%16 == 0 {
			// LiberTEM reads the header width of a 24-bit raw frame as twice the
			// frame's (its two 12-bit halves side by side): follow the next frame's
			// magic to tell which.
			next := make([]byte, len(mibMagic))
			at := int64(hd.headerBytes) + int64(raw.rawBytes/2)
			if _, err := f.ReadAt(next, at); err == nil && bytes.Equal(next, mibMagic) {
				raw.rowPx, raw.rawBytes = raw.rowPx/2, raw.rawBytes/2
				sig[1] /= 2
			}
		}
	} else if !ok {
		return nil, fmt.Errorf("unsupported MIB pixel type %q (want U08, U16, U32 or R64)", hd.pixelType)
	}
	fb, err := dataset.CheckSig(sig, dt)
	if err != nil {
		return nil, fmt.Errorf("first frame header: %w", err)
	}
	pixelBytes := fb
	if raw != nil {
		pixelBytes = raw.rawBytes
	}
	if int64(hd.headerBytes) > size-int64(pixelBytes) {
		return nil, fmt.Errorf("size %d bytes is less than one frame of %d-byte header + %d pixel bytes (%d×%d %s)",
			size, hd.headerBytes, pixelBytes, hd.width, hd.height, hd.pixelType)
	}
	d := &mibFile{
		f:      f,
		sig:    sig,
		dt:     dt,
		header: hd.headerBytes,
		stride: hd.headerBytes + pixelBytes,
		raw:    raw,
	}
	for i, c := range mibCheckedFields {
		d.checked[i] = hd.fields[c.index]
	}
	// A file cut inside a frame (an interrupted acquisition) is read up to its last whole
	// frame; dataset.Reconcile reports the rest.
	d.numFrames = int(size / int64(d.stride))
	last := make([]byte, d.header)
	if _, err := f.ReadAt(last, int64(d.numFrames-1)*int64(d.stride)); err != nil {
		return nil, fmt.Errorf("reading the last frame header: %w", err)
	}
	if err := d.checkHeader(last, d.numFrames-1); err != nil {
		return nil, err
	}
	return d, nil
}

// checkHeader checks that frame's header h starts with "MQ1," and that its header size,
// width, height and pixel type fields equal the first frame's. It does not allocate.
func (d *mibFile) checkHeader(h []byte, frame int) error {
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
	for i, c := range mibCheckedFields {
		if string(fields[c.index]) != d.checked[i] {
			return fmt.Errorf("frame %d: header mismatch between frames: %s is %q, frame 0 has %q", frame, c.name, fields[c.index], d.checked[i])
		}
	}
	return nil
}

// readMIBHdr reads a Merlin .hdr sidecar: tab-separated "key:\tvalue" lines between a
// line starting "HDR," and one starting "End". Keys lose their trailing colon. Only the
// values of keys are kept, so that a .hdr of any length takes no more memory than they.
func readMIBHdr(path string, keys ...string) (map[string]string, error) {
	f, _, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || !bytes.HasPrefix(sc.Bytes(), []byte("HDR")) {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s is not a Merlin .hdr file: it does not start with \"HDR,\"", path)
	}
	kv := map[string]string{}
	for sc.Scan() {
		line := bytes.TrimRight(sc.Bytes(), "\r\x00")
		if bytes.HasPrefix(line, []byte("End")) {
			return kv, nil
		}
		k, v, ok := bytes.Cut(line, []byte("\t"))
		if !ok {
			continue
		}
		k = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(k), []byte(":")))
		for _, key := range keys {
			if string(k) == key {
				kv[key] = string(bytes.TrimSpace(v))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no \"End\" line: truncated .hdr file", path)
}

// mibNavFromHdr returns the nav shape that the .hdr sidecar at hdrPath gives, and a
// description of where it came from, or nil when there is no sidecar or it gives none.
func mibNavFromHdr(hdrPath string) ([]int, string, error) {
	kv, err := readMIBHdr(hdrPath, "ScanX", "ScanY", "Frames in Acquisition (Number)", "Frames per Trigger (Number)")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	atoi := func(key string) (int, bool, error) {
		v, ok := kv[key]
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s: %q is %q, not a number of frames", hdrPath, key, v)
		}
		// Merlin writes 0 for a value it was not given (pixel-triggered scans: Frames per
		// Trigger 0): 0 means "not given".
		return n, n > 0, nil
	}
	scanX, okX, err := atoi("ScanX")
	if err != nil {
		return nil, "", err
	}
	scanY, okY, err := atoi("ScanY")
	if err != nil {
		return nil, "", err
	}
	name := filepath.Base(hdrPath)
	if okX && okY {
		return []int{scanY, scanX}, fmt.Sprintf(" from %s (ScanY=%d, ScanX=%d)", name, scanY, scanX), nil
	}
	acq, okA, err := atoi("Frames in Acquisition (Number)")
	if err != nil {
		return nil, "", err
	}
	perTrigger, okT, err := atoi("Frames per Trigger (Number)")
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
