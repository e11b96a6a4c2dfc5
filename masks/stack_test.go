package masks

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	data := make([]float32, 2*3*4)
	for i := range data {
		data[i] = float32(i) - 5
	}
	s, err := New(2, 3, 4, data, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"mask0", "mask1"}, s.Names)
	assert.Equal(t, 12, s.Pixels())
	// Mask m, pixel (y, x) is Data[(m*SigY+y)*SigX+x].
	assert.Equal(t, float32((1*3+2)*4+3-5), s.Mask(1)[2*4+3])
	assert.Equal(t, data[12:], s.Mask(1))

	s, err = New(1, 2, 2, []float32{1, 0, 0, 1}, []string{"diag"})
	require.NoError(t, err)
	assert.Equal(t, []string{"diag"}, s.Names)
}

// A stack built by hand without Names is valid; its masks are "mask0", "mask1", ... in
// messages, MaskNames, Concat and LoPairs.
func TestStackWithoutNames(t *testing.T) {
	s := &Stack{N: 2, SigY: 1, SigX: 2, Data: []float32{1, 2, 3, 4}}
	require.NoError(t, s.Validate([2]int{1, 2}))
	assert.Equal(t, []string{"mask0", "mask1"}, s.MaskNames())
	assert.Nil(t, s.Names, "MaskNames leaves the stack as it is")
	assert.EqualError(t, s.Validate([2]int{2, 1}), `mask shape (1, 2) does not match sig_shape (2, 1) (masks "mask0" to "mask1")`)
	assert.Equal(t, []string{"mask0", "mask1", "mask0.lo", "mask1.lo"}, s.LoPairs().Names)
	c, err := Concat(s, s)
	require.NoError(t, err)
	assert.Equal(t, []string{"mask0", "mask1", "mask0", "mask1"}, c.Names)

	s.Data[3] = float32(math.Inf(1))
	assert.ErrorContains(t, s.Validate([2]int{1, 2}), `mask 1 ("mask1") has weight +Inf at pixel (y=0, x=1)`)
	s.Data[3] = 4
	s.Names = []string{"only one"}
	assert.EqualError(t, s.Validate([2]int{1, 2}), "mask stack has 2 masks but 1 names")
}

func TestNewAndValidateErrors(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	cases := []struct {
		name       string
		n, sy, sx  int
		data       []float32
		names      []string
		wantErrMsg string
	}{
		{"no masks", 0, 2, 2, nil, nil, "mask stack is empty (0 masks)"},
		{"negative sig", 1, -2, 2, make([]float32, 4), nil, "sig_shape (-2, 2) must be positive"},
		{"short data", 2, 2, 3, make([]float32, 11), nil, "mask stack of shape (2, 2, 3) needs 12 weights, has 11"},
		{"long data", 1, 2, 3, make([]float32, 7), nil, "needs 6 weights, has 7"},
		{"names", 2, 2, 2, make([]float32, 8), []string{"a"}, "mask stack has 2 masks but 1 names"},
		{"too many weights", 2, 1 << 15, 1 << 15, nil, nil, "2 masks of 32768×32768 pixels are too many: a stack holds at most 2³¹−1 weights, 1 mask of this sig shape"},
		{"too many pixels", 1, 1 << 40, 1 << 40, nil, nil, "exceeds 2147483647 pixels"},
		{"NaN", 2, 3, 4, func() []float32 { d := make([]float32, 24); d[12+2*4+3] = nan; return d }(), []string{"a", "b"},
			`mask 1 ("b") has weight NaN at pixel (y=2, x=3)`},
		{"Inf", 1, 3, 4, func() []float32 { d := make([]float32, 12); d[5] = inf; return d }(), nil,
			`mask 0 ("mask0") has weight -Inf at pixel (y=1, x=1)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.n, c.sy, c.sx, c.data, c.names)
			assert.Nil(t, s)
			assert.ErrorContains(t, err, c.wantErrMsg)
		})
	}
}

func TestValidateSigShape(t *testing.T) {
	s, err := Disk([2]int{4, 5}, 2, 2, 1)
	require.NoError(t, err)
	require.NoError(t, s.Validate([2]int{4, 5}))
	assert.EqualError(t, s.Validate([2]int{5, 4}), `mask shape (4, 5) does not match sig_shape (5, 4) (mask "disk")`)

	var nilStack *Stack
	assert.EqualError(t, nilStack.Validate([2]int{4, 5}), "mask stack is nil")

	// A stack edited after construction is checked again.
	s.Data = s.Data[:19]
	assert.ErrorContains(t, s.Validate([2]int{4, 5}), "needs 20 weights, has 19")
}

func TestConcat(t *testing.T) {
	sig := [2]int{6, 7}
	disk, err := Disk(sig, 3, 3, 2)
	require.NoError(t, err)
	com, err := COM(sig, 3, 3, 0)
	require.NoError(t, err)
	ring, err := Ring(sig, 3, 3, 1, 3)
	require.NoError(t, err)

	s, err := Concat(disk, com, ring)
	require.NoError(t, err)
	assert.Equal(t, 5, s.N)
	assert.Equal(t, []string{"disk", "com_sum", "com_y", "com_x", "ring"}, s.Names)
	assert.Equal(t, disk.Mask(0), s.Mask(0))
	for m := 0; m < 3; m++ {
		assert.Equal(t, com.Mask(m), s.Mask(1+m))
	}
	assert.Equal(t, ring.Mask(0), s.Mask(4))
	// The result holds copies.
	s.Data[0] = 42
	assert.Equal(t, float32(0), disk.Data[0])

	other, err := Disk([2]int{7, 6}, 3, 3, 2)
	require.NoError(t, err)
	_, err = Concat(disk, other)
	assert.EqualError(t, err, `concat: mask stack 1: mask shape (7, 6) does not match sig_shape (6, 7) (mask "disk")`)
	_, err = Concat()
	assert.EqualError(t, err, "concat: no mask stacks")
	_, err = Concat(nil, disk)
	assert.EqualError(t, err, "concat: mask stack 0 is nil")
	_, err = Concat(disk, nil)
	assert.EqualError(t, err, "concat: mask stack 1: mask stack is nil")
}
