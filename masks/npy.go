package masks

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// npySizes are the element sizes in bytes of the NumPy dtypes LoadNPY converts, by kind.
var npySizes = map[byte][]int{'b': {1}, 'i': {1, 2, 4, 8}, 'u': {1, 2, 4, 8}, 'f': {4, 8}}

// npyDTypeNames say what the dtypes of the kinds LoadNPY refuses hold, in messages.
var npyDTypeNames = map[byte]string{
	'O': " (Python objects)", 'c': " (complex)", 'U': " (strings)", 'S': " (bytes)", 'M': " (datetimes)", 'm': " (timedeltas)", 'V': " (raw or structured)",
}

// LoadNPY reads a mask stack from the NumPy .npy file at path (format:
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html; header parsed
// by internal/npy). The array has shape (sig_y, sig_x), one mask, or
// (n_masks, sig_y, sig_x), in C order, of dtype bool, int8..int64, uint8..uint64,
// float32 or float64 in any byte order (every descr form numpy reads:
// internal/npy.ParseDescr); weights are held in float32, and weights
// float32 does not hold exactly (float64 values, integers beyond 2²⁴) keep the rest in
// the stack's Lo parts for float64 runs (see Split); float64 values beyond the float32
// range are rejected, and so is a mask whose weights are not all 0 but all under 2⁻¹⁰²
// (a *WeightError, as New64's). Masks are named after the file: "name" for a 2D array,
// "name[m]" for mask m of a 3D one.
//
// The weights are read once, block by block, into the form the stack is held in: CSR
// when under DefaultSparseDensity of them are nonzero (a first pass counts them), else
// dense float32 (a little-endian float32 file straight into the stack's memory): no
// copy of the file's array is held beside the stack. Before allocating it, LoadNPY
// checks that the stack fits in memory (internal/memlimit; errs.Resources). A run that
// applies a dense stack may add one copy in the layout its kernels need (packed for 8
// or more masks, float64 for float64 runs), which its memory check counts
// (engine.EstimateMemory, "mask copies").
//
// LoadNPY returns an error naming the file for a file that cannot be read or is not NPY,
// Fortran order, another number of dimensions, an empty axis, another dtype, a data size
// that does not match the shape (bytes after the array's data too, which numpy ignores:
// internal/npy.CheckSize, as for datasets), NaN/Inf weights, or a stack that does not fit
// in memory.
func LoadNPY(path string) (*Stack, error) { return loadNPYFile(path, nil) }

// LoadNPYFor is LoadNPY for frames of sig_shape sig (sig_y, sig_x): a file whose masks
// have another shape is refused from its header, before any weight is read (errs.Shape,
// naming both shapes).
func LoadNPYFor(path string, sig [2]int) (*Stack, error) { return loadNPYFile(path, &sig) }

func loadNPYFile(path string, sig *[2]int) (*Stack, error) {
	s, err := loadNPY(path, sig)
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("mask file %s: %w", path, err))
	}
	return s, nil
}

func loadNPY(path string, sig *[2]int) (*Stack, error) {
	// Only a regular file: opening a FIFO for reading would block.
	f, fileSize, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, offset, err := npy.Read(f, fileSize)
	if err != nil {
		return nil, err
	}
	// The dtype first: an array of another (object, complex, string) holds no weights
	// whatever its shape.
	dtype := h.Descr
	descr, err := npy.ParseDescr(dtype)
	size := descr.Size
	if err != nil || !slices.Contains(npySizes[descr.Kind], size) {
		what := ""
		if kind := strings.TrimLeft(dtype, "<>=|"); kind != "" {
			what = npyDTypeNames[kind[0]]
		}
		return nil, errs.New(errs.DType, "dtype %s%s is not supported for masks (want bool, int8..int64, uint8..uint64, float32 or float64: save masks.astype(np.float32))", npy.QuoteDescr(dtype), what)
	}
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
	if sig != nil && (sy != sig[0] || sx != sig[1]) {
		return nil, errs.New(errs.Shape, "masks of shape (%d, %d) do not match the frames' sig_shape (%d, %d)", sy, sx, sig[0], sig[1])
	}
	if err := checkSig([2]int{sy, sx}); err != nil {
		return nil, err
	}
	if n > MaxWeights/(sy*sx) {
		return nil, tooManyMasks(n, sy, sx)
	}
	if err := npy.CheckSize(h, offset, fileSize, uint64(n*sy*sx)*uint64(size)); err != nil {
		return nil, err
	}
	// Even the read buffer and the masks' names may make the Go heap reserve an arena:
	// checked before either is allocated.
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if err := memlimit.Check("reading the weights", npyBlockBytes+int64(n)*nameBytes(name), "use fewer or smaller masks"); err != nil {
		return nil, err
	}
	names := []string{name}
	if len(h.Shape) == 3 {
		names = make([]string, n)
		for m := range names {
			names[m] = fmt.Sprintf("%s[%d]", name, m)
		}
	}
	w := &npyWeights{f: f, offset: offset, n: n, pixels: sy * sx, sx: sx, descr: descr, names: names}
	nnz, sparse, err := w.countNonzeros()
	if err != nil {
		return nil, err
	}
	if sparse {
		c, err := w.readCSR(nnz)
		if err != nil {
			return nil, err
		}
		return newSparse(n, sy, sx, c, names)
	}
	data, lo, err := w.readDense(h.Shape)
	if err != nil {
		return nil, err
	}
	s, err := New(n, sy, sx, data, names)
	if err != nil {
		return nil, err
	}
	s.Lo = lo // nil, or as long as Data: New checked its length
	return s, nil
}

// npyBlockBytes is the size of the blocks npyWeights reads.
const npyBlockBytes = 1 << 20

// nameBytes bounds the heap that the name of one mask of a stack read from a file named
// name ("name[123]") takes: its string header and its bytes, at most 22 more than name's
// (brackets and index), doubled for the rounding up to the Go heap's size classes.
func nameBytes(name string) int64 { return 16 + 2*int64(len(name)+22) }

// npyWeights reads the n masks of pixels weights of NPY dtype descr that start at offset
// in f.
type npyWeights struct {
	f             *os.File
	offset        int64
	n, pixels, sx int
	descr         npy.Descr
	names         []string // the masks' names, for messages
}

// inexact reports whether the dtype holds values float32 does not (Lo parts may be
// needed): 32- and 64-bit integers and float64.
func (w *npyWeights) inexact() bool {
	return w.descr.Size == 8 || (w.descr.Size == 4 && w.descr.Kind != 'f')
}

// each calls fn for every block of weights, in order, with the block's first element
// and its bytes, until fn returns false or the weights end.
func (w *npyWeights) each(fn func(first int64, b []byte) bool) error {
	size := int64(w.descr.Size)
	total := int64(w.n) * int64(w.pixels)
	buf := make([]byte, npyBlockBytes/size*size)
	for done := int64(0); done < total; {
		k := min(int64(len(buf))/size, total-done)
		b := buf[:k*size]
		if _, err := w.f.ReadAt(b, w.offset+done*size); err != nil {
			return errs.Wrap(errs.IO, fmt.Errorf("reading the weights: %w", err))
		}
		if !fn(done, b) {
			return nil
		}
		done += k
	}
	return nil
}

// nonzeros calls fn for every nonzero weight, in order, with its element index and
// value, until fn returns false or the weights end. It skips zeros 8 bytes at a time (a
// whole number of elements): a sparse stack is mostly zeros.
func (w *npyWeights) nonzeros(fn func(e int64, v float64) bool) error {
	size := w.descr.Size
	decode := w.decoder()
	return w.each(func(first int64, b []byte) bool {
		for i := 0; i < len(b); i += 8 {
			if i+8 <= len(b) && binary.LittleEndian.Uint64(b[i:]) == 0 {
				continue
			}
			for j := i; j < min(i+8, len(b)); j += size {
				if v := decode(b[j:]); v != 0 && !fn(first+int64(j/size), v) {
					return false
				}
			}
		}
		return true
	})
}

// countNonzeros counts the nonzero weights, stopping as soon as there are too many for
// the stack to be applied sparse (DefaultSparseDensity): it returns the count and
// whether the stack is sparse.
func (w *npyWeights) countNonzeros() (int, bool, error) {
	limit := DefaultSparseDensity * float64(w.n) * float64(w.pixels)
	nnz := 0
	err := w.nonzeros(func(int64, float64) bool {
		nnz++
		return float64(nnz) < limit
	})
	return nnz, float64(nnz) < limit, err
}

// readCSR reads the nnz nonzero weights into CSR form, allocated once after checking
// that it fits in memory.
func (w *npyWeights) readCSR(nnz int) (*CSR, error) {
	need := 8*int64(nnz) + 4*int64(w.n+1)
	if w.inexact() {
		need += 4 * int64(nnz) // Lo parts
	}
	if err := memlimit.Check(fmt.Sprintf("the sparse mask stack (%d masks, %d nonzero weights)", w.n, nnz), need, "use fewer or smaller masks"); err != nil {
		return nil, err
	}
	c := &CSR{N: w.n, Pixels: w.pixels, RowPtr: make([]int32, w.n+1), Col: make([]int32, 0, nnz), Val: make([]float32, 0, nnz)}
	pixels := int64(w.pixels)
	largest := newLargestWeights(w.n)
	err := w.nonzeros(func(e int64, v float64) bool {
		largest.add(int(e), w.pixels, v)
		c.appendNonzero(int32(e%pixels), v)
		c.RowPtr[e/pixels+1]++
		return true
	})
	if err = cmp.Or(err, largest.tooLarge(w.names, w.pixels/w.sx, w.sx), largest.check()); err != nil {
		return nil, err
	}
	for m := range w.n {
		c.RowPtr[m+1] += c.RowPtr[m]
	}
	return c, nil
}

// readDense reads the weights dense into float32 and, when some are not exact in
// float32, their Lo parts (see Split), each allocated once after checking that it fits
// in memory. Little-endian float32 weights are read straight into the stack's memory.
func (w *npyWeights) readDense(shape []int) (data, lo []float32, err error) {
	total := w.n * w.pixels
	what := fmt.Sprintf("the dense mask stack of shape %s", npy.ShapeString(shape))
	if err := memlimit.Check(what, 4*int64(total), "use fewer or smaller masks"); err != nil {
		return nil, nil, err
	}
	data = make([]float32, total)
	if w.descr == (npy.Descr{Kind: 'f', Size: 4, BigEndian: npy.HostBigEndian}) {
		if _, err := w.f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*total), w.offset); err != nil {
			return nil, nil, errs.Wrap(errs.IO, fmt.Errorf("reading the weights: %w", err))
		}
		return data, nil, nil
	}
	size := w.descr.Size
	decode := w.decoder()
	var loErr error
	largest := newLargestWeights(w.n)
	err = w.each(func(first int64, b []byte) bool {
		for j := 0; j < len(b); j += size {
			e := first + int64(j/size)
			v := decode(b[j:])
			largest.add(int(e), w.pixels, v)
			hi, l := Split(v)
			data[e] = hi
			if l != 0 && lo == nil {
				if loErr = memlimit.Check(what+" with the float64 rest of its weights", 4*int64(total), "use fewer or smaller masks, or weights exact in float32"); loErr != nil {
					return false
				}
				lo = make([]float32, total)
			}
			if lo != nil {
				lo[e] = l
			}
		}
		return true
	})
	if err = cmp.Or(err, loErr, largest.tooLarge(w.names, w.pixels/w.sx, w.sx), largest.check()); err != nil {
		return nil, nil, err
	}
	return data, lo, nil
}

// decoder returns the converter of one weight to float64 (exact but for 64-bit integers
// beyond 2⁵³).
func (w *npyWeights) decoder() func([]byte) float64 {
	var order binary.ByteOrder = binary.LittleEndian
	if w.descr.BigEndian {
		order = binary.BigEndian
	}
	return npyDecoder(fmt.Sprintf("%c%d", w.descr.Kind, w.descr.Size), order)
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
