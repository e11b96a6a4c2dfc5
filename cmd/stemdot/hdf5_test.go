//go:build !nohdf5

package main

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/h5ref"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// The fpd HDF5 file: virtual images against its raw chunks decoded here (inflate,
// unshuffle, big-endian), not through the library's filter pipeline.
func TestApplyHDF5(t *testing.T) {
	path := testfiles.File(t, "hdf5/fpd_file_test.hdf5")
	raw, err := h5ref.ReadChunks(path, "/fpd_expt/fpd_data/data")
	require.NoError(t, err)
	all, err := raw.Decode(2, binary.BigEndian, false)
	require.NoError(t, err)
	frames := make([][]float64, 4)
	for f := range frames {
		frames[f] = all[f*256*256 : (f+1)*256*256]
	}
	ms := refMasks(256, 256, 128, 128, 30, 40, 120)
	masks := []string{"--mask", "disk:128,128,30", "--mask", "ring:128,128,40,120", "--mask", "com:128,128"}
	for _, extra := range [][]string{nil, {"--dataset-path", "/fpd_expt/fpd_data/data", "--cpus", "0,1", "--partition-size", "150000"}} {
		shape, got, _ := applyCase(t, append(append([]string{path}, masks...), extra...)...)
		require.Equal(t, []int{2, 2, 5}, shape)
		checkResult(t, got, frames, ms)
	}
	refuseCase(t, `no dataset "/nope" (--dataset-path); datasets of rank 3 to 5 in the file: /fpd_expt/fpd_data/data (2, 2, 1, 256, 256)`,
		path, "--dataset-path", "/nope", "--mask", "disk:128,128,30")
}
