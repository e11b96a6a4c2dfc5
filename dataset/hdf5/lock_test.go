//go:build !nohdf5

package hdf5_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// holdOpen writes an HDF5 file of 2×3 frames of 4×5 uint16 with h5py in a child process,
// which keeps it open for writing (with HDF5's file locking, h5py's default) until the
// returned function is called.
func holdOpen(t *testing.T, path string) (release func()) {
	t.Helper()
	py := testfiles.Python(t, "numpy", "h5py")
	cmd := exec.Command(py, "-c", `import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "w")
f["data"] = np.arange(2 * 3 * 4 * 5, dtype=np.uint16).reshape(2, 3, 4, 5)
f.flush()
print("open", flush=True)
sys.stdin.read()
f.close()`, path)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "HDF5_USE_FILE_LOCKING=") })
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "h5py did not open the file")
	require.Equal(t, "open\n", line)
	done := false
	release = func() {
		if !done {
			done = true
			stdin.Close()
			assert.NoError(t, cmd.Wait())
		}
	}
	t.Cleanup(release)
	return release
}

// A file another process holds open for writing is refused by HDF5's file locking: the
// error says so, names HDF5_USE_FILE_LOCKING, and is an I/O error (of this node, not of
// the file); once the writer has closed it, the file opens.
func TestHDF5LockedByWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.h5")
	release := holdOpen(t, path)
	t.Setenv("HDF5_USE_FILE_LOCKING", "")
	os.Unsetenv("HDF5_USE_FILE_LOCKING")
	_, err := dataset.Open(path, dataset.Options{})
	require.Error(t, err)
	assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
	assert.ErrorContains(t, err, "dataset: "+path+": locked by another process")
	assert.ErrorContains(t, err, "HDF5_USE_FILE_LOCKING=FALSE")
	assert.NotContains(t, err.Error(), "not a readable HDF5 file")
	_, err = hdf5.OpenEvents(path) // every open of a file reports it alike
	assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
	assert.ErrorContains(t, err, "dataset: "+path+": locked by another process")
	release()
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, 6, d.NumFrames())
}
