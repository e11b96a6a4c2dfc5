// Package masks builds and validates mask stacks: the virtual detectors applied to every
// frame of a 4D-STEM scan.
//
// A Stack has shape (n_masks, sig_y, sig_x), float32, C order. Applying it to a frame f
// (shape sig_y × sig_x) gives n_masks numbers, out[m] = Σ_{y,x} mask[m,y,x]·f[y,x], as
// LiberTEM's ApplyMasksUDF does.
//
// # Coordinates
//
// Generators work in pixel coordinates of the signal: x is the column, y the row, pixel
// centres lie at integer coordinates and (x, y) = (0, 0) is the first stored pixel. Centres
// and radii are in pixels and may be fractional; a centre may lie outside the frame as
// long as the mask selects at least one pixel.
//
// # Pixel-inclusion rules
//
// The rules are those of LiberTEM (src/libertem/masks.py, functions circular and ring;
// src/libertem/udf/com.py, com_masks_factory), with d² = (x−cx)² + (y−cy)²:
//
//   - Disk (virtual bright field): pixel selected iff d² ≤ r². A disk of radius 1 centred
//     on a pixel selects that pixel and its 4 edge neighbours.
//   - Ring (annular dark field): selected iff ri² < d² ≤ ro², that is disk(ro) minus
//     disk(ri): the outer circle is included, the inner one excluded.
//   - Point: the one pixel (x, y).
//   - Rect: the pixels with x ≤ column < x+w and y ≤ row < y+h.
//   - COM: the selection is the disk rule with radius r, or the whole frame for r = 0 (as
//     LiberTEM's r = inf).
//
// Selected pixels weigh 1, others 0, except for the first-moment masks of COM. Every
// generator selects the pixels of its shape that lie in the frame: a disk, ring, rect or
// COM disk partly outside is clipped to the frame; one that selects no pixel is an error.
package masks

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/stemdot/stemdot/internal/memlimit"
)

// Stack is a stack of masks of shape (N, SigY, SigX), float32, held dense (Data, C
// order) or, when few of its weights are nonzero, in CSR form only (Sparse, Data nil): a
// deep stack of small masks (16384 one-pixel masks of 256×256 are 4 GiB dense, 192 KiB
// in CSR form) stays sparse from the file or generator to the kernel.
type Stack struct {
	// N is the number of masks.
	N int
	// SigY, SigX is the signal shape the masks apply to, in pixels.
	SigY, SigX int
	// Data holds N*SigY*SigX weights; mask m, pixel (y, x) is Data[(m*SigY+y)*SigX+x].
	// It is nil for a stack held in CSR form only.
	Data []float32
	// Sparse is the stack in CSR form when it is held so (then Data is nil), else nil.
	Sparse *CSR
	// Names label each mask ("disk", "ring", "com_sum", ...): len(Names) == N, or nil for
	// "mask0", "mask1", ... (see MaskNames).
	Names []string
	// Lo, for a dense stack whose weights were given in float64 and are not all exact in
	// float32, holds what Data leaves out: weight = float64(Data[i]) + float64(Lo[i]), to
	// within 2⁻⁴⁸ (3.6e-15) of the weight (see Split). Float64 runs use both; float32 runs
	// use Data. Nil otherwise; a stack held in CSR form keeps its own in Sparse.Lo.
	Lo []float32

	// counts, set by Prepared only, are the counts of a stack whose weights do not change
	// (and were checked): Count returns them, Validate does not scan the weights again.
	counts *Counts
}

// Prepared returns a copy of the stack made once to be applied in many runs (the frame
// ranges a Dask worker computes for one job, a C ABI stemdot_masks handle): checked by
// Validate once, held in the form a run applies it (in CSR form only when PreferSparse,
// the dense weights dropped, with CSR.Val64's float64 weights made once; else dense,
// Data and Lo copied), with its Counts taken once, so that a run's Count, NNZ,
// PreferSparse, ToCSR, Val64 and Validate (and CSR.Validate) do not scan the weights
// again: 22 ms of every apply of the 128 masks of 256×256 of make bench-dask, 0.3 ms
// left (BenchmarkApplyFixedCost). Runs give results bit-identical to those of s. The
// copy owns its weights and names; its fields must not be changed afterwards (the
// counts would no longer be its own): prepare a new stack instead. Errors: Validate's,
// and a copy that does not fit in memory (internal/memlimit, errs.Resources).
func (s *Stack) Prepared() (*Stack, error) {
	if err := s.Validate([2]int{s.SigY, s.SigX}); err != nil {
		return nil, err
	}
	c := s.Count()
	p := &Stack{N: s.N, SigY: s.SigY, SigX: s.SigX, Names: slices.Clone(s.MaskNames()), counts: &c}
	if c.PreferSparse {
		need := 16*int64(c.NNZ) + 4*int64(s.N+1) // with Val64's float64 weights
		if !s.Exact() {
			need += 4 * int64(c.NNZ)
		}
		if err := memlimit.Check(fmt.Sprintf("the prepared CSR form of %s (%d nonzero weights)", s.label(), c.NNZ), need, "use fewer or smaller masks"); err != nil {
			return nil, err
		}
		if s.Data != nil {
			p.Sparse = s.ToCSR() // a new CSR form
		} else {
			o := s.Sparse
			p.Sparse = &CSR{N: o.N, Pixels: o.Pixels, RowPtr: slices.Clone(o.RowPtr), Col: slices.Clone(o.Col), Val: slices.Clone(o.Val), Lo: slices.Clone(o.Lo)}
		}
		p.Sparse.val64 = p.Sparse.Val64()
		p.Sparse.prepared = true
		return p, nil
	}
	if err := memlimit.Check(fmt.Sprintf("the prepared copy of %s", s.label()), s.DenseBytes(), "use fewer or smaller masks"); err != nil {
		return nil, err
	}
	p.Data, p.Lo = slices.Clone(s.Data), slices.Clone(s.Lo)
	return p, nil
}

// Split splits a float64 weight into its float32 rounding hi and the float32 rounding lo
// of the rest: float64(hi) + float64(lo) is w to within 2⁻⁴⁸·|w| (the rest w − hi is
// exact in float64 and below 2⁻²⁴·|w|). A float32 lets a weight through with a relative
// error of up to 6e-8; the pair, used by float64 runs, carries it at float64 precision.
func Split(w float64) (hi, lo float32) {
	hi = float32(w)
	return hi, float32(w - float64(hi))
}

// minLargestWeight is the least magnitude the largest weight of a mask given in float64
// may have, unless all its weights are 0: 2⁻¹⁰² (1.97e-31). At or above it, the float32
// rest of a weight that large (Split), under 2⁻²⁴ of it, is a normal float32, so that the
// mask keeps float64 precision; far below it, the float32 rounding of its weights is
// subnormal (under 1.18e-38: fewer bits) or 0 (under 1.4e-45). The weights of a mask are
// not checked one by one: a weight 2²⁴ times smaller than the mask's largest is under
// float32's precision of the sums in any case.
const minLargestWeight = 0x1p-102

// largestWeights holds the largest |weight| of each mask of a stack given in float64, and
// the first finite weight beyond float32's range.
type largestWeights struct {
	abs []float64
	big float64 // that weight (0: none)
	at  int     // its element, m·pixels + pixel
}

func newLargestWeights(n int) *largestWeights { return &largestWeights{abs: make([]float64, n)} }

// add adds weight w, element e of a stack of masks of pixels pixels.
func (l *largestWeights) add(e, pixels int, w float64) {
	a := math.Abs(w)
	l.abs[e/pixels] = max(l.abs[e/pixels], a)
	if a > math.MaxFloat32 && a <= math.MaxFloat64 && l.big == 0 {
		l.big, l.at = w, e
	}
}

// tooLarge returns the *WeightError of the first finite weight beyond float32's range,
// as given (a weight of 1e300 is not "+Inf", its float32 rounding), naming its mask
// (names: the stack's, nil for "mask0", ...) and pixel (sx: sig_x); nil when none is.
func (l *largestWeights) tooLarge(names []string, sy, sx int) error {
	if l.big == 0 {
		return nil
	}
	m, p := l.at/(sy*sx), l.at%(sy*sx)
	name := fmt.Sprintf("mask%d", m)
	if m < len(names) {
		name = names[m]
	}
	return &WeightError{fmt.Sprintf("mask %d (%q) has weight %v at pixel (y=%d, x=%d): %s", m, name, l.big, p/sx, p%sx, weightRange)}
}

// weightRange says why a weight beyond float32's range is refused, in messages.
var weightRange = fmt.Sprintf("weights must be finite and within float32's range, ±%.4g (stemdot holds a weight as a float32 and a float32 rest, even for float64 results); scale larger ones down", math.MaxFloat32)

// check returns a *WeightError for the first mask whose weights are not all 0 but all
// under minLargestWeight in magnitude.
func (l *largestWeights) check() error {
	for m, a := range l.abs {
		if a > 0 && a < minLargestWeight {
			return &WeightError{fmt.Sprintf("mask %d: its largest weight, %.4g, is under 2⁻¹⁰² (%.3g), too small for stemdot, which holds a weight as a float32 and a float32 rest (its weights would lose precision or round to 0); scale the mask up by a power of two, and its results down by the same", m, a, float64(minLargestWeight))}
		}
	}
	return nil
}

// New64 is New for weights given in float64 (n*sy*sx, C order): Data holds their float32
// rounding and, when some are not exact in float32, Lo the rest (see Split). A mask whose
// weights are not all 0 but all tiny (under minLargestWeight, 2⁻¹⁰²) is refused with a
// *WeightError.
func New64(n, sy, sx int, data []float64, names []string) (*Stack, error) {
	hi := make([]float32, len(data))
	var lo []float32
	p := max(sy*sx, 1)
	largest := newLargestWeights((len(data) + p - 1) / p) // New checks that it is n
	for i, w := range data {
		largest.add(i, p, w)
		h, l := Split(w)
		hi[i] = h
		if l != 0 && lo == nil {
			lo = make([]float32, len(data))
		}
		if lo != nil {
			lo[i] = l
		}
	}
	if sy > 0 && sx > 0 {
		if err := largest.tooLarge(names, sy, sx); err != nil {
			return nil, err
		}
	}
	s, err := New(n, sy, sx, hi, names)
	if err != nil {
		return nil, err
	}
	if err := largest.check(); err != nil {
		return nil, err
	}
	s.Lo = lo // as long as Data: New checked its length
	return s, nil
}

// Exact reports whether the stack's weights are exact in float32 (it has no Lo part).
func (s *Stack) Exact() bool { return s.Lo == nil && (s.Sparse == nil || s.Sparse.Lo == nil) }

// Dense64 returns all weights dense, N·SigY·SigX float64 in C order, with their Lo parts:
// a new slice.
func (s *Stack) Dense64() []float64 {
	out := make([]float64, s.N*s.Pixels())
	if s.Data == nil && s.Sparse != nil {
		c := s.Sparse
		for m := range s.N {
			row := out[m*s.Pixels():]
			for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
				row[c.Col[k]] = c.weight64(k)
			}
		}
		return out
	}
	for i, v := range s.Data {
		out[i] = float64(v)
	}
	for i, v := range s.Lo {
		out[i] += float64(v)
	}
	return out
}

// MaxWeights is the largest number of weights (N*SigY*SigX) a stack may hold, 2³¹−1
// (8 GiB of float32), so that pixel indices and nonzero counts of its CSR form fit in
// int32.
const MaxWeights = math.MaxInt32

// New returns the stack of n masks of shape (sy, sx) holding data (n*sy*sx float32
// weights, C order, used without copying) and names (one per mask; nil names the masks
// "mask0", "mask1", ...). It returns an error, from Validate, for non-positive sizes,
// a data or names length that does not match, more than MaxWeights weights, or NaN/Inf
// weights.
func New(n, sy, sx int, data []float32, names []string) (*Stack, error) {
	s := &Stack{N: n, SigY: sy, SigX: sx, Data: data, Names: names}
	s.Names = s.MaskNames()
	if err := s.Validate([2]int{sy, sx}); err != nil {
		return nil, err
	}
	return s, nil
}

// Pixels is SigY*SigX, the length of one mask.
func (s *Stack) Pixels() int { return s.SigY * s.SigX }

// Mask returns mask m as a slice of Pixels() weights: a view of Data (not a copy), or, for
// a stack held in CSR form only, a new dense slice.
func (s *Stack) Mask(m int) []float32 {
	if s.Data == nil && s.Sparse != nil {
		out := make([]float32, s.Pixels())
		c := s.Sparse
		for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
			out[c.Col[k]] = c.Val[k]
		}
		return out
	}
	return s.Data[m*s.Pixels() : (m+1)*s.Pixels()]
}

// Dense returns all weights dense, N·SigY·SigX float32 in C order: Data itself, or, for a
// stack held in CSR form only, a new slice.
func (s *Stack) Dense() []float32 {
	return s.dense().Data
}

// DenseBytes is the size of the stack held dense: N·SigY·SigX float32 weights, twice
// that with Lo parts.
func (s *Stack) DenseBytes() int64 {
	if !s.Exact() {
		return int64(s.N) * int64(s.Pixels()) * 8
	}
	return int64(s.N) * int64(s.Pixels()) * 4
}

// Bytes is the memory the stack's weights take in the form it is held: dense, or CSR
// (a float32 value and an int32 pixel index per nonzero, an int32 row pointer per mask).
func (s *Stack) Bytes() int64 {
	if s.Data == nil && s.Sparse != nil {
		return s.Sparse.Bytes()
	}
	return s.DenseBytes()
}

// newSparse returns the stack of n masks of shape (sy, sx) held in CSR form c, checked
// by Validate, or dense when it has too many nonzeros to be applied sparse (see
// settle).
func newSparse(n, sy, sx int, c *CSR, names []string) (*Stack, error) {
	s := &Stack{N: n, SigY: sy, SigX: sx, Sparse: c, Names: names}
	if err := s.Validate([2]int{sy, sx}); err != nil {
		return nil, err
	}
	return s.settle()
}

// settle turns a stack held in CSR form dense when it is not sparse enough to be applied
// sparse (PreferSparse), checking first that the dense form fits in memory.
func (s *Stack) settle() (*Stack, error) {
	if s.Data != nil || s.Sparse == nil || float64(len(s.Sparse.Val)) < DefaultSparseDensity*float64(s.N*s.Pixels()) {
		return s, nil
	}
	if err := memlimit.Check(fmt.Sprintf("the dense form of %s (%d nonzero weights of %d)", s.label(), len(s.Sparse.Val), s.N*s.Pixels()),
		s.DenseBytes(), "use fewer or smaller masks"); err != nil {
		return nil, err
	}
	return s.dense(), nil
}

// dense returns the stack held dense: s itself, or a dense copy of its CSR form (with
// its Lo parts).
func (s *Stack) dense() *Stack {
	if s.Data != nil {
		return s
	}
	c := s.Sparse
	d := &Stack{N: s.N, SigY: s.SigY, SigX: s.SigX, Data: make([]float32, s.N*s.Pixels()), Names: s.Names}
	c.scatter(d.Data, c.Val)
	if c.Lo != nil {
		d.Lo = make([]float32, len(d.Data))
		c.scatter(d.Lo, c.Lo)
	}
	return d
}

// scatter writes val (c.Val or c.Lo) at the nonzeros' places in dst, N·Pixels dense
// weights in C order (zero elsewhere already).
func (c *CSR) scatter(dst, val []float32) {
	for m := range c.N {
		row := dst[m*c.Pixels : (m+1)*c.Pixels]
		for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
			row[c.Col[k]] = val[k]
		}
	}
}

// WeightError is the error for weights stemdot cannot hold: Validate's for a NaN or
// infinite weight, and New64's and LoadNPY's for a mask of tiny weights (see
// minLargestWeight). The stack's sizes are fine, its values are not.
type WeightError struct{ msg string }

func (e *WeightError) Error() string { return e.msg }

// Validate checks that the stack is well formed and applies to frames of sig_shape sig =
// (sig_y, sig_x). It returns an error for an empty stack (N < 1), non-positive signal
// sizes, more than MaxWeights weights, len(Data) != N*SigY*SigX, Names neither nil nor of
// length N, a
// signal shape other than sig (naming both shapes and the masks), and a NaN or ±Inf weight
// (a *WeightError naming the mask and the pixel).
func (s *Stack) Validate(sig [2]int) error {
	if s == nil {
		return errors.New("mask stack is nil")
	}
	if s.N < 1 {
		return fmt.Errorf("mask stack is empty (%d masks)", s.N)
	}
	if err := checkSig([2]int{s.SigY, s.SigX}); err != nil {
		return fmt.Errorf("mask stack: %w", err)
	}
	if s.N > MaxWeights/s.Pixels() {
		return tooManyMasks(s.N, s.SigY, s.SigX)
	}
	if s.Data == nil && s.Sparse != nil {
		if err := s.Sparse.Validate(s.N, s.Pixels()); err != nil {
			return fmt.Errorf("mask stack: %w", err)
		}
	} else if want := s.N * s.Pixels(); len(s.Data) != want {
		return fmt.Errorf("mask stack of shape (%d, %d, %d) needs %d weights, has %d", s.N, s.SigY, s.SigX, want, len(s.Data))
	} else if s.Lo != nil && len(s.Lo) != want {
		return fmt.Errorf("mask stack of shape (%d, %d, %d) has %d weights but %d Lo parts", s.N, s.SigY, s.SigX, want, len(s.Lo))
	}
	if s.Names != nil && len(s.Names) != s.N {
		return fmt.Errorf("mask stack has %d masks but %d names", s.N, len(s.Names))
	}
	if s.SigY != sig[0] || s.SigX != sig[1] {
		return fmt.Errorf("mask shape (%d, %d) does not match sig_shape (%d, %d) (%s)", s.SigY, s.SigX, sig[0], sig[1], s.label())
	}
	if s.counts != nil {
		return nil // Prepared checked the weights, which do not change
	}
	bad := func(m, p int, v float32) error {
		msg := fmt.Sprintf("mask %d (%q) has weight %v at pixel (y=%d, x=%d)", m, s.name(m), v, p/s.SigX, p%s.SigX)
		if math.IsInf(float64(v), 0) {
			msg += ": " + weightRange
		}
		return &WeightError{msg}
	}
	if s.Data == nil {
		c := s.Sparse
		for m := range s.N {
			for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
				if v := c.Val[k]; nonFinite(v) {
					return bad(m, int(c.Col[k]), v)
				}
			}
		}
		return nil
	}
	for i, v := range s.Data {
		if nonFinite(v) {
			return bad(i/s.Pixels(), i%s.Pixels(), v)
		}
	}
	return nil
}

// nonFinite reports whether v is NaN or ±Inf (all exponent bits set): one integer test,
// where math.IsNaN and math.IsInf made Validate's scan of 64 masks of 256×256 take 15 ms
// (4 ms now); Apply scans every stack it runs.
func nonFinite(v float32) bool { return math.Float32bits(v)&0x7f800000 == 0x7f800000 }

// label names the masks of the stack for errors: `mask "disk"`, or `masks "a[0]" to
// "a[2]"`. LoadNPY names masks after their file, so this names the file too.
func (s *Stack) label() string {
	if s.N == 1 {
		return fmt.Sprintf("mask %q", s.name(0))
	}
	return fmt.Sprintf("masks %q to %q", s.name(0), s.name(s.N-1))
}

// name is mask m's name: Names[m], or "mask<m>" without Names.
func (s *Stack) name(m int) string {
	if s.Names == nil {
		return fmt.Sprintf("mask%d", m)
	}
	return s.Names[m]
}

// MaskNames returns the N masks' names: Names, or "mask0", "mask1", ... (a new slice)
// when Names is nil.
func (s *Stack) MaskNames() []string {
	if s.Names != nil {
		return s.Names
	}
	names := make([]string, max(s.N, 0))
	for m := range names {
		names[m] = s.name(m)
	}
	return names
}

// Concat stacks the masks of stacks, in order, into one stack. All must be valid and of
// the same signal shape; Concat returns an error naming the first that is not. The result
// holds copies of the weights: in CSR form when it is sparse enough to be applied so
// (PreferSparse) and one of the stacks is held sparse, else dense (after checking that
// the dense form fits in memory).
func Concat(stacks ...*Stack) (*Stack, error) {
	if len(stacks) == 0 {
		return nil, errors.New("concat: no mask stacks")
	}
	first := stacks[0]
	if first == nil {
		return nil, errors.New("concat: mask stack 0 is nil")
	}
	sig := [2]int{first.SigY, first.SigX}
	n, nnz, sparse, exact := 0, 0, false, true
	for i, s := range stacks {
		if err := s.Validate(sig); err != nil {
			return nil, fmt.Errorf("concat: mask stack %d: %w", i, err)
		}
		n += s.N
		nnz += s.NNZ()
		sparse = sparse || s.Data == nil
		exact = exact && s.Exact()
	}
	if n > MaxWeights/first.Pixels() {
		return nil, tooManyMasks(n, sig[0], sig[1])
	}
	names := make([]string, 0, n)
	for _, s := range stacks {
		names = append(names, s.MaskNames()...)
	}
	if sparse && float64(nnz) < DefaultSparseDensity*float64(n*first.Pixels()) {
		need := 8*int64(nnz) + 4*int64(n+1)
		if !exact {
			need += 4 * int64(nnz)
		}
		if err := memlimit.Check(fmt.Sprintf("a sparse stack of %d masks of %d×%d pixels (%d nonzero weights)", n, sig[0], sig[1], nnz), need,
			"use fewer or smaller masks"); err != nil {
			return nil, fmt.Errorf("concat: %w", err)
		}
		c := &CSR{N: n, Pixels: first.Pixels(), RowPtr: make([]int32, 1, n+1), Col: make([]int32, 0, nnz), Val: make([]float32, 0, nnz)}
		if !exact {
			c.Lo = make([]float32, 0, nnz)
		}
		for _, s := range stacks {
			part := s.ToCSR()
			base := int32(len(c.Col))
			for _, r := range part.RowPtr[1:] {
				c.RowPtr = append(c.RowPtr, base+r)
			}
			c.Col = append(c.Col, part.Col...)
			c.Val = append(c.Val, part.Val...)
			if !exact {
				c.Lo = append(c.Lo, loOrZeros(part.Lo, len(part.Val))...)
			}
		}
		return newSparse(n, sig[0], sig[1], c, names)
	}
	d := &Stack{N: n, SigY: sig[0], SigX: sig[1], Names: names}
	if err := memlimit.Check(fmt.Sprintf("a dense stack of %d masks of %d×%d pixels", n, sig[0], sig[1]), d.DenseBytes(),
		"use fewer or smaller masks"); err != nil {
		return nil, fmt.Errorf("concat: %w", err)
	}
	d.Data = make([]float32, n*first.Pixels())
	if !exact {
		d.Lo = make([]float32, len(d.Data))
	}
	at := 0 // each stack's weights go to [at, at+size)
	for _, s := range stacks {
		size := s.N * s.Pixels()
		if s.Data != nil {
			copy(d.Data[at:], s.Data)
			if s.Lo != nil {
				copy(d.Lo[at:], s.Lo)
			}
		} else { // held in CSR form: written in place, no dense copy of it
			s.Sparse.scatter(d.Data[at:at+size], s.Sparse.Val)
			if s.Sparse.Lo != nil {
				s.Sparse.scatter(d.Lo[at:at+size], s.Sparse.Lo)
			}
		}
		at += size
	}
	return d, nil // every part was validated, and the size checked
}

// loOrZeros is lo, or n zeros when lo is nil.
func loOrZeros(lo []float32, n int) []float32 {
	if lo == nil {
		return make([]float32, n)
	}
	return lo
}

// checkSig checks a signal shape for positive sizes and at most MaxWeights pixels.
func checkSig(sig [2]int) error {
	if sig[0] < 1 || sig[1] < 1 {
		return fmt.Errorf("sig_shape (%d, %d) must be positive", sig[0], sig[1])
	}
	if sig[0] > MaxWeights/sig[1] {
		return fmt.Errorf("sig_shape (%d, %d) exceeds %d pixels", sig[0], sig[1], MaxWeights)
	}
	return nil
}

// tooManyMasks is the error for a stack of n masks of sy×sx pixels that holds more than
// MaxWeights weights.
func tooManyMasks(n, sy, sx int) error {
	return fmt.Errorf("%d masks of %d×%d pixels are too many: a stack holds at most 2³¹−1 weights, %s of this sig shape; split the stack and apply each part in a run of its own",
		n, sy, sx, count(MaxWeights/(sy*sx), "mask"))
}

// count is "n noun", with an s for n != 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// LoPairs returns a stack of 2N masks, held as s is: masks 0..N−1 with s's float32
// weights, masks N..2N−1 with their Lo parts (zero where a weight is exact). Kernels that
// take float32 weights give, for masks m and N+m, two products whose sum in float64 is
// mask m's product at float64 precision (see Split).
func (s *Stack) LoPairs() *Stack {
	names := append(slices.Clone(s.MaskNames()), make([]string, s.N)...)
	for m := range s.N {
		names[s.N+m] = names[m] + ".lo"
	}
	d := &Stack{N: 2 * s.N, SigY: s.SigY, SigX: s.SigX, Names: names}
	if s.Data != nil {
		d.Data = append(slices.Clone(s.Data), loOrZeros(s.Lo, len(s.Data))...)
	} else {
		d.Sparse = s.Sparse.LoPairs()
	}
	return d
}

// LoPairs is Stack.LoPairs for the CSR form: 2N rows, row N+m with row m's Lo parts.
func (c *CSR) LoPairs() *CSR {
	nnz := int32(len(c.Val))
	p := &CSR{N: 2 * c.N, Pixels: c.Pixels, RowPtr: slices.Clone(c.RowPtr),
		Col: append(slices.Clone(c.Col), c.Col...), Val: append(slices.Clone(c.Val), loOrZeros(c.Lo, len(c.Val))...)}
	for _, r := range c.RowPtr[1:] {
		p.RowPtr = append(p.RowPtr, nnz+r)
	}
	return p
}
