package dataset

import (
	"fmt"

	"github.com/stemdot/stemdot/errs"
)

// FrameSpan is a range of frames: First (from 0) and Count. Options.Frames with a
// positive Count opens only that range (Range).
type FrameSpan struct {
	First, Count int
}

// Range returns frames [first, first+count) of ds as a dataset of its own: frame i of
// the view is frame first+i of ds, its nav shape is (count,) (a range of scan positions
// need not be whole scan rows, so the view is one-dimensional; the caller places frame
// i at the scan position its Positioner gives: first+i of ds's nav shape, or of the
// scan an ROI ds selects from), and sig shape, dtype and format are those of ds. A task
// of a distributed run computes one such range without reading the rest of the file.
//
// The view forwards ReadFrames, Notes and RunNotes, and ViewFrames (Viewer) and
// MapFrames (Mapper) when ds implements them, so that in-place reads of mapped files and
// the copy-free GPU feed stay in use. The view owns ds: its Close closes ds.
//
// Errors (errs.Shape): count < 1, first < 0, or a range past the end of ds (the message
// names the path, the range, the frame count and option frames).
func Range(ds Dataset, first, count int) (Dataset, error) {
	n := ds.NumFrames()
	if first < 0 || count < 1 || count > n || first > n-count {
		return nil, errs.New(errs.Shape, "dataset: %s: option frames %d,%d: a range of %d frames from frame %d is not within its %d frames (want first >= 0, count >= 1, first+count <= %d)",
			describePath(ds), first, count, count, first, n, n)
	}
	r := &frameRange{Dataset: ds, first: first, count: count}
	_, view := ds.(Viewer)
	_, mapped := ds.(Mapper)
	switch {
	case view && mapped:
		return viewMapRange{r}, nil
	case view:
		return viewRange{r}, nil
	case mapped:
		return mapRange{r}, nil
	}
	return r, nil
}

// describePath names ds in messages: its path, or its format for in-memory data.
func describePath(ds Dataset) string {
	if p := ds.Path(); p != "" {
		return p
	}
	return ds.Format() + " data"
}

// frameRange is the view of Range; the embedded Dataset supplies Format, Path,
// SigShape, DType, FrameBytes and Close.
type frameRange struct {
	Dataset
	first, count int
}

// NavShape is (count,).
func (r *frameRange) NavShape() []int { return []int{r.count} }

// NumFrames is the range's frame count.
func (r *frameRange) NumFrames() int { return r.count }

// Notes are the dataset's notes on how the file was read (Noter).
func (r *frameRange) Notes() []string { return Notes(r.Dataset) }

// Calibration is the signal axes' calibration of ds (Calibrator); a range of frames is
// no scan, so it has no nav axes.
func (r *frameRange) Calibration() Calibration {
	c := CalibrationOf(r.Dataset)
	c.Nav = nil
	return c
}

// RunNotes are the notes of frames [start, end) of the range (RunNoter).
func (r *frameRange) RunNotes(start, end int) []RunNote {
	s, e, err := r.span(start, end)
	if err != nil {
		return nil
	}
	return RunNotes(r.Dataset, s, e)
}

// ScanShape is the scan shape of ds's frames (Positioner): ds's nav shape, or the scan
// of an ROI ds selects from.
func (r *frameRange) ScanShape() []int {
	if p, ok := r.Dataset.(Positioner); ok {
		return p.ScanShape()
	}
	return r.Dataset.NavShape()
}

// Positions are the scan positions of the range's frames (Positioner).
func (r *frameRange) Positions() []int {
	if p, ok := r.Dataset.(Positioner); ok {
		return p.Positions()[r.first : r.first+r.count]
	}
	pos := make([]int, r.count)
	for i := range pos {
		pos[i] = r.first + i
	}
	return pos
}

func (r *frameRange) viewsAll() bool { return ViewsInPlace(r.Dataset) }

// span checks [start, end) against the view and returns it in frames of the dataset.
func (r *frameRange) span(start, end int) (int, int, error) {
	if start < 0 || end > r.count || start > end {
		return 0, 0, fmt.Errorf("dataset: %s: frames [%d, %d) out of range: the frame range [%d, %d) holds %d frames",
			describePath(r.Dataset), start, end, r.first, r.first+r.count, r.count)
	}
	return r.first + start, r.first + end, nil
}

// ReadFrames reads frames [start, end) of the view.
func (r *frameRange) ReadFrames(start, end int, dst []byte) error {
	s, e, err := r.span(start, end)
	if err != nil {
		return err
	}
	return r.Dataset.ReadFrames(s, e, dst)
}

func (r *frameRange) viewFrames(start, end int) ([]byte, error) {
	s, e, err := r.span(start, end)
	if err != nil {
		return nil, err
	}
	return r.Dataset.(Viewer).ViewFrames(s, e)
}

func (r *frameRange) mapFrames(start, end int) (FrameMap, bool, error) {
	s, e, err := r.span(start, end)
	if err != nil {
		return FrameMap{}, false, err
	}
	return r.Dataset.(Mapper).MapFrames(s, e)
}

// viewRange, mapRange and viewMapRange are the views of datasets that are Viewers,
// Mappers or both: a view implements exactly the interfaces its dataset implements.
type viewRange struct{ *frameRange }

// ViewFrames returns frames [start, end) of the view in place (see Viewer).
func (r viewRange) ViewFrames(start, end int) ([]byte, error) { return r.viewFrames(start, end) }

type mapRange struct{ *frameRange }

// MapFrames locates frames [start, end) of the view in the mapping (see Mapper).
func (r mapRange) MapFrames(start, end int) (FrameMap, bool, error) { return r.mapFrames(start, end) }

type viewMapRange struct{ *frameRange }

// ViewFrames returns frames [start, end) of the view in place (see Viewer).
func (r viewMapRange) ViewFrames(start, end int) ([]byte, error) { return r.viewFrames(start, end) }

// MapFrames locates frames [start, end) of the view in the mapping (see Mapper).
func (r viewMapRange) MapFrames(start, end int) (FrameMap, bool, error) {
	return r.mapFrames(start, end)
}

// ranged is the dataset a Range views (IsROI).
func (r *frameRange) ranged() Dataset { return r.Dataset }
