package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/masks"
)

func newApplyCmd() *cobra.Command {
	var df datasetFlags
	var pf planFlags
	var maskSpecs []string
	var masksFiles []string
	var out, pngPrefix string
	var float64Result, quiet bool
	cmd := &cobra.Command{
		Use:   "apply FILE (--mask SPEC ... | --masks FILE.npy) --out RESULT.npy",
		Short: "Apply virtual detectors (masks) to every frame and write the images as NPY (and PNG)",
		Long: `apply computes, for every frame f and every mask m, out[f, m] = Σ mask[m]·frame_f (the
mask-dot product of LiberTEM's ApplyMasksUDF) on pinned CPU (and GPU) workers, and writes
the result as NPY of shape (nav_y, nav_x, n_masks), float32 (or float64 with --float64).

Mask specs, in pixel coordinates of the frame (x = column, y = row, pixel centres at
integer coordinates):
  disk:CX,CY,R         virtual bright field: pixels with (x-CX)²+(y-CY)² ≤ R²
  ring:CX,CY,RI,RO     annular dark field: RI² < (x-CX)²+(y-CY)² ≤ RO²
  point:X,Y            one pixel
  rect:X,Y,W,H         W×H pixels from column X, row Y
  com[:CX,CY[,R]]      centre of mass: three masks, the sum and the first moments
                       (y-CY) and (x-CX) (default centre: the frame centre)
--masks FILE.npy loads a stack of shape (sig_y, sig_x) or (n, sig_y, sig_x); the stacks
of --masks come first, then the --mask specs, in the order given.

The result file and PNGs are written under temporary names and renamed only when the
whole run succeeded: a failed or interrupted run leaves no output behind. An existing
--out or PNG file is replaced only if it is a writable regular file that is not an input
of the run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out RESULT.npy is required")
			}
			ds, err := df.open(args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			stack, err := loadMasks(masksFiles, maskSpecs, ds.SigShape())
			if err != nil {
				return err
			}
			inputs := append([]string{args[0], strings.TrimSuffix(args[0], filepath.Ext(args[0])) + ".hdr"}, masksFiles...)
			if err := checkOutput("--out", out, inputs...); err != nil {
				return err
			}
			if pngPrefix != "" {
				for m, name := range stack.Names {
					if err := checkOutput("--png", pngName(pngPrefix, m, name), append(inputs, out)...); err != nil {
						return err
					}
				}
			}
			plan, _, err := pf.plan(cmd, ds)
			if err != nil {
				return err
			}
			for _, w := range plan.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "stemdot: warning: %s\n", w)
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			opt := engine.Options{Float64: float64Result}
			if !quiet && term.IsTerminal(int(os.Stderr.Fd())) {
				bar := progressbar.NewOptions(ds.NumFrames(),
					progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("frames"),
					progressbar.OptionShowCount(),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish())
				opt.Progress = func(done, total int) { bar.Set(done) }
			}
			res, err := engine.ApplyMasks(ctx, ds, stack, plan, opt)
			if err != nil {
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return fmt.Errorf("interrupted: no result written")
				}
				return err
			}
			if err := writeResult(out, pngPrefix, res, stack.Names); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "%s → %s\n", res.Stats.Summary(), out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&maskSpecs, "mask", nil, "a mask spec (repeatable): disk:CX,CY,R, ring:CX,CY,RI,RO, point:X,Y, rect:X,Y,W,H, com[:CX,CY[,R]]")
	f.StringArrayVar(&masksFiles, "masks", nil, "an NPY mask stack of shape (sig_y, sig_x) or (n, sig_y, sig_x) (repeatable)")
	f.StringVar(&out, "out", "", "result file: NPY of shape (nav_y, nav_x, n_masks)")
	f.StringVar(&pngPrefix, "png", "", "also write one auto-scaled greyscale PNG per mask, PREFIX_<m>_<name>.png")
	f.BoolVar(&float64Result, "float64", false, "compute and write the result in float64 (default float32)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar and no summary")
	df.register(f)
	pf.register(f, false)
	return cmd
}

// loadMasks builds the mask stack: the NPY files' masks, then the --mask specs, in order.
func loadMasks(files, specs []string, sig [2]int) (*masks.Stack, error) {
	var parts []*masks.Stack
	for _, file := range files {
		s, err := masks.LoadNPY(file)
		if err != nil {
			return nil, err
		}
		if err := s.Validate(sig); err != nil {
			return nil, fmt.Errorf("--masks %s: %w", file, err)
		}
		parts = append(parts, s)
	}
	for _, spec := range specs {
		s, err := masks.Parse(spec, sig)
		if err != nil {
			return nil, fmt.Errorf("--mask %s: %w", spec, err)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("no masks: give --mask SPEC (repeatable) or --masks FILE.npy")
	}
	stack, err := masks.Concat(parts...)
	if err != nil {
		return nil, err
	}
	if err := stack.Validate(sig); err != nil {
		return nil, err
	}
	return stack, nil
}

// writeResult writes the NPY result of shape nav_shape + (n_masks,) and the PNGs, all or
// nothing.
func writeResult(out, pngPrefix string, res *engine.Result, names []string) error {
	var pngs []pendingFile
	if pngPrefix != "" {
		value := func(f, m int) float64 {
			if res.F64 != nil {
				return res.F64[f*res.NMasks+m]
			}
			return float64(res.F32[f*res.NMasks+m])
		}
		var err error
		if pngs, err = writeVirtualImagePNGs(pngPrefix, res.NavShape, names, value); err != nil {
			return err
		}
	}
	shape := append(append([]int{}, res.NavShape...), res.NMasks)
	var data any = res.F32
	if res.F64 != nil {
		data = res.F64
	}
	if err := dataset.WriteArrayNPY(out, shape, data); err != nil {
		for _, p := range pngs {
			p.discard()
		}
		return err
	}
	for _, p := range pngs {
		if err := p.commit(); err != nil {
			return fmt.Errorf("writing %s: %w", p.final, err)
		}
	}
	return nil
}
