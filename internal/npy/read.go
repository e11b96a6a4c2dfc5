// Package npy is stemdot's one place for the NumPy .npy format: it reads the header of
// NPY files given by users defensively (datasets, mask stacks), parses and writes dtype
// descrs, and writes result arrays atomically.
//
// The NPY format (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
// starts with the magic "\x93NUMPY", a major and a minor version byte, the header length
// (little-endian uint16 for version 1.0, uint32 for 2.0 and 3.0) and the header: a Python
// dict literal (Latin-1, or UTF-8 for 3.0) that numpy's writer pads with spaces and ends
// by '\n' (its reader requires neither). The data follows the header.
package npy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/stemdot/stemdot/errs"
)

// MaxHeaderBytes is the longest header dict accepted, as numpy's own reader
// (numpy.lib.format.read_array_header_*, max_header_size=10000) does: a longer one is
// not an array header that stemdot reads, and reading it would cost memory for nothing.
const MaxHeaderBytes = 10000

// magic starts every NPY file.
const magic = "\x93NUMPY"

// Read reads the header of the NPY file r of size bytes: the magic, the version (1.0,
// 2.0 or 3.0), a header length that fits in the file and in MaxHeaderBytes, and a header
// dict that ParseDict accepts (ended by '\n' or not, as numpy's reader takes it). It
// returns what the header says and the offset of the first data byte. Errors say what is
// wrong with the file; the caller adds its name.
func Read(r io.ReaderAt, size int64) (Info, int64, error) {
	var start [12]byte
	n, err := r.ReadAt(start[:min(size, int64(len(start)))], 0)
	if err != nil && err != io.EOF {
		return Info{}, 0, err
	}
	pre := start[:n]
	switch {
	case size == 0:
		return Info{}, 0, fmt.Errorf("not an NPY file: the file is empty")
	case !bytes.HasPrefix(pre, []byte(magic)) && !bytes.HasPrefix([]byte(magic), pre):
		return Info{}, 0, fmt.Errorf("not an NPY file: it starts with %q, not the NPY magic %q", pre[:min(len(pre), len(magic))], magic)
	case size < 10:
		return Info{}, 0, fmt.Errorf("truncated NPY file: %d bytes, shorter than the 10-byte NPY preamble", size)
	}
	var prefix, hlen int64
	switch major, minor := pre[6], pre[7]; {
	case minor != 0 || major < 1 || major > 3:
		return Info{}, 0, fmt.Errorf("NPY format version %d.%d is not supported (want 1.0, 2.0 or 3.0)", major, minor)
	case major == 1:
		prefix, hlen = 10, int64(binary.LittleEndian.Uint16(pre[8:10]))
	case size < 12:
		return Info{}, 0, fmt.Errorf("truncated NPY file: %d bytes, shorter than the 12-byte NPY %d.0 preamble", size, major)
	default:
		prefix, hlen = 12, int64(binary.LittleEndian.Uint32(pre[8:12]))
	}
	if hlen > MaxHeaderBytes {
		return Info{}, 0, fmt.Errorf("NPY header length %d bytes exceeds %d bytes: not an array header", hlen, MaxHeaderBytes)
	}
	if prefix+hlen > size {
		return Info{}, 0, fmt.Errorf("truncated NPY file: %d bytes, but its header ends at byte %d", size, prefix+hlen)
	}
	if hlen == 0 {
		return Info{}, 0, fmt.Errorf("malformed NPY file: its header length is 0")
	}
	hdr := make([]byte, hlen)
	if _, err := r.ReadAt(hdr, prefix); err != nil {
		return Info{}, 0, err
	}
	info, err := ParseDict(string(hdr), pre[6])
	if err != nil {
		return Info{}, 0, fmt.Errorf("malformed NPY header %s: %v", quote(hdr), err)
	}
	return info, prefix + hlen, nil
}

// CheckSize checks that the NPY file of size bytes, whose header info gives dataBytes of
// array data from byte offset on, ends with the data. A shorter file is truncated. A
// longer one numpy reads (np.load ignores the bytes after the data), but they may as
// well mean a header that does not describe the array (another shape or dtype written
// over it): it is refused, saying how many bytes follow the data and where the data
// ends.
func CheckSize(info Info, offset, size int64, dataBytes uint64) error {
	end := uint64(offset) + dataBytes
	array := fmt.Sprintf("the header's shape %s and dtype %s make %d bytes of data from byte %d to byte %d", ShapeString(info.Shape), QuoteDescr(info.Descr), dataBytes, offset, end)
	switch {
	case uint64(size) < end:
		return fmt.Errorf("truncated NPY file: %s, but the file has %d bytes (%d missing)", array, size, end-uint64(size))
	case uint64(size) > end:
		return fmt.Errorf("%d bytes after the array's data: %s of the %d-byte file; numpy ignores them, stemdot does not read a file that its header may not describe: save the array again (numpy.save), or cut the file to %d bytes",
			uint64(size)-end, array, size, end)
	}
	return nil
}

// quote returns the header dict quoted for an error message, shortened past 200 bytes.
func quote(hdr []byte) string {
	if len(hdr) > 200 {
		return fmt.Sprintf("%q...", hdr[:200])
	}
	return fmt.Sprintf("%q", hdr)
}

// ReadArray reads the whole C-order array of the NPY file r of size bytes: its header
// (Read), its dtype (ParseDescr; the zero Descr for a dtype ParseDescr refuses) and its
// data bytes. check, called with the header and dtype before any data is read or
// allocated, refuses the arrays its caller does not take; its errors are returned as
// they are. Errors (the caller adds the file's name): errs.Format for a header Read
// refuses, Fortran order, or a file whose size does not fit the header (CheckSize);
// errs.IO for a read that fails or comes short (the file shrank while read).
func ReadArray(r io.ReaderAt, size int64, check func(Info, Descr) error) (Info, Descr, []byte, error) {
	info, offset, err := Read(r, size)
	if err != nil {
		return info, Descr{}, nil, errs.Wrap(errs.Format, err)
	}
	d, _ := ParseDescr(info.Descr)
	if err := check(info, d); err != nil {
		return info, d, nil, err
	}
	if info.Fortran {
		return info, d, nil, errs.New(errs.Format, "the array is in Fortran order: save it in C order (numpy.save(path, numpy.ascontiguousarray(a)))")
	}
	n, over := uint64(d.Size), uint64(0)
	for _, s := range info.Shape {
		over, n = bits.Mul64(n, uint64(s))
		if over != 0 || n > uint64(size) {
			return info, d, nil, errs.New(errs.Format, "truncated NPY file: the header's shape %s and dtype %s make more data than the %d-byte file holds", ShapeString(info.Shape), QuoteDescr(info.Descr), size)
		}
	}
	if err := CheckSize(info, offset, size, n); err != nil {
		return info, d, nil, errs.Wrap(errs.Format, err)
	}
	data := make([]byte, n)
	if k, err := r.ReadAt(data, offset); k < len(data) {
		return info, d, nil, errs.New(errs.IO, "the file changed while being read: %d of its %d data bytes read (%v)", k, n, err)
	}
	return info, d, data, nil
}

// Floats decodes data, values of the float32 or float64 dtype d (either byte order), as
// float64.
func Floats(data []byte, d Descr) []float64 {
	var order binary.ByteOrder = binary.LittleEndian
	if d.BigEndian {
		order = binary.BigEndian
	}
	v := make([]float64, len(data)/d.Size)
	for i := range v {
		if d.Size == 8 {
			v[i] = math.Float64frombits(order.Uint64(data[8*i:]))
		} else {
			v[i] = float64(math.Float32frombits(order.Uint32(data[4*i:])))
		}
	}
	return v
}
