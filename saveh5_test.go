package stemdot_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// A result saved as HDF5 (Outputs.HDF5) beside its NPY, read back with h5py: the data are
// the NPY's with the masks first, the masks' names and specs, the nav axes calibrated
// from the BLO file's header (read by Python from the raw bytes: SX, SY at bytes 30 and
// 38), HyperSpy's layout attributes, the provenance; and the NPY's sidecar holds the
// same calibration. With HyperSpy installed, hs.load reads the file as a stack of
// images with those axes.
func TestSaveHDF5(t *testing.T) {
	if _, ok := hdf5.Library(); !ok {
		t.Skip("built without HDF5")
	}
	path := testfiles.File(t, "blo/test1.blo")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	specs := []string{"disk:72,72,10", "ring:72,72,20,40"}
	stack, info, err := stemdot.MasksInfo(ds.SigShape(), nil, nil, specs)
	require.NoError(t, err)
	for _, f64 := range []bool{false, true} {
		res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: f64})
		require.NoError(t, err)
		res.Info.SetMasks(info)
		dir := t.TempDir()
		h5, npyPath := filepath.Join(dir, "r.h5"), filepath.Join(dir, "r.npy")
		require.NoError(t, stemdot.Save(res, stemdot.Outputs{NPY: npyPath, HDF5: h5, Command: "stemdot apply test1.blo"}))

		out := testfiles.RunPython(t, `import sys, json, struct, h5py, numpy as np
h5, npy, blo = sys.argv[1:]
sx, sy = struct.unpack_from("<dd", open(blo, "rb").read(46), 30)
with h5py.File(h5, "r") as f:
    e = f["Experiments/stemdot"]
    d = e["data"]
    ref = np.moveaxis(np.load(npy), -1, 0)
    axes = [{k: (v.item() if hasattr(v, "item") else v) for k, v in e["axis-%d" % i].attrs.items()} for i in range(3)]
    om = e["original_metadata"].attrs
    print(json.dumps({
        "root": {k: v for k, v in f.attrs.items()},
        "dtype": str(d.dtype), "equal": bool(np.array_equal(d[()], ref)), "shape": list(d.shape),
        "names": list(d.attrs["mask_names"]), "specs": list(d.attrs["mask_specs"]),
        "axes": axes, "sx": sx, "sy": sy,
        "title": e["metadata/General"].attrs["title"],
        "prov": {k: om[k] for k in ("stemdot_version", "source_file", "source_format", "command")},
        "result": json.loads(om["result_json"]),
        "sidecar": json.load(open(npy[:-4] + ".json")),
    }))`, []string{"h5py", "numpy"}, h5, npyPath, path)
		var got struct {
			Root    map[string]string
			DType   string
			Equal   bool
			Shape   []int
			Names   []string
			Specs   []string
			Axes    []map[string]any
			SX, SY  float64
			Title   string
			Prov    map[string]string
			Result  stemdot.ResultInfo
			Sidecar stemdot.ResultInfo
		}
		require.NoError(t, json.Unmarshal(out, &got))
		want := "float32"
		if f64 {
			want = "float64"
		}
		assert.Equal(t, want, got.DType)
		assert.True(t, got.Equal, "data = the NPY with the masks' axis first")
		assert.Equal(t, []int{2, 3, 2}, got.Shape)
		assert.Equal(t, map[string]string{"file_format": "HyperSpy", "file_format_version": "3.3"}, got.Root)
		assert.Equal(t, []string{"disk", "ring"}, got.Names)
		assert.Equal(t, specs, got.Specs)
		assert.Equal(t, 12.8, got.SX)
		assert.Equal(t, map[string]any{"_type": "UniformDataAxis", "name": "mask", "scale": 1.0, "offset": 0.0, "size": 2.0, "navigate": true, "is_binned": false}, got.Axes[0])
		assert.Equal(t, map[string]any{"_type": "UniformDataAxis", "name": "y", "scale": got.SY, "offset": 0.0, "size": 3.0, "units": "nm", "navigate": false, "is_binned": false}, got.Axes[1])
		assert.Equal(t, map[string]any{"_type": "UniformDataAxis", "name": "x", "scale": got.SX, "offset": 0.0, "size": 2.0, "units": "nm", "navigate": false, "is_binned": false}, got.Axes[2])
		assert.Equal(t, "stemdot", got.Title)
		abs, _ := filepath.Abs(path)
		assert.Equal(t, map[string]string{"stemdot_version": stemdot.Version, "source_file": abs, "source_format": "blo", "command": "stemdot apply test1.blo"}, got.Prov)
		for _, info := range []stemdot.ResultInfo{got.Result, got.Sidecar} {
			require.NotNil(t, info.Calibration)
			assert.Equal(t, []dataset.Axis{{Name: "y", Scale: got.SY, Units: "nm"}, {Name: "x", Scale: got.SX, Units: "nm"}}, info.Calibration.Nav)
			assert.Equal(t, []dataset.Axis{{Name: "ky", Scale: 100.0 / 6226, Units: "cm"}, {Name: "kx", Scale: 100.0 / 6226, Units: "cm"}}, info.Calibration.Sig)
			assert.Equal(t, 0.2, info.Calibration.CameraLength)
		}
		// SDP, the header's u16 at byte 50, is 6226.
		head := make([]byte, 52)
		f, err := os.Open(path)
		require.NoError(t, err)
		_, err = f.ReadAt(head, 0)
		f.Close()
		require.NoError(t, err)
		assert.Equal(t, uint16(6226), binary.LittleEndian.Uint16(head[50:]))
		assert.Equal(t, 12.8, math.Float64frombits(binary.LittleEndian.Uint64(head[30:])))
	}
}

// hs.load reads an HDF5 result as HyperSpy's Signal2D of the masks' images, its axes
// calibrated (skipped without HyperSpy).
func TestSaveHDF5HyperSpy(t *testing.T) {
	if _, ok := hdf5.Library(); !ok {
		t.Skip("built without HDF5")
	}
	path := testfiles.File(t, "blo/test1.blo")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	stack, err := stemdot.Masks(ds.SigShape(), "disk:72,72,10", "ring:72,72,20,40", "rect:0,0,144,144")
	require.NoError(t, err)
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	h5 := filepath.Join(t.TempDir(), "r.hspy")
	require.NoError(t, stemdot.Save(res, stemdot.Outputs{HDF5: h5}))
	out := testfiles.RunPython(t, `import sys, json, warnings
warnings.filterwarnings("ignore")
import hyperspy.api as hs
s = hs.load(sys.argv[1])
am = s.axes_manager
print(json.dumps({"class": type(s).__name__, "nav": [[a.name, a.size] for a in am.navigation_axes],
    "sig": [[a.name, a.size, a.scale, a.units] for a in am.signal_axes], "v": float(s.data[2, 1, 0])}))`, []string{"hyperspy"}, h5)
	var got struct {
		Class string
		Nav   [][]any
		Sig   [][]any
		V     float64
	}
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, "Signal2D", got.Class)
	assert.Equal(t, [][]any{{"mask", 3.0}}, got.Nav)
	// HyperSpy lists signal axes x first.
	assert.Equal(t, [][]any{{"x", 2.0, 12.8, "nm"}, {"y", 3.0, 12.8, "nm"}}, got.Sig)
	assert.Equal(t, res.Value(2, 2), got.V) // the whole frame's sum at scan position (1, 0)
}

// An HDF5 output's path must end in .h5, .hdf5 or .hspy; a refused save leaves no file.
func TestSaveHDF5Refused(t *testing.T) {
	dir := t.TempDir()
	res := &stemdot.Result{NavShape: []int{1, 2}, NMasks: 1, F32: []float32{1, 2}, Names: []string{"m"}}
	for _, name := range []string{"r.npy", "r.txt", ".h5"} {
		err := stemdot.Save(res, stemdot.Outputs{HDF5: filepath.Join(dir, name)})
		assert.ErrorContains(t, err, "give a path ending in .h5, .hdf5 or .hspy", name)
		assert.Equal(t, errs.Argument, errs.KindOf(err), name)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
