package dataset

import (
	"fmt"

	"github.com/stemdot/stemdot/errs"
)

// Reorder presents the frames of d at the scan positions frameOf gives, for a format
// whose file stores frames in acquisition order while its metadata places them
// elsewhere in the scan (a custom scan's coordinate list, a scan index in each frame's
// header): frame p of the result is d's frame frameOf[p], or a blank (all-zero) frame
// where frameOf[p] is negative (a scan position no frame covers: Blanker reports them,
// and Reconcile's view of the result too). Its nav shape is
// (len(frameOf),); pass it to Reconcile with FileFrames.Whole = len(frameOf) to give it
// the scan's nav shape. ReadFrames reads run by run of frames consecutive in d; RunNotes
// gives d's run notes of the frames read at its positions (RunNoter). The result owns d:
// its Close closes d.
//
// Errors (errs.Format, naming d's path): frameOf empty, or an entry at or past d's frame
// count.
func Reorder(d Dataset, frameOf []int) (Dataset, error) {
	n := d.NumFrames()
	if len(frameOf) == 0 {
		return nil, errs.New(errs.Format, "dataset: %s: no scan position to read", d.Path())
	}
	for p, f := range frameOf {
		if f >= n {
			return nil, errs.New(errs.Format, "dataset: %s: scan position %d reads frame %d, but the file holds %d frames", d.Path(), p, f, n)
		}
	}
	return &reordered{Dataset: d, frameOf: append([]int(nil), frameOf...)}, nil
}

// reordered is the dataset of Reorder; the embedded Dataset supplies Format, Path,
// SigShape, DType, FrameBytes and Close.
type reordered struct {
	Dataset
	frameOf []int
}

func (d *reordered) NavShape() []int { return []int{len(d.frameOf)} }
func (d *reordered) NumFrames() int  { return len(d.frameOf) }

// ReadFrames reads scan positions [start, end): blanks as zeros, the others by one read
// of d per run of positions whose frames are consecutive in d.
func (d *reordered) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := checkRange(d.Path(), start, end, len(d.frameOf), fb, len(dst)); err != nil {
		return err
	}
	for p := start; p < end; {
		first, q := d.frameOf[p], p+1
		if first < 0 {
			for q < end && d.frameOf[q] < 0 {
				q++
			}
			clear(dst[(p-start)*fb : (q-start)*fb])
			p = q
			continue
		}
		for q < end && d.frameOf[q] == first+q-p {
			q++
		}
		if err := d.Dataset.ReadFrames(first, first+q-p, dst[(p-start)*fb:(q-start)*fb]); err != nil {
			return err
		}
		p = q
	}
	return nil
}

// Blanks implements Blanker: the scan positions no frame covers.
func (d *reordered) Blanks() []FrameSpan {
	var spans []FrameSpan
	for p, f := range d.frameOf {
		if f >= 0 {
			continue
		}
		if n := len(spans); n > 0 && spans[n-1].First+spans[n-1].Count == p {
			spans[n-1].Count++
		} else {
			spans = append(spans, FrameSpan{p, 1})
		}
	}
	return spans
}

// RunNotes are the notes of scan positions [start, end): those of d's frames there
// (RunNoter).
func (d *reordered) RunNotes(start, end int) []RunNote {
	if start < 0 || end > len(d.frameOf) || start > end {
		return nil
	}
	return runNotesOf(d.Dataset, func(yield func(first, end int)) {
		for p := start; p < end; {
			first, q := d.frameOf[p], p+1
			for first >= 0 && q < end && d.frameOf[q] == first+q-p {
				q++
			}
			if first >= 0 {
				yield(first, first+q-p)
			}
			p = q
		}
	})
}

// Placement is where a format's metadata puts the frames of its file in the scan, built
// by Place: FrameOf for Reorder and the notes that say what does not fit.
type Placement struct {
	// FrameOf[p] is the frame read at scan position p (-1: none, a blank frame).
	FrameOf []int
	// InOrder says that scan position p is frame First+p for every position: no
	// reordering is needed, only a sync offset of First (and Reorder is not needed).
	InOrder bool
	// First is the first frame placed in the scan.
	First int
	// Notes describe frames before the scan, frames beyond it or repeating a position,
	// and positions without a frame; what says where the placement comes from ("the
	// rotator index of the frame headers").
	Notes []string
}

// Place builds the placement of a file's frames in a scan of positions scan positions
// from posOf, the scan position of each frame in file order (negative, or scan and
// more: the frame is in no scan position, e.g. recorded before the scan started). The
// first frame at a position is read there; later ones repeating it are not read. what
// names the source of posOf in the notes.
func Place(posOf []int, scan int, what string) Placement {
	pl := Placement{FrameOf: make([]int, scan), First: -1}
	for p := range pl.FrameOf {
		pl.FrameOf[p] = -1
	}
	var before, outside, repeats int
	for i, p := range posOf {
		switch {
		case (p < 0 || p >= scan) && pl.First < 0:
			before++
		case p < 0 || p >= scan:
			outside++
		case pl.FrameOf[p] >= 0:
			repeats++
		default:
			pl.FrameOf[p] = i
			if pl.First < 0 {
				pl.First = i
			}
		}
	}
	missing := 0
	pl.InOrder = pl.First >= 0
	for p, f := range pl.FrameOf {
		if f < 0 {
			missing++
		}
		if f != pl.First+p {
			pl.InOrder = false
		}
	}
	var list []string
	if before > 0 {
		list = append(list, fmt.Sprintf("%s before the first scan position (per %s) %s not read", plural(before, "frame", "frames"), what, isAre(before)))
	}
	if outside > 0 {
		list = append(list, fmt.Sprintf("%s after the first scan position %s in no scan position (per %s) and %s not read", plural(outside, "frame", "frames"), isAre(outside), what, isAre(outside)))
	}
	if repeats > 0 {
		list = append(list, fmt.Sprintf("%s a scan position already read (per %s) and %s not read", plural(repeats, "frame repeats", "frames repeat"), what, isAre(repeats)))
	}
	if missing > 0 {
		of := fmt.Sprintf("scan position of %d has", scan)
		if missing > 1 {
			of = fmt.Sprintf("scan positions of %d have", scan)
		}
		list = append(list, fmt.Sprintf("%d %s no frame (per %s): read as blank (all-zero) frames, which reductions (mean, std, max) leave out", missing, of, what))
	}
	if !pl.InOrder && missing < scan {
		list = append(list, fmt.Sprintf("the frames are not stored in scan order: each is read at its scan position per %s", what))
	}
	pl.Notes = list
	return pl
}
