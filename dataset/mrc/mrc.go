// Package mrc reads MRC files (.mrc, .mrcs) as 4D-STEM datasets: stacks of detector
// frames written by Thermo Fisher's Velox, Direct Electron's DE server ("Autosave 4D
// File Format = MRC") and cryo-EM software. Import it for its side effect (it registers
// format "mrc" with package dataset).
//
// The layout is the CCP-EM MRC2014 format (https://www.ccpem.ac.uk/mrc_format/mrc2014.php),
// as RosettaSciIO (rsciio.mrc) and LiberTEM (libertem.io.dataset.mrc) read it: a
// 1024-byte header of 4-byte words,
//
//	0 NX (columns)  4 NY (rows)  8 NZ (sections)  12 MODE  ...  88 ISPG  92 NSYMBT (bytes
//	of extended header)  ...  152 IMOD stamp 1146047817  156 IMOD flags  ...
//	208 MAP "MAP "  212 MACHST (byte order: 44 44 or 44 41 little-endian, 11 11 big-endian)
//
// then NSYMBT bytes of extended header (FEI's, or any other: skipped), then NZ sections
// of NY×NX pixels, X fastest. Each section is one frame of sig shape (NY, NX), in
// stored order. MODE gives the dtype: 0 int8 (uint8 in IMOD files whose flags do not
// say signed), 1 int16, 2 float32, 6 uint16, 12 float16 (delivered as float32, exactly:
// every float16 is a float32); the complex modes 3 and 4, packed 4-bit (101) and RGB
// (16) are refused (errs.DType). A file without the MACHST stamp is read in the byte
// order in which its MODE and sizes make sense.
//
// The file states no scan shape (Velox writes a 4D-STEM scan as NZ frames): the nav
// shape is option nav_shape, else (1, NZ) with the warning that names it. A Direct
// Electron movie comes with sidecars named after its dataset (for <name>_movie.mrc or
// <name>_<n>_movie.mrc: <name>_info.txt and <name>_scan_coordinates.csv, as RosettaSciIO
// finds them): the info file's "key = value" lines give the scan ("Scan - Enable =
// Enable", "Scan - Size X", "Scan - Size Y", "Scan - Type", "Scan - Repeats", "Scan -
// ROI Enable", "Scan - ROI Size X", "Scan - ROI Size Y"). The frames are stored in
// acquisition order; the scan-coordinates CSV, when there, gives each frame's scan
// position, one "x,y" line per frame (0-based column and row of the Size X × Size Y
// scan): frames are read at their positions (dataset.Reorder; in place when the list is
// row-major), positions no frame covers are blank frames, and a list that visits the
// positions k times makes k passes of the scan (nav shape (k, Size Y, Size X), a scan of
// planes, as RosettaSciIO's (repeats, y, x)), each noted; option nav_shape of as many
// positions as the file has
// frames reads them in acquisition order instead, with a note. Without the CSV, a
// raster scan ("Scan - Type = Raster") is read in order with nav shape (Size Y,
// Size X), (ROI Size Y, ROI Size X) when its ROI is enabled, and (r, Size Y, Size X)
// for Repeats = r > 1; another scan type (an XY file, a custom or sparse scan)
// is refused, or, given option nav_shape, read in acquisition order with a note.
package mrc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

func init() {
	dataset.Register(dataset.Format{Name: "mrc", Extensions: []string{".mrc", ".mrcs"}, Open: Open,
		Describe: "mrc (MRC2014, Direct Electron 4-D MRC: .mrc, .mrcs)"})
}

// HeaderBytes is the size of the MRC header before the extended header.
const HeaderBytes = 1024

// imodStamp marks a header written by IMOD, whose flags word says whether mode 0 bytes
// are signed.
const imodStamp = 1146047817

// Header is the part of an MRC header that places the frames.
type Header struct {
	// NX, NY, NZ are the columns, rows and sections: NZ frames of sig shape (NY, NX).
	NX, NY, NZ int
	// Mode is MODE and DType the dtype of the frames delivered: the stored one, or
	// float32 for float16 pixels (Half).
	Mode  int
	DType dataset.DType
	Half  bool
	// Extended is NSYMBT, the bytes of extended header after the 1024-byte header.
	Extended int64
	// BigEndian is the byte order of the header and the pixels.
	BigEndian bool
	// Notes say how the header was read where it is not plain MRC2014.
	Notes []string
}

// ParseHeader parses the 1024-byte header of an MRC file. Errors name the field:
// errs.DType for a MODE stemdot does not read, errs.Format for the rest.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderBytes {
		return Header{}, errs.New(errs.Format, "the file of %d bytes is shorter than the %d-byte MRC header", len(b), HeaderBytes)
	}
	var h Header
	switch {
	case b[212] == 0x44 && (b[213] == 0x44 || b[213] == 0x41):
	case b[212] == 0x11 && b[213] == 0x11:
		h.BigEndian = true
	default:
		// No MACHST stamp (files older than MRC2014): the byte order in which MODE and
		// the sizes make sense, as mrcfile and IMOD guess it.
		le, be := plausible(b, binary.LittleEndian), plausible(b, binary.BigEndian)
		switch {
		case le:
		case be:
			h.BigEndian = true
		default:
			return Header{}, errs.New(errs.Format, "not an MRC file: MACHST (bytes 212-215) is %x, not a byte-order stamp, and neither byte order gives a known MODE and positive NX, NY, NZ", b[212:216])
		}
		h.Notes = append(h.Notes, fmt.Sprintf("the header has no byte-order stamp (MACHST %x): read as %s, the order in which its MODE and sizes are valid", b[212:216], endian(h.BigEndian)))
	}
	var order binary.ByteOrder = binary.LittleEndian
	if h.BigEndian {
		order = binary.BigEndian
	}
	word := func(i int) int64 { return int64(int32(order.Uint32(b[4*i:]))) }
	if !bytes.Equal(b[208:212], []byte("MAP ")) {
		h.Notes = append(h.Notes, fmt.Sprintf("the header has no MRC2014 \"MAP \" stamp (bytes 208-211 are %q): read as an older MRC file", b[208:212]))
	}
	for i, name := range []string{"NX", "NY", "NZ"} {
		if v := word(i); v <= 0 {
			return Header{}, errs.New(errs.Format, "MRC header: %s is %d, not a positive size", name, v)
		}
	}
	h.NX, h.NY, h.NZ = int(word(0)), int(word(1)), int(word(2))
	h.Mode = int(word(3))
	if h.Extended = word(23); h.Extended < 0 {
		return Header{}, errs.New(errs.Format, "MRC header: NSYMBT (extended header bytes) is %d, negative", h.Extended)
	}
	switch h.Mode {
	case 0:
		h.DType = dataset.Int8
		if word(38) == imodStamp && word(39)&1 == 0 {
			h.DType = dataset.Uint8
			h.Notes = append(h.Notes, "MODE 0 of an IMOD file whose flags do not say signed: read as uint8")
		}
	case 1:
		h.DType = dataset.Int16
	case 2:
		h.DType = dataset.Float32
	case 6:
		h.DType = dataset.Uint16
	case 12:
		h.DType, h.Half = dataset.Float32, true
	default:
		what, ok := refusedModes[h.Mode]
		if !ok {
			return Header{}, errs.New(errs.Format, "MRC header: unknown MODE %d (MRC2014 defines 0, 1, 2, 3, 4, 6, 12, 101)", h.Mode)
		}
		return Header{}, errs.New(errs.DType, "MRC MODE %d (%s) is not a dtype stemdot reads (MODE 0 int8, 1 int16, 2 float32, 6 uint16, 12 float16)", h.Mode, what)
	}
	return h, nil
}

// refusedModes are the MRC2014 modes stemdot does not read.
var refusedModes = map[int]string{3: "complex int16", 4: "complex float32", 16: "RGB, 3 uint8 per pixel", 101: "4-bit packed"}

// plausible says whether the header b read in order has a known MODE and positive NX,
// NY, NZ below 2^24.
func plausible(b []byte, order binary.ByteOrder) bool {
	for i := range 3 {
		if v := int32(order.Uint32(b[4*i:])); v <= 0 || v >= 1<<24 {
			return false
		}
	}
	mode := int(int32(order.Uint32(b[12:])))
	_, refused := refusedModes[mode]
	return mode == 0 || mode == 1 || mode == 2 || mode == 6 || mode == 12 || refused
}

func endian(big bool) string {
	if big {
		return "big-endian"
	}
	return "little-endian"
}

// Open opens the MRC file at path (see the package doc). Errors name the file and the
// field or sidecar line at fault.
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (dataset.Dataset, error) {
		f.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	head, err := dataset.ReadHeader(f, size, HeaderBytes)
	if err != nil {
		return fail(err)
	}
	h, err := ParseHeader(head)
	if err != nil {
		return fail(err)
	}
	sig := [2]int{h.NY, h.NX}
	fb, err := dataset.CheckSig(sig, h.DType)
	if err != nil {
		return fail(err)
	}
	if h.Half {
		fb /= 2 // the stored frame: 2 bytes a pixel
	}
	offset := HeaderBytes + h.Extended
	if offset > size {
		return fail(fmt.Errorf("the extended header (NSYMBT=%d bytes) runs past the end of the file of %d bytes", h.Extended, size))
	}
	data := size - offset
	whole := int(min(data/int64(fb), int64(h.NZ)))
	notes := h.Notes
	var cut int64
	switch {
	case whole < h.NZ:
		cut = data % int64(fb)
		notes = append(notes, fmt.Sprintf("the header says NZ=%d frames but the file holds %d whole frames", h.NZ, whole))
	case data > int64(h.NZ)*int64(fb):
		notes = append(notes, fmt.Sprintf("%d bytes after the last of the NZ=%d frames are not read", data-int64(h.NZ)*int64(fb), h.NZ))
	}
	if whole == 0 {
		return fail(errs.New(errs.Format, "the file holds no whole frame of %d×%d pixels, %d bytes (%d bytes after the %d-byte header)", h.NY, h.NX, fb, data, offset))
	}
	ff := dataset.FileFrames{Whole: whole, CutBytes: cut, RecordBytes: int64(fb), Notes: notes}
	de, err := findDE(path, whole, len(opt.NavShape) > 0)
	if err != nil {
		return fail(err)
	}
	var nav, frameOf []int
	source := ""
	if de != nil {
		nav, source, frameOf = de.nav, de.source, de.frameOf
		own := len(ff.Notes)
		ff.Notes = append(ff.Notes, de.notes...)
		// Option nav_shape of as many positions as the file has frames, not as the
		// scan has, reads the frames as stored (option nav_shape's contract), not
		// placed at their scan positions: the notes on the placement no longer hold.
		if frameOf != nil && len(opt.NavShape) > 0 && positions(opt.NavShape) == whole && positions(nav) != whole {
			frameOf = nil
			ff.Notes = append(ff.Notes[:own], fmt.Sprintf("nav shape %s (option nav_shape) has as many positions as the file has frames: they are read in acquisition order, not placed at the scan positions of %s",
				npy.ShapeString(opt.NavShape), filepath.Base(de.csv)))
		}
	}
	if frameOf != nil && opt.SyncOffset != 0 {
		return fail(errs.New(errs.Argument, "option sync_offset %d: the frames of this Direct Electron scan are placed at their scan positions by %s, which a sync offset would move them off: leave option sync_offset out, or give option nav_shape of the file's %d frames to read them in acquisition order",
			opt.SyncOffset, filepath.Base(de.csv), whole))
	}
	fl := dataset.Flat{Format: "mrc", Path: path, File: f, Size: size, Offset: offset, Sig: sig, DType: h.DType, BigEndian: h.BigEndian}
	var all dataset.Dataset // every frame of the file
	switch {
	case h.Half:
		all = &halfFile{path: path, f: f, size: size, offset: offset, n: whole, sig: sig, big: h.BigEndian}
	case frameOf == nil:
		return dataset.OpenFlat(fl, opt, nav, source, ff)
	default:
		if all, err = dataset.OpenFlat(fl, dataset.Options{}, nil, "", dataset.FileFrames{Whole: whole, RecordBytes: int64(fb)}); err != nil {
			return nil, err
		}
	}
	ds := all
	if frameOf != nil {
		if ds, err = dataset.Reorder(all, frameOf); err != nil {
			all.Close()
			return nil, err
		}
		ff.Whole, ff.CutBytes = len(frameOf), 0
	}
	if ds, err = dataset.Reconcile(ds, opt, nav, source, ff); err != nil {
		all.Close()
		return nil, err
	}
	return ds, nil
}

// deScan is what Direct Electron's sidecars say about the scan.
type deScan struct {
	// nav is the scan's nav shape (nil: the info file describes no scan) and source
	// says where it comes from.
	nav    []int
	source string
	// frameOf places the frames at scan positions when they are not stored in scan
	// order (dataset.Reorder); nil when they are.
	frameOf []int
	// csv is the scan-coordinates file that frameOf follows.
	csv   string
	notes []string
}

// positions is the number of scan positions of nav shape nav.
func positions(nav []int) int {
	n := 1
	for _, v := range nav {
		n *= v
	}
	return n
}

// sidecarStems are the names that Direct Electron's sidecars of the movie at path may
// start with: its stem, without "_movie", and without a "_<n>" before that.
func sidecarStems(path string) []string {
	stem := strings.TrimSuffix(path, filepath.Ext(path))
	list := []string{stem}
	if s, ok := strings.CutSuffix(stem, "_movie"); ok {
		list = append(list, s)
		if i := strings.LastIndexByte(s, '_'); i > 0 {
			if _, err := strconv.Atoi(s[i+1:]); err == nil {
				list = append(list, s[:i])
			}
		}
	}
	return list
}

// maxPositions bounds the scan positions of a custom scan (their placement is held in
// memory): 2^26, a scan of 8192×8192.
const maxPositions = 1 << 26

// findDE reads the Direct Electron sidecars of the MRC file at path holding frames
// frames, or returns nil when there is no info file. userNav says that option nav_shape
// is given: a scan the sidecars cannot place is then read in acquisition order.
func findDE(path string, frames int, userNav bool) (*deScan, error) {
	var infoPath, stem string
	for _, s := range sidecarStems(path) {
		// Any entry of that name is the info file: one that is not a regular file is
		// refused by readInfo, naming it, rather than skipped.
		if _, err := os.Lstat(s + "_info.txt"); err == nil {
			infoPath, stem = s+"_info.txt", s
			break
		}
	}
	if infoPath == "" {
		return nil, nil
	}
	info, err := readInfo(infoPath)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(infoPath)
	de := &deScan{}
	if info["Scan - Enable"] != "Enable" {
		de.notes = append(de.notes, fmt.Sprintf("%s describes no scan (Scan - Enable = %q): the frames are a series", base, info["Scan - Enable"]))
		return de, nil
	}
	nx, errX := infoInt(info, "Scan - Size X")
	ny, errY := infoInt(info, "Scan - Size Y")
	if err := errors.Join(errX, errY); err != nil {
		if userNav {
			de.notes = append(de.notes, fmt.Sprintf("%s: %v: read with option nav_shape", base, err))
			return de, nil
		}
		return nil, fmt.Errorf("%s: %w; give option nav_shape", infoPath, err)
	}
	repeats := 1
	if _, ok := info["Scan - Repeats"]; ok {
		if repeats, err = infoInt(info, "Scan - Repeats"); err != nil {
			return nil, fmt.Errorf("%s: %w", infoPath, err)
		}
	}
	de.source = fmt.Sprintf(" from %s (Scan - Size X = %d, Size Y = %d)", base, nx, ny)
	scanType := info["Scan - Type"]
	csvPath := stem + "_scan_coordinates.csv"
	if _, err := os.Lstat(csvPath); errors.Is(err, fs.ErrNotExist) {
		switch {
		case scanType != "" && scanType != "Raster" && userNav:
			de.source = ""
			de.notes = append(de.notes, fmt.Sprintf("the scan is not a raster scan (Scan - Type = %q in %s) and its scan coordinates %s are missing: the frames are read in acquisition order at the positions of option nav_shape", scanType, base, filepath.Base(csvPath)))
			return de, nil
		case scanType != "" && scanType != "Raster":
			return nil, errs.New(errs.Format, "the scan is not a raster scan (Scan - Type = %q in %s), and its scan coordinates %s are missing: they say where each frame belongs; put the file there, or give option nav_shape to read the frames in acquisition order", scanType, base, csvPath)
		case info["Scan - ROI Enable"] == "Enable":
			rx, errX := infoInt(info, "Scan - ROI Size X")
			ry, errY := infoInt(info, "Scan - ROI Size Y")
			if err := errors.Join(errX, errY); err != nil {
				return nil, fmt.Errorf("%s: the scan has an ROI (Scan - ROI Enable = Enable): %w; give option nav_shape", infoPath, err)
			}
			nx, ny = rx, ry
			de.source = fmt.Sprintf(" from %s (Scan - ROI Size X = %d, ROI Size Y = %d)", base, nx, ny)
			de.notes = append(de.notes, fmt.Sprintf("%s: the raster scan covers its ROI of %d×%d positions (Scan - ROI Offset X = %q, Y = %q): nav shape %s",
				base, ny, nx, info["Scan - ROI Offset X"], info["Scan - ROI Offset Y"], npy.ShapeString(passesOf(repeats, ny, nx))))
		}
		de.nav = passesOf(repeats, ny, nx)
		if repeats > 1 {
			de.source += fmt.Sprintf(" and Scan - Repeats = %d", repeats)
		}
		return de, nil
	}
	xy, err := readCoordinates(csvPath, nx, ny)
	if err != nil {
		return nil, err
	}
	if nx*ny > maxPositions {
		return nil, errs.New(errs.Format, "%s: a custom scan of %d×%d has more than %d scan positions", infoPath, nx, ny, maxPositions)
	}
	// The k-th visit of a position is in pass k: scan position k·nx·ny + y·nx + x.
	visits := make([]int32, nx*ny)
	passes := 1
	posOf := make([]int, frames)
	for i := range posOf {
		posOf[i] = -1
		if i < len(xy) {
			p := xy[i][1]*nx + xy[i][0]
			posOf[i] = int(visits[p])*nx*ny + p
			visits[p]++
			passes = max(passes, int(visits[p]))
		}
	}
	csvBase := filepath.Base(csvPath)
	if len(xy) != frames {
		de.notes = append(de.notes, fmt.Sprintf("%s lists %d scan positions, the file holds %d frames", csvBase, len(xy), frames))
	}
	if passes*nx*ny > maxPositions {
		return nil, errs.New(errs.Format, "%s: %d passes over a scan of %d×%d are more than %d scan positions", csvPath, passes, nx, ny, maxPositions)
	}
	de.nav = passesOf(passes, ny, nx)
	if passes > 1 {
		de.source = fmt.Sprintf(" from %s (Scan - Size X = %d, Size Y = %d) and %s (%d passes over the positions)", base, nx, ny, csvBase, passes)
		de.notes = append(de.notes, fmt.Sprintf("%s visits scan positions up to %d times: read as %d passes of the scan of %d×%d (nav shape %s)", csvBase, passes, passes, ny, nx, npy.ShapeString(de.nav)))
	}
	pl := dataset.Place(posOf, passes*nx*ny, csvBase)
	de.notes = append(de.notes, pl.Notes...)
	if !pl.InOrder || pl.First != 0 {
		de.frameOf, de.csv = pl.FrameOf, csvPath
	}
	return de, nil
}

// passesOf is the nav shape of k passes of a scan of ny rows of nx: (ny, nx), or a scan of
// planes (k, ny, nx) for k > 1, as RosettaSciIO reads repeated scans. Pass i's position
// (y, x) is scan position (i·ny + y)·nx + x either way.
func passesOf(k, ny, nx int) []int {
	if k > 1 {
		return []int{k, ny, nx}
	}
	return []int{ny, nx}
}

// maxInfoBytes bounds a Direct Electron info file (some 24 KB are written).
const maxInfoBytes = 16 << 20

// readInfo reads a Direct Electron info file: "key = value" lines (blank lines and
// lines without "=" are skipped). Errors are errs.IO (one that is not a regular file
// too), errs.Format for a file over maxInfoBytes.
func readInfo(path string) (map[string]string, error) {
	f, size, err := regfile.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("the Direct Electron info file beside it: %w", err))
	}
	defer f.Close()
	if size > maxInfoBytes {
		return nil, errs.New(errs.Format, "the Direct Electron info file beside it, %s, has %d bytes, more than an info file's %d", path, size, maxInfoBytes)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxInfoBytes))
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("the Direct Electron info file beside it: %s: %w", path, err))
	}
	info := map[string]string{}
	for line := range strings.Lines(string(raw)) {
		if k, v, ok := strings.Cut(line, "="); ok {
			info[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return info, nil
}

// infoInt is the positive integer of key in an info file.
func infoInt(info map[string]string, key string) (int, error) {
	v, ok := info[key]
	if !ok {
		return 0, errs.New(errs.Format, "no %q line", key)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 1<<20 {
		return 0, errs.New(errs.Format, "%s = %q is not a scan size (a positive integer up to 2^20)", key, v)
	}
	return n, nil
}

// readCoordinates reads a Direct Electron scan-coordinates CSV: one "x,y" line per
// frame (further columns ignored; a first line that is not numbers is a column
// header), each within the scan of nx columns and ny rows.
func readCoordinates(path string, nx, ny int) ([][2]int, error) {
	f, _, err := regfile.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, err)
	}
	defer f.Close()
	var xy [][2]int
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		var p [2]int
		var err error
		if len(fields) >= 2 {
			if p[0], err = strconv.Atoi(strings.TrimSpace(fields[0])); err == nil {
				p[1], err = strconv.Atoi(strings.TrimSpace(fields[1]))
			}
		}
		if len(fields) < 2 || err != nil {
			if n == 1 {
				continue
			}
			return nil, errs.New(errs.Format, "%s line %d: %q is not \"x,y\" (integer scan column and row)", path, n, line)
		}
		if p[0] < 0 || p[0] >= nx || p[1] < 0 || p[1] >= ny {
			return nil, errs.New(errs.Format, "%s line %d: scan position x=%d, y=%d is outside the scan of %d×%d (Scan - Size X, Size Y)", path, n, p[0], p[1], nx, ny)
		}
		xy = append(xy, p)
	}
	if err := sc.Err(); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("%s: %w", path, err))
	}
	if len(xy) == 0 {
		return nil, errs.New(errs.Format, "%s lists no scan position", path)
	}
	return xy, nil
}
