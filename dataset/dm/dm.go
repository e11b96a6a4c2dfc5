// Package dm reads Gatan DigitalMicrograph DM3 and DM4 files (.dm3, .dm4) for package
// dataset, which it registers as format "dm".
//
// A DM file is a tree of tags (tags.go) written by Gatan's GMS; the layout followed here
// is the one RosettaSciIO (rsciio.digitalmicrograph) and LiberTEM
// (libertem.io.dataset.dm_single, through ncempy.io.dm) read. Its images are the groups
// of ImageList; each has ImageData.Data (the pixels, an array tag read in place from
// the file, never loaded), ImageData.DataType (the pixel type code), ImageData.Dimensions
// (the sizes, fastest axis first) and ImageTags ("Meta Data"). The images listed under
// Thumbnails (usually ImageList 0, a 64×64 RGB preview) are not data; of the others, the
// one with frames (2 to 5 dimensions, not spectra, a dtype read) of the most dimensions,
// then the largest, is read: a 4-D scan, not the larger 2-D survey image GMS may save
// beside it (a note names the others), or the one format option dm_image gives.
//
// DataType codes: 1 int16, 2 float32, 6 uint8, 7 int32, 9 int8, 10 uint16, 11 uint32,
// 12 float64 are read; 3 and 13 (complex), 5, 27 and 28 (packed complex), 8 and 23 (RGB),
// 14 (binary) and the others are refused (errs.DType, naming the type). Pixels are in the
// byte order of the header's flag (both occur) and are delivered in host byte order.
//
// Dimensions (d0, d1, ...), fastest first, give the array (..., d1, d0):
//   - 2 dims: one frame of (d1, d0), nav shape (1,);
//   - 3 dims: a series of d2 frames of (d1, d0), nav shape (d2,) (no scan shape: the user
//     may give any nav shape of d2 positions);
//   - 4 dims: a 4D-STEM scan. GMS writes it either in C order, (scan_y, scan_x, sig_y,
//     sig_x) = (d3, d2, d1, d0), marked by the tag ImageTags.Meta Data.Data Order Swapped
//     = 1, or transposed, (sig_y, sig_x, scan_y, scan_x) = (d3, d2, d1, d0), every frame's
//     pixel p stored for all scan positions together (the tag 0 or absent, as LiberTEM's
//     SingleDMDataSet reads it). A transposed image is read as well (LiberTEM refuses it):
//     its data are mapped and each tile's frames gathered from every detector pixel's
//     run, slower than C-ordered frames (a note says so). Format option dm_c_order reads
//     any 4-D image as C order (LiberTEM's force_c_order);
//   - 5 dims: a scan of planes (scan_z, scan_y, scan_x, sig_y, sig_x) = (d4, d3, d2, d1,
//     d0), nav shape (d4, d3, d2), when in C order (the tag 1, or option dm_c_order); one
//     not marked C order is refused naming dm_c_order, as LiberTEM refuses it.
//
// One-dimensional images and spectrum images (Meta Data.Format "Spectrum image") hold
// spectra, not frames, and are refused (errs.Format). A file that ends inside its tag
// tree is refused naming the tag; frames are read with positioned reads (in place from a
// mapping when in host byte order, dataset.OpenFlat).
package dm

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// The format options: optCOrder reads 4-D and 5-D images as C order whatever the tags say,
// optImage picks the image of ImageList to read.
const (
	optCOrder = "dm_c_order"
	optImage  = "dm_image"
)

func init() {
	dataset.Register(dataset.Format{Name: "dm", Extensions: []string{".dm3", ".dm4"}, Open: Open,
		Describe: "dm (Gatan DigitalMicrograph: .dm3, .dm4)",
		FormatOptions: []dataset.FormatOption{{Key: optCOrder, Switch: true, Default: "false",
			Usage: "DM3/DM4 files: read a 4-D image as stored in C order (scan_y, scan_x, sig_y, sig_x), and a 5-D one as (scan_z, scan_y, scan_x, sig_y, sig_x), whatever its tag Meta Data.Data Order Swapped says (LiberTEM's force_c_order); default: that tag decides, and a 4-D image without it is read as stored transposed (sig_y, sig_x, scan_y, scan_x), a 5-D one refused"},
			{Key: optImage, Usage: "DM3/DM4 files: the index in the file's ImageList of the image to read (LiberTEM's dataset_index); default: of the images that are not thumbnails, the one with frames of the most dimensions (a 4-D scan before a 2-D survey image), then the largest"}}})
}

// dtypes maps DM DataType codes to the dtypes stemdot reads.
var dtypes = map[int]dataset.DType{1: dataset.Int16, 2: dataset.Float32, 6: dataset.Uint8, 7: dataset.Int32,
	9: dataset.Int8, 10: dataset.Uint16, 11: dataset.Uint32, 12: dataset.Float64}

// unsupported names the DataType codes that are not read.
var unsupported = map[int]string{0: "null", 3: "complex64", 4: "obsolete", 5: "packed complex", 8: "RGB",
	13: "complex128", 14: "binary (bool)", 15: "RGB uint8", 16: "RGB uint8", 17: "RGB uint16", 18: "RGB float32",
	19: "RGB float64", 20: "RGBA uint8", 21: "RGBA uint8", 22: "RGBA uint8", 23: "RGBA uint8", 24: "RGBA uint16",
	25: "RGBA float32", 26: "RGBA float64", 27: "packed complex64", 28: "packed complex128", 35: "int64", 36: "uint64"}

// image is an image of the file's ImageList: what its tags say. Where a group holds
// several tags of a name, the first counts.
type image struct {
	index    int  // position in ImageList
	hasData  bool // ImageData.Data is an array of simple values
	off      int64
	count    int64 // its elements, of esize bytes at off
	esize    int64
	dataType int     // ImageData.DataType, or -1
	dimsAt   int     // the index of ImageData.Dimensions (a group) in ImageData, or -1
	dims     []int   // its sizes, fastest first
	bad      *badDim // the first of them that is not a size
	format   string
	swapped  bool // ImageTags.Meta Data.Data Order Swapped is 1 (a bool, a number or a string)
	seen     uint8
	cals     map[int]*dimCal // ImageData.Calibrations.Dimension, by the index of each entry
	cameraMM float64         // ImageTags.Microscope Info.STEM Camera Length (mm), 0 when absent
}

// dimCal is an entry of ImageData.Calibrations.Dimension: index i of the dimension lies
// at (i − Origin)·Scale Units (GMS's calibration; RosettaSciIO reads it as offset
// −Origin·Scale).
type dimCal struct {
	scale, origin float64
	units         string
}

// badDim is a tag of ImageData.Dimensions that is not a size.
type badDim struct {
	name   string // its name, or its index when it has none
	simple bool   // it is a number, num
	num    float64
}

// The tags of image that were seen.
const (
	seenData = 1 << iota
	seenType
	seenFormat
	seenSwapped
)

// bytes is the size of the image's pixel data.
func (im *image) bytes() int64 { return im.count * im.esize }

// fileTags is what Open reads from the tag tree: the images of the file's ImageList and
// the thumbnails' image indices. It keeps nothing else, so that a file of millions of
// tags takes no more memory than its images' tags.
type fileTags struct {
	listAt   int // the index of the first ImageList group in the root group, or -1
	listLen  int // its tags
	thumbsAt int // the index of the first Thumbnails group, or -1
	images   []*image
	thumbs   []int // Thumbnails.*.ImageIndex
}

// visit is fileTags' visitor.
func (t *fileTags) visit(path []pathElem, n *node) {
	top := path[0]
	switch {
	case len(path) == 1 && n.group && top.is("ImageList") && t.listAt < 0:
		t.listAt, t.listLen = top.index, int(n.count)
	case len(path) == 1 && n.group && top.is("Thumbnails") && t.thumbsAt < 0:
		t.thumbsAt = top.index
	case len(path) == 3 && top.index == t.thumbsAt && path[2].is("ImageIndex") && n.simple:
		t.thumbs = append(t.thumbs, toIndex(n.num))
	case len(path) == 5 && top.index == t.listAt && path[2].is("ImageTags") && path[3].is("Microscope Info") &&
		path[4].is("STEM Camera Length") && n.simple:
		t.image(path[1].index).cameraMM = n.num
	case len(path) >= 4 && top.index == t.listAt && path[2].is("ImageData"):
		t.imageData(path[1].index, path[3:], n)
	case len(path) == 5 && top.index == t.listAt && path[2].is("ImageTags") && path[3].is("Meta Data"):
		switch {
		case path[4].is("Format") && n.hasStr:
			if im := t.image(path[1].index); im.seen&seenFormat == 0 {
				im.seen |= seenFormat
				im.format = n.str()
			}
		case path[4].is("Data Order Swapped") && (n.simple || n.hasStr):
			if im := t.image(path[1].index); im.seen&seenSwapped == 0 {
				im.seen |= seenSwapped
				s := strings.TrimSpace(n.str())
				im.swapped = n.simple && n.num != 0 || n.hasStr && s != "0" && s != ""
			}
		}
	}
}

// imageData takes the tag at path below ImageList entry i's ImageData.
func (t *fileTags) imageData(i int, path []pathElem, n *node) {
	switch {
	case len(path) == 1 && path[0].is("Data"):
		if im := t.image(i); im.seen&seenData == 0 {
			im.seen |= seenData
			im.hasData = n.array && n.esize > 0
			im.off, im.count, im.esize = n.off, n.count, n.esize
		}
	case len(path) == 1 && path[0].is("DataType"):
		if im := t.image(i); im.seen&seenType == 0 {
			im.seen |= seenType
			if n.simple {
				im.dataType = toIndex(n.num)
			}
		}
	case len(path) == 1 && path[0].is("Dimensions") && n.group:
		if im := t.image(i); im.dimsAt < 0 {
			im.dimsAt = path[0].index
		}
	case len(path) == 4 && path[0].is("Calibrations") && path[1].is("Dimension") && (n.simple || n.hasStr):
		im := t.image(i)
		if im.cals == nil {
			im.cals = map[int]*dimCal{}
		}
		c := im.cals[path[2].index]
		if c == nil {
			c = &dimCal{}
			im.cals[path[2].index] = c
		}
		switch {
		case path[3].is("Scale") && n.simple:
			c.scale = n.num
		case path[3].is("Origin") && n.simple:
			c.origin = n.num
		case path[3].is("Units") && n.hasStr:
			c.units = n.str()
		}
	case len(path) == 2 && path[0].is("Dimensions"):
		im := t.image(i)
		if path[0].index != im.dimsAt || im.bad != nil {
			return
		}
		if !n.simple || n.num < 1 || n.num > math.MaxInt32 || n.num != math.Trunc(n.num) {
			im.bad = &badDim{name: path[1].String(), simple: n.simple, num: n.num}
			return
		}
		im.dims = append(im.dims, int(n.num))
	}
}

// toIndex is v, a code or an index, as an int; -1 for a negative, too large or NaN v.
func toIndex(v float64) int {
	if v >= 0 && v <= math.MaxInt32 {
		return int(v)
	}
	return -1
}

// image returns ImageList entry i's image, added when its first tag is seen (the entries
// come one after the other).
func (t *fileTags) image(i int) *image {
	if k := len(t.images); k > 0 && t.images[k-1].index == i {
		return t.images[k-1]
	}
	im := &image{index: i, dataType: -1, dimsAt: -1}
	t.images = append(t.images, im)
	return im
}

// Open opens the DM3/DM4 file at path (dataset.Format.Open of format "dm").
func Open(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (dataset.Dataset, error) {
		f.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", path, err))
	}
	cOrder, err := dataset.SwitchOption(opt, optCOrder, false)
	if err != nil {
		return fail(err)
	}
	index := -1
	if v, ok := opt.FormatOptions[optImage]; ok {
		if index, err = strconv.Atoi(strings.TrimSpace(v)); err != nil || index < 0 {
			return fail(errs.New(errs.Argument, "option %s %q is not an image index (0, 1, ...)", optImage, v))
		}
	}
	tags := &fileTags{listAt: -1, thumbsAt: -1}
	hdr, err := parseTags(f, size, tags.visit)
	if err != nil {
		return fail(err)
	}
	im, notes, err := tags.pick(index)
	if err != nil {
		return fail(err)
	}
	dt, ok := dtypes[im.dataType]
	if !ok {
		name := unsupported[im.dataType]
		if name == "" {
			name = "unknown"
		}
		return fail(errs.New(errs.DType, "image %d has DM data type %d (%s), which stemdot does not read (it reads int8, uint8, int16, uint16, int32, uint32, float32 and float64 images)",
			im.index, im.dataType, name))
	}
	dims := im.dims
	dimStr := fmt.Sprint(dims)
	if im.spectra() {
		return fail(fmt.Errorf("image %d (Dimensions %s, Meta Data.Format %q) holds spectra, not frames", im.index, dimStr, im.format))
	}
	if len(dims) > 5 {
		return fail(fmt.Errorf("image %d has %d dimensions %s: stemdot reads images of 2 to 5 dimensions", im.index, len(dims), dimStr))
	}
	px := int64(dt.Size()) // the bytes the dimensions make, or -1 for more than the Data tag holds
	for _, d := range dims {
		if px > im.bytes()/int64(d) {
			px = -1
			break
		}
		px *= int64(d)
	}
	if px != im.bytes() {
		return fail(fmt.Errorf("image %d: Dimensions %s of %s pixels do not make the %d elements of %d bytes its Data tag holds",
			im.index, dimStr, dt, im.count, im.esize))
	}
	source := fmt.Sprintf(" from ImageList.%d.ImageData.Dimensions %s", im.index, dimStr)
	var sig [2]int
	var fileNav []int
	series := true
	transposed := false
	sigDims, navDims := [2]int{1, 0}, []int(nil) // the dimensions of (sig_y, sig_x) and of the nav axes
	switch len(dims) {
	case 2:
		sig, fileNav = [2]int{dims[1], dims[0]}, []int{1}
	case 3:
		sig, fileNav, navDims = [2]int{dims[1], dims[0]}, []int{dims[2]}, []int{2}
	case 4, 5:
		series = false
		transposed = !cOrder && !im.swapped
		if len(dims) == 5 {
			if transposed {
				return fail(fmt.Errorf("image %d has 5 dimensions %s and is not marked C order (its tag Meta Data.Data Order Swapped is 0 or absent): stemdot reads a 5-D image stored in C order, (scan_z, scan_y, scan_x, sig_y, sig_x), as LiberTEM does; give option %s if it is", im.index, dimStr, optCOrder))
			}
			sig, fileNav, navDims = [2]int{dims[1], dims[0]}, []int{dims[4], dims[3], dims[2]}, []int{4, 3, 2}
			if cOrder {
				notes = append(notes, "option dm_c_order: the 5-D image is read as stored in C order (scan_z, scan_y, scan_x, sig_y, sig_x)")
			}
			break
		}
		if cOrder {
			notes = append(notes, "option dm_c_order: the 4-D image is read as stored in C order (scan_y, scan_x, sig_y, sig_x)")
		}
		if transposed {
			sig, fileNav = [2]int{dims[3], dims[2]}, []int{dims[1], dims[0]}
			sigDims, navDims = [2]int{3, 2}, []int{1, 0}
			notes = append(notes, "the 4-D image is stored transposed, (sig_y, sig_x, scan_y, scan_x) (its tag Meta Data.Data Order Swapped is 0 or absent): a tile's frames are gathered from every detector pixel's values, which is slower than reading C-ordered frames; give option dm_c_order if the file is C-ordered")
		} else {
			sig, fileNav, navDims = [2]int{dims[1], dims[0]}, []int{dims[3], dims[2]}, []int{3, 2}
		}
	}
	if cOrder && len(dims) < 4 {
		notes = append(notes, fmt.Sprintf("option dm_c_order applies to 4-D and 5-D images only and was ignored: image %d has %d dimensions", im.index, len(dims)))
	}
	fb, err := dataset.CheckSig(sig, dt)
	if err != nil {
		return fail(err)
	}
	frames := int(im.bytes() / int64(fb))
	ff := dataset.FileFrames{Whole: frames, RecordBytes: int64(fb), Series: series, Notes: notes,
		Calibration: im.calibration(sigDims, navDims)}
	if !transposed {
		return dataset.OpenFlat(dataset.Flat{Format: "dm", Path: path, File: f, Size: size, Offset: im.off,
			Sig: sig, DType: dt, BigEndian: !hdr.little}, opt, fileNav, source, ff)
	}
	d := newTransposed(path, f, size, im.off, frames, sig, dt, !hdr.little)
	ds, err := dataset.Reconcile(d, opt, fileNav, source, ff)
	if err != nil {
		d.Close()
		return nil, err
	}
	return ds, nil
}

// calibration is what the image's ImageData.Calibrations.Dimension entries (one per
// dimension, fastest first, as in Dimensions) and ImageTags.Microscope Info.STEM Camera
// Length (mm) say of the axes, read as RosettaSciIO reads them (scale Scale, offset
// −Origin·Scale, units Units; camera length in mm): sigDims are the dimensions of
// (sig_y, sig_x), navDims those of the nav axes in numpy order.
func (im *image) calibration(sigDims [2]int, navDims []int) dataset.Calibration {
	axis := func(name string, d int) dataset.Axis {
		c := im.cals[d]
		if c == nil {
			return dataset.Axis{Name: name}
		}
		return dataset.NewAxis(name, c.scale, -c.origin*c.scale, c.units)
	}
	var cal dataset.Calibration
	for i, name := range dataset.NavNames(len(navDims)) {
		cal.Nav = append(cal.Nav, axis(name, navDims[i]))
	}
	for i, name := range dataset.SigNames {
		cal.Sig = append(cal.Sig, axis(name, sigDims[i]))
	}
	if im.cameraMM > 0 && !math.IsInf(im.cameraMM, 0) {
		cal.CameraLength = im.cameraMM / 1000
	}
	return cal
}

// spectra reports whether the image holds spectra, not frames: one dimension, or
// Meta Data.Format "Spectrum image".
func (im *image) spectra() bool {
	return len(im.dims) == 1 || strings.EqualFold(strings.TrimSpace(im.format), "spectrum image")
}

// readable reports whether the image's tags say where its pixels are, their type and
// the sizes of its dimensions (check says why not).
func (im *image) readable() bool {
	return im.hasData && im.dataType >= 0 && im.bad == nil && len(im.dims) > 0
}

// check says why the image has no frames to read, or nil.
func (im *image) check() error {
	switch {
	case !im.hasData:
		return fmt.Errorf("image %d has no ImageData.Data array of simple values", im.index)
	case im.dataType < 0:
		return fmt.Errorf("image %d has no ImageData.DataType", im.index)
	case im.bad != nil:
		what := "not a number"
		if im.bad.simple {
			what = strconv.FormatFloat(im.bad.num, 'g', -1, 64)
		}
		return fmt.Errorf("image %d: tag %q is %s, not a size of 1 to %d", im.index, fmt.Sprintf("ImageList.%d.ImageData.Dimensions.%s", im.index, im.bad.name), what, math.MaxInt32)
	case len(im.dims) == 0:
		return fmt.Errorf("image %d has no ImageData.Dimensions", im.index)
	}
	return nil
}

// pick returns the image of ImageList at index want, or with want -1, of the images that
// are not thumbnails, the one that holds frames stemdot reads (2 to 5 dimensions, not
// spectra, a dtype it reads) of the most dimensions, then the largest: a 4-D scan before
// a larger 2-D survey image beside it, a note naming the others and option dm_image. When
// no image holds such frames, the largest is picked, for Open to say why it is refused.
func (t *fileTags) pick(want int) (*image, []string, error) {
	if t.listAt < 0 {
		return nil, nil, fmt.Errorf("no ImageList tag group: the file holds no image")
	}
	if want >= 0 {
		if want >= t.listLen {
			return nil, nil, errs.New(errs.Argument, "option %s %d: the file's ImageList holds images 0 to %d", optImage, want, t.listLen-1)
		}
		im := &image{index: want, dataType: -1}
		if k, ok := slices.BinarySearchFunc(t.images, want, func(im *image, i int) int { return im.index - i }); ok {
			im = t.images[k]
		}
		if err := im.check(); err != nil {
			return nil, nil, errs.Wrap(errs.Argument, fmt.Errorf("option %s %d: %w", optImage, want, err))
		}
		return im, nil, nil
	}
	slices.Sort(t.thumbs)
	var images []*image
	var skipped []string
	for _, im := range t.images {
		if _, thumb := slices.BinarySearch(t.thumbs, im.index); thumb {
			continue
		}
		if !im.readable() {
			if len(skipped) < 8 {
				skipped = append(skipped, im.check().Error())
			}
			continue
		}
		images = append(images, im)
	}
	if len(images) == 0 {
		why := ""
		if len(skipped) > 0 {
			why = ": " + strings.Join(skipped, "; ")
		}
		return nil, nil, fmt.Errorf("no image with data in ImageList (%d images, %d of them thumbnails)%s", t.listLen, len(t.thumbs), why)
	}
	frames := func(im *image) bool {
		_, ok := dtypes[im.dataType]
		return ok && len(im.dims) >= 2 && len(im.dims) <= 5 && !im.spectra()
	}
	better := func(a, b *image) bool { // a is picked before b
		if fa, fb := frames(a), frames(b); fa != fb {
			return fa
		}
		if frames(a) && len(a.dims) != len(b.dims) {
			return len(a.dims) > len(b.dims)
		}
		return a.bytes() > b.bytes()
	}
	best := images[0]
	for _, im := range images[1:] {
		if better(im, best) {
			best = im
		}
	}
	if len(images) == 1 {
		return best, nil, nil
	}
	var others []string
	for _, im := range images {
		if im != best && len(others) < 8 {
			others = append(others, fmt.Sprintf("%d (Dimensions %v)", im.index, im.dims))
		}
	}
	if more := len(images) - 1 - len(others); more > 0 {
		others = append(others, fmt.Sprintf("or one of %d more", more))
	}
	why := "the largest"
	if frames(best) {
		why = "of the images with frames, the one of the most dimensions, then the largest"
	}
	note := fmt.Sprintf("the file holds %d images besides thumbnails: image %d (Dimensions %v) is read (%s); option %s N reads image %s instead",
		len(images), best.index, best.dims, why, optImage, strings.Join(others, ", "))
	return best, []string{note}, nil
}

// transposedFile is a 4-D image stored (sig_y, sig_x, scan_y, scan_x): the value of
// detector pixel p in frame i is element p·frames + i of the data. The data are mapped
// read-only, and a tile's frames gathered from the mapping (a positioned read per
// detector pixel where the file cannot be mapped).
type transposedFile struct {
	path      string
	f         *os.File
	size      int64
	off       int64
	frames    int
	sig       [2]int
	dt        dataset.DType
	bigEndian bool
	mapping   []byte // the pages holding the data, or nil
	data      []byte // the data in mapping
	closed    atomic.Bool
}

// newTransposed returns the transposed image of frames frames of sig pixels of dt at
// byte off of the open file f (of size bytes), its data mapped when the file can be.
func newTransposed(path string, f *os.File, size, off int64, frames int, sig [2]int, dt dataset.DType, bigEndian bool) *transposedFile {
	d := &transposedFile{path: path, f: f, size: size, off: off, frames: frames, sig: sig, dt: dt, bigEndian: bigEndian}
	n := int64(frames) * int64(sig[0]*sig[1]*dt.Size())
	page := int64(os.Getpagesize())
	base := off / page * page
	if m, err := unix.Mmap(int(f.Fd()), base, int(off+n-base), unix.PROT_READ, unix.MAP_SHARED); err == nil {
		d.mapping, d.data = m, m[off-base:off-base+n]
	}
	return d
}

func (d *transposedFile) Format() string       { return "dm" }
func (d *transposedFile) Path() string         { return d.path }
func (d *transposedFile) NavShape() []int      { return []int{d.frames} }
func (d *transposedFile) SigShape() [2]int     { return d.sig }
func (d *transposedFile) DType() dataset.DType { return d.dt }
func (d *transposedFile) NumFrames() int       { return d.frames }
func (d *transposedFile) FrameBytes() int      { return d.sig[0] * d.sig[1] * d.dt.Size() }

// ReadFrames reads frames [start, end): each detector pixel's run of values in those
// frames, scattered into the frames. A file that shrank since it was opened gives an
// errs.IO error, checked before the mapping is read and recovered from a fault while it
// is.
func (d *transposedFile) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := dataset.CheckRange(d.path, start, end, d.frames, fb, len(dst)); err != nil {
		return err
	}
	if d.closed.Load() {
		return errs.New(errs.IO, "dataset: %s: read after Close", d.path)
	}
	n := end - start
	es := d.dt.Size()
	npix := d.sig[0] * d.sig[1]
	if d.mapping == nil { // each pixel's run read into runs, then transposed
		runs := make([]byte, npix*n*es)
		for p := range npix {
			if _, err := d.f.ReadAt(runs[p*n*es:(p+1)*n*es], d.off+(int64(p)*int64(d.frames)+int64(start))*int64(es)); err != nil {
				return dataset.ReadError(d.path, d.f, d.size, start, end, err)
			}
		}
		transpose(dst, runs, 0, n, npix, n, es)
	} else {
		if st, err := d.f.Stat(); err != nil || st.Size() < d.size {
			return dataset.ReadError(d.path, d.f, d.size, start, end, io.ErrUnexpectedEOF)
		}
		if err := d.gather(start, n, npix, es, dst); err != nil {
			return err
		}
	}
	dataset.CopyToHost(dst[:n*fb], dst[:n*fb], es, d.bigEndian)
	return nil
}

// gather copies n frames from frame start on out of the mapping into dst, turning a
// fault on the mapping (the file shrank meanwhile) into an errs.IO error.
func (d *transposedFile) gather(start, n, npix, es int, dst []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			if _, fault := v.(interface{ Addr() uintptr }); !fault {
				panic(v)
			}
			err = errs.New(errs.IO, "dataset: %s: reading frames [%d, %d): the file changed while being read (%v)", d.path, start, start+n, v)
		}
	}()
	transpose(dst, d.data, start, n, npix, d.frames, es)
	return nil
}

// transpose copies n frames from frame start on out of data, stored pixel-major (pixel p
// of frame i is element p·frames + i), into dst, frame-major; es is the element size. It
// walks blocks of pixels so that the reads of a block's runs and the writes of its rows
// stay in cache.
func transpose(dst, data []byte, start, n, npix, frames, es int) {
	const block = 64
	le := binary.LittleEndian // any order: the bytes are moved, not interpreted
	for p0 := 0; p0 < npix; p0 += block {
		p1 := min(p0+block, npix)
		for i := range n {
			row := dst[i*npix*es : (i+1)*npix*es]
			x := p0*frames + start + i // element of pixel p0 in frame start+i
			switch es {
			case 1:
				for p := p0; p < p1; p, x = p+1, x+frames {
					row[p] = data[x]
				}
			case 2:
				for p := p0; p < p1; p, x = p+1, x+frames {
					le.PutUint16(row[2*p:], le.Uint16(data[2*x:]))
				}
			case 4:
				for p := p0; p < p1; p, x = p+1, x+frames {
					le.PutUint32(row[4*p:], le.Uint32(data[4*x:]))
				}
			default:
				for p := p0; p < p1; p, x = p+1, x+frames {
					le.PutUint64(row[8*p:], le.Uint64(data[8*x:]))
				}
			}
		}
	}
}

// Close unmaps the data and closes the file.
func (d *transposedFile) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.mapping != nil {
		unix.Munmap(d.mapping)
	}
	return d.f.Close()
}
