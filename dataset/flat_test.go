package dataset_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
)

var npyCodes = map[dataset.DType]string{
	dataset.Uint8: "u1", dataset.Uint16: "u2", dataset.Uint32: "u4",
	dataset.Int8: "i1", dataset.Int16: "i2", dataset.Int32: "i4",
	dataset.Float32: "f4", dataset.Float64: "f8",
}

func TestRawAndNPYRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nav, sig := []int{3, 4}, [2]int{5, 7}
	n := 12 * 5 * 7
	for _, dt := range frametest.AllDTypes {
		for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			big := bo == binary.BigEndian
			t.Run(fmt.Sprintf("%v/%v", dt, bo), func(t *testing.T) {
				want := frametest.RandomValues(rng, dt, n)
				stored := frametest.Encode(want, dt, bo)
				dir := t.TempDir()

				// raw with a 17-byte header to skip
				rawPath := filepath.Join(dir, "x.raw")
				require.NoError(t, os.WriteFile(rawPath, append([]byte("seventeen bytes!!"), stored...), 0o644))
				d, err := dataset.Open(rawPath, dataset.Options{NavShape: nav, SigShape: sig[:], DType: dt, BigEndian: big, Offset: 17})
				require.NoError(t, err)
				assert.Equal(t, "raw", d.Format())
				assert.Equal(t, nav, d.NavShape())
				assert.Equal(t, sig, d.SigShape())
				assert.Equal(t, 12, d.NumFrames())
				assert.Equal(t, want, frametest.Decode(frametest.ReadAll(t, d), dt))
				require.NoError(t, d.Close())

				// NPY, shape (3, 4, 5, 7)
				order := map[bool]string{false: "<", true: ">"}[big]
				if dt.Size() == 1 {
					order = "|"
				}
				npyPath := filepath.Join(dir, "x.npy")
				require.NoError(t, os.WriteFile(npyPath, frametest.NPYBytes(order+npyCodes[dt], false, "(3, 4, 5, 7)", stored), 0o644))
				d, err = dataset.Open(npyPath, dataset.Options{})
				require.NoError(t, err)
				assert.Equal(t, "npy", d.Format())
				assert.Equal(t, nav, d.NavShape())
				assert.Equal(t, sig, d.SigShape())
				assert.Equal(t, dt, d.DType())
				assert.Equal(t, want, frametest.Decode(frametest.ReadAll(t, d), dt))
				require.NoError(t, d.Close())
			})
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()

	_, err := dataset.Open(filepath.Join(dir, "missing.mib"), dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dataset: "+filepath.Join(dir, "missing.mib")+": file does not exist")
	assert.Equal(t, errs.IO, errs.KindOf(err))

	unknown := filepath.Join(dir, "x.dat")
	require.NoError(t, os.WriteFile(unknown, []byte("GIF89a......"), 0o644))
	_, err = dataset.Open(unknown, dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), unknown+": unknown format")
	assert.Contains(t, err.Error(), "supported: blo (NanoMEGAS block file: .blo), dectris")
	assert.Contains(t, err.Error(), "give option format")
	assert.Equal(t, errs.Format, errs.KindOf(err))

	_, err = dataset.Open(unknown, dataset.Options{Format: "tiff"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown option format "tiff"`)
	assert.Equal(t, errs.Argument, errs.KindOf(err))

	// Detection by content, whatever the extension.
	mibLike := filepath.Join(dir, "frames.dat")
	require.NoError(t, os.WriteFile(mibLike, []byte("MQ1,000001,00384,01,0256,0256,R64,   1x1,01,"), 0o644))
	_, err = dataset.Open(mibLike, dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "256×256 R64", "detected as MIB by content")
	npyLike := filepath.Join(dir, "array.dat")
	require.NoError(t, os.WriteFile(npyLike, frametest.NPYBytes("<u2", false, "(2, 2)", make([]byte, 8)), 0o644))
	d, err := dataset.Open(npyLike, dataset.Options{})
	require.NoError(t, err, "detected as NPY by content")
	assert.Equal(t, "npy", d.Format())
	require.NoError(t, d.Close())

	raw := filepath.Join(dir, "x.raw")
	require.NoError(t, os.WriteFile(raw, make([]byte, 9*16*16*2), 0o644))
	_, err = dataset.Open(raw, dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs its frame shape: give option sig_shape")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	_, err = dataset.Open(raw, dataset.Options{SigShape: []int{16, 16}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs its pixel dtype: give option dtype")
	assert.Equal(t, errs.DType, errs.KindOf(err))
	_, err = dataset.Open(raw, dataset.Options{SigShape: []int{16, 16}, DType: dataset.Uint32})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "size 4608 bytes (after a 0-byte offset) is not a whole, non-zero number of frames of 1024 bytes (16×16×4)")
	assert.Equal(t, errs.Format, errs.KindOf(err))
	_, err = dataset.Open(raw, dataset.Options{SigShape: []int{16, 16}, DType: dataset.Uint16, NavShape: []int{3, 4}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nav shape (3, 4) (option nav_shape) has 12 positions but the file holds 9 frames (frames of 512 bytes (16×16×2)); check option sig_shape, option dtype, option offset, option frame_header and option frame_footer")
	assert.Equal(t, errs.Shape, errs.KindOf(err))

	d, err = dataset.Open(raw, dataset.Options{SigShape: []int{16, 16}, DType: dataset.Uint16})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 9}, d.NavShape(), "raw without nav shape is (1, n)")
	buf := make([]byte, 9*d.FrameBytes())
	err = d.ReadFrames(5, 10, buf)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "frames [5, 10) out of range: the file holds 9 frames")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	err = d.ReadFrames(3, 2, buf)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "out of range")
	err = d.ReadFrames(0, 3, buf[:100])
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dst holds 100 bytes, need 1536 (3 frames of 512 bytes)")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	require.NoError(t, d.Close())
	assert.Error(t, d.ReadFrames(0, 1, buf), "read after Close")
}

func TestFromMemory(t *testing.T) {
	data := frametest.Encode(frametest.RandomValues(rand.New(rand.NewPCG(5, 6)), dataset.Float32, 6*3*2), dataset.Float32, binary.NativeEndian)
	d, err := dataset.FromMemory(data, []int{2, 3}, [2]int{3, 2}, dataset.Float32)
	require.NoError(t, err)
	assert.Equal(t, "memory", d.Format())
	assert.Equal(t, 6, d.NumFrames())
	v, ok := d.(dataset.Viewer)
	require.True(t, ok)
	view, err := v.ViewFrames(2, 4)
	require.NoError(t, err)
	require.Len(t, view, 2*24)
	assert.Same(t, &data[2*24], &view[0], "ViewFrames does not copy")
	assert.Equal(t, len(view), cap(view))
	buf := make([]byte, 6*24)
	require.NoError(t, d.ReadFrames(0, 6, buf))
	assert.Equal(t, data, buf)

	_, err = v.ViewFrames(4, 7)
	assert.ErrorContains(t, err, "frames [4, 7) out of range")
	assert.ErrorContains(t, d.ReadFrames(0, 2, buf[:10]), "dst holds 10 bytes")
	require.NoError(t, d.Close())
	assert.ErrorContains(t, d.ReadFrames(0, 1, buf), "after Close")

	d, err = dataset.FromMemory(data, nil, [2]int{3, 2}, dataset.Float32)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 6}, d.NavShape())

	_, err = dataset.FromMemory(data, []int{2, 2}, [2]int{3, 2}, dataset.Float32)
	assert.ErrorContains(t, err, "144 bytes, but nav shape (2, 2) × sig shape (3, 2) × 4 bytes (float32) needs 96 bytes")
	_, err = dataset.FromMemory(data, nil, [2]int{5, 5}, dataset.Float32)
	assert.ErrorContains(t, err, "not a whole, non-zero number of frames")
	_, err = dataset.FromMemory(data, nil, [2]int{3, 2}, dataset.Invalid)
	assert.ErrorContains(t, err, "invalid dtype")
}

func TestWriterRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	nav, sig := []int{3, 5}, [2]int{6, 4}
	for _, format := range []string{"raw", "npy", "mib"} {
		for _, dt := range frametest.AllDTypes {
			mibOK := dt == dataset.Uint8 || dt == dataset.Uint16 || dt == dataset.Uint32
			t.Run(format+"/"+dt.String(), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "w."+format)
				w, err := dataset.Create(path, format, nav, sig, dt)
				if format == "mib" && !mibOK {
					require.Error(t, err)
					assert.Contains(t, err.Error(), "MIB stores uint8, uint16 or uint32 pixels")
					return
				}
				require.NoError(t, err)
				want := frametest.RandomValues(rng, dt, 15*6*4)
				data := frametest.Encode(want, dt, binary.NativeEndian)
				// In uneven pieces: 2 frames, then 13.
				require.NoError(t, w.WriteFrames(data[:2*24*dt.Size()]))
				require.NoError(t, w.WriteFrames(data[2*24*dt.Size():]))
				require.NoError(t, w.Close())

				opt := dataset.Options{}
				if format == "raw" {
					opt = dataset.Options{NavShape: nav, SigShape: sig[:], DType: dt}
				}
				d, err := dataset.Open(path, opt)
				require.NoError(t, err)
				defer d.Close()
				assert.Equal(t, nav, d.NavShape())
				assert.Equal(t, sig, d.SigShape())
				assert.Equal(t, dt, d.DType())
				assert.Equal(t, want, frametest.Decode(frametest.ReadAll(t, d), dt))
				entries, err := os.ReadDir(filepath.Dir(path))
				require.NoError(t, err)
				for _, e := range entries {
					assert.False(t, strings.HasSuffix(e.Name(), ".tmp"), "temporary file %s left behind", e.Name())
				}
			})
		}
	}
}

func TestWriterMIBLayout(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		sig     [2]int
		header  string
		hdrSize int
	}{
		{[2]int{128, 256}, "MQ1,000002,00384,01,0256,0128,U16,   1x1,", 384},
		{[2]int{512, 512}, "MQ1,000002,00768,04,0512,0512,U16,   2x2,", 768},
	} {
		path := filepath.Join(dir, fmt.Sprintf("q%d.mib", tc.hdrSize))
		w, err := dataset.Create(path, "mib", []int{2}, tc.sig, dataset.Uint16)
		require.NoError(t, err)
		frame := make([]byte, tc.sig[0]*tc.sig[1]*2)
		binary.NativeEndian.PutUint16(frame, 0x0102)
		require.NoError(t, w.WriteFrames(append(frame, frame...)))
		require.NoError(t, w.Close())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		stride := tc.hdrSize + len(frame)
		require.Len(t, raw, 2*stride)
		assert.True(t, strings.HasPrefix(string(raw[stride:]), tc.header), "%q", raw[stride:stride+60])
		assert.Equal(t, []byte{1, 2}, raw[stride+tc.hdrSize:stride+tc.hdrSize+2], "pixels are big-endian")
		assert.Zero(t, raw[stride-1-len(frame)], "header padded with NULs")
		hdr, err := os.ReadFile(strings.TrimSuffix(path, ".mib") + ".hdr")
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(hdr), "HDR,"))
		assert.Contains(t, string(hdr), "ScanX:\t2\r\nScanY:\t1\r\n")
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{1, 2}, d.NavShape())
		require.NoError(t, d.Close())
	}
}

func TestWriterAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.mib")
	noFiles := func() {
		t.Helper()
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries)
	}

	w, err := dataset.Create(path, "mib", []int{2, 2}, [2]int{4, 4}, dataset.Uint8)
	require.NoError(t, err)
	require.NoError(t, w.WriteFrames(make([]byte, 16)))
	w.Abort()
	w.Abort()
	noFiles()
	assert.Error(t, w.WriteFrames(make([]byte, 16)), "write after Abort")

	w, err = dataset.Create(path, "npy", []int{2, 2}, [2]int{4, 4}, dataset.Uint8)
	require.NoError(t, err)
	require.NoError(t, w.WriteFrames(make([]byte, 3*16)))
	err = w.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "closed after 3 of the 4 frames of nav shape (2, 2)")
	noFiles()

	w, err = dataset.Create(path, "raw", []int{2, 2}, [2]int{4, 4}, dataset.Uint8)
	require.NoError(t, err)
	err = w.WriteFrames(make([]byte, 5*16))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0 frames written plus 5 more exceed the 4 frames of nav shape (2, 2)")
	assert.Equal(t, err, w.Close(), "the first error sticks")
	noFiles()

	w, err = dataset.Create(path, "raw", []int{2, 2}, [2]int{4, 4}, dataset.Uint8)
	require.NoError(t, err)
	assert.ErrorContains(t, w.WriteFrames(make([]byte, 17)), "17 bytes is not a whole number of frames of 16 bytes (4×4×1)")
	noFiles()

	_, err = dataset.Create(path, "tiff", []int{2}, [2]int{4, 4}, dataset.Uint8)
	assert.ErrorContains(t, err, `unknown format "tiff"`)
	_, err = dataset.Create(path, "mib", []int{2, 2, 2}, [2]int{4, 4}, dataset.Uint8)
	assert.ErrorContains(t, err, "at most two axes")
	_, err = dataset.Create(path, "raw", []int{0, 2}, [2]int{4, 4}, dataset.Uint8)
	assert.ErrorContains(t, err, "non-positive")
	noFiles()
}

func TestWriteArrayNPY(t *testing.T) {
	dir := t.TempDir()
	f32 := make([]float32, 2*3*4)
	f64 := make([]float64, 2*3*4)
	for i := range f32 {
		f32[i] = float32(i)*1.5 - 7
		f64[i] = float64(i)*-2.25 + 1e10
	}
	for _, tc := range []struct {
		data any
		dt   dataset.DType
		want []float64
	}{
		{f32, dataset.Float32, frametest.Decode(frametest.Encode(float32s(f32), dataset.Float32, binary.NativeEndian), dataset.Float32)},
		{f64, dataset.Float64, f64},
	} {
		path := filepath.Join(dir, tc.dt.String()+".npy")
		require.NoError(t, stemnpy.WriteFile(path, []int{2, 3, 4}, tc.data))
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		hlen := int(binary.LittleEndian.Uint16(raw[8:]))
		assert.Zero(t, (10+hlen)%64, "data starts 64-byte aligned")
		assert.Contains(t, string(raw[10:10+hlen]), fmt.Sprintf("'descr': '<%s', 'fortran_order': False, 'shape': (2, 3, 4), }", npyCodes[tc.dt]))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{2}, d.NavShape())
		assert.Equal(t, [2]int{3, 4}, d.SigShape())
		assert.Equal(t, tc.want, frametest.Decode(frametest.ReadAll(t, d), tc.dt))
		require.NoError(t, d.Close())
	}
	// An independent reader (npyio) agrees.
	f, err := os.Open(filepath.Join(dir, "float32.npy"))
	require.NoError(t, err)
	var back32 []float32
	require.NoError(t, npy.Read(f, &back32))
	f.Close()
	assert.Equal(t, f32, back32)
	f, err = os.Open(filepath.Join(dir, "float64.npy"))
	require.NoError(t, err)
	var back64 []float64
	require.NoError(t, npy.Read(f, &back64))
	f.Close()
	assert.Equal(t, f64, back64)

	assert.ErrorContains(t, stemnpy.WriteFile(filepath.Join(dir, "x.npy"), []int{5}, f32), "shape (5,) has 5 elements but the data holds 24")
	assert.ErrorContains(t, stemnpy.WriteFile(filepath.Join(dir, "x.npy"), []int{24}, []int{1}), "unsupported array type []int")
	_, err = os.Stat(filepath.Join(dir, "x.npy"))
	assert.True(t, os.IsNotExist(err))
}

func float32s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
