package npy

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/atomicfile"
)

// Descr is a parsed NPY dtype descr such as '<u2': the kind ('b' bool, 'i' signed,
// 'u' unsigned integer, 'f' float), the element size in bytes and the byte order.
type Descr struct {
	Kind      byte
	Size      int
	BigEndian bool
}

// HostBigEndian is true on big-endian machines: the byte order of '=' in a descr.
var HostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// descrCodes are numpy's one-character type codes of kinds b, i, u and f, with their
// sizes on 64-bit Linux (C long and pointers of 8 bytes).
var descrCodes = map[byte]Descr{
	'?': {Kind: 'b', Size: 1}, 'b': {Kind: 'i', Size: 1}, 'B': {Kind: 'u', Size: 1},
	'h': {Kind: 'i', Size: 2}, 'H': {Kind: 'u', Size: 2}, 'i': {Kind: 'i', Size: 4}, 'I': {Kind: 'u', Size: 4},
	'l': {Kind: 'i', Size: strconv.IntSize / 8}, 'L': {Kind: 'u', Size: strconv.IntSize / 8},
	'q': {Kind: 'i', Size: 8}, 'Q': {Kind: 'u', Size: 8},
	'p': {Kind: 'i', Size: strconv.IntSize / 8}, 'P': {Kind: 'u', Size: strconv.IntSize / 8},
	'e': {Kind: 'f', Size: 2}, 'f': {Kind: 'f', Size: 4}, 'd': {Kind: 'f', Size: 8}, 'g': {Kind: 'f', Size: 16},
}

// descrNames are numpy's type names of kinds b, i, u and f (numpy 2, 64-bit Linux).
var descrNames = map[string]Descr{
	"bool": {Kind: 'b', Size: 1}, "bool_": {Kind: 'b', Size: 1},
	"int8": {Kind: 'i', Size: 1}, "byte": {Kind: 'i', Size: 1}, "uint8": {Kind: 'u', Size: 1}, "ubyte": {Kind: 'u', Size: 1},
	"int16": {Kind: 'i', Size: 2}, "short": {Kind: 'i', Size: 2}, "uint16": {Kind: 'u', Size: 2}, "ushort": {Kind: 'u', Size: 2},
	"int32": {Kind: 'i', Size: 4}, "intc": {Kind: 'i', Size: 4}, "uint32": {Kind: 'u', Size: 4}, "uintc": {Kind: 'u', Size: 4},
	"int64": {Kind: 'i', Size: 8}, "longlong": {Kind: 'i', Size: 8}, "uint64": {Kind: 'u', Size: 8}, "ulonglong": {Kind: 'u', Size: 8},
	"int": {Kind: 'i', Size: strconv.IntSize / 8}, "int_": {Kind: 'i', Size: strconv.IntSize / 8},
	"intp": {Kind: 'i', Size: strconv.IntSize / 8}, "long": {Kind: 'i', Size: strconv.IntSize / 8},
	"uint": {Kind: 'u', Size: strconv.IntSize / 8}, "uintp": {Kind: 'u', Size: strconv.IntSize / 8}, "ulong": {Kind: 'u', Size: strconv.IntSize / 8},
	"float16": {Kind: 'f', Size: 2}, "half": {Kind: 'f', Size: 2}, "float32": {Kind: 'f', Size: 4}, "single": {Kind: 'f', Size: 4},
	"float64": {Kind: 'f', Size: 8}, "double": {Kind: 'f', Size: 8}, "float": {Kind: 'f', Size: 8},
}

// ParseDescr parses the descr of an NPY header as numpy reads it (numpy.dtype(descr)),
// for the kinds b (bool), i (signed), u (unsigned integer) and f (float): an optional
// byte order ('<' little-endian, '>' big-endian, '=' or '|' or none: native, which is
// little-endian on x86-64 and arm64) and then a kind and a size in bytes ("<u2", "u2",
// "|u1", ">f8") or a one-character type code ("H", "<f", "?"; l, L, p and P of 8
// bytes); or, without a byte order, a type name ("uint16", "float32", "bool", "single",
// ...). numpy's writer writes the first form with a byte order. It does not check that
// the size suits the kind; callers check the pairs they support. Errors quote the descr
// as numpy prints it, '<c8'.
func ParseDescr(descr string) (Descr, error) {
	if d, ok := descrNames[descr]; ok {
		d.BigEndian = HostBigEndian
		return d, nil
	}
	s, bigEndian := descr, HostBigEndian
	if s == "" {
		return Descr{}, fmt.Errorf("unsupported NPY dtype ''")
	}
	if len(s) > 1 && strings.ContainsRune("<>=|", rune(s[0])) {
		bigEndian = s[0] == '>' || s[0] != '<' && HostBigEndian
		s = s[1:]
	}
	if d, ok := descrCodes[s[0]]; ok && len(s) == 1 {
		d.BigEndian = bigEndian
		return d, nil
	}
	if len(s) < 2 || !strings.ContainsRune("biuf", rune(s[0])) {
		return Descr{}, fmt.Errorf("unsupported NPY dtype %s", QuoteDescr(descr))
	}
	size, err := strconv.ParseUint(s[1:], 10, 16) // digits only, leading zeros as numpy
	if err != nil || size < 1 {
		return Descr{}, fmt.Errorf("unsupported NPY dtype %s: bad element size", QuoteDescr(descr))
	}
	return Descr{Kind: s[0], Size: int(size), BigEndian: bigEndian}, nil
}

// QuoteDescr quotes descr, the dtype of a file's header, for messages: in single quotes,
// as numpy prints a dtype, and escaped as Go's %q escapes a string, so that no character
// of the file (a control character, a terminal's escape sequence) reaches a message raw.
func QuoteDescr(descr string) string {
	q := strconv.Quote(descr)
	return "'" + strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`) + "'"
}

// String formats d as a descr: "<u2", "|u1", ">f8".
func (d Descr) String() string {
	order := "<"
	switch {
	case d.Size == 1:
		order = "|"
	case d.BigEndian:
		order = ">"
	}
	return fmt.Sprintf("%s%c%d", order, d.Kind, d.Size)
}

// Header builds an NPY format 1.0 header for a C-order array of descr and shape: magic,
// version, header length, and the dict padded with spaces and ended by '\n' so that the
// data starts at a multiple of 64 bytes, as numpy.lib.format.write_array_header_1_0
// writes it.
func Header(descr string, shape []int) ([]byte, error) {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, ShapeString(shape))
	const prefix = 10 // magic (6) + version (2) + header length (2)
	total := prefix + len(dict) + 1
	total += (64 - total%64) % 64
	hlen := total - prefix
	if hlen > math.MaxUint16 {
		return nil, fmt.Errorf("NPY header of %d bytes is too long for format 1.0", hlen)
	}
	h := make([]byte, 0, total)
	h = append(h, magic+"\x01\x00"...)
	h = binary.LittleEndian.AppendUint16(h, uint16(hlen))
	h = append(h, dict...)
	for len(h) < total-1 {
		h = append(h, ' ')
	}
	return append(h, '\n'), nil
}

// ShapeString formats a shape as numpy prints it: "(3, 4)", "(5,)", "()".
func ShapeString(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = fmt.Sprint(n)
	}
	if len(s) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// WriteFile writes data ([]float32 or []float64, C order) as a little-endian NPY file
// of the given shape, atomically (see package atomicfile: temporary file, then rename;
// mode 0666 less the umask, or the permissions of a file replaced). It returns an error
// for a shape with a negative size or another number of elements than data (errs.Shape),
// and for a path that cannot receive the file (errs.IO).
func WriteFile(path string, shape []int, data any) error {
	var descr string
	var n int
	switch v := data.(type) {
	case []float32:
		descr, n = "<f4", len(v)
	case []float64:
		descr, n = "<f8", len(v)
	default:
		return fmt.Errorf("write %s: unsupported array type %T (want []float32 or []float64)", path, data)
	}
	elems := 1
	for _, s := range shape {
		if s < 0 {
			return errs.New(errs.Shape, "write %s: shape %s has a negative size", path, ShapeString(shape))
		}
		if s > 0 && elems > math.MaxInt/s {
			return errs.New(errs.Shape, "write %s: shape %s is too large: its number of elements exceeds %d", path, ShapeString(shape), math.MaxInt)
		}
		elems *= s
	}
	if elems != n {
		return errs.New(errs.Shape, "write %s: shape %s has %d elements but the data holds %d", path, ShapeString(shape), elems, n)
	}
	header, err := Header(descr, shape)
	if err != nil {
		return errs.Wrap(errs.Shape, fmt.Errorf("write %s: %w", path, err))
	}
	return atomicfile.Write(path, func(out io.Writer) error {
		if _, err := out.Write(header); err != nil {
			return err
		}
		return WriteData(out, data)
	})
}

// WriteData writes data ([]float32, []float64 or []int64) little-endian, as NPY data follows
// its header.
func WriteData(out io.Writer, data any) error {
	var n int
	var put func(buf []byte, i int) []byte
	switch v := data.(type) {
	case []float32:
		n = len(v)
		put = func(buf []byte, i int) []byte { return binary.LittleEndian.AppendUint32(buf, math.Float32bits(v[i])) }
	case []float64:
		n = len(v)
		put = func(buf []byte, i int) []byte { return binary.LittleEndian.AppendUint64(buf, math.Float64bits(v[i])) }
	case []int64:
		n = len(v)
		put = func(buf []byte, i int) []byte { return binary.LittleEndian.AppendUint64(buf, uint64(v[i])) }
	default:
		return fmt.Errorf("unsupported array type %T (want []float32, []float64 or []int64)", data)
	}
	buf := make([]byte, 0, 1<<16)
	for i := range n {
		if buf = put(buf, i); len(buf) >= 1<<16-8 {
			if _, err := out.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err := out.Write(buf)
	return err
}
