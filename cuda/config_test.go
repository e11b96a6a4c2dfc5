package cuda

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

func TestConfigDefaults(t *testing.T) {
	cfg, err := RunnerConfig{DType: dataset.Uint16, Pixels: 256 * 256, NMasks: 2, Masks: make([]float32, 2*256*256)}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 256, cfg.TileFrames, "32 MiB of 128 KiB frames")
	assert.Equal(t, DefaultStreams, cfg.Streams)

	cfg, err = RunnerConfig{DType: dataset.Float32, Pixels: 4096 * 4096, NMasks: 1, Masks: make([]float32, 4096*4096),
		TileFrames: 0, Streams: 2}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.TileFrames, "a 64 MiB frame still makes a tile")
	assert.Equal(t, 2, cfg.Streams)
}

func TestConfigErrors(t *testing.T) {
	stack := &masks.Stack{N: 2, SigY: 2, SigX: 2, Data: []float32{1, 0, 0, 0, 0, 0, 0, 2}}
	good := RunnerConfig{DType: dataset.Uint8, Pixels: 4, NMasks: 2, Masks: stack.Data}
	_, err := good.withDefaults()
	require.NoError(t, err)
	sparse := good
	sparse.Masks, sparse.Sparse = nil, stack.ToCSR()
	_, err = sparse.withDefaults()
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		edit func(c *RunnerConfig)
		want string
	}{
		{"dtype", func(c *RunnerConfig) { c.DType = dataset.Int16 }, "dtype int16 is not supported"},
		{"device", func(c *RunnerConfig) { c.Device = -1 }, "device -1"},
		{"pixels", func(c *RunnerConfig) { c.Pixels = 0 }, "0 pixels and 2 masks"},
		{"weights", func(c *RunnerConfig) { c.Masks = c.Masks[:7] }, "mask stack holds 7 weights, want 2 masks x 4 pixels = 8"},
		{"tile", func(c *RunnerConfig) { c.TileFrames = -1 }, "TileFrames -1"},
		{"streams", func(c *RunnerConfig) { c.Streams = 17 }, "Streams 17: want 1 to 16"},
		{"csr shape", func(c *RunnerConfig) { c.Sparse = &masks.CSR{N: 1, Pixels: 4, RowPtr: []int32{0, 0}} }, "CSR masks are 1 masks × 4 pixels, want 2 × 4"},
		{"csr rowptr", func(c *RunnerConfig) { c.Sparse = &masks.CSR{N: 2, Pixels: 4, RowPtr: []int32{0, 1}} }, "RowPtr has 2 entries (want 3"},
		{"csr order", func(c *RunnerConfig) {
			c.Sparse = &masks.CSR{N: 2, Pixels: 4, RowPtr: []int32{0, 1, 0}, Col: []int32{0}, Val: []float32{1}}
		}, "RowPtr decreases at mask 1"},
		{"csr nnz", func(c *RunnerConfig) {
			c.Sparse = &masks.CSR{N: 2, Pixels: 4, RowPtr: []int32{0, 1, 2}, Col: []int32{0}, Val: []float32{1}}
		}, "1 columns and 1 values, RowPtr says 2"},
		{"csr col", func(c *RunnerConfig) {
			c.Sparse = &masks.CSR{N: 2, Pixels: 4, RowPtr: []int32{0, 1, 1}, Col: []int32{4}, Val: []float32{1}}
		}, "pixel index 4 outside [0, 4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			_, err := c.withDefaults()
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckRun(t *testing.T) {
	read := func([]byte, int, int) error { return nil }
	cfg := RunnerConfig{NMasks: 3}
	assert.NoError(t, cfg.checkRun(2, 4, read, make([]float32, 12), nil))
	assert.ErrorContains(t, cfg.checkRun(2, 4, read, make([]float32, 11), nil), "out32 holds 11 values, frames [2, 4) x 3 masks need 12")
	assert.ErrorContains(t, cfg.checkRun(-1, 4, read, make([]float32, 12), nil), "frame range [-1, 4)")
	assert.ErrorContains(t, cfg.checkRun(0, 1, nil, make([]float32, 12), nil), "read function")
	cfg.Float64 = true
	assert.ErrorContains(t, cfg.checkRun(0, 4, read, make([]float32, 12), make([]float64, 2)), "out64 holds 2 values")
	assert.NoError(t, cfg.checkRun(0, 4, read, nil, make([]float64, 12)))
}

// TestLoPairs: a LoPairs runner needs Float64 and an even mask count, takes NMasks/2
// results per frame, and adds results m and n+m of each frame.
func TestLoPairs(t *testing.T) {
	cfg := RunnerConfig{DType: dataset.Uint16, Pixels: 4, NMasks: 6, Masks: make([]float32, 24), LoPairs: true}
	_, err := cfg.withDefaults()
	assert.ErrorContains(t, err, "LoPairs needs Float64")
	cfg.Float64 = true
	c, err := cfg.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 3, c.Results())
	read := func([]byte, int, int) error { return nil }
	assert.NoError(t, c.checkRun(0, 4, read, nil, make([]float64, 12)))
	assert.ErrorContains(t, c.checkRun(0, 4, read, nil, make([]float64, 11)), "frames [0, 4) x 3 masks need 12")

	res := []float64{1, 2, 3, 0.5, 0.25, 0.125, 10, 20, 30, -1, -2, -3}
	dst := make([]float64, 6)
	addLoPairs(dst, res, 3)
	assert.Equal(t, []float64{1.5, 2.25, 3.125, 9, 18, 27}, dst)
}

// TestShiftedRunnerErrors: invalid shifts and frame ranges beyond them are refused,
// naming the problem.
func TestShiftedRunnerErrors(t *testing.T) {
	s := &masks.Stack{N: 2, SigY: 6, SigX: 4, Data: make([]float32, 48)}
	base := RunnerConfig{DType: dataset.Uint8, Pixels: 24, NMasks: 2, Masks: s.Data, Shifts: make([]float64, 8), SigX: 4}
	for _, c := range []struct {
		edit func(*RunnerConfig)
		want string
	}{
		{func(c *RunnerConfig) { c.Float64 = true }, "Shifts with Float64"},
		{func(c *RunnerConfig) { c.SigX = 5 }, "SigX 5 does not divide the 24 pixels"},
		{func(c *RunnerConfig) { c.Shifts = make([]float64, 3) }, "Shifts hold 3 values"},
		{func(c *RunnerConfig) { c.Shifts = []float64{0, 0, math.Inf(1), 0} }, "shift dy of frame 1 is +Inf"},
	} {
		cfg := base
		c.edit(&cfg)
		_, err := cfg.withDefaults()
		require.ErrorContains(t, err, c.want)
	}
	for _, dt := range []dataset.DType{dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float64} {
		cfg := base
		cfg.DType = dt
		_, err := cfg.withDefaults()
		require.NoError(t, err, "%s frames with shifts: g_f is built in float32 on the device", dt)
		cfg.Shifts = nil
		_, err = cfg.withDefaults()
		require.ErrorContains(t, err, "is not supported on the GPU without Shifts")
	}
	cfg, err := base.withDefaults()
	require.NoError(t, err)
	require.ErrorContains(t, cfg.checkOut(2, 5, make([]float32, 10), nil), "frames [2, 5): Shifts hold the shifts of 4 frames")
}
