package h5filter

import (
	"container/list"
	"sync"
)

// Grid is the chunk grid of a chunked dataset: its extent Dims and chunk shape Chunk
// (elements, one per axis, in the dataset's axis order) of elements of Elem bytes. HDF5
// stores every chunk whole, edge chunks too (the part beyond the extent is not data).
type Grid struct {
	Dims, Chunk []int
	Elem        int
}

// ChunkBytes is the size of one decoded chunk in bytes.
func (g Grid) ChunkBytes() int {
	n := g.Elem
	for _, c := range g.Chunk {
		n *= c
	}
	return n
}

// Index is the row-major number of the chunk at origin in the grid of chunks.
func (g Grid) Index(origin []int) int64 {
	var idx int64
	for i, o := range origin {
		idx = idx*int64((g.Dims[i]+g.Chunk[i]-1)/g.Chunk[i]) + int64(o/g.Chunk[i])
	}
	return idx
}

// Chunks calls fn with the origin (element coordinates, multiples of Chunk) of every
// chunk that the box [lo, lo+count) touches, in row-major order of the chunks, until fn
// returns false. fn must not keep origin.
func (g Grid) Chunks(lo, count []int, fn func(origin []int) bool) {
	rank := len(g.Dims)
	first, last, origin := make([]int, rank), make([]int, rank), make([]int, rank)
	for i := range rank {
		if count[i] <= 0 {
			return
		}
		first[i] = lo[i] / g.Chunk[i] * g.Chunk[i]
		last[i] = (lo[i] + count[i] - 1) / g.Chunk[i] * g.Chunk[i]
	}
	copy(origin, first)
	for {
		if !fn(origin) {
			return
		}
		i := rank - 1
		for ; i >= 0; i-- {
			if origin[i] < last[i] {
				origin[i] += g.Chunk[i]
				break
			}
			origin[i] = first[i]
		}
		if i < 0 {
			return
		}
	}
}

// Covers reports whether the box [lo, lo+count) holds every element of the chunk at
// origin that lies within the extent.
func (g Grid) Covers(lo, count, origin []int) bool {
	for i := range origin {
		if lo[i] > origin[i] || lo[i]+count[i] < min(origin[i]+g.Chunk[i], g.Dims[i]) {
			return false
		}
	}
	return true
}

// Contiguous reports whether the chunk at origin lies within the extent and in the box
// [lo, lo+count), and its elements are consecutive in the box's row-major order (a
// chunk of one frame in a box of whole frames, or of several whole scan rows): then it
// returns the index of the chunk's first element in the box, and the chunk can be
// decoded in place.
func (g Grid) Contiguous(lo, count, origin []int) (int, bool) {
	whole := false // the axes from here on are the box's whole extent
	at := 0
	for i := range origin {
		if origin[i]+g.Chunk[i] > g.Dims[i] || origin[i] < lo[i] || origin[i]+g.Chunk[i] > lo[i]+count[i] {
			return 0, false
		}
		at = at*count[i] + origin[i] - lo[i]
	}
	for i := range origin {
		switch {
		case whole && g.Chunk[i] != count[i]:
			return 0, false
		case g.Chunk[i] != 1:
			whole = true
		}
	}
	return at, true
}

// CopyBox copies the elements of the decoded chunk at origin that lie in the box [lo,
// lo+count) into dst, which holds the box's elements in row-major order.
func (g Grid) CopyBox(dst []byte, lo, count []int, chunk []byte, origin []int) {
	rank := len(g.Dims)
	// The intersection [a, b) of the box and the chunk, per axis.
	var a, b [32]int
	for i := range rank {
		a[i], b[i] = max(lo[i], origin[i]), min(lo[i]+count[i], origin[i]+g.Chunk[i])
		if a[i] >= b[i] {
			return
		}
	}
	run := (b[rank-1] - a[rank-1]) * g.Elem
	var walk func(axis, dOff, cOff int)
	walk = func(axis, dOff, cOff int) {
		dOff = dOff*count[axis] + a[axis] - lo[axis]
		cOff = cOff*g.Chunk[axis] + a[axis] - origin[axis]
		if axis == rank-1 {
			copy(dst[dOff*g.Elem:dOff*g.Elem+run], chunk[cOff*g.Elem:cOff*g.Elem+run])
			return
		}
		for k := 0; k < b[axis]-a[axis]; k++ {
			walk(axis+1, dOff+k, cOff+k)
		}
	}
	walk(0, 0, 0)
}

// Cache keeps decoded chunks, the least recently used dropped beyond its size in
// bytes, for datasets whose chunks hold frames of several tiles (a chunk of 4×4 scan
// positions read a scan row at a time): each is then decoded once. Safe for concurrent
// use.
type Cache struct {
	mu    sync.Mutex
	max   int
	bytes int
	order *list.List // of *cached, most recent first
	items map[int64]*list.Element
}

type cached struct {
	key  int64
	data []byte
}

// NewCache returns a cache of at most max bytes.
func NewCache(max int) *Cache {
	return &Cache{max: max, order: list.New(), items: map[int64]*list.Element{}}
}

// Get returns the chunk stored under key (nil: none). The caller must not modify it.
func (c *Cache) Get(key int64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*cached).data
	}
	return nil
}

// Put stores a chunk under key (one larger than the cache is not stored).
func (c *Cache) Put(key int64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(data) > c.max {
		return
	}
	if e, ok := c.items[key]; ok {
		c.bytes -= len(e.Value.(*cached).data)
		c.order.Remove(e)
	}
	c.items[key] = c.order.PushFront(&cached{key, data})
	c.bytes += len(data)
	for c.bytes > c.max {
		e := c.order.Back()
		old := e.Value.(*cached)
		c.order.Remove(e)
		delete(c.items, old.key)
		c.bytes -= len(old.data)
	}
}
