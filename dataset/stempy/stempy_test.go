package stempy_test

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/dataset/stempy"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// writer writes a stempy file with h5py as stempy's writers lay it out (version 1: one
// row per scan position, duplicates counting twice; version 2: a position's further
// frames after the first n_scans rows, placed by scan_positions; version 3: fps rows per
// position, flattened), and computes with numpy alone each scan position's densified
// counts and their float64 products with random masks: the independent reference.
const writer = `
import sys, h5py, numpy as np
out, version, ny, nx, fy, fx, fps = sys.argv[1], *map(int, sys.argv[2:])
rng = np.random.default_rng(version)
scans, pixels = ny * nx, fy * fx
if version >= 3:
    rows = scans * fps
    pos = np.repeat(np.arange(scans), fps)
elif version == 2:
    extra = rng.choice(scans, 4, replace=False)
    pos = np.concatenate([np.arange(scans), extra])
    rows = len(pos)
else:
    pos = np.arange(scans)
    rows = scans
ev = np.empty(rows, dtype=object)
for r in range(rows):
    n = 0 if r % 7 == 3 else rng.integers(0, pixels // 3)
    ev[r] = rng.integers(0, pixels, n).astype(np.uint32)  # with repeats: counts of 2 or more
with h5py.File(out + '/counted.h5', 'w') as f:
    if version > 1:
        f.attrs['version'] = version
    g = f.create_group('electron_events')
    sp = g.create_dataset('scan_positions', data=pos.astype(np.uint32) if version < 3 else np.arange(scans, dtype=np.uint32))
    sp.attrs['Nx'], sp.attrs['Ny'] = nx, ny
    fr = g.create_dataset('frames', (rows,), dtype=h5py.special_dtype(vlen=np.uint32))
    fr[...] = ev
    fr.attrs['Nx'], fr.attrs['Ny'] = fy, fx  # SparseArray: frame_shape = (Nx, Ny)
dense = np.zeros((scans, pixels), dtype=np.uint32)
for r in range(rows):
    np.add.at(dense[pos[r]], ev[r].astype(np.int64), 1)
dense.tofile(out + '/dense.bin')
m = rng.uniform(-1, 1, (4, pixels)).astype(np.float32)
m.tofile(out + '/masks.bin')
(dense.astype(np.float64) @ m.astype(np.float64).T).tofile(out + '/result.bin')
`

// TestAgainstNumpy: files of stempy's versions 1, 2 and 3 written by h5py are detected
// as stempy (not plain HDF5), have the scan and frame shapes of their attributes, give
// numpy's densified counts (read densified and as events), and the mask-dot product of
// the gather kernel equals numpy's float64 product.
func TestAgainstNumpy(t *testing.T) {
	const ny, nx, fy, fx = 3, 5, 12, 10
	for _, c := range []struct{ version, fps int }{{1, 1}, {2, 1}, {3, 1}, {3, 2}} {
		t.Run("version"+strconv.Itoa(c.version)+"/fps"+strconv.Itoa(c.fps), func(t *testing.T) {
			dir := t.TempDir()
			testfiles.RunPython(t, writer, []string{"numpy", "h5py"}, dir, strconv.Itoa(c.version), "3", "5", "12", "10", strconv.Itoa(c.fps))
			path := filepath.Join(dir, "counted.h5")
			assert.True(t, stempy.Detect(path, dataset.Options{}))
			ds, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer ds.Close()
			assert.Equal(t, "stempy", ds.Format())
			assert.Equal(t, []int{ny, nx}, ds.NavShape())
			assert.Equal(t, [2]int{fy, fx}, ds.SigShape())
			assert.Equal(t, dataset.Uint32, ds.DType())
			assert.False(t, dataset.NavShapeGuessed(ds))

			want, err := os.ReadFile(filepath.Join(dir, "dense.bin"))
			require.NoError(t, err)
			fb := ds.FrameBytes()
			got := make([]byte, ny*nx*fb)
			require.NoError(t, ds.ReadFrames(0, ny*nx, got))
			require.Equal(t, want, got)
			for s := 0; s < ny*nx; s += 4 {
				e := min(s+4, ny*nx)
				var sf dataset.SparseFrames
				sf.Reset()
				require.NoError(t, dataset.SparseOf(ds).ReadSparse(s, e, &sf))
				dense := make([]byte, (e-s)*fb)
				require.NoError(t, sf.Densify(dense, ds.SigShape(), ds.DType()))
				require.Equal(t, want[s*fb:e*fb], dense, "positions [%d, %d) read as events", s, e)
			}

			stack, err := masks.New(4, fy, fx, frametest.ReadFloats[float32](t, filepath.Join(dir, "masks.bin")), nil)
			require.NoError(t, err)
			ref := frametest.ReadFloats[float64](t, filepath.Join(dir, "result.bin"))
			plan := &planner.Plan{CoresUsable: 1, Workers: []planner.Worker{{ID: 0, Kind: planner.CPU, GPU: -1}, {ID: 1, Kind: planner.CPU, GPU: -1}},
				Partitions: []planner.Partition{{Start: 0, End: 7}, {Start: 7, End: 15}}}
			res, err := engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{Float64: true, NoPin: true, TileFrames: 3})
			require.NoError(t, err)
			assert.True(t, res.Stats.Gather)
			require.Len(t, res.F64, len(ref))
			for i := range ref {
				assert.InDelta(t, ref[i], res.F64[i], 1e-9*(1+math.Abs(ref[i])), "result %d", i)
			}
		})
	}
}

// malformed writes a stempy-like file with h5py from the Python statements body (f is
// the open file, vl the vlen uint32 dtype).
func malformed(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bad.h5")
	code := "import sys, h5py, numpy as np\nvl = h5py.special_dtype(vlen=np.uint32)\nwith h5py.File(sys.argv[1], 'w') as f:\n    g = f.create_group('electron_events')\n" +
		"    " + strings.ReplaceAll(strings.TrimSpace(body), "\n", "\n    ") + "\n"
	testfiles.RunPython(t, code, []string{"numpy", "h5py"}, path)
	return path
}

// TestMalformed: malformed layouts are clear errors naming the object, never a panic;
// a file without shapes is read with notes and the nav shape warning.
func TestMalformed(t *testing.T) {
	rows := `fr = g.create_dataset('frames', (4,), dtype=vl)
fr[...] = np.array([np.array([0, 3], np.uint32), np.array([], np.uint32), np.array([5], np.uint32), np.array([1, 1], np.uint32)], dtype=object)
`
	for _, c := range []struct {
		name, body, want string
		kind             errs.Kind
		onRead           bool
	}{
		{"fixed rows", "fr = g.create_dataset('frames', data=np.zeros((4,), np.uint32))\nfr.attrs['Nx'] = 4\nfr.attrs['Ny'] = 4", "/electron_events/frames is not a dataset of variable-length integer rows", errs.Format, false},
		// HDF5 would convert -1 to pixel 0 and 2^40 to 2^32-1 on reading them as uint32.
		{"signed rows", "fr = g.create_dataset('frames', (2,), dtype=h5py.special_dtype(vlen=np.int32))\nfr[...] = np.array([np.array([0, -1], np.int32), np.array([3], np.int32)], dtype=object)\nfr.attrs['Nx'] = 2\nfr.attrs['Ny'] = 2",
			"/electron_events/frames holds rows of int32: only rows of unsigned integers of up to 32 bits are read (uint8, uint16, uint32; stempy writes uint32)", errs.DType, false},
		{"64-bit rows", "fr = g.create_dataset('frames', (2,), dtype=h5py.special_dtype(vlen=np.uint64))\nfr[...] = np.array([np.array([0, 2**40], np.uint64), np.array([3], np.uint64)], dtype=object)\nfr.attrs['Nx'] = 2\nfr.attrs['Ny'] = 2",
			"/electron_events/frames holds rows of uint64: only rows of unsigned integers", errs.DType, false},
		{"index outside", rows + "fr.attrs['Nx'] = 2\nfr.attrs['Ny'] = 2", "row 2: pixel index 5 is outside the frame of 2×2 pixels", errs.Format, true},
		{"one frame attribute", rows + "fr.attrs['Nx'] = 2", "has only one of its attributes Nx and Ny (the frame shape)", errs.Format, false},
		{"zero size", rows + "fr.attrs['Nx'] = 0\nfr.attrs['Ny'] = 4", "attribute Nx of /electron_events/frames is 0", errs.Format, false},
		{"float attribute", rows + "fr.attrs['Nx'] = 2.5\nfr.attrs['Ny'] = 4", "attribute Nx of /electron_events/frames: not a single integer", errs.Format, false},
		{"v3 rows", rows + "fr.attrs['Nx'] = 4\nfr.attrs['Ny'] = 4\nf.attrs['version'] = 3\nsp = g.create_dataset('scan_positions', data=np.arange(3))\nsp.attrs['Nx'] = 3\nsp.attrs['Ny'] = 1", "holds 4 rows, not a whole number of frames for each of the 3 scan positions", errs.Format, false},
		{"positions outside", rows + "fr.attrs['Nx'] = 4\nfr.attrs['Ny'] = 4\nsp = g.create_dataset('scan_positions', data=np.array([0, 1, 2, 9]))\nsp.attrs['Nx'] = 2\nsp.attrs['Ny'] = 2", "scan_positions[3] is 9, outside the scan's 4 positions", errs.Format, false},
		{"uint64 positions", rows + "fr.attrs['Nx'] = 4\nfr.attrs['Ny'] = 4\nsp = g.create_dataset('scan_positions', data=np.array([0, 1, 2, 2**64-1], np.uint64))\nsp.attrs['Nx'] = 2\nsp.attrs['Ny'] = 2", "scan_positions[3] is 18446744073709551615", errs.Format, false},
		{"uint64 attribute", rows + "fr.attrs['Nx'] = np.uint64(2**64-1)\nfr.attrs['Ny'] = 4", "attribute Nx of /electron_events/frames is 18446744073709551615", errs.Format, false},
		{"positions count", rows + "fr.attrs['Nx'] = 4\nfr.attrs['Ny'] = 4\ng.create_dataset('scan_positions', data=np.arange(3))", "has length 3 but /electron_events/frames has 4 rows", errs.Format, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := malformed(t, c.body)
			ds, err := stempy.Open(path, dataset.Options{})
			if c.onRead {
				require.NoError(t, err)
				defer ds.Close()
				err = ds.ReadFrames(0, ds.NumFrames(), make([]byte, ds.NumFrames()*ds.FrameBytes()))
				var sf dataset.SparseFrames
				sf.Reset()
				require.Error(t, dataset.SparseOf(ds).ReadSparse(0, ds.NumFrames(), &sf))
				assert.Zero(t, sf.Frames(), "a failed read leaves the buffer as it was")
			}
			require.Error(t, err)
			assert.Equal(t, c.kind, errs.KindOf(err), "%v", err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "bad.h5")
		})
	}

	// No shapes at all: 576×576 with a note, the nav shape guessed (1, 4) with its
	// warning; option sig_shape gives another frame shape.
	path := malformed(t, rows)
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, "stempy", ds.Format())
	assert.Equal(t, [2]int{576, 576}, ds.SigShape())
	assert.True(t, dataset.NavShapeGuessed(ds))
	assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "read as the 4D Camera's 576×576")
	require.NoError(t, ds.Close())
	ds, err = dataset.Open(path, dataset.Options{SigShape: []int{2, 3}, NavShape: []int{2, 2}})
	require.NoError(t, err)
	defer ds.Close()
	got := make([]byte, 4*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 4, got))
	counts := make([]uint32, 24)
	for i := range counts {
		counts[i] = binary.NativeEndian.Uint32(got[4*i:])
	}
	assert.Equal(t, []uint32{1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0}, counts)

	// A plain HDF5 file is not stempy's.
	plain := filepath.Join(t.TempDir(), "plain.h5")
	testfiles.RunPython(t, "import sys, h5py, numpy as np\nh5py.File(sys.argv[1], 'w').create_dataset('data', data=np.zeros((2, 2, 4, 4), np.uint16))", []string{"h5py"}, plain)
	assert.False(t, stempy.Detect(plain, dataset.Options{}))
	pds, err := dataset.Open(plain, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, "hdf5", pds.Format())
	require.NoError(t, pds.Close())
}

// A version 3 file that declares 2^26 rows for a scan of 4096×4096 positions (chunked,
// nothing but one row written: a file of a few kB) opens without a map of its rows
// (issue #33: the row count read from the file sized 640 MB of maps), and its
// positions' frames are their 4 rows added.
func TestV3DeclaredRows(t *testing.T) {
	path := malformed(t, `f.attrs['version'] = 3
fr = g.create_dataset('frames', (1 << 26,), dtype=vl, chunks=(1024,))
fr[4] = np.array([5, 1], np.uint32)
fr[6] = np.array([5], np.uint32)
fr.attrs['Nx'] = 2
fr.attrs['Ny'] = 3
sp = g.create_dataset('scan_positions', (1 << 24,), dtype=np.uint32, chunks=(1024,))
sp.attrs['Nx'] = 4096
sp.attrs['Ny'] = 4096`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ds, err := stempy.Open(path, dataset.Options{})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	defer ds.Close()
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "bytes allocated by the open")
	assert.Equal(t, []int{4096, 4096}, ds.NavShape())
	assert.Contains(t, dataset.Notes(ds), "4 frames per scan position, their counts added")
	got := make([]byte, 2*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 2, got))
	counts := make([]uint32, 12)
	for i := range counts {
		counts[i] = binary.NativeEndian.Uint32(got[4*i:])
	}
	assert.Equal(t, []uint32{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}, counts, "position 1 holds rows 4 to 7")
}
