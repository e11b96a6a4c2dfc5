package masks

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
)

// writeNPY writes v (a nested slice, shape from its nesting) to dir/name with npyio.
func writeNPY(t *testing.T, dir, name string, v any) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, npyio.Write(f, v))
	require.NoError(t, f.Close())
	return path
}

// writeRawNPY writes a version 1.0 .npy file with the given header fields and payload,
// to test headers npyio.Write does not produce.
func writeRawNPY(t *testing.T, dir, name, descr string, fortran bool, shape string, payload []byte) string {
	t.Helper()
	order := "False"
	if fortran {
		order = "True"
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, shape)
	// Pad so that magic (6) + version (2) + length (2) + header ends on a multiple of 64.
	pad := 64 - (10+len(hdr)+1)%64
	hdr += strings.Repeat(" ", pad) + "\n"
	buf := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
	buf = append(append(buf, hdr...), payload...)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, buf, 0o644))
	return path
}

func TestLoadNPYRoundTrip(t *testing.T) {
	dir := t.TempDir()
	// The same weights in every dtype: mask m, pixel (y, x) = (m*2+y)*3+x - 4 (bool:
	// weight != 0, unsigned: without the offset).
	want3D := func(offset float32, asBool bool) []float32 {
		out := make([]float32, 2*2*3)
		for i := range out {
			out[i] = float32(i) - offset
			if asBool && out[i] != 0 {
				out[i] = 1
			}
		}
		return out
	}
	cases := []struct {
		name string
		v    any
		want []float32
	}{
		{"float32", [][][]float32{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"float64", [][][]float64{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"int8", [][][]int8{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"int16", [][][]int16{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"int32", [][][]int32{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"int64", [][][]int64{{{-4, -3, -2}, {-1, 0, 1}}, {{2, 3, 4}, {5, 6, 7}}}, want3D(4, false)},
		{"uint8", [][][]uint8{{{0, 1, 2}, {3, 4, 5}}, {{6, 7, 8}, {9, 10, 11}}}, want3D(0, false)},
		{"uint16", [][][]uint16{{{0, 1, 2}, {3, 4, 5}}, {{6, 7, 8}, {9, 10, 11}}}, want3D(0, false)},
		{"uint32", [][][]uint32{{{0, 1, 2}, {3, 4, 5}}, {{6, 7, 8}, {9, 10, 11}}}, want3D(0, false)},
		{"uint64", [][][]uint64{{{0, 1, 2}, {3, 4, 5}}, {{6, 7, 8}, {9, 10, 11}}}, want3D(0, false)},
		{"bool", [][][]bool{{{true, true, true}, {true, false, true}}, {{true, true, true}, {true, true, true}}}, want3D(4, true)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := LoadNPY(writeNPY(t, dir, c.name+".npy", c.v))
			require.NoError(t, err)
			assert.Equal(t, [3]int{2, 2, 3}, [3]int{s.N, s.SigY, s.SigX})
			assert.Equal(t, c.want, s.Data)
			assert.Equal(t, []string{c.name + "[0]", c.name + "[1]"}, s.Names)
		})
	}

	t.Run("2D", func(t *testing.T) {
		s, err := LoadNPY(writeNPY(t, dir, "vbf.npy", [][]float64{{0, 0.5, 0}, {0.25, 1, 0.75}}))
		require.NoError(t, err)
		assert.Equal(t, [3]int{1, 2, 3}, [3]int{s.N, s.SigY, s.SigX})
		assert.Equal(t, []float32{0, 0.5, 0, 0.25, 1, 0.75}, s.Data)
		assert.Equal(t, []string{"vbf"}, s.Names)
	})

	t.Run("generated stack", func(t *testing.T) {
		com, err := COM([2]int{5, 6}, 2.5, 2, 2)
		require.NoError(t, err)
		nested := make([][][]float32, com.N)
		for m := range nested {
			nested[m] = make([][]float32, com.SigY)
			for y := range nested[m] {
				nested[m][y] = com.Mask(m)[y*com.SigX : (y+1)*com.SigX]
			}
		}
		s, err := LoadNPY(writeNPY(t, dir, "com.npy", nested))
		require.NoError(t, err)
		assert.Equal(t, com.Data, s.Data)
	})

	t.Run("big-endian float32", func(t *testing.T) {
		payload := make([]byte, 0, 16)
		for _, v := range []float32{1.5, -2, 0, 3.25} {
			payload = binary.BigEndian.AppendUint32(payload, math.Float32bits(v))
		}
		s, err := LoadNPY(writeRawNPY(t, dir, "be.npy", ">f4", false, "(2, 2)", payload))
		require.NoError(t, err)
		assert.Equal(t, []float32{1.5, -2, 0, 3.25}, s.Data)
	})
}

// Item #17.12: headers numpy reads but npyio did not (keys in another order, no spaces)
// or read with a wrong shape (no trailing ", ": shape (2,)) load as numpy's own.
func TestLoadNPYHeadersOfOtherWriters(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 0, 24)
	for _, v := range []float32{1, 0, 2, 0, 3, 0.5} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	for i, dict := range []string{
		"{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4', }",
		"{'descr':'<f4','fortran_order':False,'shape':(2,3)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
		`{"descr": "<f4", "fortran_order": False, "shape": (1, 2, 3,)}`,
		// #17r D8: a descr without byte order (native: little-endian here), as a type
		// code or name, and a header not ended by '\n' (made below), as numpy reads them.
		"{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': 'f', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': 'float32', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } no newline",
	} {
		dict, noNewline := strings.CutSuffix(dict, " no newline")
		path := writeHeaderNPY(t, dir, fmt.Sprintf("m%d.npy", i), dict)
		if noNewline {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			b[len(b)-1] = ' '
			require.NoError(t, os.WriteFile(path, b, 0o644))
		}
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		s, err := LoadNPY(path)
		require.NoError(t, err, dict)
		require.Equal(t, [3]int{1, 2, 3}, [3]int{s.N, s.SigY, s.SigX}, dict)
		require.Equal(t, []float32{1, 0, 2, 0, 3, 0.5}, s.Data, dict)
	}
}

// writeHeaderNPY writes an NPY 1.0 file of header dict dict, without data.
func writeHeaderNPY(t *testing.T, dir, name, dict string) string {
	t.Helper()
	total := 10 + len(dict) + 1
	total += (64 - total%64) % 64
	b := binary.LittleEndian.AppendUint16([]byte("\x93NUMPY\x01\x00"), uint16(total-10))
	b = append(b, dict...)
	b = append(b, strings.Repeat(" ", total-1-len(b))...)
	b = append(b, '\n')
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestLoadNPYTruncated loads every truncation of a valid mask file (the header lengths
// made npyio panic): each must be an error naming the file.
func TestLoadNPYTruncated(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(writeNPY(t, dir, "good.npy", [][]float32{{1, 2, 3}, {4, 5, 6}}))
	require.NoError(t, err)
	path := filepath.Join(dir, "tr.npy")
	for n := range len(good) {
		require.NoError(t, os.WriteFile(path, good[:n], 0o644))
		s, err := LoadNPY(path)
		assert.Nil(t, s)
		require.Error(t, err, "truncated to %d bytes", n)
		assert.Contains(t, err.Error(), "mask file "+path+": ", "truncated to %d bytes", n)
	}
}

// TestLoadNPYNamesFile checks that a stack loaded from a file of the wrong sig_shape
// names the file when validated.
func TestLoadNPYNamesFile(t *testing.T) {
	s, err := LoadNPY(writeNPY(t, t.TempDir(), "vbf.npy", [][][]float32{{{1, 2, 3}}, {{4, 5, 6}}}))
	require.NoError(t, err)
	assert.EqualError(t, s.Validate([2]int{3, 1}), `mask shape (1, 3) does not match sig_shape (3, 1) (masks "vbf[0]" to "vbf[1]")`)
}

func TestLoadNPYErrors(t *testing.T) {
	dir := t.TempDir()
	f4 := func(n int) []byte { return make([]byte, 4*n) }
	notNPY := filepath.Join(dir, "text.npy")
	require.NoError(t, os.WriteFile(notNPY, []byte("disk:1,2,3\n"), 0o644))
	nanPayload := binary.LittleEndian.AppendUint32(f4(5), math.Float32bits(float32(math.NaN())))

	cases := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "missing.npy"), "no such file"},
		{"not npy", notNPY, `not an NPY file: it starts with "disk:1", not the NPY magic`},
		{"directory", dir, "is a directory"},
		{"no closing brace", writeHeaderNPY(t, dir, "brace.npy", "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4', "), "malformed NPY header"},
		{"negative size", writeHeaderNPY(t, dir, "neg.npy", "{'shape': (-2, 3), 'fortran_order': False, 'descr': '<f4'}"), "shape size 0 is negative (-2)"},
		{"fortran", writeRawNPY(t, dir, "f.npy", "<f4", true, "(2, 3)", f4(6)), "Fortran order, want C order"},
		{"1D", writeRawNPY(t, dir, "1d.npy", "<f4", false, "(6,)", f4(6)), "array shape (6,) has 1 dimensions, want (sig_y, sig_x) or (n_masks, sig_y, sig_x)"},
		{"4D", writeRawNPY(t, dir, "4d.npy", "<f4", false, "(1, 1, 2, 3)", f4(6)), "array shape (1, 1, 2, 3) has 4 dimensions"},
		{"empty axis", writeRawNPY(t, dir, "empty.npy", "<f4", false, "(0, 2, 3)", nil), "array shape (0, 2, 3) has an empty axis"},
		{"complex", writeRawNPY(t, dir, "c.npy", "<c8", false, "(2, 3)", make([]byte, 48)), "dtype '<c8' (complex) is not supported for masks"},
		{"float16", writeRawNPY(t, dir, "h.npy", "<f2", false, "(2, 3)", make([]byte, 12)), "dtype '<f2' is not supported for masks"},
		{"escaped", writeRawNPY(t, dir, "e.npy", "\x1b[2J", false, "(2, 3)", make([]byte, 12)), `dtype '\x1b[2J' is not supported for masks`},
		{"truncated", writeRawNPY(t, dir, "short.npy", "<i2", false, "(2, 3)", make([]byte, 11)), "truncated NPY file: the header's shape (2, 3) and dtype '<i2' make 12 bytes of data from byte 128 to byte 140, but the file has 139 bytes (1 missing)"},
		{"trailing bytes", writeRawNPY(t, dir, "long.npy", "<f4", false, "(2, 3)", f4(7)), "4 bytes after the array's data: the header's shape (2, 3) and dtype '<f4' make 24 bytes of data from byte 128 to byte 152 of the 156-byte file; numpy ignores them"},
		{"NaN", writeRawNPY(t, dir, "nan.npy", "<f4", false, "(2, 3)", nanPayload), `mask 0 ("nan") has weight NaN at pixel (y=1, x=2)`},
		{"float64 beyond float32", writeNPY(t, dir, "big.npy", [][]float64{{1, 1e300}}), `mask 0 ("big") has weight 1e+300 at pixel (y=0, x=1): weights must be finite and within float32's range, ±3.403e+38`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := LoadNPY(c.path)
			assert.Nil(t, s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "mask file "+c.path)
		})
	}
}

// Item D9: a file of an unsupported dtype is refused for its dtype (errs.DType), naming
// the dtypes that are supported, before its shape is compared with the frames' (an
// object array of shape (1, 1) was refused as masks of the wrong shape).
func TestLoadNPYForRefusesTheDTypeFirst(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ descr, shape, want string }{
		{"|O", "(1, 1)", "dtype '|O' (Python objects) is not supported for masks"},
		{"<c16", "(2, 2, 3)", "dtype '<c16' (complex) is not supported for masks"},
		{"<U4", "(5,)", "dtype '<U4' (strings) is not supported for masks"},
		{"<f2", "(2, 3)", "dtype '<f2' is not supported for masks"},
	} {
		path := writeRawNPY(t, dir, "m.npy", c.descr, false, c.shape, make([]byte, 8))
		s, err := LoadNPYFor(path, [2]int{256, 256})
		require.Nil(t, s)
		require.EqualError(t, err, "mask file "+path+": "+c.want+" (want bool, int8..int64, uint8..uint64, float32 or float64: save masks.astype(np.float32))")
		require.Equal(t, errs.DType, errs.KindOf(err), c.descr)
	}
}

// FuzzLoadNPY loads fuzzed NPY mask files: no panic, and a stack it accepts is valid.
// Seeds: the files numpy's own writer made in internal/npy/testdata/numpy, and a stack.
func FuzzLoadNPY(f *testing.F) {
	seeds, err := filepath.Glob("../internal/npy/testdata/numpy/*.npy")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed files in internal/npy/testdata/numpy (%v)", err)
	}
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }" + strings.Repeat(" ", 45) + "\n\x00\x00\x80?\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "m.npy")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadNPY(p)
		if err == nil {
			if err := s.Validate([2]int{s.SigY, s.SigX}); err != nil {
				t.Fatalf("LoadNPY accepted an invalid stack: %v", err)
			}
		}
	})
}
