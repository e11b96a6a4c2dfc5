//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
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

*/
import "C"

import (
	"math"
	"path"
	"strconv"
	"strings"
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
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	obj := C.H5Oopen(file, cname, lapl)
	if obj < 0 {
		C.H5Eclear2(C.H5E_DEFAULT)
		return "", false
	}
	defer C.H5Oclose(obj)
	v := h5Strings(obj, attr)
	return strings.Join(v, ""), len(v) == 1
}

// emdCalibration reads the calibration of the frames dataset at dsPath of shape dims,
// stored as (nav..., sig_y, sig_x), from its EMD dimension vectors (EMD 1.0, as
// py4DSTEM and the fpd layout write them, and RosettaSciIO's emd reader reads them):
// datasets dim1..dimN beside it (dim0..dimN-1 in py4DSTEM's files), one per axis in
// order, each of the axis' coordinates, or of its first two, with attribute units. An
// axis is calibrated by the step and start of its vector: scale v[1]−v[0], offset v[0].
// Vectors of units "pixel" or of unknown units ("?/m" in fpd files), or of unequal
// steps, calibrate nothing. Called with h5lock held.
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
		if len(v) >= 2 && (len(v) == 2 || len(v) == dims[i]) && uniform(v) {
			units, _ := h5AttrString(file, lapl, name, "units")
			axes[i] = dataset.NewAxis(names[i], v[1]-v[0], v[0], units)
		}
	}
	n := len(dims) - 2
	return dataset.Calibration{Nav: axes[:n], Sig: axes[n:]}
}

// uniform says that the steps of v are equal (to 10⁻⁶ of the first).
func uniform(v []float64) bool {
	step := v[1] - v[0]
	for i := 2; i < len(v); i++ {
		if math.Abs(v[i]-v[i-1]-step) > 1e-6*math.Abs(step) {
			return false
		}
	}
	return true
}
