//go:build !nohdf5

package hdf5_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// indexFiles writes, with h5py, compressed frame stacks in every chunk index that
// libhdf5 writes, and beside each the frames as h5py reads them (host byte order):
// version 1 B-trees (h5py's default) of one and several levels, in a file with a user
// block; with libver v110 (layout version 4, which libhdf5 1.10 reads) a single chunk,
// fixed arrays (paged or not, a maximal extent beyond the extent), extensible arrays
// (one unlimited axis, the first or not; one of 140000 chunks, its last data blocks
// paged) and version 2 B-trees (two unlimited axes; one of depth 2). Some chunks are
// never written. And an external link to the file with a user block.
const indexFiles = `
import sys, os
import numpy as np, h5py, hdf5plugin
d = sys.argv[1]
rng = np.random.default_rng(36)
bslz4 = dict(**hdf5plugin.Bitshuffle(cname="lz4"))
gzip = dict(compression="gzip", shuffle=True)
cases = {
    # name: (libver, shape, chunks, maxshape, filters, holes, userblock)
    "btree1": ("earliest", (6, 5, 16, 20), (1, 1, 16, 20), None, gzip, False, 0),
    "btree1_levels_userblock": ("earliest", (40, 40, 8, 8), (1, 1, 8, 8), None, bslz4, False, 512),
    "btree1_holes_split": ("earliest", (9, 7, 12, 10), (2, 3, 8, 10), None, gzip, True, 0),
    "single_chunk": (("v110", "v110"), (3, 4, 8, 8), (3, 4, 8, 8), None, gzip, False, 0),
    "farray": (("v110", "v110"), (6, 5, 16, 20), (1, 1, 16, 20), None, bslz4, False, 0),
    "farray_paged_holes": (("v110", "v110"), (50, 50, 4, 4), (1, 1, 4, 4), None, gzip, True, 0),
    "farray_maxshape": (("v110", "v110"), (6, 5, 8, 8), (1, 2, 8, 8), (8, 9, 8, 8), gzip, True, 0),
    "earray": (("v110", "v110"), (6, 5, 8, 8), (1, 1, 8, 8), (None, 5, 8, 8), gzip, False, 0),
    "earray_axis1_holes": (("v110", "v110"), (30, 20, 4, 4), (1, 1, 4, 4), (30, None, 4, 4), bslz4, True, 0),
    "earray_paged_big": (("v110", "v110"), (1400, 100, 2, 2), (1, 1, 2, 2), (None, 100, 2, 2), gzip, True, 0),
    "btree2": (("v110", "v110"), (6, 5, 8, 8), (1, 1, 8, 8), (None, None, 8, 8), bslz4, False, 0),
    "btree2_depth2_holes": (("v110", "v110"), (60, 60, 2, 2), (1, 1, 2, 2), (None, None, 2, 2), gzip, True, 0),
}
for name, (libver, shape, chunks, maxshape, kw, holes, ub) in cases.items():
    data = (rng.poisson(2, shape) + rng.integers(0, 3, shape) * 1000).astype("<u2")
    with h5py.File(os.path.join(d, name + ".h5"), "w", libver=libver, userblock_size=ub) as f:
        ds = f.create_dataset("/entry/data", shape=shape, dtype=data.dtype, chunks=chunks, maxshape=maxshape, fillvalue=5, **kw)
        if holes:
            for y in range(shape[0]):
                if y % 3 != 1:
                    ds[y] = data[y]
        else:
            ds[...] = data
    with h5py.File(os.path.join(d, name + ".h5"), "r") as f:
        f["/entry/data"][()].tofile(os.path.join(d, name + ".ref"))
with h5py.File(os.path.join(d, "elink.h5"), "w") as f:
    f["/entry/data"] = h5py.ExternalLink("btree1_levels_userblock.h5", "/entry/data")
with h5py.File(os.path.join(d, "elink.h5"), "r") as f:
    f["/entry/data"][()].tofile(os.path.join(d, "elink.ref"))
`

// TestHDF5ChunkIndex compares the chunk table read from the file's chunk index with
// libhdf5's (H5Dget_chunk_info, chunk by chunk) for every index libhdf5 writes, and the
// frames read with h5py's, read outside the lock. Not for the file of 140000 chunks (the
// listing takes minutes) nor for the extensible array whose unlimited axis is not the
// first: libhdf5 1.10 lists its chunks at offsets beyond the extent ((0, 20) for the
// 21st of a row of 20), though it reads them right.
func TestHDF5ChunkIndex(t *testing.T) {
	dir := t.TempDir()
	testfiles.RunPython(t, indexFiles, []string{"numpy", "h5py", "hdf5plugin"}, dir)
	names, err := filepath.Glob(filepath.Join(dir, "*.h5"))
	require.NoError(t, err)
	require.Len(t, names, 13)
	for _, path := range names {
		name := strings.TrimSuffix(filepath.Base(path), ".h5")
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(strings.TrimSuffix(path, ".h5") + ".ref")
			require.NoError(t, err)
			d, err := dataset.Open(path, dataset.Options{AllowFill: true})
			require.NoError(t, err)
			ours, lib, err := hdf5.ChunkTables(d, !strings.HasSuffix(name, "_big") && !strings.Contains(name, "axis1"))
			require.NoError(t, err)
			require.NotNil(t, ours, "the chunk index is read")
			if lib != nil {
				assert.Equal(t, lib, ours)
			}
			got := make([]byte, len(want))
			fb := d.FrameBytes()
			for start := 0; start < d.NumFrames(); start += 7 {
				end := min(start+7, d.NumFrames())
				require.NoError(t, d.ReadFrames(start, end, got[start*fb:end*fb]))
			}
			assert.True(t, string(got) == string(want), "frames differ from h5py's")
			assert.Zero(t, hdf5.LockedNanos(d), "no chunk read under the lock")
			require.NoError(t, d.Close())
			assert.ErrorContains(t, d.ReadFrames(0, 1, got[:fb]), "read after Close")
		})
	}
}

// TestHDF5ChunkIndexNotRead reads a file whose chunk index h5index refuses (a chunk of
// frame 1 stored, by write_direct_chunk, in more bytes than twice its decoded size):
// the chunks are then read through libhdf5, under the lock, the other frames as h5py
// reads them and that chunk refused as before.
func TestHDF5ChunkIndexNotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big_chunk.h5")
	testfiles.RunPython(t, `
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    ds = f.create_dataset("data", data=np.arange(4 * 16 * 16, dtype="<u2").reshape(4, 16, 16), chunks=(1, 16, 16), compression="gzip")
    ds.id.write_direct_chunk((1, 0, 0), bytes(6000))
`, []string{"numpy", "h5py"}, path)
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	ours, _, err := hdf5.ChunkTables(d, false)
	require.NoError(t, err)
	assert.Nil(t, ours, "the chunk index is not read")
	fb := d.FrameBytes()
	buf := make([]byte, 2*fb)
	require.NoError(t, d.ReadFrames(2, 4, buf))
	for i := range 2 * 16 * 16 {
		require.Equal(t, uint16(2*16*16+i), binary.NativeEndian.Uint16(buf[2*i:]))
	}
	assert.Positive(t, hdf5.LockedNanos(d), "chunks read under the lock")
	err = d.ReadFrames(0, 2, buf)
	require.ErrorIs(t, err, errs.Format)
	assert.ErrorContains(t, err, "the chunk at (1, 0, 0) is stored in 6000 bytes, more than twice its 512 decoded bytes: the file is corrupt")
}
