package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// cpuWorker computes the mask-dot product on its own thread, tile by tile, with
// reusable buffers: the native tile (filled by ReadFrames, or skipped when the dataset
// can view its frames in place), the kernel's float buffers and a float64 row
// accumulator.
type cpuWorker struct {
	ds         dataset.Dataset
	viewer     dataset.Viewer // nil when ds cannot view frames in place
	tileFrames int
	frameBytes int
	elemSize   int
	nMasks     int
	native     []byte    // tileFrames*frameBytes, allocated on the first read
	acc        []float64 // tileFrames*nMasks, rows of a float32 run before rounding
	kernel     kernel
	// newKernel builds kernel where it is nil (a gather worker's, at its first densified
	// tile).
	newKernel func() kernel
	// shifted, for a job with shifts, computes the rows instead of kernel.
	shifted shiftedKernel
	shifts  []float64
	// exact is the dense stack for exact recomputation (exactNonFinite) of float frames
	// holding NaN or Inf; nil for integer frames and CSR stacks, which never need it.
	exact *masks.Stack
	dt    dataset.DType
	// sparse and gather, for a sparse dataset without shifts, read the frames as events
	// into sf and compute the rows instead of kernel (gather.go), for tiles whose
	// events are at most denseAbove of their pixels; denser tiles are densified into
	// the native tile for kernel. sparseView views the events in place where the dataset
	// can (into view, else they are read into sf); events is the one holding the tile's.
	// gatherValues is the gather of events viewed in a narrower dtype than the dataset's
	// (dataset.SparseFrames.Values: a raw_csr file's 16-bit counts), made from job at the
	// first such tile. claim is the events of the claim being processed, viewed once
	// (claimFrom is its first frame, -1 when it could not be viewed), of which each
	// tile's view is a slice.
	sparse       dataset.SparseReader
	sparseView   dataset.SparseViewer
	gather       gatherKernel
	gatherValues gatherKernel
	job          *Job
	sf, view     dataset.SparseFrames
	claim        dataset.SparseFrames
	claimFrom    int
	events       *dataset.SparseFrames
	denseAbove   float64
}

// kernel computes the result rows of one tile.
type kernel interface {
	// apply writes the nMasks results of each of the frames in tile (native dtype, host
	// order, frame-major) into acc[f*nMasks : (f+1)*nMasks], overwriting it.
	apply(tile []byte, frames int, acc []float64)
}

// NewCPUWorker returns a CPU worker for job. When the job's dataset is sparse
// (dataset.SparseOf) and has no shifts, the worker reads its frames as events and runs
// the gather kernel (gather.go), whatever the form of the masks, on every tile whose
// events are few enough for it to be the faster (gatherBreakEven); it densifies the
// others and applies the kernel below. Else it applies job.Sparse when set: a gather of
// each mask's nonzero pixels straight from the native frames, summed in float64.
// Otherwise, for float32 results on a CPU with AVX2 and FMA (see useSIMD) and frames of
// uint8, int8, uint16, int16, int32 or float32, any number of masks go through the
// assembly block kernels (simdDense). Else a single mask goes through a fused
// convert-and-dot loop in float64, unless the masks of a job.Float64 run, on a CPU with
// AVX2 and FMA, go through the float64 broadcast kernels (simdDense64: every dtype,
// products and sums in float64, any number of masks); otherwise several masks go through
// gonum's BLAS Gemm in float32 (float64 with job.Float64), on chunks of pixels whose
// partial sums are added in float64. Every Gemm call stays within gonum's serial size
// (see gemmRows, gemmMasks), so a worker does all its work on its own pinned thread.
//
// The worker holds TileFrames*FrameBytes bytes of native tile (none for a dataset
// implementing dataset.Viewer whose frames are aligned for their dtype), at most
// 192×2048 floats of float tile (TileFrames×520 float64s for simdDense64) and
// TileFrames*NMasks float64s. Errors name the invalid job field (no dataset, sizes, CSR
// form).
func NewCPUWorker(job *Job) (Worker, error) {
	if err := validateJob(job); err != nil {
		return nil, fmt.Errorf("CPU worker: %w", err)
	}
	ds := job.Dataset
	w := &cpuWorker{
		ds:         ds,
		tileFrames: bufferFrames(job),
		frameBytes: ds.FrameBytes(),
		elemSize:   ds.DType().Size(),
		nMasks:     job.NMasks,
		acc:        make([]float64, bufferFrames(job)*job.NMasks),
	}
	w.viewer, _ = ds.(dataset.Viewer)
	w.dt = ds.DType()
	if job.Shifts != nil {
		if err := ValidateShifts(job.Shifts, ds.NumFrames()); err != nil {
			return nil, fmt.Errorf("CPU worker: %w", err)
		}
		w.shifts = job.Shifts
		w.shifted = shiftedKernelFor(job) // it recomputes NaN/Inf rows of float frames itself
		if w.shifted == nil {
			return nil, fmt.Errorf("CPU worker: %s has unsupported dtype %v", describe(ds), ds.DType())
		}
		return w, nil
	}
	if job.Sparse == nil && job.Masks.Data != nil && (w.dt == dataset.Float32 || w.dt == dataset.Float64) {
		w.exact = job.Masks
	}
	if sr := dataset.SparseOf(ds); sr != nil {
		w.sparse, w.gather, w.job = sr, gatherKernelFor(job, ds.DType()), job
		w.sparseView, _ = sr.(dataset.SparseViewer)
		if w.gather == nil {
			return nil, fmt.Errorf("CPU worker: %s has unsupported dtype %v", describe(ds), ds.DType())
		}
		w.denseAbove = gatherBreakEven(job, w.gather.rowKernels())
	}
	if w.gather != nil {
		// The dense kernel only serves tiles densified (w.denseAbove): built at the first,
		// not per run (16 masks' packed copy is 4 MiB, 2 ms).
		w.newKernel = func() kernel { return denseKernel(job) }
		return w, nil
	}
	if w.kernel = denseKernel(job); w.kernel == nil {
		return nil, fmt.Errorf("CPU worker: %s has unsupported dtype %v", describe(ds), ds.DType())
	}
	return w, nil
}

// bufferFrames is the most frames a worker of job holds at once: its tile, at most the
// dataset's frames (a 3-frame dataset with a 32-frame tile allocates 3 frames). Which
// kernels apply still follows job.TileFrames, so that a frame's sums are the same bits in
// a dataset of a few frames (a Dask task's range) as in the whole scan.
func bufferFrames(job *Job) int {
	return min(job.TileFrames, max(job.Dataset.NumFrames(), 1))
}

// denseKernel returns the dense kernel of the job's dataset dtype, nil for an
// unsupported one.
func denseKernel(job *Job) kernel {
	switch job.Dataset.DType() {
	case dataset.Uint8:
		return kernelFor[uint8](job)
	case dataset.Uint16:
		return kernelFor[uint16](job)
	case dataset.Uint32:
		return kernelFor[uint32](job)
	case dataset.Int8:
		return kernelFor[int8](job)
	case dataset.Int16:
		return kernelFor[int16](job)
	case dataset.Int32:
		return kernelFor[int32](job)
	case dataset.Float32:
		return kernelFor[float32](job)
	case dataset.Float64:
		return kernelFor[float64](job)
	}
	return nil
}

func validateJob(job *Job) error {
	if job == nil || job.Dataset == nil {
		return errors.New("job has no dataset")
	}
	if err := validateDataset(job.Dataset); err != nil {
		return err
	}
	if err := validateStack(job.Masks, job.Dataset.SigShape()); err != nil {
		return err
	}
	if job.NMasks != job.Masks.N {
		return fmt.Errorf("job NMasks %d differs from the stack's %d masks", job.NMasks, job.Masks.N)
	}
	if job.TileFrames < 1 {
		return fmt.Errorf("job TileFrames %d, need at least 1", job.TileFrames)
	}
	if job.Sparse == nil && job.Masks.Data == nil {
		return errors.New("the mask stack is held in CSR form only: set Job.Sparse")
	}
	if job.Sparse != nil {
		if err := job.Sparse.Validate(job.Masks.N, job.Masks.Pixels()); err != nil {
			return fmt.Errorf("sparse masks: %w", err)
		}
	}
	return nil
}

// Process implements Worker.
func (w *cpuWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(frames int)) error {
	n := w.ds.NumFrames()
	if p.Start < 0 || p.End > n || p.Start >= p.End {
		return fmt.Errorf("partition [%d, %d) is empty or outside the %d frames of %s", p.Start, p.End, n, describe(w.ds))
	}
	if (out.F32 == nil) == (out.F64 == nil) {
		return errors.New("output must have exactly one of F32 and F64")
	}
	if l := max(len(out.F32), len(out.F64)); l != n*w.nMasks {
		return fmt.Errorf("output has length %d, want n_frames*n_masks = %d", l, n*w.nMasks)
	}
	if err := w.viewClaim(p); err != nil {
		return err
	}
	for start := p.Start; start < p.End; {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+w.tileFrames, p.End)
		tile, err := w.read(start, end)
		if err != nil {
			return err
		}
		frames := end - start
		if out.F64 != nil {
			rows := out.F64[start*w.nMasks : end*w.nMasks]
			if err := w.apply(tile, start, frames, rows); err != nil {
				return err
			}
		} else {
			acc := w.acc[:frames*w.nMasks]
			if err := w.apply(tile, start, frames, acc); err != nil {
				return err
			}
			dst := out.F32[start*w.nMasks : end*w.nMasks]
			for i, v := range acc {
				dst[i] = float32(v)
			}
		}
		if progress != nil {
			progress(frames)
		}
		start = end
	}
	w.release(p)
	return nil
}

// viewClaim views the events of claim p in place (w.claim), for the gather kernel of a
// dataset that is a dataset.SparseViewer, once for all its tiles: one check of the
// files' sizes and one read of their indptr entries a claim, not a tile. w.claimFrom is
// -1 when the frames cannot be viewed (read them into w.sf then).
func (w *cpuWorker) viewClaim(p planner.Partition) error {
	w.claimFrom = -1
	if w.gather == nil || w.sparseView == nil {
		return nil
	}
	viewed, err := w.sparseView.ViewSparse(p.Start, p.End, &w.claim)
	if viewed {
		w.claimFrom = p.Start
	}
	return err
}

// read returns frames [start, end): their native bytes (frames), or, for the gather
// kernel, nil after slicing their events from the claim's view (w.view, viewClaim) or
// reading them into w.sf, w.events pointing to the one used; a sparse tile whose events
// exceed w.denseAbove of its pixels is densified into the native tile and returned.
func (w *cpuWorker) read(start, end int) ([]byte, error) {
	if w.gather == nil {
		return w.frames(start, end)
	}
	if w.claimFrom >= 0 {
		w.claim.Slice(start-w.claimFrom, end-w.claimFrom, &w.view)
		w.events = &w.view
	} else {
		w.sf.Reset()
		if err := w.sparse.ReadSparse(start, end, &w.sf); err != nil {
			return nil, err
		}
		w.events = &w.sf
	}
	pixels := w.frameBytes / w.elemSize
	if float64(w.events.NNZ()) <= w.denseAbove*float64((end-start)*pixels) {
		return nil, nil
	}
	if w.native == nil {
		w.native = make([]byte, w.tileFrames*w.frameBytes)
	}
	b := w.native[:(end-start)*w.frameBytes]
	if err := w.events.Densify(b, w.ds.SigShape(), w.dt); err != nil {
		return nil, fmt.Errorf("%s, frames [%d, %d): %w", describe(w.ds), start, end, err)
	}
	return b, nil
}

// apply computes the rows of the tile's frames [start, start+frames); the gather
// kernel's error (an event outside the frame, in a file whose events are viewed in
// place) names the dataset and the frames.
func (w *cpuWorker) apply(tile []byte, start, frames int, rows []float64) error {
	if w.gather != nil && tile == nil {
		g := w.gather
		if v := w.events.Values; v != dataset.Invalid && v != w.dt {
			if w.gatherValues == nil {
				w.gatherValues = gatherKernelFor(w.job, v)
			}
			g = w.gatherValues
		}
		if err := g.apply(w.events, rows); err != nil {
			return fmt.Errorf("%s, frames [%d, %d): %w", describe(w.ds), start, start+frames, err)
		}
		return nil
	}
	if w.shifted != nil {
		w.shifted.apply(tile, start, frames, w.shifts, rows)
		return nil
	}
	if w.kernel == nil {
		w.kernel = w.newKernel()
	}
	w.kernel.apply(tile, frames, rows)
	w.exactNonFinite(tile, rows)
	return nil
}

// release drops the pages of frames p that the worker read in place from a memory
// mapping (dataset.FrameMap.Release; the events of sparse frames viewed in mapped
// files, dataset.SparseReleaser), so that the process's resident memory stays bounded
// by the frames in flight, not the file (a Dask nanny or a cgroup counts it).
func (w *cpuWorker) release(p planner.Partition) {
	if r, ok := w.sparse.(dataset.SparseReleaser); ok && w.claimFrom >= 0 {
		_ = r.ReleaseSparse(p.Start, p.End) // advice only: a refusal changes nothing
		return
	}
	m, ok := w.ds.(dataset.Mapper)
	if w.viewer == nil || !ok {
		return
	}
	if fm, ok, err := m.MapFrames(p.Start, p.End); err == nil && ok {
		_ = fm.Release(p.Frames(), w.frameBytes) // advice only: a refusal changes nothing
	}
}

// exactNonFinite recomputes the rows of a float tile's frames whose results came out NaN
// or infinite, over the nonzero weights only (see exactRow). Finite rows, the rule, cost
// one scan.
func (w *cpuWorker) exactNonFinite(tile []byte, rows []float64) {
	if w.exact == nil {
		return
	}
	for f := range len(rows) / w.nMasks {
		if row := rows[f*w.nMasks : (f+1)*w.nMasks]; !finite(row) {
			exactRow(w.exact, w.dt, tile[f*w.frameBytes:(f+1)*w.frameBytes], row)
		}
	}
}

// exactRow computes the row of a float32 or float64 frame in float64 over each mask's
// nonzero weights only (s.Data, plus s.Lo where set). A dense kernel multiplies every pixel by every weight, and 0·NaN
// and 0·Inf are NaN, so a NaN or Inf pixel (a detector gap, a dead pixel) would spoil
// every mask of the stack, also those that give it no weight. Recomputed this way, a
// mask's value depends only on the pixels it weighs, whatever the other masks and the
// kernel: NaN where a NaN (or opposite infinities) lies under its nonzero weights.
func exactRow(s *masks.Stack, dt dataset.DType, frame []byte, row []float64) {
	p := s.Pixels()
	for m := range row {
		var sum float64
		for i, wt := range s.Data[m*p : (m+1)*p] {
			if wt != 0 {
				w := float64(wt)
				if s.Lo != nil {
					w += float64(s.Lo[m*p+i])
				}
				sum += w * pixelFloat(frame, i, dt)
			}
		}
		row[m] = sum
	}
}

// finite tells whether every value is finite.
func finite(v []float64) bool {
	for _, x := range v {
		if nonFinite(x) {
			return false
		}
	}
	return true
}

// nonFinite reports whether x is NaN or ±Inf.
func nonFinite(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

// pixelFloat is pixel i of a float32 or float64 frame (host byte order).
func pixelFloat(frame []byte, i int, dt dataset.DType) float64 {
	if dt == dataset.Float32 {
		return float64(math.Float32frombits(binary.NativeEndian.Uint32(frame[4*i:])))
	}
	return math.Float64frombits(binary.NativeEndian.Uint64(frame[8*i:]))
}

// frames returns frames [start, end) in native bytes: a view of the dataset's memory
// when it has one aligned for the dtype, else the tile buffer filled by ReadFrames.
func (w *cpuWorker) frames(start, end int) ([]byte, error) {
	size := (end - start) * w.frameBytes
	if w.viewer != nil {
		b, err := w.viewer.ViewFrames(start, end)
		switch {
		case err != nil:
			return nil, err
		case b == nil: // frames not consecutive in memory (an ROI): read below
		case len(b) < size:
			return nil, fmt.Errorf("%s: view of frames [%d, %d) has %d bytes, want %d", describe(w.ds), start, end, len(b), size)
		case uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(w.elemSize) == 0:
			return b[:size], nil
		}
	}
	if w.native == nil {
		w.native = make([]byte, w.tileFrames*w.frameBytes)
	}
	b := w.native[:size]
	if err := w.ds.ReadFrames(start, end, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Close implements Worker; a CPU worker holds only memory.
func (w *cpuWorker) Close() error { return nil }

// shiftedKernelFor picks the shifted kernel (newShiftedKernel) for the job's native
// dtype; nil for an unsupported one.
func shiftedKernelFor(job *Job) shiftedKernel {
	switch job.Dataset.DType() {
	case dataset.Uint8:
		return newShiftedKernel[uint8](job)
	case dataset.Uint16:
		return newShiftedKernel[uint16](job)
	case dataset.Uint32:
		return newShiftedKernel[uint32](job)
	case dataset.Int8:
		return newShiftedKernel[int8](job)
	case dataset.Int16:
		return newShiftedKernel[int16](job)
	case dataset.Int32:
		return newShiftedKernel[int32](job)
	case dataset.Float32:
		return newShiftedKernel[float32](job)
	case dataset.Float64:
		return newShiftedKernel[float64](job)
	}
	return nil
}

// kernelFor picks the kernel for native dtype N.
func kernelFor[N native](job *Job) kernel {
	p := job.Masks.Pixels()
	switch {
	case job.Sparse != nil:
		var k *groupKernels[N]
		if !job.Float64 {
			k = simdKernels[N]()
		}
		return newSparse(job.Sparse, k)
	case !job.Float64 && simdKernels[N]() != nil:
		// Measured faster than the fused loop and Gemm for 1 to 64 masks (bench_test.go).
		d := newSIMDDense(job.Masks.Data, job.NMasks, p, simdKernels[N](), job.packedMasks)
		if job.TileFrames > 1 {
			d.odd = make([]float64, simdGroup)
		}
		return d
	case job.Float64 && bcast64KernelsFor(job.NMasks) != nil:
		k := bcast64KernelsFor(job.NMasks)
		return newSIMDDense64[N](k, job.packedMasks64(k), job.NMasks, p, bufferFrames(job))
	case job.NMasks == 1:
		return &fused[N]{pixels: p, mask: job.denseMasks64()}
	case job.Float64:
		return newDense[N](job.denseMasks64(), job.NMasks, p, bufferFrames(job), gemm64)
	default:
		return newDense[N](job.Masks.Data, job.NMasks, p, bufferFrames(job), gemm32)
	}
}
