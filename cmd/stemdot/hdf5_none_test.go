//go:build nohdf5

package main

import "testing"

func TestApplyHDF5(t *testing.T) {
	t.Skip("built with -tags nohdf5: the CLI's HDF5 tests (hdf5_test.go) are left out (install libhdf5-dev and pkg-config to run them)")
}
