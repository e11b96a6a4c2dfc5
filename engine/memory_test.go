package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// Item #17.10: a float64 run's GPU workers apply a stack with Lo parts as 2N float32
// masks (Job.loPairs): the estimate counts that copy beside the CPU workers' float64 one.
func TestEstimateCountsLoPairs(t *testing.T) {
	ds, err := dataset.FromMemory(make([]byte, 4*16*16*2), []int{2, 2}, [2]int{16, 16}, dataset.Uint16)
	require.NoError(t, err)
	data := make([]float64, 2*256)
	for i := range data {
		data[i] = 1.0 / 3
	}
	dense, err := masks.New64(2, 16, 16, data, nil)
	require.NoError(t, err)
	require.False(t, dense.Exact())
	cpu := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}}}
	hybrid := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}, {Kind: planner.GPU}}}
	f64 := Options{Float64: true}
	copy64 := int64(8 * 2 * 256) // the float64 copy: dense, or packed for the SIMD kernels
	if k := bcast64KernelsFor(2); k != nil {
		copy64 = int64(8 * k.lanes * 256)
	}
	require.Equal(t, copy64, EstimateMemory(ds, dense, cpu, f64).Masks, "the float64 copy")
	require.Equal(t, copy64+8*2*256, EstimateMemory(ds, dense, hybrid, f64).Masks, "and the Lo pairs")
	require.Equal(t, int64(0), EstimateMemory(ds, dense, hybrid, Options{}).Masks, "a float32 run applies Data only")

	sparse := make([]float64, 2*256)
	sparse[3], sparse[256+7] = 1.0/3, 2.0/3
	s, err := masks.New64(2, 16, 16, sparse, nil)
	require.NoError(t, err)
	// The CSR copy of the dense stack (2 nonzeros, 3 row pointers), then the pairs: 4
	// nonzeros, 5 row pointers.
	require.Equal(t, int64(8*2+4*3), EstimateMemory(ds, s, cpu, f64).Masks)
	require.Equal(t, int64(8*2+4*3+8*4+4*5), EstimateMemory(ds, s, hybrid, f64).Masks)
}

// The estimate of a float64 run on the float64 SIMD kernels counts the buffers the worker
// and its kernel hold: the packed stack (shared), the converted blocks, the kernel's
// results and the rows.
func TestEstimateCountsFloat64Kernel(t *testing.T) {
	if bcast64KernelsFor(11) == nil {
		t.Skip("no float64 SIMD kernels on this CPU")
	}
	const frames = 6
	sig := [2]int{20, 30}
	for _, nMasks := range []int{1, 11} {
		ds, err := dataset.FromMemory(make([]byte, frames*600*2), []int{frames}, sig, dataset.Uint16)
		require.NoError(t, err)
		stack, _ := stackWithLo(rand.New(rand.NewPCG(64, 5)), nMasks, sig)
		cpu := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}}}
		e := EstimateMemory(ds, stack, cpu, Options{Float64: true, TileFrames: frames})
		job := &Job{Dataset: ds, Masks: stack, NMasks: nMasks, Float64: true, TileFrames: frames}
		w, err := NewCPUWorker(job)
		require.NoError(t, err)
		cw := w.(*cpuWorker)
		d, ok := cw.kernel.(*simdDense64[uint16])
		require.True(t, ok, "%d masks: kernel %T", nMasks, cw.kernel)
		require.Equal(t, int64(8*len(d.packed)), e.Masks, "%d masks", nMasks)
		native := int64(0)
		if !dataset.ViewsInPlace(ds) {
			native = 2 * int64(frames*ds.FrameBytes())
		}
		require.Equal(t, native+int64(8*(len(cw.acc)+len(d.conv)+len(d.out))), e.PerWorker, "%d masks", nMasks)
	}
}

// The estimate counts the tile buffers of the tile a job takes when Options.TileFrames is
// 0 (jobTileFrames: 32 frames for 4 dense masks of 256×256, 64 for 64 masks), not
// AutoTileFrames' 1 MiB: the same estimate as with that tile set.
func TestEstimateUsesJobTile(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	sig := [2]int{256, 256}
	cpu := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}, {Kind: planner.CPU}}}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		ds := randomDataset(rng, dt, []int{128}, sig)
		require.False(t, dataset.ViewsInPlace(ds), "the tiles are read into buffers")
		for _, nMasks := range []int{1, 4, 64} {
			stack := randomStack(rng, nMasks, sig)
			tile := jobTileFrames(ds.FrameBytes(), nMasks, stack.Count().PreferSparse)
			if nMasks == 4 {
				require.Equal(t, 32, tile, "%v, 4 masks", dt)
			}
			auto, set := EstimateMemory(ds, stack, cpu, Options{}), EstimateMemory(ds, stack, cpu, Options{TileFrames: tile})
			require.Equal(t, set, auto, "%v, %d masks: tile %d", dt, nMasks, tile)
			require.GreaterOrEqual(t, auto.PerWorker, int64(2*tile*ds.FrameBytes()), "%v, %d masks", dt, nMasks)
		}
	}
}

// The estimate counts the padded copy of a 3- or 7-mask stack (newSIMDDense: a zero mask
// added for the pair kernel) only where a worker makes it: float32 runs without shifts on
// 8- and 16-bit frames. On float32 frames of 4096×4096 with 7 masks, counting it anyway
// added 512 MiB per worker that no worker holds. The worker's buffers of a read tile are
// the estimate's PerWorker exactly; the padded copy, one per job that its workers share,
// is in the estimate's Masks.
func TestEstimateCountsPaddedCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 5))
	const frames = 5
	sig := [2]int{24, 40}
	cpu := &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}}}
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Int16, dataset.Int32, dataset.Float32, dataset.Uint32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{frames}, sig)
		for _, nMasks := range []int{2, 3, 5, 7} {
			stack := randomStack(rng, nMasks, sig)
			e := EstimateMemory(ds, stack, cpu, Options{TileFrames: frames})
			job := &Job{Dataset: ds, Masks: stack, NMasks: nMasks, TileFrames: frames}
			w, err := NewCPUWorker(job)
			require.NoError(t, err)
			cw := w.(*cpuWorker)
			padded := int64(4 * len(paddedMasks(cw.kernel)))
			require.Equal(t, padded > 0, padsStack(dt, nMasks), "%v, %d masks", dt, nMasks)
			want := 2*int64(frames*ds.FrameBytes()) + int64(8*len(cw.acc)) + 4*192*2048
			require.Equal(t, want, e.PerWorker, "%v, %d masks: kernel %T", dt, nMasks, cw.kernel)
			require.Equal(t, padded, e.Masks, "%v, %d masks: the padded copy, once per job", dt, nMasks)
			if padded > 0 {
				// A second worker of the job shares the first one's copy.
				w2, err := NewCPUWorker(job)
				require.NoError(t, err)
				m1, m2 := paddedMasks(cw.kernel), paddedMasks(w2.(*cpuWorker).kernel)
				require.Same(t, &m1[0], &m2[0], "%v, %d masks: one padded copy per job", dt, nMasks)
			}
		}
	}
}

// paddedMasks returns the padded copy of the stack that a dense SIMD kernel of uint8 or
// int16 frames applies (nil if it applies the stack itself).
func paddedMasks(k any) []float32 {
	switch k := k.(type) {
	case *simdDense[uint8]:
		if k.outMasks != 0 {
			return k.masks
		}
	case *simdDense[int16]:
		if k.outMasks != 0 {
			return k.masks
		}
	}
	return nil
}

// A worker's buffers hold at most the dataset's frames, what the estimate counts: 3
// frames of 256×256 float32 with 4 dense masks (a few-mask tile of 32 frames) or with
// Options.TileFrames 100 take buffers of 3 frames, not 32 or 100 (8 MiB, 25 MiB) where
// the estimate counted 3 (768 KiB). The job's tile stays as asked: which kernels apply
// follows it.
func TestWorkerBuffersAtMostFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 6))
	sig := [2]int{256, 256}
	for _, n := range []int{1, 3} {
		ds := randomDataset(rng, dataset.Float32, []int{n}, sig)
		stack := randomStack(rng, 4, sig)
		for _, tile := range []int{0, 2, 100} {
			var jobTile int
			var worker *cpuWorker
			newWorker := func(spec planner.Worker, job *Job) (Worker, error) {
				w, err := DefaultWorkers(spec, job)
				jobTile, worker = job.TileFrames, w.(*cpuWorker)
				return w, err
			}
			res, err := ApplyMasks(t.Context(), ds, stack, splitPlan(anyCPUs, 1, n), Options{TileFrames: tile, NoPin: true, NewWorker: newWorker})
			require.NoError(t, err)
			want, mag := reference(ds, stack)
			requireClose(t, res.F32, want, mag, 2e-6)
			wantTile := max(tile, 1)
			if tile == 0 {
				wantTile = jobTileFrames(ds.FrameBytes(), 4, false)
			}
			require.Equal(t, wantTile, jobTile, "%d frames, TileFrames %d", n, tile)
			require.Equal(t, min(n, wantTile), worker.tileFrames, "%d frames, TileFrames %d", n, tile)
			require.Len(t, worker.acc, min(n, wantTile)*4, "%d frames, TileFrames %d", n, tile)
			e := EstimateMemory(ds, stack, &planner.Plan{Workers: []planner.Worker{{Kind: planner.CPU}}}, Options{TileFrames: tile})
			require.GreaterOrEqual(t, e.PerWorker, int64(2*min(n, wantTile)*ds.FrameBytes()+8*len(worker.acc)), "%d frames, TileFrames %d", n, tile)
		}
	}
}

// A frame's sums are the same bits whether it is run alone (a dataset of 1 or 2 frames:
// a Dask task's range) or inside the whole scan, with the default tiles: stacks taking
// the pair kernels (uint16 3, 4 and 7 masks), the quad kernels (1 and 2 masks; float32 on
// AVX-512 up to 7) and the packed ones (8 masks).
func TestFewFramesSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 7))
	sig := [2]int{40, 50}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		ds := randomDataset(rng, dt, []int{9}, sig)
		fb := ds.FrameBytes()
		for _, nMasks := range []int{1, 2, 3, 4, 7, 8} {
			stack := randomStack(rng, nMasks, sig)
			whole, err := ApplyMasks(t.Context(), ds, stack, splitPlan(anyCPUs, 1, 9), Options{NoPin: true})
			require.NoError(t, err)
			for _, r := range [][2]int{{4, 5}, {8, 9}, {2, 4}} {
				part := &memDataset{nav: []int{r[1] - r[0]}, sig: sig, dt: dt, data: ds.data[r[0]*fb : r[1]*fb]}
				res, err := ApplyMasks(t.Context(), part, stack, splitPlan(anyCPUs, 1, r[1]-r[0]), Options{NoPin: true})
				require.NoError(t, err)
				for j, v := range res.F32 {
					g := whole.F32[r[0]*nMasks+j]
					require.Equal(t, math.Float32bits(g), math.Float32bits(v), "%v, %d masks, frames %v, result %d: %v alone, %v in the scan", dt, nMasks, r, j, v, g)
				}
			}
		}
	}
}
