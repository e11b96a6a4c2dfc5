//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <hdf5.h>

// sd_plain_type reports whether the stored type t is an integer or an IEEE float that
// fills its bytes (offset 0, full precision), so that its raw bytes only need their byte
// order turned; *big is set for big-endian storage.
static int sd_plain_type(hid_t t, int *big) {
	H5T_class_t c = H5Tget_class(t);
	size_t size = H5Tget_size(t);
	if ((c != H5T_INTEGER && c != H5T_FLOAT) || H5Tget_offset(t) != 0 || H5Tget_precision(t) != 8 * size) return 0;
	H5T_order_t o = H5Tget_order(t);
	*big = o == H5T_ORDER_BE;
	if (size > 1 && o != H5T_ORDER_LE && o != H5T_ORDER_BE) return 0;
	if (c == H5T_FLOAT) {
		hid_t ieee = size == 4 ? (*big ? H5T_IEEE_F32BE : H5T_IEEE_F32LE) : (*big ? H5T_IEEE_F64BE : H5T_IEEE_F64LE);
		return (size == 4 || size == 8) && H5Tequal(t, ieee) > 0;
	}
	return 1;
}

// sd_obj_addr sets *addr to the address of the object header of obj in its file.
static herr_t sd_obj_addr(hid_t obj, haddr_t *addr) {
#if H5_VERSION_GE(1, 12, 0)
	H5O_info2_t info;
	if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return -1;
	hid_t f = H5Iget_file_id(obj);
	if (f < 0) return -1;
	herr_t e = H5VLnative_token_to_addr(f, info.token, addr);
	H5Fclose(f);
	return e;
#else
	H5O_info_t info;
	if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return -1;
	*addr = info.addr;
	return 0;
#endif
}
*/
import "C"

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/h5index"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Chunks decoded in the workers.
//
// A chunked dataset whose filters all have a Go decoder (package internal/h5filter:
// deflate, shuffle, Fletcher-32, LZF, LZ4, bitshuffle with LZ4 or none) and whose
// stored type is a plain integer or IEEE float is not read through libhdf5's H5Dread, which
// decompresses inside the library's global lock, so on one core however many workers
// read. At open, the dataset's chunk index is read from the file in one pass (package
// internal/h5index: version 1 B-trees, as h5py writes by default; the single chunk,
// fixed array, extensible array and version 2 B-tree indexes of libver v110 and SWMR
// files): every chunk's address, stored size and filter mask. ReadFrames then reads the
// stored bytes of the chunks of the frames asked for with positioned reads of the file
// (pread), decodes them and turns their byte order in the goroutine of the worker that
// asked, none of it under the lock, so that workers read and decode in parallel; LZF,
// LZ4 and bitshuffle need no plugin. (libhdf5 1.10 gives a chunk's address only by
// H5Dget_chunk_info_by_coord, which searches the chunks from the first: time quadratic
// in the number of chunks; H5Dchunk_iter, which lists them in one pass, is libhdf5 1.14's.)
// Where the index is not read (another layout, an index that h5index finds inconsistent:
// a chunk outside the extent or beyond the file's end, stored in more than twice its
// decoded bytes, listed twice) or disagrees with libhdf5 (its count of chunks, its first
// chunk), the stored bytes are read under the lock instead (H5Dget_chunk_storage_size and
// H5Dread_chunk: a lookup in the chunk index and a copy each), and decoded in the
// workers all the same. Chunks that a read does not use whole (a chunk of 4×4 scan
// positions read a scan row at a time) are kept decoded for the next reads, in a cache
// of the size of libhdf5's chunk cache. Chunks never written are read as the dataset's
// fill value, as libhdf5 reads them (option allow_fill; storage.go refuses them
// otherwise). Other datasets are read through libhdf5 as before.
// h5Chunks is what reading the raw chunks of the frames dataset needs.
type h5Chunks struct {
	grid     h5filter.Grid
	pipeline h5filter.Pipeline
	swap     bool   // the stored byte order is not the host's
	fill     []byte // one element of the fill value, in host order
	cache    *h5filter.Cache
	// file is the file that holds the dataset (another than the one opened behind an
	// external link) and size its size at open, to tell a chunk that fails to decode
	// because the file shrank.
	file *os.File
	size int64
	// complete is set when every chunk of the extent was written: a chunk the index
	// then lacks is an error, not the fill value.
	complete bool
	// table, when not nil, is every chunk's address, stored size and filter mask, read
	// from the file's chunk index at open (package internal/h5index), in the order of
	// grid.Index: the chunks are then read with positioned reads of file, outside the
	// lock.
	table []h5index.Chunk
	base  uint64 // the file's base address, which libhdf5's chunk addresses are relative to
	// closed is set by Close: reads of the table, outside the lock, then fail.
	closed atomic.Bool
	// locked is the CPU time spent reading chunks under the lock, in nanoseconds: the
	// part of a read that does not run in parallel (BenchmarkHDF5Compressed).
	locked atomic.Int64
}

// h5GoPipeline returns the filter pipeline of the open dataset set when every filter has
// a Go decoder and its stored type is a plain integer or IEEE float (big: stored
// big-endian); ok is false where libhdf5 reads it: not chunked, no filter, a filter
// without a Go decoder, another type, edge chunks left unfiltered. Called with h5lock
// held.
func h5GoPipeline(set C.hid_t) (pipeline h5filter.Pipeline, big, ok bool, err error) {
	dcpl := C.H5Dget_create_plist(set)
	if dcpl < 0 {
		return nil, false, false, h5Error("reading the dataset's storage layout")
	}
	defer C.H5Pclose(dcpl)
	if C.H5Pget_layout(dcpl) != C.H5D_CHUNKED {
		return nil, false, false, nil
	}
	var opts C.uint
	if C.H5Pget_chunk_opts(dcpl, &opts) < 0 {
		return nil, false, false, h5Error("reading the chunk options")
	}
	if opts&C.H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS != 0 {
		return nil, false, false, nil
	}
	for i := range C.H5Pget_nfilters(dcpl) {
		var flags, config C.uint
		var values [32]C.uint
		nvalues := C.size_t(len(values))
		id := C.H5Pget_filter2(dcpl, C.uint(i), &flags, &nvalues, &values[0], 0, nil, &config)
		if id < 0 {
			return nil, false, false, h5Error("reading the dataset's filters")
		}
		f := h5filter.Filter{ID: int(id)}
		for _, v := range values[:min(int(nvalues), len(values))] {
			f.Values = append(f.Values, uint32(v))
		}
		pipeline = append(pipeline, f)
	}
	if len(pipeline) == 0 || pipeline.Check() != nil {
		return nil, false, false, nil
	}
	t := C.H5Dget_type(set)
	if t < 0 {
		return nil, false, false, h5Error("reading the data type")
	}
	defer C.H5Tclose(t)
	var cbig C.int
	if C.sd_plain_type(t, &cbig) <= 0 {
		C.H5Eclear2(C.H5E_DEFAULT)
		return nil, false, false, nil
	}
	return pipeline, cbig != 0, true, nil
}

// setupChunks prepares reading the raw chunks of the frames dataset of extent dims where
// h5GoPipeline allows (else d.chunks stays nil). cacheBytes sizes the cache of decoded
// chunks. Called with h5lock held.
func (d *h5File) setupChunks(dims []int, cacheBytes int64) error {
	pipeline, big, ok, err := h5GoPipeline(d.set)
	if err != nil || !ok {
		return err
	}
	dcpl := C.H5Dget_create_plist(d.set)
	if dcpl < 0 {
		return h5Error("reading the dataset's storage layout")
	}
	defer C.H5Pclose(dcpl)
	chunk := make([]C.hsize_t, len(dims))
	if int(C.H5Pget_chunk(dcpl, C.int(len(dims)), &chunk[0])) != len(dims) {
		return h5Error("reading the chunk shape")
	}
	c := &h5Chunks{grid: h5filter.Grid{Dims: dims, Chunk: make([]int, len(dims)), Elem: d.dt.Size()}, pipeline: pipeline,
		swap: big != npy.HostBigEndian, fill: make([]byte, d.dt.Size())}
	for i, n := range chunk {
		c.grid.Chunk[i] = int(n)
	}
	var defined C.H5D_fill_value_t
	if C.H5Pfill_value_defined(dcpl, &defined) >= 0 && defined != C.H5D_FILL_VALUE_UNDEFINED {
		if C.H5Pget_fill_value(dcpl, d.memType, unsafe.Pointer(&c.fill[0])) < 0 {
			return h5Error("reading the fill value")
		}
	}
	c.cache = h5filter.NewCache(int(cacheBytes))
	expected := 1
	for i, n := range dims {
		expected *= (n + c.grid.Chunk[i] - 1) / c.grid.Chunk[i]
	}
	space := C.H5Dget_space(d.set)
	if space < 0 {
		return h5Error("reading the dataspace")
	}
	defer C.H5Sclose(space)
	var have C.hsize_t
	if C.H5Dget_num_chunks(d.set, space, &have) < 0 {
		return h5Error("counting the chunks")
	}
	c.complete = int(have) >= expected
	name := cmp.Or(h5FileName(d.set), d.path)
	f, size, err := regfile.Open(name)
	if err != nil {
		return fmt.Errorf("opening %s for its chunks: %w", name, err)
	}
	c.file, c.size = f, size
	if readChunkIndex {
		c.table, c.base = c.readIndex(d.set, space, int(have))
	}
	d.chunks = c
	return nil
}

// readChunkIndex is cleared by tests to read the chunks under the lock.
var readChunkIndex = true

// readIndex returns the table of the chunks of the open dataset set (dataspace space,
// have chunks written) read from the file's chunk index, or nil where the index is
// not read (h5index: another index type, anything inconsistent) or disagrees with
// libhdf5's count of chunks or its first chunk: the chunks are then read through
// libhdf5, under the lock. Called with h5lock held.
func (c *h5Chunks) readIndex(set, space C.hid_t, have int) (table []h5index.Chunk, base uint64) {
	defer C.H5Eclear2(C.H5E_DEFAULT)
	var addr C.haddr_t
	if C.sd_obj_addr(set, &addr) < 0 {
		return nil, 0
	}
	rank := len(c.grid.Dims)
	dims, maxDims := make([]C.hsize_t, rank), make([]C.hsize_t, rank)
	if int(C.H5Sget_simple_extent_dims(space, &dims[0], &maxDims[0])) != rank {
		return nil, 0
	}
	ds := h5index.Dataset{Header: uint64(addr), Dims: c.grid.Dims, Chunk: c.grid.Chunk, MaxDims: make([]int, rank),
		ElemSize: c.grid.Elem, MaxStored: c.maxStored()}
	for i, m := range maxDims {
		ds.MaxDims[i] = int(m)
		if m == C.H5S_UNLIMITED {
			ds.MaxDims[i] = -1
		}
	}
	table, base, err := h5index.Read(c.file, c.size, ds)
	if err != nil {
		return nil, 0
	}
	n := 0
	for _, e := range table {
		if e.Size != 0 {
			n++
		}
	}
	if n != have {
		return nil, 0
	}
	if n == 0 {
		return table, base
	}
	offset := make([]C.hsize_t, rank)
	var mask C.uint
	var at C.haddr_t
	var size C.hsize_t
	if C.H5Dget_chunk_info(set, space, 0, &offset[0], &mask, &at, &size) < 0 {
		return nil, 0
	}
	origin := make([]int, rank)
	for i, o := range offset {
		origin[i] = int(o)
	}
	if e := table[c.grid.Index(origin)]; e.Addr != base+uint64(at) || e.Size != uint64(size) || e.Mask != uint32(mask) {
		return nil, 0
	}
	return table, base
}

// libTable is the chunk table as libhdf5 lists it (H5Dget_chunk_info, chunk by chunk:
// time quadratic in the number of chunks in libhdf5 1.10), with the base address
// added, for tests.
func (d *h5File) libTable() ([]h5index.Chunk, error) {
	defer h5Enter()()
	c := d.chunks
	space := C.H5Dget_space(d.set)
	if space < 0 {
		return nil, h5Error("reading the dataspace")
	}
	defer C.H5Sclose(space)
	var n C.hsize_t
	if C.H5Dget_num_chunks(d.set, space, &n) < 0 {
		return nil, h5Error("counting the chunks")
	}
	count := 1
	for i, n := range c.grid.Dims {
		count *= (n + c.grid.Chunk[i] - 1) / c.grid.Chunk[i]
	}
	table := make([]h5index.Chunk, count)
	offset := make([]C.hsize_t, len(c.grid.Dims))
	origin := make([]int, len(offset))
	for i := range n {
		var mask C.uint
		var addr C.haddr_t
		var size C.hsize_t
		if C.H5Dget_chunk_info(d.set, space, i, &offset[0], &mask, &addr, &size) < 0 {
			return nil, h5Error("reading a chunk's address")
		}
		for a, o := range offset {
			origin[a] = int(o)
		}
		table[c.grid.Index(origin)] = h5index.Chunk{Addr: c.base + uint64(addr), Size: uint64(size), Mask: uint32(mask)}
	}
	return table, nil
}

// maxStored bounds the stored size of a chunk: twice its decoded size, and a page.
func (c *h5Chunks) maxStored() uint64 { return uint64(2*c.grid.ChunkBytes() + 4096) }

// h5Box is a box of frames of a read: its first element and size on every axis, and
// where its frames go in the destination (dst, at byte off of the read's).
type h5Box struct {
	lo, count []int
	dst       []byte
	off       int
}

// h5Raw is a chunk of a read: where it is, its stored bytes and its filter mask
// (missing: never written); or its decoded bytes from the cache.
type h5Raw struct {
	origin  []int
	key     int64
	data    []byte
	raw     *[]byte // the buffer of data, from rawChunks
	mask    uint32
	missing bool
	decoded bool
}

// readChunks reads frames [start, end) into dst from the raw chunks (h5Chunks). inspect,
// when not nil, is called with each chunk decoded in place in dst (a chunk whose
// elements are consecutive there; not one served from the cache of decoded chunks,
// copied piece by piece, or of frames stored last) and its byte offset in dst, right
// after its decode, while it is in the core's cache: a reader that passes over the
// frames read (DECTRIS's count of saturated pixels) does so there for those bytes.
func (d *h5File) readChunks(start, end int, dst []byte, inspect func(off int, b []byte)) error {
	c := d.chunks
	out := dst[:(end-start)*d.FrameBytes()]
	if d.framesLast {
		out = make([]byte, len(out))
	}
	var boxes []h5Box
	off := 0
	d.frameBoxes(start, end, func(lo, count []int) bool {
		n := product(count) * c.grid.Elem
		boxes = append(boxes, h5Box{lo: lo, count: count, dst: out[off : off+n], off: off})
		off += n
		return true
	})
	var chunks []h5Raw
	seen := map[int64]bool{}
	for _, b := range boxes {
		c.grid.Chunks(b.lo, b.count, func(origin []int) bool {
			key := c.grid.Index(origin)
			if !seen[key] {
				seen[key] = true
				r := h5Raw{origin: append([]int(nil), origin...), key: key}
				if r.data = c.cache.Get(key); r.data != nil {
					r.decoded = true
				}
				chunks = append(chunks, r)
			}
			return true
		})
	}
	if err := d.readRaw(chunks); err != nil {
		return fmt.Errorf("dataset: %s: frames [%d, %d): %w", d.path, start, end, err)
	}
	chunkBytes := c.grid.ChunkBytes()
	for i, r := range chunks {
		chunks[i].data = nil // for the collector once decoded
		data := r.data
		if !r.decoded {
			// A chunk whose elements are consecutive in a box is decoded in place.
			var into []byte
			intoOff := 0
			for _, b := range boxes {
				if at, ok := c.grid.Contiguous(b.lo, b.count, r.origin); ok {
					into, intoOff = b.dst[at*c.grid.Elem:at*c.grid.Elem+chunkBytes], b.off+at*c.grid.Elem
					break
				}
			}
			var err error
			if data, err = c.decode(r, into, chunkBytes); err != nil {
				err = c.shrunk(err)
				return fmt.Errorf("dataset: %s: frames [%d, %d): dataset %s, chunk at %s (%s): %w", d.path, start, end, h5Name(d.dsPath), npy.ShapeString(r.origin), d.chunkFrames(r.origin), err)
			}
			if r.raw != nil && (into != nil || &data[0] != &r.data[0]) {
				rawChunks.Put(r.raw)
			}
			if into != nil {
				if inspect != nil && !d.framesLast {
					inspect(intoOff, into)
				}
				continue
			}
		}
		whole := false
		for _, b := range boxes {
			c.grid.CopyBox(b.dst, b.lo, b.count, data, r.origin)
			whole = whole || c.grid.Covers(b.lo, b.count, r.origin)
		}
		if !r.decoded && !whole {
			c.cache.Put(r.key, data)
		}
	}
	if d.framesLast {
		unstackLast(dst, out, end-start, c.grid.Elem)
	}
	return nil
}

// chunkFrames names the frames of the dataset that the chunk at origin holds, for
// messages: "frame 4", "frames 0-3, 8-11".
func (d *h5File) chunkFrames(origin []int) string {
	g := d.chunks.grid
	hi := make([]int, len(origin))
	for i, o := range origin {
		hi[i] = min(o+g.Chunk[i], g.Dims[i])
	}
	return h5FrameList(h5Frames([][2][]int{d.toNavOrder([2][]int{origin, hi})}, d.fileNav))
}

// rawChunks holds buffers (*[]byte) for the stored bytes of chunks, kept from one read
// to the next: H5Dread_chunk, under the lock, then copies into pages already mapped.
var rawChunks sync.Pool

// readRaw reads the stored bytes and filter masks of the chunks not decoded yet: at
// their addresses in the chunk table where there is one, else under the lock
// (H5Dget_chunk_storage_size, then H5Dread_chunk).
func (d *h5File) readRaw(chunks []h5Raw) error {
	if d.chunks.table != nil {
		if d.chunks.closed.Load() {
			return errs.New(errs.Argument, "read after Close")
		}
		return d.chunks.readIndexed(chunks, d.dsPath)
	}
	defer h5Enter()()
	defer func(t int64) { d.chunks.locked.Add(threadCPU() - t) }(threadCPU())
	if d.closed {
		return errs.New(errs.Argument, "read after Close")
	}
	limit := C.hsize_t(d.chunks.maxStored())
	offset := make([]C.hsize_t, len(d.chunks.grid.Dims))
	for i := range chunks {
		r := &chunks[i]
		if r.decoded {
			continue
		}
		for a, o := range r.origin {
			offset[a] = C.hsize_t(o)
		}
		var nbytes C.hsize_t
		// libhdf5 1.10 fails for a chunk never written, 1.12 on gives size 0 (storage.go
		// has refused the file unless allow_fill).
		if C.H5Dget_chunk_storage_size(d.set, &offset[0], &nbytes) < 0 || nbytes == 0 {
			if d.chunks.complete {
				return errs.Wrap(errs.Format, h5Error(fmt.Sprintf("dataset %s: the chunk index has no chunk at %s, though it counts every chunk written: the file is corrupt",
					h5Name(d.dsPath), npy.ShapeString(r.origin))))
			}
			C.H5Eclear2(C.H5E_DEFAULT)
			r.missing = true
			continue
		}
		if nbytes > limit {
			return errs.New(errs.Format, "dataset %s: the chunk at %s is stored in %d bytes, more than twice its %d decoded bytes: the file is corrupt",
				h5Name(d.dsPath), npy.ShapeString(r.origin), uint64(nbytes), d.chunks.grid.ChunkBytes())
		}
		r.raw, r.data = rawBuffer(int(nbytes), int(limit))
		var mask C.uint32_t
		if C.H5Dread_chunk(d.set, C.H5P_DEFAULT, &offset[0], &mask, unsafe.Pointer(&r.data[0])) < 0 {
			return errs.Wrap(errs.IO, h5Error(fmt.Sprintf("reading the chunk at %s of dataset %s", npy.ShapeString(r.origin), h5Name(d.dsPath))))
		}
		r.mask = uint32(mask)
	}
	return nil
}

// rawBuffer returns a buffer of rawChunks of n bytes (at most limit).
func rawBuffer(n, limit int) (*[]byte, []byte) {
	b, _ := rawChunks.Get().(*[]byte)
	if b == nil || cap(*b) < n {
		b = new([]byte)
		*b = make([]byte, min(limit, n+n/4)) // room for the next chunks' sizes
	}
	return b, (*b)[:n]
}

// readIndexed reads the stored bytes of the chunks not decoded yet of the dataset at
// dsPath with positioned reads at their addresses in the chunk table, outside the lock;
// a chunk the table does not have was never written (the table has every chunk that
// libhdf5 counts).
func (c *h5Chunks) readIndexed(chunks []h5Raw, dsPath string) error {
	limit := int(c.maxStored())
	for i := range chunks {
		r := &chunks[i]
		if r.decoded {
			continue
		}
		e := c.table[r.key]
		if e.Size == 0 {
			r.missing = true
			continue
		}
		r.raw, r.data = rawBuffer(int(e.Size), limit)
		r.mask = e.Mask
		if _, err := c.file.ReadAt(r.data, int64(e.Addr)); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return errs.New(errs.Argument, "read after Close")
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return c.shrunk(fmt.Errorf("reading the chunk at %s of dataset %s: %w", npy.ShapeString(r.origin), h5Name(dsPath), errs.Wrap(errs.IO, err)))
		}
	}
	return nil
}

// shrunk returns err, said to come from a file that shrank since it was opened when it
// did (an errs.IO error).
func (c *h5Chunks) shrunk(err error) error {
	if st, serr := c.file.Stat(); serr == nil && st.Size() < c.size {
		return errs.New(errs.IO, "%s is now %d bytes, %d when opened (did the file shrink?): %w", c.file.Name(), st.Size(), c.size, err)
	}
	return err
}

// decode returns the chunk r decoded, in host byte order (the fill value for a chunk
// never written), in into when it is not nil.
func (c *h5Chunks) decode(r h5Raw, into []byte, chunkBytes int) ([]byte, error) {
	if r.missing {
		out := into
		if out == nil {
			out = make([]byte, chunkBytes)
		}
		for i := 0; i < len(out); i += len(c.fill) {
			copy(out[i:], c.fill)
		}
		return out, nil
	}
	out, err := c.pipeline.DecodeInto(into, r.data, r.mask, chunkBytes)
	if err != nil {
		return nil, err
	}
	if c.swap {
		dataset.CopyToHost(out, out, c.grid.Elem, !npy.HostBigEndian)
	}
	return out, nil
}

// threadCPU is the CPU time of the calling thread in nanoseconds (the goroutine is
// locked to its thread while it holds the HDF5 lock, h5Enter).
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
