// Package seq reads Direct Electron / Norpix StreamPix sequence files (.seq), as
// LiberTEM reads them (libertem.io.dataset.seq, itself after the SEQ reader of the PIMS
// project): a little-endian header, then every frame at a fixed stride. Importing it
// registers the format "seq" with package dataset (extension .seq).
//
// The header fields the reader uses, at their byte offsets (all little-endian):
//
//	0 magic u32 (0xFEED)  28 version i32  32 header_size i32  548 width u32 (columns)
//	552 height u32 (rows)  556 bit_depth u32 (8, 16 or 32)  568 image_format u32 (100:
//	monochrome)  572 allocated_frames u32  580 true_image_size u32 (the stride of one
//	frame's record: its pixels, then padding and a timestamp)  620 compression_format u32
//	(0: none)
//
// Frames start at byte 8192 in files of version 5 or later (StreamPix 6), at byte 1024 in
// older ones, and follow one another every true_image_size bytes: height×width unsigned
// pixels of bit_depth bits, then true_image_size − height·width·bit_depth/8 bytes that are
// not signal. The frame count is what the file's size holds (as LiberTEM counts it; a
// different allocated_frames is noted). The sig shape is (height, width) and the dtype
// uint8, uint16 or uint32; colour (image_format other than 100) and compressed files are
// refused.
//
// A SEQ file states no scan shape (LiberTEM requires nav_shape for it): give option
// nav_shape, else the frames are read as one row, with a warning.
//
// LiberTEM (0.16, libertem.io.dataset.seq) applies by default the dark and gain
// references it finds beside the file, <name>.seq.dark.mrc and <name>.seq.gain.mrc (2-D
// MRC images of the frame's shape), as (frame − dark) · gain, and patches the defect
// pixels that <name>.seq.Config.Metadata.xml lists (placed on the frame by
// <name>.seq.metadata; readDefects says how). stemdot patches the defect pixels by
// default, as LiberTEM does: each is replaced by the mean of its good neighbours
// (defects), the frames are delivered as float32 and a note counts the pixels; option
// seq_defect_pixels=false keeps their recorded values. The dark and gain references found
// are applied by default too, as LiberTEM applies them (a note names them; option
// seq_corrections=false keeps the recorded counts), before the defect pixels are patched,
// with LiberTEM's arithmetic (decoder). Either way the
// frames are converted as they are read, by each worker (dataset.Flat.Decode: never
// served in place from a mapping, so a GPU worker gets them converted too); a file
// without corrections to apply is read as stored.
package seq

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// Name is the format's name (option format, Dataset.Format).
const Name = "seq"

// OptCorrections is the format option that applies the dark and gain references, and
// OptDefectPixels the one that patches the defect pixels (default true).
const (
	OptCorrections  = "seq_corrections"
	OptDefectPixels = "seq_defect_pixels"
)

func init() {
	dataset.Register(dataset.Format{Name: Name, Extensions: []string{".seq"}, Magic: []string{"\xed\xfe\x00\x00"},
		Describe: "seq (Direct Electron / StreamPix sequence: .seq)", Open: Open,
		FormatOptions: []dataset.FormatOption{{Key: OptCorrections, Switch: true, Default: "true",
			Usage: "Direct Electron SEQ: subtract the dark reference <name>.seq.dark.mrc and multiply by the gain reference <name>.seq.gain.mrc (those present), as LiberTEM does, giving float32 frames (false: keep the recorded counts; true where neither is present: an error)"},
			{Key: OptDefectPixels, Switch: true, Default: "true",
				Usage: "Direct Electron SEQ: patch the defect pixels that <name>.seq.Config.Metadata.xml lists with the mean of their good neighbours, as LiberTEM does, giving float32 frames (false: keep their recorded values)"}}})
}

// Header geometry.
const (
	magic         = 0xFEED
	headerFields  = 632  // the header fields of the reader (LiberTEM's HEADER_SIZE)
	oldImageStart = 1024 // frames start here before version 5
	newImageStart = 8192 // and here from version 5 (StreamPix 6) on
	monochrome    = 100
)

// header is the part of a SEQ header the reader uses.
type header struct {
	version                              int32
	width, height, bitDepth, imageFormat uint32
	allocatedFrames, trueImageSize       uint32
	compression                          uint32
}

// parseHeader parses the first bytes of a SEQ file (at least 632).
func parseHeader(b []byte) (header, error) {
	if len(b) < headerFields {
		return header{}, fmt.Errorf("%d bytes are too short for a SEQ header (%d)", len(b), headerFields)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b); m != magic {
		return header{}, fmt.Errorf("not a SEQ file: magic 0x%X, want 0xFEED", m)
	}
	return header{
		version:         int32(le.Uint32(b[28:])),
		width:           le.Uint32(b[548:]),
		height:          le.Uint32(b[552:]),
		bitDepth:        le.Uint32(b[556:]),
		imageFormat:     le.Uint32(b[568:]),
		allocatedFrames: le.Uint32(b[572:]),
		trueImageSize:   le.Uint32(b[580:]),
		compression:     le.Uint32(b[620:]),
	}, nil
}

// imageStart is the byte offset of the first frame: 8192 from version 5 on, else 1024.
func (h header) imageStart() int64 {
	if h.version >= 5 {
		return newImageStart
	}
	return oldImageStart
}

// frame checks the header's frame description and returns the sig shape, the dtype and
// the bytes of one frame's pixels.
func (h header) frame() ([2]int, dataset.DType, int, error) {
	if h.compression != 0 {
		return [2]int{}, 0, 0, fmt.Errorf("compression_format %d: compressed SEQ frames are not supported (only uncompressed, 0)", h.compression)
	}
	if h.imageFormat != monochrome {
		return [2]int{}, 0, 0, errs.New(errs.DType, "image_format %d: only monochrome frames (100) are supported, not colour or Bayer images", h.imageFormat)
	}
	var dt dataset.DType
	switch h.bitDepth {
	case 8:
		dt = dataset.Uint8
	case 16:
		dt = dataset.Uint16
	case 32:
		dt = dataset.Uint32
	default:
		return [2]int{}, 0, 0, errs.New(errs.DType, "bit_depth %d: unsupported pixel size (want 8, 16 or 32 bits)", h.bitDepth)
	}
	if h.width == 0 || h.height == 0 || h.width > 1<<20 || h.height > 1<<20 {
		return [2]int{}, 0, 0, fmt.Errorf("frame of width %d × height %d pixels is not a detector frame", h.width, h.height)
	}
	sig := [2]int{int(h.height), int(h.width)}
	fb, err := dataset.CheckSig(sig, dt)
	if err != nil {
		return [2]int{}, 0, 0, err
	}
	if int64(h.trueImageSize) < int64(fb) {
		return [2]int{}, 0, 0, fmt.Errorf("true_image_size %d is smaller than a frame of %d×%d %s pixels (%d bytes)", h.trueImageSize, h.height, h.width, dt, fb)
	}
	return sig, dt, fb, nil
}

// Open opens the SEQ file at path: frames of the header's sig shape and dtype in host
// byte order, or float32 frames where corrections apply (defect pixels patched, and with
// option seq_corrections the dark and gain references applied), at the scan positions of
// option nav_shape (the file has no scan shape: without it, one row with a warning),
// reconciled as package dataset describes. Errors name the file and the header field at
// fault: errs.Format, errs.DType for colour images and bit depths other than 8, 16 and
// 32; errs.Argument for an option that is not true or false, or seq_corrections without
// a reference beside the file; errs.Shape for a reference or defect map of another shape
// than the frames, errs.Format for a defect list that cannot be read (each naming option
// seq_defect_pixels=false, which reads the frames without it).
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (dataset.Dataset, error) {
		f.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err)) // keeps an inner kind
	}
	head, err := dataset.ReadHeader(f, size, oldImageStart)
	if err != nil {
		return fail(err)
	}
	h, err := parseHeader(head)
	if err != nil {
		return fail(err)
	}
	sig, dt, fb, err := h.frame()
	if err != nil {
		return fail(err)
	}
	start := h.imageStart()
	if size < start {
		return fail(fmt.Errorf("the file of %d bytes ends before its first frame at byte %d (version %d)", size, start, h.version))
	}
	stride := int64(h.trueImageSize)
	data := size - start
	whole := int(data / stride)
	var notes []string
	if h.allocatedFrames != 0 && int64(h.allocatedFrames) != int64(whole) {
		notes = append(notes, fmt.Sprintf("the header's allocated_frames is %d, the file holds %d whole frames: the file's frames are read", h.allocatedFrames, whole))
	}
	fl := dataset.Flat{Format: Name, Path: path, File: f, Size: size, Offset: start, Footer: stride - int64(fb), Sig: sig, DType: dt}
	ff := dataset.FileFrames{Whole: whole, CutBytes: data % stride, RecordBytes: stride, Notes: notes}
	_, asked := opt.FormatOptions[OptCorrections]
	correct, err := dataset.SwitchOption(opt, OptCorrections, true)
	if err != nil {
		return fail(err)
	}
	patch, err := dataset.SwitchOption(opt, OptDefectPixels, true)
	if err != nil {
		return fail(err)
	}
	base, refs := references(path)
	c := &decoder{size: dt.Size()}
	var applied, unused []string
	for _, r := range refs {
		switch {
		case strings.HasSuffix(r, defectExt) && !patch:
			ff.Notes = append(ff.Notes, fmt.Sprintf("the defect pixels that %s lists keep their recorded values (option %s=false)", filepath.Base(r), OptDefectPixels))
		case strings.HasSuffix(r, defectExt):
			d, note, err := readDefects(r, base, sig)
			if err != nil {
				return fail(err)
			}
			c.defects = d
			ff.Notes = append(ff.Notes, note)
		case !correct:
			unused = append(unused, filepath.Base(r))
		default:
			m, err := readMRC(r, sig)
			if err != nil {
				return fail(fmt.Errorf("%w (option %s=false reads the frames without the dark and gain references)", err, OptCorrections))
			}
			if strings.HasSuffix(r, darkExt) {
				c.dark = m
			} else {
				c.gain = m
			}
			applied = append(applied, filepath.Base(r))
		}
	}
	correct = correct && len(applied) > 0
	switch {
	case asked && correct:
		ff.Notes = append(ff.Notes, fmt.Sprintf("(frame − dark) · gain applied with %s (float32; option %s)", strings.Join(applied, " and "), OptCorrections))
	case asked && len(unused) == 0 && len(applied) == 0 && !strings.EqualFold(opt.FormatOptions[OptCorrections], "false"):
		f.Close()
		return nil, errs.New(errs.Argument, "dataset: %s: option %s: no dark or gain reference (%s, %s) beside the file", path, OptCorrections,
			filepath.Base(base+darkExt), filepath.Base(base+gainExt))
	case correct:
		ff.Notes = append(ff.Notes, fmt.Sprintf("(frame − dark) · gain applied with %s, as LiberTEM applies them (float32; option %s=false keeps the recorded counts)",
			strings.Join(applied, " and "), OptCorrections))
	case len(unused) > 0:
		ff.Notes = append(ff.Notes, fmt.Sprintf("%s beside the file not applied (option %s=false)", strings.Join(unused, ", "), OptCorrections))
	}
	if correct || c.defects != nil {
		fl.DType, fl.PixelBytes, fl.Decode = dataset.Float32, int64(fb), c.decode
	}
	return dataset.OpenFlat(fl, opt, nil, "", ff)
}

// references returns base, the path without its ".seq" (or ".seq.seq", LiberTEM issue
// #1120), and the correction files LiberTEM reads beside a SEQ file that exist, in this
// order: <base>.seq.dark.mrc, <base>.seq.gain.mrc and <base>.seq.Config.Metadata.xml
// (the defect list, whose <base>.seq.metadata readDefects reads).
func references(path string) (string, []string) {
	base := path
	for range 2 {
		if strings.EqualFold(filepath.Ext(base), ".seq") {
			base = strings.TrimSuffix(base, filepath.Ext(base))
		}
	}
	var found []string
	for _, ext := range []string{darkExt, gainExt, defectExt} {
		// Any entry of that name: one that is not a regular file is refused when read,
		// naming it, rather than skipped.
		if _, err := os.Lstat(base + ext); err == nil {
			found = append(found, base+ext)
		}
	}
	return base, found
}
