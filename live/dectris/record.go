package dectris

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/atomicfile"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/live"
)

// Recorder writes the frames of an acquisition, decoded, to an NPY file of shape
// (frames, sig_y, sig_x) in the header's dtype (little-endian, C order), which stemdot
// (format npy) and numpy read back as the receiver decoded them, bit for bit. Frames
// are written where their index puts them, in whatever order they come. The file is
// written as a temporary beside the final name and renamed by Close: to the name given
// when every frame of the acquisition came, else to the name with ".partial" before its
// extension (frames that never came read as 0 there), and Path says so.
//
// Decoded frames are kept, not the stream's compressed blobs: 192×192 uint16 frames take
// 72 KiB each, several times a bitshuffle-LZ4 blob.
type Recorder struct {
	path    string
	h       live.Header
	decode  func(dst []byte, f live.Frame) error
	tmp     *atomicfile.File
	hdrLen  int
	buf     []byte
	written []bool
	n       int // frames written
	err     error
}

// recordCap is the most frames a record of an acquisition of unknown length holds: its
// header is written for this many, and rewritten for the frames received.
const recordCap = 1 << 40

// NewRecorder starts a record at path of an acquisition with header h, whose frames
// decode writes (the receiver's Decode).
func NewRecorder(path string, h live.Header, decode func(dst []byte, f live.Frame) error) (*Recorder, error) {
	if h.FrameBytes() <= 0 {
		return nil, errs.New(errs.Shape, "dectris: record %s: frames of %d×%d %s", path, h.SigShape[0], h.SigShape[1], h.DType)
	}
	rec := &Recorder{path: path, h: h, decode: decode, buf: make([]byte, h.FrameBytes())}
	hdr, err := rec.header(recordCap)
	if err != nil {
		return nil, err
	}
	rec.hdrLen = len(hdr)
	if rec.tmp, err = atomicfile.Create(path); err != nil {
		return nil, fmt.Errorf("dectris: record: %w", err)
	}
	if _, err := rec.tmp.WriteAt(hdr, 0); err != nil {
		rec.tmp.Abort()
		return nil, errs.New(errs.IO, "dectris: record %s: %w", path, err)
	}
	return rec, nil
}

// header is the NPY header of n frames, padded to rec.hdrLen once that is set.
func (rec *Recorder) header(n int) ([]byte, error) {
	descr := map[dataset.DType]string{dataset.Uint8: "|u1", dataset.Uint16: "<u2", dataset.Uint32: "<u4"}[rec.h.DType]
	if descr == "" {
		return nil, errs.New(errs.DType, "dectris: record %s: frames of %s", rec.path, rec.h.DType)
	}
	h, err := npy.Header(descr, []int{n, rec.h.SigShape[0], rec.h.SigShape[1]})
	if err != nil || rec.hdrLen == 0 || len(h) == rec.hdrLen {
		return h, err
	}
	// the dict padded with spaces to the length reserved, '\n' last
	p := make([]byte, rec.hdrLen)
	copy(p, h[:len(h)-1])
	for i := len(h) - 1; i < len(p)-1; i++ {
		p[i] = ' '
	}
	p[len(p)-1] = '\n'
	binary.LittleEndian.PutUint16(p[8:], uint16(rec.hdrLen-10))
	return p, nil
}

// Write decodes f and writes it at its index. A frame written twice, or beyond the
// frames announced, is an error.
func (rec *Recorder) Write(f live.Frame) error {
	if rec.err != nil {
		return rec.err
	}
	if f.Index < 0 || (rec.h.Frames > 0 && f.Index >= rec.h.Frames) || f.Index >= recordCap {
		return errs.New(errs.Argument, "dectris: record %s: frame %d of an acquisition of %d frames", rec.path, f.Index, rec.h.Frames)
	}
	if f.Index < len(rec.written) && rec.written[f.Index] {
		return errs.New(errs.Argument, "dectris: record %s: frame %d written twice", rec.path, f.Index)
	}
	if err := rec.decode(rec.buf, f); err != nil {
		return err
	}
	if _, err := rec.tmp.WriteAt(rec.buf, int64(rec.hdrLen)+int64(f.Index)*int64(len(rec.buf))); err != nil {
		rec.err = errs.New(errs.IO, "dectris: record %s: %w", rec.path, err)
		rec.tmp.Abort()
		return rec.err
	}
	for len(rec.written) <= f.Index {
		rec.written = append(rec.written, false)
	}
	rec.written[f.Index] = true
	rec.n++
	return nil
}

// PartialPath is the name of the record of an acquisition that did not send every
// frame: path with ".partial" before its extension.
func PartialPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + ".partial" + ext
}

// Close finishes the record (live.Recorder) of an acquisition that ended with end (the
// frames written tell whether it is complete): the header gets the acquisition's frames
// (those announced, else up to the last received), and the file its final name, Path:
// the path given when no frame is missing, else PartialPath. On an I/O error no file is
// left.
func (rec *Recorder) Close(end error) error {
	if rec.err != nil {
		return rec.err
	}
	rec.err = errs.New(errs.Argument, "dectris: record %s: already closed", rec.path)
	n := max(rec.h.Frames, len(rec.written))
	hdr, err := rec.header(n)
	if err == nil {
		_, err = rec.tmp.WriteAt(hdr, 0)
	}
	if err == nil {
		err = rec.tmp.Truncate(int64(rec.hdrLen) + int64(n)*int64(len(rec.buf)))
	}
	if err != nil {
		rec.tmp.Abort()
		return errs.New(errs.IO, "dectris: record %s: %w", rec.path, err)
	}
	if rec.n == n {
		return rec.tmp.Commit()
	}
	partial := PartialPath(rec.path)
	if err := rec.tmp.Sync(); err == nil {
		err = os.Rename(rec.tmp.Name(), partial)
	}
	if err != nil {
		rec.tmp.Abort()
		return errs.New(errs.IO, "dectris: record %s: %w", partial, err)
	}
	rec.tmp.Abort() // closes it; the temporary name is gone
	rec.path = partial
	return nil
}

// Path is the record's file: after Close, PartialPath where frames are missing.
func (rec *Recorder) Path() string { return rec.path }

// Abort removes the record's temporary file (live.Recorder).
func (rec *Recorder) Abort() {
	if rec.err == nil {
		rec.err = errs.New(errs.Argument, "dectris: record %s: aborted", rec.path)
		rec.tmp.Abort()
	}
}

var _ live.Recordable = (*Receiver)(nil)

// NewRecorder starts a record of the series r received the header of
// (live.Recordable), at path.
func (r *Receiver) NewRecorder(path string) (live.Recorder, error) {
	return NewRecorder(path, r.hdr, r.Decode)
}
