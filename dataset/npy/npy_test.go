package npy_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// TestTruncatedNPY opens every truncation of a valid NPY file up to its first data bytes
// (the lengths that made npyio panic): each must be an error naming the file.
func TestTruncatedNPY(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.npy")
	frametest.WriteRandom(t, good, "npy", []int{2, 3}, [2]int{4, 5})
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	path := filepath.Join(dir, "tr.npy")
	for n := range 140 {
		require.NoError(t, os.WriteFile(path, b[:n], 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err, "truncated to %d bytes", n)
		assert.Contains(t, err.Error(), "dataset: "+path+": ", "truncated to %d bytes", n)
	}
	dict := "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3, 4, 5)"
	require.NoError(t, os.WriteFile(path, frametest.NPYDict(dict), 0o644))
	_, err = dataset.Open(path, dataset.Options{})
	require.Error(t, err, dict)
	assert.Contains(t, err.Error(), "dataset: "+path+": malformed NPY header", dict)
	assert.Contains(t, err.Error(), "expected ',' or '}' in the dict, found end of header", dict)
	// Keys in another order (which made npyio panic) and a compact header are valid NPY.
	for _, dict := range []string{"{'shape': (2, 3, 4, 5), 'fortran_order': False, 'descr': '<u2', }", "{'descr':'<u2','fortran_order':False,'shape':(2,3,4,5)}"} {
		require.NoError(t, os.WriteFile(path, append(frametest.NPYDict(dict), b[len(b)-2*3*4*5*2:]...), 0o644))
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, dict)
		require.Equal(t, []int{2, 3}, ds.NavShape())
		require.Equal(t, [2]int{4, 5}, ds.SigShape())
		require.NoError(t, ds.Close())
	}
}

func TestNPYShapes(t *testing.T) {
	dir := t.TempDir()
	data := frametest.Encode(frametest.RandomValues(rand.New(rand.NewPCG(3, 4)), dataset.Uint16, 6*4*5), dataset.Uint16, binary.LittleEndian)
	for _, tc := range []struct {
		shape string
		nav   []int
		sig   [2]int
		opt   []int
	}{
		{"(24, 5)", []int{1, 1}, [2]int{24, 5}, nil},
		{"(6, 4, 5)", []int{6}, [2]int{4, 5}, nil}, // the file's own nav axes, as LiberTEM
		{"(2, 3, 4, 5)", []int{2, 3}, [2]int{4, 5}, nil},
		{"(6, 4, 5)", []int{3, 2}, [2]int{4, 5}, []int{3, 2}},
		// 3 nav axes as stored, size-1 axes kept, as LiberTEM reads them (#33)
		{"(2, 1, 3, 4, 5)", []int{2, 1, 3}, [2]int{4, 5}, nil},
		{"(3, 2, 1, 4, 5)", []int{3, 2, 1}, [2]int{4, 5}, nil},
		{"(1, 2, 3, 4, 5)", []int{1, 2, 3}, [2]int{4, 5}, nil},
		{"(6, 4, 5)", []int{1, 2, 3}, [2]int{4, 5}, []int{1, 2, 3}},
		{"(2, 3, 4, 5)", []int{3, 1, 2}, [2]int{4, 5}, []int{3, 1, 2}},
		// more than 3 nav axes are read in at most 3 that option nav_shape gives
		{"(1, 1, 2, 3, 4, 5)", []int{2, 3}, [2]int{4, 5}, []int{2, 3}},
		{"(1, 1, 2, 3, 4, 5)", []int{1, 2, 3}, [2]int{4, 5}, []int{1, 2, 3}},
	} {
		path := filepath.Join(dir, "s.npy")
		require.NoError(t, os.WriteFile(path, frametest.NPYBytes("<u2", false, tc.shape, data), 0o644))
		d, err := dataset.Open(path, dataset.Options{NavShape: tc.opt})
		require.NoError(t, err, tc.shape)
		assert.Equal(t, tc.nav, d.NavShape(), tc.shape)
		assert.Equal(t, tc.sig, d.SigShape(), tc.shape)
		assert.Equal(t, data, frametest.ReadAll(t, d))
		require.NoError(t, d.Close())
	}
}

func TestNPYErrors(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 2*3*4*2)
	for _, tc := range []struct {
		name, descr string
		fortran     bool
		shape       string
		data        []byte
		want        string
	}{
		{"fortran", "<u2", true, "(2, 3, 4)", data, "Fortran-order (column-major) NPY arrays are not supported"},
		{"complex", "<c8", false, "(2, 3)", data[:48], "unsupported NPY dtype '<c8'"},
		{"uint64", "<u8", false, "(2, 3)", data[:48], "unsupported NPY dtype '<u8'"},
		{"escaped", "<u\x1b[2J", false, "(2, 3)", data[:48], `unsupported NPY dtype '<u\x1b[2J'`},
		{"1-D", "<u2", false, "(24,)", data, "NPY shape (24,) is not (sig_y, sig_x)"},
		{"6-D", "<u2", false, "(1, 1, 2, 1, 3, 4)", data, "nav shape (1, 1, 2, 1) from the NPY shape has 4 axes: stemdot reads scans of 1 to 3 (N, Y,X or Z,Y,X): give option nav_shape of its 2 positions in at most 3 axes (e.g. 1,2,1)"},
		{"0-D", "<u2", false, "()", data[:2], "NPY shape () is not (sig_y, sig_x)"},
		{"truncated", "<u2", false, "(2, 3, 4)", data[:40], "truncated NPY file: the header's shape (2, 3, 4) and dtype '<u2' make 48 bytes of data from byte 128 to byte 176, but the file has 168 bytes (8 missing)"},
		{"trailing bytes", "<u2", false, "(2, 3, 4)", append(bytes.Clone(data), 1, 2, 3), "3 bytes after the array's data: the header's shape (2, 3, 4) and dtype '<u2' make 48 bytes of data from byte 128 to byte 176 of the 179-byte file; numpy ignores them, stemdot does not read a file that its header may not describe: save the array again (numpy.save), or cut the file to 176 bytes"},
		{"empty axis", "<u2", false, "(0, 3, 4)", nil, "NPY shape (0, 3, 4) has an empty axis"},
	} {
		path := filepath.Join(dir, tc.name+".npy")
		require.NoError(t, os.WriteFile(path, frametest.NPYBytes(tc.descr, tc.fortran, tc.shape, tc.data), 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		assert.Contains(t, err.Error(), path, tc.name)
	}
	path := filepath.Join(dir, "bad.npy")
	require.NoError(t, os.WriteFile(path, []byte("\x93NUMPY\x07\x00garbage"), 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NPY format version 7.0 is not supported")
}

// #17r D8: NPY headers that numpy reads though its writer does not write them: a descr
// without byte order (native, little-endian here) or as a type code or name, a header
// not ended by '\n'. The frames are read as numpy reads them.
func TestNPYHeadersNumpyReads(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 2*3*4*2)
	for i := range 24 {
		binary.NativeEndian.PutUint16(data[2*i:], uint16(1000+i))
	}
	for _, descr := range []string{"u2", "=u2", "|u2", "H", "<H", "uint16", "ushort"} {
		path := filepath.Join(dir, descr+".npy")
		require.NoError(t, os.WriteFile(path, frametest.NPYBytes(descr, false, "(2, 3, 4)", data), 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, descr)
		assert.Equal(t, dataset.Uint16, d.DType(), descr)
		assert.Equal(t, data, frametest.ReadAll(t, d), descr)
		require.NoError(t, d.Close())
	}
	noNewline := frametest.NPYBytes("<u2", false, "(2, 3, 4)", data)
	noNewline[len(noNewline)-len(data)-1] = ' '
	path := filepath.Join(dir, "no-newline.npy")
	require.NoError(t, os.WriteFile(path, noNewline, 0o644))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{2}, d.NavShape())
	assert.Equal(t, data, frametest.ReadAll(t, d))
	require.NoError(t, d.Close())
}
