package stemdot_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
)

// checkROIResult checks an ROI's result against the full scan's: at the selected
// positions the same values within rel (0: bit for bit, as CPU workers give them: a
// frame's result does not depend on how the run cut the scan), NaN elsewhere; compact,
// the selected rows in order.
func checkROIResult(t *testing.T, full, roi *stemdot.Result, scan, pos []int, compact bool, rel float64) {
	t.Helper()
	assert.Equal(t, pos, roi.Positions)
	assert.Equal(t, scan, roi.ScanShape)
	assert.Equal(t, full.NMasks, roi.NMasks)
	assert.Equal(t, full.F64 != nil, roi.F64 != nil)
	if compact {
		require.Equal(t, []int{len(pos)}, roi.NavShape)
		for i, p := range pos {
			for m := range full.NMasks {
				require.InDelta(t, full.Value(p, m), roi.Value(i, m), rel*math.Abs(full.Value(p, m)), "frame %d (position %d) mask %d", i, p, m)
			}
		}
		return
	}
	require.Equal(t, scan, roi.NavShape)
	require.Equal(t, len(full.F32)+len(full.F64), len(roi.F32)+len(roi.F64))
	for f := range len(full.F32)/full.NMasks + len(full.F64)/full.NMasks {
		for m := range full.NMasks {
			if slices.Contains(pos, f) {
				require.InDelta(t, full.Value(f, m), roi.Value(f, m), rel*math.Abs(full.Value(f, m)), "position %d mask %d", f, m)
			} else {
				require.True(t, math.IsNaN(roi.Value(f, m)), "position %d mask %d outside the ROI: %v, want NaN", f, m, roi.Value(f, m))
			}
		}
	}
}

// roiMasks are a disk, the com set and two random dense masks for frames of sig.
func roiMasks(t *testing.T, rng *rand.Rand, sig [2]int) *masks.Stack {
	t.Helper()
	spec, err := stemdot.Masks(sig, fmt.Sprintf("disk:%d,%d,%d", sig[1]/2, sig[0]/2, sig[0]/4), "com")
	require.NoError(t, err)
	p := sig[0] * sig[1]
	data := append(slices.Clone(spec.Data), make([]float32, 2*p)...)
	for i := 4 * p; i < len(data); i++ {
		data[i] = float32(rng.NormFloat64())
	}
	stack, err := masks.New(6, sig[0], sig[1], data, append(spec.MaskNames(), "r0", "r1"))
	require.NoError(t, err)
	return stack
}

func TestApplyROI(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	nav, sig := []int{5, 6}, [2]int{8, 8}
	n := 30
	frames := make([]byte, n*sig[0]*sig[1]*2)
	for i := range n * sig[0] * sig[1] {
		binary.LittleEndian.PutUint16(frames[2*i:], uint16(rng.IntN(4000)))
	}
	dir := t.TempDir()
	npyPath := filepath.Join(dir, "scan.npy")
	writeNPYBytes(t, npyPath, "<u2", []int{5, 6, 8, 8}, frames)
	bePath := filepath.Join(dir, "scan.raw")
	be := make([]byte, len(frames))
	for i := 0; i < len(frames); i += 2 {
		be[i], be[i+1] = frames[i+1], frames[i]
	}
	require.NoError(t, os.WriteFile(bePath, be, 0o644))
	stack := roiMasks(t, rng, sig)
	// Several partitions and tiles, so that runs of the ROI are cut.
	plan := stemdot.Plan{CPUs: "2", Oversubscribe: true, PartitionSize: "2KiB"}

	sparse := []int{0, 1, 2, 7, 9, 10, 11, 12, 20, 29}
	roiFile := filepath.Join(dir, "roi.npy")
	mask := make([]byte, n)
	for _, p := range sparse {
		mask[p] = 1
	}
	writeNPYBytes(t, roiFile, "|b1", nav, mask)
	open := map[string]func(roi string) (dataset.Dataset, error){
		"npy (in place)": func(roi string) (dataset.Dataset, error) {
			return stemdot.Open(npyPath, stemdot.Options{ROI: parseROI(t, roi)})
		},
		"raw big-endian": func(roi string) (dataset.Dataset, error) {
			return stemdot.Open(bePath, stemdot.Options{SigShape: sig[:], DType: dataset.Uint16, NavShape: nav, BigEndian: true, ROI: parseROI(t, roi)})
		},
	}
	for _, c := range []struct {
		roi string
		pos []int
	}{
		{"rect:1,1,3,3", []int{7, 8, 9, 13, 14, 15, 19, 20, 21}},
		{roiFile, sparse},
		{"rect:5,4,1,1", []int{29}},
	} {
		for name, o := range open {
			for _, f64 := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/float64=%v", filepath.Base(c.roi), name, f64), func(t *testing.T) {
					full, err := o("")
					require.NoError(t, err)
					defer full.Close()
					want, err := stemdot.Apply(t.Context(), full, stack, plan, stemdot.ApplyOptions{Float64: f64})
					require.NoError(t, err)
					ds, err := o(c.roi)
					require.NoError(t, err)
					defer ds.Close()
					require.Equal(t, []int{len(c.pos)}, ds.NavShape())
					got, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Float64: f64})
					require.NoError(t, err)
					checkROIResult(t, want, got, nav, c.pos, false, 0)
					compact, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Float64: f64, ROICompact: true})
					require.NoError(t, err)
					checkROIResult(t, want, compact, nav, c.pos, true, 0)
					require.Equal(t, len(c.pos), compact.Stats.Frames, "only the selected frames are computed")

					shifts, err := stemdot.COMShifts(got, 1)
					require.NoError(t, err)
					wantShifts, err := stemdot.COMShifts(want, 1)
					require.NoError(t, err)
					for p := range n {
						for a := range 2 {
							if slices.Contains(c.pos, p) {
								assert.Equal(t, wantShifts[2*p+a], shifts[2*p+a])
							} else {
								assert.True(t, math.IsNaN(shifts[2*p+a]))
							}
						}
					}
				})
			}
		}
	}

	t.Run("caller's buffer", func(t *testing.T) {
		ds, err := stemdot.Open(npyPath, stemdot.Options{ROI: parseROI(t, "rect:0,0,2,1")})
		require.NoError(t, err)
		defer ds.Close()
		_, err = stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Out32: make([]float32, 2*6)})
		require.ErrorContains(t, err, "the float32 result buffer holds 12 values, but 30 frames × 6 masks need 180")
		out := make([]float32, 30*6, 40*6)
		res, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Out32: out})
		require.NoError(t, err)
		require.Same(t, &out[0], &res.F32[0])
		require.Len(t, res.F32, 30*6)
		compact, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Out32: make([]float32, 2*6), ROICompact: true})
		require.NoError(t, err)
		require.Equal(t, res.F32[:12], compact.F32)
		require.True(t, math.IsNaN(float64(res.F32[12])))
	})

	t.Run("save", func(t *testing.T) {
		ds, err := stemdot.Open(npyPath, stemdot.Options{ROI: parseROI(t, roiFile)})
		require.NoError(t, err)
		defer ds.Close()
		res, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{})
		require.NoError(t, err)
		out := filepath.Join(dir, "r.npy")
		require.NoError(t, stemdot.Save(res, stemdot.Outputs{NPY: out, PNGPrefix: filepath.Join(dir, "img"), COMShifts: filepath.Join(dir, "s.npy")}))
		shape, values := readNPY(t, out)
		require.Equal(t, []int{5, 6, 6}, shape)
		require.True(t, math.IsNaN(float64(values[3*6])))
		require.FileExists(t, filepath.Join(dir, "img_com_shift_x.png"))
	})
}

// writeNPYBytes writes data as an NPY file of descr and shape.
func writeNPYBytes(t *testing.T, path, descr string, shape []int, data []byte) {
	t.Helper()
	h, err := npy.Header(descr, shape)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(h, data...), 0o644))
}

func parseROI(t *testing.T, s string) dataset.ROI {
	t.Helper()
	if s == "" {
		return dataset.ROI{}
	}
	r, err := dataset.ParseROI(s)
	require.NoError(t, err)
	return r
}

// failingOutside is a dataset that fails to read any frame outside allowed.
type failingOutside struct {
	dataset.Dataset
	allowed []bool
}

func (d failingOutside) ReadFrames(start, end int, dst []byte) error {
	for f := start; f < end; f++ {
		if !d.allowed[f] {
			return fmt.Errorf("frame %d outside the ROI was read", f)
		}
	}
	return d.Dataset.ReadFrames(start, end, dst)
}

func TestApplyROIReadsOnlySelectedFrames(t *testing.T) {
	nav, sig := []int{6, 7}, [2]int{4, 4}
	data := make([]byte, 42*16)
	for i := range data {
		data[i] = byte(i * 7)
	}
	mem, err := dataset.FromMemory(data, nav, sig, dataset.Uint8)
	require.NoError(t, err)
	mask := make([]bool, 42)
	for _, p := range []int{3, 4, 5, 10, 18, 19, 33, 41} {
		mask[p] = true
	}
	ds, err := dataset.Select(failingOutside{mem, mask}, dataset.ROI{Mask: mask, Shape: nav})
	require.NoError(t, err)
	stack, err := stemdot.Masks(sig, "disk:2,2,1.5")
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1", PartitionSize: "1KiB"}, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	w := stack.Data
	for p := range 42 {
		if !mask[p] {
			require.True(t, math.IsNaN(res.Value(p, 0)))
			continue
		}
		var sum float64 // an independent float64 reference
		for i := range 16 {
			sum += float64(w[i]) * float64(data[p*16+i])
		}
		require.Equal(t, sum, res.Value(p, 0), "position %d", p)
	}
}

func TestApplyROIRealFile(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	full, err := stemdot.Open(path, stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	defer full.Close()
	stack, err := stemdot.Masks(full.SigShape(), "disk:128,128,20", "ring:128,128,40,100", "com")
	require.NoError(t, err)
	want, err := stemdot.Apply(t.Context(), full, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	opt, err := stemdot.ParseOptions("nav_shape=2,4;roi=rect:1,0,2,2")
	require.NoError(t, err)
	ds, err := stemdot.Open(path, opt)
	require.NoError(t, err)
	defer ds.Close()
	got, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	checkROIResult(t, want, got, []int{2, 4}, []int{1, 2, 5, 6}, false, 0)

	// The option's errors name it as each front end does.
	opt, err = stemdot.ParseOptions("nav_shape=2,4;roi=rect:3,0,2,1")
	require.NoError(t, err)
	_, err = stemdot.Open(path, opt)
	require.Equal(t, errs.Shape, errs.KindOf(err))
	require.ErrorContains(t, err, "Options.ROI rect:3,0,2,1 (columns 3..4, rows 0..0) is not within the scan of nav shape (2, 4)")
	_, err = stemdot.ParseOptions("roi=rect:1,2")
	require.ErrorContains(t, err, `option roi "rect:1,2": roi "rect:1,2": want rect:X,Y,W,H`)
}

// Options roi and frames together: the frames counted among the selected positions, each
// placed at its scan position (NaN elsewhere), or compact with the positions.
func TestApplyROIAndFrames(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	roi, err := dataset.ParseROI("rect:1,0,3,2") // positions 1, 2, 3, 5, 6, 7
	require.NoError(t, err)
	stack, err := stemdot.Masks([2]int{256, 256}, "disk:128,128,40", "com")
	require.NoError(t, err)
	plan := stemdot.Plan{CPUs: "1"}
	full, err := stemdot.Open(path, stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	defer full.Close()
	want, err := stemdot.Apply(context.Background(), full, stack, plan, stemdot.ApplyOptions{})
	require.NoError(t, err)
	ds, err := stemdot.Open(path, stemdot.Options{NavShape: []int{2, 4}, ROI: roi, Frames: dataset.FrameSpan{First: 1, Count: 3}})
	require.NoError(t, err)
	defer ds.Close()
	got, err := stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{2, 4}, got.NavShape)
	require.Equal(t, []int{2, 3, 5}, got.Positions)
	for f := range 8 {
		for m := range stack.N {
			if f == 2 || f == 3 || f == 5 {
				require.Equal(t, want.Value(f, m), got.Value(f, m))
			} else {
				require.True(t, math.IsNaN(got.Value(f, m)))
			}
		}
	}
	compact, err := stemdot.Apply(context.Background(), ds, stack, plan, stemdot.ApplyOptions{ROICompact: true})
	require.NoError(t, err)
	require.Equal(t, []int{3}, compact.NavShape)
	require.Equal(t, []int{2, 3, 5}, compact.Positions)
	require.Equal(t, want.Value(5, 2), compact.Value(2, 2))
}
