package dataset

import (
	"fmt"
	"io"
	"os"

	"github.com/stemdot/stemdot/errs"
)

// flatFile is a file whose frames are stored back to back, without per-frame headers,
// from a byte offset on: headerless raw files, and the data section of NPY files.
type flatFile struct {
	guessedNav
	format    string
	path      string
	f         *os.File
	offset    int64
	nav       []int
	sig       [2]int
	dt        DType
	bigEndian bool
}

// openRaw opens a headerless file of frames of opt.SigShape pixels of opt.DType, after
// opt.Offset header bytes. Without opt.NavShape the nav shape is (1, n_frames).
func openRaw(path string, opt Options) (Dataset, error) {
	if len(opt.SigShape) != 2 || opt.SigShape[0] <= 0 || opt.SigShape[1] <= 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: a raw file needs its frame shape: give option sig_shape (sig_y, sig_x, positive sizes; got %v)", path, opt.SigShape)
	}
	if opt.DType.Size() == 0 {
		return nil, errs.New(errs.DType, "dataset: %s: a raw file needs its pixel dtype: give option dtype (uint8, uint16, uint32, int8, int16, int32, float32 or float64)", path)
	}
	if opt.Offset < 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: option offset %d is negative", path, opt.Offset)
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
	frameBytes := int64(fb)
	data := size - opt.Offset
	if data <= 0 || data%frameBytes != 0 {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: size %d bytes (after a %d-byte offset) is not a whole, non-zero number of frames of %d bytes (%d×%d×%d)",
			path, size, opt.Offset, frameBytes, sig[0], sig[1], opt.DType.Size())
	}
	nav, guessed, err := resolveNavShape(path, opt.NavShape, nil, "", int(data/frameBytes))
	if err != nil {
		f.Close()
		return nil, err
	}
	return newFlatDataset(&flatFile{guessedNav: guessed, format: "raw", path: path, f: f, offset: opt.Offset, nav: nav, sig: sig, dt: opt.DType, bigEndian: opt.BigEndian}, size), nil
}

func (d *flatFile) Format() string   { return d.format }
func (d *flatFile) Path() string     { return d.path }
func (d *flatFile) NavShape() []int  { return append([]int(nil), d.nav...) }
func (d *flatFile) SigShape() [2]int { return d.sig }
func (d *flatFile) DType() DType     { return d.dt }
func (d *flatFile) NumFrames() int   { return product(d.nav) }
func (d *flatFile) FrameBytes() int  { return d.sig[0] * d.sig[1] * d.dt.Size() }
func (d *flatFile) Close() error     { return d.f.Close() }

// ReadFrames reads frames [start, end) with one positioned read straight into dst and
// swaps their byte order in place when the file's differs from the host's.
func (d *flatFile) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.path, start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	buf := dst[:(end-start)*fb]
	if _, err := d.f.ReadAt(buf, d.offset+int64(start)*int64(fb)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: reading frames [%d, %d): %w", d.path, start, end, err))
	}
	if d.bigEndian != hostBigEndian {
		swapCopy(buf, buf, d.dt.Size())
	}
	return nil
}
