package dataset

import (
	"fmt"
	"math"

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
//     dropped. A frame cut off by the end of the file is never read.
//   - Raw files have no structure to tell a surplus frame from a wrong description
//     (sig shape, dtype, per-frame header or footer bytes), so a frame count that does not
//     match the nav shape is refused, naming the options that describe the file.
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

// fileFrames is what a format found in its file, for reconcileFrames.
type fileFrames struct {
	// whole is the number of complete frames in the file.
	whole int
	// cutBytes is the size of a frame cut off by the end of the file (0: none), and
	// recordBytes the size of a whole frame's record (header and pixels).
	cutBytes, recordBytes int64
	// strict refuses any frame count that differs from the nav shape (raw files).
	strict bool
	// hint is appended to a strict refusal: the options that describe the file.
	hint string
}

// reconcileFrames picks the nav shape of a file holding ff.whole frames: the user's
// (opt.NavShape) when given, else the file's (fileNav; source says where it came from, as
// in " from x.hdr"), else (1, frames available), which it reports as guessed. It applies
// opt.SyncOffset and the rules above, and returns the nav shape with the notes to report.
// Errors name the option that fixes them.
func reconcileFrames(path string, opt Options, fileNav []int, source string, ff fileFrames) ([]int, notes, error) {
	fail := func(format string, args ...any) ([]int, notes, error) {
		return nil, notes{}, errs.New(errs.Shape, "dataset: %s: "+format, append([]any{path}, args...)...)
	}
	var list []string
	if ff.cutBytes > 0 {
		list = append(list, fmt.Sprintf("the file ends inside frame %d (%d of its %d bytes are there): that frame is not read",
			ff.whole, ff.cutBytes, ff.recordBytes))
	}
	if ff.whole <= 0 {
		return fail("the file holds no whole frame (a frame takes %d bytes)", ff.recordBytes)
	}
	s := opt.SyncOffset
	// s <= -whole, not -s >= whole: -s overflows for the most negative int; and the scan
	// positions whole-s must fit in an int.
	if s >= ff.whole || s <= -ff.whole || s < 0 && ff.whole > math.MaxInt+s {
		return nil, notes{}, errs.New(errs.Argument, "dataset: %s: sync offset %d (option sync_offset) is outside %d to %d: the file holds %s and at least one must be read",
			path, s, -min(ff.whole-1, math.MaxInt-ff.whole), ff.whole-1, plural(ff.whole, "frame", "frames"))
	}
	avail := ff.whole - s // scan positions that have a frame (or an inserted blank one)
	if s > 0 {
		list = append(list, fmt.Sprintf("sync offset %d: the first %s of the file %s skipped", s, plural(s, "frame", "frames"), isAre(s)))
	} else if s < 0 {
		list = append(list, fmt.Sprintf("sync offset %d: %s %s inserted before the first frame of the file", s, plural(-s, "blank frame", "blank frames"), isAre(-s)))
	}
	nav := fileNav
	if len(opt.NavShape) > 0 {
		nav, source = opt.NavShape, " (option nav_shape)"
	}
	if len(nav) == 0 {
		return []int{1, avail}, notes{list: list, guessed: true}, nil
	}
	want, err := checkNav(nav, source)
	if err != nil {
		return fail("%v", err)
	}
	nav = append([]int(nil), nav...)
	if avail == want {
		return nav, notes{list: list}, nil
	}
	frames := fmt.Sprintf("%d frames", ff.whole)
	if s != 0 {
		frames = fmt.Sprintf("%d frames (%d scan positions with sync offset %d)", ff.whole, avail, s)
	}
	if ff.strict {
		return fail("nav shape %s%s has %d positions but the file holds %s%s", npy.ShapeString(nav), source, want, frames, ff.hint)
	}
	if avail > want {
		hint := " (give option sync_offset N if the surplus frames are at the start)"
		if s != 0 {
			hint = ""
		}
		list = append(list, fmt.Sprintf("nav shape %s%s has %d positions but the file holds %s: the last %d are surplus and not read%s",
			npy.ShapeString(nav), source, want, frames, avail-want, hint))
		return nav, notes{list: list}, nil
	}
	// Fewer frames than positions: keep the complete scan rows.
	rowLen := 1
	if len(nav) > 1 {
		rowLen = nav[len(nav)-1]
	}
	rows := avail / rowLen
	if rows == 0 {
		return fail("nav shape %s%s has %d positions but the file holds %s, less than one scan row of %d; give option nav_shape of at most %d positions (e.g. 1,%d)",
			npy.ShapeString(nav), source, want, frames, rowLen, avail, avail)
	}
	kept := []int{rows * rowLen}
	if len(nav) > 1 {
		kept = []int{rows, rowLen}
	}
	list = append(list, fmt.Sprintf("incomplete acquisition: nav shape %s%s has %d positions but the file holds %s: reading the %s (nav shape %s); %s%s",
		npy.ShapeString(nav), source, want, frames, plural(rows, "complete scan row of "+fmt.Sprint(rowLen), "complete scan rows of "+fmt.Sprint(rowLen)),
		npy.ShapeString(kept), plural(want-avail, "position is missing", "positions are missing"), droppedTail(avail-rows*rowLen)))
	return kept, notes{list: list}, nil
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
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", and the %s of the incomplete last row not read", plural(n, "frame", "frames"))
}

// frameFile is a format's dataset before reconciliation: NumFrames is every whole frame
// of the file, nav shape (1, n).
type frameFile interface {
	Dataset
	// setFrames makes nav (product <= NumFrames()) the dataset's nav shape: frames after
	// the last position are not read.
	setFrames(nav []int, n notes)
}

// finishFrames reconciles d's frames with the scan (see reconcileFrames) and returns the
// dataset to hand out: d itself with its nav shape set, or, with a sync offset, d behind
// a view that shifts frame indices. On error d is left open for the caller to close.
func finishFrames(d frameFile, opt Options, fileNav []int, source string, ff fileFrames) (Dataset, error) {
	nav, n, err := reconcileFrames(d.Path(), opt, fileNav, source, ff)
	if err != nil {
		return nil, err
	}
	if opt.SyncOffset == 0 {
		d.setFrames(nav, n)
		return d, nil
	}
	s := &synced{Dataset: d, nav: nav, offset: opt.SyncOffset, notes: n}
	if _, ok := d.(Viewer); ok && s.offset > 0 {
		return &syncedViewer{s}, nil
	}
	return s, nil
}

// synced presents a file's frames shifted by a sync offset: scan position p is the file's
// frame p+offset, or a blank frame when p+offset < 0.
type synced struct {
	Dataset // the file's frames
	nav     []int
	offset  int
	notes
}

func (d *synced) NavShape() []int { return append([]int(nil), d.nav...) }
func (d *synced) NumFrames() int  { return product(d.nav) }

// ReadFrames reads scan positions [start, end): zeros for inserted blank frames, the
// file's frames [start+offset, end+offset) for the rest.
func (d *synced) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.Path(), start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	blank := min(max(-d.offset-start, 0), end-start)
	clear(dst[:blank*fb])
	if start+blank == end {
		return nil
	}
	return d.Dataset.ReadFrames(start+blank+d.offset, end+d.offset, dst[blank*fb:])
}

// MapFrames maps scan positions [start, end) when they are all frames of the file and
// the file is mapped; inserted blank frames are not in the file (ok == false).
func (d *synced) MapFrames(start, end int) (FrameMap, bool, error) {
	if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return FrameMap{}, false, err
	}
	m, ok := d.Dataset.(Mapper)
	if !ok || start+d.offset < 0 {
		return FrameMap{}, false, nil
	}
	return m.MapFrames(start+d.offset, end+d.offset)
}

// syncedViewer is a synced dataset with a positive offset over a Viewer.
type syncedViewer struct{ *synced }

func (d *syncedViewer) ViewFrames(start, end int) ([]byte, error) {
	if err := checkRange(d.Path(), start, end, d.NumFrames(), d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return nil, err
	}
	return d.Dataset.(Viewer).ViewFrames(start+d.offset, end+d.offset)
}
