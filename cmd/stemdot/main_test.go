package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

var stemdotBin string

// TestMain builds the stemdot binary once, so that the tests check what users run,
// exit codes included.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stemdot-cli-test")
	if err != nil {
		panic(err)
	}
	stemdotBin = filepath.Join(dir, "stemdot")
	build := exec.Command("go", append(append([]string{"build"}, testfiles.GoTags...), "-o", stemdotBin, ".")...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building stemdot:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(stemdotBin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running stemdot %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// mibFrames decodes a MIB file independently of package dataset, as float64 frames.
func mibFrames(t *testing.T, path string) (frames [][]float64, sigY, sigX int) {
	t.Helper()
	m := testfiles.DecodeMIB(t, path)
	for _, fr := range m.Frames {
		f := make([]float64, len(fr))
		for i, v := range fr {
			f[i] = float64(v)
		}
		frames = append(frames, f)
	}
	return frames, m.SigY, m.SigX
}

// refMasks builds disk, ring and COM masks with the documented pixel rules, written
// here independently of package masks.
func refMasks(sigY, sigX int, cx, cy, r, ri, ro float64) [][]float64 {
	n := sigY * sigX
	disk, ring, sum, my, mx := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for y := 0; y < sigY; y++ {
		for x := 0; x < sigX; x++ {
			i := y*sigX + x
			d2 := (float64(x)-cx)*(float64(x)-cx) + (float64(y)-cy)*(float64(y)-cy)
			if d2 <= r*r {
				disk[i] = 1
			}
			if d2 > ri*ri && d2 <= ro*ro {
				ring[i] = 1
			}
			sum[i], my[i], mx[i] = 1, float64(y)-cy, float64(x)-cx
		}
	}
	return [][]float64{disk, ring, sum, my, mx}
}

func readResult(t *testing.T, path string) ([]int, []float64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	shape := r.Header.Descr.Shape
	var out []float64
	switch strings.Trim(r.Header.Descr.Type, "'") {
	case "<f4":
		var v []float32
		require.NoError(t, r.Read(&v))
		for _, x := range v {
			out = append(out, float64(x))
		}
	case "<f8":
		require.NoError(t, r.Read(&out))
	default:
		t.Fatalf("result dtype %s", r.Header.Descr.Type)
	}
	return shape, out
}

// checkResult compares got (frame-major, n_masks per frame) with the float64 reference
// Σ mask·frame, within 1e-5 of Σ |mask|·|frame| (the scale of the sum's rounding).
func checkResult(t *testing.T, got []float64, frames, ms [][]float64) {
	t.Helper()
	require.Len(t, got, len(frames)*len(ms))
	for f, fr := range frames {
		for m, mask := range ms {
			var ref, scale float64
			for i, w := range mask {
				ref += w * fr[i]
				scale += math.Abs(w * fr[i])
			}
			g := got[f*len(ms)+m]
			if math.Abs(g-ref) > 1e-5*scale+1e-6 {
				t.Fatalf("frame %d mask %d: got %g, float64 reference %g", f, m, g, ref)
			}
		}
	}
}

func TestApplyRealMIBFiles(t *testing.T) {
	for _, name := range []string{
		"mib/001_4x2_6bit.mib",
		"mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib",
		"mib/Single_9_Frame_CounterDepth_6_Rows_256.mib",
		"mib/Single_9_Frame_CounterDepth_12_Rows_256.mib",
		"mib/Single_9_Frame_CounterDepth_24_Rows_256.mib",
		"mib/Quad_9_Frame_CounterDepth_6_Rows_256.mib",
		"mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib",
	} {
		t.Run(filepath.Base(name), func(t *testing.T) {
			path := testfiles.File(t, name)
			frames, sy, sx := mibFrames(t, path)
			cx, cy := float64(sx/2), float64(sy/2)
			r, ri, ro := float64(sy)/5, float64(sy)/8, float64(sy)/3
			dir := t.TempDir()
			out := filepath.Join(dir, "r.npy")
			stdout, stderr, code := run(t, "apply", path, "--cpus", "1",
				"--mask", fmt.Sprintf("disk:%g,%g,%g", cx, cy, r),
				"--mask", fmt.Sprintf("ring:%g,%g,%g,%g", cx, cy, ri, ro),
				"--mask", fmt.Sprintf("com:%g,%g", cx, cy),
				"--out", out, "--png", filepath.Join(dir, "img"))
			require.Zero(t, code, stderr)
			require.Contains(t, stdout, fmt.Sprintf("%d frames", len(frames)))
			shape, got := readResult(t, out)
			require.Equal(t, 5, shape[len(shape)-1])
			checkResult(t, got, frames, refMasks(sy, sx, cx, cy, r, ri, ro))
			pngs, _ := filepath.Glob(filepath.Join(dir, "img_*.png"))
			require.Len(t, pngs, 5)

			// The same masks from an NPY stack, and a random stack, in float64.
			rng := rand.New(rand.NewPCG(1, uint64(sy)))
			ms := refMasks(sy, sx, cx, cy, r, ri, ro)[:2]
			noise := make([]float64, sy*sx)
			for i := range noise {
				noise[i] = rng.Float64()*2 - 1
			}
			ms = append(ms, noise)
			var stack []float32
			for _, m := range ms {
				for _, w := range m {
					stack = append(stack, float32(w))
				}
			}
			for i, w := range stack[2*sy*sx:] {
				ms[2][i] = float64(w) // the reference uses the float32 weights
			}
			mfile := filepath.Join(dir, "masks.npy")
			require.NoError(t, stemnpy.WriteFile(mfile, []int{3, sy, sx}, stack))
			_, stderr, code = run(t, "apply", path, "--masks", mfile, "--float64", "--out", out, "-q")
			require.Zero(t, code, stderr)
			_, got = readResult(t, out)
			checkResult(t, got, frames, ms)
		})
	}
}

func TestApplyRawAndNPY(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	const n, sy, sx = 6, 20, 24
	frames := make([][]float64, n)
	rawBig := make([]byte, 0, n*sy*sx*4)
	npyData := make([]float32, 0, n*sy*sx)
	for f := range frames {
		frames[f] = make([]float64, sy*sx)
		for i := range frames[f] {
			v := rng.Uint32N(100000)
			frames[f][i] = float64(v)
			rawBig = binary.BigEndian.AppendUint32(rawBig, v)
			npyData = append(npyData, float32(v))
		}
	}
	raw := filepath.Join(dir, "scan.raw")
	require.NoError(t, os.WriteFile(raw, append(make([]byte, 16), rawBig...), 0o644))
	npy := filepath.Join(dir, "scan.npy")
	require.NoError(t, stemnpy.WriteFile(npy, []int{2, 3, sy, sx}, npyData))
	ms := refMasks(sy, sx, 12, 10, 5, 3, 9)
	masks := []string{"--mask", "disk:12,10,5", "--mask", "ring:12,10,3,9", "--mask", "com:12,10"}
	out := filepath.Join(dir, "r.npy")

	_, stderr, code := run(t, append([]string{"apply", raw, "--format", "raw", "--sig-shape", "20,24", "--dtype", "uint32",
		"--byte-order", "big", "--offset", "16", "--nav-shape", "3,2", "--out", out}, masks...)...)
	require.Zero(t, code, stderr)
	shape, got := readResult(t, out)
	require.Equal(t, []int{3, 2, 5}, shape)
	checkResult(t, got, frames, ms)

	stdout, stderr, code := run(t, append([]string{"apply", npy, "--out", out, "--cpus", "2", "--oversubscribe", "--workers"}, masks...)...)
	require.Zero(t, code, stderr)
	shape, got = readResult(t, out)
	require.Equal(t, []int{2, 3, 5}, shape)
	checkResult(t, got, frames, ms)
	// --workers: one line per worker after the summary, their frames adding up to the scan.
	lines := regexp.MustCompile(`(?m)^  worker (\d) \(cpu \d+\): (\d+) frames in \d+ claims, [0-9.]+ GB at [0-9.]+ GB/s, ready after [0-9.]+ s$`).FindAllStringSubmatch(stdout, -1)
	require.Len(t, lines, 2, stdout)
	total := 0
	for _, l := range lines {
		n, _ := strconv.Atoi(l[2])
		total += n
	}
	require.Equal(t, n, total, stdout)
}

func TestBadInputs(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	good, err := os.ReadFile(mib)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	truncated := write("truncated.mib", good[:len(good)-100])
	corrupt := bytes.Clone(good)
	copy(corrupt[len(good)/8*3:], "garbage")
	frameSize := len(good) / 8
	copy(corrupt[2*frameSize:], "XQ1,")
	corrupted := write("corrupt.mib", corrupt)
	unknown := write("scan.txt", []byte("hello, this is no detector file"))
	nanMasks := filepath.Join(dir, "nan.npy")
	nan := make([]float32, 256*256)
	nan[77] = float32(math.NaN())
	require.NoError(t, stemnpy.WriteFile(nanMasks, []int{256, 256}, nan))
	wrongMasks := filepath.Join(dir, "wrong.npy")
	require.NoError(t, stemnpy.WriteFile(wrongMasks, []int{2, 64, 64}, make([]float32, 2*64*64)))
	raw64 := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib")

	disk := []string{"--mask", "disk:128,128,20"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", append([]string{"apply", filepath.Join(dir, "nope.mib")}, disk...), "file does not exist"},
		{"truncated file, --offset", append([]string{"apply", truncated, "--offset", "384"}, disk...), "--sync-offset"},
		{"header mismatch", append([]string{"apply", corrupted}, disk...), "frame"},
		{"unknown format", append([]string{"apply", unknown}, disk...), "format"},
		{"nav shape vs frames", append([]string{"apply", mib, "--nav-shape", "3,9"}, disk...), "less than one scan row of 9; give --nav-shape"},
		{"R64 with --frame-header", append([]string{"apply", raw64, "--frame-header", "4"}, disk...), "--frame-header and --frame-footer: raw files only"},
		{"mask stack shape", []string{"apply", mib, "--masks", wrongMasks}, "shape"},
		{"NaN weight", []string{"apply", mib, "--masks", nanMasks}, "nan"},
		{"bad mask spec", []string{"apply", mib, "--mask", "ring:128,128,40,20"}, "ring"},
		{"unknown mask kind", []string{"apply", mib, "--mask", "blob:1,2"}, "blob"},
		{"no masks", []string{"apply", mib}, "no masks"},
		{"too many cpus", append([]string{"apply", mib, "--cpus", "999"}, disk...), "cores"},
		{"cpu not allowed", append([]string{"apply", mib, "--cpus", "4000,4001"}, disk...), "4000"},
		{"unsupported raw dtype", append([]string{"apply", truncated, "--format", "raw", "--sig-shape", "256,256", "--dtype", "complex64"}, disk...), "dtype"},
		{"gpus without a GPU", append([]string{"apply", mib, "--gpus", "1"}, disk...), "gpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outDir := t.TempDir()
			out := filepath.Join(outDir, "r.npy")
			args := append(append([]string{}, c.args...), "--out", out, "--png", filepath.Join(outDir, "img"))
			_, stderr, code := run(t, args...)
			require.Equal(t, 1, code, "exit code; stderr: %s", stderr)
			require.True(t, strings.HasPrefix(stderr, "stemdot: "), stderr)
			require.Contains(t, strings.ToLower(stderr), strings.ToLower(c.want))
			left, _ := os.ReadDir(outDir)
			require.Empty(t, left, "a failed run left files behind")
		})
	}
}

// --out and --png never replace an input, a read-only file or something that is not a
// regular file; the check comes before any work.
func TestOutputChecks(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	input := filepath.Join(dir, "img_0_disk.png") // a MIB file, detected by its content
	data, err := os.ReadFile(mib)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(input, data, 0o644))
	readOnly := filepath.Join(dir, "ro.npy")
	require.NoError(t, os.WriteFile(readOnly, []byte("keep"), 0o444))
	sub := filepath.Join(dir, "sub.npy")
	require.NoError(t, os.Mkdir(sub, 0o755))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", filepath.Join(dir, "r.npy"), "--png", filepath.Join(dir, "img")}, "is an input of this run"},
		{[]string{"--out", readOnly}, "not writable"},
		{[]string{"--out", sub}, sub + " exists and is a directory"},
		{[]string{"--mask", "com", "--out", filepath.Join(dir, "x.npy"), "--com-shifts", filepath.Join(dir, "x.npy")},
			"--com-shifts " + filepath.Join(dir, "x.npy") + " and --out " + filepath.Join(dir, "x.npy") + " are the same file"},
		{[]string{"--mask", "com", "--out", filepath.Join(dir, "x.npy"), "--com-shifts", filepath.Join(dir, ".", "sub", "..", "x.npy")}, "are the same file"},
		{[]string{"--out", filepath.Join(dir, "img_0_disk.png.npy"), "--png", filepath.Join(dir, "p"), "--mask", "com", "--com-shifts", filepath.Join(dir, "p_com_shift_y.png")},
			"--png " + filepath.Join(dir, "p_com_shift_y.png") + " and --com-shifts"},
		{[]string{"--out", "/dev/null"}, "give a path ending in .npy"},
		{[]string{"--out", filepath.Join(dir, "r.npy"), "--png", filepath.Join(dir, "nodir", "img")}, "does not exist"},
	} {
		_, stderr, code := run(t, append([]string{"apply", input, "--mask", "disk:128,128,20"}, c.args...)...)
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, c.want)
	}
	got, err := os.ReadFile(input)
	require.NoError(t, err)
	require.Equal(t, data, got, "the input is untouched")
	got, err = os.ReadFile(readOnly)
	require.NoError(t, err)
	require.Equal(t, "keep", string(got))
	_, err = os.Stat(filepath.Join(dir, "r.npy"))
	require.ErrorIs(t, err, fs.ErrNotExist, "no result when the PNG prefix is unusable")

	// A writable regular file is replaced and keeps its permissions; a new file is
	// readable by others (mode 0666 less the umask: 0644 under the usual umask 022).
	out := filepath.Join(dir, "r.npy")
	require.NoError(t, os.WriteFile(out, []byte("old"), 0o600))
	_, stderr, code := run(t, "apply", input, "--mask", "disk:128,128,20", "--out", out, "--png", filepath.Join(dir, "pic"))
	require.Zero(t, code, stderr)
	for p, want := range map[string]os.FileMode{out: 0o600, filepath.Join(dir, "pic_0_disk.png"): 0o644} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, want, st.Mode().Perm(), p)
	}
}

func TestInfoAndPlan(t *testing.T) {
	mib := testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib")
	stdout, stderr, code := run(t, "info", mib)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (2, 4)")
	require.Contains(t, stdout, "sig_shape:  (128, 256)")
	require.Contains(t, stdout, "uint16")

	stdout, stderr, code = run(t, "plan", "--json", "--topology", "16", "--gpu-inventory", "2x141GB", "--gpus", "2", mib)
	require.Zero(t, code, stderr)
	var plan struct {
		CoresUsable int `json:"cores_usable"`
		Workers     []struct {
			Kind string
			Core int
			GPU  *int
		}
		Partitions [][2]int
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &plan))
	require.Equal(t, 16, plan.CoresUsable)
	require.Len(t, plan.Workers, 16)
	for i, w := range plan.Workers {
		if i < 2 {
			require.Equal(t, "gpu", w.Kind)
			require.Equal(t, i, *w.GPU, "GPU workers spread over the GPUs")
		} else {
			require.Equal(t, "cpu", w.Kind)
		}
		require.Equal(t, i, w.Core, "one core per worker, the GPU workers' reserved")
	}
	// 8 frames for 16 workers: one frame per partition.
	require.Equal(t, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}}, plan.Partitions)

	stdout, stderr, code = run(t, "plan", "--cpus", "1")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "plan: 1 worker (0 GPU, 1 CPU)")

	// --gpus auto plans by the job: without masks, GPU workers wherever they fit; with
	// the job's one mask on 8 frames, none (by the speed model), as apply would run it.
	described := []string{"plan", "--topology", "16", "--gpu-inventory", "1x141GB", "--gpus", "auto", mib}
	stdout, stderr, code = run(t, described...)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "reserved for GPU workers: cores 0, 1, 2, 3")
	stdout, stderr, code = run(t, append(described, "--mask", "disk:64,64,20")...)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "plan: 16 workers (0 GPU, 16 CPU)")
	require.Contains(t, stdout, "warning: gpus auto: 0 of the 4 GPU workers that fit, by speed")
	_, stderr, code = run(t, "plan", "--mask", "disk:1,1,1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--mask and --masks need the dataset FILE")
	_, stderr, code = run(t, "plan", mib, "--mask", "disk:1,1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "disk:1,1")
}

// The rough edges of issue #9, as a new user meets them.
func TestFrontDoor(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	// A MIB without its .hdr (002's frame timestamps show no rows): a warning naming
	// --nav-shape, and info marks the guess.
	bare := filepath.Join(dir, "bare.mib")
	data, err := os.ReadFile(testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bare, data, 0o644))
	stdout, stderr, code := run(t, "info", bare)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (1, 8)  (guessed: give --nav-shape)")
	require.Contains(t, stderr, "stemdot: warning: "+bare+": the file gives no scan shape, read as 1 row of 8 frames: give --nav-shape (e.g. 2,4)")
	stdout, stderr, code = run(t, "info", bare, "--nav-shape", "2,4")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (2, 4)\n")
	require.Empty(t, stderr)

	for _, c := range []struct {
		args []string
		want string
	}{
		// --out must be NPY.
		{[]string{"apply", mib, "--mask", "com", "--out", filepath.Join(dir, "r.png")}, "--out " + filepath.Join(dir, "r.png") + ": results are written as NPY or HDF5: give a path ending in .npy, or in .h5, .hdf5 or .hspy"},
		// Messages name flags, not Go fields.
		{[]string{"info", bare, "--format", "raw"}, "give --sig-shape"},
		{[]string{"info", bare, "--format", "tiff"}, `unknown --format "tiff"`},
		{[]string{"info", bare, "--sig-shape", "4"}, `--sig-shape "4": want 2 comma-separated sizes`},
		// Unknown flags get suggestions.
		{[]string{"apply", mib, "--nav-shap", "2,4"}, "unknown flag: --nav-shap; did you mean --nav-shape?"},
		{[]string{"plan", "--cpu", "1"}, "did you mean --cpus"},
		// synth into a missing directory names the directory.
		{[]string{"synth", "--out", filepath.Join(dir, "nodir", "s.mib"), "--nav-shape", "2,2", "--sig-shape", "8,8"}, "directory " + filepath.Join(dir, "nodir") + " does not exist"},
		// --com-shifts needs com masks.
		{[]string{"apply", mib, "--mask", "disk:1,1,1", "--out", filepath.Join(dir, "r.npy"), "--com-shifts", filepath.Join(dir, "s.npy")}, "--com-shifts: the masks hold no centre-of-mass set"},
	} {
		_, stderr, code := run(t, c.args...)
		require.Equal(t, 1, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
		require.NotContains(t, stderr, "SigShape")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.npy"))
	require.Empty(t, left)

	// --gpus auto without a GPU (or without CUDA): CPU workers and a one-line note.
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		stdout, stderr, code = run(t, "plan", "--gpus", "auto", "--cpus", "1")
		require.Zero(t, code, stderr)
		require.Contains(t, stdout, "warning: gpus auto: ")
		require.Contains(t, stdout, "CPU workers only")
		out := filepath.Join(dir, "auto.npy")
		_, stderr, code = run(t, "apply", mib, "--mask", "disk:128,128,20", "--gpus", "auto", "--out", out)
		require.Zero(t, code, stderr)
		require.Equal(t, 1, strings.Count(stderr, "stemdot: warning: gpus auto: "), stderr)
	}

	// doc/cli.md's plan example runs on any machine.
	_, stderr, code = run(t, "plan", mib, "--cpus", "1")
	require.Zero(t, code, stderr)
}

// --com-shifts writes y/x shift maps in pixels: moments divided by the sum, about the
// documented reference point (sig_x/2, sig_y/2) = (128, 128), checked against a float64
// reference from the file's bytes; PNGs of both come with --png.
func TestCOMShifts(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	frames, sigY, sigX := mibFrames(t, mib)
	dir := t.TempDir()
	out, shifts := filepath.Join(dir, "r.npy"), filepath.Join(dir, "s.npy")
	_, stderr, code := run(t, "apply", mib, "--nav-shape", "2,4", "--mask", "com", "--float64", "--out", out, "--com-shifts", shifts, "--png", filepath.Join(dir, "img"))
	require.Zero(t, code, stderr)
	shape, got := readResult(t, shifts)
	require.Equal(t, []int{2, 4, 2}, shape)
	for f, fr := range frames {
		var s, my, mx float64
		for i, v := range fr {
			s += v
			my += (float64(i/sigX) - float64(sigY/2)) * v
			mx += (float64(i%sigX) - float64(sigX/2)) * v
		}
		require.InDelta(t, my/s, got[2*f], 1e-9, "frame %d y", f)
		require.InDelta(t, mx/s, got[2*f+1], 1e-9, "frame %d x", f)
	}
	// The PNGs: the two shift maps instead of the com masks' raw images, each scan
	// position a block of 128×128 pixels (the short side 2 scaled to 256), the shift
	// mapped from its minimum (0) to its maximum (255).
	pngs, _ := filepath.Glob(filepath.Join(dir, "img_*.png"))
	require.ElementsMatch(t, []string{filepath.Join(dir, "img_com_shift_y.png"), filepath.Join(dir, "img_com_shift_x.png")}, pngs)
	for axis, name := range []string{"y", "x"} {
		f, err := os.Open(filepath.Join(dir, "img_com_shift_"+name+".png"))
		require.NoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err)
		require.Equal(t, image.Rect(0, 0, 4*128, 2*128), img.Bounds())
		lo, hi := math.Inf(1), math.Inf(-1)
		for f := range frames {
			lo, hi = math.Min(lo, got[2*f+axis]), math.Max(hi, got[2*f+axis])
		}
		for f := range frames {
			want := uint8(math.Round((got[2*f+axis] - lo) / (hi - lo) * 255))
			for _, d := range [][2]int{{0, 0}, {127, 127}, {5, 90}} {
				x, y := f%4*128+d[0], f/4*128+d[1]
				require.Equal(t, want, img.(*image.Gray).GrayAt(x, y).Y, "shift %s, frame %d, pixel (%d, %d)", name, f, x, y)
			}
		}
	}
}

// TestMessagesReadWell checks messages a new user met: no doubled prefixes, counts in
// the right number, no hint where none is needed.
func TestMessagesReadWell(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.raw")
	require.NoError(t, os.WriteFile(one, make([]byte, 16), 0o644))
	_, stderr, code := run(t, "apply", one, "--sig-shape", "4,4", "--dtype", "uint8", "--mask", "disk:1,2", "--out", filepath.Join(dir, "x.npy"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `stemdot: mask "disk:1,2": got 2 arguments`)
	require.NotContains(t, stderr, "mask disk:1,2:")
	require.NotContains(t, stderr, "no scan shape", "a single frame needs no --nav-shape hint")

	_, stderr, code = run(t, "apply", one, "--sig-shape", "4,4", "--dtype", "uint8", "--mask", "point:1,1", "--out", filepath.Join(dir, "x.npy"), "--workers", "--cpus", "1")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr)
	stdout, stderr, code := run(t, "plan", "--topology", "1", "--cpus", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "plan: 1 worker (0 GPU, 1 CPU) on 1 usable core\n")
}

// TestRawMessages: a file of unknown extension given --sig-shape and --dtype is read as
// raw; the raw options' errors name flags, not option keys or Go values.
func TestRawMessages(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "scan.dat")
	require.NoError(t, os.WriteFile(data, make([]byte, 2*16), 0o644))
	stdout, stderr, code := run(t, "info", data, "--sig-shape", "4,4", "--dtype", "uint8")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "raw")
	_, stderr, code = run(t, "info", data)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "or any file given --sig-shape and --dtype")
	_, stderr, code = run(t, "info", data, "--format", "raw", "--dtype", "uint8")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give --sig-shape (sig_y,sig_x in pixels, e.g. 256,256)")
	_, stderr, code = run(t, "info", data, "--sig-shape", "4,4", "--dtype", "uint8", "--offset", "99999999999")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "offset 99999999999 (--offset) is at or past the end of the 32-byte file")

	// Raw options on a file that describes itself: read, with a warning naming the flag.
	npy := filepath.Join(dir, "scan.npy")
	_, stderr, code = run(t, "synth", "--out", npy, "--nav-shape", "2,2", "--sig-shape", "8,8")
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code = run(t, "info", npy, "--sig-shape", "4,4", "--dataset-path", "/x")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "sig_shape:  (8, 8)")
	require.Equal(t, "stemdot: warning: "+npy+": --sig-shape applies to raw files only and was ignored: the npy file gives sig shape (8, 8)\n"+
		"stemdot: warning: "+npy+": --dataset-path applies to HDF5 files only and was ignored\n", stderr)
}

// TestShapeFlagsSayTheForm: a shape written another way than the help's Y,X (64x64, a
// common habit) is refused with the form and an example, in every command.
func TestShapeFlagsSayTheForm(t *testing.T) {
	dir := t.TempDir()
	npy := filepath.Join(dir, "scan.npy")
	_, stderr, code := run(t, "synth", "--out", npy, "--nav-shape", "4,4", "--sig-shape", "8,8")
	require.Equal(t, 0, code, stderr)
	nav := `--nav-shape "64x64": want whole sizes separated by commas, rows first: Y,X (e.g. 64,64), N (e.g. 4096) or Z,Y,X (e.g. 8,64,64)`
	for _, args := range [][]string{
		{"info", npy, "--nav-shape", "64x64"},
		{"apply", npy, "--nav-shape", "64x64", "--mask", "point:1,1", "--out", filepath.Join(dir, "r.npy")},
		{"synth", "--out", filepath.Join(dir, "s.npy"), "--nav-shape", "64x64"},
	} {
		_, stderr, code := run(t, args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Equal(t, "stemdot: "+nav+"\n", stderr, "%v", args)
	}
	_, stderr, code = run(t, "synth", "--out", filepath.Join(dir, "s.npy"), "--sig-shape", "128x128")
	require.Equal(t, 1, code)
	require.Equal(t, "stemdot: --sig-shape \"128x128\": want Y,X: two whole sizes separated by a comma, rows first (e.g. 256,256)\n", stderr)
}

// TestVersion: --version (and -v) print the version of the C header and the Python
// package (the root package's test checks that they agree) and the build's flavour:
// without CUDA here, with HDF5 or not (hdf5Flavour, #17r D11).
func TestVersion(t *testing.T) {
	h, err := os.ReadFile("../../include/stemdot.h")
	require.NoError(t, err)
	m := regexp.MustCompile(`#define STEMDOT_VERSION "([^"]+)"`).FindSubmatch(h)
	require.NotNil(t, m)
	for _, flag := range []string{"--version", "-v"} {
		stdout, stderr, code := run(t, flag)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "stemdot "+string(m[1])+" (CPU-only: built without CUDA; "+hdf5Flavour(t)+")\n", stdout)
	}
}

// TestThreeDInputNavShape: a 3-D NPY file of frames (n, sig_y, sig_x) has nav shape (n,)
// (as in LiberTEM and Python's apply_masks on such an array), without a warning: apply
// writes results of shape (n, n_masks), equal to a float64 reference.
func TestThreeDInputNavShape(t *testing.T) {
	const n, sy, sx = 6, 5, 4
	frames := make([]float64, n*sy*sx)
	for i := range frames {
		frames[i] = float64(i%7) - 2.25
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "frames.npy")
	require.NoError(t, stemnpy.WriteFile(path, []int{n, sy, sx}, frames))
	stdout, stderr, code := run(t, "info", path)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stderr)
	require.Contains(t, stdout, "nav_shape:  (6)\n")
	shape, got, stderr := applyCase(t, path, "--mask", "point:1,2", "--mask", "com", "--float64")
	require.Empty(t, stderr)
	require.Equal(t, []int{n, 4}, shape)
	for f := range n {
		fr := frames[f*sy*sx : (f+1)*sy*sx]
		want := []float64{fr[2*sx+1], 0, 0, 0}
		for i, v := range fr {
			want[1] += v
			want[2] += float64(i/sx-sy/2) * v
			want[3] += float64(i%sx-sx/2) * v
		}
		for m := range 4 {
			require.InDelta(t, want[m], got[f*4+m], 1e-12, "frame %d mask %d", f, m)
		}
	}
}

// TestGPUsWithoutCUDA: GPU workers asked for by count or list in a build without CUDA
// (the test's binary) are refused, saying how to get a CUDA build and naming --gpus auto.
func TestGPUsWithoutCUDA(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	for _, args := range [][]string{
		{"plan", "--gpus", "1"},
		{"apply", mib, "--nav-shape", "2,4", "--mask", "com", "--gpus", "0,0", "--out", filepath.Join(t.TempDir(), "r.npy")},
	} {
		_, stderr, code := run(t, args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "GPU workers requested, but stemdot was built without CUDA support: build it with CUDA "+
			"(`make` where nvcc is found, which scripts/install-cuda-toolkit.sh installs; for Python, pip install ./python with "+
			"STEMDOT_GO_TAGS=cuda after `make kernels`), or give --gpus auto to use GPUs only where there are", "%v", args)
	}
}

// TestPlanMessagesNameFlags: planner refusals name the CLI's flags.
func TestPlanMessagesNameFlags(t *testing.T) {
	_, stderr, code := run(t, "plan", "--max-workers-per-gpu", "-3", "--gpus", "auto")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--max-workers-per-gpu -3: want a count >= 0")
	_, stderr, code = run(t, "plan", "--topology", "4", "--cpus", "0", "--gpus", "auto")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--gpus auto uses no GPU here (")
	require.Contains(t, stderr, "--cpus 0 leaves nothing to run on: give --cpus 1 or more")
}

// TestFloat64Weights: with --float64, mask weights given in float64 (an NPY stack of
// random float64 weights, centre-of-mass moments about a centre between pixels) count at
// float64 precision, not rounded to float32: the results equal a float64 reference to
// 1e-11 of Σ|w·x| (float64 sums in another order), where float32-rounded weights are off
// by more than 1e-9.
func TestFloat64Weights(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	frames, sy, sx := mibFrames(t, path)
	p := sy * sx
	rng := rand.New(rand.NewPCG(64, 1))
	stack := make([]float64, 3*p)
	for i := range stack {
		stack[i] = rng.NormFloat64()
	}
	dir := t.TempDir()
	mpath := filepath.Join(dir, "m64.npy")
	require.NoError(t, stemnpy.WriteFile(mpath, []int{3, sy, sx}, stack))
	const cx, cy = 127.3, 128.6
	com := make([]float64, 3*p)
	for i := range p {
		com[i], com[p+i], com[2*p+i] = 1, float64(i/sx)-cy, float64(i%sx)-cx
	}
	weights := append(stack, com...)
	shape, got, _ := applyCase(t, path, "--nav-shape", "2,4", "--float64", "--masks", mpath,
		"--mask", fmt.Sprintf("com:%g,%g", cx, cy))
	require.Equal(t, []int{2, 4, 6}, shape)
	worst32 := 0.0
	for f, fr := range frames {
		for m := range 6 {
			var want, abs, want32 float64
			for i, x := range fr {
				w := weights[m*p+i]
				want += w * x
				abs += math.Abs(w * x)
				want32 += float64(float32(w)) * x
			}
			require.InDelta(t, want, got[f*6+m], 1e-11*abs, "frame %d mask %d", f, m)
			worst32 = max(worst32, math.Abs(want32-want)/abs)
		}
	}
	require.Greater(t, worst32, 1e-9, "float32-rounded weights must be off, else this test cannot fail")
}
