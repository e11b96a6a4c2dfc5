// Package npy reads NumPy .npy files of frames for package dataset: importing it
// registers the format "npy" (extension .npy, or a file starting "\x93NUMPY").
//
// The NPY format (versions 1.0, 2.0 and 3.0) is numpy's, as described in
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html: a header
// giving the array's dtype ("descr"), order and shape, then its data. Shapes: (sig_y,
// sig_x) is one frame (nav shape (1, 1)); of more axes, those before the last two are the
// nav shape as stored, as LiberTEM reads them (dataset.NavFromAxes): (n, sig_y, sig_x)
// has nav shape (n,), (nav_y, nav_x, sig_y, sig_x) (nav_y, nav_x), (nav_z, nav_y,
// nav_x, sig_y, sig_x) (nav_z, nav_y, nav_x), size-1 axes kept; an array of more nav
// axes is refused unless option nav_shape gives its frames at most 3 (dataset.MaxNavDims).
// The dtypes u1, u2, u4, i1, i2, i4, f4 and f8 of either byte
// order are read; others (int64, complex, bool, ...) are refused naming them, as are
// Fortran-order arrays. Frames in host byte order are viewed in place from a read-only
// mapping (dataset.OpenFlat).
package npy

import (
	"fmt"

	"github.com/stemdot/stemdot/dataset"
	npyfile "github.com/stemdot/stemdot/internal/npy"
)

func init() {
	dataset.Register(dataset.Format{Name: "npy", Extensions: []string{".npy"}, Magic: []string{"\x93NUMPY"}, Open: open,
		Describe: "npy (NumPy array: .npy)"})
}

// open opens a NumPy .npy file. The header is parsed by internal/npy as numpy reads it
// (any descr form of its dtypes, no '\n' needed); bytes after the array's data, which
// numpy ignores, are refused (internal/npy.CheckSize), as in mask files: they may mean a
// header that does not describe the file. Frames are then read straight from the file.
func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (dataset.Dataset, error) {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: "+format, append([]any{path}, args...)...)
	}
	hdr, offset, err := npyfile.Read(f, size)
	if err != nil {
		return fail("%v", err)
	}
	if hdr.Fortran {
		return fail("Fortran-order (column-major) NPY arrays are not supported; save the array in C order (numpy.ascontiguousarray)")
	}
	dt, bigEndian, err := parseDType(hdr.Descr)
	if err != nil {
		return fail("%v", err)
	}
	var sig [2]int
	var fileNav []int
	switch s := hdr.Shape; len(s) {
	case 0, 1:
		return fail("NPY shape %s is not (sig_y, sig_x), (n, sig_y, sig_x), (nav_y, nav_x, sig_y, sig_x) or (nav_z, nav_y, nav_x, sig_y, sig_x)", npyfile.ShapeString(s))
	case 2:
		sig, fileNav = [2]int{s[0], s[1]}, []int{1, 1}
	default: // Reconcile refuses more than 3 nav axes unless option nav_shape reshapes them
		sig, fileNav = [2]int{s[len(s)-2], s[len(s)-1]}, dataset.NavFromAxes(s[:len(s)-2])
	}
	for _, n := range hdr.Shape {
		if n <= 0 {
			return fail("NPY shape %s has an empty axis", npyfile.ShapeString(hdr.Shape))
		}
	}
	frames, frameBytes, err := dataset.CheckShape(fileNav, sig, dt)
	if err != nil {
		return fail("NPY shape %s: %v", npyfile.ShapeString(hdr.Shape), err)
	}
	// CheckShape bounds frames·frameBytes by MaxInt. Bytes after the data are refused, as
	// by the mask files (internal/npyfile.CheckSize).
	if err := npyfile.CheckSize(hdr, offset, size, uint64(frames)*uint64(frameBytes)); err != nil {
		return fail("%v", err)
	}
	fl := dataset.Flat{Format: "npy", Path: path, File: f, Size: size, Offset: offset, Sig: sig, DType: dt, BigEndian: bigEndian}
	return dataset.OpenFlat(fl, opt, fileNav, " from the NPY shape", dataset.FileFrames{Whole: frames, RecordBytes: int64(frameBytes),
		Series: len(hdr.Shape) <= 3})
}

// kinds maps NPY kind and element size to DTypes.
var kinds = map[npyfile.Descr]dataset.DType{
	{Kind: 'u', Size: 1}: dataset.Uint8, {Kind: 'u', Size: 2}: dataset.Uint16, {Kind: 'u', Size: 4}: dataset.Uint32,
	{Kind: 'i', Size: 1}: dataset.Int8, {Kind: 'i', Size: 2}: dataset.Int16, {Kind: 'i', Size: 4}: dataset.Int32,
	{Kind: 'f', Size: 4}: dataset.Float32, {Kind: 'f', Size: 8}: dataset.Float64,
}

// parseDType parses an NPY descr such as '<u2' or '|u1' into a DType and its byte order.
func parseDType(descr string) (dataset.DType, bool, error) {
	d, err := npyfile.ParseDescr(descr)
	if err != nil {
		return dataset.Invalid, false, err
	}
	dt, ok := kinds[npyfile.Descr{Kind: d.Kind, Size: d.Size}]
	if !ok {
		return dataset.Invalid, false, fmt.Errorf("unsupported NPY dtype %s (want u1, u2, u4, i1, i2, i4, f4 or f8, any byte order)", npyfile.QuoteDescr(descr))
	}
	return dt, d.BigEndian, nil
}
