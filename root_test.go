package stemdot_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"image"
	"image/png"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/internal/testformat"
	"github.com/stemdot/stemdot/masks"
)

// The front ends (cmd/: the CLI, the C ABI and the viewer; bench/) plan, open and validate through the root package:
// none imports affinity/ or cuda/ (bench/gpucheck and cuda/gpucheck, GPU checks, may).
func TestImportRule(t *testing.T) {
	forbidden := map[string]bool{"github.com/stemdot/stemdot/affinity": true, "github.com/stemdot/stemdot/cuda": true}
	fset := token.NewFileSet()
	checked := 0
	for _, root := range []string{"cmd", "bench"} {
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

// Version is the one version string: the C header's STEMDOT_VERSION (which
// stemdot_version() returns) and the Python package's (pyproject.toml, __version__, the
// ABI version its loader checks) say the same.
func TestVersion(t *testing.T) {
	require.Regexp(t, `^\d+\.\d+\.\d+$`, stemdot.Version)
	for file, pattern := range map[string]string{
		"include/stemdot.h":              `(?m)^#define STEMDOT_VERSION "([^"]*)"`,
		"python/pyproject.toml":          `(?m)^version = "([^"]*)"`,
		"python/src/stemdot/__init__.py": `(?m)^__version__ = "([^"]*)"`,
		"python/src/stemdot/_lib.py":     `(?m)^ABI_VERSION = "([^"]*)"`,
	} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		require.NotNil(t, m, "%s has its version (%s)", file, pattern)
		require.Equal(t, stemdot.Version, string(m[1]), file)
	}
}

// docBlock returns the first fenced block of lang after the heading in the Markdown file.
func docBlock(t *testing.T, file, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, heading)
	require.GreaterOrEqual(t, i, 0, "%s has %q", file, heading)
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(s[i:])
	require.NotNil(t, m, "%s: %s block after %q", file, lang, heading)
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

// doc/go.md's Go program (at most ten lines: open, masks, apply, save) closes the
// dataset, writes into the temporary directory, not the checkout, and computes the
// virtual bright field of a real MIB file equal to the CLI's, and to a float64
// reference computed from the file's bytes.
func TestDocGoProgram(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	src := docBlock(t, "doc/go.md", "# From Go", "go")
	body := src[strings.Index(src, "func main() {"):strings.Index(src, "\n}\n")]
	require.LessOrEqual(t, strings.Count(body, "\n"), 10, "the program's main has at most ten lines")
	require.Contains(t, body, "defer ds.Close()")

	dir := t.TempDir()
	out := filepath.Join(dir, "vbf.npy")
	src = strings.ReplaceAll(src, `"../shared/data/mib/001_4x2_6bit.mib"`, strconv.Quote(mib))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	run := exec.Command("go", append(append([]string{"run"}, testfiles.GoTags...), filepath.Join(dir, "main.go"))...)
	run.Env = append(os.Environ(), "TMPDIR="+dir)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), stderr.String())
	require.Equal(t, "wrote "+out+"\n", stdout.String())

	cliOut := filepath.Join(dir, "cli.npy")
	cli := exec.Command("go", append(append([]string{"run"}, testfiles.GoTags...), "./cmd/stemdot", "apply", mib, "--nav-shape", "2,4", "--mask", "disk:128,128,20", "--out", cliOut, "-q")...)
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
	o, err = stemdot.ParseOptions("nav_shape=(2, 3, 4)") // a scan of planes, as LiberTEM (#33)
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{NavShape: []int{2, 3, 4}}, o)
	o, err = stemdot.ParseOptions("frame_header=2KiB;frame_footer=1kB;offset=0")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{FrameHeader: 2048, FrameFooter: 1000}, o)
	o, err = stemdot.ParseOptions("frames=(0, 3)")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{Frames: dataset.FrameSpan{First: 0, Count: 3}}, o)
	o, err = stemdot.ParseOptions("flyback=Start:2")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{Flyback: dataset.Flyback{Place: dataset.FlybackStart, Frames: 2}}, o)
	o, err = stemdot.ParseOptions("allow_fill=True;dataset_path= /my data ")
	require.NoError(t, err)
	require.Equal(t, stemdot.Options{AllowFill: true, DatasetPath: " /my data "}, o, "dataset_path verbatim (Open falls back to it trimmed)")
	for _, c := range []struct {
		in   string
		kind errs.Kind
		msg  string
	}{
		{"colour=blue", errs.Argument, `unknown option "colour" (known: format, nav_shape, sig_shape, dtype, byte_order, offset, frame_header, frame_footer, sync_offset, flyback, dataset_path, allow_fill, roi, frames, `}, // then the format options, in TestFormatOptions
		{"frames=2", errs.Argument, `option frames "2": want FIRST,COUNT`},
		{"nav_shape=1,2,3,4", errs.Argument, `option nav_shape "1,2,3,4": want Y,X, N or Z,Y,X, got 4 sizes`},
		{"sig_shape=4,0", errs.Shape, `option sig_shape "4,0": "0" is not a positive size`},
		{"nav_shape=99999999999999999999,1", errs.Shape, `size "99999999999999999999" is too large`},
		{"nav_shape=64x64", errs.Shape, `option nav_shape "64x64": want whole sizes separated by commas, rows first: Y,X (e.g. 64,64), N (e.g. 4096) or Z,Y,X (e.g. 8,64,64)`},
		{"sig_shape=256x256", errs.Shape, `option sig_shape "256x256": want Y,X: two whole sizes separated by a comma, rows first (e.g. 256,256)`},
		{"dtype=complex64", errs.DType, "complex64"},
		{"byte_order=middle", errs.Argument, "want little or big"},
		{"frame_footer=1.5", errs.Argument, `option frame_footer "1.5": want a non-negative byte count such as 1024 or 1KiB`},
		{"offset=-1", errs.Argument, `option offset "-1": want a non-negative byte count`},
		{"flyback=left", errs.Argument, `option flyback "left": want auto, none, start, end, start:N or end:N (N flyback frames per scan row)`},
		{"allow_fill=maybe", errs.Argument, `option allow_fill "maybe": not a boolean`},
	} {
		_, err := stemdot.ParseOptions(c.in)
		require.ErrorContains(t, err, c.msg)
		require.Equal(t, c.kind, errs.KindOf(err), c.in)
	}
	require.Equal(t, "give --sig-shape or --nav-shape; option colour", frontend.FlagNames("give option sig_shape or option nav_shape; option colour"))
	require.Equal(t, "--out x.png", frontend.FlagNames("option out x.png"))
}

// A 3-D input, frames of shape (n, sig_y, sig_x) (an NPY file here), has nav shape (n,)
// as in LiberTEM and Python's apply_masks on such an array: the Result and its NPY have
// shape (n, n_masks), with the values of a float64 reference.
func TestThreeDInputNavShape(t *testing.T) {
	const n, sy, sx = 5, 6, 7
	frames := make([]float32, n*sy*sx)
	for i := range frames {
		frames[i] = float32(i%13) + 0.5
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "frames.npy")
	require.NoError(t, npy.WriteFile(path, []int{n, sy, sx}, frames))
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.Equal(t, []int{n}, ds.NavShape())
	require.Empty(t, stemdot.OpenWarnings(ds), "the file gives its nav shape")
	stack, err := stemdot.Masks(ds.SigShape(), "point:2,3", "rect:4,1,3,2")
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	require.Equal(t, []int{n}, res.NavShape)
	out := filepath.Join(dir, "r.npy")
	require.NoError(t, stemdot.SaveNPY(out, res))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	var got []float64
	require.NoError(t, r.Read(&got))
	require.Equal(t, []int{n, 2}, r.Header.Descr.Shape)
	for i := range n {
		frame := frames[i*sy*sx : (i+1)*sy*sx]
		var rect float64
		for y := 1; y < 3; y++ {
			for x := 4; x < 7; x++ {
				rect += float64(frame[y*sx+x])
			}
		}
		require.Equal(t, []float64{float64(frame[3*sx+2]), rect}, got[2*i:2*i+2], "frame %d", i)
	}
}

// go doc stemdot.Result shows every field of a result, each documented: no embedded
// type hides NavShape, F32 or Stats.
func TestResultFieldsDocumented(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	require.NoError(t, err)
	var fields []string
	for _, f := range pkgs["stemdot"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Result" {
				for _, fl := range ts.Type.(*ast.StructType).Fields.List {
					require.NotEmpty(t, fl.Names, "Result embeds %v", fl.Type)
					require.NotNil(t, fl.Doc, "Result.%s has a doc comment", fl.Names[0])
					for _, n := range fl.Names {
						fields = append(fields, n.Name)
					}
				}
			}
			return true
		})
	}
	require.Equal(t, []string{"NavShape", "NMasks", "Positions", "ScanShape", "F32", "F64", "Stats", "Names", "RunNotes", "Warnings", "Info"}, fields)
}

// Every registered format (but formatoptions_test.go's test-only one) is in Open's error
// for an unknown format with its extensions, in the help of option format, and has a row
// in doc/formats.md's format table naming its extensions and the options it reads (#19.1).
func TestEveryFormatListed(t *testing.T) {
	_, err := stemdot.Open(filepath.Join(t.TempDir(), "x"), stemdot.Options{Format: "bogus"})
	_, supported, ok := strings.Cut(err.Error(), "(supported: ")
	require.True(t, ok, err.Error())
	var usage string
	for _, o := range stemdot.OpenOptions() {
		if o.Key == "format" {
			usage = o.Usage
		}
	}
	page, err := os.ReadFile("doc/formats.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(page), "\n| format | extensions | what is read from metadata | options |\n|---|---|---|---|\n")
	require.True(t, ok, "doc/formats.md has the format table")
	rows := map[string][]string{} // format name → cells
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		require.Len(t, cells, 4, line)
		name := regexp.MustCompile("^ `([a-z0-9_]+)`").FindStringSubmatch(cells[0])
		require.NotNil(t, name, "the row names its format first: %s", line)
		rows[name[1]] = cells
	}
	formats := slices.DeleteFunc(dataset.Formats(), func(f dataset.Format) bool { return f.Name == testformat.Name })
	require.GreaterOrEqual(t, len(formats), 6)
	for _, f := range formats {
		require.Regexp(t, `(^|, )`+f.Name+` \(`, supported, "Open's error lists format %s", f.Name)
		require.Regexp(t, `\b`+f.Name+`\b`, usage, "option format's help names format %s", f.Name)
		row, ok := rows[f.Name]
		require.True(t, ok, "doc/formats.md's format table has a row for %s", f.Name)
		for _, ext := range f.Extensions {
			require.Contains(t, supported, ext, "Open's error names the extension %s", ext)
			require.Contains(t, row[1], "`"+ext+"`", "doc/formats.md's row of %s names the extension %s", f.Name, ext)
		}
		for _, key := range f.Options {
			require.Contains(t, row[3], "`"+frontend.FlagName(key), "doc/formats.md's row of %s names the option %s it reads", f.Name, key)
		}
		for _, o := range f.FormatOptions {
			require.Contains(t, row[3], "`"+frontend.FlagName(o.Key), "doc/formats.md's row of %s names its option %s", f.Name, o.Key)
		}
		delete(rows, f.Name)
	}
	require.Empty(t, rows, "doc/formats.md's format table has rows of registered formats only")
}

// The Go API names options as a Go caller sets them (Options.DatasetPath), in errors and
// warnings, keeping their kinds; every option key has a Go name that is a field of
// Options, Plan or Outputs (or MasksFrom's argument), a format option's is
// Options.FormatOptions["key"]; frontend.OptionKeys (the C ABI) and frontend.FlagNames
// (the CLI) turn Go names back into keys and flags.
func TestGoNames(t *testing.T) {
	keys := []string{"out", "png", "com_shifts", "mean", "max", "std", "roi_compact", "mask", "masks", "at", "shifts"}
	for _, o := range stemdot.OpenOptions() {
		keys = append(keys, o.Key)
	}
	p, err := stemdot.ParsePlan("threads=1")
	require.Error(t, err)
	_, known, _ := strings.Cut(err.Error(), "(known: ")
	keys = append(keys, strings.Split(strings.TrimSuffix(known, ")"), ", ")...)
	require.Contains(t, keys, "gpu_inventory")
	types := map[string]reflect.Type{"Options": reflect.TypeOf(stemdot.Options{}), "Plan": reflect.TypeOf(p), "Outputs": reflect.TypeOf(stemdot.Outputs{}), "ApplyOptions": reflect.TypeOf(stemdot.ApplyOptions{})}
	for _, key := range keys {
		msg := "give option " + key + " 2"
		name := strings.TrimSuffix(strings.TrimPrefix(stemdot.GoNames(msg), "give "), " 2")
		if _, _, isFormat := dataset.FormatOptionOf(key); isFormat {
			require.Equal(t, `Options.FormatOptions["`+key+`"]`, name, "format option %s", key)
		} else if typ, field, ok := strings.Cut(name, "."); ok {
			require.Contains(t, types, typ, key)
			_, ok = types[typ].FieldByName(field)
			require.True(t, ok, "option %s: %s is a field", key, name)
		} else {
			require.Contains(t, []string{"MasksFrom's specs", "MasksFrom's files", "Pick's positions"}, name, key)
		}
		require.Equal(t, msg, frontend.OptionKeys(stemdot.GoNames(msg)), key)
		require.Equal(t, "give "+frontend.FlagName(key)+" 2", frontend.FlagNames(stemdot.GoNames(msg)), key)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "f.npy")
	require.NoError(t, npy.WriteFile(path, []int{2, 4, 4}, make([]float32, 32)))
	_, err = stemdot.Open(path, stemdot.Options{Format: "bogus"})
	require.ErrorContains(t, err, `unknown Options.Format "bogus" (supported: blo (NanoMEGAS block file: .blo), `)
	require.Equal(t, errs.Argument, errs.KindOf(err))
	ds, err := stemdot.Open(path, stemdot.Options{DatasetPath: "/x"})
	require.NoError(t, err)
	defer ds.Close()
	require.Equal(t, []string{path + ": Options.DatasetPath applies to HDF5 files only and was ignored"}, stemdot.OpenWarnings(ds))
	_, err = stemdot.MasksFrom(ds.SigShape(), nil, nil)
	require.EqualError(t, err, "no masks: give a mask spec (MasksFrom's specs) or an NPY mask stack (MasksFrom's files)")
	_, err = stemdot.Plan{Cores: 2, CPUs: "0"}.Planner()
	require.ErrorContains(t, err, "(Plan.CPUs 0)")
	require.Equal(t, errs.Resources, errs.KindOf(err))
	stack, err := stemdot.Masks(ds.SigShape(), "point:1,1")
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{path + ": Options.DatasetPath applies to HDF5 files only and was ignored"}, res.Warnings)
	err = stemdot.Save(res, stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), COMShifts: filepath.Join(dir, "s.npy")})
	require.EqualError(t, err, "Outputs.COMShifts: the masks hold no centre-of-mass set (com_sum, com_y, com_x): add the mask spec com")
	require.Equal(t, errs.Argument, errs.KindOf(err))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = stemdot.Apply(ctx, ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, errs.Cancelled, errs.KindOf(err))
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
	// Item D10: a file name that is only the extension, a PNG prefix naming a directory.
	for _, c := range []struct {
		out  stemdot.Outputs
		want string
	}{
		{stemdot.Outputs{NPY: filepath.Join(dir, ".npy")}, "Outputs.NPY " + dir + "/.npy: the file name is only the extension (a hidden file named .npy): give a name, e.g. " + dir + "/result.npy"},
		{stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), PNGPrefix: "."}, "Outputs.PNGPrefix . names a directory, not a file name prefix: give one, e.g. img"},
	} {
		err = stemdot.Save(res, c.out)
		require.EqualError(t, err, c.want)
		require.Equal(t, errs.Argument, errs.KindOf(err))
		entries, _ := os.ReadDir(dir)
		require.Empty(t, entries)
	}

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
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	require.ElementsMatch(t, []string{"img_0_disk.png", "img_com_shift_y.png", "img_com_shift_x.png"}, names,
		"a PNG per mask, the com set drawn as its shift maps")
	dir3 := t.TempDir()
	require.NoError(t, stemdot.Save(res, stemdot.Outputs{PNGPrefix: filepath.Join(dir3, "img")}))
	names, _ = filepath.Glob(filepath.Join(dir3, "img_*.png"))
	require.Len(t, names, 4, "without COMShifts, a PNG per mask: %v", names)

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

// PNGs are scaled up by a whole factor, nearest neighbour, until the short side has 256
// pixels with the long side within 4096, never down: every block of factor × factor
// pixels holds its scan position's grey level, the values mapped linearly from the
// minimum (0) to the maximum (255), NaN 0.
func TestSavePNGScaled(t *testing.T) {
	for _, c := range []struct {
		nav           []int
		width, height int
	}{
		{[]int{2, 4}, 512, 256},     // the real 2×4 file: factor 128
		{[]int{64, 64}, 256, 256},   // the demo: factor 4
		{[]int{300, 200}, 400, 600}, // factor 2
		{[]int{256, 256}, 256, 256}, // large enough
		{[]int{1000}, 4000, 4},      // a 1-D nav shape is one row; its long side bounds the factor
		{[]int{3, 5000}, 5000, 3},   // never scaled down
		{[]int{1, 1}, 256, 256},
	} {
		frames := 1
		for _, n := range c.nav {
			frames *= n
		}
		res := &stemdot.Result{Names: []string{"m"}}
		res.NavShape, res.NMasks = c.nav, 1
		res.F64 = make([]float64, frames)
		for f := range res.F64 {
			res.F64[f] = float64(f*37%101) - 20
		}
		if frames > 2 {
			res.F64[1] = math.NaN()
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range res.F64 {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		dir := t.TempDir()
		require.NoError(t, stemdot.Save(res, stemdot.Outputs{PNGPrefix: filepath.Join(dir, "img")}))
		f, err := os.Open(filepath.Join(dir, "img_0_m.png"))
		require.NoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err)
		require.Equal(t, image.Rect(0, 0, c.width, c.height), img.Bounds(), "nav %v", c.nav)
		cols := c.nav[len(c.nav)-1]
		k := c.width / cols
		for y := range c.height {
			for x := range c.width {
				v := res.F64[(y/k)*cols+x/k]
				want := uint8(0)
				if !math.IsNaN(v) && hi > lo {
					want = uint8(math.Round((v - lo) / (hi - lo) * 255))
				}
				if got := img.(*image.Gray).GrayAt(x, y).Y; got != want {
					t.Fatalf("nav %v: pixel (x=%d, y=%d) is %d, want %d (scan position %d, value %g)", c.nav, x, y, got, want, (y/k)*cols+x/k, v)
				}
			}
		}
	}
	// The extremes of float64: no overflow in the mapping; ±Inf white and black.
	res := &stemdot.Result{Names: []string{"m"}}
	res.NavShape, res.NMasks = []int{1, 5}, 1
	res.F64 = []float64{-math.MaxFloat64, 0, math.MaxFloat64, math.Inf(1), math.Inf(-1)}
	dir := t.TempDir()
	require.NoError(t, stemdot.Save(res, stemdot.Outputs{PNGPrefix: filepath.Join(dir, "img")}))
	f, err := os.Open(filepath.Join(dir, "img_0_m.png"))
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 5*256, 256), img.Bounds())
	for i, want := range []uint8{0, 128, 255, 255, 0} {
		require.Equal(t, want, img.(*image.Gray).GrayAt(i*256+100, 100).Y, "value %g", res.F64[i])
	}
}

func TestPlannerErrors(t *testing.T) {
	for _, c := range []struct {
		plan stemdot.Plan
		kind errs.Kind
		msg  string
	}{
		{stemdot.Plan{CPUs: "two"}, errs.Argument, "Plan.CPUs"},
		{stemdot.Plan{CPUs: "4095,"}, errs.Resources, "CPU 4095 is not allowed"},
		{stemdot.Plan{PartitionSize: "0"}, errs.Argument, "Plan.PartitionSize"},
		{stemdot.Plan{Cores: 4, GPUs: "1"}, errs.CUDA, "give Plan.GPUs auto"},
		{stemdot.Plan{CPUs: "0"}, errs.Resources, "no workers: the request asks for no CPU worker (Plan.CPUs 0) and no GPU worker"},
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
	require.ErrorContains(t, err, "pass Plan.Oversubscribe to allow it")
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

	// A result of more values than an int counts (#17.7): 2⁴⁰ one-pixel frames, 2²⁴ masks.
	huge := hugeDataset{ds}
	deep := &masks.Stack{N: 1 << 24, SigY: 4, SigX: 4, Sparse: &masks.CSR{N: 1 << 24, Pixels: 16, RowPtr: make([]int32, 1<<24+1)}}
	_, err = stemdot.Apply(t.Context(), huge, deep, plan, stemdot.ApplyOptions{})
	kind(errs.Resources, err, "the result of 1099511627776 frames × 16777216 masks is too large to hold")

	for _, described := range []stemdot.Plan{{Cores: 4}, {GPUInventory: "1x141GB", GPUs: "auto"}} {
		_, err = stemdot.Apply(t.Context(), ds, stack, described, stemdot.ApplyOptions{})
		kind(errs.Argument, err, "a plan for a described machine (Plan.Cores or Plan.GPUInventory) is for reading")
	}

	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	f, err := stemdot.Open(mib, stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	kind(errs.Argument, f.Close(), "already closed")
}

// hugeDataset claims 2⁴⁰ frames, more than a result of many masks can hold.
type hugeDataset struct{ dataset.Dataset }

func (hugeDataset) NumFrames() int  { return 1 << 40 }
func (hugeDataset) NavShape() []int { return []int{1 << 20, 1 << 20} }

// The warning on a guessed nav shape suggests the most nearly square shape of the
// frames, and none for a prime count, whose only other shape is the row it was read as.
func TestGuessedNavShapeHint(t *testing.T) {
	for _, c := range []struct {
		n    int
		hint string
	}{{12, " (e.g. 3,4)"}, {7, " (Y,X)"}} {
		path := filepath.Join(t.TempDir(), "frames.raw")
		require.NoError(t, os.WriteFile(path, make([]byte, c.n*4), 0o644))
		ds, err := stemdot.Open(path, stemdot.Options{SigShape: []int{2, 2}, DType: dataset.Uint8})
		require.NoError(t, err)
		require.Equal(t, []string{fmt.Sprintf("%s: the file gives no scan shape, read as 1 row of %d frames: give Options.NavShape%s", path, c.n, c.hint)},
			stemdot.OpenWarnings(ds))
		require.NoError(t, ds.Close())
	}
}
