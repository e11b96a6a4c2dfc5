// Package h5index reads the chunk index of a chunked HDF5 dataset straight from the
// file: every chunk's file address, stored size and filter mask in one pass, so that
// the chunks' bytes can be read with positioned reads, outside libhdf5 and its global
// lock (dataset/hdf5, chunks.go).
//
// Source: the HDF5 File Format Specification version 3.0 (The HDF Group): the superblock
// (II.A: versions 0-3, its size of offsets and lengths; addresses are relative to the
// base address, the superblock's own, as libhdf5 takes it), object headers version 1 and
// 2 ("OHDR", continuation blocks "OCHK"; IV.A), the Data Layout message (IV.A.2.i)
// version 3 (a version 1 B-tree of node type 1, III.A.1) and version 4 with the single
// chunk and fixed array ("FAHD", "FADB", paged data blocks; VII.B) indexes. The other
// indexes (implicit, extensible array, version 2 B-tree) are reported as ErrUnsupported.
//
// Every count and size read from the file is bounded by the file's size before anything
// is allocated for it, and the index is checked as it is read: a chunk outside the
// dataset's extent, at an address beyond the file's end, stored in more bytes than the
// caller allows, or listed twice is an error, never a table entry. Checksums of the
// index's blocks are not verified (libhdf5 verified the object header when it opened the
// dataset; the caller compares the table with libhdf5's first chunk and chunk count).
package h5index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Chunk is one entry of a chunk table.
type Chunk struct {
	Addr uint64 // byte offset of the stored chunk in the file
	Size uint64 // stored bytes; 0: the chunk was never written
	Mask uint32 // the filters skipped (bit i: filter i of the pipeline)
}

// Dataset describes the chunked dataset whose index is read.
type Dataset struct {
	// Header is the address of the dataset's object header, relative to the base
	// address (libhdf5's H5Oget_info addr).
	Header uint64
	// Dims, MaxDims and Chunk are the extent, the maximal extent (-1: unlimited) and
	// the chunk shape in elements, one per axis.
	Dims, MaxDims, Chunk []int
	// ElemSize is the size of one element in bytes.
	ElemSize int
	// MaxStored bounds a chunk's stored size in bytes.
	MaxStored uint64
}

// ErrUnsupported is returned for a valid layout whose index this package does not read.
var ErrUnsupported = errors.New("h5index: chunk index type not supported")

// maxBlock bounds one metadata block read from the file.
const maxBlock = 1 << 28

// Read reads the chunk index of the dataset ds from r, a file of size bytes, and returns
// a table of its chunks in row-major order of the chunk grid of ds.Dims (h5filter.Grid's
// Index), and the file's base address (that libhdf5's chunk addresses are relative to,
// the table's are not). An error means the index could not be read as described above.
func Read(r io.ReaderAt, size int64, ds Dataset) (chunks []Chunk, base uint64, err error) {
	rank := len(ds.Dims)
	if rank == 0 || rank > 32 || len(ds.Chunk) != rank || len(ds.MaxDims) != rank || ds.ElemSize <= 0 {
		return nil, 0, errors.New("h5index: bad dataset shape")
	}
	n := uint64(1)
	for i, d := range ds.Dims {
		if d < 0 || ds.Chunk[i] <= 0 {
			return nil, 0, errors.New("h5index: bad dataset shape")
		}
		n *= uint64((d + ds.Chunk[i] - 1) / ds.Chunk[i])
		// Every chunk written takes at least 8 bytes of the file (its address in the
		// index): a grid of more chunks than the file's bytes is mostly never written,
		// and its table is not worth its memory.
		if n > uint64(size) {
			return nil, 0, errors.New("h5index: more chunks in the grid than bytes in the file")
		}
	}
	f := &file{r: r, size: uint64(size)}
	if err := f.superblock(); err != nil {
		return nil, 0, err
	}
	msg, err := f.layoutMessage(ds.Header)
	if err != nil {
		return nil, 0, err
	}
	t := &table{ds: ds, f: f, chunks: make([]Chunk, n)}
	if err := t.layout(msg); err != nil {
		return nil, 0, err
	}
	return t.chunks, f.base, nil
}

// file reads the metadata of an HDF5 file.
type file struct {
	r             io.ReaderAt
	size          uint64
	base          uint64 // the base address: the superblock's
	offsets, lens int    // sizes of offsets and lengths
	undef         uint64 // the undefined address
}

// read returns the n bytes at addr (relative to the base address).
func (f *file) read(addr uint64, n uint64) ([]byte, error) {
	if n > maxBlock || addr > f.size || f.base+addr > f.size || n > f.size-f.base-addr {
		return nil, fmt.Errorf("h5index: %d bytes at address %d are beyond the file's %d bytes", n, addr, f.size)
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(f.base+addr)); err != nil {
		return nil, fmt.Errorf("h5index: %w", err)
	}
	return b, nil
}

// superblock finds the superblock (at 0, 512, 1024, ... bytes) and reads the sizes of
// offsets and lengths.
func (f *file) superblock() error {
	for at := uint64(0); at+32 <= f.size; at = max(512, 2*at) {
		b := make([]byte, 32)
		if _, err := f.r.ReadAt(b, int64(at)); err != nil {
			return fmt.Errorf("h5index: %w", err)
		}
		if string(b[:8]) != "\x89HDF\r\n\x1a\n" {
			continue
		}
		switch b[8] {
		case 0, 1:
			f.offsets, f.lens = int(b[13]), int(b[14])
		case 2, 3:
			f.offsets, f.lens = int(b[9]), int(b[10])
		default:
			return fmt.Errorf("h5index: superblock version %d", b[8])
		}
		for _, s := range []int{f.offsets, f.lens} {
			if s != 2 && s != 4 && s != 8 {
				return fmt.Errorf("h5index: superblock: size of offsets or lengths %d", s)
			}
		}
		f.base = at
		f.undef = ^uint64(0) >> (64 - 8*f.offsets)
		return nil
	}
	return errors.New("h5index: no superblock")
}

// cursor decodes little-endian fields of a block; bad is set when it runs past its end.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) bytes(n int) []byte {
	if c.bad || n < 0 || n > len(c.b) {
		c.bad = true
		return nil
	}
	v := c.b[:n]
	c.b = c.b[n:]
	return v
}

// uint decodes an n-byte unsigned integer (n ≤ 8).
func (c *cursor) uint(n int) uint64 {
	var v [8]byte
	if n > 8 {
		c.bad = true
		return 0
	}
	copy(v[:], c.bytes(n))
	return binary.LittleEndian.Uint64(v[:])
}

// layoutMessage returns the body of the dataset's Data Layout message (type 8), walking
// the object header at addr and its continuation blocks.
func (f *file) layoutMessage(addr uint64) ([]byte, error) {
	type block struct {
		addr, n uint64
		v2      bool
	}
	var blocks []block
	var v2flags byte
	head, err := f.read(addr, 16)
	if err != nil {
		return nil, err
	}
	if string(head[:4]) == "OHDR" {
		if head[4] != 2 {
			return nil, fmt.Errorf("h5index: object header version %d", head[4])
		}
		v2flags = head[5]
		p := uint64(6)
		if v2flags&0x20 != 0 {
			p += 16
		}
		if v2flags&0x10 != 0 {
			p += 4
		}
		w := uint64(1) << (v2flags & 3)
		b, err := f.read(addr+p, w)
		if err != nil {
			return nil, err
		}
		c := cursor{b: b}
		blocks = append(blocks, block{addr + p + w, c.uint(int(w)), true})
	} else {
		if head[0] != 1 {
			return nil, fmt.Errorf("h5index: object header version %d", head[0])
		}
		blocks = append(blocks, block{addr + 16, uint64(binary.LittleEndian.Uint32(head[8:])), false})
	}
	for i := 0; i < len(blocks); i++ {
		if i > 1000 {
			return nil, errors.New("h5index: too many object header continuation blocks")
		}
		bl := blocks[i]
		b, err := f.read(bl.addr, bl.n)
		if err != nil {
			return nil, err
		}
		c := cursor{b: b}
		if bl.v2 {
			if i > 0 && string(c.bytes(4)) != "OCHK" {
				return nil, errors.New("h5index: object header continuation block without its signature")
			}
			if i > 0 && len(c.b) >= 4 {
				c.b = c.b[:len(c.b)-4] // the checksum
			}
		}
		hdr := 8
		if bl.v2 {
			hdr = 4
			if v2flags&0x04 != 0 {
				hdr = 6
			}
		}
		for len(c.b) >= hdr && !c.bad {
			var typ, n uint64
			if bl.v2 {
				typ, n = c.uint(1), c.uint(2)
				c.bytes(hdr - 3)
			} else {
				typ, n = c.uint(2), c.uint(2)
				c.bytes(4)
			}
			body := c.bytes(int(n))
			switch typ {
			case 0x08:
				if c.bad {
					return nil, errors.New("h5index: truncated layout message")
				}
				return body, nil
			case 0x10:
				m := cursor{b: body}
				next := block{addr: m.uint(f.offsets), n: m.uint(f.lens), v2: bl.v2}
				if m.bad {
					return nil, errors.New("h5index: truncated continuation message")
				}
				blocks = append(blocks, next)
			}
		}
	}
	return nil, errors.New("h5index: no layout message")
}

// table is a chunk table being filled.
type table struct {
	ds     Dataset
	f      *file
	chunks []Chunk
	nodes  int // B-tree nodes read
}

// layout reads the index that the layout message msg describes.
func (t *table) layout(msg []byte) error {
	c := cursor{b: msg}
	version, class := c.uint(1), c.uint(1)
	if class != 2 {
		return errors.New("h5index: the dataset is not chunked")
	}
	rank := len(t.ds.Dims)
	switch version {
	case 3:
		ndims := int(c.uint(1))
		addr := c.uint(t.f.offsets)
		if err := t.chunkShape(&c, ndims, 4); err != nil {
			return err
		}
		if addr == t.f.undef {
			return nil // no chunk written yet
		}
		return t.btree1(addr, -1)
	case 4:
		flags := c.uint(1)
		ndims := int(c.uint(1))
		enc := int(c.uint(1))
		if enc < 1 || enc > 8 {
			return fmt.Errorf("h5index: layout: %d bytes per dimension", enc)
		}
		if err := t.chunkShape(&c, ndims, enc); err != nil {
			return err
		}
		switch c.uint(1) {
		case 1: // single chunk
			size := uint64(t.chunkBytes())
			var mask uint32
			if flags&2 != 0 {
				size = c.uint(t.f.lens)
				mask = uint32(c.uint(4))
			}
			addr := c.uint(t.f.offsets)
			if c.bad {
				return errors.New("h5index: truncated layout message")
			}
			if addr == t.f.undef {
				return nil
			}
			return t.set(make([]uint64, rank), addr, size, mask)
		case 3: // fixed array
			bits := c.uint(1)
			addr := c.uint(t.f.offsets)
			if c.bad {
				return errors.New("h5index: truncated layout message")
			}
			if addr == t.f.undef {
				return nil
			}
			return t.fixedArray(addr, bits)
		default:
			return ErrUnsupported
		}
	}
	return fmt.Errorf("h5index: layout message version %d", version)
}

// chunkShape checks the chunk shape of the layout message (ndims sizes of enc bytes, the
// last the element size) against the dataset's.
func (t *table) chunkShape(c *cursor, ndims, enc int) error {
	if ndims != len(t.ds.Dims)+1 {
		return fmt.Errorf("h5index: layout of %d dimensions for a dataset of %d", ndims, len(t.ds.Dims))
	}
	for i := range ndims {
		want := t.ds.ElemSize
		if i < len(t.ds.Chunk) {
			want = t.ds.Chunk[i]
		}
		if v := c.uint(enc); v != uint64(want) {
			return errors.New("h5index: the layout's chunk shape is not the dataset's")
		}
	}
	if c.bad {
		return errors.New("h5index: truncated layout message")
	}
	return nil
}

func (t *table) chunkBytes() int {
	n := t.ds.ElemSize
	for _, c := range t.ds.Chunk {
		n *= c
	}
	return n
}

// set enters the chunk of scaled coordinates (in chunks) scaled, checking it.
func (t *table) set(scaled []uint64, addr, size uint64, mask uint32) error {
	var idx uint64
	for i, s := range scaled {
		n := uint64((t.ds.Dims[i] + t.ds.Chunk[i] - 1) / t.ds.Chunk[i])
		if s >= n {
			return errors.New("h5index: a chunk outside the dataset's extent")
		}
		idx = idx*n + s
	}
	if size == 0 || size > t.ds.MaxStored {
		return fmt.Errorf("h5index: a chunk of %d stored bytes (at most %d)", size, t.ds.MaxStored)
	}
	if addr > t.f.size || t.f.base+addr > t.f.size || size > t.f.size-t.f.base-addr {
		return errors.New("h5index: a chunk beyond the end of the file")
	}
	if t.chunks[idx].Size != 0 {
		return errors.New("h5index: a chunk listed twice")
	}
	t.chunks[idx] = Chunk{Addr: t.f.base + addr, Size: size, Mask: mask}
	return nil
}

// btree1 reads the version 1 B-tree node (type 1: raw data chunks) at addr of the level
// expected (-1: the root), and its children.
func (t *table) btree1(addr uint64, level int) error {
	t.nodes++
	if t.nodes > len(t.chunks)+64 {
		return errors.New("h5index: more B-tree nodes than chunks")
	}
	o := t.f.offsets
	head, err := t.f.read(addr, uint64(8+2*o))
	if err != nil {
		return err
	}
	if string(head[:4]) != "TREE" || head[4] != 1 {
		return errors.New("h5index: not a B-tree node of chunks")
	}
	lv := int(head[5])
	if level >= 0 && lv != level || lv > 64 {
		return errors.New("h5index: B-tree node of the wrong level")
	}
	entries := uint64(binary.LittleEndian.Uint16(head[6:]))
	rank := len(t.ds.Dims)
	key := uint64(8 + 8*(rank+1))
	b, err := t.f.read(addr+uint64(8+2*o), entries*(key+uint64(o))+key)
	if err != nil {
		return err
	}
	c := cursor{b: b}
	scaled := make([]uint64, rank)
	for range entries {
		size, mask := c.uint(4), uint32(c.uint(4))
		for i := range rank {
			off := c.uint(8)
			if off%uint64(t.ds.Chunk[i]) != 0 {
				return errors.New("h5index: a chunk offset off the chunk grid")
			}
			scaled[i] = off / uint64(t.ds.Chunk[i])
		}
		c.uint(8) // the element dimension's offset
		child := c.uint(o)
		if c.bad {
			return errors.New("h5index: truncated B-tree node")
		}
		if lv > 0 {
			if err := t.btree1(child, lv-1); err != nil {
				return err
			}
		} else if err := t.set(scaled, child, size, mask); err != nil {
			return err
		}
	}
	return nil
}

// fixedArray reads the fixed array index whose header is at addr (page bits from the
// layout message).
func (t *table) fixedArray(addr uint64, bits uint64) error {
	o, l := t.f.offsets, t.f.lens
	hb, err := t.f.read(addr, uint64(8+l+o+4))
	if err != nil {
		return err
	}
	c := cursor{b: hb}
	if string(c.bytes(4)) != "FAHD" || c.uint(1) != 0 {
		return errors.New("h5index: not a fixed array header")
	}
	client, esize, pbits := c.uint(1), c.uint(1), c.uint(1)
	n, dblk := c.uint(l), c.uint(o)
	if pbits != bits || pbits == 0 || pbits > 32 || client > 1 {
		return errors.New("h5index: bad fixed array header")
	}
	// Its elements: the address, then for filtered chunks the stored size and the mask.
	sizeLen := int(esize) - o - 4
	if client == 0 && int(esize) != o || client == 1 && (sizeLen < 1 || sizeLen > 8) {
		return errors.New("h5index: bad fixed array element size")
	}
	// The elements are in row-major order of the grid of the maximal extent.
	rank := len(t.ds.Dims)
	grid := make([]uint64, rank)
	total := uint64(1)
	for i, m := range t.ds.MaxDims {
		if m < 0 {
			return errors.New("h5index: a fixed array for an unlimited dimension")
		}
		grid[i] = uint64((m + t.ds.Chunk[i] - 1) / t.ds.Chunk[i])
		total *= grid[i]
		if total > t.f.size {
			return errors.New("h5index: a fixed array larger than the file")
		}
	}
	if n != total {
		return errors.New("h5index: the fixed array's size is not the chunk grid's")
	}
	if dblk == t.f.undef {
		return nil
	}
	prefix := uint64(4 + 2 + o)
	per := uint64(1) << pbits
	pages := uint64(0)
	if n > per {
		pages = (n + per - 1) / per
	}
	db, err := t.f.read(dblk, prefix+(pages+7)/8)
	if err != nil {
		return err
	}
	if string(db[:4]) != "FADB" || db[4] != 0 || uint64(db[5]) != client {
		return errors.New("h5index: not a fixed array data block")
	}
	bitmap := db[prefix:]
	scaled := make([]uint64, rank)
	elements := func(first uint64, b []byte) error {
		c := cursor{b: b}
		for k := range uint64(len(b)) / esize {
			a := c.uint(o)
			size, mask := uint64(t.chunkBytes()), uint32(0)
			if client == 1 {
				size, mask = c.uint(sizeLen), uint32(c.uint(4))
			}
			if a == t.f.undef {
				continue
			}
			idx := first + k
			for i := rank - 1; i >= 0; i-- {
				scaled[i] = idx % grid[i]
				idx /= grid[i]
			}
			if err := t.set(scaled, a, size, mask); err != nil {
				return err
			}
		}
		return nil
	}
	if pages == 0 {
		b, err := t.f.read(dblk+prefix, n*esize)
		if err != nil {
			return err
		}
		return elements(0, b)
	}
	at := dblk + prefix + uint64(len(bitmap)) + 4 // after the prefix's checksum
	for p := range pages {
		count := min(per, n-p*per)
		if bitmap[p/8]&(0x80>>(p%8)) != 0 {
			b, err := t.f.read(at, count*esize)
			if err != nil {
				return err
			}
			if err := elements(p*per, b); err != nil {
				return err
			}
		}
		at += per*esize + 4
	}
	return nil
}
