package main

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
)

// The inputs read back through stemdot's readers as generated: the R64 MIB's 12-bit
// counts (dataset/mib decodes the raw words) and the binned NPY frames.
func TestInputs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r64.mib")
	require.NoError(t, writeR64(path, 3))
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, [2]int{256, 256}, ds.SigShape())
	assert.Equal(t, dataset.Uint16, ds.DType())
	assert.Equal(t, []int{3}, ds.NavShape()[len(ds.NavShape())-1:])
	got := make([]byte, 3*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 3, got))
	nonzero := 0
	for k := range 3 {
		for i, v := range countingFrame(k, 256) {
			require.Equal(t, min(v, 4095), binary.NativeEndian.Uint16(got[2*(k*256*256+i):]), "frame %d pixel %d", k, i)
			if v > 0 {
				nonzero++
			}
		}
	}
	assert.Greater(t, nonzero, 3*1000, "counts, not zeros")

	f := countingFrame(5, 192)
	npyPath := filepath.Join(dir, "b.npy")
	require.NoError(t, writeFramesNPY(npyPath, [][]uint16{bin2(f, 192)}, [2]int{96, 96}))
	nd, err := dataset.Open(npyPath, dataset.Options{})
	require.NoError(t, err)
	defer nd.Close()
	b := make([]byte, nd.FrameBytes())
	require.NoError(t, nd.ReadFrames(0, 1, b))
	assert.Equal(t, f[0]+f[1]+f[192]+f[193], binary.NativeEndian.Uint16(b))
	assert.Equal(t, f[95*192*2+190]+f[95*192*2+191]+f[(95*2+1)*192+190]+f[(95*2+1)*192+191], binary.NativeEndian.Uint16(b[2*(96*96-1):]))
}
