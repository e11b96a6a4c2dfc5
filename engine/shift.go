package engine

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/stemdot/stemdot/masks"
)

// Shifted masks (descan compensation). With Job.Shifts, frame f's masks move by
// (dy_f, dx_f) pixels (y down the rows, x along a row):
//
//	out[f, m] = Σ_{y,x} mask_m(y − dy_f, x − dx_f)·frame_f(y, x),
//
// over the frame's pixels only: mask pixels moved outside the frame are dropped, and the
// mask is zero outside its own sig_shape. A positive dy moves the masks down (to larger
// rows), a positive dx right, as LiberTEM's ApplyMasksUDF(shifts=...) (0.13 and later);
// integer shifts give LiberTEM's result exactly. Where LiberTEM casts a fractional shift
// to an integer, here a sub-pixel shift takes the bilinear interpolation of the mask at
// (y − dy, x − dx) (the mask zero outside its sig_shape). With dy = ky + fy, ky = ⌊dy⌋,
// fy ∈ [0, 1), and the same in x, the workers compute the equal sum
//
//	out[f, m] = Σ_{u,v} mask_m(u, v)·g_f(u, v),
//	g_f(u, v) = Σ_{a,b∈{0,1}} wy_a·wx_b·frame_f(u + ky + a, v + kx + b),
//
// wy_0 = 1 − fy, wy_1 = fy, wx_0 = 1 − fx, wx_1 = fx, frame pixels outside the frame
// zero. So no mask is copied or moved per frame: a dense CPU worker builds each frame's
// g_f into a float tile (float32, float64 for Float64 jobs) and runs the unshifted kernel
// on it (shiftDense), or for whole-pixel shifts of fewer than bcastMinMasks masks the
// native kernel on shifted copies in the native dtype; with fewer than packedMinMasks
// masks (float32) it reads frames shifted by whole pixels in place at an offset
// (shiftFlat; 1 and 2 masks four frames a call of the quad kernels, wholeQuad) and
// computes frames with a sub-pixel shift in one pass over the native frame through the
// fused kernels, which build g_f's rows in registers and multiply them into the masks
// over the masks' box of nonzero rows and columns (shiftDot; shiftFlat.subpixel, which
// builds g_f a block of rows at a time into a buffer in L1 for the block kernels, takes
// frames narrower than the shift plus 9 pixels); a sparse worker does the same with a
// stack of few masks dense in their box, a ring (shiftSparseDot), else gathers each
// nonzero's g_f straight from the native frame (shiftSparse); a GPU worker
// sends the native frames and the shifts to the device, where a kernel builds g_f in
// float32 (cuda.RunnerConfig.Shifts). The CPU workers build a frame
// whose fractions fy and fx are both nonzero as g_f/(max(wx_0, wx_1)·max(wy_0, wy_1)),
// one weight of each axis 1 (one multiply-add per axis), and scale its products back.
// Rows of float frames that come out NaN or infinite are recomputed from the first sum,
// over the pixels whose shifted weight is not 0 (shiftExact).

// ValidateShifts checks per-frame shifts for nFrames frames: 2·nFrames values, (dy, dx)
// of frame f at 2f and 2f+1, all finite. Errors name the first bad value.
func ValidateShifts(shifts []float64, nFrames int) error {
	if len(shifts) != 2*nFrames {
		return fmt.Errorf("shifts hold %d values, want 2 (dy, dx) for each of the %d frames = %d", len(shifts), nFrames, 2*nFrames)
	}
	for i, v := range shifts {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("shift %s of frame %d is %v: shifts must be finite", [2]string{"dy", "dx"}[i%2], i/2, v)
		}
	}
	return nil
}

// split is the integer part ⌊s⌋ and the fraction s − ⌊s⌋ ∈ [0, 1) of a shift. Shifts
// beyond ±2³⁰ (far outside any frame) are clamped, so that offsets stay in int range.
func split(s float64) (int, float64) {
	s = max(-1<<30, min(1<<30, s))
	k := math.Floor(s)
	return int(k), s - k
}

// shiftedKernel computes the result rows of a tile's frames with their masks shifted.
type shiftedKernel interface {
	// apply is kernel.apply for frames [start, start+frames) of the dataset: tile holds
	// them in native dtype, shifts is Job.Shifts.
	apply(tile []byte, start, frames int, shifts []float64, acc []float64)
}

// newShiftedKernel returns the shifted kernel for native dtype N of a job with shifts;
// for float frames, it recomputes the rows that come out NaN or infinite (shiftExact).
func newShiftedKernel[N native](job *Job) shiftedKernel {
	sig := job.Dataset.SigShape()
	var floats bool
	switch any(*new(N)).(type) {
	case float32, float64:
		floats = true
	}
	if job.Sparse != nil {
		gather := newShiftSparse[N](job.Sparse, sig, floats)
		if !job.Float64 && sparseDot(job.Sparse, sig) {
			if dot := newShiftDot[N](job); dot != nil {
				return &shiftSparseDot[N]{dot: dot, gather: gather, nMasks: job.NMasks}
			}
		}
		return gather
	}
	var ex *shiftExact
	if floats {
		ex = newShiftExact(job.Masks)
	}
	if job.Float64 {
		return newShiftDense[N, float64](job, kernelFor[float64](job), ex)
	}
	dense := newShiftDense[N, float32](job, kernelFor[float32](job), ex)
	if k := newShiftFlat(job, dense); k != nil {
		return k
	}
	return dense
}

// shiftTileBytes bounds the float tile of a dense shifted kernel: the frames built into
// it are still in L2 when the unshifted kernel reads them. With packedMinMasks masks or
// more, whose kernels stream the whole stack once per call, the tile is larger
// (shiftManyTileBytes, in L3), so that the weights are read once per 16 frames of
// 256×256, not per 2: on 256×256 uint16 frames with 16 masks, 2-frame float tiles ran at
// a third of the speed of 16-frame ones.
const (
	shiftTileBytes     = 512 << 10
	shiftManyTileBytes = 4 << 20
)

// shiftDense builds the frames' g_f (see above) in F and applies the unshifted dense
// kernel for F frames to them.
type shiftDense[N native, F float] struct {
	*shiftFrames[N, F]
	chunk  int       // frames per float tile
	buf    []F       // chunk × pixels
	scale  []float64 // of each frame in buf (build)
	inner  kernel
	ex     *shiftExact // for NaN/Inf rows of float frames, or nil
	nMasks int
	// native, when set, is the job's unshifted kernel for its native frames, which runs
	// on tiles whose shifts are all whole pixels: their shifted frames are shifted copies
	// in the native dtype (nbuf), half the bytes of float32 ones for 16-bit frames and no
	// conversion. Set for stacks of fewer than bcastMinMasks masks, which the kernels of
	// every pixel type pack alike (packMasks) or not at all (a job's packed stack is laid
	// out for one kernel family: Job.packedMasks; float32 frames of bcastMinMasks masks or
	// more take packBcast).
	native kernel
	nbuf   []N
}

func newShiftDense[N native, F float](job *Job, inner kernel, ex *shiftExact) *shiftDense[N, F] {
	sig := job.Dataset.SigShape()
	p := sig[0] * sig[1]
	bytes := shiftTileBytes
	if job.NMasks >= packedMinMasks {
		bytes = shiftManyTileBytes
	}
	chunk := max(1, min(job.TileFrames, bytes/(p*int(unsafe.Sizeof(F(0))))))
	k := &shiftDense[N, F]{
		shiftFrames: newShiftFrames[N, F](sig), chunk: chunk, buf: make([]F, chunk*p), scale: make([]float64, chunk),
		inner: inner, ex: ex, nMasks: job.NMasks,
	}
	if job.NMasks < bcastMinMasks {
		k.native, k.nbuf = kernelFor[N](job), make([]N, chunk*p)
	}
	return k
}

// shiftFrames builds the g_f of frames of pixel type N in F (build), with row buffers
// of its own.
type shiftFrames[N native, F float] struct {
	h, w int
	rows [2][]F // source rows shifted in x
	src  []F    // a source row converted to F
	cvt  func(dst []F, src []N)
	lerp func(dst, a, b []F, wa, wb F)
	// shift, when set, shifts a source row in x and blends it in y in one pass (see
	// rowShift); nil: row and lerp do it in two.
	shift func(g, hprev, hnext []F, src []N, wx0, wx1, wy0, wy1 F)
	// The frame being built row by row (begin, next): its pixels, next row u, shift
	// ky + fy, kx + fx, and the source rows shifted in x (prev: row u + ky).
	s         []N
	u, ky, kx int
	fy, fx    float64
	// The bilinear weights; in scaled frames (begin) divided by the larger one of each
	// axis, so that g is built as g/scale.
	wx0, wx1, wy0, wy1 F
	scale              float64
	prev, nxt          []F
	// shift1, when set, is the assembly row shift for scaled weights (rowShift1), which
	// block runs over whole blocks of rows at once; hb holds the source rows shifted in x
	// of such a block, the one before it first (inHB: hb's first row is prev's value).
	shift1 func(g, hprev, hnext *F, p, q *N, beta, alpha F, ynext, n int)
	hb     []F
	inHB   bool
}

func newShiftFrames[N native, F float](sig [2]int) *shiftFrames[N, F] {
	return &shiftFrames[N, F]{h: sig[0], w: sig[1], rows: [2][]F{make([]F, sig[1]), make([]F, sig[1])},
		src: make([]F, sig[1]), cvt: rowConvert[N, F](), lerp: rowLerp[F](), shift: rowShift[N, F](), shift1: rowShift1[N, F]()}
}

// lerpGo sets dst[i] = wa·a[i] + wb·b[i] for i < len(dst).
func lerpGo[F float](dst, a, b []F, wa, wb F) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = wa*a[i] + wb*b[i]
	}
}

func (k *shiftDense[N, F]) apply(tile []byte, start, frames int, shifts []float64, acc []float64) {
	px := asNative[N](tile)
	p := k.h * k.w
	for c0 := 0; c0 < frames; c0 += k.chunk {
		n := min(k.chunk, frames-c0)
		if k.native != nil && whole(shifts[2*(start+c0):2*(start+c0+n)]) {
			k.applyNative(px, start, c0, n, shifts, acc)
			continue
		}
		for i := range n {
			f := c0 + i
			k.scale[i] = k.build(k.buf[i*p:(i+1)*p], px[f*p:(f+1)*p], shifts[2*(start+f)], shifts[2*(start+f)+1], true)
		}
		g := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(k.buf))), n*p*int(unsafe.Sizeof(F(0))))
		rows := acc[c0*k.nMasks : (c0+n)*k.nMasks]
		k.inner.apply(g, n, rows)
		for i := range n {
			row := rows[i*k.nMasks : (i+1)*k.nMasks]
			for m := range row {
				row[m] *= k.scale[i]
			}
			k.exactRow(px, start, c0+i, shifts, row)
		}
	}
}

// applyNative computes frames [c0, c0+n) of the tile px, whose shifts are whole pixels,
// with the native kernel on shifted copies.
func (k *shiftDense[N, F]) applyNative(px []N, start, c0, n int, shifts, acc []float64) {
	h, w := k.h, k.w
	p := h * w
	for i := range n {
		f := c0 + i
		dst, src := k.nbuf[i*p:(i+1)*p], px[f*p:(f+1)*p]
		ky, kx := int(shifts[2*(start+f)]), int(shifts[2*(start+f)+1])
		lo, hi := max(0, -kx), min(w, w-kx)
		for u := range h {
			d := dst[u*w : (u+1)*w]
			if r := u + ky; r < 0 || r >= h || lo >= hi {
				clear(d)
			} else {
				clear(d[:lo])
				clear(d[hi:])
				copy(d[lo:hi], src[r*w+lo+kx:r*w+hi+kx])
			}
		}
	}
	var zero N
	fb := p * int(unsafe.Sizeof(zero))
	tile := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(k.nbuf))), n*fb)
	rows := acc[c0*k.nMasks : (c0+n)*k.nMasks]
	k.native.apply(tile, n, rows)
	for i := range n {
		k.exactRow(px, start, c0+i, shifts, rows[i*k.nMasks:(i+1)*k.nMasks])
	}
}

// exactRow recomputes frame f of the tile px (frame start+f of the dataset) when its row
// came out NaN or infinite and its frames are float (shiftExact).
func (k *shiftDense[N, F]) exactRow(px []N, start, f int, shifts, row []float64) {
	if k.ex != nil && !finite(row) {
		p := k.h * k.w
		exactShiftedRow(k.ex, px[f*p:(f+1)*p], shifts[2*(start+f)], shifts[2*(start+f)+1], row)
	}
}

// whole tells whether every shift is a whole number of pixels, within int range.
func whole(shifts []float64) bool {
	for _, v := range shifts {
		if v != math.Trunc(v) || math.Abs(v) > 1<<30 {
			return false
		}
	}
	return true
}

// build writes g (see above) of frame src, shifted by (dy, dx), into dst, or with scaled
// g/scale (see begin); it returns scale.
func (k *shiftFrames[N, F]) build(dst []F, src []N, dy, dx float64, scaled bool) float64 {
	k.begin(src, dy, dx, scaled)
	w, rb := k.w, max(1, simdBlock/k.w)
	for u := 0; u < k.h; u += rb {
		n := min(rb, k.h-u)
		k.block(dst[u*w:(u+n)*w], n)
	}
	return k.scale
}

// begin starts building frame src's g row by row (next), for the shift (dy, dx). With
// scaled, a frame shifted by fractions fx and fy both nonzero is built as g/scale,
// scale = max(1 − fx, fx)·max(1 − fy, fy): its weights divided by the larger one of
// each axis, so that one weight of each axis is 1 and the fused row shift (rowShift)
// takes one multiply-add per axis instead of two; the caller multiplies the products
// by k.scale (1 for other frames and without scaled).
func (k *shiftFrames[N, F]) begin(src []N, dy, dx float64, scaled bool) {
	k.s, k.u, k.inHB = src, 0, false
	k.ky, k.fy = split(dy)
	k.kx, k.fx = split(dx)
	k.prev, k.nxt = k.rows[0], k.rows[1]
	wx0, wx1, wy0, wy1, sx, sy := 1-k.fx, k.fx, 1-k.fy, k.fy, 1.0, 1.0
	if scaled && k.fx > 0 && k.fy > 0 {
		sx, sy = max(wx0, wx1), max(wy0, wy1)
	}
	k.wx0, k.wx1, k.wy0, k.wy1, k.scale = F(wx0/sx), F(wx1/sx), F(wy0/sy), F(wy1/sy), sx*sy
	if k.fy != 0 {
		k.row(k.prev, src, k.ky, k.kx)
	}
}

// next writes the next row of g (row 0 first after begin) into dst (sig_x values). With
// fy > 0, g row u = (1 − fy)·h(u + ky) + fy·h(u + ky + 1), h(r) a source row shifted in
// x: each source row is shifted once and used by two output rows.
func (k *shiftFrames[N, F]) next(dst []F) {
	u := k.u
	k.u++
	if k.fy == 0 {
		k.row(dst, k.s, u+k.ky, k.kx)
		return
	}
	w := k.w
	if r := u + k.ky + 1; k.shift == nil || k.fx == 0 || r < 0 || r >= k.h {
		k.row(k.nxt, k.s, r, k.kx)
		k.lerp(dst, k.prev, k.nxt, k.wy0, k.wy1)
	} else {
		k.shiftRow(dst, k.prev, k.nxt, k.s[r*w:(r+1)*w], k.kx)
	}
	k.prev, k.nxt = k.nxt, k.prev
}

// block writes the next n rows of g (see next) into dst (n·sig_x values). A frame built
// scaled (begin) with both fractions nonzero, whose n source rows u + ky + 1 are in the
// frame, goes through one call of shift1 over the block's pixels in C order from the
// first whose two source pixels are in its row to the last (the source read from the
// one offset (ky + 1)·sig_x + kx, hprev the previous row of hb); the pixels of that range
// whose sources wrap into a neighbouring row, and the others outside it, are then set
// here (zero, or the one source pixel in the frame at the edge column). Other frames and
// blocks go row by row (next).
func (k *shiftFrames[N, F]) block(dst []F, n int) {
	w, kx, u0 := k.w, k.kx, k.u
	lo, hi := max(0, -kx), min(w, w-kx-1)
	start, end := lo, (n-1)*w+hi // g pixels [start, end) of the block in one call
	if k.shift1 == nil || k.fx == 0 || k.fy == 0 || k.scale == 1 || lo >= hi || end-start < 8 ||
		u0+k.ky+1 < 0 || u0+n+k.ky > k.h-1 {
		if k.inHB {
			copy(k.prev, k.hb[:w])
			k.inHB = false
		}
		for o := 0; o < n*w; o += w {
			k.next(dst[o : o+w])
		}
		return
	}
	if len(k.hb) < (n+1)*w {
		k.hb = make([]F, (n+1)*w)
	}
	hb := k.hb[:(n+1)*w]
	if !k.inHB {
		copy(hb, k.prev)
		k.inHB = true
	}
	base := (u0+k.ky+1)*w + kx // source pixel of g pixel 0 of the block
	_ = k.s[base+end]
	wx0, wx1, wy0, wy1 := k.wx0, k.wx1, k.wy0, k.wy1
	dp, beta := 1, wx1 // q = p + dp
	if wx0 != 1 {
		dp, beta = -1, wx0
	}
	ynext, alpha := 0, wy1
	if wy0 != 1 {
		ynext, alpha = 1, wy0
	}
	run := func(i, m int) {
		p := base + i
		if dp < 0 {
			p++
		}
		k.shift1(&dst[i], &hb[i], &hb[w+i], &k.s[p], &k.s[p+dp], beta, alpha, ynext, m)
	}
	l := end - start
	run(start, l&^7)
	if l&7 != 0 {
		run(end-8, 8)
	}
	// The edge column: the one pixel whose source pair has one pixel in the frame.
	ve, edge := hi, 0
	if kx < 0 {
		ve, edge = lo-1, 1
	}
	for j := range n {
		r := (u0 + j + k.ky + 1) * w
		prev, h, g := hb[j*w:(j+1)*w], hb[(j+1)*w:(j+2)*w], dst[j*w:(j+1)*w]
		fix := func(v0, v1 int) {
			for v := v0; v < v1; v++ {
				var x F
				if v == ve {
					if edge == 0 {
						x = wx0 * F(k.s[r+w-1])
					} else {
						x = wx1 * F(k.s[r])
					}
				}
				h[v] = x
				g[v] = wy0*prev[v] + wy1*x
			}
		}
		fix(0, lo)
		fix(hi, w)
	}
	copy(hb, hb[n*w:])
	k.u += n
}

// shiftRow is row(next, ...) and g = wy0·prev + wy1·next for a source row s in the
// frame and fx > 0, in one pass (shift) over the pixels whose two source pixels are in
// the row, the others here.
func (k *shiftFrames[N, F]) shiftRow(g, prev, next []F, s []N, kx int) {
	w := k.w
	wx0, wx1, wy0, wy1 := k.wx0, k.wx1, k.wy0, k.wy1
	lo, hi := max(0, -kx), min(w, w-kx-1)
	if lo < hi {
		k.shift(g[lo:hi], prev[lo:hi], next[lo:hi], s[lo+kx:hi+kx+1], wx0, wx1, wy0, wy1)
	} else {
		lo, hi = 0, 0
	}
	edge := func(v int) {
		var h F
		switch v + kx {
		case -1:
			h = wx1 * F(s[0])
		case w - 1:
			h = wx0 * F(s[w-1])
		}
		next[v] = h
		g[v] = wy0*prev[v] + wy1*h
	}
	for v := range lo {
		edge(v)
	}
	for v := hi; v < w; v++ {
		edge(v)
	}
}

// row writes source row r shifted by kx + fx into dst: dst[v] = wx0·src(r, v+kx) +
// wx1·src(r, v+kx+1), pixels outside the frame zero (and a weight of 0 reads nothing, so
// that a NaN pixel does not spread to a neighbour it gives no weight).
func (k *shiftFrames[N, F]) row(dst []F, src []N, r, kx int) {
	w := k.w
	if r < 0 || r >= k.h {
		clear(dst)
		return
	}
	s := src[r*w : (r+1)*w]
	if k.fx == 0 {
		// v+kx in [0, w) for v in [lo, hi).
		lo, hi := max(0, -kx), min(w, w-kx)
		if lo >= hi {
			clear(dst)
			return
		}
		clear(dst[:lo])
		clear(dst[hi:])
		k.cvt(dst[lo:hi], s[lo+kx:hi+kx])
		return
	}
	c := k.src
	k.cvt(c, s)
	wx0, wx1 := k.wx0, k.wx1
	// v+kx and v+kx+1 both in [0, w) for v in [lo, hi); the pixels just outside have one
	// source pixel in the frame.
	lo, hi := max(0, -kx), min(w, w-kx-1)
	if lo < hi {
		clear(dst[:lo])
		clear(dst[hi:])
		k.lerp(dst[lo:hi], c[lo+kx:hi+kx], c[lo+kx+1:hi+kx+1], wx0, wx1)
	} else {
		clear(dst)
	}
	if v := -kx - 1; v >= 0 && v < w {
		dst[v] = wx1 * c[0]
	}
	if v := w - kx - 1; v >= 0 && v < w {
		dst[v] = wx0 * c[w-1]
	}
}

// shiftSparse gathers each nonzero's g_f (see above) from the native frame: 1 pixel per
// nonzero for an integer shift, 4 for a sub-pixel one, summed in float64. A mask whose
// nonzeros' source pixels all lie in the frame (its bounding box shifted, box) takes the
// pixels at the one offset ky·sig_x + kx from its nonzeros without a test each, and sums
// val·pixel for each of the 4 neighbours apart (Σ_ab w_ab·Σ_i val_i·frame(...): the same
// sum, 4 independent multiply-adds a nonzero).
type shiftSparse[N native] struct {
	nMasks, h, w int
	rowPtr       []int32
	col          []int32
	y, x         []int32 // each nonzero's pixel
	val          []float64
	box          [][4]int32  // each mask's nonzeros: rows [box[0], box[1]], columns [box[2], box[3]]
	ex           *shiftExact // for NaN/Inf rows of float frames, or nil
}

// newShiftSparse returns the sparse shifted kernel of masks c; with floats (float
// frames), its shiftExact shares c's nonzeros and their float64 weights.
func newShiftSparse[N native](c *masks.CSR, sig [2]int, floats bool) *shiftSparse[N] {
	s := &shiftSparse[N]{nMasks: c.N, h: sig[0], w: sig[1], rowPtr: c.RowPtr, col: c.Col, val: c.Val64(),
		y: make([]int32, len(c.Col)), x: make([]int32, len(c.Col)), box: make([][4]int32, c.N)}
	if floats {
		s.ex = &shiftExact{h: s.h, w: s.w, rowPtr: s.rowPtr, col: s.col, val: s.val}
	}
	for i, col := range c.Col {
		s.y[i], s.x[i] = col/int32(sig[1]), col%int32(sig[1])
	}
	for m := range c.N {
		b := [4]int32{math.MaxInt32, -1, math.MaxInt32, -1}
		for i := c.RowPtr[m]; i < c.RowPtr[m+1]; i++ {
			b = [4]int32{min(b[0], s.y[i]), max(b[1], s.y[i]), min(b[2], s.x[i]), max(b[3], s.x[i])}
		}
		s.box[m] = b
	}
	return s
}

func (s *shiftSparse[N]) apply(tile []byte, start, frames int, shifts []float64, acc []float64) {
	px := asNative[N](tile)
	p := s.h * s.w
	for f := range frames {
		frame := px[f*p : (f+1)*p]
		dy, dx := shifts[2*(start+f)], shifts[2*(start+f)+1]
		ky, fy := split(dy)
		kx, fx := split(dx)
		for m := range s.nMasks {
			lo, hi := s.rowPtr[m], s.rowPtr[m+1]
			if b := s.box[m]; lo < hi && int(b[0])+ky >= 0 && int(b[1])+ky+1 < s.h && int(b[2])+kx >= 0 && int(b[3])+kx+1 < s.w {
				acc[f*s.nMasks+m] = s.inside(frame, lo, hi, ky, kx, fy, fx)
			} else {
				acc[f*s.nMasks+m] = s.gather(frame, lo, hi, ky, kx, fy, fx)
			}
		}
		if row := acc[f*s.nMasks : (f+1)*s.nMasks]; s.ex != nil && !finite(row) {
			exactShiftedRow(s.ex, frame, dy, dx, row)
		}
	}
}

// inside is gather for nonzeros whose 2×2 source pixels all lie in the frame.
func (s *shiftSparse[N]) inside(frame []N, lo, hi int32, ky, kx int, fy, fx float64) float64 {
	off := ky*s.w + kx
	cols, val := s.col[lo:hi], s.val[lo:hi]
	val = val[:len(cols)]
	if fy == 0 && fx == 0 {
		var a0, a1 float64
		i := 0
		for ; i+1 < len(cols); i += 2 {
			a0 += val[i] * float64(frame[int(cols[i])+off])
			a1 += val[i+1] * float64(frame[int(cols[i+1])+off])
		}
		if i < len(cols) {
			a0 += val[i] * float64(frame[int(cols[i])+off])
		}
		return a0 + a1
	}
	// A zero fraction reads the same pixel twice, with weight 0 for the second read.
	d01, d10 := 0, 0
	if fx > 0 {
		d01 = 1
	}
	if fy > 0 {
		d10 = s.w
	}
	var a00, a01, a10, a11 float64
	for i, c := range cols {
		o := int(c) + off
		v := val[i]
		a00 += v * float64(frame[o])
		a01 += v * float64(frame[o+d01])
		a10 += v * float64(frame[o+d10])
		a11 += v * float64(frame[o+d10+d01])
	}
	return (1-fy)*(1-fx)*a00 + (1-fy)*fx*a01 + fy*(1-fx)*a10 + fy*fx*a11
}

// gather is Σ val[i]·g_f(y[i], x[i]) over nonzeros [lo, hi).
func (s *shiftSparse[N]) gather(frame []N, lo, hi int32, ky, kx int, fy, fx float64) float64 {
	h, w := s.h, s.w
	var sum float64
	ys, xs, val := s.y[lo:hi], s.x[lo:hi], s.val[lo:hi]
	xs, val = xs[:len(ys)], val[:len(ys)]
	if fy == 0 && fx == 0 {
		for i, y := range ys {
			r, c := int(y)+ky, int(xs[i])+kx
			if uint(r) < uint(h) && uint(c) < uint(w) {
				sum += val[i] * float64(frame[r*w+c])
			}
		}
		return sum
	}
	// A zero fraction reads the same pixel twice, with weight 0 for the second read.
	dy1, dx1 := 0, 0
	if fy > 0 {
		dy1 = 1
	}
	if fx > 0 {
		dx1 = 1
	}
	w00, w01, w10, w11 := (1-fy)*(1-fx), (1-fy)*fx, fy*(1-fx), fy*fx
	for i, y := range ys {
		r, c := int(y)+ky, int(xs[i])+kx
		var g float64
		if r >= 0 && r+dy1 < h && c >= 0 && c+dx1 < w {
			o := r*w + c
			g = w00*float64(frame[o]) + w01*float64(frame[o+dx1]) + w10*float64(frame[o+dy1*w]) + w11*float64(frame[o+dy1*w+dx1])
		} else {
			g = s.edge(frame, r, c, dy1, dx1, w00, w01, w10, w11)
		}
		sum += val[i] * g
	}
	return sum
}

// edge is g_f at a nonzero whose source pixels from (r, c) leave the frame: those
// outside count 0.
func (s *shiftSparse[N]) edge(frame []N, r, c, dy1, dx1 int, w00, w01, w10, w11 float64) float64 {
	at := func(y, x int) float64 {
		if uint(y) < uint(s.h) && uint(x) < uint(s.w) {
			return float64(frame[y*s.w+x])
		}
		return 0
	}
	return w00*at(r, c) + w01*at(r, c+dx1) + w10*at(r+dy1, c) + w11*at(r+dy1, c+dx1)
}

// shiftFlat computes the rows of a float32 job of fewer than packedMinMasks dense masks
// shifted by whole pixels straight from the native frames, without a shifted copy: the
// product Σ mask(u, v)·frame(u+ky, v+kx) over the pixels whose source lies in the frame
// is, in C order, the dot product of the masks with the frame read from offset
// ky·sig_x + kx, over the one contiguous range of mask pixels from the first such pixel
// to the last, run through the block kernels (simdKernels: blocks of simdBlock pixels
// summed in float32, the blocks in float64, as unshifted), each block of weights for up
// to wholeFrames consecutive frames that share a shift, two at a time; the pixels of that range whose source wraps into a
// neighbouring row (|kx| per row) are then subtracted. Tiles with a sub-pixel shift go
// to subpixel; frames whose rows come out NaN or infinite are recomputed (shiftExact).
type shiftFlat[N native] struct {
	h, w, nMasks int
	masks        []float32 // nMasks × pixels
	kernels      *groupKernels[N]
	part         []float32
	copies       *shiftDense[N, float32]
	// Sub-pixel shifts (subpixel): the float32 block kernels, a builder of g and a
	// buffer of blockRows rows of g for each of two frames.
	f32       *groupKernels[float32]
	dot       *shiftDot[N] // the fused kernels (made at the first sub-pixel tile), or nil
	job       *Job
	frames    [2]*shiftFrames[N, float32]
	g         [2][]float32
	blockRows int
	ranges    [][3]int // wholeQuad's frames: mask pixels [first, end), offset
	// odd, as simdDense.odd, pairs a frame left without a partner (the odd last of a
	// tile, or of whole's frames that share a shift) with itself against 4 masks or more,
	// so that a frame's sums do not depend on where the run's claims cut the tiles (they
	// did by a float32 rounding: python -m stemdot.dask's ranges against stemdot apply).
	// Set for jobs whose tiles hold 2 or more frames.
	odd []float64
}

// newShiftFlat returns the flat kernel for a float32 job of fewer than packedMinMasks
// dense masks, or nil where the block kernels are missing.
func newShiftFlat[N native](job *Job, copies *shiftDense[N, float32]) *shiftFlat[N] {
	kernels := simdKernels[N]()
	if kernels == nil || job.Float64 || job.Sparse != nil || job.NMasks >= packedMinMasks {
		return nil
	}
	sig := job.Dataset.SigShape()
	rb := max(1, simdBlock/sig[1])
	k := &shiftFlat[N]{h: sig[0], w: sig[1], nMasks: job.NMasks, masks: job.Masks.Data, kernels: kernels,
		part: make([]float32, max(job.NMasks, 24)), copies: copies,
		f32: simdKernels[float32](), blockRows: rb, job: job,
	}
	if job.TileFrames > 1 && job.NMasks >= 4 {
		k.odd = make([]float64, simdGroup)
	}
	for i := range k.frames {
		k.frames[i], k.g[i] = newShiftFrames[N, float32](sig), make([]float32, rb*sig[1])
	}
	return k
}

func (k *shiftFlat[N]) apply(tile []byte, start, frames int, shifts []float64, acc []float64) {
	if !whole(shifts[2*start : 2*(start+frames)]) {
		k.subpixel(tile, start, frames, shifts, acc)
		return
	}
	px := asNative[N](tile)
	p, nm := k.h*k.w, k.nMasks
	if nm <= 2 {
		k.wholeQuad(px, start, frames, shifts, acc)
		return
	}
	for f := 0; f < frames; {
		ky, kx := int(shifts[2*(start+f)]), int(shifts[2*(start+f)+1])
		n := 1 // frames from f that share the shift (up to wholeFrames with 4 masks or more)
		for n < wholeFrames && nm >= 4 && f+n < frames && shifts[2*(start+f+n)] == float64(ky) && shifts[2*(start+f+n)+1] == float64(kx) {
			n++
		}
		rows := acc[f*nm : (f+n)*nm]
		k.whole(px[f*p:(f+n)*p], n, ky, kx, rows)
		for i := range n {
			k.copies.exactRow(px, start, f+i, shifts, rows[i*nm:(i+1)*nm])
		}
		f += n
	}
}

// wholeQuad is apply for a tile of whole-pixel shifts of 1 or 2 masks, as the unshifted
// stacks of so few masks run (simdDense.quadFrames): each frame's products are summed
// over the blocks of simdBlock mask pixels of the one C-order range of whole, four
// frames per call of the quad kernels (each weight loaded serves the four, whose streams
// are in flight at once), each frame read at its own offset ky·sig_x + kx. A block that
// lies in a frame's range whole takes the quad kernels (with up to three other frames
// of the tile whose range holds it, or its own pixels again), a block the range cuts the
// block kernels over the part inside: a frame's sums depend on its own shift only, not
// on the frames the run's claims put beside it. The pixels whose source wraps are then
// subtracted (unwrap), rows that come out NaN or infinite recomputed (shiftExact).
func (k *shiftFlat[N]) wholeQuad(px []N, start, frames int, shifts, acc []float64) {
	h, w, nm := k.h, k.w, k.nMasks
	p := h * w
	if cap(k.ranges) < frames {
		k.ranges = make([][3]int, frames)
	}
	rg := k.ranges[:frames] // each frame's range [first, end) of mask pixels, and its offset
	for f := range frames {
		ky, kx := int(shifts[2*(start+f)]), int(shifts[2*(start+f)+1])
		u0, u1 := max(0, -ky), min(h, h-ky)
		lo, hi := max(0, -kx), min(w, w-kx)
		rg[f] = [3]int{0, 0, ky*w + kx}
		if u0 < u1 && lo < hi {
			rg[f][0], rg[f][1] = u0*w+lo, (u1-1)*w+hi
		}
	}
	rows := acc[:frames*nm]
	clear(rows)
	part := k.part[:8]
	var in [4]int // frames of the next quad call
	for k0 := 0; k0 < p; k0 += simdBlock {
		n := min(simdBlock, p-k0)
		kn := n &^ 15
		quad := func(nf int) {
			var q [4]*N
			for i := range q {
				f := in[min(i, nf-1)]
				q[i] = &px[f*p+k0+rg[f][2]]
			}
			_ = k.masks[(nm-1)*p+k0+n-1]
			if nm == 1 {
				k.kernels.quad(q[0], q[1], q[2], q[3], kn, &k.masks[k0], &part[0])
			} else {
				k.kernels.quad2(q[0], q[1], q[2], q[3], kn, &k.masks[k0], p, &part[0])
			}
			for i, f := range in[:nf] {
				_ = px[f*p+k0+rg[f][2]+n-1]
				for m, v := range part[i*nm : (i+1)*nm] {
					rows[f*nm+m] += float64(v)
				}
				addTail(px[f*p+k0+rg[f][2]:][:n], k.masks[k0:], p, rows[f*nm:(f+1)*nm])
			}
		}
		nf := 0
		for f := range frames {
			first, end, off := rg[f][0], rg[f][1], rg[f][2]
			if first <= k0 && k0+n <= end && kn > 0 {
				in[nf] = f
				if nf++; nf == 4 {
					quad(nf)
					nf = 0
				}
				continue
			}
			if a, b := max(k0, first), min(k0+n, end); a < b {
				mw := k.masks[a:]
				dotBlock(k.kernels, px[f*p+a+off:f*p+b+off], mw, p, &prefetcher{w: mw, ldw: p, rows: nm}, rows[f*nm:(f+1)*nm], k.part)
			}
		}
		if nf > 0 {
			quad(nf)
		}
	}
	for f := range frames {
		ky, kx := int(shifts[2*(start+f)]), int(shifts[2*(start+f)+1])
		k.unwrap(px[f*p:(f+1)*p], 1, ky, kx, rows[f*nm:(f+1)*nm])
		k.copies.exactRow(px, start, f, shifts, rows[f*nm:(f+1)*nm])
	}
}

// wholeFrames is the most frames sharing a shift that whole computes together (each
// block of the masks' weights, loaded once, serves them all, two at a time).
const wholeFrames = 8

// whole sets rows (n × nMasks) to the products of the masks with the n frames of px
// (at most wholeFrames) shifted by (ky, kx) whole pixels.
func (k *shiftFlat[N]) whole(px []N, n, ky, kx int, rows []float64) {
	h, w, nm := k.h, k.w, k.nMasks
	p := h * w
	clear(rows)
	// Rows u whose source row u+ky is in the frame; in them, pixels [lo, hi).
	u0, u1 := max(0, -ky), min(h, h-ky)
	lo, hi := max(0, -kx), min(w, w-kx)
	if u0 >= u1 || lo >= hi {
		return
	}
	first, end := u0*w+lo, (u1-1)*w+hi // mask pixels; frame pixels from first+off
	off := ky*w + kx
	for k0 := first; k0 < end; k0 += simdBlock {
		b := min(simdBlock, end-k0)
		for m0 := 0; m0 < nm; m0 += simdGroup {
			g := min(simdGroup, nm-m0)
			mw := k.masks[m0*p+k0:]
			pf := &prefetcher{w: mw, ldw: p, rows: g}
			for j := 0; j < n; j += 2 {
				s0, r0 := px[j*p+k0+off:j*p+k0+off+b], rows[j*nm+m0:j*nm+m0+g]
				if j+1 < n {
					s1, r1 := px[(j+1)*p+k0+off:(j+1)*p+k0+off+b], rows[(j+1)*nm+m0:(j+1)*nm+m0+g]
					dotPair(k.kernels, s0, s1, mw, p, pf, r0, r1, k.part)
				} else if g >= 4 && k.odd != nil {
					dotPair(k.kernels, s0, s0, mw, p, pf, r0, k.odd[:g], k.part)
				} else {
					dotBlock(k.kernels, s0, mw, p, pf, r0, k.part)
				}
			}
		}
	}
	k.unwrap(px, n, ky, kx, rows)
}

// unwrap subtracts from rows (n × nMasks) the products that whole's one range of C-order
// pixels took from pixels whose source (frames of px shifted by (ky, kx)) wraps into a
// neighbouring row.
func (k *shiftFlat[N]) unwrap(px []N, n, ky, kx int, rows []float64) {
	h, w, nm := k.h, k.w, k.nMasks
	p := h * w
	off := ky*w + kx
	u0, u1 := max(0, -ky), min(h, h-ky)
	lo, hi := max(0, -kx), min(w, w-kx)
	if u0 >= u1 || lo >= hi {
		return
	}
	// The range's pixels whose source wraps: [hi, w) of every row but the last, [0, lo)
	// of every row but the first.
	wrap := func(u, v0, v1 int) {
		for v := v0; v < v1; v++ {
			i := u*w + v
			for j := range n {
				x := float64(px[j*p+i+off])
				for m := range nm {
					rows[j*nm+m] -= float64(k.masks[m*p+i]) * x
				}
			}
		}
	}
	for u := u0; u < u1; u++ {
		if u > u0 {
			wrap(u, 0, lo)
		}
		if u < u1-1 {
			wrap(u, hi, w)
		}
	}
}

// subpixel computes the rows of the tile's frames (any shifts) without a shifted frame:
// through the fused kernels (shiftDot), and for the frames they do not take (fewer than
// 8 columns of g with both source pixels in the frame) each frame's g built blockRows
// rows (simdBlock pixels) at a time into a buffer that stays in L1 and the float32 block
// kernels run on it against the same rows of the masks (blocks of at most simdBlock
// pixels summed in float32, the blocks in float64, as unshifted), against 4 masks or
// more two frames at a time where the fused kernels are missing (dotPair: each weight
// loaded serves both), else one (a frame's sums then depend on its own shift only).
// Frames whose rows come out NaN or infinite are recomputed (shiftExact).
func (k *shiftFlat[N]) subpixel(tile []byte, start, frames int, shifts []float64, acc []float64) {
	px := asNative[N](tile)
	h, w, nm := k.h, k.w, k.nMasks
	p := h * w
	var done []bool // frames the fused kernels computed
	if k.job != nil {
		k.dot, k.job = newShiftDot[N](k.job), nil
	}
	if k.dot != nil {
		done = k.dot.tile(px, frames, shifts[2*start:2*(start+frames)], acc)
	}
	for f := 0; f < frames; {
		if done != nil && done[f] {
			k.copies.exactRow(px, start, f, shifts, acc[f*nm:(f+1)*nm])
			f++
			continue
		}
		n := 1
		if f+1 < frames && nm >= 4 && k.dot == nil {
			n = 2
		}
		rows := acc[f*nm : (f+n)*nm]
		clear(rows)
		for i := range n {
			k.frames[i].begin(px[(f+i)*p:(f+i+1)*p], shifts[2*(start+f+i)], shifts[2*(start+f+i)+1], true)
		}
		for u0 := 0; u0 < h; u0 += k.blockRows {
			b := (min(h, u0+k.blockRows) - u0) * w
			for i := range n {
				k.frames[i].block(k.g[i][:b], b/w)
			}
			for c0 := 0; c0 < b; c0 += simdBlock {
				c1 := min(b, c0+simdBlock)
				k0 := u0*w + c0
				for m0 := 0; m0 < nm; m0 += simdGroup {
					gn := min(simdGroup, nm-m0)
					mw := k.masks[m0*p+k0:]
					pf := &prefetcher{w: mw, ldw: p, rows: gn}
					switch {
					case n == 2:
						dotPair(k.f32, k.g[0][c0:c1], k.g[1][c0:c1], mw, p, pf, rows[m0:m0+gn], rows[nm+m0:nm+m0+gn], k.part)
					case gn >= 4 && k.odd != nil:
						dotPair(k.f32, k.g[0][c0:c1], k.g[0][c0:c1], mw, p, pf, rows[m0:m0+gn], k.odd[:gn], k.part)
					default:
						dotBlock(k.f32, k.g[0][c0:c1], mw, p, pf, rows[m0:m0+gn], k.part)
					}
				}
			}
		}
		for i := range n {
			row := rows[i*nm : (i+1)*nm]
			for m := range row {
				row[m] *= k.frames[i].scale
			}
			k.copies.exactRow(px, start, f+i, shifts, row)
		}
		f += n
	}
}
