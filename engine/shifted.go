package engine

import (
	"fmt"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// ShiftedFrames returns ds with every frame f read as g_f, the frame as the masks moved
// by its shift see it (shift.go): g_f(u, v) = Σ_{a,b∈{0,1}} w_ab·frame_f(u+⌊dy⌋+a,
// v+⌊dx⌋+b), zero outside, so that Σ mask·g_f is the shifted masks' product. Its frames
// are float64 of ds's sig shape; a reduction over them (Reduce) gives the frames moved
// back by their shifts: the sum frame of a scan with descan, corrected. shifts holds 2
// values (dy, dx) per frame of ds, as Options.Shifts. The view reads ds with ReadFrames
// (no in-place views) and does not own ds. Errors: errs.Shape for shifts of another
// length, errs.DType for an unsupported dtype.
func ShiftedFrames(ds dataset.Dataset, shifts []float64) (dataset.Dataset, error) {
	if len(shifts) != 2*ds.NumFrames() {
		return nil, errs.New(errs.Shape, "shifted frames: %d shift values for %d frames, want 2 per frame", len(shifts), ds.NumFrames())
	}
	var build func(sig [2]int) func(dst []float64, src []byte, dy, dx float64)
	switch ds.DType() {
	case dataset.Uint8:
		build = shiftedBuild[uint8]
	case dataset.Uint16:
		build = shiftedBuild[uint16]
	case dataset.Uint32:
		build = shiftedBuild[uint32]
	case dataset.Int8:
		build = shiftedBuild[int8]
	case dataset.Int16:
		build = shiftedBuild[int16]
	case dataset.Int32:
		build = shiftedBuild[int32]
	case dataset.Float32:
		build = shiftedBuild[float32]
	case dataset.Float64:
		build = shiftedBuild[float64]
	default:
		return nil, errs.New(errs.DType, "shifted frames: unsupported dtype %v", ds.DType())
	}
	return &shiftedFrames{Dataset: ds, shifts: shifts, build: build}, nil
}

func shiftedBuild[N native](sig [2]int) func(dst []float64, src []byte, dy, dx float64) {
	k := newShiftFrames[N, float64](sig)
	return func(dst []float64, src []byte, dy, dx float64) { k.build(dst, asNative[N](src), dy, dx, false) }
}

type shiftedFrames struct {
	dataset.Dataset
	shifts []float64
	build  func(sig [2]int) func(dst []float64, src []byte, dy, dx float64)
}

func (s *shiftedFrames) DType() dataset.DType { return dataset.Float64 }

func (s *shiftedFrames) FrameBytes() int {
	sig := s.SigShape()
	return 8 * sig[0] * sig[1]
}

// ReadFrames reads frames [start, end) of the underlying dataset into a buffer of its
// own and writes their g_f into dst (float64, host order); each call has its own row
// buffers, so concurrent calls (one per worker) are safe.
func (s *shiftedFrames) ReadFrames(start, end int, dst []byte) error {
	n := s.Dataset.FrameBytes()
	if end < start || len(dst) < (end-start)*s.FrameBytes() {
		return fmt.Errorf("shifted frames [%d, %d): dst holds %d bytes, want %d", start, end, len(dst), (end-start)*s.FrameBytes())
	}
	native := make([]byte, (end-start)*n)
	if err := s.Dataset.ReadFrames(start, end, native); err != nil {
		return err
	}
	sig := s.SigShape()
	p := sig[0] * sig[1]
	build := s.build(sig)
	out := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(dst))), (end-start)*p)
	for f := range end - start {
		build(out[f*p:(f+1)*p], native[f*n:(f+1)*n], s.shifts[2*(start+f)], s.shifts[2*(start+f)+1])
	}
	return nil
}
