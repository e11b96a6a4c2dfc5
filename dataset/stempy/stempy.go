// Package stempy reads the electron-counted HDF5 files of stempy (the NCEM 4D Camera's
// toolkit, github.com/OpenChemistry/stempy), and registers the format "stempy" with
// package dataset: an .h5 file holding /electron_events/frames (dataset.Open detects it
// before the plain HDF5 reader).
//
// The layout follows stempy's documentation (docs/StempyH5Format.md) and its writer and
// reader (stempy.io.SparseArray.write_to_hdf5, from_hdf5; older files of
// save_electron_counts):
//
//   - /electron_events/frames: a 1-D dataset of variable-length rows of unsigned
//     integers (h5py's special_dtype(vlen=np.uint32)), one row per detector frame: the
//     pixel indices, raveled over the frame shape, where an electron was counted; each
//     event counts 1, and an index listed twice counts 2. Attributes Nx and Ny: the frame
//     shape, read as stempy's SparseArray reads it, sig_shape = (Nx, Ny) (the 4D
//     Camera's frames are 576×576; a file without them is read as 576×576, with a
//     note, unless option sig_shape is given).
//   - /electron_events/scan_positions: the scan position of each row. Attributes Nx
//     (the scan's width, columns) and Ny (its height, rows): nav_shape = (Ny, Nx). A
//     file without them gives no scan shape (option nav_shape, or a warning).
//   - the root attribute version (1 when absent): from version 3 on, frames holds
//     frames_per_scan rows per scan position, position after position (the rows of a
//     scan position are its frames, whose counts add up); before, row i is scan position
//     scan_positions[i] (version 2 puts a position's further frames after the first
//     n_scans rows).
//
// Every frame is delivered as uint32 counts: read as events (dataset.SparseReader, each
// of value 1; the CPU workers' gather kernel) or densified (ReadFrames). Rows are read
// by ranges through libhdf5 (hdf5.EventFile), never the whole file. A malformed file
// (a missing dataset, frames that are not variable-length integer rows, a pixel index
// outside the frame, scan positions outside the scan, a row count that is not a whole
// number of frames per scan position) is an errs.Format error naming the file and the
// object.
package stempy

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
)

func init() {
	dataset.Register(dataset.Format{
		Name:     "stempy",
		Describe: "stempy (stempy electron counts: .h5 with /electron_events/frames)",
		Detect:   Detect,
		Open:     Open,
		Options:  []string{"sig_shape"},
	})
}

const (
	framesPath    = "/electron_events/frames"
	positionsPath = "/electron_events/scan_positions"
	// maxPositions bounds the scan_positions read whole at open.
	maxPositions = 1 << 28
)

// Detect reports whether path is an HDF5 file (.h5, .hdf5, .hdf) holding
// /electron_events/frames.
func Detect(path string, _ dataset.Options) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".h5", ".hdf5", ".hdf":
	default:
		return false
	}
	f, err := hdf5.OpenEvents(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Exists(framesPath)
}

// file is an opened stempy file: its scan positions, before they are reconciled with
// the scan.
type file struct {
	path   string
	h5     *hdf5.EventFile
	frames *hdf5.VLenRows
	sig    [2]int
	// positions is the number of scan positions with frames; position p's rows are
	// rows[ptr[p]:ptr[p+1]], or when ptr is nil rows p·fps to (p+1)·fps−1 (fps rows per
	// position, 1 or a version 3 file's frames per scan position: no map is held, whatever
	// the row count the file declares).
	positions int
	fps       int
	ptr       []int
	rows      []int
	closeOnce sync.Once
}

// Open opens the stempy file at path (see the package doc). Shared options: nav_shape,
// sync_offset, flyback, roi and frames as for every format; sig_shape replaces the
// file's frame shape of the same pixel count, or gives the one a file without it has.
// Errors: errs.Format for a malformed file (naming the object), errs.IO for one that
// cannot be read, errs.Shape for shapes that do not fit.
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	h5, err := hdf5.OpenEvents(path)
	if err != nil {
		return nil, err
	}
	d := &file{path: path, h5: h5, fps: 1}
	nav, notes, err := d.parse(opt)
	if err != nil {
		d.Close()
		return nil, err
	}
	source := ""
	if nav != nil {
		source = fmt.Sprintf(" from %s (Ny, Nx)", positionsPath)
	}
	ds, err := dataset.Reconcile(d, opt, nav, source, dataset.FileFrames{Whole: d.positions, RecordBytes: int64(d.FrameBytes()), Notes: notes})
	if err != nil {
		d.Close()
		return nil, err
	}
	return ds, nil
}

// parse reads the shapes and the row layout, and returns the scan shape (nil when the
// file gives none) and the notes on how the file is read.
func (d *file) parse(opt dataset.Options) (nav []int, notes []string, err error) {
	fail := func(format string, args ...any) ([]int, []string, error) {
		return nil, nil, errs.New(errs.Format, "dataset: %s: "+format, append([]any{d.path}, args...)...)
	}
	attr := func(obj, name string) (int, bool, error) {
		v, ok, err := d.h5.IntAttr(obj, name)
		if err == nil && ok && (v < 1 || v > 1<<24) {
			err = errs.New(errs.Format, "dataset: %s: attribute %s of %s is %d, not a size of 1 to %d", d.path, name, obj, v, 1<<24)
		}
		return int(v), ok, err
	}
	version, hasVersion, err := d.h5.IntAttr("/", "version")
	if err != nil {
		return nil, nil, err
	}
	if !hasVersion {
		version = 1
	}
	if d.frames, err = d.h5.VLen(framesPath); err != nil {
		return nil, nil, err
	}
	n := d.frames.Len()
	if n == 0 {
		return fail("%s holds no frame", framesPath)
	}

	fx, hasFx, err := attr(framesPath, "Nx")
	if err != nil {
		return nil, nil, err
	}
	fy, hasFy, err := attr(framesPath, "Ny")
	if err != nil {
		return nil, nil, err
	}
	switch {
	case len(opt.SigShape) > 0:
		if len(opt.SigShape) != 2 || opt.SigShape[0] < 1 || opt.SigShape[1] < 1 {
			return nil, nil, errs.New(errs.Argument, "dataset: %s: option sig_shape %v: want (sig_y, sig_x)", d.path, opt.SigShape)
		}
		if hasFx && hasFy && fx*fy != opt.SigShape[0]*opt.SigShape[1] {
			return nil, nil, errs.New(errs.Shape, "dataset: %s: option sig_shape %v has %d pixels, but %s's Nx, Ny (%d, %d) have %d: leave option sig_shape out",
				d.path, opt.SigShape, opt.SigShape[0]*opt.SigShape[1], framesPath, fx, fy, fx*fy)
		}
		d.sig = [2]int{opt.SigShape[0], opt.SigShape[1]}
	case hasFx && hasFy:
		d.sig = [2]int{fx, fy}
	case !hasFx && !hasFy:
		d.sig = [2]int{576, 576}
		notes = append(notes, fmt.Sprintf("%s has no frame shape (attributes Nx, Ny): read as the 4D Camera's 576×576; give option sig_shape for another", framesPath))
	default:
		return fail("%s has only one of its attributes Nx and Ny (the frame shape)", framesPath)
	}
	if _, err := dataset.CheckSig(d.sig, dataset.Uint32); err != nil {
		return nil, nil, errs.Wrap(errs.Shape, fmt.Errorf("dataset: %s: %w", d.path, err))
	}

	sx, hasSx, err := attr(positionsPath, "Nx")
	if err != nil {
		return nil, nil, err
	}
	sy, hasSy, err := attr(positionsPath, "Ny")
	if err != nil {
		return nil, nil, err
	}
	scans := 0
	if hasSx && hasSy {
		nav, scans = []int{sy, sx}, sx*sy
	} else if hasSx || hasSy {
		return fail("%s has only one of its attributes Nx and Ny (the scan shape)", positionsPath)
	}

	d.positions = n
	switch {
	case version >= 3 && scans > 0:
		if n%scans != 0 {
			return fail("version %d: %s holds %d rows, not a whole number of frames for each of the %d scan positions (Nx=%d, Ny=%d of %s)",
				version, framesPath, n, scans, sx, sy, positionsPath)
		}
		if fps := n / scans; fps > 1 {
			d.positions, d.fps = scans, fps
			notes = append(notes, fmt.Sprintf("%d frames per scan position, their counts added", fps))
		}
	case version < 3 && d.h5.Exists(positionsPath):
		pos, err := d.h5.Ints(positionsPath, maxPositions)
		if err != nil {
			return nil, nil, err
		}
		if err := d.mapRows(pos, n, scans); err != nil {
			return nil, nil, err
		}
		if d.ptr != nil && d.positions < n {
			notes = append(notes, fmt.Sprintf("%d rows of %s hold further frames of scan positions (%s), their counts added", n-d.positions, framesPath, positionsPath))
		}
	}
	return nav, notes, nil
}

// mapRows places the n rows of a file before version 3 at the scan positions pos gives
// (one per row); scans is the scan's size (0: unknown). Row r is position r, the usual
// case, needs no map.
func (d *file) mapRows(pos []int64, n, scans int) error {
	if len(pos) != n {
		return errs.New(errs.Format, "dataset: %s: %s has length %d but %s has %d rows: the file is damaged", d.path, positionsPath, len(pos), framesPath, n)
	}
	identity := true
	last := int64(-1)
	for r, p := range pos {
		if p < 0 || scans > 0 && p >= int64(scans) || scans == 0 && p >= int64(n) {
			return errs.New(errs.Format, "dataset: %s: %s[%d] is %d, outside the scan's %d positions", d.path, positionsPath, r, p, max(scans, n))
		}
		identity = identity && p == int64(r)
		last = max(last, p)
	}
	if identity {
		return nil
	}
	d.positions = int(last) + 1
	d.ptr = make([]int, d.positions+1)
	for _, p := range pos {
		d.ptr[p+1]++
	}
	for p := range d.positions {
		d.ptr[p+1] += d.ptr[p]
	}
	next := append([]int(nil), d.ptr[:d.positions]...)
	d.rows = make([]int, n)
	for r, p := range pos {
		d.rows[next[p]] = r
		next[p]++
	}
	return nil
}

func (d *file) Format() string       { return "stempy" }
func (d *file) Path() string         { return d.path }
func (d *file) NavShape() []int      { return []int{1, d.positions} }
func (d *file) SigShape() [2]int     { return d.sig }
func (d *file) DType() dataset.DType { return dataset.Uint32 }
func (d *file) NumFrames() int       { return d.positions }
func (d *file) FrameBytes() int      { return d.sig[0] * d.sig[1] * 4 }

// Close closes the file.
func (d *file) Close() error {
	var err error
	d.closeOnce.Do(func() {
		if d.frames != nil {
			d.frames.Close()
		}
		err = d.h5.Close()
	})
	return err
}

// one is the value of every event: a count of 1 (uint32, host byte order).
var one = binary.NativeEndian.AppendUint32(nil, 1)

// ReadSparse appends scan positions [start, end) to dst (dataset.SparseReader): each
// position's events, of its frames' rows read by runs of consecutive rows, each of
// value 1. An index outside the frame is an errs.Format error naming the row.
func (d *file) ReadSparse(start, end int, dst *dataset.SparseFrames) error {
	if err := dataset.CheckRange(d.path, start, end, d.positions, d.FrameBytes(), (end-start)*d.FrameBytes()); err != nil {
		return err
	}
	if len(dst.Indptr) == 0 {
		dst.Reset()
	}
	mark, k0, b0 := len(dst.Indptr), len(dst.Indices), len(dst.Data)
	fail := func(err error) error {
		dst.Indptr, dst.Indices, dst.Data = dst.Indptr[:mark], dst.Indices[:k0], dst.Data[:b0]
		return err
	}
	pixels := uint32(d.sig[0] * d.sig[1])
	// rows lists the rows of the positions in order; bounds[i] is how many of them
	// belong to positions start..start+i.
	var rows, bounds []int
	if d.ptr == nil {
		for r := start * d.fps; r < end*d.fps; r++ {
			rows = append(rows, r)
		}
		for p := start; p < end; p++ {
			bounds = append(bounds, (p-start+1)*d.fps)
		}
	} else {
		rows = d.rows[d.ptr[start]:d.ptr[end]]
		for p := start; p < end; p++ {
			bounds = append(bounds, d.ptr[p+1]-d.ptr[start])
		}
	}
	bi := 0
	flush := func(done int) {
		for bi < len(bounds) && bounds[bi] <= done {
			dst.Indptr = append(dst.Indptr, len(dst.Indices))
			bi++
		}
	}
	flush(0)
	done := 0 // rows read
	for i := 0; i < len(rows); i = done {
		j := i + 1
		for j < len(rows) && rows[j] == rows[j-1]+1 {
			j++
		}
		err := d.frames.Read(rows[i], rows[j-1]+1, func(row int, vals []uint32) error {
			for _, v := range vals {
				if v >= pixels {
					return errs.New(errs.Format, "dataset: %s: %s row %d: pixel index %d is outside the frame of %d×%d pixels (check sig_shape, attributes Nx and Ny of %s)",
						d.path, framesPath, row, v, d.sig[0], d.sig[1], framesPath)
				}
				dst.Indices = append(dst.Indices, int32(v))
				dst.Data = append(dst.Data, one...)
			}
			done++
			flush(done)
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	return nil
}

// ReadFrames reads scan positions [start, end) densified: the count of events at each
// pixel, uint32.
func (d *file) ReadFrames(start, end int, dst []byte) error {
	if err := dataset.CheckRange(d.path, start, end, d.positions, d.FrameBytes(), len(dst)); err != nil {
		return err
	}
	return dataset.ReadDensified(d, start, end, d.sig, dataset.Uint32, dst)
}
