package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newInfoCmd() *cobra.Command {
	var df datasetFlags
	cmd := &cobra.Command{
		Use:   "info FILE",
		Short: "Print a dataset's format, nav and sig shape, dtype, frame count and size",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ds, err := df.open(args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			sig := ds.SigShape()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "file:       %s\n", args[0])
			fmt.Fprintf(w, "format:     %s\n", ds.Format())
			fmt.Fprintf(w, "nav_shape:  %s\n", shapeString(ds.NavShape()))
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
