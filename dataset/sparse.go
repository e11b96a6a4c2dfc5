package dataset

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Sparse frames.
//
// Electron-counting detectors and sparse file formats (LiberTEM's raw_csr, stempy's
// counted HDF5) store each frame as a list of events: the pixels hit and their values.
// A dataset of such a file implements SparseReader beside ReadFrames, so that a consumer
// that can work on the events (the CPU workers' gather kernel of the mask-dot product)
// reads them as they are stored, and every other consumer (reductions, pick, GPU workers,
// shifted masks) reads the same frames densified through ReadFrames. Both give the same
// frames: ReadFrames adds the values of the events of a frame into its pixels (events at
// the same pixel, duplicates, are summed, as scipy.sparse sums them when it densifies),
// and leaves the pixels without an event zero.

// SparseFrames is a run of frames in compressed sparse row (CSR) form, a reusable buffer
// that ReadSparse appends to: frame i (from 0, the first frame appended since Reset) has
// the events Indptr[i] ≤ k < Indptr[i+1]; event k is at pixel Indices[k] (row-major
// within sig_shape: y·sig_x + x, 0 ≤ Indices[k] < sig_y·sig_x; one pixel may have
// several events, which add up) and has the value of element k of Data, in the
// dataset's native dtype (DType), host byte order. The native dtype keeps the values
// exact (a float64 or a large uint32 value is not rounded) and keeps the bytes a reader
// moves as small as the file's.
type SparseFrames struct {
	// Indptr has Frames()+1 entries, non-decreasing, Indptr[0] == 0 and the last equal
	// to NNZ().
	Indptr []int
	// Indices are the events' pixels.
	Indices []int32
	// Data are the events' values: NNZ()·DType().Size() bytes, or NNZ()·Values.Size()
	// where Values is set.
	Data []byte
	// Values, when set (not Invalid), is the dtype of Data where it is narrower than the
	// dataset's DType: the events of a raw_csr file of 8- or 16-bit data viewed in place
	// (ViewSparse), which the dataset delivers in 32 bits as the dtype of their sums
	// (dataset/csr). Only a view sets it; ReadSparse delivers the DType's values.
	Values DType
}

// Reset empties s, keeping its memory for the next frames.
func (s *SparseFrames) Reset() {
	s.Values = Invalid
	s.Indptr = append(s.Indptr[:0], 0)
	s.Indices = s.Indices[:0]
	s.Data = s.Data[:0]
}

// Frames is the number of frames in s.
func (s *SparseFrames) Frames() int { return max(len(s.Indptr)-1, 0) }

// NNZ is the number of events in s.
func (s *SparseFrames) NNZ() int { return len(s.Indices) }

// Slice sets dst to frames [i, j) of s: their indptr entries, from 0, in dst's own
// memory, and their events and Values shared with s (a view of a view: keep dst for
// views only, as for ViewSparse). It panics when [i, j) is not within s's frames.
func (s *SparseFrames) Slice(i, j int, dst *SparseFrames) {
	base, end := s.Indptr[i], s.Indptr[j]
	dst.Indptr = dst.Indptr[:0]
	for _, v := range s.Indptr[i : j+1] {
		dst.Indptr = append(dst.Indptr, v-base)
	}
	dst.Indices = s.Indices[base:end:end]
	size := 0
	if n := s.NNZ(); n > 0 {
		size = len(s.Data) / n
	}
	dst.Data = s.Data[base*size : end*size : end*size]
	dst.Values = s.Values
}

// AppendBlank appends n frames without events (the scan positions without a frame,
// blanks.go).
func (s *SparseFrames) AppendBlank(n int) {
	if len(s.Indptr) == 0 {
		s.Indptr = append(s.Indptr, 0)
	}
	for range n {
		s.Indptr = append(s.Indptr, len(s.Indices))
	}
}

// Densify writes the frames of s, of sig_shape sig and dtype dt, into dst as ReadFrames
// delivers them (frame-major, native dtype, host byte order): zero where no event is,
// the sum of the events' values where some are. dst must hold
// Frames()·sig_y·sig_x·dt.Size() bytes. An event outside the frame or a malformed s is
// an errs.Format error (a reader checks its file's events before); integer events whose
// sum at a pixel is outside dt are an errs.DType error naming the frame and the pixel,
// never a sum wrapped around (the gather of the mask-dot product adds them in float64:
// the two would differ).
func (s *SparseFrames) Densify(dst []byte, sig [2]int, dt DType) error {
	return s.densify(dst, sig, dt, 0, "densify sparse frames")
}

// densify is Densify, its errors naming the data name and numbering s's frames from
// first.
func (s *SparseFrames) densify(dst []byte, sig [2]int, dt DType, first int, name string) error {
	pixels := sig[0] * sig[1]
	fb := pixels * dt.Size()
	frames := s.Frames()
	if len(dst) < frames*fb {
		return fmt.Errorf("dataset: densify %d sparse frames: buffer of %d bytes, want %d", frames, len(dst), frames*fb)
	}
	if s.Values != Invalid && s.Values != dt {
		if err := s.checkData(s.Values); err != nil {
			return err
		}
		w := *s
		w.Values, w.Data = Invalid, make([]byte, len(s.Indices)*dt.Size())
		WidenValues(w.Data, s.Data, s.Values)
		s = &w
	}
	if err := s.check(pixels, dt); err != nil {
		return err
	}
	dst = dst[:frames*fb]
	clear(dst)
	f, k := -1, 0
	switch dt {
	case Uint8:
		f, k = scatterAddInt[uint8](dst, s, pixels)
	case Uint16:
		f, k = scatterAddInt[uint16](dst, s, pixels)
	case Uint32:
		f, k = scatterAddInt[uint32](dst, s, pixels)
	case Int8:
		f, k = scatterAddInt[int8](dst, s, pixels)
	case Int16:
		f, k = scatterAddInt[int16](dst, s, pixels)
	case Int32:
		f, k = scatterAddInt[int32](dst, s, pixels)
	case Float32:
		scatterAdd[float32](dst, s, pixels)
	case Float64:
		scatterAdd[float64](dst, s, pixels)
	default:
		return errs.New(errs.DType, "dataset: densify sparse frames: invalid dtype %v", dt)
	}
	if f >= 0 {
		p := int(s.Indices[k])
		return errs.New(errs.DType, "dataset: %s: frame %d: its events at pixel %d (y %d, x %d) add up to more than %v holds (event %d of the frame overflows it): the frame cannot be densified; sum duplicate events into a wider dtype (scipy's sum_duplicates)",
			name, first+f, p, p/sig[1], p%sig[1], dt, k-s.Indptr[f])
	}
	return nil
}

// WidenValues converts the values of dtype from (8- or 16-bit integers, host byte order)
// in src to the 32-bit integer of the same sign in dst, 4 bytes each: the dtype in which
// a raw_csr file's events add up (dataset/csr). dst holds len(src)/from.Size() values.
func WidenValues(dst, src []byte, from DType) {
	out := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/4)
	switch from {
	case Uint8:
		for i, v := range src[:len(out)] {
			out[i] = uint32(v)
		}
	case Int8:
		for i, v := range src[:len(out)] {
			out[i] = uint32(int32(int8(v)))
		}
	case Uint16:
		for i := range out {
			out[i] = uint32(binary.NativeEndian.Uint16(src[2*i:]))
		}
	case Int16:
		for i := range out {
			out[i] = uint32(int32(int16(binary.NativeEndian.Uint16(src[2*i:]))))
		}
	}
}

// checkData verifies that s's indptr, indices and data of dtype dt agree.
func (s *SparseFrames) checkData(dt DType) error {
	if len(s.Indptr) == 0 || s.Indptr[0] != 0 || s.Indptr[len(s.Indptr)-1] != len(s.Indices) || len(s.Data) != len(s.Indices)*dt.Size() {
		return errs.New(errs.Format, "dataset: sparse frames: %d indptr entries, %d indices and %d data bytes do not agree", len(s.Indptr), len(s.Indices), len(s.Data))
	}
	return nil
}

// check verifies that s is well formed for frames of pixels pixels of dtype dt.
func (s *SparseFrames) check(pixels int, dt DType) error {
	if err := s.checkData(dt); err != nil {
		return err
	}
	for i := 1; i < len(s.Indptr); i++ {
		if s.Indptr[i] < s.Indptr[i-1] {
			return errs.New(errs.Format, "dataset: sparse frames: indptr decreases at frame %d", i-1)
		}
	}
	for k, p := range s.Indices {
		if p < 0 || int(p) >= pixels {
			return errs.New(errs.Format, "dataset: sparse frames: event %d is at pixel %d, outside the frame of %d pixels", k, p, pixels)
		}
	}
	return nil
}

// nativeSlice reinterprets b (host byte order) as a slice of N.
func nativeSlice[N any](b []byte) []N {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*N)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(*new(N)))
}

// scatterAdd adds the events of s into the zeroed frames dst of pixels pixels of N.
func scatterAdd[N float32 | float64](dst []byte, s *SparseFrames, pixels int) {
	out, val := nativeSlice[N](dst), nativeSlice[N](s.Data)
	for f := range s.Frames() {
		frame := out[f*pixels : (f+1)*pixels]
		for k := s.Indptr[f]; k < s.Indptr[f+1]; k++ {
			frame[s.Indices[k]] += val[k]
		}
	}
}

// scatterAddInt adds the integer events of s into the zeroed frames dst of pixels
// pixels of N; it stops at the first event whose sum overflows N and returns its frame
// and event (k of s), else frame -1.
func scatterAddInt[N uint8 | uint16 | uint32 | int8 | int16 | int32](dst []byte, s *SparseFrames, pixels int) (frame, event int) {
	out, val := nativeSlice[N](dst), nativeSlice[N](s.Data)
	for f := range s.Frames() {
		fr := out[f*pixels : (f+1)*pixels]
		for k := s.Indptr[f]; k < s.Indptr[f+1]; k++ {
			a, v := fr[s.Indices[k]], val[k]
			sum := a + v
			if v > 0 && sum < a || v < 0 && sum > a {
				return f, k
			}
			fr[s.Indices[k]] = sum
		}
	}
	return -1, 0
}

// SparseReader is implemented by datasets whose frames are stored sparse (SparseOf
// finds it, also through the views that Open puts in front of a format's dataset).
// ReadSparse appends frames [start, end) to dst (after dst's frames: call dst.Reset
// first for a fresh buffer), as SparseFrames describes: the same frames as ReadFrames,
// before densifying. Errors are those of ReadFrames: they name the file and the frame
// range (errs.IO, errs.Format for a malformed file).
type SparseReader interface {
	ReadSparse(start, end int, dst *SparseFrames) error
}

// SparseViewer is implemented by sparse datasets whose events lie in memory as
// SparseFrames holds them (int32 indices, values in the native dtype, host byte order):
// in the caller's arrays (FromSparse) or in read-only memory mappings of the files
// (raw_csr). ViewSparse sets dst to frames [start, end) without copying the events, as
// a Viewer's ViewFrames does for dense frames: it writes dst.Indptr (from 0, in dst's
// own memory) and sets dst.Indices and dst.Data to the dataset's memory, valid until
// Close. That memory must not be written: never Reset or append to a dst that holds a
// view (keep a SparseFrames for views only). ViewSparse returns false, and leaves dst
// unspecified, when the frames cannot be viewed (frames not consecutive in the file, the
// scan positions without a frame, Blanks): read them with ReadSparse then. Errors are
// those of ReadSparse, but the indices of a file's events are not checked against the
// frame: a consumer checks each event's pixel as it reads it (the engine's gather
// kernel does). The mapping of a file faults when the file shrinks while it is read:
// read it under debug.SetPanicOnFault and turn a recovered panic into the dataset's I/O
// error with MappingFault (fault.go).
type SparseViewer interface {
	ViewSparse(start, end int, dst *SparseFrames) (bool, error)
}

// SparseReleaser is implemented by SparseViewers whose views lie in memory mappings of
// files (raw_csr). ReleaseSparse reports frames [start, end) read, so that their events'
// pages leave this process's memory, as FrameMap.Release does for dense frames, and
// viewing a file in place keeps the process's resident memory bounded by the frames
// being read, not by the file. The pages go by 2 MiB blocks (BlockReleaser), each once
// the frames of all its events have been reported: a block is dropped whole, after its
// last reader, however small the ranges reported and in whichever order. Views stay
// valid: a later read maps the pages again, from the page cache. Errors are those of
// ViewSparse; a file set that is not mapped has nothing to release.
type SparseReleaser interface {
	ReleaseSparse(start, end int) error
}

// SparseSource is implemented by views of a dataset (a scan reconciled with the file's
// frames, an ROI, a frame range) that read sparse frames when the dataset under them
// does: Sparse returns their SparseReader, or nil when the dataset's frames are dense.
// The SparseReader also implements SparseViewer, which views the frames in place when
// the dataset under the view does and the frames are consecutive there.
type SparseSource interface {
	Sparse() SparseReader
}

// SparseOf returns the SparseReader of ds, or nil when ds's frames are dense: ds itself
// when it implements SparseReader, else its SparseSource's.
func SparseOf(ds Dataset) SparseReader {
	switch d := ds.(type) {
	case SparseReader:
		return d
	case SparseSource:
		return d.Sparse()
	}
	return nil
}

// sparseView is the SparseReader and SparseViewer of a view: read reads its frames,
// frames maps them to consecutive frames [first, first+end-start) of the inner
// dataset, when they are (ok).
type sparseView struct {
	inner  SparseReader
	read   func(start, end int, dst *SparseFrames) error
	frames func(start, end int) (first int, ok bool, err error)
}

func (v sparseView) ReadSparse(start, end int, dst *SparseFrames) error {
	return v.read(start, end, dst)
}

func (v sparseView) ViewSparse(start, end int, dst *SparseFrames) (bool, error) {
	sv, ok := v.inner.(SparseViewer)
	if !ok {
		return false, nil
	}
	first, ok, err := v.frames(start, end)
	if !ok || err != nil {
		return false, err
	}
	return sv.ViewSparse(first, first+end-start, dst)
}

// ReleaseSparse releases the frames of the inner dataset that frames [start, end) of the
// view are (SparseReleaser), when they are consecutive there and it can.
func (v sparseView) ReleaseSparse(start, end int) error {
	r, ok := v.inner.(SparseReleaser)
	if !ok {
		return nil
	}
	first, ok, err := v.frames(start, end)
	if !ok || err != nil {
		return err
	}
	return r.ReleaseSparse(first, first+end-start)
}

// Sparse reads the scan positions of the view from the file's sparse frames: frames
// without events at the positions without a frame (blanks.go), flyback frames skipped.
func (d *scanView) Sparse() SparseReader {
	inner := SparseOf(d.Dataset)
	if inner == nil {
		return nil
	}
	return sparseView{inner: inner, read: func(start, end int, dst *SparseFrames) error {
		if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
			return err
		}
		var err error
		d.layout.runs(start, end, func(_, frame, n int) bool {
			a, b := d.layout.held(frame, n)
			dst.AppendBlank(a)
			if a < b {
				err = inner.ReadSparse(frame+a, frame+b, dst)
			}
			dst.AppendBlank(n - b)
			return err == nil
		})
		return err
	}, frames: d.fileRun}
}

// Sparse reads the selected scan positions from the dataset's sparse frames, a run of
// consecutive positions at a time.
func (s *selection) Sparse() SparseReader {
	inner := SparseOf(s.Dataset)
	if inner == nil {
		return nil
	}
	check := func(start, end int) error {
		return checkRange(describePath(s.Dataset), start, end, len(s.pos), s.FrameBytes(), (end-start)*s.FrameBytes())
	}
	return sparseView{inner: inner, read: func(start, end int, dst *SparseFrames) error {
		if err := check(start, end); err != nil {
			return err
		}
		for i := start; i < end; {
			j := i + 1
			for j < end && s.pos[j] == s.pos[j-1]+1 {
				j++
			}
			if err := inner.ReadSparse(s.pos[i], s.pos[j-1]+1, dst); err != nil {
				return err
			}
			i = j
		}
		return nil
	}, frames: func(start, end int) (int, bool, error) {
		if err := check(start, end); err != nil || start == end {
			return 0, false, err
		}
		for i := start + 1; i < end; i++ {
			if s.pos[i] != s.pos[i-1]+1 {
				return 0, false, nil
			}
		}
		return s.pos[start], true, nil
	}}
}

// Sparse reads the range's frames from the dataset's sparse frames.
func (r *frameRange) Sparse() SparseReader {
	inner := SparseOf(r.Dataset)
	if inner == nil {
		return nil
	}
	return sparseView{inner: inner, read: func(start, end int, dst *SparseFrames) error {
		s, e, err := r.span(start, end)
		if err != nil {
			return err
		}
		return inner.ReadSparse(s, e, dst)
	}, frames: func(start, end int) (int, bool, error) {
		s, _, err := r.span(start, end)
		return s, err == nil, err
	}}
}

// sparseMemory serves sparse frames from caller-owned CSR arrays.
type sparseMemory struct {
	sf     SparseFrames
	nav    []int
	sig    [2]int
	dt     DType
	closed atomic.Bool
}

// FromSparse wraps sf, the frames of a scan of navShape positions (product(navShape) ==
// sf.Frames()) of sigShape pixels of dt in CSR form (SparseFrames), as a Dataset that
// also implements SparseReader; an empty navShape means (1, sf.Frames()). The caller
// keeps sf's arrays alive and unchanged while the dataset is in use. Errors: errs.DType
// for an invalid dtype, errs.Shape for shapes that do not fit sf, errs.Format for a
// malformed sf (indptr not non-decreasing from 0 to NNZ, an event outside the frame,
// data of another length than NNZ elements).
func FromSparse(sf SparseFrames, navShape []int, sigShape [2]int, dt DType) (Dataset, error) {
	if dt.Size() == 0 {
		return nil, errs.New(errs.DType, "dataset: in-memory sparse data: invalid dtype %v", dt)
	}
	if _, err := checkSig(sigShape, dt); err != nil {
		return nil, errs.New(errs.Shape, "dataset: in-memory sparse data: %w", err)
	}
	if len(navShape) == 0 {
		navShape = []int{1, sf.Frames()}
	}
	frames, _, err := CheckShape(navShape, sigShape, dt)
	if err != nil {
		return nil, errs.New(errs.Shape, "dataset: in-memory sparse data: %w", err)
	}
	if frames != sf.Frames() {
		return nil, errs.New(errs.Shape, "dataset: in-memory sparse data: nav shape %s has %d positions, but indptr holds %d frames",
			npy.ShapeString(navShape), frames, sf.Frames())
	}
	if err := sf.check(sigShape[0]*sigShape[1], dt); err != nil {
		return nil, err
	}
	return &sparseMemory{sf: sf, nav: append([]int(nil), navShape...), sig: sigShape, dt: dt}, nil
}

func (d *sparseMemory) Format() string   { return "memory" }
func (d *sparseMemory) Path() string     { return "" }
func (d *sparseMemory) NavShape() []int  { return append([]int(nil), d.nav...) }
func (d *sparseMemory) SigShape() [2]int { return d.sig }
func (d *sparseMemory) DType() DType     { return d.dt }
func (d *sparseMemory) NumFrames() int   { return d.sf.Frames() }
func (d *sparseMemory) FrameBytes() int  { return d.sig[0] * d.sig[1] * d.dt.Size() }
func (d *sparseMemory) Close() error     { d.closed.Store(true); return nil }

// ReadSparse appends frames [start, end) to dst.
func (d *sparseMemory) ReadSparse(start, end int, dst *SparseFrames) error {
	if err := d.checkRead(start, end); err != nil {
		return err
	}
	if len(dst.Indptr) == 0 {
		dst.Reset()
	}
	a, b := d.sf.Indptr[start], d.sf.Indptr[end]
	base := len(dst.Indices) - a
	for _, p := range d.sf.Indptr[start+1 : end+1] {
		dst.Indptr = append(dst.Indptr, base+p)
	}
	size := d.dt.Size()
	dst.Indices = append(dst.Indices, d.sf.Indices[a:b]...)
	dst.Data = append(dst.Data, d.sf.Data[a*size:b*size]...)
	return nil
}

// ViewSparse sets dst to frames [start, end) of the caller's arrays (SparseViewer).
func (d *sparseMemory) ViewSparse(start, end int, dst *SparseFrames) (bool, error) {
	if err := d.checkRead(start, end); err != nil {
		return false, err
	}
	a, b := d.sf.Indptr[start], d.sf.Indptr[end]
	dst.Indptr = dst.Indptr[:0]
	for _, p := range d.sf.Indptr[start : end+1] {
		dst.Indptr = append(dst.Indptr, p-a)
	}
	size := d.dt.Size()
	dst.Indices, dst.Data = d.sf.Indices[a:b:b], d.sf.Data[a*size:b*size:b*size]
	return true, nil
}

// ReadFrames densifies frames [start, end) into dst.
func (d *sparseMemory) ReadFrames(start, end int, dst []byte) error {
	if err := checkRange("in-memory sparse data", start, end, d.NumFrames(), d.FrameBytes(), len(dst)); err != nil {
		return err
	}
	return ReadDensified(d, start, end, d.sig, d.dt, dst)
}

// densePool holds the SparseFrames that ReadDensified reads events into.
var densePool = sync.Pool{New: func() any { return new(SparseFrames) }}

// ReadDensified is a sparse dataset's ReadFrames once the request is checked: frames
// [start, end) of sr read as events (ReadSparse) into a pooled buffer, then densified
// into dst as frames of sig_shape sig and dtype dt (Densify; a sum outside dt is an
// errs.DType error naming sr's file, when sr is a Dataset, and the frame).
func ReadDensified(sr SparseReader, start, end int, sig [2]int, dt DType, dst []byte) error {
	sf := densePool.Get().(*SparseFrames)
	defer densePool.Put(sf)
	sf.Reset()
	if err := sr.ReadSparse(start, end, sf); err != nil {
		return err
	}
	name := "sparse data"
	if ds, ok := sr.(Dataset); ok {
		name = describePath(ds)
	}
	return sf.densify(dst, sig, dt, start, name)
}

func (d *sparseMemory) checkRead(start, end int) error {
	if d.closed.Load() {
		return errs.New(errs.IO, "dataset: in-memory sparse data: read after Close")
	}
	return checkRange("in-memory sparse data", start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes())
}
