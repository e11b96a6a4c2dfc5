//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <hdf5.h>

static hid_t sd_native_uint32(void) { return H5T_NATIVE_UINT32; }
static hid_t sd_native_llong(void) { return H5T_NATIVE_LLONG; }
static hid_t sd_native_ullong(void) { return H5T_NATIVE_ULLONG; }
*/
import "C"

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// EventFile is an HDF5 file opened for the readers of layouts that are not a dense
// stack of frames (stempy's electron counts: variable-length rows of pixel indices,
// attributes giving the shapes). Its methods take the library's global lock, as every
// call into libhdf5 here does, and may be called from several goroutines. Errors name
// the file and the object (errs.Format for a missing or mistyped object, errs.IO for a
// failed read).
type EventFile struct {
	path   string
	file   C.hid_t
	closed bool
}

// OpenEvents opens the HDF5 file at path read-only.
func OpenEvents(path string) (*EventFile, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	h5StartEnv()
	defer h5Enter()()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	file := C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT)
	if file < 0 {
		return nil, openFileError(path, size, h5OpenError("opening the file"))
	}
	return &EventFile{path: path, file: file}, nil
}

// Close closes the file (and any of its objects still open).
func (f *EventFile) Close() error {
	defer h5Enter()()
	if f.closed {
		return nil
	}
	f.closed = true
	if C.H5Fclose(f.file) < 0 {
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", f.path, h5Error("closing the file")))
	}
	return nil
}

// exists reports whether every link of the absolute path obj exists; the lock is held.
func (f *EventFile) exists(obj string) bool {
	p := ""
	for _, part := range strings.Split(strings.Trim(obj, "/"), "/") {
		if part == "" {
			continue
		}
		p += "/" + part
		c := C.CString(p)
		ok := C.H5Lexists(f.file, c, C.H5P_DEFAULT) > 0
		C.free(unsafe.Pointer(c))
		if !ok {
			return false
		}
	}
	return true
}

// Exists reports whether the object at the absolute path obj ("/electron_events/frames")
// exists.
func (f *EventFile) Exists(obj string) bool {
	defer h5Enter()()
	return !f.closed && f.exists(obj)
}

// IntAttr reads the scalar integer attribute name of the object at path obj ("/" for the
// root group); ok is false when the attribute does not exist. An attribute that is not
// one integer is an errs.Format error.
func (f *EventFile) IntAttr(obj, name string) (v int64, ok bool, err error) {
	defer h5Enter()()
	if f.closed || !f.exists(obj) {
		return 0, false, nil
	}
	cobj, cname := C.CString(obj), C.CString(name)
	defer C.free(unsafe.Pointer(cobj))
	defer C.free(unsafe.Pointer(cname))
	if C.H5Aexists_by_name(f.file, cobj, cname, C.H5P_DEFAULT) <= 0 {
		return 0, false, nil
	}
	fail := func(what string) (int64, bool, error) {
		return 0, false, errs.New(errs.Format, "dataset: %s: attribute %s of %s: %s", f.path, name, obj, what)
	}
	a := C.H5Aopen_by_name(f.file, cobj, cname, C.H5P_DEFAULT, C.H5P_DEFAULT)
	if a < 0 {
		return fail(h5Error("cannot be opened").Error())
	}
	defer C.H5Aclose(a)
	space := C.H5Aget_space(a)
	defer C.H5Sclose(space)
	typ := C.H5Aget_type(a)
	defer C.H5Tclose(typ)
	if C.H5Sget_simple_extent_npoints(space) != 1 || C.H5Tget_class(typ) != C.H5T_INTEGER {
		return fail("not a single integer")
	}
	var out C.longlong
	if C.H5Aread(a, intType(typ), unsafe.Pointer(&out)) < 0 {
		return fail(h5Error("cannot be read").Error())
	}
	if C.H5Tget_sign(typ) == C.H5T_SGN_NONE && out < 0 {
		return 0, false, errs.New(errs.Format, "dataset: %s: attribute %s of %s is %d, more than %d", f.path, name, obj, uint64(out), int64(math.MaxInt64))
	}
	return int64(out), true, nil
}

// intType is the memory type in which integers of the file type typ are read: unsigned
// long long for unsigned integers, so that a value above 2⁶³−1 is read as stored, not
// clamped to 2⁶³−1 by libhdf5's conversion (it then reads negative as an int64: the
// callers refuse it, naming it as uint64); long long otherwise.
func intType(typ C.hid_t) C.hid_t {
	if C.H5Tget_sign(typ) == C.H5T_SGN_NONE {
		return C.sd_native_ullong()
	}
	return C.sd_native_llong()
}

// dataset1D opens the 1-D dataset at path obj and returns it with its length; the lock
// is held. The caller closes it.
func (f *EventFile) dataset1D(obj string) (C.hid_t, int, error) {
	if f.closed {
		return -1, 0, errs.New(errs.IO, "dataset: %s: read after Close", f.path)
	}
	if !f.exists(obj) {
		return -1, 0, errs.New(errs.Format, "dataset: %s: no dataset %s", f.path, obj)
	}
	c := C.CString(obj)
	defer C.free(unsafe.Pointer(c))
	set := C.H5Dopen2(f.file, c, C.H5P_DEFAULT)
	if set < 0 {
		return -1, 0, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %s: %w", f.path, obj, h5Error("not a dataset")))
	}
	space := C.H5Dget_space(set)
	defer C.H5Sclose(space)
	var dims [1]C.hsize_t
	if C.H5Sget_simple_extent_ndims(space) != 1 || C.H5Sget_simple_extent_dims(space, &dims[0], nil) != 1 || uint64(dims[0]) > 1<<40 {
		C.H5Dclose(set)
		return -1, 0, errs.New(errs.Format, "dataset: %s: %s is not a 1-D dataset", f.path, obj)
	}
	return set, int(dims[0]), nil
}

// Ints reads the whole 1-D integer dataset at path obj (at most limit elements: a larger
// one is an errs.Format error, as is an unsigned value above 2⁶³−1, named as stored).
func (f *EventFile) Ints(obj string, limit int) ([]int64, error) {
	defer h5Enter()()
	set, n, err := f.dataset1D(obj)
	if err != nil {
		return nil, err
	}
	defer C.H5Dclose(set)
	typ := C.H5Dget_type(set)
	defer C.H5Tclose(typ)
	if C.H5Tget_class(typ) != C.H5T_INTEGER {
		return nil, errs.New(errs.Format, "dataset: %s: %s is not an integer dataset", f.path, obj)
	}
	if n > limit {
		return nil, errs.New(errs.Format, "dataset: %s: %s holds %d values, more than %d", f.path, obj, n, limit)
	}
	out := make([]int64, n)
	if n == 0 {
		return out, nil
	}
	if C.H5Dread(set, intType(typ), C.H5S_ALL, C.H5S_ALL, C.H5P_DEFAULT, unsafe.Pointer(&out[0])) < 0 {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %s: %w", f.path, obj, h5Error("reading")))
	}
	if C.H5Tget_sign(typ) == C.H5T_SGN_NONE {
		for i, v := range out {
			if v < 0 {
				return nil, errs.New(errs.Format, "dataset: %s: %s[%d] is %d, more than %d", f.path, obj, i, uint64(v), int64(math.MaxInt64))
			}
		}
	}
	return out, nil
}

// VLenRows is a 1-D dataset of variable-length rows of integers (h5py's
// special_dtype(vlen=np.uint32)), read as uint32 by ranges of rows.
type VLenRows struct {
	f   *EventFile
	obj string
	set C.hid_t
	mem C.hid_t // vlen of native uint32
	n   int
}

// VLen opens the 1-D dataset of variable-length integer rows at path obj. Another
// dataset (fixed-size rows, floats, another rank) is an errs.Format error; rows of
// signed integers or of more than 32 bits are errs.DType (read as uint32, HDF5 would
// clamp their values).
func (f *EventFile) VLen(obj string) (*VLenRows, error) {
	defer h5Enter()()
	set, n, err := f.dataset1D(obj)
	if err != nil {
		return nil, err
	}
	typ := C.H5Dget_type(set)
	defer C.H5Tclose(typ)
	ok := C.H5Tget_class(typ) == C.H5T_VLEN
	refused := "" // the rows' integer type when HDF5 could not convert it to uint32 exactly
	if ok {
		base := C.H5Tget_super(typ)
		ok = base >= 0 && C.H5Tget_class(base) == C.H5T_INTEGER
		if ok {
			if size := int(C.H5Tget_size(base)); C.H5Tget_sign(base) != C.H5T_SGN_NONE {
				refused = fmt.Sprintf("int%d", 8*size)
			} else if size > 4 {
				refused = fmt.Sprintf("uint%d", 8*size)
			}
		}
		if base >= 0 {
			C.H5Tclose(base)
		}
	}
	if !ok || refused != "" {
		C.H5Dclose(set)
	}
	if !ok {
		return nil, errs.New(errs.Format, "dataset: %s: %s is not a dataset of variable-length integer rows", f.path, obj)
	}
	if refused != "" { // HDF5 would read a negative index as 0, one past 2^32-1 as 2^32-1
		return nil, errs.New(errs.DType, "dataset: %s: %s holds rows of %s: only rows of unsigned integers of up to 32 bits are read (uint8, uint16, uint32; stempy writes uint32)", f.path, obj, refused)
	}
	return &VLenRows{f: f, obj: obj, set: set, mem: C.H5Tvlen_create(C.sd_native_uint32()), n: n}, nil
}

// Len is the number of rows.
func (v *VLenRows) Len() int { return v.n }

// Close closes the dataset.
func (v *VLenRows) Close() {
	defer h5Enter()()
	if !v.f.closed {
		C.H5Tclose(v.mem)
		C.H5Dclose(v.set)
	}
}

// Read reads rows [start, end) and calls fn with each row's values, in order, with the
// library's lock held (fn must not call into this package); vals is valid during the
// call only. A value that does not fit in uint32 fails the read; an error of fn stops
// it and is returned.
func (v *VLenRows) Read(start, end int, fn func(row int, vals []uint32) error) error {
	if start < 0 || end > v.n || start > end {
		return errs.New(errs.Argument, "dataset: %s: rows [%d, %d) of %s outside its %d rows", v.f.path, start, end, v.obj, v.n)
	}
	if start == end {
		return nil
	}
	defer h5Enter()()
	if v.f.closed {
		return errs.New(errs.IO, "dataset: %s: read after Close", v.f.path)
	}
	n := end - start
	fspace := C.H5Dget_space(v.set)
	defer C.H5Sclose(fspace)
	off, count := [1]C.hsize_t{C.hsize_t(start)}, [1]C.hsize_t{C.hsize_t(n)}
	if C.H5Sselect_hyperslab(fspace, C.H5S_SELECT_SET, &off[0], nil, &count[0], nil) < 0 {
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %s: %w", v.f.path, v.obj, h5Error("selecting rows")))
	}
	mspace := C.H5Screate_simple(1, &count[0], nil)
	defer C.H5Sclose(mspace)
	buf := (*C.hvl_t)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.hvl_t{}))))
	if buf == nil {
		return errs.New(errs.Resources, "dataset: %s: no memory for %d rows of %s", v.f.path, n, v.obj)
	}
	defer C.free(unsafe.Pointer(buf))
	if C.H5Dread(v.set, v.mem, mspace, fspace, C.H5P_DEFAULT, unsafe.Pointer(buf)) < 0 {
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %s rows [%d, %d): %w", v.f.path, v.obj, start, end, h5Error("reading")))
	}
	defer C.H5Dvlen_reclaim(v.mem, mspace, C.H5P_DEFAULT, unsafe.Pointer(buf))
	for i, row := range unsafe.Slice(buf, n) {
		var vals []uint32
		if row.len > 0 && row.p != nil {
			vals = unsafe.Slice((*uint32)(row.p), int(row.len))
		}
		if err := fn(start+i, vals); err != nil {
			return err
		}
	}
	return nil
}
