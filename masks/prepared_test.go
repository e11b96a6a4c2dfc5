package masks

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrepared: a prepared stack is a copy in the form a run applies it (CSR only when
// sparse enough, else dense), with the source's counts, names and weights (float32 and
// Lo parts), unchanged by later changes of the source; NaN weights are refused once.
func TestPrepared(t *testing.T) {
	sig := [2]int{16, 16}
	ring, err := Ring(sig, 8, 8, 1, 2) // 12 of 256 pixels: held in CSR form
	require.NoError(t, err)
	dense := make([]float64, 2*256)
	for i := range dense {
		dense[i] = float64(i%7) + 1.0/3 // every weight nonzero, not exact in float32
	}
	heavy, err := New64(2, 16, 16, dense, []string{"a", "b"})
	require.NoError(t, err)
	onePixel := make([]float64, 256)
	onePixel[17] = 0.1
	light, err := New64(1, 16, 16, onePixel, nil) // dense, sparse enough, with Lo parts
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		s      *Stack
		sparse bool
	}{{"csr only", ring, true}, {"dense", heavy, false}, {"dense sparse enough", light, true}} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.name == "csr only", c.s.Data == nil)
			want, counts := c.s.Dense64(), c.s.Count()
			p, err := c.s.Prepared()
			require.NoError(t, err)
			assert.Equal(t, c.sparse, p.Data == nil && p.Sparse != nil, "held in CSR form only")
			assert.Equal(t, counts, p.Count())
			assert.Equal(t, c.s.MaskNames(), p.Names)
			assert.Equal(t, want, p.Dense64(), "the weights with their Lo parts")
			require.NoError(t, p.Validate(sig))
			if c.sparse {
				assert.Equal(t, p.Sparse.Val64(), (&CSR{Val: p.Sparse.Val, Lo: p.Sparse.Lo}).Val64())
			}
			// The prepared stack owns its weights.
			if c.s.Data != nil {
				c.s.Data[17] += 5
			} else {
				c.s.Sparse.Val[0] += 5
			}
			assert.Equal(t, want, p.Dense64())
		})
	}

	bad := make([]float32, 256)
	bad[3] = float32(math.NaN())
	s := &Stack{N: 1, SigY: 16, SigX: 16, Data: bad}
	_, err = s.Prepared()
	var we *WeightError
	require.ErrorAs(t, err, &we)
	assert.EqualError(t, err, `mask 0 ("mask0") has weight NaN at pixel (y=0, x=3)`)
}
