package tvips_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/tvips"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// tvipsReference is the independent decoder: numpy reads the series header as
// RosettaSciIO's record layout (13 little-endian uint32 words), the parts' records as a
// structured dtype of the image header and the pixels, concatenates the parts, and
// places scan position r-1 at the first frame of rotator index r (the word at byte 48
// of the image header). It writes the frames in file order to argv[2] and the scan's
// to argv[3] (uint16, C order), and prints the frame count, the scan positions and
// the frame shape.
const tvipsReference = `
import sys, numpy as np
parts = sys.argv[1].split(",")
hdr = np.fromfile(parts[0], dtype="<u4", count=13)
size, version, dimx, dimy, bpp = hdr[:5]
assert size == 256 and version == 2 and bpp == 16
rec = np.dtype([("head", "V%d" % hdr[12]), ("data", "<u2", (dimy, dimx))])
heads, frames = [], []
for i, p in enumerate(parts):
    r = np.fromfile(p, dtype=rec, offset=256 if i == 0 else 0)
    heads.append(np.frombuffer(r["head"].tobytes(), "<u4").reshape(len(r), -1))
    frames.append(r["data"])
heads, frames = np.concatenate(heads), np.concatenate(frames)
rot = heads[:, 12]
scan = np.zeros((rot.max(),) + frames.shape[1:], "<u2")
done = set()
for i, r in enumerate(rot):
    if r > 0 and r not in done:
        scan[r - 1] = frames[i]
        done.add(r)
open(sys.argv[2], "wb").write(frames.astype("<u2").tobytes())
open(sys.argv[3], "wb").write(scan.tobytes())
print(len(frames), len(scan), dimy, dimx)
`

// reference runs tvipsReference on the parts and returns the frames in file order, the
// scan's frames, and the counts it printed.
func reference(t *testing.T, parts ...string) (file, scan []byte, counts []string) {
	t.Helper()
	dir := t.TempDir()
	out := testfiles.RunPython(t, tvipsReference, []string{"numpy"}, strings.Join(parts, ","), filepath.Join(dir, "file"), filepath.Join(dir, "scan"))
	file, err := os.ReadFile(filepath.Join(dir, "file"))
	require.NoError(t, err)
	scan, err = os.ReadFile(filepath.Join(dir, "scan"))
	require.NoError(t, err)
	return file, scan, strings.Fields(string(out))
}

// readAll reads every frame of ds as little-endian bytes.
func readAll(t *testing.T, ds dataset.Dataset) []byte {
	t.Helper()
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	dataset.CopyToHost(buf, buf, ds.DType().Size(), false) // host → little-endian: the same swap
	return buf
}

// TestRealTVIPS opens the real streams (one file, and one split over three parts,
// opened by each part's name) and compares their frames with numpy's decoding.
func TestRealTVIPS(t *testing.T) {
	dir := testfiles.Dir(t)
	single := testfiles.File(t, "tvips/test_tvips_2233_000.tvips")
	t.Run("2233", func(t *testing.T) {
		file, scan, counts := reference(t, single)
		require.Equal(t, []string{"4", "4", "3", "3"}, counts)
		assert.Equal(t, file, scan, "rotator index 1..4: the frames in order")
		ds, err := dataset.Open(single, dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, "tvips", ds.Format())
		assert.Equal(t, []int{2, 2}, ds.NavShape(), "4 scan positions: a square scan, as rsciio's scan_shape auto")
		assert.Equal(t, [2]int{3, 3}, ds.SigShape())
		assert.Equal(t, dataset.Uint16, ds.DType())
		assert.False(t, dataset.NavShapeGuessed(ds))
		_, mapped := ds.(dataset.Mapper)
		assert.True(t, mapped, "frames in scan order are mapped in place for the GPU feed")
		assert.Equal(t, scan, readAll(t, ds))
	})
	split := make([]string, 3)
	for i := range split {
		split[i] = filepath.Join(dir, "tvips", fmt.Sprintf("test_tvips_2345_split_%03d.tvips", i))
	}
	whole := filepath.Join(dir, "tvips", "test_tvips_2345_000.tvips")
	for _, tc := range []struct {
		name  string
		parts []string
	}{{"2345", []string{whole}}, {"2345-split", split}} {
		t.Run(tc.name, func(t *testing.T) {
			file, scan, counts := reference(t, tc.parts...)
			require.Equal(t, []string{"6", "5", "4", "5"}, counts)
			for _, open := range tc.parts {
				ds, err := dataset.Open(open, dataset.Options{})
				require.NoError(t, err)
				assert.Equal(t, []int{1, 5}, ds.NavShape(), "rotator index 0 (before the scan), 1..5: 5 positions, no scan shape")
				assert.True(t, dataset.NavShapeGuessed(ds))
				assert.Equal(t, [2]int{4, 5}, ds.SigShape())
				assert.Equal(t, scan, readAll(t, ds), "opened as %s", filepath.Base(open))
				require.NoError(t, ds.Close())
			}
			// In file order, as RosettaSciIO's scan_shape (2, 3) with scan_start_frame 0.
			ds, err := dataset.Open(tc.parts[len(tc.parts)-1], dataset.Options{NavShape: []int{2, 3}, FormatOptions: map[string]string{"rotator_index": "false"}})
			require.NoError(t, err)
			defer ds.Close()
			assert.Equal(t, []int{2, 3}, ds.NavShape())
			assert.Equal(t, file, readAll(t, ds))
			// Option nav_shape of the stream's 6 frames alone reads them in file order too
			// (not the 5 placed ones, the first row only).
			all, err := dataset.Open(tc.parts[0], dataset.Options{NavShape: []int{2, 3}})
			require.NoError(t, err)
			defer all.Close()
			assert.Equal(t, []int{2, 3}, all.NavShape())
			assert.Equal(t, file, readAll(t, all))
			assert.Contains(t, strings.Join(dataset.Notes(all), "\n"), "nav shape (2, 3) (option nav_shape) has as many positions as the file has frames: they are read in file order, not placed by the rotator index")
			// Frames across the parts' boundaries, through the engine: each frame's sum and
			// one pixel.
			stack, err := stemdot.Masks(ds.SigShape(), "rect:0,0,5,4", "point:4,3")
			require.NoError(t, err)
			res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
			require.NoError(t, err)
			fb := ds.FrameBytes()
			for f := range 6 {
				var sum float64
				for i := range 20 {
					sum += float64(binary.LittleEndian.Uint16(file[f*fb+2*i:]))
				}
				assert.Equal(t, sum, res.Value(f, 0), "frame %d sum", f)
				assert.Equal(t, float64(binary.LittleEndian.Uint16(file[f*fb+2*19:])), res.Value(f, 1), "frame %d pixel (3, 4)", f)
			}
		})
	}
}

// stream describes a synthetic TVIPS stream.
type stream struct {
	version, bpp, dimx, dimy int
	header                   int          // image header bytes (version 2)
	rot                      []int        // rotator index per frame (nil: 0)
	xy                       [][2]int     // scan x, y per frame (nil: none)
	split                    []int        // frames per part (nil: one file)
	cut                      int          // bytes of one more record at the end
	edit                     func([]byte) // changes the series header
}

// pixel is pixel i of frame f of a synthetic stream.
func pixel(f, i, bpp int) int {
	if bpp == 8 {
		return (f*7 + i) % 256
	}
	return f*1000 + i*3 + 40000
}

// write writes the stream's parts <dir>/s_000.tvips, ... (or <dir>/s.tvips) and returns
// their paths.
func (s stream) write(t *testing.T, dir string) []string {
	t.Helper()
	le := binary.LittleEndian
	head := make([]byte, 256)
	for i, v := range []int{256, s.version, s.dimx, s.dimy, s.bpp, 0, 0, 1, 1, 10, 300, 1000, s.header} {
		le.PutUint32(head[4*i:], uint32(v))
	}
	copy(head[52:], strings.Repeat("TVIPS ", 34))
	if s.edit != nil {
		s.edit(head)
	}
	hb := s.header
	if s.version == 1 {
		hb = 12
	}
	n := len(s.rot)
	if s.xy != nil {
		n = len(s.xy)
	}
	px := s.dimx * s.dimy
	var records []byte
	for f := range n {
		rec := make([]byte, hb+px*s.bpp/8)
		le.PutUint32(rec, uint32(f)) // counter
		if hb >= 52 && s.rot != nil {
			le.PutUint32(rec[48:], uint32(s.rot[f]))
		}
		if hb >= 76 && s.xy != nil {
			le.PutUint32(rec[68:], math.Float32bits(float32(s.xy[f][0])))
			le.PutUint32(rec[72:], math.Float32bits(float32(s.xy[f][1])))
		}
		for i := range px {
			if s.bpp == 8 {
				rec[hb+i] = byte(pixel(f, i, 8))
			} else {
				le.PutUint16(rec[hb+2*i:], uint16(pixel(f, i, 16)))
			}
		}
		records = append(records, rec...)
	}
	records = append(records, make([]byte, s.cut)...)
	recBytes := hb + px*s.bpp/8
	if s.split == nil {
		p := filepath.Join(dir, "s.tvips")
		require.NoError(t, os.WriteFile(p, append(head, records...), 0o644))
		return []string{p}
	}
	var paths []string
	for i, k := range s.split {
		p := filepath.Join(dir, fmt.Sprintf("s_%03d.tvips", i))
		b := records[:min(k*recBytes, len(records))]
		records = records[len(b):]
		if i == len(s.split)-1 {
			b = append(b, records...)
		}
		if i == 0 {
			b = append(append([]byte(nil), head...), b...)
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
		paths = append(paths, p)
	}
	return paths
}

// frameIDs reads every frame of ds and returns the synthetic frame number each holds
// (-1 for a blank frame), checking every pixel.
func frameIDs(t *testing.T, ds dataset.Dataset, bpp int) []int {
	t.Helper()
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	sig := ds.SigShape()
	px := sig[0] * sig[1]
	value := func(p, i int) int {
		if bpp == 8 {
			return int(buf[p*px+i])
		}
		return int(binary.NativeEndian.Uint16(buf[2*(p*px+i):]))
	}
	ids := make([]int, ds.NumFrames())
	for p := range ids {
		ids[p] = -1
		if value(p, 0) == 0 && value(p, px-1) == 0 {
			continue
		}
		for f := range 64 {
			if value(p, 0) == pixel(f, 0, bpp) && value(p, 1) == pixel(f, 1, bpp) {
				ids[p] = f
				break
			}
		}
		require.GreaterOrEqual(t, ids[p], 0, "scan position %d holds no frame of the stream", p)
		for i := range px {
			require.Equal(t, pixel(ids[p], i, bpp), value(p, i), "position %d pixel %d", p, i)
		}
	}
	return ids
}

func seq(a, b int) []int {
	var s []int
	for i := a; i < b; i++ {
		s = append(s, i)
	}
	return s
}

// TestSyntheticTVIPS: version 1 and 2, 8 and 16 bits, streams split with frames across
// parts, the rotator index in order (a sync offset), shuffled, repeated and skipping
// positions, and LiberTEM's scan x and y.
func TestSyntheticTVIPS(t *testing.T) {
	t.Run("v1", func(t *testing.T) {
		p := stream{version: 1, bpp: 8, dimx: 4, dimy: 3, rot: make([]int, 5)}.write(t, t.TempDir())
		_, err := dataset.Open(p[0], dataset.Options{FormatOptions: map[string]string{"rotator_index": "maybe"}})
		assert.ErrorIs(t, err, errs.Argument)
		assert.Contains(t, err.Error(), `option rotator_index "maybe" is not true or false`)
		ds, err := dataset.Open(p[0], dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{1, 5}, ds.NavShape())
		assert.True(t, dataset.NavShapeGuessed(ds))
		assert.Equal(t, dataset.Uint8, ds.DType())
		assert.Equal(t, [2]int{3, 4}, ds.SigShape())
		assert.Equal(t, seq(0, 5), frameIDs(t, ds, 8))
	})
	t.Run("split-in-order", func(t *testing.T) {
		// 2 frames before the scan (index 0), a 3×3 scan, 1 frame after it.
		rot := []int{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0}
		paths := stream{version: 2, bpp: 16, dimx: 5, dimy: 2, header: 60, rot: rot, split: []int{3, 5, 4}}.write(t, t.TempDir())
		for _, p := range paths {
			ds, err := dataset.Open(p, dataset.Options{})
			require.NoError(t, err)
			assert.Equal(t, []int{3, 3}, ds.NavShape())
			assert.Equal(t, seq(2, 11), frameIDs(t, ds, 16))
			notes := strings.Join(dataset.Notes(ds), "\n")
			assert.Contains(t, notes, "a stream of 3 parts")
			assert.Contains(t, notes, "2 frames before the first scan position")
			assert.NotContains(t, notes, "sync offset 2: the first", "the frames before the scan are noted once, by the reader")
			assert.Contains(t, notes, "square scan of 3×3")
			// Ranges across the parts' boundaries.
			for start := range 9 {
				buf := make([]byte, (9-start)*ds.FrameBytes())
				require.NoError(t, ds.ReadFrames(start, 9, buf))
				assert.Equal(t, uint16(pixel(start+2, 0, 16)), binary.NativeEndian.Uint16(buf))
			}
			require.NoError(t, ds.Close())
			assert.Error(t, ds.ReadFrames(0, 1, make([]byte, ds.FrameBytes())), "read after Close")
			assert.Error(t, ds.Close(), "second Close")
		}
	})
	t.Run("rotator-shuffled", func(t *testing.T) {
		// Positions 2 and 1 swapped, position 3 twice, position 5 skipped, a trailing 0.
		rot := []int{0, 1, 3, 2, 4, 4, 6, 0}
		paths := stream{version: 2, bpp: 16, dimx: 3, dimy: 3, header: 64, rot: rot, split: []int{4, 4}}.write(t, t.TempDir())
		ds, err := dataset.Open(paths[1], dataset.Options{NavShape: []int{2, 3}})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 3}, ds.NavShape())
		assert.Equal(t, []int{1, 3, 2, 4, -1, 6}, frameIDs(t, ds, 16))
		notes := strings.Join(dataset.Notes(ds), "\n")
		assert.Contains(t, notes, "1 frame repeats a scan position")
		assert.Contains(t, notes, "1 scan position of 6 has no frame")
		assert.Contains(t, notes, "not stored in scan order")
		// File order on request.
		for _, off := range []string{"false", "no", "Off"} { // a switch is spelled alike for every format (dataset.SwitchOption)
			ds2, err := dataset.Open(paths[0], dataset.Options{FormatOptions: map[string]string{"rotator_index": off}})
			require.NoError(t, err, off)
			assert.Equal(t, seq(0, 8), frameIDs(t, ds2, 16), off)
			ds2.Close()
		}
		ds3, err := dataset.Open(paths[0], dataset.Options{SyncOffset: 2})
		require.NoError(t, err)
		defer ds3.Close()
		assert.Equal(t, seq(2, 8), frameIDs(t, ds3, 16))
		assert.Contains(t, strings.Join(dataset.Notes(ds3), "\n"), "option sync_offset given")
		_, err = dataset.Open(paths[0], dataset.Options{FormatOptions: map[string]string{"rotator_index": "maybe"}})
		assert.ErrorIs(t, err, errs.Argument)
	})
	t.Run("scan-xy", func(t *testing.T) {
		// Three frames parked at (0, 0) before a 2×3 scan (x fastest) whose position
		// (x=2, y=0) comes last.
		xy := [][2]int{{0, 0}, {0, 0}, {0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 1}, {2, 0}}
		paths := stream{version: 2, bpp: 8, dimx: 2, dimy: 2, header: 108, xy: xy}.write(t, t.TempDir())
		ds, err := dataset.Open(paths[0], dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 3}, ds.NavShape())
		assert.False(t, dataset.NavShapeGuessed(ds))
		assert.Equal(t, []int{2, 3, 7, 4, 5, 6}, frameIDs(t, ds, 8))
		assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "2 frames before the first scan position (per the scan x and y")
	})
	t.Run("cut", func(t *testing.T) {
		paths := stream{version: 2, bpp: 16, dimx: 2, dimy: 2, header: 60, rot: []int{1, 2, 3, 4}, split: []int{2, 2}, cut: 30}.write(t, t.TempDir())
		ds, err := dataset.Open(paths[0], dataset.Options{})
		require.NoError(t, err)
		defer ds.Close()
		assert.Equal(t, []int{2, 2}, ds.NavShape())
		assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), "the file ends inside frame 4")
		assert.Equal(t, seq(0, 4), frameIDs(t, ds, 16))
	})
}

// TestTVIPSShrinking: a part truncated after the stream was opened gives an errs.IO
// error naming that part, not zeros.
func TestTVIPSShrinking(t *testing.T) {
	paths := stream{version: 2, bpp: 16, dimx: 2, dimy: 2, header: 60, rot: []int{1, 2, 3, 4}, split: []int{2, 2}}.write(t, t.TempDir())
	ds, err := dataset.Open(paths[0], dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.NoError(t, os.Truncate(paths[1], 70))
	err = ds.ReadFrames(0, 4, make([]byte, 4*ds.FrameBytes()))
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.IO)
	assert.Contains(t, err.Error(), "s_001.tvips: the file changed while being read")
}

// TestTVIPSRefused: malformed series headers and streams are errs.Format (errs.DType for
// a pixel depth stemdot does not read) naming the field or the part.
func TestTVIPSRefused(t *testing.T) {
	base := stream{version: 2, bpp: 16, dimx: 2, dimy: 2, header: 60, rot: []int{1, 2, 3, 4}}
	for _, tc := range []struct {
		edit func([]byte)
		kind errs.Kind
		want string
	}{
		{func(b []byte) { b[1] = 0 }, errs.Format, "size field 0, not 256"},
		{func(b []byte) { b[4] = 3 }, errs.Format, "unknown version 3"},
		{func(b []byte) { b[8] = 0 }, errs.Format, "dimX=0"},
		{func(b []byte) { b[16] = 32 }, errs.DType, "32 bits per pixel"},
		{func(b []byte) { b[16] = 12 }, errs.Format, "bits per pixel 12"},
		{func(b []byte) { binary.LittleEndian.PutUint32(b[48:], 1<<30) }, errs.Format, "image header bytes 1073741824"},
	} {
		s := base
		s.edit = tc.edit
		p := s.write(t, t.TempDir())
		_, err := dataset.Open(p[0], dataset.Options{})
		require.Error(t, err, tc.want)
		assert.ErrorIs(t, err, tc.kind, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), p[0])
	}
	dir := t.TempDir()
	s := base
	s.split = []int{1, 1, 2}
	p := s.write(t, dir)
	// A middle part that is not whole records.
	b, err := os.ReadFile(p[1])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p[1], b[:len(b)-1], 0o644))
	_, err = dataset.Open(p[0], dataset.Options{})
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "s_001.tvips: the part holds 67 bytes of frame records")
	// A missing middle part: the later one cannot be placed.
	require.NoError(t, os.Remove(p[1]))
	_, err = dataset.Open(p[2], dataset.Options{})
	assert.ErrorIs(t, err, errs.IO)
	assert.Contains(t, err.Error(), "s_001.tvips is missing")
	// Opened by _000, the stream ends before the gap.
	ds, err := dataset.Open(p[0], dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, ds.NumFrames())
	require.NoError(t, ds.Close())
	// A lone later part is not a stream's start.
	require.NoError(t, os.Remove(p[0]))
	_, err = dataset.Open(p[2], dataset.Options{})
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "s_002.tvips: the file of 136 bytes is shorter than the 256-byte TVIPS series header")
}

func FuzzTVIPSHeader(f *testing.F) {
	if dir, ok := testfiles.Lookup(); ok {
		if b, err := os.ReadFile(filepath.Join(dir, "tvips", "test_tvips_2233_000.tvips")); err == nil {
			f.Add(b[:tvips.SeriesHeaderBytes])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := tvips.ParseSeriesHeader(b)
		if err == nil && (h.DimX <= 0 || h.DimY <= 0 || h.ImageHeader < 0 || h.DType.Size() == 0) {
			t.Fatalf("accepted header %+v", h)
		}
	})
}

// FuzzTVIPSOpen opens fuzzed streams of two parts (the second part's bytes follow the
// first's at a fuzzed split) and reads every frame.
func FuzzTVIPSOpen(f *testing.F) {
	if dir, ok := testfiles.Lookup(); ok {
		if b, err := os.ReadFile(filepath.Join(dir, "tvips", "test_tvips_2345_000.tvips")); err == nil {
			f.Add(b, uint16(356))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "tvips", "test_tvips_2233_000.tvips")); err == nil {
			f.Add(b, uint16(len(b)))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		dir := t.TempDir()
		k := min(int(at), len(b))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "x_000.tvips"), b[:k], 0o644))
		if k < len(b) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "x_001.tvips"), b[k:], 0o644))
		}
		ds, err := dataset.Open(filepath.Join(dir, "x_000.tvips"), dataset.Options{})
		if err != nil {
			return
		}
		defer ds.Close()
		if n := ds.NumFrames(); int64(n)*int64(ds.FrameBytes()) <= 1<<24 {
			require.NoError(t, ds.ReadFrames(0, n, make([]byte, n*ds.FrameBytes())))
		}
	})
}
