//go:build !nohdf5

package hdf5_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// stackFiles writes image stacks stored frames-last, (y, x, frame), with h5py: FEI
// Velox-like files (/Data/Image/<uuid>/Data beside its Metadata, /Version), contiguous,
// chunked with gzip (chunks of 2 frames, and chunks splitting frames) and with LZF;
// stacks whose axes are named by Berkeley EMD's axis datasets (EMD 0.2's dim1..dim3,
// EMD 1.0's dim0..dim2) or by dimension labels; a stack the file says nothing of; one
// whose chunks of frames 2 and 4 were never written; and beside each the frames in
// frame order as numpy gives them (np.moveaxis(data, 2, 0), RosettaSciIO's order), in
// host byte order.
const stackFiles = `
import sys, os, json
import numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(33)
def stack(h, w, n, dtype="<u2"):
    return rng.integers(0, 4000, (h, w, n)).astype(dtype)
def velox(name, data, **kw):
    with h5py.File(os.path.join(d, name + ".emd"), "w") as f:
        f["Version"] = np.array([json.dumps({"format": "Velox", "version": 11}).encode()])
        g = f.create_group("Data/Image/6b7a4d1c9f2e4a8b8c3d2e1f0a9b8c7d")
        g.create_dataset("Data", data=data, **kw)
        g["Metadata"] = np.zeros((64, data.shape[2]), np.uint8)
    return data
def emd(name, data, labels, first):
    with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
        g = f.create_group("stack")
        g.attrs["emd_group_type"] = 1
        g["data"] = data
        for i, l in enumerate(labels):
            g["dim%d" % (i + first)] = np.arange(data.shape[i], dtype=np.float64)
            g["dim%d" % (i + first)].attrs["name"] = np.bytes_(l) if first else l
    return data
def labelled(name, data, labels):
    with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
        ds = f.create_dataset("images", data=data)
        for i, l in enumerate(labels):
            ds.dims[i].label = l
    return data
def plain(name, data, **kw):
    with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
        f.create_dataset("images", data=data, **kw)
    return data
refs = {
    "velox": velox("velox", stack(24, 20, 5)),
    "velox_gzip": velox("velox_gzip", stack(24, 20, 7, ">i4"), chunks=(24, 20, 2), compression="gzip"),
    "velox_gzip_split": velox("velox_gzip_split", stack(24, 20, 7), chunks=(10, 8, 3), compression="gzip", shuffle=True),
    "velox_lzf": velox("velox_lzf", stack(24, 20, 6), chunks=(24, 20, 1), compression="lzf"),
    "velox_one": velox("velox_one", stack(32, 30, 1)),
    "emd02": emd("emd02", stack(16, 18, 4), ["y", "x", "frame"], 1),
    "emd10": emd("emd10", stack(16, 18, 4), ["Y (nm)", "X (nm)", "Time"], 0),
    "labels": labelled("labels", stack(16, 18, 3), ["y", "x", "frame"]),
    "unknown": plain("unknown", stack(64, 64, 5)),
}
for name, x in refs.items():
    np.moveaxis(x, 2, 0).astype(x.dtype.newbyteorder("=")).tofile(os.path.join(d, name + ".ref"))
x = stack(16, 12, 5)
with h5py.File(os.path.join(d, "unwritten.h5"), "w") as f:
    ds = f.create_dataset("images", shape=x.shape, dtype=x.dtype, chunks=(16, 12, 1), fillvalue=9, compression="gzip")
    ds.dims[0].label, ds.dims[1].label, ds.dims[2].label = "y", "x", "frame"
    for k in (0, 1, 3):
        ds[:, :, k] = x[:, :, k]
x[:, :, [2, 4]] = 9
np.moveaxis(x, 2, 0).tofile(os.path.join(d, "unwritten.ref"))
`

// TestHDF5FramesLast reads image stacks stored frames-last in frame order, detected
// from the file (Velox's layout, EMD axis names, dimension labels) or asked for (option
// frame_axis=last), through libhdf5 and through the chunks decoded in Go, over tiles of
// several sizes, against numpy; a stack the file says nothing of is read as stored,
// with a note naming the option.
func TestHDF5FramesLast(t *testing.T) {
	dir := t.TempDir()
	testfiles.RunPython(t, stackFiles, []string{"numpy", "h5py"}, dir)
	check := func(t *testing.T, path, ref string, opt dataset.Options) dataset.Dataset {
		t.Helper()
		want, err := os.ReadFile(filepath.Join(dir, ref+".ref"))
		require.NoError(t, err)
		d, err := dataset.Open(path, opt)
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		fb := d.FrameBytes()
		require.Equal(t, len(want), d.NumFrames()*fb)
		for _, tile := range []int{1, 2, 3, d.NumFrames()} {
			got := make([]byte, len(want))
			for start := 0; start < d.NumFrames(); start += tile {
				end := min(start+tile, d.NumFrames())
				require.NoError(t, d.ReadFrames(start, end, got[start*fb:end*fb]))
			}
			require.True(t, string(got) == string(want), "tiles of %d frames differ from numpy's", tile)
		}
		return d
	}
	velox := "/Data/Image/6b7a4d1c9f2e4a8b8c3d2e1f0a9b8c7d/Data"
	for name, n := range map[string]int{"velox": 5, "velox_gzip": 7, "velox_gzip_split": 7, "velox_lzf": 6} {
		t.Run(name, func(t *testing.T) {
			d := check(t, filepath.Join(dir, name+".emd"), name, dataset.Options{})
			assert.Equal(t, []int{n}, d.NavShape())
			assert.Equal(t, [2]int{24, 20}, d.SigShape())
			assert.Contains(t, dataset.Notes(d), fmt.Sprintf("dataset %s (24, 20, %d) is an image stack stored frames-last, (y, x, frame) "+
				"(an FEI Velox image, %[1]s beside its Metadata, as RosettaSciIO reads it): read as %[2]d frames of 24×20 pixels (option frame_axis=first reads it as stored)", velox, n))
		})
	}
	t.Run("one image", func(t *testing.T) {
		d := check(t, filepath.Join(dir, "velox_one.emd"), "velox_one", dataset.Options{})
		assert.Equal(t, [2]int{32, 30}, d.SigShape())
		assert.Equal(t, 1, d.NumFrames())
	})
	for name, labels := range map[string]string{"emd02": `"y", "x", "frame"`, "emd10": `"Y (nm)", "X (nm)", "Time"`, "labels": `"y", "x", "frame"`} {
		t.Run(name, func(t *testing.T) {
			d := check(t, filepath.Join(dir, name+".h5"), name, dataset.Options{})
			assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "(its axes are named "+labels+")")
		})
	}
	t.Run("stated nowhere: a note, or the option", func(t *testing.T) {
		path := filepath.Join(dir, "unknown.h5")
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, [2]int{64, 5}, d.SigShape())
		assert.Contains(t, dataset.Notes(d), "dataset /images (64, 64, 5) is read as 64 frames of 64×5 pixels; if it is an image stack stored frames-last, (y, x, frame), give option frame_axis=last")
		require.NoError(t, d.Close())
		d = check(t, path, "unknown", dataset.Options{FormatOptions: map[string]string{"frame_axis": "last"}})
		assert.Equal(t, [2]int{64, 64}, d.SigShape())
		assert.Empty(t, dataset.Notes(d))
	})
	t.Run("frame_axis=first reads as stored", func(t *testing.T) {
		d, err := dataset.Open(filepath.Join(dir, "velox.emd"), dataset.Options{FormatOptions: map[string]string{"frame_axis": "first"}})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, []int{24}, d.NavShape())
		assert.Equal(t, [2]int{20, 5}, d.SigShape())
		assert.Empty(t, dataset.Notes(d))
	})
	t.Run("frames never written are named in frame order", func(t *testing.T) {
		path := filepath.Join(dir, "unwritten.h5")
		_, err := dataset.Open(path, dataset.Options{})
		require.ErrorIs(t, err, errs.Format)
		assert.ErrorContains(t, err, "2 of its 5 frames would be read as the fill value 9, not as recorded: frames 2, 4: 2 of its 5 chunks were never written")
		check(t, path, "unwritten", dataset.Options{AllowFill: true})
	})
	t.Run("option errors", func(t *testing.T) {
		_, err := dataset.Open(filepath.Join(dir, "velox.emd"), dataset.Options{FormatOptions: map[string]string{"frame_axis": "middle"}})
		require.ErrorIs(t, err, errs.Argument)
		assert.ErrorContains(t, err, `option frame_axis "middle" is not auto, first or last`)
	})
}

// TestHDF5FramesLastRank4 refuses option frame_axis=last for a dataset of rank 4.
func TestHDF5FramesLastRank4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r4.h5")
	testfiles.RunPython(t, `
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    f["scan"] = np.zeros((2, 3, 8, 8), np.uint16)
`, []string{"numpy", "h5py"}, path)
	_, err := dataset.Open(path, dataset.Options{FormatOptions: map[string]string{"frame_axis": "last"}})
	require.ErrorIs(t, err, errs.Argument)
	assert.ErrorContains(t, err, "option frame_axis=last reads a dataset of rank 3, (sig_y, sig_x, n), and dataset /scan has shape (2, 3, 8, 8)")
}
