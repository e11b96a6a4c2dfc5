//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <string.h>
#include <hdf5.h>

// sd_core_create creates an HDF5 file in memory (the core driver, no backing file), for
// H5Fget_file_image.
static hid_t sd_core_create(void) {
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0) return -1;
	hid_t f = -1;
	if (H5Pset_fapl_core(fapl, 1 << 20, 0) >= 0) f = H5Fcreate("stemdot-result.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	H5Pclose(fapl);
	return f;
}

// sd_attr writes the attribute name of obj: n values (a scalar when n is 0) of the
// memory type, with a file type ftype (the memory type when -1).
static herr_t sd_put_attr(hid_t obj, const char *name, hid_t mtype, hid_t ftype, const void *buf, hsize_t n) {
	hid_t space = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, NULL);
	if (space < 0) return -1;
	hid_t a = H5Acreate2(obj, name, ftype < 0 ? mtype : ftype, space, H5P_DEFAULT, H5P_DEFAULT);
	herr_t err = -1;
	if (a >= 0) {
		err = H5Awrite(a, mtype, buf);
		H5Aclose(a);
	}
	H5Sclose(space);
	return err;
}

// sd_put_strings writes n variable-length UTF-8 strings (a scalar when scalar is set)
// as the attribute name of obj, as h5py writes str values.
static herr_t sd_put_strings(hid_t obj, const char *name, const char **values, hsize_t n, int scalar) {
	hid_t t = H5Tcopy(H5T_C_S1);
	if (t < 0) return -1;
	herr_t err = -1;
	if (H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0) err = sd_put_attr(obj, name, t, -1, values, scalar ? 0 : n);
	H5Tclose(t);
	return err;
}

// sd_put_bool writes v as a scalar attribute of numpy's bool type as h5py stores it:
// an enum of int8, FALSE 0 and TRUE 1.
static herr_t sd_put_bool(hid_t obj, const char *name, int v) {
	hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
	if (t < 0) return -1;
	signed char f = 0, tr = 1, val = v ? 1 : 0;
	herr_t err = -1;
	if (H5Tenum_insert(t, "FALSE", &f) >= 0 && H5Tenum_insert(t, "TRUE", &tr) >= 0) err = sd_put_attr(obj, name, t, -1, &val, 0);
	H5Tclose(t);
	return err;
}

// sd_put_data writes the dataset name in loc: rank dims of float64 (f64) or float32 values.
static herr_t sd_put_data(hid_t loc, const char *name, int rank, const hsize_t *dims, int f64, const void *buf) {
	hid_t space = H5Screate_simple(rank, dims, NULL);
	if (space < 0) return -1;
	hid_t t = f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
	hid_t set = H5Dcreate2(loc, name, f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	herr_t err = -1;
	if (set >= 0) {
		err = H5Dwrite(set, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
		H5Dclose(set);
	}
	H5Sclose(space);
	return err;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/stemdot/stemdot/errs"
)

// ResultImage returns the bytes of an HDF5 file holding r in HyperSpy's HSPY layout
// (file_format "HyperSpy", file_format_version "3.3", as RosettaSciIO's hspy writer lays
// it out and hs.load reads it): root attributes file_format and file_format_version,
// group /Experiments/<Title> with the data set "data" (float32 or float64), groups
// axis-0, axis-1, ... (one per data axis, attributes _type "UniformDataAxis", name,
// scale, offset, units (when known), size, navigate, is_binned), metadata/General
// (title), metadata/Signal (signal_type ""), and original_metadata (r.Provenance). The
// file is built in memory (libhdf5's core driver), so that the caller writes it
// atomically. Errors are errs.Internal, naming libhdf5's message.
func ResultImage(r ResultFile) ([]byte, error) {
	if len(r.Axes) != len(r.Shape) {
		return nil, errs.New(errs.Internal, "hdf5: %d axes for data of shape %v", len(r.Axes), r.Shape)
	}
	exit := h5Enter()
	defer exit()
	f := C.sd_core_create()
	if f < 0 {
		return nil, errs.Wrap(errs.Internal, h5Error("creating the result file in memory"))
	}
	defer C.H5Fclose(f)
	fail := func(what string) error { return errs.Wrap(errs.Internal, h5Error(what)) }
	var frees []unsafe.Pointer
	defer func() {
		for _, p := range frees {
			C.free(p)
		}
	}()
	str := func(s string) *C.char {
		c := C.CString(s)
		frees = append(frees, unsafe.Pointer(c))
		return c
	}
	strs := func(obj C.hid_t, a StringsAttr) error {
		if len(a.Values) == 0 && !a.Array {
			return nil
		}
		list := C.malloc(C.size_t(max(len(a.Values), 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
		frees = append(frees, list)
		ptrs := unsafe.Slice((**C.char)(list), max(len(a.Values), 1))
		for i, v := range a.Values {
			ptrs[i] = str(v)
		}
		scalar := C.int(0)
		if len(a.Values) == 1 && !a.Array {
			scalar = 1
		}
		if C.sd_put_strings(obj, str(a.Name), (**C.char)(list), C.hsize_t(len(a.Values)), scalar) < 0 {
			return fail(fmt.Sprintf("writing attribute %q", a.Name))
		}
		return nil
	}
	f64 := func(obj C.hid_t, name string, v float64) error {
		c := C.double(v)
		if C.sd_put_attr(obj, str(name), C.H5T_NATIVE_DOUBLE, C.H5T_IEEE_F64LE, unsafe.Pointer(&c), 0) < 0 {
			return fail(fmt.Sprintf("writing attribute %q", name))
		}
		return nil
	}
	var groups []C.hid_t
	defer func() {
		for _, g := range groups {
			C.H5Gclose(g)
		}
	}()
	// path creates the groups names, each in the one before, from loc on.
	path := func(loc C.hid_t, names ...string) (C.hid_t, error) {
		for _, n := range names {
			if loc = C.H5Gcreate2(loc, str(n), C.H5P_DEFAULT, C.H5P_DEFAULT, C.H5P_DEFAULT); loc < 0 {
				return -1, fail(fmt.Sprintf("creating group %q", n))
			}
			groups = append(groups, loc)
		}
		return loc, nil
	}
	err := func() error {
		if err := strs(f, StringsAttr{Name: "file_format", Values: []string{"HyperSpy"}}); err != nil {
			return err
		}
		if err := strs(f, StringsAttr{Name: "file_format_version", Values: []string{"3.3"}}); err != nil {
			return err
		}
		exp, err := path(f, "Experiments", r.Title)
		if err != nil {
			return err
		}
		dims := make([]C.hsize_t, len(r.Shape))
		n := 1
		for i, d := range r.Shape {
			dims[i] = C.hsize_t(d)
			n *= d
		}
		var buf unsafe.Pointer
		isF64 := C.int(0)
		switch {
		case r.F64 != nil && len(r.F64) == n:
			buf, isF64 = unsafe.Pointer(unsafe.SliceData(r.F64)), 1
		case r.F64 == nil && len(r.F32) == n:
			buf = unsafe.Pointer(unsafe.SliceData(r.F32))
		default:
			return errs.New(errs.Internal, "hdf5: %d float32 and %d float64 values for data of shape %v", len(r.F32), len(r.F64), r.Shape)
		}
		if n == 0 {
			return errs.New(errs.Internal, "hdf5: no data (shape %v)", r.Shape)
		}
		if C.sd_put_data(exp, str("data"), C.int(len(dims)), &dims[0], isF64, buf) < 0 {
			return fail("writing the data")
		}
		set := C.H5Dopen2(exp, str("data"), C.H5P_DEFAULT)
		if set < 0 {
			return fail("opening the data")
		}
		defer C.H5Dclose(set)
		for _, a := range r.DataAttrs {
			if err := strs(set, a); err != nil {
				return err
			}
		}
		for i, a := range r.Axes {
			g, err := path(exp, fmt.Sprintf("axis-%d", i))
			if err != nil {
				return err
			}
			scale := a.Scale
			if scale == 0 {
				scale = 1
			}
			size := C.longlong(r.Shape[i])
			attrs := []error{
				strs(g, StringsAttr{Name: "_type", Values: []string{"UniformDataAxis"}}),
				strs(g, StringsAttr{Name: "name", Values: []string{a.Name}}),
				f64(g, "scale", scale), f64(g, "offset", a.Offset),
				strs(g, StringsAttr{Name: "units", Values: nonEmpty(a.Units)}),
			}
			if C.sd_put_attr(g, str("size"), C.H5T_NATIVE_LLONG, C.H5T_STD_I64LE, unsafe.Pointer(&size), 0) < 0 {
				attrs = append(attrs, fail("writing attribute size"))
			}
			nav := C.int(0)
			if a.Navigate {
				nav = 1
			}
			if C.sd_put_bool(g, str("navigate"), nav) < 0 || C.sd_put_bool(g, str("is_binned"), 0) < 0 {
				attrs = append(attrs, fail("writing attribute navigate"))
			}
			if err := errors.Join(attrs...); err != nil {
				return err
			}
		}
		meta, err := path(exp, "metadata")
		if err != nil {
			return err
		}
		general, err := path(meta, "General")
		if err != nil {
			return err
		}
		if err := strs(general, StringsAttr{Name: "title", Values: []string{r.Title}}); err != nil {
			return err
		}
		if _, err := path(meta, "Signal"); err != nil {
			return err
		}
		orig, err := path(exp, "original_metadata")
		if err != nil {
			return err
		}
		for _, a := range r.Provenance {
			if err := strs(orig, a); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return nil, err
	}
	if C.H5Fflush(f, C.H5F_SCOPE_GLOBAL) < 0 {
		return nil, fail("flushing the result file")
	}
	size := C.H5Fget_file_image(f, nil, 0)
	if size <= 0 {
		return nil, fail("sizing the result file")
	}
	img := make([]byte, int(size))
	if C.H5Fget_file_image(f, unsafe.Pointer(&img[0]), C.size_t(size)) != size {
		return nil, fail("copying the result file")
	}
	return img, nil
}

// nonEmpty is []string{s}, or nil for "".
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
