package seq_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/seq"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// seqFile describes a SEQ file that writeSEQ writes.
type seqFile struct {
	version       int32
	width, height int
	bits          int    // bit_depth
	pad           int    // bytes after each frame's pixels (true_image_size − pixels)
	frames        int    // frames written
	allocated     uint32 // allocated_frames (0: frames)
	imageFormat   uint32 // 0: 100 (monochrome)
	compression   uint32
}

// writeSEQ writes the SEQ file that encodeSEQ makes and returns its frames.
func writeSEQ(t *testing.T, path string, s seqFile, seed uint64) [][]uint32 {
	t.Helper()
	b, frames := encodeSEQ(s, seed)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return frames
}

// encodeSEQ lays out a SEQ file as StreamPix writes it (header fields at their byte
// offsets, frames from byte 1024 or 8192 at a stride of true_image_size, the padding
// filled with 0xAB) and returns it with the frames' pixels as written.
func encodeSEQ(s seqFile, seed uint64) ([]byte, [][]uint32) {
	le := binary.LittleEndian
	start := 1024
	if s.version >= 5 {
		start = 8192
	}
	px := s.bits / 8
	stride := s.width*s.height*px + s.pad
	b := make([]byte, start, start+s.frames*stride)
	le.PutUint32(b[0:], 0xFEED)
	copy(b[4:], "N\x00o\x00r\x00p\x00i\x00x\x00")
	le.PutUint32(b[28:], uint32(s.version))
	le.PutUint32(b[32:], uint32(start))
	le.PutUint32(b[548:], uint32(s.width))
	le.PutUint32(b[552:], uint32(s.height))
	le.PutUint32(b[556:], uint32(s.bits))
	le.PutUint32(b[560:], uint32(s.bits))
	le.PutUint32(b[564:], uint32(s.width*s.height*px))
	format := s.imageFormat
	if format == 0 {
		format = 100
	}
	le.PutUint32(b[568:], format)
	alloc := s.allocated
	if alloc == 0 {
		alloc = uint32(s.frames)
	}
	le.PutUint32(b[572:], alloc)
	le.PutUint32(b[580:], uint32(stride))
	le.PutUint32(b[620:], s.compression)
	rng := rand.New(rand.NewPCG(seed, 3))
	frames := make([][]uint32, s.frames)
	for i := range frames {
		frames[i] = make([]uint32, s.width*s.height)
		for j := range frames[i] {
			v := rng.Uint32() >> (32 - s.bits)
			frames[i][j] = v
			switch px {
			case 1:
				b = append(b, byte(v))
			case 2:
				b = le.AppendUint16(b, uint16(v))
			case 4:
				b = le.AppendUint32(b, v)
			}
		}
		for range s.pad {
			b = append(b, 0xAB)
		}
	}
	return b, frames
}

// readAll reads every frame of ds as uint32 values.
func readAll(t *testing.T, ds dataset.Dataset) [][]uint32 {
	t.Helper()
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	n := ds.SigShape()[0] * ds.SigShape()[1]
	out := make([][]uint32, ds.NumFrames())
	for i := range out {
		out[i] = make([]uint32, n)
		fr := buf[i*ds.FrameBytes():]
		for j := range out[i] {
			switch ds.DType() {
			case dataset.Uint8:
				out[i][j] = uint32(fr[j])
			case dataset.Uint16:
				out[i][j] = uint32(binary.NativeEndian.Uint16(fr[2*j:]))
			case dataset.Uint32:
				out[i][j] = binary.NativeEndian.Uint32(fr[4*j:])
			}
		}
	}
	return out
}

// numpySEQ reads a SEQ file with numpy as LiberTEM lays it out (header fields by a
// little-endian struct, frames from byte 8192 from version 5 on, else 1024, every
// true_image_size bytes) and returns its frames.
func numpySEQ(t *testing.T, path string) [][]uint32 {
	t.Helper()
	out := testfiles.RunPython(t, `
import sys, struct
import numpy as np
path = sys.argv[1]
with open(path, "rb") as f:
    head = f.read(1024)
magic, = struct.unpack_from("<I", head, 0)
version, = struct.unpack_from("<l", head, 28)
width, height, bits = struct.unpack_from("<III", head, 548)
true_size, = struct.unpack_from("<I", head, 580)
assert magic == 0xFEED
rec = np.dtype([("px", "<u%d" % (bits // 8), (height, width)), ("pad", "V%d" % (true_size - width * height * bits // 8))])
frames = np.fromfile(path, rec, offset=8192 if version >= 5 else 1024)["px"]
for fr in frames:
    print(" ".join(str(int(v)) for v in fr.ravel()))
`, []string{"numpy"}, path)
	var frames [][]uint32
	for line := range strings.Lines(string(out)) {
		var fr []uint32
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseUint(f, 10, 32)
			require.NoError(t, err)
			fr = append(fr, uint32(v))
		}
		frames = append(frames, fr)
	}
	return frames
}

// Every header variant: old (1024-byte) and new (8192-byte) headers, 8, 16 and 32-bit
// pixels, with and without padding after each frame; frames are read back pixel for
// pixel, detected by extension.
func TestSEQVariants(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    seqFile
		dt   dataset.DType
	}{
		{"v4-u16-timestamp", seqFile{version: 4, width: 12, height: 10, bits: 16, pad: 8, frames: 6}, dataset.Uint16},
		{"v5-u8-packed", seqFile{version: 5, width: 16, height: 8, bits: 8, frames: 6}, dataset.Uint8},
		{"v5-u16-padded", seqFile{version: 5, width: 7, height: 5, bits: 16, pad: 1034, frames: 6}, dataset.Uint16},
		{"v3-u32", seqFile{version: 3, width: 9, height: 11, bits: 32, pad: 6, frames: 6}, dataset.Uint32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.seq")
			want := writeSEQ(t, path, tc.s, 11)
			ds, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 3}})
			require.NoError(t, err)
			defer ds.Close()
			assert.Equal(t, "seq", ds.Format())
			assert.Equal(t, []int{2, 3}, ds.NavShape())
			assert.Equal(t, [2]int{tc.s.height, tc.s.width}, ds.SigShape())
			assert.Equal(t, tc.dt, ds.DType())
			assert.Equal(t, want, readAll(t, ds))
			assert.Empty(t, dataset.Notes(ds))
			t.Run("numpy", func(t *testing.T) { assert.Equal(t, numpySEQ(t, path), readAll(t, ds)) })
			// Any frame range reads the same frames.
			buf := make([]byte, 2*ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(3, 5, buf))
			all := make([]byte, 6*ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(0, 6, all))
			assert.Equal(t, all[3*ds.FrameBytes():5*ds.FrameBytes()], buf)
		})
	}
}

// A SEQ file has no scan shape: without option nav_shape its frames are one row, and
// the user is warned to give it; the magic alone detects a SEQ file of another name.
func TestSEQNoNavShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scan.dat")
	want := writeSEQ(t, path, seqFile{version: 5, width: 4, height: 4, bits: 16, pad: 8, frames: 5}, 1)
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, "seq", ds.Format())
	assert.Equal(t, []int{1, 5}, ds.NavShape())
	assert.True(t, dataset.NavShapeGuessed(ds))
	assert.Equal(t, want, readAll(t, ds))
}

// Frame counts that differ from the scan, a file cut inside a frame, a sync offset, a
// header whose allocated_frames differs from the file, and correction files beside it.
func TestSEQFrameCounts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scan.seq")
	s := seqFile{version: 5, width: 6, height: 4, bits: 16, pad: 8, frames: 8, allocated: 100}
	want := writeSEQ(t, path, s, 5)

	ds, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 3}, SyncOffset: 1})
	require.NoError(t, err)
	assert.Equal(t, want[1:7], readAll(t, ds))
	notes := strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "allocated_frames is 100, the file holds 8 whole frames")
	assert.Contains(t, notes, "the last 1 are surplus")
	ds.Close()

	// Cut inside frame 5: five whole frames, one complete row of three kept.
	stride := int64(6*4*2 + 8)
	require.NoError(t, os.Truncate(path, 8192+5*stride+10))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scan.seq.dark.mrc"), []byte("x"), 0o644))
	_, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 3}})
	assert.ErrorContains(t, err, "scan.seq.dark.mrc: the file of 1 bytes is shorter than the 1024-byte MRC header (option seq_corrections=false reads the frames without the dark and gain references)")
	ds, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 3}, FormatOptions: map[string]string{"seq_corrections": "false"}})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, []int{1, 3}, ds.NavShape())
	assert.Equal(t, want[:3], readAll(t, ds))
	notes = strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "the file ends inside frame 5")
	assert.Contains(t, notes, "scan.seq.dark.mrc beside the file not applied (option seq_corrections=false)")
}

// writeMRC writes a 2-D MRC image of float32 (mode 2) or uint16 (mode 6) values, with an
// extended header of ext bytes, in either byte order (the machine stamp says which).
func writeMRC(t *testing.T, path string, ny, nx int, vals []float64, mode int32, big bool, ext int) {
	t.Helper()
	var o interface {
		binary.ByteOrder
		binary.AppendByteOrder
	} = binary.LittleEndian
	stamp := byte(0x44)
	if big {
		o, stamp = binary.BigEndian, 0x11
	}
	b := make([]byte, 1024+ext)
	o.PutUint32(b[0:], uint32(nx))
	o.PutUint32(b[4:], uint32(ny))
	o.PutUint32(b[8:], 1)
	o.PutUint32(b[12:], uint32(mode))
	o.PutUint32(b[92:], uint32(ext))
	copy(b[208:], "MAP ")
	b[212], b[213] = stamp, stamp
	for _, v := range vals {
		if mode == 2 {
			b = o.AppendUint32(b, math.Float32bits(float32(v)))
		} else {
			b = o.AppendUint16(b, uint16(v))
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// The dark and gain references beside the file are applied as LiberTEM applies them, by
// default, (frame − dark) · gain, and the note says that the defect map, without its
// metadata file, is not applied; option seq_corrections=false keeps the recorded counts,
// and option seq_corrections=true without references is refused.
func TestSEQCorrections(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scan.seq.seq") // LiberTEM issue #1120: references named after scan
	s := seqFile{version: 5, width: 5, height: 3, bits: 16, pad: 8, frames: 4}
	frames := writeSEQ(t, path, s, 21)
	opt := dataset.Options{NavShape: []int{2, 2}, FormatOptions: map[string]string{seq.OptCorrections: "true"}}
	_, err := dataset.Open(path, opt)
	require.ErrorIs(t, err, errs.Argument)
	assert.Contains(t, err.Error(), "option seq_corrections: no dark or gain reference (scan.seq.dark.mrc, scan.seq.gain.mrc) beside the file")

	n := s.width * s.height
	dark, gain := make([]float64, n), make([]float64, n)
	for i := range n {
		dark[i], gain[i] = float64(100+i), 0.5+float64(i)/10
	}
	writeMRC(t, filepath.Join(dir, "scan.seq.dark.mrc"), s.height, s.width, dark, 6, false, 0)
	writeMRC(t, filepath.Join(dir, "scan.seq.gain.mrc"), s.height, s.width, gain, 2, true, 64)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scan.seq.Config.Metadata.xml"), []byte("<Root/>"), 0o644))

	ds, err := dataset.Open(path, opt)
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, dataset.Float32, ds.DType())
	buf := make([]byte, 4*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 4, buf))
	for f := range 4 {
		for i := range n {
			got := float64(math.Float32frombits(binary.NativeEndian.Uint32(buf[4*(f*n+i):])))
			want := (float64(frames[f][i]) - dark[i]) * gain[i]
			require.InDelta(t, want, got, 1e-6*math.Abs(want)+1e-3, "frame %d pixel %d", f, i)
		}
	}
	notes := strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "(frame − dark) · gain applied with scan.seq.dark.mrc and scan.seq.gain.mrc")
	assert.Contains(t, notes, "the defect pixels that scan.seq.Config.Metadata.xml lists are not patched")

	byDefault, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 2}})
	require.NoError(t, err)
	got := make([]byte, len(buf))
	require.NoError(t, byDefault.ReadFrames(0, 4, got))
	assert.Equal(t, buf, got, "the references applied by default, as with option seq_corrections")
	assert.Contains(t, strings.Join(dataset.Notes(byDefault), "\n"), "as LiberTEM applies them (float32; option seq_corrections=false keeps the recorded counts)")
	require.NoError(t, byDefault.Close())
	raw, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 2}, FormatOptions: map[string]string{seq.OptCorrections: "false"}})
	require.NoError(t, err)
	assert.Equal(t, dataset.Uint16, raw.DType())
	assert.Contains(t, strings.Join(dataset.Notes(raw), "\n"), "scan.seq.dark.mrc, scan.seq.gain.mrc beside the file not applied (option seq_corrections=false)")
	require.NoError(t, raw.Close())

	writeMRC(t, filepath.Join(dir, "scan.seq.gain.mrc"), s.width, s.height, gain, 2, false, 0)
	_, err = dataset.Open(path, opt)
	require.ErrorIs(t, err, errs.Shape)
	assert.Contains(t, err.Error(), "scan.seq.gain.mrc: an MRC image of nx 3 × ny 5 × nz 1, want one image of the frames' 5 × 3")
	opt.FormatOptions[seq.OptCorrections] = "yes please"
	_, err = dataset.Open(path, opt)
	require.ErrorIs(t, err, errs.Argument)
	assert.Contains(t, err.Error(), "option seq_corrections \"yes please\" is not true or false")
}

// Malformed and unsupported files are refused with an error naming the file and the
// header field.
func TestSEQErrors(t *testing.T) {
	dir := t.TempDir()
	good := seqFile{version: 5, width: 4, height: 4, bits: 16, frames: 2}
	for _, tc := range []struct {
		name string
		edit func(s *seqFile)
		cut  int64 // truncate the file to this many bytes (0: not)
		kind errs.Kind
		msg  string
	}{
		{"colour", func(s *seqFile) { s.imageFormat = 200 }, 0, errs.DType, "image_format 200"},
		{"12bit", func(s *seqFile) { s.bits = 12 }, 0, errs.DType, "bit_depth 12"},
		{"compressed", func(s *seqFile) { s.compression = 1 }, 0, errs.Format, "compression_format 1"},
		{"before-first-frame", func(s *seqFile) {}, 4000, errs.Format, "ends before its first frame at byte 8192"},
		{"short-header", func(s *seqFile) {}, 300, errs.Format, "too short for a SEQ header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.edit(&s)
			if s.bits == 12 {
				s.bits = 16 // write 16-bit pixels, then claim 12 bits
			}
			path := filepath.Join(dir, tc.name+".seq")
			writeSEQ(t, path, s, 2)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			if tc.name == "12bit" {
				binary.LittleEndian.PutUint32(b[556:], 12)
			}
			if tc.cut > 0 {
				b = b[:tc.cut]
			}
			require.NoError(t, os.WriteFile(path, b, 0o644))
			_, err = dataset.Open(path, dataset.Options{NavShape: []int{1, 2}})
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.kind)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	// true_image_size smaller than a frame, and a wrong magic given option format seq.
	path := filepath.Join(dir, "stride.seq")
	writeSEQ(t, path, good, 2)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(b[580:], 16)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = dataset.Open(path, dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "true_image_size 16 is smaller than a frame")
	binary.LittleEndian.PutUint32(b[0:], 0xBEEF)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = dataset.Open(path, dataset.Options{Format: seq.Name})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "not a SEQ file: magic 0xBEEF")
}

// FuzzSEQ opens arbitrary bytes as a SEQ file: no panic, and what opens reads.
func FuzzSEQ(f *testing.F) {
	for i, s := range []seqFile{{version: 5, width: 4, height: 3, bits: 16, pad: 8, frames: 2}, {version: 4, width: 2, height: 2, bits: 8, frames: 3}} {
		b, _ := encodeSEQ(s, uint64(i))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "f.seq")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		ds, err := dataset.Open(path, dataset.Options{Format: seq.Name})
		if err != nil {
			return
		}
		defer ds.Close()
		if ds.NumFrames() > 0 && ds.FrameBytes() <= 1<<20 {
			buf := make([]byte, ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(ds.NumFrames()-1, ds.NumFrames(), buf))
		}
	})
}

// A dark or gain reference beside the file that is not a regular file (a directory, a
// named pipe) is refused with option seq_corrections, naming it, not skipped: the frames
// would be read without that correction.
func TestSEQReferenceNotRegular(t *testing.T) {
	for _, ref := range []string{"dark", "gain"} {
		t.Run(ref, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "scan.seq")
			s := seqFile{version: 5, width: 5, height: 3, bits: 16, pad: 8, frames: 4}
			writeSEQ(t, path, s, 22)
			for _, r := range []string{"dark", "gain"} {
				if r != ref {
					writeMRC(t, filepath.Join(dir, "scan.seq."+r+".mrc"), s.height, s.width, make([]float64, s.width*s.height), 2, false, 0)
				}
			}
			bad := filepath.Join(dir, "scan.seq."+ref+".mrc")
			require.NoError(t, os.Mkdir(bad, 0o755))
			_, err := dataset.Open(path, dataset.Options{NavShape: []int{2, 2}, FormatOptions: map[string]string{seq.OptCorrections: "true"}})
			require.Error(t, err)
			assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
			assert.Contains(t, err.Error(), bad+" is a directory")
			assert.Contains(t, err.Error(), "option seq_corrections")
		})
	}
}

// writeDefects writes <dir>/scan.seq.Config.Metadata.xml holding xml and, unless area is
// nil, scan.seq.metadata with UnbinnedFrameSizeY/X area[0:2], OffsetY/X area[2:4] and
// HardwareBinning area[4] at byte 282, as DE writes them.
func writeDefects(t *testing.T, dir, xml string, area []int32) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scan.seq.Config.Metadata.xml"), []byte(xml), 0o644))
	if area == nil {
		return
	}
	meta := make([]byte, 512)
	for i, v := range []int32{512, 1, area[1], area[0], area[3], area[2], area[4], 16, 100} {
		binary.LittleEndian.PutUint32(meta[282+4*i:], uint32(v))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scan.seq.metadata"), meta, 0o644))
}

// numpyPatch is the independent reference of LiberTEM's defect pixel patch
// (libertem.io.corrections.detector): it reads the SEQ file's uint16 frames with numpy,
// applies (frame − dark) · gain in float64 when given, rounds to float32, then replaces
// each pixel of the defect list by the float64 mean of its 3×3 neighbours inside the
// frame that are not defect pixels, rounded to float32. It prints the frames' values.
const numpyPatch = `
import json, struct, sys
import numpy as np
path, spec = sys.argv[1], json.loads(sys.argv[2])
head = open(path, "rb").read(1024)
w, h = struct.unpack_from("<II", head, 548)
stride, = struct.unpack_from("<I", head, 580)
rec = np.dtype([("px", "<u2", (h, w)), ("pad", "V%d" % (stride - 2 * w * h))])
frames = np.fromfile(path, rec, offset=8192)["px"].astype(np.float32)
if spec["dark"] is not None:
    dark, gain = (np.float32(spec[k]).reshape(h, w) for k in ("dark", "gain"))
    frames = ((frames.astype(np.float64) - dark) * gain).astype(np.float32)
bad = np.zeros((h, w), bool)
for y, x in spec["bad"]:
    bad[y, x] = True
out = frames.copy()
for y, x in zip(*np.nonzero(bad)):
    win = (slice(max(y - 1, 0), y + 2), slice(max(x - 1, 0), x + 2))
    good = frames[(slice(None),) + win][:, ~bad[win]].astype(np.float64)
    out[:, y, x] = (good.sum(axis=1) / good.shape[1]).astype(np.float32)
print(json.dumps(out.astype(np.float64).ravel().tolist()))
`

// readFloat32 reads every frame of ds, float32 frames, as one slice.
func readFloat32(t *testing.T, ds dataset.Dataset) []float32 {
	t.Helper()
	require.Equal(t, dataset.Float32, ds.DType())
	buf := make([]byte, ds.NumFrames()*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), buf))
	out := make([]float32, len(buf)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.NativeEndian.Uint32(buf[4*i:]))
	}
	return out
}

// The defect pixels that scan.seq.Config.Metadata.xml lists are patched by default with
// the mean of their good neighbours, as LiberTEM 0.16 patches them (checked against the
// numpy reference, pixel for pixel): rows, columns, ranges of both and single pixels of a
// map of the frame's size; a larger map cut to the area read; a binned map with binning
// 2; and after the dark and gain references with option seq_corrections. The frames are
// never served in place (a GPU worker reads them patched too), and option
// seq_defect_pixels=false keeps the recorded values.
func TestSEQDefectPixels(t *testing.T) {
	const H, W = 12, 12
	cols := func(xs ...int) [][2]int { // every pixel of columns xs
		var out [][2]int
		for _, x := range xs {
			for y := range H {
				out = append(out, [2]int{y, x})
			}
		}
		return out
	}
	rows := func(ys ...int) [][2]int {
		var out [][2]int
		for _, y := range ys {
			for x := range W {
				out = append(out, [2]int{y, x})
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		xml     string
		area    []int32 // UnbinnedFrameSizeY, X, OffsetY, X, HardwareBinning
		correct bool
		bad     [][2]int // (y, x) in the frame
	}{
		{"frame-sized", `<?xml version="1.0"?><Config><BadPixels>
			<BadPixelMap Rows="12" Columns="12"><Defect Column="3"/><Defect Columns="6-7"/><Defect Rows="8-9"/><Defect Columns="11-15"/>
			<Defect Row="0"/><Defect Column="11" Row="5"/><Defect Column="0" Row="4"/><Defect Type="hot"/></BadPixelMap>
			<BadPixelMap Rows="6" Columns="6" Binning="2"><Defect Column="1"/></BadPixelMap></BadPixels></Config>`,
			[]int32{12, 12, 0, 0, 1}, false,
			append(append(cols(3, 6, 7, 11), rows(0, 8, 9)...), [2]int{5, 11}, [2]int{4, 0})},
		{"cut", `<R><BadPixelMap Rows="20" Columns="24"><Defect Column="10"/><Defect Column="1"/><Defect Column="9" Row="4"/></BadPixelMap></R>`,
			[]int32{12, 12, 3, 8, 1}, false, append(cols(2), [2]int{1, 1})},
		{"binned", `<R><BadPixelMap Rows="24" Columns="24"><Defect Column="1"/></BadPixelMap>
			<BadPixelMap Rows="12" Columns="12" Binning="2"><Defect Column="5"/><Defect Column="8" Row="2"/></BadPixelMap></R>`,
			[]int32{24, 24, 0, 0, 2}, false, append(cols(5), [2]int{2, 8})},
		{"corrected", `<R><BadPixelMap Rows="12" Columns="12"><Defect Column="4"/><Defect Column="8" Row="8"/><Defect Column="9" Row="8"/></BadPixelMap></R>`,
			[]int32{12, 12, 0, 0, 1}, true, append(cols(4), [2]int{8, 8}, [2]int{8, 9})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "scan.seq")
			frames := writeSEQ(t, path, seqFile{version: 5, width: W, height: H, bits: 16, pad: 8, frames: 6}, 7)
			writeDefects(t, dir, tc.xml, tc.area)
			spec := map[string]any{"bad": tc.bad, "dark": nil, "gain": nil}
			opt := dataset.Options{NavShape: []int{2, 3}, FormatOptions: map[string]string{}}
			if tc.correct {
				dark, gain := make([]float64, H*W), make([]float64, H*W)
				for i := range dark {
					dark[i], gain[i] = 3.3+float64(i%7), 0.7+float64(i%13)/17
				}
				writeMRC(t, filepath.Join(dir, "scan.seq.dark.mrc"), H, W, dark, 2, false, 0)
				writeMRC(t, filepath.Join(dir, "scan.seq.gain.mrc"), H, W, gain, 2, false, 0)
				spec["dark"], spec["gain"] = dark, gain
				opt.FormatOptions[seq.OptCorrections] = "true"
			}
			js, err := json.Marshal(spec)
			require.NoError(t, err)
			var want []float64
			require.NoError(t, json.Unmarshal(testfiles.RunPython(t, numpyPatch, []string{"numpy"}, path, string(js)), &want))

			ds, err := dataset.Open(path, opt)
			require.NoError(t, err)
			defer ds.Close()
			got := readFloat32(t, ds)
			require.Len(t, got, len(want))
			for i := range got {
				require.Equal(t, float32(want[i]), got[i], "frame %d pixel (%d, %d)", i/(H*W), i%(H*W)/W, i%W)
			}
			unique := map[[2]int]bool{}
			for _, p := range tc.bad {
				unique[p] = true
			}
			assert.Contains(t, strings.Join(dataset.Notes(ds), "\n"), fmt.Sprintf("%d defect pixels that scan.seq.Config.Metadata.xml lists are patched with the mean of their neighbours, as LiberTEM does, giving float32 frames (option seq_defect_pixels=false keeps their recorded values)", len(unique)))
			_, viewer := ds.(dataset.Viewer)
			assert.False(t, viewer, "patched frames are not viewed in place")
			if m, ok := ds.(dataset.Mapper); ok {
				_, mapped, err := m.MapFrames(0, 1)
				require.NoError(t, err)
				assert.False(t, mapped, "patched frames are not mapped in place")
			}
			// Any frame range reads the same frames.
			part := make([]byte, 2*ds.FrameBytes())
			require.NoError(t, ds.ReadFrames(3, 5, part))
			for i := range 2 * H * W {
				require.Equal(t, got[3*H*W+i], math.Float32frombits(binary.NativeEndian.Uint32(part[4*i:])))
			}

			opt.FormatOptions[seq.OptDefectPixels] = "false"
			raw, err := dataset.Open(path, opt)
			require.NoError(t, err)
			defer raw.Close()
			assert.Contains(t, dataset.Notes(raw), "the defect pixels that scan.seq.Config.Metadata.xml lists keep their recorded values (option seq_defect_pixels=false)")
			if !tc.correct {
				assert.Equal(t, dataset.Uint16, raw.DType())
				assert.Equal(t, frames, readAll(t, raw)[:6])
			}
		})
	}
}

// A defect list that cannot be placed or read is refused, naming the file, what is
// wrong (strings from the XML quoted) and option seq_defect_pixels=false, which reads the
// file without it; one without its metadata file or without a BadPixelMap is noted and
// not applied (the frames read as stored), as LiberTEM skips it.
func TestSEQDefectPixelsRefused(t *testing.T) {
	frame := []int32{8, 8, 0, 0, 1}
	for _, tc := range []struct {
		name string
		xml  string
		area []int32
		kind errs.Kind
		msg  string // error, or with kind 0 the note
	}{
		{"no-metadata", `<R><BadPixelMap Rows="8" Columns="8"><Defect Column="3"/></BadPixelMap></R>`, nil, 0,
			"the defect pixels that scan.seq.Config.Metadata.xml lists are not patched: scan.seq.metadata, which places them on the frame, is missing (LiberTEM skips them too)"},
		{"no-map", `<BadPixelMap Rows="8" Columns="8"><Defect Column="3"/></BadPixelMap>`, frame, 0,
			"scan.seq.Config.Metadata.xml lists no BadPixelMap: no defect pixel is patched"},
		{"not-xml", `<R><BadPixelMap Rows="8" Columns="8">`, frame, errs.Format, "not an XML document"},
		{"value", `<R><BadPixelMap Rows="8" Columns="8"><Defect Row="1&#10;&quot;x"/></BadPixelMap></R>`, frame, errs.Format,
			`Defect 1 <Defect Row="1\n\"x"/>: attribute Row="1\n\"x" is not a whole number`},
		{"outside", `<R><BadPixelMap Rows="8" Columns="8"><Defect Column="2" Row="8"/></BadPixelMap></R>`, frame, errs.Format,
			`Defect 1 <Defect Column="2" Row="8"/>: Row 8 is outside the map's 0 to 7`},
		{"pixel-without-column", `<R><BadPixelMap Rows="8" Columns="8"><Defect Row="2" Type="x"/></BadPixelMap></R>`, frame, errs.Format,
			"no attribute Column"},
		{"map-size", `<R><BadPixelMap Rows="8" Columns="16"><Defect Column="2"/></BadPixelMap></R>`, []int32{8, 16, 0, 0, 1}, errs.Shape,
			"its BadPixelMap of 8 rows × 16 columns, cut to the area scan.seq.metadata gives (8 × 16 at 0, 0, binning 1), is 8 × 16 pixels, not the frames' 8 × 8"},
		{"no-neighbour", `<R><BadPixelMap Rows="8" Columns="8"><Defect Rows="0-1"/></BadPixelMap></R>`, frame, errs.Format,
			"defect pixel (y 0, x 0) has no good neighbour to be patched from (LiberTEM refuses it too)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "scan.seq")
			frames := writeSEQ(t, path, seqFile{version: 5, width: 8, height: 8, bits: 16, frames: 2}, 9)
			writeDefects(t, dir, tc.xml, tc.area)
			opt := dataset.Options{NavShape: []int{1, 2}, FormatOptions: map[string]string{}}
			ds, err := dataset.Open(path, opt)
			if tc.kind == 0 {
				require.NoError(t, err)
				assert.Contains(t, dataset.Notes(ds), tc.msg)
				assert.Equal(t, frames, readAll(t, ds))
				require.NoError(t, ds.Close())
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.kind)
			assert.Contains(t, err.Error(), path+": "+filepath.Join(dir, "scan.seq.Config.Metadata.xml")+": ")
			assert.Contains(t, err.Error(), tc.msg)
			assert.Contains(t, err.Error(), "(option seq_defect_pixels=false reads the frames without patching the defect pixels)")
			assert.NotContains(t, err.Error(), "1\n", "strings from the XML are quoted")

			opt.FormatOptions[seq.OptDefectPixels] = "false"
			ds, err = dataset.Open(path, opt)
			require.NoError(t, err)
			assert.Equal(t, frames, readAll(t, ds))
			require.NoError(t, ds.Close())
		})
	}
	path := filepath.Join(t.TempDir(), "scan.seq")
	writeSEQ(t, path, seqFile{version: 5, width: 8, height: 8, bits: 16, frames: 2}, 9)
	_, err := dataset.Open(path, dataset.Options{FormatOptions: map[string]string{seq.OptDefectPixels: "maybe"}})
	require.ErrorIs(t, err, errs.Argument)
	assert.Contains(t, err.Error(), `option seq_defect_pixels "maybe" is not true or false`)
}

// FuzzSEQDefects opens a SEQ file beside an arbitrary defect list and metadata: no
// panic, and what opens reads.
func FuzzSEQDefects(f *testing.F) {
	f.Add(`<R><BadPixelMap Rows="8" Columns="8"><Defect Column="3"/><Defect Rows="2-4"/><Defect Column="1" Row="6"/></BadPixelMap></R>`, int32(8), int32(8), int32(0), int32(0), int32(1))
	f.Add(`<R><BadPixelMap Rows="16" Columns="16" Binning="2"><Defect Columns="3-90"/></BadPixelMap></R>`, int32(16), int32(16), int32(4), int32(4), int32(2))
	f.Fuzz(func(t *testing.T, xml string, ay, ax, oy, ox, binning int32) {
		dir := t.TempDir()
		path := filepath.Join(dir, "scan.seq")
		writeSEQ(t, path, seqFile{version: 5, width: 8, height: 8, bits: 16, frames: 2}, 3)
		writeDefects(t, dir, xml, []int32{ay, ax, oy, ox, binning})
		ds, err := dataset.Open(path, dataset.Options{Format: seq.Name})
		if err != nil {
			return
		}
		defer ds.Close()
		require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), make([]byte, ds.NumFrames()*ds.FrameBytes())))
	})
}
