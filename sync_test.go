package stemdot_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/masks"
)

// syncScan writes a scan of nav (8, 8), frames of 6×5 random float32 values, as NPY in
// a temporary directory, and returns the file and the frames as float64, frame-major.
func syncScan(t *testing.T) (string, [][]float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(33, 1))
	data := make([]float32, 64*30)
	for i := range data {
		data[i] = float32(100 + 30*rng.NormFloat64())
	}
	path := filepath.Join(t.TempDir(), "scan.npy")
	require.NoError(t, npy.WriteFile(path, []int{8, 8, 6, 5}, data))
	frames := make([][]float64, 64)
	for f := range frames {
		for _, v := range data[f*30 : (f+1)*30] {
			frames[f] = append(frames[f], float64(v))
		}
	}
	return path, frames
}

// TestSyncOffsetReductions: with a sync offset the scan keeps its nav shape, and the sum,
// mean, max and std count the file's frames only, not the positions without a frame
// (LiberTEM's StdDevUDF: num_frames 54 for a scan of 64 positions with sync offset -10,
// #33, peer M54), also within an ROI; against float64 loops over those frames.
func TestSyncOffsetReductions(t *testing.T) {
	path, frames := syncScan(t)
	rect := dataset.ROI{}
	rect.Rect.X, rect.Rect.Y, rect.Rect.W, rect.Rect.H = 2, 0, 5, 8 // columns 2..6 of every row
	for _, c := range []struct {
		s   int
		roi dataset.ROI
		n   int // the frames reduced
	}{
		{-10, dataset.ROI{}, 54},
		{3, dataset.ROI{}, 61},
		{-10, rect, 40 - 5},     // (0, 0) to (1, 1) without a frame: (0, 2) to (0, 6) in the ROI
		{3, rect, 40 - 2},       // (7, 5) to (7, 7): (7, 5) and (7, 6) in the ROI
		{-62, dataset.ROI{}, 2}, // only the file's first 2 frames, at (7, 6) and (7, 7)
	} {
		ds, err := stemdot.Open(path, stemdot.Options{SyncOffset: c.s, ROI: c.roi})
		require.NoError(t, err, c)
		scan, pos := dataset.ScanPositions(ds)
		require.Equal(t, []int{8, 8}, scan, "the nav shape is kept")
		var want [][]float64
		for _, p := range pos {
			if f := p + c.s; f >= 0 && f < 64 {
				want = append(want, frames[f])
			}
		}
		require.Len(t, want, c.n, "%+v", c)
		var progress [2]int
		red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{CPUs: "2", Oversubscribe: true, PartitionSize: "1KiB"},
			stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Std: true, Progress: func(done, total int) { progress = [2]int{done, total} }})
		require.NoError(t, err, c)
		checkReduction(t, red, want, false)
		assert.Equal(t, [2]int{ds.NumFrames(), ds.NumFrames()}, progress, "the positions without a frame count as done")
		require.NoError(t, ds.Close())
	}

	// No frame of the file at all: a zero sum, NaN elsewhere, and a warning.
	mask := make([]bool, 64)
	mask[0], mask[9] = true, true
	ds, err := stemdot.Open(path, stemdot.Options{SyncOffset: -10, ROI: dataset.ROI{Mask: mask, Shape: []int{8, 8}}})
	require.NoError(t, err)
	defer ds.Close()
	red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{}, stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Std: true})
	require.NoError(t, err)
	assert.Zero(t, red.Frames)
	assert.Equal(t, make([]float64, 30), red.Sum)
	for _, f := range [][]float64{red.Mean, red.Max, red.Std} {
		for _, v := range f {
			require.True(t, math.IsNaN(v))
		}
	}
	assert.Contains(t, red.Warnings[len(red.Warnings)-1], "no frame to reduce: all 2 frames of "+path+" are scan positions without a frame in the file (option sync_offset)")
}

// TestSyncOffsetApply: mask results are 0 at the positions without a frame and Σ
// mask·frame at the others, of the nav shape kept (LiberTEM's ApplyMasksUDF gives the
// same); shifts per position of that shape are taken (peer M46); the warning and the
// result's sidecar name the positions without a frame; a pick there is a blank frame.
func TestSyncOffsetApply(t *testing.T) {
	path, frames := syncScan(t)
	rng := rand.New(rand.NewPCG(33, 2))
	weights := make([]float64, 2*30)
	for i := range weights {
		weights[i] = rng.NormFloat64()
	}
	stack, err := masks.New64(2, 6, 5, weights, []string{"a", "b"})
	require.NoError(t, err)
	for _, c := range []struct {
		s        int
		runs     [][2]int
		warnings []string
	}{
		{-10, [][2]int{{0, 10}}, []string{"sync offset -10: 10 blank frames are inserted before the first frame of the file, so scan positions (0, 0) to (1, 1) have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out",
			"nav shape (8, 8) from the NPY shape has 64 positions but the file holds 64 frames (74 scan positions with sync offset -10): the last 10 are surplus and not read"}},
		{3, [][2]int{{61, 3}}, []string{"sync offset 3: the first 3 frames of the file are skipped, so scan positions (7, 5) to (7, 7) have no frame: they read as blank (all-zero) frames, which reductions (mean, std, max) leave out"}},
	} {
		ds, err := stemdot.Open(path, stemdot.Options{SyncOffset: c.s})
		require.NoError(t, err)
		for i, w := range c.warnings {
			c.warnings[i] = path + ": " + w
		}
		assert.Equal(t, c.warnings, stemdot.OpenWarnings(ds))
		for _, shifts := range [][]float64{nil, make([]float64, 128)} {
			res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "2", Oversubscribe: true}, stemdot.ApplyOptions{Float64: true, Shifts: shifts})
			require.NoError(t, err, "shifts of the kept nav shape (8, 8)")
			require.Equal(t, []int{8, 8}, res.NavShape)
			for p := range 64 {
				for m := range 2 {
					want := 0.0
					if f := p + c.s; f >= 0 && f < 64 {
						for i, v := range frames[f] {
							want += weights[m*30+i] * v
						}
					}
					require.InDelta(t, want, res.Value(p, m), 1e-9*(1+math.Abs(want)), "position %d mask %d", p, m)
				}
			}
			assert.Equal(t, c.runs, res.Info.PositionsWithoutFrame)
		}
		res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
		require.NoError(t, err)
		out := filepath.Join(t.TempDir(), "result.npy")
		require.NoError(t, stemdot.Save(res, stemdot.Outputs{NPY: out}))
		text, err := os.ReadFile(stemdot.SidecarPath(out))
		require.NoError(t, err)
		var info struct {
			Runs [][2]int `json:"positions_without_frame"`
		}
		require.NoError(t, json.Unmarshal(text, &info))
		assert.Equal(t, c.runs, info.Runs, "the sidecar")
		at := []int{c.runs[0][0] / 8, c.runs[0][0] % 8}
		fr, err := stemdot.Pick(context.Background(), ds, [][]int{at})
		require.NoError(t, err)
		assert.Equal(t, make([]float64, 30), fr.Pixels(0), "a pick at a position without a frame is a blank frame, as LiberTEM's PickUDF")
		require.NoError(t, ds.Close())
	}

	// An ROI and a frame range name the positions of theirs only, in the scan.
	mask := make([]bool, 64)
	for _, p := range []int{1, 3, 9, 10, 40} {
		mask[p] = true
	}
	for _, c := range []struct {
		opt  stemdot.Options
		runs [][2]int
	}{
		{stemdot.Options{SyncOffset: -10, ROI: dataset.ROI{Mask: mask, Shape: []int{8, 8}}}, [][2]int{{1, 1}, {3, 1}, {9, 1}}},
		{stemdot.Options{SyncOffset: -10, Frames: dataset.FrameSpan{First: 8, Count: 4}}, [][2]int{{8, 2}}},
		{stemdot.Options{SyncOffset: -10, Frames: dataset.FrameSpan{First: 10, Count: 4}}, nil},
		{stemdot.Options{SyncOffset: 3, ROI: dataset.ROI{Mask: mask, Shape: []int{8, 8}}, Frames: dataset.FrameSpan{First: 1, Count: 4}}, nil},
	} {
		ds, err := stemdot.Open(path, c.opt)
		require.NoError(t, err)
		assert.Equal(t, c.runs, stemdot.BlankPositions(ds), "%+v", c.opt)
		res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{ROICompact: true})
		require.NoError(t, err)
		assert.Equal(t, c.runs, res.Info.PositionsWithoutFrame)
		_, pos := dataset.ScanPositions(ds)
		for i, p := range pos {
			if p < 10 && c.opt.SyncOffset < 0 {
				require.Zero(t, res.Value(i, 0), "position %d", p)
			} else {
				require.NotZero(t, res.Value(i, 0), "position %d", p)
			}
		}
		require.NoError(t, ds.Close())
	}
}

// TestSyncOffsetSparse: sparse frames with a sync offset (peer X03, raw_csr): the
// gather kernel gives 0 at the positions without a frame and Σ mask·frame elsewhere,
// and the reductions count the file's frames only; against float64 loops.
func TestSyncOffsetSparse(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 3))
	sig := [2]int{6, 5}
	var sf dataset.SparseFrames
	sf.Reset()
	frames := make([][]float64, 64)
	for f := range frames {
		frames[f] = make([]float64, 30)
		for range rng.IntN(12) {
			p, v := rng.IntN(30), uint16(1+rng.IntN(50))
			sf.Indices = append(sf.Indices, int32(p))
			sf.Data = binary.NativeEndian.AppendUint16(sf.Data, v)
			frames[f][p] += float64(v)
		}
		sf.Indptr = append(sf.Indptr, len(sf.Indices))
	}
	weights := make([]float64, 30)
	for i := range weights {
		weights[i] = rng.NormFloat64()
	}
	stack, err := masks.New64(1, 6, 5, weights, nil)
	require.NoError(t, err)
	for _, s := range []int{-5, 5} {
		inner, err := dataset.FromSparse(sf, nil, sig, dataset.Uint16)
		require.NoError(t, err)
		ds, err := dataset.Reconcile(inner, stemdot.Options{NavShape: []int{8, 8}, SyncOffset: s}, nil, "", dataset.FileFrames{Whole: 64})
		require.NoError(t, err)
		res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "2", Oversubscribe: true}, stemdot.ApplyOptions{Float64: true})
		require.NoError(t, err)
		require.True(t, res.Stats.Gather, "the gather kernel read the events")
		var held [][]float64
		for p := range 64 {
			want := 0.0
			if f := p + s; f >= 0 && f < 64 {
				held = append(held, frames[f])
				for i, v := range frames[f] {
					want += weights[i] * v
				}
			}
			require.InDelta(t, want, res.Value(p, 0), 1e-9*(1+math.Abs(want)), "sync offset %d position %d", s, p)
		}
		red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{CPUs: "2", Oversubscribe: true}, stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Std: true})
		require.NoError(t, err)
		checkReduction(t, red, held, true)
		require.Equal(t, 59, red.Frames)
	}
}
