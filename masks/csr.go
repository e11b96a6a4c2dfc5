package masks

import (
	"fmt"
	"math"
)

// DefaultSparseDensity is the fraction of nonzero weights under which a stack is applied
// in CSR form: below it, gathering the nonzero pixels costs less than a dense product.
const DefaultSparseDensity = 0.1

// CSR is a mask stack in compressed sparse row form: row m holds the nonzero weights of
// mask m. The nonzeros of mask m are Col[RowPtr[m]:RowPtr[m+1]] (pixel index y*SigX+x,
// ascending) with weights Val[RowPtr[m]:RowPtr[m+1]]. Applied to a frame f (Pixels
// values, C order): out[m] = Σ_k Val[k]·f[Col[k]] for k in [RowPtr[m], RowPtr[m+1]).
type CSR struct {
	// N is the number of masks (rows), Pixels the length of one mask (columns).
	N, Pixels int
	// RowPtr has N+1 entries, RowPtr[0] = 0 and RowPtr[N] = len(Col) = len(Val).
	RowPtr []int32
	Col    []int32
	Val    []float32
	// Lo, for weights given in float64 that are not all exact in float32, holds the rest
	// of each: weight k = float64(Val[k]) + float64(Lo[k]) (see Split and Stack.Lo).
	// Nil otherwise.
	Lo []float32

	// prepared, set by Stack.Prepared only, says that the CSR form was checked and does
	// not change; val64 is then Val64's result, made once.
	prepared bool
	val64    []float64
}

// Bytes is the memory the CSR form takes: 8 bytes per nonzero (12 with Lo parts), 4 per
// row pointer.
func (c *CSR) Bytes() int64 {
	return 8*int64(len(c.Val)) + 4*int64(len(c.Lo)) + 4*int64(len(c.RowPtr))
}

// weight64 is nonzero k's weight with its Lo part.
func (c *CSR) weight64(k int32) float64 {
	if c.Lo != nil {
		return float64(c.Val[k]) + float64(c.Lo[k])
	}
	return float64(c.Val[k])
}

// Val64 returns the weights with their Lo parts, in float64: parallel to Col. The
// slice is the caller's to read, not to change: that of a prepared stack
// (Stack.Prepared) is made once and shared by its runs.
func (c *CSR) Val64() []float64 {
	if c.prepared {
		return c.val64
	}
	out := make([]float64, len(c.Val))
	for k := range out {
		out[k] = c.weight64(int32(k))
	}
	return out
}

// appendNonzero appends a weight given in float64 as the next nonzero, at pixel col,
// splitting it (Split) and keeping the Lo parts when one is not zero.
func (c *CSR) appendNonzero(col int32, w float64) {
	hi, lo := Split(w)
	if lo != 0 && c.Lo == nil {
		c.Lo = make([]float32, len(c.Val), cap(c.Val))
	}
	c.Col = append(c.Col, col)
	c.Val = append(c.Val, hi)
	if c.Lo != nil {
		c.Lo = append(c.Lo, lo)
	}
}

// Counts is what one scan of a stack's weights tells about it (Stack.Count): a run
// counts its stack once and uses the counts throughout, where each call of NNZ,
// Density or PreferSparse scans a dense stack again (the fields of a Stack are its
// caller's to change, so a count is kept only in a prepared stack: Stack.Prepared).
type Counts struct {
	// NNZ is the number of nonzero weights.
	NNZ int
	// Density is NNZ over N·SigY·SigX, in [0, 1] (0 for a stack without weights).
	Density float64
	// PreferSparse says that the stack is applied in CSR form: Density under
	// DefaultSparseDensity, or a stack held in CSR form only.
	PreferSparse bool
}

// Count scans the stack's weights once (none for a stack held in CSR form only, or
// prepared: Prepared) and returns NNZ, Density and PreferSparse.
func (s *Stack) Count() Counts {
	if s.counts != nil {
		return *s.counts
	}
	if s.Data == nil && s.Sparse != nil {
		c := Counts{NNZ: len(s.Sparse.Val), PreferSparse: true}
		if w := s.N * s.Pixels(); w > 0 {
			c.Density = float64(c.NNZ) / float64(w)
		}
		return c
	}
	c := Counts{NNZ: countNonzero(s.Data)}
	if len(s.Data) > 0 {
		c.Density = float64(c.NNZ) / float64(len(s.Data))
	}
	c.PreferSparse = c.Density < DefaultSparseDensity
	return c
}

// countNonzero counts the nonzero values of v (±0 is zero) without a branch per value,
// 4 values per step into independent counts: a branch on weights half of which are
// zero mispredicts every other value (6.4 ms for 16 masks of 256×256, against this
// loop's 0.8 ms, on this project's machine: BenchmarkCount).
func countNonzero(v []float32) int {
	nz := func(x float32) int {
		b := math.Float32bits(x) & 0x7fffffff // |x|'s bits: 0 only for ±0
		return int((b | -b) >> 31)
	}
	var n0, n1, n2, n3 int
	i := 0
	for ; i+4 <= len(v); i += 4 {
		q := v[i : i+4 : i+4]
		n0 += nz(q[0])
		n1 += nz(q[1])
		n2 += nz(q[2])
		n3 += nz(q[3])
	}
	for ; i < len(v); i++ {
		n0 += nz(v[i])
	}
	return n0 + n1 + n2 + n3
}

// NNZ is the number of nonzero weights in the stack (Count: a scan of a dense stack).
func (s *Stack) NNZ() int { return s.Count().NNZ }

// Density is the fraction of nonzero weights, in [0, 1] (0 for a stack without weights;
// Count: a scan of a dense stack).
func (s *Stack) Density() float64 { return s.Count().Density }

// PreferSparse reports whether the stack is sparse enough (Density under
// DefaultSparseDensity) to be applied in CSR form; a stack held in CSR form only always
// is (Count: a scan of a dense stack).
func (s *Stack) PreferSparse() bool { return s.Count().PreferSparse }

// ToCSR returns the stack in CSR form: the one it is held in, or a new one built from
// Data. The stack must be valid (see Validate: every constructor of this package checks
// it), which bounds its weights by MaxWeights so that indices and counts fit in int32.
func (s *Stack) ToCSR() *CSR {
	if s.Sparse != nil {
		return s.Sparse
	}
	nnz := s.NNZ()
	c := &CSR{
		N:      s.N,
		Pixels: s.Pixels(),
		RowPtr: make([]int32, s.N+1),
		Col:    make([]int32, 0, nnz),
		Val:    make([]float32, 0, nnz),
	}
	if s.Lo != nil {
		c.Lo = make([]float32, 0, nnz)
	}
	p := s.Pixels()
	for m := 0; m < s.N; m++ {
		for i, v := range s.Data[m*p : (m+1)*p] {
			if v != 0 {
				c.Col = append(c.Col, int32(i))
				c.Val = append(c.Val, v)
				if s.Lo != nil {
					c.Lo = append(c.Lo, s.Lo[m*p+i])
				}
			}
		}
		c.RowPtr[m+1] = int32(len(c.Col))
	}
	return c
}

// Validate checks that c is a consistent CSR form of nMasks masks of pixels pixels: row
// pointers starting at 0 and never decreasing, as many columns and values as nonzeros,
// and every column a pixel index in [0, pixels). The CSR form of a prepared stack
// (Stack.Prepared) was checked once: only its sizes are compared.
func (c *CSR) Validate(nMasks, pixels int) error {
	if c.N != nMasks || c.Pixels != pixels {
		return fmt.Errorf("CSR masks are %d masks × %d pixels, want %d × %d", c.N, c.Pixels, nMasks, pixels)
	}
	if c.prepared {
		return nil
	}
	if len(c.RowPtr) != c.N+1 || c.RowPtr[0] != 0 {
		return fmt.Errorf("CSR RowPtr has %d entries (want %d, starting at 0)", len(c.RowPtr), c.N+1)
	}
	for m := range c.N {
		if c.RowPtr[m+1] < c.RowPtr[m] {
			return fmt.Errorf("CSR RowPtr decreases at mask %d (%d < %d)", m, c.RowPtr[m+1], c.RowPtr[m])
		}
	}
	if nnz := int(c.RowPtr[c.N]); len(c.Col) != nnz || len(c.Val) != nnz {
		return fmt.Errorf("CSR has %d columns and %d values, RowPtr says %d nonzeros", len(c.Col), len(c.Val), nnz)
	}
	if c.Lo != nil && len(c.Lo) != len(c.Val) {
		return fmt.Errorf("CSR has %d values but %d Lo parts", len(c.Val), len(c.Lo))
	}
	for k, col := range c.Col {
		if col < 0 || int(col) >= pixels {
			return fmt.Errorf("CSR nonzero %d has pixel index %d outside [0, %d)", k, col, pixels)
		}
	}
	return nil
}
