//go:build !nohdf5

package hdf5_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5ref"
)

// openWithin opens path, failing the test rather than waiting when the open blocks (a
// FIFO opened for reading waits for a writer).
func openWithin(t *testing.T, path string, opt dataset.Options) (dataset.Dataset, error) {
	t.Helper()
	type result struct {
		d   dataset.Dataset
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := dataset.Open(path, opt)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		if r.d != nil {
			t.Cleanup(func() { r.d.Close() })
		}
		return r.d, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("opening %s blocked for 30 s", path)
		return nil, nil
	}
}

// readWithin reads frames [start, end) of d as float64 values, failing the test rather
// than waiting when the read blocks.
func readWithin(t *testing.T, d dataset.Dataset, start, end int) ([]float64, error) {
	t.Helper()
	buf := make([]byte, (end-start)*d.FrameBytes())
	done := make(chan error, 1)
	go func() { done <- d.ReadFrames(start, end, buf) }()
	select {
	case err := <-done:
		return frametest.Decode(buf, d.DType()), err
	case <-time.After(30 * time.Second):
		t.Fatalf("reading frames [%d, %d) of %s blocked for 30 s", start, end, d.Path())
		return nil, nil
	}
}

// u16Frames returns n frames of 8×8 distinct uint16 values (from first) and the same as
// float64.
func u16Frames(n int, first uint16) ([]uint16, []float64) {
	v := make([]uint16, n*64)
	f := make([]float64, len(v))
	for i := range v {
		v[i] = first + uint16(i)
		f[i] = float64(v[i])
	}
	return v, f
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(path))
	require.NoError(t, syscall.Mkfifo(path, 0o644))
}

// Case 46-vds-missing-source (h5py #1546, HDFGroup/hdf5 #5088): a virtual dataset of two
// source files of 4 scan rows each, named relative to it. A source that is missing, not
// an HDF5 file, without the dataset, a FIFO, or smaller than its region is named, never
// read as zeros; with option allow_fill the frames are read as the fill value, with a
// note counting them.
func TestHDF5VirtualSources(t *testing.T) {
	dir := t.TempDir()
	vds := filepath.Join(dir, "vds.h5")
	part1 := filepath.Join(dir, "part1.h5")
	values, want := u16Frames(32, 1)
	writePart := func(t *testing.T, i int, sets ...h5ref.Dataset) {
		if sets == nil {
			sets = []h5ref.Dataset{{Path: "/data", Dims: []int{4, 4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[i*16*64])}}
		}
		path := filepath.Join(dir, []string{"part0.h5", "part1.h5"}[i])
		require.NoError(t, os.RemoveAll(path)) // a FIFO left by a test before
		require.NoError(t, h5ref.Write(path, sets...))
	}
	mapping := func(i int) h5ref.Mapping {
		return h5ref.Mapping{File: []string{"part0.h5", "part1.h5"}[i], Dataset: "/data", SourceDims: []int{4, 4, 8, 8},
			Virtual: h5ref.Hyperslab{Start: []int{4 * i, 0, 0, 0}, Count: []int{1, 1, 1, 1}, Block: []int{4, 4, 8, 8}}}
	}
	writeVDS := func(t *testing.T, fill *float64, maps ...h5ref.Mapping) {
		require.NoError(t, h5ref.Write(vds, h5ref.Dataset{Path: "/frames", Dims: []int{8, 4, 8, 8}, Type: h5ref.U16LE, Fill: fill, Virtual: maps}))
	}
	writePart(t, 0)
	writeVDS(t, nil, mapping(0), mapping(1))
	zeros := make([]float64, 16*64)
	refused := func(t *testing.T, kind errs.Kind, want ...string) {
		t.Helper()
		for _, allow := range []bool{false, true} {
			_, err := openWithin(t, vds, dataset.Options{AllowFill: allow})
			require.Error(t, err)
			assert.Equal(t, kind, errs.KindOf(err))
			for _, w := range want {
				assert.Contains(t, err.Error(), w)
			}
		}
	}

	t.Run("intact, opened from another directory", func(t *testing.T) {
		writePart(t, 1)
		t.Chdir("/")
		d, err := openWithin(t, vds, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{8, 4}, d.NavShape())
		assert.Empty(t, dataset.Notes(d))
		assert.Equal(t, want, framesOf(t, d))
	})

	t.Run("source renamed after open", func(t *testing.T) {
		writePart(t, 1)
		d, err := openWithin(t, vds, dataset.Options{})
		require.NoError(t, err)
		require.NoError(t, os.Rename(part1, part1+".moved"))
		defer os.Rename(part1+".moved", part1)
		got, err := readWithin(t, d, 0, 32)
		require.NoError(t, err)
		assert.Equal(t, want, got, "libhdf5 holds the sources it has read from")
	})

	t.Run("missing source", func(t *testing.T) {
		require.NoError(t, os.Remove(part1))
		_, err := openWithin(t, vds, dataset.Options{})
		require.Error(t, err)
		assert.Equal(t, errs.IO, errs.KindOf(err))
		assert.Contains(t, err.Error(), "dataset: "+vds+": dataset /frames: 16 of its 32 frames would be read as the fill value 0, not as recorded: "+
			"frames 16-31: source part1.h5:/data: file part1.h5 not found (looked for "+part1+", part1.h5); give option allow_fill to read them as the fill value")
		d, err := openWithin(t, vds, dataset.Options{AllowFill: true})
		require.NoError(t, err)
		assert.Equal(t, []string{"dataset /frames: 16 of its 32 frames are read as the fill value 0 (option allow_fill): frames 16-31: source part1.h5:/data: file part1.h5 not found (looked for " + part1 + ", part1.h5)"},
			dataset.Notes(d))
		got, err := readWithin(t, d, 0, 32)
		require.NoError(t, err)
		assert.Equal(t, append(want[:16*64:16*64], zeros...), got)
		mkfifo(t, part1)
		_, err = readWithin(t, d, 16, 17)
		assert.ErrorContains(t, err, part1+" is a named pipe, not a regular file", "checked again before each read, never opened")
	})

	t.Run("not an HDF5 file", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(part1))
		require.NoError(t, os.WriteFile(part1, []byte("not an hdf5 file\n"), 0o644))
		_, err := openWithin(t, vds, dataset.Options{})
		assert.ErrorContains(t, err, "frames 16-31: source part1.h5:/data: file part1.h5 "+part1+" is not an HDF5 file (looked for "+part1+", part1.h5)")
	})

	t.Run("a directory in its place", func(t *testing.T) {
		require.NoError(t, os.RemoveAll(part1))
		require.NoError(t, os.Mkdir(part1, 0o755))
		_, err := openWithin(t, vds, dataset.Options{})
		assert.ErrorContains(t, err, "frames 16-31: source part1.h5:/data: file part1.h5 "+part1+" is a directory (looked for "+part1+", part1.h5)")
		require.NoError(t, os.Remove(part1))
	})

	t.Run("no such dataset in the source", func(t *testing.T) {
		other, _ := u16Frames(4, 0)
		writePart(t, 1, h5ref.Dataset{Path: "/other", Dims: []int{4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&other[0])})
		_, err := openWithin(t, vds, dataset.Options{})
		assert.ErrorContains(t, err, "frames 16-31: source part1.h5:/data: "+part1+" holds no dataset /data")
		assert.Equal(t, errs.Format, errs.KindOf(err))
	})

	t.Run("source with chunks never written", func(t *testing.T) {
		writePart(t, 1, h5ref.Dataset{Path: "/data", Dims: []int{4, 4, 8, 8}, Chunk: []int{1, 4, 8, 8}, Written: 2, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[16*64])})
		_, err := openWithin(t, vds, dataset.Options{})
		assert.ErrorContains(t, err, "frames 16-31: source part1.h5:/data: 2 of its 4 chunks were never written")
	})

	t.Run("source smaller than its region", func(t *testing.T) {
		writePart(t, 1, h5ref.Dataset{Path: "/data", Dims: []int{2, 4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[16*64])})
		refused(t, errs.Format, "dataset /frames: source part1.h5:/data has shape (2, 4, 8, 8) (512 elements), mapped to a region of 1024 elements: libhdf5 cannot read it")
	})

	t.Run("source a FIFO", func(t *testing.T) {
		mkfifo(t, part1)

		refused(t, errs.IO, "virtual dataset source file part1.h5: "+part1+" is a named pipe, not a regular file")
	})

	t.Run("a region no mapping covers, fill value 7", func(t *testing.T) { // the last: it rewrites the VDS
		seven := 7.0
		writeVDS(t, &seven, mapping(0))
		_, err := openWithin(t, vds, dataset.Options{})
		assert.ErrorContains(t, err, "16 of its 32 frames would be read as the fill value 7, not as recorded: frames 16-31: no mapping of the virtual dataset covers them")
		d, err := openWithin(t, vds, dataset.Options{AllowFill: true})
		require.NoError(t, err)
		got, err := readWithin(t, d, 15, 17)
		require.NoError(t, err)
		sevens := make([]float64, 64)
		for i := range sevens {
			sevens[i] = 7
		}
		assert.Equal(t, append(want[15*64:16*64:16*64], sevens...), got)
	})
}

// A printf-style virtual dataset: one source file per block of 2 frames along an
// unlimited axis ("src-%b.h5"). libhdf5 opens the sources to find the extent, so a FIFO
// among them is refused before; it closes them after each read, so they are checked
// again before each read.
func TestHDF5VirtualPrintf(t *testing.T) {
	dir := t.TempDir()
	vds := filepath.Join(dir, "vds.h5")
	values, want := u16Frames(6, 1)
	for j := range 3 {
		require.NoError(t, h5ref.Write(filepath.Join(dir, []string{"src-0.h5", "src-1.h5", "src-2.h5"}[j]),
			h5ref.Dataset{Path: "/data", Dims: []int{2, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[j*2*64])}))
	}
	require.NoError(t, h5ref.Write(vds, h5ref.Dataset{Path: "/frames", Dims: []int{6, 8, 8}, MaxDims: []int{-1, 8, 8}, Type: h5ref.U16LE,
		Virtual: []h5ref.Mapping{{File: "src-%b.h5", Dataset: "/data", SourceDims: []int{2, 8, 8},
			Virtual: h5ref.Hyperslab{Start: []int{0, 0, 0}, Stride: []int{2, 1, 1}, Count: []int{-1, 1, 1}, Block: []int{2, 8, 8}}}}}))
	d, err := openWithin(t, vds, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{6}, d.NavShape())
	assert.Equal(t, want, framesOf(t, d))

	src2 := filepath.Join(dir, "src-2.h5")
	require.NoError(t, os.Rename(src2, src2+".moved"))
	_, err = readWithin(t, d, 4, 6)
	assert.ErrorContains(t, err, "virtual dataset source file src-2.h5: not found (looked for "+src2+", src-2.h5) since the dataset was opened")
	got, err := readWithin(t, d, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, want[:4*64], got)
	require.NoError(t, os.Rename(src2+".moved", src2))

	mkfifo(t, filepath.Join(dir, "src-1.h5"))
	_, err = readWithin(t, d, 2, 3)
	assert.ErrorContains(t, err, "src-1.h5 is a named pipe, not a regular file")
	_, err = openWithin(t, vds, dataset.Options{})
	assert.ErrorContains(t, err, "virtual dataset source file src-1.h5: "+filepath.Join(dir, "src-1.h5")+" is a named pipe, not a regular file")
}

// External raw storage (H5Pset_external): two files, the first after a 16-byte header. A
// file cut short is named (or read as zeros with option allow_fill), a missing one or a
// FIFO refused, before the open and before each read.
func TestHDF5ExternalStorage(t *testing.T) {
	dir := t.TempDir()
	values, want := u16Frames(8, 1)
	raw := make([]byte, 2*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint16(raw[2*i:], v)
	}
	a, b := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	writeRaw := func(t *testing.T) {
		require.NoError(t, os.RemoveAll(a)) // FIFOs left by a test before
		require.NoError(t, os.RemoveAll(b))
		require.NoError(t, os.WriteFile(a, append(make([]byte, 16), raw[:512]...), 0o644))
		require.NoError(t, os.WriteFile(b, raw[512:], 0o644))
	}
	path := filepath.Join(dir, "ext.h5")
	writeFile := func(t *testing.T, names ...string) {
		require.NoError(t, h5ref.Write(path, h5ref.Dataset{Path: "/frames", Dims: []int{2, 4, 8, 8}, Type: h5ref.U16LE,
			External: []h5ref.External{{Name: names[0], Offset: 16, Size: 512}, {Name: names[1], Size: 512}}}))
	}
	writeRaw(t)
	writeFile(t, a, b)

	d, err := openWithin(t, path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, want, framesOf(t, d))
	require.NoError(t, os.Truncate(b, 300))
	_, err = readWithin(t, d, 4, 8)
	assert.ErrorContains(t, err, "external raw data file "+b+" holds 300 of its 512 bytes from offset 0: it was cut short since the dataset was opened")
	got, err := readWithin(t, d, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, want[:4*64], got, "frames of the other file")
	mkfifo(t, b)
	_, err = readWithin(t, d, 7, 8)
	assert.ErrorContains(t, err, "external raw data file "+b+" is a named pipe, not a regular file")
	require.NoError(t, d.Close())

	t.Run("cut short", func(t *testing.T) {
		writeRaw(t)
		require.NoError(t, os.Truncate(b, 300))
		_, err := openWithin(t, path, dataset.Options{})
		assert.ErrorContains(t, err, "dataset /frames: 2 of its 8 frames would be read as the fill value 0, not as recorded: frames 6-7: its external raw data file "+b+" holds 300 of its 512 bytes from offset 0 (cut short)")
		assert.Equal(t, errs.Format, errs.KindOf(err))
		d, err := openWithin(t, path, dataset.Options{AllowFill: true})
		require.NoError(t, err)
		assert.Equal(t, []string{"dataset /frames: 2 of its 8 frames are read as the fill value 0 (option allow_fill): frames 6-7: its external raw data file " + b + " holds 300 of its 512 bytes from offset 0 (cut short)"}, dataset.Notes(d))
		zeroed := append([]float64(nil), want...)
		clear(zeroed[(512+300)/2:])
		assert.Equal(t, zeroed, framesOf(t, d))
	})

	t.Run("missing, a FIFO", func(t *testing.T) {
		writeRaw(t)
		require.NoError(t, os.Remove(a))
		_, err := openWithin(t, path, dataset.Options{AllowFill: true})
		assert.ErrorContains(t, err, "dataset /frames: external raw data file: stat "+a+": no such file or directory")
		assert.Equal(t, errs.IO, errs.KindOf(err))
		mkfifo(t, a)
		_, err = openWithin(t, path, dataset.Options{})
		assert.ErrorContains(t, err, "external raw data file "+a+" is a named pipe, not a regular file")
	})

	t.Run("relative names", func(t *testing.T) {
		writeRaw(t)
		writeFile(t, "a.raw", "b.raw")
		t.Chdir(t.TempDir())
		_, err := openWithin(t, path, dataset.Options{})
		assert.ErrorContains(t, err, "external raw data file: stat a.raw: no such file or directory (libhdf5 looks for relative names of external raw data files in the working directory, or in HDF5_EXTFILE_PREFIX; set HDF5_EXTFILE_PREFIX='${ORIGIN}' to read the one beside the HDF5 file)")
		// libhdf5 reads HDF5_EXTFILE_PREFIX when it starts: TestCaseHDF5ExternalPrefix
		// (cmd/stemdot) runs the CLI with it.
	})
}

// Storage never written: chunks of an interrupted acquisition, a contiguous dataset never
// written.
func TestHDF5NeverWritten(t *testing.T) {
	dir := t.TempDir()
	values, want := u16Frames(16, 1)
	path := filepath.Join(dir, "chunks.h5")
	five := 5.0
	require.NoError(t, h5ref.Write(path, h5ref.Dataset{Path: "/frames", Dims: []int{4, 4, 8, 8}, Chunk: []int{1, 2, 8, 8}, Written: 3, Fill: &five, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	_, err := openWithin(t, path, dataset.Options{})
	assert.ErrorContains(t, err, "dataset /frames: 4 of its 16 frames would be read as the fill value 5, not as recorded: frames 12-15: 2 of its 8 chunks were never written; give option allow_fill")
	assert.Equal(t, errs.Format, errs.KindOf(err))
	d, err := openWithin(t, path, dataset.Options{AllowFill: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"dataset /frames: 4 of its 16 frames are read as the fill value 5 (option allow_fill): frames 12-15: 2 of its 8 chunks were never written"}, dataset.Notes(d))
	filled := append([]float64(nil), want...)
	for i := 12 * 64; i < len(filled); i++ {
		filled[i] = 5
	}
	assert.Equal(t, filled, framesOf(t, d))

	path = filepath.Join(dir, "contiguous.h5")
	require.NoError(t, h5ref.Write(path, h5ref.Dataset{Path: "/frames", Dims: []int{4, 4, 8, 8}, Type: h5ref.U16LE}))
	_, err = openWithin(t, path, dataset.Options{})
	assert.ErrorContains(t, err, "dataset /frames: 16 of its 16 frames would be read as the fill value 0, not as recorded: frames 0-15: its data was never written (no space allocated)")
}

// External links (H5Lcreate_external): the target is looked up as libhdf5 does, and
// checked before libhdf5 opens it.
func TestHDF5ExternalLinks(t *testing.T) {
	dir := t.TempDir()
	values, want := u16Frames(8, 1)
	master, target := filepath.Join(dir, "master.h5"), filepath.Join(dir, "data.h5")
	small := []uint16{1, 2, 3, 4}
	require.NoError(t, h5ref.Write(master, h5ref.Dataset{Path: "/entry/mean", Dims: []int{2, 2}, Type: h5ref.U16LE, Data: unsafe.Pointer(&small[0])}))
	require.NoError(t, h5ref.ExternalLink(master, "/entry/data", "data.h5", "/frames"))
	require.NoError(t, h5ref.Write(target, h5ref.Dataset{Path: "/frames", Dims: []int{2, 4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	opt := dataset.Options{DatasetPath: "/entry/data"}

	t.Chdir("/")
	d, err := openWithin(t, master, opt)
	require.NoError(t, err)
	assert.Equal(t, want, framesOf(t, d))

	require.NoError(t, os.Rename(target, target+".moved"))
	_, err = openWithin(t, master, opt)
	assert.ErrorContains(t, err, "external link in group /entry of "+master+" to data.h5:/frames: file data.h5 not found (looked for "+target+", data.h5)")
	assert.Equal(t, errs.IO, errs.KindOf(err))

	mkfifo(t, target)
	_, err = openWithin(t, master, opt)
	assert.ErrorContains(t, err, "external link in group /entry of "+master+" to data.h5:/frames: "+target+" is a named pipe, not a regular file")
	require.NoError(t, os.Remove(target))

	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.Rename(target+".moved", filepath.Join(dir, "sub", "data.h5")))
	t.Setenv("HDF5_EXT_PREFIX", "/nonexistent:"+filepath.Join(dir, "sub"))
	d, err = openWithin(t, master, opt)
	require.NoError(t, err, "found in a directory of HDF5_EXT_PREFIX")
	assert.Equal(t, want, framesOf(t, d))
}

// The automatic choice of dataset sees datasets behind external and soft links (#17.4's
// kind, D4), under the link's path in the file, read from the linked file; each object
// once; and it names every link it could not follow, never skipping one silently.
func TestHDF5LinksInTheChoice(t *testing.T) {
	dir := t.TempDir()
	values, want := u16Frames(6, 1)
	src := filepath.Join(dir, "src0.h5")
	require.NoError(t, h5ref.Write(src, h5ref.Dataset{Path: "/data", Dims: []int{2, 3, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	small := []uint16{1, 2, 3, 4}
	meta := h5ref.Dataset{Path: "/meta", Dims: []int{2, 2}, Type: h5ref.U16LE, Data: unsafe.Pointer(&small[0])}
	other, otherWant := u16Frames(4, 5000)
	write := func(t *testing.T, name string, sets ...h5ref.Dataset) string {
		t.Helper()
		path := filepath.Join(dir, name)
		require.NoError(t, h5ref.Write(path, sets...))
		return path
	}
	t.Chdir("/") // the linked files are found beside the file that links them

	t.Run("frames behind an external link", func(t *testing.T) {
		path := write(t, "elink.h5", meta)
		require.NoError(t, h5ref.ExternalLink(path, "/frames", "src0.h5", "/data"))
		d, err := openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{2, 3}, d.NavShape())
		assert.Empty(t, dataset.Notes(d), "the one candidate: no note")
		assert.Equal(t, want, framesOf(t, d))
	})

	t.Run("soft links", func(t *testing.T) {
		// /entry/data/frames is a soft link to /raw (hard): listed once, at /raw. /s is
		// a soft link to /ext/data, and /ext an external link to src0.h5's root: listed
		// once, through the fewest links.
		path := write(t, "soft.h5", h5ref.Dataset{Path: "/raw", Dims: []int{4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&other[0])})
		require.NoError(t, h5ref.SoftLink(path, "/entry/data/frames", "/raw"))
		require.NoError(t, h5ref.SoftLink(path, "/a/s", "/ext/data"))
		require.NoError(t, h5ref.ExternalLink(path, "/ext", "src0.h5", "/"))
		d, err := openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []string{"reading /ext/data (2, 3, 8, 8); other datasets could hold frames: /raw (4, 8, 8) (give option dataset_path to read one)"}, dataset.Notes(d))
		assert.Equal(t, want, framesOf(t, d))
		_, err = openWithin(t, path, dataset.Options{DatasetPath: "/a"})
		assert.ErrorContains(t, err, `"/a" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /a/s (2, 3, 8, 8)`)
		_, err = openWithin(t, path, dataset.Options{DatasetPath: "/ext"})
		assert.ErrorContains(t, err, `"/ext" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /ext/data (2, 3, 8, 8)`)
		d, err = openWithin(t, path, dataset.Options{DatasetPath: "/entry/data/frames"})
		require.NoError(t, err)
		assert.Equal(t, otherWant, framesOf(t, d))
	})

	t.Run("links that cannot be followed", func(t *testing.T) {
		path := write(t, "dangling.h5", h5ref.Dataset{Path: "/other", Dims: []int{2, 2, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&other[0])})
		require.NoError(t, h5ref.ExternalLink(path, "/frames", "gone.h5", "/data"))
		require.NoError(t, h5ref.ExternalLink(path, "/g/nope", "src0.h5", "/nope"))
		require.NoError(t, h5ref.SoftLink(path, "/soft", "/missing"))
		gone := "could not follow link /frames to gone.h5:/data: file gone.h5 not found (looked for " + filepath.Join(dir, "gone.h5") + ", gone.h5)"
		d, err := openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []string{"reading /other (2, 2, 8, 8); " + gone + "; could not follow link /soft to /missing: no such object; could not follow link /g/nope to src0.h5:/nope: no such object"}, dataset.Notes(d))
		assert.Equal(t, otherWant, framesOf(t, d))

		_, err = openWithin(t, path, dataset.Options{DatasetPath: "/frames"})
		assert.ErrorContains(t, err, `opening "/frames" (option dataset_path): external link in group / of `+path+" to gone.h5:/data: file gone.h5 not found")
		assert.NotContains(t, err.Error(), gone, "named once")
		_, err = openWithin(t, path, dataset.Options{DatasetPath: "/g"})
		assert.ErrorContains(t, err, `"/g" is a group, not a dataset (option dataset_path) and holds no dataset of rank 3 to 5; datasets of rank 3 to 5 in the file: /other (2, 2, 8, 8); `+gone)

		fifo := filepath.Join(dir, "gone.h5")
		mkfifo(t, fifo)
		defer os.Remove(fifo)
		d, err = openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		require.Len(t, dataset.Notes(d), 1)
		assert.Contains(t, dataset.Notes(d)[0], "; could not follow link /frames to gone.h5:/data: "+fifo+" is a named pipe, not a regular file;")
	})

	t.Run("the only candidate behind a dangling link", func(t *testing.T) {
		path := write(t, "only.h5", meta)
		require.NoError(t, h5ref.ExternalLink(path, "/frames", "gone.h5", "/data"))
		_, err := openWithin(t, path, dataset.Options{})
		assert.EqualError(t, err, "dataset: "+path+": the file has no dataset of rank 3 to 5; could not follow link /frames to gone.h5:/data: file gone.h5 not found (looked for "+filepath.Join(dir, "gone.h5")+", gone.h5)")
		assert.Equal(t, errs.IO, errs.KindOf(err))
	})

	t.Run("cycles", func(t *testing.T) {
		path := write(t, "cycle.h5", h5ref.Dataset{Path: "/g/frames", Dims: []int{2, 3, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])})
		require.NoError(t, h5ref.ExternalLink(path, "/self", "cycle.h5", "/"))
		require.NoError(t, h5ref.ExternalLink(path, "/g/up", "cycle.h5", "/g"))
		require.NoError(t, h5ref.SoftLink(path, "/g/h/loop", "/g"))
		require.NoError(t, h5ref.SoftLink(path, "/root", "/"))
		d, err := openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		assert.Empty(t, dataset.Notes(d), "each object once")
		assert.Equal(t, want, framesOf(t, d))
	})

	t.Run("chains of links", func(t *testing.T) {
		// c0.h5:/n links to c1.h5's root, c1.h5:/n to c2.h5's, ...: the dataset of the
		// last is 16 external links deep (as deep as libhdf5 follows in one traversal),
		// or 17.
		chain := func(n int) string {
			sub := fmt.Sprintf("chain%d", n)
			require.NoError(t, os.Mkdir(filepath.Join(dir, sub), 0o755))
			write(t, fmt.Sprintf("%s/c%d.h5", sub, n), h5ref.Dataset{Path: "/data", Dims: []int{2, 3, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])})
			for i := n - 1; i >= 0; i-- {
				require.NoError(t, h5ref.ExternalLink(write(t, fmt.Sprintf("%s/c%d.h5", sub, i), meta), "/n", fmt.Sprintf("c%d.h5", i+1), "/"))
			}
			return filepath.Join(dir, sub, "c0.h5")
		}
		d, err := openWithin(t, chain(16), dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, want, framesOf(t, d))
		_, err = openWithin(t, chain(17), dataset.Options{})
		assert.ErrorContains(t, err, "the file has no dataset of rank 3 to 5; could not follow link "+strings.Repeat("/n", 17)+" to c17.h5:/: more than 16 soft or external links on its path")
	})

	t.Run("a virtual dataset behind a link", func(t *testing.T) {
		// Its source is named relative to it, in another directory than the file that
		// links to it: looked up (and checked) where libhdf5 looks, beside the VDS.
		sub := filepath.Join(dir, "vds")
		require.NoError(t, os.Mkdir(sub, 0o755))
		require.NoError(t, h5ref.Write(filepath.Join(sub, "part.h5"), h5ref.Dataset{Path: "/data", Dims: []int{2, 3, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
		require.NoError(t, h5ref.Write(filepath.Join(sub, "vds.h5"), h5ref.Dataset{Path: "/frames", Dims: []int{2, 3, 8, 8}, Type: h5ref.U16LE,
			Virtual: []h5ref.Mapping{{File: "part.h5", Dataset: "/data", SourceDims: []int{2, 3, 8, 8}, Virtual: h5ref.Hyperslab{Start: []int{0, 0, 0, 0}, Count: []int{1, 1, 1, 1}, Block: []int{2, 3, 8, 8}}}}}))
		path := write(t, "tovds.h5", meta)
		require.NoError(t, h5ref.ExternalLink(path, "/frames", "vds/vds.h5", "/frames"))
		d, err := openWithin(t, path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, want, framesOf(t, d))
		require.NoError(t, os.Rename(filepath.Join(sub, "part.h5"), filepath.Join(sub, "part.moved")))
		_, err = openWithin(t, path, dataset.Options{})
		assert.ErrorContains(t, err, "dataset /frames: 6 of its 6 frames would be read as the fill value 0, not as recorded: frames 0-5: source part.h5:/data: file part.h5 not found (looked for "+filepath.Join(sub, "part.h5"))
	})
}

// Mappings of unlimited size that are not printf-style: sources a (4 frames) and b (2
// frames), growing along axis 0, interleaved (a: frames 0, 2, 4, 6; b: 1, 3, 5, ...). The
// extent is a's (7 frames); frame 5, beyond what b holds, is read as the fill value.
func TestHDF5VirtualUnlimited(t *testing.T) {
	dir := t.TempDir()
	av, aw := u16Frames(4, 1)
	bv, bw := u16Frames(2, 5000)
	for name, v := range map[string][]uint16{"a.h5": av, "b.h5": bv} {
		require.NoError(t, h5ref.Write(filepath.Join(dir, name), h5ref.Dataset{Path: "/data", Dims: []int{len(v) / 64, 8, 8}, MaxDims: []int{-1, 8, 8},
			Chunk: []int{1, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&v[0])}))
	}
	mapping := func(file string, first int) h5ref.Mapping {
		return h5ref.Mapping{File: file, Dataset: "/data", SourceDims: []int{1, 8, 8}, SourceMax: []int{-1, 8, 8},
			Source:  &h5ref.Hyperslab{Start: []int{0, 0, 0}, Count: []int{-1, 1, 1}, Block: []int{1, 8, 8}},
			Virtual: h5ref.Hyperslab{Start: []int{first, 0, 0}, Stride: []int{2, 1, 1}, Count: []int{-1, 1, 1}, Block: []int{1, 8, 8}}}
	}
	vds := filepath.Join(dir, "vds.h5")
	require.NoError(t, h5ref.Write(vds, h5ref.Dataset{Path: "/frames", Dims: []int{1, 8, 8}, MaxDims: []int{-1, 8, 8}, Type: h5ref.U16LE,
		Virtual: []h5ref.Mapping{mapping("a.h5", 0), mapping("b.h5", 1)}}))
	_, err := openWithin(t, vds, dataset.Options{})
	assert.ErrorContains(t, err, "dataset /frames: 1 of its 7 frames would be read as the fill value 0, not as recorded: frame 5: the source b.h5:/data of an unlimited mapping holds 2 elements along axis 0")
	d, err := openWithin(t, vds, dataset.Options{AllowFill: true})
	require.NoError(t, err)
	var want []float64
	for i := range 7 {
		switch {
		case i%2 == 0:
			want = append(want, aw[i/2*64:(i/2+1)*64]...)
		case i < 5:
			want = append(want, bw[i/2*64:(i/2+1)*64]...)
		default:
			want = append(want, make([]float64, 64)...)
		}
	}
	assert.Equal(t, want, framesOf(t, d))
}
