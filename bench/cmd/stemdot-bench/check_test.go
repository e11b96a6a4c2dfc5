package main

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

func TestCompare(t *testing.T) {
	// 3 frames × 2 masks; mask 1's largest value is 1000, so 0.05 off is within 1e-4.
	ref := []float64{1, 10, 2, 1000, 3, -20}
	got := []float32{1, 10, 2, 1000.05, 3, -20}
	dev, err := compare(got, nil, ref, 2)
	require.NoError(t, err)
	assert.InDelta(t, 0.05/1000, dev, 1e-7)

	got[0] = 1.001 // mask 0's largest value is 3: 0.001/3 > 1e-4
	_, err = compare(got, nil, ref, 2)
	assert.ErrorContains(t, err, "frame 0 mask 0: got 1.001000047, want 1 (|Δ| = 0.00033 of the mask's largest value 3")

	got[0] = float32(math.NaN())
	_, err = compare(got, nil, ref, 2)
	assert.ErrorContains(t, err, "frame 0 mask 0: got NaN")

	// Sampled rows: ref holds frames 2 and 0 in that order.
	got = []float32{1, 10, 2, 1000, 3, -20}
	_, err = compare(got, []int{2, 0}, []float64{3, -20, 1, 10}, 2)
	require.NoError(t, err)
	_, err = compare(got, []int{0, 2}, []float64{3, -20, 1, 10}, 2)
	assert.Error(t, err)

	_, err = compare(got[:4], nil, ref, 2)
	assert.ErrorContains(t, err, "result holds 4 values, reference 6")
}

func TestDecode(t *testing.T) {
	e := binary.NativeEndian
	out := make([]float64, 2)
	b := e.AppendUint16(e.AppendUint16(nil, 7), 65535)
	require.NoError(t, decode(dataset.Uint16, b, out))
	assert.Equal(t, []float64{7, 65535}, out)
	b = e.AppendUint32(e.AppendUint32(nil, math.Float32bits(-1.5)), math.Float32bits(3e9))
	require.NoError(t, decode(dataset.Float32, b, out))
	assert.Equal(t, []float64{-1.5, float64(float32(3e9))}, out)
	require.NoError(t, decode(dataset.Int16, e.AppendUint16(e.AppendUint16(nil, 0xffff), 2), out))
	assert.Equal(t, []float64{-1, 2}, out)
	assert.Error(t, decode(dataset.Invalid, b, out))
}

func TestParseMaskCase(t *testing.T) {
	c, err := parseMaskCase(" 16")
	require.NoError(t, err)
	assert.Equal(t, maskCase{N: 16, Kind: dense}, c)
	c, err = parseMaskCase("ring")
	require.NoError(t, err)
	assert.Equal(t, "ring", c.String())
	for _, bad := range []string{"0", "-3", "disk", ""} {
		_, err := parseMaskCase(bad)
		assert.ErrorContains(t, err, "want a positive count", bad)
	}
	assert.Equal(t, "1,4,ring", joinCases([]maskCase{{1, dense}, {4, dense}, {1, sparseRing}}))
}
