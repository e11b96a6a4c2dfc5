//go:build !nohdf5

package hdf5

/*
#include <stdlib.h>
#include <hdf5.h>

// sd_read_u64 reads the scalar integer dataset name of file into *out (-1: none such).
static herr_t sd_read_u64(hid_t file, const char *name, hid_t lapl, unsigned long long *out) {
	if (H5Lexists(file, name, lapl) <= 0) return -1;
	hid_t set = H5Dopen2(file, name, lapl);
	if (set < 0) return -1;
	hid_t space = H5Dget_space(set);
	herr_t err = -1;
	if (space >= 0 && H5Sget_simple_extent_npoints(space) == 1) {
		err = H5Dread(set, H5T_NATIVE_ULLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
	}
	if (space >= 0) H5Sclose(space);
	H5Dclose(set);
	return err;
}

// sd_read_u32 reads the dataset name of file, of n elements, into out as uint32 values
// (-1: none such, or of another size; -2: it could not be read).
static herr_t sd_read_u32(hid_t file, const char *name, hid_t lapl, unsigned int *out, hssize_t n) {
	if (H5Lexists(file, name, lapl) <= 0) return -1;
	hid_t set = H5Dopen2(file, name, lapl);
	if (set < 0) return -1;
	hid_t space = H5Dget_space(set);
	herr_t err = -1;
	if (space >= 0 && H5Sget_simple_extent_npoints(space) == n) {
		err = H5Dread(set, H5T_NATIVE_UINT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0 ? -2 : 0;
	}
	if (space >= 0) H5Sclose(space);
	H5Dclose(set);
	return err;
}
*/
import "C"

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// DECTRIS masters.
//
// A DECTRIS detector (ARINA, QUADRO, EIGER) writes an acquisition as a NeXus (NXmx)
// master file and data files: the master's group /entry/data holds external links
// data_000001, data_000002, ... to the dataset /entry/data/data of each data file, a
// block of frames (n, sig_y, sig_x), bitshuffle-LZ4 compressed; the scan is the blocks
// in the order of their numbers. The master's /entry/instrument/detector/detectorSpecific
// holds nimages and ntrigger (nimages·ntrigger frames were asked for) and pixel_mask
// (sig_y, sig_x), non-zero for a pixel that is defective, in a gap between chips or
// otherwise excluded (DECTRIS SIMPLON/EIGER file documentation; the layout LiberTEM's
// dectris reader and RosettaSciIO's arina reader follow). A master holds no scan shape:
// give option nav_shape.
//
// Format "dectris" reads a master (detected by its link /entry/data/data_000001, unless
// option dataset_path names one dataset, which format hdf5 then reads): the blocks as
// one scan, each read as format hdf5 reads a dataset (chunks decoded in Go, chunks.go).
// Pixels that pixel_mask flags read as 0, with a note counting them; option
// pixel_mask=false keeps their recorded values. The detector writes the largest value
// of its dtype, 2^N−1 (2³²−1 for uint32, 2¹⁶−1 for uint16, 255 for uint8), where a
// pixel is masked and where its count overflowed: only pixel_mask tells the two apart.
// An unflagged pixel at 2^N−1 is saturated (the direct beam's centre, typically), and
// keeps that value, as DECTRIS's own converters keep it (biochem-fan/eiger2cbf issue 2,
// "respect the pixel_mask"): reading it as 0 would punch a hole in the bright field
// where the beam is brightest. The note says so, and the reader counts the unflagged
// pixels at 2^N−1 in the frames it reads (dataset.RunNoter: a warning after a run says
// how many values in how many of its frames), a word of 8 bytes at a time (markers):
// in each chunk decoded in Go right after its decode, while it is in the core's cache,
// and in the frames read otherwise in the pass that sets the flagged pixels to 0.
// Without a pixel_mask every value 2^N−1 is counted, as saturated or masked.
//
// Calibration (dataset.Calibration): NXmx's detector_distance (m, sample to detector)
// is the camera length, and with x_pixel_size and y_pixel_size (m; other units are not
// read) gives the angle a pixel spans, pixel size / distance (small angles), in mrad. A
// master of distance 0 (an ARINA's, which knows no camera length) or without these
// states nothing.
//
// Counts read from the master are checked before they are used: nimages·ntrigger that
// does not fit in 64 bits is reported as such, not as the product's wrapped value.

func init() {
	dataset.Register(dataset.Format{Name: "dectris", Describe: "dectris (DECTRIS ARINA/QUADRO/EIGER master: .h5 with /entry/data/data_000001)",
		Detect: isDectrisMaster, Open: openDectris, Options: []string{"allow_fill"},
		FormatOptions: []dataset.FormatOption{{Key: "pixel_mask", Default: "true", Switch: true,
			Usage: "DECTRIS masters: read the pixels flagged in the master's pixel_mask as 0 (false: keep their recorded values); unflagged pixels at 2^N-1 are saturated and keep that value"}}})
}

// The paths of a DECTRIS master.
const (
	dectrisBlocks   = "/entry/data"
	dectrisSpecific = "/entry/instrument/detector/detectorSpecific/"
)

// dectrisBlockName is the name of a link to a block of frames in /entry/data.
var dectrisBlockName = regexp.MustCompile(`^data_([0-9]{6})$`)

// isDectrisMaster reports whether path is an HDF5 file with the link
// /entry/data/data_000001 and no option dataset_path is given.
func isDectrisMaster(path string, opt dataset.Options) bool {
	if opt.DatasetPath != "" {
		return false
	}
	f, _, err := regfile.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	if ok, err := h5Signature(path); err != nil || !ok {
		return false
	}
	defer h5Enter()()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	file := C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT)
	if file < 0 {
		C.H5Eclear2(C.H5E_DEFAULT)
		return false
	}
	defer C.H5Fclose(file)
	access := h5NewAccess() // external links on the way to /entry/data are checked
	if access < 0 {
		C.H5Eclear2(C.H5E_DEFAULT)
		return false
	}
	defer C.H5Pclose(access)
	found := true
	for _, p := range []string{"/entry", dectrisBlocks, dectrisBlocks + "/data_000001"} {
		found = found && C.H5Lexists(file, cstr(p), access) > 0
	}
	C.H5Eclear2(C.H5E_DEFAULT)
	return found
}

// dectrisSibling is, for a file without frames, where the frames of its DECTRIS
// acquisition are: an ARINA writes NAME.h5 (metadata), NAME_master.h5 and
// NAME_data_NNNNNN.h5; "" when there is no such master beside it.
func dectrisSibling(path string) string {
	master := strings.TrimSuffix(path, filepath.Ext(path)) + "_master.h5"
	if st, err := os.Stat(master); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	return "; the frames of this DECTRIS acquisition are read from its master file " + master
}

// dectrisScan is the frames of a DECTRIS master's blocks, one after the other.
type dectrisScan struct {
	path   string
	blocks []*h5File
	first  []int // the first frame of each block, then the number of frames
	sig    [2]int
	dt     dataset.DType
	// flagged are the pixels pixel_mask flags, in frame order; zero says that they read
	// as 0 (option pixel_mask).
	flagged []int
	zero    bool
	// counts are the values 2^N−1 not flagged of each frame read (nil for a dtype
	// without the marker), said by the run note of key noteKey and text noteText.
	counts            *dataset.FrameCounts
	noteKey, noteText string
	dataset.ScanFrames
}

// openDectris opens the DECTRIS master at path.
func openDectris(path string, opt dataset.Options) (dataset.Dataset, error) {
	usePixelMask, err := dataset.SwitchOption(opt, "pixel_mask", true)
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", path, err) // errs.Argument
	}
	f, _, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	f.Close()
	h5StartEnv()
	defer h5Enter()()
	s := &dectrisScan{path: path}
	ds, err := s.open(opt, usePixelMask)
	if err != nil {
		s.closeLocked()
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return ds, nil
}

// open opens the blocks and reads the master's fields. Called with h5lock held.
func (s *dectrisScan) open(opt dataset.Options, usePixelMask bool) (dataset.Dataset, error) {
	master := &h5File{path: s.path, file: -1, set: -1, access: h5NewAccess()}
	defer master.closeLocked()
	cpath := C.CString(s.path)
	defer C.free(unsafe.Pointer(cpath))
	if master.access < 0 {
		return nil, h5Error("creating dataset access properties")
	}
	if master.file = C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT); master.file < 0 {
		return nil, h5OpenError("opening the master file")
	}
	names, err := dectrisBlockNames(master.file)
	if err != nil {
		return nil, err
	}
	var notes []string
	n := 0
	for _, name := range names {
		b := &h5File{path: s.path, file: -1, set: -1, access: h5NewAccess(), dsPath: dectrisBlocks + "/" + name, frameAxis: "first"}
		s.blocks = append(s.blocks, b)
		if b.access < 0 {
			return nil, h5Error("creating dataset access properties")
		}
		if b.file = C.H5Fopen(cpath, C.H5F_ACC_RDONLY, C.H5P_DEFAULT); b.file < 0 {
			return nil, h5OpenError("opening the master file")
		}
		listing := "block " + name + " of the master's " + strconv.Itoa(len(names)) + " blocks " + dectrisBlocks + "/data_NNNNNN"
		dims, filled, err := b.openDataset(opt, listing, nil)
		if err != nil {
			return nil, fmt.Errorf("block %s: %w", name, err)
		}
		notes = append(notes, filled...)
		if len(s.blocks) == 1 {
			s.sig, s.dt = b.sig, b.dt
		} else if b.sig != s.sig || b.dt != s.dt {
			return nil, errs.New(errs.Format, "block %s %s holds frames of %d×%d %s, block %s frames of %d×%d %s: the blocks are not one scan",
				name, npy.ShapeString(dims), b.sig[0], b.sig[1], b.dt, names[0], s.sig[0], s.sig[1], s.dt)
		}
		s.first = append(s.first, n)
		n += b.NumFrames()
	}
	s.first = append(s.first, n)
	s.SetFileFrames(n)
	if len(names) > 1 {
		notes = append(notes, fmt.Sprintf("the scan is %d blocks linked from %s: %s to %s, %d frames", len(names), dectrisBlocks, names[0], names[len(names)-1], n))
	}
	var nimages, ntrigger C.ulonglong
	if C.sd_read_u64(master.file, cstr(dectrisSpecific+"nimages"), master.access, &nimages) >= 0 &&
		C.sd_read_u64(master.file, cstr(dectrisSpecific+"ntrigger"), master.access, &ntrigger) >= 0 {
		if note := askedNote(uint64(nimages), uint64(ntrigger), n); note != "" {
			notes = append(notes, note)
		}
	}
	C.H5Eclear2(C.H5E_DEFAULT)
	maskNote, found, err := s.readPixelMask(master, usePixelMask)
	if err != nil {
		return nil, err
	}
	if marker, ok := s.marker(); ok {
		s.counts = dataset.NewFrameCounts(n)
		if found {
			maskNote += fmt.Sprintf("; unflagged pixels at %d (2^%d−1, DECTRIS's marker of masked and of overflowing pixels) are saturated and keep that value", marker, 8*s.dt.Size())
			s.noteKey = "dectris_saturated"
			s.noteText = fmt.Sprintf("saturated pixels, kept at %d: pixel values at %d (2^%d−1) that pixel_mask does not flag, where the detector's count overflowed: {count}, in {frames} of the frames read",
				marker, marker, 8*s.dt.Size())
		} else {
			maskNote += fmt.Sprintf("; values %d (2^%d−1, DECTRIS's marker of masked and of overflowing pixels) are kept: without a pixel_mask the two cannot be told apart", marker, 8*s.dt.Size())
			s.noteKey = "dectris_marker"
			s.noteText = fmt.Sprintf("pixel values at %d (2^%d−1), saturated or masked (the master has no pixel_mask to tell them apart), kept: {count}, in {frames} of the frames read",
				marker, 8*s.dt.Size())
		}
	}
	notes = append(notes, maskNote)
	return dataset.Reconcile(s, opt, nil, "", dataset.FileFrames{Whole: n, RecordBytes: int64(s.FrameBytes()), Notes: notes,
		Calibration: dectrisCalibration(master)})
}

// dectrisCalibration reads the master's camera length and the angle of a pixel (see
// above). Called with h5lock held.
func dectrisCalibration(master *h5File) dataset.Calibration {
	const det = "/entry/instrument/detector/"
	scalar := func(name string) float64 { // in metres: units "m" or none
		v := h5Floats(master.file, master.access, det+name, 1)
		if units, ok := h5AttrString(master.file, master.access, det+name, "units"); len(v) != 1 || ok && units != "m" ||
			!(v[0] > 0) || math.IsInf(v[0], 0) {
			return 0
		}
		return v[0]
	}
	var c dataset.Calibration
	if c.CameraLength = scalar("detector_distance"); c.CameraLength == 0 {
		return c
	}
	if py, px := scalar("y_pixel_size"), scalar("x_pixel_size"); py > 0 && px > 0 {
		c.Sig = []dataset.Axis{dataset.NewAxis("ky", py/c.CameraLength, 0, "rad"), dataset.NewAxis("kx", px/c.CameraLength, 0, "rad")}
	}
	return c
}

// askedNote compares the frames the master asked for, nimages·ntrigger, with the n its
// blocks hold: "" when they agree, else a note; a product beyond 64 bits is named as
// such, not wrapped.
func askedNote(nimages, ntrigger uint64, n int) string {
	hi, asked := bits.Mul64(nimages, ntrigger)
	switch {
	case hi != 0:
		return fmt.Sprintf("the master's nimages %d × ntrigger %d is more than 2^64 frames: not a frame count (its blocks hold %d)", nimages, ntrigger, n)
	case asked != uint64(n):
		return fmt.Sprintf("the master asked for %d frames (nimages %d × ntrigger %d), its blocks hold %d", asked, nimages, ntrigger, n)
	}
	return ""
}

// cstr is s as a NUL-terminated string in Go memory, for calls into libhdf5 that do not
// keep it.
func cstr(s string) *C.char {
	b := append([]byte(s), 0)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// dectrisBlockNames lists the links data_NNNNNN of the master's /entry/data in the
// order of their numbers, which must run from 1 without a gap. Called with h5lock held.
func dectrisBlockNames(file C.hid_t) ([]string, error) {
	g := C.H5Oopen(file, cstr(dectrisBlocks), C.H5P_DEFAULT)
	if g < 0 {
		return nil, errs.Wrap(errs.Format, h5Error("opening group "+dectrisBlocks))
	}
	defer C.H5Oclose(g)
	links, err := h5Links(g, dectrisBlocks)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		if dectrisBlockName.MatchString(l[1:]) {
			names = append(names, l[1:])
		}
	}
	slices.Sort(names) // six digits: the order of the numbers
	for i, name := range names {
		if want := fmt.Sprintf("data_%06d", i+1); name != want {
			return nil, errs.New(errs.Format, "group %s links blocks %s but not %s: a block of the scan is missing", dectrisBlocks, strings.Join(names, ", "), want)
		}
	}
	return names, nil
}

// readPixelMask reads the master's pixel_mask: the pixels to read as 0 when use, the
// note, and whether the master has one. Called with h5lock held.
func (s *dectrisScan) readPixelMask(master *h5File, use bool) (note string, found bool, err error) {
	name := dectrisSpecific + "pixel_mask"
	mask := make([]C.uint, s.sig[0]*s.sig[1])
	switch C.sd_read_u32(master.file, cstr(name), master.access, &mask[0], C.hssize_t(len(mask))) {
	case -1:
		C.H5Eclear2(C.H5E_DEFAULT)
		return fmt.Sprintf("the master has no pixel_mask of the frames' %d×%d pixels (%s): no pixel is masked", s.sig[0], s.sig[1], name), false, nil
	case -2:
		return "", false, errs.Wrap(errs.Format, h5Error("reading "+name+" (option pixel_mask=false reads the frames without it)"))
	}
	var flagged []int
	for i, v := range mask {
		if v != 0 {
			flagged = append(flagged, i)
		}
	}
	s.flagged, s.zero = flagged, use
	switch {
	case len(flagged) == 0:
		return fmt.Sprintf("pixel_mask flags none of the %d pixels", len(mask)), true, nil
	case !use && len(flagged) == 1:
		return "pixel_mask not applied (option pixel_mask=false): the 1 pixel it flags keeps its recorded value", true, nil
	case !use:
		return fmt.Sprintf("pixel_mask not applied (option pixel_mask=false): the %d pixels it flags keep their recorded values", len(flagged)), true, nil
	}
	if len(flagged) == 1 {
		return fmt.Sprintf("pixel_mask applied: the 1 of %d pixels it flags reads as 0 (option pixel_mask=false keeps its value)", len(mask)), true, nil
	}
	return fmt.Sprintf("pixel_mask applied: the %d of %d pixels it flags read as 0 (option pixel_mask=false keeps their values)", len(flagged), len(mask)), true, nil
}

// marker is the value the detector writes for masked and overflowing pixels in frames
// of dtype s.dt (ok false: a signed or float dtype, which has none).
func (s *dectrisScan) marker() (uint64, bool) {
	switch s.dt {
	case dataset.Uint8, dataset.Uint16, dataset.Uint32:
		return 1<<(8*s.dt.Size()) - 1, true
	}
	return 0, false
}

func (s *dectrisScan) Format() string       { return "dectris" }
func (s *dectrisScan) Path() string         { return s.path }
func (s *dectrisScan) SigShape() [2]int     { return s.sig }
func (s *dectrisScan) DType() dataset.DType { return s.dt }
func (s *dectrisScan) FrameBytes() int      { return s.sig[0] * s.sig[1] * s.dt.Size() }
func (s *dectrisScan) AlignFrames() int     { return s.blocks[0].AlignFrames() }

// blockOf is the block that holds frame: the last whose first frame is at most frame.
func (s *dectrisScan) blockOf(frame int) int {
	i, _ := slices.BinarySearch(s.first, frame+1)
	return i - 1
}

// ReadFrames reads frames [start, end) from the blocks that hold them, then counts the
// unflagged values 2^N−1 of each frame and sets its flagged pixels to 0 (clean). The
// values 2^N−1 of the chunks decoded in Go are counted right after their decode, while
// they are in the core's cache (h5File.readFrames' inspect): clean passes over the other
// frames only.
func (s *dectrisScan) ReadFrames(start, end int, dst []byte) error {
	fb := s.FrameBytes()
	if err := dataset.CheckRange(s.path, start, end, s.NumFrames(), fb, len(dst)); err != nil {
		return err
	}
	var seen []frameMarkers
	if s.counts != nil {
		seen = make([]frameMarkers, end-start)
	}
	for f := start; f < end; {
		i := s.blockOf(f)
		stop := min(end, s.first[i+1])
		var inspect func(off int, b []byte)
		if seen != nil {
			at := (f - start) * fb
			inspect = func(off int, b []byte) { s.inspect(seen, at+off, b) }
		}
		if err := s.blocks[i].readFrames(f-s.first[i], stop-s.first[i], dst[(f-start)*fb:(stop-start)*fb], inspect); err != nil {
			return fmt.Errorf("%w (block %s holds frames %d-%d of the scan)", err, path.Base(s.blocks[i].dsPath), s.first[i], s.first[i+1]-1)
		}
		f = stop
	}
	s.clean(dst[:(end-start)*fb], start, seen)
	return nil
}

// frameMarkers are the values 2^N−1 of a frame of a read counted as its chunks were
// decoded, and the bytes of the frame they were counted in.
type frameMarkers struct{ markers, bytes int }

// inspect counts the values 2^N−1 of b, at byte off of a read's frames, into the frames
// of seen that b covers.
func (s *dectrisScan) inspect(seen []frameMarkers, off int, b []byte) {
	fb := s.FrameBytes()
	for len(b) > 0 {
		k := off / fb
		n := min(len(b), (k+1)*fb-off)
		seen[k].markers += markers(b[:n], s.dt.Size())
		seen[k].bytes += n
		off, b = off+n, b[n:]
	}
}

// clean counts the values 2^N−1 of the frames in buf, frames first, first+1, ..., that
// pixel_mask does not flag (s.counts; those seen while decoding, the whole of a frame,
// are not counted again), and sets the flagged pixels to 0 (s.zero).
func (s *dectrisScan) clean(buf []byte, first int, seen []frameMarkers) {
	if s.counts == nil && !s.zero {
		return
	}
	size := s.dt.Size()
	fb := s.FrameBytes()
	for k, off := 0, 0; off < len(buf); k, off = k+1, off+fb {
		frame := buf[off : off+fb]
		n := 0
		switch {
		case s.counts == nil:
		case seen[k].bytes == fb:
			n = seen[k].markers
		default:
			n = markers(frame, size)
		}
		for _, p := range s.flagged {
			px := frame[p*size : (p+1)*size]
			if s.counts != nil && allOnes(px) {
				n--
			}
			if s.zero {
				clear(px)
			}
		}
		if s.counts != nil {
			s.counts.Set(first+k, n)
		}
	}
}

// markers counts the elements of buf (of size 1, 2 or 4 bytes, buf a whole number of
// them) whose bits are all 1: 2^N−1 in any byte order. A word of 8 bytes at a time: in
// each element of a word x, adding 1 to its bits below the top one carries into the top
// bit only when they are all 1, and no carry crosses into the next element, so the top
// bits of (x&low + one) & x &^ low mark the elements at 2^N−1. 64 bytes without a top
// bit set (the usual counts, far below 2^(N−1)) are passed over after one test; the
// marks of the others are counted 4 words at a time, where there are any. On one core of
// the development machine: over 40 GB/s for small counts, 10 GB/s for random values.
func markers(buf []byte, size int) int {
	var low, one uint64
	switch size {
	case 1:
		low, one = 0x7f7f7f7f7f7f7f7f, 0x0101010101010101
	case 2:
		low, one = 0x7fff7fff7fff7fff, 0x0001000100010001
	default:
		low, one = 0x7fffffff7fffffff, 0x0000000100000001
	}
	le := binary.LittleEndian
	n := 0
	for ; len(buf) >= 64; buf = buf[64:] {
		b := buf[:64:64]
		if (le.Uint64(b)|le.Uint64(b[8:])|le.Uint64(b[16:])|le.Uint64(b[24:])|
			le.Uint64(b[32:])|le.Uint64(b[40:])|le.Uint64(b[48:])|le.Uint64(b[56:]))&^low == 0 {
			continue
		}
		for h := 0; h < 64; h += 32 {
			w0, w1, w2, w3 := le.Uint64(b[h:]), le.Uint64(b[h+8:]), le.Uint64(b[h+16:]), le.Uint64(b[h+24:])
			t0, t1, t2, t3 := (w0&low+one)&w0&^low, (w1&low+one)&w1&^low, (w2&low+one)&w2&^low, (w3&low+one)&w3&^low
			if t0|t1|t2|t3 != 0 {
				n += bits.OnesCount64(t0) + bits.OnesCount64(t1) + bits.OnesCount64(t2) + bits.OnesCount64(t3)
			}
		}
	}
	for ; len(buf) >= 8; buf = buf[8:] {
		x := le.Uint64(buf)
		n += bits.OnesCount64((x&low + one) & x &^ low)
	}
	for ; len(buf) >= size; buf = buf[size:] {
		if allOnes(buf[:size]) {
			n++
		}
	}
	return n
}

// allOnes reports whether every bit of px is 1.
func allOnes(px []byte) bool {
	for _, b := range px {
		if b != 0xff {
			return false
		}
	}
	return true
}

// RunNotes counts the values 2^N−1 that pixel_mask does not flag in frames [start, end)
// read so far (dataset.RunNoter).
func (s *dectrisScan) RunNotes(start, end int) []dataset.RunNote {
	if s.counts == nil {
		return nil
	}
	if count, frames := s.counts.Sum(start, end); count > 0 {
		return []dataset.RunNote{{Key: s.noteKey, Text: s.noteText, Count: count, Frames: frames}}
	}
	return nil
}

// Close closes the blocks.
func (s *dectrisScan) Close() error {
	defer h5Enter()()
	if len(s.blocks) > 0 && s.blocks[0].closed {
		return errs.New(errs.Argument, "dataset: %s: already closed", s.path)
	}
	return s.closeLocked()
}

func (s *dectrisScan) closeLocked() error {
	var err error
	for _, b := range s.blocks {
		if !b.closed {
			err = cmp.Or(err, b.closeLocked())
		}
	}
	return err
}
