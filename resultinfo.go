package stemdot

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stemdot/stemdot/dataset"
)

// ResultFormat and ResultFormatVersion tag a result's JSON sidecar (ResultInfo): a
// reader checks the tag and refuses versions it does not know.
const (
	ResultFormat        = "stemdot-result"
	ResultFormatVersion = 1
)

// ResultInfo describes a result NPY: its columns (the masks, in order), its shape and
// dtype, the dataset and options it was computed from, and the plan's workers. Save
// writes it as JSON beside the NPY (SidecarPath: RESULT.json beside RESULT.npy), the
// command line `python -m stemdot.dask` writes the same schema, and Python's
// stemdot.load_result reads it. Keys are snake_case as in the JSON tags; shapes are
// lists of integers, rows first. New fields are added with omitempty, so that older
// readers of format_version 1 keep working.
type ResultInfo struct {
	// Format is ResultFormat, "stemdot-result".
	Format string `json:"format"`
	// FormatVersion is ResultFormatVersion, 1.
	FormatVersion int `json:"format_version"`
	// StemdotVersion is the Version of the stemdot that computed the result ("0.3.0").
	StemdotVersion string `json:"stemdot_version"`
	// Shape is the NPY's shape, NavShape + (n_masks,).
	Shape []int `json:"shape"`
	// DType is the NPY's dtype: "float32" or "float64".
	DType string `json:"dtype"`
	// NavShape is the scan shape, e.g. (nav_y, nav_x), (n,) for a 3-D input, or (nav_z,
	// nav_y, nav_x) for a 5-D one.
	NavShape []int `json:"nav_shape"`
	// SigShape is the frames' shape (sig_y, sig_x) in pixels.
	SigShape []int `json:"sig_shape"`
	// Masks describe the NPY's last axis, one entry per column, in column order.
	Masks []MaskInfo `json:"masks"`
	// Dataset is the input file, its format and the open options given.
	Dataset DatasetInfo `json:"dataset"`
	// Plan is the workers that computed the result.
	Plan PlanInfo `json:"plan"`
	// COMShifts, when the centre-of-mass shift maps were written with the result
	// (Outputs.COMShifts), describes that file.
	COMShifts *COMShiftsInfo `json:"com_shifts,omitempty"`
	// ROI, for a result of a region of interest (option roi, also recorded among the
	// dataset's options), says where its rows lie in the scan.
	ROI *ROIInfo `json:"roi,omitempty"`
	// Centre, when auto mask specs (disk:auto, ring:auto,RI,RO, com:auto) were made, is
	// the direct beam's centre they were made about.
	Centre *CentreInfo `json:"centre,omitempty"`
	// Shifts, for masks moved with the pattern (ApplyOptions.Shifts), describes them.
	Shifts *ShiftsInfo `json:"shifts,omitempty"`
	// PositionsWithoutFrame are the scan positions of the result that have no frame in
	// the file (a sync offset moved the file's frames off them, or a custom scan never
	// visits them: dataset.Blanks), as
	// [first, count] runs of flat scan positions (C order over the nav shape, or over
	// ROI.ScanShape), ascending: their values are those of a blank (all-zero) frame, 0
	// (LiberTEM's sync_offset). Absent when every position has a frame.
	PositionsWithoutFrame [][2]int `json:"positions_without_frame,omitempty"`
	// RunNotes are what the reader counted in the frames of the run (Result.RunNotes),
	// such as a DECTRIS detector's saturated pixels, with their warnings. Absent when
	// there are none.
	RunNotes []RunNoteInfo `json:"run_notes,omitempty"`
	// Live, for the result of a detector stream (Live), describes the acquisition.
	Live *LiveInfo `json:"live,omitempty"`
	// Calibration is what the input file states of its axes (dataset.Calibration): the
	// scan step of the result's nav axes, the detector pixel of the frames' axes (which
	// the masks' specs are in pixels of), the camera length. Nav axes are absent where
	// the result's nav shape is not the file's scan (a compact ROI, a frame range).
	// Absent when the file states none.
	Calibration *dataset.Calibration `json:"calibration,omitempty"`
}

// LiveInfo describes the acquisition of a live result: its source, the frames
// received, and, for a partial result, the positions without a frame (NaN in the
// result).
type LiveInfo struct {
	// Source is the detector's address ("merlin://127.0.0.1:6342"), Detector what the
	// stream says it is.
	Source   string `json:"source"`
	Detector string `json:"detector"`
	// Partial is true when the acquisition ended before every frame came; EndedBy says
	// why.
	Partial bool   `json:"partial"`
	EndedBy string `json:"ended_by,omitempty"`
	// Received, Missing, Late, Surplus, Repeated and Stalls are the counts of live.Counts.
	Received int `json:"received"`
	Missing  int `json:"missing"`
	Late     int `json:"late"`
	Surplus  int `json:"surplus"`
	Repeated int `json:"repeated"`
	Stalls   int `json:"stalls"`
	// PositionsWithoutFrame are the positions whose frame never came, as [first, count]
	// runs of flat scan positions (C order over nav_shape).
	PositionsWithoutFrame [][2]int `json:"positions_without_frame,omitempty"`
	// Record is the file the received frames were recorded to (--record), as written
	// (a partial record's name, where it has one).
	Record string `json:"record,omitempty"`
	// Continuous places the scan in a continuous run (stemdot live --continuous); nil
	// for one acquisition.
	Continuous *ContinuousInfo `json:"continuous,omitempty"`
}

// ContinuousInfo places a scan in a continuous run (LiveOptions.Continuous).
type ContinuousInfo struct {
	// Scan is the scan's number in the run, from 1, the scans dropped included.
	Scan int `json:"scan"`
	// Complete and Dropped count the run's scans that were complete (kept; this one
	// included) and dropped (ended early, or in progress when the run stopped), up to
	// this one; in the result that Live returns, over the whole run.
	Complete int `json:"scans_complete"`
	Dropped  int `json:"scans_dropped"`
	// Stopped says, in the result that Live returns, why the run ended and which scan
	// in progress was dropped; "" in the results of LiveOptions.OnScan.
	Stopped string `json:"stopped,omitempty"`
}

// ShiftsInfo describes the shifts (dy, dx) in pixels that moved the masks of a result's
// frames (descan compensation).
type ShiftsInfo struct {
	// Constant is the one shift of every frame, when one was given (--shift).
	Constant []float64 `json:"constant,omitempty"`
	// File is the NPY of shifts per scan position (--shifts), absolute; "" when they
	// were given otherwise (an array in Python, ApplyOptions.Shifts in Go).
	File string `json:"file,omitempty"`
	// Mean is the mean shift (dy, dx) of the frames computed.
	Mean []float64 `json:"mean"`
}

// ROIInfo places the rows of a result of a region of interest in its scan.
type ROIInfo struct {
	// ScanShape is the whole scan's nav shape.
	ScanShape []int `json:"scan_shape"`
	// Selected is the number of scan positions the ROI selects.
	Selected int `json:"selected"`
	// Compact is true for a result of the selected positions only, shape (Selected,
	// n_masks) (ApplyOptions.ROICompact, --roi-compact); false for one of ScanShape with
	// NaN at the positions left out.
	Compact bool `json:"compact"`
	// Positions, when written beside a compact result (Outputs.Positions), is that NPY
	// (flat scan positions, int64), relative to the sidecar's directory as
	// COMShiftsInfo.File.
	Positions string `json:"positions,omitempty"`
}

// CentreInfo is the direct beam's centre and radius, in pixels of the frame (X column, Y
// row), that auto mask specs were made about, and where it came from (Planner.Centre):
// "sum frame" (found there), "sum frame of the frames moved back by their shifts" (with
// shifts: the centre at zero shift) or "given".
type CentreInfo struct {
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
	R      float64 `json:"r"`
	Source string  `json:"source"`
}

// MaskInfo is one column of a result: the mask's name and where it came from, a mask
// spec (Spec) or an NPY mask file (File), and its index among the masks of that spec
// or file (com gives 3 masks: indices 0, 1, 2; a 2-D file's mask has index 0).
type MaskInfo struct {
	// Column is the mask's index in the result's last axis.
	Column int `json:"column"`
	// Name is the mask's name ("disk", "com_sum", "stack[2]"; Result.Names).
	Name string `json:"name"`
	// Spec is the mask spec that made the mask ("disk:128,128,20"), "" for a file's mask
	// or a mask of unknown source.
	Spec string `json:"spec,omitempty"`
	// File is the absolute path of the NPY mask file that held the mask, "" for a spec's
	// mask or a mask of unknown source.
	File string `json:"file,omitempty"`
	// Index is the mask's index within its spec's or file's masks.
	Index int `json:"index"`
}

// DatasetInfo is the input of a result.
type DatasetInfo struct {
	// Path is the file's absolute path ("" for data in memory).
	Path string `json:"path"`
	// Format is the format it was read as (dataset.Dataset.Format: "mib", "hdf5", ...).
	Format string `json:"format"`
	// Options are the open options given, by key (OpenOptions: "nav_shape", "frames",
	// ...), each value as given (the CLI's flag values, Python's keyword values as the
	// library reads them: "64,64", "true"); options left at their default are absent.
	Options map[string]string `json:"options"`
}

// PlanInfo is the workers of a run.
type PlanInfo struct {
	// CPUWorkers and GPUWorkers count the planned workers (engine.Stats; on a Dask
	// cluster: of all its nodes' plans).
	CPUWorkers int `json:"cpu_workers"`
	GPUWorkers int `json:"gpu_workers"`
}

// COMShiftsInfo describes the centre-of-mass shift maps written with a result
// (Outputs.COMShifts; see COMShifts).
type COMShiftsInfo struct {
	// File is the shift maps' NPY, relative to the sidecar's directory when it lies in
	// it or below, else absolute.
	File string `json:"file"`
	// Shape is its shape, NavShape + (2,); DType "float64".
	Shape []int  `json:"shape"`
	DType string `json:"dtype"`
	// Components name the last axis: ["y", "x"], in pixels of the frame.
	Components []string `json:"components"`
	// Columns are the result's columns of the com masks the shifts come from: com_sum,
	// com_y, com_x.
	Columns []int `json:"columns"`
}

// SidecarPath is the JSON sidecar of a result NPY: path with its .npy extension
// (any case) replaced by .json ("scan/result.npy" → "scan/result.json").
func SidecarPath(npyPath string) string {
	if ext := pathExt(npyPath); strings.EqualFold(ext, ".npy") {
		return npyPath[:len(npyPath)-len(ext)] + ".json"
	}
	return npyPath + ".json"
}

// newResultInfo is the description of r, a result of ds, with its masks' names (their
// sources unknown: see SetMasks) and no options.
func newResultInfo(ds dataset.Dataset, r *Result) ResultInfo {
	sig := ds.SigShape()
	return r.describe(ResultInfo{
		SigShape:              []int{sig[0], sig[1]},
		Dataset:               DatasetInfo{Path: absPath(ds.Path()), Format: ds.Format()},
		Plan:                  PlanInfo{CPUWorkers: r.Stats.Workers - r.Stats.GPUWorkers, GPUWorkers: r.Stats.GPUWorkers},
		PositionsWithoutFrame: BlankPositions(ds),
		RunNotes:              runNoteInfo(ds, r.RunNotes),
		Calibration:           resultCalibration(ds, r),
	})
}

// resultCalibration is ds's calibration for r, a result of ds: without nav axes when
// r's nav shape is not the scan's (a compact ROI); nil when nothing is known.
func resultCalibration(ds dataset.Dataset, r *Result) *dataset.Calibration {
	c := dataset.CalibrationOf(ds)
	if len(c.Nav) != len(r.NavShape) || r.ScanShape != nil && !slices.Equal(r.NavShape, r.ScanShape) {
		c.Nav = nil
	}
	if c.IsZero() {
		return nil
	}
	return &c
}

// BlankPositions are the scan positions of ds's frames without a frame in the file
// (dataset.Blanks), as [first, count] runs of flat scan positions (C order over the scan
// shape of dataset.ScanPositions), ascending, as ResultInfo.PositionsWithoutFrame holds
// them; nil when every frame of ds is one of the file.
func BlankPositions(ds dataset.Dataset) [][2]int {
	blanks := dataset.Blanks(ds)
	if len(blanks) == 0 {
		return nil
	}
	_, pos := dataset.ScanPositions(ds)
	var ps []int
	for _, b := range blanks {
		ps = append(ps, pos[b.First:b.First+b.Count]...)
	}
	return runs(ps)
}

// describe is info with what r tells set: the format tag and version, r's shape, nav
// shape and dtype, its masks' names where info does not describe r.NMasks masks (the
// names of r.Names, else "mask<m>"), and empty options where none are set.
func (r *Result) describe(info ResultInfo) ResultInfo {
	info.Format, info.FormatVersion, info.StemdotVersion = ResultFormat, ResultFormatVersion, Version
	info.NavShape = slices.Clone(r.NavShape)
	info.Shape, info.DType = append(slices.Clone(r.NavShape), r.NMasks), "float32"
	if r.F64 != nil {
		info.DType = "float64"
	}
	if len(info.Masks) != r.NMasks {
		info.Masks = nil
		for m := range r.NMasks {
			name := fmt.Sprintf("mask%d", m)
			if m < len(r.Names) {
				name = r.Names[m]
			}
			info.Masks = append(info.Masks, MaskInfo{Column: m, Name: name, Index: m})
		}
	}
	if info.Dataset.Options == nil {
		info.Dataset.Options = map[string]string{}
	}
	if r.ScanShape != nil {
		info.ROI = &ROIInfo{ScanShape: slices.Clone(r.ScanShape), Selected: len(r.Positions), Compact: !slices.Equal(r.NavShape, r.ScanShape)}
	}
	return info
}

// SetMasks records the masks' sources, as MasksInfo returns them, for the sidecar.
func (i *ResultInfo) SetMasks(masks []MaskInfo) { i.Masks = slices.Clone(masks) }

// SetOptions records the open options given (key → value as given) for the sidecar.
func (i *ResultInfo) SetOptions(options map[string]string) { i.Dataset.Options = maps.Clone(options) }

// JSON is the sidecar's text: indented JSON ending in a newline.
func (i *ResultInfo) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(i, "", "  ")
	return append(b, '\n'), err
}

// absPath is p made absolute ("" and a live source's URL, SCHEME://..., stay).
func absPath(p string) string {
	if p == "" || strings.Contains(p, "://") {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
