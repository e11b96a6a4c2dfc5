package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
)

func newCOMCmd() *cobra.Command {
	var outputs stemdot.COMOutputs
	var opt stemdot.COMOptions
	var quiet bool
	cmd := &cobra.Command{
		Use:   "com SHIFTS.npy [--magnitude F.npy] [--divergence F.npy] [--curl F.npy] [--icom F.npy] [--field F.npy] [--png PREFIX]",
		Short: "CoM products from the shift maps of apply --com-shifts: field magnitude, divergence, curl and iCoM (phase)",
		Long: `com reads centre-of-mass shift maps as apply --com-shifts writes them (NPY of shape
(nav_y, nav_x, 2), y then x, in pixels; float64 or float32) and writes what DPC users
read from them, each an NPY of shape (nav_y, nav_x), float64:

  --magnitude   √(y² + x²), in pixels
  --divergence  ∂y/∂row + ∂x/∂column, in pixels per scan step
  --curl        ∂y/∂column − ∂x/∂row, in pixels per scan step
  --icom        the integrated CoM: the phase φ whose gradient is the field, by
                Fourier integration, φ = F⁻¹[(k_x·F[x] + k_y·F[y]) / (2πi·|k|²)]
                with k in cycles per scan step and the k = 0 term 0 (zero mean), in
                pixels × scan steps, i.e. up to the scale of the shift calibration
                (Lazić et al., Ultramicroscopy 160 (2016) 265; Ishizuka et al.,
                Microscopy 66 (2017) 397). The scan is treated as periodic: a phase
                that is not gets artefacts at the edges.
  --field       the corrected shifts, (nav_y, nav_x, 2): y first, then x

The shifts are first flipped along y (--flip-y: y → −y) and then rotated by --rotation
degrees (y' = cos θ·y + sin θ·x, x' = −sin θ·y + cos θ·x; positive turns the vectors
clockwise), as LiberTEM's CoM analysis (scan_rotation, flip_y); derivatives are
numpy.gradient's (central differences, one-sided at the edges), as LiberTEM's
divergence and curl. Positions without a finite shift (NaN: frames summing to 0, positions outside an ROI) are
read as 0 by the iCoM, with a warning naming them; the magnitude, divergence and curl
are NaN there (as LiberTEM's outside its ROI), and the divergence and curl where their
differences use them.

--png PREFIX writes PREFIX_magnitude.png, PREFIX_divergence.png, PREFIX_curl.png and
PREFIX_icom.png, greyscale from the minimum (black) to the maximum (white), scaled up
as apply's PNGs. All outputs are written all or nothing, as apply's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := handleInterrupts(func() error { return outputs.Check(args[0]) }); err != nil {
				return err
			}
			shifts, nav, err := stemdot.ReadCOMShifts(args[0])
			if err != nil {
				return err
			}
			p, err := stemdot.NewCOMProducts(shifts, nav, opt)
			if err != nil {
				return err
			}
			for _, w := range p.Warnings {
				warn(cmd, w)
			}
			if err := handleInterrupts(func() error { return stemdot.SaveCOMProducts(p, outputs) }); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "CoM products of %s, nav_shape %s\n", args[0], shapeString(nav))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&outputs.Magnitude, "magnitude", "", "write the field magnitude √(y² + x²), NPY (nav_y, nav_x)")
	f.StringVar(&outputs.Divergence, "divergence", "", "write the divergence ∂y/∂row + ∂x/∂column, NPY (nav_y, nav_x)")
	f.StringVar(&outputs.Curl, "curl", "", "write the curl ∂y/∂column − ∂x/∂row, NPY (nav_y, nav_x)")
	f.StringVar(&outputs.ICoM, "icom", "", "write the integrated CoM (phase by Fourier integration, zero mean), NPY (nav_y, nav_x)")
	f.StringVar(&outputs.Field, "field", "", "write the shifts after --flip-y and --rotation, NPY (nav_y, nav_x, 2): y first, then x")
	f.StringVar(&outputs.PNGPrefix, "png", "", "also write PREFIX_magnitude.png, PREFIX_divergence.png, PREFIX_curl.png and PREFIX_icom.png")
	f.Float64Var(&opt.Rotation, "rotation", 0, "scan rotation in degrees, applied to the shifts after --flip-y (positive: clockwise), as LiberTEM's scan_rotation")
	f.BoolVar(&opt.FlipY, "flip-y", false, "flip the detector's y axis (y → −y) first, as LiberTEM's flip_y")
	f.BoolVarP(&quiet, "quiet", "q", false, "no summary")
	return cmd
}
