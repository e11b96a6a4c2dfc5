//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <string.h>
#include <hdf5.h>

// sd_attr_strings reads the string attribute name of obj (fixed or variable length, of
// at most 8 elements) into buf (cap bytes) as the elements each followed by a NUL, and
// returns the number of those that fit (-1: no such attribute, or not strings). A fixed-length element
// keeps its padding (NULs or spaces), which the caller trims.
static int sd_attr_strings(hid_t obj, const char *name, char *buf, size_t cap) {
	if (H5Aexists(obj, name) <= 0) return -1;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	if (a < 0) return -1;
	hid_t t = H5Aget_type(a), s = H5Aget_space(a), mt = -1;
	int n = -1;
	hssize_t count = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
	if (t < 0 || H5Tget_class(t) != H5T_STRING || count < 1 || count > 8) goto done;
	mt = H5Tcopy(H5T_C_S1);
	if (mt < 0 || H5Tset_cset(mt, H5Tget_cset(t)) < 0) goto done; // no conversion between ASCII and UTF-8
	size_t len = 0;
	if (H5Tis_variable_str(t) > 0) {
		char *v[8] = {0};
		if (H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Aread(a, mt, v) < 0) goto done;
		n = 0;
		for (int i = 0; i < (int)count; i++) {
			size_t k = v[i] != NULL ? strlen(v[i]) : 0;
			if (len + k + 1 > cap) break;
			memcpy(buf + len, v[i], k);
			buf[len + k] = 0;
			len += k + 1;
			n++;
		}
#if H5_VERSION_GE(1, 12, 0)
		H5Treclaim(mt, s, H5P_DEFAULT, v);
#else
		H5Dvlen_reclaim(mt, s, H5P_DEFAULT, v);
#endif
	} else {
		size_t size = H5Tget_size(t);
		if (size == 0 || (size_t)count * (size + 1) > cap || H5Tset_size(mt, size + 1) < 0 ||
			H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0) goto done;
		char *tmp = calloc((size_t)count, size + 1);
		if (tmp == NULL) goto done;
		if (H5Aread(a, mt, tmp) >= 0) {
			n = (int)count;
			for (int i = 0; i < n; i++) {
				size_t k = strnlen(tmp + i * (size + 1), size);
				memcpy(buf + len, tmp + i * (size + 1), k);
				buf[len + k] = 0;
				len += k + 1;
			}
		}
		free(tmp);
	}
done:
	if (mt >= 0) H5Tclose(mt);
	if (t >= 0) H5Tclose(t);
	if (s >= 0) H5Sclose(s);
	H5Aclose(a);
	return n;
}
*/
import "C"

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Frames-last image stacks.
//
// A dataset of rank 3 is read as (n, sig_y, sig_x), the frames along its first axis, as
// numpy, LiberTEM and h5py index it. Some writers store an image stack frames-last, (y,
// x, frame): FEI/Thermo Fisher Velox (.emd) writes every image of /Data/Image/<uuid>/Data
// (a group beside its Metadata) that way, and RosettaSciIO reads it as (frame, y, x)
// (rsciio/emd/_emd_velox.py, np.rollaxis(data, 2)). Option frame_axis (format hdf5)
// says where the frames are: first, last, or auto (the default): last where the file
// says so, from Velox's layout, from the names of Berkeley EMD's axis datasets beside the
// data (dim0..dim2 in EMD 1.0, dim1..dim3 in EMD 0.2; their attribute "name"; emdatasets.com),
// or from HDF5 dimension scale labels (the
// attribute DIMENSION_LABELS, h5py's dims[i].label), one naming the last axis the
// frames' ("frame", "time", "stack", ...) and neither of the others; else first, with a
// note naming the option when the shape looks like a frames-last stack (frames of
// sig_x < sig_y/4, from axes 0 and 1 within a factor 4 of each other). A frames-last
// stack is read a box (sig_y, sig_x, k) of k frames at a time and reordered in memory.

// frameAxisOption reads option frame_axis: "auto" (also when absent), "first" or "last".
func frameAxisOption(opt dataset.Options) (string, error) {
	v := strings.ToLower(strings.TrimSpace(opt.FormatOptions["frame_axis"]))
	switch v {
	case "":
		return "auto", nil
	case "auto", "first", "last":
		return v, nil
	}
	return "", errs.New(errs.Argument, "option frame_axis %q is not auto, first or last", opt.FormatOptions["frame_axis"])
}

// veloxImage is the path of a Velox image dataset: /Data/Image/<uuid>/Data.
var veloxImage = regexp.MustCompile(`^/Data/Image/[^/]+/Data$`)

// frameLabels are axis names that name the frames' axis of an image stack; pixelLabels
// those of a frame's axes.
var (
	frameLabels = map[string]bool{"frame": true, "frames": true, "n": true, "t": true, "time": true, "stack": true,
		"image": true, "images": true, "index": true, "z": true, "slice": true, "scan": true, "position": true, "probe": true}
	pixelLabels = map[string]bool{"x": true, "y": true, "kx": true, "ky": true, "qx": true, "qy": true, "row": true, "rows": true,
		"column": true, "columns": true, "col": true, "height": true, "width": true}
)

// axisKind is "frame" or "pixel" for an axis name ("Frame number", "x (nm)", "k_y"), or
// "" when it names neither.
func axisKind(label string) string {
	word := strings.ToLower(strings.TrimSpace(label))
	if i := strings.IndexAny(word, " (["); i > 0 {
		word = word[:i]
	}
	word = strings.ReplaceAll(word, "_", "")
	switch {
	case frameLabels[word]:
		return "frame"
	case pixelLabels[word]:
		return "pixel"
	}
	return ""
}

// layout decides whether the open dataset d.set of extent dims is a frames-last stack
// (option frame_axis, d.frameAxis), and returns the note that says how it is read ("":
// none). Called with h5lock held.
func (d *h5File) layout(dims []int) (last bool, note string, err error) {
	shape := npy.ShapeString(dims)
	if d.frameAxis == "last" {
		if len(dims) != 3 {
			return false, "", errs.New(errs.Argument, "option frame_axis=last reads a dataset of rank 3, (sig_y, sig_x, n), and dataset %s has shape %s", h5Name(d.dsPath), shape)
		}
		return true, "", nil
	}
	if d.frameAxis != "auto" || len(dims) != 3 {
		return false, "", nil
	}
	why, labels := d.statedLayout()
	kinds := make([]string, len(labels))
	for i, l := range labels {
		kinds[i] = axisKind(l)
	}
	switch {
	case why == "" && len(kinds) == 3 && kinds[2] == "frame" && kinds[0] != "frame" && kinds[1] != "frame":
		why = fmt.Sprintf("its axes are named %s", quoteAll(labels))
	case why == "":
		if len(kinds) == 3 && kinds[0] == "frame" {
			return false, "", nil // frames first, as the file says
		}
		if dims[2] < dims[1]/4 && dims[0] <= 4*dims[1] && dims[1] <= 4*dims[0] {
			return false, fmt.Sprintf("dataset %s %s is read as %d frames of %d×%d pixels; if it is an image stack stored frames-last, (y, x, frame), give option frame_axis=last",
				h5Name(d.dsPath), shape, dims[0], dims[1], dims[2]), nil
		}
		return false, "", nil
	}
	return true, fmt.Sprintf("dataset %s %s is an image stack stored frames-last, (y, x, frame) (%s): read as %d frames of %d×%d pixels (option frame_axis=first reads it as stored)",
		h5Name(d.dsPath), shape, why, dims[2], dims[0], dims[1]), nil
}

// statedLayout returns what the file says of the axes of the dataset d.set: why it is
// a Velox image stack (why not ""), else the names of its axes (nil: none), from its
// DIMENSION_LABELS or Berkeley EMD's axis datasets (emdDims). Called with h5lock held.
func (d *h5File) statedLayout() (why string, labels []string) {
	defer C.H5Eclear2(C.H5E_DEFAULT)
	p := h5Clean(d.dsPath)
	group := path.Dir(p)
	if veloxImage.MatchString(p) && C.H5Lexists(d.file, cstr(group+"/Metadata"), d.access) > 0 {
		return "an FEI Velox image, " + h5Name(group) + "/Data beside its Metadata, as RosettaSciIO reads it", nil
	}
	if labels = h5Strings(d.set, "DIMENSION_LABELS"); len(labels) == 3 && strings.Join(labels, "") != "" {
		return "", labels
	}
	for _, first := range []int{0, 1} {
		if labels = d.emdDims(group, first); labels != nil {
			return "", labels
		}
	}
	return "", nil
}

// emdDims reads the names of the 3 axes of the dataset in group from Berkeley EMD's
// axis datasets beside it, dimK..dim(K+2) for first = K (EMD 1.0, py4DSTEM: dim0 on;
// EMD 0.2: dim1 on), each with a string attribute "name" (nil: not all there). Called
// with h5lock held.
func (d *h5File) emdDims(group string, first int) []string {
	var labels []string
	for i := first; i < first+3; i++ {
		name := fmt.Sprintf("%s/dim%d", strings.TrimSuffix(group, "/"), i)
		if C.H5Lexists(d.file, cstr(name), d.access) <= 0 {
			return nil
		}
		obj := C.H5Oopen(d.file, cstr(name), d.access)
		if obj < 0 {
			return nil
		}
		names := h5Strings(obj, "name")
		C.H5Oclose(obj)
		if len(names) != 1 {
			return nil
		}
		labels = append(labels, names[0])
	}
	return labels
}

// h5Strings reads the string attribute name of the open object obj (nil: none). Called
// with h5lock held.
func h5Strings(obj C.hid_t, name string) []string {
	const size = 4096
	buf := (*C.char)(C.malloc(size))
	defer C.free(unsafe.Pointer(buf))
	n := int(C.sd_attr_strings(obj, cstr(name), buf, size))
	if n < 0 {
		return nil
	}
	out := strings.SplitN(string(C.GoBytes(unsafe.Pointer(buf), size)), "\x00", n+1)[:n]
	for i, s := range out {
		out[i] = strings.TrimRight(s, " ")
	}
	return out
}

// quoteAll is the strings, quoted (Go syntax), separated by commas: names from a file, for
// messages.
func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
