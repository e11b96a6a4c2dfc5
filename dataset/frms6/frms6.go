// Package frms6 reads PNDetector pnCCD acquisitions (.frms6), as LiberTEM reads them
// (libertem.io.dataset.frms6): files <name>_000.frms6, <name>_001.frms6, ... and an INI
// file <name>.hdr. Importing it registers the format "frms6" with package dataset (a
// .frms6 file, or a .hdr that is PNDetector's, not Merlin's).
//
// Each .frms6 file starts with a 1024-byte little-endian header
//
//	0 header_size u16 (1024)  2 frame_header_size u16 (64)  7 version u8 (6)
//	88 width u16 (columns)  90 height u16 (rows)  1020 num_frames u32 (0 in older files:
//	the frames the file's size holds)
//
// then num_frames records of a 64-byte frame header and height×width uint16 pixels. The
// detector's two halves are read out side by side: a stored frame of height rows and
// width columns is the detector frame of 2·height rows and width/2 columns folded, the
// left half of the stored rows being the detector's top half and the right half, turned by
// 180°, its bottom half: detector pixel (y, x) is stored pixel (y, x) for y < height and
// (2·height−1−y, width−1−x) below. With binning b (readoutmode "bin: b" in the .hdr:
// 1, 2 or 4) each stored row is b detector rows, repeated without scaling.
//
// The .hdr's [measurementInfo] section gives stemimagesize "A x B" (nav shape (A, B), as
// LiberTEM reads it), signalframes (the frames of the scan; surplus frames of the files are
// not read), readoutmode and darkframes. The _000 file holds dark frames: their mean is
// subtracted from every frame of the other files, which are the scan's, giving float32
// frames, as LiberTEM does by default (enable_offset_correction); option frms6_raw reads
// the stored uint16 counts instead. Option frms6_gain_map names a gain map (LiberTEM's
// gain_map_path) multiplied into the dark-corrected frames: the variable GainMap of a
// MATLAB .mat file (level 5, compressed or not), or a CSV file of semicolon-separated
// rows, the file's row r holding detector column r.
package frms6

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// Name is the format's name (option format, Dataset.Format).
const Name = "frms6"

// The format options.
const (
	OptRaw     = "frms6_raw"
	OptGainMap = "frms6_gain_map"
)

func init() {
	dataset.Register(dataset.Format{Name: Name, Extensions: []string{".frms6", ".hdr"},
		Describe: "frms6 (PNDetector pnCCD: .frms6, or the .hdr beside them)", Detect: detect, Open: Open,
		FormatOptions: []dataset.FormatOption{
			{Key: OptRaw, Switch: true, Default: "false",
				Usage: "PNDetector FRMS6: read the stored uint16 counts, without subtracting the dark frame (the mean of the _000 file's frames) as is done by default"},
			{Key: OptGainMap, Usage: "PNDetector FRMS6: a gain map multiplied into the dark-corrected frames: a MATLAB .mat file with the variable GainMap, or a CSV file (semicolon-separated, file row r = detector column r)"},
		}})
}

// The file geometry.
const (
	fileHeaderSize  = 1024
	frameHeaderSize = 64
	version         = 6
	maxHDR          = 1 << 20
)

// fileHeader is the part of a .frms6 file header the reader uses.
type fileHeader struct {
	width, height int
	numFrames     int
}

// parseFileHeader parses a .frms6 file header (b holds its 1024 bytes) of a file of size
// bytes and returns it with the number of whole frames the file holds.
func parseFileHeader(b []byte, size int64) (fileHeader, int, error) {
	if len(b) < fileHeaderSize {
		return fileHeader{}, 0, fmt.Errorf("%d bytes are too short for the %d-byte FRMS6 file header", len(b), fileHeaderSize)
	}
	le := binary.LittleEndian
	hs, fhs, v := le.Uint16(b), le.Uint16(b[2:]), b[7]
	if hs != fileHeaderSize || fhs != frameHeaderSize || v != version {
		return fileHeader{}, 0, fmt.Errorf("not an FRMS6 file: header_size %d, frame_header_size %d, version %d (want 1024, 64, 6)", hs, fhs, v)
	}
	h := fileHeader{width: int(le.Uint16(b[88:])), height: int(le.Uint16(b[90:])), numFrames: int(le.Uint32(b[1020:]))}
	if h.width == 0 || h.height == 0 || h.width%2 != 0 {
		return fileHeader{}, 0, fmt.Errorf("frame width %d × height %d: want a positive height and an even width (the two halves of the detector)", h.width, h.height)
	}
	record := h.record()
	whole := int((size - fileHeaderSize) / record)
	if h.numFrames == 0 { // older files: the size tells
		if (size-fileHeaderSize)%record != 0 {
			return fileHeader{}, 0, fmt.Errorf("num_frames is 0 and the %d bytes after the header are not a whole number of %d-byte frames", size-fileHeaderSize, record)
		}
		h.numFrames = whole
	}
	return h, min(whole, h.numFrames), nil
}

func (h fileHeader) record() int64 { return frameHeaderSize + int64(h.width)*int64(h.height)*2 }

// hdrInfo is what the .hdr says.
type hdrInfo struct {
	nav          []int
	navText      string
	bin          int
	signalFrames int // -1: not given
}

var readoutMode = regexp.MustCompile(`^"?bin:\s*(\d+),\s*windowing:\s*(\d+)\s*x\s*(\d+)\s*"?$`)

// parseHDR parses the INI text of a .hdr (as Python's configparser reads it: sections
// in brackets, "key = value" or "key: value", keys case-insensitive, # and ; comments).
func parseHDR(b []byte) (hdrInfo, error) {
	section, found := "", false
	keys := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxHDR)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			found = found || section == "measurementInfo"
			continue
		}
		if section != "measurementInfo" {
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i <= 0 {
			return hdrInfo{}, fmt.Errorf("[measurementInfo]: line %q is not key = value", line)
		}
		keys[strings.ToLower(strings.TrimSpace(line[:i]))] = strings.TrimSpace(line[i+1:])
	}
	if err := sc.Err(); err != nil {
		return hdrInfo{}, err
	}
	if !found {
		return hdrInfo{}, fmt.Errorf("no [measurementInfo] section: not a PNDetector .hdr file")
	}
	var info hdrInfo
	size, ok := keys["stemimagesize"]
	if !ok {
		return hdrInfo{}, fmt.Errorf("[measurementInfo] has no stemimagesize (the scan shape)")
	}
	for p := range strings.SplitSeq(size, "x") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return hdrInfo{}, fmt.Errorf("[measurementInfo] stemimagesize %q is not a scan shape like 256x256", size)
		}
		info.nav = append(info.nav, n)
	}
	info.navText = size
	mode, ok := keys["readoutmode"]
	m := readoutMode.FindStringSubmatch(mode)
	if !ok || m == nil {
		return hdrInfo{}, fmt.Errorf("[measurementInfo] readoutmode %q is not like \"bin: 1, windowing: 264 x 264\"", mode)
	}
	info.bin, _ = strconv.Atoi(m[1])
	if info.bin != 1 && info.bin != 2 && info.bin != 4 {
		return hdrInfo{}, fmt.Errorf("[measurementInfo] readoutmode: binning %s is not 1, 2 or 4", m[1])
	}
	info.signalFrames = -1
	if s, ok := keys["signalframes"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return hdrInfo{}, fmt.Errorf("[measurementInfo] signalframes %q is not a frame count", s)
		}
		info.signalFrames = n
	}
	return info, nil
}

// base returns the acquisition's path without extension and file number: <name> of
// <name>.hdr or <name>_NNN.frms6.
func base(path string) string {
	ext := filepath.Ext(path)
	b := strings.TrimSuffix(path, ext)
	if strings.EqualFold(ext, ".frms6") {
		if i := strings.LastIndexByte(b, '_'); i >= 0 && i < len(b)-1 && strings.Trim(b[i+1:], "0123456789") == "" {
			b = b[:i]
		}
	}
	return b
}

// dataFiles lists <base>_NNN.frms6 in sorted order.
func dataFiles(base string) ([]string, error) {
	dir, prefix := filepath.Split(base)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, errs.Wrap(errs.IO, err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		num, ok := strings.CutPrefix(n, prefix+"_")
		if ok && strings.EqualFold(filepath.Ext(n), ".frms6") {
			num = num[:len(num)-len(".frms6")]
			if num != "" && strings.Trim(num, "0123456789") == "" {
				out = append(out, filepath.Join(filepath.Dir(base), n))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// detect claims a .hdr that has a [measurementInfo] section (a Merlin .hdr starts with
// "HDR,"); .frms6 files go by their extension.
func detect(path string, opt dataset.Options) bool {
	if !strings.EqualFold(filepath.Ext(path), ".hdr") {
		return false
	}
	f, _, err := dataset.OpenFile(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 64<<10)
	n, _ := io.ReadFull(f, b)
	return bytes.Contains(b[:n], []byte("[measurementInfo]"))
}

// frmsFile is one open .frms6 file of the scan's frames.
type frmsFile struct {
	path  string
	f     *os.File
	size  int64
	first int // the dataset's index of its first frame
	n     int
}

// reader is the acquisition's scan frames: every frame of the files after _000.
type reader struct {
	path      string
	files     []*frmsFile
	n         int
	h         fileHeader // every file's frame geometry
	bin       int
	sig       [2]int
	dt        dataset.DType
	dark      []float32 // raw layout (height×width); nil with frms6_raw
	gain      []float32 // sig layout; nil without a gain map
	closeOnce sync.Once
}

// Open opens the FRMS6 acquisition that path (its .hdr or one of its .frms6 files)
// belongs to: frames of (2·height·binning, width/2) pixels, float32 dark-corrected (uint16
// with option frms6_raw), at the scan positions of the .hdr's stemimagesize or option
// nav_shape, reconciled as package dataset describes. Errors name the file and field at
// fault (errs.Format), a missing .hdr or data file (errs.IO), a bad option
// (errs.Argument), a gain map of the wrong shape (errs.Shape).
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	raw, err := dataset.SwitchOption(opt, OptRaw, false)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err) // errs.Argument
	}
	gainPath := opt.FormatOptions[OptGainMap]
	if raw && gainPath != "" {
		return nil, errs.New(errs.Argument, "dataset: %s: option %s applies to dark-corrected frames, not with option %s", path, OptGainMap, OptRaw)
	}
	b := base(path)
	hdrPath := b + ".hdr"
	info, err := readHDR(hdrPath)
	if err != nil {
		return nil, err
	}
	names, err := dataFiles(b)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	if len(names) < 2 {
		return nil, errs.New(errs.Format, "dataset: %s: found %d files %s_NNN.frms6%s: an acquisition has the dark frames in _000 and the scan's frames in _001 on", path, len(names), b, list(names))
	}
	r := &reader{path: path, bin: info.bin}
	fail := func(err error) (dataset.Dataset, error) {
		r.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %w", err))
	}
	var notes []string
	var darkFile *frmsFile
	for i, name := range names {
		f, size, err := dataset.OpenFile(name)
		if err != nil {
			return fail(err)
		}
		ff := &frmsFile{path: name, f: f, size: size, first: r.n}
		if i == 0 {
			darkFile = ff
			defer f.Close()
		} else {
			r.files = append(r.files, ff)
		}
		head, err := dataset.ReadHeader(f, size, fileHeaderSize)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		h, whole, err := parseFileHeader(head, size)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		if i == 0 {
			r.h = h
		} else if h.width != r.h.width || h.height != r.h.height {
			return fail(fmt.Errorf("%s: frames of width %d × height %d, but %s has %d × %d", name, h.width, h.height, filepath.Base(names[0]), r.h.width, r.h.height))
		}
		ff.n = whole
		if whole < h.numFrames {
			switch {
			case i == 0:
				notes = append(notes, fmt.Sprintf("%s ends inside dark frame %d of its %d (num_frames): its whole frames are used", filepath.Base(name), whole, h.numFrames))
			case i < len(names)-1:
				return fail(fmt.Errorf("%s: holds %d whole frames, its header says num_frames %d: the frames of the files after it would be read at the wrong scan positions", name, whole, h.numFrames))
			default:
				notes = append(notes, fmt.Sprintf("%s ends inside frame %d of its %d (num_frames): the frames from there on are missing", filepath.Base(name), whole, h.numFrames))
			}
		}
		if i > 0 {
			r.n += whole
		}
	}
	r.sig = [2]int{2 * r.h.height * r.bin, r.h.width / 2}
	if _, err := dataset.CheckSig(r.sig, dataset.Float32); err != nil {
		return fail(fmt.Errorf("%s: %w", names[0], err))
	}
	if info.signalFrames >= 0 && info.signalFrames != r.n {
		what := "the surplus ones are not read"
		if info.signalFrames > r.n {
			what = "the files' frames are read"
		}
		notes = append(notes, fmt.Sprintf("%s gives signalframes %d, the files _001 on hold %d frames: %s", filepath.Base(hdrPath), info.signalFrames, r.n, what))
		r.n = min(r.n, info.signalFrames)
	}
	r.dt = dataset.Uint16
	if !raw {
		r.dt = dataset.Float32
		if darkFile.n == 0 {
			return fail(fmt.Errorf("%s holds no dark frames to subtract: give option %s to read the raw counts", darkFile.path, OptRaw))
		}
		if r.dark, err = meanFrame(darkFile, r.h); err != nil {
			return fail(err)
		}
		what := fmt.Sprintf("the mean of the %d dark frames", darkFile.n)
		if darkFile.n == 1 {
			what = "the dark frame"
		}
		notes = append(notes, fmt.Sprintf("%s of %s is subtracted from every frame (float32; option %s reads the raw counts)", what, filepath.Base(darkFile.path), OptRaw))
		if gainPath != "" {
			if r.gain, err = readGainMap(gainPath, r.sig); err != nil {
				r.Close()
				return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: option %s: %w", path, OptGainMap, err))
			}
			notes = append(notes, fmt.Sprintf("the dark-corrected frames are multiplied by the gain map %s", gainPath))
		}
	}
	source := fmt.Sprintf(" from %s (stemimagesize %s)", filepath.Base(hdrPath), info.navText)
	ds, err := dataset.Reconcile(r, opt, info.nav, source, dataset.FileFrames{Whole: r.n, RecordBytes: r.h.record(), Notes: notes})
	if err != nil {
		r.Close()
		return nil, err
	}
	return ds, nil
}

func list(names []string) string {
	if len(names) == 0 {
		return ""
	}
	var b []string
	for _, n := range names {
		b = append(b, filepath.Base(n))
	}
	return " (" + strings.Join(b, ", ") + ")"
}

// readHDR reads and parses the .hdr at path.
func readHDR(path string) (hdrInfo, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return hdrInfo{}, errs.Wrap(errs.IO, fmt.Errorf("%w (the acquisition's .hdr)", err))
	}
	defer f.Close()
	if size > maxHDR {
		return hdrInfo{}, errs.New(errs.Format, "dataset: %s: %d bytes is too large for a .hdr file", path, size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return hdrInfo{}, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	info, err := parseHDR(b)
	if err != nil {
		return hdrInfo{}, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	return info, nil
}

// meanFrame is the mean of the frames of the dark file, in the stored layout.
func meanFrame(ff *frmsFile, h fileHeader) ([]float32, error) {
	px := h.width * h.height
	sum := make([]float64, px)
	per := min(max(1, (8<<20)/int(h.record())), ff.n) // frames per read
	buf := make([]byte, int64(per)*h.record())
	for i := 0; i < ff.n; i += per {
		k := min(per, ff.n-i)
		if _, err := ff.f.ReadAt(buf[:int64(k)*h.record()], fileHeaderSize+int64(i)*h.record()); err != nil {
			return nil, dataset.ReadError(ff.path, ff.f, ff.size, i, i+k, err)
		}
		for j := range k {
			rec := buf[int64(j)*h.record()+frameHeaderSize:]
			for p := range sum {
				sum[p] += float64(binary.LittleEndian.Uint16(rec[2*p:]))
			}
		}
	}
	mean := make([]float32, px)
	for p, s := range sum {
		mean[p] = float32(s / float64(ff.n))
	}
	return mean, nil
}

// Dataset methods of the reader: the scan's frames.

func (r *reader) Format() string       { return Name }
func (r *reader) Path() string         { return r.path }
func (r *reader) NavShape() []int      { return []int{1, r.n} }
func (r *reader) SigShape() [2]int     { return r.sig }
func (r *reader) DType() dataset.DType { return r.dt }
func (r *reader) NumFrames() int       { return r.n }
func (r *reader) FrameBytes() int      { return r.sig[0] * r.sig[1] * r.dt.Size() }

func (r *reader) Close() error {
	var first error
	r.closeOnce.Do(func() {
		for _, ff := range r.files {
			if err := ff.f.Close(); err != nil && first == nil {
				first = err
			}
		}
	})
	return first
}

// maxRead bounds the bytes of one positioned read.
const maxRead = 16 << 20

// ReadFrames reads frames [start, end), unfolded into the detector's layout (and dark-
// and gain-corrected unless option frms6_raw).
func (r *reader) ReadFrames(start, end int, dst []byte) error {
	if err := dataset.CheckRange(r.path, start, end, r.n, r.FrameBytes(), len(dst)); err != nil {
		return err
	}
	rec := r.h.record()
	per := max(1, int(maxRead/rec))
	var buf []byte
	for i := start; i < end; {
		fi, _ := slices.BinarySearchFunc(r.files, i, func(ff *frmsFile, i int) int {
			switch {
			case i < ff.first:
				return 1
			case i >= ff.first+ff.n:
				return -1
			}
			return 0
		})
		ff := r.files[fi]
		k := min(end-i, ff.first+ff.n-i, per)
		if buf == nil {
			buf = make([]byte, int64(min(end-start, per))*rec)
		}
		if _, err := ff.f.ReadAt(buf[:int64(k)*rec], fileHeaderSize+int64(i-ff.first)*rec); err != nil {
			return dataset.ReadError(ff.path, ff.f, ff.size, i-ff.first, i-ff.first+k, err)
		}
		for j := range k {
			r.unfold(dst[(i-start+j)*r.FrameBytes():], buf[int64(j)*rec+frameHeaderSize:])
		}
		i += k
	}
	return nil
}

// unfold writes the stored frame src (height×width uint16 little-endian) into dst in the
// detector's layout.
func (r *reader) unfold(dst, src []byte) {
	h, w := r.h.height, r.h.width
	sx := r.sig[1]
	for y := range r.sig[0] {
		yb := y / r.bin
		row, flip := yb, false
		if yb >= h {
			row, flip = 2*h-1-yb, true
		}
		for x := range sx {
			c := x
			if flip {
				c = w - 1 - x
			}
			p := row*w + c
			v := binary.LittleEndian.Uint16(src[2*p:])
			o := y*sx + x
			if r.dt == dataset.Uint16 {
				binary.NativeEndian.PutUint16(dst[2*o:], v)
				continue
			}
			f := float32(v) - r.dark[p]
			if r.gain != nil {
				f *= r.gain[o]
			}
			binary.NativeEndian.PutUint32(dst[4*o:], math.Float32bits(f))
		}
	}
}
