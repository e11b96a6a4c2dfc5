//go:build nohdf5

package main

import "errors"

// writeHDF5 is not available in a build without HDF5 (-tags nohdf5).
func writeHDF5(path, kind string, frames []byte, nav []int) error {
	return errors.New("built without HDF5 (-tags nohdf5)")
}
