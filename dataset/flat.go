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
// byte offset on (OpenFlat): raw files (optionally with per-frame header and footer
// bytes), the data section of NPY files, BLO, EMPAD, MIB, DM, MRC, SEQ, SER and
// single-part TVIPS files.
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
	magic     []byte    // how every record's header starts (BLO, MIB), or nil
	size      int64     // the file's size when opened
	mapping   []byte    // the whole file mapped read-only for MapFrames, or nil (gapped files only)
	scratch   sync.Pool // *[]byte: records of gapped frames
	closed    atomic.Bool
	notes
	// Flat's CheckRecord, PixelBytes and Decode (nil, 0 and nil: none).
	check  func(header []byte, frame int) error
	packed int64
	decode func(dst, src []byte)
}

func (d *flatFile) Format() string   { return d.format }
func (d *flatFile) Path() string     { return d.path }
func (d *flatFile) NavShape() []int  { return append([]int(nil), d.nav...) }
func (d *flatFile) SigShape() [2]int { return d.sig }
func (d *flatFile) DType() DType     { return d.dt }
func (d *flatFile) NumFrames() int   { return product(d.nav) }
func (d *flatFile) FrameBytes() int  { return d.sig[0] * d.sig[1] * d.dt.Size() }

func (d *flatFile) setFrames(nav []int, n notes) { d.nav, d.notes = nav, n }

// pixelBytes is the bytes of a record's stored pixels.
func (d *flatFile) pixelBytes() int64 {
	if d.packed > 0 {
		return d.packed
	}
	return int64(d.FrameBytes())
}

// stride is the bytes from one frame's record to the next.
func (d *flatFile) stride() int64 { return d.header + d.pixelBytes() + d.footer }

// Close unmaps (when mapped) and closes the file.
func (d *flatFile) Close() error { return closeMapped(d.path, &d.closed, d.mapping, d.f) }

// ReadFrames reads frames [start, end) with one positioned read, straight into dst when
// the frames are back to back, else into a pooled scratch buffer of whole records whose
// headers are checked and whose pixels are then copied out (or decoded), and swaps their
// byte order when the file's differs from the host's.
func (d *flatFile) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.path, start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	stride := d.stride()
	n := int64(end-start) * stride
	buf := dst[:(end-start)*fb]
	gapped := stride != int64(fb) || d.decode != nil
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
		if err := d.checkRecord(rec[:d.header], start+int(i)); err != nil {
			return err
		}
		out, px := dst[i*int64(fb):(i+1)*int64(fb)], rec[d.header:d.header+d.pixelBytes()]
		if d.decode != nil {
			d.decode(out, px)
		} else {
			copyToHost(out, px, d.dt.Size(), d.bigEndian)
		}
	}
	return nil
}

// checkRecord checks the header of the record of frame: with the format's CheckRecord
// when it has one, else that it starts with the magic.
func (d *flatFile) checkRecord(header []byte, frame int) error {
	if d.check != nil {
		if err := d.check(header, frame); err != nil {
			return errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", d.path, err))
		}
		return nil
	}
	if !bytes.HasPrefix(header, d.magic) {
		return errs.New(errs.Format, "dataset: %s: frame %d: its record does not start with % X: the file is damaged or not what its header says",
			d.path, frame, d.magic)
	}
	return nil
}

// MapFrames of a flat file (every format that OpenFlat opens): records at a fixed stride, packed
// frames when there are no per-frame header or footer bytes. ok is false when the file
// was not mapped, and for pixels that need decoding (Flat.Decode).
func (d *flatFile) MapFrames(start, end int) (FrameMap, bool, error) {
	if err := checkRange(d.path, start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return FrameMap{}, false, err
	}
	if d.closed.Load() {
		return FrameMap{}, false, errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	if d.mapping == nil || d.decode != nil {
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
