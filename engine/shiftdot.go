package engine

import (
	"unsafe"

	"github.com/stemdot/stemdot/masks"
)

// shiftDotArgs are the arguments of a fused shifted-mask kernel (shiftdot_amd64.s), in
// the layout the assembly reads.
type shiftDotArgs struct {
	p       unsafe.Pointer // 0: pixel P of the first row and column
	dq      int            // 8: bytes from P to Q (0: Q is P)
	stride  int            // 16: bytes between source rows (0: one row for every row)
	h       *float32       // 24: the row buffer H at the first column
	w       *float32       // 32: mask 0's weight at the first row and column
	ldw     int            // 40: bytes between masks
	wstride int            // 48: bytes between rows of a mask
	rows    int            // 56
	n       int            // 64: columns, at least 8
	tail    *[8]uint32     // 72: the lanes of the last vector not done before it
	beta    float32        // 80
	alpha   float32        // 84
	ynext   int            // 88
	flush   int            // 96: rows per float64 flush
	out     *float64       // 104: M × 8 float64 lane sums, added to
	cnt     int            // 112: scratch (rows to the next flush)
	n16     int            // 120: scratch (n rounded down to 16)
}

// shiftDot computes the rows of frames with dense masks shifted by any (dy, dx) in one
// pass over each native frame, through the fused kernels (shiftdot_amd64.s): with the
// bilinear weights scaled as shiftFrames.begin scales them (one weight of each axis 1),
// a source row shifted in x is h = P + β·Q (P the source pixel of weight 1, Q its
// neighbour, β the other weight over it), a row of g the blend of that h and the
// previous source row's (kept in a row buffer H) with α, and g meets the masks' weights
// in registers: 3 multiply-adds a pixel for 1 mask, 2 + M for M, where building g into a
// buffer and reading it back took a store, a load and a pass more (one core, 256×256
// uint16 frames in place, a descan plane, BenchmarkCPUWorkerShifted, medians of 3 runs,
// four sets: 1 mask 0.33-0.37× → 0.55-0.66× of unshifted, 4 masks 0.37-0.40× →
// 0.49-0.54×; float32 0.44-0.55× → 0.66-0.74×, 0.56-0.57× → 0.71-0.82×). In cache
// (BenchmarkShiftDot) they run at 0.43-0.47× (1 mask) and 0.52× (4 masks) of the
// unshifted kernels: per 8 pixels two conversions and 2 + M multiply-adds against one
// and M. Converting each source pixel once into a row in L1 and reading P and Q from
// there was slower (1 mask 11.5 → 9.0 GB/s, 4 masks 7.1 → 5.9, 3 runs). The kernels run over the masks' box (rows and columns outside which
// every mask is zero) and there over the columns of g whose two source pixels lie in
// the source row (rows of at most simdBlock pixels summed in float32 lanes, the lanes in
// float64, as the block kernels sum blocks); the one column with one source pixel in
// the row is added by edge; the first and last rows of g, with one source row outside
// the frame, go through the kernels with H cleared or a zero source row. Stacks of 3
// or more masks take 4, 2 and 1 at a time; the frames of a tile take turns a block of
// rows at a time (dotBytes). Whole-pixel shifts in one axis or both take the same path
// (Q = P, β = 0; α = 0). Results are float32 sums as the unshifted kernels' are; a
// frame's do not depend on the frames beside it.
type shiftDot[N native] struct {
	*dotStack
	h, w, nMasks int
	kernels      *[3]func(*shiftDotArgs)
	plans        []dotPlan
	done         []bool
	hbufs        []float32 // H of each frame of a tile: one row each
	zeroW        []float32 // a zero row of weights (priming H)
	zeroPx       []N       // a zero source row (the last row of g), with a pixel on each side
	out          []float64 // each frame's float64 lane sums: 4 masks × 8
	scratch      [8]float64
	tails        [8][8]uint32 // tails[n%8]
	// The edge column (edge): g's column, the stack's columns met there so far
	// (transposed: nMasks × sig_y), the float32 block kernels and their scratch.
	gcol []float32
	cols map[int][]float32
	f32  *groupKernels[float32]
	part []float32
}

// dotStack is a job's dense stack for shiftDot (shared by its workers: Job.dotStack),
// with the box of rows [r0, r1) and columns [c0, c1) outside which every mask is zero:
// the kernels run over g's pixels in it only (a disk or a ring of a few percent of the
// pixels: a fraction of the frame).
type dotStack struct {
	masks          []float32 // nMasks × sig_y × sig_x
	r0, r1, c0, c1 int
	colZero        []bool // columns where every mask is zero
}

// dotStack returns the job's dotStack: Masks.Data, or a dense copy of a stack held in
// CSR form only.
func (j *Job) dotStack() *dotStack {
	j.dotOnce.Do(func() {
		h, w := j.Masks.SigY, j.Masks.SigX
		d := &dotStack{masks: j.Masks.Dense(), r0: h, c0: w, colZero: make([]bool, w)}
		for i := range d.colZero {
			d.colZero[i] = true
		}
		for i, v := range d.masks {
			if v != 0 {
				u, c := i%(h*w)/w, i%w
				d.r0, d.r1, d.c0, d.c1 = min(d.r0, u), max(d.r1, u+1), min(d.c0, c), max(d.c1, c+1)
				d.colZero[c] = false
			}
		}
		if d.r0 >= d.r1 { // every mask zero: no rows
			d.r0, d.r1, d.c0, d.c1 = 0, 0, 0, w
		}
		j.dot = d
	})
	return j.dot
}

// newShiftDot returns the fused kernels of a float32 job's dense masks (Masks.Data, or
// made dense) for pixel type N, or nil where they are missing (no AVX2 and FMA) or the
// frames are narrower than 8 pixels.
func newShiftDot[N native](job *Job) *shiftDot[N] {
	h, w, nMasks := job.Masks.SigY, job.Masks.SigX, job.NMasks
	kern := shiftDotKernels[N]()
	if kern == nil || w < 8 || simdKernels[float32]() == nil {
		return nil
	}
	k := &shiftDot[N]{dotStack: job.dotStack(), h: h, w: w, nMasks: nMasks, kernels: kern,
		zeroW: make([]float32, w), zeroPx: make([]N, w+2),
		gcol: make([]float32, h), cols: map[int][]float32{}, f32: simdKernels[float32](), part: make([]float32, max(nMasks, 24))}
	for r := range k.tails {
		for j := range 8 {
			if r == 0 || j >= 8-r {
				k.tails[r][j] = ^uint32(0)
			}
		}
	}
	return k
}

// dotPlan is what shiftDot computes a frame with: its kernel arguments, less the
// pointers (set per call), and the rows and columns of g they cover.
type dotPlan struct {
	a         shiftDotArgs
	ok        bool // the kernels take the frame: n ≥ 8
	lo, px    int  // g column lo reads P at source column lo + px (Q at + dq/size)
	rn        int  // g row u takes source row u + rn (and u + rn − 1 where fy > 0)
	u0, u1    int  // g rows whose source row u + rn is in the frame
	prime     bool // H starts as h of source row u0 + rn − 1 (else zero)
	bottom    bool // g row bottomRow takes source row h − 1 only (fy > 0)
	bottomRow int
	kx, dq    int     // for edge
	fy, scale float64 // fraction in y; the scale of the weights (g is built as g/scale)
}

// plan returns the plan of a frame shifted by (dy, dx).
func (k *shiftDot[N]) plan(dy, dx float64) dotPlan {
	h, w := k.h, k.w
	ky, fy := split(dy)
	kx, fx := split(dx)
	// x: g column v reads P at source column v + px, Q at v + px + dq.
	sx, beta, px, dq := 1.0, 0.0, kx, 0
	lo, hi := max(0, -kx), min(w, w-kx)
	if fx > 0 {
		hi = min(w, w-kx-1)
		if 1-fx >= fx {
			sx, beta, dq = 1-fx, fx/(1-fx), 1
		} else {
			sx, beta, px, dq = fx, (1-fx)/fx, kx+1, -1
		}
	}
	// The columns of the masks' box, at least 8 where [lo, hi) holds them.
	if l, r := max(lo, k.c0), min(hi, k.c1); r-l >= 8 {
		lo, hi = l, r
	} else {
		r = min(hi, max(r, l+8))
		lo, hi = max(lo, min(l, r-8)), r
	}
	n := hi - lo
	// y: g row u takes h of source row u + rn (hn) and, where fy > 0, H (h of row
	// u + rn − 1): g = H + α·hn (ynext 0) or hn + α·H (ynext 1).
	sy, alpha, ynext, rn := 1.0, 0.0, 1, ky
	if fy > 0 {
		rn = ky + 1
		if 1-fy >= fy {
			sy, alpha, ynext = 1-fy, fy/(1-fy), 0
		} else {
			sy, alpha, ynext = fy, (1-fy)/fy, 1
		}
	}
	var zero N
	size := int(unsafe.Sizeof(zero))
	pl := dotPlan{ok: n >= 8, lo: lo, px: px, rn: rn, kx: kx, dq: dq, fy: fy, scale: sx * sy,
		a: shiftDotArgs{dq: dq * size, stride: w * size, n: n, tail: &k.tails[n&7], beta: float32(beta), alpha: float32(alpha),
			ynext: ynext, flush: max(1, simdBlock/max(n, 1)), wstride: 4 * w, ldw: 4 * h * w}}
	// The rows: those of the box whose source row u + rn is in the frame, and the row
	// u = h − rn, whose source row u + rn − 1 is the frame's last, where it is in the box.
	u1 := min(h, h-rn)
	pl.u0, pl.u1 = max(0, -rn, k.r0), min(u1, k.r1)
	pl.bottom = fy > 0 && u1 < h && u1 >= k.r0 && u1 < k.r1
	first := pl.u0
	if pl.u0 >= pl.u1 {
		first = u1
	}
	if r := first + rn - 1; fy > 0 && r >= 0 && r < h && (pl.u0 < pl.u1 || pl.bottom) {
		pl.prime = true
	}
	pl.u1 = max(pl.u1, pl.u0)
	pl.bottomRow = u1
	return pl
}

// dotBytes bounds the weights of a block of rows of g: the kernel calls for the frames of
// a tile take turns a block of rows at a time, so that the block's weights serve them
// all from L2 (a stack of 4 masks of 256×256 is 1 MiB, more than a core's L2 of 512 KiB
// on the machine measured; 1 mask, 256 KiB, is one block).
const dotBytes = 256 << 10

// tile sets the rows (nMasks values each) of the frames of px, frame f shifted by
// (shifts[2f], shifts[2f+1]), and returns, for each frame, whether the kernels took it
// (plan's ok); the rows of the others are left alone.
func (k *shiftDot[N]) tile(px []N, frames int, shifts []float64, acc []float64) []bool {
	h, w, nm := k.h, k.w, k.nMasks
	p := h * w
	if cap(k.plans) < frames {
		k.plans = make([]dotPlan, frames)
		k.hbufs = make([]float32, frames*w)
		k.out = make([]float64, frames*32)
	}
	plans := k.plans[:frames]
	done := k.done[:0]
	for f := range plans {
		plans[f] = k.plan(shifts[2*f], shifts[2*f+1])
		done = append(done, plans[f].ok)
		if plans[f].ok {
			clear(acc[f*nm : (f+1)*nm])
		}
	}
	k.done = done
	for m0 := 0; m0 < nm; {
		g, ki := 4, 2 // masks of this pass, kernel
		switch nm - m0 {
		case 1:
			g, ki = 1, 0
		case 2, 3:
			g, ki = 2, 1
		}
		kern := k.kernels[ki]
		base := m0 * p
		for f := range plans {
			pl := &plans[f]
			if !pl.ok {
				continue
			}
			hb := k.hbufs[f*w : (f+1)*w]
			if pl.prime {
				first := pl.u0
				if pl.u0 == pl.u1 {
					first = pl.bottomRow
				}
				b := pl.a
				b.p, b.h, b.w, b.ldw, b.wstride, b.rows, b.out = k.src(px[f*p:(f+1)*p], pl, first+pl.rn-1, 1), &hb[pl.lo], &k.zeroW[0], 0, 0, 1, &k.scratch[0]
				k.kernels[0](&b)
			} else {
				clear(hb)
			}
			clear(k.out[f*32 : f*32+8*g])
		}
		rb := max(1, dotBytes/(4*w*g)) // rows per block
		for b0 := 0; b0 < h; b0 += rb {
			b1 := min(h, b0+rb)
			for f := range plans {
				pl := &plans[f]
				if !pl.ok {
					continue
				}
				hb, out := k.hbufs[f*w:(f+1)*w], &k.out[f*32]
				if r0, r1 := max(b0, pl.u0), min(b1, pl.u1); r0 < r1 {
					b := pl.a
					b.p, b.h, b.w, b.rows, b.out = k.src(px[f*p:(f+1)*p], pl, r0+pl.rn, r1-r0), &hb[pl.lo], &k.masks[base+r0*w+pl.lo], r1-r0, out
					_ = k.masks[base+(g-1)*p+(r1-1)*w+pl.lo+pl.a.n-1]
					kern(&b)
				}
				if u := pl.bottomRow; pl.bottom && u >= b0 && u < b1 {
					b := pl.a
					b.p, b.stride, b.h, b.w, b.rows, b.out = unsafe.Pointer(&k.zeroPx[1]), 0, &hb[pl.lo], &k.masks[base+u*w+pl.lo], 1, out
					_ = k.masks[base+(g-1)*p+u*w+pl.lo+pl.a.n-1]
					kern(&b)
				}
			}
		}
		for f := range plans {
			if !plans[f].ok {
				continue
			}
			for m := range g {
				var s float64
				for _, v := range k.out[f*32+8*m : f*32+8*m+8] {
					s += v
				}
				acc[f*nm+m0+m] = s
			}
		}
		m0 += g
	}
	for f := range plans {
		pl := &plans[f]
		if !pl.ok {
			continue
		}
		row := acc[f*nm : (f+1)*nm]
		if pl.dq != 0 {
			k.edge(px[f*p:(f+1)*p], pl, row)
		}
		for m := range row {
			row[m] *= pl.scale
		}
	}
	return done
}

// src is P of source row r of frame, the first of rows source rows of a call (each read
// from column lo + px + min(0, dq) to lo + px + max(0, dq) + n − 1).
func (k *shiftDot[N]) src(frame []N, pl *dotPlan, r, rows int) unsafe.Pointer {
	w := k.w
	_ = frame[(r+rows-1)*w+pl.lo+pl.px+max(0, pl.dq)+pl.a.n-1]
	_ = frame[r*w+pl.lo+pl.px+min(0, pl.dq)]
	return unsafe.Pointer(&frame[r*w+pl.lo+pl.px])
}

// edge adds the products at the one column v of g whose two source pixels have one in
// the frame's row (a frame shifted by kx + fx, fx > 0), where a mask is not zero there:
// source column 0 (weight wx1) or sig_x − 1 (wx0), the other outside. The column of g is
// built in float32 as the kernel builds g (c: the pixel's scaled weight, 1 for P, β for
// Q) and meets the masks' column v (cols: the stack's columns, transposed once each)
// through the float32 block kernels, sig_y rows a block.
func (k *shiftDot[N]) edge(frame []N, pl *dotPlan, row []float64) {
	h, w := k.h, k.w
	kx, rn, dq, fy, beta, alpha, ynext := pl.kx, pl.rn, pl.dq, pl.fy, pl.a.beta, pl.a.alpha, pl.a.ynext
	v, sc, c := -kx-1, 0, beta // g column, source column, weight
	if dq < 0 {
		c = 1
	}
	if v < 0 {
		v, sc, c = w-kx-1, w-1, 1
		if dq < 0 {
			c = beta
		}
	}
	if v < 0 || v >= w || k.colZero[v] {
		return
	}
	src := func(r int) float32 {
		if r < 0 || r >= h {
			return 0
		}
		return c * float32(frame[r*w+sc])
	}
	g := k.gcol
	for u := range g {
		hn := src(u + rn)
		switch {
		case fy == 0:
			g[u] = hn
		case ynext == 0:
			g[u] = src(u+rn-1) + alpha*hn
		default:
			g[u] = hn + alpha*src(u+rn-1)
		}
	}
	col := k.cols[v]
	if col == nil {
		if len(k.cols) >= 8 { // a few columns kept: a descan plane meets a few
			clear(k.cols)
		}
		col = make([]float32, k.nMasks*h)
		for m := range k.nMasks {
			for u := range h {
				col[m*h+u] = k.masks[m*h*w+u*w+v]
			}
		}
		k.cols[v] = col
	}
	for u0 := 0; u0 < h; u0 += simdBlock {
		u1 := min(h, u0+simdBlock)
		dotBlock(k.f32, g[u0:u1], col[u0:], h, &prefetcher{w: col[u0:], ldw: h, rows: k.nMasks}, row, k.part)
	}
}

// sparseDotBytes bounds the dense copy of a sparse stack that shiftSparseDot makes (per
// worker).
const sparseDotBytes = 16 << 20

// sparseDot tells whether a float32 job with a sparse stack c of nMasks masks on frames
// of sig computes shifted masks through shiftDot on the stack made dense (shiftSparseDot):
// fewer than packedMinMasks masks, a dense copy of at most sparseDotBytes, and nonzeros
// at least 1/16 of the pixels of the masks' box (rows and columns of nonzeros) per mask:
// a gather of 4 source pixels costs about as much as 16 pixels of the fused kernel (one
// core, 256×256 uint16 frames: the ring of radii 60-70, 20% of its box, 3.4 ns a nonzero
// gathered against 0.17 ns a pixel).
func sparseDot(c *masks.CSR, sig [2]int) bool {
	if c.N >= packedMinMasks || int64(c.N)*int64(sig[0]*sig[1])*4 > sparseDotBytes || len(c.Col) == 0 {
		return false
	}
	r0, r1, c0, c1 := int32(sig[0]), int32(0), int32(sig[1]), int32(0)
	for _, i := range c.Col {
		y, x := i/int32(sig[1]), i%int32(sig[1])
		r0, r1, c0, c1 = min(r0, y), max(r1, y+1), min(c0, x), max(c1, x+1)
	}
	return 16*int64(len(c.Col)) >= int64(c.N)*int64(r1-r0)*int64(c1-c0)
}

// shiftSparseDot computes a float32 job's sparse stack of few masks (sparseDot) shifted
// through the fused kernels on its dense copy, over the masks' box only (shiftDot), the
// frames they do not take through the gather (shiftSparse).
type shiftSparseDot[N native] struct {
	dot    *shiftDot[N]
	gather *shiftSparse[N]
	nMasks int
}

func (k *shiftSparseDot[N]) apply(tile []byte, start, frames int, shifts []float64, acc []float64) {
	px := asNative[N](tile)
	p, nm := k.dot.h*k.dot.w, k.nMasks
	done := k.dot.tile(px, frames, shifts[2*start:2*(start+frames)], acc)
	for f := range frames {
		row := acc[f*nm : (f+1)*nm]
		switch {
		case !done[f]:
			k.gather.apply(tile[f*p*int(unsafe.Sizeof(px[0])):], start+f, 1, shifts, row)
		case k.gather.ex != nil && !finite(row):
			exactShiftedRow(k.gather.ex, px[f*p:(f+1)*p], shifts[2*(start+f)], shifts[2*(start+f)+1], row)
		}
	}
}
