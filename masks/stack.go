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
// Selected pixels weigh 1, others 0, except for the first-moment masks of COM.
package masks

import (
	"errors"
	"fmt"
	"math"

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
	// Names label each mask ("disk", "ring", "com_sum", ...); len(Names) == N.
	Names []string
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
	if names == nil && n > 0 {
		names = make([]string, n)
		for m := range names {
			names[m] = fmt.Sprintf("mask%d", m)
		}
	}
	s := &Stack{N: n, SigY: sy, SigX: sx, Data: data, Names: names}
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
	if s.Data != nil {
		return s.Data
	}
	out := make([]float32, 0, s.N*s.Pixels())
	for m := range s.N {
		out = append(out, s.Mask(m)...)
	}
	return out
}

// DenseBytes is the size of the stack held dense: N·SigY·SigX float32 weights.
func (s *Stack) DenseBytes() int64 { return int64(s.N) * int64(s.Pixels()) * 4 }

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
	data := make([]float32, s.N*s.Pixels())
	c := s.Sparse
	for m := range s.N {
		row := data[m*s.Pixels():]
		for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
			row[c.Col[k]] = c.Val[k]
		}
	}
	return &Stack{N: s.N, SigY: s.SigY, SigX: s.SigX, Data: data, Names: s.Names}, nil
}

// Validate checks that the stack is well formed and applies to frames of sig_shape sig =
// (sig_y, sig_x). It returns an error for an empty stack (N < 1), non-positive signal
// sizes, more than MaxWeights weights, len(Data) != N*SigY*SigX, len(Names) != N, a
// signal shape other than sig (naming both shapes and the masks), and a NaN or ±Inf weight (naming the mask
// and the pixel).
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
	}
	if len(s.Names) != s.N {
		return fmt.Errorf("mask stack has %d masks but %d names", s.N, len(s.Names))
	}
	if s.SigY != sig[0] || s.SigX != sig[1] {
		return fmt.Errorf("mask shape (%d, %d) does not match sig_shape (%d, %d) (%s)", s.SigY, s.SigX, sig[0], sig[1], s.label())
	}
	bad := func(m, p int, v float32) error {
		return fmt.Errorf("mask %d (%q) has weight %v at pixel (y=%d, x=%d)", m, s.Names[m], v, p/s.SigX, p%s.SigX)
	}
	if s.Data == nil {
		c := s.Sparse
		for m := range s.N {
			for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
				if v := c.Val[k]; math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return bad(m, int(c.Col[k]), v)
				}
			}
		}
		return nil
	}
	for i, v := range s.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return bad(i/s.Pixels(), i%s.Pixels(), v)
		}
	}
	return nil
}

// label names the masks of the stack for errors: `mask "disk"`, or `masks "a[0]" to
// "a[2]"`. LoadNPY names masks after their file, so this names the file too.
func (s *Stack) label() string {
	if s.N == 1 {
		return fmt.Sprintf("mask %q", s.Names[0])
	}
	return fmt.Sprintf("masks %q to %q", s.Names[0], s.Names[s.N-1])
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
	n, nnz, sparse := 0, 0, false
	for i, s := range stacks {
		if err := s.Validate(sig); err != nil {
			return nil, fmt.Errorf("concat: mask stack %d: %w", i, err)
		}
		n += s.N
		nnz += s.NNZ()
		sparse = sparse || s.Data == nil
	}
	if n > MaxWeights/first.Pixels() {
		return nil, tooManyMasks(n, sig[0], sig[1])
	}
	names := make([]string, 0, n)
	for _, s := range stacks {
		names = append(names, s.Names...)
	}
	if sparse && float64(nnz) < DefaultSparseDensity*float64(n*first.Pixels()) {
		c := &CSR{N: n, Pixels: first.Pixels(), RowPtr: make([]int32, 1, n+1), Col: make([]int32, 0, nnz), Val: make([]float32, 0, nnz)}
		for _, s := range stacks {
			part := s.ToCSR()
			base := int32(len(c.Col))
			for _, r := range part.RowPtr[1:] {
				c.RowPtr = append(c.RowPtr, base+r)
			}
			c.Col = append(c.Col, part.Col...)
			c.Val = append(c.Val, part.Val...)
		}
		return newSparse(n, sig[0], sig[1], c, names)
	}
	if err := memlimit.Check(fmt.Sprintf("a dense stack of %d masks of %d×%d pixels", n, sig[0], sig[1]), int64(n)*int64(first.Pixels())*4,
		"use fewer or smaller masks"); err != nil {
		return nil, fmt.Errorf("concat: %w", err)
	}
	data := make([]float32, 0, n*first.Pixels())
	for _, s := range stacks {
		if s.Data != nil {
			data = append(data, s.Data...)
			continue
		}
		for m := range s.N {
			data = append(data, s.Mask(m)...)
		}
	}
	return New(n, sig[0], sig[1], data, names)
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
