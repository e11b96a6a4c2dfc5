//go:build !nohdf5

package hdf5

import "github.com/stemdot/stemdot/dataset"

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
