// Package raw reads headerless files of frames for package dataset: importing it
// registers the format "raw" (extensions .raw and .bin, or any file when option
// sig_shape and option dtype are given and no other format claims it).
//
// A raw file holds nothing but pixels, so the user describes it, as LiberTEM's
// libertem.io.dataset.raw has it described (sig_shape, dtype, nav_shape, sync_offset):
// option sig_shape (sig_y, sig_x) and option dtype, and beyond LiberTEM's option
// byte_order (little-endian by default), option offset (bytes before the first frame),
// and option frame_header and option frame_footer (bytes before and after every frame's
// pixels). Frame i's record starts at offset + i·(frame_header + frame bytes +
// frame_footer). The file must be a whole, non-zero number of such records and, since
// nothing in the file tells a surplus frame from a wrong description, their number must
// match option nav_shape exactly; without it the nav shape is (1, n_frames), with a
// warning naming option nav_shape. Frames in host byte order without per-frame bytes are
// viewed in place from a read-only mapping (dataset.OpenFlat).
package raw

import (
	"fmt"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

func init() {
	dataset.Register(dataset.Format{Name: "raw", Extensions: []string{".raw", ".bin"}, Open: open,
		Describe: "raw (frames back to back: .raw, .bin, or any file given option sig_shape and option dtype)",
		Options:  []string{"sig_shape", "dtype", "byte_order", "offset", "frame_header", "frame_footer"}})
}

// open opens a headerless file of frames of opt.SigShape pixels of opt.DType, after
// opt.Offset header bytes, each frame's pixels preceded by opt.FrameHeader and followed by
// opt.FrameFooter bytes. Without opt.NavShape the nav shape is (1, n_frames). The file
// must be a whole number of frame records, and their number must match opt.NavShape.
func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	if len(opt.SigShape) != 2 || opt.SigShape[0] <= 0 || opt.SigShape[1] <= 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: a raw file needs its frame shape: give option sig_shape (sig_y,sig_x in pixels, e.g. 256,256), or option format empad for the raw file of an EMPAD acquisition", path)
	}
	if opt.DType.Size() == 0 {
		return nil, errs.New(errs.DType, "dataset: %s: a raw file needs its pixel dtype: give option dtype (uint8, uint16, uint32, int8, int16, int32, float32 or float64)", path)
	}
	if opt.Offset < 0 || opt.FrameHeader < 0 || opt.FrameFooter < 0 {
		return nil, errs.New(errs.Argument, "dataset: %s: negative byte count: option offset %d, option frame_header %d, option frame_footer %d", path, opt.Offset, opt.FrameHeader, opt.FrameFooter)
	}
	if opt.FrameHeader > dataset.MaxFrameBytes || opt.FrameFooter > dataset.MaxFrameBytes {
		return nil, errs.New(errs.Argument, "dataset: %s: option frame_header %d or option frame_footer %d exceeds %d bytes", path, opt.FrameHeader, opt.FrameFooter, dataset.MaxFrameBytes)
	}
	sig := [2]int{opt.SigShape[0], opt.SigShape[1]}
	fb, err := dataset.CheckSig(sig, opt.DType)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	f, size, err := dataset.OpenFile(path)
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
	fl := dataset.Flat{Format: "raw", Path: path, File: f, Size: size, Offset: opt.Offset, Header: opt.FrameHeader, Footer: opt.FrameFooter,
		Sig: sig, DType: opt.DType, BigEndian: opt.BigEndian}
	return dataset.OpenFlat(fl, opt, nil, "", dataset.FileFrames{Whole: int(data / record), RecordBytes: record, Strict: true,
		Hint: fmt.Sprintf(" (%s)%s", describe, hint)})
}
