package h5index

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testFiles are the files of testdata, written by testdata/gen.py (h5py 3, libhdf5 2.0) with
// gzip-compressed chunks of uint16 ("data", its object header at header), and how many
// chunks each has written: libver "earliest" (version 1 B-trees, of several levels, in
// a file with a user block of 512 bytes) and ("v110", "v110") (layout version 4: a
// single chunk, fixed arrays, one paged, an extensible array and a version 2 B-tree).
var testFiles = map[string]struct {
	ds      Dataset
	written int
}{
	"btree1":                  {Dataset{Header: 800, Dims: []int{3, 2, 4, 4}, MaxDims: []int{3, 2, 4, 4}, Chunk: []int{1, 1, 4, 4}}, 4},
	"btree1_levels_userblock": {Dataset{Header: 800, Dims: []int{10, 10, 2, 2}, MaxDims: []int{10, 10, 2, 2}, Chunk: []int{1, 1, 2, 2}}, 90},
	"single":                  {Dataset{Header: 179, Dims: []int{2, 2, 4, 4}, MaxDims: []int{2, 2, 4, 4}, Chunk: []int{2, 2, 4, 4}}, 1},
	"farray":                  {Dataset{Header: 179, Dims: []int{3, 2, 4, 4}, MaxDims: []int{4, 2, 4, 4}, Chunk: []int{1, 2, 4, 4}}, 2},
	"farray_paged":            {Dataset{Header: 179, Dims: []int{40, 30, 1, 1}, MaxDims: []int{40, 30, 1, 1}, Chunk: []int{1, 1, 1, 1}}, 1170},
	"earray":                  {Dataset{Header: 179, Dims: []int{3, 2, 4, 4}, MaxDims: []int{-1, 2, 4, 4}, Chunk: []int{1, 1, 4, 4}}, 4},
	"btree2":                  {Dataset{Header: 179, Dims: []int{3, 2, 4, 4}, MaxDims: []int{-1, -1, 4, 4}, Chunk: []int{1, 1, 4, 4}}, 4},
}

func testFile(t testing.TB, name string) ([]byte, Dataset) {
	b, err := os.ReadFile(filepath.Join("testdata", name+".h5"))
	require.NoError(t, err)
	ds := testFiles[name].ds
	ds.ElemSize, ds.MaxStored = 2, 4096
	return b, ds
}

// TestRead reads the index of every test file: as many chunks as written, each at an
// address where a zlib stream of the chunk's bytes is stored. (dataset/hdf5's
// TestHDF5ChunkIndex compares the tables with libhdf5's.)
func TestRead(t *testing.T) {
	for name, tf := range testFiles {
		t.Run(name, func(t *testing.T) {
			b, ds := testFile(t, name)
			table, base, err := Read(bytes.NewReader(b), int64(len(b)), ds)
			require.NoError(t, err)
			assert.Equal(t, uint64(map[bool]int{true: 512}[name == "btree1_levels_userblock"]), base)
			chunkBytes := 2 * ds.Chunk[0] * ds.Chunk[1] * ds.Chunk[2] * ds.Chunk[3]
			written := 0
			for _, c := range table {
				if c.Size == 0 {
					continue
				}
				written++
				z, err := zlib.NewReader(bytes.NewReader(b[c.Addr : c.Addr+c.Size]))
				require.NoError(t, err)
				data, err := io.ReadAll(z)
				require.NoError(t, err)
				assert.Len(t, data, chunkBytes)
				assert.Zero(t, c.Mask)
			}
			assert.Equal(t, tf.written, written)
		})
	}
}

// TestReadInconsistent alters the first chunk of the version 1 B-tree of testdata/btree1.h5
// (its key: stored size, filter mask, offsets; then its address): an offset outside the
// extent or off the chunk grid, a size over the bound or zero, an address beyond the
// file's end, a chunk listed twice are errors; and a file cut short anywhere.
func TestReadInconsistent(t *testing.T) {
	b, ds := testFile(t, "btree1")
	node := bytes.Index(b, []byte("TREE\x01")) // node type 1: chunks
	require.Positive(t, node)
	key := node + 8 + 2*8 // after the node's header
	for name, alter := range map[string]func(b []byte){
		"outside":   func(b []byte) { binary.LittleEndian.PutUint64(b[key+8:], 3) },
		"off grid":  func(b []byte) { binary.LittleEndian.PutUint64(b[key+8+16:], 1) },
		"too large": func(b []byte) { binary.LittleEndian.PutUint32(b[key:], 4097) },
		"empty":     func(b []byte) { binary.LittleEndian.PutUint32(b[key:], 0) },
		"beyond":    func(b []byte) { binary.LittleEndian.PutUint64(b[key+8+5*8:], uint64(len(b))) },
		"twice":     func(b []byte) { copy(b[key+56+8:key+56+8+40], b[key:key+40]) },
	} {
		c := bytes.Clone(b)
		alter(c)
		_, _, err := Read(bytes.NewReader(c), int64(len(c)), ds)
		assert.Error(t, err, name)
	}
	for n := 0; n < len(b); n += 97 {
		_, _, err := Read(bytes.NewReader(b[:n]), int64(n), ds)
		assert.Error(t, err, "cut at %d", n)
	}
}

// FuzzRead reads the chunk index of the test files altered: never a panic, and every
// chunk of a table read lies within the file and its bound.
func FuzzRead(f *testing.F) {
	for name := range testFiles {
		b, _ := testFile(f, name)
		f.Add(b, name)
	}
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		tf, ok := testFiles[name]
		if !ok {
			return
		}
		ds := tf.ds
		ds.ElemSize, ds.MaxStored = 2, 4096
		table, _, err := Read(bytes.NewReader(b), int64(len(b)), ds)
		if err != nil {
			return
		}
		for _, c := range table {
			if c.Size != 0 && (c.Size > ds.MaxStored || c.Addr+c.Size > uint64(len(b))) {
				t.Fatalf("chunk %+v outside the file of %d bytes or its bound", c, len(b))
			}
		}
	})
}
