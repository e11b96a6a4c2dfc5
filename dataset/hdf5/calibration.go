//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <string.h>
#include <hdf5.h>

// sd_read_f64s reads the dataset name of file, of at most max elements, into out as
// doubles: it returns the number of elements (-1: none such, not numbers, more than
// max, or unreadable).
static hssize_t sd_read_f64s(hid_t file, const char *name, hid_t lapl, double *out, hssize_t max) {
	if (H5Lexists(file, name, lapl) <= 0) return -1;
	hid_t set = H5Dopen2(file, name, lapl);
	if (set < 0) return -1;
	hssize_t n = -1;
	hid_t space = H5Dget_space(set), type = H5Dget_type(set);
	if (space >= 0 && type >= 0 && (H5Tget_class(type) == H5T_FLOAT || H5Tget_class(type) == H5T_INTEGER)) {
		hssize_t k = H5Sget_simple_extent_npoints(space);
		if (k >= 0 && k <= max && H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0) n = k;
	}
	if (type >= 0) H5Tclose(type);
	if (space >= 0) H5Sclose(space);
	H5Dclose(set);
	return n;
}

// sd_attr_str reads the string attribute attr of the object name of file into buf (n
// bytes, NUL-terminated, cut to fit): 0, or -1 when there is none such or it is not a
// scalar string.
static int sd_attr_str(hid_t file, const char *name, const char *attr, hid_t lapl, char *buf, size_t n) {
	if (H5Aexists_by_name(file, name, attr, lapl) <= 0) return -1;
	hid_t a = H5Aopen_by_name(file, name, attr, H5P_DEFAULT, lapl);
	if (a < 0) return -1;
	int err = -1;
	hid_t type = H5Aget_type(a), space = H5Aget_space(a);
	if (type >= 0 && space >= 0 && H5Tget_class(type) == H5T_STRING && H5Sget_simple_extent_npoints(space) == 1) {
		hid_t mem = H5Tcopy(type);
		if (H5Tis_variable_str(type) > 0) {
			char *s = NULL;
			if (H5Aread(a, mem, &s) >= 0 && s != NULL) {
				strncpy(buf, s, n - 1);
				buf[n - 1] = 0;
				H5free_memory(s);
				err = 0;
			}
		} else {
			size_t size = H5Tget_size(type);
			char *s = calloc(size + 1, 1);
			if (s != NULL && H5Aread(a, mem, s) >= 0) {
				strncpy(buf, s, n - 1);
				buf[n - 1] = 0;
				err = 0;
			}
			free(s);
		}
		H5Tclose(mem);
	}
	if (space >= 0) H5Sclose(space);
	if (type >= 0) H5Tclose(type);
	H5Aclose(a);
	return err;
}
*/
import "C"

import (
	"path"
	"strconv"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
)

// h5Floats reads the numeric dataset name of file, of at most max elements (nil: none
// such). Called with h5lock held.
func h5Floats(file, lapl C.hid_t, name string, max int) []float64 {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	out := make([]float64, max)
	n := C.sd_read_f64s(file, cname, lapl, (*C.double)(unsafe.Pointer(&out[0])), C.hssize_t(max))
	C.H5Eclear2(C.H5E_DEFAULT)
	if n < 0 {
		return nil
	}
	return out[:n]
}

// h5AttrString reads the scalar string attribute attr of the object name of file ("",
// false: none such). Called with h5lock held.
func h5AttrString(file, lapl C.hid_t, name, attr string) (string, bool) {
	cname, cattr := C.CString(name), C.CString(attr)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cattr))
	buf := make([]byte, 256)
	ok := C.sd_attr_str(file, cname, cattr, lapl, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) == 0
	C.H5Eclear2(C.H5E_DEFAULT)
	if !ok {
		return "", false
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), true
}

// emdCalibration reads the calibration of the frames dataset at dsPath of shape dims,
// stored as (nav..., sig_y, sig_x), from its EMD dimension vectors (EMD 1.0, as
// py4DSTEM and the fpd layout write them, and RosettaSciIO's emd reader reads them):
// datasets dim1..dimN beside it (dim0..dimN-1 in py4DSTEM's files), one per axis in
// order, each of the axis' coordinates, or of its first two, with attribute units. An
// axis is calibrated by the step and start of its vector: scale v[1]−v[0], offset v[0].
// Vectors of units "pixel" or of unknown units ("?/m" in fpd files) calibrate nothing.
// Called with h5lock held.
func emdCalibration(file, lapl C.hid_t, dsPath string, dims []int) dataset.Calibration {
	dir := path.Dir("/" + dsPath)
	first := 1
	if h5Floats(file, lapl, path.Join(dir, "dim0"), 2) != nil {
		first = 0
	}
	axes := make([]dataset.Axis, len(dims))
	names := append(dataset.NavNames(len(dims)-2), dataset.SigNames[:]...)
	for i := range dims {
		axes[i].Name = names[i]
		name := path.Join(dir, "dim"+strconv.Itoa(first+i))
		v := h5Floats(file, lapl, name, max(dims[i], 2))
		units, _ := h5AttrString(file, lapl, name, "units")
		if len(v) >= 2 && (len(v) == 2 || len(v) == dims[i]) {
			axes[i] = dataset.NewAxis(names[i], v[1]-v[0], v[0], units)
		}
	}
	n := len(dims) - 2
	return dataset.Calibration{Nav: axes[:n], Sig: axes[n:]}
}
