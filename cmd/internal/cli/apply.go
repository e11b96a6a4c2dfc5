package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// newApplyCmd is the apply command, computed on backend b.
func newApplyCmd(b Backend) *cobra.Command {
	var df datasetFlags
	var maskSpecs, masksFiles []string
	var outputs stemdot.Outputs
	var float64Result, quiet, perWorker, roiCompact bool
	var centreText string
	var sf shiftFlags
	cmd := &cobra.Command{
		Use:   "apply FILE (--mask SPEC ... | --masks FILE.npy) --out RESULT.npy|RESULT.h5",
		Short: "Apply virtual detectors (masks) to every frame and write the images as NPY or HDF5 (and PNG)",
		Long: `apply computes, for every frame f and every mask m, out[f, m] = Σ mask[m]·frame_f (the
mask-dot product of LiberTEM's ApplyMasksUDF) on pinned CPU (and GPU) workers, and writes
the result as NPY of shape nav_shape + (n_masks,), float32 (or float64 with --float64):
(nav_y, nav_x, n_masks) for a scan; a 3-D input of n frames, (n, sig_y, sig_x), has nav
shape (n,) and gives (n, n_masks); a 5-D one, a scan of planes (nav_z, nav_y, nav_x,
sig_y, sig_x), gives (nav_z, nav_y, nav_x, n_masks). The nav shape is the file's (an
array's nav axes as stored, 1 to 3), or --nav-shape N, Y,X or Z,Y,X.

Mask specs, in pixel coordinates of the frame (x = column, y = row, pixel centres at
integer coordinates):
  disk:CX,CY,R         virtual bright field: pixels with (x-CX)²+(y-CY)² ≤ R²
  ring:CX,CY,RI,RO     annular dark field: RI² < (x-CX)²+(y-CY)² ≤ RO², 0 ≤ RI < RO
  point:X,Y            one pixel
  rect:X,Y,W,H         W×H pixels from column X, row Y
  com[:CX,CY[,R]]      centre of mass: three masks, the sum and the first moments
                       (y-CY) and (x-CX), within radius R (default: the whole frame).
                       Default reference point: (CX, CY) = (sig_x/2, sig_y/2), integer
                       division, e.g. (128, 128) on 256×256 frames, as LiberTEM's CoM
                       analysis, so that shifts agree with LiberTEM's (the geometric
                       centre of the pixel grid would be 127.5).
  disk:auto[,R]        the auto specs: about the direct beam's centre (and radius R,
  ring:auto,RI,RO      default its radius), found in the sum frame of the frames read
  com:auto[,R]         (one extra pass, on CPU workers; stemdot info --centre prints it),
                       or given with --centre X,Y,R
A disk, ring, rect or com disk partly outside the frame is clipped to it; one that
selects no pixel of the frame is an error.
--masks FILE.npy loads a stack of shape (sig_y, sig_x) or (n, sig_y, sig_x); the stacks
of --masks come first, then the --mask specs, in the order given.

--com-shifts FILE.npy also writes the centre-of-mass shift maps in pixels, shape
nav_shape + (2,), float64: [..., 0] = y moment / sum, [..., 1] = x moment / sum of the
first com masks, as LiberTEM's CoM analysis gives them (NaN where a frame sums to 0);
with --png these com masks are drawn as PREFIX_com_shift_y.png and
PREFIX_com_shift_x.png instead of their three raw images (sum and moments).

Beside RESULT.npy, RESULT.json (the same name with .json) names the columns: a JSON
object with "format": "stemdot-result", "format_version": 1, "stemdot_version",
"shape", "dtype", "nav_shape", "sig_shape", "masks" (per column in order: "column",
"name", "spec" or "file", and "index" within that spec or file), "dataset" ("path",
"format", "options": the dataset flags given, by option key, values as given), "plan"
("cpu_workers", "gpu_workers") and, with --com-shifts, "com_shifts" ("file", relative
to RESULT.json's directory, "shape", "dtype", "components": ["y", "x"], "columns" of
com_sum, com_y, com_x), and "calibration" when the file states its scan step, detector
pixel or camera length ({"nav": [{"name", "scale", "offset", "units"} per nav axis],
"sig": [ky, kx], "camera_length_m"}, each key absent when unknown; stemdot info prints
them). python -m stemdot.dask writes the same; Python's stemdot.load_result reads both.

--out RESULT.h5 (or .hdf5, .hspy) writes the result as HDF5 instead, in HyperSpy's HSPY
layout: /Experiments/stemdot/data of shape (n_masks,) + nav_shape (image m is data[m]),
its attributes mask_names and mask_specs; axes axis-0 (the masks) and axis-1... (the
nav axes, calibrated where the file says); original_metadata holds stemdot_version,
source_file, source_format, command, date and result_json (the JSON above). h5py reads
it as one array; hs.load reads it as a Signal2D of the masks' images (a .h5 name needs
reader="hspy").

--roi rect:X,Y,W,H (of every plane of a nav shape Z,Y,X) or --roi ROI.npy (booleans of
the scan's nav shape) reads and computes only the scan positions selected; the result
keeps the nav shape, NaN at the positions left out (as the COM shift maps and the PNGs,
where NaN is black). --roi-compact writes
only the selected positions instead, shape (n_selected, n_masks), and beside RESULT.npy
RESULT_positions.npy: their flat indices in C order over the nav shape, int64
(numpy.unravel_index(positions, nav_shape) gives rows and columns).

--png PREFIX writes one 8-bit greyscale PNG per mask, PREFIX_<m>_<name>.png, of shape
(nav_y, nav_x) (a 1-D nav shape as one row; a 3-D one is refused, naming the
--nav-shape that reads it as a 2-D scan), mapped from the minimum (black) to the
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


The result files, the sidecar and PNGs are written under temporary names and renamed
only when the whole run succeeded: a failed or interrupted run leaves no output behind. An existing
output file is replaced only if it is a writable regular file that is not an input of
the run; an output path that is a symbolic link replaces the file it points to.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if outputs.NPY == "" {
				return fmt.Errorf("--out RESULT.npy is required")
			}
			out := outputs.NPY
			if roiCompact {
				if !cmd.Flags().Changed("roi") {
					return fmt.Errorf("--roi-compact needs --roi: without a region of interest the result holds every scan position")
				}
				outputs.Positions = strings.TrimSuffix(outputs.NPY, filepath.Ext(outputs.NPY)) + "_positions.npy"
			}
			hdf5Out(&outputs)
			if ext := filepath.Ext(outputs.NPY); outputs.NPY != "" && !strings.EqualFold(ext, ".npy") {
				return fmt.Errorf("--out %s: results are written as NPY or HDF5: give a path ending in .npy, or in .h5, .hdf5 or .hspy", outputs.NPY)
			}
			ds, _, err := df.openOn(cmd, b, args[0])
			if err != nil {
				return err
			}
			defer ds.Close()
			if err := b.Check(false); err != nil {
				return err
			}
			ctx := cmd.Context()
			shifts, err := sf.shifts(ds)
			if err != nil {
				return err
			}
			centre, err := autoCentre(cmd, b, ds, maskSpecs, centreText, shifts)
			if err != nil {
				return err
			}
			var c *masks.Centre
			if centre != nil {
				c = &masks.Centre{X: centre.X, Y: centre.Y, R: centre.R}
			}
			stack, maskInfo, err := stemdot.MasksInfo(ds.SigShape(), c, masksFiles, maskSpecs)
			if err != nil {
				return err
			}
			inputs := append(df.inputs(args[0]), masksFiles...)
			if sf.file != "" {
				inputs = append(inputs, sf.file)
			}
			// Checked in a step: an interrupt never leaves a probe file of the check behind.
			if err := handleInterrupts(func() error { return outputs.Check(stack.MaskNames(), inputs...) }); err != nil {
				return err
			}
			resultNav := ds.NavShape() // an ROI's result is placed in the scan unless compact
			if dataset.IsROI(ds) && !roiCompact {
				resultNav, _ = dataset.ScanPositions(ds)
			}
			if err := outputs.CheckNavShape(resultNav); err != nil {
				return err
			}
			opt := stemdot.ApplyOptions{Float64: float64Result, ROICompact: roiCompact, Shifts: shifts}
			opt.Progress = progressBar(quiet, ds.NumFrames())
			var res *stemdot.Result
			err = handleInterrupts(func() (err error) {
				if res, err = b.Apply(ctx, ds, stack, opt, func(w string) { warn(cmd, w) }); err != nil {
					return err
				}
				res.Info.SetMasks(maskInfo)
				res.Info.SetOptions(df.given())
				res.Info.Centre = centre
				if sf.file != "" {
					res.Info.Shifts.File, _ = filepath.Abs(sf.file)
				}
				return stemdot.Save(res, outputs) // all or nothing: not cut short
			})
			if err != nil {
				return err
			}
			for _, w := range stemdot.RunWarnings(ds, res.RunNotes) {
				warn(cmd, w)
			}
			if w := res.NonFiniteWarning(); w != "" {
				warn(cmd, w)
			}
			if !quiet {
				fmt.Fprintf(cmd.OutOrStdout(), "%s → %s\n", res.Stats.Summary(), out)
				if perWorker {
					for _, w := range b.Workers(res) {
						fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", w)
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	registerMaskFlags(f, &maskSpecs, &masksFiles)
	f.StringVar(&outputs.NPY, "out", "", "result file, ending in .npy: NPY of shape nav_shape + (n_masks,), with its JSON sidecar (same name, .json) naming the columns; ending in .h5, .hdf5 or .hspy: HDF5 in HyperSpy's layout (hs.load reads it), data of shape (n_masks,) + nav_shape at /Experiments/stemdot/data with the masks' names, the calibration and the provenance")
	f.StringVar(&outputs.PNGPrefix, "png", "", "also write one greyscale PNG per mask, PREFIX_<m>_<name>.png, small images scaled up by a whole factor to a short side of at least 256 pixels (long side at most 4096)")
	f.StringVar(&outputs.COMShifts, "com-shifts", "", "also write the centre-of-mass shift maps in pixels (needs --mask com), NPY of shape nav_shape + (2,): y first, then x; with --png drawn instead of the com masks")
	f.BoolVar(&float64Result, "float64", false, "compute and write the result in float64 (default float32); mask weights given in float64 (--masks files, com about a centre between pixels) then count at float64 precision")
	f.StringVar(&centreText, "centre", "", "the direct beam's centre X,Y (x first: column, then row) and radius R in pixels for the auto specs (disk:auto, ...), e.g. from stemdot info --centre (default: found in the sum frame)")
	f.BoolVar(&roiCompact, "roi-compact", false, "with --roi: write only the selected scan positions, shape (n_selected, n_masks), and their flat indices as RESULT_positions.npy (default: the nav shape with NaN outside the ROI)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar and no summary")
	f.BoolVar(&perWorker, "workers", false, "after the summary, one line per worker: frames, claims, GB/s while busy, start-up time and, for GPU workers, the feed (mapped: DMA from the file's mapping; staged: CPU copies)")
	sf.register(f)
	df.register(f)
	b.Flags(f, false)
	return cmd
}

// autoCentre is the direct beam's centre for the auto specs among specs (nil when there
// are none): given as X,Y,R (--centre), else found in the sum frame of ds on pl's CPU
// workers of b (one pass, interruptible; with shifts, of the frames moved back by their
// shifts: the centre at zero shift, from which the masks move by each frame's shift),
// and said on stderr.
func autoCentre(cmd *cobra.Command, b Backend, ds dataset.Dataset, specs []string, given string, shifts []float64) (*stemdot.CentreInfo, error) {
	if !slices.ContainsFunc(specs, masks.NeedsCentre) {
		if given != "" {
			return nil, fmt.Errorf("--centre %s: no auto spec (disk:auto, ring:auto,RI,RO, com:auto) to make about it", given)
		}
		return nil, nil
	}
	if given != "" {
		v, err := parseFloats("--centre", given, "X,Y,R in pixels, e.g. 128.3,127.9,21.5")
		if err == nil && v[2] <= 0 {
			err = fmt.Errorf("--centre %s: the radius R must be positive", given)
		}
		if err != nil {
			return nil, err
		}
		return &stemdot.CentreInfo{X: v[0], Y: v[1], R: v[2], Source: "given"}, nil
	}
	var c masks.Centre
	err := handleInterrupts(func() (err error) {
		c, err = b.Centre(cmd.Context(), ds, shifts)
		return err
	})
	if err != nil {
		if errors.Is(err, errInterrupted) {
			return nil, err
		}
		return nil, fmt.Errorf("the auto specs need the direct beam's centre: %w; give --centre X,Y,R (e.g. from a look at stemdot sum --png)", err)
	}
	info := &stemdot.CentreInfo{X: c.X, Y: c.Y, R: c.R, Source: "sum frame"}
	if shifts != nil {
		info.Source = "sum frame of the frames moved back by their shifts"
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: centre x %.2f, y %.2f, r %.2f px (the direct beam in the %s) for the auto specs\n", prefix, info.X, info.Y, info.R, info.Source)
	return info, nil
}

// hdf5Out moves an --out path ending in .h5, .hdf5 or .hspy from o.NPY to o.HDF5, with
// the command line for its provenance.
func hdf5Out(o *stemdot.Outputs) {
	switch strings.ToLower(filepath.Ext(o.NPY)) {
	case ".h5", ".hdf5", ".hspy":
		o.HDF5, o.NPY = o.NPY, ""
		args := make([]string, len(os.Args))
		for i, a := range os.Args {
			args[i] = a
			if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
				args[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
		}
		o.Command = strings.Join(args, " ")
	}
}
