package seq_test

import (
	"encoding/binary"
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
	ds, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 3}})
	require.NoError(t, err)
	defer ds.Close()
	assert.Equal(t, []int{1, 3}, ds.NavShape())
	assert.Equal(t, want[:3], readAll(t, ds))
	notes = strings.Join(dataset.Notes(ds), "\n")
	assert.Contains(t, notes, "the file ends inside frame 5")
	assert.Contains(t, notes, "scan.seq.dark.mrc beside the file: no correction is applied, the recorded counts are read (option seq_corrections applies")
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

// Option seq_corrections applies the dark and gain references beside the file as
// LiberTEM does, (frame − dark) · gain in float32, and says that the defect map is not
// applied; without references it is refused.
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
