package mib

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
)

// Raw-packed MIB frames (pixel type R64), as LiberTEM's Merlin reader
// (libertem.io.dataset.mib: decode_r*_swap, decode_r*_swap_2x2, _mib_2x2_tile_block)
// documents them. The counters are stored as the chips read them out, in 64-bit words
// written most significant byte first:
//
//   - 1 bit: 8 pixels a byte. In each run of 8 bytes (64 pixels), byte 7-b holds pixels
//     8b..8b+7, pixel 8b+k in bit k.
//   - 6 bits: one byte a pixel, each run of 8 in reverse order.
//   - 12 bits: two bytes (big-endian) a pixel, each run of 4 in reverse order.
//   - 24 bits: two 12-bit frames one after the other, the first holding the high 12 bits.
//
// A single chip (layout 1x1) stores its rows in order. A 2×2 quad (4 chips, header width
// 4·side, height side, for an assembled (2·side)×(2·side) frame) stores, in raw row r,
// the r-th row of chips 4, 3, 2, 1 one after the other: chips 1 and 2 are the top half
// of the frame (row r, left and right), chips 3 and 4 the bottom half, turned by 180°
// (row 2·side-1-r, left and right, each flipped in x).

// mibRaw describes the raw-packed pixels of a frame.
type mibRaw struct {
	bits     int // counter depth: 1, 6, 12 or 24
	quad     bool
	side     int // quad: the side of one chip, pixels
	rowPx    int // raw pixels of one stored row (whole frame width for a single chip)
	rows     int // stored rows
	rawBytes int // bytes of one frame's raw pixels
}

// newMIBRaw reads the raw layout from a parsed R64 frame header. It returns the raw
// description, and the frame's sig shape and dtype once decoded.
func newMIBRaw(hd mibHeader) (*mibRaw, [2]int, dataset.DType, error) {
	depth, err := strconv.Atoi(strings.TrimSpace(hd.fields[len(hd.fields)-1]))
	if err != nil {
		return nil, [2]int{}, dataset.Invalid, fmt.Errorf("raw-packed (R64) MIB: the counter depth (last header field) is %q, not a number", hd.fields[len(hd.fields)-1])
	}
	chips, err := strconv.Atoi(strings.TrimSpace(hd.fields[3]))
	if err != nil {
		return nil, [2]int{}, dataset.Invalid, fmt.Errorf("raw-packed (R64) MIB: the number of chips (header field 3) is %q", hd.fields[3])
	}
	layout := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(hd.fields[7])), "g")
	r := &mibRaw{bits: depth, rowPx: hd.width, rows: hd.height}
	sig := [2]int{hd.height, hd.width}
	switch {
	case chips == 1 && layout == "1x1":
	case chips == 4 && layout == "2x2":
		if hd.width != 4*hd.height {
			return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) 2x2 quad MIB: header size %d×%d is not 4 chips of %d×%d rows side by side", hd.width, hd.height, hd.height, hd.height)
		}
		r.quad, r.side = true, hd.height
		sig = [2]int{2 * hd.height, 2 * hd.height}
	default:
		return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) MIB with %d chips in layout %q is not supported (single chip 1x1 and quad 2x2 are)", chips, hd.fields[7])
	}
	var dt dataset.DType
	switch depth {
	case 1:
		dt, r.rawBytes = dataset.Uint8, r.rowPx*r.rows/8
		if r.rowPx%64 != 0 {
			return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) 1-bit MIB: row of %d pixels is not a whole number of 64-pixel words", r.rowPx)
		}
	case 6:
		dt, r.rawBytes = dataset.Uint8, r.rowPx*r.rows
	case 12:
		dt, r.rawBytes = dataset.Uint16, 2*r.rowPx*r.rows
	case 24:
		dt, r.rawBytes = dataset.Uint32, 4*r.rowPx*r.rows
	default:
		return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) MIB: counter depth %d is not 1, 6, 12 or 24", depth)
	}
	if depth != 1 && r.rowPx%8 != 0 {
		return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) MIB: row of %d pixels is not a whole number of 8-pixel groups", r.rowPx)
	}
	if r.quad && r.side%64 != 0 && depth == 1 {
		return nil, sig, dataset.Invalid, fmt.Errorf("raw-packed (R64) 1-bit quad MIB: chip side %d is not a multiple of 64", r.side)
	}
	return r, sig, dt, nil
}

// rawBytes is the size of n raw pixels of 1, 6 (a byte each) or 12 bits (two bytes).
func rawBytes(n, bits int) int {
	switch bits {
	case 1:
		return n / 8
	case 6:
		return n
	}
	return 2 * n
}

// decodeSegment decodes n raw pixels starting at src into the values v(i, value) in
// pixel order, i in [0, n): src holds n pixels of 1, 6 or 12 bits as described above.
func (r *mibRaw) decodeSegment(src []byte, n, bits int, v func(i int, value uint32)) {
	switch bits {
	case 1:
		for s := 0; s < n/64; s++ {
			word := src[8*s : 8*s+8]
			for b := range 8 {
				by := word[7-b]
				for k := range 8 {
					v(64*s+8*b+k, uint32(by>>k)&1)
				}
			}
		}
	case 6:
		for i := range n {
			v((i/8+1)*8-i%8-1, uint32(src[i]))
		}
	case 12:
		for i := range n {
			v((i/4+1)*4-i%4-1, uint32(src[2*i])<<8|uint32(src[2*i+1]))
		}
	}
}

// expand1 maps a byte of 1-bit raw pixels to the 8 pixels, one a byte: byte k of
// expand1[0][b] (little-endian) is bit k of b, byte k of expand1[1][b] bit 7-k.
var expand1 = func() (t [2][256]uint64) {
	for b := range 256 {
		for k := range 8 {
			t[0][b] |= uint64(b>>k&1) << (8 * k)
			t[1][b] |= uint64(b>>(7-k)&1) << (8 * k)
		}
	}
	return t
}()

// unpack decodes the n raw pixels of src (1, 6 or 12 bits; n a whole number of 64-bit
// runs, groupPixels) into out, as decodeSegment does, a 64-bit run at a time: 1 and 6
// bits one byte a pixel, 12 bits two bytes (host order); in pixel order, or reversed
// (pixel i at n-1-i) when rev. A 64-bit run read big-endian holds its pixels from the
// lowest bits up (6 bits a byte each, 12 bits 16 bits each), so reversed they are its
// bytes, or big-endian pairs, as stored.
func unpack(out, src []byte, n, bits int, rev bool) {
	be, le, ne := binary.BigEndian, binary.LittleEndian, binary.NativeEndian
	switch {
	case bits == 1 && !rev:
		for s := range n / 64 {
			for b := range 8 {
				le.PutUint64(out[64*s+8*b:], expand1[0][src[8*s+7-b]])
			}
		}
	case bits == 1:
		for s := range n / 64 {
			for b := range 8 {
				le.PutUint64(out[n-64*s-8*b-8:], expand1[1][src[8*s+7-b]])
			}
		}
	case bits == 6 && !rev:
		for g := range n / 8 {
			le.PutUint64(out[8*g:], be.Uint64(src[8*g:]))
		}
	case bits == 6:
		for g := range n / 8 {
			copy(out[n-8*g-8:n-8*g], src[8*g:8*g+8])
		}
	case bits == 12 && !rev && littleEndian: // the run's bytes reversed are its pixels in order
		for g := 0; g+8 <= 2*n; g += 8 {
			le.PutUint64(out[g:g+8], be.Uint64(src[g:g+8]))
		}
	case bits == 12 && !rev:
		for g := range n / 4 {
			x, o := be.Uint64(src[8*g:]), out[8*g:8*g+8]
			ne.PutUint16(o[0:], uint16(x))
			ne.PutUint16(o[2:], uint16(x>>16))
			ne.PutUint16(o[4:], uint16(x>>32))
			ne.PutUint16(o[6:], uint16(x>>48))
		}
	case bits == 12 && littleEndian: // each big-endian pair swapped, the runs in reverse order
		for g := 0; g+8 <= 2*n; g += 8 {
			x := le.Uint64(src[g : g+8])
			le.PutUint64(out[2*n-g-8:2*n-g], x>>8&0x00FF00FF00FF00FF|x&0x00FF00FF00FF00FF<<8)
		}
	case bits == 12:
		for g := range n / 4 {
			w, o := src[8*g:8*g+8], out[2*(n-4*g-4):2*(n-4*g)]
			for j := range 4 {
				ne.PutUint16(o[2*j:], be.Uint16(w[2*j:]))
			}
		}
	}
}

// littleEndian is true on little-endian hosts, where 12-bit runs unpack a word at a time.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// groupPixels is the number of pixels in a run of 64 bits at a counter depth of bits
// (1, 6 or 12).
func groupPixels(bits int) int { return 64 / rawBytes(8, bits) }

// decode decodes one frame's raw pixels src (rawBytes) into dst, host order, of sig
// sig and dtype dt.
func (r *mibRaw) decode(dst, src []byte, sig [2]int, dt dataset.DType) {
	width := sig[1]
	put := func(p int, value uint32, add bool) {
		switch dt {
		case dataset.Uint8:
			dst[p] = uint8(value)
		case dataset.Uint16:
			binary.NativeEndian.PutUint16(dst[2*p:], uint16(value))
		case dataset.Uint32:
			if add {
				value += binary.NativeEndian.Uint32(dst[4*p:])
			}
			binary.NativeEndian.PutUint32(dst[4*p:], value)
		}
	}
	bits, planes := r.bits, 1
	if bits == 24 {
		bits, planes = 12, 2
	}
	size := 1 // bytes of an unpacked pixel: 1, or 2 for 12 bits
	if bits == 12 {
		size = 2
	}
	var tmp []byte // the 12-bit halves of a 24-bit segment
	if planes == 2 {
		tmp = make([]byte, 2*max(r.rowPx, r.side))
	}
	// segment decodes the n pixels of raw segment s to pixels p0, p0+step, ...; one that
	// is not a whole number of 64-bit runs pixel by pixel (decodeSegment).
	segment := func(s []byte, n, p0, step int, shift uint, add bool) {
		switch {
		case n%groupPixels(bits) != 0:
			r.decodeSegment(s, n, bits, func(i int, value uint32) { put(p0+step*i, value<<shift, add) })
		case planes == 1 && step == 1:
			unpack(dst[size*p0:size*(p0+n)], s, n, bits, false)
		case planes == 1:
			unpack(dst[size*(p0-n+1):size*(p0+1)], s, n, bits, true)
		default: // 24 bits: the high 12 bits, then the low 12 bits added
			unpack(tmp, s, n, bits, false)
			lo, j := p0, 0 // the segment's first pixel in dst, and where pixel 0 is in it
			if step < 0 {
				lo, j = p0-n+1, n-1
			}
			d := dst[4*lo : 4*(lo+n)]
			for i := range n {
				q := d[4*(j+step*i):][:4]
				v := uint32(binary.NativeEndian.Uint16(tmp[2*i:])) << shift
				if add {
					v += binary.NativeEndian.Uint32(q)
				}
				binary.NativeEndian.PutUint32(q, v)
			}
		}
	}
	planeBytes := len(src) / planes
	for plane := range planes {
		shift := uint(0)
		if planes == 2 && plane == 0 {
			shift = 12
		}
		add := plane == 1
		pix := src[plane*planeBytes : (plane+1)*planeBytes]
		rowBytes := rawBytes(r.rowPx, bits)
		for row := range r.rows {
			raw := pix[row*rowBytes : (row+1)*rowBytes]
			if !r.quad {
				segment(raw, r.rowPx, row*width, 1, shift, add)
				continue
			}
			seg := rawBytes(r.side, bits)
			half := r.side
			// Chip k (1..4) is at segment 4-k of the raw row.
			for chip := 1; chip <= 4; chip++ {
				s := raw[(4-chip)*seg : (5-chip)*seg]
				switch chip {
				case 1, 2:
					segment(s, half, row*width+(chip-1)*half, 1, shift, add)
				default:
					// Chips 3 and 4: the bottom half, turned by 180°.
					y := 2*half - 1 - row
					segment(s, half, y*width+(chip-3)*half+half-1, -1, shift, add)
				}
			}
		}
	}
}
