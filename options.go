package stemdot

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats" // Open reads every format
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/planner"
)

// Options tells Open how to read a file (see dataset.Options); the zero value detects
// the format and reads every shape from the file.
type Options = dataset.Options

// OpenOption is one option of Open, as every front end names it: Key is the C ABI's
// and Python's name ("sig_shape"), FlagName the CLI's ("--sig-shape"). Adding a shared
// option to OpenOptions (and its field to dataset.Options), or a format option to a
// format's dataset.Format.FormatOptions, makes it reach the CLI, the C ABI and Python.
type OpenOption struct {
	// Key is the option's name in snake_case, as error messages name it ("option
	// sig_shape").
	Key string
	// Usage is the help text.
	Usage string
	// Default is the value shown as default in help ("" for none).
	Default string
	// Switch marks an on/off option: true or false (also 1/0, yes/no, on/off); the CLI's
	// flag alone turns it on (--allow-fill).
	Switch bool
	set    func(o *Options, value string) error
}

// FlagName is the CLI flag of the option: "--" and Key with '-' for '_'.
func (o OpenOption) FlagName() string { return frontend.FlagName(o.Key) }

// OpenOptions returns the options of Open, in the order the CLI's help lists them: the
// shared options (a field of Options each), then the format options of every registered
// format (dataset.Format.FormatOptions, by format name; each sets
// Options.FormatOptions[Key]: the value as given, a Switch's as "true" or "false").
func OpenOptions() []OpenOption {
	formats := dataset.Formats()
	var names []string
	for _, f := range formats {
		names = append(names, f.Name)
	}
	list := append([]OpenOption{{Key: "format", Usage: "file format: " + strings.Join(names, ", ") + " (default: detected from the extension and content)",
		set: func(o *Options, v string) error { o.Format = strings.ToLower(strings.TrimSpace(v)); return nil }}}, sharedOpenOptions...)
	for _, f := range formats {
		for _, fo := range f.FormatOptions {
			list = append(list, OpenOption{Key: fo.Key, Usage: fo.Usage, Default: fo.Default, Switch: fo.Switch, set: setFormatOption(fo)})
		}
	}
	return list
}

// setFormatOption sets the format option fo in Options.FormatOptions.
func setFormatOption(fo dataset.FormatOption) func(o *Options, v string) error {
	return func(o *Options, v string) error {
		if fo.Switch {
			on, err := parseBool(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			v = strconv.FormatBool(on)
		}
		if o.FormatOptions == nil {
			o.FormatOptions = map[string]string{}
		}
		o.FormatOptions[fo.Key] = v
		return nil
	}
}

// sharedOpenOptions are the shared options of Open (the fields of Options but Format,
// whose usage OpenOptions builds from the registered formats, and FormatOptions).
var sharedOpenOptions = []OpenOption{
	{Key: "nav_shape", Usage: "navigation (scan) shape Y,X (y first: rows, then columns, as numpy and LiberTEM), N (a series) or Z,Y,X (a scan of planes: a time, tilt or focal series); overrides the file's scan shape when it has as many positions, or as many as the file has frames; another is refused (default: from the file, its nav axes as stored, else 1,N with a warning)",
		set: func(o *Options, v string) (err error) {
			if o.NavShape, err = frontend.ParseShape(v, 0); err == nil && len(o.NavShape) > dataset.MaxNavDims {
				err = fmt.Errorf("want Y,X, N or Z,Y,X, got %d sizes", len(o.NavShape))
			}
			return err
		}},
	{Key: "sig_shape", Usage: "raw files: signal (frame) shape Y,X in pixels, y first",
		set: func(o *Options, v string) (err error) { o.SigShape, err = frontend.ParseShape(v, 2); return err }},
	{Key: "dtype", Usage: "raw files: pixel dtype (uint8, uint16, uint32, int8, int16, int32, float32, float64)",
		set: func(o *Options, v string) (err error) { o.DType, err = dataset.ParseDType(v); return err }},
	{Key: "byte_order", Usage: "raw files: byte order, little or big", Default: "little",
		set: func(o *Options, v string) (err error) { o.BigEndian, err = parseByteOrder(v); return err }},
	{Key: "offset", Usage: "raw files: bytes to skip at the start of the file (a count, or with a unit: 1KiB)", Default: "0",
		set: func(o *Options, v string) (err error) { o.Offset, err = parseBytes(v); return err }},
	{Key: "frame_header", Usage: "raw files: bytes before every frame's pixels (a per-frame header; 1024 or 1KiB)", Default: "0",
		set: func(o *Options, v string) (err error) { o.FrameHeader, err = parseBytes(v); return err }},
	{Key: "frame_footer", Usage: "raw files: bytes after every frame's pixels (a per-frame footer or gap; 1024 or 1KiB)", Default: "0",
		set: func(o *Options, v string) (err error) { o.FrameFooter, err = parseBytes(v); return err }},
	{Key: "sync_offset", Usage: "scan position p reads the file's frame p+N (LiberTEM's sync_offset): N>0 skips N leading frames, N<0 inserts -N blank frames first; the nav shape is kept, positions without a frame read as blank frames and reductions leave them out", Default: "0",
		set: func(o *Options, v string) (err error) {
			if o.SyncOffset, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return fmt.Errorf("want a whole number of frames")
			}
			return nil
		}},
	{Key: "flyback", Usage: "flyback frames in each scan row, read as no scan position: start or end (one per row), start:N or end:N (N per row), none, or auto (one per row when the file holds (nav_x+1)·nav_y frames, with a warning: where the frame headers set it apart in every row, else at the end of each row of a scan of 3 or more rows)", Default: "auto",
		set: func(o *Options, v string) (err error) { o.Flyback, err = dataset.ParseFlyback(v); return err }},
	{Key: "dataset_path", Usage: "HDF5 files: the dataset holding the frames, e.g. /fpd_expt/fpd_data/data (default: the largest readable one of rank 4, else 5, else 3)",
		set: func(o *Options, v string) error { o.DatasetPath = v; return nil }}, // verbatim: HDF5 names may hold spaces
	{Key: "allow_fill", Switch: true, Usage: "HDF5 files: read storage that is missing or was never written (a virtual dataset's missing source file, chunks never written, external raw storage cut short) as the fill value, with a warning counting the frames, instead of refusing the file",
		set: func(o *Options, v string) (err error) { o.AllowFill, err = parseBool(strings.TrimSpace(v)); return err }},
	{Key: "roi", Usage: "region of interest: only these scan positions are read: rect:X,Y,W,H, x first (scan columns X..X+W-1, rows Y..Y+H-1; of every plane of a scan Z,Y,X) or an NPY file of booleans (or 0/1) of the scan's nav shape (after nav_shape, sync_offset and flyback), read as a scan of nav shape (n_selected,); an apply's result is placed back in the scan's nav shape with NaN elsewhere; reductions and pick see the selected frames only (default: all)",
		set: func(o *Options, v string) (err error) { o.ROI, err = dataset.ParseROI(v); return err }},
	{Key: "frames", Usage: "only frames FIRST,COUNT of the scan (scan order, after nav_shape, sync_offset and flyback; of the positions selected by roi when given), read as a scan of nav shape (COUNT,) (default: all)",
		set: func(o *Options, v string) error {
			first, count, ok := strings.Cut(strings.Trim(strings.TrimSpace(v), "()[] "), ",")
			f, err1 := strconv.Atoi(strings.TrimSpace(first))
			c, err2 := strconv.Atoi(strings.TrimSpace(count))
			if !ok || err1 != nil || err2 != nil || f < 0 || c < 1 {
				return fmt.Errorf("want FIRST,COUNT (first frame >= 0, count >= 1)")
			}
			o.Frames = dataset.FrameSpan{First: f, Count: c}
			return nil
		}},
}

// parseBytes parses a non-negative byte count, or a size with a unit ("1KiB", as
// planner.ParseBytes reads it).
func parseBytes(v string) (int64, error) {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if n, err := planner.ParseBytes(v); err == nil && n <= math.MaxInt64 && strings.ContainsFunc(v, unicode.IsLetter) {
		return int64(n), nil
	}
	return 0, fmt.Errorf("want a non-negative byte count such as 1024 or 1KiB")
}

// SetOpenOption sets the option key of o (a key of OpenOptions) from its string value.
// Errors (errs.Argument, errs.Shape or errs.DType) name the option: "option sig_shape
// "256": want 2 sizes".
func SetOpenOption(o *Options, key, value string) error {
	options := OpenOptions()
	i := slices.IndexFunc(options, func(opt OpenOption) bool { return opt.Key == key })
	if i < 0 {
		keys := make([]string, len(options))
		for j, opt := range options {
			keys[j] = opt.Key
		}
		return errs.New(errs.Argument, "unknown option %q (known: %s)", key, strings.Join(keys, ", "))
	}
	if err := options[i].set(o, value); err != nil {
		return errs.Wrap(errs.Argument, fmt.Errorf("option %s %q: %w", key, value, err))
	}
	return nil
}

// ParseOptions parses the option string of the C ABI's stemdot_open and Python's
// stemdot.open, "key=value;key=value" with the keys of OpenOptions() (case-insensitive;
// empty items are skipped; a key given twice is an error).
func ParseOptions(s string) (Options, error) {
	var o Options
	err := frontend.ParseKeyValues(s, "option", func(key, value string) error { return SetOpenOption(&o, key, value) })
	return o, err
}

// parseByteOrder parses a byte order: "little" (also "le", "<") or "big" ("be", ">"),
// case-insensitive; it returns true for big-endian.
func parseByteOrder(s string) (bigEndian bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "little", "le", "<":
		return false, nil
	case "big", "be", ">":
		return true, nil
	}
	return false, errs.New(errs.Argument, "want little or big")
}

// Open opens the 4D-STEM file at path, of a format detected from its name and content
// or given by opt.Format (dataset.Open): any format of dataset.Formats, which are those
// of package dataset/formats (doc/formats.md's format table lists them with their
// extensions and options). Close the dataset when done. Errors are classified
// (errs.IO, errs.Format, errs.Shape, errs.DType, errs.Argument) and name the file and
// the field of opt that helps ("give Options.NavShape").
func Open(path string, opt Options) (dataset.Dataset, error) {
	ds, err := dataset.Open(path, opt)
	return ds, goErr(err)
}

// OpenWarnings are what a user should know about an opened dataset, one line each: how
// its frames were fitted to the scan (dataset.Notes: surplus frames ignored, an
// incomplete scan's complete rows kept, a sync offset, the HDF5 dataset chosen), and a
// nav shape guessed as (1, n_frames), for more than one frame, because neither the file nor the options gave one
// (a MIB file without its .hdr sidecar, a raw file). Options are named by their Go
// names (Options.NavShape).
func OpenWarnings(ds dataset.Dataset) []string {
	var w []string
	for _, n := range dataset.Notes(ds) {
		w = append(w, ds.Path()+": "+n)
	}
	if dataset.NavShapeGuessed(ds) && ds.NumFrames() > 1 {
		w = append(w, fmt.Sprintf("%s: the file gives no scan shape, read as 1 row of %d frames: give option nav_shape%s",
			ds.Path(), ds.NumFrames(), exampleNav(ds.NumFrames())))
	}
	return goWarnings(w)
}

// exampleNav is " (e.g. Y,X)" with the most nearly square nav shape of n frames, for
// messages, or " (Y,X)" when n is prime: its only other shape is the row it was read as.
func exampleNav(n int) string {
	best := 1
	for y := 1; y*y <= n; y++ {
		if n%y == 0 {
			best = y
		}
	}
	if best == 1 {
		return " (Y,X)"
	}
	return fmt.Sprintf(" (e.g. %d,%d)", best, n/best)
}
