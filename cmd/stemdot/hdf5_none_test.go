//go:build nohdf5

package main

import "testing"

func TestApplyHDF5(t *testing.T) {
	t.Skip("built with -tags nohdf5: the CLI's HDF5 tests (hdf5_test.go) are left out (install libhdf5-dev and pkg-config to run them)")
}

// hdf5Flavour is what --version says of HDF5 in a build without it.
func hdf5Flavour(*testing.T) string { return "without HDF5: built with -tags nohdf5" }
