//go:build !nohdf5

package main

import (
	"unsafe"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/h5ref"
)

// writeHDF5 writes frames (host-order uint16, nav × sig) to path as the 4-D dataset
// "/data", one frame per chunk, compressed as kind says: bench.DatasetGzip through
// libhdf5's shuffle and deflate filters (level 4, h5py's default), bench.DatasetBSLZ4 as
// bitshuffle-LZ4 chunks (filter 32008, cd_values (0, 4, 2, 0, 2) as hdf5plugin's
// Bitshuffle(cname="lz4") stores them) encoded by h5filter.EncodeBSLZ4 and written as
// they are (H5Dwrite_chunk).
func writeHDF5(path, kind string, frames []byte, nav []int) error {
	set := h5ref.Dataset{Path: "/data", Dims: []int{nav[0], nav[1], sig[0], sig[1]}, Chunk: []int{1, 1, sig[0], sig[1]}, Type: h5ref.U16LE}
	if kind == bench.DatasetGzip {
		set.Gzip, set.Shuffle, set.Data = 4, true, unsafe.Pointer(&frames[0])
		return h5ref.Write(path, set)
	}
	fb := 2 * sig[0] * sig[1]
	for f := 0; f < len(frames); f += fb {
		set.Chunks = append(set.Chunks, h5filter.EncodeBSLZ4(nil, frames[f:f+fb], 2))
	}
	set.Filter = h5ref.Filter{ID: h5filter.Bitshuffle, Name: "bitshuffle", Values: []uint32{0, 4, 2, 0, 2}}
	return h5ref.Write(path, set)
}
