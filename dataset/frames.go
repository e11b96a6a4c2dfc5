package dataset

import (
	"fmt"
	"math"
	"slices"
	"strconv"
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
//     (all-zero) frames before the first one of the file. The nav shape is kept, as in
//     LiberTEM: positions whose frame lies outside the file have no frame (blanks.go):
//     the first -SyncOffset ones, and, with a positive offset, the last ones when the
//     file holds a frame for every position from its first frame on (the detector
//     started early: the file ends before the scan by no more than the offset). They
//     read as blank frames; a note names them.
//   - Frames after the scan's last position are surplus: they are not read, and a note
//     says how many.
//   - When the file ends before the scan does by more than a sync offset explains (an
//     interrupted acquisition), the complete scan rows are kept (the nav shape becomes (rows, nav_x)), and a note says what was
//     dropped. A 1-D scan (n,) is one row whose positions are complete each: the
//     positions with a frame are kept (nav shape (frames,)). A scan of planes (nav_z,
//     nav_y, nav_x) keeps its complete planes (planes, nav_y, nav_x), or, when the first
//     plane is not complete, that plane's complete rows (1, rows, nav_x): the rank stays,
//     and the note counts the frames of the incomplete last plane (or row) not read. A
//     frame cut off by the end of the file is never read.
//   - Raw files have no structure to tell a surplus frame from a wrong description
//     (sig shape, dtype, per-frame header or footer bytes), so a frame count that does not
//     match the nav shape is refused, naming the options that describe the file: the
//     file holds as many frames as the scan takes, or as many from the sync offset on.
//   - Flyback frames (Options.Flyback, flyback.go) are in no scan position: each scan
//     row's positions are read from the frames between them (every row of every plane of
//     a scan of planes).
//   - The user's nav shape (Options.NavShape) replaces the scan shape the file gives when
//     it has as many positions, or as many as the frames the file holds from the first
//     scan position on: a reshape of the same scan. Another contradicts the file and is
//     refused, naming both shapes (`--nav-shape 64` on a file whose .hdr says 64×64 would
//     read the first row as the scan). An NPY or HDF5 array of rank 3 gives no scan shape.
//   - A nav shape has 1 to MaxNavDims (3) axes; a file's scan of more (an NPY array of
//     rank 6) is refused unless option nav_shape gives its positions in at most 3.
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
	calib   Calibration
}

func (n *notes) Notes() []string       { return append([]string(nil), n.list...) }
func (n *notes) navShapeGuessed() bool { return n.guessed }

// Calibration is what the file states of its axes (Calibrator).
func (n *notes) Calibration() Calibration { return n.calib.Clone() }

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
	syncAt := len(list)   // where the note on the sync offset goes (syncNote)
	reconciled := func(nav []int, layout scanLayout, list []string, guessed bool) ([]int, scanLayout, notes, error) {
		if note := syncNote(s, ff.SyncOffsetNoted, nav, layout.blanks(product(nav))); note != "" {
			list = slices.Insert(list, syncAt, note)
		}
		return nav, layout, notes{list: list, guessed: guessed}, nil
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
		return reconciled([]int{1, avail}, scanLayout{offset: s, whole: ff.Whole}, list, true)
	}
	want, err := checkNav(nav, navSource)
	if err != nil {
		return fail(errs.Shape, "%v", err)
	}
	if len(nav) > MaxNavDims {
		lead := product(nav[:len(nav)-2])
		return fail(errs.Shape, "nav shape %s%s has %d axes: stemdot reads scans of 1 to %d (N, Y,X or Z,Y,X): give option nav_shape of its %d positions in at most %d axes (e.g. %d,%d,%d)",
			npy.ShapeString(nav), navSource, len(nav), MaxNavDims, want, MaxNavDims, lead, nav[len(nav)-2], nav[len(nav)-1])
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
	// trigger frames (flybackRows): guessing the place shifts every scan position. The
	// blank frames of a negative sync offset are no frames of the file: with one, flyback
	// frames are not looked for (option flyback states them).
	perRow := opt.Flyback.Place == FlybackAuto && !ff.Strict && s >= 0 && len(nav) >= 2 && rows >= 2 && rowLen < math.MaxInt &&
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
	layout := scanLayout{offset: s, rowLen: rowLen, skip: k, whole: ff.Whole}
	if atStart {
		layout.lead = k
	}
	stride := rowLen + k
	scanFrames := rows * stride
	if avail == scanFrames {
		return reconciled(nav, layout, list, false)
	}
	desc := fmt.Sprintf("nav shape %s%s has %d positions", npy.ShapeString(nav), navSource, want)
	if k > 0 {
		desc += fmt.Sprintf(" in %d frames with %s", scanFrames, flybackPhrase(k, atStart))
	}
	frames := framesHeld(ff.Whole, avail, s)
	if ff.Strict && ff.Whole != scanFrames {
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
		return reconciled(nav, layout, list, false)
	}
	// The last positions have no frame. When the file holds a frame for each from its
	// first frame on (the detector started s frames early), the sync offset explains it:
	// they read as blank frames.
	if s > 0 && layout.frame(want-1)-s < ff.Whole {
		return reconciled(nav, layout, list, false)
	}
	// Fewer frames than the scan (an interrupted acquisition): keep the complete scan
	// rows (those whose positions all have a frame; the flyback frames after the last one
	// need not be there). A 1-D scan is one row whose complete positions are all those
	// with a frame: rows of 1 here. A scan of planes (Z, Y, X) keeps its complete planes,
	// or short of one the complete rows of its first plane, as a plane of its own: its
	// rank stays.
	if len(nav) == 1 {
		rowLen, rows, stride = 1, want, 1
	}
	done := 0
	if avail >= layout.lead+rowLen {
		done = min((avail-layout.lead-rowLen)/stride+1, rows)
	}
	if done == rows {
		return reconciled(nav, layout, list, false)
	}
	if done == 0 {
		return fail(errs.Shape, "%s but the file holds %s, less than one scan row of %d; give option nav_shape of at most %d positions (e.g. 1,%d)",
			desc, frames, rowLen, avail, avail)
	}
	// Positions with a frame: the complete rows' and those of the incomplete row.
	withFrame := done*rowLen + min(max(avail-done*stride-layout.lead, 0), rowLen)
	kept, reading, last := []int{done}, plural(done, "position", "positions")+" with a frame", "row"
	rowsRead := plural(done, "complete scan row of "+fmt.Sprint(rowLen), "complete scan rows of "+fmt.Sprint(rowLen))
	switch {
	case len(nav) == 2:
		kept, reading = []int{done, rowLen}, rowsRead
	case len(nav) == 3 && done < nav[1]:
		kept, reading = []int{1, done, rowLen}, rowsRead+" of the first scan plane"
	case len(nav) == 3:
		planes, plane := done/nav[1], fmt.Sprintf("%d×%d", nav[1], rowLen)
		kept, reading, last = []int{planes, nav[1], rowLen}, plural(planes, "complete scan plane of "+plane, "complete scan planes of "+plane), "plane"
	}
	list = append(list, fmt.Sprintf("incomplete acquisition: %s but the file holds %s: reading the %s (nav shape %s); %s%s",
		desc, frames, reading, npy.ShapeString(kept), plural(want-withFrame, "position is missing", "positions are missing"), droppedTail(withFrame-product(kept), last)))
	return reconciled(kept, layout, list, false)
}

// syncNote is the note on sync offset s (none for 0, or when the format noted it
// itself: noted), naming the positions of the scan of nav shape nav without a frame,
// blanks.
func syncNote(s int, noted bool, nav []int, blanks []FrameSpan) string {
	var note string
	switch {
	case noted || s == 0:
	case s == 1:
		note = "sync offset 1: the first frame of the file is skipped"
	case s > 0:
		note = fmt.Sprintf("sync offset %d: the first %d frames of the file are skipped", s, s)
	default:
		note = fmt.Sprintf("sync offset %d: %s %s inserted before the first frame of the file", s, plural(-s, "blank frame", "blank frames"), isAre(-s))
	}
	if len(blanks) == 0 {
		return note
	}
	var spans []string
	n := 0
	for _, b := range blanks {
		spans = append(spans, positionSpan(nav, b))
		n += b.Count
	}
	what := fmt.Sprintf("scan positions %s have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out", strings.Join(spans, " and "))
	switch n {
	case 1:
		what = fmt.Sprintf("scan position %s has no frame: it reads as a blank (all-zero) frame, which reductions (mean, std, max) leave out", spans[0])
	case product(nav):
		what = fmt.Sprintf("none of the scan positions, %s, has a frame: they read as blank (all-zero) frames, and reductions have no frame to reduce", spans[0])
	}
	if note == "" {
		return what
	}
	return note + ", so " + what
}

// positionSpan writes the span b of flat scan positions (C order over nav) by their
// coordinates: "(0, 0) to (0, 2)", "(7, 7)"; of a 1-D scan "5 to 7", "5".
func positionSpan(nav []int, b FrameSpan) string {
	at := func(p int) string {
		if len(nav) == 1 {
			return strconv.Itoa(p)
		}
		c := make([]string, len(nav))
		for a := len(nav) - 1; a >= 0; a-- {
			c[a] = strconv.Itoa(p % nav[a])
			p /= nav[a]
		}
		return "(" + strings.Join(c, ", ") + ")"
	}
	if b.Count == 1 {
		return at(b.First)
	}
	return at(b.First) + " to " + at(b.First+b.Count-1)
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

// droppedTail describes the n frames of an incomplete last scan row (last "row") or
// plane ("plane").
func droppedTail(n int, last string) string {
	switch n {
	case 0:
		return ""
	case 1:
		return ", and the incomplete last " + last + "'s frame not read"
	}
	return fmt.Sprintf(", and the %d frames of the incomplete last %s not read", n, last)
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
	blanks  []FrameSpan // layout.blanks(product(nav))
	notes
}

func (d *scanView) NavShape() []int { return append([]int(nil), d.nav...) }
func (d *scanView) NumFrames() int  { return product(d.nav) }

// Blanks are the scan positions without a frame in the file (Blanker).
func (d *scanView) Blanks() []FrameSpan { return append([]FrameSpan(nil), d.blanks...) }

func (d *scanView) viewsAll() bool { return len(d.blanks) == 0 }

// ReadFrames reads scan positions [start, end): zeros for the positions without a
// frame, the file's frames for the rest, run by run of consecutive frames (one run per
// scan row with flyback frames).
func (d *scanView) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.Path(), start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	var err error
	d.layout.runs(start, end, func(pos, frame, n int) bool {
		out := dst[(pos-start)*fb : (pos-start+n)*fb]
		a, b := d.layout.held(frame, n)
		clear(out[:a*fb])
		clear(out[b*fb:])
		if a < b {
			err = d.Dataset.ReadFrames(frame+a, frame+b, out[a*fb:b*fb])
		}
		return err == nil
	})
	return err
}

// RunNotes are the notes of scan positions [start, end): those of the file's frames
// there (RunNoter).
func (d *scanView) RunNotes(start, end int) []RunNote {
	if start < 0 || end > d.NumFrames() || start > end {
		return nil
	}
	return runNotesOf(d.Dataset, func(yield func(first, end int)) {
		d.layout.runs(start, end, func(pos, frame, n int) bool {
			a, b := d.layout.held(frame, n)
			yield(frame+a, frame+b)
			return true
		})
	})
}

// fileRun returns the file's first frame of scan positions [start, end) when they are
// consecutive frames of the file (within one scan row when it has flyback frames), all
// held by the file (ok).
func (d *scanView) fileRun(start, end int) (first int, ok bool, err error) {
	if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return 0, false, err
	}
	first = d.layout.frame(start)
	if end == start {
		return first, first >= 0 && first <= d.layout.whole, nil
	}
	last := d.layout.frame(end - 1)
	return first, first >= 0 && last < d.layout.whole && last-first == end-1-start, nil
}

// MapFrames maps scan positions [start, end) when they are consecutive frames of the
// file (within one scan row when it has flyback frames) and the file is mapped;
// positions without a frame are not in the file (ok == false).
func (d *scanView) MapFrames(start, end int) (FrameMap, bool, error) {
	first, ok, err := d.fileRun(start, end)
	m, mapped := d.Dataset.(Mapper)
	if err != nil || !ok || !mapped {
		return FrameMap{}, false, err
	}
	return m.MapFrames(first, first+end-start)
}

// scanViewer is a scanView shifted by a positive sync offset only, over a Viewer:
// ViewFrames returns nil for a range with positions without a frame (the last ones),
// which the reader then reads with ReadFrames (ViewsInPlace).
type scanViewer struct{ *scanView }

func (d *scanViewer) ViewFrames(start, end int) ([]byte, error) {
	first, ok, err := d.fileRun(start, end)
	if err != nil || !ok {
		return nil, err
	}
	return d.Dataset.(Viewer).ViewFrames(first, first+end-start)
}
