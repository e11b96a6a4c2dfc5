package dataset

import (
	"fmt"

	"github.com/stemdot/stemdot/internal/npy"
)

// openNPY opens a NumPy .npy file (format versions 1.0, 2.0 and 3.0, as described in
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html). The header is
// parsed by internal/npy; frames are then read straight from the file.
// Shapes: (sig_y, sig_x) is one frame (nav shape (1, 1)), (n, sig_y, sig_x) has nav
// shape (n,), as in LiberTEM, (nav_y, nav_x, sig_y, sig_x) has nav shape (nav_y, nav_x).
// The header is read as numpy reads it (any descr form of its dtypes, no '\n' needed);
// bytes after the array's data, which numpy ignores, are refused (npy.CheckSize), as in
// mask files: they may mean a header that does not describe the file.
func openNPY(path string, opt Options) (Dataset, error) {
	f, size, err := openFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (Dataset, error) {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: "+format, append([]any{path}, args...)...)
	}
	hdr, offset, err := npy.Read(f, size)
	if err != nil {
		return fail("%v", err)
	}
	if hdr.Fortran {
		return fail("Fortran-order (column-major) NPY arrays are not supported; save the array in C order (numpy.ascontiguousarray)")
	}
	dt, bigEndian, err := npyDType(hdr.Descr)
	if err != nil {
		return fail("%v", err)
	}
	var sig [2]int
	var fileNav []int
	switch s := hdr.Shape; len(s) {
	case 2:
		sig, fileNav = [2]int{s[0], s[1]}, []int{1, 1}
	case 3:
		sig, fileNav = [2]int{s[1], s[2]}, []int{s[0]}
	case 4:
		sig, fileNav = [2]int{s[2], s[3]}, []int{s[0], s[1]}
	case 5: // as HDF5's rank 5: (t, y, x) → (t·y, x), size-1 axes dropped
		sig, fileNav = [2]int{s[3], s[4]}, NavFromAxes(s[:3])
	default:
		return fail("NPY shape %s is not (sig_y, sig_x), (n, sig_y, sig_x), (nav_y, nav_x, sig_y, sig_x) or (t, nav_y, nav_x, sig_y, sig_x)", npy.ShapeString(s))
	}
	for _, n := range hdr.Shape {
		if n <= 0 {
			return fail("NPY shape %s has an empty axis", npy.ShapeString(hdr.Shape))
		}
	}
	frames, frameBytes, err := CheckShape(fileNav, sig, dt)
	if err != nil {
		return fail("NPY shape %s: %v", npy.ShapeString(hdr.Shape), err)
	}
	// CheckShape bounds frames·frameBytes by MaxInt. Bytes after the data are refused, as
	// by the mask files (internal/npy.CheckSize).
	if err := npy.CheckSize(hdr, offset, size, uint64(frames)*uint64(frameBytes)); err != nil {
		return fail("%v", err)
	}
	d := &flatFile{format: "npy", path: path, f: f, offset: offset, nav: []int{1, frames}, sig: sig, dt: dt, bigEndian: bigEndian}
	file := newFlatDataset(d, size)
	ds, err := finishFrames(file, opt, fileNav, " from the NPY shape", fileFrames{whole: frames, recordBytes: int64(frameBytes), series: len(hdr.Shape) <= 3})
	if err != nil {
		file.Close()
		return nil, err
	}
	return ds, nil
}

// npyKinds maps NPY kind and element size to DTypes.
var npyKinds = map[npy.Descr]DType{
	{Kind: 'u', Size: 1}: Uint8, {Kind: 'u', Size: 2}: Uint16, {Kind: 'u', Size: 4}: Uint32,
	{Kind: 'i', Size: 1}: Int8, {Kind: 'i', Size: 2}: Int16, {Kind: 'i', Size: 4}: Int32,
	{Kind: 'f', Size: 4}: Float32, {Kind: 'f', Size: 8}: Float64,
}

// npyDType parses an NPY descr such as '<u2' or '|u1' into a DType and its byte order.
func npyDType(descr string) (DType, bool, error) {
	d, err := npy.ParseDescr(descr)
	if err != nil {
		return Invalid, false, err
	}
	dt, ok := npyKinds[npy.Descr{Kind: d.Kind, Size: d.Size}]
	if !ok {
		return Invalid, false, fmt.Errorf("unsupported NPY dtype '%s' (want u1, u2, u4, i1, i2, i4, f4 or f8, any byte order)", descr)
	}
	return dt, d.BigEndian, nil
}

// npyDescr is the little-endian NPY descr of a valid dt ("<u2", "|u1", ...).
func npyDescr(dt DType) string {
	for d, t := range npyKinds {
		if t == dt {
			return d.String()
		}
	}
	return ""
}
