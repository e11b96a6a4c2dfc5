package stemdot_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
)

// haveGPU reports whether this build and machine can hold resident datasets.
func haveGPU() bool {
	n, err := cuda.DeviceCount()
	return err == nil && n > 0
}

// Without a CUDA build or without a GPU, ToDevice is an errs.CUDA error that says which.
func TestToDeviceWithoutGPU(t *testing.T) {
	if haveGPU() {
		t.Skip("a GPU is present: TestToDevice covers it")
	}
	ds, err := dataset.FromMemory(make([]byte, 32), nil, [2]int{4, 4}, dataset.Uint16)
	require.NoError(t, err)
	r, err := stemdot.ToDevice(context.Background(), ds, 0)
	assert.Nil(t, r)
	require.Equal(t, errs.CUDA, errs.KindOf(err), "%v", err)
	if cuda.Built() {
		assert.Contains(t, err.Error(), "none was found")
	} else {
		assert.Contains(t, err.Error(), "built without CUDA support")
	}
}

// On a GPU, a resident dataset gives the CPU engine's results (float32 and float64, dense
// and sparse stacks) on a real MIB file and on random uint16 frames, again and again;
// bad requests are classified errors.
func TestToDevice(t *testing.T) {
	if !haveGPU() {
		t.Skip("no CUDA build or no GPU")
	}
	ctx := context.Background()
	mib, err := stemdot.Open(testfiles.File(t, "mib/001_4x2_6bit.mib"), stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	defer mib.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 3*5*64*64*2)
	for i := 0; i < len(raw); i += 2 {
		binary.NativeEndian.PutUint16(raw[i:], uint16(rng.IntN(1<<16)))
	}
	random, err := dataset.FromMemory(raw, []int{3, 5}, [2]int{64, 64}, dataset.Uint16)
	require.NoError(t, err)

	for _, ds := range []dataset.Dataset{mib, random} {
		sig := ds.SigShape()
		r, err := stemdot.ToDevice(ctx, ds, 0)
		require.NoError(t, err)
		assert.Equal(t, int64(ds.NumFrames()*ds.FrameBytes()), r.Bytes())
		dense := &masks.Stack{N: 5, SigY: sig[0], SigX: sig[1], Data: make([]float32, 5*sig[0]*sig[1])}
		for i := range dense.Data {
			dense.Data[i] = float32(rng.NormFloat64())
		}
		cx, cy := float64(sig[1]/2), float64(sig[0]/2)
		disk, err := masks.Disk(sig, cx, cy, float64(sig[0])/6)
		require.NoError(t, err)
		com, err := masks.COM(sig, cx, cy, 0)
		require.NoError(t, err)
		for _, stack := range []*masks.Stack{dense, disk, com} {
			for _, f64 := range []bool{false, true} {
				opt := stemdot.ApplyOptions{Float64: f64}
				cpu := stemdot.Plan{CPUs: "1", GPUs: "0"}
				want, err := stemdot.Apply(ctx, ds, stack, cpu, opt)
				require.NoError(t, err)
				// Σ|w·x| per frame and mask bounds the rounding error.
				absStack := &masks.Stack{N: stack.N, SigY: stack.SigY, SigX: stack.SigX, Data: slices.Clone(stack.Dense())}
				for i, w := range absStack.Data {
					absStack.Data[i] = float32(math.Abs(float64(w)))
				}
				bound, err := stemdot.Apply(ctx, ds, absStack, cpu, stemdot.ApplyOptions{Float64: true})
				require.NoError(t, err)
				for range 2 {
					got, err := r.Apply(ctx, stack, opt)
					require.NoError(t, err)
					require.Equal(t, want.NavShape, got.NavShape)
					assert.Equal(t, stack.PreferSparse(), got.Stats.Sparse)
					assert.Equal(t, ds.NumFrames(), got.Stats.Frames)
					for f := range ds.NumFrames() {
						for m := range stack.N {
							a, b := want.Value(f, m), got.Value(f, m)
							require.InDelta(t, a, b, 1e-5*bound.Value(f, m)+1e-6, "frame %d mask %d", f, m)
						}
					}
				}
			}
		}
		wrong, err := masks.Disk([2]int{sig[0] + 1, sig[1]}, 1, 1, 1)
		require.NoError(t, err)
		_, err = r.Apply(ctx, wrong, stemdot.ApplyOptions{})
		assert.Equal(t, errs.Shape, errs.KindOf(err), "%v", err)
		require.NoError(t, r.Close())
		_, err = r.Apply(ctx, disk, stemdot.ApplyOptions{})
		assert.Equal(t, errs.Argument, errs.KindOf(err), "%v", err)
	}

	_, err = stemdot.ToDevice(ctx, random, 1<<20)
	assert.Equal(t, errs.Argument, errs.KindOf(err), "%v", err)
	i16, err := dataset.FromMemory(make([]byte, 32), nil, [2]int{4, 4}, dataset.Int16)
	require.NoError(t, err)
	_, err = stemdot.ToDevice(ctx, i16, 0)
	assert.Equal(t, errs.DType, errs.KindOf(err), "%v", err)
}

// A resident ROI (dataset.Select) holds only the selected frames and places its results
// as Apply does: the scan's nav shape with NaN elsewhere, or compact.
func TestToDeviceROI(t *testing.T) {
	if !haveGPU() {
		t.Skip("no CUDA build or no GPU")
	}
	ctx := context.Background()
	full, err := stemdot.Open(testfiles.File(t, "mib/001_4x2_6bit.mib"), stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	defer full.Close()
	roi, err := dataset.ParseROI("rect:1,0,2,2")
	require.NoError(t, err)
	ds, err := stemdot.Open(testfiles.File(t, "mib/001_4x2_6bit.mib"), stemdot.Options{NavShape: []int{2, 4}, ROI: roi})
	require.NoError(t, err)
	defer ds.Close()
	stack, err := stemdot.Masks(ds.SigShape(), "disk:128,128,20", "com")
	require.NoError(t, err)
	want, err := stemdot.Apply(ctx, full, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	r, err := stemdot.ToDevice(ctx, ds, 0)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, int64(4*ds.FrameBytes()), r.Bytes(), "only the selected frames are held")
	got, err := r.Apply(ctx, stack, stemdot.ApplyOptions{})
	require.NoError(t, err)
	checkROIResult(t, want, got, []int{2, 4}, []int{1, 2, 5, 6}, false, 1e-6) // GPU sums may differ in the last bits
	compact, err := r.Apply(ctx, stack, stemdot.ApplyOptions{ROICompact: true})
	require.NoError(t, err)
	checkROIResult(t, want, compact, []int{2, 4}, []int{1, 2, 5, 6}, true, 1e-6)
}
