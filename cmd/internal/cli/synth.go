package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/synth"
)

func newSynthCmd() *cobra.Command {
	var out, nav, sig, dtype, format string
	var seed uint64
	var opt synth.Options
	// The model parameters: a flag given sets its Options field, 0 included (a flag
	// left out takes the model's default).
	var discRadius, discCounts, shift, ringRadius, ringCounts, background float64
	params := []struct {
		flag  string
		value *float64
		field **float64
	}{
		{"disc-radius", &discRadius, &opt.DiscRadius}, {"disc-counts", &discCounts, &opt.DiscCounts},
		{"shift", &shift, &opt.Shift}, {"ring-radius", &ringRadius, &opt.RingRadius},
		{"ring-counts", &ringCounts, &opt.RingCounts}, {"background", &background, &opt.Background},
	}
	cmd := &cobra.Command{
		Use:   "synth --out FILE",
		Short: "Write a synthetic 4D-STEM dataset (moving bright-field disc, ring, Poisson noise)",
		Long: `synth writes a realistic synthetic 4D-STEM scan: a bright-field disc whose position and
intensity vary smoothly across the scan, a diffuse ring whose intensity varies too, a weak
background, and Poisson noise. The format follows --format or the extension of --out
(.raw/.bin, .npy, .mib; MIB files get a .hdr sidecar with the scan shape).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out FILE is required")
			}
			switch base := filepath.Base(out); {
			case strings.HasSuffix(out, "/") || base == "." || base == "..":
				return fmt.Errorf("--out %s names a directory: give a file name, e.g. %s", out, filepath.Join(out, "scan.npy"))
			case base == filepath.Ext(base):
				return fmt.Errorf("--out %s: the file name is only the extension (a hidden file named %s): give a name, e.g. %s", out, base, filepath.Join(filepath.Dir(out), "scan"+base))
			}
			var err error
			if opt.NavShape, err = frontend.ParseShape(nav, 0); err != nil {
				return fmt.Errorf("--nav-shape %q: %w", nav, err)
			}
			s, err := frontend.ParseShape(sig, 2)
			if err != nil {
				return fmt.Errorf("--sig-shape %q: %w", sig, err)
			}
			opt.SigShape = [2]int{s[0], s[1]}
			if opt.DType, err = dataset.ParseDType(dtype); err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			opt.Format, opt.Seed = format, seed
			for _, p := range params {
				if cmd.Flags().Changed(p.flag) {
					*p.field = p.value
				}
			}
			ctx := cmd.Context()
			t0 := time.Now()
			var saturated int64
			err = handleInterrupts(func() (err error) {
				saturated, err = synth.Write(ctx, out, opt)
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted: no file written")
				}
				return err
			}
			frames := 1
			for _, n := range opt.NavShape {
				frames *= n
			}
			bytes := float64(frames*s[0]*s[1]*opt.DType.Size()) / 1e9
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: nav_shape %s, sig_shape %s, %s, %d frames, %.3f GB in %.2f s\n",
				out, shapeString(opt.NavShape), shapeString(s), opt.DType, frames, bytes, time.Since(t0).Seconds())
			if saturated > 0 {
				warn(cmd, fmt.Sprintf("%d pixel values (%.2g%%) exceeded %s's range and were clipped to its largest value, as a saturated detector would; lower --disc-counts or choose a larger --dtype",
					saturated, 100*float64(saturated)/(float64(frames)*float64(s[0]*s[1])), opt.DType))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output file (.raw, .bin, .npy or .mib)")
	f.StringVar(&nav, "nav-shape", "64,64", "scan shape Y,X (y first: rows, then columns), N, or Z,Y,X for a scan of planes (raw and NPY; each plane the same scan, with noise of its own)")
	f.StringVar(&sig, "sig-shape", "128,128", "frame shape Y,X in pixels, y first")
	f.StringVar(&dtype, "dtype", "uint16", "pixel dtype (uint8, uint16, uint32 for MIB; also float32 etc. for raw/NPY)")
	f.StringVar(&format, "format", "", "raw, npy or mib (default: from the extension of --out)")
	f.Uint64Var(&seed, "seed", 1, "noise seed (the same seed gives the same file)")
	f.Float64Var(&discRadius, "disc-radius", 0, "bright-field disc radius in pixels (default min(sig)/8)")
	f.Float64Var(&discCounts, "disc-counts", 0, "disc counts per pixel (default 40; 0: no disc)")
	f.Float64Var(&shift, "shift", 0, "largest disc shift across the scan in pixels (default 3; 0: no descan)")
	f.Float64Var(&ringRadius, "ring-radius", 0, "ring radius in pixels (default 0.3·min(sig))")
	f.Float64Var(&ringCounts, "ring-counts", 0, "ring peak counts per pixel (default 4; 0: no ring)")
	f.Float64Var(&background, "background", 0, "background counts per pixel (default 0.5; 0: none)")
	return cmd
}
