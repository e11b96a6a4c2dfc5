package h5filter

import (
	"encoding/binary"
	"sync"

	"github.com/pierrec/lz4/v4"
)

// EncodeBSLZ4 appends to dst the bitshuffle-LZ4 blob of src, elements of elem bytes, in
// the HDF5 filter's framing that decodeBitshuffleLZ4 reads (kiyo-masui/bitshuffle:
// bshuf_h5filter.c, bitshuffle_core.c): the 8-byte big-endian size of src, the 4-byte
// big-endian block size in bytes (the default block, 8192 bytes / elem rounded down to a
// multiple of 8 elements, at least 128), then per block (the whole blocks, then the rest
// rounded down to a multiple of 8 elements) its 4-byte big-endian compressed size and
// the LZ4 block of its bit transposition, then the last len(src)/elem mod 8 elements as
// they are. It is DECTRIS's "bslz4" (cbor/dectris-compression-tag.md). len(src) must be
// a multiple of elem.
func EncodeBSLZ4(dst, src []byte, elem int) []byte {
	bs, _ := bshufBlock(elem, 0)
	n := len(src) / elem
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(src)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(bs*elem))
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	for off := 0; off+8 <= n; {
		m := min(bs, (n-off)/8*8)
		block := src[off*elem : (off+m)*elem]
		if cap(e.trans) < len(block) {
			e.trans = make([]byte, len(block))
		}
		t := e.trans[:len(block)]
		transposeBits(block, t, elem)
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst = e.appendLZ4(dst, t)
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
		off += m
	}
	return append(dst, src[n/8*8*elem:]...)
}

// encoder holds an LZ4 compressor's hash table and the buffers of EncodeBSLZ4.
type encoder struct {
	c     lz4.Compressor
	trans []byte
	out   []byte
}

var encoders = sync.Pool{New: func() any { return new(encoder) }}

// appendLZ4 appends the LZ4 block (lz4_Block_format.md) of src to dst: pierrec/lz4's
// compressed block, or where it finds src incompressible (it then gives no block) one
// sequence of literals only, which every LZ4 block decoder reads.
func (e *encoder) appendLZ4(dst, src []byte) []byte {
	if bound := lz4.CompressBlockBound(len(src)); cap(e.out) < bound {
		e.out = make([]byte, bound)
	}
	if n, err := e.c.CompressBlock(src, e.out[:cap(e.out)]); err == nil && n > 0 {
		return append(dst, e.out[:n]...)
	}
	l := len(src)
	if l < 15 {
		return append(append(dst, byte(l<<4)), src...)
	}
	dst = append(dst, 0xF0)
	for l -= 15; l >= 255; l -= 255 {
		dst = append(dst, 255)
	}
	return append(append(dst, byte(l)), src...)
}

// transposeBits is bitshuffle's bit transposition of one block, the inverse of
// untransposeBits: in holds m elements of elem bytes (m a multiple of 8); out gets, for
// each byte j of an element and bit k, a row of m/8 bytes whose bit i%8 of byte i/8 is
// bit k of byte j of element i. Byte j of 8 elements is an 8×8 bit matrix, transposed
// with 64-bit operations (transpose8x8).
func transposeBits(in, out []byte, elem int) {
	rows := len(in) / elem / 8
	for j := range elem {
		plane := out[j*8*rows : (j+1)*8*rows]
		for g := range rows {
			var x uint64
			for i := range 8 {
				x |= uint64(in[(8*g+i)*elem+j]) << (8 * i)
			}
			x = transpose8x8(x)
			for k := range 8 {
				plane[k*rows+g] = byte(x >> (8 * k))
			}
		}
	}
}
