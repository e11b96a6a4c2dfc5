package npy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// npyFile returns an NPY file of the given version with header dict dict (padded and ended
// by '\n' as numpy does) and data bytes after it.
func npyFile(major byte, dict string, data []byte) []byte {
	prefix := 10
	if major == 2 {
		prefix = 12
	}
	total := prefix + len(dict) + 1
	total += (64 - total%64) % 64
	hlen := total - prefix
	b := append([]byte(magic), major, 0)
	if major == 2 {
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
	for _, major := range []byte{1, 2} {
		f := npyFile(major, goodDict, make([]byte, 12))
		r, off, err := Read(bytes.NewReader(f), int64(len(f)))
		require.NoError(t, err, "version %d", major)
		assert.Equal(t, int64(len(f)-12), off)
		assert.Equal(t, int64(0), off%64)
		assert.Equal(t, "'<u2'", r.Header.Descr.Type)
		assert.Equal(t, []int{2, 3}, r.Header.Descr.Shape)
		assert.False(t, r.Header.Descr.Fortran)
	}
}

// TestReadMalformed is the seed corpus of FuzzRead: every truncation of a valid file and
// headers that made npyio panic, each of which must give the error shown.
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
	noNewline := bytes.Clone(good)
	noNewline[hdrEnd-1] = ' '
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"not npy", []byte("MQ1,000001,00384"), `not an NPY file: it starts with "MQ1,00"`},
		{"version 3", append([]byte(magic+"\x03\x00"), good[8:]...), "version 3.0 is not supported"},
		{"huge header", append([]byte(magic+"\x02\x00\xff\xff\xff\xff"), make([]byte, 100)...), "exceeds 10000 bytes"},
		{"no newline", noNewline, "does not end with a newline"},
		{"empty header", []byte(magic + "\x01\x00\x00\x00"), "header length is 0"},
		{"keys reordered", npyFile(1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2', }", nil), "npyio cannot parse it"},
		{"no closing brace", npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3)", nil), "npyio cannot parse it"},
		{"empty shape", npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': , }", nil), "npyio cannot parse it"},
		{"bad order", npyFile(1, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (2, 3), }", nil), "fortran_order"},
		{"no keys", npyFile(1, "{}", nil), "invalid dictionary"},
	} {
		_, _, err := Read(bytes.NewReader(tc.file), int64(len(tc.file)))
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
}

// FuzzRead checks that no input makes Read panic, and that an accepted header lies inside
// the file. Run with go test -fuzz FuzzRead ./internal/npy.
func FuzzRead(f *testing.F) {
	good := npyFile(1, goodDict, make([]byte, 12))
	for n := 0; n <= len(good); n += 7 {
		f.Add(good[:n])
	}
	f.Add(npyFile(2, goodDict, nil))
	f.Add(npyFile(1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2', }", nil))
	f.Add(npyFile(1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3)", nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, off, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if r == nil || off < 10 || off > int64(len(b)) {
			t.Fatalf("accepted header ends at %d of %d bytes (reader %v)", off, len(b), r)
		}
	})
}
