package dataset

import (
	"fmt"
	"math"
	"strings"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Frame counts that differ from the scan.
//
// A file does not always hold exactly one frame per scan position: detectors record
// surplus trigger frames after the scan, an interrupted acquisition stops inside a frame
// or a few frames short of the scan, and a detector that started early records leading
// frames before the first scan position. Every format reconciles the frames it finds
// with the scan shape in one place, reconcileFrames, with these rules:
//
//   - The sync offset (Options.SyncOffset, LiberTEM's sync_offset) shifts frames against
//     scan positions: scan position p holds the file's frame p+SyncOffset. A positive
//     offset skips that many leading frames; a negative one inserts that many blank
//     (all-zero) frames before the first one of the file.
//   - Frames after the scan's last position are surplus: they are not read, and a note
//     says how many.
//   - When the file ends before the scan does (an interrupted acquisition), the complete
//     scan rows are kept (the nav shape becomes (rows, nav_x)), and a note says what was
//     dropped. A 1-D scan (n,) is one row whose positions are complete each: the
//     positions with a frame are kept (nav shape (frames,)). A frame cut off by the end
//     of the file is never read.
//   - Raw files have no structure to tell a surplus frame from a wrong description
//     (sig shape, dtype, per-frame header or footer bytes), so a frame count that does not
//     match the nav shape is refused, naming the options that describe the file.
//   - Flyback frames (Options.Flyback, flyback.go) are in no scan position: each scan
//     row's positions are read from the frames between them.
//   - The user's nav shape (Options.NavShape) replaces the scan shape the file gives when
//     it has as many positions, or as many as the frames the file holds from the first
//     scan position on: a reshape of the same scan. Another contradicts the file and is
//     refused, naming both shapes (`--nav-shape 64` on a file whose .hdr says 64×64 would
//     read the first row as the scan). An NPY or HDF5 array of rank 3 gives no scan shape.
//
// Notes reach the user through Notes (the CLI prints them as warnings).

// Noter is implemented by datasets that have something to report about how the file was
// read: surplus frames ignored, missing frames, a cut-off frame.
type Noter interface {
	// Notes returns one sentence per note, without a trailing period.
	Notes() []string
}

// Notes returns ds's notes, or nil when it has none.
func Notes(ds Dataset) []string {
	if n, ok := ds.(Noter); ok {
		return n.Notes()
	}
	return nil
}

// notes is embedded by datasets that implement Noter; it also says whether the nav shape
// was guessed (NavShapeGuessed).
type notes struct {
	list    []string
	guessed bool
}

func (n *notes) Notes() []string       { return append([]string(nil), n.list...) }
func (n *notes) navShapeGuessed() bool { return n.guessed }

// addNotes puts notes before the others.
func (n *notes) addNotes(list []string) { n.list = append(append([]string(nil), list...), n.list...) }

// reconcileFrames picks the nav shape of a file holding ff.Whole frames: the user's
// (opt.NavShape) when given, else the file's (fileNav; source says where it came from, as
// in " from x.hdr"), else (1, frames available), which it reports as guessed. It applies
// opt.SyncOffset, opt.Flyback and the rules above, and returns the nav shape, where the
// scan positions lie in the file's frames, and the notes to report. A user's nav shape
// that contradicts the scan shape the file states (another number of positions than
// the file's scan and than the frames the file holds) is refused, naming both. Errors
// name the option that fixes them.
func reconcileFrames(path string, opt Options, fileNav []int, source string, ff FileFrames) ([]int, scanLayout, notes, error) {
	fail := func(kind errs.Kind, format string, args ...any) ([]int, scanLayout, notes, error) {
		return nil, scanLayout{}, notes{}, errs.New(kind, "dataset: %s: "+format, append([]any{path}, args...)...)
	}
	var list []string
	if ff.CutBytes > 0 {
		list = append(list, fmt.Sprintf("the file ends inside frame %d (%d of its %d bytes are there): that frame is not read",
			ff.Whole, ff.CutBytes, ff.RecordBytes))
	}
	if ff.Whole <= 0 {
		return fail(errs.Shape, "the file holds no whole frame (a frame takes %d bytes)", ff.RecordBytes)
	}
	s := opt.SyncOffset
	// s <= -whole, not -s >= whole: -s overflows for the most negative int; and the scan
	// positions whole-s must fit in an int.
	if s >= ff.Whole || s <= -ff.Whole || s < 0 && ff.Whole > math.MaxInt+s {
		return fail(errs.Argument, "sync offset %d (option sync_offset) is outside %d to %d: the file holds %s and at least one must be read",
			s, -min(ff.Whole-1, math.MaxInt-ff.Whole), ff.Whole-1, plural(ff.Whole, "frame", "frames"))
	}
	avail := ff.Whole - s // frames from the scan's first position on (inserted blank ones included)
	if ff.SyncOffsetNoted {
	} else if s == 1 {
		list = append(list, "sync offset 1: the first frame of the file is skipped")
	} else if s > 0 {
		list = append(list, fmt.Sprintf("sync offset %d: the first %d frames of the file are skipped", s, s))
	} else if s < 0 {
		list = append(list, fmt.Sprintf("sync offset %d: %s %s inserted before the first frame of the file", s, plural(-s, "blank frame", "blank frames"), isAre(-s)))
	}
	if opt.Flyback.Frames < 0 || opt.Flyback.Place > FlybackEnd {
		return fail(errs.Argument, "option flyback %v is not auto, none, start, end, start:N or end:N", opt.Flyback)
	}
	k := opt.Flyback.frames()
	nav, navSource := fileNav, source
	if len(opt.NavShape) > 0 {
		nav, navSource = opt.NavShape, " (option nav_shape)"
	}
	if len(nav) == 0 {
		if k > 0 {
			return fail(errs.Argument, "option flyback %v needs the scan's rows, and the file gives no scan shape: give option nav_shape", opt.Flyback)
		}
		return []int{1, avail}, scanLayout{offset: s}, notes{list: list, guessed: true}, nil
	}
	want, err := checkNav(nav, navSource)
	if err != nil {
		return fail(errs.Shape, "%v", err)
	}
	nav = append([]int(nil), nav...)
	rowLen := nav[len(nav)-1]
	rows := want / rowLen
	if k > 0 && len(nav) < 2 {
		return fail(errs.Argument, "option flyback %v needs a nav shape of scan rows and columns (Y,X), not %s%s", opt.Flyback, npy.ShapeString(nav), navSource)
	}
	if k > math.MaxInt-rowLen || rows > math.MaxInt/(rowLen+k) {
		return fail(errs.Shape, "nav shape %s%s with %s is too large: its frames exceed %d", npy.ShapeString(nav), navSource, flybackPhrase(k, opt.Flyback.Place == FlybackStart), math.MaxInt)
	}
	if len(opt.NavShape) > 0 && len(fileNav) > 0 && !ff.Series {
		if scan := product(fileNav); want != scan && rows*(rowLen+k) != scan && rows*(rowLen+k) != avail {
			every := ""
			if avail != scan {
				every = fmt.Sprintf(", or of %d to read each of its frames as a scan position", avail)
			}
			return fail(errs.Shape, "nav shape %s (option nav_shape) has %d positions, but the file's scan shape %s%s has %d and the file holds %s: give option nav_shape of %d positions (e.g. %s)%s, or leave it out; option frames FIRST,COUNT reads part of the scan",
				npy.ShapeString(nav), want, npy.ShapeString(fileNav), source, scan, framesHeld(ff.Whole, avail, s), scan, shapeList(fileNav), every)
		}
	}
	atStart := opt.Flyback.Place == FlybackStart
	// One more frame per row: flyback frames where the frame headers or the frames say
	// which (FlybackAtEnd); refused when they do not and there are too many for surplus
	// trigger frames (flybackRows): guessing the place shifts every scan position.
	perRow := opt.Flyback.Place == FlybackAuto && !ff.Strict && len(nav) >= 2 && rows >= 2 && rowLen < math.MaxInt &&
		rows <= math.MaxInt/(rowLen+1) && avail == rows*(rowLen+1)
	if perRow {
		atEnd, why := true, ""
		if ff.FlybackAtEnd != nil {
			atEnd, why = ff.FlybackAtEnd(s, rowLen+1, rows)
		}
		held := fmt.Sprintf("the file holds %s, %d per scan row of nav shape %s%s", framesHeld(ff.Whole, avail, s), rowLen+1, npy.ShapeString(nav), navSource)
		switch {
		case why != "":
			k, atStart = 1, !atEnd
			list = append(list, fmt.Sprintf("%s: read as %s (%s), which is not read; give option flyback none if every frame is a scan position, or option flyback start or end",
				held, flybackPhrase(1, atStart), why))
		case rows >= flybackRows:
			return fail(errs.Shape, "%s: a flyback frame per row, but neither the frame headers nor the frames tell whether it starts or ends the row (no exposure time set apart, no blank frame): give option flyback start or option flyback end (or option flyback none if every frame is a scan position and the last %d are surplus)",
				held, rows)
		}
	}
	layout := scanLayout{offset: s, rowLen: rowLen, skip: k}
	if atStart {
		layout.lead = k
	}
	stride := rowLen + k
	scanFrames := rows * stride
	if avail == scanFrames {
		return nav, layout, notes{list: list}, nil
	}
	desc := fmt.Sprintf("nav shape %s%s has %d positions", npy.ShapeString(nav), navSource, want)
	if k > 0 {
		desc += fmt.Sprintf(" in %d frames with %s", scanFrames, flybackPhrase(k, atStart))
	}
	frames := framesHeld(ff.Whole, avail, s)
	if ff.Strict {
		return fail(errs.Shape, "%s but the file holds %s%s", desc, frames, ff.Hint)
	}
	if avail > scanFrames {
		var hints []string
		if perRow && k == 0 {
			hints = append(hints, "option flyback end or start if each scan row has a flyback frame")
		}
		if s == 0 {
			hints = append(hints, "option sync_offset N if the surplus frames are at the start")
		}
		hint := ""
		if len(hints) > 0 {
			hint = " (give " + strings.Join(hints, ", or ") + ")"
		}
		list = append(list, fmt.Sprintf("%s but the file holds %s: the last %d are surplus and not read%s", desc, frames, avail-scanFrames, hint))
		return nav, layout, notes{list: list}, nil
	}
	// Fewer frames than the scan: keep the complete scan rows (those whose positions all
	// have a frame; the flyback frames after the last one need not be there). A 1-D scan
	// is one row whose complete positions are all those with a frame: rows of 1 here.
	if len(nav) == 1 {
		rowLen, rows, stride = 1, want, 1
	}
	done := 0
	if avail >= layout.lead+rowLen {
		done = min((avail-layout.lead-rowLen)/stride+1, rows)
	}
	if done == rows {
		return nav, layout, notes{list: list}, nil
	}
	if done == 0 {
		return fail(errs.Shape, "%s but the file holds %s, less than one scan row of %d; give option nav_shape of at most %d positions (e.g. 1,%d)",
			desc, frames, rowLen, avail, avail)
	}
	partial := min(max(avail-done*stride-layout.lead, 0), rowLen) // positions of the incomplete row with a frame
	kept, reading := []int{done}, plural(done, "position", "positions")+" with a frame"
	if len(nav) > 1 {
		kept, reading = []int{done, rowLen}, plural(done, "complete scan row of "+fmt.Sprint(rowLen), "complete scan rows of "+fmt.Sprint(rowLen))
	}
	list = append(list, fmt.Sprintf("incomplete acquisition: %s but the file holds %s: reading the %s (nav shape %s); %s%s",
		desc, frames, reading, npy.ShapeString(kept), plural(want-done*rowLen-partial, "position is missing", "positions are missing"), droppedTail(partial)))
	return kept, layout, notes{list: list}, nil
}

// framesHeld describes the whole frames of a file, and the frames from the scan's first
// position on with a sync offset s: "10 frames (9 scan positions with sync offset 1)".
func framesHeld(whole, avail, s int) string {
	if s == 0 {
		return fmt.Sprintf("%d frames", whole)
	}
	return fmt.Sprintf("%d frames (%d scan positions with sync offset %d)", whole, avail, s)
}

// flybackPhrase is "1 flyback frame at the end of each scan row", or of k at the start.
func flybackPhrase(k int, atStart bool) string {
	where := "end"
	if atStart {
		where = "start"
	}
	return fmt.Sprintf("%s at the %s of each scan row", plural(k, "flyback frame", "flyback frames"), where)
}

// shapeList writes a shape as an option value: "64,64".
func shapeList(s []int) string {
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s)), ","), "[]")
}

// isAre is "is" for n == 1, else "are".
func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// plural returns "n one" or "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// droppedTail describes the n frames of an incomplete last scan row.
func droppedTail(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return ", and the incomplete last row's frame not read"
	}
	return fmt.Sprintf(", and the %d frames of the incomplete last row not read", n)
}

// frameFile is a format's dataset before reconciliation (Reconcile sets its nav shape in
// place): NumFrames is every whole frame of the file, nav shape (1, n).
type frameFile interface {
	Dataset
	// setFrames makes nav (product <= NumFrames()) the dataset's nav shape: frames after
	// the last position are not read.
	setFrames(nav []int, n notes)
}

// scanView presents a file's frames at the scan positions of its layout (a sync offset,
// flyback frames): scan position p is the file's frame layout.frame(p), or a blank frame
// where that is negative.
type scanView struct {
	Dataset // the file's frames
	nav     []int
	layout  scanLayout
	notes
}

func (d *scanView) NavShape() []int { return append([]int(nil), d.nav...) }
func (d *scanView) NumFrames() int  { return product(d.nav) }

// ReadFrames reads scan positions [start, end): zeros for inserted blank frames, the
// file's frames for the rest, run by run of consecutive frames (one run per scan row
// with flyback frames).
func (d *scanView) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.Path(), start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	var err error
	d.layout.runs(start, end, func(pos, frame, n int) bool {
		out := dst[(pos-start)*fb : (pos-start+n)*fb]
		blank := min(max(-frame, 0), n)
		clear(out[:blank*fb])
		if blank < n {
			err = d.Dataset.ReadFrames(frame+blank, frame+n, out[blank*fb:])
		}
		return err == nil
	})
	return err
}

// MapFrames maps scan positions [start, end) when they are consecutive frames of the
// file (within one scan row when it has flyback frames) and the file is mapped;
// inserted blank frames are not in the file (ok == false).
func (d *scanView) MapFrames(start, end int) (FrameMap, bool, error) {
	if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return FrameMap{}, false, err
	}
	m, ok := d.Dataset.(Mapper)
	first := d.layout.frame(start)
	if !ok || first < 0 || end > start && d.layout.frame(end-1)-first != end-1-start {
		return FrameMap{}, false, nil
	}
	return m.MapFrames(first, first+end-start)
}

// scanViewer is a scanView shifted by a positive sync offset only, over a Viewer.
type scanViewer struct{ *scanView }

func (d *scanViewer) ViewFrames(start, end int) ([]byte, error) {
	if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return nil, err
	}
	first := d.layout.frame(start)
	return d.Dataset.(Viewer).ViewFrames(first, first+end-start)
}
