package dectris

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// Stream v2 image messages the usual way, read in place (RFC 8949's encoding): a
// definite-length map of text keys, "type": "image", "series_id" and "image_id"
// unsigned, "data" a map of text channel names to arrays (tag 40 of [[rows, columns],
// typed array tag of a byte string or of DECTRIS's tag 56500 [algorithm, element size,
// byte string]]). The payload is a slice of the message, where the general decoder
// (v2Dec into v2Msg, then parseArray) copies the compressed frame four times: in perf,
// decoding the messages took 28% of stemdot live's CPU on 192×192 bslz4 frames, more
// than the masks. Any other message — start and end, indefinite lengths, tags outside
// the data, a key that only case-insensitively matches a field, a duplicate key, text
// that is not UTF-8, nesting deeper than 16, trailing bytes, an array the fast reading
// does not take — is left to the general decoder, with its errors and results: this
// reading only takes what it would read to the same values.

// fastImage is what imageV2Fast reads of an image message.
type fastImage struct {
	series, id uint64
	channels   int    // the channels of its data map
	channel    string // the channel taken: want, or the only one when want is ""
	a          array
}

// v2Fields are v2Msg's keys, which the general decoder matches case-insensitively.
var v2Fields = []string{"type", "series_id", "channels", "image_dtype", "image_size_x", "image_size_y",
	"number_of_images", "detector_description", "pixel_mask", "image_id", "data"}

// imageV2Fast reads msg as an image message, channel want ("": its only channel). ok is
// false where the general decoder must read it.
func imageV2Fast(msg []byte, want string) (im fastImage, ok bool) {
	major, pairs, n, ok := cborHead(msg)
	if !ok || major != 5 || pairs > 64 {
		return im, false
	}
	var keyBuf, nameBuf [64][]byte // the keys seen, for duplicates
	keys, names := keyBuf[:0], nameBuf[:0]
	var data []byte
	isImage := false
	for range pairs {
		k, kn, ok := cborText(msg[n:])
		if !ok {
			return im, false
		}
		for _, seen := range keys {
			if bytes.Equal(seen, k) {
				return im, false
			}
		}
		keys = append(keys, k)
		n += kn
		v := msg[n:]
		vn, ok := cborSkip(v, 1, string(k) == "data")
		if !ok {
			return im, false
		}
		switch string(k) {
		case "type":
			t, _, ok := cborText(v)
			if !ok || string(t) != "image" {
				return im, false
			}
			isImage = true
		case "series_id", "image_id":
			major, x, _, _ := cborHead(v)
			if major != 0 {
				return im, false
			}
			if k[0] == 's' {
				im.series = x
			} else {
				im.id = x
			}
		case "data":
			data = v[:vn]
		default:
			for _, f := range v2Fields {
				if len(k) == len(f) && strings.EqualFold(string(k), f) {
					return im, false
				}
			}
		}
		n += vn
	}
	if n != len(msg) || !isImage || data == nil {
		return im, false
	}
	major, chans, dn, _ := cborHead(data)
	if major != 5 || chans > 64 {
		return im, false
	}
	var item []byte
	for range chans {
		k, kn, ok := cborText(data[dn:])
		if !ok {
			return im, false
		}
		for _, seen := range names {
			if bytes.Equal(seen, k) {
				return im, false
			}
		}
		names = append(names, k)
		dn += kn
		vn, _ := cborSkip(data[dn:], 2, true) // well-formed: the message was skipped through
		if data[dn]>>5 != 6 {
			return im, false // a RawTag's value is a tag
		}
		if string(k) == want || want == "" && chans == 1 {
			item, im.channel = data[dn:dn+vn], string(k)
		}
		dn += vn
	}
	im.channels = int(chans)
	if item == nil {
		return im, false
	}
	im.a, ok = arrayFast(item)
	return im, ok
}

// arrayFast reads a multi-dimensional array as parseArray does, where it reads it
// without error.
func arrayFast(b []byte) (a array, ok bool) {
	next := func(want byte) (uint64, bool) {
		major, x, n, ok := cborHead(b)
		if !ok || major != want {
			return 0, false
		}
		b = b[n:]
		return x, true
	}
	if t, ok := next(6); !ok || t != 40 {
		return a, false
	}
	if l, ok := next(4); !ok || l != 2 {
		return a, false
	}
	if l, ok := next(4); !ok || l != 2 {
		return a, false
	}
	for i := range 2 {
		d, ok := next(0)
		if !ok || d == 0 || d > 1<<16 {
			return a, false
		}
		a.dims[i] = int(d)
	}
	typed, ok := next(6)
	if !ok {
		return a, false
	}
	if a.dt, a.enc, ok = typedArray(typed); !ok {
		return a, false
	}
	if len(b) > 0 && b[0]>>5 == 2 {
		p, size, ok := cborBytes(b)
		a.payload = p
		return a, ok && size == len(b)
	}
	if t, ok := next(6); !ok || t != 56500 {
		return a, false
	}
	if l, ok := next(4); !ok || l != 3 {
		return a, false
	}
	alg, n, ok := cborText(b)
	if !ok {
		return a, false
	}
	b = b[n:]
	elem, ok := next(0)
	if !ok {
		return a, false
	}
	switch {
	case string(alg) == "bslz4" && (elem == 1 || elem == 2 || elem == 4 || elem == 8):
		a.enc |= encBSLZ4 | int(elem)<<4
	case string(alg) == "lz4":
		a.enc |= encLZ4HDF5
	default:
		return a, false
	}
	a.payload, n, ok = cborBytes(b)
	return a, ok && n == len(b)
}

// cborHead reads the head of the data item at b: its major type, argument (a
// definite length, a value, a tag number) and the head's size. ok is false for a
// truncated head, an indefinite length and the reserved additional information 28-30.
func cborHead(b []byte) (major byte, arg uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, 0, false
	}
	major, ai := b[0]>>5, b[0]&31
	switch {
	case ai < 24:
		return major, uint64(ai), 1, true
	case ai == 24 && len(b) >= 2:
		return major, uint64(b[1]), 2, true
	case ai == 25 && len(b) >= 3:
		return major, uint64(binary.BigEndian.Uint16(b[1:])), 3, true
	case ai == 26 && len(b) >= 5:
		return major, uint64(binary.BigEndian.Uint32(b[1:])), 5, true
	case ai == 27 && len(b) >= 9:
		return major, binary.BigEndian.Uint64(b[1:]), 9, true
	}
	return 0, 0, 0, false
}

// cborBytes reads a definite-length byte string: its bytes and the item's size.
func cborBytes(b []byte) ([]byte, int, bool) {
	major, l, n, ok := cborHead(b)
	if !ok || major != 2 || l > uint64(len(b)-n) {
		return nil, 0, false
	}
	return b[n : n+int(l)], n + int(l), true
}

// cborText reads a definite-length UTF-8 text string: its bytes and the item's size.
func cborText(b []byte) ([]byte, int, bool) {
	major, l, n, ok := cborHead(b)
	if !ok || major != 3 || l > uint64(len(b)-n) || !utf8.Valid(b[n:n+int(l)]) {
		return nil, 0, false
	}
	return b[n : n+int(l)], n + int(l), true
}

// cborSkip returns the size of the well-formed data item at b, of nesting depth
// (from 1) at most 16, without indefinite lengths, and without tags unless tags; ok is
// false otherwise.
func cborSkip(b []byte, depth int, tags bool) (int, bool) {
	major, arg, n, ok := cborHead(b)
	if !ok || depth > 16 {
		return 0, false
	}
	switch major {
	case 0, 1:
		return n, true
	case 2:
		_, size, ok := cborBytes(b)
		return size, ok
	case 3:
		_, size, ok := cborText(b)
		return size, ok
	case 4, 5:
		if arg > 1<<16 {
			return 0, false
		}
		items := int(arg) << (major - 4) // a map's pairs are two items each
		for range items {
			k, ok := cborSkip(b[n:], depth+1, tags)
			if !ok {
				return 0, false
			}
			n += k
		}
		return n, true
	case 6:
		if !tags || len(b) == n || !builtinTagContent(arg, b[n]) {
			return 0, false
		}
		k, ok := cborSkip(b[n:], depth+1, tags)
		return n + k, ok
	}
	// major 7: simple values and floats; a one-byte simple value under 32 is not
	// well-formed
	return n, !(b[0]&31 == 24 && arg < 32)
}

// builtinTagContent tells whether the item whose head starts with the byte head may be
// the content of tag number tag, as the general decoder requires of RFC 8949's tags
// (fxamacker/cbor's validBuiltinTag): a text string for 0 (a date), an integer or a
// float for 1 (epoch time), a byte string for 2 and 3 (bignums); any item for the rest.
func builtinTagContent(tag uint64, head byte) bool {
	switch major := head >> 5; tag {
	case 0:
		return major == 3
	case 1:
		return major == 0 || major == 1 || head >= 0xf9 && head <= 0xfb
	case 2, 3:
		return major == 2
	}
	return true
}
