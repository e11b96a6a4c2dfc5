package dataset_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// TestReorder reads frames at the scan positions Place gives them: out of order,
// repeated, before the scan and missing, in reads of every range.
func TestReorder(t *testing.T) {
	// Frame f of 6 holds the byte f+1 in each of its 2 pixels.
	data := []byte{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}
	mem, err := dataset.FromMemory(data, []int{6}, [2]int{1, 2}, dataset.Uint8)
	require.NoError(t, err)
	// Frame 0 precedes the scan, frames 1-4 go to positions 3, 0, 1, 3 (a repeat), frame 5
	// to position 4; position 2 has none.
	pl := dataset.Place([]int{-1, 3, 0, 1, 3, 4}, 5, "the test")
	assert.Equal(t, []int{2, 3, -1, 1, 5}, pl.FrameOf)
	assert.False(t, pl.InOrder)
	assert.Equal(t, 1, pl.First)
	assert.Equal(t, []string{
		"1 frame before the first scan position (per the test) is not read",
		"1 frame repeats a scan position already read (per the test) and is not read",
		"1 scan position of 5 has no frame (per the test): read as blank (all-zero) frames, which reductions (mean, std, max) leave out",
		"the frames are not stored in scan order: each is read at its scan position per the test",
	}, pl.Notes)
	ds, err := dataset.Reorder(mem, pl.FrameOf)
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, []int{5}, ds.NavShape())
	want := []byte{3, 3, 4, 4, 0, 0, 2, 2, 6, 6}
	for start := range 5 {
		for end := start; end <= 5; end++ {
			got := make([]byte, (end-start)*2)
			require.NoError(t, ds.ReadFrames(start, end, got))
			assert.Equal(t, want[start*2:end*2], got, "positions [%d, %d)", start, end)
		}
	}
	assert.Error(t, ds.ReadFrames(4, 6, make([]byte, 4)))
	// Position 2, without a frame, is a blank (Blanker), also through Reconcile's view
	// with a sync offset, which reductions leave out (RealFrames).
	assert.Equal(t, []dataset.FrameSpan{{First: 2, Count: 1}}, dataset.Blanks(ds))
	v, err := dataset.Reconcile(ds, dataset.Options{SyncOffset: 1}, []int{4}, "", dataset.FileFrames{Whole: 5, RecordBytes: 2})
	require.NoError(t, err)
	assert.Equal(t, []dataset.FrameSpan{{First: 1, Count: 1}}, dataset.Blanks(v), "position 1 reads the reordered position 2")
	real := dataset.RealFrames(v)
	got := make([]byte, 6)
	require.NoError(t, real.ReadFrames(0, 3, got))
	assert.Equal(t, []byte{4, 4, 2, 2, 6, 6}, got)

	in := dataset.Place([]int{-1, -1, 0, 1, 2, 3}, 3, "x")
	assert.True(t, in.InOrder)
	assert.Equal(t, 2, in.First)
	assert.Equal(t, []string{"2 frames before the first scan position (per x) are not read",
		"1 frame after the first scan position is in no scan position (per x) and is not read"}, in.Notes)

	_, err = dataset.Reorder(mem, []int{0, 6})
	assert.ErrorIs(t, err, errs.Format)
	_, err = dataset.Reorder(mem, nil)
	assert.ErrorIs(t, err, errs.Format)
}
