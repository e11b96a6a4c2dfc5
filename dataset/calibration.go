package dataset

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Calibrations: what a file's metadata says of the size of a scan step and of a detector
// pixel.
//
// A format that finds them in its file reports them in FileFrames.Calibration; Reconcile
// keeps them with the dataset (Calibrator), and the views of this package (Range, Select)
// give those of the dataset they view. Nav axes describe the scan (ScanPositions' scan
// shape, the nav shape of an ROI's or frame range's whole scan). A user's nav shape other
// than the file's drops the nav axes (the steps then describe another scan); the
// signal axes stay. A format reports only what its file states: an axis it cannot
// calibrate keeps its name and nothing else, never a guess.
//
// Units are written as HyperSpy writes them ("nm", "µm", "1/nm", "mrad"): NormalizeUnits
// turns a file's SI units (m, 1/m, rad) into these.

// Axis is the calibration of one axis: index i lies at Offset + i·Scale, in Units.
// Scale 0 means unknown (then Offset and Units are too); Units "" means unknown.
type Axis struct {
	// Name is "z", "y", "x" or "t" for nav axes (numpy order), "ky", "kx" for signal axes.
	Name   string  `json:"name"`
	Scale  float64 `json:"scale"`
	Offset float64 `json:"offset"`
	Units  string  `json:"units"`
}

// Known says that the axis has a scale.
func (a Axis) Known() bool { return a.Scale != 0 }

// MarshalJSON writes the axis as the sidecar's schema has it: "name", and "scale" and
// "offset" (0 included) when known, "units" when known.
func (a Axis) MarshalJSON() ([]byte, error) {
	type known struct {
		Name   string  `json:"name"`
		Scale  float64 `json:"scale"`
		Offset float64 `json:"offset"`
		Units  string  `json:"units,omitempty"`
	}
	if !a.Known() {
		return json.Marshal(struct {
			Name string `json:"name"`
		}{a.Name})
	}
	return json.Marshal(known(a))
}

// Calibration is what a file states of its axes, in numpy order: Nav has one Axis per
// axis of the scan shape (or none when nothing is known), Sig two (sig_y, sig_x) or
// none. CameraLength is the camera length in metres (0: unknown). Its JSON is the
// "calibration" section of stemdot's result sidecar: {"nav": [{"name": "y", "scale":
// 1.5, "offset": 0, "units": "nm"}, ...], "sig": [{"name": "ky", ...}, ...],
// "camera_length_m": 0.12}, every key absent when unknown (an axis' offset is written
// with its scale, 0 included).
type Calibration struct {
	Nav          []Axis  `json:"nav,omitempty"`
	Sig          []Axis  `json:"sig,omitempty"`
	CameraLength float64 `json:"camera_length_m,omitempty"`
}

// IsZero says that nothing is known.
func (c Calibration) IsZero() bool {
	return !slices.ContainsFunc(c.Nav, Axis.Known) && !slices.ContainsFunc(c.Sig, Axis.Known) && c.CameraLength == 0
}

// Clone returns a copy that shares no slice with c.
func (c Calibration) Clone() Calibration {
	c.Nav, c.Sig = slices.Clone(c.Nav), slices.Clone(c.Sig)
	return c
}

// NavNames returns the names of n nav axes in numpy order: "t" for a series of one axis,
// "y", "x" for a scan, "z", "y", "x" for a scan of planes; "n0", "n1", ... beyond.
func NavNames(n int) []string {
	switch n {
	case 1:
		return []string{"t"}
	case 2:
		return []string{"y", "x"}
	case 3:
		return []string{"z", "y", "x"}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "n" + strconv.Itoa(i)
	}
	return names
}

// SigNames are the names of the signal axes, (sig_y, sig_x).
var SigNames = [2]string{"ky", "kx"}

// NewAxis returns the axis named name of scale and offset in units, normalized
// (NormalizeUnits); an uncalibrated axis (only the name) when scale is 0 or not finite,
// or units are empty, say "pixel" or hold "?" (a file's ways of saying it is not
// calibrated: GMS writes scale 1 and no units, fpd files "?/m").
func NewAxis(name string, scale, offset float64, units string) Axis {
	u := strings.ToLower(strings.TrimSpace(units))
	if scale == 0 || math.IsNaN(scale) || math.IsInf(scale, 0) || math.IsNaN(offset) || math.IsInf(offset, 0) ||
		u == "" || u == "pixel" || u == "pixels" || u == "px" || strings.Contains(u, "?") {
		return Axis{Name: name}
	}
	scale, offset, units = NormalizeUnits(scale, offset, units)
	return Axis{Name: name, Scale: scale, Offset: offset, Units: units}
}

// NormalizeUnits returns scale and offset in the units HyperSpy writes: metres (m,
// meters: TIA's) in nm, reciprocal metres (1/m, m^-1, 1/meters) in 1/nm, radians (rad) in mrad, "um" and "u m" as "µm",
// "A" as "Å", "1/A" as "1/Å"; others as they are (trimmed).
func NormalizeUnits(scale, offset float64, units string) (float64, float64, string) {
	u := strings.TrimSpace(units)
	f := 1.0
	switch u {
	case "m", "meters", "metres":
		f, u = 1e9, "nm"
	case "1/m", "m^-1", "m-1", "1/meters", "1/metres":
		f, u = 1e-9, "1/nm"
	case "rad":
		f, u = 1e3, "mrad"
	case "um", "u m", "micron", "μm": // μ: Greek mu (U+03BC); HyperSpy writes the micro sign (U+00B5)
		u = "µm"
	case "A", "Angstrom", "angstrom":
		u = "Å"
	case "1/A", "A^-1":
		u = "1/Å"
	case "nm^-1", "nm-1":
		u = "1/nm"
	}
	return scale * f, offset * f, u
}

// Calibrator is implemented by datasets that know calibrations from their file (see
// above). Reconcile's datasets do; so do the views of Range and Select.
type Calibrator interface {
	// Calibration returns the dataset's calibrations (a copy); the zero Calibration when
	// the file states none.
	Calibration() Calibration
}

// CalibrationOf returns ds's calibrations (Calibrator), the zero Calibration when it has
// none.
func CalibrationOf(ds Dataset) Calibration {
	if c, ok := ds.(Calibrator); ok {
		return c.Calibration()
	}
	return Calibration{}
}

// calibrationFor returns c for a dataset whose scan was given the nav shape nav, where
// the file stated fileNav and the user opt.NavShape: the nav axes are dropped when the
// user's nav shape is not the file's, or their number is not nav's.
func calibrationFor(c Calibration, opt Options, nav, fileNav []int) Calibration {
	c = c.Clone()
	if len(c.Nav) != len(nav) || len(opt.NavShape) > 0 && !slices.Equal(opt.NavShape, fileNav) {
		c.Nav = nil
	}
	if len(c.Sig) != 2 {
		c.Sig = nil
	}
	return c
}
