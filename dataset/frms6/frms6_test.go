package frms6

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// frmsSet is an acquisition that writeFRMS6 writes: stored frames of height×width,
// binning bin, dark frames in _000 and files _001 ... of the given frame counts.
type frmsSet struct {
	height, width, bin int
	dark               int
	files              []int
	zeroNum            bool // num_frames 0 in the headers (older files)
	hdr                string
}

// acquisition is what writeFRMS6 wrote: the detector frames of the scan files (binned
// rows, 2·height × width/2) and the dark frames, before folding.
type acquisition struct {
	frames, darks [][]uint16
}

// fold stores a detector frame (2h rows of w/2) as the detector reads it out: rows
// y < h at (y, x), rows y ≥ h at (2h−1−y, w−1−x).
func fold(sig []uint16, h, w int) []uint16 {
	out := make([]uint16, h*w)
	for y := range 2 * h {
		for x := range w / 2 {
			r, c := y, x
			if y >= h {
				r, c = 2*h-1-y, w-1-x
			}
			out[r*w+c] = sig[y*(w/2)+x]
		}
	}
	return out
}

func writeFile(t *testing.T, path string, s frmsSet, frames [][]uint16) {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, 1024)
	le.PutUint16(b[0:], 1024)
	le.PutUint16(b[2:], 64)
	b[7] = 6
	copy(b[8:], "pnCCD frms6 test file")
	le.PutUint16(b[88:], uint16(s.width))
	le.PutUint16(b[90:], uint16(s.height))
	if !s.zeroNum {
		le.PutUint32(b[1020:], uint32(len(frames)))
	}
	for i, fr := range frames {
		head := make([]byte, 64)
		for j := range head {
			head[j] = 0xCD
		}
		le.PutUint32(head[12:], uint32(i))
		b = append(b, head...)
		for _, v := range fold(fr, s.height, s.width) {
			b = le.AppendUint16(b, v)
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// writeFRMS6 writes base.hdr and base_000.frms6 ... with random frames.
func writeFRMS6(t *testing.T, base string, s frmsSet, seed uint64) acquisition {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	gen := func(n int, lo, spread int) [][]uint16 {
		out := make([][]uint16, n)
		for i := range out {
			out[i] = make([]uint16, 2*s.height*s.width/2)
			for j := range out[i] {
				out[i][j] = uint16(lo + rng.IntN(spread))
			}
		}
		return out
	}
	var a acquisition
	a.darks = gen(s.dark, 90, 20)
	writeFile(t, base+"_000.frms6", s, a.darks)
	for i, n := range s.files {
		fr := gen(n, 0, 16000)
		a.frames = append(a.frames, fr...)
		writeFile(t, fmt.Sprintf("%s_%03d.frms6", base, i+1), s, fr)
	}
	require.NoError(t, os.WriteFile(base+".hdr", []byte(s.hdr), 0o644))
	return a
}

func hdrText(nav string, bin, signal int) string {
	return fmt.Sprintf("# pnCCD measurement\n[measurementInfo]\ndarkframes=5\nsignalFrames = %d\nstemimagesize=%s\nreadoutmode=\"bin: %d, windowing: 264 x 264 \"\ngain=3\n\n[other]\nstemimagesize=9x9\n", signal, nav, bin)
}

// expect is frame i of the scan in the detector's layout, unbinned, as float64: dark
// corrected (the dark frames' mean subtracted) and multiplied by gain (sig layout) when
// corrected.
func (a acquisition) expect(s frmsSet, i int, corrected bool, gain []float64) []float64 {
	sy, sx := 2*s.height*s.bin, s.width/2
	out := make([]float64, sy*sx)
	for y := range sy {
		for x := range sx {
			p := (y/s.bin)*sx + x
			v := float64(a.frames[i][p])
			if corrected {
				var m float64
				for _, d := range a.darks {
					m += float64(d[p])
				}
				v -= m / float64(len(a.darks))
				if gain != nil {
					v *= gain[y*sx+x]
				}
			}
			out[y*sx+x] = v
		}
	}
	return out
}

// frames reads every frame of ds as float64.
func frames(t *testing.T, ds dataset.Dataset) [][]float64 {
	t.Helper()
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	n := ds.SigShape()[0] * ds.SigShape()[1]
	out := make([][]float64, ds.NumFrames())
	for i := range out {
		out[i] = make([]float64, n)
		fr := buf[i*ds.FrameBytes():]
		for j := range n {
			if ds.DType() == dataset.Uint16 {
				out[i][j] = float64(binary.NativeEndian.Uint16(fr[2*j:]))
			} else {
				out[i][j] = float64(math.Float32frombits(binary.NativeEndian.Uint32(fr[4*j:])))
			}
		}
	}
	return out
}

func assertFrames(t *testing.T, want, got [][]float64, tol float64) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, len(want[i]), len(got[i]))
		for j := range want[i] {
			if math.Abs(want[i][j]-got[i][j]) > tol {
				t.Fatalf("frame %d pixel %d: got %v, want %v", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// Binning 1, 2 and 4, two scan files, the header's frame count or (older files) none,
// opened from the .hdr and from a .frms6: frames unfolded and dark-corrected as float32,
// or raw with option frms6_raw; surplus frames beyond signalframes are not read.
func TestFRMS6(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    frmsSet
		nav  []int
		n    int
	}{
		{"bin1", frmsSet{height: 4, width: 12, bin: 1, dark: 5, files: []int{4, 3}, hdr: hdrText("2x3", 1, 6)}, []int{2, 3}, 6},
		{"bin2-old", frmsSet{height: 3, width: 10, bin: 2, dark: 3, files: []int{2, 2}, zeroNum: true, hdr: hdrText("2 x 2", 2, 4)}, []int{2, 2}, 4},
		{"bin4", frmsSet{height: 2, width: 8, bin: 4, dark: 2, files: []int{3}, hdr: hdrText("3x1", 4, 3)}, []int{3, 1}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "scan")
			a := writeFRMS6(t, base, tc.s, 4)
			var corrected, raw [][]float64
			for i := range tc.n {
				corrected = append(corrected, a.expect(tc.s, i, true, nil))
				raw = append(raw, a.expect(tc.s, i, false, nil))
			}
			for _, path := range []string{base + ".hdr", base + "_001.frms6"} {
				ds, err := dataset.Open(path, dataset.Options{})
				require.NoError(t, err)
				assert.Equal(t, Name, ds.Format())
				assert.Equal(t, tc.nav, ds.NavShape())
				assert.Equal(t, [2]int{2 * tc.s.height * tc.s.bin, tc.s.width / 2}, ds.SigShape())
				assert.Equal(t, dataset.Float32, ds.DType())
				assertFrames(t, corrected, frames(t, ds), 0.01)
				assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), fmt.Sprintf("the mean of the %d dark frames of scan_000.frms6 is subtracted", tc.s.dark))
				require.NoError(t, ds.Close())
			}
			t.Run("numpy", func(t *testing.T) { compareNumpy(t, base, tc.s.bin, tc.n) })
			ds, err := dataset.Open(base+".hdr", dataset.Options{FormatOptions: map[string]string{OptRaw: "true"}})
			require.NoError(t, err)
			assert.Equal(t, dataset.Uint16, ds.DType())
			assertFrames(t, raw, frames(t, ds), 0)
			if tc.name == "bin1" {
				assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "scan.hdr gives signalframes 6, the files _001 on hold 7 frames: the surplus ones are not read")
			}
			require.NoError(t, ds.Close())
		})
	}
}

// numpyFRMS6 reads an acquisition with numpy as LiberTEM lays it out (file header and
// records by dtype; a stored frame's left half the detector's top rows, its right half
// turned by 180° the bottom rows; rows repeated by the binning; the mean of the _000
// file's frames subtracted) and prints the first n scan frames as float64 values.
const numpyFRMS6 = `
import sys, glob
import numpy as np
base, binning, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
head = np.dtype([("header_size", "<u2"), ("frame_header_size", "<u2"), ("pad", "V3"), ("version", "u1"),
    ("comment1", "V80"), ("width", "<u2"), ("height", "<u2"), ("comment2", "V928"), ("num_frames", "<u4")])
def frames(path):
    h = np.fromfile(path, head, count=1)[0]
    assert (h["header_size"], h["frame_header_size"], h["version"]) == (1024, 64, 6)
    w, ht = int(h["width"]), int(h["height"])
    rec = np.dtype([("fh", "V64"), ("px", "<u2", (ht, w))])
    raw = np.fromfile(path, rec, offset=1024)["px"].astype(np.float64)
    top, bottom = raw[:, :, :w // 2], raw[:, ::-1, w // 2:][:, :, ::-1]
    return np.repeat(np.concatenate([top, bottom], axis=1), binning, axis=1)
files = sorted(glob.glob(base + "_*.frms6"))
dark = frames(files[0]).mean(axis=0)
scan = np.concatenate([frames(f) for f in files[1:]])[:n] - dark
print(" ".join(repr(float(v)) for v in scan.ravel()))
`

// compareNumpy compares the dark-corrected frames of the acquisition at base with
// numpyFRMS6's.
func compareNumpy(t *testing.T, base string, bin, n int) {
	t.Helper()
	out := strings.Fields(string(testfiles.RunPython(t, numpyFRMS6, []string{"numpy"}, base, fmt.Sprint(bin), fmt.Sprint(n))))
	ds, err := dataset.Open(base+".hdr", dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	got := frames(t, ds)
	px := len(got[0])
	require.Len(t, out, n*px)
	want := make([][]float64, n)
	for i := range want {
		want[i] = make([]float64, px)
		for j := range want[i] {
			want[i][j], err = strconv.ParseFloat(out[i*px+j], 64)
			require.NoError(t, err)
		}
	}
	assertFrames(t, want, got, 0.01)
}

// A gain map CSV (LiberTEM's layout: the file's rows are detector columns) multiplies
// the dark-corrected frames; a last file cut inside a frame loses that frame, with a
// note; sync_offset applies.
func TestFRMS6GainTruncated(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "scan")
	s := frmsSet{height: 2, width: 6, bin: 1, dark: 2, files: []int{3, 3}, hdr: hdrText("2x2", 1, 6)}
	a := writeFRMS6(t, base, s, 8)
	sy, sx := 4, 3
	gain := make([]float64, sy*sx)
	var csv strings.Builder
	for x := range sx {
		for y := range sy {
			gain[y*sx+x] = 0.5 + float64(y*sx+x)/8
			fmt.Fprintf(&csv, "%g;", gain[y*sx+x])
		}
		csv.WriteString("\n")
	}
	gainPath := filepath.Join(dir, "gain.csv")
	require.NoError(t, os.WriteFile(gainPath, []byte(csv.String()), 0o644))
	for _, name := range []string{"_000", "_002"} {
		st, err := os.Stat(base + name + ".frms6")
		require.NoError(t, err)
		require.NoError(t, os.Truncate(base+name+".frms6", st.Size()-10))
	}
	a.darks = a.darks[:1] // the dark file's last frame is cut too

	ds, err := dataset.Open(base+".hdr", dataset.Options{SyncOffset: 1, FormatOptions: map[string]string{OptGainMap: gainPath}})
	require.NoError(t, err)
	defer ds.Close()
	var want [][]float64
	for i := 1; i < 5; i++ {
		want = append(want, a.expect(s, i, true, gain))
	}
	assertFrames(t, want, frames(t, ds), 0.01)
	notes := strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "scan_000.frms6 ends inside dark frame 1 of its 2 (num_frames): its whole frames are used")
	assert.Contains(t, notes, "the dark frame of scan_000.frms6 is subtracted")
	assert.Contains(t, notes, "scan_002.frms6 ends inside frame 2 of its 3 (num_frames): the frames from there on are missing")
	assert.Contains(t, notes, "gives signalframes 6, the files _001 on hold 5 frames: the files' frames are read")
	assert.Contains(t, notes, "multiplied by the gain map "+gainPath)
}

// Malformed acquisitions and bad options are refused, naming the file or option.
func TestFRMS6Errors(t *testing.T) {
	good := frmsSet{height: 2, width: 6, bin: 1, dark: 2, files: []int{2}, hdr: hdrText("1x2", 1, 2)}
	for _, tc := range []struct {
		name string
		edit func(dir, base string)
		opt  map[string]string
		kind errs.Kind
		msg  string
	}{
		{"no-hdr", func(dir, base string) { os.Remove(base + ".hdr") }, nil, errs.IO, "scan.hdr"},
		{"merlin-hdr", func(dir, base string) {
			os.WriteFile(base+".hdr", []byte("HDR,\t\nTime and Date Stamp (day, mnth, yr, hr, min, s):\t01/01/2020\n"), 0o644)
		}, nil, errs.Format, "no [measurementInfo] section"},
		{"bin3", func(dir, base string) { os.WriteFile(base+".hdr", []byte(hdrText("1x2", 3, 2)), 0o644) }, nil, errs.Format, "binning 3 is not 1, 2 or 4"},
		{"nav", func(dir, base string) { os.WriteFile(base+".hdr", []byte(hdrText("1y2", 1, 2)), 0o644) }, nil, errs.Format, "stemimagesize \"1y2\""},
		{"no-scan-files", func(dir, base string) { os.Remove(base + "_001.frms6") }, nil, errs.Format, "found 1 files"},
		{"version", func(dir, base string) { patch(base+"_001.frms6", 7, 5) }, nil, errs.Format, "scan_001.frms6: not an FRMS6 file: header_size 1024, frame_header_size 64, version 5"},
		{"odd-width", func(dir, base string) { patch(base+"_000.frms6", 88, 7) }, nil, errs.Format, "width 7"},
		{"raw-value", nil, map[string]string{OptRaw: "maybe"}, errs.Argument, "option frms6_raw \"maybe\""},
		{"gain-and-raw", nil, map[string]string{OptRaw: "1", OptGainMap: "g.csv"}, errs.Argument, "option frms6_gain_map applies to dark-corrected frames"},
		{"gain-mat73", func(dir, base string) {
			os.WriteFile(filepath.Join(dir, "g.mat"), append([]byte("MATLAB 7.3 MAT-file"), make([]byte, 200)...), 0o644)
		}, map[string]string{OptGainMap: "g.mat"}, errs.Argument, "a MATLAB 7.3 MAT-file (HDF5) is not read"},
		{"gain-mat-shape", func(dir, base string) {
			os.WriteFile(filepath.Join(dir, "g.mat"), matFile(false, false, "GainMap", 3, 4, make([]float64, 12)), 0o644)
		}, map[string]string{OptGainMap: "g.mat"}, errs.Shape, "GainMap is 3×4, the frames are 4×3"},
		{"gain-mat-name", func(dir, base string) {
			os.WriteFile(filepath.Join(dir, "g.mat"), matFile(false, true, "Gain", 4, 3, make([]float64, 12)), 0o644)
		}, map[string]string{OptGainMap: "g.mat"}, errs.Format, `no variable GainMap (variables: "x", "Gain")`},
		{"gain-shape", func(dir, base string) { os.WriteFile(filepath.Join(dir, "g.csv"), []byte("1;2;3;4\n1;2;3;4\n"), 0o644) },
			map[string]string{OptGainMap: "g.csv"}, errs.Shape, "2 rows: a gain map for frames of sig shape (4, 3) has 3 rows (detector columns) of 4 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "scan")
			writeFRMS6(t, base, good, 1)
			if tc.edit != nil {
				tc.edit(dir, base)
			}
			opt := dataset.Options{Format: Name, FormatOptions: map[string]string{}}
			for k, v := range tc.opt {
				if k == OptGainMap {
					v = filepath.Join(dir, v)
				}
				opt.FormatOptions[k] = v
			}
			_, err := dataset.Open(base+"_001.frms6", opt)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.kind)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	// A file before the last that is cut short would shift the scan.
	dir := t.TempDir()
	base := filepath.Join(dir, "scan")
	writeFRMS6(t, base, frmsSet{height: 2, width: 6, bin: 1, dark: 2, files: []int{2, 2}, hdr: hdrText("2x2", 1, 4)}, 1)
	require.NoError(t, os.Truncate(base+"_001.frms6", 1024+64+24))
	_, err := dataset.Open(base+".hdr", dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "scan_001.frms6: holds 1 whole frames, its header says num_frames 2")
}

func patch(path string, at int, v byte) {
	b, _ := os.ReadFile(path)
	b[at] = v
	os.WriteFile(path, b, 0o644)
}

// matFile lays out a MATLAB level 5 MAT-file (the MAT-File Format documentation: a
// 128-byte header ending in the endian indicator, then data elements of an 8-byte tag
// padded to 8 bytes, small ones packed in their tag) with a 1×1 variable x and a double
// matrix of rows×cols values (given row-major, stored column by column) named name,
// in either byte order, the variables zlib-compressed or not.
func matFile(big, compressed bool, name string, rows, cols int, vals []float64) []byte {
	var o interface {
		binary.ByteOrder
		binary.AppendByteOrder
	} = binary.LittleEndian
	if big {
		o = binary.BigEndian
	}
	elem := func(typ uint32, data []byte) []byte {
		if len(data) <= 4 {
			b := o.AppendUint32(nil, typ|uint32(len(data))<<16)
			return append(b, append(data, make([]byte, 4-len(data))...)...)
		}
		b := o.AppendUint32(o.AppendUint32(nil, typ), uint32(len(data)))
		b = append(b, data...)
		return append(b, make([]byte, (8-len(b)%8)%8)...)
	}
	matrix := func(name string, rows, cols int, vals []float64) []byte {
		var body []byte
		body = append(body, elem(6, o.AppendUint32(o.AppendUint32(nil, 6), 0))...) // array flags: mxDOUBLE_CLASS
		body = append(body, elem(5, o.AppendUint32(o.AppendUint32(nil, uint32(rows)), uint32(cols)))...)
		body = append(body, elem(1, []byte(name))...)
		var data []byte
		for c := range cols {
			for r := range rows {
				data = o.AppendUint64(data, math.Float64bits(vals[r*cols+c]))
			}
		}
		body = append(body, elem(9, data)...)
		m := elem(14, body)
		if !compressed {
			return m
		}
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		w.Write(m)
		w.Close()
		return append(o.AppendUint32(o.AppendUint32(nil, 15), uint32(z.Len())), z.Bytes()...)
	}
	head := []byte(fmt.Sprintf("%-116s", "MATLAB 5.0 MAT-file, Platform: test"))
	head = append(head, make([]byte, 8)...)
	head = o.AppendUint16(o.AppendUint16(head, 0x0100), 0x4D49) // version, "MI"
	b := append(head, matrix("x", 1, 1, []float64{7})...)
	return append(b, matrix(name, rows, cols, vals)...)
}

// A MATLAB gain map, in either byte order and compressed or not, multiplies the
// dark-corrected frames.
func TestFRMS6GainMAT(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "scan")
	s := frmsSet{height: 2, width: 6, bin: 1, dark: 2, files: []int{4}, hdr: hdrText("2x2", 1, 4)}
	a := writeFRMS6(t, base, s, 3)
	sy, sx := 4, 3
	gain := make([]float64, sy*sx)
	for i := range gain {
		gain[i] = 0.25 + float64(i)*0.125
	}
	var want [][]float64
	for i := range 4 {
		want = append(want, a.expect(s, i, true, gain))
	}
	for _, big := range []bool{false, true} {
		for _, compressed := range []bool{false, true} {
			p := filepath.Join(dir, fmt.Sprintf("gain-%v-%v.mat", big, compressed))
			require.NoError(t, os.WriteFile(p, matFile(big, compressed, "GainMap", sy, sx, gain), 0o644))
			ds, err := dataset.Open(base+".hdr", dataset.Options{FormatOptions: map[string]string{OptGainMap: p}})
			require.NoError(t, err, p)
			assertFrames(t, want, frames(t, ds), 0.01)
			require.NoError(t, ds.Close())
		}
	}
}

// FuzzFRMS6GainMAT parses arbitrary bytes as a MAT-file gain map: no panic, and no more
// allocated than a small multiple of the file's size, however far its compressed
// variables would inflate.
func FuzzFRMS6GainMAT(f *testing.F) {
	f.Add(matFile(false, false, "GainMap", 2, 2, []float64{1, 2, 3, 4}))
	f.Add(matFile(true, true, "GainMap", 2, 2, []float64{1, 2, 3, 4}))
	f.Add(matBomb(miMATRIX, "GainMap", 2, 2, 1<<20))
	f.Add(matBomb(miMATRIX, "Offset", 2, 2, 1<<20))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g, err := matGainMap(b, [2]int{2, 2})
		runtime.ReadMemStats(&after)
		if err == nil {
			require.Len(t, g, 4)
		}
		require.LessOrEqual(t, after.TotalAlloc-before.TotalAlloc, uint64(128<<10+8*len(b)), "bytes allocated")
	})
}

// Detection tells an FRMS6 .hdr from a Merlin one (which the MIB reader takes).
func TestFRMS6Detect(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.hdr")
	require.NoError(t, os.WriteFile(p, []byte(hdrText("2x2", 1, 4)), 0o644))
	assert.True(t, detect(p, dataset.Options{}))
	require.NoError(t, os.WriteFile(p, []byte("HDR,\t\nFrames in Acquisition (Number):\t4\nEnd\t\n"), 0o644))
	assert.False(t, detect(p, dataset.Options{}))
	assert.False(t, detect(filepath.Join(dir, "missing.hdr"), dataset.Options{}))
}

// FuzzFRMS6HDR parses arbitrary .hdr text: no panic, and what it accepts is usable.
func FuzzFRMS6HDR(f *testing.F) {
	f.Add([]byte(hdrText("256x256", 1, 65536)))
	f.Add([]byte("[measurementInfo]\nstemimagesize: 4x4\nreadoutmode: bin: 2, windowing: 264 x 264\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseHDR(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, info.nav)
		require.Contains(t, []int{1, 2, 4}, info.bin)
	})
}

// FuzzFRMS6Header parses arbitrary file headers: no panic, and the frames it finds fit
// in the file.
func FuzzFRMS6Header(f *testing.F) {
	b := make([]byte, 1024)
	binary.LittleEndian.PutUint16(b, 1024)
	binary.LittleEndian.PutUint16(b[2:], 64)
	b[7] = 6
	b[88], b[90] = 8, 4
	f.Add(b, int64(1024+3*(64+64)))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		if size < int64(len(b)) {
			return
		}
		h, whole, err := parseFileHeader(b, size)
		if err != nil {
			return
		}
		require.LessOrEqual(t, fileHeaderSize+int64(whole)*h.record(), size)
	})
}

// matBomb lays out a little-endian MAT-file of one compressed variable (a "zip bomb"):
// the tag of a variable of type typ, a matrix of double class, dimensions rows×cols and
// the given name, whose values are n zero bytes, n declared in their tag and the
// variable's.
func matBomb(typ uint32, name string, rows, cols, n int) []byte {
	le := binary.LittleEndian
	var body []byte
	body = le.AppendUint32(le.AppendUint32(body, 6), 8)
	body = le.AppendUint32(le.AppendUint32(body, 6), 0) // array flags: mxDOUBLE_CLASS
	body = le.AppendUint32(le.AppendUint32(body, 5), 8)
	body = le.AppendUint32(le.AppendUint32(body, uint32(rows)), uint32(cols))
	body = le.AppendUint32(le.AppendUint32(body, 1), uint32(len(name)))
	body = append(body, name...)
	body = append(body, make([]byte, (8-len(body)%8)%8)...)
	body = le.AppendUint32(le.AppendUint32(body, 9), uint32(n))
	var z bytes.Buffer
	w, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	w.Write(le.AppendUint32(le.AppendUint32(nil, typ), uint32(len(body)+n)))
	w.Write(body)
	zeros := make([]byte, 1<<20)
	for k := n; k > 0; k -= len(zeros) {
		w.Write(zeros[:min(k, len(zeros))])
	}
	w.Close()
	head := []byte(fmt.Sprintf("%-116s", "MATLAB 5.0 MAT-file, Platform: test"))
	head = append(head, make([]byte, 8)...)
	head = le.AppendUint16(le.AppendUint16(head, 0x0100), 0x4D49)
	return append(le.AppendUint32(le.AppendUint32(head, 15), uint32(z.Len())), z.Bytes()...)
}

// A compressed gain map that inflates to far more than a matrix of the frames' shape (a
// "zip bomb", issue #33: a 1 MB file inflated to 1 GiB) is a format error before it is
// inflated: the open allocates no more than a small bound, not the declared size.
func TestFRMS6GainMATBomb(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "scan")
	writeFRMS6(t, base, frmsSet{height: 2, width: 6, bin: 1, dark: 2, files: []int{2}, hdr: hdrText("1x2", 1, 2)}, 1)
	const n = 64 << 20 // inflated bytes of each bomb
	for _, tc := range []struct {
		name string
		mat  []byte
		msg  string
	}{
		{"gainmap", matBomb(miMATRIX, "GainMap", 4, 3, n), fmt.Sprintf("GainMap, compressed at byte 128: %d bytes declared, more than the 152 of a matrix of 12 values of up to 8 bytes", n+56)},
		// Other variables are inflated only as far as their name.
		{"other", matBomb(miMATRIX, "Offset", 4, 3, n), `no variable GainMap (variables: "Offset")`},
		{"not-a-variable", matBomb(0, "GainMap", 4, 3, n), "the compressed variable at byte 128: holds data type 0, not a variable (miMATRIX, 14)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".mat")
			require.NoError(t, os.WriteFile(p, tc.mat, 0o644))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := dataset.Open(base+".hdr", dataset.Options{FormatOptions: map[string]string{OptGainMap: p}})
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, errs.Format)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(2<<20), "bytes allocated by the open")
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}
