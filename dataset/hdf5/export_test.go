//go:build !nohdf5

package hdf5

import (
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/h5index"
)

// LockedNanos is the time d, an HDF5 dataset read from its raw chunks, spent reading
// them under the HDF5 lock (-1: d does not read raw chunks).
func LockedNanos(d dataset.Dataset) int64 {
	if f, ok := d.(*h5File); ok && f.chunks != nil {
		return f.chunks.locked.Load()
	}
	return -1
}

// Markers counts the elements of size bytes of buf whose bits are all 1 (markers).
var Markers = markers

// ChunkTables returns the chunk table of d read from the file's chunk index (nil where
// it is not read: the chunks are then read under the lock) and, when withLib,
// libhdf5's.
func ChunkTables(d dataset.Dataset, withLib bool) (ours, lib []h5index.Chunk, err error) {
	f := d.(*h5File)
	if withLib {
		lib, err = f.libTable()
	}
	return f.chunks.table, lib, err
}

// ReadChunkIndex sets whether datasets opened from now on read their chunk index from
// the file (else their chunks are read under the lock), and returns the setting to
// restore.
func ReadChunkIndex(on bool) (restore func()) {
	was := readChunkIndex
	readChunkIndex = on
	return func() { readChunkIndex = was }
}
