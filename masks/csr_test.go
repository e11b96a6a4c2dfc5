package masks

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// applyCSR is the mask-dot product of every row of c with frame, in float64.
func applyCSR(c *CSR, frame []float64) []float64 {
	out := make([]float64, c.N)
	for m := range out {
		for k := c.RowPtr[m]; k < c.RowPtr[m+1]; k++ {
			out[m] += float64(c.Val[k]) * frame[c.Col[k]]
		}
	}
	return out
}

func TestToCSRMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n, sy, sx int
		density   float64
	}{
		{1, 1, 1, 1},
		{3, 5, 7, 0.05},
		{4, 16, 16, 0.01},
		{7, 32, 24, 0.2},
		{2, 9, 11, 0}, // every mask empty
		{5, 12, 10, 0.5},
	} {
		data := make([]float32, c.n*c.sy*c.sx)
		nnz := 0
		for i := range data {
			if rng.Float64() < c.density {
				data[i] = float32(rng.NormFloat64())
				nnz++
			}
		}
		s, err := New(c.n, c.sy, c.sx, data, nil)
		require.NoError(t, err)
		require.Equal(t, nnz, s.NNZ())

		csr := s.ToCSR()
		require.Equal(t, c.n, csr.N)
		require.Equal(t, c.sy*c.sx, csr.Pixels)
		require.Len(t, csr.RowPtr, c.n+1)
		require.Equal(t, int32(0), csr.RowPtr[0])
		require.Equal(t, int32(nnz), csr.RowPtr[c.n])
		require.Len(t, csr.Col, nnz)
		require.Len(t, csr.Val, nnz)
		for m := 0; m < c.n; m++ {
			for k := csr.RowPtr[m]; k < csr.RowPtr[m+1]; k++ {
				assert.NotZero(t, csr.Val[k])
				assert.Equal(t, s.Mask(m)[csr.Col[k]], csr.Val[k])
				if k > csr.RowPtr[m] {
					assert.Less(t, csr.Col[k-1], csr.Col[k], "columns of mask %d ascend", m)
				}
			}
		}

		for trial := 0; trial < 3; trial++ {
			frame := make([]float64, c.sy*c.sx)
			for i := range frame {
				frame[i] = rng.Float64() * 1000
			}
			dense := apply(s, frame)
			sparse := applyCSR(csr, frame)
			for m := range dense {
				assert.InDelta(t, dense[m], sparse[m], 1e-9*(1+abs(dense[m])), "%+v mask %d", c, m)
			}
		}
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestDensityAndPreferSparse(t *testing.T) {
	data := make([]float32, 100)
	for i := 0; i < 9; i++ {
		data[i*11] = 2
	}
	s, err := New(1, 10, 10, data, nil)
	require.NoError(t, err)
	assert.Equal(t, 9, s.NNZ())
	assert.InDelta(t, 0.09, s.Density(), 1e-15)
	assert.True(t, s.PreferSparse())

	data[99] = -1 // density 0.1 = DefaultSparseDensity: not under it
	assert.Equal(t, 10, s.NNZ())
	assert.False(t, s.PreferSparse())

	// A bright-field disk on a 256×256 detector is sparse, whole-frame COM is not.
	disk, err := Disk([2]int{256, 256}, 128, 128, 20)
	require.NoError(t, err)
	assert.True(t, disk.PreferSparse())
	com, err := COM([2]int{256, 256}, 128, 128, 0)
	require.NoError(t, err)
	assert.False(t, com.PreferSparse())
}

// TestCount checks Count's NNZ, Density and PreferSparse against a plain count, for
// dense stacks of every density around DefaultSparseDensity, with negative zeros,
// subnormal and extreme weights, and for the same stacks held in CSR form only.
func TestCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -1, 0.5}
	for _, density := range []float64{0, 0.001, 0.05, 0.0999, 0.1, 0.5, 1} {
		data := make([]float32, 7*9*11)
		want := 0
		for i := range data {
			switch {
			case rng.Float64() < density:
				data[i] = special[rng.IntN(len(special)-1)+1] // nonzero
				if rng.IntN(2) == 0 {
					data[i] = float32(rng.NormFloat64())
				}
			case rng.IntN(3) == 0:
				data[i] = special[0] // -0 counts as zero
			}
			if float64(data[i]) != 0 {
				want++
			}
		}
		s, err := New(7, 9, 11, data, nil)
		require.NoError(t, err)
		got := s.Count()
		wantDensity := float64(want) / float64(len(data))
		assert.Equal(t, Counts{NNZ: want, Density: wantDensity, PreferSparse: wantDensity < DefaultSparseDensity}, got, "density %g", density)
		assert.Equal(t, want, s.NNZ())
		assert.Equal(t, wantDensity, s.Density())
		assert.Equal(t, wantDensity < DefaultSparseDensity, s.PreferSparse())

		csrOnly := &Stack{N: 7, SigY: 9, SigX: 11, Sparse: s.ToCSR()}
		assert.Equal(t, Counts{NNZ: want, Density: wantDensity, PreferSparse: true}, csrOnly.Count(), "density %g in CSR form only", density)
		assert.Equal(t, wantDensity, csrOnly.Density(), "density %g in CSR form only", density)
	}
}

func BenchmarkCount(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	data := make([]float32, 16*256*256)
	for i := range data {
		if rng.IntN(2) == 0 {
			data[i] = rng.Float32()
		}
	}
	s := &Stack{N: 16, SigY: 256, SigX: 256, Data: data}
	for b.Loop() {
		s.Count()
	}
}
