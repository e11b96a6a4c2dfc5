package stemdot_test

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
)

// The front ends (cmd/, capi/, bench/) plan, open and validate through the root package:
// none imports affinity/ or cuda/ (bench/gpucheck and cuda/gpucheck, GPU checks, may).
func TestImportRule(t *testing.T) {
	forbidden := map[string]bool{"github.com/stemdot/stemdot/affinity": true, "github.com/stemdot/stemdot/cuda": true}
	fset := token.NewFileSet()
	checked := 0
	for _, root := range []string{"cmd", "capi", "bench"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (path == "bench/gpucheck" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if forbidden[p] {
					t.Errorf("%s imports %s: use the root package stemdot", path, p)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Greater(t, checked, 10, "the walk found the front ends' files")
}

// readmeBlock returns the first fenced block of lang after the heading in README.md.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "README has %q", heading)
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(s[i:])
	require.NotNil(t, m, "README's %s block after %q", lang, heading)
	return m[1]
}

func readNPY(t *testing.T, path string) ([]int, []float32) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	var v []float32
	require.NoError(t, r.Read(&v))
	return r.Header.Descr.Shape, v
}

// The README's Go program (at most ten lines: open, masks, apply, save) computes the
// virtual bright field of a real MIB file equal to the CLI's, and to a float64
// reference computed from the file's bytes.
func TestREADMEGoProgram(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	src := readmeBlock(t, "## From Go", "go")
	body := src[strings.Index(src, "func main() {"):strings.Index(src, "\n}\n")]
	require.LessOrEqual(t, strings.Count(body, "\n"), 10, "the program's main has at most ten lines")

	dir := t.TempDir()
	out := filepath.Join(dir, "vbf.npy")
	src = strings.ReplaceAll(src, `"../shared/data/mib/001_4x2_6bit.mib"`, strconv.Quote(mib))
	src = strings.ReplaceAll(src, `"vbf.npy"`, strconv.Quote(out))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	run := exec.Command("go", "run", filepath.Join(dir, "main.go"))
	var stderr bytes.Buffer
	run.Stderr = &stderr
	require.NoError(t, run.Run(), stderr.String())

	cliOut := filepath.Join(dir, "cli.npy")
	cli := exec.Command("go", "run", "./cmd/stemdot", "apply", mib, "--nav-shape", "2,4", "--mask", "disk:128,128,20", "--out", cliOut, "-q")
	cli.Stderr = &stderr
	require.NoError(t, cli.Run(), stderr.String())

	shape, got := readNPY(t, out)
	cliShape, want := readNPY(t, cliOut)
	require.Equal(t, []int{2, 4, 1}, shape)
	require.Equal(t, cliShape, shape)
	require.Equal(t, want, got, "the Go program's result equals the CLI's")

	m := testfiles.DecodeMIB(t, mib)
	for f, frame := range m.Frames {
		var ref float64
		for i, v := range frame {
			y, x := float64(i/m.SigX), float64(i%m.SigX)
			if (x-128)*(x-128)+(y-128)*(y-128) <= 20*20 {
				ref += float64(v)
			}
		}
		require.Equal(t, ref, float64(got[f]), "frame %d", f)
	}
}

func TestOptions(t *testing.T) {
	o, err := stemdot.ParseOptions(" format=raw; sig_shape=(256, 128) ;dtype=uint16;nav_shape=[4,4];byte_order=BIG;offset=512;")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{Format: "raw", SigShape: []int{256, 128}, DType: 2, NavShape: []int{4, 4}, BigEndian: true, Offset: 512}, o)
	o, err = stemdot.ParseOptions("frame_header=2KiB;frame_footer=1kB;offset=0")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{FrameHeader: 2048, FrameFooter: 1000}, o)
	o, err = stemdot.ParseOptions("frames=(0, 3)")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{Frames: dataset.FrameSpan{First: 0, Count: 3}}, o)
	o, err = stemdot.ParseOptions("allow_fill=True;dataset_path= /my data ")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{AllowFill: true, DatasetPath: " /my data "}, o, "dataset_path verbatim (Open falls back to it trimmed)")
	for _, c := range []struct {
		in   string
		kind errs.Kind
		msg  string
	}{
		{"colour=blue", errs.Argument, `unknown option "colour" (known: format, nav_shape, sig_shape, dtype, byte_order, offset, frame_header, frame_footer, sync_offset, dataset_path, allow_fill, frames)`},
		{"frames=2", errs.Argument, `option frames "2": want FIRST,COUNT`},
		{"nav_shape=1,2,3", errs.Argument, "want Y,X or N"},
		{"sig_shape=4,0", errs.Shape, `option sig_shape "4,0": "0" is not a positive size`},
		{"nav_shape=99999999999999999999,1", errs.Shape, `size "99999999999999999999" is too large`},
		{"dtype=complex64", errs.DType, "complex64"},
		{"byte_order=middle", errs.Argument, "want little or big"},
		{"frame_footer=1.5", errs.Argument, `option frame_footer "1.5": want a non-negative byte count such as 1024 or 1KiB`},
		{"offset=-1", errs.Argument, `option offset "-1": want a non-negative byte count`},
		{"allow_fill=maybe", errs.Argument, `option allow_fill "maybe": not a boolean`},
	} {
		_, err := stemdot.ParseOptions(c.in)
		require.ErrorContains(t, err, c.msg)
		require.Equal(t, c.kind, errs.KindOf(err), c.in)
	}
	require.Equal(t, "give --sig-shape or --nav-shape; option colour", stemdot.FlagNames("give option sig_shape or option nav_shape; option colour"))
	require.Equal(t, "--out x.png", stemdot.FlagNames("option out x.png"))
}

// Outputs.Check refuses a result path not ending in .npy and COM shifts without com
// masks; Save writes all outputs or none.
func TestSave(t *testing.T) {
	dir := t.TempDir()
	res := &stemdot.Result{Names: []string{"disk", "com_sum", "com_y", "com_x"}}
	res.NavShape, res.NMasks = []int{1, 2}, 4
	res.F32 = []float32{5, 4, 2, -4, 7, 0, 0, 0}
	err := stemdot.Save(res, stemdot.Outputs{NPY: filepath.Join(dir, "r.png")})
	require.ErrorContains(t, err, "give a path ending in .npy")
	require.Equal(t, errs.Argument, errs.KindOf(err))
	err = stemdot.Save(&stemdot.Result{Names: []string{"disk"}}, stemdot.Outputs{COMShifts: filepath.Join(dir, "s.npy")})
	require.ErrorContains(t, err, "add the mask spec com")

	out := stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), PNGPrefix: filepath.Join(dir, "img"), COMShifts: filepath.Join(dir, "s.npy")}
	require.NoError(t, stemdot.Save(res, out))
	shape, v := readNPY(t, out.NPY)
	require.Equal(t, []int{1, 2, 4}, shape)
	require.Equal(t, res.F32, v)
	f, err := os.Open(out.COMShifts)
	require.NoError(t, err)
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	var shifts []float64
	require.NoError(t, r.Read(&shifts))
	f.Close()
	require.Equal(t, []int{1, 2, 2}, r.Header.Descr.Shape)
	require.Equal(t, 0.5, shifts[0])
	require.Equal(t, -1.0, shifts[1])
	require.True(t, shifts[2] != shifts[2] && shifts[3] != shifts[3], "NaN shifts for a zero sum: %v", shifts)
	names, _ := filepath.Glob(filepath.Join(dir, "img_*.png"))
	require.Len(t, names, 6, "a PNG per mask and per shift axis: %v", names)

	// A failing output leaves none of the others.
	dir2 := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir2, "img_com_shift_x.png"), 0o755))
	err = stemdot.Save(res, stemdot.Outputs{NPY: filepath.Join(dir2, "r.npy"), PNGPrefix: filepath.Join(dir2, "img")})
	require.NoError(t, err, "no shift PNGs without COMShifts")
	err = stemdot.Save(res, stemdot.Outputs{NPY: filepath.Join(dir2, "r2.npy"), PNGPrefix: filepath.Join(dir2, "img"), COMShifts: filepath.Join(dir2, "s.npy")})
	require.ErrorContains(t, err, filepath.Join(dir2, "img_com_shift_x.png")+" exists and is a directory")
	_, err = os.Stat(filepath.Join(dir2, "r2.npy"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestPlannerErrors(t *testing.T) {
	for _, c := range []struct {
		plan stemdot.Plan
		kind errs.Kind
		msg  string
	}{
		{stemdot.Plan{CPUs: "two"}, errs.Argument, "option cpus"},
		{stemdot.Plan{CPUs: "4095,"}, errs.Resources, "CPU 4095 is not allowed"},
		{stemdot.Plan{PartitionSize: "0"}, errs.Argument, "option partition_size"},
		{stemdot.Plan{Cores: 4, GPUs: "1"}, errs.CUDA, "give option gpus auto"},
		{stemdot.Plan{CPUs: "0"}, errs.Resources, "no workers: the request asks for no CPU worker (option cpus 0) and no GPU worker"},
	} {
		_, err := c.plan.Planner()
		require.ErrorContains(t, err, c.msg)
		require.Equal(t, c.kind, errs.KindOf(err), "%+v", c.plan)
	}
	// "auto" without a GPU: CPU workers only, with a one-line warning.
	pl, err := stemdot.Plan{Cores: 2, GPUs: "auto"}.Planner()
	require.NoError(t, err)
	p, err := pl.Plan(nil, nil)
	require.NoError(t, err)
	require.Len(t, p.Workers, 2)
	require.Len(t, p.Warnings, 1)
	require.Contains(t, p.Warnings[0], "gpus auto")
}

// TestParsePlan reads the C ABI's and Python's plan options into Plan's fields, and
// refuses malformed ones naming the option; oversubscribe lets a described 2-core machine
// take 3 CPU workers, which it refuses without.
func TestParsePlan(t *testing.T) {
	p, err := stemdot.ParsePlan(" CPUs=0,2-3 ;gpus=auto;ram_per_gpu_worker=4GiB;max_workers_per_gpu=2;oversubscribe=yes;partition_size=64MiB;topology=8;gpu_inventory=2x141GB;")
	require.NoError(t, err)
	require.Equal(t, stemdot.Plan{CPUs: "0,2-3", GPUs: "auto", RAMPerGPUWorker: "4GiB", MaxWorkersPerGPU: 2,
		Oversubscribe: true, PartitionSize: "64MiB", Cores: 8, GPUInventory: "2x141GB"}, p)
	p, err = stemdot.ParsePlan("")
	require.NoError(t, err)
	require.Equal(t, stemdot.Plan{}, p)
	for s, msg := range map[string]string{
		"cpus":                  `plan option "cpus" is not key=value`,
		"cpus=1;cpus=2":         "option cpus given twice",
		"oversubscribe=maybe":   `option oversubscribe "maybe": want true or false`,
		"max_workers_per_gpu=x": `option max_workers_per_gpu "x": want a whole number`,
		"threads=4":             `unknown plan option "threads"`,
		"topology=0":            `option topology "0": want a core count of at least 1`,
	} {
		_, err := stemdot.ParsePlan(s)
		require.ErrorContains(t, err, msg, s)
		require.Equal(t, errs.Argument, errs.KindOf(err), s)
	}
	_, err = stemdot.Plan{Cores: 2, CPUs: "3"}.Planner()
	require.ErrorContains(t, err, "option oversubscribe")
	p, err = stemdot.ParsePlan("topology=2;cpus=3;oversubscribe=true")
	require.NoError(t, err)
	pl, err := p.Planner()
	require.NoError(t, err)
	plan, err := pl.Plan(nil, nil)
	require.NoError(t, err)
	require.Len(t, plan.Workers, 3)
}

// Misuse of the Go API gets classified errors (or, for Result.Value, a panic naming the
// shape, as a slice index would), never a nil dereference or errs.Internal.
func TestGoAPIMisuse(t *testing.T) {
	kind := func(want errs.Kind, err error, msg string) {
		t.Helper()
		require.ErrorContains(t, err, msg)
		require.Equal(t, want, errs.KindOf(err), err.Error())
	}
	kind(errs.Argument, stemdot.SaveNPY(filepath.Join(t.TempDir(), "x.npy"), nil), "nil *Result")
	_, err := stemdot.COMShifts(nil, 0)
	kind(errs.Argument, err, "nil *Result")

	frames := make([]byte, 2*4*4*2)
	_, err = dataset.FromMemory(frames[:30], []int{2}, [2]int{4, 4}, dataset.Uint16)
	kind(errs.Shape, err, "30 bytes")
	_, err = dataset.FromMemory(frames, []int{2}, [2]int{4, 4}, dataset.Invalid)
	kind(errs.DType, err, "invalid dtype")
	ds, err := dataset.FromMemory(frames, []int{2}, [2]int{4, 4}, dataset.Uint16)
	require.NoError(t, err)

	plan := stemdot.Plan{CPUs: "1"}
	short := &masks.Stack{N: 3, SigY: 4, SigX: 4, Data: make([]float32, 10), Names: []string{"a", "b", "c"}}
	_, err = stemdot.Apply(t.Context(), ds, short, plan, stemdot.ApplyOptions{})
	kind(errs.Shape, err, "needs 48 weights, has 10")
	nan := &masks.Stack{N: 1, SigY: 4, SigX: 4, Data: make([]float32, 16), Names: []string{"n"}}
	nan.Data[5] = float32(math.NaN())
	_, err = stemdot.Apply(t.Context(), ds, nan, plan, stemdot.ApplyOptions{})
	kind(errs.Argument, err, `mask 0 ("n") has weight NaN at pixel (y=1, x=1)`)

	stack, err := stemdot.Masks([2]int{4, 4}, "point:1,2")
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Value(1, 0))
	require.PanicsWithValue(t, "stemdot: Result.Value(2, 0) outside the result's 2 frames × 1 masks", func() { res.Value(2, 0) })

	for _, described := range []stemdot.Plan{{Cores: 4}, {GPUInventory: "1x141GB", GPUs: "auto"}} {
		_, err = stemdot.Apply(t.Context(), ds, stack, described, stemdot.ApplyOptions{})
		kind(errs.Argument, err, "a plan for a described machine (option topology or gpu_inventory) is for reading")
	}

	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	f, err := stemdot.Open(mib, stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	kind(errs.Argument, f.Close(), "already closed")
}
