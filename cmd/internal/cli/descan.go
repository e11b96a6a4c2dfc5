package cli

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/frontend"
)

// shiftFlags are apply's descan compensation: one shift for every frame (--shift) or
// one per scan position (--shifts).
type shiftFlags struct {
	constant, file string
}

func (f *shiftFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.constant, "shift", "", "move every mask by DY,DX pixels, y first (descan compensation; a positive DY moves it down, DX right; sub-pixel shifts by bilinear interpolation of the mask)")
	fs.StringVar(&f.file, "shifts", "", "move the masks of each scan position by its own shift: NPY of shape nav_shape + (2,), y first, then x, in pixels, float32 or float64 (with --frames, for the whole scan), e.g. from stemdot descan fit")
}

// shifts returns stemdot.ApplyOptions.Shifts for ds, or nil without the flags.
func (f *shiftFlags) shifts(ds dataset.Dataset) ([]float64, error) {
	switch {
	case f.constant != "" && f.file != "":
		return nil, fmt.Errorf("--shift and --shifts are both given: give one (a constant shift, or a file of one per scan position)")
	case f.constant != "":
		return parseFloats("--shift", f.constant, "DY,DX in pixels, e.g. 1.5,-2")
	case f.file != "":
		scan, _ := dataset.ScanPositions(ds)
		return stemdot.LoadShifts(f.file, scan)
	}
	return nil, nil
}

func newDescanCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "descan",
		Short: "Descan compensation: fit the shift of the pattern across the scan",
	}
	cmd.AddCommand(newDescanFitCmd())
	return cmd
}

func newDescanFitCmd() *cobra.Command {
	var df datasetFlags
	var pf planFlags
	var reference, out, com string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fit FILE [--reference REF_FILE] --out SHIFTS.npy",
		Short: "Fit a plane to the centre-of-mass shift map and write the per-position mask shifts",
		Long: `descan fit measures the centre-of-mass shift of every frame with the com masks
(--com, default com: about (sig_x/2, sig_y/2) over the whole frame; com:auto,R weighs
only the direct beam, within R pixels of its centre in the sum frame), of FILE or, with
--reference, of a reference scan (e.g. taken in vacuum with the same scan settings and
nav shape), fits a plane to each component by least squares, leaving out frames without
counts,

  dy = a + b·y + c·x,   dx = a + b·y + c·x   (y, x: scan row and column from 0; pixels),

prints the coefficients (--json: as JSON) and writes the plane at every scan position of
FILE as NPY of shape nav_shape + (2,), float64, y then x (with --roi or --frames, of the
whole scan; the positions not read are left out of the fit): the shifts that
stemdot apply --shifts takes to move the masks with the pattern. The dataset flags apply
to FILE and REF_FILE alike.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out SHIFTS.npy is required")
			}
			inputs := df.inputs(args[0])
			if reference != "" {
				inputs = append(inputs, df.inputs(reference)...)
			}
			if err := handleInterrupts(func() error { return frontend.CheckShiftsFile(out, inputs...) }); err != nil {
				return err
			}
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			nav, _ := dataset.ScanPositions(ds) // the whole scan, also of --roi or --frames
			fitted := ds
			if reference != "" {
				ref, err := df.open(cmd, reference)
				if err != nil {
					return err
				}
				defer ref.Close()
				if refNav, _ := dataset.ScanPositions(ref); !slices.Equal(refNav, nav) {
					return fmt.Errorf("--reference %s has nav shape %s, %s has %s: the plane is fitted in scan positions, give a reference scan of the same nav shape (--nav-shape)",
						reference, shapeString(refNav), args[0], shapeString(nav))
				}
				fitted = ref
			}
			var plane descanPlane
			err = handleInterrupts(func() error {
				p, err := stemdot.DescanFit(cmd.Context(), fitted, com, pf.Plan)
				if err != nil {
					return err
				}
				plane = descanPlane{NavShape: nav, Used: p.Used, RMS: p.RMS}
				plane.DY = coeffs{p.Y.A, p.Y.B, p.Y.C}
				plane.DX = coeffs{p.X.A, p.X.B, p.X.C}
				shifts, err := p.Eval(nav)
				if err != nil {
					return err
				}
				return stemdot.SaveShifts(out, nav, shifts, inputs...)
			})
			if err != nil {
				return err
			}
			for _, w := range stemdot.RunWarnings(fitted, dataset.RunNotes(fitted, 0, fitted.NumFrames())) {
				warn(cmd, w)
			}
			if asJSON {
				b, err := json.Marshal(plane)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dy = %.6g %+.6g·y %+.6g·x px (rms residual %.3g px)\n", plane.DY.A, plane.DY.B, plane.DY.C, plane.RMS[0])
			fmt.Fprintf(cmd.OutOrStdout(), "dx = %.6g %+.6g·y %+.6g·x px (rms residual %.3g px)\n", plane.DX.A, plane.DX.B, plane.DX.C, plane.RMS[1])
			fmt.Fprintf(cmd.OutOrStdout(), "fitted %d scan positions; shifts of nav shape %s → %s\n", plane.Used, shapeString(nav), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&reference, "reference", "", "fit the centre-of-mass shifts of this reference scan (same nav shape) instead of FILE's")
	f.StringVar(&out, "out", "", "shifts file, ending in .npy: NPY of shape nav_shape + (2,), float64, y first, then x, in pixels")
	f.StringVar(&com, "com", "com", "the com mask spec whose shifts are fitted: com, com:CX,CY[,R] (R: only the pixels within R of (CX, CY), e.g. the direct beam) or com:auto[,R] (about the direct beam's centre in the sum frame)")
	f.BoolVar(&asJSON, "json", false, `print the fit as JSON: {"dy": {"a": .., "b": .., "c": ..}, "dx": {...}, "nav_shape": [..], "used": N, "rms": [y, x]}`)
	df.register(f)
	pf.register(f, false)
	return cmd
}

// descanPlane is descan fit's JSON output.
type descanPlane struct {
	DY       coeffs     `json:"dy"`
	DX       coeffs     `json:"dx"`
	NavShape []int      `json:"nav_shape"`
	Used     int        `json:"used"`
	RMS      [2]float64 `json:"rms"`
}

type coeffs struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
	C float64 `json:"c"`
}
