//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <hdf5.h>

#if !H5_VERSION_GE(1, 10, 5)
#error "stemdot reads HDF5 files with libhdf5 1.10.5 or later (H5Dget_num_chunks)"
#endif

static hsize_t sd_unlimited(void) { return H5S_UNLIMITED; }

// sdCheckExternalLink (export.go) checks the target file of an external link.
extern int sdCheckExternalLink(char *parent, char *group, char *child, char *object);

// sd_elink_cb runs before libhdf5 opens the target file of an external link
// (H5Pset_elink_cb): it fails the traversal when the target is not safe to open.
static herr_t sd_elink_cb(const char *parent, const char *group, const char *child, const char *object,
		unsigned *flags, hid_t fapl, void *op) {
	return sdCheckExternalLink((char *)parent, (char *)group, (char *)child, (char *)object) == 0 ? 0 : -1;
}

// sd_check_links makes the link (or dataset) access properties apl check the target of
// every external link traversed with them.
static herr_t sd_check_links(hid_t apl) { return H5Pset_elink_cb(apl, sd_elink_cb, NULL); }

// sd_access returns dataset access properties that check external links.
static hid_t sd_access(void) {
	hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
	if (p >= 0 && sd_check_links(p) < 0) {
		H5Pclose(p);
		return -1;
	}
	return p;
}
*/
import "C"

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Storage that is missing, short or never written, and files beside the HDF5 file.
//
// Where a dataset's data is missing, libhdf5 reads the fill value and reports nothing: a
// virtual dataset's (VDS) source file or dataset that is not found or not an HDF5 file
// (h5py #1546, HDFGroup/hdf5 #5088), a region of a VDS that no mapping covers, chunks
// never written, a contiguous dataset whose space was never allocated, external raw
// storage shorter than declared. openHDF5 looks for these when it opens the frames
// dataset and refuses it, naming the frames and the cause, unless Options.AllowFill: then
// they are read as the fill value, with a note counting the frames. A VDS source smaller
// than the region mapped from it and a missing external raw storage file fail every read
// in libhdf5, and are refused in any case. (Storage allocated early, at creation, and
// never written cannot be told from data: libhdf5 records nothing about it.)
//
// libhdf5 opens other files through the HDF5 file: the targets of external links, the
// source files of a VDS and the files of external raw storage. Each is looked up where
// libhdf5 looks for it and checked to be a regular file before libhdf5 opens it, since
// opening a FIFO or a device can block forever: external links as libhdf5 traverses them
// (H5Pset_elink_cb), VDS sources when the dataset is opened, before libhdf5 reads the
// extent of a mapping of unlimited size (which opens its sources), and external raw
// storage files when the dataset is opened and again before each read (libhdf5 opens
// them for every read). libhdf5 keeps a VDS source open once it has read from it, so
// openHDF5 reads one element of each mapping; the sources of printf-style mappings (one
// file per block of an unlimited dimension, "%b" in the name), which libhdf5 closes
// after each read, and missing ones are checked again before each read.

// Environment variables that add directories where libhdf5 looks for files (HDF5 1.10 to
// 1.14; https://docs.hdfgroup.org/hdf5/v1_14/group___h5_l.html, group___d_a_p_l.html).
const (
	h5ExtLinkPrefix = "HDF5_EXT_PREFIX"     // external links' targets
	h5VDSPrefix     = "HDF5_VDS_PREFIX"     // VDS source files
	h5EFLPrefix     = "HDF5_EXTFILE_PREFIX" // external raw storage
)

// h5StartEnv holds HDF5_VDS_PREFIX and HDF5_EXTFILE_PREFIX as libhdf5 reads them once,
// when it starts (H5D__init_package), for the prefixes of VDS sources and external raw
// storage; openHDF5 reads them before its first call into the library.
var h5StartEnv = sync.OnceValue(func() map[string]string {
	return map[string]string{h5VDSPrefix: os.Getenv(h5VDSPrefix), h5EFLPrefix: os.Getenv(h5EFLPrefix)}
})

// h5SideErr is the error of the last check of an external link's target that failed the
// call libhdf5 was making (sdCheckExternalLink). Guarded by h5lock.
var h5SideErr error

// h5Fail returns the error of a failed call into libhdf5: h5SideErr when a check of an
// external link's target failed it, else the library's message (h5Error). Called with
// h5lock held.
func h5Fail(what string) error {
	if err := h5SideErr; err != nil {
		h5SideErr = nil
		C.H5Eclear2(C.H5E_DEFAULT)
		return fmt.Errorf("%s: %w", what, err)
	}
	return h5Error(what)
}

// h5LinkFail returns why libhdf5 could not open the object of a link to target ("" for
// a hard link): the reason of the failed check of the external link's file when the link
// is that external link, the check's whole error when another link on the way failed
// it, else the library's message. Called with h5lock held.
func h5LinkFail(target string) error {
	if err := h5SideErr; err != nil {
		h5SideErr = nil
		C.H5Eclear2(C.H5E_DEFAULT)
		if le, ok := err.(*h5LinkError); ok && le.target == target {
			return le.err
		}
		return err
	}
	return errs.New(errs.Format, "%s", cmp.Or(h5Message(), "libhdf5 could not open it and gave no reason"))
}

// h5NewAccess returns dataset access properties that check the target of every external
// link traversed with them (also usable as link access properties).
func h5NewAccess() C.hid_t { return C.sd_access() }

// h5CheckLinks makes the access properties apl check the targets of external links.
func h5CheckLinks(apl C.hid_t) error {
	if C.sd_check_links(apl) < 0 {
		return h5Error("setting the external link check")
	}
	return nil
}

// h5Lookup lists the paths, in order, at which libhdf5 looks for a file whose name is
// stored in the file referrer (as it was opened), as H5F_prefix_open_file (H5Fint.c,
// HDF5 1.10 to 1.14) does: an absolute name as it is (then its base name stands for the
// name below); each directory of the environment variable env (HDF5_EXT_PREFIX for
// external links, HDF5_VDS_PREFIX for VDS sources; a colon-separated list); for a VDS
// source, HDF5_VDS_PREFIX whole as libhdf5 read it when it started, "${ORIGIN}" at its
// start standing for referrer's directory; referrer's directory; the name relative to
// the working directory; the directory of the file a symbolic link referrer points to.
func h5Lookup(name, referrer, env string) []string {
	var paths []string
	base := name
	if filepath.IsAbs(name) {
		paths = append(paths, name)
		base = filepath.Base(name)
	}
	in := func(dir string) string {
		if strings.HasSuffix(dir, "/") {
			return dir + base
		}
		return dir + "/" + base
	}
	envValue := os.Getenv(env)
	for dir := range strings.SplitSeq(envValue, ":") {
		if dir != "" {
			paths = append(paths, in(dir))
		}
	}
	dir := "./"
	if abs, err := filepath.Abs(referrer); err == nil {
		dir = filepath.Dir(abs) + "/"
	}
	if prefix := h5StartEnv()[h5VDSPrefix]; env == h5VDSPrefix && prefix != "" && prefix != "." {
		if rest, ok := strings.CutPrefix(prefix, "${ORIGIN}"); ok {
			prefix = dir + rest
		}
		paths = append(paths, in(prefix))
	}
	paths = append(paths, in(dir), base)
	if st, err := os.Lstat(referrer); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if target, err := filepath.EvalSymlinks(referrer); err == nil {
			if abs, err := filepath.Abs(target); err == nil {
				paths = append(paths, in(filepath.Dir(abs)))
			}
		}
	}
	var out []string
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// h5FindFile returns the file that libhdf5 opens for name stored in referrer (h5Lookup):
// the first path that is a regular file with the HDF5 signature. Paths that do not exist,
// directories and regular files that are not HDF5 files are passed over, as libhdf5
// passes over them; then path is "" and missing says what was looked for and what was
// found instead (a directory, a file that is not an HDF5 file). A path that
// is a FIFO, a device or a socket is an error (errs.IO): libhdf5 would open it, which can
// block.
func h5FindFile(name, referrer, env string) (path, missing string, err error) {
	paths := h5Lookup(name, referrer, env)
	var passed []string
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err != nil:
			continue
		case st.IsDir():
			passed = append(passed, h5Name(p)+" is a directory")
			continue
		case !st.Mode().IsRegular():
			return "", "", errs.New(errs.IO, "%s %s", h5Name(p), regfile.NotRegular(st.Mode()))
		}
		switch ok, err := h5Signature(p); {
		case err != nil:
			passed = append(passed, err.Error())
		case ok:
			return p, "", nil
		default:
			passed = append(passed, h5Name(p)+" is not an HDF5 file")
		}
	}
	for i, p := range paths {
		paths[i] = h5Name(p)
	}
	if len(passed) > 0 {
		return "", strings.Join(passed, ", ") + " (looked for " + strings.Join(paths, ", ") + ")", nil
	}
	return "", "not found (looked for " + strings.Join(paths, ", ") + ")", nil
}

// h5Signature reports whether the regular file at path holds the HDF5 signature where
// libhdf5 looks for it: at byte 0, 512, 1024, 2048, ... (after a user block). It opens
// the file without blocking (regfile.Open), and fails for a file that is no longer
// regular.
func h5Signature(path string) (bool, error) {
	f, size, err := regfile.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sig := make([]byte, 8)
	for off := int64(0); off+8 <= size; off = max(512, 2*off) {
		if _, err := f.ReadAt(sig, off); err != nil {
			return false, fmt.Errorf("%s: %w", h5Name(path), err)
		}
		if string(sig) == "\x89HDF\r\n\x1a\n" {
			return true, nil
		}
	}
	return false, nil
}

// h5Slab is a regular hyperslab of finite sizes: the blocks start + j·stride, of block
// elements, j < count, on each axis.
type h5Slab struct{ start, stride, count, block []C.hsize_t }

// h5BoxSlab is the box [lo, hi) as a slab.
func h5BoxSlab(lo, hi []int) h5Slab {
	s := h5Slab{}
	for i := range lo {
		s.start = append(s.start, C.hsize_t(lo[i]))
		s.stride = append(s.stride, 1)
		s.count = append(s.count, 1)
		s.block = append(s.block, C.hsize_t(hi[i]-lo[i]))
	}
	return s
}

func (s h5Slab) clone() h5Slab {
	return h5Slab{slices.Clone(s.start), slices.Clone(s.stride), slices.Clone(s.count), slices.Clone(s.block)}
}

// empty reports whether the slab holds no element.
func (s h5Slab) empty() bool {
	return slices.Contains(s.count, 0) || slices.Contains(s.block, 0)
}

// apply combines the slab into the selection of space with op (H5S_SELECT_OR, ...).
func (s h5Slab) apply(space C.hid_t, op C.H5S_seloper_t) error {
	if s.empty() {
		return nil
	}
	if C.H5Sselect_hyperslab(space, op, &s.start[0], &s.stride[0], &s.count[0], &s.block[0]) < 0 {
		return h5Error("combining selections")
	}
	return nil
}

// h5Regular is a regular hyperslab selection as libhdf5 describes it: a count or block
// may be unlimited (H5S_UNLIMITED), on at most one axis, unlim (-1: none).
type h5Regular struct {
	h5Slab
	unlim int
}

// h5RegularOf returns the selection of space as a regular hyperslab (ok false: it is not
// one).
func h5RegularOf(space C.hid_t) (r h5Regular, ok bool) {
	if C.H5Sget_select_type(space) != C.H5S_SEL_HYPERSLABS || C.H5Sis_regular_hyperslab(space) <= 0 {
		return r, false
	}
	rank := int(C.H5Sget_simple_extent_ndims(space))
	if rank <= 0 || rank > 32 {
		return r, false
	}
	r.start, r.stride, r.count, r.block = make([]C.hsize_t, rank), make([]C.hsize_t, rank), make([]C.hsize_t, rank), make([]C.hsize_t, rank)
	if C.H5Sget_regular_hyperslab(space, &r.start[0], &r.stride[0], &r.count[0], &r.block[0]) < 0 {
		return r, false
	}
	r.unlim = -1
	for i := range rank {
		if r.count[i] == C.sd_unlimited() || r.block[i] == C.sd_unlimited() {
			r.unlim = i
		}
	}
	return r, true
}

// within returns the part of the hyperslab inside dims, along the unlimited axis from
// block first to block end (end < 0: all) when the count is unlimited: a finite slab,
// and a box for a last block cut by the extent (none that are empty).
func (r h5Regular) within(dims []int, first, end int) []h5Slab {
	s := r.clone()
	out := []h5Slab{s}
	if u := r.unlim; u >= 0 {
		n := C.hsize_t(dims[u])
		if s.block[u] == C.sd_unlimited() {
			s.count[u], s.block[u] = 1, 0
			if s.start[u] < n {
				s.block[u] = n - s.start[u]
			}
		} else {
			s.start[u] += C.hsize_t(first) * s.stride[u]
			s.count[u] = 0
			if s.start[u] < n {
				s.count[u] = (n - s.start[u] + s.stride[u] - 1) / s.stride[u]
			}
			if end >= 0 {
				s.count[u] = min(s.count[u], C.hsize_t(end-first))
			}
			if s.count[u] > 0 && s.start[u]+(s.count[u]-1)*s.stride[u]+s.block[u] > n {
				// The last block reaches past the extent: cut, as a box.
				last := s.clone()
				last.start[u] += (s.count[u] - 1) * s.stride[u]
				last.count[u], last.block[u] = 1, n-last.start[u]
				s.count[u]--
				out = append(out, last)
			}
		}
	}
	return slices.DeleteFunc(out, h5Slab.empty)
}

// h5SelectionSlabs returns the selection of space (a VDS mapping's region: all, none or a
// hyperslab) within dims as slabs.
func h5SelectionSlabs(space C.hid_t, dims []int) ([]h5Slab, error) {
	rank := len(dims)
	switch C.H5Sget_select_type(space) {
	case C.H5S_SEL_NONE:
		return nil, nil
	case C.H5S_SEL_ALL:
		return []h5Slab{h5BoxSlab(make([]int, rank), dims)}, nil
	}
	// A hyperslab (libhdf5 refuses point selections in virtual datasets).
	if r, ok := h5RegularOf(space); ok {
		return r.within(dims, 0, -1), nil
	}
	boxes, err := h5Blocks(space)
	if err != nil {
		return nil, err
	}
	out := make([]h5Slab, len(boxes))
	for i, b := range boxes {
		out[i] = h5BoxSlab(b[0], b[1])
	}
	return out, nil
}

// h5Blocks returns the blocks [lo, hi) of the hyperslab selection of space.
func h5Blocks(space C.hid_t) ([][2][]int, error) {
	rank := int(C.H5Sget_simple_extent_ndims(space))
	n := int(C.H5Sget_select_hyper_nblocks(space))
	if rank <= 0 || n < 0 {
		return nil, h5Error("reading a hyperslab selection")
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]C.hsize_t, 2*rank*n)
	if C.H5Sget_select_hyper_blocklist(space, 0, C.hsize_t(n), &buf[0]) < 0 {
		return nil, h5Error("reading a hyperslab selection")
	}
	out := make([][2][]int, n)
	for i := range n {
		b := buf[2*rank*i:]
		lo, hi := make([]int, rank), make([]int, rank)
		for a := range rank {
			lo[a], hi[a] = int(b[a]), int(b[rank+a])+1 // the block list gives inclusive ends
		}
		out[i] = [2][]int{lo, hi}
	}
	return out, nil
}

// h5Elems is the number of elements of slabs that do not overlap.
func h5Elems(slabs []h5Slab) int64 {
	var n int64
	for _, s := range slabs {
		e := int64(1)
		for i := range s.count {
			e *= int64(s.count[i]) * int64(s.block[i])
		}
		n += e
	}
	return n
}

// h5Gap is a part of a dataset that libhdf5 reads as the fill value (slabs of its
// elements), and why.
type h5Gap struct {
	why   string
	kind  errs.Kind
	slabs []h5Slab
}

// h5Reread is a check to repeat before each read of the frames it concerns.
type h5Reread struct {
	slabs  []h5Slab
	frames [][2]int // the frames of slabs, filled in by (*h5File).checkStorage
	check  func() error
}

// h5Check examines the storage of a dataset and of the datasets it reads from.
type h5Check struct {
	file   string // the dataset's file as it was opened: relative names are looked up from it
	access C.hid_t
	allow  bool // dataset.Options.AllowFill
	depth  int  // 0: the frames dataset; more: a VDS source
	// hold holds one element of each VDS mapping whose source libhdf5 keeps open once it
	// has read from it; reread the checks to repeat before each read (depth 0 only).
	hold   [][]int
	reread []h5Reread
}

// gaps returns what of the open dataset set, of extent dims, libhdf5 reads as the fill
// value; an error for what cannot be read at all. Called with h5lock held.
func (c *h5Check) gaps(set C.hid_t, dims []int) ([]h5Gap, error) {
	dcpl := C.H5Dget_create_plist(set)
	if dcpl < 0 {
		return nil, h5Error("reading the dataset's storage layout")
	}
	defer C.H5Pclose(dcpl)
	switch C.H5Pget_layout(dcpl) {
	case C.H5D_VIRTUAL:
		return c.virtual(set, dcpl, dims)
	case C.H5D_CHUNKED:
		return c.chunks(set, dcpl, dims)
	case C.H5D_CONTIGUOUS:
		if C.H5Pget_external_count(dcpl) > 0 {
			return c.external(set, dcpl, dims)
		}
		var status C.H5D_space_status_t
		if C.H5Dget_space_status(set, &status) < 0 {
			return nil, h5Error("reading the dataset's space allocation")
		}
		if status == C.H5D_SPACE_STATUS_NOT_ALLOCATED && product(dims) > 0 {
			return []h5Gap{{"its data was never written (no space allocated)", errs.Format, []h5Slab{h5BoxSlab(make([]int, len(dims)), dims)}}}, nil
		}
	}
	return nil, nil
}

// chunks finds the chunks of a chunked dataset that were never written: when
// H5Dget_num_chunks counts fewer than the extent holds, each chunk is looked up
// (H5Dget_chunk_storage_size).
func (c *h5Check) chunks(set, dcpl C.hid_t, dims []int) ([]h5Gap, error) {
	rank := len(dims)
	chunk := make([]C.hsize_t, rank)
	if int(C.H5Pget_chunk(dcpl, C.int(rank), &chunk[0])) != rank {
		return nil, h5Error("reading the chunk shape")
	}
	expected := 1
	for i, n := range dims {
		expected *= (n + int(chunk[i]) - 1) / int(chunk[i])
	}
	var have C.hsize_t
	space := C.H5Dget_space(set)
	if space < 0 {
		return nil, h5Error("reading the dataspace")
	}
	defer C.H5Sclose(space)
	if C.H5Dget_num_chunks(set, space, &have) < 0 {
		return nil, h5Error("counting the chunks")
	}
	if int(have) >= expected {
		return nil, nil
	}
	var slabs []h5Slab
	first := make([]int, rank)
	offset := make([]C.hsize_t, rank)
	var walk func(axis int) error
	walk = func(axis int) error {
		if axis == rank {
			var size C.hsize_t
			for i, v := range first {
				offset[i] = C.hsize_t(v)
			}
			// libhdf5 1.10 fails for a chunk never written (1.12 gives size 0);
			// H5Dget_chunk_info_by_coord would say so too, but searches every chunk.
			if C.H5Dget_chunk_storage_size(set, &offset[0], &size) < 0 || size == 0 {
				C.H5Eclear2(C.H5E_DEFAULT)
				hi := make([]int, rank)
				for i := range hi {
					hi[i] = min(first[i]+int(chunk[i]), dims[i])
				}
				slabs = append(slabs, h5BoxSlab(slices.Clone(first), hi))
			}
			return nil
		}
		for v := 0; v < dims[axis]; v += int(chunk[axis]) {
			first[axis] = v
			if err := walk(axis + 1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(0); err != nil {
		return nil, err
	}
	return []h5Gap{{fmt.Sprintf("%d of its %d chunks were never written", expected-int(have), expected), errs.Format, slabs}}, nil
}

// external checks the files of external raw storage (H5Pget_external): each must be a
// regular file (errs.IO: libhdf5 fails a read of a missing one) holding its bytes; the
// bytes a file lacks are read as zeros. The files are looked up as libhdf5 does
// (H5D__build_file_prefix, H5_combine_path): a relative name in the directory of
// HDF5_EXTFILE_PREFIX ("${ORIGIN}" at its start standing for the HDF5 file's directory),
// else the working directory.
func (c *h5Check) external(set, dcpl C.hid_t, dims []int) ([]h5Gap, error) {
	t := C.H5Dget_type(set)
	if t < 0 {
		return nil, h5Error("reading the data type")
	}
	elem := int64(C.H5Tget_size(t))
	C.H5Tclose(t)
	total := int64(product(dims)) * elem
	prefix := h5StartEnv()[h5EFLPrefix]
	if rest, ok := strings.CutPrefix(prefix, "${ORIGIN}"); ok {
		abs, _ := filepath.Abs(c.file)
		prefix = filepath.Dir(abs) + "/" + rest
	}
	var gaps []h5Gap
	var name [4096]C.char
	logical := int64(0) // the dataset's bytes before this file's
	for i := 0; i < int(C.H5Pget_external_count(dcpl)) && logical < total; i++ {
		var offset C.off_t
		var size C.hsize_t
		if C.H5Pget_external(dcpl, C.uint(i), C.size_t(len(name)), &name[0], &offset, &size) < 0 {
			return nil, h5Error("reading the external storage files")
		}
		path := C.GoString(&name[0])
		if !filepath.IsAbs(path) && prefix != "" && prefix != "." {
			path = strings.TrimSuffix(prefix, "/") + "/" + path
		}
		need := total - logical // this file's bytes of the dataset
		if size != C.sd_unlimited() {
			need = min(need, int64(size))
		}
		from, to := logical, logical+need
		logical = to
		have, err := h5ExternalFile(path, int64(offset), need, c.file)
		if err != nil {
			return nil, err
		}
		if c.depth == 0 {
			c.reread = append(c.reread, h5Reread{slabs: h5LinearSlabs(from/elem, (to+elem-1)/elem, dims), check: func() error {
				have, err := h5ExternalFile(path, int64(offset), need, c.file)
				if err == nil && have < need && !c.allow {
					err = errs.New(errs.Format, "external raw data file %s holds %d of its %d bytes from offset %d: it was cut short since the dataset was opened", h5Name(path), max(have, 0), need, int64(offset))
				}
				return err
			}})
		}
		if have < need {
			gaps = append(gaps, h5Gap{fmt.Sprintf("its external raw data file %s holds %d of its %d bytes from offset %d (cut short)", h5Name(path), max(have, 0), need, int64(offset)),
				errs.Format, h5LinearSlabs((from+max(have, 0))/elem, (to+elem-1)/elem, dims)})
		}
	}
	return gaps, nil
}

// h5ExternalFile checks the external raw data file path and returns how many of the
// need bytes from offset it holds: errs.IO when it is missing or not a regular file.
// referrer is the HDF5 file, for a hint when a relative name is found beside it.
func h5ExternalFile(path string, offset, need int64, referrer string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		hint := ""
		if !filepath.IsAbs(path) {
			hint = " (libhdf5 looks for relative names of external raw data files in the working directory, or in HDF5_EXTFILE_PREFIX"
			if _, err := os.Stat(filepath.Join(filepath.Dir(referrer), path)); err == nil {
				hint += `; set HDF5_EXTFILE_PREFIX='${ORIGIN}' to read the one beside the HDF5 file`
			}
			hint += ")"
		}
		return 0, errs.Wrap(errs.IO, fmt.Errorf("external raw data file: %w%s", err, hint))
	}
	if !st.Mode().IsRegular() {
		return 0, errs.New(errs.IO, "external raw data file %s %s", h5Name(path), regfile.NotRegular(st.Mode()))
	}
	return min(st.Size()-offset, need), nil
}

// h5LinearSlabs returns the elements [lo, hi) in row-major order of a dataset of extent
// dims as at most 2·rank-1 boxes.
func h5LinearSlabs(lo, hi int64, dims []int) []h5Slab {
	if lo >= hi {
		return nil
	}
	if len(dims) == 1 {
		return []h5Slab{h5BoxSlab([]int{int(lo)}, []int{int(hi)})}
	}
	inner := int64(product(dims[1:]))
	prefix := func(i int64, slabs []h5Slab) []h5Slab {
		for k := range slabs {
			s := &slabs[k]
			s.start = append([]C.hsize_t{C.hsize_t(i)}, s.start...)
			s.stride = append([]C.hsize_t{1}, s.stride...)
			s.count = append([]C.hsize_t{1}, s.count...)
			s.block = append([]C.hsize_t{1}, s.block...)
		}
		return slabs
	}
	a, b := lo/inner, hi/inner
	if a == b {
		return prefix(a, h5LinearSlabs(lo%inner, hi%inner, dims[1:]))
	}
	var out []h5Slab
	if lo%inner != 0 {
		out = append(out, prefix(a, h5LinearSlabs(lo%inner, inner, dims[1:]))...)
		a++
	}
	if a < b {
		rest := slices.Clone(dims)
		rest[0] = int(b)
		first := make([]int, len(dims))
		first[0] = int(a)
		out = append(out, h5BoxSlab(first, rest))
	}
	if hi%inner != 0 {
		out = append(out, prefix(b, h5LinearSlabs(0, hi%inner, dims[1:]))...)
	}
	return out
}

// h5BlockName substitutes block j into a printf-style VDS source name: "%b" is the
// block, "%%" a "%" (H5D__virtual_parse_source_name). has reports whether there is a
// "%b".
func h5BlockName(name string, j int) (out string, has bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] == '%' && i+1 < len(name) {
			switch name[i+1] {
			case 'b':
				b.WriteString(strconv.Itoa(j))
				i, has = i+1, true
				continue
			case '%':
				b.WriteByte('%')
				i++
				continue
			}
		}
		b.WriteByte(name[i])
	}
	return b.String(), has
}

// h5Mapping is mapping i of a VDS.
type h5Mapping struct {
	file, dset string
	vspace     C.hid_t // the region of the VDS
	sspace     C.hid_t // the source's dataspace (as recorded) and region
	printf     bool    // the names hold "%b": one source per block of the unlimited axis
}

// h5Mappings returns the mappings of the VDS of creation properties dcpl; close frees
// their dataspaces.
func h5Mappings(dcpl C.hid_t) (maps []h5Mapping, close func(), err error) {
	close = func() {
		for _, m := range maps {
			C.H5Sclose(m.vspace)
			C.H5Sclose(m.sspace)
		}
	}
	var n C.size_t
	if C.H5Pget_virtual_count(dcpl, &n) < 0 {
		return nil, close, h5Error("reading the virtual dataset's mappings")
	}
	name := func(get func(C.size_t, *C.char, C.size_t) C.ssize_t, i C.size_t) string {
		size := get(i, nil, 0)
		if size < 0 {
			return ""
		}
		buf := make([]C.char, size+1)
		get(i, &buf[0], C.size_t(len(buf)))
		return C.GoString(&buf[0])
	}
	for i := range n {
		m := h5Mapping{vspace: C.H5Pget_virtual_vspace(dcpl, i), sspace: C.H5Pget_virtual_srcspace(dcpl, i)}
		if m.vspace < 0 || m.sspace < 0 {
			if m.vspace >= 0 {
				C.H5Sclose(m.vspace)
			}
			if m.sspace >= 0 {
				C.H5Sclose(m.sspace)
			}
			return maps, close, h5Error("reading the virtual dataset's mappings")
		}
		m.file = name(func(i C.size_t, b *C.char, s C.size_t) C.ssize_t { return C.H5Pget_virtual_filename(dcpl, i, b, s) }, i)
		m.dset = name(func(i C.size_t, b *C.char, s C.size_t) C.ssize_t { return C.H5Pget_virtual_dsetname(dcpl, i, b, s) }, i)
		_, pf := h5BlockName(m.file, 0)
		_, pd := h5BlockName(m.dset, 0)
		m.printf = pf || pd
		maps = append(maps, m)
	}
	return maps, close, nil
}

// h5VirtualOpenCheck checks, before libhdf5 reads the extent of the virtual dataset set
// (H5Dget_space), the source files it opens for that: those of mappings of unlimited
// size, for printf-style mappings block by block up to the first file not found (as
// libhdf5 probes them). A FIFO or device among them is an error (errs.IO). Called with
// h5lock held.
func h5VirtualOpenCheck(set C.hid_t) error {
	dcpl := C.H5Dget_create_plist(set)
	if dcpl < 0 {
		return h5Error("reading the dataset's storage layout")
	}
	defer C.H5Pclose(dcpl)
	if C.H5Pget_layout(dcpl) != C.H5D_VIRTUAL {
		return nil
	}
	maps, closeMaps, err := h5Mappings(dcpl)
	defer closeMaps()
	if err != nil {
		return err
	}
	file := h5FileName(set)
	for _, m := range maps {
		if r, ok := h5RegularOf(m.vspace); !ok || r.unlim < 0 {
			continue
		}
		for j := 0; ; j++ {
			name, _ := h5BlockName(m.file, j)
			if name == "." {
				break
			}
			path, _, err := h5FindFile(name, file, h5VDSPrefix)
			if err != nil {
				return fmt.Errorf("virtual dataset source file %s: %w", h5Name(name), err)
			}
			if path == "" || !m.printf {
				break
			}
		}
	}
	return nil
}

// h5FileName is the name by which the file of the object obj was opened.
func h5FileName(obj C.hid_t) string {
	n := C.H5Fget_name(obj, nil, 0)
	if n < 0 {
		return ""
	}
	buf := make([]C.char, n+1)
	C.H5Fget_name(obj, &buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

// virtual checks every mapping of a VDS: its source (h5Check.source) and the regions no
// mapping covers. A mapping of unlimited size is cut to the extent; a printf-style one
// is checked block by block.
func (c *h5Check) virtual(set, dcpl C.hid_t, dims []int) ([]h5Gap, error) {
	maps, closeMaps, err := h5Mappings(dcpl)
	defer closeMaps()
	if err != nil {
		return nil, err
	}
	cdims := make([]C.hsize_t, len(dims))
	for i, n := range dims {
		cdims[i] = C.hsize_t(n)
	}
	uncovered := C.H5Screate_simple(C.int(len(dims)), &cdims[0], nil)
	if uncovered < 0 {
		return nil, h5Error("creating a dataspace")
	}
	defer C.H5Sclose(uncovered)
	if err := h5BoxSlab(make([]int, len(dims)), dims).apply(uncovered, C.H5S_SELECT_SET); err != nil {
		return nil, err
	}
	var gaps []h5Gap
	// mapped records a region whose source is src (its problem, if any).
	mapped := func(slabs []h5Slab, src h5Source) error {
		for _, s := range slabs {
			if err := s.apply(uncovered, C.H5S_SELECT_NOTB); err != nil {
				return err
			}
		}
		if len(slabs) == 0 {
			return nil
		}
		if src.why != "" {
			gaps = append(gaps, h5Gap{src.why, src.kind, slabs})
		} else if c.depth == 0 && src.holdable {
			lo := make([]int, len(dims))
			for i := range lo {
				lo[i] = int(slabs[0].start[i])
			}
			c.hold = append(c.hold, lo)
		}
		if c.depth == 0 && (src.why != "" || !src.holdable) && src.name != "" {
			found := src.why == ""
			name := src.name
			c.reread = append(c.reread, h5Reread{slabs: slabs, check: func() error {
				path, missing, err := h5FindFile(name, c.file, h5VDSPrefix)
				if err == nil && path == "" && found && !c.allow {
					err = errs.New(errs.IO, "%s since the dataset was opened", missing)
				}
				if err != nil {
					return fmt.Errorf("virtual dataset source file %s: %w", h5Name(name), err)
				}
				return nil
			}})
		}
		return nil
	}
	for _, m := range maps {
		r, regular := h5RegularOf(m.vspace)
		switch {
		case regular && r.unlim >= 0 && m.printf:
			for j := 0; ; j++ {
				slabs := r.within(dims, j, j+1)
				if len(slabs) == 0 {
					break
				}
				file, _ := h5BlockName(m.file, j)
				dset, _ := h5BlockName(m.dset, j)
				src, err := c.source(set, file, dset, m.sspace, h5Elems(slabs), -1)
				if err != nil {
					return nil, err
				}
				src.holdable = false // libhdf5 closes a printf-style mapping's sources after each read
				if err := mapped(slabs, src); err != nil {
					return nil, err
				}
			}
		case regular && r.unlim >= 0:
			if err := c.unlimited(set, m, r, dims, mapped); err != nil {
				return nil, err
			}
		default:
			slabs, err := h5SelectionSlabs(m.vspace, dims)
			if err != nil {
				return nil, err
			}
			src, err := c.source(set, m.file, m.dset, m.sspace, h5Elems(slabs), -1)
			if err != nil {
				return nil, err
			}
			if err := mapped(slabs, src); err != nil {
				return nil, err
			}
		}
	}
	if n := C.H5Sget_select_npoints(uncovered); n > 0 {
		blocks, err := h5Blocks(uncovered)
		if err != nil {
			return nil, err
		}
		var slabs []h5Slab
		for _, b := range blocks {
			slabs = append(slabs, h5BoxSlab(b[0], b[1]))
		}
		gaps = append(gaps, h5Gap{"no mapping of the virtual dataset covers them", errs.Format, slabs})
	}
	return gaps, nil
}

// unlimited checks a mapping of unlimited size that is not printf-style: one source that
// grows along its unlimited axis. The part of the region beyond what the source holds
// now is read as the fill value (libhdf5 cuts the mapping there, and the extent is that
// of the longest mapping).
func (c *h5Check) unlimited(set C.hid_t, m h5Mapping, r h5Regular, dims []int, mapped func([]h5Slab, h5Source) error) error {
	s, ok := h5RegularOf(m.sspace)
	if !ok || s.unlim < 0 {
		return fmt.Errorf("virtual dataset mapping of %s:%s: the source region is not an unlimited regular hyperslab", h5Name(m.file), h5Name(m.dset))
	}
	src, err := c.source(set, m.file, m.dset, m.sspace, -1, s.unlim)
	if err != nil {
		return err
	}
	// Elements the source holds along its unlimited axis, in whole blocks.
	var held C.hsize_t
	if src.dims != nil && C.hsize_t(src.dims[s.unlim]) > s.start[s.unlim] {
		n, a := C.hsize_t(src.dims[s.unlim]), s.unlim
		if s.block[a] == C.sd_unlimited() {
			held = n - s.start[a]
		} else if n >= s.start[a]+s.block[a] {
			held = ((n-s.start[a]-s.block[a])/s.stride[a] + 1) * s.block[a]
		}
	}
	// Where along the VDS's unlimited axis the held elements end.
	u := r.unlim
	end := r.start[u] + held
	if r.block[u] != C.sd_unlimited() {
		full, rest := held/r.block[u], held%r.block[u]
		switch {
		case rest > 0:
			end = r.start[u] + full*r.stride[u] + rest
		case full > 0:
			end = r.start[u] + (full-1)*r.stride[u] + r.block[u]
		default:
			end = r.start[u]
		}
	}
	if src.why != "" {
		end = 0
	}
	backed, beyond := h5CutAt(r.within(dims, 0, -1), u, end)
	if err := mapped(backed, src); err != nil {
		return err
	}
	if len(beyond) > 0 && src.why == "" {
		src.why, src.kind = fmt.Sprintf("the source %s:%s of an unlimited mapping holds %d elements along axis %d", h5Name(m.file), h5Name(m.dset), int(held), s.unlim), errs.Format
	}
	return mapped(beyond, src)
}

// h5CutAt splits slabs at index at of axis u: the parts before and from it, as boxes.
func h5CutAt(slabs []h5Slab, u int, at C.hsize_t) (before, after []h5Slab) {
	for _, s := range slabs {
		for j := C.hsize_t(0); j < s.count[u]; j++ {
			lo := s.start[u] + j*s.stride[u]
			hi := lo + s.block[u]
			if lo < at {
				b := s.clone()
				b.start[u], b.count[u], b.block[u] = lo, 1, min(hi, at)-lo
				before = append(before, b)
			}
			if hi > at {
				a := s.clone()
				a.start[u], a.count[u] = max(lo, at), 1
				a.block[u] = hi - a.start[u]
				after = append(after, a)
			}
		}
	}
	return before, after
}

// h5Source is what h5Check.source found of a VDS source.
type h5Source struct {
	name     string // the source file's name as stored ("" for the VDS's own file)
	dims     []int  // the source dataset's extent (nil: not opened)
	why      string // why libhdf5 reads its region as the fill value ("": it does not)
	kind     errs.Kind
	holdable bool // libhdf5 keeps it open once read
}

// source checks the source dataset dset in file (as stored in the mapping; "." is the
// VDS's own file) of the mapping region sspace, mapped to a region of elems elements:
// found where libhdf5 looks for it, an HDF5 file, the dataset in it, of an extent that
// holds the region (unless its axis unlim is unlimited), and its own storage complete
// (checked as the frames dataset's, to a depth of 4). Problems that make libhdf5 read
// the fill value are returned in why; those it cannot read through at all (a FIFO, a
// source smaller than the region) are errors.
func (c *h5Check) source(vds C.hid_t, file, dset string, sspace C.hid_t, elems int64, unlim int) (h5Source, error) {
	src := h5Source{holdable: true, kind: errs.Format}
	where := fmt.Sprintf("source %s:%s", h5Name(file), h5Name(dset))
	fid, path := C.hid_t(-1), c.file
	if file == "." {
		fid = C.H5Iget_file_id(vds)
	} else {
		src.name = file
		found, missing, err := h5FindFile(file, c.file, h5VDSPrefix)
		if err != nil {
			return src, fmt.Errorf("virtual dataset source file %s: %w", h5Name(file), err)
		}
		if found == "" {
			src.why, src.kind = fmt.Sprintf("%s: file %s %s", where, h5Name(file), missing), errs.IO
			return src, nil
		}
		path = found
		cpath := C.CString(found)
		fid = C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT)
		C.free(unsafe.Pointer(cpath))
		if fid < 0 {
			err := h5OpenError("opening")
			src.why, src.kind = fmt.Sprintf("%s: %s cannot be opened: %v", where, h5Name(found), err), errs.KindOf(err)
			return src, nil
		}
	}
	defer C.H5Fclose(fid)
	cdset := C.CString(dset)
	defer C.free(unsafe.Pointer(cdset))
	set := C.H5Dopen2(fid, cdset, c.access)
	if set < 0 {
		if h5SideErr != nil {
			return src, h5Fail(where)
		}
		C.H5Eclear2(C.H5E_DEFAULT)
		src.why = fmt.Sprintf("%s: %s holds no dataset %s", where, h5Name(path), h5Name(dset))
		return src, nil
	}
	defer C.H5Dclose(set)
	dims, err := h5Dims(set)
	if err != nil {
		return src, fmt.Errorf("%s: %w", where, err)
	}
	src.dims = dims
	switch {
	case unlim >= 0:
	case C.H5Sget_select_type(sspace) == C.H5S_SEL_ALL:
		// All of the source (whose extent the VDS does not record) maps to the region.
		if n := product(dims); int64(n) != elems {
			return src, errs.New(errs.Format, "%s has shape %s (%d elements), mapped to a region of %d elements: libhdf5 cannot read it",
				where, npy.ShapeString(dims), n, elems)
		}
	case C.H5Sget_select_npoints(sspace) > 0:
		rank := len(dims)
		lo, hi := make([]C.hsize_t, rank), make([]C.hsize_t, rank)
		if int(C.H5Sget_simple_extent_ndims(sspace)) != rank || C.H5Sget_select_bounds(sspace, &lo[0], &hi[0]) < 0 {
			return src, errs.New(errs.Format, "%s has shape %s, of another rank than the region mapped from it", where, npy.ShapeString(dims))
		}
		for i := range rank {
			if int(hi[i]) >= dims[i] {
				want := make([]int, rank)
				for k := range want {
					want[k] = int(hi[k]) + 1
				}
				return src, errs.New(errs.Format, "%s has shape %s, smaller than the region mapped from it, which needs %s: libhdf5 cannot read it",
					where, npy.ShapeString(dims), npy.ShapeString(want))
			}
		}
	}
	if c.depth >= 4 {
		return src, nil
	}
	sub := &h5Check{file: path, access: c.access, allow: c.allow, depth: c.depth + 1}
	gaps, err := sub.gaps(set, dims)
	if err != nil {
		return src, fmt.Errorf("%s: %w", where, err)
	}
	if len(gaps) > 0 {
		src.why, src.kind = where+": "+gaps[0].why, gaps[0].kind
	}
	return src, nil
}

// checkStorage finds what of the frames dataset libhdf5 would read as the fill value
// (h5Check): an error naming the frames and why, or with opt.AllowFill a note counting
// them; and sets up the holds and the checks before each read. Called with h5lock held.
func (d *h5File) checkStorage(opt dataset.Options, dims []int) (note []string, err error) {
	// Relative names of VDS sources and external raw storage are looked up from the file
	// that holds the dataset, which is another than d.path behind an external link.
	c := &h5Check{file: cmp.Or(h5FileName(d.set), d.path), access: d.access, allow: opt.AllowFill}
	gaps, err := c.gaps(d.set, dims)
	if err != nil {
		return nil, err
	}
	nav := d.fileNav
	frames := func(slabs []h5Slab) ([][2]int, error) {
		boxes, err := h5SlabBoxes(slabs, dims)
		for i, b := range boxes {
			boxes[i] = d.toNavOrder(b)
		}
		return h5Frames(boxes, nav), err
	}
	var all [][2]int
	var why []string
	kind := errs.Format
	for _, g := range gaps {
		f, err := frames(g.slabs)
		if err != nil {
			return nil, err
		}
		if len(f) == 0 {
			continue
		}
		if len(why) == 0 {
			kind = g.kind
		}
		all = append(all, f...)
		why = append(why, h5FrameList(f)+": "+g.why)
	}
	if len(why) > 3 {
		why = append(why[:3], fmt.Sprintf("%d more", len(why)-3))
	}
	for _, r := range c.reread {
		f, err := frames(r.slabs)
		if err != nil {
			return nil, err
		}
		d.reread = append(d.reread, h5Reread{frames: f, check: r.check})
	}
	if all = h5MergeRuns(all); len(all) > 0 {
		n := 0
		for _, r := range all {
			n += r[1] - r[0]
		}
		if !opt.AllowFill {
			return nil, errs.New(kind, "%d of its %d frames would be read as the fill value%s, not as recorded: %s; give option allow_fill to read them as the fill value",
				n, product(nav), h5FillValue(d.set), strings.Join(why, "; "))
		}
		note = []string{fmt.Sprintf("dataset %s: %d of its %d frames are read as the fill value%s (option allow_fill): %s",
			h5Name(d.dsPath), n, product(nav), h5FillValue(d.set), strings.Join(why, "; "))}
	}
	for _, lo := range c.hold {
		if err := d.readOne(lo); err != nil {
			return nil, err
		}
	}
	return note, nil
}

// h5FillValue is " 0" (the dataset's fill value, as text) or "" when it has none.
func h5FillValue(set C.hid_t) string {
	dcpl := C.H5Dget_create_plist(set)
	if dcpl < 0 {
		return ""
	}
	defer C.H5Pclose(dcpl)
	var v C.double
	if C.H5Pget_fill_value(dcpl, C.H5T_NATIVE_DOUBLE_g, unsafe.Pointer(&v)) < 0 {
		C.H5Eclear2(C.H5E_DEFAULT)
		return ""
	}
	return " " + strconv.FormatFloat(float64(v), 'g', -1, 64)
}

// readOne reads the element at lo, so that libhdf5 opens the VDS source there and keeps
// it open (a source file renamed or removed later is still read).
func (d *h5File) readOne(lo []int) error {
	space := C.H5Dget_space(d.set)
	if space < 0 {
		return h5Error("reading the dataspace")
	}
	defer C.H5Sclose(space)
	start, one := make([]C.hsize_t, len(lo)), make([]C.hsize_t, len(lo))
	for i, v := range lo {
		start[i], one[i] = C.hsize_t(v), 1
	}
	if C.H5Sselect_hyperslab(space, C.H5S_SELECT_SET, &start[0], nil, &one[0], nil) < 0 {
		return h5Error("selecting an element")
	}
	mem := C.H5Screate_simple(1, &one[0], nil)
	if mem < 0 {
		return h5Error("creating a dataspace")
	}
	defer C.H5Sclose(mem)
	var buf [8]byte
	if C.H5Dread(d.set, d.memType, mem, space, C.H5P_DEFAULT, unsafe.Pointer(&buf[0])) < 0 {
		return h5Fail(fmt.Sprintf("reading dataset %s at %v", h5Name(d.dsPath), lo))
	}
	return nil
}

// recheck runs the checks to repeat before a read of frames [start, end).
func (d *h5File) recheck(start, end int) error {
	for _, r := range d.reread {
		for _, f := range r.frames {
			if f[0] < end && f[1] > start {
				if err := r.check(); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// h5SlabBoxes returns the elements of slabs as boxes [lo, hi), within dims.
func h5SlabBoxes(slabs []h5Slab, dims []int) ([][2][]int, error) {
	if len(slabs) == 0 {
		return nil, nil
	}
	cdims := make([]C.hsize_t, len(dims))
	for i, n := range dims {
		cdims[i] = C.hsize_t(n)
	}
	space := C.H5Screate_simple(C.int(len(dims)), &cdims[0], nil)
	if space < 0 {
		return nil, h5Error("creating a dataspace")
	}
	defer C.H5Sclose(space)
	C.H5Sselect_none(space)
	for _, s := range slabs {
		if err := s.apply(space, C.H5S_SELECT_OR); err != nil {
			return nil, err
		}
	}
	if C.H5Sget_select_npoints(space) <= 0 {
		return nil, nil
	}
	return h5Blocks(space)
}

// h5Frames returns the frames that boxes touch, as sorted, merged runs [lo, hi): frames
// are numbered in row-major order over the leading axes nav.
func h5Frames(boxes [][2][]int, nav []int) [][2]int {
	var runs [][2]int
	last := len(nav) - 1
	for _, b := range boxes {
		lo, hi := b[0], b[1]
		var walk func(axis, base int)
		walk = func(axis, base int) {
			if axis == last {
				if lo[axis] < hi[axis] {
					runs = append(runs, [2]int{base*nav[axis] + lo[axis], base*nav[axis] + hi[axis]})
				}
				return
			}
			for i := lo[axis]; i < hi[axis]; i++ {
				walk(axis+1, base*nav[axis]+i)
			}
		}
		walk(0, 0)
	}
	return h5MergeRuns(runs)
}

// h5MergeRuns sorts runs [lo, hi) and merges those that overlap or touch.
func h5MergeRuns(runs [][2]int) [][2]int {
	slices.SortFunc(runs, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int
	for _, r := range runs {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// h5FrameList describes frame runs for messages: "frames 32-63, 70 and 2 more runs".
func h5FrameList(runs [][2]int) string {
	var parts []string
	for i, r := range runs {
		if i == 3 && len(runs) > 4 {
			parts = append(parts, fmt.Sprintf("%d more runs", len(runs)-3))
			break
		}
		if r[1]-r[0] == 1 {
			parts = append(parts, strconv.Itoa(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]-1))
		}
	}
	word := "frames "
	if len(runs) == 1 && runs[0][1]-runs[0][0] == 1 {
		word = "frame "
	}
	return word + strings.Join(parts, ", ")
}
