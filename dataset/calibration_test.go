package dataset_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// A format's calibration (FileFrames.Calibration) stays with the dataset through
// Reconcile and an ROI, loses its nav axes with a frame range or a user's nav shape other
// than the file's, and keeps them with the file's own.
func TestCalibrationCarried(t *testing.T) {
	cal := dataset.Calibration{
		Nav:          []dataset.Axis{dataset.NewAxis("y", 2e-9, 0, "m"), dataset.NewAxis("x", 1.5e-9, 3e-9, "m")},
		Sig:          []dataset.Axis{dataset.NewAxis("ky", 4.2e7, 0, "1/m"), dataset.NewAxis("kx", 0.002, -0.1, "rad")},
		CameraLength: 0.12,
	}
	assert.Equal(t, []dataset.Axis{{Name: "y", Scale: 2, Units: "nm"}, {Name: "x", Scale: 1.5, Offset: 3, Units: "nm"}}, cal.Nav)
	assert.Equal(t, dataset.Axis{Name: "ky", Scale: 0.042, Units: "1/nm"}, cal.Sig[0])
	assert.InDelta(t, 2, cal.Sig[1].Scale, 1e-15)
	assert.InDelta(t, -100, cal.Sig[1].Offset, 1e-12)
	assert.Equal(t, "mrad", cal.Sig[1].Units)

	path := filepath.Join(t.TempDir(), "x.raw")
	require.NoError(t, os.WriteFile(path, make([]byte, 6*4), 0o644))
	open := func(opt dataset.Options) dataset.Dataset {
		f, size, err := dataset.OpenFile(path)
		require.NoError(t, err)
		ds, err := dataset.OpenFlat(dataset.Flat{Format: "test", Path: path, File: f, Size: size, Sig: [2]int{2, 2}, DType: dataset.Uint8},
			opt, []int{2, 3}, " from the test", dataset.FileFrames{Whole: 6, RecordBytes: 4, Calibration: cal})
		require.NoError(t, err)
		t.Cleanup(func() { ds.Close() })
		return ds
	}
	ds := open(dataset.Options{})
	assert.Equal(t, cal, dataset.CalibrationOf(ds))
	assert.Equal(t, cal, dataset.CalibrationOf(open(dataset.Options{NavShape: []int{2, 3}})))
	noNav := cal.Clone()
	noNav.Nav = nil
	assert.Equal(t, noNav, dataset.CalibrationOf(open(dataset.Options{NavShape: []int{3, 2}})))
	assert.Equal(t, noNav, dataset.CalibrationOf(open(dataset.Options{NavShape: []int{6}})))

	roi, err := dataset.Select(ds, dataset.ROI{Rect: struct{ X, Y, W, H int }{1, 0, 2, 1}})
	require.NoError(t, err)
	assert.Equal(t, cal, dataset.CalibrationOf(roi))
	r, err := dataset.Range(open(dataset.Options{}), 1, 3)
	require.NoError(t, err)
	assert.Equal(t, noNav, dataset.CalibrationOf(r))

	// A copy: changing it changes nothing in the dataset.
	c := dataset.CalibrationOf(ds)
	c.Nav[0].Scale = 99
	assert.Equal(t, 2.0, dataset.CalibrationOf(ds).Nav[0].Scale)

	// Uncalibrated axes: no units, pixels, unknown units, a zero scale.
	for _, a := range []dataset.Axis{dataset.NewAxis("x", 1, 0, ""), dataset.NewAxis("x", 1, 0, "pixel"), dataset.NewAxis("x", 1, 0, "?/m"),
		dataset.NewAxis("x", 0, 0, "nm")} {
		assert.Equal(t, dataset.Axis{Name: "x"}, a)
	}
	assert.True(t, dataset.Calibration{Nav: []dataset.Axis{{Name: "y"}}, Sig: []dataset.Axis{{Name: "ky"}, {Name: "kx"}}}.IsZero())
}
