//go:build !nohdf5

package hdf5_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/h5ref"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// A DECTRIS master's NXmx detector_distance is the camera length, and with the pixel
// sizes gives the angle a pixel spans (written here with h5py: 75 µm pixels, x, and 55
// µm, y, at 0.12 m); a distance of 0 (as the real ARINA master has, see
// dataset/formats), or pixel sizes in other units than m, calibrate nothing.
func TestDECTRISCalibration(t *testing.T) {
	const n, sy, sx = 4, 3, 5
	for _, c := range []struct {
		name     string
		distance float64
		units    string
		want     dataset.Calibration
	}{
		{"calibrated", 0.12, "m", dataset.Calibration{CameraLength: 0.12,
			Sig: []dataset.Axis{{Name: "ky", Scale: 55e-6 / 0.12 * 1e3, Units: "mrad"}, {Name: "kx", Scale: 75e-6 / 0.12 * 1e3, Units: "mrad"}}}},
		{"pixels in mm", 0.12, "mm", dataset.Calibration{CameraLength: 0.12}},
		{"no distance", 0, "m", dataset.Calibration{}},
	} {
		dir := t.TempDir()
		master, err := h5ref.DECTRIS(dir, "scan", make([]uint16, n*sy*sx), n, sy, sx, nil)
		require.NoError(t, err)
		testfiles.RunPython(t, `import sys, h5py
with h5py.File(sys.argv[1], "a") as f:
    d = f.require_group("entry/instrument/detector")
    for name, v, u in (("detector_distance", float(sys.argv[2]), "m"), ("x_pixel_size", 75e-6, sys.argv[3]), ("y_pixel_size", 55e-6, sys.argv[3])):
        d[name] = v
        d[name].attrs["units"] = u.encode()  # fixed-length bytes, as DECTRIS writes them`, []string{"h5py"}, master, fmt.Sprint(c.distance), c.units)
		d, err := dataset.Open(filepath.Clean(master), dataset.Options{})
		require.NoError(t, err, c.name)
		got := dataset.CalibrationOf(d)
		d.Close()
		assert.Equal(t, c.want.CameraLength, got.CameraLength, c.name)
		require.Len(t, got.Sig, len(c.want.Sig), c.name)
		for i, a := range c.want.Sig {
			assert.Equal(t, a.Name, got.Sig[i].Name, c.name)
			assert.InDelta(t, a.Scale, got.Sig[i].Scale, 1e-12, c.name)
			assert.Equal(t, a.Units, got.Sig[i].Units, c.name)
		}
	}
}

// EMD dimension vectors beside the frames dataset (dim1..dim4, written by h5py): a full
// vector of equal steps and one of its first two values calibrate their axes (scale the
// step, offset the first value); one of unequal steps, or without units, does not.
func TestEMDCalibration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "emd.h5")
	testfiles.RunPython(t, `import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    g = f.create_group("data/scan")
    g["data"] = np.zeros((2, 3, 4, 5), np.float32)
    for i, (v, u) in enumerate((([10.0, 12.0], "nm"), ([0.0, 1.0, 3.0], "nm"), (np.arange(4) * 0.5 - 1, "1/nm"), ([0.0, 0.25], "mrad")), 1):
        g["dim%d" % i] = np.asarray(v)
        g["dim%d" % i].attrs["units"] = u
    g["dim5"] = [1.0, 2.0]  # no fifth axis: ignored`, []string{"h5py", "numpy"}, path)
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, dataset.Calibration{
		Nav: []dataset.Axis{{Name: "y", Scale: 2, Offset: 10, Units: "nm"}, {Name: "x"}},
		Sig: []dataset.Axis{{Name: "ky", Scale: 0.5, Offset: -1, Units: "1/nm"}, {Name: "kx", Scale: 0.25, Units: "mrad"}},
	}, dataset.CalibrationOf(d))
}
