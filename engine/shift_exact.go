package engine

import (
	"slices"

	"github.com/stemdot/stemdot/masks"
)

// shiftExact recomputes, for a job with shifts, the rows of float frames whose results
// came out NaN or infinite, from the definition at the top of shift.go: with s_m the
// shifted mask,
//
//	out[m] = Σ_{y,x: s_m(y,x) ≠ 0} s_m(y,x)·frame(y,x),
//	s_m(y,x) = Σ_{a,b ∈ {0,1}: wy_a·wx_b ≠ 0} wy_a·wx_b·mask_m(y − ky − a, x − kx − b),
//
// in float64, so that, as exactRow does for unshifted masks, a NaN or Inf pixel spoils
// only the masks whose shifted weight at it is not zero. The equal sum over g_f that the
// kernels compute does not keep that rule: it reads the pixels a bilinear weight of 0
// gives (0·Inf is NaN), and it adds an infinite pixel once for each mask pixel it reaches,
// so that mask weights of both signs give ∞ − ∞ (NaN) where s_m is finite, or cancel to
// 0. Here the finite pixels' part is Σ mask·g_f over each mask's nonzero weights, g_f
// taken from the finite pixels only, and each non-finite pixel adds s_m(y,x)·pixel where
// s_m(y,x) is not 0. One per kernel: it holds scratch buffers, of the size of the
// frame's non-finite pixels.
type shiftExact struct {
	h, w int
	// The stack: dense weights (Data, with Lo parts where set) or, when dense is nil, the
	// CSR form's nonzeros with their float64 weights.
	dense, lo   []float32
	rowPtr, col []int32
	val         []float64
	bad         []int     // the frame's non-finite pixels, ascending
	s           []float64 // s_m at each of them
}

func newShiftExact(s *masks.Stack) *shiftExact {
	e := &shiftExact{h: s.SigY, w: s.SigX}
	if s.Data != nil {
		e.dense, e.lo = s.Data, s.Lo
	} else {
		e.rowPtr, e.col, e.val = s.Sparse.RowPtr, s.Sparse.Col, s.Sparse.Val64()
	}
	return e
}

// each calls fn with the pixel and the float64 weight of each nonzero weight of mask m.
func (e *shiftExact) each(m int, fn func(i int, v float64)) {
	if e.dense == nil {
		for k := e.rowPtr[m]; k < e.rowPtr[m+1]; k++ {
			fn(int(e.col[k]), e.val[k])
		}
		return
	}
	p := e.h * e.w
	for i, v := range e.dense[m*p : (m+1)*p] {
		if v != 0 { // a zero float32 part has a zero rest (masks.Split)
			w := float64(v)
			if e.lo != nil {
				w += float64(e.lo[m*p+i])
			}
			fn(i, w)
		}
	}
}

// exactShiftedRow sets row (one value per mask) to the masks shifted by (dy, dx) applied
// to frame (see shiftExact).
func exactShiftedRow[N native](e *shiftExact, frame []N, dy, dx float64, row []float64) {
	h, w := e.h, e.w
	ky, fy := split(dy)
	kx, fx := split(dx)
	wy, wx := [2]float64{1 - fy, fy}, [2]float64{1 - fx, fx}
	e.bad = e.bad[:0]
	for i, v := range frame {
		if nonFinite(float64(v)) {
			e.bad = append(e.bad, i)
		}
	}
	// taps calls fn with the pixel (y, x) that weight wy_a·wx_b ≠ 0 takes from mask pixel
	// (u, v), for each such pixel in the frame.
	taps := func(u, v int, fn func(i int, c float64)) {
		for a := range 2 {
			y := u + ky + a
			if wy[a] == 0 || y < 0 || y >= h {
				continue
			}
			for b := range 2 {
				if x := v + kx + b; wx[b] != 0 && x >= 0 && x < w {
					fn(y*w+x, wy[a]*wx[b])
				}
			}
		}
	}
	if cap(e.s) < len(e.bad) {
		e.s = make([]float64, len(e.bad))
	}
	s := e.s[:len(e.bad)]
	for m := range row {
		var sum float64
		clear(s)
		e.each(m, func(i int, val float64) {
			taps(i/w, i%w, func(j int, c float64) {
				if x := float64(frame[j]); !nonFinite(x) {
					sum += val * c * x
				} else if r, ok := slices.BinarySearch(e.bad, j); ok {
					s[r] += c * val
				}
			})
		})
		for r, sw := range s {
			if sw != 0 {
				sum += sw * float64(frame[e.bad[r]])
			}
		}
		row[m] = sum
	}
}
