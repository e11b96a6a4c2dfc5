package frms6

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// maxGainMap bounds the gain map files read.
const maxGainMap = 1 << 30

// readGainMap reads a gain map as LiberTEM does (FRMS6DataSet's gain_map_path): the
// variable GainMap of a MATLAB .mat file (level 5, as scipy.io.loadmat reads it) of the
// frames' shape, or a CSV file of rows of semicolon-separated numbers (empty fields
// ignored), transposed: the file's row r holds detector column r. It returns the gain in
// the frames' layout (sig_y rows of sig_x).
func readGainMap(path string, sig [2]int) ([]float32, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxGainMap {
		return nil, fmt.Errorf("%s: %d bytes is too large for a gain map", path, size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("%s: %w", path, err))
	}
	if strings.EqualFold(filepath.Ext(path), ".mat") {
		gain, err := matGainMap(b, sig)
		if err != nil {
			return nil, errs.Wrap(errs.Format, fmt.Errorf("%s: %w", path, err))
		}
		return gain, nil
	}
	gain := make([]float32, sig[0]*sig[1])
	rows := 0
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var vals []float64
		for field := range bytes.SplitSeq(line, []byte(";")) {
			if field = bytes.TrimSpace(field); len(field) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(string(field), 64)
			if err != nil {
				return nil, fmt.Errorf("%s: row %d: %q is not a number", path, rows+1, field)
			}
			vals = append(vals, v)
		}
		if rows >= sig[1] || len(vals) != sig[0] {
			return nil, errs.New(errs.Shape, "%s: row %d has %d values: a gain map for frames of sig shape (%d, %d) has %d rows (detector columns) of %d values (detector rows)",
				path, rows+1, len(vals), sig[0], sig[1], sig[1], sig[0])
		}
		for y, v := range vals {
			gain[y*sig[1]+rows] = float32(v)
		}
		rows++
	}
	if rows != sig[1] {
		return nil, errs.New(errs.Shape, "%s: %d rows: a gain map for frames of sig shape (%d, %d) has %d rows (detector columns) of %d values", path, rows, sig[0], sig[1], sig[1], sig[0])
	}
	return gain, nil
}

// MATLAB level 5 MAT-file data types and array classes (the MAT-File Format
// documentation of MathWorks).
const (
	miINT8       = 1
	miUINT8      = 2
	miINT16      = 3
	miUINT16     = 4
	miINT32      = 5
	miUINT32     = 6
	miSINGLE     = 7
	miDOUBLE     = 9
	miINT64      = 12
	miUINT64     = 13
	miMATRIX     = 14
	miCOMPRESSED = 15
	complexFlag  = 0x0800
)

// matElement is a data element: its type and its data.
type matElement struct {
	typ  uint32
	data []byte
}

// matNext splits the first data element off b: an 8-byte tag (type, size) and the data,
// padded to 8 bytes, or a small element of at most 4 bytes in the tag's second word (the
// size in the first word's upper half). It returns the element and what follows it.
func matNext(b []byte, o binary.ByteOrder) (matElement, []byte, error) {
	if len(b) < 8 {
		return matElement{}, nil, errors.New("a data element's tag is cut short")
	}
	typ, n := o.Uint32(b), uint64(o.Uint32(b[4:]))
	if small := typ >> 16; small != 0 {
		if small > 4 {
			return matElement{}, nil, fmt.Errorf("a small data element of %d bytes", small)
		}
		return matElement{typ & 0xFFFF, b[4 : 4+small]}, b[8:], nil
	}
	if n > uint64(len(b)-8) {
		return matElement{}, nil, fmt.Errorf("a data element of %d bytes in the %d left", n, len(b)-8)
	}
	next := 8 + n
	if typ != miCOMPRESSED {
		next = min((next+7)&^7, uint64(len(b)))
	}
	return matElement{typ, b[8 : 8+n]}, b[next:], nil
}

// matElements splits the first n data elements off b (see matNext) and returns them with
// the number of bytes they take.
func matElements(b []byte, o binary.ByteOrder, n int) ([]matElement, int, error) {
	out := make([]matElement, n)
	rest := b
	for i := range out {
		var err error
		if out[i], rest, err = matNext(rest, o); err != nil {
			return nil, 0, err
		}
	}
	return out, len(b) - len(rest), nil
}

// matHeadMax bounds the bytes of a compressed variable inflated to learn its name: its
// array flags (16 bytes), dimensions (8 + 4 per dimension) and name (MATLAB's names have
// at most 63 characters, namelengthmax), for up to 64 dimensions.
const matHeadMax = 512

// matGainMap finds the variable GainMap (a real numeric matrix of sig_y rows and sig_x
// columns, stored column by column) in a level 5 MAT-file. A compressed variable is
// inflated only as far as its name unless it is GainMap, and GainMap only if its size
// fits a matrix of the frames' shape of 8-byte values: a small file cannot inflate to
// more memory than the gain map takes (a "zip bomb").
func matGainMap(b []byte, sig [2]int) ([]float32, error) {
	if len(b) < 128 {
		return nil, errors.New("too short for a MATLAB MAT-file (128-byte header)")
	}
	if bytes.HasPrefix(b, []byte("MATLAB 7.3")) {
		return nil, errs.New(errs.Argument, "a MATLAB 7.3 MAT-file (HDF5) is not read: save the GainMap with save(..., '-v7') or as CSV")
	}
	var o binary.ByteOrder
	switch string(b[126:128]) {
	case "IM":
		o = binary.LittleEndian
	case "MI":
		o = binary.BigEndian
	default:
		return nil, errors.New("not a MATLAB level 5 MAT-file: no endian indicator MI at byte 126")
	}
	var names []string // the first few variables' names, quoted, for the error
	vars := 0
	var zr io.ReadCloser // one decompressor and buffer for every compressed variable
	head := make([]byte, matHeadMax)
	for rest := b[128:]; len(rest) > 0; {
		at := len(b) - len(rest)
		e, next, err := matNext(rest, o)
		if err != nil {
			return nil, fmt.Errorf("MAT-file at byte %d: %w", at, err)
		}
		rest = next
		var z io.Reader
		var size int // a compressed variable's size, of which e.data holds the first bytes
		if e.typ == miCOMPRESSED {
			if zr == nil {
				zr, err = zlib.NewReader(bytes.NewReader(e.data))
			} else {
				err = zr.(zlib.Resetter).Reset(bytes.NewReader(e.data), nil)
			}
			if err != nil {
				return nil, fmt.Errorf("MAT-file: the compressed variable at byte %d: %w", at, err)
			}
			z = zr
			if e, size, err = matInflateHead(z, o, head); err != nil {
				return nil, fmt.Errorf("MAT-file: the compressed variable at byte %d: %w", at, err)
			}
		}
		if e.typ != miMATRIX {
			continue
		}
		sub, n, err := matElements(e.data, o, 3)
		if err != nil {
			return nil, fmt.Errorf("MAT-file: the variable at byte %d: its array flags, dimensions and name are damaged (%v)", at, err)
		}
		name := string(sub[2].data)
		if name != "GainMap" {
			if vars++; vars <= 8 {
				names = append(names, strconv.Quote(name))
			}
			continue
		}
		if len(sub[0].data) < 4 || o.Uint32(sub[0].data)&complexFlag != 0 || sub[1].typ != miINT32 || len(sub[1].data) != 8 {
			return nil, errors.New("MAT-file: GainMap is not a real 2-D matrix")
		}
		rows, cols := int(int32(o.Uint32(sub[1].data))), int(int32(o.Uint32(sub[1].data[4:])))
		if rows != sig[0] || cols != sig[1] {
			return nil, errs.New(errs.Shape, "MAT-file: GainMap is %d×%d, the frames are %d×%d", rows, cols, sig[0], sig[1])
		}
		if z != nil {
			if e.data, err = matInflateRest(z, e.data, size, n, rows*cols); err != nil {
				return nil, fmt.Errorf("MAT-file: GainMap, compressed at byte %d: %w", at, err)
			}
		}
		values, _, err := matNext(e.data[n:], o)
		if err != nil {
			return nil, fmt.Errorf("MAT-file: GainMap's values: %w", err)
		}
		return matValues(values, o, rows, cols)
	}
	if vars > len(names) {
		names = append(names, fmt.Sprintf("and %d more", vars-len(names)))
	}
	return nil, fmt.Errorf("MAT-file: no variable GainMap (variables: %s)", strings.Join(names, ", "))
}

// matInflateHead reads the tag of the variable that the inflated stream z holds and at
// most the first len(buf) bytes of its data (its array flags, dimensions and name) into
// buf; it returns them with the variable's declared size.
func matInflateHead(z io.Reader, o binary.ByteOrder, buf []byte) (matElement, int, error) {
	var tag [8]byte
	if _, err := io.ReadFull(z, tag[:]); err != nil {
		return matElement{}, 0, fmt.Errorf("its tag: %w", err)
	}
	typ, size := o.Uint32(tag[:]), int(o.Uint32(tag[4:]))
	if typ != miMATRIX {
		return matElement{}, 0, fmt.Errorf("holds data type %d, not a variable (miMATRIX, %d)", typ, miMATRIX)
	}
	head := buf[:min(size, len(buf))]
	if _, err := io.ReadFull(z, head); err != nil {
		return matElement{}, 0, fmt.Errorf("a variable of %d bytes: %w", size, err)
	}
	return matElement{typ, head}, size, nil
}

// matInflateRest inflates the rest of a compressed variable of size bytes from z, data
// being its first bytes, of which head are its array flags, dimensions and name, when it
// is a matrix of px values of at most 8 bytes (their tag, 8 bytes, and 8·px bytes): a size
// that is larger is an error before anything more is inflated.
func matInflateRest(z io.Reader, data []byte, size, head, px int) ([]byte, error) {
	if limit := head + 8 + 8*px; size > limit {
		return nil, fmt.Errorf("%d bytes declared, more than the %d of a matrix of %d values of up to 8 bytes: a damaged file or a zip bomb", size, limit, px)
	}
	full := make([]byte, size)
	copy(full, data)
	if _, err := io.ReadFull(z, full[len(data):]); err != nil {
		return nil, fmt.Errorf("inflating its %d bytes: %w", size, err)
	}
	return full, nil
}

// matValues decodes a numeric data element of rows×cols values stored column by column
// into the frames' row-major layout.
func matValues(e matElement, o binary.ByteOrder, rows, cols int) ([]float32, error) {
	sizes := map[uint32]int{miINT8: 1, miUINT8: 1, miINT16: 2, miUINT16: 2, miINT32: 4, miUINT32: 4, miSINGLE: 4, miDOUBLE: 8, miINT64: 8, miUINT64: 8}
	es, ok := sizes[e.typ]
	if !ok {
		return nil, fmt.Errorf("MAT-file: GainMap has data type %d, not a number", e.typ)
	}
	if len(e.data) != rows*cols*es {
		return nil, fmt.Errorf("MAT-file: GainMap holds %d bytes, want %d×%d values of %d bytes", len(e.data), rows, cols, es)
	}
	out := make([]float32, rows*cols)
	for i := range out {
		d := e.data[i*es:]
		var v float64
		switch e.typ {
		case miINT8:
			v = float64(int8(d[0]))
		case miUINT8:
			v = float64(d[0])
		case miINT16:
			v = float64(int16(o.Uint16(d)))
		case miUINT16:
			v = float64(o.Uint16(d))
		case miINT32:
			v = float64(int32(o.Uint32(d)))
		case miUINT32:
			v = float64(o.Uint32(d))
		case miSINGLE:
			v = float64(math.Float32frombits(o.Uint32(d)))
		case miDOUBLE:
			v = math.Float64frombits(o.Uint64(d))
		case miINT64:
			v = float64(int64(o.Uint64(d)))
		case miUINT64:
			v = float64(o.Uint64(d))
		}
		out[(i%rows)*cols+i/rows] = float32(v) // column-major to row-major
	}
	return out, nil
}
