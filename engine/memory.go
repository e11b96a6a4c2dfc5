package engine

import (
	"fmt"
	"slices"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// MemoryEstimate is the memory a run allocates, in bytes, beyond what its inputs (the
// opened dataset, the mask stack) already hold. A memory-mapped file is not counted: its
// pages belong to the page cache.
type MemoryEstimate struct {
	// Result is n_frames × n_masks × 4 bytes (8 for a float64 run); 0 when the caller
	// gives the result buffer. With Options.Shifts, plus the per-frame shifts the run
	// holds (16 bytes per frame).
	Result int64
	// Masks is the mask stack in the form the workers apply it beyond the stack itself:
	// a CSR copy of a dense stack applied sparse, the float64 copy of a dense stack
	// for a float64 run (on CPUs with the float64 SIMD kernels, packed for them: n_masks
	// rounded up to their lanes, 8 for more than 4 masks with AVX-512, else 4, × pixels ×
	// 8 bytes), or the CPU workers' packed copy of a dense stack of at least 8 masks (at
	// most (n_masks rounded up to 16) × (pixels rounded up to 16) × 4 bytes);
	// and, for GPU workers of a float64 run whose weights have Lo parts, the stack of
	// weights and Lo parts they apply (masks.Stack.LoPairs); for a sparse dataset
	// (dataset.SparseOf) without shifts, the CPU workers' pixel-major masks of the
	// gather kernel (n_pixels × n_masks × 4 bytes, 8 for a float64 run whose weights
	// have Lo parts; gather.go).
	Masks int64
	// PerWorker is one worker's buffers: its tile of native frames (none when the
	// dataset's frames are read in place) and the dataset's read buffer for it, its
	// float64 rows, the dense kernels' float buffers (for the float64 SIMD kernels, the
	// tile's frames converted to float64 over 512 pixels: tile × 520 × 8 bytes, none for
	// float64 frames), and the kernel's copy of a sparse stack's weights in float64; with
	// Options.Shifts, the tile of shifted frames (float, and native for fewer than 8
	// masks) of a dense stack, the pixel coordinates of a sparse stack's nonzeros.
	PerWorker int64
	// Workers is the number of workers of the plan.
	Workers int
}

// Total is the estimate's sum.
func (e MemoryEstimate) Total() int64 { return e.Result + e.Masks + int64(e.Workers)*e.PerWorker }

// String lists the parts: "result 512 KiB, masks 0 B, 2 workers × 1.1 MiB".
func (e MemoryEstimate) String() string {
	return fmt.Sprintf("result %s, mask copies %s, %d workers × %s", memlimit.Size(e.Result), memlimit.Size(e.Masks), e.Workers, memlimit.Size(e.PerWorker))
}

// EstimateMemory returns the memory ApplyMasks(ds, stack, plan, opt) allocates (see
// MemoryEstimate), with tiles of opt.TileFrames frames (the job's tile, jobTileFrames,
// when 0), buffers of at most the dataset's frames (bufferFrames).
func EstimateMemory(ds dataset.Dataset, stack *masks.Stack, plan *planner.Plan, opt Options) MemoryEstimate {
	return estimateMemory(ds, stack, stack.Count(), plan, opt)
}

// estimateMemory is EstimateMemory for a stack of counts c.
func estimateMemory(ds dataset.Dataset, stack *masks.Stack, c masks.Counts, plan *planner.Plan, opt Options) MemoryEstimate {
	frames, nMasks := int64(ds.NumFrames()), int64(stack.N)
	var e MemoryEstimate
	if opt.Out32 == nil && opt.Out64 == nil {
		e.Result = frames * nMasks * 4
		if opt.Float64 {
			e.Result *= 2
		}
	}
	sparse := c.PreferSparse
	tile := int64(opt.TileFrames)
	if tile <= 0 {
		tile = int64(jobTileFrames(ds.FrameBytes(), stack.N, sparse))
	}
	tile = min(tile, frames)
	// simd64: the float64 broadcast kernels apply the dense stack (kernelFor), packed.
	k64 := bcast64KernelsFor(stack.N)
	simd64 := opt.Float64 && opt.Shifts == nil && k64 != nil
	switch {
	case sparse && stack.Data != nil:
		e.Masks = 8*int64(c.NNZ) + 4*(nMasks+1)
	case !sparse && simd64:
		e.Masks = bcast64Bytes(k64, stack.N, stack.Pixels())
	case !sparse && opt.Float64:
		e.Masks = 8 * int64(stack.N) * int64(stack.Pixels())
	case !sparse && stack.N >= packedMinMasks:
		e.Masks = 4 * int64((stack.N+15)&^15) * int64((stack.Pixels()+15)&^15)
	}
	if opt.Float64 && !stack.Exact() && plan != nil && slices.ContainsFunc(plan.Workers, func(w planner.Worker) bool { return w.Kind == planner.GPU }) {
		// GPU workers of a float64 run apply the weights and their Lo parts as 2N
		// float32 masks (Job.loPairs).
		if sparse {
			e.Masks += 16*int64(c.NNZ) + 4*(2*nMasks+1)
		} else {
			e.Masks += 8 * nMasks * int64(stack.Pixels())
		}
	}
	if opt.Shifts == nil && dataset.SparseOf(ds) != nil {
		e.Masks += gatherBytes(stack, c, opt.Float64)
	}
	if !dataset.ViewsInPlace(ds) {
		e.PerWorker += 2 * tile * int64(ds.FrameBytes())
	}
	e.PerWorker += 8 * tile * nMasks
	switch {
	case sparse && !opt.Float64:
		// Val64, and at most the dense spans of masks dense enough in them (sparse.spans).
		e.PerWorker += 8*int64(c.NNZ) + int64(4*float64(c.NNZ)/spanDensity)
	case sparse:
		e.PerWorker += 8 * int64(c.NNZ)
	case simd64:
		// The tile's blocks converted to float64 (not for float64 frames) and the kernels'
		// results.
		if ds.DType() != dataset.Float64 {
			e.PerWorker += 8 * tile * convStride
		}
		e.PerWorker += 8 * int64(k64.accMax*k64.lanes)
	default:
		e.PerWorker += 4 * 192 * 2048 * int64(1+btoi(opt.Float64)) // the dense kernels' float tile
		if !opt.Float64 && opt.Shifts == nil && padsStack(ds.DType(), stack.N) {
			e.Masks += 4 * (nMasks + 1) * int64(stack.Pixels()) // the padded copy (newSIMDDense), shared
		}
	}
	if opt.Shifts != nil {
		e.Result += 16 * frames
		e.PerWorker += shiftedBuffers(ds, stack, c.NNZ, tile, sparse, opt.Float64)
	}
	if plan != nil {
		e.Workers = len(plan.Workers)
	}
	return e
}

// shiftedBuffers is a shifted kernel's buffers (shift.go) for tiles of tile frames, for
// a stack of nnz nonzero weights.
func shiftedBuffers(ds dataset.Dataset, stack *masks.Stack, nnz int, tile int64, sparse, f64 bool) int64 {
	if sparse {
		b := 8 * int64(nnz)
		if dense := 4 * int64(stack.N) * int64(stack.Pixels()); !f64 && stack.N < packedMinMasks && dense <= sparseDotBytes {
			b += dense // at most: the dense copy of a stack dense enough in its box (sparseDot)
		}
		return b
	}
	size, bytes := int64(4), int64(shiftTileBytes)
	if f64 {
		size = 8
	}
	if stack.N >= packedMinMasks {
		bytes = shiftManyTileBytes
	}
	frame := int64(stack.Pixels())
	chunk := max(1, min(tile, bytes/(frame*size)))
	b := chunk*frame*size + 3*int64(stack.SigX)*size
	if stack.N < packedMinMasks {
		b += chunk * int64(ds.FrameBytes())
	}
	return b
}

// checkMemory refuses a run whose estimate, and its workers' threads, do not fit in the
// memory the process may still allocate (internal/memlimit), naming the sizes and what
// helps.
func checkMemory(ds dataset.Dataset, stack *masks.Stack, c masks.Counts, plan *planner.Plan, opt Options) error {
	e := estimateMemory(ds, stack, c, plan, opt)
	advice := "fewer workers (option cpus, option gpus) hold fewer tiles"
	if e.Result > e.Total()/2 {
		advice = fmt.Sprintf("the result is %d frames × %d masks × %d bytes: use fewer masks or split the scan", ds.NumFrames(), stack.N, 4+4*btoi(opt.Float64))
	}
	return memlimit.CheckRun(fmt.Sprintf("the run (%s)", e), e.Total(), max(e.Result, e.Masks, e.PerWorker), e.Workers, advice)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// padsStack tells whether the dense SIMD kernel of a float32 run (newSIMDDense) copies a
// stack of nMasks masks on frames of dtype dt with a zero mask added (padded), where the
// CPU has the SIMD kernels.
func padsStack(dt dataset.DType, nMasks int) bool {
	return padded(nMasks, dt.Size()) && simdKernels[uint8]() != nil
}
