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
*/
import "C"

import (
	"cmp"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Chunks decoded in the workers.
//
// A chunked dataset whose filters all have a Go decoder (package internal/h5filter:
// deflate, shuffle, Fletcher-32, LZF, LZ4, bitshuffle with LZ4 or none) and whose
// stored type is a plain integer or IEEE float is not read through libhdf5's H5Dread, which
// decompresses inside the library's global lock, so on one core however many workers
// read. ReadFrames instead reads the stored bytes of the chunks of the frames asked for
// under the lock (H5Dget_chunk_storage_size and H5Dread_chunk: a lookup in the chunk
// index and a copy of the compressed bytes each), then decodes them and turns their byte
// order in the goroutine of the worker that asked, so that workers decode in parallel;
// LZF, LZ4 and bitshuffle then need no plugin. (H5Dget_chunk_info_by_coord, which gives a
// chunk's address to read it outside the lock, searches the chunks of the dataset from
// the first in libhdf5 1.10: a whole read would cost time quadratic in the number of chunks
// under the lock, a third of the CPU time of a bitshuffle-LZ4 scan of 64×64 frames.) Chunks
// that a read does not use whole (a chunk of 4×4 scan positions read a scan row at a
// time) are kept decoded for the next reads, in a cache of the size of libhdf5's chunk
// cache. Chunks never written are read as the dataset's fill value, as libhdf5 reads
// them (option allow_fill; storage.go refuses them otherwise). Other datasets are read
// through libhdf5 as before.

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
	d.chunks = c
	return nil
}

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
				if st, serr := c.file.Stat(); serr == nil && st.Size() < c.size {
					err = errs.New(errs.IO, "%s is now %d bytes, %d when opened (did the file shrink?): %w", c.file.Name(), st.Size(), c.size, err)
				}
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

// readRaw reads the stored bytes and filter masks of the chunks not decoded yet, under
// the lock (H5Dget_chunk_storage_size, then H5Dread_chunk).
func (d *h5File) readRaw(chunks []h5Raw) error {
	defer h5Enter()()
	defer func(t int64) { d.chunks.locked.Add(threadCPU() - t) }(threadCPU())
	if d.closed {
		return errs.New(errs.Argument, "read after Close")
	}
	limit := C.hsize_t(2*d.chunks.grid.ChunkBytes() + 4096)
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
		b, _ := rawChunks.Get().(*[]byte)
		if b == nil || cap(*b) < int(nbytes) {
			b = new([]byte)
			*b = make([]byte, min(limit, nbytes+nbytes/4)) // room for the next chunks' sizes
		}
		r.raw, r.data = b, (*b)[:nbytes]
		var mask C.uint32_t
		if C.H5Dread_chunk(d.set, C.H5P_DEFAULT, &offset[0], &mask, unsafe.Pointer(&r.data[0])) < 0 {
			return errs.Wrap(errs.IO, h5Error(fmt.Sprintf("reading the chunk at %s of dataset %s", npy.ShapeString(r.origin), h5Name(d.dsPath))))
		}
		r.mask = uint32(mask)
	}
	return nil
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
