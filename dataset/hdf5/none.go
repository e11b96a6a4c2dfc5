//go:build nohdf5

package hdf5

import (
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// openHDF5 of a build without libhdf5 (tag nohdf5, which make picks when pkg-config
// finds no libhdf5 1.10.5 or later) refuses HDF5 files, naming what to install.
func openHDF5(path string, opt dataset.Options) (dataset.Dataset, error) {
	return nil, errs.New(errs.Format, "dataset: %s: this stemdot was built without HDF5 (build tag nohdf5): install the HDF5 C library "+
		"(Debian, Ubuntu: apt-get install libhdf5-dev pkg-config) and build again (make) to read HDF5 files", path)
}

// Library reports whether this build reads HDF5 files: not one built with the tag
// nohdf5 (version "", ok false).
func Library() (version string, ok bool) { return "", false }

// ResultImage of a build without libhdf5 refuses to write HDF5 results, naming what to
// install and the NPY output that needs no HDF5.
func ResultImage(ResultFile) ([]byte, error) {
	return nil, errs.New(errs.Argument, "this stemdot was built without HDF5 (build tag nohdf5) and cannot write HDF5 results (.h5, .hdf5, .hspy): "+
		"give a path ending in .npy, or install the HDF5 C library (Debian, Ubuntu: apt-get install libhdf5-dev pkg-config) and build again (make)")
}
