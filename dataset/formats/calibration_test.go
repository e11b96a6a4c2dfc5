package formats_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// calibrationOf opens the real file rel and returns its calibration.
func calibrationOf(t *testing.T, rel string) dataset.Calibration {
	t.Helper()
	d, err := dataset.Open(testfiles.File(t, rel), dataset.Options{})
	require.NoError(t, err, rel)
	defer d.Close()
	return dataset.CalibrationOf(d)
}

// refAxis is an axis as the Python reference prints it: scale, offset, units.
type refAxis struct {
	Scale, Offset float64
	Units         string
}

func (a *refAxis) UnmarshalJSON(b []byte) error {
	var v [3]any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	a.Scale, _ = v[0].(float64)
	a.Offset, _ = v[1].(float64)
	a.Units, _ = v[2].(string)
	return nil
}

// assertAxes compares got (stemdot's axes) with RosettaSciIO's, whose units pint writes
// spaced ("1 / nm").
func assertAxes(t *testing.T, what string, ref []refAxis, got []dataset.Axis) {
	t.Helper()
	require.Len(t, got, len(ref), what)
	for i, r := range ref {
		assert.InDelta(t, r.Scale, got[i].Scale, 1e-12*r.Scale, "%s axis %d", what, i)
		assert.InDelta(t, r.Offset, got[i].Offset, 1e-9, "%s axis %d", what, i)
		assert.Equal(t, strings.ReplaceAll(r.Units, " / ", "/"), got[i].Units, "%s axis %d", what, i)
	}
}

// TestCalibrationsRosettaSciIO checks the calibrations read from the real files against
// RosettaSciIO's reading of them (skipped when it is not installed): the axes it
// calibrates, and the files whose axes it leaves at scale 1 without units (DM test
// stacks, MIB), which stemdot reports uncalibrated.
func TestCalibrationsRosettaSciIO(t *testing.T) {
	dir := testfiles.Dir(t)
	out := testfiles.RunPython(t, `import sys, json, types, warnings
warnings.filterwarnings("ignore")
sys.modules.setdefault("skimage", types.ModuleType("skimage"))  # rsciio.blockfile imports it to write files only
from rsciio import blockfile, digitalmicrograph, emd, quantumdetector, tia
d = sys.argv[1]
def axes(reader, rel):
    r = reader.file_reader(d + "/" + rel)[0]
    cl = 0.0
    if reader is blockfile:  # the header's Camera_length as the reader's mapping to metadata scales it
        key = "blockfile_header.Camera_length"
        cl = reader._api.mapping[key][1](r["original_metadata"]["blockfile_header"]["Camera_length"])
    return {"axes": [[float(a["scale"]), float(a["offset"]), a.get("units") or ""] for a in r["axes"]],
            "camera_length": float(cl)}
print(json.dumps({
    "emd": axes(emd, "emd/py4DSTEM_size2x3x4x5.h5"),
    "blo": axes(blockfile, "blo/test1.blo"),
    "ser": axes(tia, "ser/128x128x5-diffraction_preview.emi"),
    "dm3": axes(digitalmicrograph, "dm/test-1.dm3"),
    "dm4": axes(digitalmicrograph, "dm/test-1.dm4"),
    "mib": axes(quantumdetector, "mib/001_4x2_6bit.mib"),
}))`, []string{"rsciio", "numpy"}, dir)
	var ref map[string]struct {
		Axes         []refAxis `json:"axes"`
		CameraLength float64   `json:"camera_length"`
	}
	require.NoError(t, json.Unmarshal(out, &ref))

	// py4DSTEM EMD: (Rx, Ry) in nm, (Qx, Qy) in 1/Å.
	c := calibrationOf(t, "emd/py4DSTEM_size2x3x4x5.h5")
	assertAxes(t, "emd nav", ref["emd"].Axes[:2], c.Nav)
	assertAxes(t, "emd sig", ref["emd"].Axes[2:], c.Sig)
	assert.InDelta(t, 0.126796875, c.Nav[0].Scale, 1e-15)

	// BLO: SX, SY in nm, the pattern in cm (100/SDP), camera length 2000 × 10⁻⁴ m.
	c = calibrationOf(t, "blo/test1.blo")
	assertAxes(t, "blo nav", ref["blo"].Axes[:2], c.Nav)
	assertAxes(t, "blo sig", ref["blo"].Axes[2:], c.Sig)
	assert.InDelta(t, ref["blo"].CameraLength, c.CameraLength, 1e-15)
	assert.InDelta(t, 0.2, c.CameraLength, 1e-15)

	// TIA SER of a series in diffraction mode (the EMI says so): the pattern in 1/nm; the
	// series axis has no units (scale 1, none in RosettaSciIO too). RosettaSciIO scales
	// the element calibration's delta from 1/m to 1/nm but leaves its offset in 1/m, so
	// its offset is 10⁹ times stemdot's (-2.7177 1/nm: the pattern's centre at pixel 64).
	c = calibrationOf(t, "ser/128x128x5-diffraction_preview.emi")
	assert.False(t, c.Nav[0].Known())
	assert.Equal(t, 1.0, ref["ser"].Axes[0].Scale)
	serSig := append([]refAxis(nil), ref["ser"].Axes[1:]...)
	for i := range serSig {
		serSig[i].Offset *= 1e-9
	}
	assertAxes(t, "ser sig", serSig, c.Sig)
	assert.InDelta(t, -64*c.Sig[1].Scale, c.Sig[1].Offset, 1e-9)
	c = calibrationOf(t, "ser/128x128x5-diffraction_preview_1.ser") // the same through the SER file
	assertAxes(t, "ser sig", serSig, c.Sig)

	// Files RosettaSciIO leaves uncalibrated (scale 1, no units): nothing known.
	for _, k := range []struct{ key, rel string }{{"dm3", "dm/test-1.dm3"}, {"dm4", "dm/test-1.dm4"}, {"mib", "mib/001_4x2_6bit.mib"}} {
		for i, a := range ref[k.key].Axes {
			assert.Equal(t, refAxis{Scale: 1}, refAxis{Scale: a.Scale, Offset: a.Offset, Units: a.Units}, "%s axis %d", k.key, i)
		}
		assert.True(t, calibrationOf(t, k.rel).IsZero(), k.rel)
	}
}

// TestCalibrationsH5py checks the HDF5 files' calibrations against h5py's reading of
// their metadata: py4DSTEM's dim vectors, the fpd file's (units "pixel" and "?/m":
// uncalibrated) and the ARINA master's detector_distance of 0 (no camera length, and no
// angle a pixel spans).
func TestCalibrationsH5py(t *testing.T) {
	dir := testfiles.Dir(t)
	out := testfiles.RunPython(t, `import sys, json, h5py
d = sys.argv[1]
with h5py.File(d + "/emd/py4DSTEM_size2x3x4x5.h5", "r") as f:
    g = f["datacube_root/datacube"]
    emd = [[float(g["dim%d" % i][1] - g["dim%d" % i][0]), float(g["dim%d" % i][0]), g["dim%d" % i].attrs["units"]] for i in range(4)]
with h5py.File(d + "/hdf5/fpd_file_test.hdf5", "r") as f:
    fpd = [f["fpd_expt/fpd_data/dim%d" % i].attrs["units"] for i in range(1, 6)]
with h5py.File(d + "/arina/test_00_master.h5", "r") as f:
    arina = float(f["entry/instrument/detector/detector_distance"][()])
print(json.dumps({"emd": emd, "fpd": fpd, "arina_distance": arina}))`, []string{"h5py"}, dir)
	var ref struct {
		EMD           []refAxis `json:"emd"`
		FPD           []string  `json:"fpd"`
		ArinaDistance float64   `json:"arina_distance"`
	}
	require.NoError(t, json.Unmarshal(out, &ref))
	c := calibrationOf(t, "emd/py4DSTEM_size2x3x4x5.h5")
	assert.Equal(t, "A^-1", ref.EMD[2].Units)
	for i := range ref.EMD {
		ref.EMD[i].Units = strings.ReplaceAll(ref.EMD[i].Units, "A^-1", "1/Å")
	}
	assertAxes(t, "emd nav", ref.EMD[:2], c.Nav)
	assertAxes(t, "emd sig", ref.EMD[2:], c.Sig)
	assert.Equal(t, []string{"y", "x", "ky", "kx"}, []string{c.Nav[0].Name, c.Nav[1].Name, c.Sig[0].Name, c.Sig[1].Name})

	assert.Equal(t, []string{"pixel", "pixel", "colour_index", "?/m", "?/m"}, ref.FPD)
	assert.True(t, calibrationOf(t, "hdf5/fpd_file_test.hdf5").IsZero())

	assert.Equal(t, 0.0, ref.ArinaDistance)
	assert.True(t, calibrationOf(t, "arina/test_00_master.h5").IsZero())
}
