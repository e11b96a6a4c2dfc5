package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stemdot/stemdot"
)

func newApplyCmd() *cobra.Command {
	var df datasetFlags
	var pf planFlags
	var maskSpecs, masksFiles []string
	var outputs stemdot.Outputs
	var float64Result, quiet, perWorker bool
	var sf shiftFlags
	cmd := &cobra.Command{
		Use:   "apply FILE (--mask SPEC ... | --masks FILE.npy) --out RESULT.npy",
		Short: "Apply virtual detectors (masks) to every frame and write the images as NPY (and PNG)",
		Long: `apply computes, for every frame f and every mask m, out[f, m] = Σ mask[m]·frame_f (the
mask-dot product of LiberTEM's ApplyMasksUDF) on pinned CPU (and GPU) workers, and writes
the result as NPY of shape (nav_y, nav_x, n_masks), float32 (or float64 with --float64);
a 3-D input of n frames, (n, sig_y, sig_x), has nav shape (n,) and gives (n, n_masks).

Mask specs, in pixel coordinates of the frame (x = column, y = row, pixel centres at
integer coordinates):
  disk:CX,CY,R         virtual bright field: pixels with (x-CX)²+(y-CY)² ≤ R²
  ring:CX,CY,RI,RO     annular dark field: RI² < (x-CX)²+(y-CY)² ≤ RO²
  point:X,Y            one pixel
  rect:X,Y,W,H         W×H pixels from column X, row Y
  com[:CX,CY[,R]]      centre of mass: three masks, the sum and the first moments
                       (y-CY) and (x-CX), within radius R (default: the whole frame).
                       Default reference point: (CX, CY) = (sig_x/2, sig_y/2), integer
                       division, e.g. (128, 128) on 256×256 frames, as LiberTEM's CoM
                       analysis, so that shifts agree with LiberTEM's (the geometric
                       centre of the pixel grid would be 127.5).
A disk, ring, rect or com disk partly outside the frame is clipped to it; one that
selects no pixel of the frame is an error.
--masks FILE.npy loads a stack of shape (sig_y, sig_x) or (n, sig_y, sig_x); the stacks
of --masks come first, then the --mask specs, in the order given.

--com-shifts FILE.npy also writes the centre-of-mass shift maps in pixels, shape
(nav_y, nav_x, 2), float64: [..., 0] = y moment / sum, [..., 1] = x moment / sum of the
first com masks, as LiberTEM's CoM analysis gives them (NaN where a frame sums to 0);
with --png these com masks are drawn as PREFIX_com_shift_y.png and
PREFIX_com_shift_x.png instead of their three raw images (sum and moments).

--png PREFIX writes one 8-bit greyscale PNG per mask, PREFIX_<m>_<name>.png, of shape
(nav_y, nav_x) (a 1-D nav shape as one row), mapped from the minimum (black) to the
maximum (white), NaN black. Small images are scaled up by a whole factor, each scan
position a square block of pixels, until the short side has at least 256 pixels, the
long side at most 4096 (a 64×64 scan gives 256×256 pixels); never down.

--shift DY,DX or --shifts FILE.npy move the masks with the diffraction pattern (descan
compensation): the masks of each frame are applied moved by its shift, out[f, m] =
Σ mask_m(y − dy, x − dx)·frame_f(y, x), mask pixels moved outside the frame dropped, as
LiberTEM's ApplyMasksUDF(shifts=...) (positive dy: down, dx: right); integer shifts
exactly, sub-pixel ones by bilinear interpolation of the mask (LiberTEM truncates them).
--shifts holds one shift per scan position, shape nav_shape + (2,), y then x (stemdot
descan fit writes it).

The result files and PNGs are written under temporary names and renamed only when the
whole run succeeded: a failed or interrupted run leaves no output behind. An existing
output file is replaced only if it is a writable regular file that is not an input of
the run; an output path that is a symbolic link replaces the file it points to.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if outputs.NPY == "" {
				return fmt.Errorf("--out RESULT.npy is required")
			}
			ds, err := df.open(cmd, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			stack, err := stemdot.MasksFrom(ds.SigShape(), masksFiles, maskSpecs)
			if err != nil {
				return err
			}
			inputs := append([]string{args[0], strings.TrimSuffix(args[0], filepath.Ext(args[0])) + ".hdr"}, masksFiles...)
			if err := outputs.Check(stack.MaskNames(), inputs...); err != nil {
				return err
			}
			pl, err := pf.Planner()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			shifts, err := sf.shifts(ds)
			if err != nil {
				return err
			}
			opt := stemdot.ApplyOptions{Float64: float64Result, Shifts: shifts}
			if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
				bar := progressbar.NewOptions(ds.NumFrames(),
					progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("frames"),
					progressbar.OptionShowCount(),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish())
				opt.Progress = func(done, total int) { bar.Set(done) }
			}
			p, err := pl.Plan(ds, stack)
			if err != nil {
				return err
			}
			for _, w := range p.Warnings {
				warn(cmd, w)
			}
			var res *stemdot.Result
			err = handleInterrupts(func() (err error) {
				if res, err = pl.Apply(ctx, ds, stack, opt); err != nil {
					if errors.Is(err, context.Canceled) && ctx.Err() != nil {
						return fmt.Errorf("interrupted: no result written")
					}
					return err
				}
				return stemdot.Save(res, outputs) // all or nothing: not cut short
			})
			if err != nil {
				return err
			}
			if w := res.NonFiniteWarning(); w != "" {
				warn(cmd, w)
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "%s → %s\n", res.Stats.Summary(), outputs.NPY)
				if perWorker {
					for _, w := range res.Stats.PerWorker {
						fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", w)
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	registerMaskFlags(f, &maskSpecs, &masksFiles)
	f.StringVar(&outputs.NPY, "out", "", "result file, ending in .npy: NPY of shape (nav_y, nav_x, n_masks)")
	f.StringVar(&outputs.PNGPrefix, "png", "", "also write one greyscale PNG per mask, PREFIX_<m>_<name>.png, small images scaled up by a whole factor to a short side of at least 256 pixels (long side at most 4096)")
	f.StringVar(&outputs.COMShifts, "com-shifts", "", "also write the centre-of-mass shift maps in pixels (needs --mask com), NPY of shape (nav_y, nav_x, 2): y, x; with --png drawn instead of the com masks")
	f.BoolVar(&float64Result, "float64", false, "compute and write the result in float64 (default float32); mask weights given in float64 (--masks files, com about a centre between pixels) then count at float64 precision")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar and no summary")
	f.BoolVar(&perWorker, "workers", false, "after the summary, one line per worker: frames, claims, GB/s while busy, start-up time and, for GPU workers, the feed (mapped: DMA from the file's mapping; staged: CPU copies)")
	sf.register(f)
	df.register(f)
	pf.register(f, false)
	return cmd
}
