//go:build !nohdf5

package stemdot_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/h5ref"
	"github.com/stemdot/stemdot/masks"
)

// saturatedScan writes a DECTRIS acquisition (h5ref.DECTRIS) of an 8×8 scan of 24×20
// uint16 frames: counts of 1 to 40, a direct beam whose centre overflows to 65535 on 0
// to 12 pixels of a frame, and 2 pixels that pixel_mask flags at 65535 in every frame
// (the detector's marker). It returns the master and, counted here from the values
// written, each frame's number of unflagged pixels at 65535.
func saturatedScan(t *testing.T) (string, []int64) {
	t.Helper()
	const n, sy, sx = 64, 24, 20
	rng := rand.New(rand.NewPCG(33, 60))
	frames := make([]uint16, n*sy*sx)
	flagged := make([]uint8, sy*sx)
	flagged[3*sx+17], flagged[20*sx+2] = 1, 1
	counts := make([]int64, n)
	for f := range n {
		px := frames[f*sy*sx : (f+1)*sy*sx]
		for i := range px {
			px[i] = uint16(1 + rng.IntN(40))
			if flagged[i] != 0 {
				px[i] = 65535
			}
		}
		for range rng.IntN(13) {
			i := (10+rng.IntN(4))*sx + 8 + rng.IntN(4)
			if px[i] != 65535 {
				px[i] = 65535
				counts[f]++
			}
		}
	}
	master, err := h5ref.DECTRIS(t.TempDir(), "scan", frames, n, sy, sx, flagged)
	require.NoError(t, err)
	return master, counts
}

// saturatedNote is the run note of the frames pos of a saturatedScan.
func saturatedNote(counts []int64, pos []int) []dataset.RunNote {
	n := dataset.RunNote{Key: "dectris_saturated",
		Text: "saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the detector's count overflowed: {count}, in {frames} of the frames read"}
	for _, p := range pos {
		n.Count += counts[p]
		if counts[p] > 0 {
			n.Frames++
		}
	}
	return []dataset.RunNote{n}
}

func span(first, end int) []int {
	s := make([]int, 0, end-first)
	for p := first; p < end; p++ {
		s = append(s, p)
	}
	return s
}

// Issue #33: the run notes of a DECTRIS scan's saturated pixels reach the results of
// the runs that read its frames with 2 workers, counted over those frames only: the
// whole scan (twice: each run's count, not a running total), a frame range, an ROI, a
// reduction, a pick, a centre search, and two runs at once; the sidecar records them.
func TestRunNotesDECTRIS(t *testing.T) {
	master, counts := saturatedScan(t)
	ctx := context.Background()
	plan := stemdot.Plan{CPUs: "2", PartitionSize: "16KiB"}
	stack, err := masks.Disk([2]int{24, 20}, 10, 12, 5)
	require.NoError(t, err)
	open := func(opt stemdot.Options) dataset.Dataset {
		opt.NavShape = []int{8, 8}
		ds, err := stemdot.Open(master, opt)
		require.NoError(t, err)
		t.Cleanup(func() { ds.Close() })
		return ds
	}
	all := span(0, 64)
	whole := saturatedNote(counts, all)
	require.Greater(t, whole[0].Frames, int64(40))
	require.Less(t, whole[0].Frames, int64(64))
	warning := master + ": " + whole[0].String()

	ds := open(stemdot.Options{})
	for run := range 2 {
		res, err := stemdot.Apply(ctx, ds, stack, plan, stemdot.ApplyOptions{})
		require.NoError(t, err)
		require.Equal(t, 2, res.Stats.Workers)
		assert.Equal(t, whole, res.RunNotes, "run %d", run)
		assert.Contains(t, res.Warnings, warning, "run %d", run)
		if run == 1 {
			out := filepath.Join(t.TempDir(), "r.npy")
			require.NoError(t, stemdot.Save(res, stemdot.Outputs{NPY: out}))
			b, err := os.ReadFile(stemdot.SidecarPath(out))
			require.NoError(t, err)
			var info stemdot.ResultInfo
			require.NoError(t, json.Unmarshal(b, &info))
			assert.Equal(t, []stemdot.RunNoteInfo{{Key: "dectris_saturated", Count: whole[0].Count, Frames: whole[0].Frames, Warning: warning}}, info.RunNotes)
		}
	}
	red, err := stemdot.Reduce(ctx, ds, plan, stemdot.ReduceOptions{Sum: true})
	require.NoError(t, err)
	assert.Equal(t, whole, red.RunNotes)
	assert.Contains(t, red.Warnings, warning)

	res, err := stemdot.Apply(ctx, open(stemdot.Options{Frames: dataset.FrameSpan{First: 10, Count: 30}}), stack, plan, stemdot.ApplyOptions{})
	require.NoError(t, err)
	assert.Equal(t, saturatedNote(counts, span(10, 40)), res.RunNotes, "a frame range")

	var r dataset.ROI
	r.Rect.X, r.Rect.Y, r.Rect.W, r.Rect.H = 2, 1, 3, 6
	sel := open(stemdot.Options{ROI: r})
	res, err = stemdot.Apply(ctx, sel, stack, plan, stemdot.ApplyOptions{})
	require.NoError(t, err)
	_, pos := dataset.ScanPositions(sel)
	require.Len(t, pos, 18)
	assert.Equal(t, saturatedNote(counts, pos), res.RunNotes, "an ROI")
	assert.Equal(t, saturatedNote(counts, pos)[0].Count, res.Info.RunNotes[0].Count)

	// A centre search reads every frame: its notes are those of the dataset's frames.
	fresh := open(stemdot.Options{})
	_, err = stemdot.Centre(ctx, fresh, plan, nil)
	require.NoError(t, err)
	assert.Equal(t, whole, dataset.RunNotes(fresh, 0, 64))

	// An apply and a pick of one dataset at once: each counts its own frames (a frame
	// picked twice once).
	var at [][]int
	var frames []int
	for f := 0; len(frames) < 2; f++ {
		if counts[f] > 0 {
			at, frames = append(at, []int{f / 8, f % 8}), append(frames, f)
		}
	}
	fresh = open(stemdot.Options{})
	var wg sync.WaitGroup
	var applied *stemdot.Result
	var picked *stemdot.Frames
	var errA, errP error
	wg.Go(func() { applied, errA = stemdot.Apply(ctx, fresh, stack, plan, stemdot.ApplyOptions{}) })
	wg.Go(func() { picked, errP = stemdot.Pick(ctx, fresh, append(at, at[0])) })
	wg.Wait()
	require.NoError(t, errA)
	require.NoError(t, errP)
	assert.Equal(t, whole, applied.RunNotes)
	note := saturatedNote(counts, frames)
	assert.Equal(t, int64(2), note[0].Frames)
	assert.Equal(t, []string{master + ": " + note[0].String()}, picked.Warnings)
}
