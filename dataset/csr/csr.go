// Package csr reads LiberTEM's raw_csr format: sparse 4D-STEM data in compressed sparse
// row (CSR) form, as scipy.sparse.csr_matrix holds it, in three raw files that a TOML
// file describes. It registers the format "raw_csr" with package dataset.
//
// The layout follows LiberTEM's reader (libertem.io.dataset.raw_csr, RawCSRDataSet):
// the TOML file reads
//
//	[params]
//	filetype = "raw_csr"
//	nav_shape = [512, 512]
//	sig_shape = [516, 516]
//
//	[raw_csr]
//	indptr_file = "rowind.dat"
//	indptr_dtype = "<i4"
//	indices_file = "coords.dat"
//	indices_dtype = "<i4"
//	data_file = "values.dat"
//	data_dtype = "<i4"
//
// Both the navigation and the signal axes are flattened: the files are one matrix of
// n_frames rows (scan positions, in scan order) and sig_y·sig_x columns (pixels,
// row-major). Frame i's events are k = indptr[i] .. indptr[i+1]-1 of the indices and
// data files: pixel indices[k] has the value data[k]; several events at one pixel add
// up, as in scipy. The files hold the raw arrays (numpy's tofile, or a memory-mapped
// array) of the numpy dtypes given ("<i4", "int64", ">u2", "float32", ...: "<" little
// endian, ">" big endian, "=" or none the host's), their paths relative to the TOML
// file's directory. The frame count is len(indptr)-1. The section holding the file keys
// is named as filetype spells it (LiberTEM looks it up that way), "raw_csr" if absent.
// A sync_offset in [params] is not applied, as LiberTEM 0.16 does not apply it (a note
// names it and option sync_offset, which applies a sync offset); nav_shape may be left
// out (then option nav_shape, or a warning).
//
// Nothing is loaded whole: frames are read with positioned reads of their indptr
// entries, indices and values, as events (dataset.SparseReader: the CPU workers' gather
// kernel) or densified (ReadFrames). When the indices are int32 or uint32 and indices and
// values are in the host's byte order, the indices and data files are also memory-mapped
// read-only and the gather reads their events in place (dataset.SparseViewer; values of
// 8 or 16 bits in their own dtype, see below), after checking that
// neither file has shrunk; the pages of a partition's events are released from the
// process's memory as it finishes (dataset.SparseReleaser), so that resident memory
// does not grow with the file. The data dtype may be uint8, uint16, uint32, int8, int16,
// int32, float32 or float64 (another, e.g. int64, float16 or complex, is refused with
// errs.DType). The indptr and indices dtypes may be any integer type of 1 to 8 bytes. A
// malformed file set is an errs.Format error naming the file and the field: a missing or
// mistyped TOML key, files whose sizes are not whole numbers of their dtype, indices and
// data of different lengths, an indptr whose last entry is not the number of events; on
// reading, an indptr that decreases or points outside the events, an index outside the
// frame.
//
// Several events at one pixel of a frame add up, so a frame's pixels can exceed the
// data dtype: two uint8 events of 200 are 400. The dataset's dtype (DType) is therefore
// the dtype of the sums, the one in which every path delivers the frames and their
// events: data of uint8 or uint16 is delivered as uint32, int8 or int16 as int32, the
// other dtypes as they are. The mask-dot product's gather over the events, the frames
// densified (sum, pick, the viewer, GPU workers, Python's reduce and pick) and the
// events read by dataset.SparseReader then all see the same values (LiberTEM and scipy
// densify in the data dtype, where uint8 events of 200 + 200 wrap to 144). Checking at
// open whether a file has duplicate events would read all its indices; the dtype is
// widened instead, which costs the densified frames 4 bytes a pixel and the events that
// ReadSparse delivers a copy (they are read and widened); the gather's view in place
// keeps them as they are (dataset.SparseFrames.Values) and adds their products in
// float64. A pixel whose
// events still add up to more than the dtype of the sums holds (65 538 uint16 events of
// 65 535 at one pixel; two uint32 events of 2³¹) is refused where the frame is
// densified (errs.DType, dataset.SparseFrames.Densify): sum the file's duplicate events
// (scipy's sum_duplicates) into a wider data_dtype; the gather, which adds the events'
// products in float64, gives their sum.
package csr

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/BurntSushi/toml"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

func init() {
	dataset.Register(dataset.Format{
		Name:       "raw_csr",
		Extensions: []string{".toml"},
		Describe:   `raw_csr (LiberTEM sparse CSR: .toml with [params] filetype = "raw_csr")`,
		Detect:     Detect,
		Open:       Open,
		Options:    []string{"sig_shape"},
	})
}

// maxTOML bounds the size of the TOML file: a description of a few lines.
const maxTOML = 1 << 20

// Detect reports whether path is a .toml file whose [params] filetype is raw_csr.
func Detect(path string, _ dataset.Options) bool {
	if !strings.EqualFold(filepath.Ext(path), ".toml") {
		return false
	}
	text, err := readTOML(path)
	if err != nil {
		return false
	}
	var conf struct {
		Params struct {
			Filetype any `toml:"filetype"`
		} `toml:"params"`
	}
	if _, err := toml.Decode(string(text), &conf); err != nil {
		return false
	}
	ft, ok := conf.Params.Filetype.(string)
	return ok && strings.EqualFold(ft, "raw_csr")
}

// readTOML reads the TOML file at path (a regular file of at most maxTOML bytes).
func readTOML(path string) ([]byte, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxTOML {
		return nil, errs.New(errs.Format, "dataset: %s: %d bytes is too large for a raw_csr TOML description (at most %d)", path, size, maxTOML)
	}
	text, err := io.ReadAll(io.LimitReader(f, maxTOML+1))
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	return text, nil
}

// intType is a numpy integer dtype of an index file.
type intType struct {
	size      int
	signed    bool
	bigEndian bool
}

// parseType parses a numpy dtype string as numpy.dtype does (npy.ParseDescr: "<i4",
// "u2", ">f8", "uint32", ...) and returns its kind ('i', 'u', 'f', 'b'), its size in
// bytes and whether its values are big-endian.
func parseType(s string) (kind byte, size int, big bool, ok bool) {
	d, err := npy.ParseDescr(strings.TrimSpace(s))
	return d.Kind, d.Size, d.BigEndian, err == nil
}

// indexType parses the dtype of an indptr or indices file (key names it in errors).
func indexType(tomlPath, key, s string) (intType, error) {
	kind, size, big, ok := parseType(s)
	if !ok || kind != 'i' && kind != 'u' || size != 1 && size != 2 && size != 4 && size != 8 {
		return intType{}, errs.New(errs.DType, "dataset: %s: %s %q is not an integer dtype (want e.g. \"<i4\", \"<i8\", \"uint32\")", tomlPath, key, s)
	}
	return intType{size: size, signed: kind == 'i', bigEndian: big && size > 1}, nil
}

// dataType parses the data dtype into one of dataset's DTypes.
func dataType(tomlPath, s string) (dataset.DType, bool, error) {
	kind, size, big, ok := parseType(s)
	dt := dataset.Invalid
	switch {
	case !ok:
	case kind == 'u' && size == 1:
		dt = dataset.Uint8
	case kind == 'u' && size == 2:
		dt = dataset.Uint16
	case kind == 'u' && size == 4:
		dt = dataset.Uint32
	case kind == 'i' && size == 1:
		dt = dataset.Int8
	case kind == 'i' && size == 2:
		dt = dataset.Int16
	case kind == 'i' && size == 4:
		dt = dataset.Int32
	case kind == 'f' && size == 4:
		dt = dataset.Float32
	case kind == 'f' && size == 8:
		dt = dataset.Float64
	}
	if dt == dataset.Invalid {
		return 0, false, errs.New(errs.DType, "dataset: %s: data_dtype %q is not a dtype stemdot reads (uint8, uint16, uint32, int8, int16, int32, float32 or float64)", tomlPath, s)
	}
	return dt, big && size > 1, nil
}

// value returns the integer i of an element read from an index file of type t.
func (t intType) value(b []byte) (int64, bool) {
	var u uint64
	switch t.size {
	case 1:
		u = uint64(b[0])
		if t.signed {
			return int64(int8(b[0])), true
		}
	case 2:
		u = uint64(order(t.bigEndian).Uint16(b))
		if t.signed {
			return int64(int16(u)), true
		}
	case 4:
		u = uint64(order(t.bigEndian).Uint32(b))
		if t.signed {
			return int64(int32(u)), true
		}
	case 8:
		u = order(t.bigEndian).Uint64(b)
		if t.signed {
			return int64(u), true
		}
	}
	return int64(u), u <= math.MaxInt64
}

// text is the element b of an index file of type t as stored, for messages: an unsigned
// value as unsigned (a uint64 of 2⁶⁴−1 is 18446744073709551615, not -1).
func (t intType) text(b []byte) string {
	v, fits := t.value(b)
	if !fits {
		return strconv.FormatUint(order(t.bigEndian).Uint64(b), 10)
	}
	return strconv.FormatInt(v, 10)
}

func order(big bool) binary.ByteOrder {
	if big {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// array is one of the three raw files.
type array struct {
	path string // quoted (the TOML file names it), for messages
	f    *os.File
	size int64 // bytes when opened
	elem int   // bytes per element
	// mapping is the file mapped read-only (dataset.MapFile), for the indices and data
	// files of a file set whose events can be viewed in place (ViewSparse); else nil.
	// release drops its pages as frames are reported read (ReleaseSparse).
	mapping []byte
	release *dataset.BlockReleaser
}

func (a *array) len() int64 { return a.size / int64(a.elem) }

// readAt reads elements [i, i+len(dst)/elem) of the array into dst; errors are
// dataset.ReadError for frames [start, end).
func (a *array) readAt(dst []byte, i int64, start, end int) error {
	if len(dst) == 0 {
		return nil
	}
	if _, err := a.f.ReadAt(dst, i*int64(a.elem)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return dataset.ReadError(a.path, a.f, a.size, start, end, err)
	}
	return nil
}

// file is an opened raw_csr file set: every frame of its indptr, before the frames are
// reconciled with the scan.
type file struct {
	path                  string // the TOML file
	indptr, indices, data *array
	ptrType, idxType      intType
	stored                dataset.DType // the data file's dtype
	dt                    dataset.DType // the dtype of the sums (sumType): the dataset's
	bigEndian             bool          // data stored big-endian
	frames                int
	sig                   [2]int
	nnz                   int64
	scratch               sync.Pool // *[]byte: indptr and converted indices
	closed                atomic.Bool
}

// Open opens the raw_csr file set that the TOML file at path describes (see the package
// doc). Shared options: nav_shape replaces the file's (or reshapes it: dataset.Reconcile),
// sync_offset, flyback, roi and frames as for every format, sig_shape replaces the
// file's of the same pixel count. Errors: errs.Format for a malformed TOML file or file
// set (naming the file and the key), errs.DType for a data dtype stemdot does not read,
// errs.IO for files that cannot be read, errs.Shape for shapes that do not fit.
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	text, err := readTOML(path)
	if err != nil {
		return nil, err
	}
	conf := map[string]any{}
	if _, err := toml.Decode(string(text), &conf); err != nil {
		return nil, errs.New(errs.Format, "dataset: %s: not a TOML file: %v", path, err)
	}
	d := &file{path: path}
	nav, ok, err := d.parse(conf, &opt)
	if err != nil {
		d.Close()
		return nil, err
	}
	var source string
	var notes []string
	if ok {
		source = fmt.Sprintf(" from %s (nav_shape)", filepath.Base(path))
	}
	if s, given := conf["params"].(map[string]any)["sync_offset"]; given && s != int64(0) {
		notes = append(notes, fmt.Sprintf("[params] sync_offset %s of %s is not applied, as LiberTEM does not apply it: give option sync_offset to apply one",
			shown(s), filepath.Base(path)))
	}
	ds, err := dataset.Reconcile(d, opt, nav, source, dataset.FileFrames{Whole: d.frames, RecordBytes: int64(d.FrameBytes()), Notes: notes})
	if err != nil {
		d.Close()
		return nil, err
	}
	return ds, nil
}

// parse reads the TOML description, opens and checks the three files, and returns the
// file's nav shape (ok false when it gives none).
func (d *file) parse(conf map[string]any, opt *dataset.Options) (nav []int, ok bool, err error) {
	fail := func(format string, args ...any) ([]int, bool, error) {
		return nil, false, errs.New(errs.Format, "dataset: %s: "+format, append([]any{d.path}, args...)...)
	}
	params, isTable := conf["params"].(map[string]any)
	if !isTable {
		return fail("no [params] table: not a raw_csr description (want [params] filetype = \"raw_csr\")")
	}
	v, given := params["filetype"]
	ft, isString := v.(string)
	switch {
	case !given:
		return fail("[params] has no filetype: not a raw_csr description (want [params] filetype = \"raw_csr\")")
	case !isString:
		return fail("[params] filetype is %s, not \"raw_csr\"", shown(v))
	case !strings.EqualFold(ft, "raw_csr"):
		return fail("[params] filetype is %q, not \"raw_csr\"", ft)
	}
	section, isTable := conf[ft].(map[string]any)
	if !isTable {
		section, isTable = conf["raw_csr"].(map[string]any)
	}
	if !isTable {
		return fail("no [%s] table naming the indptr, indices and data files", ft)
	}
	shape := func(key string) ([]int, bool, error) {
		v, given := params[key]
		if !given {
			return nil, false, nil
		}
		list, isList := v.([]any)
		var s []int
		for _, x := range list {
			n, isInt := x.(int64)
			if !isInt || n < 1 || n > math.MaxInt32 {
				isList = false
				break
			}
			s = append(s, int(n))
		}
		if !isList || len(s) == 0 {
			_, _, err := fail("[params] %s %s is not a list of whole numbers from 1 to %d", key, shown(v), math.MaxInt32)
			return nil, false, err
		}
		return s, true, nil
	}
	if nav, ok, err = shape("nav_shape"); err != nil {
		return nil, false, err
	}
	sig, hasSig, err := shape("sig_shape")
	if err != nil {
		return nil, false, err
	}
	switch {
	case len(opt.SigShape) > 0:
		if len(opt.SigShape) != 2 {
			return nil, false, errs.New(errs.Argument, "dataset: %s: option sig_shape %v: want (sig_y, sig_x)", d.path, opt.SigShape)
		}
		if hasSig && product(sig) != product(opt.SigShape) {
			return nil, false, errs.New(errs.Shape, "dataset: %s: option sig_shape %v has %d pixels, but [params] sig_shape %v has %d: give a sig shape of %d pixels, or leave option sig_shape out",
				d.path, opt.SigShape, product(opt.SigShape), sig, product(sig), product(sig))
		}
		sig = opt.SigShape
	case !hasSig:
		return fail("[params] has no sig_shape: give it there, or option sig_shape (sig_y,sig_x)")
	case len(sig) != 2:
		return fail("[params] sig_shape %v: want [sig_y, sig_x]", sig)
	}
	d.sig = [2]int{sig[0], sig[1]}
	str := func(key string) (string, error) {
		s, isStr := section[key].(string)
		if !isStr || s == "" {
			return "", errs.New(errs.Format, "dataset: %s: [%s] %s is missing or not a string", d.path, ft, key)
		}
		return s, nil
	}
	var types [3]string
	for i, key := range []string{"indptr_dtype", "indices_dtype", "data_dtype"} {
		if types[i], err = str(key); err != nil {
			return nil, false, err
		}
	}
	if d.ptrType, err = indexType(d.path, "indptr_dtype", types[0]); err != nil {
		return nil, false, err
	}
	if d.idxType, err = indexType(d.path, "indices_dtype", types[1]); err != nil {
		return nil, false, err
	}
	if d.stored, d.bigEndian, err = dataType(d.path, types[2]); err != nil {
		return nil, false, err
	}
	d.dt = sumType(d.stored)
	if _, err := dataset.CheckSig(d.sig, d.dt); err != nil {
		return nil, false, errs.Wrap(errs.Shape, fmt.Errorf("dataset: %s: %w", d.path, err))
	}
	dir := filepath.Dir(d.path)
	arrays := []**array{&d.indptr, &d.indices, &d.data}
	for i, key := range []string{"indptr_file", "indices_file", "data_file"} {
		name, err := str(key)
		if err != nil {
			return nil, false, err
		}
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		quoted := strconv.Quote(name) // a path from the TOML file, quoted in every message
		f, size, err := dataset.OpenFile(name)
		if err != nil {
			return nil, false, errs.Wrap(errs.IO, fmt.Errorf("%s (%s in %s)", strings.ReplaceAll(err.Error(), name, quoted), key, d.path))
		}
		a := &array{path: quoted, f: f, size: size, elem: []int{d.ptrType.size, d.idxType.size, d.stored.Size()}[i]}
		*arrays[i] = a
		if size%int64(a.elem) != 0 {
			return fail("%s %s: %d bytes is not a whole number of %s elements of %d bytes", key, quoted, size, types[i], a.elem)
		}
	}
	if d.indptr.len() < 2 {
		return fail("indptr_file %s holds %d of the at least 2 entries a raw_csr file needs (one frame)", d.indptr.path, d.indptr.len())
	}
	if d.indices.len() != d.data.len() {
		return fail("indices_file %s holds %d events (%s) but data_file %s holds %d (%s): the files do not belong together, or a dtype is wrong",
			d.indices.path, d.indices.len(), types[1], d.data.path, d.data.len(), types[2])
	}
	d.nnz = d.indices.len()
	if d.indptr.len()-1 > math.MaxInt32 {
		return fail("indptr_file %s: %d frames are too many", d.indptr.path, d.indptr.len()-1)
	}
	d.frames = int(d.indptr.len() - 1)
	if d.idxType.size == 4 && d.idxType.bigEndian == npy.HostBigEndian && d.bigEndian == npy.HostBigEndian {
		d.indices.mapping = dataset.MapFile(d.indices.path, d.indices.f, d.indices.size)
		if d.indices.mapping != nil {
			if d.data.mapping = dataset.MapFile(d.data.path, d.data.f, d.data.size); d.data.mapping == nil {
				dataset.Unmap(d.indices.mapping)
				d.indices.mapping = nil
			}
		}
		for _, a := range []*array{d.indices, d.data} {
			a.release = dataset.NewBlockReleaser(a.mapping)
		}
	}
	var ends [2]int64
	for i, at := range []int64{0, int64(d.frames)} {
		b := make([]byte, d.ptrType.size)
		if err := d.indptr.readAt(b, at, 0, d.frames); err != nil {
			return nil, false, err
		}
		v, fits := d.ptrType.value(b)
		if !fits || v < 0 {
			return fail("indptr_file %s: entry %d is %s, outside the %d events of the indices and data files (check indptr_dtype %q)",
				d.indptr.path, at, d.ptrType.text(b), d.indices.len(), types[0])
		}
		ends[i] = v
	}
	if ends[1] != d.nnz || ends[0] > ends[1] {
		return fail("indptr_file %s: its entries run from %d to %d, but the indices and data files hold %d events: the last entry must be the number of events (check indptr_dtype %q)",
			d.indptr.path, ends[0], ends[1], d.nnz, types[0])
	}
	return nav, ok, nil
}

// shown formats a TOML value for messages as %v does, quoted when that holds a character
// that %q escapes: the file's strings reach messages escaped.
func shown(v any) string {
	s := fmt.Sprint(v)
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// sumType is the dtype in which events of dtype dt add up (see the package doc): the
// 32-bit integer of the same sign for 8- and 16-bit integers, else dt.
func sumType(dt dataset.DType) dataset.DType {
	switch dt {
	case dataset.Uint8, dataset.Uint16:
		return dataset.Uint32
	case dataset.Int8, dataset.Int16:
		return dataset.Int32
	}
	return dt
}

func product(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}

func (d *file) Format() string       { return "raw_csr" }
func (d *file) Path() string         { return d.path }
func (d *file) NavShape() []int      { return []int{1, d.frames} }
func (d *file) SigShape() [2]int     { return d.sig }
func (d *file) DType() dataset.DType { return d.dt }
func (d *file) NumFrames() int       { return d.frames }
func (d *file) FrameBytes() int      { return d.sig[0] * d.sig[1] * d.dt.Size() }
func (d *file) pixels() int          { return d.sig[0] * d.sig[1] }
func (d *file) arrays() []*array     { return []*array{d.indptr, d.indices, d.data} }
func (d *file) check(s, e int) error { return d.checkRange(s, e, (e-s)*d.FrameBytes()) }

// Close closes the three files.
func (d *file) Close() error {
	if d.closed.Swap(true) {
		return errs.New(errs.Argument, "dataset: %s: already closed", d.path)
	}
	var first error
	for _, a := range d.arrays() {
		if a != nil {
			if err := dataset.Unmap(a.mapping); err != nil && first == nil {
				first = errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", a.path, err))
			}
			if err := a.f.Close(); err != nil && first == nil {
				first = errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", a.path, err))
			}
		}
	}
	return first
}

func (d *file) checkRange(start, end, dstLen int) error {
	if d.closed.Load() {
		return errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	return dataset.CheckRange(d.path, start, end, d.frames, d.FrameBytes(), dstLen)
}

// buffer returns a pooled scratch buffer of n bytes; put it back with d.scratch.Put.
func (d *file) buffer(n int) *[]byte {
	bp, _ := d.scratch.Get().(*[]byte)
	if bp == nil || cap(*bp) < n {
		b := make([]byte, n)
		bp = &b
	}
	*bp = (*bp)[:n]
	return bp
}

// ReadSparse appends frames [start, end) to dst (dataset.SparseReader): their indptr
// entries, then their indices and values with one positioned read each. An indptr that
// decreases or points outside the events, and an index outside the frame, are
// errs.Format errors naming the file and the frame.
func (d *file) ReadSparse(start, end int, dst *dataset.SparseFrames) error {
	if err := d.check(start, end); err != nil {
		return err
	}
	if len(dst.Indptr) == 0 {
		dst.Reset()
	}
	n := end - start
	if n == 0 {
		return nil
	}
	mark := len(dst.Indptr)
	base, count, err := d.readIndptr(start, end, &dst.Indptr, len(dst.Indices))
	if err != nil {
		dst.Indptr = dst.Indptr[:mark]
		return err
	}
	undo := func(err error) error {
		dst.Indptr = dst.Indptr[:mark]
		dst.Indices = dst.Indices[:len(dst.Indices)-count]
		dst.Data = dst.Data[:len(dst.Data)-count*d.dt.Size()]
		return err
	}
	k0 := len(dst.Indices)
	dst.Indices = slices.Grow(dst.Indices, count)[:k0+count]
	dst.Data = slices.Grow(dst.Data, count*d.dt.Size())[:len(dst.Data)+count*d.dt.Size()]
	if err := d.readIndices(dst.Indices[k0:], base, start, end); err != nil {
		return undo(err)
	}
	vals := dst.Data[len(dst.Data)-count*d.dt.Size():]
	raw := vals
	if d.stored != d.dt {
		bp := d.buffer(count * d.stored.Size())
		defer d.scratch.Put(bp)
		raw = *bp
	}
	if err := d.data.readAt(raw, base, start, end); err != nil {
		return undo(err)
	}
	if d.bigEndian != npy.HostBigEndian {
		dataset.CopyToHost(raw, raw, d.stored.Size(), d.bigEndian)
	}
	if d.stored != d.dt {
		dataset.WidenValues(vals, raw, d.stored)
	}
	return nil
}

// readIndptr reads the indptr entries of frames [start, end), checks them and appends
// entries 1..end-start, made relative to entry 0 and offset by off, to ptr; it returns
// the first event of the frames and their number of events. An indptr that decreases
// or points outside the events is an errs.Format error naming the file and the frame.
func (d *file) readIndptr(start, end int, ptr *[]int, off int) (base int64, count int, err error) {
	n := end - start
	bp := d.buffer((n + 1) * d.ptrType.size)
	defer d.scratch.Put(bp)
	if err := d.indptr.readAt(*bp, int64(start), start, end); err != nil {
		return 0, 0, err
	}
	prev := int64(0)
	for i := range n + 1 {
		b := (*bp)[i*d.ptrType.size:]
		v, fits := d.ptrType.value(b)
		switch {
		case !fits || v < 0 || v > d.nnz:
			return 0, 0, errs.New(errs.Format, "dataset: %s: indptr_file %s: entry %d (frame %d) is %s, outside the %d events of the indices and data files",
				d.path, d.indptr.path, start+i, start+i, d.ptrType.text(b), d.nnz)
		case i > 0 && v < prev:
			return 0, 0, errs.New(errs.Format, "dataset: %s: indptr_file %s: entry %d is %d, less than entry %d (%d): frame %d would have a negative number of events",
				d.path, d.indptr.path, start+i, v, start+i-1, prev, start+i-1)
		case i == 0:
			base = v
		default:
			*ptr = append(*ptr, off+int(v-base))
		}
		prev = v
	}
	return base, int(prev - base), nil
}

// ViewSparse sets dst to frames [start, end) in place (dataset.SparseViewer): their
// indptr entries read and checked as ReadSparse does, their indices and values viewed
// in the files' mappings, after checking that neither file has shrunk since it was
// opened. Values of 8 or 16 bits are viewed as they are, in their own dtype
// (dataset.SparseFrames.Values), not widened to the dtype of their sums (sumType) as
// ReadSparse delivers them. A file set whose indices are not int32 or uint32 in host
// byte order, or whose values are not in host byte order, is not mapped: false, read it
// with ReadSparse.
// The indices are not checked against the frame (the consumer does, see SparseViewer).
func (d *file) ViewSparse(start, end int, dst *dataset.SparseFrames) (bool, error) {
	if d.indices.mapping == nil {
		return false, nil
	}
	if err := d.check(start, end); err != nil {
		return false, err
	}
	for _, a := range []*array{d.indices, d.data} {
		if err := dataset.CheckSize(a.path, a.f, a.size); err != nil {
			return false, err
		}
	}
	dst.Indptr = append(dst.Indptr[:0], 0)
	dst.Values = dataset.Invalid
	if d.stored != d.dt {
		dst.Values = d.stored // 8- or 16-bit values, in place: their sums are d.dt's
	}
	if end == start {
		dst.Indices, dst.Data = nil, nil
		return true, nil
	}
	base, count, err := d.readIndptr(start, end, &dst.Indptr, 0)
	if err != nil {
		return false, err
	}
	size := int64(d.stored.Size())
	e := base + int64(count)
	idx := d.indices.mapping[4*base : 4*e : 4*e]
	dst.Indices = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(idx))), count)
	dst.Data = d.data.mapping[size*base : size*e : size*e]
	return true, nil
}

// ReleaseSparse reports frames [start, end) read (dataset.SparseReleaser): their
// indices and values, located by the indptr entries start and end, to the files'
// BlockReleasers, which drop the 2 MiB blocks of the mappings read whole; nothing for a
// file set that is not mapped. An entry outside the events is an errs.Format error
// naming the file, as for ReadSparse.
func (d *file) ReleaseSparse(start, end int) error {
	if d.indices.mapping == nil || start == end {
		return nil
	}
	if err := d.check(start, end); err != nil {
		return err
	}
	var ev [2]int64
	for i, f := range []int{start, end} {
		bp := d.buffer(d.ptrType.size)
		err := d.indptr.readAt(*bp, int64(f), start, end)
		v, fits := d.ptrType.value(*bp)
		text := d.ptrType.text(*bp)
		d.scratch.Put(bp)
		switch {
		case err != nil:
			return err
		case !fits || v < 0 || v > d.nnz:
			return errs.New(errs.Format, "dataset: %s: indptr_file %s: entry %d (frame %d) is %s, outside the %d events of the indices and data files",
				d.path, d.indptr.path, f, f, text, d.nnz)
		}
		ev[i] = v
	}
	size := int64(d.stored.Size())
	if err := d.indices.release.Read(4*ev[0], 4*ev[1]); err != nil {
		return errs.New(errs.IO, "dataset: %s: releasing the pages of indices_file %s: %v", d.path, d.indices.path, err)
	}
	if err := d.data.release.Read(size*ev[0], size*ev[1]); err != nil {
		return errs.New(errs.IO, "dataset: %s: releasing the pages of data_file %s: %v", d.path, d.data.path, err)
	}
	return nil
}

// readIndices reads the indices of events [base, base+len(out)) into out, checking that
// each lies within the frame.
func (d *file) readIndices(out []int32, base int64, start, end int) error {
	t := d.idxType
	var raw []byte
	if t.size == 4 && t.bigEndian == npy.HostBigEndian && len(out) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out))
	} else {
		bp := d.buffer(len(out) * t.size)
		defer d.scratch.Put(bp)
		raw = *bp
	}
	if err := d.indices.readAt(raw, base, start, end); err != nil {
		return err
	}
	pixels := int64(d.pixels())
	for k := range out {
		var v int64
		fits := true
		if t.size == 4 && t.bigEndian == npy.HostBigEndian {
			v = int64(out[k])
			if !t.signed {
				v = int64(uint32(out[k]))
			}
		} else {
			v, fits = t.value(raw[k*t.size:])
		}
		if !fits || v < 0 || v >= pixels {
			return errs.New(errs.Format, "dataset: %s: indices_file %s: event %d (frames [%d, %d)) is at pixel %s, outside the frame of %d×%d pixels (check sig_shape and indices_dtype)",
				d.path, d.indices.path, base+int64(k), start, end, t.text(raw[k*t.size:]), d.sig[0], d.sig[1])
		}
		out[k] = int32(v)
	}
	return nil
}

// ReadFrames reads frames [start, end) densified: the values of each frame's events
// added into its pixels, zero elsewhere.
func (d *file) ReadFrames(start, end int, dst []byte) error {
	if err := d.checkRange(start, end, len(dst)); err != nil {
		return err
	}
	return dataset.ReadDensified(d, start, end, d.sig, d.dt, dst)
}
