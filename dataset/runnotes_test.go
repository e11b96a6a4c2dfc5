package dataset_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// frameNoter is a dataset of 14 frames whose run note of frames [start, end) counts
// 2^f for each frame f: its Count is the set of frames asked for, as bits.
type frameNoter struct{ dataset.Dataset }

func (d frameNoter) RunNotes(start, end int) []dataset.RunNote {
	if start < 0 || end > d.NumFrames() || start > end {
		return nil
	}
	n := dataset.RunNote{Key: "frames", Text: "frames {count} ({frames})", Frames: int64(end - start)}
	for f := start; f < end; f++ {
		n.Count |= 1 << f
	}
	return []dataset.RunNote{n}
}

func newFrameNoter(t *testing.T) dataset.Dataset {
	mem, err := dataset.FromMemory(make([]byte, 14*2*3), nil, [2]int{2, 3}, dataset.Uint8)
	require.NoError(t, err)
	return frameNoter{mem}
}

// bitsOf is the set of frames as frameNoter counts them.
func bitsOf(frames ...int) int64 {
	var b int64
	for _, f := range frames {
		b |= 1 << f
	}
	return b
}

// The views of a dataset ask its reader for the run notes of the file's frames they
// show: a frame range's, an ROI's positions, a sync offset's and flyback frames'
// positions (Reconcile), a reordered scan's (Reorder); positions without a frame count
// nothing.
func TestRunNotesViews(t *testing.T) {
	notes := func(ds dataset.Dataset, start, end int) int64 {
		t.Helper()
		n := dataset.RunNotes(ds, start, end)
		require.Len(t, n, 1)
		return n[0].Count
	}
	r, err := dataset.Range(newFrameNoter(t), 3, 8)
	require.NoError(t, err)
	assert.Equal(t, bitsOf(4, 5, 6), notes(r, 1, 4))
	assert.Nil(t, dataset.RunNotes(r, 0, 9), "outside the range")

	sel, err := dataset.Select(newFrameNoter(t), dataset.ROI{Mask: []bool{true, false, false, true, true, true, false, true, true, false, false, false, true, true}, Shape: []int{1, 14}})
	require.NoError(t, err)
	assert.Equal(t, bitsOf(0, 3, 4, 5, 7, 8, 12, 13), notes(sel, 0, 8))
	assert.Equal(t, int64(8), dataset.RunNotes(sel, 0, 8)[0].Frames, "summed over the runs of consecutive positions")
	assert.Equal(t, bitsOf(5, 7, 8), notes(sel, 3, 6))
	sr, err := dataset.Range(sel, 2, 5)
	require.NoError(t, err)
	assert.Equal(t, bitsOf(4, 5, 7, 8, 12), notes(sr, 0, 5))

	for _, c := range []struct {
		opt  dataset.Options
		want int64
	}{
		{dataset.Options{NavShape: []int{3, 4}, SyncOffset: 2}, bitsOf(2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)},
		{dataset.Options{NavShape: []int{3, 5}, SyncOffset: -1}, bitsOf(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)},
		{dataset.Options{NavShape: []int{2, 7}, SyncOffset: 3}, bitsOf(3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)},
		{dataset.Options{NavShape: []int{2, 6}, Flyback: dataset.Flyback{Place: dataset.FlybackEnd}}, bitsOf(0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12)},
	} {
		ds, err := dataset.Reconcile(newFrameNoter(t), c.opt, nil, "", dataset.FileFrames{Whole: 14})
		require.NoError(t, err)
		assert.Equal(t, c.want, notes(ds, 0, ds.NumFrames()), "%+v", c.opt)
	}

	re, err := dataset.Reorder(newFrameNoter(t), []int{3, -1, 0, 1, 2, 9})
	require.NoError(t, err)
	assert.Equal(t, bitsOf(0, 1, 2, 3, 9), notes(re, 0, 6))
	assert.Equal(t, bitsOf(0, 1), notes(re, 1, 4))

	mem, err := dataset.FromMemory(make([]byte, 6), nil, [2]int{2, 3}, dataset.Uint8)
	require.NoError(t, err)
	assert.Nil(t, dataset.RunNotes(mem, 0, 1), "a dataset that counts nothing")
}

func TestSumRunNotes(t *testing.T) {
	a := []dataset.RunNote{{Key: "x", Text: "{count} x in {frames}", Count: 3, Frames: 1}, {Key: "y", Text: "y", Count: 1, Frames: 1}}
	b := []dataset.RunNote{{Key: "y", Text: "other", Count: 4, Frames: 2}, {Key: "z", Text: "z", Count: 2, Frames: 2}}
	assert.Equal(t, []dataset.RunNote{{Key: "x", Text: "{count} x in {frames}", Count: 3, Frames: 1}, {Key: "y", Text: "y", Count: 5, Frames: 3}, {Key: "z", Text: "z", Count: 2, Frames: 2}},
		dataset.SumRunNotes(a, nil, b))
	assert.Nil(t, dataset.SumRunNotes(nil, nil))
	assert.Equal(t, "3 x in 1", a[0].String())
}

// A frame's count is set, not added to, each time it is read: counts from workers
// reading at once, and reading again, give each frame's count once.
func TestFrameCounts(t *testing.T) {
	c := dataset.NewFrameCounts(1000)
	count, frames := c.Sum(0, 1000)
	assert.Zero(t, count+frames)
	c.Set(5, 0) // nothing kept yet
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for f := range 1000 {
				c.Set(f, f%3)
			}
		})
	}
	wg.Wait()
	count, frames = c.Sum(0, 1000)
	assert.Equal(t, int64(333*1+333*2), count)
	assert.Equal(t, int64(666), frames)
	c.Set(1, 7)
	count, frames = c.Sum(0, 3)
	assert.Equal(t, int64(7+2), count)
	assert.Equal(t, int64(2), frames)
	count, frames = c.Sum(0, 1001)
	assert.Zero(t, count+frames, "outside the frames")
}
