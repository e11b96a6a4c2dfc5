// Package h5filter decodes the chunks of filtered HDF5 datasets in Go, so that the stored
// bytes of chunks (located through libhdf5's chunk index, read from the file) are
// decoded in the goroutine of the worker that asked for them, on as many cores as there
// are workers, outside libhdf5's global lock; Grid places decoded chunks in the frames
// read, and Cache keeps those that later reads use again.
//
// The filters decoded, with the sources of their formats (facts, not code, carried over):
//   - deflate (HDF5 filter 1): a zlib stream (RFC 1950), as HDF5's H5Zdeflate.c writes it,
//     decoded by github.com/klauspost/compress/zlib (about 1.35× the speed of
//     compress/zlib on shuffled detector frames), read to its end so that its Adler-32
//     checksum is checked, as zlib's inflate in libhdf5 checks it;
//   - shuffle (2): the bytes of the n elements of a chunk stored as planes (all first
//     bytes, then all second bytes, ...), the n·size-th byte on copied as they are
//     (H5Zshuffle.c); cd_values[0] is the element size;
//   - Fletcher-32 (3): a 4-byte checksum after the data, little-endian, of the data as
//     16-bit big-endian words (H5_checksum_fletcher32, H5checksum.c); the byte-swapped
//     sum of HDF5 before 1.6.3 is accepted too, as libhdf5 does;
//   - LZF (32000, h5py's lzf_filter.c, h5py's compression="lzf"): the chunk as one LZF
//     stream (liblzf's lzf_d.c: a control byte below 32 is a run of that many + 1
//     literal bytes; another is a back reference of length (ctrl >> 5) + 2, plus the
//     next byte when ctrl >> 5 is 7, to (ctrl & 31)·256 + the next byte + 1 bytes back),
//     no header and no checksum; cd_values[2] is the chunk's size in bytes;
//   - LZ4 (32004, HDFGroup/hdf5_plugins LZ4/src/H5Zlz4.c): an 8-byte big-endian size of
//     the decoded chunk, a 4-byte big-endian block size, then per block a 4-byte
//     big-endian stored size and the LZ4 block, stored raw when the sizes are equal;
//   - bitshuffle (32008, kiyo-masui/bitshuffle: bshuf_h5filter.c, bitshuffle_core.c),
//     cd_values (filter version, bitshuffle version, element size, block size in
//     elements (0: the default, 8192 bytes / element size rounded down to a multiple of
//     8, at least 128), compression (0 none, 2 LZ4; 3, zstd, is not decoded here)). With
//     LZ4 a chunk is an 8-byte big-endian decoded size, a 4-byte big-endian block size
//     in bytes, then per block a 4-byte big-endian compressed size and the LZ4 block; the
//     blocks hold the chunk's elements block by block, then the rest rounded down to a
//     multiple of 8 elements, each bit-transposed, then the last (n mod 8) elements as
//     they are. A bit-transposed block of m elements of s bytes stores, for each byte j
//     of an element and each bit k, a row of m/8 bytes whose bit i%8 of byte i/8 is bit
//     k of byte j of element i. The bit transposition runs in AVX2 assembly where the
//     CPU has it (bitshuffle_amd64.s), else in Go.
//
// Every size in a chunk is checked against the chunk's expected decoded size before any
// allocation, and no stream is decoded past it, so that a malformed chunk gives an error
// (errs.Format), never a panic, an allocation or work beyond that size. Every integrity
// field a filter carries is checked: zlib's Adler-32, the Fletcher-32 filter's checksum,
// the sizes of the LZ4 and bitshuffle-LZ4 headers and blocks; a chunk that fails one is
// an error, never data.
package h5filter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/pierrec/lz4/v4"

	"github.com/stemdot/stemdot/errs"
)

// The HDF5 filter identifiers decoded here.
const (
	Deflate    = 1
	Shuffle    = 2
	Fletcher32 = 3
	LZF        = 32000
	LZ4        = 32004
	Bitshuffle = 32008
)

// Filter is one stage of a dataset's filter pipeline: its HDF5 filter identifier and
// client data values (cd_values, as H5Pget_filter2 gives them).
type Filter struct {
	ID     int
	Values []uint32
}

// String names the filter as HDF5's registry does ("deflate", "bitshuffle-LZ4").
func (f Filter) String() string {
	switch f.ID {
	case Deflate:
		return "deflate"
	case Shuffle:
		return "shuffle"
	case Fletcher32:
		return "fletcher32"
	case LZF:
		return "lzf"
	case LZ4:
		return "lz4"
	case Bitshuffle:
		switch f.value(4) {
		case 0:
			return "bitshuffle"
		case 2:
			return "bitshuffle-LZ4"
		case 3:
			return "bitshuffle-zstd"
		}
		return fmt.Sprintf("bitshuffle (compression %d)", f.value(4))
	}
	return fmt.Sprintf("filter %d", f.ID)
}

func (f Filter) value(i int) uint32 {
	if i < len(f.Values) {
		return f.Values[i]
	}
	return 0
}

// check returns nil when f has a Go decoder for its values.
func (f Filter) check() error {
	switch f.ID {
	case Deflate, Fletcher32, LZF, LZ4:
		return nil
	case Shuffle:
		if len(f.Values) < 1 {
			return fmt.Errorf("shuffle without its element size (cd_values[0])")
		}
		return nil
	case Bitshuffle:
		if len(f.Values) < 3 || f.Values[2] == 0 {
			return fmt.Errorf("bitshuffle without its element size (cd_values[2])")
		}
		if c := f.value(4); c != 0 && c != 2 {
			return fmt.Errorf("%s is not decoded in Go", f)
		}
		if f.value(3)%8 != 0 {
			return fmt.Errorf("bitshuffle block size %d (cd_values[3]) is not a multiple of 8", f.value(3))
		}
		return nil
	}
	return fmt.Errorf("%s has no Go decoder", f)
}

// Pipeline is a dataset's filters in the order the writer applied them (H5Pget_filter2's
// index order); decoding runs them backwards.
type Pipeline []Filter

// Check returns nil when every filter of p has a Go decoder for its values, else an
// error naming the first that has none (its chunks are then left to libhdf5).
func (p Pipeline) Check() error {
	for _, f := range p {
		if err := f.check(); err != nil {
			return err
		}
	}
	return nil
}

// Decode returns the decoded bytes of a chunk stored as raw, which must be size bytes
// (the chunk's elements times the element size, in the file's byte order). Filter i of
// p is skipped where bit i of mask is set (H5Dread_chunk's filter mask: an optional
// filter that did not apply to this chunk). The result may share raw's memory. Errors
// are errs.Format and name the filter.
func (p Pipeline) Decode(raw []byte, mask uint32, size int) ([]byte, error) {
	return p.DecodeInto(nil, raw, mask, size)
}

// DecodeInto is Decode with the decoded chunk written into dst (of size bytes; nil: a
// new buffer), which the last filter undone writes directly where it can. The stages
// before the last write into buffers kept for later chunks (stages), not allocated per
// chunk.
func (p Pipeline) DecodeInto(dst, raw []byte, mask uint32, size int) ([]byte, error) {
	if dst != nil {
		dst = dst[:size:size] // no stage writes past the chunk, whatever it decodes to
	}
	skipped := func(i int) bool { return i < 32 && mask&(1<<i) != 0 }
	var taken []*[]byte
	buf := raw
	defer func() {
		for _, b := range taken {
			// A last stage that gives its input (shuffle of 1-byte elements, Fletcher-32)
			// returns the chunk in a stage's buffer when dst is nil: that one is the
			// caller's.
			if dst == nil && len(buf) > 0 && len(*b) > 0 && &(*b)[0] == &buf[0] {
				continue
			}
			stages.Put(b)
		}
	}()
	for i := len(p) - 1; i >= 0; i-- {
		if skipped(i) {
			continue
		}
		// The most bytes this stage may give: the chunk, and the checksums of the
		// Fletcher-32 stages still to undo; the last stage writes into dst.
		limit := size
		last := true
		for j, f := range p[:i] {
			if !skipped(j) {
				last = false
				if f.ID == Fletcher32 {
					limit += 4
				}
			}
		}
		out := dst
		if !last {
			b, _ := stages.Get().(*[]byte)
			if b == nil || cap(*b) < limit {
				b = new([]byte)
				*b = make([]byte, limit)
			}
			taken = append(taken, b)
			out = (*b)[:limit]
		}
		out, err := p[i].decode(buf, out, limit)
		if err != nil {
			return nil, errs.New(errs.Format, "HDF5 filter %s: %w", p[i], err)
		}
		buf = out
	}
	if len(buf) != size {
		return nil, errs.New(errs.Format, "HDF5 filters %s: the decoded chunk has %d bytes, want %d", p, len(buf), size)
	}
	if dst != nil && size > 0 && &dst[0] != &buf[0] {
		copy(dst, buf)
		buf = dst
	}
	return buf, nil
}

// stages holds the buffers (*[]byte) between two stages of a pipeline, of a chunk's
// size or more.
var stages sync.Pool

func (p Pipeline) String() string {
	var b bytes.Buffer
	for i, f := range p {
		if i > 0 {
			b.WriteString("+")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// decode undoes the filter on in, giving at most limit bytes, into out where out is
// not nil and of the size decoded.
func (f Filter) decode(in, out []byte, limit int) ([]byte, error) {
	switch f.ID {
	case Deflate:
		return inflate(in, out, limit)
	case Shuffle:
		size := int(f.value(0))
		if n := len(in) / max(size, 1); size > 1 && n > 1 {
			out = outBuf(out, len(in))
			unshuffle(out, in, size)
			return out, nil
		}
		return in, nil
	case Fletcher32:
		return checkFletcher32(in)
	case LZF:
		return decodeLZF(in, out, limit)
	case LZ4:
		return decodeLZ4(in, out, limit)
	case Bitshuffle:
		es := int(f.value(2))
		if f.value(4) == 2 {
			return decodeBitshuffleLZ4(in, out, es, limit)
		}
		if len(in) > limit {
			return nil, fmt.Errorf("%d bytes stored, more than the chunk's %d", len(in), limit)
		}
		return bitunshuffle(in, out, es, int(f.value(3)))
	}
	return nil, fmt.Errorf("no Go decoder")
}

// outBuf is out[:n] when out has room for n bytes, else a new buffer of n bytes.
func outBuf(out []byte, n int) []byte {
	if cap(out) >= n {
		return out[:n]
	}
	return make([]byte, n)
}

var zlibReaders sync.Pool

// inflate decodes a zlib stream of at most limit bytes (into out when the stream is of
// its size), read to its end: the zlib reader checks the Adler-32 checksum there.
func inflate(in, out []byte, limit int) ([]byte, error) {
	src := bytes.NewReader(in)
	var zr io.ReadCloser
	if r, ok := zlibReaders.Get().(io.ReadCloser); ok && r.(zlib.Resetter).Reset(src, nil) == nil {
		zr = r
	} else {
		r, err := zlib.NewReader(src)
		if err != nil {
			return nil, err
		}
		zr = r
	}
	defer zlibReaders.Put(zr)
	out = outBuf(out, limit)
	n, err := readAll(zr, out)
	if err == nil { // out is full: the stream must end here
		var more [1]byte
		var m int
		if m, err = readAll(zr, more[:]); m > 0 {
			return nil, fmt.Errorf("the stream decodes to more than the chunk's %d bytes", limit)
		}
	}
	switch {
	case err == io.EOF:
		return out[:n], nil
	case errors.Is(err, zlib.ErrChecksum):
		return nil, fmt.Errorf("Adler-32 checksum mismatch: the chunk is corrupt")
	case err == io.ErrUnexpectedEOF:
		return nil, fmt.Errorf("the stream is cut short after %d decoded bytes: the chunk is corrupt", n)
	}
	return nil, err
}

// readAll reads from r into buf until buf is full (err nil) or r fails or ends (err
// io.EOF only at the end of a zlib stream whose checksum matched).
func readAll(r io.Reader, buf []byte) (n int, err error) {
	for n < len(buf) && err == nil {
		var m int
		m, err = r.Read(buf[n:])
		n += m
	}
	if n == len(buf) && err != io.EOF {
		err = nil
	}
	return n, err
}

// unshuffle undoes HDF5's shuffle filter on in, of elements of size bytes, into out (of
// len(in) bytes): the bytes of element i are in[i], in[n+i], in[2n+i], ..., n =
// len(in)/size; the len(in) mod size bytes after the planes are copied as they are.
func unshuffle(out, in []byte, size int) {
	n := len(in) / size
	switch size {
	case 2:
		i := 0
		if haveAVX2 && n >= 32 {
			interleave2AVX2(&out[0], &in[0], n, n/32)
			i = n / 32 * 32
		}
		lo, hi := in[:n], in[n:2*n]
		for ; i < n; i++ {
			out[2*i], out[2*i+1] = lo[i], hi[i]
		}
	case 4:
		i := 0
		if haveAVX2 && n >= 32 {
			interleave4AVX2(&out[0], &in[0], n, n/32)
			i = n / 32 * 32
		}
		b0, b1, b2, b3 := in[:n], in[n:2*n], in[2*n:3*n], in[3*n:4*n]
		for ; i < n; i++ {
			o := out[4*i : 4*i+4]
			o[0], o[1], o[2], o[3] = b0[i], b1[i], b2[i], b3[i]
		}
	default:
		for j := range size {
			plane := in[j*n : (j+1)*n]
			for i, b := range plane {
				out[i*size+j] = b
			}
		}
	}
	copy(out[n*size:], in[n*size:])
}

// Fletcher32Sum is HDF5's Fletcher-32 checksum of data (H5_checksum_fletcher32): sums of
// 16-bit big-endian words (an odd last byte as the high byte of a word), reduced modulo
// 65535 as HDF5 reduces them.
func Fletcher32Sum(data []byte) uint32 {
	var sum1, sum2 uint32
	words := len(data) / 2
	p := 0
	for words > 0 {
		n := min(words, 360)
		words -= n
		for range n {
			sum1 += uint32(data[p])<<8 | uint32(data[p+1])
			sum2 += sum1
			p += 2
		}
		sum1 = (sum1 & 0xffff) + (sum1 >> 16)
		sum2 = (sum2 & 0xffff) + (sum2 >> 16)
	}
	if len(data)%2 == 1 {
		sum1 += uint32(data[p]) << 8
		sum2 += sum1
		sum1 = (sum1 & 0xffff) + (sum1 >> 16)
		sum2 = (sum2 & 0xffff) + (sum2 >> 16)
	}
	sum1 = (sum1 & 0xffff) + (sum1 >> 16)
	sum2 = (sum2 & 0xffff) + (sum2 >> 16)
	return sum2<<16 | sum1
}

// checkFletcher32 verifies the checksum at the end of in and returns the data before it.
func checkFletcher32(in []byte) ([]byte, error) {
	if len(in) < 4 {
		return nil, fmt.Errorf("%d bytes stored, fewer than the 4 of the checksum", len(in))
	}
	data := in[:len(in)-4]
	stored := binary.LittleEndian.Uint32(in[len(in)-4:])
	sum := Fletcher32Sum(data)
	// HDF5 before 1.6.3 stored the sum with the bytes of each half swapped.
	reversed := (sum&0x00ff00ff)<<8 | (sum&0xff00ff00)>>8
	if stored != sum && stored != reversed {
		return nil, fmt.Errorf("checksum mismatch (stored %#08x, computed %#08x): the chunk is corrupt", stored, sum)
	}
	return data, nil
}

// decodeLZF decodes an LZF stream (liblzf's lzf_d.c) of at most limit bytes: every
// literal run and back reference is checked against the bytes stored and decoded.
func decodeLZF(in, out []byte, limit int) ([]byte, error) {
	out = outBuf(out, limit)
	op := 0
	for ip := 0; ip < len(in); {
		ctrl := int(in[ip])
		at := ip
		ip++
		if ctrl < 32 { // ctrl+1 literal bytes
			n := ctrl + 1
			if n > len(in)-ip {
				return nil, fmt.Errorf("literal run of %d bytes at byte %d runs past the %d bytes stored", n, at, len(in))
			}
			if n > len(out)-op {
				return nil, fmt.Errorf("the stream decodes to more than the chunk's %d bytes", limit)
			}
			op += copy(out[op:], in[ip:ip+n])
			ip += n
			continue
		}
		n := ctrl>>5 + 2
		if ctrl>>5 == 7 {
			if ip == len(in) {
				return nil, fmt.Errorf("back reference at byte %d cut off by the end of the %d bytes stored", at, len(in))
			}
			n += int(in[ip])
			ip++
		}
		if ip == len(in) {
			return nil, fmt.Errorf("back reference at byte %d cut off by the end of the %d bytes stored", at, len(in))
		}
		back := (ctrl&31)<<8 | int(in[ip]) + 1
		ip++
		if back > op {
			return nil, fmt.Errorf("back reference at byte %d points %d bytes back, before the start of the chunk (at decoded byte %d)", at, back, op)
		}
		if n > len(out)-op {
			return nil, fmt.Errorf("the stream decodes to more than the chunk's %d bytes", limit)
		}
		if back >= n {
			copy(out[op:op+n], out[op-back:])
		} else { // the reference overlaps the bytes it writes: byte by byte
			for i := op; i < op+n; i++ {
				out[i] = out[i-back]
			}
		}
		op += n
	}
	return out[:op], nil
}

// decodeLZ4 decodes the HDF5 LZ4 filter's framing.
func decodeLZ4(in, out []byte, limit int) ([]byte, error) {
	if len(in) < 12 {
		return nil, fmt.Errorf("%d bytes stored, fewer than the 12 of its header", len(in))
	}
	total := binary.BigEndian.Uint64(in)
	block := uint64(binary.BigEndian.Uint32(in[8:]))
	if total > uint64(limit) {
		return nil, fmt.Errorf("header size %d is more than the chunk's %d bytes", total, limit)
	}
	if block == 0 && total > 0 {
		return nil, fmt.Errorf("header block size 0")
	}
	block = min(block, total)
	out = outBuf(out, int(total))
	p := 12
	for done := uint64(0); done < total; {
		n := min(block, total-done)
		if len(in)-p < 4 {
			return nil, fmt.Errorf("truncated at byte %d (block at %d of %d bytes)", len(in), done, total)
		}
		c := uint64(binary.BigEndian.Uint32(in[p:]))
		p += 4
		if c > uint64(len(in)-p) {
			return nil, fmt.Errorf("block of %d stored bytes at byte %d runs past the %d bytes stored", c, p, len(in))
		}
		dst := out[done : done+n]
		if c == n {
			copy(dst, in[p:p+int(c)])
		} else if got, err := lz4.UncompressBlock(in[p:p+int(c)], dst); err != nil {
			return nil, fmt.Errorf("LZ4 block at byte %d: %w", p, err)
		} else if uint64(got) != n {
			return nil, fmt.Errorf("LZ4 block at byte %d decodes to %d bytes, want %d", p, got, n)
		}
		p += int(c)
		done += n
	}
	return out, nil
}

// bshufBlock is bitshuffle's block size in elements for blockElems (0: the default).
func bshufBlock(elem, blockElems int) (int, error) {
	if blockElems == 0 {
		blockElems = max(8192/elem/8*8, 128)
	}
	if blockElems%8 != 0 {
		return 0, fmt.Errorf("block size %d elements is not a multiple of 8", blockElems)
	}
	return blockElems, nil
}

// decodeBitshuffleLZ4 decodes a bitshuffle-LZ4 chunk of elements of elem bytes.
func decodeBitshuffleLZ4(in, out []byte, elem, limit int) ([]byte, error) {
	if len(in) < 12 {
		return nil, fmt.Errorf("%d bytes stored, fewer than the 12 of its header", len(in))
	}
	total := binary.BigEndian.Uint64(in)
	blockBytes := int(binary.BigEndian.Uint32(in[8:]))
	if total > uint64(limit) {
		return nil, fmt.Errorf("header size %d is more than the chunk's %d bytes", total, limit)
	}
	if total%uint64(elem) != 0 {
		return nil, fmt.Errorf("header size %d is not a whole number of %d-byte elements", total, elem)
	}
	bs, err := bshufBlock(elem, blockBytes/elem)
	if err != nil {
		return nil, err
	}
	return bitshuffleLZ4Blocks(in, outBuf(out, int(total)), elem, bs)
}

// bitshuffleLZ4Blocks decodes the blocks of a bitshuffle-LZ4 chunk after its 12-byte
// header, of blocks of bs elements of elem bytes, into out (the decoded size).
func bitshuffleLZ4Blocks(in, out []byte, elem, bs int) ([]byte, error) {
	n := len(out) / elem
	p := 12
	tb := blockBufs.Get().(*[]byte) // a block decoded, and the scratch of its transposition
	defer blockBufs.Put(tb)
	if need := 2 * min(bs, n) * elem; cap(*tb) < need {
		*tb = make([]byte, need)
	}
	tmp := (*tb)[:2*min(bs, n)*elem]
	for off := 0; off+8 <= n; {
		m := min(bs, (n-off)/8*8)
		want := m * elem
		if len(in)-p < 4 {
			return nil, fmt.Errorf("truncated at byte %d (element %d of %d)", len(in), off, n)
		}
		c := int64(binary.BigEndian.Uint32(in[p:]))
		p += 4
		if c > int64(len(in)-p) {
			return nil, fmt.Errorf("block of %d stored bytes at byte %d runs past the %d bytes stored", c, p, len(in))
		}
		got, err := lz4.UncompressBlock(in[p:p+int(c)], tmp[:want])
		if err != nil {
			return nil, fmt.Errorf("LZ4 block at byte %d: %w", p, err)
		}
		if got != want {
			return nil, fmt.Errorf("LZ4 block at byte %d decodes to %d bytes, want %d", p, got, want)
		}
		untransposeBits(tmp[:want], out[off*elem:off*elem+want], tmp[len(tmp)/2:], elem)
		p += int(c)
		off += m
	}
	rest := n % 8 * elem
	if len(in)-p < rest {
		return nil, fmt.Errorf("truncated at byte %d: the last %d elements are missing", len(in), n%8)
	}
	copy(out[len(out)-rest:], in[p:p+rest])
	return out, nil
}

// blockBufs holds the buffers (*[]byte) of bitshuffleLZ4Blocks: a block decoded and the
// scratch of its transposition, 16 KiB with the default block size.
var blockBufs = sync.Pool{New: func() any { return new([]byte) }}

// DecodeBSLZ4 decodes a blob of bitshuffle-LZ4 (the HDF5 filter's framing, above) of
// elements of elem bytes into dst, which it must fill exactly: DECTRIS's stream
// compression "bslz4" (stream v1 encoding "bs<bits>-lz4<", stream v2 tag 56500, DECTRIS
// documentation cbor/dectris-compression-tag.md). A header whose sizes are both 0 is
// read as len(dst) bytes in blocks of the default size (8192 bytes / elem, a multiple of
// 8 elements): the headers of LiberTEM-live's DECTRIS simulator are zeroed, and its
// receiver (libertem_dectris, as ADEiger's) skips the 12 bytes and uses the default.
// Errors are errs.Format and name the fault.
func DecodeBSLZ4(dst, in []byte, elem int) error {
	if elem <= 0 || len(dst)%elem != 0 {
		return errs.New(errs.Format, "bitshuffle-LZ4: %d bytes are not a whole number of %d-byte elements", len(dst), elem)
	}
	var err error
	if len(in) >= 12 && binary.BigEndian.Uint64(in) == 0 && binary.BigEndian.Uint32(in[8:]) == 0 && len(dst) > 0 {
		var bs int
		if bs, err = bshufBlock(elem, 0); err == nil {
			_, err = bitshuffleLZ4Blocks(in, dst, elem, bs)
		}
	} else {
		var out []byte
		if out, err = decodeBitshuffleLZ4(in, dst, elem, len(dst)); err == nil && len(out) != len(dst) {
			err = fmt.Errorf("the blob decodes to %d bytes, want %d", len(out), len(dst))
		}
	}
	if err != nil {
		return errs.New(errs.Format, "bitshuffle-LZ4: %w", err)
	}
	return nil
}

// DecodeLZ4 decodes a blob in the HDF5 LZ4 filter's framing (above; DECTRIS stream v2's "lz4")
// into dst, which it must fill exactly. Errors are errs.Format.
func DecodeLZ4(dst, in []byte) error {
	out, err := decodeLZ4(in, dst, len(dst))
	if err == nil && len(out) != len(dst) {
		err = fmt.Errorf("the blob decodes to %d bytes, want %d", len(out), len(dst))
	}
	if err != nil {
		return errs.New(errs.Format, "LZ4: %w", err)
	}
	return nil
}

// bitunshuffle decodes a bitshuffle chunk without compression: the blocks of
// blockElems elements (0: the default) bit-transposed in place, the last (n mod 8)
// elements as they are.
func bitunshuffle(in, out []byte, elem, blockElems int) ([]byte, error) {
	if len(in)%elem != 0 {
		return nil, fmt.Errorf("%d bytes stored, not a whole number of %d-byte elements", len(in), elem)
	}
	bs, err := bshufBlock(elem, blockElems)
	if err != nil {
		return nil, err
	}
	out = outBuf(out, len(in))
	n := len(in) / elem
	scratch := make([]byte, min(bs, n)*elem)
	off := 0
	for ; off+8 <= n; off += min(bs, (n-off)/8*8) {
		m := min(bs, (n-off)/8*8)
		untransposeBits(in[off*elem:(off+m)*elem], out[off*elem:(off+m)*elem], scratch, elem)
	}
	copy(out[off*elem:], in[off*elem:])
	return out, nil
}

// untransposeBits undoes bitshuffle's bit transposition of one block: in holds, for
// each byte j of an element and bit k, a row of m/8 bytes (m = len(in)/elem, a multiple
// of 8) whose bit i%8 of byte i/8 is bit k of byte j of element i; out gets the m
// elements. scratch (at least len(in) bytes) holds, with AVX2, the bytes j of the
// elements as planes (untransPlane), which unshuffle then interleaves; without AVX2, or
// for blocks of fewer than 256 elements, untransposeBitsGo transposes.
func untransposeBits(in, out, scratch []byte, elem int) {
	rows := len(in) / elem / 8
	if !haveAVX2 || rows < 32 {
		untransposeBitsGo(in, out, elem)
		return
	}
	if elem == 1 {
		untransPlane(out, in, rows)
		return
	}
	planes := scratch[:len(in)]
	for j := range elem {
		untransPlane(planes[j*8*rows:(j+1)*8*rows], in[j*8*rows:(j+1)*8*rows], rows)
	}
	unshuffle(out, planes, elem)
}

// untransPlane writes to out (8·rows bytes) one byte of the elements of a block from
// its 8 bit rows (plane, of rows bytes each; rows ≥ 32): the AVX2 kernel for the first
// rows/32·32 bytes of each row, gather for the rest.
func untransPlane(out, plane []byte, rows int) {
	groups := rows / 32
	untransPlaneAVX2(&out[0], &plane[0], rows, groups)
	r := bitRows{plane: plane, rows: rows, live: 8}
	for g := 32 * groups; g < rows; g++ {
		binary.LittleEndian.PutUint64(out[8*g:], r.gather(g))
	}
}

// untransposeBitsGo undoes bitshuffle's bit transposition of one block: in holds, for
// each byte j of an element and bit k, a row of m/8 bytes (m = len(in)/elem, a multiple
// of 8) whose bit i%8 of byte i/8 is bit k of byte j of element i; out gets the m
// elements. Eight bytes of one byte j of 8 elements are an 8×8 bit matrix, transposed
// with 64-bit operations; for 2- and 4-byte elements the bytes j of 8 elements are
// interleaved in registers and stored 8 bytes at a time. Rows without a set bit (the
// high bits of small counts, most of a counting detector's) are not read.
func untransposeBitsGo(in, out []byte, elem int) {
	rows := len(in) / elem / 8
	plane := func(j int) bitRows { return liveRows(in[j*8*rows:(j+1)*8*rows], rows) }
	le := binary.LittleEndian
	switch elem {
	case 2:
		p0, p1 := plane(0), plane(1)
		for g := range rows {
			x0, x1 := p0.gather(g), p1.gather(g)
			o := out[16*g : 16*g+16]
			le.PutUint64(o, spread2(uint32(x0))|spread2(uint32(x1))<<8)
			le.PutUint64(o[8:], spread2(uint32(x0>>32))|spread2(uint32(x1>>32))<<8)
		}
	case 4:
		p0, p1, p2, p3 := plane(0), plane(1), plane(2), plane(3)
		for g := range rows {
			x0, x1, x2, x3 := p0.gather(g), p1.gather(g), p2.gather(g), p3.gather(g)
			o := out[32*g : 32*g+32]
			for k := range 4 { // elements 2k and 2k+1
				sh := 16 * k
				le.PutUint64(o[8*k:], spread4(uint16(x0>>sh))|spread4(uint16(x1>>sh))<<8|spread4(uint16(x2>>sh))<<16|spread4(uint16(x3>>sh))<<24)
			}
		}
	default:
		for j := range elem {
			p := plane(j)
			for g := range rows {
				x := p.gather(g)
				o := out[g*8*elem+j : (g+1)*8*elem]
				for i := range 8 {
					o[i*elem] = byte(x >> (8 * i))
				}
			}
		}
	}
}

// bitRows are the 8 bit rows of one byte of the elements of a block: those that hold a
// set bit (live: their number; off: where each starts in the plane, shift: 8·k for bit
// k).
type bitRows struct {
	plane []byte
	rows  int
	live  int
	off   [8]int
	shift [8]uint
}

// liveRows finds the rows of plane (8 rows of rows bytes) that hold a set bit.
func liveRows(plane []byte, rows int) bitRows {
	r := bitRows{plane: plane, rows: rows}
	for k := range 8 {
		row := plane[k*rows : (k+1)*rows]
		var or uint64
		i := 0
		for ; i+8 <= len(row); i += 8 {
			or |= binary.LittleEndian.Uint64(row[i:])
		}
		for ; i < len(row); i++ {
			or |= uint64(row[i])
		}
		if or != 0 {
			r.off[r.live], r.shift[r.live] = k*rows, uint(8*k)
			r.live++
		}
	}
	return r
}

// gather returns the transposed 8×8 bit matrix of byte g of the 8 rows: byte i of the
// result is the byte of element 8g+i.
func (r *bitRows) gather(g int) uint64 {
	switch r.live {
	case 0:
		return 0
	case 8:
		p, n := r.plane, r.rows
		_ = p[7*n+g]
		return transpose8x8(uint64(p[g]) | uint64(p[n+g])<<8 | uint64(p[2*n+g])<<16 | uint64(p[3*n+g])<<24 |
			uint64(p[4*n+g])<<32 | uint64(p[5*n+g])<<40 | uint64(p[6*n+g])<<48 | uint64(p[7*n+g])<<56)
	}
	var x uint64
	for i := range r.live {
		x |= uint64(r.plane[r.off[i]+g]) << r.shift[i]
	}
	return transpose8x8(x)
}

// spread2 puts byte k of x at byte 2k.
func spread2(x uint32) uint64 {
	t := uint64(x)
	t = (t | t<<16) & 0x0000FFFF0000FFFF
	return (t | t<<8) & 0x00FF00FF00FF00FF
}

// spread4 puts byte k of x at byte 4k.
func spread4(x uint16) uint64 {
	t := uint64(x)
	return (t | t<<24) & 0x000000FF000000FF
}

// transpose8x8 transposes the 8×8 bit matrix x (byte r is row r, bit c of it column c):
// bit 8r+c goes to 8c+r, by swapping 1×1, then 2×2, then 4×4 blocks (Hacker's Delight,
// 7-3).
func transpose8x8(x uint64) uint64 {
	t := (x ^ (x >> 7)) & 0x00AA00AA00AA00AA
	x ^= t ^ (t << 7)
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCC
	x ^= t ^ (t << 14)
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0
	x ^= t ^ (t << 28)
	return x
}
