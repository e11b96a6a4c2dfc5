package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot/dataset"
)

func newInfoCmd() *cobra.Command {
	var df datasetFlags
	cmd := &cobra.Command{
		Use:   "info FILE",
		Short: "Print a dataset's format, nav and sig shape, dtype, frame count and size",
		Long: `info prints a dataset's format, nav and sig shape, dtype, frame count and size. A nav
shape that neither the file nor --nav-shape gave (a MIB file without its .hdr, a raw
file) is read as one row of all frames and marked "(guessed: give --nav-shape)". With
--roi, the scan's nav shape, the ROI and how many positions it selects; frames and frame
data count the selected positions.`,
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
			return nil
		},
	}
	df.register(cmd.Flags())
	return cmd
}
