package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/masks"
)

func newInfoCmd() *cobra.Command {
	var df datasetFlags
	var centre, asJSON bool
	cmd := &cobra.Command{
		Use:   "info FILE",
		Short: "Print a dataset's format, nav and sig shape, dtype, frame count and size",
		Long: `info prints a dataset's format, nav and sig shape, dtype, frame count and size. A nav
shape that neither the file nor --nav-shape gave (a MIB file without its .hdr, a raw
file) is read as one row of all frames and marked "(guessed: give --nav-shape)". With
--roi, the scan's nav shape, the ROI and how many positions it selects; frames and frame
data count the selected positions.

--centre also reads every frame once (on CPU workers) for the sum frame and prints the
direct beam's centre (x = column, y = row, in the masks' pixel coordinates) and radius in
pixels, as stemdot.FindCentre finds them there: the centre about which the auto mask
specs of apply (disk:auto, ring:auto,RI,RO, com:auto) are made. Where the sum frame
shows no disk (a dark or featureless frame), the centre line says "not found" and why,
and the exit status is 2: the info printed, the centre not (give apply --centre X,Y,R
then); 1 is an error, 0 all found.

Calibrations that the file's metadata states are printed below: the scan step of each nav
axis, the detector pixel of each signal axis (in real or reciprocal units, or mrad), the
camera length; axes the file does not calibrate are "uncalibrated". --json prints all of
it as one JSON object (keys file, format, nav_shape, nav_shape_guessed, roi, sig_shape,
dtype, frames, frame_data_bytes, centre, calibration: the "calibration" section of a
result's sidecar).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			sig := ds.SigShape()
			w := cmd.OutOrStdout()
			cal := dataset.CalibrationOf(ds)
			if asJSON {
				w = io.Discard
			}
			guessed := ""
			if dataset.NavShapeGuessed(ds) {
				guessed = "  (guessed: give --nav-shape)"
			}
			fmt.Fprintf(w, "file:       %s\n", args[0])
			fmt.Fprintf(w, "format:     %s\n", ds.Format())
			if dataset.IsROI(ds) {
				scan, pos := dataset.ScanPositions(ds)
				fmt.Fprintf(w, "nav_shape:  %s%s\n", shapeString(scan), guessed)
				all := 1
				for _, n := range scan {
					all *= n
				}
				fmt.Fprintf(w, "roi:        %s: %d of %d scan positions\n", *df.values["roi"], len(pos), all)
			} else {
				fmt.Fprintf(w, "nav_shape:  %s%s\n", shapeString(ds.NavShape()), guessed)
			}
			fmt.Fprintf(w, "sig_shape:  %s\n", shapeString(sig[:]))
			fmt.Fprintf(w, "dtype:      %s\n", ds.DType())
			fmt.Fprintf(w, "frames:     %d\n", ds.NumFrames())
			bytes := int64(ds.NumFrames()) * int64(ds.FrameBytes())
			fmt.Fprintf(w, "frame data: %d bytes (%.3f GB)\n", bytes, float64(bytes)/1e9)
			for _, line := range calibrationLines(cal) {
				fmt.Fprintln(w, line)
			}
			info := infoJSON{File: args[0], Format: ds.Format(), NavShape: ds.NavShape(), NavShapeGuessed: dataset.NavShapeGuessed(ds),
				SigShape: sig[:], DType: ds.DType().String(), Frames: ds.NumFrames(), FrameDataBytes: bytes}
			if dataset.IsROI(ds) {
				scan, pos := dataset.ScanPositions(ds)
				info.NavShape, info.ROI = scan, &infoROI{Spec: *df.values["roi"], Selected: len(pos)}
			}
			if !cal.IsZero() {
				info.Calibration = &cal
			}
			if !centre {
				return printInfoJSON(cmd, asJSON, info)
			}
			var c masks.Centre
			err = handleInterrupts(func() (err error) {
				c, err = stemdot.Centre(cmd.Context(), ds, stemdot.Plan{}, nil)
				return err
			})
			if k := errs.KindOf(err); k == errs.Argument || k == errs.Shape {
				// The sum frame shows no disk: the info stands, the centre line says why.
				fmt.Fprintf(w, "centre:     not found: %s\n", strings.TrimPrefix(frontend.FlagNames(err.Error()), "the sum frame of "+ds.Path()+": centre: "))
				if err := printInfoJSON(cmd, asJSON, info); err != nil {
					return err
				}
				return partialResult{fmt.Errorf("%w: give apply --centre X,Y,R (from a look at stemdot sum --png) for the auto specs", err)}
			}
			if err != nil {
				return err
			}
			for _, note := range stemdot.RunWarnings(ds, dataset.RunNotes(ds, 0, ds.NumFrames())) {
				warn(cmd, note)
			}
			fmt.Fprintf(w, "centre:     x %.2f, y %.2f, r %.2f px  (the direct beam in the sum frame: disk:auto, ring:auto,RI,RO, com:auto)\n", c.X, c.Y, c.R)
			info.Centre = &infoCentre{X: c.X, Y: c.Y, R: c.R}
			return printInfoJSON(cmd, asJSON, info)
		},
	}
	cmd.Flags().BoolVar(&centre, "centre", false, "also find the direct beam's centre and radius in the sum frame (reads every frame once)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the information as one JSON object")
	df.register(cmd.Flags())
	return cmd
}

// infoJSON is what info --json prints; NavShape is the scan's (the whole scan of an
// ROI), Calibration a result sidecar's "calibration" section (dataset.Calibration).
type infoJSON struct {
	File            string               `json:"file"`
	Format          string               `json:"format"`
	NavShape        []int                `json:"nav_shape"`
	NavShapeGuessed bool                 `json:"nav_shape_guessed"`
	ROI             *infoROI             `json:"roi,omitempty"`
	SigShape        []int                `json:"sig_shape"`
	DType           string               `json:"dtype"`
	Frames          int                  `json:"frames"`
	FrameDataBytes  int64                `json:"frame_data_bytes"`
	Centre          *infoCentre          `json:"centre,omitempty"`
	Calibration     *dataset.Calibration `json:"calibration,omitempty"`
}

// infoROI is the ROI given (option roi) and the scan positions it selects.
type infoROI struct {
	Spec     string `json:"spec"`
	Selected int    `json:"selected"`
}

// infoCentre is the direct beam's centre (x column, y row) and radius, in pixels.
type infoCentre struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
	R float64 `json:"r"`
}

func printInfoJSON(cmd *cobra.Command, asJSON bool, info infoJSON) error {
	if !asJSON {
		return nil
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
	return err
}

// calibrationLines describes cal for info's text: a line for the nav axes and one for
// the signal axes when any is calibrated, one for the camera length when known.
func calibrationLines(cal dataset.Calibration) []string {
	axes := func(list []dataset.Axis) string {
		var parts []string
		for _, a := range list {
			if !a.Known() {
				parts = append(parts, a.Name+" uncalibrated")
				continue
			}
			p := fmt.Sprintf("%s %s %s", a.Name, strconv.FormatFloat(a.Scale, 'g', 6, 64), unitsOrNone(a.Units))
			if a.Offset != 0 {
				p += fmt.Sprintf(" (offset %s)", strconv.FormatFloat(a.Offset, 'g', 6, 64))
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ", ")
	}
	var lines []string
	if slices.ContainsFunc(cal.Nav, dataset.Axis.Known) {
		lines = append(lines, "scan step:  "+axes(cal.Nav))
	}
	if slices.ContainsFunc(cal.Sig, dataset.Axis.Known) {
		lines = append(lines, "pixel size: "+axes(cal.Sig))
	}
	if cal.CameraLength > 0 {
		lines = append(lines, "camera length: "+strconv.FormatFloat(cal.CameraLength, 'g', 6, 64)+" m")
	}
	return lines
}

// unitsOrNone is units (from the file: control characters escaped), or "(no units)".
func unitsOrNone(units string) string {
	if units == "" {
		return "(no units)"
	}
	return safetext.String(units)
}
