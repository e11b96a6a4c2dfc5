package dataset

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// flatFile is a file whose frames are stored one after the other at a fixed stride from a
// byte offset on: raw files (optionally with per-frame header and footer bytes), and the
// data section of NPY files.
type flatFile struct {
	format    string
	path      string
	f         *os.File
	offset    int64 // where frame 0's record starts
	header    int64 // bytes before each frame's pixels
	footer    int64 // bytes after each frame's pixels
	nav       []int
	sig       [2]int
	dt        DType
	bigEndian bool
	magic     []byte    // how every record's header starts (BLO), or nil
	size      int64     // the file's size when opened
	mapping   []byte    // the whole file mapped read-only for MapFrames, or nil (gapped files only)
	scratch   sync.Pool // *[]byte: records of gapped frames
	closed    atomic.Bool
	notes
}

// openRaw opens a headerless file of frames of opt.SigShape pixels of opt.DType, after
// opt.Offset header bytes, each frame's pixels preceded by opt.FrameHeader and followed by
// opt.FrameFooter bytes. Without opt.NavShape the nav shape is (1, n_frames). The file
// must be a whole number of frame records, and their number must match opt.NavShape.
func openRaw(path string, opt Options) (Dataset, error) {
	if len(opt.SigShape) != 2 || opt.SigShape[0] <= 0 || opt.SigShape[1] <= 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: a raw file needs its frame shape: give option sig_shape (sig_y,sig_x in pixels, e.g. 256,256), or option format empad for the raw file of an EMPAD acquisition", path)
	}
	if opt.DType.Size() == 0 {
		return nil, errs.New(errs.DType, "dataset: %s: a raw file needs its pixel dtype: give option dtype (uint8, uint16, uint32, int8, int16, int32, float32 or float64)", path)
	}
	if opt.Offset < 0 || opt.FrameHeader < 0 || opt.FrameFooter < 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: negative byte count: option offset %d, option frame_header %d, option frame_footer %d", path, opt.Offset, opt.FrameHeader, opt.FrameFooter)
	}
	if opt.FrameHeader > MaxFrameBytes || opt.FrameFooter > MaxFrameBytes {
		return nil, errs.New(errs.Argument, "dataset: %s: option frame_header %d or option frame_footer %d exceeds %d bytes", path, opt.FrameHeader, opt.FrameFooter, MaxFrameBytes)
	}
	sig := [2]int{opt.SigShape[0], opt.SigShape[1]}
	fb, err := checkSig(sig, opt.DType)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	f, size, err := openFile(path)
	if err != nil {
		return nil, err
	}
	record := opt.FrameHeader + int64(fb) + opt.FrameFooter
	describe := fmt.Sprintf("frames of %d bytes (%d×%d×%d)", fb, sig[0], sig[1], opt.DType.Size())
	if record != int64(fb) {
		describe = fmt.Sprintf("frame records of %d bytes (%d-byte header + %d×%d×%d pixel bytes + %d-byte footer)",
			record, opt.FrameHeader, sig[0], sig[1], opt.DType.Size(), opt.FrameFooter)
	}
	hint := "; check option sig_shape, option dtype, option offset, option frame_header and option frame_footer (bytes before and after every frame), or option sync_offset to skip leading frames"
	data := size - opt.Offset
	if data <= 0 && opt.Offset > 0 {
		f.Close()
		return nil, errs.New(errs.Argument, "dataset: %s: offset %d (option offset) is at or past the end of the %d-byte file", path, opt.Offset, size)
	}
	if data <= 0 || data%record != 0 {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: size %d bytes (after a %d-byte offset) is not a whole, non-zero number of %s%s",
			path, size, opt.Offset, describe, hint)
	}
	d := &flatFile{format: "raw", path: path, f: f, offset: opt.Offset, header: opt.FrameHeader, footer: opt.FrameFooter,
		nav: []int{1, int(data / record)}, sig: sig, dt: opt.DType, bigEndian: opt.BigEndian}
	file := newFlatDataset(d, size)
	ds, err := finishFrames(file, opt, nil, "", fileFrames{whole: int(data / record), recordBytes: record, strict: true,
		hint: fmt.Sprintf(" (%s)%s", describe, hint)})
	if err != nil {
		file.Close()
		return nil, err
	}
	return ds, nil
}

func (d *flatFile) Format() string   { return d.format }
func (d *flatFile) Path() string     { return d.path }
func (d *flatFile) NavShape() []int  { return append([]int(nil), d.nav...) }
func (d *flatFile) SigShape() [2]int { return d.sig }
func (d *flatFile) DType() DType     { return d.dt }
func (d *flatFile) NumFrames() int   { return product(d.nav) }
func (d *flatFile) FrameBytes() int  { return d.sig[0] * d.sig[1] * d.dt.Size() }

func (d *flatFile) setFrames(nav []int, n notes) { d.nav, d.notes = nav, n }

// stride is the bytes from one frame's record to the next.
func (d *flatFile) stride() int64 { return d.header + int64(d.FrameBytes()) + d.footer }

// Close unmaps (when mapped) and closes the file.
func (d *flatFile) Close() error { return closeMapped(d.path, &d.closed, d.mapping, d.f) }

// ReadFrames reads frames [start, end) with one positioned read, straight into dst when
// the frames are back to back, else into a pooled scratch buffer of whole records whose
// pixels are then copied out, and swaps their byte order when the file's differs from
// the host's.
func (d *flatFile) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.path, start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	stride := d.stride()
	n := int64(end-start) * stride
	buf := dst[:(end-start)*fb]
	gapped := stride != int64(fb)
	if gapped {
		bp, _ := d.scratch.Get().(*[]byte)
		if bp == nil || int64(cap(*bp)) < n {
			b := make([]byte, n)
			bp = &b
		}
		defer d.scratch.Put(bp)
		buf = (*bp)[:n]
	}
	if _, err := d.f.ReadAt(buf, d.offset+int64(start)*stride); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return readError(d.path, d.f, d.size, start, end, err)
	}
	if !gapped {
		if d.bigEndian != npy.HostBigEndian {
			swapCopy(buf, buf, d.dt.Size())
		}
		return nil
	}
	for i := range int64(end - start) {
		rec := buf[i*stride:]
		if !bytes.HasPrefix(rec, d.magic) {
			return fmt.Errorf("dataset: %s: frame %d: its record does not start with % X: the file is damaged or not what its header says",
				d.path, start+int(i), d.magic)
		}
		copyToHost(dst[i*int64(fb):(i+1)*int64(fb)], rec[d.header:d.header+int64(fb)], d.dt.Size(), d.bigEndian)
	}
	return nil
}

// MapFrames of a flat file (raw, NPY, BLO, EMPAD): records at a fixed stride, packed
// frames when there are no per-frame header or footer bytes. ok is false when the file
// was not mapped.
func (d *flatFile) MapFrames(start, end int) (FrameMap, bool, error) {
	if err := checkRange(d.path, start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return FrameMap{}, false, err
	}
	if d.closed.Load() {
		return FrameMap{}, false, fmt.Errorf("dataset: %s: read after Close", d.path)
	}
	if d.mapping == nil {
		return FrameMap{}, false, nil
	}
	if err := checkSize(d.path, d.f, d.size); err != nil {
		return FrameMap{}, false, err
	}
	return FrameMap{
		Mapping:   d.mapping,
		Offset:    d.offset + int64(start)*d.stride(),
		Stride:    d.stride(),
		Header:    int(d.header),
		BigEndian: d.bigEndian,
		Magic:     string(d.magic),
	}, true, nil
}
