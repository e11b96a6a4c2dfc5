package dataset

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Format is a file format that Open reads. Each format lives in its own sub-package of
// dataset (dataset/mib, dataset/hdf5, ...), which registers it in its init function, as
// image/png registers PNG with package image; a program reads the formats whose packages
// it imports (dataset/formats imports them all; the stemdot package, the CLI and the C
// ABI import it).
type Format struct {
	// Name is the value of option format that selects it and what its datasets' Format
	// returns: lower case, e.g. "mib".
	Name string
	// Extensions are the file name extensions that name the format, lower case with the
	// dot (".mib"). Two formats may share one (".hdr", ".bin", ".h5"): Detect then tells
	// them apart.
	Extensions []string
	// Magic are byte strings one of which starts every file of the format; Open detects
	// a file of an unknown extension by them.
	Magic []string
	// Describe is how the list of supported formats in error messages shows the format:
	// its name, then in parentheses what it is and, after a colon, how a file is known
	// (extensions, content), e.g. "mib (Quantum Detectors Merlin: .mib, .hdr)". Empty:
	// the name and its extensions.
	Describe string
	// Detect, when set, says whether the file at path is of this format although another
	// format may claim its extension (an EMPAD .raw, a stempy .h5, an FRMS6 .hdr). It is
	// asked before extensions and magic; it must be cheap and must not fail (a file it
	// cannot read is not its format).
	Detect func(path string, opt Options) bool
	// Open opens the file at path with the shared options. It reconciles the file's
	// frames with the scan (Reconcile or OpenFlat) and names the file in its errors.
	Open func(path string, opt Options) (Dataset, error)
	// Options are the keys of the shared options, beyond those every format takes
	// (nav_shape, sync_offset, flyback, roi, frames), that the format reads: "sig_shape",
	// "dtype", "byte_order", "offset", "frame_header", "frame_footer", "dataset_path",
	// "allow_fill". Open refuses offset, frame_header and frame_footer for a format that
	// does not list them (they change which bytes are read) and notes that the others
	// were ignored.
	Options []string
	// FormatOptions are the options only this format reads (a DECTRIS master's pixel
	// mask, ...), given in Options.FormatOptions. Their keys are unique among the
	// registered formats and differ from the shared options' keys.
	FormatOptions []FormatOption
}

// FormatOption is an option that one format reads, given by key in
// Options.FormatOptions; front ends offer it beside the shared options (the CLI as
// --key-with-dashes, the C ABI and Python by key).
type FormatOption struct {
	// Key is the option's name in snake_case, as error messages name it ("option
	// pixel_mask").
	Key string
	// Usage is the help text, starting with the format it applies to ("DECTRIS
	// masters: ...").
	Usage string
	// Default is the value shown as default in help ("" for none).
	Default string
	// Switch marks an on/off option (true or false).
	Switch bool
}

var registry struct {
	sync.RWMutex
	formats map[string]Format
}

// Register makes a format known to Open. It panics when the name is empty or taken, or
// Open is nil: a programming error of the registering package, found at init.
func Register(f Format) {
	registry.Lock()
	defer registry.Unlock()
	if f.Name == "" || f.Name != strings.ToLower(f.Name) || f.Open == nil {
		panic(fmt.Sprintf("dataset: Register: format %q needs a lower-case name and an Open function", f.Name))
	}
	if _, dup := registry.formats[f.Name]; dup {
		panic(fmt.Sprintf("dataset: Register: format %q registered twice", f.Name))
	}
	for _, o := range f.FormatOptions {
		if other, taken := formatOfOption(o.Key); taken || o.Key == "" || slices.Contains(sharedOptionKeys, o.Key) {
			panic(fmt.Sprintf("dataset: Register: format %q: option key %q is empty or taken (format %q, or a shared option)", f.Name, o.Key, other.Name))
		}
	}
	if registry.formats == nil {
		registry.formats = map[string]Format{}
	}
	registry.formats[f.Name] = f
}

// Formats returns the registered formats, sorted by name.
func Formats() []Format {
	registry.RLock()
	defer registry.RUnlock()
	list := make([]Format, 0, len(registry.formats))
	for _, f := range registry.formats {
		list = append(list, f)
	}
	slices.SortFunc(list, func(a, b Format) int { return strings.Compare(a.Name, b.Name) })
	return list
}

// sharedOptionKeys are the keys of the fields of Options other than FormatOptions.
var sharedOptionKeys = []string{"format", "nav_shape", "sync_offset", "flyback", "sig_shape", "dtype", "byte_order",
	"offset", "dataset_path", "frame_header", "frame_footer", "allow_fill", "roi", "frames"}

// SharedOptionKeys returns the keys of the shared options, the fields of Options other
// than FormatOptions ("nav_shape", "sig_shape", ...), as front ends and messages name
// them ("option nav_shape"). No format option takes one of them.
func SharedOptionKeys() []string { return slices.Clone(sharedOptionKeys) }

// formatOfOption returns the registered format that reads the format option key; the
// registry's lock is held.
func formatOfOption(key string) (Format, bool) {
	for _, f := range registry.formats {
		if slices.ContainsFunc(f.FormatOptions, func(o FormatOption) bool { return o.Key == key }) {
			return f, true
		}
	}
	return Format{}, false
}

// FormatOptionOf returns the format option of that key and the format that reads it.
func FormatOptionOf(key string) (FormatOption, Format, bool) {
	registry.RLock()
	defer registry.RUnlock()
	f, ok := formatOfOption(key)
	if !ok {
		return FormatOption{}, Format{}, false
	}
	i := slices.IndexFunc(f.FormatOptions, func(o FormatOption) bool { return o.Key == key })
	return f.FormatOptions[i], f, true
}

// checkFormatOptions refuses format options that no registered format reads (errs.Argument,
// naming the known keys), and returns notes for those that another format than f reads.
func checkFormatOptions(path string, f Format, opt Options) ([]string, error) {
	var list []string
	keys := slices.Sorted(maps.Keys(opt.FormatOptions))
	for _, key := range keys {
		_, owner, ok := FormatOptionOf(key)
		switch {
		case !ok:
			var known []string
			for _, g := range Formats() {
				for _, o := range g.FormatOptions {
					known = append(known, o.Key+" ("+g.Name+")")
				}
			}
			return nil, errs.New(errs.Argument, "dataset: %s: unknown format option %q (format options: %s)", path, key, strings.Join(known, ", "))
		case owner.Name != f.Name:
			list = append(list, fmt.Sprintf("option %s applies to %s files only and was ignored", key, owner.Name))
		}
	}
	return list, nil
}

// lookupFormat returns the registered format of that name.
func lookupFormat(name string) (Format, bool) {
	registry.RLock()
	defer registry.RUnlock()
	f, ok := registry.formats[name]
	return f, ok
}

// supportedFormats lists the registered formats for error messages.
func supportedFormats() string {
	var list []string
	for _, f := range Formats() {
		d := f.Describe
		if d == "" {
			d = f.Name
			if len(f.Extensions) > 0 {
				d += " (" + strings.Join(f.Extensions, ", ") + ")"
			}
		}
		list = append(list, d)
	}
	if len(list) == 0 {
		return "none: this program imports no format package (import github.com/stemdot/stemdot/dataset/formats)"
	}
	return strings.Join(list, ", ")
}

// takesOption reports whether format f reads the shared option key.
func (f Format) takesOption(key string) bool { return slices.Contains(f.Options, key) }

// OpenFile opens the regular file path for reading, for a format's Open, and returns it
// with its size in bytes. A FIFO, a device or a directory is refused without blocking;
// errors are errs.IO and name the file (errors.Is(err, fs.ErrNotExist) for a missing
// one).
func OpenFile(path string) (*os.File, int64, error) { return openFile(path) }

// SwitchOption reads the on/off format option key (a FormatOption with Switch set) from
// opt.FormatOptions: true, 1, yes or on, false, 0, no or off, in any case (the front ends
// pass "true" or "false"); def when the key is absent or its value empty. Another value is
// an errs.Argument error naming the option.
func SwitchOption(opt Options, key string, def bool) (bool, error) {
	v := opt.FormatOptions[key]
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return def, nil
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, errs.New(errs.Argument, "option %s %q is not true or false (true, 1, yes, on; false, 0, no, off)", key, v)
}

// ReadHeader reads the first min(size, n) bytes of the file f of size bytes: a format's
// header of n bytes, which the format's parser then checks for length (a file shorter
// than its header is the parser's errs.Format, naming the format). A failed read is
// errs.IO.
func ReadHeader(f io.ReaderAt, size int64, n int) ([]byte, error) {
	head := make([]byte, min(size, int64(n)))
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("reading the header: %w", err))
	}
	return head, nil
}

// CheckRange checks a ReadFrames request for frames [start, end) of a dataset of n frames
// of frameBytes bytes into a buffer of dstLen bytes; the error (errs.Argument) names path.
func CheckRange(path string, start, end, n, frameBytes, dstLen int) error {
	return checkRange(path, start, end, n, frameBytes, dstLen)
}

// CheckSig checks a frame of sig_shape sig and dtype dt (positive sizes, at most
// MaxFrameBytes) and returns its bytes.
func CheckSig(sig [2]int, dt DType) (int, error) { return checkSig(sig, dt) }

// ReadError is the errs.IO error of a failed positioned read of frames [start, end) of
// the file f at path, of size bytes when opened; a file that shrank says so.
func ReadError(path string, f *os.File, size int64, start, end int, err error) error {
	return readError(path, f, size, start, end, err)
}

// CopyToHost copies src, whose elements of size bytes (1, 2, 4 or 8) are stored big-
// or little-endian, into dst in host byte order.
func CopyToHost(dst, src []byte, size int, srcBigEndian bool) {
	copyToHost(dst, src, size, srcBigEndian)
}

// FileFrames is what a format found in its file, for Reconcile and OpenFlat.
type FileFrames struct {
	// Whole is the number of complete frames in the file (or files).
	Whole int
	// CutBytes is the size of a frame cut off by the end of the file (0: none), and
	// RecordBytes the size of a whole frame's record (header and pixels).
	CutBytes, RecordBytes int64
	// Strict refuses any frame count that differs from the nav shape (raw files, whose
	// surplus frames cannot be told from a wrong description).
	Strict bool
	// Hint is appended to a Strict refusal: the options that describe the file.
	Hint string
	// Series says that the file's nav shape only counts its frames (a stack of n frames
	// with no scan shape): the file states no scan shape for option nav_shape to
	// contradict.
	Series bool
	// FlybackAtEnd, when set, tells from the file's frame headers whether the flyback
	// frame of each of the rows scan rows of stride frames from frame first on ends the
	// row (true) or starts it: why is then the evidence, for the note ("" when they do
	// not tell; Reconcile then looks at the frames, see flyback.go).
	FlybackAtEnd func(first, stride, rows int) (atEnd bool, why string)
	// Notes are the format's own notes on how it read the file (a mask applied, a
	// header field ignored): one sentence each, without a trailing period.
	Notes []string
	// SyncOffsetNoted says that the format set opt.SyncOffset itself, from the file
	// (frames recorded before the scan's first position), and that Notes say so: the
	// reconciliation then adds no note of its own on the sync offset.
	SyncOffsetNoted bool
	// Calibration is what the file states of its axes (calibration.go): nav axes of the
	// file's scan (fileNav), signal axes.
	Calibration Calibration
}

// Reconcile presents the frames of d, a format's dataset of every frame its file holds
// (ReadFrames of frames 0..ff.Whole-1; its NavShape is not used), at the scan positions
// of the nav shape: opt.NavShape, else the file's (fileNav; source says where it came
// from, as in " from the header (NX=4, NY=2)"), else (1, n) with a warning that names
// option nav_shape. opt.SyncOffset and opt.Flyback apply, and frame counts that differ
// from the scan are reconciled as frames.go describes. When d embeds ScanFrames and scan
// position p is the file's frame p (no sync offset, no flyback frames), the result is d
// itself with the scan's nav shape; else it is a view over d, which implements Mapper
// (mapping positions that are consecutive frames of d when d is a Mapper) and, when d is
// a Viewer, the sync offset is not negative and there are no flyback frames, Viewer; it
// reports its positions without a frame (Blanker). Either implements Noter with
// ff.Notes and the reconciliation's notes; the view gives d's run notes of the file's
// frames at its positions (RunNoter). On error d is left open for the caller to close.
func Reconcile(d Dataset, opt Options, fileNav []int, source string, ff FileFrames) (Dataset, error) {
	ff.FlybackAtEnd = flybackEvidence(d, ff.Whole, ff.FlybackAtEnd)
	nav, layout, n, err := reconcileFrames(d.Path(), opt, fileNav, source, ff)
	if err != nil {
		return nil, err
	}
	n.addNotes(ff.Notes)
	n.calib = calibrationFor(ff.Calibration, opt, nav, fileNav)
	if f, ok := d.(frameFile); ok && layout.offset == 0 && layout.skip == 0 {
		f.setFrames(nav, n)
		return d, nil
	}
	v := &scanView{Dataset: d, nav: nav, layout: layout, blanks: layout.blanksWith(product(nav), Blanks(d)), notes: n}
	if _, ok := d.(Viewer); ok && layout.offset >= 0 && layout.skip == 0 {
		return &scanViewer{v}, nil
	}
	return v, nil
}

// ScanFrames is embedded by a format's dataset of every frame of its file, for Reconcile,
// which then sets the dataset's nav shape and notes itself rather than put a view in
// front of it where it can (see Reconcile): the dataset keeps its own methods beyond
// Dataset (such as an HDF5 dataset's AlignFrames). It implements NavShape, NumFrames and
// Noter, and answers NavShapeGuessed; the dataset's own ReadFrames checks requests
// against NumFrames (CheckRange), which is the scan's once reconciled.
type ScanFrames struct {
	nav []int
	notes
}

// SetFileFrames gives the dataset the n frames of its file, nav shape (1, n), before
// Reconcile.
func (s *ScanFrames) SetFileFrames(n int) { s.nav = []int{1, n} }

// NavShape is the scan's nav shape once reconciled, (1, n) before.
func (s *ScanFrames) NavShape() []int { return append([]int(nil), s.nav...) }

// NumFrames is the number of scan positions once reconciled, the file's frames before.
func (s *ScanFrames) NumFrames() int { return product(s.nav) }

func (s *ScanFrames) setFrames(nav []int, n notes) { s.nav, s.notes = nav, n }

// Flat describes a file whose frames are stored one after the other at a fixed stride
// from a byte offset on, for OpenFlat: frame i's record starts at Offset +
// i·(Header+pixel bytes+Footer), its pixels after Header bytes.
type Flat struct {
	// Format names the format (Dataset.Format).
	Format string
	// Path is the file, File its open handle (OpenFile) and Size its size when opened.
	// OpenFlat takes ownership of File: it is closed with the dataset, or on error.
	Path string
	File *os.File
	Size int64
	// Offset is where frame 0's record starts; Header and Footer are the bytes before
	// and after each frame's pixels in its record.
	Offset, Header, Footer int64
	// Sig is (sig_y, sig_x) and DType the stored pixel dtype; BigEndian says that pixels
	// are stored most significant byte first.
	Sig       [2]int
	DType     DType
	BigEndian bool
	// Magic, when not empty, starts every record (checked on every read of a record
	// with a header, unless CheckRecord is set; FrameMap.Magic for consumers of the
	// mapping).
	Magic []byte
	// CheckRecord, when set, checks the Header bytes of every record read (frame is its
	// index in the file) instead of Magic: its error fails the read as errs.Format,
	// prefixed with the file.
	CheckRecord func(header []byte, frame int) error
	// PixelBytes and Decode describe pixels that are not served as stored, such as
	// MIB's raw-packed R64 or TIA SER's rows stored bottom-up: each record holds
	// PixelBytes bytes of them (0: the bytes of a frame of Sig and DType), which Decode
	// turns into one frame of Sig and DType in host byte order. Such frames are read with
	// positioned reads only, never viewed or mapped in place. Zero and nil: the record
	// holds the frame's pixels as stored.
	PixelBytes int64
	Decode     func(dst, src []byte)
}

// OpenFlat opens the frames that fl describes as a dataset of the scan, reconciled as
// Reconcile describes (ff.Whole is the number of whole records). Frames are read with
// positioned reads, or in place from a read-only mapping (Viewer) when they are back to
// back, aligned and in host byte order; with per-frame headers the mapping serves
// Mapper. On error fl.File is closed.
func OpenFlat(fl Flat, opt Options, fileNav []int, source string, ff FileFrames) (Dataset, error) {
	d := &flatFile{format: fl.Format, path: fl.Path, f: fl.File, offset: fl.Offset, header: fl.Header, footer: fl.Footer,
		nav: []int{1, ff.Whole}, sig: fl.Sig, dt: fl.DType, bigEndian: fl.BigEndian, magic: fl.Magic,
		check: fl.CheckRecord, packed: fl.PixelBytes, decode: fl.Decode}
	if _, err := checkSig(fl.Sig, fl.DType); err != nil {
		fl.File.Close()
		return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: %w", fl.Path, err))
	}
	file := newFlatDataset(d, fl.Size)
	ds, err := Reconcile(file, opt, fileNav, source, ff)
	if err != nil {
		file.Close()
		return nil, err
	}
	return ds, nil
}

// MapFile maps the size bytes of the file f opened at path read-only, for a format
// whose readers view the file's bytes in place, registered for MappingFault (a fault
// after the file shrank is an errs.IO error naming path), or returns nil when the file
// system refuses (read it with pread then). Unmap it with Unmap before closing f.
func MapFile(path string, f *os.File, size int64) []byte { return mapReadOnly(path, f, size) }

// Unmap unmaps a mapping of MapFile (nil: nothing to do).
func Unmap(mapping []byte) error {
	if mapping == nil {
		return nil
	}
	unregister(mapping)
	return unix.Munmap(mapping)
}

// CheckSize returns the errs.IO error saying that the file f at path, of size bytes when
// opened, changed while being read, when it is smaller now (fstat); else nil. A reader
// checks it before it hands out a view of the file's mapping.
func CheckSize(path string, f *os.File, size int64) error { return checkSize(path, f, size) }
