package mrc_test

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/mrc"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// deReference is the independent decoder of the Direct Electron MRC movie: numpy reads
// the header words at their MRC2014 offsets, the sections after 1024+NSYMBT bytes, the
// scan size from the info file and each frame's x,y from the CSV, and places the k-th
// visit of a position in pass k of a (passes, Size Y, Size X) scan, zeros elsewhere. It
// writes the scan's frames (uint16, C order) to argv[4].
const deReference = `
import sys, numpy as np
mrc, info, csv, out = sys.argv[1:5]
raw = open(mrc, "rb").read()
assert raw[208:212] == b"MAP " and raw[212] == 0x44
nx, ny, nz, mode = np.frombuffer(raw[:16], "<i4")
nsymbt = np.frombuffer(raw[92:96], "<i4")[0]
assert mode == 6
frames = np.frombuffer(raw[1024 + nsymbt:], "<u2", count=nz * ny * nx).reshape(nz, ny, nx)
kv = dict((k.strip(), v.strip()) for k, v in (l.split("=", 1) for l in open(info) if "=" in l))
sx, sy = int(kv["Scan - Size X"]), int(kv["Scan - Size Y"])
xy = np.loadtxt(csv, delimiter=",", dtype=int)
visits = np.zeros((sy, sx), int)
for x, y in xy:
    visits[y, x] += 1
passes = visits.max()
scan = np.zeros((passes, sy, sx, ny, nx), "<u2")
seen = np.zeros((sy, sx), int)
for i, (x, y) in enumerate(xy[:nz]):
    scan[seen[y, x], y, x] = frames[i]
    seen[y, x] += 1
open(out, "wb").write(scan.tobytes())
print(passes, sy, sx, ny, nx)
`

// TestDirectElectronMovie opens the real Direct Electron movie of a custom scan (Scan -
// Type = XY File) and compares every scan position's frame with numpy's placement of
// the frames by the scan-coordinates CSV.
func TestDirectElectronMovie(t *testing.T) {
	path := testfiles.File(t, "mrc/Custom_movie.mrc")
	dir := filepath.Dir(path)
	out := filepath.Join(t.TempDir(), "want.bin")
	shape := strings.Fields(string(testfiles.RunPython(t, deReference, []string{"numpy"}, path,
		filepath.Join(dir, "Custom_info.txt"), filepath.Join(dir, "Custom_scan_coordinates.csv"), out)))
	require.Equal(t, []string{"2", "5", "5", "16", "16"}, shape, "numpy: 2 passes over the 5×5 scan of 16×16 frames")
	want, err := os.ReadFile(out)
	require.NoError(t, err)

	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, "mrc", ds.Format())
	assert.Equal(t, []int{2, 5, 5}, ds.NavShape(), "2 passes: a scan of planes, as RosettaSciIO's (repeats, y, x) (#33)")
	assert.Equal(t, [2]int{16, 16}, ds.SigShape())
	assert.Equal(t, dataset.Uint16, ds.DType())
	assert.False(t, dataset.NavShapeGuessed(ds))
	notes := strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "20 scan positions of 50 have no frame")
	assert.Contains(t, notes, "not stored in scan order")
	got := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), got))
	require.Equal(t, len(want), len(got))
	assert.Equal(t, want, hostToLE(got, 2), "frames at their scan positions")
	// Reads of part of the scan see the same frames.
	fb := ds.FrameBytes()
	part := make([]byte, 7*fb)
	require.NoError(t, ds.ReadFrames(3, 10, part))
	assert.Equal(t, want[3*fb:10*fb], hostToLE(part, 2))

	// Through the engine: a virtual detector summing every pixel gives numpy's sums.
	stack, err := stemdot.Masks(ds.SigShape(), "rect:0,0,16,16", "point:3,2")
	require.NoError(t, err)
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 5, 5}, res.NavShape)
	for p := range ds.NumFrames() {
		var sum float64
		frame := want[p*fb : (p+1)*fb]
		for i := 0; i < len(frame); i += 2 {
			sum += float64(binary.LittleEndian.Uint16(frame[i:]))
		}
		assert.Equal(t, sum, res.Value(p, 0), "sum of scan position %d", p)
		assert.Equal(t, float64(binary.LittleEndian.Uint16(frame[2*(2*16+3):])), res.Value(p, 1), "pixel (y=2, x=3) of scan position %d", p)
	}

	// The 20 positions the scan does not visit are positions without a frame, which the
	// reductions leave out (#33): the mean is over the file's 30 frames.
	blank := 0
	for _, b := range dataset.Blanks(ds) {
		for p := b.First; p < b.First+b.Count; p++ {
			assert.Equal(t, make([]byte, fb), want[p*fb:(p+1)*fb], "position %d without a frame", p)
			blank++
		}
	}
	assert.Equal(t, 20, blank)
	red, err := stemdot.Reduce(context.Background(), ds, stemdot.Plan{CPUs: "1"}, stemdot.ReduceOptions{Mean: true})
	require.NoError(t, err)
	assert.Equal(t, 30, red.Frames)
	var total float64
	for p := range ds.NumFrames() {
		total += float64(binary.LittleEndian.Uint16(want[p*fb:]))
	}
	assert.InDelta(t, total/30, red.Frame("mean")[0], 1e-9)

	// A sync offset would move the frames off the positions the CSV gives them.
	_, err = dataset.Open(path, dataset.Options{SyncOffset: 2})
	assert.ErrorContains(t, err, "option sync_offset 2: the frames of this Direct Electron scan are placed at their scan positions by Custom_scan_coordinates.csv")
}

// hostToLE returns host-order elements of size bytes as little-endian bytes.
func hostToLE(b []byte, size int) []byte {
	out := make([]byte, len(b))
	dataset.CopyToHost(out, b, size, false) // host → little-endian is the same swap as the reverse
	return out
}

// mrcFile describes a synthetic MRC file.
type mrcFile struct {
	nx, ny, nz, mode int
	next             int    // NSYMBT
	big              bool   // big-endian
	stamp            []byte // MACHST; nil: the stamp of the byte order
	noMap            bool   // no "MAP " stamp
	imodFlags        int    // -1: no IMOD stamp
	frames           int    // frames written (nz when 0, none when -1)
	cut              int    // bytes of one more frame written
	extra            int    // bytes after the frames
}

// write writes the file at path; pixel i of frame f (i in C order) holds value(f, i),
// stored in the file's mode and byte order.
func (m mrcFile) write(t *testing.T, path string, value func(f, i int) float64) {
	t.Helper()
	var order binary.ByteOrder = binary.LittleEndian
	if m.big {
		order = binary.BigEndian
	}
	h := make([]byte, 1024+m.next)
	for i, v := range []int{m.nx, m.ny, m.nz, m.mode} {
		order.PutUint32(h[4*i:], uint32(int32(v)))
	}
	order.PutUint32(h[92:], uint32(m.next))
	if m.imodFlags >= 0 {
		order.PutUint32(h[152:], 1146047817)
		order.PutUint32(h[156:], uint32(m.imodFlags))
	}
	if !m.noMap {
		copy(h[208:], "MAP ")
	}
	switch {
	case m.stamp != nil:
		copy(h[212:], m.stamp)
	case m.big:
		copy(h[212:], []byte{0x11, 0x11, 0, 0})
	default:
		copy(h[212:], []byte{0x44, 0x44, 0, 0})
	}
	for i := 1024; i < len(h); i++ {
		h[i] = 0xEE // extended header bytes that must not be read as pixels
	}
	size := map[int]int{0: 1, 1: 2, 2: 4, 6: 2}[m.mode]
	frames := max(m.frames, 0) // -1: none
	if m.frames == 0 {
		frames = m.nz
	}
	n := m.nx * m.ny
	px := make([]byte, (frames*n)*size+m.cut+m.extra)
	for f := range frames {
		for i := range n {
			v, b := value(f, i), px[(f*n+i)*size:]
			switch m.mode {
			case 0:
				b[0] = byte(int(v)) // int8 or, in IMOD files not flagged signed, uint8
			case 1:
				order.PutUint16(b, uint16(int16(v)))
			case 2:
				order.PutUint32(b, math.Float32bits(float32(v)))
			case 6:
				order.PutUint16(b, uint16(v))
			}
		}
	}
	require.NoError(t, os.WriteFile(path, append(h, px...), 0o644))
}

// values decodes host-order frames of dt.
func values(b []byte, dt dataset.DType) []float64 {
	out := make([]float64, len(b)/dt.Size())
	for i := range out {
		switch dt {
		case dataset.Int8:
			out[i] = float64(int8(b[i]))
		case dataset.Uint8:
			out[i] = float64(b[i])
		case dataset.Int16:
			out[i] = float64(int16(binary.NativeEndian.Uint16(b[2*i:])))
		case dataset.Uint16:
			out[i] = float64(binary.NativeEndian.Uint16(b[2*i:]))
		case dataset.Float32:
			out[i] = float64(math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:])))
		}
	}
	return out
}

// TestSyntheticMRC writes every mode stemdot reads, in both byte orders, with and
// without the byte-order stamp and an extended header, and checks every pixel.
func TestSyntheticMRC(t *testing.T) {
	cases := []struct {
		name  string
		m     mrcFile
		dt    dataset.DType
		value func(f, i int) float64
		note  string
	}{
		{"int8", mrcFile{nx: 5, ny: 3, nz: 4, mode: 0, imodFlags: -1}, dataset.Int8, func(f, i int) float64 { return float64(f*15+i) - 40 }, ""},
		{"imod-uint8", mrcFile{nx: 5, ny: 3, nz: 4, mode: 0, imodFlags: 0}, dataset.Uint8, func(f, i int) float64 { return float64(f*15+i) + 130 }, "read as uint8"},
		{"imod-signed", mrcFile{nx: 5, ny: 3, nz: 4, mode: 0, imodFlags: 1}, dataset.Int8, func(f, i int) float64 { return float64(f*15+i) - 40 }, ""},
		{"int16-be", mrcFile{nx: 4, ny: 6, nz: 3, mode: 1, big: true, imodFlags: -1}, dataset.Int16, func(f, i int) float64 { return float64(f*1000 - i*300) }, ""},
		{"float32-ext", mrcFile{nx: 7, ny: 2, nz: 5, mode: 2, next: 131072, imodFlags: -1}, dataset.Float32, func(f, i int) float64 { return float64(f) + float64(i)/8 }, ""},
		{"float32-be", mrcFile{nx: 7, ny: 2, nz: 5, mode: 2, big: true, next: 12, imodFlags: -1}, dataset.Float32, func(f, i int) float64 { return -float64(f) * float64(i) / 4 }, ""},
		{"uint16", mrcFile{nx: 3, ny: 3, nz: 6, mode: 6, imodFlags: -1}, dataset.Uint16, func(f, i int) float64 { return float64(f*9+i) * 1000 }, ""},
		{"uint16-be-nostamp", mrcFile{nx: 3, ny: 3, nz: 6, mode: 6, big: true, stamp: []byte{0, 0, 0, 0}, noMap: true, imodFlags: -1}, dataset.Uint16, func(f, i int) float64 { return float64(f*9+i) * 1000 }, "read as big-endian"},
		{"int16-le-nostamp", mrcFile{nx: 3, ny: 3, nz: 6, mode: 1, stamp: []byte{0, 0, 0, 0}, imodFlags: -1}, dataset.Int16, func(f, i int) float64 { return -float64(f*9 + i) }, "read as little-endian"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stack.mrc")
			tc.m.write(t, path, tc.value)
			ds, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer ds.Close()
			assert.Equal(t, "mrc", ds.Format())
			assert.Equal(t, [2]int{tc.m.ny, tc.m.nx}, ds.SigShape())
			assert.Equal(t, tc.dt, ds.DType())
			assert.Equal(t, []int{1, tc.m.nz}, ds.NavShape())
			assert.True(t, dataset.NavShapeGuessed(ds), "an MRC stack states no scan shape")
			if tc.note != "" {
				assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), tc.note)
			}
			buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
			got := values(buf, tc.dt)
			n := tc.m.nx * tc.m.ny
			for f := range tc.m.nz {
				for i := range n {
					require.Equal(t, tc.value(f, i), got[f*n+i], "frame %d pixel %d", f, i)
				}
			}
		})
	}
}

// halfReference decodes the float16 pixels of an MRC file of MODE 12 with numpy (byte
// order from MACHST) and writes them as little-endian float32 to argv[2].
const halfReference = `
import sys, numpy as np
raw = open(sys.argv[1], "rb").read()
e = ">" if raw[212] == 0x11 else "<"
nx, ny, nz, mode = np.frombuffer(raw[:16], e + "i4")
nsymbt = np.frombuffer(raw[92:96], e + "i4")[0]
assert mode == 12
px = np.frombuffer(raw[1024 + nsymbt:], e + "f2", count=nx * ny * nz)
open(sys.argv[2], "wb").write(px.astype("<f4").tobytes())
`

// TestMRCFloat16 writes every float16 bit pattern (normal, subnormal, zeros,
// infinities, NaNs) as 4 frames of 128×128 in both byte orders, and compares the float32
// frames with numpy's conversion.
func TestMRCFloat16(t *testing.T) {
	for _, big := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "half.mrc")
		var order binary.ByteOrder = binary.LittleEndian
		if big {
			order = binary.BigEndian
		}
		m := mrcFile{nx: 128, ny: 128, nz: 4, mode: 6, big: big, next: 6, imodFlags: -1}
		m.write(t, path, func(f, i int) float64 { return float64(f*128*128 + i) }) // every uint16 once
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		order.PutUint32(b[12:], 12)
		require.NoError(t, os.WriteFile(path, b, 0o644))
		testfiles.RunPython(t, halfReference, []string{"numpy"}, path, filepath.Join(dir, "want"))
		want, err := os.ReadFile(filepath.Join(dir, "want"))
		require.NoError(t, err)

		ds, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 2}})
		require.NoError(t, err)
		assert.Equal(t, dataset.Float32, ds.DType())
		assert.Equal(t, [2]int{128, 128}, ds.SigShape())
		got := make([]byte, 4*ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(0, 4, got))
		require.Len(t, want, len(got))
		for i := 0; i < len(got); i += 4 {
			g, w := binary.NativeEndian.Uint32(got[i:]), binary.LittleEndian.Uint32(want[i:])
			if gf, wf := math.Float32frombits(g), math.Float32frombits(w); gf != gf || wf != wf {
				require.True(t, gf != gf && wf != wf, "float16 %#04x: %x, numpy %x", i/4, g, w)
				continue
			}
			require.Equal(t, w, g, "float16 %#04x", i/4)
		}
		part := make([]byte, ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(3, 4, part))
		assert.Equal(t, got[3*ds.FrameBytes():], part)
		// A file cut short after it was opened is an errs.IO error, not zeros.
		require.NoError(t, os.Truncate(path, 1024+6+2*128*128*3+100))
		err = ds.ReadFrames(2, 4, got[:2*ds.FrameBytes()])
		assert.ErrorIs(t, err, errs.IO)
		assert.Contains(t, err.Error(), "the file changed while being read")
		require.NoError(t, ds.Close())
	}
}

// TestMRCFrameCounts: a file cut inside a frame, a file holding fewer frames than NZ,
// one with bytes after the NZ frames, and option nav_shape on a stack.
func TestMRCFrameCounts(t *testing.T) {
	value := func(f, i int) float64 { return float64(f*100 + i) }
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.mrc")
	mrcFile{nx: 4, ny: 4, nz: 6, mode: 6, frames: 4, cut: 10, imodFlags: -1}.write(t, cut, value)
	ds, err := dataset.Open(cut, dataset.Options{NavShape: []int{2, 3}})
	require.NoError(t, err)
	notes := strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "NZ=6 frames but the file holds 4 whole frames")
	assert.Contains(t, notes, "the file ends inside frame 4")
	assert.Equal(t, []int{1, 3}, ds.NavShape(), "the complete scan rows of an interrupted scan")
	buf := make([]byte, 3*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 3, buf))
	assert.Equal(t, float64(2*100+15), values(buf, dataset.Uint16)[2*16+15])
	require.NoError(t, ds.Close())

	long := filepath.Join(dir, "long.mrc")
	mrcFile{nx: 4, ny: 4, nz: 6, mode: 6, extra: 7, imodFlags: -1}.write(t, long, value)
	ds, err = dataset.Open(long, dataset.Options{NavShape: []int{2, 3}})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, ds.NavShape())
	assert.False(t, dataset.NavShapeGuessed(ds))
	assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "7 bytes after the last of the NZ=6 frames are not read")
	require.NoError(t, ds.Close())

	empty := filepath.Join(dir, "empty.mrc")
	mrcFile{nx: 4, ny: 4, nz: 6, mode: 6, frames: -1, cut: 31, imodFlags: -1}.write(t, empty, value)
	_, err = dataset.Open(empty, dataset.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "no whole frame")
}

// TestMRCRefused: modes stemdot does not read are errs.DType naming the mode; a header
// that is not MRC, or whose fields are out of range, is errs.Format naming the field.
func TestMRCRefused(t *testing.T) {
	dir := t.TempDir()
	for mode, what := range map[int]string{3: "complex int16", 4: "complex float32", 16: "RGB", 101: "4-bit"} {
		path := filepath.Join(dir, "m.mrc")
		mrcFile{nx: 4, ny: 4, nz: 1, mode: 6, imodFlags: -1}.write(t, path, func(f, i int) float64 { return 0 })
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		binary.LittleEndian.PutUint32(b[12:], uint32(mode))
		require.NoError(t, os.WriteFile(path, b, 0o644))
		_, err = dataset.Open(path, dataset.Options{})
		require.Error(t, err, "mode %d", mode)
		assert.ErrorIs(t, err, errs.DType, "mode %d", mode)
		assert.Contains(t, err.Error(), what)
		assert.Contains(t, err.Error(), path)
	}
	bad := func(edit func(b []byte), want string) {
		t.Helper()
		path := filepath.Join(dir, "bad.mrc")
		mrcFile{nx: 4, ny: 4, nz: 2, mode: 6, imodFlags: -1}.write(t, path, func(f, i int) float64 { return 1 })
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		edit(b)
		require.NoError(t, os.WriteFile(path, b, 0o644))
		_, err = dataset.Open(path, dataset.Options{})
		require.Error(t, err)
		assert.ErrorIs(t, err, errs.Format)
		assert.Contains(t, err.Error(), want)
	}
	bad(func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 7) }, "unknown MODE 7")
	bad(func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 0) }, "NY is 0")
	bad(func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 0xFFFFFFFF) }, "NZ is -1")
	bad(func(b []byte) { binary.LittleEndian.PutUint32(b[92:], 1<<30) }, "NSYMBT=1073741824")
	bad(func(b []byte) { copy(b[212:], "\x00\x00\x00\x00"); binary.LittleEndian.PutUint32(b[12:], 99) }, "not an MRC file")
	short := filepath.Join(dir, "short.mrc")
	require.NoError(t, os.WriteFile(short, make([]byte, 100), 0o644))
	_, err := dataset.Open(short, dataset.Options{})
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "shorter than the 1024-byte MRC header")
}

// deMovie writes a Direct Electron movie <dir>/<name>_movie.mrc of n frames of 2×3
// uint16 pixels (frame f holds f+1 at pixel 0, 100+i at pixel i > 0), its info file
// with the lines given, and, when csv is not empty, its scan coordinates.
func deMovie(t *testing.T, dir, name string, n int, info, csv string) string {
	t.Helper()
	path := filepath.Join(dir, name+"_movie.mrc")
	mrcFile{nx: 3, ny: 2, nz: n, mode: 6, imodFlags: -1}.write(t, path, func(f, i int) float64 {
		if i == 0 {
			return float64(f + 1)
		}
		return float64(100 + i)
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+"_info.txt"), []byte(info), 0o644))
	if csv != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+"_scan_coordinates.csv"), []byte(csv), 0o644))
	}
	return path
}

// firstPixels returns pixel 0 of every frame of ds: the frame number + 1 of deMovie, 0
// for a blank one.
func firstPixels(t *testing.T, ds dataset.Dataset) []int {
	t.Helper()
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	v := values(buf, dataset.Uint16)
	out := make([]int, ds.NumFrames())
	for i := range out {
		out[i] = int(v[i*6])
	}
	return out
}

// TestDirectElectronScans: the nav shape of a raster scan from the info file (also for
// <name>_<n>_movie.mrc and repeated scans), a custom scan's frames at the positions of
// its CSV (in order: no reordering; out of order, repeated, and missing positions), and
// the errors of a missing or bad CSV.
func TestDirectElectronScans(t *testing.T) {
	scan := "Scan - Enable = Enable\nScan - Size X = 3\nScan - Size Y = 2\n"
	t.Run("raster", func(t *testing.T) {
		dir := t.TempDir()
		// The movie of acquisition 0 of dataset 20250101_00001 is 20250101_00001_0_movie.mrc.
		path := deMovie(t, dir, "20250101_00001_0", 6, "Autosave 4D File Format = MRC\n"+scan+"Scan - Type = Raster\n", "")
		require.NoError(t, os.Rename(filepath.Join(dir, "20250101_00001_0_info.txt"), filepath.Join(dir, "20250101_00001_info.txt")))
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 3}, ds.NavShape())
		assert.False(t, dataset.NavShapeGuessed(ds))
		_, view := ds.(dataset.Viewer)
		assert.True(t, view, "frames in scan order are viewed in place")
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, firstPixels(t, ds))
	})
	t.Run("repeats", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "rep", 12, scan+"Scan - Repeats = 2\n", "")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 2, 3}, ds.NavShape(), "2 repeats of 2×3: a scan of planes (#33)")
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, firstPixels(t, ds))
	})
	t.Run("raster-roi", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "roi", 2, scan+"Scan - Type = Raster\nScan - ROI Enable = Enable\nScan - ROI Size X = 2\nScan - ROI Size Y = 1\nScan - ROI Offset X = 1\nScan - ROI Offset Y = 0\n", "")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{1, 2}, ds.NavShape())
		assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), `the raster scan covers its ROI of 1×2 positions (Scan - ROI Offset X = "1", Y = "0")`)
	})
	t.Run("raster-serpentine-csv", func(t *testing.T) {
		// The second row scanned right to left: the CSV places it.
		path := deMovie(t, t.TempDir(), "s", 6, scan+"Scan - Type = Raster\n", "0,0\n1,0\n2,0\n2,1\n1,1\n0,1\n")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 3}, ds.NavShape())
		assert.Equal(t, []int{1, 2, 3, 6, 5, 4}, firstPixels(t, ds))
	})
	t.Run("no-scan", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "movie", 4, "Scan - Enable = Disable\n", "")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{1, 4}, ds.NavShape())
		assert.True(t, dataset.NavShapeGuessed(ds))
		assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "describes no scan")
	})
	custom := scan + "Scan - Type = XY File\n"
	t.Run("custom-in-order", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "c", 6, custom, "0,0\n1,0\n2,0\n0,1\n1,1\n2,1\n")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		_, view := ds.(dataset.Viewer)
		assert.True(t, view, "a CSV in row-major order needs no reordering")
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, firstPixels(t, ds))
	})
	t.Run("custom-shuffled", func(t *testing.T) {
		// Column-major, position (x=1, y=1) skipped, (0,0) visited again by the last frame,
		// and a header line.
		path := deMovie(t, t.TempDir(), "c", 6, custom, "x,y\n0,0\n0,1\n1,0\n2,0\n2,1\n0,0\n")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 2, 3}, ds.NavShape(), "two passes of 2×3")
		assert.Equal(t, []int{1, 3, 4, 2, 0, 5, 6, 0, 0, 0, 0, 0}, firstPixels(t, ds))
		notes := strings.Join(dataset.Notes(ds), "\n")
		assert.Contains(t, notes, "6 scan positions of 12 have no frame")
		assert.Contains(t, notes, "read as 2 passes of the scan of 2×3 (nav shape (2, 2, 3))")
		// Option nav_shape reshapes the 12 positions.
		ds2, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 6}})
		require.NoError(t, err)
		defer ds2.Close()
		assert.Equal(t, []int{1, 3, 4, 2, 0, 5, 6, 0, 0, 0, 0, 0}, firstPixels(t, ds2))
		// Option nav_shape of as many positions as the file has frames (6, not the
		// scan's 12) reads them as stored, as for any format.
		for _, nav := range [][]int{{2, 3}, {6}} {
			ds3, err := dataset.Open(path, dataset.Options{NavShape: nav})
			require.NoError(t, err)
			defer ds3.Close()
			assert.Equal(t, nav, ds3.NavShape())
			assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, firstPixels(t, ds3))
			notes := strings.Join(dataset.Notes(ds3), "\n")
			assert.Contains(t, notes, "(option nav_shape) has as many positions as the file has frames: they are read in acquisition order, not placed at the scan positions of c_scan_coordinates.csv")
			assert.NotContains(t, notes, "have no frame")
		}
	})
	t.Run("custom-short-csv", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "c", 4, custom, "2,1\n1,1\n")
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{0, 0, 0, 0, 2, 1}, firstPixels(t, ds))
		notes := strings.Join(dataset.Notes(ds), "\n")
		assert.Contains(t, notes, "lists 2 scan positions, the file holds 4 frames")
		assert.Contains(t, notes, "2 frames after the first scan position are in no scan position")
	})
	t.Run("custom-no-csv", func(t *testing.T) {
		path := deMovie(t, t.TempDir(), "c", 6, custom, "")
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err)
		assert.ErrorIs(t, err, errs.Format)
		assert.Contains(t, err.Error(), "c_scan_coordinates.csv are missing")
		assert.Contains(t, err.Error(), "option nav_shape")
		ds, err := dataset.Open(path, dataset.Options{NavShape: []int{3, 2}})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, firstPixels(t, ds))
		assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "acquisition order")
	})
	for name, tc := range map[string]struct{ info, csv, want string }{
		"outside":  {custom, "0,0\n3,0\n", "line 2: scan position x=3, y=0 is outside the scan of 3×2"},
		"not-xy":   {custom, "0,0\n1;0\n", "line 2: \"1;0\" is not \"x,y\""},
		"no-lines": {custom, "x,y\n", "lists no scan position"},
		"no-size":  {"Scan - Enable = Enable\nScan - Size X = 3\n", "", "no \"Scan - Size Y\" line; give option nav_shape"},
		"bad-size": {"Scan - Enable = Enable\nScan - Size X = -3\nScan - Size Y = 2\n", "", "Scan - Size X = \"-3\" is not a scan size"},
		// A value from the info file reaches the message quoted, escape sequences and all.
		"type-quoted": {scan + "Scan - Type = \x1b[2JXY\n", "", `(Scan - Type = "\x1b[2JXY" in c_info.txt)`},
	} {
		t.Run(name, func(t *testing.T) {
			path := deMovie(t, t.TempDir(), "c", 2, tc.info, tc.csv)
			_, err := dataset.Open(path, dataset.Options{})
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.Format)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzMRCHeader(f *testing.F) {
	if dir, ok := testfiles.Lookup(); ok {
		if b, err := os.ReadFile(filepath.Join(dir, "mrc", "Custom_movie.mrc")); err == nil {
			f.Add(b[:mrc.HeaderBytes])
		}
	}
	h := make([]byte, mrc.HeaderBytes)
	copy(h, []byte{4, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 6})
	copy(h[208:], "MAP DD")
	f.Add(h)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := mrc.ParseHeader(b)
		if err == nil && (h.NX <= 0 || h.NY <= 0 || h.NZ <= 0 || h.Extended < 0 || h.DType.Size() == 0) {
			t.Fatalf("accepted header %+v", h)
		}
	})
}

// FuzzMRCOpen opens fuzzed MRC files beside a fixed Direct Electron info file of a
// custom scan and a fuzzed scan-coordinates CSV, and reads every frame.
func FuzzMRCOpen(f *testing.F) {
	if dir, ok := testfiles.Lookup(); ok {
		b, err1 := os.ReadFile(filepath.Join(dir, "mrc", "Custom_movie.mrc"))
		csv, err2 := os.ReadFile(filepath.Join(dir, "mrc", "Custom_scan_coordinates.csv"))
		if err1 == nil && err2 == nil {
			f.Add(b, csv)
		}
	}
	h := make([]byte, mrc.HeaderBytes+32)
	copy(h, []byte{4, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 6})
	copy(h[208:], "MAP DD")
	f.Add(h, []byte("1,0\n0,1\n"))
	f.Fuzz(func(t *testing.T, b, csv []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "x_movie.mrc")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "x_info.txt"), []byte("Scan - Enable = Enable\nScan - Size X = 5\nScan - Size Y = 5\nScan - Type = XY File\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "x_scan_coordinates.csv"), csv, 0o644))
		ds, err := dataset.Open(path, dataset.Options{})
		if err != nil {
			return
		}
		defer ds.Close()
		if n := ds.NumFrames(); int64(n)*int64(ds.FrameBytes()) <= 1<<24 {
			require.NoError(t, ds.ReadFrames(0, n, make([]byte, n*ds.FrameBytes())))
		}
	})
}

// TestDirectElectronSidecarNotRegular: an info file or scan-coordinates CSV beside the
// movie that is a named pipe, a directory or a symbolic link loop is refused at once,
// naming it (errs.IO), neither skipped (the movie then read as a series without a word)
// nor waited on (a reader blocked on a named pipe hangs).
func TestDirectElectronSidecarNotRegular(t *testing.T) {
	for _, sidecar := range []string{"_info.txt", "_scan_coordinates.csv"} {
		for kind, create := range map[string]func(string) error{
			"a named pipe": func(p string) error { return unix.Mkfifo(p, 0o644) },
			"a directory":  func(p string) error { return os.Mkdir(p, 0o755) },
			"a symbolic link loop": func(p string) error {
				return os.Symlink(filepath.Base(p), p)
			},
		} {
			t.Run(sidecar+" "+kind, func(t *testing.T) {
				dir := t.TempDir()
				path := deMovie(t, dir, "c", 6, "Scan - Enable = Enable\nScan - Size X = 3\nScan - Size Y = 2\nScan - Type = XY File\n", "0,0\n1,0\n2,0\n0,1\n1,1\n2,1\n")
				side := filepath.Join(dir, "c"+sidecar)
				require.NoError(t, os.Remove(side))
				require.NoError(t, create(side))
				done := make(chan error, 1)
				go func() {
					ds, err := dataset.Open(path, dataset.Options{})
					if err == nil {
						ds.Close()
					}
					done <- err
				}()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					if w, err := os.OpenFile(side, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
						w.Close() // releases the reader blocked on it
					}
					t.Fatalf("Open(%s) blocked for 10 s on %s", path, side)
				}
				require.Error(t, err)
				assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
				assert.Contains(t, err.Error(), side)
			})
		}
	}
}
