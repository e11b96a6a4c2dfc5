package dectris

import (
	"github.com/pierrec/lz4/v4"

	"github.com/stemdot/stemdot/internal/h5filter"
)

// The decoders of the HDF5 reader's filters (internal/h5filter), for the same formats.
var (
	decodeBSLZ4 = h5filter.DecodeBSLZ4
	decodeLZ4   = h5filter.DecodeLZ4
)

// lz4Block decodes one LZ4 block (stream v1's "lz4<") into dst, returning the bytes
// decoded.
func lz4Block(dst, src []byte) (int, error) { return lz4.UncompressBlock(src, dst) }
