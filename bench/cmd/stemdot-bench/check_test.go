package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
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

func TestDescanPlane(t *testing.T) {
	sub, whole := descanPlane(4, false), descanPlane(4, true)
	assert.InDeltaSlice(t, []float64{-1.2, 0.4, -0.375, -0.275, 0.45, -0.95, 1.275, -1.625}, sub, 1e-12)
	assert.Equal(t, []float64{-1, 0, -0, -0, 0, -1, 1, -2}, whole)
}

// The raw_csr file holds 1% of each frame's pixels in pixel order, and the dataset
// reader densifies it to the events csrReference multiplies.
func TestWriteCSR(t *testing.T) {
	dir := t.TempDir()
	toml, err := writeCSR(dir, []int{2, 3})
	require.NoError(t, err)
	files, cached, err := mapCSR(toml)
	require.NoError(t, err)
	defer files.close()
	assert.Greater(t, cached, 0.0)
	pixels := sig[0] * sig[1]
	require.Len(t, files.indptr, 7)
	assert.Equal(t, int64(6*(pixels/100)), files.indptr[6])
	assert.Equal(t, int64(8*7+6*(pixels/100)*6), files.bytes())

	ds, err := dataset.Open(toml, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.Equal(t, 6, ds.NumFrames())
	frames := make([]byte, 6*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 6, frames))
	pixelsOut := make([]float64, pixels)
	mc := &caseMasks{maskCase: maskCase{N: 1, Kind: dense}, stack: &masks.Stack{N: 1, SigY: sig[0], SigX: sig[1], Data: make([]float32, pixels)}}
	for i := range mc.stack.Data {
		mc.stack.Data[i] = float32(i%7) + 0.5
	}
	ref := csrReference(files, mc)
	for f := range 6 {
		a, e := files.indptr[f], files.indptr[f+1]
		assert.True(t, slices.IsSorted(files.indices[a:e]), "frame %d: indices in pixel order", f)
		require.NoError(t, decode(ds.DType(), frames[f*ds.FrameBytes():(f+1)*ds.FrameBytes()], pixelsOut))
		var sum float64
		hits := 0
		for p, v := range pixelsOut {
			sum += v * float64(mc.stack.Data[p])
			if v != 0 {
				hits++
				assert.True(t, v >= 1 && v <= 20, "frame %d pixel %d: %v", f, p, v)
			}
		}
		assert.Equal(t, pixels/100, hits)
		assert.InDelta(t, sum, ref.values[f], 1e-9)
	}
	again, err := writeCSR(dir, []int{2, 3}) // reused
	require.NoError(t, err)
	assert.Equal(t, toml, again)
}

// Both compressed HDF5 files read back, through package dataset's reader, as the frames
// written, in scan order.
func TestWriteHDF5(t *testing.T) {
	dir := t.TempDir()
	nav := []int{2, 3}
	fb := 2 * sig[0] * sig[1]
	frames := make([]byte, 6*fb)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < len(frames); i += 2 {
		binary.NativeEndian.PutUint16(frames[i:], uint16(rng.IntN(4)*rng.IntN(3)+i/fb))
	}
	for _, kind := range []string{bench.DatasetGzip, bench.DatasetBSLZ4} {
		path := filepath.Join(dir, kind+".h5")
		if err := writeHDF5(path, kind, frames, nav); err != nil {
			t.Skip(err) // a build without HDF5
		}
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, nav, ds.NavShape())
		assert.Equal(t, dataset.Uint16, ds.DType())
		got := make([]byte, len(frames))
		require.NoError(t, ds.ReadFrames(0, 6, got))
		assert.True(t, bytes.Equal(frames, got), "%s: frames differ", kind)
		require.NoError(t, ds.Close())
	}
}
