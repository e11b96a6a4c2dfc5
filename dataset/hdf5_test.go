//go:build !nohdf5

package dataset_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/h5ref"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// framesOf reads every frame of d as float64 values.
func framesOf(t *testing.T, d dataset.Dataset) []float64 {
	t.Helper()
	return decodeHost(readAll(t, d), d.DType())
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
			[]int{1, 30}, 3, func(i int) float64 { return float64(u16[i]) }},
		{"4-D float32 LE contiguous", h5ref.Dataset{Dims: []int{5, 6, sy, sx}, Type: h5ref.F32LE, Data: unsafe.Pointer(&f32[0])},
			[]int{5, 6}, 1, func(i int) float64 { return float64(f32[i]) }},
		{"4-D float32 BE, row chunks", h5ref.Dataset{Dims: []int{5, 6, sy, sx}, Chunk: []int{2, 6, sy, sx}, Gzip: 1, Fletch: true, Type: h5ref.F32BE, Data: unsafe.Pointer(&f32[0])},
			[]int{5, 6}, 12, func(i int) float64 { return float64(f32[i]) }},
		{"5-D int32 BE time series, edge chunks", h5ref.Dataset{Dims: []int{2, 3, 5, sy, sx}, Chunk: []int{1, 2, 2, sy, sx}, Gzip: 6, Shuffle: true, Type: h5ref.I32BE, Data: unsafe.Pointer(&i32[0])},
			[]int{6, 5}, 2, func(i int) float64 { return float64(i32[i]) }},
		{"5-D fpd layout", h5ref.Dataset{Dims: []int{5, 6, 1, sy, sx}, Chunk: []int{1, 1, 1, sy, sx}, Gzip: 1, Shuffle: true, Type: h5ref.U16LE, Data: unsafe.Pointer(&u16[0])},
			[]int{5, 6}, 1, func(i int) float64 { return float64(u16[i]) }},
		{"chunks that split frames", h5ref.Dataset{Dims: []int{30, sy, sx}, Chunk: []int{4, 3, 4}, Gzip: 2, Type: h5ref.U16LE, Data: unsafe.Pointer(&u16[0])},
			[]int{1, 30}, 1, func(i int) float64 { return float64(u16[i]) }},
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
				assert.Equal(t, want[r[0]*px:r[1]*px], decodeHost(buf[:(r[1]-r[0])*fb], d.DType()), "frames %v", r)
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
	assert.Equal(t, []int{1, 4}, d.NavShape(), "the largest dataset")
	assert.Equal(t, []string{"reading the largest dataset, /a/frames (4, 8, 8); give option dataset_path to read another (datasets of rank 3 to 5 in the file: /a/frames (4, 8, 8), /b/frames (3, 8, 8))"}, dataset.Notes(d))
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
	assert.ErrorContains(t, err, `opening dataset "/a" (option dataset_path)`)
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
	d, err := dataset.Open(path, dataset.Options{DatasetPath: "/fpd_expt/fpd_data/data"})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, []int{2, 2}, d.NavShape())
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
