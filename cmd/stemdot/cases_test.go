package main

// The failing real-world cases of ../shared/cases, ported from their numpy generators
// (case.py) to Go: the same inputs, built here, run through the CLI and checked against a
// float64 mask-dot reference computed here.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// caseMIBHeader returns a 384-byte single-chip MIB frame header modelled on the real file
// 001_4x2_6bit.mib (mibgen.py's frame_header): its fields with the frame number, size,
// pixel type and counter depth replaced.
func caseMIBHeader(t *testing.T, seq, width, height int, ptype string) []byte {
	t.Helper()
	real, err := os.ReadFile(testfiles.File(t, "mib/001_4x2_6bit.mib"))
	require.NoError(t, err)
	text, _, _ := bytes.Cut(real[:384], []byte{0})
	f := strings.Split(strings.TrimRight(string(text), ","), ",")
	f[1], f[2], f[4], f[5], f[6] = fmt.Sprintf("%06d", seq), "00384", fmt.Sprintf("%04d", width), fmt.Sprintf("%04d", height), ptype
	f[len(f)-1] = map[string]string{"U08": "6", "U16": "12", "U32": "24"}[ptype]
	h := []byte(strings.Join(f, ",") + ",")
	require.LessOrEqual(t, len(h), 384)
	return append(h, make([]byte, 384-len(h))...)
}

// writeCaseMIB writes frames (n × h·w counts) as a big-endian U08 or U16 MIB file.
func writeCaseMIB(t *testing.T, path string, frames [][]float64, h, w int, ptype string) []byte {
	t.Helper()
	var b []byte
	for i, fr := range frames {
		b = append(b, caseMIBHeader(t, i+1, w, h, ptype)...)
		for _, v := range fr {
			if ptype == "U08" {
				b = append(b, uint8(v))
			} else {
				b = binary.BigEndian.AppendUint16(b, uint16(v))
			}
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return b
}

// writeCaseHdr copies the real .hdr of file 002, with the values of set replaced (or
// added before End) and the keys in drop left out (mibgen.py's write_hdr).
func writeCaseHdr(t *testing.T, path string, set map[string]string, drop ...string) {
	t.Helper()
	raw, err := os.ReadFile(testfiles.File(t, "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr"))
	require.NoError(t, err)
	var out []string
	done := map[string]bool{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.HasPrefix(line, "End") {
			for k, v := range set {
				if !done[k] {
					out = append(out, k+":\t"+v)
				}
			}
			out = append(out, "End\t")
			break
		}
		k, _, ok := strings.Cut(line, "\t")
		k = strings.TrimSuffix(k, ":")
		switch {
		case ok && contains(drop, k):
			continue
		case ok && set[k] != "":
			out = append(out, k+":\t"+set[k])
			done[k] = true
		default:
			out = append(out, line)
		}
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// poissonish returns n frames of size pixels of small random counts.
func poissonish(seed uint64, n, size int) [][]float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	frames := make([][]float64, n)
	for f := range frames {
		frames[f] = make([]float64, size)
		for i := range frames[f] {
			frames[f][i] = float64(rng.IntN(9))
		}
	}
	return frames
}

// diskMask is mibgen.py's disk: pixels with (x-cx)²+(y-cy)² ≤ r².
func diskMask(h, w int, cx, cy, r float64) []float64 {
	m := make([]float64, h*w)
	for y := range h {
		for x := range w {
			if (float64(x)-cx)*(float64(x)-cx)+(float64(y)-cy)*(float64(y)-cy) <= r*r {
				m[y*w+x] = 1
			}
		}
	}
	return m
}

func onesMask(n int) []float64 {
	m := make([]float64, n)
	for i := range m {
		m[i] = 1
	}
	return m
}

// writeMaskNPY writes masks (each h·w) as a float32 NPY stack.
func writeMaskNPY(t *testing.T, path string, h, w int, ms ...[]float64) {
	t.Helper()
	var data []float32
	for _, m := range ms {
		for _, v := range m {
			data = append(data, float32(v))
		}
	}
	require.NoError(t, stemnpy.WriteFile(path, []int{len(ms), h, w}, data))
}

// applyCase runs apply and returns the result's shape and values, and stderr; it fails
// the test when apply fails.
func applyCase(t *testing.T, args ...string) ([]int, []float64, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "o.npy")
	_, stderr, code := run(t, append(append([]string{"apply"}, args...), "--out", out, "-q")...)
	require.Zero(t, code, stderr)
	shape, got := readResult(t, out)
	return shape, got, stderr
}

// refuseCase runs apply, requires exit 1 with an error containing want, and no output.
func refuseCase(t *testing.T, want string, args ...string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "o.npy")
	_, stderr, code := run(t, append(append([]string{"apply"}, args...), "--out", out, "-q")...)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, want)
	require.NoFileExists(t, out)
}

// Case 01-surplus-frames: a 2×4 scan with 2 surplus frames at the end.
func TestCaseSurplusFrames(t *testing.T) {
	dir := t.TempDir()
	real, sy, sx := mibFrames(t, testfiles.File(t, "mib/001_4x2_6bit.mib"))
	frames := append(append([][]float64{}, real...), real[:2]...)
	ms := [][]float64{diskMask(sy, sx, 128, 128, 20), onesMask(sy * sx)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, sy, sx, ms...)
	for _, c := range []struct {
		name  string
		hdr   map[string]string
		drop  []string
		extra []string
	}{
		{"a", map[string]string{"ScanX": "4", "ScanY": "2", "Frames in Acquisition (Number)": "10", "Frames per Trigger (Number)": "4"}, nil, nil},
		{"b", map[string]string{"Frames in Acquisition (Number)": "8", "Frames per Trigger (Number)": "4"}, []string{"ScanX", "ScanY"}, nil},
		{"c", nil, nil, []string{"--nav-shape", "2,4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mib := filepath.Join(dir, c.name+".mib")
			writeCaseMIB(t, mib, frames, sy, sx, "U08")
			if c.hdr != nil {
				writeCaseHdr(t, filepath.Join(dir, c.name+".hdr"), c.hdr, c.drop...)
			}
			shape, got, stderr := applyCase(t, append([]string{mib, "--masks", masks}, c.extra...)...)
			require.Equal(t, []int{2, 4, 2}, shape)
			checkResult(t, got, real, ms)
			// 10 frames are also 2 rows of 4+1: too few rows to tell flyback frames from
			// surplus ones without the frame headers (#17.6).
			require.Contains(t, stderr, "holds 10 frames: the last 2 are surplus and not read (give --flyback end or start if each scan row has a flyback frame, or --sync-offset N if the surplus frames are at the start)")
		})
	}
	t.Run("sync offset skips leading frames", func(t *testing.T) {
		mib := filepath.Join(dir, "lead.mib")
		writeCaseMIB(t, mib, append(append([][]float64{}, real[6:]...), real...), sy, sx, "U08")
		shape, got, stderr := applyCase(t, mib, "--masks", masks, "--nav-shape", "2,4", "--sync-offset", "2")
		require.Equal(t, []int{2, 4, 2}, shape)
		checkResult(t, got, real, ms)
		require.Contains(t, stderr, "the first 2 frames of the file are skipped")
	})
	t.Run("negative sync offset inserts blank frames", func(t *testing.T) {
		mib := filepath.Join(dir, "c.mib")
		writeCaseMIB(t, mib, frames, sy, sx, "U08")
		shape, got, stderr := applyCase(t, mib, "--masks", masks, "--nav-shape", "2,4", "--sync-offset", "-3")
		require.Equal(t, []int{2, 4, 2}, shape)
		want := append([][]float64{make([]float64, sy*sx), make([]float64, sy*sx), make([]float64, sy*sx)}, frames[:5]...)
		checkResult(t, got, want, ms)
		require.Contains(t, stderr, "3 blank frames are inserted")
		require.Contains(t, stderr, "the last 5 are surplus and not read\n", "no hint at the option given")
	})
	t.Run("one blank frame", func(t *testing.T) {
		mib := filepath.Join(dir, "c.mib")
		_, _, stderr := applyCase(t, mib, "--masks", masks, "--nav-shape", "2,4", "--sync-offset", "-1")
		require.Contains(t, stderr, "sync offset -1: 1 blank frame is inserted")
	})
	t.Run("refusals name the option", func(t *testing.T) {
		mib := filepath.Join(dir, "c.mib")
		refuseCase(t, "--sync-offset", mib, "--masks", masks, "--sync-offset", "10")
		// The most negative int: its negation overflows (#17.7).
		refuseCase(t, "sync offset -9223372036854775808 (--sync-offset) is outside -9 to 9: the file holds 10 frames", mib, "--masks", masks, "--sync-offset=-9223372036854775808")
		refuseCase(t, "to skip leading frames give --sync-offset N", mib, "--masks", masks, "--offset", "768")
	})
}

// Case 03-pixel-trigger-fpt0: .hdr without ScanX/ScanY and "Frames per Trigger: 0".
func TestCasePixelTriggerFPT0(t *testing.T) {
	const w, h, s = 4, 3, 64
	dir := t.TempDir()
	frames := poissonish(3, w*h, s*s)
	ms := [][]float64{onesMask(s * s), diskMask(s, s, 32, 32, 5)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, s, s, ms...)
	for _, fpt := range []string{"0", "1"} {
		mib := filepath.Join(dir, "fpt"+fpt+".mib")
		writeCaseMIB(t, mib, frames, s, s, "U16")
		writeCaseHdr(t, filepath.Join(dir, "fpt"+fpt+".hdr"), map[string]string{"Frames in Acquisition (Number)": "12", "Frames per Trigger (Number)": fpt}, "ScanX", "ScanY")
		stdout, stderr, code := run(t, "info", mib)
		require.Zero(t, code, stderr)
		require.Contains(t, stdout, "nav_shape:  (1, 12)")
		shape, got, _ := applyCase(t, mib, "--masks", masks)
		require.Equal(t, []int{1, 12, 2}, shape)
		checkResult(t, got, frames, ms)
		shape, got, _ = applyCase(t, mib, "--masks", masks, "--nav-shape", "3,4")
		require.Equal(t, []int{3, 4, 2}, shape)
		checkResult(t, got, frames, ms)
	}
	mib := filepath.Join(dir, "scan.mib")
	writeCaseMIB(t, mib, frames, s, s, "U16")
	writeCaseHdr(t, filepath.Join(dir, "scan.hdr"), map[string]string{"ScanX": "4", "ScanY": "3", "Frames in Acquisition (Number)": "12", "Frames per Trigger (Number)": "0"})
	shape, got, _ := applyCase(t, mib, "--masks", masks)
	require.Equal(t, []int{3, 4, 2}, shape)
	checkResult(t, got, frames, ms)
	// Frames in Acquisition 0: not given either.
	writeCaseHdr(t, filepath.Join(dir, "scan.hdr"), map[string]string{"Frames in Acquisition (Number)": "0", "Frames per Trigger (Number)": "1"}, "ScanX", "ScanY")
	stdout, stderr, code := run(t, "info", mib)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (1, 12)")
	// The case's committed input opens too.
	if in := filepath.Join(testfiles.Dir(t), "..", "cases", "03-pixel-trigger-fpt0", "inputs", "fpt0.mib"); fileExists(in) {
		stdout, stderr, code := run(t, "info", in)
		require.Zero(t, code, stderr)
		require.Contains(t, stdout, "frames:     12")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Case 05-interrupted: a 4×3 scan announced in the .hdr, the file cut after 7.5 frames
// or 7 whole frames, with and without the .hdr.
func TestCaseInterrupted(t *testing.T) {
	const w, h, s = 4, 3, 64
	dir := t.TempDir()
	frames := poissonish(5, w*h, s*s)
	ms := [][]float64{onesMask(s * s), diskMask(s, s, 32, 32, 6)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, s, s, ms...)
	full := writeCaseMIB(t, filepath.Join(dir, "full.mib"), frames, s, s, "U16")
	stride := 384 + s*s*2
	hdr := map[string]string{"ScanX": "4", "ScanY": "3", "Frames in Acquisition (Number)": "12", "Frames per Trigger (Number)": "4"}
	write := func(name string, n int, withHdr bool) string {
		p := filepath.Join(dir, name+".mib")
		require.NoError(t, os.WriteFile(p, full[:n], 0o644))
		if withHdr {
			writeCaseHdr(t, filepath.Join(dir, name+".hdr"), hdr)
		}
		return p
	}
	cut := write("cut", 7*stride+stride/2, true)
	cut7 := write("cut7", 7*stride, true)
	cutNoHdr := write("cutnohdr", 7*stride+stride/2, false)
	for _, c := range []struct {
		name      string
		args      []string
		shape     []int
		frames    int
		notes     []string
		notNoted  string
		infoFrame string
	}{
		{"cut", []string{cut}, []int{1, 4, 2}, 4, []string{"the file ends inside frame 7 (", "reading the 1 complete scan row of 4 (nav shape (1, 4)); 5 positions are missing, and the 3 frames of the incomplete last row not read"}, "", "frames:     4"},
		{"cut7", []string{cut7}, []int{1, 4, 2}, 4, []string{"reading the 1 complete scan row of 4"}, "ends inside", "frames:     4"},
		{"cutnohdr", []string{cutNoHdr}, []int{1, 7, 2}, 7, []string{"the file ends inside frame 7"}, "", "frames:     7"},
		{"cutnohdr --nav-shape 7", []string{cutNoHdr, "--nav-shape", "7"}, []int{7, 2}, 7, nil, "", "nav_shape:  (7)"},
		{"cut7 --nav-shape 7", []string{cut7, "--nav-shape", "7"}, []int{7, 2}, 7, nil, "ends inside", "nav_shape:  (7)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := run(t, append([]string{"info"}, c.args...)...)
			require.Zero(t, code, stderr)
			require.Contains(t, stdout, c.infoFrame)
			shape, got, stderr := applyCase(t, append(c.args, "--masks", masks)...)
			require.Equal(t, c.shape, shape)
			checkResult(t, got, frames[:c.frames], ms)
			for _, n := range c.notes {
				require.Contains(t, stderr, n)
			}
			if c.notNoted != "" {
				require.NotContains(t, stderr, c.notNoted)
			}
		})
	}
	refuseCase(t, "less than one scan row of 8; give --nav-shape", cutNoHdr, "--masks", masks, "--nav-shape", "2,8")
	// A nav shape that contradicts the .hdr's scan shape (#17.5).
	refuseCase(t, "nav shape (2, 8) (--nav-shape) has 16 positions, but the file's scan shape (3, 4) from cut7.hdr (ScanY=3, ScanX=4) has 12 and the file holds 7 frames: give --nav-shape of 12 positions (e.g. 3,4), or of 7 to read each of its frames as a scan position, or leave it out; --frames FIRST,COUNT reads part of the scan",
		cut7, "--masks", masks, "--nav-shape", "2,8")
}

// Case 16-raw-frame-gap: raw float32 128×128 frames, each followed by a 1024-byte footer.
func TestCaseRawFrameGap(t *testing.T) {
	const s, gap = 128, 1024
	dir := t.TempDir()
	ms := [][]float64{onesMask(s * s), diskMask(s, s, 64, 64, 10)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, s, s, ms...)
	for _, c := range []struct {
		n   int
		nav string
	}{{64, "8,8"}, {16, "4,4"}} {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.n), 2))
			frames := make([][]float64, c.n)
			var b []byte
			for f := range frames {
				frames[f] = make([]float64, s*s)
				for i := range frames[f] {
					v := rng.Float32() * 100
					frames[f][i] = float64(v)
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
				}
				for range gap / 4 {
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(1e30))
				}
			}
			raw := filepath.Join(dir, fmt.Sprintf("g%d.raw", c.n))
			require.NoError(t, os.WriteFile(raw, b, 0o644))
			base := []string{raw, "--masks", masks, "--sig-shape", "128,128", "--dtype", "float32"}
			// Read as plain frames: 64 records happen to be 65 whole frames, which a raw
			// file cannot tell from the truth; with the scan shape it is refused.
			if c.n == 16 {
				refuseCase(t, "--frame-header and --frame-footer", base...)
			}
			refuseCase(t, "--frame-header and --frame-footer", append(base, "--nav-shape", c.nav)...)
			for _, extra := range [][]string{{"--frame-footer", "1024"}, {"--frame-footer", "1KiB", "--nav-shape", c.nav}} {
				shape, got, _ := applyCase(t, append(base, extra...)...)
				require.Equal(t, c.n*2, len(got), "shape %v", shape)
				checkResult(t, got, frames, ms)
			}
		})
	}
}

// deepSparseNPY writes n one-pixel masks of 256×256 as a float32 NPY whose zeros are
// holes (a sparse file): mask k selects pixel k mod 65536 with weight 1 + k/65536.
func deepSparseNPY(t *testing.T, path string, n int) {
	t.Helper()
	const px = 256 * 256
	dict := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 256, 256), }", n)
	dict += strings.Repeat(" ", 64-(10+len(dict)+1)%64) + "\n"
	head := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), byte(len(dict)>>8))
	head = append(head, dict...)
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(head)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(len(head))+int64(n)*px*4))
	for k := range n {
		w := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(1+k/px)))
		_, err := f.WriteAt(w, int64(len(head))+(int64(k)*px+int64(k%px))*4)
		require.NoError(t, err)
	}
}

// peakRSS runs apply and returns its peak resident memory (getrusage ru_maxrss) in bytes.
func peakRSS(t *testing.T, args ...string) int64 {
	t.Helper()
	cmd := exec.Command(stemdotBin, append([]string{"apply"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// Case 27-deep-sparse-stack: thousands of one-pixel masks stay sparse from the NPY file
// to the kernel. 16384 masks are 4 GiB dense (13.6-17.7 GiB of peak memory at 36eb3e8);
// held in CSR form they take 192 KiB. The peak memory above a one-mask run must stay
// within twice the CSR stack, the result and the mask names (Go's collector lets the heap
// grow to twice its live data), plus the fixed buffers: the 1 MiB NPY read block and each
// worker's tile of float64 rows (at most 1 MiB).
func TestCaseDeepSparseStack(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	real, _, _ := mibFrames(t, mib)
	dir := t.TempDir()
	base := filepath.Join(dir, "deep1.npy")
	deepSparseNPY(t, base, 1)
	baseline := peakRSS(t, mib, "--masks", base, "--nav-shape", "2,4", "--cpus", "0,1", "--out", filepath.Join(dir, "b.npy"), "-q")
	sizes := []int{4096, 16384}
	if os.Getenv("STEMDOT_CASES_OOM") == "1" { // reads an 8 GiB sparse file: about a minute
		sizes = append(sizes, 32767)
	}
	for _, n := range sizes {
		path := filepath.Join(dir, fmt.Sprintf("deep%d.npy", n))
		deepSparseNPY(t, path, n)
		out := filepath.Join(dir, "o.npy")
		peak := peakRSS(t, mib, "--masks", path, "--nav-shape", "2,4", "--cpus", "0,1", "--out", out, "-q")
		shape, got := readResult(t, out)
		require.Equal(t, []int{2, 4, n}, shape)
		for f := range 8 {
			for k := range n {
				want := real[f][k%65536] * float64(1+k/65536)
				require.Equal(t, want, got[f*n+k], "frame %d mask %d", f, k)
			}
		}
		csr := int64(n)*8 + int64(n+1)*4
		result := int64(8 * n * 4)
		names := int64(n) * (16 + int64(len(fmt.Sprintf("deep%d[%d]", n, n))))
		bound := 2*(csr+result+names) + (1 << 20) + 2*(1<<20)
		t.Logf("%d masks (%.1f GiB dense): peak RSS %.1f MiB, %.2f MiB above one mask; CSR %d KiB, result %d KiB, bound %.2f MiB",
			n, float64(n)*65536*4/(1<<30), float64(peak)/(1<<20), float64(peak-baseline)/(1<<20), csr>>10, result>>10, float64(bound)/(1<<20))
		require.Less(t, peak-baseline, bound)
		require.NoError(t, os.Remove(path))
	}
	// 32768 masks of 256×256 exceed the 2³¹−1 weights of a stack: refused up front.
	path := filepath.Join(dir, "deep32768.npy")
	deepSparseNPY(t, path, 32768)
	refuseCase(t, "32768 masks of 256×256 pixels are too many: a stack holds at most 2³¹−1 weights, 32767 masks of this sig shape; split the stack", mib, "--masks", path, "--nav-shape", "2,4")
}

// Case 22-oversized-partition-tile: frames of 1 GiB (16384×32768 uint16) under a 4 GiB
// address-space limit: a clean refusal (exit 1, the sizes, what helps), never the Go
// runtime's "fatal error: out of memory".
func TestCaseOversizedFrames(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.raw")
	f, err := os.Create(huge)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(2*16384*32768*2))
	require.NoError(t, f.Close())
	for _, c := range []struct {
		args []string
		want string
	}{
		// refused by the address-space limit, or first by the machine's memory
		{[]string{"--mask", "com"}, `mask "com": building the 3 com masks on the whole frame, about (cx=16384, cy=8192) (sig_shape (16384, 32768), 536870912 pixels selected, held dense) needs 26 GiB of memory, but `},
		{[]string{"--mask", "disk:100,100,10", "--byte-order", "big"}, "fewer workers (--cpus, --gpus) hold fewer tiles"},
	} {
		out := filepath.Join(dir, "o.npy")
		args := append([]string{"apply", huge, "--sig-shape", "16384,32768", "--dtype", "uint16", "--cpus", "0,1", "--out", out, "-q"}, c.args...)
		cmd := exec.Command("bash", append([]string{"-c", `ulimit -v 4194304 && exec "$@"`, "x", stemdotBin}, args...)...)
		stderr, _ := cmd.CombinedOutput()
		require.Equal(t, 1, cmd.ProcessState.ExitCode(), "%s", stderr)
		require.Contains(t, string(stderr), c.want)
		require.NotContains(t, string(stderr), "fatal error")
		require.NoFileExists(t, out)
	}
}

// Case 10-nan-gap-pixels: float32 frames whose gap column is NaN in every frame, and one
// NaN inside the disk of the last frame. The disk's value does not depend on whether a
// whole-frame mask shares the stack (dense path) or not (sparse path): the gap column it
// gives no weight never counts; the last frame is NaN on both, and a warning says so.
func TestCaseNaNGapPixels(t *testing.T) {
	dir := t.TempDir()
	const h, w, n = 64, 64, 12
	frames := poissonish(57, n, h*w)
	data := make([]float32, 0, n*h*w)
	for f := range frames {
		for y := range h {
			frames[f][y*w+32] = math.NaN()
		}
		if f == n-1 {
			frames[f][20*w+20] = math.NaN()
		}
		for _, v := range frames[f] {
			data = append(data, float32(v))
		}
	}
	path := filepath.Join(dir, "f.npy")
	require.NoError(t, stemnpy.WriteFile(path, []int{3, 4, h, w}, data))
	disk := diskMask(h, w, 20, 20, 5)
	writeMaskNPY(t, filepath.Join(dir, "sparse.npy"), h, w, disk)
	writeMaskNPY(t, filepath.Join(dir, "dense.npy"), h, w, disk, onesMask(h*w))
	var want [n]float64
	for f := range n {
		for i, wt := range disk {
			if wt != 0 {
				want[f] += wt * frames[f][i]
			}
		}
	}
	for _, st := range []string{"sparse", "dense"} {
		for _, cpus := range []string{"1", "2"} {
			shape, got, stderr := applyCase(t, path, "--masks", filepath.Join(dir, st+".npy"), "--cpus", cpus, "--oversubscribe")
			nm := shape[len(shape)-1]
			for f := range n - 1 {
				require.InDelta(t, want[f], got[f*nm], 1e-3, "%s stack, frame %d", st, f)
			}
			require.True(t, math.IsNaN(got[(n-1)*nm]), "%s stack: the NaN under the disk", st)
			require.Contains(t, stderr, "result values are NaN or infinite, the first at frame ")
		}
	}
}

// Case 06-float32-4k-precision (LiberTEM #227): four 4096×4096 uint16 frames (12-bit
// counts and a bright beam disk shifted by a known amount), virtual detectors over
// (nearly) the whole frame and centre-of-mass masks, whose moments cancel. The default
// float32 results are within 2e-7 of Σ|w·x| of the exact sums (a float32 result's own
// rounding is up to 6e-8 relative), the centre-of-mass shifts within 1e-3 px; --float64
// within 1e-12.
func TestCaseFloat32Precision(t *testing.T) {
	const s, n = 4096, 4
	rng := rand.New(rand.NewPCG(227, 1))
	shifts := [n][2]float64{{0, 0}, {3.5, -2}, {-7.25, 5.5}, {11, 11}}
	path := filepath.Join(t.TempDir(), "f.raw")
	raw := make([]byte, 0, n*s*s*2)
	var want [n][6][2]float64 // per frame and mask: the exact sum and Σ|w·x|
	for f := range n {
		for y := range s {
			for x := range s {
				v := uint16(rng.IntN(4096))
				if dy, dx := float64(y)-2048-shifts[f][0], float64(x)-2048-shifts[f][1]; dy*dy+dx*dx <= 80*80 {
					v = 60000
				}
				raw = binary.LittleEndian.AppendUint16(raw, v)
				r2 := (y-2048)*(y-2048) + (x-2048)*(x-2048)
				w := [6]float64{0, 0, 0, 1, float64(y - 2048), float64(x - 2048)}
				if r2 <= 3000*3000 {
					w[0] = 1
				}
				if r2 > 200*200 && r2 <= 2900*2900 {
					w[1] = 1
				}
				if r2 <= 100*100 {
					w[2] = 1
				}
				for m, wm := range w {
					want[f][m][0] += wm * float64(v)
					want[f][m][1] += math.Abs(wm * float64(v))
				}
			}
		}
	}
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	raw = nil
	args := []string{path, "--sig-shape", "4096,4096", "--dtype", "uint16", "--nav-shape", "1,4",
		"--mask", "disk:2048,2048,3000", "--mask", "ring:2048,2048,200,2900", "--mask", "disk:2048,2048,100", "--mask", "com"}
	for _, tc := range []struct {
		flags []string
		tol   float64
	}{{nil, 2e-7}, {[]string{"--float64"}, 1e-12}} {
		shape, got, _ := applyCase(t, append(args, tc.flags...)...)
		require.Equal(t, []int{1, 4, 6}, shape)
		for f := range n {
			for m := range 6 {
				require.LessOrEqual(t, math.Abs(got[f*6+m]-want[f][m][0]), tc.tol*want[f][m][1],
					"%v frame %d mask %d: got %.9g, want %.9g", tc.flags, f, m, got[f*6+m], want[f][m][0])
			}
			for k := range 2 {
				require.InDelta(t, want[f][4+k][0]/want[f][3][0], got[f*6+4+k]/got[f*6+3], 1e-3, "%v frame %d: centre-of-mass shift %d", tc.flags, f, k)
			}
		}
	}
}

// Case 07-mmap-rss: a float32 raw file read in place (memory-mapped) must not make the
// process's resident memory grow to the file's size: the workers drop the pages of the
// frames they have computed. 256 MiB of 128×128 frames; peak RSS exceeds that of a
// 4 MiB file by less than 64 MiB (it grew by the file size before), and the point values
// are right.
func TestCaseMmapRSS(t *testing.T) {
	const s, n = 128, 4096
	dir := t.TempDir()
	write := func(name string, n int) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		require.NoError(t, err)
		frame := make([]byte, s*s*4)
		for i := range n {
			for p := range s * s {
				binary.LittleEndian.PutUint32(frame[4*p:], math.Float32bits(float32(i%977+p%13)))
			}
			_, err = f.Write(frame)
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
		return path
	}
	out := filepath.Join(dir, "p.npy")
	args := func(path, nav string) []string {
		return []string{path, "--sig-shape", "128,128", "--dtype", "float32", "--nav-shape", nav, "--mask", "point:64,64", "--out", out, "-q"}
	}
	base := peakRSS(t, args(write("small.raw", 64), "8,8")...)
	rss := peakRSS(t, args(write("f.raw", n), "64,64")...)
	require.Less(t, rss-base, int64(64<<20), "peak RSS %d MiB for a 256 MiB file, %d MiB for a 4 MiB one", rss>>20, base>>20)
	_, got := readResult(t, out)
	for i := range n {
		require.Equal(t, float64(i%977+(64*s+64)%13), got[i], "frame %d", i)
	}
}

// RosettaSciIO issue 270: Merlin with line skip writes (ScanX+1)·ScanY frames, one
// flyback frame per row; read as scan positions, every row after the first is shifted
// (#17.6). The frames not at scan positions are made bright, so that reading one would
// show in the result. Neither their headers nor their data tell where they lie (bright
// is not blank): refused, naming --flyback start and end (#33).
func TestFlybackFrames(t *testing.T) {
	const w, h, s = 5, 8, 16
	dir := t.TempDir()
	frames := poissonish(270, (w+1)*h, s*s)
	for f := range frames {
		if f%(w+1) == w { // the flyback frame ends each row
			for i := range frames[f] {
				frames[f][i] = 200
			}
		}
	}
	ms := [][]float64{onesMask(s * s), diskMask(s, s, 8, 8, 4)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, s, s, ms...)
	mib := filepath.Join(dir, "scan.mib")
	writeCaseMIB(t, mib, frames, s, s, "U16")
	writeCaseHdr(t, filepath.Join(dir, "scan.hdr"), map[string]string{"ScanX": fmt.Sprint(w), "ScanY": fmt.Sprint(h),
		"Frames in Acquisition (Number)": fmt.Sprint((w + 1) * h), "Frames per Trigger (Number)": fmt.Sprint(w + 1)})
	scan := func(lead int) [][]float64 {
		var out [][]float64
		for y := range h {
			out = append(out, frames[y*(w+1)+lead:y*(w+1)+lead+w]...)
		}
		return out
	}
	refuseCase(t, "the file holds 48 frames, 6 per scan row of nav shape (8, 5) from scan.hdr (ScanY=8, ScanX=5): a flyback frame per row, but neither the frame headers nor the frames tell whether it starts or ends the row (no exposure time set apart, no blank frame): give --flyback start or --flyback end", mib, "--masks", masks)
	shape, got, stderr := applyCase(t, mib, "--masks", masks, "--flyback", "end")
	require.Equal(t, []int{h, w, 2}, shape)
	checkResult(t, got, scan(0), ms)
	require.NotContains(t, stderr, "flyback")
	stdout, stderr, code := run(t, "info", mib, "--flyback", "end")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (8, 5)\n")

	shape, got, stderr = applyCase(t, mib, "--masks", masks, "--flyback", "start")
	require.Equal(t, []int{h, w, 2}, shape)
	checkResult(t, got, scan(1), ms)
	require.NotContains(t, stderr, "flyback")
	shape, got, stderr = applyCase(t, mib, "--masks", masks, "--flyback", "none")
	require.Equal(t, []int{h, w, 2}, shape)
	checkResult(t, got, frames[:w*h], ms)
	require.Contains(t, stderr, "the last 8 are surplus and not read")
	refuseCase(t, "--flyback \"sideways\": want auto, none, start, end, start:N or end:N", mib, "--masks", masks, "--flyback", "sideways")
}

// Case 53-input-truncated-while-mapped: a little-endian NPY (memory-mapped, read in
// place) truncated to 10% during a run: an I/O error naming the file, on one line, exit
// status 1, no result; never SIGBUS with a goroutine dump (#17.2). stemdot is stopped
// once it has mapped the file, the file truncated, and stemdot let go on: its next read
// of the file (the size check, or a read of the mapping that faults) fails.
func TestCaseInputTruncatedWhileMapped(t *testing.T) {
	const s, n, nMasks = 64, 2048, 256
	dir := t.TempDir()
	frames := make([]float32, n*s*s)
	for i := range frames {
		frames[i] = float32(i % 13)
	}
	data := filepath.Join(dir, "scan_le.npy")
	require.NoError(t, stemnpy.WriteFile(data, []int{n, s, s}, frames))
	weights := make([]float32, nMasks*s*s)
	for i := range weights {
		weights[i] = float32(i%5) + 0.5
	}
	masks := filepath.Join(dir, "m.npy")
	require.NoError(t, stemnpy.WriteFile(masks, []int{nMasks, s, s}, weights))
	st, err := os.Stat(data)
	require.NoError(t, err)
	out := filepath.Join(dir, "r.npy")

	cmd := exec.Command(stemdotBin, "apply", data, "--masks", masks, "--out", out, "-q", "--cpus", "1")
	var e bytes.Buffer
	cmd.Stderr = &e
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	mapped := func() bool {
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		return bytes.Contains(maps, []byte(data))
	}
	for deadline := time.Now().Add(20 * time.Second); !mapped() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Microsecond)
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.True(t, mapped(), "stemdot mapped %s", data)
	require.NoError(t, os.Truncate(data, st.Size()/10))
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, e.String())
	require.Equal(t, 1, ee.ExitCode(), e.String())
	require.Regexp(t, fmt.Sprintf(`^stemdot: worker 0 \(cpu \d+\): frames \[\d+, \d+\): dataset: %s: the file changed while being read: it is now %d bytes, %d when it was opened \(truncated or rewritten by another program\)(, and reading byte \d+ of its memory mapping failed)?; read it again once it is complete\n$`,
		regexp.QuoteMeta(data), st.Size()/10, st.Size()), e.String())
	require.NoFileExists(t, out)
}

// Case 64-csr-overflow-densify: raw_csr uint8 data, two events of 200 at one pixel: 400
// from apply's gather and from sum's densified frame alike (they gave 400 and 144).
func TestCaseCSRDuplicateEvents(t *testing.T) {
	dir := t.TempDir()
	var ptr, idx []byte
	for _, v := range []uint64{0, 2} {
		ptr = binary.LittleEndian.AppendUint64(ptr, v)
	}
	for range 2 {
		idx = binary.LittleEndian.AppendUint32(idx, 5)
	}
	for name, b := range map[string][]byte{"ptr.dat": ptr, "idx.dat": idx, "val.dat": {200, 200}} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	toml := filepath.Join(dir, "s.toml")
	require.NoError(t, os.WriteFile(toml, []byte("[params]\nfiletype = \"raw_csr\"\nnav_shape = [1, 1]\nsig_shape = [4, 4]\n[raw_csr]\n"+
		"indptr_file = \"ptr.dat\"\nindptr_dtype = \"<i8\"\nindices_file = \"idx.dat\"\nindices_dtype = \"<i4\"\ndata_file = \"val.dat\"\ndata_dtype = \"u1\"\n"), 0o644))
	shape, got, _ := applyCase(t, toml, "--mask", "rect:0,0,4,4")
	require.Equal(t, []int{1, 1, 1}, shape)
	require.Equal(t, []float64{400}, got)
	sum := filepath.Join(dir, "sum.npy")
	_, stderr, code := run(t, "sum", toml, "--out", sum, "-q")
	require.Zero(t, code, stderr)
	_, s := readResult(t, sum)
	want := make([]float64, 16)
	want[5] = 400
	require.Equal(t, want, s)
}
