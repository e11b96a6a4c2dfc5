package npy

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
)

// npyFile returns an NPY file of the given version with header dict dict (padded and ended
// by '\n' as numpy does) and data bytes after it.
func npyFile(major byte, dict string, data []byte) []byte {
	prefix := 10
	if major >= 2 {
		prefix = 12
	}
	total := prefix + len(dict) + 1
	total += (64 - total%64) % 64
	hlen := total - prefix
	b := append([]byte(magic), major, 0)
	if major >= 2 {
		b = binary.LittleEndian.AppendUint32(b, uint32(hlen))
	} else {
		b = binary.LittleEndian.AppendUint16(b, uint16(hlen))
	}
	b = append(b, dict...)
	b = append(b, bytes.Repeat([]byte(" "), total-1-len(b))...)
	b = append(b, '\n')
	return append(b, data...)
}

const goodDict = "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }"

func TestReadValid(t *testing.T) {
	for _, major := range []byte{1, 2, 3} {
		f := npyFile(major, goodDict, make([]byte, 12))
		info, off, err := Read(bytes.NewReader(f), int64(len(f)))
		require.NoError(t, err, "version %d", major)
		assert.Equal(t, int64(len(f)-12), off)
		assert.Equal(t, int64(0), off%64)
		assert.Equal(t, Info{Major: major, Descr: "<u2", Shape: []int{2, 3}}, info)
	}
}

// numpyFiles returns the files of testdata/numpy, written by numpy's own writer (see
// gen.py there), by name.
func numpyFiles(t testing.TB) map[string][]byte {
	paths, err := filepath.Glob("testdata/numpy/*.npy")
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		files[strings.TrimSuffix(filepath.Base(path), ".npy")] = b
	}
	require.NotEmpty(t, files, "testdata/numpy")
	return files
}

// Item #17.12: every header numpy's writer makes (versions 1.0, 2.0, 3.0; shapes of rank
// 0 to 4, an empty axis, Fortran order, both byte orders) is read as numpy reads it.
func TestReadNumpyFiles(t *testing.T) {
	want := map[string]Info{
		"f4_2x3_v1":         {1, "<f4", false, []int{2, 3}},
		"u2_4_v1":           {1, "<u2", false, []int{4}},
		"u1_2x2x2_v1":       {1, "|u1", false, []int{2, 2, 2}},
		"b1_2x2_v1":         {1, "|b1", false, []int{2, 2}},
		"f8_fortran_2x3_v1": {1, "<f8", true, []int{2, 3}},
		"be_f4_3_v1":        {1, ">f4", false, []int{3}},
		"i8_scalar_v1":      {1, "<i8", false, []int{}},
		"f4_empty_0x3_v1":   {1, "<f4", false, []int{0, 3}},
		"i4_1x2x2x2_v2":     {2, "<i4", false, []int{1, 2, 2, 2}},
		"f4_3x1x2_v3":       {3, "<f4", false, []int{3, 1, 2}},
	}
	files := numpyFiles(t)
	require.Len(t, files, len(want)+1)
	for name, b := range files {
		info, off, err := Read(bytes.NewReader(b), int64(len(b)))
		if name == "structured_v3" {
			require.ErrorContains(t, err, "descr is a list, not a dtype string (structured dtypes are not supported)")
			continue
		}
		require.NoError(t, err, name)
		require.Equal(t, want[name], info, name)
		require.Zero(t, off%64, name)
		elems := 1
		for _, n := range info.Shape {
			elems *= n
		}
		d, err := ParseDescr(info.Descr)
		require.NoError(t, err, name)
		require.Equal(t, int64(len(b))-off, int64(elems*d.Size), name)
	}
}

// Item #17.12: headers numpy reads (ast.literal_eval), written by hand as other writers
// do: numpy's layout with the trailing ", }" or without it, compact, keys in any order,
// double quotes, comments, parentheses, escapes, Python 2's long integers.
func TestParseDictAcceptsWhatNumpyReads(t *testing.T) {
	want := Info{Major: 1, Descr: "<f4", Shape: []int{3, 2}}
	for _, dict := range []string{
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}",
		"{'descr':'<f4','fortran_order':False,'shape':(3,2)}",
		"{'shape': (3, 2), 'fortran_order': False, 'descr': '<f4'}",
		`{"descr": "<f4", "fortran_order": False, "shape": (3, 2,)}`,
		"{\n  'descr': u'<f4',  # the dtype\n  'fortran_order': False,\n  'shape': (3L, 0x2),\n}",
		"{'descr': '<' 'f4', 'fortran_order': False, 'shape': (+3, 2),}",
		"{'descr': '''<f4''', 'fortran_order': False, 'shape': ((3), 2)}",
		`{'descr': '\x3cf4', 'fortran_order': False, 'shape': (3, 0b10)}`,
		`{'descr': r'<f4', 'fortran_order': False, 'shape': (0x_3, 2)}`,
	} {
		info, err := ParseDict(dict+"\n", 1)
		require.NoError(t, err, dict)
		require.Equal(t, want, info, dict)
	}
	info, err := ParseDict("{'descr': '|u1', 'fortran_order': True, 'shape': (5,), }\n", 3)
	require.NoError(t, err)
	require.Equal(t, Info{Major: 3, Descr: "|u1", Fortran: true, Shape: []int{5}}, info)
	info, err = ParseDict("{'descr': '|u1', 'fortran_order': False, 'shape': (), }\n", 2)
	require.NoError(t, err)
	require.Equal(t, []int{}, info.Shape)
}

// Item #17.12: headers numpy refuses, or that do not say what an array needs: each is an
// error saying what is wrong, never a wrong shape.
func TestParseDictRefuses(t *testing.T) {
	for _, c := range []struct{ dict, want string }{
		{"", "at byte 1: the header ends where a value should be"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (0_3,)}", `"0_3,)}\n" is not a number`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (1__0,)}", `"1__0,)}\n" is not a number`},
		{"[1, 2]", "the header is a list, not a dict"},
		{"{'descr': '<f4', 'fortran_order': False}", `key "shape" is missing`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", `unknown key "extra"`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (3,)}", `key "shape" is given twice: numpy would read the last value, but which one the writer meant is unsure; save the array again (numpy.save)`},
		{"{'descr': '<f4', 'fortran_order': False, 3: (2,)}", "key the integer 3 is not a string"},
		{"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "fortran_order is the integer 0, not True or False"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "shape is a list, not a tuple of integers"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': 6}", "shape is the integer 6, not a tuple of integers"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3)}", "shape size 0 is the number 2.0, not an integer"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, True)}", "shape size 1 is True, not an integer"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, '3')}", `shape size 1 is the string "3", not an integer`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3)}", "shape size 0 is negative (-2)"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "integer 99999999999999999999 does not fit in 64 bits"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (03,)}", `"03,)}\n" is not a number`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", `expected ',' or ')', found "3)}\n"`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", `unexpected "x\n" after the dict`},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "expected ',' or '}' in the dict, found end of header"},
		{"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}' in the dict"},
		{"{'descr': <f4, 'fortran_order': False, 'shape': (2,)}", `unexpected "<f4`},
		{"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", `"Maybe, 'shap..." is not a literal`},
		{"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", "descr is a list, not a dtype string (structured dtypes are not supported)"},
		{"{'descr': b'<f4', 'fortran_order': False, 'shape': (2,)}", `"b'<f4', 'for..." is not a literal`},
		{"{'descr': '<f4\n', 'fortran_order': False, 'shape': (2,)}", "unterminated string"},
		{strings.Repeat("(", 40), "literals nested more than 32 deep"},
	} {
		_, err := ParseDict(c.dict+"\n", 1)
		require.Error(t, err, c.dict)
		require.Contains(t, err.Error(), c.want, c.dict)
	}
	_, err := ParseDict("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,)}\n", 3)
	require.ErrorContains(t, err, `"2L,)}\n" is not a number`, "2L is Python 2's, read in versions 1.0 and 2.0 only")
	_, err = ParseDict("{'descr': '\xe9', 'fortran_order': False, 'shape': (2,)}\n", 3)
	require.EqualError(t, err, "a version 3.0 header must be UTF-8")
}

// TestReadMalformed: every truncation of a valid file and malformed headers (some made
// npyio, the parser before #17.12, panic) give the error shown.
func TestReadMalformed(t *testing.T) {
	good := npyFile(1, goodDict, make([]byte, 12))
	hdrEnd := len(good) - 12
	for n := range hdrEnd {
		_, _, err := Read(bytes.NewReader(good[:n]), int64(n))
		require.Error(t, err, "truncated to %d bytes", n)
		switch {
		case n == 0:
			assert.Contains(t, err.Error(), "empty")
		default:
			assert.Contains(t, err.Error(), "truncated NPY file", "truncated to %d bytes", n)
		}
	}
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"not npy", []byte("MQ1,000001,00384"), `not an NPY file: it starts with "MQ1,00"`},
		{"version 4", append([]byte(magic+"\x04\x00"), good[8:]...), "NPY format version 4.0 is not supported (want 1.0, 2.0 or 3.0)"},
		{"version 1.1", append([]byte(magic+"\x01\x01"), good[8:]...), "NPY format version 1.1 is not supported"},
		{"huge header", append([]byte(magic+"\x02\x00\xff\xff\xff\xff"), make([]byte, 100)...), "exceeds 10000 bytes"},
		{"empty header", []byte(magic + "\x01\x00\x00\x00"), "header length is 0"},
		{"no closing brace", npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3)", nil), "malformed NPY header"},
		{"empty shape", npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': , }", nil), `unexpected ", }`},
		{"bad order", npyFile(1, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (2, 3), }", nil), "is not a literal"},
		{"no keys", npyFile(1, "{}", nil), `key "descr" is missing`},
	} {
		_, _, err := Read(bytes.NewReader(tc.file), int64(len(tc.file)))
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
}

// #17r D8: a header that does not end with '\n', padded or not, numpy reads (its reader
// evaluates the dict and requires no newline; checked with numpy 2.4.6), and so does Read.
func TestReadHeaderWithoutNewline(t *testing.T) {
	good := npyFile(1, goodDict, make([]byte, 12))
	hdrEnd := len(good) - 12
	padded := bytes.Clone(good)
	padded[hdrEnd-1] = ' '
	unpadded := append([]byte(magic+"\x01\x00"), byte(len(goodDict)), 0)
	unpadded = append(append(unpadded, goodDict...), make([]byte, 12)...)
	for name, f := range map[string][]byte{"padded": padded, "unpadded": unpadded} {
		info, off, err := Read(bytes.NewReader(f), int64(len(f)))
		require.NoError(t, err, name)
		assert.Equal(t, Info{Major: 1, Descr: "<u2", Shape: []int{2, 3}}, info, name)
		assert.Equal(t, int64(len(f)-12), off, name)
	}
}

// #17r D8: every descr form numpy.dtype reads for kinds b, i, u and f (the results of
// numpy 2.4.6 on x86-64 Linux: numpy.dtype(descr).str), and forms it refuses.
func TestParseDescr(t *testing.T) {
	for descr, want := range map[string]string{
		"<u2": "<u2", "u2": "<u2", "=u2": "<u2", "|u2": "<u2", ">u2": ">u2", "u02": "<u2",
		"u1": "|u1", ">u1": "|u1", "|f4": "<f4", "b1": "|b1", "<b1": "|b1", "?": "|b1", "<?": "|b1",
		"b": "|i1", "B": "|u1", "h": "<i2", "<H": "<u2", ">H": ">u2", "i": "<i4", "I": "<u4",
		"l": "<i8", "L": "<u8", "q": "<i8", "Q": "<u8", "p": "<i8", "P": "<u8",
		"e": "<f2", "f": "<f4", "d": "<f8", "g": "<f16", "f16": "<f16", "i8": "<i8",
		"uint16": "<u2", "bool": "|b1", "bool_": "|b1", "int": "<i8", "uint": "<u8", "float": "<f8",
		"int8": "|i1", "uint8": "|u1", "float16": "<f2", "float32": "<f4", "float64": "<f8",
		"single": "<f4", "double": "<f8", "half": "<f2", "short": "<i2", "ushort": "<u2",
		"intc": "<i4", "long": "<i8", "ulong": "<u8", "longlong": "<i8", "byte": "|i1", "ubyte": "|u1",
		"int_": "<i8", "intp": "<i8", "uintp": "<u8",
	} {
		d, err := ParseDescr(descr)
		require.NoError(t, err, descr)
		assert.Equal(t, want, d.String(), descr)
	}
	for _, descr := range []string{"", "u", "i0", "u2 ", " <u2", "<uint16", "ui2", "Float32", "float_", "<", "'<u2'", "u+2", "U2", "c8", "S1"} {
		_, err := ParseDescr(descr)
		require.Error(t, err, "%q", descr)
		require.ErrorContains(t, err, "unsupported NPY dtype '"+descr+"'")
	}
	// The file's text is escaped: a NUL, a terminal's escape sequence.
	for descr, want := range map[string]string{"f4\x00": `'f4\x00'`, "\x1b[2Ju2": `'\x1b[2Ju2'`, "\"u2": `'"u2'`} {
		_, err := ParseDescr(descr)
		require.ErrorContains(t, err, "unsupported NPY dtype "+want, "%q", descr)
		require.False(t, strings.ContainsAny(err.Error(), "\x00\x1b"), "%q", err)
	}
}

// #17r D8: the array's data must end the file; bytes after it (numpy ignores them) or
// missing are refused, saying how many.
func TestCheckSize(t *testing.T) {
	info := Info{Major: 1, Descr: "<u2", Shape: []int{2, 3}}
	require.NoError(t, CheckSize(info, 128, 140, 12))
	require.EqualError(t, CheckSize(info, 128, 143, 12), "3 bytes after the array's data: the header's shape (2, 3) and dtype '<u2' make 12 bytes of data from byte 128 to byte 140 of the 143-byte file; numpy ignores them, stemdot does not read a file that its header may not describe: save the array again (numpy.save), or cut the file to 140 bytes")
	require.EqualError(t, CheckSize(info, 128, 139, 12), "truncated NPY file: the header's shape (2, 3) and dtype '<u2' make 12 bytes of data from byte 128 to byte 140, but the file has 139 bytes (1 missing)")
}

// FuzzRead checks that no input makes Read panic, and that an accepted header lies inside
// the file and gives a version, a descr and non-negative sizes. Seeds: numpy's own files
// (testdata/numpy), truncations of a valid file, and malformed headers. Run with
// go test -fuzz FuzzRead ./internal/npy (make fuzz runs it briefly).
func FuzzRead(f *testing.F) {
	for _, b := range numpyFiles(f) {
		f.Add(b)
	}
	good := npyFile(1, goodDict, make([]byte, 12))
	for n := 0; n <= len(good); n += 7 {
		f.Add(good[:n])
	}
	f.Add(npyFile(2, goodDict, nil))
	f.Add(npyFile(1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2', }", nil))
	f.Add(npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3)", nil))
	f.Add(npyFile(1, "{'descr':'<u2','fortran_order':False,'shape':(2,3)}", nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, off, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if off < 10 || off > int64(len(b)) || info.Major < 1 || info.Major > 3 || info.Shape == nil {
			t.Fatalf("accepted header ends at %d of %d bytes: %+v", off, len(b), info)
		}
		for _, n := range info.Shape {
			if n < 0 {
				t.Fatalf("accepted a negative size: %+v", info)
			}
		}
	})
}

// FuzzReadArray: a malformed, truncated or overlong file is refused, never a panic or an
// allocation beyond the file; an accepted array's data is the header's size exactly.
func FuzzReadArray(f *testing.F) {
	for _, b := range numpyFiles(f) {
		f.Add(b)
	}
	good := npyFile(1, goodDict, make([]byte, 12))
	for n := 0; n <= len(good); n += 5 {
		f.Add(good[:n])
	}
	f.Add(npyFile(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, d, data, err := ReadArray(bytes.NewReader(b), int64(len(b)), func(Info, Descr) error { return nil })
		if err != nil {
			return
		}
		n := d.Size
		for _, s := range info.Shape {
			n *= s
		}
		if len(data) != n || n > len(b) || info.Fortran {
			t.Fatalf("accepted %d data bytes of %d for %+v (%d-byte file)", len(data), n, info, len(b))
		}
	})
}

// A file that shrinks after its size was taken is an I/O error, never zeros read as data.
func TestReadArrayShrunk(t *testing.T) {
	b := npyFile(1, goodDict, make([]byte, 12))
	_, _, _, err := ReadArray(bytes.NewReader(b[:len(b)-3]), int64(len(b)), func(Info, Descr) error { return nil })
	require.ErrorContains(t, err, "the file changed while being read: 9 of its 12 data bytes read")
	require.Equal(t, errs.IO, errs.KindOf(err))
}
