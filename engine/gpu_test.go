package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
	"github.com/stemdot/stemdot/synth"
)

// GPU workers end to end on files (skipped without a CUDA device): raw and NPY frames
// DMA'd from the file's mapping as they are, MIB records unpacked on the device, a GPU
// worker alone and beside a CPU worker; results against a float64 reference.
func TestGPUWorkerFiles(t *testing.T) {
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skip("no CUDA device")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(81, 82))
	for _, c := range []struct {
		ext string
		dt  dataset.DType
	}{{"raw", dataset.Uint16}, {"npy", dataset.Float32}, {"mib", dataset.Uint16}, {"mib", dataset.Uint8}, {"mib", dataset.Uint32}} {
		path := filepath.Join(dir, fmt.Sprintf("scan-%s.%s", c.dt, c.ext))
		_, err := synth.Write(context.Background(), path, synth.Options{NavShape: []int{24, 25}, SigShape: [2]int{64, 48}, DType: c.dt})
		require.NoError(t, err)
		opt := dataset.Options{}
		if c.ext == "raw" {
			opt = dataset.Options{SigShape: []int{64, 48}, DType: c.dt, NavShape: []int{24, 25}}
		}
		ds, err := dataset.Open(path, opt)
		require.NoError(t, err)
		defer ds.Close()
		mem := &memDataset{nav: []int{600}, sig: ds.SigShape(), dt: ds.DType(), data: make([]byte, 600*ds.FrameBytes())}
		require.NoError(t, ds.ReadFrames(0, 600, mem.data))
		stack := randomStack(rng, 5, ds.SigShape())
		want, mag := reference(mem, stack)
		for _, cpus := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/%s/cpus=%d", c.ext, c.dt, cpus), func(t *testing.T) {
				plan := evenPlan(anyCPUs, 1+cpus, 600, 2+2*cpus)
				plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
				res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, TileFrames: 16})
				require.NoError(t, err)
				requireClose(t, res.F32, want, mag, 1e-5)
				g := res.Stats.PerWorker[0]
				// Beside a CPU worker on a loaded machine, the GPU worker may find every
				// frame taken before its CUDA context is ready: its feed is checked where
				// it computed frames.
				if cpus == 0 || g.Frames > 0 {
					assert.True(t, g.Ready)
					assert.Equal(t, "mapped", g.Feed)
				}
				if cpus == 0 {
					assert.Equal(t, 600, g.Frames)
				}
				t.Log(g)
			})
		}
	}
}

// GPU workers on a region of interest (dataset.Select) of a mapped file: partitions of
// consecutive scan positions are DMA'd from the mapping, the others staged (MapFrames
// says ok == false for them); a CPU worker beside reads the runs; results against a
// float64 reference of the selected frames.
func TestGPUWorkerROI(t *testing.T) {
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skip("no CUDA device")
	}
	path := filepath.Join(t.TempDir(), "scan.raw")
	nav, sig := []int{20, 30}, [2]int{32, 24}
	_, err := synth.Write(context.Background(), path, synth.Options{NavShape: nav, SigShape: sig, DType: dataset.Uint16})
	require.NoError(t, err)
	mask := make([]bool, 600)
	for p := range mask {
		mask[p] = p/30 >= 3 && p/30 < 15 && (p%30 < 20 || p%7 == 0) // whole rows' runs and scattered positions
	}
	ds, err := dataset.Open(path, dataset.Options{SigShape: sig[:], DType: dataset.Uint16, NavShape: nav, ROI: dataset.ROI{Mask: mask, Shape: nav}})
	require.NoError(t, err)
	defer ds.Close()
	n := ds.NumFrames()
	mem := &memDataset{nav: []int{n}, sig: sig, dt: dataset.Uint16, data: make([]byte, n*ds.FrameBytes())}
	require.NoError(t, ds.ReadFrames(0, n, mem.data))
	stack := randomStack(rand.New(rand.NewPCG(83, 84)), 3, sig)
	want, mag := reference(mem, stack)
	for _, cpus := range []int{0, 1} {
		t.Run(fmt.Sprintf("cpus=%d", cpus), func(t *testing.T) {
			plan := evenPlan(anyCPUs, 1+cpus, n, 12)
			plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
			res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, TileFrames: 16})
			require.NoError(t, err)
			requireClose(t, res.F32, want, mag, 1e-5)
			assert.Equal(t, "mapped", res.Stats.PerWorker[0].Feed)
		})
	}
}

// A shifted job's GPU rows that came back NaN are recomputed on the host from the
// shifted masks' definition (shiftExact; no device needed: the device's rows are given):
// under the shift (0.5, 0), mask 0 puts weight 0.25 on the +Inf pixel, mask 1 exactly 0.
func TestGPUWorkerExactShifted(t *testing.T) {
	rng := rand.New(rand.NewPCG(93, 94))
	sig := [2]int{6, 5}
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{3}, sig)
		ds.setFloat(1*30+3*5+2, math.Inf(1)) // frame 1, pixel (3, 2)
		stack := &masks.Stack{N: 2, SigY: 6, SigX: 5, Data: make([]float32, 60)}
		stack.Data[2*5+2], stack.Data[3*5+2] = 1, -0.5     // mask 0: (2, 2) and (3, 2)
		stack.Data[30+2*5+2], stack.Data[30+3*5+2] = 1, -1 // mask 1
		stack.Data[30+5*5+4] = 2                           // and (5, 4)
		shifts := []float64{0.5, 0, 0.5, 0, -1, 0.25}
		want, mag := shiftedReference(ds, stack, shifts)
		require.Equal(t, math.Inf(1), want[2], "frame 1, mask 0")
		require.False(t, nonFinite(want[3]), "frame 1, mask 1")
		for _, sparse := range []bool{false, true} {
			s := *stack
			if sparse {
				s.Sparse, s.Data = stack.ToCSR(), nil
			}
			job := &Job{Dataset: ds, Masks: &s, NMasks: 2, Shifts: shifts}
			w := &gpuWorker{job: job, ex: newShiftExact(&s), frame: make([]byte, ds.FrameBytes()), row: make([]float64, 2)}
			out := Output{F32: make([]float32, 6)}
			for k, v := range want {
				out.F32[k] = float32(v)
			}
			out.F32[2], out.F32[3] = float32(math.NaN()), float32(math.NaN()) // as the device gives
			require.NoError(t, w.exactNonFinite(planner.Partition{Start: 0, End: 3}, out))
			requireSameNonFinite(t, out.F32, want, mag, 1e-6, fmt.Sprintf("%v sparse=%v", dt, sparse))
		}
	}
}

// A GPU worker's rows that came back NaN for float frames are recomputed on the host over
// the nonzero weights only (no device needed: the device's rows are given).
func TestGPUWorkerExactNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	sig := [2]int{3, 4}
	ds := randomDataset(rng, dataset.Float32, []int{5}, sig)
	stack := randomStack(rng, 2, sig)
	stack.Data[0] = 0 // mask 0 gives pixel 0 no weight; mask 1 does
	nan := math.Float32bits(float32(math.NaN()))
	binary.NativeEndian.PutUint32(ds.data[2*12*4:], nan) // frame 2, pixel 0
	want, mag := reference(ds, stack)
	// Frame 2, mask 0 over its nonzero weights: every pixel but pixel 0.
	want[2*2], mag[2*2] = 0, 0
	for i := 1; i < 12; i++ {
		x := float64(math.Float32frombits(binary.NativeEndian.Uint32(ds.data[(2*12+i)*4:])))
		want[2*2] += float64(stack.Data[i]) * x
		mag[2*2] += math.Abs(float64(stack.Data[i]) * x)
	}
	for _, f64 := range []bool{false, true} {
		out := Output{}
		if f64 {
			out.F64 = slices.Clone(want)
			out.F64[2*2], out.F64[2*2+1] = math.NaN(), math.NaN() // as a dense kernel gives
		} else {
			out.F32 = make([]float32, len(want))
			for i, v := range want {
				out.F32[i] = float32(v)
			}
			out.F32[2*2], out.F32[2*2+1] = float32(math.NaN()), float32(math.NaN())
		}
		job := &Job{Dataset: ds, Masks: stack, NMasks: 2}
		w := &gpuWorker{job: job, exact: stack, frame: make([]byte, ds.FrameBytes()), row: make([]float64, 2)}
		require.NoError(t, w.exactNonFinite(planner.Partition{Start: 0, End: 5}, out))
		get := func(i int) float64 {
			if f64 {
				return out.F64[i]
			}
			return float64(out.F32[i])
		}
		for f := range 5 {
			require.InDelta(t, want[f*2], get(f*2), 1e-5*mag[f*2], "frame %d mask 0", f)
			if f == 2 {
				require.True(t, math.IsNaN(get(f*2+1)), "mask 1 weighs the NaN pixel")
			} else {
				require.InDelta(t, want[f*2+1], get(f*2+1), 1e-5*mag[f*2+1])
			}
		}
	}
}
