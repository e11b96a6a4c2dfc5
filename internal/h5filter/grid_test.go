package h5filter

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGridAssembles cuts a 3-D array of uint16 into chunks (edge chunks padded, as HDF5
// stores them), then assembles boxes from the chunks they touch and compares them with
// the array read element by element.
func TestGridAssembles(t *testing.T) {
	dims, chunk := []int{5, 7, 9}, []int{2, 3, 4}
	at := func(z, y, x int) uint16 { return uint16(z*1000 + y*10 + x) }
	g := Grid{Dims: dims, Chunk: chunk, Elem: 2}
	chunkOf := func(o []int) []byte {
		b := make([]byte, g.ChunkBytes())
		for z := range chunk[0] {
			for y := range chunk[1] {
				for x := range chunk[2] {
					v := uint16(0xffff) // beyond the extent
					if o[0]+z < dims[0] && o[1]+y < dims[1] && o[2]+x < dims[2] {
						v = at(o[0]+z, o[1]+y, o[2]+x)
					}
					binary.LittleEndian.PutUint16(b[2*((z*chunk[1]+y)*chunk[2]+x):], v)
				}
			}
		}
		return b
	}
	for _, box := range [][2][]int{{{0, 0, 0}, {5, 7, 9}}, {{1, 2, 3}, {3, 4, 5}}, {{4, 6, 8}, {1, 1, 1}}, {{2, 0, 0}, {2, 7, 9}}} {
		lo, count := box[0], box[1]
		dst := make([]byte, 2*count[0]*count[1]*count[2])
		seen := map[int64]bool{}
		g.Chunks(lo, count, func(o []int) bool {
			assert.False(t, seen[g.Index(o)], "chunk %v twice", o)
			seen[g.Index(o)] = true
			g.CopyBox(dst, lo, count, chunkOf(o), o)
			return true
		})
		for z := range count[0] {
			for y := range count[1] {
				for x := range count[2] {
					got := binary.LittleEndian.Uint16(dst[2*((z*count[1]+y)*count[2]+x):])
					if !assert.Equal(t, at(lo[0]+z, lo[1]+y, lo[2]+x), got, "box %v at %d,%d,%d", box, z, y, x) {
						return
					}
				}
			}
		}
	}
	assert.True(t, g.Covers([]int{0, 0, 0}, []int{2, 7, 9}, []int{0, 6, 8}), "edge chunk within the box")
	assert.False(t, g.Covers([]int{0, 0, 0}, []int{1, 7, 9}, []int{0, 0, 0}))
	assert.Equal(t, int64(3*3*3-1), g.Index([]int{4, 6, 8}))
}

func TestGridContiguous(t *testing.T) {
	frames := Grid{Dims: []int{4, 6, 8, 10}, Chunk: []int{1, 1, 8, 10}, Elem: 2}
	at, ok := frames.Contiguous([]int{1, 2, 0, 0}, []int{2, 4, 8, 10}, []int{2, 3, 0, 0})
	assert.True(t, ok)
	assert.Equal(t, (1*4+1)*80, at)
	rows := Grid{Dims: []int{4, 6, 8, 10}, Chunk: []int{2, 6, 8, 10}, Elem: 2}
	at, ok = rows.Contiguous([]int{0, 0, 0, 0}, []int{4, 6, 8, 10}, []int{2, 0, 0, 0})
	assert.True(t, ok)
	assert.Equal(t, 2*6*80, at)
	_, ok = rows.Contiguous([]int{2, 0, 0, 0}, []int{1, 6, 8, 10}, []int{2, 0, 0, 0})
	assert.False(t, ok, "the chunk reaches beyond the box")
	blocks := Grid{Dims: []int{4, 6, 8, 10}, Chunk: []int{2, 3, 8, 10}, Elem: 2}
	_, ok = blocks.Contiguous([]int{0, 0, 0, 0}, []int{4, 6, 8, 10}, []int{0, 3, 0, 0})
	assert.False(t, ok, "2 rows of 3 frames are not consecutive in rows of 6")
	split := Grid{Dims: []int{4, 6, 8, 10}, Chunk: []int{1, 1, 4, 10}, Elem: 2}
	_, ok = split.Contiguous([]int{0, 0, 0, 0}, []int{1, 1, 8, 10}, []int{0, 0, 4, 0})
	assert.True(t, ok, "half a frame, whole rows")
	edge := Grid{Dims: []int{4, 5, 8, 10}, Chunk: []int{1, 2, 8, 10}, Elem: 2}
	_, ok = edge.Contiguous([]int{0, 0, 0, 0}, []int{1, 5, 8, 10}, []int{0, 4, 0, 0})
	assert.False(t, ok, "an edge chunk")
}

func TestCacheEvicts(t *testing.T) {
	c := NewCache(10)
	c.Put(1, make([]byte, 4))
	c.Put(2, make([]byte, 4))
	assert.NotNil(t, c.Get(1)) // 1 is now the most recent
	c.Put(3, make([]byte, 4))  // evicts 2
	assert.Nil(t, c.Get(2))
	assert.NotNil(t, c.Get(1))
	assert.NotNil(t, c.Get(3))
	c.Put(4, make([]byte, 11)) // larger than the cache: not kept
	assert.Nil(t, c.Get(4))
}
