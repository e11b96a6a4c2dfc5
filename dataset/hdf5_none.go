//go:build nohdf5

package dataset

import "fmt"

// openHDF5 of a build without libhdf5 (tag nohdf5) refuses HDF5 files.
func openHDF5(path string, opt Options) (Dataset, error) {
	return nil, fmt.Errorf("dataset: %s: this stemdot was built without the HDF5 library (build tag nohdf5): rebuild without it, with libhdf5-dev installed, to read HDF5 files", path)
}
