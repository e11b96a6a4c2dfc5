//go:build nohdf5

package hdf5_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
)

// A build without HDF5 refuses HDF5 files naming the package to install; the HDF5 tests
// (hdf5_test.go, storage_test.go) need libhdf5 and are left out.
func TestHDF5NotBuilt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.h5")
	require.NoError(t, os.WriteFile(path, []byte("\x89HDF\r\n\x1a\n"), 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	assert.ErrorContains(t, err, "dataset: "+path+": this stemdot was built without HDF5 (build tag nohdf5): install the HDF5 C library (Debian, Ubuntu: apt-get install libhdf5-dev pkg-config)")
	assert.Equal(t, errs.Format, errs.KindOf(err))
	version, ok := hdf5.Library()
	assert.False(t, ok)
	assert.Empty(t, version)
	// Nor does it write HDF5 results: it names the NPY output that needs no HDF5.
	_, err = hdf5.ResultImage(hdf5.ResultFile{})
	assert.ErrorContains(t, err, "this stemdot was built without HDF5 (build tag nohdf5) and cannot write HDF5 results (.h5, .hdf5, .hspy): give a path ending in .npy")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	t.Skip("built with -tags nohdf5: the HDF5 reader's tests are left out (install libhdf5-dev and pkg-config to run them)")
}
