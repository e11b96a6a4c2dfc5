package dataset

import (
	"math"
	"strconv"
	"strings"
	"sync/atomic"
)

// Run notes: what a reader counts in the frames it reads.
//
// A dataset's notes (Noter) are known when its file is opened. What a reader sees only in
// the frames themselves, such as the saturated pixels of a DECTRIS detector
// (dataset/hdf5), it counts while it reads them: such a reader implements RunNoter. It
// keeps one count per frame of its file (FrameCounts), set each time the frame is read,
// so that what a run reports depends on the frames the run read and on nothing else: a
// frame read twice (by two runs, by a retried partition, by two workers) counts once in
// each run that reads it, a run of a frame range (Range) or an ROI (Select) reports its
// own frames only, and runs that read one dataset at the same time do not see each
// other's counts. After a run, its front end asks for the RunNotes of the frames it read
// (every frame of the dataset for a mask apply, a reduction or a centre search; the
// frames picked for a pick) and reports their sentences as warnings (in the root
// package: Result.Warnings and its sidecar, Reduction.Warnings, Frames.Warnings;
// stemdot_dataset_run_notes in the C ABI).
//
// A RunNote is one count with its key and a sentence: the notes of frame ranges read by
// several processes (the workers of a Dask cluster) are summed by key (SumRunNotes) and
// said once, as the notes of one run over all their frames.

// RunNote is one count a reader made in the frames of a run.
type RunNote struct {
	// Key names what is counted (e.g. "dectris_saturated"): notes of one key are summed.
	Key string `json:"key"`
	// Text is the sentence, without a trailing period, with "{count}" where Count goes
	// and "{frames}" where Frames goes (String), worded to read for any count.
	Text string `json:"text"`
	// Count is the number of things counted (e.g. pixel values); Frames is the number of
	// frames that hold at least one.
	Count  int64 `json:"count"`
	Frames int64 `json:"frames"`
}

// String is the note's sentence: Text with Count and Frames in place.
func (n RunNote) String() string {
	return strings.NewReplacer("{count}", strconv.FormatInt(n.Count, 10), "{frames}", strconv.FormatInt(n.Frames, 10)).Replace(n.Text)
}

// RunNoter is implemented by datasets whose reader counts something in the frames it
// reads (see above), in every way it serves them (ReadFrames, and ViewFrames or
// MapFrames where it has them); the views of this package (Range, Select, Reconcile's,
// Reorder) implement it over their frames.
type RunNoter interface {
	// RunNotes returns the notes of frames [start, end) of the dataset, counted when
	// they were last read (frames not read yet count nothing), one per key whose count
	// is not 0; nil when there are none or the range is not within the dataset's frames.
	RunNotes(start, end int) []RunNote
}

// RunNotes returns the notes of frames [start, end) of ds (RunNoter), nil when ds counts
// nothing.
func RunNotes(ds Dataset, start, end int) []RunNote {
	if n, ok := ds.(RunNoter); ok {
		return n.RunNotes(start, end)
	}
	return nil
}

// SumRunNotes sums notes by key, in the order each key first appears (the Text of its
// first note); nil when there are none.
func SumRunNotes(lists ...[]RunNote) []RunNote {
	var sum []RunNote
	for _, list := range lists {
		for _, n := range list {
			i := 0
			for i < len(sum) && sum[i].Key != n.Key {
				i++
			}
			if i == len(sum) {
				sum = append(sum, RunNote{Key: n.Key, Text: n.Text})
			}
			sum[i].Count += n.Count
			sum[i].Frames += n.Frames
		}
	}
	return sum
}

// runNotesOf sums the notes of ds over the runs of its frames that each yields.
func runNotesOf(ds Dataset, runs func(yield func(first, end int))) []RunNote {
	if _, ok := ds.(RunNoter); !ok {
		return nil
	}
	var lists [][]RunNote
	runs(func(first, end int) {
		if first < end {
			lists = append(lists, RunNotes(ds, first, end))
		}
	})
	return SumRunNotes(lists...)
}

// FrameCounts is one count per frame of a file, for a RunNoter: its reader sets the
// count of each frame it reads (Set), and RunNotes sums them over the frames asked for
// (Sum). It takes 4 bytes per frame from the first count that is not 0 on, none
// before. Safe for concurrent use.
type FrameCounts struct {
	n      int
	counts atomic.Pointer[[]atomic.Uint32]
}

// NewFrameCounts returns the counts of a file of n frames, all 0.
func NewFrameCounts(n int) *FrameCounts { return &FrameCounts{n: n} }

// Set makes n (at least 0, at most 2³²−1 are kept) the count of frame.
func (c *FrameCounts) Set(frame, n int) {
	counts := c.counts.Load()
	if counts == nil {
		if n == 0 {
			return
		}
		made := make([]atomic.Uint32, c.n)
		if !c.counts.CompareAndSwap(nil, &made) {
			counts = c.counts.Load()
		} else {
			counts = &made
		}
	}
	(*counts)[frame].Store(uint32(min(uint64(n), math.MaxUint32)))
}

// Sum returns the sum of the counts of frames [start, end) and the number of those
// frames whose count is not 0 (0, 0 for a range not within the file's frames).
func (c *FrameCounts) Sum(start, end int) (count, frames int64) {
	counts := c.counts.Load()
	if counts == nil || start < 0 || end > c.n || start > end {
		return 0, 0
	}
	for i := start; i < end; i++ {
		if v := (*counts)[i].Load(); v != 0 {
			count += int64(v)
			frames++
		}
	}
	return count, frames
}
