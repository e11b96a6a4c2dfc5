package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// The gather kernel: the mask-dot product of sparse frames.
//
// A frame stored sparse (dataset.SparseReader: the pixels hit and their values) meets
// the masks only at its events: out[f, m] = Σ_k value_k·mask[m, pixel_k] over frame f's
// events k. The CPU workers of a run over a sparse dataset without shifts read the
// frames as events (ReadSparse) and, per event, add value × the weights of every mask
// at its pixel. The masks are laid out pixel-major for it (gatherMasks), built once per
// run and shared by the job's workers: n_pixels × n_masks weights, so that an event
// reads its n_masks weights from one contiguous row; a sparse stack (one applied in CSR
// form, masks.Stack.PreferSparse) whose pixel-major CSR (per pixel, the masks that weigh
// it and their weights) takes less than half the table's memory, or whose table would
// exceed gatherTableBytes, is laid out that way instead: an event then reads the
// weights of the masks that weigh its pixel only, from a smaller array that stays in
// cache (16 rings of 256×256: 0.3 MiB instead of a 4 MiB table). The products are
// summed in float64 per frame, in event order (duplicate events at one pixel add up, as
// in the densified frame); weights are float32, or float64 with their Lo parts in a
// float64 run whose weights are not exact in float32. The cost is proportional to the
// events, not to the frame's pixels (bench/RESULTS.md, "Sparse frames"). A dataset that
// is a dataset.SparseViewer (FromSparse's arrays, raw_csr's mapped files) is gathered in
// place, its events not copied; the kernel then checks each event's pixel (an event
// outside the frame is an errs.Format error). With float32 weights in a table, on a CPU
// with AVX2 and FMA, the events go through assembly kernels (gather_amd64.s, written by
// gen_gather.go): for one mask, 4 events' weights loaded one by one into a vector and
// their values converted together (VPGATHERDD measured no faster on this project's Zen
// 4 machine); for 2 masks or more, row kernels: per event, its row of 2, 4, 8 or 16
// weights loaded as one vector, widened to float64 and multiplied by the event's value
// into vector sums, the row of the event 16 further on prefetched (the table of 16
// masks of 256×256, 4 MiB, does not stay in a 1 MiB L2 cache). The pure-Go kernels run
// elsewhere and under GODEBUG=cpu.avx2=off. Cutting the table into blocks of pixels
// that stay in the L2 cache, each tile's events gathered block by block, measured
// slower than the prefetching kernels at 1% and 5% hits (bench/RESULTS.md).
//
// GPU workers and shifted masks read the same frames densified (ReadFrames).

// gatherTableBytes caps the pixel-major table of a sparse stack (a variable for tests).
var gatherTableBytes int64 = 64 << 20

// gatherMasks is the mask stack laid out for the gather kernel: a table of nMasks
// weights per pixel (w), or pixel-major CSR (ptr, mask, val) (useGatherCSR).
type gatherMasks[T float] struct {
	nMasks, pixels int
	w              []T
	ptr            []int32
	mask           []int32
	val            []T
}

// gatherBytes is the memory of the gather layout of stack, of counts c, in a float64
// run (f64) or not.
func gatherBytes(stack *masks.Stack, c masks.Counts, f64 bool) int64 {
	size := int64(4)
	if f64 && !stack.Exact() {
		size = 8
	}
	if useGatherCSR(stack, c) {
		return int64(c.NNZ)*(4+size) + 4*int64(stack.Pixels()+1)
	}
	return int64(stack.Pixels()) * int64(stack.N) * size
}

// useGatherCSR tells whether the stack, of counts c, is laid out as pixel-major CSR for
// the gather.
func useGatherCSR(stack *masks.Stack, c masks.Counts) bool {
	if !c.PreferSparse {
		return false
	}
	table := int64(stack.Pixels()) * int64(stack.N) * 4
	return 2*(8*int64(c.NNZ)+4*int64(stack.Pixels()+1)) < table || table > gatherTableBytes
}

// newGatherMasks lays out the masks of job (dense: job.Masks.Data and Lo; CSR:
// job.Sparse) pixel-major; lo adds the Lo parts of the weights.
func newGatherMasks[T float](job *Job, lo bool) *gatherMasks[T] {
	n, pixels := job.NMasks, job.Masks.Pixels()
	g := &gatherMasks[T]{nMasks: n, pixels: pixels}
	// each calls add(m, p, hi, lo) for every weight of mask m at pixel p of the CSR
	// stack, mask by mask, pixel by pixel within a mask.
	each := func(add func(m, p int, hi, lo float32)) {
		c := job.Sparse
		for m := range n {
			for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
				var l float32
				if c.Lo != nil {
					l = c.Lo[k]
				}
				add(m, int(c.Col[k]), c.Val[k], l)
			}
		}
	}
	weight := func(hi, l float32) T {
		if lo {
			return T(float64(hi) + float64(l))
		}
		return T(hi)
	}
	if s := job.Masks; job.Sparse == nil {
		// a dense stack transposed row by row of the table (4 masks of 256×256: 1.6 ms
		// against 2.3 through each)
		g.w = make([]T, pixels*n)
		for p := range pixels {
			row := g.w[p*n : (p+1)*n : (p+1)*n]
			for m := range row {
				if hi := s.Data[m*pixels+p]; lo && s.Lo != nil {
					row[m] = T(float64(hi) + float64(s.Lo[m*pixels+p]))
				} else {
					row[m] = T(hi)
				}
			}
		}
		return g
	}
	if !useGatherCSR(job.Masks, job.maskCounts()) {
		g.w = make([]T, pixels*n)
		each(func(m, p int, hi, l float32) { g.w[p*n+m] = weight(hi, l) })
		return g
	}
	g.ptr = make([]int32, pixels+1)
	each(func(_, p int, _, _ float32) { g.ptr[p+1]++ })
	for p := range pixels {
		g.ptr[p+1] += g.ptr[p]
	}
	next := append([]int32(nil), g.ptr[:pixels]...)
	g.mask = make([]int32, g.ptr[pixels])
	g.val = make([]T, g.ptr[pixels])
	each(func(m, p int, hi, l float32) {
		g.mask[next[p]], g.val[next[p]] = int32(m), weight(hi, l)
		next[p]++
	})
	return g
}

// gatherScale scales gatherBreakEven (a variable for tests, which force the gather with
// +Inf).
var gatherScale = 1.0

// gatherBreakEven is the fraction of a tile's pixels with an event above which a CPU
// worker densifies the tile and applies the dense kernels instead of the gather: where
// the gather's cost per event exceeds that of densifying and the dense kernels per
// pixel. Measured on 256×256 uint16 frames (BenchmarkGatherTargets and at 2-20% of the
// pixels hit): through the pure-Go kernels, an event costs about 2.4 ns with one mask
// and 2 ns per mask with more through the table, 7 ns through pixel-major CSR (16
// rings); densifying and the dense kernels 0.7-0.8 ns per pixel: break-even at about
// 33% of the pixels for one mask, 2% for 16 dense masks, 11% for 16 rings. Hence
// 30%/n_masks for the table, 10% for pixel-major CSR. Through the assembly row kernels
// (rows, 2 masks and more) break-even came at about 10% for 4 masks and 5-10% for 16:
// 15%/∛n_masks.
func gatherBreakEven(job *Job, rows bool) float64 {
	switch {
	case job.Sparse != nil && useGatherCSR(job.Masks, job.maskCounts()):
		return 0.1 * gatherScale
	case rows && job.NMasks > 1:
		return 0.15 / math.Cbrt(float64(job.NMasks)) * gatherScale
	}
	return 0.3 / float64(job.NMasks) * gatherScale
}

// gatherKernel computes the result rows of sparse frames.
type gatherKernel interface {
	// apply writes the nMasks results of each frame of sf into acc[f*nMasks :
	// (f+1)*nMasks], overwriting it. An event outside the frame (sf viewed in place in
	// a file, whose indices a dataset.SparseViewer does not check) is an errs.Format
	// error naming it; acc is then unspecified.
	apply(sf *dataset.SparseFrames, acc []float64) error
	// rowKernels tells whether the assembly row kernels run (gatherBreakEven).
	rowKernels() bool
}

// eventGather is the gather kernel for events of native dtype N and weights of type T.
type eventGather[N native, T float] struct {
	m *gatherMasks[T]
	// floats says that N is a float type, whose values may be NaN or infinite.
	floats bool
	// one and rows are the assembly kernels of 1 mask and the row kernels of 2, 4, 8
	// and 16 masks (gather_amd64.s), for float32 weights in a table on a CPU with AVX2
	// and FMA; else nil.
	one  oneGather[N]
	rows [4]rowGather[N]
	w32  []float32 // the table m.w when the assembly kernels are set
}

func (g *eventGather[N, T]) rowKernels() bool { return g.rows[0] != nil }

// oneGather is an assembly kernel of the gather for one mask: it adds Σ_{j<k}
// float64(v[j])·float64(w[idx[j]]) to *out, in float64, and returns k: n, or the first
// event whose idx[j] (as uint32) exceeds last, before reading its weight.
type oneGather[N native] func(idx *int32, v *N, n int, w *float32, last uint32, out *float64) (k int)

// rowGather is an assembly row kernel of the gather: it adds Σ_{j<k} float64(v[j])·
// float64(w[idx[j]·ldw+m]) to out[m] for its masks m, in float64, and returns k: n, or
// the first event whose idx[j] (as uint32) exceeds last, before reading its row.
type rowGather[N native] func(idx *int32, v *N, n int, w *float32, ldw int, last uint32, out *float64) (k int)

// apply runs the kernels, which index the masks by the events' pixels: one outside the
// frame makes a Go kernel panic on the index (recovered here) and an assembly kernel
// return it before reading its row.
func (g *eventGather[N, T]) apply(sf *dataset.SparseFrames, acc []float64) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if err = badEvent(sf, g.m.pixels); err == nil {
				panic(v)
			}
		}
	}()
	val := asNative[N](sf.Data)
	n := g.m.nMasks
	for f := range sf.Frames() {
		row := acc[f*n : (f+1)*n]
		a, b := sf.Indptr[f], sf.Indptr[f+1]
		idx, v := sf.Indices[a:b], val[a:b]
		switch {
		case g.m.w == nil:
			g.csr(idx, v, row, false)
		case n == 1 && g.one != nil:
			row[0] = 0
			if len(idx) > 0 && g.one(&idx[0], &v[0], len(idx), &g.w32[0], uint32(g.m.pixels-1), &row[0]) < len(idx) {
				return badEvent(sf, g.m.pixels)
			}
		case n == 1:
			row[0] = dotGather(idx, v, g.m.w)
		case g.rows[0] != nil:
			if !gatherRowsAsm(g.rows, idx, v, g.w32, g.m.pixels, row) {
				return badEvent(sf, g.m.pixels)
			}
		default:
			gatherRow(idx, v, g.m.w, row)
		}
		if g.floats && !finite(row) {
			g.exact(idx, v, row)
		}
	}
	return nil
}

// badEvent returns the errs.Format error of the first event of sf outside the frame of
// pixels pixels, nil when there is none.
func badEvent(sf *dataset.SparseFrames, pixels int) error {
	for k, p := range sf.Indices {
		if uint32(p) >= uint32(pixels) {
			f, _ := slices.BinarySearch(sf.Indptr, k+1)
			at := strconv.FormatUint(uint64(uint32(p)), 10)
			if p < 0 { // the file's int32 or uint32 index, as stored: either reading
				at += fmt.Sprintf(" (%d as int32)", p)
			}
			return errs.New(errs.Format, "event %d of frame %d is at pixel %s, outside the frame of %d pixels (check sig_shape and the indices' dtype)",
				k-sf.Indptr[f-1], f-1, at, pixels)
		}
	}
	return nil
}

// dotGather returns Σ_k float64(v[k])·w[idx[k]]: 8 events per step into 4 independent
// partial sums, indices taken as uint32 (one bounds check each, no sign extension),
// which measured 1.3× faster than 4 events per step on 256×256 frames at 1% hits.
func dotGather[N native, T float](idx []int32, v []N, w []T) float64 {
	v = v[:len(idx)]
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+8 <= len(idx); k += 8 {
		i, x := idx[k:k+8:k+8], v[k:k+8:k+8]
		s0 += float64(x[0])*float64(w[uint32(i[0])]) + float64(x[4])*float64(w[uint32(i[4])])
		s1 += float64(x[1])*float64(w[uint32(i[1])]) + float64(x[5])*float64(w[uint32(i[5])])
		s2 += float64(x[2])*float64(w[uint32(i[2])]) + float64(x[6])*float64(w[uint32(i[6])])
		s3 += float64(x[3])*float64(w[uint32(i[3])]) + float64(x[7])*float64(w[uint32(i[7])])
	}
	for ; k < len(idx); k++ {
		s0 += float64(v[k]) * float64(w[uint32(idx[k])])
	}
	return (s0 + s1) + (s2 + s3)
}

// gatherRow writes Σ_k float64(v[k])·w[idx[k]·n+m] into row[m] for the n = len(row)
// masks: 8 masks at a time over all events, their sums in registers (summing into row
// in memory would chain every event's adds through a store and a load), then 4, then
// one. Events go in pairs, the pair's two products added before the sum, so that each
// sum's chain of dependent adds has one add per two events.
func gatherRow[N native, T float](idx []int32, v []N, w []T, row []float64) {
	n := len(row)
	v = v[:len(idx)]
	odd := len(idx) % 2
	m0 := 0
	for ; m0+8 <= n; m0 += 8 {
		var a0, a1, a2, a3, a4, a5, a6, a7 float64
		for k := 0; k+1 < len(idx); k += 2 {
			x, y := float64(v[k]), float64(v[k+1])
			o, p := int(uint32(idx[k]))*n+m0, int(uint32(idx[k+1]))*n+m0
			q, r := w[o:o+8:o+8], w[p:p+8:p+8]
			a0 += x*float64(q[0]) + y*float64(r[0])
			a1 += x*float64(q[1]) + y*float64(r[1])
			a2 += x*float64(q[2]) + y*float64(r[2])
			a3 += x*float64(q[3]) + y*float64(r[3])
			a4 += x*float64(q[4]) + y*float64(r[4])
			a5 += x*float64(q[5]) + y*float64(r[5])
			a6 += x*float64(q[6]) + y*float64(r[6])
			a7 += x*float64(q[7]) + y*float64(r[7])
		}
		if odd == 1 {
			k := len(idx) - 1
			x, o := float64(v[k]), int(uint32(idx[k]))*n+m0
			q := w[o : o+8 : o+8]
			a0, a1, a2, a3 = a0+x*float64(q[0]), a1+x*float64(q[1]), a2+x*float64(q[2]), a3+x*float64(q[3])
			a4, a5, a6, a7 = a4+x*float64(q[4]), a5+x*float64(q[5]), a6+x*float64(q[6]), a7+x*float64(q[7])
		}
		r := row[m0 : m0+8 : m0+8]
		r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] = a0, a1, a2, a3, a4, a5, a6, a7
	}
	for ; m0+4 <= n; m0 += 4 {
		var a0, a1, a2, a3 float64
		for k := 0; k+1 < len(idx); k += 2 {
			x, y := float64(v[k]), float64(v[k+1])
			o, p := int(uint32(idx[k]))*n+m0, int(uint32(idx[k+1]))*n+m0
			q, r := w[o:o+4:o+4], w[p:p+4:p+4]
			a0 += x*float64(q[0]) + y*float64(r[0])
			a1 += x*float64(q[1]) + y*float64(r[1])
			a2 += x*float64(q[2]) + y*float64(r[2])
			a3 += x*float64(q[3]) + y*float64(r[3])
		}
		if odd == 1 {
			k := len(idx) - 1
			x, o := float64(v[k]), int(uint32(idx[k]))*n+m0
			q := w[o : o+4 : o+4]
			a0, a1, a2, a3 = a0+x*float64(q[0]), a1+x*float64(q[1]), a2+x*float64(q[2]), a3+x*float64(q[3])
		}
		r := row[m0 : m0+4 : m0+4]
		r[0], r[1], r[2], r[3] = a0, a1, a2, a3
	}
	for ; m0 < n; m0++ {
		var a, b float64
		k := 0
		for ; k+1 < len(idx); k += 2 {
			a += float64(v[k]) * float64(w[int(uint32(idx[k]))*n+m0])
			b += float64(v[k+1]) * float64(w[int(uint32(idx[k+1]))*n+m0])
		}
		if odd == 1 {
			a += float64(v[k]) * float64(w[int(uint32(idx[k]))*n+m0])
		}
		row[m0] = a + b
	}
}

// gatherRowsAsm is gatherRow through the assembly row kernels k: blocks of 16, 8, 4 and
// 2 masks, the last of an odd count in Go. It returns false when an event is outside
// the table of pixels rows (row is then unspecified).
func gatherRowsAsm[N native](k [4]rowGather[N], idx []int32, v []N, w []float32, pixels int, row []float64) bool {
	n := len(row)
	v = v[:len(idx)]
	clear(row)
	var pi *int32
	var pv *N
	if len(idx) > 0 {
		pi, pv = &idx[0], &v[0]
	}
	for m0 := 0; m0 < n; {
		var m int
		var f rowGather[N]
		switch rem := n - m0; {
		case rem >= 16:
			f, m = k[3], 16
		case rem >= 8:
			f, m = k[2], 8
		case rem >= 4:
			f, m = k[1], 4
		case rem >= 2:
			f, m = k[0], 2
		default:
			var a float64
			for j, p := range idx {
				if int(uint32(p)) >= pixels {
					return false
				}
				a += float64(v[j]) * float64(w[int(p)*n+m0])
			}
			row[m0] = a
			return true
		}
		if f(pi, pv, len(idx), &w[m0], n, uint32(pixels-1), &row[m0]) < len(idx) {
			return false
		}
		m0 += m
	}
	return true
}

// csr adds the events into row through the pixel-major CSR layout, after clearing it;
// skipZero leaves out zero weights (the layout holds nonzero weights only, but a float64
// run's weight may round to zero in T).
func (g *eventGather[N, T]) csr(idx []int32, v []N, row []float64, skipZero bool) {
	clear(row)
	m := g.m
	for k, p := range idx {
		x := float64(v[k])
		for j := m.ptr[p]; j < m.ptr[p+1]; j++ {
			if wt := m.val[j]; !skipZero || wt != 0 {
				row[m.mask[j]] += x * float64(wt)
			}
		}
	}
}

// exact recomputes a row that came out NaN or infinite over each mask's nonzero weights
// only, as exactRow does for dense frames: a NaN or Inf event spoils only the masks that
// weigh its pixel.
func (g *eventGather[N, T]) exact(idx []int32, v []N, row []float64) {
	if g.m.w == nil {
		g.csr(idx, v, row, true)
		return
	}
	clear(row)
	n := g.m.nMasks
	for k, p := range idx {
		x := float64(v[k])
		for m, wt := range g.m.w[int(p)*n : int(p)*n+n] {
			if wt != 0 {
				row[m] += x * float64(wt)
			}
		}
	}
}

// gatherKernelFor returns the gather kernel for events of dtype dt (nil for an
// unsupported one), with the job's shared pixel-major masks: float64 weights with their
// Lo parts in a float64 run whose weights are not exact in float32, else float32.
func gatherKernelFor(job *Job, dt dataset.DType) gatherKernel {
	if job.Float64 && !job.Masks.Exact() {
		job.gather64Once.Do(func() { job.gather64 = newGatherMasks[float64](job, true) })
		return gatherFor(dt, job.gather64)
	}
	job.gather32Once.Do(func() { job.gather32 = newGatherMasks[float32](job, false) })
	return gatherFor(dt, job.gather32)
}

func gatherFor[T float](dt dataset.DType, m *gatherMasks[T]) gatherKernel {
	switch dt {
	case dataset.Uint8:
		return newEventGather[uint8](m, false)
	case dataset.Uint16:
		return newEventGather[uint16](m, false)
	case dataset.Uint32:
		return newEventGather[uint32](m, false)
	case dataset.Int8:
		return newEventGather[int8](m, false)
	case dataset.Int16:
		return newEventGather[int16](m, false)
	case dataset.Int32:
		return newEventGather[int32](m, false)
	case dataset.Float32:
		return newEventGather[float32](m, true)
	case dataset.Float64:
		return newEventGather[float64](m, true)
	}
	return nil
}

// newEventGather returns the gather kernel of N over m, with the assembly row kernels
// for float32 weights in a table (gatherAsmKernels: none without AVX2 and FMA).
func newEventGather[N native, T float](m *gatherMasks[T], floats bool) *eventGather[N, T] {
	g := &eventGather[N, T]{m: m, floats: floats}
	if w32, f32 := any(m.w).([]float32); f32 && m.w != nil && m.pixels <= 1<<31 {
		g.one, g.rows = gatherAsmKernels[N]()
		g.w32 = w32
	}
	return g
}
