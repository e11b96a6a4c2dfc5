package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
)

// progressBar returns a progress callback drawing a bar on a terminal's stderr; nil when
// quiet or stderr is not a terminal.
func progressBar(quiet bool, total int) func(done, total int) {
	if quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("frames"),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
	return func(done, total int) { bar.Set(done) }
}

// newSumCmd is the sum command, computed on backend b.
func newSumCmd(b Backend) *cobra.Command {
	var df datasetFlags
	var outputs stemdot.Outputs
	var quiet bool
	cmd := &cobra.Command{
		Use:   "sum FILE [--out SUM.npy] [--mean FILE.npy] [--max FILE.npy] [--std FILE.npy] [--png PREFIX]",
		Short: "Sum, mean, maximum and standard-deviation frames of the scan, in one pass",
		Long: `sum computes, in one pass over the frames read (every frame, or those of --roi and
--frames) on pinned CPU workers, the frames asked for:
  --out   the sum frame Σ_f frame_f (LiberTEM's SumUDF)
  --mean  the mean frame, sum / number of frames
  --max   the maximum frame, max_f frame_f per pixel
  --std   the standard-deviation frame sqrt(Σ_f (frame_f − mean)² / n): the population
          standard deviation (ddof 0), as LiberTEM's StdDevUDF and numpy's std
each written as NPY of shape (sig_y, sig_x), float64. Integer frames are summed exactly;
the std is computed from shifted sums per worker, merged by Chan et al.'s update (no
Σx² − (Σx)²/n cancellation). A NaN pixel in any frame makes that pixel NaN in every
frame written; ±Inf gives ±Inf sums, means and maxima and a NaN std, as numpy does.
Scan positions without a frame of the file (--sync-offset's, named in its warning) are
left out, as LiberTEM's StdDevUDF leaves them out: n counts the file's frames.

--png PREFIX writes one 8-bit greyscale PNG per frame computed, PREFIX_sum.png,
PREFIX_mean.png, PREFIX_max.png, PREFIX_std.png, from the minimum (black) to the maximum
(white), small frames scaled up by a whole factor to a short side of at least 256
pixels. --png alone computes the sum.

Reductions are bound by memory bandwidth: they run on CPU workers only. --gpus auto
plans CPU workers; GPU workers asked for by count or list are refused. Outputs are
written all or nothing, as apply writes them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := handleInterrupts(func() error { return outputs.CheckReduction(df.inputs(args[0])...) }); err != nil {
				return err
			}
			if err := b.Check(true); err != nil {
				return err
			}
			ds, opened, err := df.openOn(cmd, b, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			opt := stemdot.ReduceOptionsFor(outputs)
			opt.Progress = progressBar(quiet, ds.NumFrames())
			ctx := cmd.Context()
			var red *stemdot.Reduction
			err = handleInterrupts(func() (err error) {
				if red, err = b.Reduce(ctx, ds, opt); err != nil {
					return err
				}
				return stemdot.SaveReduction(red, outputs)
			})
			if err != nil {
				return err
			}
			for _, w := range red.Warnings[len(opened):] {
				warn(cmd, w)
			}
			if !quiet {
				var wrote []string
				for _, f := range []string{outputs.NPY, outputs.Mean, outputs.Max, outputs.Std} {
					if f != "" {
						wrote = append(wrote, f)
					}
				}
				if outputs.PNGPrefix != "" {
					wrote = append(wrote, outputs.PNGPrefix+"_*.png")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s → %s\n", red.Stats.Summary(), strings.Join(wrote, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&outputs.NPY, "out", "", "the sum frame, NPY of shape (sig_y, sig_x), float64")
	f.StringVar(&outputs.Mean, "mean", "", "also the mean frame, NPY of shape (sig_y, sig_x), float64")
	f.StringVar(&outputs.Max, "max", "", "also the maximum frame, NPY of shape (sig_y, sig_x), float64")
	f.StringVar(&outputs.Std, "std", "", "also the standard-deviation frame (ddof 0), NPY of shape (sig_y, sig_x), float64")
	f.StringVar(&outputs.PNGPrefix, "png", "", "also one greyscale PNG per frame computed, PREFIX_sum.png, PREFIX_mean.png, PREFIX_max.png, PREFIX_std.png")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar and no summary")
	df.register(f)
	b.Flags(f, true)
	return cmd
}

func newPickCmd() *cobra.Command {
	var df datasetFlags
	var at []string
	var out, pngPrefix string
	cmd := &cobra.Command{
		Use:   "pick FILE --at Y,X [--at Y,X ...] --out FRAMES.npy [--png PREFIX]",
		Short: "Write the frames at given scan positions (LiberTEM's PickUDF)",
		Long: `pick writes the frames at the scan positions given by --at (repeatable; Y,X for a 2-D
nav shape, N for a 1-D one, Z,Y,X for a 3-D one, each from 0 to its size − 1) as NPY of
shape (k, sig_y, sig_x) in the file's dtype, in the order given; --png PREFIX also writes
one greyscale PNG per frame, PREFIX_<k>_y<Y>_x<X>.png (PREFIX_<k>_n<N>.png for a 1-D nav
shape, PREFIX_<k>_z<Z>_y<Y>_x<X>.png for a 3-D one). Outputs are written all or nothing,
as apply writes them. The positions are those of the dataset as opened: with --roi (or
--frames), the selected frames as one row, --at N the N-th of them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(at) == 0 {
				return fmt.Errorf("--at Y,X is required: the scan position of a frame to pick")
			}
			if out == "" && pngPrefix == "" {
				return fmt.Errorf("--out FRAMES.npy (or --png PREFIX) is required")
			}
			positions := make([][]int, len(at))
			for i, s := range at {
				p, err := parsePosition(s)
				if err != nil {
					return err
				}
				positions[i] = p
			}
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			return pick(cmd, ds, positions, out, pngPrefix, df.inputs(args[0]))
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&at, "at", nil, "a scan position Y,X, y first (row, then column; N for a 1-D nav shape, Z,Y,X for a 3-D one), repeatable")
	f.StringVar(&out, "out", "", "the frames, NPY of shape (k, sig_y, sig_x) in the file's dtype")
	f.StringVar(&pngPrefix, "png", "", "also one greyscale PNG per frame, PREFIX_<k>_y<Y>_x<X>.png (PREFIX_<k>_z<Z>_y<Y>_x<X>.png for a 3-D nav shape)")
	df.register(f)
	return cmd
}

// pick reads the frames at positions and writes them, in one step: an interrupt stops
// the reads and leaves nothing behind, or lets the writes finish.
func pick(cmd *cobra.Command, ds dataset.Dataset, positions [][]int, out, pngPrefix string, inputs []string) error {
	var fr *stemdot.Frames
	err := handleInterrupts(func() (err error) {
		if fr, err = stemdot.Pick(cmd.Context(), ds, positions); err != nil {
			return err
		}
		return stemdot.SaveFrames(fr, ds.NavShape(), out, pngPrefix, inputs...)
	})
	if err != nil {
		return err
	}
	for _, w := range fr.Warnings {
		warn(cmd, w)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d frame%s of %s %s → %s\n", len(fr.Indices), map[bool]string{true: "s"}[len(fr.Indices) != 1],
		shapeString(fr.SigShape[:]), fr.DType, strings.TrimSpace(out+" "+pngPrefix))
	return nil
}

// parsePosition parses a scan position "Y,X", "N" or "Z,Y,X".
func parsePosition(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	p := make([]int, len(parts))
	for i, part := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || len(parts) > dataset.MaxNavDims {
			return nil, fmt.Errorf("--at %q: want a scan position Y,X (or N for a 1-D nav shape, Z,Y,X for a 3-D one) of whole numbers", s)
		}
		p[i] = v
	}
	return p, nil
}
