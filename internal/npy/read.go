// Package npy is stemdot's one place for the NumPy .npy format: it reads the header of
// NPY files given by users defensively (datasets, mask stacks), parses and writes dtype
// descrs, and writes result arrays atomically.
//
// The NPY format (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
// starts with the magic "\x93NUMPY", a major and a minor version byte, the header length
// (little-endian uint16 for version 1.0, uint32 for 2.0) and the header: a Python dict
// literal padded with spaces and ended by '\n'. The data follows the header.
package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	npyio "codeberg.org/sbinet/npyio/npy"
)

// MaxHeaderBytes is the longest header dict accepted, as numpy's own reader
// (numpy.lib.format.read_array_header_*, max_header_size=10000) does: a longer one is
// not an array header that stemdot reads, and reading it would cost memory for nothing.
const MaxHeaderBytes = 10000

// magic starts every NPY file.
const magic = "\x93NUMPY"

// Read checks the fixed start of the NPY file r of size bytes (magic, version 1.0 or 2.0,
// a header length that fits in the file and in MaxHeaderBytes, a header ended by '\n')
// and then parses the header with codeberg.org/sbinet/npyio. It returns npyio's reader,
// positioned at the first data byte (its Header holds the dtype descr, the order and
// the shape), and the offset of that byte in the file. Errors say what is wrong with the
// file; the caller adds its name.
func Read(r io.ReaderAt, size int64) (*npyio.Reader, int64, error) {
	var start [12]byte
	n, err := r.ReadAt(start[:min(size, int64(len(start)))], 0)
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	pre := start[:n]
	switch {
	case size == 0:
		return nil, 0, fmt.Errorf("not an NPY file: the file is empty")
	case !bytes.HasPrefix(pre, []byte(magic)) && !bytes.HasPrefix([]byte(magic), pre):
		return nil, 0, fmt.Errorf("not an NPY file: it starts with %q, not the NPY magic %q", pre[:min(len(pre), len(magic))], magic)
	case size < 10:
		return nil, 0, fmt.Errorf("truncated NPY file: %d bytes, shorter than the 10-byte NPY preamble", size)
	}
	var prefix, hlen int64
	switch major := pre[6]; major {
	case 1:
		prefix, hlen = 10, int64(binary.LittleEndian.Uint16(pre[8:10]))
	case 2:
		if size < 12 {
			return nil, 0, fmt.Errorf("truncated NPY file: %d bytes, shorter than the 12-byte NPY 2.0 preamble", size)
		}
		prefix, hlen = 12, int64(binary.LittleEndian.Uint32(pre[8:12]))
	default:
		return nil, 0, fmt.Errorf("NPY format version %d.%d is not supported (want 1.0 or 2.0)", major, pre[7])
	}
	if hlen > MaxHeaderBytes {
		return nil, 0, fmt.Errorf("NPY header length %d bytes exceeds %d bytes: not an array header", hlen, MaxHeaderBytes)
	}
	if prefix+hlen > size {
		return nil, 0, fmt.Errorf("truncated NPY file: %d bytes, but its header ends at byte %d", size, prefix+hlen)
	}
	if hlen == 0 {
		return nil, 0, fmt.Errorf("malformed NPY file: its header length is 0")
	}
	hdr := make([]byte, hlen)
	if _, err := r.ReadAt(hdr, prefix); err != nil {
		return nil, 0, err
	}
	if hdr[hlen-1] != '\n' {
		return nil, 0, fmt.Errorf("malformed NPY header %s: it does not end with a newline", quote(hdr))
	}
	rd, err := newReader(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, 0, fmt.Errorf("malformed NPY header %s: %v", quote(hdr), err)
	}
	return rd, prefix + hlen, nil
}

// newReader calls npyio.NewReader and turns a panic into an error. npyio (v0.14.0,
// npy/reader.go readDescr) slices the header dict at the offsets of its keys without
// checking them, so a header with the keys in another order, or a missing '}' or
// parenthesis, makes it panic; a user's file must give an error instead. Read has checked
// everything before the dict, so only the dict parsing is left to fail this way.
func newReader(r io.Reader) (rd *npyio.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			rd, err = nil, fmt.Errorf("npyio cannot parse it (%v)", p)
		}
	}()
	return npyio.NewReader(r)
}

// quote returns the header dict quoted for an error message, shortened past 200 bytes.
func quote(hdr []byte) string {
	if len(hdr) > 200 {
		return fmt.Sprintf("%q...", hdr[:200])
	}
	return fmt.Sprintf("%q", hdr)
}
