package csr_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/csr"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// reference writes a raw_csr file set with numpy (random events with duplicates, empty
// frames) and computes, with numpy alone, the densified frames (np.add.at, in the data
// dtype, 8- and 16-bit integers widened to 32 bits as the reader delivers them) and the products of the frames densified in float64 with random masks (and
// Σ|value·weight|, which bounds their rounding): the independent reference.
const reference = `
import sys, json, numpy as np
out, nav_y, nav_x, sy, sx, ptr_dt, idx_dt, data_dt, seed = sys.argv[1:]
nav_y, nav_x, sy, sx, seed = int(nav_y), int(nav_x), int(sy), int(sx), int(seed)
rng = np.random.default_rng(seed)
n, pixels = nav_y * nav_x + 2, sy * sx  # 2 surplus frames after the scan
counts = rng.integers(0, pixels // 4, n)
counts[::5] = 0
indptr = np.concatenate([[0], np.cumsum(counts)])
indices = rng.integers(0, pixels, indptr[-1])
kind, size = np.dtype(data_dt).kind, np.dtype(data_dt).itemsize
if kind == 'f':
    data = rng.normal(0, 100, indptr[-1])
elif kind == 'i':
    data = rng.integers(-20, 21, indptr[-1]) if size > 1 else rng.integers(-128, 128, indptr[-1])
else:
    data = rng.integers(0, 21, indptr[-1]) if size > 1 else rng.integers(0, 256, indptr[-1])
data = data.astype(data_dt)
# The dtype of the sums: 8- and 16-bit integers widened to 32 bits (duplicates add up).
sums = np.dtype(data_dt).newbyteorder('=')
if kind in 'iu' and size < 4:
    sums = np.dtype(kind + '4')
indptr.astype(ptr_dt).tofile(out + '/indptr.raw')
indices.astype(idx_dt).tofile(out + '/indices.raw')
data.tofile(out + '/data.raw')
with open(out + '/scan.toml', 'w') as f:
    f.write('[params]\nfiletype = "raw_csr"\nnav_shape = [%d, %d]\nsig_shape = [%d, %d]\n\n' % (nav_y, nav_x, sy, sx))
    f.write('[raw_csr]\nindptr_file = "indptr.raw"\nindptr_dtype = "%s"\nindices_file = "indices.raw"\nindices_dtype = "%s"\ndata_file = "data.raw"\ndata_dtype = "%s"\n' % (ptr_dt, idx_dt, data_dt))
dense = np.zeros((n, pixels), dtype=sums)
exact = np.zeros((n, pixels))  # float64: duplicates of float32 values summed exactly
for i in range(n):
    np.add.at(dense[i], indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]])
    np.add.at(exact[i], indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]].astype(np.float64))
dense.tofile(out + '/dense.bin')
masks = rng.uniform(-1, 1, (3, pixels)).astype(np.float32)
masks[2, rng.random(pixels) > 0.05] = 0
masks.tofile(out + '/masks.bin')
(exact[:nav_y * nav_x] @ masks.astype(np.float64).T).tofile(out + '/result.bin')
absolute = np.zeros((n, pixels))
for i in range(n):
    np.add.at(absolute[i], indices[indptr[i]:indptr[i + 1]], np.abs(data[indptr[i]:indptr[i + 1]].astype(np.float64)))
(absolute[:nav_y * nav_x] @ np.abs(masks.astype(np.float64)).T).tofile(out + '/magnitude.bin')
json.dump({"frames": int(n), "events": int(indptr[-1])}, sys.stdout)
`

// TestAgainstNumpy: files written by numpy, of several index and data dtypes (both byte
// orders), are detected as raw_csr by their TOML file; the frames (densified, and read
// as events) equal numpy's densified frames, and the virtual images of the mask-dot
// product (the gather kernel) equal numpy's float64 product.
func TestAgainstNumpy(t *testing.T) {
	for _, c := range []struct{ ptr, idx, data string }{
		{"<i4", "<i4", "<u2"}, {"<i8", "<i8", "<f4"}, {">i8", ">u4", ">f8"}, {"<u4", "<u2", "|u1"},
		{"int64", "int32", "int16"}, {"<i4", ">i4", "<i4"}, {"<i8", "<i4", "|i1"}, {"<i8", "<i4", "<u4"},
	} {
		t.Run(strings.Join([]string{c.ptr, c.idx, c.data}, ","), func(t *testing.T) {
			dir := t.TempDir()
			testfiles.RunPython(t, reference, []string{"numpy"}, dir, "3", "4", "12", "10", c.ptr, c.idx, c.data, "7")
			path := filepath.Join(dir, "scan.toml")
			ds, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer ds.Close()
			assert.Equal(t, "raw_csr", ds.Format())
			assert.Equal(t, []int{3, 4}, ds.NavShape())
			assert.Equal(t, [2]int{12, 10}, ds.SigShape())
			assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "the last 2 are surplus")

			want, err := os.ReadFile(filepath.Join(dir, "dense.bin"))
			require.NoError(t, err)
			fb := ds.FrameBytes()
			got := make([]byte, 12*fb)
			require.NoError(t, ds.ReadFrames(0, 12, got))
			require.Equal(t, want[:12*fb], got)
			for s := 0; s < 12; s += 5 {
				e := min(s+5, 12)
				var sf dataset.SparseFrames
				sf.Reset()
				require.NoError(t, dataset.SparseOf(ds).ReadSparse(s, e, &sf))
				dense := make([]byte, (e-s)*fb)
				require.NoError(t, sf.Densify(dense, ds.SigShape(), ds.DType()))
				require.Equal(t, want[s*fb:e*fb], dense, "frames [%d, %d) read sparse", s, e)
			}

			m := frametest.ReadFloats[float32](t, filepath.Join(dir, "masks.bin"))
			stack, err := masks.New(3, 12, 10, m, nil)
			require.NoError(t, err)
			ref := frametest.ReadFloats[float64](t, filepath.Join(dir, "result.bin"))
			mag := frametest.ReadFloats[float64](t, filepath.Join(dir, "magnitude.bin"))
			rel := 1e-12
			if ds.DType() == dataset.Float32 {
				rel = 1.2e-7 // a tile the CPU worker densifies sums duplicate events in float32, as ReadFrames does
			}
			plan := &planner.Plan{CoresUsable: 1, Workers: []planner.Worker{{ID: 0, Kind: planner.CPU, GPU: -1}, {ID: 1, Kind: planner.CPU, GPU: -1}},
				Partitions: []planner.Partition{{Start: 0, End: 5}, {Start: 5, End: 12}}}
			res, err := engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{Float64: true, NoPin: true, TileFrames: 2})
			require.NoError(t, err)
			assert.True(t, res.Stats.Gather)
			require.Len(t, res.F64, len(ref))
			for i := range ref {
				assert.InDelta(t, ref[i], res.F64[i], 1e-12+rel*mag[i], "result %d", i)
			}
		})
	}
}

// fileSet writes a raw_csr file set by hand: little-endian int64 indptr, int32
// indices, uint32 data, and the TOML text (params and section lines given).
func fileSet(t *testing.T, indptr []int64, indices []int32, data []uint32, params, section string) string {
	t.Helper()
	dir := t.TempDir()
	var b []byte
	for _, v := range indptr {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "indptr.bin"), b, 0o644))
	b = nil
	for _, v := range indices {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "indices.bin"), b, 0o644))
	b = nil
	for _, v := range data {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.bin"), b, 0o644))
	if section == "" {
		section = `indptr_file = "indptr.bin"
indptr_dtype = "<i8"
indices_file = "indices.bin"
indices_dtype = "<i4"
data_file = "data.bin"
data_dtype = "<u4"`
	}
	path := filepath.Join(dir, "s.toml")
	require.NoError(t, os.WriteFile(path, []byte("[params]\nfiletype = \"raw_csr\"\n"+params+"\n\n[raw_csr]\n"+section+"\n"), 0o644))
	return path
}

// TestOptions: the TOML's sync_offset (not applied, as LiberTEM does not apply it: a
// note says so) and option sync_offset, option nav_shape, a file
// without nav_shape (a warning naming option nav_shape), option sig_shape of the same
// pixel count, and the frames read through each.
func TestOptions(t *testing.T) {
	// 6 frames of 2×2: frame i has one event at pixel i%4 of value i+1 (frame 2: none).
	indptr := []int64{0, 1, 2, 2, 3, 4, 5}
	indices := []int32{0, 1, 3, 0, 1}
	data := []uint32{1, 2, 4, 5, 6}
	frame := func(ds dataset.Dataset, i int) []uint32 {
		b := make([]byte, 16)
		require.NoError(t, ds.ReadFrames(i, i+1, b))
		return []uint32{binary.NativeEndian.Uint32(b), binary.NativeEndian.Uint32(b[4:]), binary.NativeEndian.Uint32(b[8:]), binary.NativeEndian.Uint32(b[12:])}
	}
	path := fileSet(t, indptr, indices, data, "nav_shape = [2, 2]\nsig_shape = [2, 2]\nsync_offset = 2", "")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2}, ds.NavShape())
	assert.Equal(t, []uint32{1, 0, 0, 0}, frame(ds, 0)) // file frame 0
	assert.Equal(t, []uint32{0, 2, 0, 0}, frame(ds, 1))
	assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "[params] sync_offset 2 of s.toml is not applied, as LiberTEM does not apply it: give option sync_offset to apply one")
	require.NoError(t, ds.Close())
	ds, err = dataset.Open(path, dataset.Options{SyncOffset: 2})
	require.NoError(t, err)
	assert.Equal(t, []uint32{0, 0, 0, 0}, frame(ds, 0)) // file frame 2
	assert.Equal(t, []uint32{0, 0, 0, 4}, frame(ds, 1))
	require.NoError(t, ds.Close())
	// A value from the file reaches the note escaped.
	odd := fileSet(t, indptr, indices, data, "nav_shape = [2, 3]\nsig_shape = [2, 2]\nsync_offset = [\"\\u001b[2J\"]", "")
	ds, err = dataset.Open(odd, dataset.Options{})
	require.NoError(t, err)
	assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), `[params] sync_offset "[\x1b[2J]" of s.toml is not applied`)
	require.NoError(t, ds.Close())

	ds, err = dataset.Open(path, dataset.Options{SyncOffset: -1, NavShape: []int{7}})
	require.NoError(t, err)
	assert.Equal(t, []int{7}, ds.NavShape())
	assert.Equal(t, []uint32{0, 0, 0, 0}, frame(ds, 0))
	assert.Equal(t, []uint32{1, 0, 0, 0}, frame(ds, 1))
	assert.Equal(t, []uint32{0, 6, 0, 0}, frame(ds, 6))
	require.NoError(t, ds.Close())

	// A positive offset keeps the nav shape (LiberTEM's sync_offset, peer X03): the last
	// positions have no frame, read as frames without events, sparse and dense alike,
	// and an ROI of the scan's nav shape is taken.
	path = fileSet(t, indptr, indices, data, "nav_shape = [2, 3]\nsig_shape = [2, 2]", "")
	roi := dataset.ROI{Mask: []bool{false, true, false, false, true, true}, Shape: []int{2, 3}}
	ds, err = dataset.Open(path, dataset.Options{SyncOffset: 1, ROI: roi})
	require.NoError(t, err)
	assert.Equal(t, []int{3}, ds.NavShape())
	assert.Equal(t, []dataset.FrameSpan{{First: 2, Count: 1}}, dataset.Blanks(ds))
	assert.Equal(t, []uint32{0, 0, 0, 0}, frame(ds, 0)) // position 1: file frame 2
	assert.Equal(t, []uint32{0, 6, 0, 0}, frame(ds, 1)) // position 4: file frame 5
	assert.Equal(t, []uint32{0, 0, 0, 0}, frame(ds, 2)) // position 5: no frame
	var sf dataset.SparseFrames
	sf.Reset()
	require.NoError(t, dataset.SparseOf(ds).ReadSparse(0, 3, &sf))
	assert.Equal(t, []int{0, 0, 1, 1}, sf.Indptr)
	require.NoError(t, ds.Close())

	path = fileSet(t, indptr, indices, data, "sig_shape = [2, 2]", "")
	ds, err = dataset.Open(path, dataset.Options{SigShape: []int{1, 4}})
	require.NoError(t, err)
	assert.True(t, dataset.NavShapeGuessed(ds))
	assert.Equal(t, []int{1, 6}, ds.NavShape())
	assert.Equal(t, [2]int{1, 4}, ds.SigShape())
	require.NoError(t, ds.Close())

	_, err = dataset.Open(path, dataset.Options{SigShape: []int{3, 3}})
	require.Error(t, err)
	assert.Equal(t, errs.Shape, errs.KindOf(err))
	assert.Contains(t, err.Error(), "option sig_shape [3 3] has 9 pixels, but [params] sig_shape [2 2] has 4")
}

// TestMalformed: every malformed file set is a clear error of its kind naming the file
// and the field, never a panic.
func TestMalformed(t *testing.T) {
	indptr := []int64{0, 1, 3}
	indices := []int32{0, 3, 2}
	data := []uint32{1, 2, 3}
	const good = "nav_shape = [2]\nsig_shape = [2, 2]"
	section := func(data string) string {
		return `indptr_file = "indptr.bin"
indptr_dtype = "<i8"
indices_file = "indices.bin"
indices_dtype = "<i4"
data_file = "data.bin"
data_dtype = "` + data + `"`
	}
	for _, c := range []struct {
		name                  string
		indptr                []int64
		indices               []int32
		params, section, want string
		kind                  errs.Kind
		onRead                bool
	}{
		{name: "not monotonic", indptr: []int64{0, 2, 1, 3}, params: "sig_shape = [2, 2]", want: "entry 2 is 1, less than entry 1 (2)", kind: errs.Format, onRead: true},
		{name: "indptr past the events", indptr: []int64{0, 5, 3}, params: good, want: "entry 1 (frame 1) is 5, outside the 3 events", kind: errs.Format, onRead: true},
		{name: "last entry", indptr: []int64{0, 1, 2}, params: good, want: "its entries run from 0 to 2, but the indices and data files hold 3 events", kind: errs.Format},
		{name: "index outside the frame", indices: []int32{0, 4, 2}, params: good, want: "is at pixel 4, outside the frame of 2×2 pixels", kind: errs.Format, onRead: true},
		{name: "negative index", indices: []int32{0, 1, -1}, params: good, want: "is at pixel -1", kind: errs.Format, onRead: true},
		{name: "int64 data", params: good, section: section("<i8"), want: `data_dtype "<i8" is not a dtype stemdot reads`, kind: errs.DType},
		{name: "complex data", params: good, section: section("complex64"), want: `data_dtype "complex64"`, kind: errs.DType},
		{name: "float indptr", params: good, section: strings.Replace(section("<u4"), `"<i8"`, `"<f8"`, 1), want: `indptr_dtype "<f8" is not an integer dtype`, kind: errs.DType},
		{name: "data of another size", params: good, section: section("<f8"), want: "is not a whole number of <f8 elements", kind: errs.Format},
		{name: "data of another count", params: good, section: section("|u1"), want: "indices_file", kind: errs.Format},
		{name: "no sig shape", params: "nav_shape = [2]", want: "[params] has no sig_shape: give it there, or option sig_shape", kind: errs.Format},
		{name: "bad nav shape", params: "nav_shape = [2, -1]\nsig_shape = [2, 2]", want: "[params] nav_shape [2 -1] is not a list of whole numbers from 1 to 2147483647", kind: errs.Format},
		{name: "3-D sig", params: "sig_shape = [1, 2, 2]", want: "[params] sig_shape [1 2 2]: want [sig_y, sig_x]", kind: errs.Format},
		{name: "missing key", params: good, section: "indptr_file = \"indptr.bin\"", want: "[raw_csr] indptr_dtype is missing", kind: errs.Format},
		{name: "missing file", params: good, section: strings.Replace(section("<u4"), "data.bin", "nope.bin", 1), want: "nope.bin", kind: errs.IO},
		{name: "nav shape past 2^31-1", params: "nav_shape = [2147483648, 1]\nsig_shape = [2, 2]", want: "[params] nav_shape [2147483648 1] is not a list of whole numbers from 1 to 2147483647", kind: errs.Format},
		{name: "not toml", params: good + "\n[[[", want: "not a TOML file", kind: errs.Format},
		// Strings of the TOML file reach messages escaped: a file name, a value.
		{name: "escaped file name", params: good, section: strings.Replace(section("<u2"), "data.bin", `\u001b[2Jnope.bin`, 1), want: `/\x1b[2Jnope.bin": file does not exist (data_file in`, kind: errs.IO},
	} {
		t.Run(c.name, func(t *testing.T) {
			ip, ix := indptr, indices
			if c.indptr != nil {
				ip = c.indptr
			}
			if c.indices != nil {
				ix = c.indices
			}
			path := fileSet(t, ip, ix, data, c.params, c.section)
			ds, err := csr.Open(path, dataset.Options{})
			if c.onRead {
				require.NoError(t, err)
				defer ds.Close()
				err = ds.ReadFrames(0, ds.NumFrames(), make([]byte, ds.NumFrames()*ds.FrameBytes()))
				require.Error(t, err)
				var sf dataset.SparseFrames
				sf.Reset()
				require.Error(t, dataset.SparseOf(ds).ReadSparse(0, ds.NumFrames(), &sf))
				assert.Equal(t, 0, sf.Frames(), "a failed read leaves the buffer as it was")
			}
			require.Error(t, err)
			assert.Equal(t, c.kind, errs.KindOf(err), "%v", err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "s.toml")
			assert.NotContains(t, err.Error(), "\x1b")
		})
	}
}

// TestShrinkingFile: a data file cut after Open is an I/O error saying it shrank.
func TestShrinkingFile(t *testing.T) {
	path := fileSet(t, []int64{0, 1, 3}, []int32{0, 3, 2}, []uint32{1, 2, 3}, "nav_shape = [2]\nsig_shape = [2, 2]", "")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.NoError(t, os.Truncate(filepath.Join(filepath.Dir(path), "data.bin"), 4))
	err = ds.ReadFrames(1, 2, make([]byte, 16))
	require.Error(t, err)
	assert.Equal(t, errs.IO, errs.KindOf(err))
	assert.Contains(t, err.Error(), "data.bin")
}

// TestDetect: a raw_csr TOML file is detected, another TOML file is not.
func TestDetect(t *testing.T) {
	path := fileSet(t, []int64{0, 1}, []int32{0}, []uint32{1}, "sig_shape = [1, 1]", "")
	assert.True(t, csr.Detect(path, dataset.Options{}))
	other := filepath.Join(t.TempDir(), "x.toml")
	require.NoError(t, os.WriteFile(other, []byte("[params]\nfiletype = \"other\"\n"), 0o644))
	assert.False(t, csr.Detect(other, dataset.Options{}))
	_, err := dataset.Open(other, dataset.Options{})
	require.Error(t, err)
}

// FuzzCSR opens a raw_csr file set of fuzzed TOML text, indptr, indices and data bytes
// and reads every frame, sparse and densified: never a panic.
func FuzzCSR(f *testing.F) {
	le := binary.LittleEndian
	ptr := le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 0), 1), 3)
	idx := le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 0), 3), 2)
	f.Add("nav_shape = [2]\nsig_shape = [2, 2]", "<i4", "<i4", "<u2", ptr, idx, []byte{1, 0, 2, 0, 3, 0})
	f.Add("sig_shape = [1, 4]\nsync_offset = -1", ">u4", "|u1", "<f8", ptr, []byte{0, 3, 2}, make([]byte, 24))
	f.Fuzz(func(t *testing.T, params, ptrType, idxType, dataType string, indptr, indices, data []byte) {
		dir := t.TempDir()
		for name, b := range map[string][]byte{"p.bin": indptr, "i.bin": indices, "d.bin": data} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
		}
		text := fmt.Sprintf("[params]\nfiletype = \"raw_csr\"\n%s\n[raw_csr]\nindptr_file = \"p.bin\"\nindptr_dtype = %q\nindices_file = \"i.bin\"\nindices_dtype = %q\ndata_file = \"d.bin\"\ndata_dtype = %q\n",
			params, ptrType, idxType, dataType)
		path := filepath.Join(dir, "f.toml")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		ds, err := csr.Open(path, dataset.Options{})
		if err != nil {
			return
		}
		defer ds.Close()
		n := min(ds.NumFrames(), 64)
		if ds.FrameBytes() > 1<<16 {
			return
		}
		_ = ds.ReadFrames(0, n, make([]byte, n*ds.FrameBytes()))
		var sf dataset.SparseFrames
		sf.Reset()
		_ = dataset.SparseOf(ds).ReadSparse(0, n, &sf)
	})
}

// A [params] table without filetype, or with one that is not a string, is refused
// saying so (was "filetype is %!q(<nil>)").
func TestFiletype(t *testing.T) {
	path := fileSet(t, []int64{0, 1}, []int32{0}, []uint32{1}, "sig_shape = [1, 1]", "")
	for body, want := range map[string]string{
		"[params]\nsig_shape = [1, 1]\n":               `[params] has no filetype: not a raw_csr description (want [params] filetype = "raw_csr")`,
		"[params]\nfiletype = 5\nsig_shape = [1, 1]\n": `[params] filetype is 5, not "raw_csr"`,
		"[params]\nfiletype = \"mib\"\n":               `[params] filetype is "mib", not "raw_csr"`,
	} {
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		_, err := csr.Open(path, dataset.Options{})
		require.Error(t, err)
		assert.Equal(t, errs.Format, errs.KindOf(err))
		assert.EqualError(t, err, "dataset: "+path+": "+want)
	}
}

// TestViewSparse: the events of int32 indices and host-order values are viewed in the
// files' mappings (the same frames as ReadSparse); other file sets are read. A run over
// viewed events refuses an event outside the frame (which a view does not check) with
// errs.Format naming it, and a file cut after Open is an I/O error.
func TestViewSparse(t *testing.T) {
	path := fileSet(t, []int64{0, 1, 3, 3, 4}, []int32{0, 3, 2, 1}, []uint32{5, 6, 7, 8}, "nav_shape = [4]\nsig_shape = [2, 2]", "")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	sv, ok := dataset.SparseOf(ds).(dataset.SparseViewer)
	require.True(t, ok)
	var sf dataset.SparseFrames
	viewed, err := sv.ViewSparse(1, 4, &sf)
	require.NoError(t, err)
	require.True(t, viewed)
	assert.Equal(t, []int{0, 2, 2, 3}, sf.Indptr)
	assert.Equal(t, []int32{3, 2, 1}, sf.Indices)
	assert.Equal(t, []uint32{6, 7, 8}, []uint32{binary.NativeEndian.Uint32(sf.Data), binary.NativeEndian.Uint32(sf.Data[4:]), binary.NativeEndian.Uint32(sf.Data[8:])})

	big := fileSet(t, []int64{0, 1}, []int32{0}, []uint32{5}, "nav_shape = [1]\nsig_shape = [2, 2]", `indptr_file = "indptr.bin"
indptr_dtype = "<i8"
indices_file = "indices.bin"
indices_dtype = "<i4"
data_file = "data.bin"
data_dtype = ">u4"`)
	bd, err := dataset.Open(big, dataset.Options{})
	require.NoError(t, err)
	defer bd.Close()
	viewed, err = dataset.SparseOf(bd).(dataset.SparseViewer).ViewSparse(0, 1, &sf)
	require.NoError(t, err)
	assert.False(t, viewed, "big-endian values are read, not viewed")

	stack, err := masks.New(1, 2, 2, []float32{1, 2, 3, 4}, nil)
	require.NoError(t, err)
	plan := &planner.Plan{CoresUsable: 1, Workers: []planner.Worker{{ID: 0, Kind: planner.CPU, GPU: -1}}, Partitions: []planner.Partition{{Start: 0, End: 4}}}
	plan2 := &planner.Plan{CoresUsable: 1, Workers: plan.Workers, Partitions: []planner.Partition{{Start: 0, End: 2}}}
	res, err := engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{Float64: true, NoPin: true})
	require.NoError(t, err)
	assert.True(t, res.Stats.Gather)
	assert.Equal(t, []float64{5, 6*4 + 7*3, 0, 8 * 2}, res.F64)

	bad := fileSet(t, []int64{0, 1, 3}, []int32{0, 3, 16}, []uint32{1, 2, 3}, "nav_shape = [2]\nsig_shape = [4, 4]", "")
	bds, err := dataset.Open(bad, dataset.Options{})
	require.NoError(t, err)
	defer bds.Close()
	stack16, err := masks.New(1, 4, 4, make([]float32, 16), nil)
	require.NoError(t, err)
	_, err = engine.ApplyMasks(context.Background(), bds, stack16, plan2, engine.Options{NoPin: true})
	require.Error(t, err)
	assert.Equal(t, errs.Format, errs.KindOf(err), "%v", err)
	assert.Contains(t, err.Error(), "event 1 of frame 1 is at pixel 16, outside the frame of 16 pixels")
	assert.Contains(t, err.Error(), "s.toml")
	negative := fileSet(t, []int64{0, 0, 1}, []int32{-1}, []uint32{1}, "nav_shape = [2]\nsig_shape = [4, 4]", "")
	nds, err := dataset.Open(negative, dataset.Options{})
	require.NoError(t, err)
	defer nds.Close()
	_, err = engine.ApplyMasks(context.Background(), nds, stack16, plan2, engine.Options{NoPin: true})
	assert.ErrorContains(t, err, "event 0 of frame 1 is at pixel 4294967295 (-1 as int32), outside the frame of 16 pixels")

	require.NoError(t, os.Truncate(filepath.Join(filepath.Dir(path), "indices.bin"), 4))
	_, err = sv.ViewSparse(0, 1, &sf)
	require.Error(t, err)
	assert.Equal(t, errs.IO, errs.KindOf(err))
	assert.Contains(t, err.Error(), "indices.bin")
	_, err = engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{NoPin: true})
	require.Error(t, err)
	assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
}

// mappedRSS is the resident memory, in bytes, of this process's mappings of the file at
// path (/proc/self/smaps, Rss lines).
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var rss int64
	in := false
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) == 6 && f[5] == path // a mapping's header line
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			rss += kb << 10
		}
	}
	return rss
}

// TestReleaseMapped: a run over a raw_csr file set whose events it views in its files'
// mappings drops their pages as its claims finish (dataset.SparseReleaser), as for
// dense mapped files: afterwards at most a page per partition and file stays resident,
// not the files (6.4 MB each), and the results are the frames' sums. Reporting frames
// read drops exactly the 2 MiB blocks their events cover whole; the blocks at the edges
// go once the frames beside them are reported too, in either order. The mappings are
// kept to 4 KiB pages (MADV_NOHUGEPAGE), so that the resident sizes count pages, not
// 2 MiB mappings.
func TestReleaseMapped(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps")
	}
	const frames, sig, hits, parts = 4096, 64, 400, 8
	rng := rand.New(rand.NewPCG(9, 10))
	indptr := []int64{0}
	var indices []int32
	var data []uint32
	want := make([]float64, frames)
	for f := range frames {
		for range hits {
			v := uint32(1 + rng.IntN(20))
			indices, data = append(indices, int32(rng.IntN(sig*sig))), append(data, v)
			want[f] += float64(v)
		}
		indptr = append(indptr, int64(len(indices)))
	}
	path := fileSet(t, indptr, indices, data, fmt.Sprintf("nav_shape = [%d]\nsig_shape = [%d, %d]", frames, sig, sig), "")
	dir := filepath.Dir(path)
	idxPath, dataPath := filepath.Join(dir, "indices.bin"), filepath.Join(dir, "data.bin")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()

	// All events viewed: the mappings' addresses, given 4 KiB pages before any is read.
	var sf dataset.SparseFrames
	viewed, err := dataset.SparseOf(ds).(dataset.SparseViewer).ViewSparse(0, frames, &sf)
	require.NoError(t, err)
	require.True(t, viewed)
	idxBytes := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(sf.Indices))), 4*len(sf.Indices))
	require.NoError(t, unix.Madvise(idxBytes, unix.MADV_NOHUGEPAGE))
	require.NoError(t, unix.Madvise(sf.Data, unix.MADV_NOHUGEPAGE))

	ones := make([]float32, sig*sig)
	for i := range ones {
		ones[i] = 1
	}
	stack, err := masks.New(1, sig, sig, ones, nil)
	require.NoError(t, err)
	plan := &planner.Plan{CoresUsable: 1, Workers: []planner.Worker{{ID: 0, Kind: planner.CPU, GPU: -1}}}
	for p := range parts {
		plan.Partitions = append(plan.Partitions, planner.Partition{Start: p * frames / parts, End: (p + 1) * frames / parts})
	}
	res, err := engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{Float64: true, NoPin: true, TileFrames: 64})
	require.NoError(t, err)
	require.True(t, res.Stats.Gather)
	require.Equal(t, want, res.F64)
	page := int64(os.Getpagesize())
	for _, p := range []string{idxPath, dataPath} {
		assert.LessOrEqual(t, mappedRSS(t, p), (parts+1)*page, "resident pages of %s after the run", filepath.Base(p))
	}

	// Every page read again, then frames [100, 3000) reported read: the 2 MiB blocks
	// within their events go, the blocks they share with frames [0, 100) and [3000,
	// frames) stay, until those are reported too (the later first).
	readAll := func() {
		sum := 0
		for k := range sf.Indices {
			sum += int(sf.Indices[k]) + int(sf.Data[4*k])
		}
		require.NotZero(t, sum)
	}
	readAll()
	files := []string{idxPath, dataPath}
	size := 4 * int64(len(indices)) // both files: int32 indices, uint32 values
	filePages := (size + page - 1) / page
	require.Equal(t, filePages*page, mappedRSS(t, idxPath))
	releaser := dataset.SparseOf(ds).(dataset.SparseReleaser)
	require.NoError(t, releaser.ReleaseSparse(100, 3000))
	lo, hi := 4*indptr[100], 4*indptr[3000]
	const block = dataset.ReleaseBlock
	first, last := (lo+block-1)/block, hi/block // blocks [first, last) lie within [lo, hi)
	require.Greater(t, last, first, "the test needs a block within frames [100, 3000)")
	dropped := (last - first) * block / page
	for _, p := range files {
		assert.Equal(t, (filePages-dropped)*page, mappedRSS(t, p), "%s after reporting frames [100, 3000)", filepath.Base(p))
	}
	require.NoError(t, releaser.ReleaseSparse(3000, frames))
	require.NoError(t, releaser.ReleaseSparse(0, 100))
	for _, p := range files {
		assert.LessOrEqual(t, mappedRSS(t, p), page, "%s after reporting every frame (the last page is partly the file's)", filepath.Base(p))
	}

	// A range reported twice (two runs over frames [0, 10)) drops its block early: an
	// advice, the events stay the file's.
	readAll()
	for range (block + 4*indptr[10] - 1) / (4 * indptr[10]) {
		require.NoError(t, releaser.ReleaseSparse(0, 10))
	}
	assert.Equal(t, (filePages-block/page)*page, mappedRSS(t, idxPath), "after reporting frames [0, 10) a block's worth of times")
	readAll()
	assert.Equal(t, filePages*page, mappedRSS(t, idxPath))
}

// TestDuplicateEventsWiden (case 64-csr-overflow-densify): two uint8 events of 200 at one
// pixel are 400 on every path: the dataset's dtype is uint32, the frame read densified
// (sum, pick, GPU workers), the events read sparse, the mask-dot product gathered over
// the events and over a tile the CPU worker densifies (both viewed in place in the
// stored dtype), and Reduce's sum. A uint32 pixel
// whose events overflow uint32 is refused where it is densified, naming the frame and
// the pixel, never wrapped.
func TestDuplicateEventsWiden(t *testing.T) {
	for _, dt := range []string{"|u1", "<i2"} {
		t.Run(dt, func(t *testing.T) {
			dir := t.TempDir()
			// Frame 0: two events at pixel 5 (gathered); frame 1: one event at each of the
			// 16 pixels and two more at pixel 5, above the gather's break-even (densified).
			indptr := []int64{0, 2, 20}
			indices := []int32{5, 5}
			for p := range 16 {
				indices = append(indices, int32(p))
			}
			indices = append(indices, 5, 5)
			var ip, ix, data []byte
			for _, v := range indptr {
				ip = binary.LittleEndian.AppendUint64(ip, uint64(v))
			}
			for _, v := range indices {
				ix = binary.LittleEndian.AppendUint32(ix, uint32(v))
			}
			for range indices {
				if dt == "|u1" {
					data = append(data, 200)
				} else {
					data = binary.LittleEndian.AppendUint16(data, 20000)
				}
			}
			for name, b := range map[string][]byte{"ptr.dat": ip, "idx.dat": ix, "val.dat": data} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
			}
			path := filepath.Join(dir, "s.toml")
			require.NoError(t, os.WriteFile(path, []byte(`[params]
filetype = "raw_csr"
nav_shape = [1, 2]
sig_shape = [4, 4]
[raw_csr]
indptr_file = "ptr.dat"
indptr_dtype = "<i8"
indices_file = "idx.dat"
indices_dtype = "<i4"
data_file = "val.dat"
data_dtype = "`+dt+`"
`), 0o644))
			v, wantDT, stored := 200.0, dataset.Uint32, dataset.Uint8
			if dt == "<i2" {
				v, wantDT, stored = 20000, dataset.Int32, dataset.Int16
			}
			ds, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer ds.Close()
			require.Equal(t, wantDT, ds.DType())
			frames := make([]byte, 2*ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(0, 2, frames))
			var sf dataset.SparseFrames
			sf.Reset()
			require.NoError(t, dataset.SparseOf(ds).ReadSparse(0, 2, &sf))
			for k := range sf.Indices {
				assert.Equal(t, uint32(v), binary.NativeEndian.Uint32(sf.Data[4*k:]), "event %d", k)
			}
			// Viewed in place, in their own dtype; densified, the sums of the dataset's.
			var view dataset.SparseFrames
			viewed, err := dataset.SparseOf(ds).(dataset.SparseViewer).ViewSparse(0, 2, &view)
			require.NoError(t, err)
			require.True(t, viewed, "8- and 16-bit events are viewed in place")
			assert.Equal(t, stored, view.Values)
			assert.Equal(t, data, view.Data)
			dense := make([]byte, len(frames))
			require.NoError(t, view.Densify(dense, ds.SigShape(), ds.DType()))
			assert.Equal(t, frames, dense)
			pixel := func(f, p int) float64 { return float64(int32(binary.NativeEndian.Uint32(frames[(16*f+p)*4:]))) }
			assert.Equal(t, 2*v, pixel(0, 5))
			assert.Equal(t, 3*v, pixel(1, 5))
			assert.Equal(t, v, pixel(1, 6))

			ones := make([]float32, 16)
			for i := range ones {
				ones[i] = 1
			}
			stack, err := masks.New(1, 4, 4, ones, nil)
			require.NoError(t, err)
			plan := &planner.Plan{CoresUsable: 1, Workers: []planner.Worker{{ID: 0, Kind: planner.CPU, GPU: -1}}, Partitions: []planner.Partition{{Start: 0, End: 2}}}
			res, err := engine.ApplyMasks(context.Background(), ds, stack, plan, engine.Options{Float64: true, NoPin: true, TileFrames: 1})
			require.NoError(t, err)
			require.True(t, res.Stats.Gather)
			assert.Equal(t, []float64{2 * v, 18 * v}, res.F64)
			red, err := engine.Reduce(context.Background(), ds, plan, engine.ReduceOptions{Sum: true, NoPin: true})
			require.NoError(t, err)
			assert.Equal(t, 5*v, red.Sum[5])
		})
	}

	path := fileSet(t, []int64{0, 1, 3}, []int32{0, 3, 3}, []uint32{1, 1 << 31, 1 << 31}, "nav_shape = [2]\nsig_shape = [2, 2]", "")
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, dataset.Uint32, ds.DType())
	err = ds.ReadFrames(0, 2, make([]byte, 2*ds.FrameBytes()))
	require.Error(t, err)
	assert.Equal(t, errs.DType, errs.KindOf(err), "%v", err)
	assert.Contains(t, err.Error(), "s.toml: frame 1: its events at pixel 3 (y 1, x 1) add up to more than uint32 holds")
}

// TestUnsignedOutOfRange: a uint64 index or indptr entry of 2⁶⁴−1 is reported as stored
// (18446744073709551615), not as -1.
func TestUnsignedOutOfRange(t *testing.T) {
	const max64 = "18446744073709551615"
	u64 := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
		return b
	}
	section := `indptr_file = "indptr.bin"
indptr_dtype = "<u8"
indices_file = "indices.bin"
indices_dtype = "<u8"
data_file = "data.bin"
data_dtype = "<u4"`
	for _, c := range []struct {
		name            string
		indptr, indices []byte
		want            string
		onRead          bool
	}{
		{"index", u64(0, 2), u64(1, 1<<64-1), "event 1 (frames [0, 1)) is at pixel " + max64 + ", outside the frame", true},
		{"first indptr entry", u64(1<<64-1, 2), u64(0, 1), "entry 0 is " + max64 + ", outside the 2 events", false},
		{"indptr entry", u64(0, 1<<64-1, 2), u64(0, 1), "entry 1 (frame 1) is " + max64 + ", outside the 2 events", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := fileSet(t, nil, nil, []uint32{1, 2}, "sig_shape = [2, 2]", section)
			dir := filepath.Dir(path)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "indptr.bin"), c.indptr, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "indices.bin"), c.indices, 0o644))
			ds, err := dataset.Open(path, dataset.Options{})
			if c.onRead {
				require.NoError(t, err)
				defer ds.Close()
				err = ds.ReadFrames(0, ds.NumFrames(), make([]byte, ds.NumFrames()*ds.FrameBytes()))
			}
			require.Error(t, err)
			assert.Equal(t, errs.Format, errs.KindOf(err), "%v", err)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), "-1")
		})
	}
}
