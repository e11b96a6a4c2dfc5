package dataset

import (
	"sort"

	"github.com/stemdot/stemdot/errs"
)

// Scan positions without a frame.
//
// A sync offset (Options.SyncOffset, LiberTEM's sync_offset) moves the file's frames
// against the scan positions (frames.go): with a negative one the first positions have
// no frame of the file, with a positive one the last ones when the file ends before the
// scan does, by no more than the offset. As in LiberTEM, the scan keeps its nav shape and
// such positions read as blank (all-zero) frames: a mask's result there is 0. A
// reduction that counts frames (mean, std, max) leaves them out, as LiberTEM's
// StdDevUDF does (its num_frames counts the file's frames only): it reduces RealFrames.
// The datasets that Open returns report these positions (Blanker), also through an
// ROI (Select) and a frame range (Range), and their notes name them.

// Blanker is implemented by datasets some of whose frames are scan positions without a
// frame in the file (see above).
type Blanker interface {
	// Blanks returns the dataset's frames that are positions without a frame, as
	// ascending, disjoint spans of its frames (FrameSpan: First, Count >= 1); nil when
	// there are none. The slice is the caller's.
	Blanks() []FrameSpan
}

// Blanks returns the frames of ds that are scan positions without a frame in the file
// (Blanker), as ascending, disjoint spans of its frames; nil when every frame of ds is
// one of the file.
func Blanks(ds Dataset) []FrameSpan {
	if b, ok := ds.(Blanker); ok {
		return b.Blanks()
	}
	return nil
}

// RealFrames returns the frames of ds that are frames of the file, without the scan
// positions without a frame (Blanks), for a reduction over them: ds itself when it has
// none, else a view of the others in order, nav shape (n_real,), or nil when ds has no
// frame of the file at all. The view reads through ds and shares it: closing the view
// closes ds.
func RealFrames(ds Dataset) Dataset {
	blanks := Blanks(ds)
	if len(blanks) == 0 {
		return ds
	}
	n, next := ds.NumFrames(), 0
	var held []FrameSpan // the frames between the blanks, within [0, n)
	for _, b := range append(blanks, FrameSpan{First: n}) {
		if first := min(b.First, n); first > next {
			held = append(held, FrameSpan{next, first - next})
		}
		next = max(next, min(b.First+b.Count, n))
	}
	switch len(held) {
	case 0:
		return nil
	case 1: // the usual: blanks before and after the file's frames
		if v, err := Range(ds, held[0].First, held[0].Count); err == nil {
			return v
		}
	}
	var pos []int
	for _, r := range held {
		for p := r.First; p < r.First+r.Count; p++ {
			pos = append(pos, p)
		}
	}
	return selectPositions(ds, pos)
}

// Blanks are the selected positions without a frame (Blanker).
func (s *selection) Blanks() []FrameSpan {
	var spans []FrameSpan
	for _, b := range Blanks(s.Dataset) {
		i, j := sort.SearchInts(s.pos, b.First), sort.SearchInts(s.pos, b.First+b.Count)
		switch {
		case i == j:
		case len(spans) > 0 && spans[len(spans)-1].First+spans[len(spans)-1].Count == i:
			spans[len(spans)-1].Count += j - i
		default:
			spans = append(spans, FrameSpan{i, j - i})
		}
	}
	return spans
}

// Blanks are the range's frames without a frame in the file (Blanker).
func (r *frameRange) Blanks() []FrameSpan {
	var spans []FrameSpan
	for _, b := range Blanks(r.Dataset) {
		lo, hi := max(b.First, r.first), min(b.First+b.Count, r.first+r.count)
		if lo < hi {
			spans = append(spans, FrameSpan{lo - r.first, hi - lo})
		}
	}
	return spans
}

// CheckBlanks checks spans as Blanker.Blanks returns them for a dataset of n frames
// (ascending, disjoint, non-empty, within [0, n)), for a dataset that reports positions
// described elsewhere (errs.Internal naming what).
func CheckBlanks(what string, spans []FrameSpan, n int) error {
	next := 0
	for _, b := range spans {
		if b.First < next || b.Count < 1 || b.Count > n-b.First {
			return errs.New(errs.Internal, "%s: positions without a frame %v are not ascending, disjoint spans within its %d frames", what, spans, n)
		}
		next = b.First + b.Count
	}
	return nil
}
