//go:build !nohdf5

package hdf5_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/h5ref"
)

// TestHDF5PluginLoadError opens a zstd-compressed dataset (a filter libhdf5 loads as a
// plugin, and that has no Go decoder) with HDF5_PLUGIN_PATH naming a folder whose plugin
// file is damaged: the error gives the loader's message for it, not that the filter is
// missing.
// libhdf5 reads HDF5_PLUGIN_PATH once, when it starts: the open runs in a child process
// of this test binary.
func TestHDF5PluginLoadError(t *testing.T) {
	if path := os.Getenv("STEMDOT_TEST_PLUGIN_CHILD"); path != "" {
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err)
		os.Stdout.WriteString("ERROR: " + err.Error() + "\n")
		return
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "zstd.h5")
	values := make([]uint16, 4*8*8)
	require.NoError(t, h5ref.Write(file, h5ref.Dataset{Path: "/data", Dims: []int{4, 8, 8}, Chunk: []int{1, 8, 8}, Filter: h5ref.Filter{ID: 32015, Name: "zstd"},
		Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	plugins := filepath.Join(dir, "plugins")
	require.NoError(t, os.Mkdir(plugins, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(plugins, "libh5zstd.so"), []byte("not a shared object, cut short by a failed copy"), 0o644))
	run := func(pluginPath string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHDF5PluginLoadError$", "-test.count=1")
		cmd.Env = append(os.Environ(), "STEMDOT_TEST_PLUGIN_CHILD="+file, "HDF5_PLUGIN_PATH="+pluginPath)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := run(plugins)
	assert.Contains(t, out, "its data passes through HDF5 filter 32015 (zstd), which this libhdf5 could not load; plugins in its plugin path failed to load (the filter's may be one of them): "+
		filepath.Join(plugins, "libh5zstd.so")+": ")
	assert.Regexp(t, `libh5zstd\.so: [^\n]*(short|ELF|format)`, out, "the loader's message (glibc: file too short)")
	// Without the damaged plugin: the filter is missing.
	out = run(filepath.Join(dir, "none"))
	assert.Contains(t, out, "which this libhdf5 cannot load: install the filter's plugin")
}
