// Package h5index reads the chunk index of a chunked HDF5 dataset straight from the
// file: every chunk's file address, stored size and filter mask in one pass, so that
// the chunks' bytes can be read with positioned reads, outside libhdf5 and its global
// lock (dataset/hdf5, chunks.go).
//
// Source: the HDF5 File Format Specification version 3.0 (The HDF Group): the superblock
// (II.A, versions 0-3: the sizes of offsets and lengths; addresses are relative to the
// base address, the superblock's own, as libhdf5 takes it), object headers version 1
// and 2 ("OHDR", continuation blocks "OCHK"; IV.A), the Data Layout message (IV.A.2.i)
// version 3 (a version 1 B-tree of node type 1, III.A.1) and version 4 with the single
// chunk, fixed array ("FAHD", "FADB", paged data blocks), extensible array ("EAHD",
// "EAIB", "EASB", "EADB"; VII) and version 2 B-tree ("BTHD", "BTIN", "BTLF"; III.B,
// record types 10 and 11) indexes. The fixed and extensible arrays list the chunks in
// row-major order of the chunk grid of the maximal extent, the unlimited axis first, as
// libhdf5 (H5Dfarray.c, H5Dearray.c) does. The implicit index (chunks without filters,
// allocated at creation) is ErrUnsupported.
//
// Every count and size read from the file is bounded by the file's size before anything
// is allocated for it, and the index is checked as it is read: a chunk outside the
// dataset's extent, at an address beyond the file's end, stored in more bytes than the
// caller allows, or listed twice is an error, never a table entry. Checksums of the
// index's blocks are not verified (libhdf5 verified the object header when it opened the
// dataset; dataset/hdf5 compares the table with libhdf5's count of chunks and its first).
package h5index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
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
		// Every chunk written takes bytes of the file (and its address in the index
		// more): a grid of more chunks than the file has bytes is mostly never
		// written, and its table is not worth its memory.
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
				if len(blocks) > 1000 {
					return nil, errors.New("h5index: too many object header continuation blocks")
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
		// The index type, its parameters, then its address.
		typ := c.uint(1)
		size, mask := uint64(t.chunkBytes()), uint32(0) // of a single chunk
		var params []byte
		switch typ {
		case 1: // single chunk
			if flags&2 != 0 { // filtered
				size, mask = c.uint(t.f.lens), uint32(c.uint(4))
			}
		case 3: // fixed array: page bits
			params = c.bytes(1)
		case 4: // extensible array
			params = c.bytes(5)
		case 5: // version 2 B-tree: node size, split and merge percents (also in its header)
			c.bytes(6)
		default:
			return ErrUnsupported
		}
		addr := c.uint(t.f.offsets)
		if c.bad {
			return errors.New("h5index: truncated layout message")
		}
		if addr == t.f.undef {
			return nil // no chunk written yet
		}
		switch typ {
		case 1:
			return t.set(make([]uint64, rank), addr, size, mask)
		case 3:
			return t.fixedArray(addr, uint64(params[0]))
		case 4:
			return t.extensibleArray(addr, params)
		default:
			return t.btree2(addr)
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

// chunkBytes is the size of a chunk in bytes, as stored unfiltered.
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

// array holds what decoding the elements of a fixed or extensible array needs.
type array struct {
	esize   uint64 // bytes of an element
	sizeLen int    // bytes of a filtered chunk's stored size; 0: not filtered
	// order lists the axes from the slowest-varying in the elements' order, counts the
	// chunks along each axis (of the maximal extent; of the extent on an unlimited axis).
	order  []int
	counts []uint64
	slots  uint64 // elements that can index a chunk of the extent: those beyond are unused
}

// newArray checks an array's client (0: chunks, 1: filtered chunks) and element size.
func (t *table) newArray(client, esize uint64) (*array, error) {
	o := uint64(t.f.offsets)
	a := &array{esize: esize}
	switch {
	case client == 0 && esize == o:
	case client == 1 && esize > o+4 && esize <= o+4+8:
		a.sizeLen = int(esize - o - 4)
	default:
		return nil, errors.New("h5index: bad array element size")
	}
	rank := len(t.ds.Dims)
	a.counts = make([]uint64, rank)
	unlim := -1
	for i, m := range t.ds.MaxDims {
		if m < 0 {
			if unlim >= 0 {
				return nil, errors.New("h5index: an array index for two unlimited axes")
			}
			unlim = i
			m = t.ds.Dims[i]
		}
		a.counts[i] = uint64((m + t.ds.Chunk[i] - 1) / t.ds.Chunk[i])
	}
	// The elements are in row-major order of the chunk grid of the maximal extent, the
	// unlimited axis moved first (libhdf5's "swizzled" order).
	if unlim >= 0 {
		a.order = append(a.order, unlim)
	}
	for i := range rank {
		if i != unlim {
			a.order = append(a.order, i)
		}
	}
	a.slots = 1
	for _, n := range a.counts {
		a.slots *= n
		if a.slots > t.f.size {
			return nil, errors.New("h5index: an array larger than the file")
		}
	}
	return a, nil
}

// elements enters the chunks of the elements b of the array, the first of number first.
func (t *table) elements(a *array, first uint64, b []byte) error {
	c := cursor{b: b}
	scaled := make([]uint64, len(t.ds.Dims))
	for k := range uint64(len(b)) / a.esize {
		addr := c.uint(t.f.offsets)
		size, mask := uint64(t.chunkBytes()), uint32(0)
		if a.sizeLen > 0 {
			size, mask = c.uint(a.sizeLen), uint32(c.uint(4))
		}
		if addr == t.f.undef {
			continue
		}
		idx := first + k
		if idx >= a.slots {
			return errors.New("h5index: a chunk outside the dataset's extent")
		}
		for i := len(a.order) - 1; i >= 0; i-- {
			ax := a.order[i]
			scaled[ax] = idx % a.counts[ax]
			idx /= a.counts[ax]
		}
		if err := t.set(scaled, addr, size, mask); err != nil {
			return err
		}
	}
	return nil
}

// dataBlock enters the n elements of number first of a data block of a fixed or
// extensible array whose elements start at addr: paged when n > 1<<pbits (the pages
// follow the checksum at addr, each its elements and a checksum; page p is present where
// bit bit0+p of bitmap is set, the first bit of a byte its highest), else in one run.
func (t *table) dataBlock(a *array, addr, first, n, pbits uint64, bitmap []byte, bit0 uint64) error {
	per := uint64(1) << pbits
	if n <= per {
		b, err := t.f.read(addr, n*a.esize)
		if err != nil {
			return err
		}
		return t.elements(a, first, b)
	}
	at := addr + 4 // after the prefix's checksum
	for p := range (n + per - 1) / per {
		count := min(per, n-p*per)
		bit := bit0 + p
		if bit/8 >= uint64(len(bitmap)) {
			return errors.New("h5index: short page bitmap")
		}
		if first+p*per < a.slots && bitmap[bit/8]&(0x80>>(bit%8)) != 0 {
			b, err := t.f.read(at, count*a.esize)
			if err != nil {
				return err
			}
			if err := t.elements(a, first+p*per, b); err != nil {
				return err
			}
		}
		at += per*a.esize + 4
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
	if pbits != bits || pbits == 0 || pbits > 32 {
		return errors.New("h5index: bad fixed array header")
	}
	a, err := t.newArray(client, esize)
	if err != nil {
		return err
	}
	if slices.Contains(t.ds.MaxDims, -1) {
		return errors.New("h5index: a fixed array for an unlimited axis")
	}
	if n != a.slots {
		return errors.New("h5index: the fixed array's size is not the chunk grid's")
	}
	if dblk == t.f.undef {
		return nil
	}
	prefix, bitmap := uint64(4+2+o), uint64(0) // and the bitmap of the pages present
	if per := uint64(1) << pbits; n > per {
		bitmap = ((n+per-1)/per + 7) / 8
	}
	db, err := t.f.read(dblk, prefix+bitmap)
	if err != nil {
		return err
	}
	if string(db[:4]) != "FADB" || db[4] != 0 || uint64(db[5]) != client {
		return errors.New("h5index: not a fixed array data block")
	}
	return t.dataBlock(a, dblk+uint64(len(db)), 0, n, pbits, db[prefix:], 0)
}

// extensibleArray reads the extensible array index whose header is at addr (params:
// the layout message's five creation parameters).
func (t *table) extensibleArray(addr uint64, params []byte) error {
	o, l := t.f.offsets, t.f.lens
	hb, err := t.f.read(addr, uint64(12+6*l+o))
	if err != nil {
		return err
	}
	c := cursor{b: hb}
	if string(c.bytes(4)) != "EAHD" || c.uint(1) != 0 {
		return errors.New("h5index: not an extensible array header")
	}
	client, esize := c.uint(1), c.uint(1)
	p := c.bytes(5)
	maxBits, idxElmts, dblkMin, sblkMinPtrs, pbits := uint64(p[0]), uint64(p[1]), uint64(p[2]), uint64(p[3]), uint64(p[4])
	c.bytes(6 * l) // statistics
	iblock := c.uint(o)
	// The layout message has the minimum of data block pointers before the minimum of
	// elements, the header after.
	if !bytes.Equal(p, []byte{params[0], params[1], params[3], params[2], params[4]}) {
		return errors.New("h5index: the extensible array's parameters are not the layout's")
	}
	if maxBits == 0 || maxBits > 64 || pbits == 0 || pbits > maxBits || dblkMin == 0 || dblkMin&(dblkMin-1) != 0 ||
		sblkMinPtrs == 0 || sblkMinPtrs&(sblkMinPtrs-1) != 0 || log2(dblkMin) > maxBits {
		return errors.New("h5index: bad extensible array header")
	}
	a, err := t.newArray(client, esize)
	if err != nil {
		return err
	}
	if iblock == t.f.undef {
		return nil
	}
	// The super blocks: super block u holds 2^(u/2) data blocks of 2^((u+1)/2)·dblkMin
	// elements; the index block holds idxElmts elements, the addresses of the data blocks
	// of its first 2·log2(sblkMinPtrs) super blocks, and those of the others' super blocks.
	nsblks := 1 + maxBits - log2(dblkMin)
	type sblock struct{ ndblks, nelmts, start uint64 }
	sb := make([]sblock, nsblks)
	start := idxElmts
	for u := range sb {
		if start >= a.slots {
			sb[u].start = a.slots // no chunk of the extent in this super block or after
			continue
		}
		sb[u] = sblock{1 << (u / 2), (1 << ((u + 1) / 2)) * dblkMin, start}
		start += sb[u].ndblks * sb[u].nelmts // < 2^48 while start < a.slots ≤ the file's size
	}
	inIndex := min(2*log2(sblkMinPtrs), nsblks)
	ndblkAddrs, nsblkAddrs := 2*(sblkMinPtrs-1), nsblks-inIndex
	ib, err := t.f.read(iblock, uint64(6+o)+idxElmts*esize+(ndblkAddrs+nsblkAddrs)*uint64(o))
	if err != nil {
		return err
	}
	if string(ib[:4]) != "EAIB" || ib[4] != 0 || uint64(ib[5]) != client {
		return errors.New("h5index: not an extensible array index block")
	}
	c = cursor{b: ib[6+o:]}
	if err := t.elements(a, 0, c.bytes(int(idxElmts*esize))); err != nil {
		return err
	}
	offSize := int((maxBits + 7) / 8)
	dblock := func(addr, first, n uint64, bitmap []byte, bit0 uint64) error {
		if first >= a.slots {
			return nil // no chunk of the extent
		}
		prefix := uint64(6 + o + offSize)
		db, err := t.f.read(addr, prefix)
		if err != nil {
			return err
		}
		if string(db[:4]) != "EADB" || db[4] != 0 || uint64(db[5]) != client {
			return errors.New("h5index: not an extensible array data block")
		}
		if n > 1<<pbits && len(bitmap) == 0 {
			return ErrUnsupported // a paged data block of the index block
		}
		return t.dataBlock(a, addr+prefix, first, n, pbits, bitmap, bit0)
	}
	k := uint64(0) // the data block addresses of the index block, super block by super block
	for u := range inIndex {
		for j := range sb[u].ndblks {
			if k >= ndblkAddrs {
				return errors.New("h5index: bad extensible array index block")
			}
			if d := c.uint(o); d != t.f.undef {
				if err := dblock(d, sb[u].start+j*sb[u].nelmts, sb[u].nelmts, nil, 0); err != nil {
					return err
				}
			}
			k++
		}
	}
	c.bytes(int(ndblkAddrs-k) * o)
	for u := inIndex; u < nsblks; u++ {
		s := c.uint(o)
		if s == t.f.undef || sb[u].start >= a.slots || c.bad {
			continue
		}
		// The pages of a paged data block: their bits, data block by data block, in
		// pageInit bytes a data block.
		var npages, pageInit uint64
		if per := uint64(1) << pbits; sb[u].nelmts > per {
			npages = sb[u].nelmts / per
			pageInit = (npages + 7) / 8
		}
		prefix := uint64(6 + o + offSize)
		b, err := t.f.read(s, prefix+sb[u].ndblks*(pageInit+uint64(o)))
		if err != nil {
			return err
		}
		if string(b[:4]) != "EASB" || b[4] != 0 || uint64(b[5]) != client {
			return errors.New("h5index: not an extensible array super block")
		}
		sc := cursor{b: b[prefix:]}
		bitmaps := sc.bytes(int(sb[u].ndblks * pageInit))
		for j := range sb[u].ndblks {
			d := sc.uint(o)
			if d == t.f.undef {
				continue
			}
			if err := dblock(d, sb[u].start+j*sb[u].nelmts, sb[u].nelmts, bitmaps, j*npages); err != nil {
				return err
			}
		}
	}
	if c.bad {
		return errors.New("h5index: truncated extensible array index block")
	}
	return nil
}

// log2 is the base-2 logarithm of n, rounded down (0 for 0).
func log2(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	return uint64(bits.Len64(n) - 1)
}

// btree2 reads the version 2 B-tree index (record type 10: chunks, 11: filtered chunks)
// whose header is at addr.
func (t *table) btree2(addr uint64) error {
	o, l := t.f.offsets, t.f.lens
	hb, err := t.f.read(addr, uint64(4+1+1+4+2+2+1+1+o+2+l+4))
	if err != nil {
		return err
	}
	c := cursor{b: hb}
	if string(c.bytes(4)) != "BTHD" || c.uint(1) != 0 {
		return errors.New("h5index: not a version 2 B-tree header")
	}
	typ, nodeSize, rsize, depth := c.uint(1), c.uint(4), c.uint(2), c.uint(2)
	c.bytes(2) // split and merge percents
	root, nroot := c.uint(o), c.uint(2)
	rank := uint64(len(t.ds.Dims))
	sizeLen := 0
	switch {
	case typ == 10 && rsize == uint64(o)+8*rank:
	case typ == 11 && rsize > uint64(o)+4+8*rank && rsize <= uint64(o)+4+8+8*rank:
		sizeLen = int(rsize - uint64(o) - 4 - 8*rank)
	default:
		return errors.New("h5index: bad version 2 B-tree header")
	}
	if nodeSize < 64 || nodeSize > maxBlock || depth > 32 || rsize == 0 {
		return errors.New("h5index: bad version 2 B-tree header")
	}
	if root == t.f.undef {
		return nil
	}
	// The records a node of each depth holds at most, and the bytes of the counts of
	// records in a child and in its subtree (libhdf5's H5B2__hdr_init).
	type level struct{ max, cum, cumSize uint64 }
	lv := make([]level, depth+1)
	lv[0].max = (nodeSize - 10) / rsize
	lv[0].cum = lv[0].max
	nrecSize := encSize(lv[0].max)
	ptrSize := func(d uint64) uint64 {
		n := uint64(o) + nrecSize
		if d > 1 {
			n += lv[d-1].cumSize
		}
		return n
	}
	for d := uint64(1); d <= depth; d++ {
		p := ptrSize(d)
		if nodeSize < 10+p {
			return errors.New("h5index: bad version 2 B-tree header")
		}
		lv[d].max = (nodeSize - (10 + p)) / (rsize + p)
		lv[d].cum = (lv[d].max+1)*lv[d-1].cum + lv[d].max
		if lv[d].cum > 1<<48 {
			return errors.New("h5index: bad version 2 B-tree header")
		}
		lv[d].cumSize = encSize(lv[d].cum)
	}
	var node func(addr, nrec, d uint64) error
	node = func(addr, nrec, d uint64) error {
		t.nodes++
		if t.nodes > len(t.chunks)+64 || nrec > lv[d].max {
			return errors.New("h5index: bad version 2 B-tree node")
		}
		n := 6 + nrec*rsize
		if d > 0 {
			n += (nrec + 1) * ptrSize(d)
		}
		b, err := t.f.read(addr, n)
		if err != nil {
			return err
		}
		sig := "BTLF"
		if d > 0 {
			sig = "BTIN"
		}
		if string(b[:4]) != sig || b[4] != 0 || uint64(b[5]) != typ {
			return errors.New("h5index: not a version 2 B-tree node")
		}
		c := cursor{b: b[6:]}
		scaled := make([]uint64, rank)
		for range nrec {
			a := c.uint(o)
			size, mask := uint64(t.chunkBytes()), uint32(0)
			if sizeLen > 0 {
				size, mask = c.uint(sizeLen), uint32(c.uint(4))
			}
			for i := range scaled {
				scaled[i] = c.uint(8)
			}
			if err := t.set(scaled, a, size, mask); err != nil {
				return err
			}
		}
		if d > 0 {
			for range nrec + 1 {
				child, cn := c.uint(o), c.uint(int(nrecSize))
				if d > 1 {
					c.bytes(int(lv[d-1].cumSize))
				}
				if err := node(child, cn, d-1); err != nil {
					return err
				}
			}
		}
		if c.bad {
			return errors.New("h5index: truncated version 2 B-tree node")
		}
		return nil
	}
	return node(root, nroot, depth)
}

// encSize is the bytes that hold numbers up to n (libhdf5's H5VM_limit_enc_size).
func encSize(n uint64) uint64 { return log2(n)/8 + 1 }
