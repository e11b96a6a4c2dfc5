package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// info prints the calibrations a file states, as text and as JSON (BLO: SX, SY 12.8 nm,
// 100/SDP cm with SDP 6226, camera length 2000 × 10⁻⁴ m; checked against RosettaSciIO in
// dataset/formats), and none for a file without (MIB).
func TestInfoCalibration(t *testing.T) {
	blo := testfiles.File(t, "blo/test1.blo")
	stdout, stderr, code := run(t, "info", blo)
	require.Zero(t, code, stderr)
	assert.Contains(t, stdout, "scan step:  y 12.8 nm, x 12.8 nm\n")
	assert.Contains(t, stdout, "pixel size: ky 0.0160617 cm, kx 0.0160617 cm\n")
	assert.Contains(t, stdout, "camera length: 0.2 m\n")

	stdout, stderr, code = run(t, "info", "--json", blo)
	require.Zero(t, code, stderr)
	var info struct {
		Format      string              `json:"format"`
		NavShape    []int               `json:"nav_shape"`
		SigShape    []int               `json:"sig_shape"`
		Calibration dataset.Calibration `json:"calibration"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &info), stdout)
	assert.Equal(t, "blo", info.Format)
	assert.Equal(t, []int{3, 2}, info.NavShape)
	assert.Equal(t, []int{144, 144}, info.SigShape)
	assert.Equal(t, dataset.Calibration{
		Nav:          []dataset.Axis{{Name: "y", Scale: 12.8, Units: "nm"}, {Name: "x", Scale: 12.8, Units: "nm"}},
		Sig:          []dataset.Axis{{Name: "ky", Scale: 100.0 / 6226, Units: "cm"}, {Name: "kx", Scale: 100.0 / 6226, Units: "cm"}},
		CameraLength: 0.2}, info.Calibration)

	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	stdout, stderr, code = run(t, "info", "--json", mib)
	require.Zero(t, code, stderr)
	assert.NotContains(t, stdout, "calibration")
	stdout, _, _ = run(t, "info", mib)
	assert.NotContains(t, stdout, "scan step")
}

// apply --out RESULT.h5 writes the HDF5 result only (no JSON sidecar beside it), its
// command line in the provenance; a build without HDF5 refuses it before reading the
// file, naming .npy, and writes nothing.
func TestApplyHDF5Out(t *testing.T) {
	blo := testfiles.File(t, "blo/test1.blo")
	dir := t.TempDir()
	out := filepath.Join(dir, "r.h5")
	stdout, stderr, code := run(t, "apply", blo, "--mask", "disk:72,72,10", "--out", out)
	if strings.Contains(hdf5Flavour(t), "without HDF5") {
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "cannot write HDF5 results (.h5, .hdf5, .hspy): give a path ending in .npy")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries)
		return
	}
	require.Zero(t, code, stderr)
	assert.Contains(t, stdout, "→ "+out)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "r.h5", entries[0].Name())
	got := testfiles.RunPython(t, `import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(f["Experiments/stemdot/original_metadata"].attrs["command"])`, []string{"h5py"}, out)
	assert.Equal(t, stemdotBin+" apply "+blo+" --mask disk:72,72,10 --out "+out+"\n", string(got))
}
