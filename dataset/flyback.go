package dataset

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/errs"
)

// Flyback frames.
//
// A detector triggered once per scan row keeps recording while the beam flies back to
// the start of the next row, so that each row of nav_x positions comes with extra
// frames that belong to no scan position: Merlin with line skip writes (nav_x+1)·nav_y
// frames while its .hdr gives ScanX = nav_x and ScanY = nav_y (RosettaSciIO issue 270:
// the extra frame ends each row; pyxem's Merlin reader finds it starting each row, by
// its frame header's exposure time). Read as scan positions they shift every row after
// the first. Options.Flyback says where they are. By default (FlybackAuto) a file of
// exactly (nav_x+1)·nav_y frames (from the first scan position on) is read with one
// flyback frame per row where the file tells which frame of a row it is:
//
//   - the frame headers set it apart in every scan row (MIB: the row's last frame, or
//     its first, has another exposure time than the row's other frames; at most
//     FlybackRowsChecked rows are checked, spread over the scan; the file's first
//     frame, the first after arming, may have its own exposure time); a single frame
//     set apart is no evidence; else
//   - the frames do, in every scan row checked (flybackBlank, any format): the row's
//     first frame, or its last, is blank (under 1/16 as many pixels not 0 as the row's
//     second frame) and the other is not.
//
// Where neither tells, a scan of at least flybackRows rows is refused (errs.Shape),
// naming option flyback start and end: the flyback frame may start each row (pyxem) or
// end it (RosettaSciIO), and a guess shifts every scan position by one where it is
// wrong. Of fewer rows, the nav_y frames after the scan are surplus, as any others
// (frames.go), with a note that names option flyback. A note names the flyback frames
// dropped, the evidence and the option.

// flybackRows is the fewest scan rows for which one more frame per row, the frame
// headers not telling, is read as flyback frames: a detector records one or two surplus
// trigger frames after a scan (as LiberTEM and RosettaSciIO report them), so 2 more
// frames on a scan of 2 rows are surplus (the more likely), 3 or more on a scan of as
// many rows are a flyback frame per row.
const flybackRows = 3

// FlybackRowsChecked is the most scan rows whose frame headers a format's
// FileFrames.FlybackAtEnd reads to tell where the flyback frames lie: enough to be
// sure, few enough to cost no time on any file.
const FlybackRowsChecked = 64

// flybackBytes bounds the frame bytes flybackBlank reads: at least 3 scan rows are
// checked, more (up to FlybackRowsChecked) while their 3 frames each fit in it.
const flybackBytes = 64 << 20

// flybackEvidence is FileFrames.FlybackAtEnd for Reconcile: the format's (headers, nil
// when it has none), and where that does not tell, flybackBlank's over the whole frames
// of d.
func flybackEvidence(d Dataset, whole int, headers func(first, stride, rows int) (bool, string)) func(first, stride, rows int) (bool, string) {
	return func(first, stride, rows int) (bool, string) {
		if headers != nil {
			if atEnd, why := headers(first, stride, rows); why != "" {
				return atEnd, why
			}
		}
		return flybackBlank(d, whole, first, stride, rows)
	}
}

// flybackBlank tells from the whole frames of d (the file's, before Reconcile) whether the
// flyback frame of each of the rows scan rows of stride frames from frame first on ends
// the row or starts it: only when in every row checked (all, or as many as the frames
// fit in flybackBytes, at least 3 and at most FlybackRowsChecked, spread from the first
// row to the last) the row's last frame, or its first, is blank (fewer than 1/16 as many
// pixels not 0 as the row's second frame, which has some) and the other is not. why is
// the evidence, for the note; "" when the frames do not tell, or cannot be read.
func flybackBlank(d Dataset, whole, first, stride, rows int) (atEnd bool, why string) {
	fb := d.FrameBytes()
	if first < 0 || stride < 3 || rows < 2 || fb <= 0 || rows > (whole-first)/stride {
		return false, ""
	}
	checked := min(rows, FlybackRowsChecked, max(3, flybackBytes/(3*fb)))
	buf := make([]byte, fb)
	lit := func(frame int) int { // pixels not 0; -1 for a read error
		if d.ReadFrames(frame, frame+1, buf) != nil {
			return -1
		}
		return nonZero(buf, d.DType())
	}
	ends, starts := 0, 0
	for i := range checked {
		row := first + i*(rows-1)/(checked-1)*stride
		second := lit(row + 1)
		if second <= 0 {
			return false, ""
		}
		head, last := lit(row), lit(row+stride-1)
		if head < 0 || last < 0 {
			return false, ""
		}
		blank := func(n int) bool { return 16*n < second }
		switch {
		case blank(head) && !blank(last):
			starts++
		case blank(last) && !blank(head):
			ends++
		default:
			return false, ""
		}
	}
	if ends != checked && starts != checked {
		return false, ""
	}
	where, which, other := "every scan row", "last", "first"
	if checked < rows {
		where = fmt.Sprintf("each of %d scan rows spread over the %d", checked, rows)
	}
	if starts == checked {
		which, other = other, which
	}
	return ends == checked, fmt.Sprintf("in %s, its %s frame is blank (under 1/16 as many pixels not 0 as the row's second frame) and its %s is not", where, which, other)
}

// nonZero counts the pixels of dtype dt in b (host byte order) that are not 0.
func nonZero(b []byte, dt DType) int {
	n, size := 0, dt.Size()
	switch dt {
	case Float32:
		for i := 0; i+4 <= len(b); i += 4 {
			if math.Float32frombits(binary.NativeEndian.Uint32(b[i:])) != 0 {
				n++
			}
		}
	case Float64:
		for i := 0; i+8 <= len(b); i += 8 {
			if math.Float64frombits(binary.NativeEndian.Uint64(b[i:])) != 0 {
				n++
			}
		}
	default:
		for i := 0; i+size <= len(b); i += size {
			for _, c := range b[i : i+size] {
				if c != 0 {
					n++
					break
				}
			}
		}
	}
	return n
}

// FlybackPlace is where the flyback frames of a scan row lie (Flyback.Place).
type FlybackPlace uint8

// The places of Flyback.Place.
const (
	// FlybackAuto detects one flyback frame per row from the frame count (see above).
	FlybackAuto FlybackPlace = iota
	// FlybackNone reads every frame as a scan position.
	FlybackNone
	// FlybackStart: each row starts with Flyback.Frames flyback frames.
	FlybackStart
	// FlybackEnd: each row ends with Flyback.Frames flyback frames.
	FlybackEnd
)

// Flyback says which frames of each scan row are flyback frames (Options.Flyback). The
// zero value is FlybackAuto.
type Flyback struct {
	// Place is where the flyback frames of a row lie, or FlybackAuto, or FlybackNone.
	Place FlybackPlace
	// Frames is the number of flyback frames per row with FlybackStart and FlybackEnd;
	// 0 means 1.
	Frames int
}

// String is the option's text: "auto", "none", "start", "end", "start:2", "end:2".
func (f Flyback) String() string {
	if f.Place > FlybackEnd {
		return fmt.Sprintf("Flyback{Place: %d, Frames: %d}", f.Place, f.Frames)
	}
	name := [...]string{"auto", "none", "start", "end"}[f.Place]
	if f.Frames > 1 && f.Place >= FlybackStart {
		return fmt.Sprintf("%s:%d", name, f.Frames)
	}
	return name
}

// ParseFlyback parses option flyback: "auto", "none", "start" or "end" (one flyback
// frame per row), or "start:N" or "end:N" (N per row). Errors are errs.Argument.
func ParseFlyback(s string) (Flyback, error) {
	place, count, hasCount := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	f := Flyback{Frames: 1}
	switch place {
	case "auto":
		f.Place = FlybackAuto
	case "none":
		f.Place = FlybackNone
	case "start":
		f.Place = FlybackStart
	case "end":
		f.Place = FlybackEnd
	default:
		return Flyback{}, errs.New(errs.Argument, "want auto, none, start, end, start:N or end:N (N flyback frames per scan row)")
	}
	if hasCount {
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n < 1 || f.Place < FlybackStart {
			return Flyback{}, errs.New(errs.Argument, "want start:N or end:N with N >= 1 flyback frames per scan row")
		}
		f.Frames = n
	}
	if f.Place < FlybackStart {
		f.Frames = 0
	}
	return f, nil
}

// frames is the number of flyback frames per row that f states (0 for auto and none).
func (f Flyback) frames() int {
	if f.Place < FlybackStart {
		return 0
	}
	return max(f.Frames, 1)
}

// scanLayout places the scan positions in the file's frames (reconcileFrames): position
// p is the file's frame offset + lead + p + (p/rowLen)·skip, a blank frame where that is
// negative or not below whole (a position without a frame, blanks.go). skip is the
// number of flyback frames per row of rowLen positions (0: none), lead the number of
// them before a row's positions (skip for FlybackStart, else 0); whole is the number of
// whole frames the file holds.
type scanLayout struct {
	offset, rowLen, skip, lead, whole int
}

// frame is the file's frame at scan position p.
func (l scanLayout) frame(p int) int {
	if l.skip == 0 {
		return l.offset + p
	}
	return l.offset + l.lead + p + p/l.rowLen*l.skip
}

// held is the part [a, b) of a run of n positions from the file's frame frame on
// whose frames the file holds: the positions before a and from b on have none.
func (l scanLayout) held(frame, n int) (a, b int) {
	a = min(max(-frame, 0), n)
	return a, max(min(l.whole-frame, n), a)
}

// blanks are the positions without a frame of a scan of n positions: those before the
// file's first frame and those after its last one (positions run over the file's frames
// in order), as spans of positions.
func (l scanLayout) blanks(n int) []FrameSpan {
	a := sort.Search(n, func(p int) bool { return l.frame(p) >= 0 })
	b := sort.Search(n, func(p int) bool { return l.frame(p) >= l.whole })
	var spans []FrameSpan
	if a > 0 {
		spans = append(spans, FrameSpan{0, a})
	}
	if b < n {
		spans = append(spans, FrameSpan{b, n - b})
	}
	return spans
}

// blanksWith are the positions without a frame of a scan of n positions: blanks, and
// those whose frame is one of the file's frames that are blanks themselves (fileBlanks:
// the positions a format's Reorder leaves without a frame), as ascending, disjoint spans.
func (l scanLayout) blanksWith(n int, fileBlanks []FrameSpan) []FrameSpan {
	spans := l.blanks(n)
	if len(fileBlanks) == 0 {
		return spans
	}
	blank := make([]bool, n)
	for _, s := range spans {
		for p := s.First; p < s.First+s.Count; p++ {
			blank[p] = true
		}
	}
	for p := range n {
		f := l.frame(p)
		i := sort.Search(len(fileBlanks), func(i int) bool { return fileBlanks[i].First+fileBlanks[i].Count > f })
		if i < len(fileBlanks) && fileBlanks[i].First <= f {
			blank[p] = true
		}
	}
	spans = spans[:0]
	for p, b := range blank {
		if !b {
			continue
		}
		if k := len(spans); k > 0 && spans[k-1].First+spans[k-1].Count == p {
			spans[k-1].Count++
		} else {
			spans = append(spans, FrameSpan{p, 1})
		}
	}
	return spans
}

// runs calls yield for the runs of scan positions [start, end) that are consecutive
// frames of the file, in order, until it returns false: positions pos..pos+n-1 are
// frames frame..frame+n-1 (blank where the file holds none: held). Without flyback
// frames that is one run.
func (l scanLayout) runs(start, end int, yield func(pos, frame, n int) bool) {
	for p := start; p < end; {
		n := end - p
		if l.skip > 0 {
			n = min(n, l.rowLen-p%l.rowLen)
		}
		if !yield(p, l.frame(p), n) {
			return
		}
		p += n
	}
}
