package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Options tells Open how to read a file. The zero value detects the format and reads
// every shape from the file itself.
type Options struct {
	// Format is a registered format's name (Format.Name: "raw", "npy", "mib", "hdf5",
	// ...; see Formats), or "" to detect it: by the formats' Detect (an EMPAD .raw file
	// named by an .xml beside it), else by the extension (Format.Extensions), else by the
	// first bytes (Format.Magic), else raw when SigShape and DType are given.
	Format string
	// NavShape overrides the scan shape the file gives (its metadata: an NPY or HDF5
	// shape, a MIB .hdr sidecar, a BLO header, an EMPAD XML, ...; each format package's
	// doc says where it reads it) when it has as many positions, or as many as the file
	// holds frames (after SyncOffset); another contradicts the file and is refused
	// (errs.Shape) naming both (Frames reads part of a scan). It has 1 to MaxNavDims
	// axes, rows first: (n,) a series, (nav_y, nav_x) a scan, (nav_z, nav_y, nav_x) a scan
	// of planes (a time, tilt or focal series of scans); more are refused (errs.Shape).
	// Empty: use the file's (an array's nav axes as stored, size-1 axes kept, as LiberTEM
	// reads them: NavFromAxes), or (1, n_frames) with a warning when the file has none
	// (raw, MIB without .hdr). A series (an NPY or HDF5 array of rank 3, a 3-D DM image,
	// ...) gives no scan shape, only its frame count (n,): any nav shape may reshape it.
	// A frame count that differs from the nav shape is reconciled as described in
	// frames.go (surplus frames ignored, complete rows or planes of an interrupted scan
	// kept; raw files must match exactly).
	NavShape []int
	// SyncOffset shifts frames against scan positions (LiberTEM's sync_offset): scan
	// position p holds the file's frame p+SyncOffset. Positive: skip that many leading
	// frames; negative: insert that many blank frames before the first. As in LiberTEM
	// the nav shape is kept: the positions whose frame lies outside the file (the first
	// -SyncOffset ones, or the last ones when the file ends before the scan by no more
	// than SyncOffset) have no frame, read as blank (all-zero) frames and are named by
	// Blanks and the notes; reductions leave them out (blanks.go). From -(n-1) to n-1
	// for a file of n frames (errs.Argument).
	SyncOffset int
	// Flyback says which frames of each scan row are flyback frames, recorded while the
	// beam returned to the row's start and read as no scan position (flyback.go):
	// FlybackAuto (the zero value) detects one per row when the file holds exactly
	// (nav_x+1)·nav_y frames, with a note; FlybackNone reads every frame as a scan
	// position; FlybackStart or FlybackEnd with Frames per row states them.
	Flyback Flyback
	// SigShape is (sig_y, sig_x) in pixels. Required for raw files, ignored with a note
	// otherwise.
	SigShape []int
	// DType is the stored pixel dtype. Required for raw files, ignored with a note
	// otherwise.
	DType DType
	// BigEndian says that a raw file stores pixels most significant byte first; other
	// formats ignore it with a note.
	BigEndian bool
	// Offset is the number of header bytes to skip at the start of a raw file. Other
	// formats refuse it (a MIB's leading frames are skipped with SyncOffset).
	Offset int64
	// DatasetPath is the HDF5 dataset that holds the frames, e.g. "/fpd_expt/fpd_data/data";
	// empty: the largest readable dataset of rank 4, else 5, else 3, those with frames of
	// at least 2×2 pixels and more than one frame first (with a note when others could
	// hold frames too). Other formats ignore it with a note.
	DatasetPath string
	// FrameHeader and FrameFooter are bytes before and after every frame's pixels in a
	// raw file (a per-frame header or footer, or padding); other formats refuse them.
	FrameHeader, FrameFooter int64
	// AllowFill reads HDF5 storage that is missing or was never written (a virtual
	// dataset's source file or dataset not found, a region no mapping covers, chunks never
	// written, external raw storage cut short) as the dataset's fill value, with a note
	// counting the frames, instead of refusing the file (errs.IO or errs.Format, naming
	// the frames and the cause). Other formats ignore it with a note.
	AllowFill bool
	// ROI, when given, opens only the scan positions it selects (after NavShape,
	// SyncOffset and Flyback made the scan) as a dataset of nav shape (n_selected,) that
	// knows their positions in the scan (Positioner): see Select.
	ROI ROI
	// FormatOptions are options that one format reads, by key (Format.FormatOptions):
	// a key no registered format reads is refused (errs.Argument), and one that another
	// format than the file's reads is ignored with a note.
	FormatOptions map[string]string
	// Frames, when its Count is positive, opens only frames [First, First+Count) of the
	// file (in scan order, after NavShape, SyncOffset and Flyback; of the selected
	// positions when ROI is given) as a dataset of nav shape (Count,): see Range.
	Frames FrameSpan
}

// Open opens the 4D-STEM file at path. A sidecar or metadata file opens the data beside
// it (a Merlin ".hdr" its ".mib", a PNDetector ".hdr" its ".frms6" files, an EMPAD ".xml"
// its ".raw", a TIA ".emi" its ".ser", a K2 IS ".gtg" its sector files, a raw_csr ".toml"
// its arrays). The files stay open until Close.
//
// Errors name the file and the problem: missing file, a directory, unknown format (with
// the formats supported), a size that is not a whole number of frames, frame headers
// that disagree, an unsupported dtype, or a NavShape whose product is not the frame
// count. A missing or bad option is named by its key in the Options documentation's
// snake_case ("option sig_shape"); front ends rename it to their flag. Errors are classified (package errs):
// errs.IO for a file that cannot be opened or read, errs.Shape for a nav shape that does
// not fit the frames or a Frames range outside them, errs.DType for an unsupported dtype, errs.Argument for a bad
// option, errs.Format for everything else about the file's content.
func Open(path string, opt Options) (Dataset, error) {
	ds, err := open(path, opt)
	if err != nil {
		return nil, errs.Wrap(errs.Format, err)
	}
	if !opt.ROI.IsZero() {
		sel, err := Select(ds, opt.ROI)
		if err != nil {
			ds.Close()
			return nil, err
		}
		ds = sel
	}
	if opt.Frames.Count <= 0 {
		return ds, nil
	}
	view, err := Range(ds, opt.Frames.First, opt.Frames.Count)
	if err != nil {
		ds.Close()
		return nil, err
	}
	return view, nil
}

func open(path string, opt Options) (Dataset, error) {
	// No format reads a directory: say so before a format looks for files beside it (a
	// K2 IS ".gtg" its sector files) or asks for options (raw's sig_shape).
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, errs.New(errs.IO, "dataset: %s %s: give the data file (or the sidecar that names it)", path, regfile.NotRegular(st.Mode()))
	}
	var format Format
	if opt.Format == "" {
		var err error
		if format, err = detectFormat(path, opt); err != nil {
			return nil, err
		}
	} else {
		var ok bool
		if format, ok = lookupFormat(strings.ToLower(opt.Format)); !ok {
			return nil, errs.New(errs.Argument, "dataset: %s: unknown option format %q (supported: %s)", path, opt.Format, supportedFormats())
		}
	}
	if err := formatOptionError(path, format, opt); err != nil {
		return nil, err
	}
	other, err := checkFormatOptions(path, format, opt)
	if err != nil {
		return nil, err
	}
	ds, err := format.Open(path, opt)
	if err != nil {
		return nil, err
	}
	// Every format's dataset takes notes (frames.go); TestIgnoredOptions checks each.
	if n, ok := ds.(interface{ addNotes([]string) }); ok {
		n.addNotes(append(ignoredOptions(format, opt, ds), other...))
	}
	return ds, nil
}

// formatOptionError refuses an option given for a format that has no use for it and
// that would change which bytes are read (offset, frame_header, frame_footer): guessing
// what the user meant could give wrong frames.
func formatOptionError(path string, format Format, opt Options) error {
	var bad []string
	if opt.Offset != 0 && !format.takesOption("offset") {
		what := "bytes to skip at the start of a raw file"
		if format.Name == "mib" {
			what += "; MIB frames carry their own headers: to skip leading frames give option sync_offset N"
		}
		bad = append(bad, fmt.Sprintf("offset %d (option offset: %s)", opt.Offset, what))
	}
	if (opt.FrameHeader != 0 || opt.FrameFooter != 0) && !format.takesOption("frame_header") {
		bad = append(bad, fmt.Sprintf("per-frame header/footer bytes %d/%d (option frame_header and option frame_footer: raw files only)", opt.FrameHeader, opt.FrameFooter))
	}
	if len(bad) == 0 {
		return nil
	}
	return errs.New(errs.Argument, "dataset: %s: %s files do not take %s", path, format.Name, strings.Join(bad, ", nor "))
}

// ignoredOptions are notes on the options given that the file's format does not read
// (Format.Options), which Open ignores: sig_shape, dtype and byte_order (the file gives
// its own), dataset_path and allow_fill (HDF5 files only).
func ignoredOptions(format Format, opt Options, ds Dataset) []string {
	var list []string
	ignored := func(key, formats, gives string) {
		if !format.takesOption(key) {
			list = append(list, fmt.Sprintf("option %s applies to %s files only and was ignored%s", key, formats, gives))
		}
	}
	name := format.Name
	if len(opt.SigShape) > 0 {
		sig := ds.SigShape()
		ignored("sig_shape", "raw", fmt.Sprintf(": the %s file gives sig shape %s", name, npy.ShapeString(sig[:])))
	}
	if opt.DType != Invalid {
		ignored("dtype", "raw", fmt.Sprintf(": the %s file gives dtype %s", name, ds.DType()))
	}
	if opt.BigEndian {
		ignored("byte_order", "raw", fmt.Sprintf(": the %s file gives its byte order", name))
	}
	if opt.DatasetPath != "" {
		ignored("dataset_path", "HDF5", "")
	}
	if opt.AllowFill {
		ignored("allow_fill", "HDF5", "")
	}
	return list
}

// detectFormat names the format of path: the first format (by name) whose Detect claims
// it, else the one its extension names (the only one, or the one of several whose magic
// starts the file), else the one whose magic starts the file; a file that none names is
// raw when opt gives a sig shape and a dtype.
func detectFormat(path string, opt Options) (Format, error) {
	formats := Formats()
	for _, f := range formats {
		if f.Detect != nil && f.Detect(path, opt) {
			return f, nil
		}
	}
	ext := strings.ToLower(filepath.Ext(path))
	var byExt []Format
	for _, f := range formats {
		if slices.Contains(f.Extensions, ext) {
			byExt = append(byExt, f)
		}
	}
	if len(byExt) == 1 {
		return byExt[0], nil
	}
	f, _, err := openFile(path)
	if err != nil {
		return Format{}, err
	}
	defer f.Close()
	magic := make([]byte, 16)
	n, err := io.ReadFull(f, magic)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Format{}, errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, err))
	}
	magic = magic[:n]
	if len(byExt) == 0 {
		byExt = formats
	}
	for _, f := range byExt {
		for _, m := range f.Magic {
			if bytes.HasPrefix(magic, []byte(m)) {
				return f, nil
			}
		}
	}
	if len(byExt) < len(formats) {
		for _, f := range byExt { // formats sharing the extension: those without Detect take what no Detect claimed
			if f.Detect == nil {
				return f, nil
			}
		}
	}
	if raw, ok := lookupFormat("raw"); ok && len(opt.SigShape) > 0 && opt.DType.Size() > 0 {
		return raw, nil
	}
	return Format{}, fmt.Errorf("dataset: %s: unknown format: neither the extension nor the first bytes %q match a supported format (supported: %s; give option format)",
		path, magic[:min(n, 8)], supportedFormats())
}

// openError turns an error of regfile.Open (which names the file) into the dataset's.
func openError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errs.Wrap(errs.IO, fmt.Errorf("dataset: %s: %w", path, fs.ErrNotExist))
	}
	return errs.Wrap(errs.IO, fmt.Errorf("dataset: %w", err))
}

// openFile opens the regular file path for reading and returns it with its size in
// bytes; a FIFO, a device or a directory is refused without blocking (regfile.Open).
// Every file a reader opens itself goes through it.
func openFile(path string) (*os.File, int64, error) {
	f, size, err := regfile.Open(path)
	if err != nil {
		return nil, 0, openError(path, err)
	}
	return f, size, nil
}

// NavShapeGuessed reports whether Open took the nav shape (1, n_frames) because
// neither the file (a raw file, a MIB file without its .hdr sidecar) nor
// Options.NavShape gave one: the virtual images then come out as a single row.
func NavShapeGuessed(ds Dataset) bool {
	g, ok := ds.(interface{ navShapeGuessed() bool })
	return ok && g.navShapeGuessed()
}

// checkRange checks a ReadFrames request against a dataset of n frames of frameBytes
// (errs.Argument: the caller's request is at fault).
func checkRange(path string, start, end, n, frameBytes, dstLen int) error {
	if start < 0 || end > n || start > end {
		return errs.New(errs.Argument, "dataset: %s: frames [%d, %d) out of range: the file holds %d frames", path, start, end, n)
	}
	if need := (end - start) * frameBytes; dstLen < need {
		return errs.New(errs.Argument, "dataset: %s: frames [%d, %d): dst holds %d bytes, need %d (%d frames of %d bytes)",
			path, start, end, dstLen, need, end-start, frameBytes)
	}
	return nil
}

func product(s []int) int {
	p := 1
	for _, n := range s {
		p *= n
	}
	return p
}
