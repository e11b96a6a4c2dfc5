package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// RemoteFlag is a flag of a Remote backend (e.g. --scheduler ADDRESS), a string; a
// repeatable one a list of strings. A word of Usage in backquotes names its value in
// the help ("the scheduler's `ADDRESS`").
type RemoteFlag struct {
	Name, Default, Usage string
	Repeatable           bool
}

// Remote is a Backend whose datasets are read and whose runs are computed by another
// program, through Call: the C ABI's stemdot_cli_main passes its caller's callback
// (python -m stemdot.dask: on the workers of a Dask cluster). The dataset need not be
// readable here: Open describes it from the other program's reply.
//
// Call runs operation op with request (a JSON object), the masks' weights (apply:
// float32, float64 with "float64", C order (n_masks, sig_y, sig_x), host byte order),
// the shifts (as stemdot.ApplyOptions.Shifts: 2, or 2 per frame or scan position) and
// out, a buffer for Call to fill (host byte order), and returns its JSON reply. Its
// errors are classified (package errs); one of kind errs.Cancelled (an interrupt) ends
// the command as an interrupt does. An error that names a flag of Extra as the other
// program's keyword (resources= for --resources, range_frames=7 for --range-frames 7)
// is said with the flag. The operations, their requests and replies:
//
//	check   {"command": "apply"|"sum", "flags": {NAME: value, or [values] if repeatable}}
//	        → {} (the backend's flags checked, before the dataset is opened)
//	open    {"path", "options": {key: value as given}} → {"nav_shape", "sig_shape",
//	        "dtype" (numpy name), "n_frames", "format", "warnings", "scan_shape",
//	        "positions" (an ROI's selected scan positions, one per frame, else null),
//	        "frame_positions" (the scan position of each frame when they are not the whole
//	        scan, else null), "positions_without_frame" ([first, count] runs of the scan
//	        positions of frames without a frame in the file, stemdot.BlankPositions),
//	        "calibration" (the sidecar's "calibration" section of the scan's axes)}, as
//	        stemdot.dask.dataset_info returns it, and "path": the
//	        file the frames are read from, as the other program's stemdot opened it
//	        (stemdot.Dataset.path: e.g. an EMI file's SER file), which the sidecar
//	        records as stemdot's does (the path given where it is "")
//	centre  {"path", "options"}, shifts → {"x", "y", "r"}
//	apply   {"path", "options", "n_masks", "sig_shape", "float64", "progress"}, masks,
//	        shifts (2, or 2 per frame read), out: n_frames × n_masks float32 (float64),
//	        frame-major, the frames as opened (an ROI's selected ones)
//	        → {"cpu_workers", "gpu_workers" it was given to (each counted once), "workers":
//	        [{"name", "frames", "ranges", "seconds" busy}] per worker of the other
//	        program that computed frames, "run_notes": [{"key", "text", "count",
//	        "frames"}] the run notes of the frames read (dataset.RunNote), summed by key
//	        over the ranges computed (absent or null: none)}
//	reduce  {"path", "options", "reductions": names of sum, mean, max, std asked, in
//	        that order, "progress"}, out: one (sig_y, sig_x) float64 frame per name
//	        → {"cpu_workers", "gpu_workers", "workers", "run_notes"}
//
// "progress" asks for a progress bar on stderr (the command's is shown only when stderr
// is a terminal and --quiet is not given).
type Remote struct {
	Extra []RemoteFlag
	Call  func(op string, request any, masks []byte, shifts []float64, out []byte) ([]byte, error)

	values   [2]map[string]any // apply's and sum's: *string or *[]string, by flag name
	checked  bool
	path     string
	given    map[string]string
	warnings []string // the dataset's
	ran      []ranOn  // the last apply's workers
}

func (b *Remote) Flags(fs *pflag.FlagSet, reduce bool) {
	values := map[string]any{}
	for _, f := range b.Extra {
		if f.Repeatable {
			values[f.Name] = fs.StringArray(f.Name, nil, f.Usage)
		} else {
			values[f.Name] = fs.String(f.Name, f.Default, f.Usage)
		}
	}
	b.values[commandIndex(reduce)] = values
}

// commandIndex is 0 for apply, 1 for sum (reduce).
func commandIndex(reduce bool) int {
	if reduce {
		return 1
	}
	return 0
}

// Check checks the backend's flags once: for apply, when the dataset is opened (the
// other program needs them to reach it).
func (b *Remote) Check(reduce bool) error {
	if b.checked {
		return nil
	}
	b.checked = true
	flags := map[string]any{}
	for name, v := range b.values[commandIndex(reduce)] {
		switch v := v.(type) {
		case *string:
			flags[name] = *v
		case *[]string:
			flags[name] = *v
		}
	}
	command := map[bool]string{false: "apply", true: "sum"}[reduce]
	_, err := b.Call("check", map[string]any{"command": command, "flags": flags}, nil, nil, nil)
	return err
}

// description is the reply of Call's open.
type description struct {
	NavShape       []int    `json:"nav_shape"`
	SigShape       []int    `json:"sig_shape"`
	DType          string   `json:"dtype"`
	NFrames        int      `json:"n_frames"`
	Format         string   `json:"format"`
	Warnings       []string `json:"warnings"`
	ScanShape      []int    `json:"scan_shape"`
	Positions      []int    `json:"positions"`
	FramePositions []int    `json:"frame_positions"`
	Path           string   `json:"path"`
	// PositionsWithoutFrame are [first, count] runs of the scan positions of the frames
	// that have no frame in the file (stemdot.BlankPositions).
	PositionsWithoutFrame [][2]int `json:"positions_without_frame"`
	// Calibration is what the file states of its axes (the scan's and the frames'), as
	// stemdot.Dataset.calibration gives it.
	Calibration dataset.Calibration `json:"calibration"`
}

func (b *Remote) Open(ctx context.Context, path string, opt stemdot.Options, given map[string]string) (dataset.Dataset, []string, error) {
	if err := b.Check(false); err != nil {
		return nil, nil, err
	}
	b.path, b.given = path, given
	var d description
	if err := b.call("open", nil, nil, nil, nil, &d); err != nil {
		return nil, nil, err
	}
	if d.Path != "" {
		path = d.Path
	}
	ds, err := d.dataset(path)
	b.warnings = d.Warnings
	return ds, d.Warnings, err
}

// dataset is the dataset d describes: a scan of d.ScanShape whose frames are read
// elsewhere, viewed as d's frames (an ROI's selected positions, a frames range), so
// that the results of its frames are placed as those of the dataset opened here.
func (d description) dataset(path string) (dataset.Dataset, error) {
	dt, err := dataset.ParseDType(d.DType)
	if err != nil || len(d.SigShape) != 2 || len(d.ScanShape) == 0 {
		return nil, errs.New(errs.Internal, "the backend described %s as sig_shape %v, scan_shape %v, dtype %q: not a dataset", path, d.SigShape, d.ScanShape, d.DType)
	}
	whole := &described{path: path, format: d.Format, scan: d.ScanShape, sig: [2]int{d.SigShape[0], d.SigShape[1]}, dtype: dt, calibration: d.Calibration}
	for _, r := range d.PositionsWithoutFrame {
		whole.blanks = append(whole.blanks, dataset.FrameSpan{First: r[0], Count: r[1]})
	}
	if err := dataset.CheckBlanks("the backend's description of "+path, whole.blanks, whole.NumFrames()); err != nil {
		return nil, err
	}
	var ds dataset.Dataset = whole
	switch {
	case d.Positions != nil:
		roi := dataset.ROI{Mask: make([]bool, ds.NumFrames()), Shape: d.ScanShape}
		for _, p := range d.Positions {
			if p < 0 || p >= len(roi.Mask) {
				return nil, errs.New(errs.Internal, "the backend described %s with scan position %d outside its scan %v", path, p, d.ScanShape)
			}
			roi.Mask[p] = true
		}
		ds, err = dataset.Select(ds, roi)
	case len(d.FramePositions) > 0:
		ds, err = dataset.Range(ds, d.FramePositions[0], len(d.FramePositions))
	}
	if err != nil {
		return nil, err
	}
	if _, pos := dataset.ScanPositions(ds); ds.NumFrames() != d.NFrames || !slices.Equal(ds.NavShape(), d.NavShape) ||
		d.FramePositions != nil && !slices.Equal(pos, d.FramePositions) {
		return nil, errs.New(errs.Internal, "the backend described %s as %d frames of nav_shape %v, but its scan positions make %d of %v", path, d.NFrames, d.NavShape, ds.NumFrames(), ds.NavShape())
	}
	return ds, nil
}

func (b *Remote) Centre(ctx context.Context, ds dataset.Dataset, shifts []float64) (masks.Centre, error) {
	var c struct{ X, Y, R float64 }
	err := b.call("centre", nil, nil, shifts, nil, &c)
	return masks.Centre{X: c.X, Y: c.Y, R: c.R}, err
}

// workers is the reply of Call's apply and reduce.
type workers struct {
	CPU      int               `json:"cpu_workers"`
	GPU      int               `json:"gpu_workers"`
	Ran      []ranOn           `json:"workers"`
	RunNotes []dataset.RunNote `json:"run_notes"`
}

// ranOn is what one worker of the other program computed in a run.
type ranOn struct {
	Name    string  `json:"name"`
	Frames  int     `json:"frames"`
	Ranges  int     `json:"ranges"`
	Seconds float64 `json:"seconds"`
}

// stats are the Stats of a run of workers over the frames of ds since start.
func (w workers) stats(ds dataset.Dataset, start time.Time) engine.Stats {
	return engine.Stats{Frames: ds.NumFrames(), BytesRead: int64(ds.NumFrames()) * int64(ds.FrameBytes()), Elapsed: time.Since(start),
		Workers: w.CPU + w.GPU, CPUWorkers: w.CPU, GPUWorkers: w.GPU}
}

func (b *Remote) Apply(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, opt stemdot.ApplyOptions, warn func(string)) (*stemdot.Result, error) {
	var weights []byte
	if opt.Float64 {
		weights = bytesOf(stack.Dense64())
	} else {
		weights = bytesOf(stack.Dense())
	}
	sig := ds.SigShape()
	request := map[string]any{"n_masks": stack.N, "sig_shape": sig[:], "float64": opt.Float64, "progress": opt.Progress != nil}
	return stemdot.ApplyElsewhere(ds, stack, opt, func(shifts []float64, out32 []float32, out64 []float64) (engine.Stats, []dataset.RunNote, error) {
		start := time.Now()
		out := bytesOf(out32)
		if opt.Float64 {
			out = bytesOf(out64)
		}
		var w workers
		err := b.call("apply", request, weights, shifts, out, &w)
		b.ran = w.Ran
		return w.stats(ds, start), dataset.SumRunNotes(w.RunNotes), err
	})
}

// Workers is a line per worker of the other program that computed frames of the last
// Apply: "worker tcp://10.0.0.5:40123: 4096 frames in 12 ranges, 0.537 GB at 41.2 GB/s"
// (the throughput while busy in its ranges), in the layout of stemdot's own workers.
func (b *Remote) Workers(res *stemdot.Result) []string {
	lines := make([]string, len(b.ran))
	for i, w := range b.ran {
		bytes := float64(w.Frames) * float64(res.Stats.BytesRead) / float64(max(res.Stats.Frames, 1))
		rate := 0.0
		if w.Seconds > 0 {
			rate = bytes / 1e9 / w.Seconds
		}
		lines[i] = fmt.Sprintf("worker %s: %d frames in %d ranges, %.3f GB at %.1f GB/s", w.Name, w.Frames, w.Ranges, bytes/1e9, rate)
	}
	return lines
}

func (b *Remote) Reduce(ctx context.Context, ds dataset.Dataset, opt stemdot.ReduceOptions) (*stemdot.Reduction, error) {
	asked := map[string]bool{"sum": opt.Sum, "mean": opt.Mean, "max": opt.Max, "std": opt.Std}
	var names []string
	for _, name := range stemdot.ReductionNames {
		if asked[name] {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, errs.New(errs.Argument, "nothing to reduce: ask for at least one of ReduceOptions.Sum, Mean, Max and Std")
	}
	sig := ds.SigShape()
	pixels := sig[0] * sig[1]
	frames := make([]float64, len(names)*pixels)
	start := time.Now()
	var w workers
	request := map[string]any{"reductions": names, "progress": opt.Progress != nil}
	if err := b.call("reduce", request, nil, nil, bytesOf(frames), &w); err != nil {
		return nil, err
	}
	notes := dataset.SumRunNotes(w.RunNotes)
	red := &stemdot.Reduction{SigShape: sig, Frames: ds.NumFrames(), Stats: w.stats(ds, start), RunNotes: notes,
		Warnings: slices.Concat(b.warnings, stemdot.RunWarnings(ds, notes))}
	for _, r := range dataset.Blanks(ds) { // not reduced (stemdot.Reduction.Frames)
		red.Frames -= r.Count
	}
	for i, name := range names {
		frame := frames[i*pixels : (i+1)*pixels : (i+1)*pixels]
		switch name {
		case "sum":
			red.Sum = frame
		case "mean":
			red.Mean = frame
		case "max":
			red.Max = frame
		case "std":
			red.Std = frame
		}
	}
	return red, nil
}

// interrupted is a backend's error of an interrupt (errs.Cancelled): its message, and an
// error of the cancelled context, so that the command ends as after stemdot's own
// interrupts ("interrupted", or "interrupted: no result written" in a handled step).
type interrupted struct{ error }

func (e interrupted) Unwrap() []error { return []error{context.Canceled, e.error} }

// call runs op with request (the dataset's path and options added) and decodes the
// reply into reply.
func (b *Remote) call(op string, request map[string]any, weights []byte, shifts []float64, out []byte, reply any) error {
	req := map[string]any{"path": b.path, "options": b.given}
	for k, v := range request {
		req[k] = v
	}
	text, err := b.Call(op, req, weights, shifts, out)
	if err != nil {
		if errs.KindOf(err) == errs.Cancelled {
			return interrupted{err}
		}
		if msg := b.flagNames(err.Error()); msg != err.Error() {
			return errs.New(errs.KindOf(err), "%s", msg)
		}
		return err
	}
	if err := json.Unmarshal(text, reply); err != nil {
		return errs.New(errs.Internal, "the backend's reply to %s is not the JSON expected: %v: %q", op, err, text)
	}
	return nil
}

// keywordRef is a keyword argument in a message: its name and value, if any
// ("range_frames=0", "resources=").
var keywordRef = regexp.MustCompile(`\b([a-z][a-z0-9_]*)=([^\s,;:)]*)`)

// flagNames rewrites the keywords of msg that name flags of Extra (the flag's name
// with _ for -) as the flags: "resources=" as "--resources", "range_frames=0" as
// "--range-frames 0"; other keywords are left as they are.
func (b *Remote) flagNames(msg string) string {
	return keywordRef.ReplaceAllStringFunc(msg, func(m string) string {
		key, value, _ := strings.Cut(m, "=")
		for _, f := range b.Extra {
			if strings.ReplaceAll(f.Name, "-", "_") == key {
				if value == "" {
					return "--" + f.Name
				}
				return "--" + f.Name + " " + value
			}
		}
		return m
	})
}

// bytesOf is the memory of s as bytes, in host byte order (no copy).
func bytesOf[T float32 | float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// described is a scan whose frames are read elsewhere (Remote): shapes, dtype and
// format only; ReadFrames fails.
type described struct {
	path, format string
	scan         []int
	sig          [2]int
	dtype        dataset.DType
	blanks       []dataset.FrameSpan // the scan positions without a frame (dataset.Blanker)
	calibration  dataset.Calibration
}

func (d *described) Blanks() []dataset.FrameSpan { return slices.Clone(d.blanks) }

// Calibration implements dataset.Calibrator.
func (d *described) Calibration() dataset.Calibration { return d.calibration.Clone() }

func (d *described) Format() string       { return d.format }
func (d *described) Path() string         { return d.path }
func (d *described) NavShape() []int      { return slices.Clone(d.scan) }
func (d *described) SigShape() [2]int     { return d.sig }
func (d *described) DType() dataset.DType { return d.dtype }
func (d *described) NumFrames() int {
	n := 1
	for _, s := range d.scan {
		n *= s
	}
	return n
}
func (d *described) FrameBytes() int { return d.sig[0] * d.sig[1] * d.dtype.Size() }
func (d *described) ReadFrames(start, end int, dst []byte) error {
	return errs.New(errs.Internal, "%s: its frames are read by the backend, not here", d.path)
}
func (d *described) Close() error { return nil }
