//go:build !nohdf5

package hdf5

/*
#cgo pkg-config: hdf5
#include <stdlib.h>
#include <string.h>
#include <hdf5.h>

// The native memory types are macros that call H5open: cgo cannot use them directly.
static hid_t sd_native(int code) {
	switch (code) {
	case 1: return H5T_NATIVE_UINT8;
	case 2: return H5T_NATIVE_UINT16;
	case 3: return H5T_NATIVE_UINT32;
	case 4: return H5T_NATIVE_INT8;
	case 5: return H5T_NATIVE_INT16;
	case 6: return H5T_NATIVE_INT32;
	case 7: return H5T_NATIVE_FLOAT;
	case 8: return H5T_NATIVE_DOUBLE;
	}
	return -1;
}

static void sd_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

// sd_errwalk keeps the innermost message of the error stack (the walk downward goes from
// the API function, n = 0, to the function that found the problem).
static herr_t sd_errwalk(unsigned n, const H5E_error2_t *e, void *buf) {
	if (e->desc != NULL) {
		snprintf((char *)buf, 256, "%s (in %s)", e->desc, e->func_name ? e->func_name : "?");
	}
	return 0;
}

// sd_lock_walk finds a record of the minor error H5E_CANTLOCKFILE ("unable to lock file")
// and the errno of the flock that failed, which the file driver writes into its
// description ("unable to lock file, errno = 11, error message = '...'").
static herr_t sd_lock_walk(unsigned n, const H5E_error2_t *e, void *out) {
	int *lock = out;
	if (e->min_num != H5E_CANTLOCKFILE) return 0;
	if (lock[0] == 0) lock[0] = 1;
	const char *at = e->desc != NULL ? strstr(e->desc, "errno = ") : NULL;
	if (at != NULL) lock[1] = atoi(at + 8);
	return 0;
}

// sd_lock_errno returns, from the error stack of the last call (left as it is), 0 when
// no file lock failed, else the errno of the flock that failed, or -1 when none is
// given.
static int sd_lock_errno(void) {
	int lock[2] = {0, -1};
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, sd_lock_walk, lock);
	return lock[0] ? lock[1] : 0;
}

static void sd_last_error(char *buf) {
	buf[0] = 0;
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, sd_errwalk, buf);
	H5Eclear2(H5E_DEFAULT);
}

typedef struct { char *buf; size_t len, cap; } sd_names;

// sd_add appends the byte kind, name and a NUL to the list: HDF5 names hold any byte but
// NUL (spaces, tabs, newlines, UTF-8), so NUL is the one safe separator.
static herr_t sd_add(sd_names *b, char kind, const char *name) {
	size_t n = strlen(name);
	if (b->len + n + 2 > b->cap) {
		size_t c = (b->cap + n + 2) * 2;
		char *nb = realloc(b->buf, c);
		if (nb == NULL) return -1;
		b->buf = nb;
		b->cap = c;
	}
	b->buf[b->len++] = kind;
	memcpy(b->buf + b->len, name, n);
	b->len += n;
	b->buf[b->len++] = 0;
	return 0;
}

static char sd_link_kind(H5L_type_t type) {
	switch (type) {
	case H5L_TYPE_HARD: return 'h';
	case H5L_TYPE_SOFT: return 's';
	case H5L_TYPE_EXTERNAL: return 'e';
	default: return 'u';
	}
}

#if H5_VERSION_GE(1, 12, 0)
static herr_t sd_link(hid_t g, const char *name, const H5L_info2_t *info, void *op) { return sd_add(op, sd_link_kind(info->type), name); }
#else
static herr_t sd_link(hid_t g, const char *name, const H5L_info_t *info, void *op) { return sd_add(op, sd_link_kind(info->type), name); }
#endif

// sd_list_links returns the links of group g in the order of their names, each as its
// kind ('h' hard, 's' soft, 'e' external, 'u' user-defined), its name and a NUL, in a
// buffer of *len bytes (malloc'd; NULL on error).
static char *sd_list_links(hid_t g, size_t *len) {
	sd_names b = {0};
	hsize_t idx = 0;
#if H5_VERSION_GE(1, 12, 0)
	herr_t err = H5Literate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, sd_link, &b);
#else
	herr_t err = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, sd_link, &b);
#endif
	if (err < 0) {
		free(b.buf);
		return NULL;
	}
	*len = b.len;
	return b.buf != NULL ? b.buf : calloc(1, 1);
}

// sd_link_target writes where the soft or external link name in group g points into buf
// of n bytes: "/path" or "file:/path" (-1 for a link of another type).
static herr_t sd_link_target(hid_t g, const char *name, hid_t lapl, char *buf, size_t n) {
#if H5_VERSION_GE(1, 12, 0)
	H5L_info2_t info;
	if (H5Lget_info2(g, name, &info, lapl) < 0) return -1;
#else
	H5L_info_t info;
	if (H5Lget_info(g, name, &info, lapl) < 0) return -1;
#endif
	if (info.type != H5L_TYPE_SOFT && info.type != H5L_TYPE_EXTERNAL) return -1;
	size_t size = info.u.val_size;
	char *val = malloc(size + 1);
	if (val == NULL || H5Lget_val(g, name, val, size, lapl) < 0) {
		free(val);
		return -1;
	}
	val[size] = 0;
	const char *file = NULL, *obj = val;
	unsigned flags;
	if (info.type == H5L_TYPE_EXTERNAL && H5Lunpack_elink_val(val, size, &flags, &file, &obj) < 0) {
		free(val);
		return -1;
	}
	if (file != NULL) {
		snprintf(buf, n, "%s:%s", file, obj);
	} else {
		snprintf(buf, n, "%s", obj);
	}
	free(val);
	return 0;
}

// sd_obj_key writes what identifies the open object obj within its file into key (16
// bytes): its address (HDF5 1.10) or token (1.12 and later).
static herr_t sd_obj_key(hid_t obj, unsigned char *key) {
	memset(key, 0, 16);
#if H5_VERSION_GE(1, 12, 0)
	H5O_info2_t info;
	if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return -1;
	memcpy(key, &info.token, sizeof info.token < 16 ? sizeof info.token : 16);
#else
	H5O_info_t info;
	if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return -1;
	memcpy(key, &info.addr, sizeof info.addr);
#endif
	return 0;
}
*/
import "C"

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Library reports whether this build reads HDF5 files (built without the tag nohdf5)
// and the version of the HDF5 C library it runs with (H5get_libversion), as "1.10.8".
func Library() (version string, ok bool) {
	defer h5Enter()()
	var major, minor, release C.uint
	if C.H5get_libversion(&major, &minor, &release) < 0 {
		return "unknown version", true
	}
	return fmt.Sprintf("%d.%d.%d", major, minor, release), true
}

// h5lock serialises calls into libhdf5: a build without its thread-safety option must not
// be entered by two threads, and a thread-safe build takes a global lock anyway.
var h5lock sync.Mutex

// h5Enter locks the goroutine to its thread and takes h5lock, and turns off the
// library's printing of error stacks for this thread (a thread-safe build keeps that
// setting per thread; errors are returned instead). The returned function undoes it.
func h5Enter() (exit func()) {
	runtime.LockOSThread()
	h5lock.Lock()
	h5SideErr = nil
	C.sd_quiet()
	return func() {
		h5lock.Unlock()
		runtime.UnlockOSThread()
	}
}

// h5Error returns the library's innermost error message, prefixed with what failed.
// Called with h5lock held.
func h5Error(what string) error {
	if msg := h5Message(); msg != "" {
		return fmt.Errorf("%s: %s", what, msg)
	}
	return errors.New(what)
}

// h5OpenError is the error of an H5Fopen that failed, read from the library's error
// stack; call it before any other library call, which would clear the stack. With HDF5's
// file locking (libhdf5 1.10 and later, on unless the environment variable
// HDF5_USE_FILE_LOCKING is FALSE), an open takes a flock on the file, which fails with
// EWOULDBLOCK (EAGAIN) while another process holds the file open for writing (an
// acquisition still writing it, h5py's File(path, "a")): that is an errs.IO error
// "locked by another process", naming HDF5_USE_FILE_LOCKING=FALSE as the way to read it
// anyway; a lock that failed otherwise (a file system without flock) is errs.IO too,
// naming the same variable. Any other failure is errs.Format: what, then the library's
// innermost message.
func h5OpenError(what string) error {
	const anyway = "set HDF5_USE_FILE_LOCKING=FALSE in the environment of the process that reads it (stemdot, " +
		"each Dask worker) to read it anyway, at the risk of reading frames while they are being written"
	switch int(C.sd_lock_errno()) {
	case 0:
		return errs.Wrap(errs.Format, h5Error(what))
	case int(syscall.EWOULDBLOCK):
		C.H5Eclear2(C.H5E_DEFAULT)
		return errs.New(errs.IO, "locked by another process: HDF5 file locking refused to open it because a program "+
			"holds it open for writing (flock: %v); wait until the writer has closed it, or %s", syscall.EWOULDBLOCK, anyway)
	default:
		return errs.New(errs.IO, "HDF5 file locking could not lock it (%w); if the file system has no file locks, %s",
			h5Error(what), anyway)
	}
}

// openFileError is the error of a file of size bytes at path that H5Fopen refused, err
// being h5OpenError's: a lock refused (errs.IO) as it is, else the file named as not a
// readable HDF5 file.
func openFileError(path string, size int64, err error) error {
	if errs.KindOf(err) == errs.IO {
		return fmt.Errorf("dataset: %s: %w", path, err)
	}
	// Without its signature or with its superblock or root group cut off, the library
	// says only "unable to open file".
	return fmt.Errorf("dataset: %s: not a readable HDF5 file (truncated, or another format) of %d bytes: %w", path, size, err)
}

// h5Message returns the library's innermost error message, "HDF5: ..." ("" when there is
// none; quoted, Go syntax, when it holds a character that does not print, such as a
// name from the file), and clears the error stack. Called with h5lock held.
func h5Message() string {
	buf := (*C.char)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(buf))
	C.sd_last_error(buf)
	msg := C.GoString(buf)
	if msg == "" {
		return ""
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) {
		msg = strconv.Quote(msg)
	}
	return "HDF5: " + msg
}

// h5File is an HDF5 dataset of frames.
type h5File struct {
	path      string
	dsPath    string
	option    string // " (option dataset_path)": what gave dsPath, for messages
	file, set C.hid_t
	memType   C.hid_t
	fileNav   []int // the dataset's nav axes as stored, size-1 axes included
	sig       [2]int
	dt        dataset.DType
	align     int
	closed    bool
	// framesLast is set for an image stack stored frames-last, (sig_y, sig_x, n), whose
	// fileNav is (n) (layout.go); frameAxis is option frame_axis, "auto", "first" or
	// "last".
	framesLast bool
	frameAxis  string
	// access are the dataset access properties of every open by path: they check the
	// targets of external links (storage.go).
	access C.hid_t
	// reread are the checks to repeat before reading the frames they concern (external raw
	// storage files, VDS sources that libhdf5 opens for each read).
	reread []h5Reread
	// chunks, when set, reads the dataset's raw chunks and decodes them outside the lock
	// (chunks.go).
	chunks *h5Chunks
	dataset.ScanFrames
}

// openHDF5 opens the frames dataset opt.DatasetPath of an HDF5 file, or, when that is
// empty, the largest readable dataset of rank 4, else 5, else 3, axes of size 1 not
// counted, among those that could hold frames first, datasets behind soft and external
// links included (with a note naming it when others could hold frames too, or when links
// could not be followed; h5ChoiceNote). Errors list the candidate datasets, and apart
// those that cannot be read (dtype, a filter the library cannot load) and why, and the
// links that could not be followed and why.
func openHDF5(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path) // the checks of a regular file, with clear errors
	if err != nil {
		return nil, err
	}
	f.Close()
	h5StartEnv()
	defer h5Enter()()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	axis, err := frameAxisOption(opt)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	d := &h5File{path: path, option: " (option dataset_path)", file: -1, set: -1, access: h5NewAccess(), frameAxis: axis}
	if d.access < 0 {
		d.closeLocked()
		return nil, fmt.Errorf("dataset: %s: %w", path, h5Error("creating dataset access properties"))
	}
	if d.file = C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT); d.file < 0 {
		err := h5OpenError("opening the file") // before closeLocked's calls clear the error stack
		d.closeLocked()
		return nil, openFileError(path, size, err)
	}
	ds, err := d.open(opt)
	if err != nil {
		d.closeLocked()
		if !strings.HasPrefix(err.Error(), "dataset: ") { // Reconcile names the file itself
			err = fmt.Errorf("dataset: %s: %w", path, err)
		}
		return nil, err
	}
	return ds, nil
}

// h5Candidate is a dataset of rank 3 to 5, which could hold frames.
type h5Candidate struct {
	path string
	dims []int
	// linked: the dataset is the target of an external link at path (such as a block
	// of a DECTRIS master file's scan).
	linked bool
	// unreadable says why the dataset cannot be read (nil: it can).
	unreadable *h5Unreadable
}

func (c h5Candidate) String() string {
	if c.dims == nil {
		return h5Name(c.path) + " (shape unknown)"
	}
	return h5Name(c.path) + " " + npy.ShapeString(c.dims)
}

// h5Name is an HDF5 path as messages show it: quoted (Go syntax) when it holds a space, a
// comma, a quote or a character that does not print, so that a listing of names stays
// unambiguous.
func h5Name(path string) string {
	if strings.ContainsFunc(path, func(r rune) bool { return unicode.IsSpace(r) || r == ',' || r == '"' || !unicode.IsPrint(r) }) {
		return strconv.Quote(path)
	}
	return path
}

// h5Unreadable says why a dataset cannot be read: Error in full, short in a listing of
// datasets ("int64", "needs filter 32015 (zstd)").
type h5Unreadable struct{ short, long string }

func (u *h5Unreadable) Error() string { return u.long }

// h5ChoiceOrder ranks a dataset for the automatic choice of the frames dataset by its
// rank, axes of size 1 not counted (an fpd file's (nav_y, nav_x, 1, sig_y, sig_x) is of
// rank 4, its (nav_y, nav_x, 1, 27) DAC values of rank 3): rank 4 (nav_y, nav_x, sig_y,
// sig_x) carries the scan shape, rank 5 too (a time series), rank 3 (n, sig_y, sig_x)
// does not; other ranks come last.
func h5ChoiceOrder(dims []int) int {
	if order, ok := map[int]int{4: 0, 5: 1, 3: 2}[h5Rank(dims)]; ok {
		return order
	}
	return 3
}

// h5Rank is the rank of dims, axes of size 1 not counted.
func h5Rank(dims []int) int {
	rank := 0
	for _, n := range dims {
		if n != 1 {
			rank++
		}
	}
	return rank
}

// holdsFrames says whether a candidate could hold a scan's frames: it can be read, its
// frames (the last two axes) have at least 2×2 pixels and there is more than one of them
// (an fpd file's (nav_y, nav_x, 1, 27) DAC values and (1, 256, 256) sum image do not).
// The automatic choice takes these first, and notes the others only when there are any.
func (c h5Candidate) holdsFrames() bool {
	n := len(c.dims)
	return c.unreadable == nil && n >= 3 && c.dims[n-2] > 1 && c.dims[n-1] > 1 && h5Rank(c.dims) >= 3
}

// h5MaxLinks is how many soft and external links the listing of datasets follows on
// one path, as many as libhdf5 follows in one traversal by default (H5Pset_nlinks).
const h5MaxLinks = 16

// h5Unfollowed is a soft or external link that the listing of datasets could not follow
// (a missing file or object, a file not safe to open, too many links on the way), or an
// object of a hard link it could not open.
type h5Unfollowed struct {
	path   string // the link's path in the file
	target string // where it points, "/path" or "file:/path" ("" for a hard link)
	err    error
}

func (u h5Unfollowed) String() string {
	if u.target == "" {
		return fmt.Sprintf("could not open %s: %v", h5Name(u.path), u.err)
	}
	return fmt.Sprintf("could not follow link %s to %s: %v", h5Name(u.path), h5Name(u.target), u.err)
}

// h5Contents is what the listing of an HDF5 file found: the candidates for the frames,
// in the order of the automatic choice, and the links it could not follow.
type h5Contents struct {
	cands      []h5Candidate
	unfollowed []h5Unfollowed
}

// h5Clean is the HDF5 path p as the listing of datasets names it: "/a/b", without empty
// and "." components ("" for the root group).
func h5Clean(p string) string {
	var parts []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "/" + strings.Join(parts, "/")
}

// candidates lists the datasets of rank 3 to 5 in the open group g at path (h5Clean; ""
// and the root group for the whole file), in the order of the automatic choice: those
// that could hold frames (holdsFrames) first, then by rank (h5ChoiceOrder), largest
// first within a rank. It follows soft and external links (the latter checked before
// libhdf5 opens their files, storage.go), and lists each object once: under its
// path through hard links where it has one, else under the path through the fewest
// links, then the shortest (a group's links in the order of their names), so that a
// link to the file itself or to a group above adds nothing. Called with h5lock held.
func (d *h5File) candidates(g C.hid_t, path string) (h5Contents, error) {
	w := &h5Walk{d: d, seen: map[string]bool{}, files: map[string]string{}}
	err := w.object(g, path, 0, false)
	for len(w.pending) > 0 && err == nil {
		i := 0
		for j, l := range w.pending {
			if cmp.Or(cmp.Compare(l.depth, w.pending[i].depth), cmp.Compare(strings.Count(l.path, "/"), strings.Count(w.pending[i].path, "/"))) < 0 {
				i = j
			}
		}
		l := w.pending[i]
		w.pending = slices.Delete(w.pending, i, i+1)
		err = w.follow(l)
	}
	if err != nil {
		return h5Contents{}, err
	}
	slices.SortStableFunc(w.cands, func(a, b h5Candidate) int {
		if a.holdsFrames() != b.holdsFrames() {
			return map[bool]int{true: -1, false: 1}[a.holdsFrames()]
		}
		return cmp.Or(cmp.Compare(h5ChoiceOrder(a.dims), h5ChoiceOrder(b.dims)), cmp.Compare(product(b.dims), product(a.dims)))
	})
	return w.h5Contents, nil
}

// h5Walk is the listing of the objects of a file (h5File.candidates).
type h5Walk struct {
	d       *h5File
	seen    map[string]bool   // the objects listed (h5Walk.key)
	files   map[string]string // the device and inode of each file name
	pending []h5Link          // soft and external links to follow
	h5Contents
}

// h5Link is a soft or external link met by the listing.
type h5Link struct {
	path, target string
	external     bool
	depth        int // the soft and external links on its path, itself included
}

// key identifies the open object obj: its file's device and inode, and its address or
// token in the file.
func (w *h5Walk) key(obj C.hid_t) (string, error) {
	name := h5FileName(obj)
	file, ok := w.files[name]
	if !ok {
		file = name
		if st, err := os.Stat(name); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				file = fmt.Sprintf("%d:%d", uint64(sys.Dev), uint64(sys.Ino))
			}
		}
		w.files[name] = file
	}
	var key [16]C.uchar
	if C.sd_obj_key(obj, &key[0]) < 0 {
		return "", h5Error("reading an object's address")
	}
	return file + "/" + string(C.GoBytes(unsafe.Pointer(&key[0]), 16)), nil
}

// object lists the open object obj, at path, reached through depth soft or external
// links (linked: its own link is external): a dataset as a candidate, a group's links
// (hard links at once, the others later); an object listed before adds nothing.
func (w *h5Walk) object(obj C.hid_t, path string, depth int, linked bool) error {
	key, err := w.key(obj)
	if err != nil || w.seen[key] {
		return err
	}
	w.seen[key] = true
	switch C.H5Iget_type(obj) {
	case C.H5I_GROUP:
		return w.group(obj, path, depth)
	case C.H5I_DATASET:
		w.dataset(obj, path, linked)
	}
	return nil
}

// group lists the links of the open group g at path ("" for the root).
func (w *h5Walk) group(g C.hid_t, path string, depth int) error {
	links, err := h5Links(g, path)
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := w.link(g, l[0], l[1:], path+"/"+l[1:], depth); err != nil {
			return err
		}
	}
	return nil
}

// h5Links lists the links of the open group g at path ("" for the root) in the order of
// their names, each as its kind ('h' hard, 's' soft, 'e' external, 'u' user-defined)
// and its name. Called with h5lock held.
func h5Links(g C.hid_t, path string) ([]string, error) {
	var n C.size_t
	list := C.sd_list_links(g, &n)
	if list == nil {
		return nil, h5Error(fmt.Sprintf("listing group %s", h5Name(cmp.Or(path, "/"))))
	}
	names := C.GoBytes(unsafe.Pointer(list), C.int(n))
	C.free(unsafe.Pointer(list))
	var out []string
	for entry := range strings.SplitSeq(strings.TrimSuffix(string(names), "\x00"), "\x00") {
		if entry != "" {
			out = append(out, entry)
		}
	}
	return out, nil
}

// link lists the object of the hard link name (kind 'h') in the open group g, at path, or
// puts a soft or external link (kind 's', 'e' or 'u') among those to follow.
func (w *h5Walk) link(g C.hid_t, kind byte, name, path string, depth int) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if kind == 'h' {
		obj := C.H5Oopen(g, cname, w.d.access)
		if obj < 0 {
			w.unfollowed = append(w.unfollowed, h5Unfollowed{path: path, err: h5LinkFail("")})
			return nil
		}
		defer C.H5Oclose(obj)
		return w.object(obj, path, depth, false)
	}
	target := "(unknown)"
	var buf [4096]C.char
	if C.sd_link_target(g, cname, w.d.access, &buf[0], C.size_t(len(buf))) >= 0 {
		target = C.GoString(&buf[0])
	}
	h5SideErr = nil
	C.H5Eclear2(C.H5E_DEFAULT)
	w.pending = append(w.pending, h5Link{path: path, target: target, external: kind == 'e', depth: depth + 1})
	return nil
}

// follow lists what the soft or external link l leads to, or records why it cannot be
// followed.
func (w *h5Walk) follow(l h5Link) error {
	if l.depth > h5MaxLinks {
		w.unfollowed = append(w.unfollowed, h5Unfollowed{l.path, l.target, errs.New(errs.Format, "more than %d soft or external links on its path", h5MaxLinks)})
		return nil
	}
	cpath := C.CString(l.path)
	defer C.free(unsafe.Pointer(cpath))
	obj := C.H5Oopen(w.d.file, cpath, w.d.access)
	if obj < 0 {
		checked := h5SideErr != nil
		err := h5LinkFail(l.target)
		// H5Oexists_by_name is false for a link whose object does not exist (its
		// intermediate groups do), where libhdf5's message would be obscure.
		if !checked && C.H5Oexists_by_name(w.d.file, cpath, w.d.access) == 0 {
			err = errs.New(errs.Format, "no such object")
		}
		h5SideErr = nil
		C.H5Eclear2(C.H5E_DEFAULT)
		w.unfollowed = append(w.unfollowed, h5Unfollowed{l.path, l.target, err})
		return nil
	}
	defer C.H5Oclose(obj)
	return w.object(obj, l.path, l.depth, l.external)
}

// dataset lists the open dataset set at path if it is of rank 3 to 5, or a file it reads
// through is not safe to open.
func (w *h5Walk) dataset(set C.hid_t, path string, linked bool) {
	dims, err := h5Dims(set)
	if errs.KindOf(err) == errs.IO { // a file it reads through is not safe to open
		w.cands = append(w.cands, h5Candidate{path: path, linked: linked, unreadable: &h5Unreadable{"unsafe to read", err.Error()}})
	}
	if err == nil && len(dims) >= 3 && len(dims) <= 5 {
		c := h5Candidate{path: path, dims: dims, linked: linked}
		if _, err := h5Readable(set); err != nil && !errors.As(err, &c.unreadable) {
			c.unreadable = &h5Unreadable{"unreadable", err.Error()}
		}
		w.cands = append(w.cands, c)
	}
	h5SideErr = nil
	C.H5Eclear2(C.H5E_DEFAULT)
}

// without returns c without the unfollowed link at dataset_path path.
func (c h5Contents) without(path string) h5Contents {
	clean := h5Clean(strings.TrimSpace(path))
	c.unfollowed = slices.DeleteFunc(slices.Clone(c.unfollowed), func(u h5Unfollowed) bool { return u.path == clean })
	return c
}

// h5Listing describes the candidates for messages: the readable ones, then those that
// cannot be read and why, then the links that could not be followed, where being "the
// file" or "it" (a group).
func h5Listing(c h5Contents, where string) string {
	var ok, bad []string
	for _, x := range c.cands {
		if x.unreadable == nil {
			ok = append(ok, x.String())
		} else {
			bad = append(bad, x.String()+" "+x.unreadable.short)
		}
	}
	listing := "datasets of rank 3 to 5 in " + where + ": " + strings.Join(ok, ", ")
	if len(ok) == 0 {
		listing = where + " has no readable dataset of rank 3 to 5"
		if len(bad) == 0 {
			listing = where + " has no dataset of rank 3 to 5"
		}
	}
	if len(bad) > 0 {
		listing += " (not readable: " + strings.Join(bad, ", ") + ")"
	}
	return strings.Join(append([]string{listing}, h5UnfollowedList(c.unfollowed)...), "; ")
}

// h5UnfollowedList describes at most three unfollowed links for messages, then how many
// more there are.
func h5UnfollowedList(unfollowed []h5Unfollowed) []string {
	var out []string
	for i, u := range unfollowed {
		if i == 3 && len(unfollowed) > 4 {
			return append(out, fmt.Sprintf("%d more links could not be followed", len(unfollowed)-3))
		}
		out = append(out, u.String())
	}
	return out
}

// h5Few lists candidates for messages: at most four, else three and how many more.
func h5Few(cands []h5Candidate) string {
	var out []string
	for i, c := range cands {
		if i == 3 && len(cands) > 4 {
			out = append(out, fmt.Sprintf("%d more", len(cands)-3))
			break
		}
		out = append(out, c.String())
	}
	return strings.Join(out, ", ")
}

// blockWith reports whether c and x are the targets of external links in one group, of
// the same rank and frames and the same size along all but the first axis: blocks of
// one scan, as a DECTRIS master file links them (/entry/data/data_000001, ...).
func (c h5Candidate) blockWith(x h5Candidate) bool {
	return c.linked && x.linked && path.Dir(c.path) == path.Dir(x.path) && len(c.dims) == len(x.dims) && slices.Equal(c.dims[1:], x.dims[1:])
}

// blocks returns c and the candidates among cands that are blocks of one scan with it
// (blockWith, holdsFrames), c first; nil when there are no others.
func (c h5Candidate) blocks(cands []h5Candidate) []h5Candidate {
	out := []h5Candidate{c}
	for _, x := range cands {
		if x.path != c.path && x.holdsFrames() && c.blockWith(x) {
			out = append(out, x)
		}
	}
	if len(out) == 1 {
		return nil
	}
	return out
}

// h5CountFrames is the number of frames of the candidates, as datasets of frames.
func h5CountFrames(cands []h5Candidate) int {
	n := 0
	for _, c := range cands {
		n += product(c.dims[:len(c.dims)-2])
	}
	return n
}

// h5ChoiceNote is the note on the automatic choice of dataset chosen among the
// contents c: none unless other datasets could hold frames too (at most four of them
// named) or links could not be followed. Blocks of a scan linked beside chosen
// (blockWith) are said not to have been read.
func h5ChoiceNote(chosen h5Candidate, c h5Contents) []string {
	blocks := chosen.blocks(c.cands)
	var others []h5Candidate
	for _, x := range c.cands {
		if x.path != chosen.path && x.holdsFrames() && !slices.ContainsFunc(blocks, func(b h5Candidate) bool { return b.path == x.path }) {
			others = append(others, x)
		}
	}
	parts := []string{"reading " + chosen.String()}
	if len(blocks) > 0 {
		parts[0] = fmt.Sprintf("reading only %s, one of %d blocks of frames linked from group %s (%d frames in all); not read: %s (format hdf5 reads one dataset: give option dataset_path to read another block; format dectris reads the blocks /entry/data/data_NNNNNN of a DECTRIS master as one scan)",
			chosen, len(blocks), h5Name(path.Dir(chosen.path)), h5CountFrames(blocks), h5Few(blocks[1:]))
	}
	if len(others) > 0 {
		parts = append(parts, fmt.Sprintf("other datasets could hold frames: %s (give option dataset_path to read one)", h5Few(others)))
	}
	parts = append(parts, h5UnfollowedList(c.unfollowed)...)
	if len(parts) == 1 && len(blocks) == 0 {
		return nil
	}
	return []string{strings.Join(parts, "; ")}
}

// h5Dims returns the dimensions of an open dataset (for a virtual dataset after checking
// the source files libhdf5 opens to find them, h5VirtualOpenCheck). Called with h5lock
// held.
func h5Dims(set C.hid_t) ([]int, error) {
	if err := h5VirtualOpenCheck(set); err != nil {
		return nil, err
	}
	space := C.H5Dget_space(set)
	if space < 0 {
		return nil, h5Error("reading the dataspace")
	}
	defer C.H5Sclose(space)
	rank := C.H5Sget_simple_extent_ndims(space)
	if rank < 0 || rank > 32 {
		return nil, h5Error("reading the rank")
	}
	var dims [32]C.hsize_t
	C.H5Sget_simple_extent_dims(space, &dims[0], nil)
	out := make([]int, rank)
	for i := range out {
		out[i] = int(dims[i])
		if C.hsize_t(out[i]) != dims[i] || out[i] < 0 {
			return nil, fmt.Errorf("dimension %d of size %d does not fit", i, uint64(dims[i]))
		}
	}
	return out, nil
}

// open opens the frames dataset and reads its shape, dtype and chunking. Called with
// h5lock held.
func (d *h5File) open(opt dataset.Options) (dataset.Dataset, error) {
	root := C.CString("/")
	defer C.free(unsafe.Pointer(root))
	g := C.H5Oopen(d.file, root, d.access)
	if g < 0 {
		return nil, h5Error("opening the root group")
	}
	contents, err := d.candidates(g, "")
	C.H5Oclose(g)
	if err != nil {
		return nil, err
	}
	cands := contents.cands
	// A dataset_path that is a link that cannot be followed is named by the error below.
	listing := h5Listing(contents.without(opt.DatasetPath), "the file")
	d.dsPath = opt.DatasetPath
	var picked []string
	var blocks []h5Candidate // of the scan whose first block the automatic choice reads
	if d.dsPath == "" {
		i := slices.IndexFunc(cands, func(c h5Candidate) bool { return c.unreadable == nil })
		switch {
		case i >= 0:
			d.dsPath = cands[i].path
			picked = h5ChoiceNote(cands[i], contents)
			blocks = cands[i].blocks(cands)
		case len(cands) > 0:
			return nil, fmt.Errorf("%s; dataset %q: %w", listing, cands[0].path, cands[0].unreadable)
		case len(contents.unfollowed) > 0:
			return nil, errs.Wrap(errs.KindOf(contents.unfollowed[0].err), errors.New(listing))
		default:
			return nil, errors.New(listing + dectrisSibling(d.path))
		}
	}
	dims, notes, err := d.openDataset(opt, listing, blocks)
	if err != nil {
		return nil, err
	}
	source := fmt.Sprintf(" from dataset %s %s", h5Name(d.dsPath), npy.ShapeString(dims))
	var cal dataset.Calibration
	if !d.framesLast {
		cal = emdCalibration(d.file, d.access, d.dsPath, dims)
	}
	return dataset.Reconcile(d, opt, dataset.NavFromAxes(d.fileNav), source, dataset.FileFrames{Whole: d.NumFrames(), RecordBytes: int64(d.FrameBytes()),
		Series: len(d.fileNav) == 1, Notes: append(picked, notes...), Calibration: cal})
}

// openDataset opens the dataset at d.dsPath (option dataset_path; errors list the
// file's candidates, listing) and reads its shape, axis order (layout), dtype and
// storage: it gives d the frames of the dataset (SetFileFrames) and returns its extent
// and the notes on its axis order and on frames read as the fill value. blocks are those
// of the scan whose first block the automatic choice picked (nil: none). Called with
// h5lock held.
func (d *h5File) openDataset(opt dataset.Options, listing string, blocks []h5Candidate) (dims []int, notes []string, err error) {
	cname := C.CString(d.dsPath)
	defer C.free(unsafe.Pointer(cname))
	exists := C.H5Lexists(d.file, cname, d.access) > 0
	if h5SideErr != nil { // an external link on the way to a file not safe to open
		return nil, nil, h5Fail(fmt.Sprintf("dataset %q%s", d.dsPath, d.option))
	}
	C.H5Eclear2(C.H5E_DEFAULT)
	if trimmed := strings.TrimSpace(d.dsPath); !exists && trimmed != d.dsPath {
		// A name is taken as given (HDF5 names may hold any character), else without the
		// spaces around it that an option string such as "dataset_path = /x" leaves.
		ctrim := C.CString(trimmed)
		defer C.free(unsafe.Pointer(ctrim))
		if exists = C.H5Lexists(d.file, ctrim, d.access) > 0; exists {
			d.dsPath, cname = trimmed, ctrim
		}
		h5SideErr = nil
		C.H5Eclear2(C.H5E_DEFAULT)
	}
	if !exists {
		return nil, nil, errs.New(errs.Argument, "no dataset %q%s; %s", d.dsPath, d.option, listing)
	}
	if err := d.checkDataset(cname, listing); err != nil {
		return nil, nil, err
	}
	if d.set = C.H5Dopen2(d.file, cname, d.access); d.set < 0 {
		return nil, nil, fmt.Errorf("%w; %s", h5Fail(fmt.Sprintf("opening dataset %q%s", d.dsPath, d.option)), listing)
	}
	dims, err = h5Dims(d.set)
	if err != nil {
		return nil, nil, err
	}
	if len(dims) < 3 { // of more nav axes than 3, Reconcile asks for option nav_shape
		return nil, nil, fmt.Errorf("dataset %q has shape %s: want rank 3 (n, sig_y, sig_x), 4 (nav_y, nav_x, sig_y, sig_x) or 5 (nav_z, nav_y, nav_x, sig_y, sig_x); %s",
			d.dsPath, npy.ShapeString(dims), listing)
	}
	if d.dt, err = h5Readable(d.set); err != nil {
		return nil, nil, fmt.Errorf("dataset %q: %w; %s", d.dsPath, err, listing)
	}
	d.memType = C.sd_native(C.int(d.dt))
	last, note, err := d.layout(dims)
	if err != nil {
		return nil, nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	if d.framesLast = last; last {
		d.sig, d.fileNav = [2]int{dims[0], dims[1]}, dims[2:]
	} else {
		d.sig, d.fileNav = [2]int{dims[len(dims)-2], dims[len(dims)-1]}, dims[:len(dims)-2]
	}
	frames, _, err := dataset.CheckShape(d.fileNav, d.sig, d.dt)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset %q: %w", d.dsPath, err)
	}
	if frames == 0 {
		return nil, nil, fmt.Errorf("dataset %q has shape %s: no frames", d.dsPath, npy.ShapeString(dims))
	}
	d.SetFileFrames(frames)
	if len(blocks) > 0 && len(opt.NavShape) > 0 && product(opt.NavShape) > frames {
		// Not an interrupted scan: its other frames are in the other blocks.
		return nil, nil, errs.New(errs.Argument, "nav shape %s (option nav_shape) has %d positions, but the dataset chosen, %s, is one of %d blocks of frames linked from group %s (%d frames in all), "+
			"and format hdf5 reads one dataset, not linked blocks as one scan: give option dataset_path to read one block, with option nav_shape of its frames (format dectris reads the blocks /entry/data/data_NNNNNN of a DECTRIS master as one scan)",
			npy.ShapeString(opt.NavShape), product(opt.NavShape), blocks[0], len(blocks), h5Name(path.Dir(blocks[0].path)), h5CountFrames(blocks))
	}
	if err := d.setChunkCache(dims); err != nil {
		return nil, nil, err
	}
	filled, err := d.checkStorage(opt, dims)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset %s: %w", h5Name(d.dsPath), err)
	}
	return dims, append(notes, filled...), nil
}

// checkDataset checks that the object at dataset_path cname is a dataset: a group gets
// the datasets of rank 3 to 5 in it listed. Called with h5lock held.
func (d *h5File) checkDataset(cname *C.char, listing string) error {
	obj := C.H5Oopen(d.file, cname, d.access)
	if obj < 0 {
		return fmt.Errorf("%w; %s", h5Fail(fmt.Sprintf("opening %q%s", d.dsPath, d.option)), listing)
	}
	defer C.H5Oclose(obj)
	switch C.H5Iget_type(obj) {
	case C.H5I_DATASET:
		return nil
	case C.H5I_GROUP:
		inside, err := d.candidates(obj, h5Clean(d.dsPath))
		if err != nil {
			return err
		}
		if len(inside.cands) == 0 {
			return errs.New(errs.Argument, "%q is a group, not a dataset%s and holds no dataset of rank 3 to 5; %s", d.dsPath, d.option, listing)
		}
		return errs.New(errs.Argument, "%q is a group, not a dataset%s; %s", d.dsPath, d.option, h5Listing(inside, "it"))
	}
	return errs.New(errs.Argument, "%q is a named data type, not a dataset%s; %s", d.dsPath, d.option, listing)
}

// h5Readable returns the dtype of an open dataset, or an *h5Unreadable error when its
// stored type is not one of the DTypes or its data passes through a filter that the
// library cannot load. Called with h5lock held.
func h5Readable(set C.hid_t) (dataset.DType, error) {
	dt, err := h5DType(set)
	if err != nil {
		return dataset.Invalid, err
	}
	return dt, h5CheckFilters(set)
}

// h5TypeClasses name the HDF5 type classes other than integer and float for messages.
var h5TypeClasses = map[C.H5T_class_t]string{
	C.H5T_TIME: "time", C.H5T_STRING: "string", C.H5T_BITFIELD: "bitfield", C.H5T_OPAQUE: "opaque",
	C.H5T_COMPOUND: "compound (e.g. complex)", C.H5T_REFERENCE: "reference", C.H5T_ENUM: "enum (e.g. bool)",
	C.H5T_VLEN: "variable-length", C.H5T_ARRAY: "array",
}

// h5DType maps the dataset's stored type, named the numpy way ("int64"), to a DType.
// Called with h5lock held.
func h5DType(set C.hid_t) (dataset.DType, error) {
	t := C.H5Dget_type(set)
	if t < 0 {
		return dataset.Invalid, h5Error("reading the data type")
	}
	defer C.H5Tclose(t)
	bits := 8 * int(C.H5Tget_size(t))
	var name string
	switch class := C.H5Tget_class(t); class {
	case C.H5T_INTEGER:
		name = fmt.Sprintf("int%d", bits)
		if C.H5Tget_sign(t) != C.H5T_SGN_2 {
			name = "u" + name
		}
	case C.H5T_FLOAT:
		name = fmt.Sprintf("float%d", bits)
	default:
		name = cmp.Or(h5TypeClasses[class], fmt.Sprintf("HDF5 type class %d", int(class)))
	}
	var supported []string
	for _, dt := range dataset.DTypes() {
		if dt.String() == name {
			return dt, nil
		}
		supported = append(supported, dt.String())
	}
	return dataset.Invalid, errs.Wrap(errs.DType, &h5Unreadable{name, fmt.Sprintf("%s is not supported; supported: %s", name, strings.Join(supported, ", "))})
}

// h5CheckFilters checks that the library can load every filter of the dataset's filter
// pipeline (H5Zfilter_avail, which also searches HDF5_PLUGIN_PATH): a filter it lacks
// lets the dataset open but fails every read. Called with h5lock held.
func h5CheckFilters(set C.hid_t) error {
	dcpl := C.H5Dget_create_plist(set)
	if dcpl < 0 {
		return h5Error("reading the dataset's filters")
	}
	defer C.H5Pclose(dcpl)
	for i := range C.H5Pget_nfilters(dcpl) {
		var flags, config C.uint
		var nvalues C.size_t
		var name [256]C.char
		id := C.H5Pget_filter2(dcpl, C.uint(i), &flags, &nvalues, nil, C.size_t(len(name)), &name[0], &config)
		if id < 0 {
			return h5Error("reading the dataset's filters")
		}
		avail := C.H5Zfilter_avail(id)
		C.H5Eclear2(C.H5E_DEFAULT)
		if avail > 0 {
			continue
		}
		if _, _, ok, err := h5GoPipeline(set); err != nil || ok {
			return err // decoded in Go (chunks.go): no plugin needed
		}
		filter := fmt.Sprintf("filter %d (%s)", int(id), h5Name(cmp.Or(C.GoString(&name[0]), "unnamed")))
		if failed := h5PluginFailures(); len(failed) > 0 {
			return &h5Unreadable{"needs " + filter + ", plugins failed to load", fmt.Sprintf("its data passes through HDF5 %s, which this libhdf5 could not load; "+
				"plugins in its plugin path failed to load (the filter's may be one of them): %s", filter, strings.Join(failed, "; "))}
		}
		return &h5Unreadable{"needs " + filter, fmt.Sprintf("its data passes through HDF5 %s, which this libhdf5 cannot load: "+
			"install the filter's plugin (e.g. the plugins of the hdf5plugin Python package) and set HDF5_PLUGIN_PATH to its folder "+
			"(registered filters: https://github.com/HDFGroup/hdf5_plugins/blob/master/docs/RegisteredFilterPlugins.md)", filter)}
	}
	return nil
}

// setChunkCache sizes the dataset's chunk cache to hold every chunk of one band of chunks
// along the first nav axis (capped at 256 MiB), so that reading a band's frames tile by
// tile decompresses each chunk once, and records the frames of one chunk along the frame
// order as the alignment for tiles (AlignFrames). Called with h5lock held.
func (d *h5File) setChunkCache(dims []int) error {
	d.align = 1
	dcpl := C.H5Dget_create_plist(d.set)
	if dcpl < 0 {
		return h5Error("reading the dataset's storage layout")
	}
	defer C.H5Pclose(dcpl)
	if C.H5Pget_layout(dcpl) != C.H5D_CHUNKED {
		return nil
	}
	var chunk [32]C.hsize_t
	rank := C.H5Pget_chunk(dcpl, C.int(len(dims)), &chunk[0])
	if int(rank) != len(dims) {
		return h5Error("reading the chunk shape")
	}
	chunkBytes := int64(d.dt.Size())
	for _, c := range chunk[:len(dims)] {
		chunkBytes *= max(int64(c), 1)
	}
	order := d.axisOrder()
	band := int64(1) // chunks in one band along the first nav axis
	for _, a := range order[1:] {
		c := max(int64(chunk[a]), 1)
		band *= (int64(dims[a]) + c - 1) / c
	}
	size := func(k int) int { return min(int(chunk[order[k]]), dims[order[k]]) } // the chunk's along the k-th nav or sig axis
	nav := len(dims) - 2
	for k := nav - 1; k >= 0; k-- {
		d.align *= size(k)
		if size(k) != dims[order[k]] {
			break
		}
	}
	if size(nav) != d.sig[0] || size(nav+1) != d.sig[1] {
		d.align = 1 // chunks that split frames: no frame-aligned tiles
	}
	nbytes := min(max(2*band*chunkBytes, 1<<20), 256<<20)
	slots := nextPrime(max(521, 10*nbytes/max(chunkBytes, 1)))
	dapl := C.H5Dget_access_plist(d.set)
	if dapl < 0 {
		return h5Error("reading the dataset access properties")
	}
	defer C.H5Pclose(dapl)
	if C.H5Pset_chunk_cache(dapl, C.size_t(slots), C.size_t(nbytes), 1) < 0 {
		return h5Error("setting the chunk cache")
	}
	if err := h5CheckLinks(dapl); err != nil {
		return err
	}
	// The cache is set when the dataset is opened, and a second open while it is open
	// shares the first's: close it, then open it again with dapl.
	cname := C.CString(d.dsPath)
	defer C.free(unsafe.Pointer(cname))
	C.H5Dclose(d.set)
	if d.set = C.H5Dopen2(d.file, cname, dapl); d.set < 0 {
		return h5Fail("reopening the dataset with its chunk cache")
	}
	return d.setupChunks(dims, nbytes)
}

// nextPrime returns the smallest prime >= n (HDF5 advises a prime number of cache slots).
func nextPrime(n int64) int64 {
	for ; ; n++ {
		prime := n > 1
		for k := int64(2); k*k <= n && prime; k++ {
			prime = n%k != 0
		}
		if prime {
			return n
		}
	}
}

func (d *h5File) Format() string       { return "hdf5" }
func (d *h5File) Path() string         { return d.path }
func (d *h5File) SigShape() [2]int     { return d.sig }
func (d *h5File) DType() dataset.DType { return d.dt }
func (d *h5File) FrameBytes() int      { return d.sig[0] * d.sig[1] * d.dt.Size() }

// AlignFrames is the number of consecutive frames stored in one chunk (1 for contiguous
// data or chunks that split frames): tiles that start and end on multiples of it
// decompress each chunk once.
func (d *h5File) AlignFrames() int { return d.align }

// Close closes the dataset and the file.
func (d *h5File) Close() error {
	defer h5Enter()()
	if d.closed {
		return errs.New(errs.Argument, "dataset: %s: already closed", d.path)
	}
	return d.closeLocked()
}

func (d *h5File) closeLocked() error {
	d.closed = true
	var err error
	if d.chunks != nil && d.chunks.file != nil {
		d.chunks.closed.Store(true)
		d.chunks.file.Close()
	}
	if d.set >= 0 && C.H5Dclose(d.set) < 0 {
		err = h5Error("closing the dataset")
	}
	if d.file >= 0 && C.H5Fclose(d.file) < 0 {
		err = errors.Join(err, h5Error("closing the file"))
	}
	if d.access >= 0 {
		C.H5Pclose(d.access)
	}
	if err != nil {
		return fmt.Errorf("dataset: %s: %w", d.path, err)
	}
	return nil
}

// ReadFrames reads frames [start, end): from their raw chunks, decoded in the calling
// goroutine, where every filter has a Go decoder (chunks.go); else through the library,
// which decompresses their chunks (kept in the chunk cache for the next tile) and
// converts them to the host's native type: one hyperslab per run of frames that is a box
// in the stored nav axes (at most 2·rank-1 of them).
func (d *h5File) ReadFrames(start, end int, dst []byte) error {
	return d.readFrames(start, end, dst, nil)
}

// readFrames is ReadFrames; inspect, when not nil, sees the chunks decoded in place in
// dst (see readChunks).
func (d *h5File) readFrames(start, end int, dst []byte, inspect func(off int, b []byte)) error {
	fb := d.FrameBytes()
	if err := dataset.CheckRange(d.path, start, end, d.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	if d.chunks != nil {
		return d.readChunks(start, end, dst, inspect)
	}
	defer h5Enter()()
	if d.closed {
		return errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	if err := d.recheck(start, end); err != nil {
		return fmt.Errorf("dataset: %s: frames [%d, %d): dataset %s: %w", d.path, start, end, h5Name(d.dsPath), err)
	}
	space := C.H5Dget_space(d.set)
	if space < 0 {
		return fmt.Errorf("dataset: %s: %w", d.path, h5Error("reading the dataspace"))
	}
	defer C.H5Sclose(space)
	out := dst[:(end-start)*fb]
	if d.framesLast {
		out = make([]byte, len(out))
	}
	var err error
	off := 0
	d.frameBoxes(start, end, func(lo, count []int) bool {
		var cstart, ccount [7]C.hsize_t
		for i := range lo {
			cstart[i], ccount[i] = C.hsize_t(lo[i]), C.hsize_t(count[i])
		}
		if C.H5Sselect_hyperslab(space, C.H5S_SELECT_SET, &cstart[0], nil, &ccount[0], nil) < 0 {
			err = h5Error("selecting frames")
			return false
		}
		mem := C.H5Screate_simple(C.int(len(lo)), &ccount[0], nil)
		if mem < 0 {
			err = h5Error("creating the memory dataspace")
			return false
		}
		defer C.H5Sclose(mem)
		n := product(count) * d.dt.Size()
		buf := out[off : off+n]
		if C.H5Dread(d.set, d.memType, mem, space, C.H5P_DEFAULT, unsafe.Pointer(&buf[0])) < 0 {
			err = h5Error(fmt.Sprintf("reading dataset %q", d.dsPath))
			return false
		}
		off += n
		return true
	})
	if err != nil {
		return fmt.Errorf("dataset: %s: frames [%d, %d): %w", d.path, start, end, err)
	}
	if d.framesLast {
		unstackLast(dst, out, end-start, d.dt.Size())
	}
	return nil
}
