package cli

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/frontend"
)

// datasetFlags are the options of stemdot.Open, one flag each (stemdot.OpenOptions()).
type datasetFlags struct {
	values map[string]*string
	flags  *pflag.FlagSet
}

func (f *datasetFlags) register(fs *pflag.FlagSet) {
	f.values, f.flags = map[string]*string{}, fs
	for _, o := range stemdot.OpenOptions() {
		name := strings.TrimPrefix(o.FlagName(), "--")
		if !o.Switch {
			f.values[o.Key] = fs.String(name, o.Default, o.Usage)
			continue
		}
		v := new(string)
		fs.Var((*switchValue)(v), name, o.Usage)
		fs.Lookup(name).NoOptDefVal = "true"
		f.values[o.Key] = v
	}
}

// switchValue is the value of an on/off option's flag: given alone it is "true"
// (NoOptDefVal), --flag=false turns it off; stemdot.SetOpenOption parses it. Its type
// "bool" makes the help show it as a switch.
type switchValue string

func (v *switchValue) Set(s string) error { *v = switchValue(s); return nil }
func (v *switchValue) String() string     { return string(*v) }
func (v *switchValue) Type() string       { return "bool" }

// given are the open options given on the command line, key → value as given (for the
// result's sidecar).
func (f *datasetFlags) given() map[string]string {
	out := map[string]string{}
	for _, o := range stemdot.OpenOptions() {
		if f.flags.Changed(strings.TrimPrefix(o.FlagName(), "--")) {
			out[o.Key] = *f.values[o.Key]
		}
	}
	return out
}

// open opens path with the options given on the command line and prints the dataset's
// warnings (a guessed nav shape) to stderr.
func (f *datasetFlags) open(cmd *cobra.Command, path string) (dataset.Dataset, error) {
	ds, _, err := f.openOn(cmd, &local{}, path)
	return ds, err
}

// openOn opens (or describes) path on backend b with the options given on the command
// line and prints the dataset's warnings to stderr; it returns them too.
func (f *datasetFlags) openOn(cmd *cobra.Command, b Backend, path string) (dataset.Dataset, []string, error) {
	var opt stemdot.Options
	for _, o := range stemdot.OpenOptions() {
		if f.flags.Changed(strings.TrimPrefix(o.FlagName(), "--")) {
			if err := stemdot.SetOpenOption(&opt, o.Key, *f.values[o.Key]); err != nil {
				return nil, nil, err
			}
		}
	}
	ds, warnings, err := b.Open(cmd.Context(), path, opt, f.given())
	if err != nil {
		return nil, nil, err
	}
	for _, w := range warnings {
		warn(cmd, w)
	}
	return ds, warnings, nil
}

// planFlags are the resource request (stemdot.Plan), as in LiberTEM's Context.make_with.
type planFlags struct{ stemdot.Plan }

func (f *planFlags) register(fs *pflag.FlagSet, described bool) {
	fs.StringVar(&f.CPUs, "cpus", "", "CPU workers: a count (0 = none) or a list of CPU ids to pin on, e.g. 0,2-3 (default: all usable physical cores not reserved for GPU workers)")
	fs.StringVar(&f.GPUs, "gpus", "", "GPU workers: auto (those the GPUs allow; none, with a note, without GPU), a count (round-robin over GPUs), or a list of GPU ids with repeats (0,0 = two workers on GPU 0)")
	fs.StringVar(&f.RAMPerGPUWorker, "ram-per-gpu-worker", "4GiB", "with --gpus auto: GPU memory each GPU worker needs")
	fs.IntVar(&f.MaxWorkersPerGPU, "max-workers-per-gpu", 0, "with --gpus auto: most workers on one GPU (0: the default, 4)")
	fs.BoolVar(&f.Oversubscribe, "oversubscribe", false, "allow more workers than usable physical cores (with a warning)")
	fs.StringVar(&f.PartitionSize, "partition-size", "512MiB", "target partition size in decoded float32 bytes")
	if described {
		fs.IntVar(&f.Cores, "topology", 0, "plan for a described machine with N physical cores, all allowed, instead of this one (0: this machine)")
		fs.StringVar(&f.GPUInventory, "gpu-inventory", "", "plan for described GPUs, KxSIZE of free memory each, e.g. 2x141GB (implies a CUDA build)")
	}
}

// emptyValueHints say what to give a flag given an empty value (see checkEmptyFlags), by
// flag; other flags are told to give a value.
var emptyValueHints = map[string]string{
	"out":        "a file name",
	"com-shifts": "a file name ending in .npy",
	"png":        "a file name prefix, e.g. img for img_0_disk.png",
	"masks":      "an NPY mask file",
	"mask":       "a mask spec such as disk:128,128,20",
	"cpus":       "a count or a list",
	"gpus":       "auto, a count or a list",
	"mean":       "a file name ending in .npy",
	"max":        "a file name ending in .npy",
	"std":        "a file name ending in .npy",
	"at":         "a scan position Y,X",
}

// checkEmptyFlags refuses a string flag given with an empty (or blank) value, e.g.
// --png "" or --nav-shape "$UNSET": for most flags an empty value means the flag's
// default, so the value given would be silently ignored (no PNG written, the file's nav
// shape used).
func checkEmptyFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) { // the flags given
		values := []string{f.Value.String()}
		switch sv, ok := f.Value.(pflag.SliceValue); {
		case ok:
			values = sv.GetSlice()
		case f.Value.Type() != "string":
			return
		}
		for _, v := range values {
			if strings.TrimSpace(v) == "" && err == nil {
				hint := emptyValueHints[f.Name]
				if hint == "" {
					hint = "a value"
				}
				err = fmt.Errorf("--%s is given an empty value: give %s (see %s --help)", f.Name, hint, cmd.CommandPath())
			}
		}
	})
	return err
}

// warn prints a one-line warning on stderr.
func warn(cmd *cobra.Command, msg string) {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: warning: %s\n", prefix, frontend.FlagNames(msg))
}

// suggestFlag turns pflag's "unknown flag: --nav-shap" into an error that suggests the
// closest flags of cmd (Levenshtein distance at most 2, or a prefix match).
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var near []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if d := editDistance(name, f.Name); d <= 2 || strings.HasPrefix(f.Name, name) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w; did you mean %s?", err, strings.Join(near, " or "))
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = fmt.Sprint(n)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// registerMaskFlags adds --mask and --masks, the mask stack of apply (and of plan, whose
// --gpus auto plans by the job's masks).
func registerMaskFlags(f *pflag.FlagSet, specs, files *[]string) {
	f.StringArrayVar(specs, "mask", nil, "a mask spec (repeatable), x first (column, then row): disk:CX,CY,R, ring:CX,CY,RI,RO, point:X,Y, rect:X,Y,W,H, com[:CX,CY[,R]]")
	f.StringArrayVar(files, "masks", nil, "an NPY mask stack of shape (sig_y, sig_x) or (n, sig_y, sig_x) (repeatable); all stacks together hold at most 2³¹−1 weights, e.g. 32767 masks of 256×256")
}

// parseFloats reads the comma-separated finite numbers of flag's value, as many as want
// names (e.g. "DY,DX in pixels, e.g. 1.5,-2"); an error names the flag and want.
func parseFloats(flag, value, want string) ([]float64, error) {
	n := strings.Count(strings.SplitN(want, " ", 2)[0], ",") + 1
	parts := strings.Split(value, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("%s %q: want %s", flag, value, want)
	}
	out := make([]float64, n)
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s %q: %q is not a finite number: want %s", flag, value, p, want)
		}
		out[i] = v
	}
	return out, nil
}

// inputs are the files a run of the dataset at path reads, which no output may replace:
// path, a MIB file's .hdr beside it, and the --roi file.
func (f *datasetFlags) inputs(path string) []string {
	in := []string{path, strings.TrimSuffix(path, filepath.Ext(path)) + ".hdr"}
	if v := f.values["roi"]; v != nil && *v != "" {
		if r, err := dataset.ParseROI(*v); err == nil && r.Path != "" {
			in = append(in, r.Path)
		}
	}
	return in
}
