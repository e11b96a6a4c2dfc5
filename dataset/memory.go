package dataset

import (
	"sync/atomic"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// memoryDataset serves frames from a caller-owned buffer.
type memoryDataset struct {
	data   []byte
	nav    []int
	sig    [2]int
	dt     DType
	closed atomic.Bool
}

// FromMemory wraps data, frames of sigShape pixels of dt in host byte order, frame-major
// in scan order, as a Dataset that also implements Viewer (zero-copy). len(data) must be
// exactly product(navShape)·sig_y·sig_x·dt.Size() bytes; an empty navShape means
// (1, n_frames) with n_frames taken from len(data). The caller keeps data alive and
// unchanged while the dataset is in use; Close does not free it. Errors: errs.DType for an
// invalid dtype, errs.Shape for sizes that do not fit data.
//
// data may be memory that faults when read (a memory-mapped file that another program
// truncates): ReadFrames, and readers of ViewFrames that use MappingFault (fault.go), then
// fail with an errs.IO error that says at which byte of data its memory became
// unreadable. The dataset registers data for MappingFault until Close.
func FromMemory(data []byte, navShape []int, sigShape [2]int, dt DType) (Dataset, error) {
	if dt.Size() == 0 {
		return nil, errs.New(errs.DType, "dataset: in-memory data: invalid dtype %v", dt)
	}
	frameBytes, err := checkSig(sigShape, dt)
	if err != nil {
		return nil, errs.New(errs.Shape, "dataset: in-memory data: %w", err)
	}
	if len(navShape) == 0 {
		if len(data) == 0 || len(data)%frameBytes != 0 {
			return nil, errs.New(errs.Shape, "dataset: in-memory data: %d bytes is not a whole, non-zero number of frames of %d bytes (%d×%d×%d)",
				len(data), frameBytes, sigShape[0], sigShape[1], dt.Size())
		}
		navShape = []int{1, len(data) / frameBytes}
	}
	frames, _, err := CheckShape(navShape, sigShape, dt)
	if err != nil {
		return nil, errs.New(errs.Shape, "dataset: in-memory data: %w", err)
	}
	if want := frames * frameBytes; len(data) != want {
		return nil, errs.New(errs.Shape, "dataset: in-memory data: %d bytes, but nav shape %s × sig shape %s × %d bytes (%v) needs %d bytes",
			len(data), npy.ShapeString(navShape), npy.ShapeString(sigShape[:]), dt.Size(), dt, want)
	}
	n := len(data) // not data: the registration must not keep the buffer alive
	register(data, func(off uintptr) error {
		return errs.New(errs.IO, "dataset: in-memory data: the frames' memory became unreadable at byte %d of the buffer of %d bytes (e.g. a memory-mapped file truncated by another program)", off, n)
	})
	return &memoryDataset{data: data, nav: append([]int(nil), navShape...), sig: sigShape, dt: dt}, nil
}

func (d *memoryDataset) Format() string   { return "memory" }
func (d *memoryDataset) Path() string     { return "" }
func (d *memoryDataset) NavShape() []int  { return append([]int(nil), d.nav...) }
func (d *memoryDataset) SigShape() [2]int { return d.sig }
func (d *memoryDataset) DType() DType     { return d.dt }
func (d *memoryDataset) NumFrames() int   { return product(d.nav) }
func (d *memoryDataset) FrameBytes() int  { return d.sig[0] * d.sig[1] * d.dt.Size() }

// Close marks the dataset closed and unregisters its buffer (fault.go); later reads
// fail. The caller's buffer is untouched.
func (d *memoryDataset) Close() error {
	if !d.closed.Swap(true) {
		unregister(d.data)
	}
	return nil
}

// ViewFrames returns frames [start, end) of the caller's buffer without copying (capacity
// limited to the range).
func (d *memoryDataset) ViewFrames(start, end int) ([]byte, error) {
	if d.closed.Load() {
		return nil, errs.New(errs.IO, "dataset: in-memory data: read after Close")
	}
	fb := d.FrameBytes()
	if err := checkRange("in-memory data", start, end, d.NumFrames(), fb, (end-start)*fb); err != nil {
		return nil, err
	}
	return d.data[start*fb : end*fb : end*fb], nil
}

// ReadFrames copies frames [start, end) into dst; a fault on the caller's buffer is an
// errs.IO error (see FromMemory).
func (d *memoryDataset) ReadFrames(start, end int, dst []byte) error {
	v, err := d.ViewFrames(start, end)
	if err != nil {
		return err
	}
	fb := d.FrameBytes()
	if err := checkRange("in-memory data", start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	return guardMapped(func() { copy(dst, v) })
}
