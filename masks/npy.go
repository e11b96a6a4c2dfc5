package masks

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	npyio "codeberg.org/sbinet/npyio/npy"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// npySizes are the element sizes in bytes of the NumPy dtypes LoadNPY converts, by kind.
var npySizes = map[byte][]int{'b': {1}, 'i': {1, 2, 4, 8}, 'u': {1, 2, 4, 8}, 'f': {4, 8}}

// LoadNPY reads a mask stack from the NumPy .npy file at path (format:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html), read with
// codeberg.org/sbinet/npyio after the checks of internal/npyheader. The array has shape (sig_y, sig_x), one mask, or
// (n_masks, sig_y, sig_x), in C order, of dtype bool, int8..int64, uint8..uint64,
// float32 or float64 in either byte order; weights are held in float32, and weights
// float32 does not hold exactly (float64 values, integers beyond 2²⁴) keep the rest in
// the stack's Lo parts for float64 runs (see Split); float64 values beyond the float32
// range are rejected. Masks are named after the file: "name" for a 2D array,
// "name[m]" for mask m of a 3D one. LoadNPY returns an error naming the file for a file
// that cannot be read or is not NPY, Fortran order, another number of dimensions, an
// empty axis, another dtype, a data size that does not match the shape, or NaN/Inf
// weights.
func LoadNPY(path string) (*Stack, error) {
	s, err := loadNPY(path)
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("mask file %s: %w", path, err))
	}
	return s, nil
}

func loadNPY(path string) (*Stack, error) {
	// Only a regular file: opening a FIFO for reading would block.
	f, fileSize, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, offset, err := npy.Read(f, fileSize)
	if err != nil {
		return nil, err
	}
	h := r.Header.Descr
	if h.Fortran {
		return nil, fmt.Errorf("array is in Fortran order, want C order (save np.ascontiguousarray(masks))")
	}
	var n, sy, sx int
	switch len(h.Shape) {
	case 2:
		n, sy, sx = 1, h.Shape[0], h.Shape[1]
	case 3:
		n, sy, sx = h.Shape[0], h.Shape[1], h.Shape[2]
	default:
		return nil, fmt.Errorf("array shape %s has %d dimensions, want (sig_y, sig_x) or (n_masks, sig_y, sig_x)", npy.ShapeString(h.Shape), len(h.Shape))
	}
	if n < 1 || sy < 1 || sx < 1 {
		return nil, fmt.Errorf("array shape %s has an empty axis", npy.ShapeString(h.Shape))
	}
	if err := checkSig([2]int{sy, sx}); err != nil {
		return nil, err
	}
	if n > MaxWeights/(sy*sx) {
		return nil, tooManyMasks(n, sy, sx)
	}
	dtype := strings.Trim(h.Type, "'\"")
	descr, err := npy.ParseDescr(dtype)
	size := descr.Size
	if err != nil || !slices.Contains(npySizes[descr.Kind], size) {
		return nil, fmt.Errorf("dtype %s is not supported (want bool, int8..int64, uint8..uint64, float32 or float64)", h.Type)
	}
	if want := int64(n*sy*sx) * int64(size); fileSize-offset != want {
		return nil, fmt.Errorf("array of shape %v and dtype %s needs %d data bytes, file has %d", h.Shape, dtype, want, fileSize-offset)
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	names := []string{name}
	if len(h.Shape) == 3 {
		names = make([]string, n)
		for m := range names {
			names[m] = fmt.Sprintf("%s[%d]", name, m)
		}
	}
	// A stack with few nonzero weights is read straight into CSR form, block by block,
	// never dense.
	c, err := readSparseNPY(f, offset, n, sy*sx, descr)
	if err != nil {
		return nil, err
	}
	if c != nil {
		return newSparse(n, sy, sx, c, names)
	}
	// The file's array, then (but for float32) its weights in float64, then the stack:
	// float32 weights and, for weights float32 does not hold exactly, their Lo parts.
	need := int64(n*sy*sx) * int64(size+4)
	if descr.Kind != 'f' || size != 4 {
		need += int64(n*sy*sx) * 12
	}
	if err := memlimit.Check(fmt.Sprintf("the dense mask stack of shape %v", h.Shape), need, "use fewer or smaller masks"); err != nil {
		return nil, err
	}
	var arr npyio.Array
	if err := r.Read(&arr); err != nil {
		return nil, err
	}
	if data, ok := arr.Data().([]float32); ok {
		return New(n, sy, sx, data, names)
	}
	data, err := toFloat64(arr.Data())
	if err != nil {
		return nil, err
	}
	return New64(n, sy, sx, data, names)
}

// npyBlockBytes is the size of the blocks readSparseNPY reads.
const npyBlockBytes = 1 << 20

// readSparseNPY reads n masks of pixels weights of NPY dtype descr from f at offset into
// CSR form, block by block. It returns nil
// (and no error) as soon as the stack has too many nonzero weights to be applied sparse
// (DefaultSparseDensity), for the caller to read it dense.
func readSparseNPY(f *os.File, offset int64, n, pixels int, descr npy.Descr) (*CSR, error) {
	size := descr.Size
	var order binary.ByteOrder = binary.LittleEndian
	if descr.BigEndian {
		order = binary.BigEndian
	}
	decode := npyDecoder(fmt.Sprintf("%c%d", descr.Kind, size), order)
	total := int64(n) * int64(pixels)
	limit := int64(DefaultSparseDensity * float64(total))
	c := &CSR{N: n, Pixels: pixels, RowPtr: make([]int32, n+1)}
	buf := make([]byte, npyBlockBytes/size*size)
	var done int64 // elements read
	for done < total {
		k := min(int64(len(buf)/size), total-done)
		b := buf[:k*int64(size)]
		if _, err := f.ReadAt(b, offset+done*int64(size)); err != nil {
			return nil, errs.Wrap(errs.IO, fmt.Errorf("reading the weights: %w", err))
		}
		// Look at 8 bytes at a time (a whole number of elements): a sparse stack is
		// mostly zeros.
		for w := 0; w < len(b); w += 8 {
			if w+8 <= len(b) && binary.LittleEndian.Uint64(b[w:]) == 0 {
				continue
			}
			for j := w; j < min(w+8, len(b)); j += size {
				v := decode(b[j:])
				if v == 0 {
					continue
				}
				e := done + int64(j/size)
				m := int(e / int64(pixels))
				c.appendNonzero(int32(e%int64(pixels)), v)
				c.RowPtr[m+1]++
				if int64(len(c.Val)) > limit {
					return nil, nil
				}
			}
		}
		done += k
	}
	for m := range n {
		c.RowPtr[m+1] += c.RowPtr[m]
	}
	return c, nil
}

// npyDecoder returns the converter of one element of NPY type code (b1, i1..i8, u1..u8,
// f4, f8) in byte order order to float64 (exact but for 64-bit integers beyond 2⁵³).
func npyDecoder(code string, order binary.ByteOrder) func([]byte) float64 {
	switch code {
	case "b1":
		return func(b []byte) float64 { return float64(min(b[0], 1)) }
	case "i1":
		return func(b []byte) float64 { return float64(int8(b[0])) }
	case "u1":
		return func(b []byte) float64 { return float64(b[0]) }
	case "i2":
		return func(b []byte) float64 { return float64(int16(order.Uint16(b))) }
	case "u2":
		return func(b []byte) float64 { return float64(order.Uint16(b)) }
	case "i4":
		return func(b []byte) float64 { return float64(int32(order.Uint32(b))) }
	case "u4":
		return func(b []byte) float64 { return float64(order.Uint32(b)) }
	case "i8":
		return func(b []byte) float64 { return float64(int64(order.Uint64(b))) }
	case "u8":
		return func(b []byte) float64 { return float64(order.Uint64(b)) }
	case "f4":
		return func(b []byte) float64 { return float64(math.Float32frombits(order.Uint32(b))) }
	}
	return func(b []byte) float64 { return math.Float64frombits(order.Uint64(b)) }
}

// toFloat64 converts the flat array data decoded by npyio to float64.
func toFloat64(data any) ([]float64, error) {
	switch d := data.(type) {
	case []float64:
		return d, nil
	case []int8:
		return convert(d), nil
	case []int16:
		return convert(d), nil
	case []int32:
		return convert(d), nil
	case []int64:
		return convert(d), nil
	case []uint8:
		return convert(d), nil
	case []uint16:
		return convert(d), nil
	case []uint32:
		return convert(d), nil
	case []uint64:
		return convert(d), nil
	case []bool:
		out := make([]float64, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("npyio decoded the array as %T, want a numeric slice", data)
}

func convert[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64](d []T) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v)
	}
	return out
}
