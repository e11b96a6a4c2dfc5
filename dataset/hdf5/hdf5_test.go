//go:build !nohdf5

package hdf5_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5ref"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// framesOf reads every frame of d as float64 values.
func framesOf(t *testing.T, d dataset.Dataset) []float64 {
	t.Helper()
	return frametest.Decode(frametest.ReadAll(t, d), d.DType())
}

func TestHDF5Shapes(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 5))
	const sy, sx = 6, 7
	u16 := make([]uint16, 2*3*sy*sx*5)
	f32 := make([]float32, len(u16))
	i32 := make([]int32, len(u16))
	want := make([]float64, len(u16))
	for i := range u16 {
		u16[i] = uint16(rng.Uint32())
		f32[i] = float32(rng.NormFloat64() * 1e3)
		i32[i] = int32(rng.Uint32())
	}
	for _, c := range []struct {
		name     string
		set      h5ref.Dataset
		nav      []int
		align    int
		expected func(i int) float64
	}{
		{"3-D uint16 BE gzip+shuffle, chunks of 3 frames", h5ref.Dataset{Dims: []int{30, sy, sx}, Chunk: []int{3, sy, sx}, Gzip: 4, Shuffle: true, Type: h5ref.U16BE, Data: unsafe.Pointer(&u16[0])},
			[]int{30}, 3, func(i int) float64 { return float64(u16[i]) }},
		{"4-D float32 LE contiguous", h5ref.Dataset{Dims: []int{5, 6, sy, sx}, Type: h5ref.F32LE, Data: unsafe.Pointer(&f32[0])},
			[]int{5, 6}, 1, func(i int) float64 { return float64(f32[i]) }},
		{"4-D float32 BE, row chunks", h5ref.Dataset{Dims: []int{5, 6, sy, sx}, Chunk: []int{2, 6, sy, sx}, Gzip: 1, Fletch: true, Type: h5ref.F32BE, Data: unsafe.Pointer(&f32[0])},
			[]int{5, 6}, 12, func(i int) float64 { return float64(f32[i]) }},
		{"5-D int32 BE time series, edge chunks", h5ref.Dataset{Dims: []int{2, 3, 5, sy, sx}, Chunk: []int{1, 2, 2, sy, sx}, Gzip: 6, Shuffle: true, Type: h5ref.I32BE, Data: unsafe.Pointer(&i32[0])},
			[]int{2, 3, 5}, 2, func(i int) float64 { return float64(i32[i]) }},
		{"5-D fpd layout", h5ref.Dataset{Dims: []int{5, 6, 1, sy, sx}, Chunk: []int{1, 1, 1, sy, sx}, Gzip: 1, Shuffle: true, Type: h5ref.U16LE, Data: unsafe.Pointer(&u16[0])},
			[]int{5, 6, 1}, 1, func(i int) float64 { return float64(u16[i]) }},
		{"chunks that split frames", h5ref.Dataset{Dims: []int{30, sy, sx}, Chunk: []int{4, 3, 4}, Gzip: 2, Type: h5ref.U16LE, Data: unsafe.Pointer(&u16[0])},
			[]int{30}, 1, func(i int) float64 { return float64(u16[i]) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.h5")
			c.set.Path = "/entry/data/frames"
			small := []uint16{1, 2, 3, 4}
			require.NoError(t, h5ref.Write(path, c.set, h5ref.Dataset{Path: "/entry/mean", Dims: []int{2, 2}, Type: h5ref.U16LE, Data: unsafe.Pointer(&small[0])}))
			d, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, "hdf5", d.Format())
			assert.Equal(t, c.nav, d.NavShape())
			assert.Equal(t, [2]int{sy, sx}, d.SigShape())
			assert.Empty(t, dataset.Notes(d), "one candidate: no note")
			assert.Equal(t, c.align, d.(interface{ AlignFrames() int }).AlignFrames())
			got := framesOf(t, d)
			for i := range got {
				want[i] = c.expected(i)
			}
			require.Equal(t, want[:len(got)], got)
			// Ranges that start and end inside rows.
			fb := d.FrameBytes()
			buf := make([]byte, d.NumFrames()*fb)
			n := d.NumFrames()
			for _, r := range [][2]int{{0, 1}, {1, 4}, {4, 7}, {5, 29}, {11, 12}, {n - 1, n}} {
				require.NoError(t, d.ReadFrames(r[0], r[1], buf))
				px := sy * sx
				assert.Equal(t, want[r[0]*px:r[1]*px], frametest.Decode(buf[:(r[1]-r[0])*fb], d.DType()), "frames %v", r)
			}
			// A nav shape of 28 positions reshapes a dataset of rank 3 (the first 28
			// frames), and contradicts the scan shape of one of rank 4 or 5 (#17.5).
			d2, err := dataset.Open(path, dataset.Options{NavShape: []int{4, 7}})
			if len(c.nav) == 1 {
				require.NoError(t, err)
				assert.Equal(t, []int{4, 7}, d2.NavShape())
				require.NoError(t, d2.Close())
			} else {
				assert.EqualError(t, err, fmt.Sprintf("dataset: %s: nav shape (4, 7) (option nav_shape) has 28 positions, but the file's scan shape %s from dataset /entry/data/frames %s has 30 and the file holds 30 frames: give option nav_shape of 30 positions (e.g. %s), or leave it out; option frames FIRST,COUNT reads part of the scan",
					path, stemnpy.ShapeString(c.nav), stemnpy.ShapeString(c.set.Dims), strings.Trim(strings.ReplaceAll(fmt.Sprint(c.nav), " ", ","), "[]")))
			}
		})
	}
}

func TestHDF5DatasetPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "two.h5")
	a := make([]uint16, 4*8*8)
	b := make([]uint8, 3*8*8)
	for i := range a {
		a[i] = uint16(i)
	}
	for i := range b {
		b[i] = uint8(i)
	}
	require.NoError(t, h5ref.Write(path,
		h5ref.Dataset{Path: "/a/frames", Dims: []int{4, 8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&a[0])},
		h5ref.Dataset{Path: "/b/frames", Dims: []int{3, 8, 8}, Chunk: []int{1, 8, 8}, Type: h5ref.U8LE, Data: unsafe.Pointer(&b[0])}))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{4}, d.NavShape(), "the largest dataset")
	assert.Equal(t, []string{"reading /a/frames (4, 8, 8); other datasets could hold frames: /b/frames (3, 8, 8) (give option dataset_path to read one)"}, dataset.Notes(d))
	require.NoError(t, d.Close())
	d, err = dataset.Open(path, dataset.Options{DatasetPath: "/b/frames", NavShape: []int{4}, SyncOffset: -1})
	require.NoError(t, err)
	assert.Equal(t, dataset.Uint8, d.DType())
	got := make([]byte, 4*64)
	for i := range got {
		got[i] = 0xFF
	}
	require.NoError(t, d.ReadFrames(0, 4, got))
	assert.Equal(t, append(make([]byte, 64), b...), got, "a blank frame, then the file's 3")
	require.NoError(t, d.Close())

	_, err = dataset.Open(path, dataset.Options{DatasetPath: "/c"})
	assert.ErrorContains(t, err, `no dataset "/c" (option dataset_path); datasets of rank 3 to 5 in the file: /a/frames (4, 8, 8), /b/frames (3, 8, 8)`)
	_, err = dataset.Open(path, dataset.Options{DatasetPath: "/a"})
	assert.ErrorContains(t, err, `"/a" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /a/frames (4, 8, 8)`)
	_, err = dataset.Open(path, dataset.Options{Format: "hdf5", Offset: 8})
	assert.ErrorContains(t, err, "hdf5 files do not take offset 8")

	only2D := filepath.Join(dir, "flat.h5")
	require.NoError(t, h5ref.Write(only2D, h5ref.Dataset{Path: "/img", Dims: []int{8, 8}, Type: h5ref.U16LE, Data: unsafe.Pointer(&a[0])}))
	_, err = dataset.Open(only2D, dataset.Options{})
	assert.ErrorContains(t, err, "the file has no dataset of rank 3 to 5")
	_, err = dataset.Open(only2D, dataset.Options{DatasetPath: "/img"})
	assert.ErrorContains(t, err, `dataset "/img" has shape (8, 8): want rank 3`)
}

// The fpd file: uint16 big-endian, deflate+shuffle+Fletcher-32, read through the library
// and decoded independently from its raw chunks.
func TestHDF5FPDFile(t *testing.T) {
	path := testfiles.File(t, "hdf5/fpd_file_test.hdf5")
	auto, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Empty(t, dataset.Notes(auto), "the frames are the one dataset that could hold frames: no note")
	require.NoError(t, auto.Close())
	d, err := dataset.Open(path, dataset.Options{DatasetPath: "/fpd_expt/fpd_data/data"})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, []int{2, 2, 1}, d.NavShape(), "the stored nav axes, as LiberTEM 0.16 reads them (#33)")
	assert.Equal(t, [2]int{256, 256}, d.SigShape())
	assert.Equal(t, dataset.Uint16, d.DType())
	raw, err := h5ref.ReadChunks(path, "/fpd_expt/fpd_data/data")
	require.NoError(t, err)
	assert.Equal(t, []int{h5ref.FilterFletcher32, h5ref.FilterShuffle, h5ref.FilterDeflate}, raw.Filters, "applied in this order on writing")
	want, err := raw.Decode(2, binary.BigEndian, false)
	require.NoError(t, err)
	got := framesOf(t, d)
	require.Equal(t, want, got)
	var sum float64
	for _, v := range got {
		sum += v
	}
	require.Greater(t, sum, 1e5, "real counts, not zeros")
	assert.False(t, math.IsNaN(sum))
}

// Messages for what a user hands the HDF5 reader by mistake.
func TestHDF5Messages(t *testing.T) {
	dir := t.TempDir()
	u16 := make([]uint16, 12*8*8)
	i64 := make([]int64, 20*8*8)
	for i := range u16 {
		u16[i] = uint16(i)
	}
	frames := func(path string, dims ...int) h5ref.Dataset {
		return h5ref.Dataset{Path: path, Dims: dims, Type: h5ref.U16LE, Data: unsafe.Pointer(&u16[0])}
	}

	t.Run("int64 dtype", func(t *testing.T) {
		path := filepath.Join(dir, "int64.h5")
		require.NoError(t, h5ref.Write(path,
			h5ref.Dataset{Path: "/counts", Dims: []int{20, 8, 8}, Type: h5ref.I64LE, Data: unsafe.Pointer(&i64[0])},
			frames("/entry/frames", 3, 4, 8, 8)))
		_, err := dataset.Open(path, dataset.Options{DatasetPath: "/counts"})
		require.Error(t, err)
		assert.True(t, errors.Is(err, errs.DType), "classified as a dtype error")
		assert.Contains(t, err.Error(), `dataset "/counts": int64 is not supported; supported: uint8, uint16, uint32, int8, int16, int32, float32, float64`)
		assert.Contains(t, err.Error(), "; datasets of rank 3 to 5 in the file: /entry/frames (3, 4, 8, 8) (not readable: /counts (20, 8, 8) int64)")
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, "the larger int64 dataset is not a candidate")
		assert.Equal(t, []int{3, 4}, d.NavShape())
		assert.Empty(t, dataset.Notes(d), "the one readable candidate: no note")
		require.NoError(t, d.Close())

		only := filepath.Join(dir, "only-int64.h5")
		require.NoError(t, h5ref.Write(only, h5ref.Dataset{Path: "/counts", Dims: []int{20, 8, 8}, Type: h5ref.I64LE, Data: unsafe.Pointer(&i64[0])}))
		_, err = dataset.Open(only, dataset.Options{})
		assert.ErrorContains(t, err, `the file has no readable dataset of rank 3 to 5 (not readable: /counts (20, 8, 8) int64); dataset "/counts": int64 is not supported; supported: uint8, `)
	})

	t.Run("group", func(t *testing.T) {
		path := filepath.Join(dir, "group.h5")
		require.NoError(t, h5ref.Write(path, frames("/entry/data/frames", 12, 8, 8), frames("/entry/data/dark", 2, 8, 8), frames("/other/x", 3, 8, 8)))
		_, err := dataset.Open(path, dataset.Options{DatasetPath: "/entry/data"})
		assert.ErrorContains(t, err, `"/entry/data" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /entry/data/frames (12, 8, 8), /entry/data/dark (2, 8, 8)`)
		_, err = dataset.Open(path, dataset.Options{DatasetPath: "entry/"})
		assert.ErrorContains(t, err, `"entry/" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /entry/data/frames (12, 8, 8), /entry/data/dark (2, 8, 8)`)
		_, err = dataset.Open(path, dataset.Options{DatasetPath: "/"})
		assert.ErrorContains(t, err, `"/" is a group, not a dataset (option dataset_path); datasets of rank 3 to 5 in it: /entry/data/frames (12, 8, 8), /other/x (3, 8, 8), /entry/data/dark (2, 8, 8)`)
		small := []uint16{1, 2, 3, 4}
		require.NoError(t, h5ref.Write(path, frames("/frames", 12, 8, 8), h5ref.Dataset{Path: "/meta/mean", Dims: []int{2, 2}, Type: h5ref.U16LE, Data: unsafe.Pointer(&small[0])}))
		_, err = dataset.Open(path, dataset.Options{DatasetPath: "/meta"})
		assert.ErrorContains(t, err, `"/meta" is a group, not a dataset (option dataset_path) and holds no dataset of rank 3 to 5; datasets of rank 3 to 5 in the file: /frames (12, 8, 8)`)
	})

	t.Run("not a readable file", func(t *testing.T) {
		whole := filepath.Join(dir, "whole.h5")
		require.NoError(t, h5ref.Write(whole, frames("/frames", 12, 8, 8)))
		data, err := os.ReadFile(whole)
		require.NoError(t, err)
		for name, content := range map[string][]byte{
			"truncated.h5": data[:len(data)/2],
			"header.h5":    data[:1000],
			"text.hdf5":    []byte("frames,1,2,3\n"),
			"empty.h5":     nil,
		} {
			path := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(path, content, 0o644))
			_, err := dataset.Open(path, dataset.Options{})
			assert.ErrorContains(t, err, fmt.Sprintf("dataset: %s: not a readable HDF5 file (truncated, or another format) of %d bytes", path, len(content)), name)
		}
	})

	t.Run("unavailable filter", func(t *testing.T) {
		path := filepath.Join(dir, "zstd.h5")
		zstd := frames("/zstd", 12, 8, 8)
		zstd.Chunk, zstd.Filter = []int{1, 8, 8}, h5ref.Filter{ID: 32015, Name: "zstd"}
		require.NoError(t, h5ref.Write(path, zstd, frames("/plain", 2, 8, 8)))
		want := `dataset "/zstd": its data passes through HDF5 filter 32015 (zstd), which this libhdf5 cannot load: install the filter's plugin (e.g. the plugins of the hdf5plugin Python package) and set HDF5_PLUGIN_PATH to its folder`
		_, err := dataset.Open(path, dataset.Options{DatasetPath: "/zstd"})
		assert.ErrorContains(t, err, want)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{2}, d.NavShape(), "the larger zstd dataset is not a candidate")
		require.NoError(t, d.Close())
	})

	t.Run("raw options", func(t *testing.T) {
		path := filepath.Join(dir, "one.h5")
		require.NoError(t, h5ref.Write(path, frames("/frames", 3, 4, 8, 8)))
		frametest.CheckIgnored(t, path, frametest.RawOnly,
			"option sig_shape applies to raw files only and was ignored: the hdf5 file gives sig shape (8, 8)",
			"option dtype applies to raw files only and was ignored: the hdf5 file gives dtype uint16",
			"option byte_order applies to raw files only and was ignored: the hdf5 file gives its byte order")
	})

	t.Run("rank 4 before 5 before 3", func(t *testing.T) {
		path := filepath.Join(dir, "ranks.h5")
		require.NoError(t, h5ref.Write(path, frames("/stack", 12, 8, 8), frames("/scan", 2, 3, 8, 8), frames("/series", 2, 2, 3, 8, 8),
			frames("/fpd", 2, 2, 1, 8, 8), frames("/dac", 2, 2, 1, 8)))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{2, 3}, d.NavShape())
		assert.Equal(t, []string{"reading /scan (2, 3, 8, 8); other datasets could hold frames: /fpd (2, 2, 1, 8, 8), /series (2, 2, 3, 8, 8), /stack (12, 8, 8) (give option dataset_path to read one)"},
			dataset.Notes(d), "not /dac, whose frames would be 1×8")
		require.NoError(t, d.Close())
	})
}

// Dataset names hold any character but NUL: spaces, tabs, newlines, non-ASCII. Each is
// found by the automatic choice and by dataset_path, and listings quote those that would
// be ambiguous.
func TestHDF5Names(t *testing.T) {
	path := filepath.Join(t.TempDir(), "names.h5")
	names := []string{"/my data", "/tab\there", "/new\nline", "/données/images 2", "/plain"}
	dims := [][]int{{4, 5, 8, 8}, {3, 8, 8}, {2, 8, 8}, {6, 8, 8}, {5, 8, 8}}
	values := make([][]uint16, len(names))
	var sets []h5ref.Dataset
	for i, name := range names {
		n := 1
		for _, d := range dims[i] {
			n *= d
		}
		values[i] = make([]uint16, n)
		for j := range values[i] {
			values[i][j] = uint16(1000*i + j)
		}
		sets = append(sets, h5ref.Dataset{Path: name, Dims: dims[i], Type: h5ref.U16LE, Data: unsafe.Pointer(&values[i][0])})
	}
	require.NoError(t, h5ref.Write(path, sets...))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{4, 5}, d.NavShape(), "/my data, the one of rank 4")
	want := make([]float64, len(values[0]))
	for j, v := range values[0] {
		want[j] = float64(v)
	}
	assert.Equal(t, want, framesOf(t, d))
	assert.Equal(t, []string{`reading "/my data" (4, 5, 8, 8); other datasets could hold frames: "/données/images 2" (6, 8, 8), /plain (5, 8, 8), "/tab\there" (3, 8, 8), "/new\nline" (2, 8, 8) (give option dataset_path to read one)`}, dataset.Notes(d))
	require.NoError(t, d.Close())
	for i, name := range names {
		for _, given := range []string{name, " " + name + " "} {
			d, err := dataset.Open(path, dataset.Options{DatasetPath: given})
			require.NoError(t, err, "%q", given)
			want := make([]float64, len(values[i]))
			for j, v := range values[i] {
				want[j] = float64(v)
			}
			assert.Equal(t, want, framesOf(t, d), "%q", given)
			require.NoError(t, d.Close())
		}
	}
}

// TestHDF5NamesWithEscapes opens files whose names (a dataset's path, an external link's
// target file and object, a filter's name) hold terminal escape sequences: every note and
// error quotes them (Go syntax), none prints an escape character raw.
func TestHDF5NamesWithEscapes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "esc.h5")
	testfiles.RunPython(t, `
import sys, numpy as np, h5py
with h5py.File(sys.argv[1], "w") as f:
    f["grp/\x1b[2Jscan"] = np.zeros((2, 3, 8, 8), np.uint16)
    f["plain"] = np.zeros((4, 8, 8), np.uint16)
    f["\x1b[31mred"] = h5py.ExternalLink("\x1b]0;title\x07missing.h5", "/data\x1b[0m")
`, []string{"numpy", "h5py"}, path)
	zstd := filepath.Join(dir, "zstd.h5")
	values := make([]uint16, 4*8*8)
	require.NoError(t, h5ref.Write(zstd, h5ref.Dataset{Path: "/data", Dims: []int{4, 8, 8}, Chunk: []int{1, 8, 8}, Filter: h5ref.Filter{ID: 32015, Name: "zstd\x1b[5m"},
		Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	var messages []string
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	messages = append(messages, dataset.Notes(d)...)
	require.NoError(t, d.Close())
	for _, opt := range []dataset.Options{
		{NavShape: []int{5, 5}},
		{DatasetPath: "/\x1b[31mred"},
		{DatasetPath: "/grp/\x1b[2Jscan", NavShape: []int{7}},
		{DatasetPath: "/grp/\x1b[2Jmissing"},
	} {
		_, err := dataset.Open(path, opt)
		require.Error(t, err, "%+v", opt)
		messages = append(messages, err.Error())
	}
	_, err = dataset.Open(zstd, dataset.Options{})
	require.Error(t, err)
	messages = append(messages, err.Error())
	all := strings.Join(messages, "\n")
	assert.NotContains(t, all, "\x1b", "an escape character printed raw")
	assert.NotContains(t, all, "\x07", "a bell character printed raw")
	for _, quoted := range []string{`"/grp/\x1b[2Jscan"`, `"/\x1b[31mred"`, `"\x1b]0;title\amissing.h5:/data\x1b[0m"`, `"zstd\x1b[5m"`} {
		assert.Contains(t, all, quoted)
	}
}

// HDF5Library gives the version of libhdf5 this build runs with (#17r D11): the one
// pkg-config gives, which cgo built against.
func TestHDF5Library(t *testing.T) {
	out, err := exec.Command("pkg-config", "--modversion", "hdf5").Output()
	require.NoError(t, err)
	version, ok := hdf5.Library()
	assert.True(t, ok)
	assert.Equal(t, strings.TrimSpace(string(out)), version)
}

// A dataset of 4 nav axes (rank 6), which LiberTEM reads as nav shape (2, 1, 3, 2):
// stemdot reads scans of at most 3 axes, so it is refused naming option nav_shape, and
// read in the 3 or fewer axes that option gives, chunked across the nav axes (#33).
func TestHDF5MoreThanThreeNavAxes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "six.h5")
	px := make([]uint16, 2*1*3*2*4*5)
	for i := range px {
		px[i] = uint16(i * 7)
	}
	require.NoError(t, h5ref.Write(path, h5ref.Dataset{Path: "/six", Dims: []int{2, 1, 3, 2, 4, 5}, Chunk: []int{1, 1, 2, 2, 4, 5}, Gzip: 1,
		Type: h5ref.U16LE, Data: unsafe.Pointer(&px[0])}))
	_, err := dataset.Open(path, dataset.Options{DatasetPath: "/six"})
	assert.EqualError(t, err, "dataset: "+path+": nav shape (2, 1, 3, 2) from dataset /six (2, 1, 3, 2, 4, 5) has 4 axes: stemdot reads scans of 1 to 3 (N, Y,X or Z,Y,X): give option nav_shape of its 12 positions in at most 3 axes (e.g. 2,3,2)")
	assert.ErrorIs(t, err, errs.Shape)
	for _, nav := range [][]int{{2, 3, 2}, {6, 2}, {12}} {
		d, err := dataset.Open(path, dataset.Options{DatasetPath: "/six", NavShape: nav})
		require.NoError(t, err, nav)
		assert.Equal(t, nav, d.NavShape())
		got := framesOf(t, d)
		require.Len(t, got, len(px))
		for i, v := range px {
			require.Equal(t, float64(v), got[i], "nav %v: value %d", nav, i)
		}
		require.NoError(t, d.Close())
	}
	_, err = dataset.Open(path, dataset.Options{DatasetPath: "/six", NavShape: []int{2, 1, 3, 2}})
	assert.ErrorContains(t, err, "nav shape (2, 1, 3, 2) (option nav_shape) has 4 axes")
}
