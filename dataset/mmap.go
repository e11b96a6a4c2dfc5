package dataset

import (
	"github.com/stemdot/stemdot/errs"

	"github.com/stemdot/stemdot/internal/npy"
)

// mappedFile is a flat file whose frames are in host byte order, memory-mapped read-only
// so that workers read frames in place (Viewer) instead of copying them: for data in the
// page cache this halves the memory traffic of a memory-bound mask-dot product.
type mappedFile struct {
	*flatFile // its mapping is the whole file
}

// newFlatDataset returns d memory-mapped when its frames can be viewed in place (back to
// back, host byte order, aligned for their dtype), else d itself, read with pread (and,
// with per-frame header or footer bytes, mapped for MapFrames). A failed mmap (e.g. a
// file system that does not support it) falls back to pread. Packed pixels that need
// decoding are read with pread only.
func newFlatDataset(d *flatFile, size int64) frameFile {
	d.size = size
	if d.decode != nil {
		return d
	}
	if d.stride() != int64(d.FrameBytes()) {
		d.mapping = mapReadOnly(d.path, d.f, size)
		return d
	}
	if d.bigEndian != npy.HostBigEndian || d.offset%int64(d.dt.Size()) != 0 || size != int64(int(size)) {
		return d
	}
	if d.mapping = mapReadOnly(d.path, d.f, size); d.mapping == nil {
		return d
	}
	return &mappedFile{flatFile: d}
}

// ViewFrames returns frames [start, end) of the mapped file without copying, after
// checking that the file has not shrunk since it was opened (fault.go). The slice is
// valid until Close; reading it after Close faults, and so does reading it when the file
// shrinks meanwhile: read it under debug.SetPanicOnFault, and turn a recovered panic
// into an error with MappingFault.
func (d *mappedFile) ViewFrames(start, end int) ([]byte, error) {
	if d.closed.Load() {
		return nil, errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	fb := d.FrameBytes()
	if err := checkRange(d.path, start, end, d.NumFrames(), fb, (end-start)*fb); err != nil {
		return nil, err
	}
	if err := checkSize(d.path, d.f, d.size); err != nil {
		return nil, err
	}
	lo, hi := d.offset+int64(start*fb), d.offset+int64(end*fb)
	return d.mapping[lo:hi:hi], nil
}

// ReadFrames copies frames [start, end) from the mapping into dst; a file that shrinks
// meanwhile gives an errs.IO error (fault.go).
func (d *mappedFile) ReadFrames(start, end int, dst []byte) error {
	v, err := d.ViewFrames(start, end)
	if err != nil {
		return err
	}
	if err := checkRange(d.path, start, end, d.NumFrames(), d.FrameBytes(), len(dst)); err != nil {
		return err
	}
	return guardMapped(func() { copy(dst, v) })
}
