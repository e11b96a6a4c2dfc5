package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/masks"
)

func newInfoCmd() *cobra.Command {
	var df datasetFlags
	var centre bool
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
then); 1 is an error, 0 all found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			sig := ds.SigShape()
			w := cmd.OutOrStdout()
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
			if !centre {
				return nil
			}
			var c masks.Centre
			err = handleInterrupts(func() (err error) {
				c, err = stemdot.Centre(cmd.Context(), ds, stemdot.Plan{}, nil)
				return err
			})
			if k := errs.KindOf(err); k == errs.Argument || k == errs.Shape {
				// The sum frame shows no disk: the info stands, the centre line says why.
				fmt.Fprintf(w, "centre:     not found: %s\n", strings.TrimPrefix(frontend.FlagNames(err.Error()), "the sum frame of "+ds.Path()+": centre: "))
				return partialResult{fmt.Errorf("%w: give apply --centre X,Y,R (from a look at stemdot sum --png) for the auto specs", err)}
			}
			if err != nil {
				return err
			}
			for _, note := range stemdot.RunWarnings(ds, dataset.RunNotes(ds, 0, ds.NumFrames())) {
				warn(cmd, note)
			}
			fmt.Fprintf(w, "centre:     x %.2f, y %.2f, r %.2f px  (the direct beam in the sum frame: disk:auto, ring:auto,RI,RO, com:auto)\n", c.X, c.Y, c.R)
			return nil
		},
	}
	cmd.Flags().BoolVar(&centre, "centre", false, "also find the direct beam's centre and radius in the sum frame (reads every frame once)")
	df.register(cmd.Flags())
	return cmd
}
