package ser_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/ser"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// A SER writer for the tests, following the layout of package ser's doc (TIA's SER file
// format): what the reader returns is checked against the values the test wrote.

// serFile describes a SER file to write.
type serFile struct {
	version      uint16 // 0x0210 or 0x0220
	dataTypeID   uint32 // 0x4122 (2-D) or 0x4120 (1-D)
	dims         []int  // DimensionSize of each dimension
	xFirst       bool   // position tags: the scan runs along x first (else y first)
	total, valid int
	dataType     uint16 // element DataType
	sizeX, sizeY int
	layout       string // "interleaved" (element, tag, ...), "tags-at-end", "irregular" (gaps that grow)
}

// pixel is the test's value of pixel p of frame i.
func pixel(i, p int) float64 { return float64((i*37+p*11)%1000) - 300 }

func (s serFile) bytes() []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	put := func(v any) { binary.Write(&b, le, v) }
	put(uint16(0x4949))
	put(uint16(0x0197))
	put(s.version)
	put(s.dataTypeID)
	tagType := uint32(0x4152)
	if len(s.dims) == 2 {
		tagType = 0x4142
	}
	put(tagType)
	put(uint32(s.total))
	put(uint32(s.valid))
	offPos := b.Len()
	if s.version == 0x0210 {
		put(uint32(0))
	} else {
		put(uint64(0))
	}
	put(uint32(len(s.dims)))
	for i, d := range s.dims {
		put(int32(d))
		put(float64(i))
		put(1e-9)
		put(int32(0))
		desc := []byte("Position")
		put(int32(len(desc)))
		b.Write(desc)
		units := []byte("meters")
		put(int32(len(units)))
		b.Write(units)
	}
	w := int64(4)
	if s.version == 0x0220 {
		w = 8
	}
	offArray := int64(b.Len())
	b.Write(make([]byte, 2*int64(s.total)*w))
	dataOff := make([]int64, s.total)
	tagOff := make([]int64, s.total)
	tag := func(i int) {
		tagOff[i] = int64(b.Len())
		put(uint16(tagType))
		put(uint16(0))
		put(uint32(1000 + i))
		if tagType == 0x4142 {
			nx := s.dims[0]
			if !s.xFirst {
				nx = s.dims[1]
			}
			fast, slow := float64(i%nx), float64(i/nx)
			if s.xFirst {
				put(fast)
				put(slow)
			} else {
				put(slow)
				put(fast)
			}
		}
	}
	for i := range s.valid {
		dataOff[i] = int64(b.Len())
		put(0.5)
		put(0.25)
		put(int32(0))
		put(0.5)
		put(0.25)
		put(int32(0))
		put(s.dataType)
		put(uint32(s.sizeX))
		put(uint32(s.sizeY))
		for p := range s.sizeX * s.sizeY {
			v := pixel(i, p)
			switch s.dataType {
			case 2:
				put(uint16(v + 300))
			case 6:
				put(int32(v))
			case 7:
				put(float32(v))
			case 9:
				put(complex64(complex(v, 0)))
			}
		}
		switch s.layout {
		case "interleaved":
			tag(i)
		case "irregular":
			b.Write(make([]byte, i))
		}
	}
	if s.layout != "interleaved" {
		for i := range s.valid {
			tag(i)
		}
	}
	out := b.Bytes()
	if w == 4 {
		le.PutUint32(out[offPos:], uint32(offArray))
	} else {
		le.PutUint64(out[offPos:], uint64(offArray))
	}
	for i := range s.total {
		if w == 4 {
			le.PutUint32(out[offArray+int64(i)*w:], uint32(dataOff[i]))
			le.PutUint32(out[offArray+int64(s.total+i)*w:], uint32(tagOff[i]))
		} else {
			le.PutUint64(out[offArray+int64(i)*w:], uint64(dataOff[i]))
			le.PutUint64(out[offArray+int64(s.total+i)*w:], uint64(tagOff[i]))
		}
	}
	return out
}

func (s serFile) write(t testing.TB, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, s.bytes(), 0o644))
}

// checkFrames reads every frame of d and compares it with the pixels the test wrote
// (uint16 pixels hold pixel+300): pixel (y, x) of frame i is stored pixel p = (sig_y−1−y)·
// sig_x + x, pixel(frame0+i, p), TIA storing rows bottom-up.
func checkFrames(t *testing.T, d dataset.Dataset, frame0 int) {
	t.Helper()
	n, fb := d.NumFrames(), d.FrameBytes()
	buf := make([]byte, n*fb)
	require.NoError(t, d.ReadFrames(0, n, buf))
	es := d.DType().Size()
	sy, sx := d.SigShape()[0], d.SigShape()[1]
	o := binary.NativeEndian
	for i := range n {
		for q := range fb / es {
			b := buf[(i*fb/es+q)*es:]
			p := (sy-1-q/sx)*sx + q%sx
			var got float64
			switch d.DType() {
			case dataset.Uint16:
				got = float64(o.Uint16(b)) - 300
			case dataset.Int32:
				got = float64(int32(o.Uint32(b)))
			case dataset.Float32:
				got = float64(math.Float32frombits(o.Uint32(b)))
			}
			if got != pixel(frame0+i, p) {
				t.Fatalf("frame %d pixel (%d, %d): %v, want %v", i, q/sx, q%sx, got, pixel(frame0+i, p))
			}
		}
	}
}

// mapped tells whether d serves its frames in place from a mapping of the file.
func mapped(t *testing.T, d dataset.Dataset) bool {
	m, ok := d.(dataset.Mapper)
	if !ok {
		return false
	}
	_, ok, err := m.MapFrames(0, d.NumFrames())
	require.NoError(t, err)
	return ok
}

// A series (one dimension) of 4 frames of 3×5 pixels: both versions, every layout of
// elements and tags, three dtypes.
func TestSeries(t *testing.T) {
	dir := t.TempDir()
	for _, version := range []uint16{0x0210, 0x0220} {
		for _, layout := range []string{"interleaved", "tags-at-end", "irregular"} {
			for _, dt := range []struct {
				code uint16
				want dataset.DType
			}{{2, dataset.Uint16}, {6, dataset.Int32}, {7, dataset.Float32}} {
				path := filepath.Join(dir, "series_1.ser")
				serFile{version: version, dataTypeID: 0x4122, dims: []int{4}, total: 4, valid: 4, dataType: dt.code,
					sizeX: 5, sizeY: 3, layout: layout}.write(t, path)
				d, err := dataset.Open(path, dataset.Options{})
				require.NoError(t, err, "%#x %s %s", version, layout, dt.want)
				assert.Equal(t, "ser", d.Format())
				assert.Equal(t, []int{4}, d.NavShape())
				assert.Equal(t, [2]int{3, 5}, d.SigShape())
				assert.Equal(t, dt.want, d.DType())
				assert.False(t, mapped(t, d), "frames whose rows are flipped are not served in place (%s)", layout)
				checkFrames(t, d, 0)
				require.NoError(t, d.Close())

				// A series states no scan shape: it may be read as a scan of its frames.
				d, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 2}})
				require.NoError(t, err)
				assert.Equal(t, []int{2, 2}, d.NavShape())
				checkFrames(t, d, 0)
				require.NoError(t, d.Close())
			}
		}
	}
}

// TIA stores a frame's rows bottom-up: the first stored row is the frame's last, in both
// the fixed-stride (flat) and the element-by-element reader.
func TestRowsBottomUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows_1.ser")
	for _, layout := range []string{"interleaved", "irregular"} {
		// 3 rows of 5 int32 pixels, stored pixel p of frame 0 holding (11·p mod 1000) − 300.
		serFile{version: 0x0210, dataTypeID: 0x4122, dims: []int{2}, total: 2, valid: 2, dataType: 6,
			sizeX: 5, sizeY: 3, layout: layout}.write(t, path)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, layout)
		buf := make([]byte, d.FrameBytes())
		require.NoError(t, d.ReadFrames(0, 1, buf))
		got := make([]int32, 15)
		for i := range got {
			got[i] = int32(binary.NativeEndian.Uint32(buf[4*i:]))
		}
		assert.Equal(t, []int32{
			-190, -179, -168, -157, -146, // the last stored row
			-245, -234, -223, -212, -201,
			-300, -289, -278, -267, -256, // the first stored row
		}, got, layout)
		require.NoError(t, d.Close())
	}
}

// A 2-D scan of 2 rows of 3 positions: the nav shape follows the position tags (x first:
// (Dim2, Dim1); y first: (Dim1, Dim2)); a scan cut short keeps its complete rows.
func TestScan(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scan_1.ser")
	for _, layout := range []string{"interleaved", "irregular"} {
		serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3, 2}, xFirst: true, total: 6, valid: 6, dataType: 6,
			sizeX: 4, sizeY: 4, layout: layout}.write(t, path)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{2, 3}, d.NavShape())
		assert.False(t, dataset.NavShapeGuessed(d))
		checkFrames(t, d, 0)
		require.NoError(t, d.Close())

		serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3, 2}, xFirst: false, total: 6, valid: 6, dataType: 6,
			sizeX: 4, sizeY: 4, layout: layout}.write(t, path)
		d, err = dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{3, 2}, d.NavShape())
		require.NoError(t, d.Close())

		// Interrupted after 4 of 6 positions: the first row (3 positions) is kept.
		serFile{version: 0x0210, dataTypeID: 0x4122, dims: []int{3, 2}, xFirst: true, total: 6, valid: 4, dataType: 6,
			sizeX: 4, sizeY: 4, layout: layout}.write(t, path)
		d, err = dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, []int{1, 3}, d.NavShape())
		assert.NotEmpty(t, dataset.Notes(d))
		checkFrames(t, d, 0)
		require.NoError(t, d.Close())

		// A nav shape of other positions contradicts the scan.
		serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3, 2}, xFirst: true, total: 6, valid: 6, dataType: 6,
			sizeX: 4, sizeY: 4, layout: layout}.write(t, path)
		_, err = dataset.Open(path, dataset.Options{NavShape: []int{2, 2}})
		require.Error(t, err)
		assert.ErrorIs(t, err, errs.Shape)
	}
	// No dimension: no scan shape, the user is told to give one.
	serFile{version: 0x0220, dataTypeID: 0x4122, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: "interleaved"}.write(t, path)
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.True(t, dataset.NavShapeGuessed(d))
	require.NoError(t, d.Close())
}

// A file cut inside its last element: the whole ones are read, with a note; every
// shorter cut opens or is refused, never panics.
func TestCut(t *testing.T) {
	dir := t.TempDir()
	for _, layout := range []string{"tags-at-end", "irregular"} {
		b := serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: layout}.bytes()
		path := filepath.Join(dir, "cut_1.ser")
		// Element 2 starts at 50+64+... : cut 10 bytes into its pixels.
		elem := (len(b) - 3*8) - (50 + 64)
		if layout == "irregular" {
			elem -= 2 // the gaps after elements 0 and 1 (0 and 1 bytes), and 2 after element 2
		}
		require.NoError(t, os.WriteFile(path, b[:elem+60], 0o644))
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, layout)
		assert.Equal(t, []int{2}, d.NavShape())
		assert.Contains(t, dataset.Notes(d)[0], "the file ends inside frame 2", layout)
		checkFrames(t, d, 0)
		require.NoError(t, d.Close())
		for n := range len(b) {
			require.NoError(t, os.WriteFile(path, b[:n], 0o644))
			if d, err := dataset.Open(path, dataset.Options{}); err == nil {
				checkFrames(t, d, 0)
				d.Close()
			} else {
				assert.ErrorIs(t, err, errs.Format, "cut at %d", n)
			}
		}
	}
}

// Elements at a fixed stride whose last one is not followed by the rest of its stride
// (its tag is missing) are read element by element.
func TestLastTagMissing(t *testing.T) {
	b := serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: "interleaved"}.bytes()
	path := filepath.Join(t.TempDir(), "x_1.ser")
	require.NoError(t, os.WriteFile(path, b[:len(b)-8], 0o644))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{3}, d.NavShape())
	assert.False(t, mapped(t, d))
	checkFrames(t, d, 0)
	require.NoError(t, d.Close())
}

// A file that shrinks after it was opened: reading its lost frames fails (errs.IO), in
// place (fixed stride) and element by element.
func TestShrinks(t *testing.T) {
	for _, layout := range []string{"interleaved", "irregular"} {
		path := filepath.Join(t.TempDir(), "x_1.ser")
		serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: layout}.write(t, path)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, st.Size()-100))
		err = d.ReadFrames(0, 3, make([]byte, 3*d.FrameBytes()))
		require.Error(t, err, layout)
		assert.ErrorIs(t, err, errs.IO, layout)
		require.NoError(t, d.Close())
	}
}

// Files that hold no frames stemdot reads are refused, naming the reason.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	good := serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: "irregular"}
	for _, c := range []struct {
		name string
		b    []byte
		kind errs.Kind
		want string
	}{
		{"spectra", serFile{version: 0x0220, dataTypeID: 0x4120, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 1, layout: "interleaved"}.bytes(),
			errs.Format, "holds spectra (1-D data elements), not frames"},
		{"complex", serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 9, sizeX: 4, sizeY: 4, layout: "interleaved"}.bytes(),
			errs.DType, "DataType 9 (complex64)"},
		{"version", func() []byte { b := good.bytes(); b[4] = 0x30; return b }(), errs.Format, "SeriesVersion 0x0230"},
		{"valid", func() []byte { b := good.bytes(); b[18] = 4; return b }(), errs.Format, "ValidNumberElements 4 exceeds TotalNumberElements 3"},
		{"none-valid", func() []byte { b := good.bytes(); b[18] = 0; return b }(), errs.Format, "no recorded data element"},
		{"offsets", func() []byte { b := good.bytes(); b[22] = 0xff; b[23] = 0xff; return b }(), errs.Format, "offset arrays"},
		{"offsets-2^64-1", func() []byte { b := good.bytes(); copy(b[22:30], bytes.Repeat([]byte{0xff}, 8)); return b }(), errs.Format, "OffsetArrayOffset 18446744073709551615"},
		{"offset-2^64-1", func() []byte {
			b := good.bytes()
			copy(b[binary.LittleEndian.Uint64(b[22:]):], bytes.Repeat([]byte{0xff}, 8)) // element 0's data offset
			return b
		}(), errs.Format, "data element 0 at byte 18446744073709551615"},
	} {
		path := filepath.Join(dir, c.name+"_1.ser")
		require.NoError(t, os.WriteFile(path, c.b, 0o644))
		_, err := dataset.Open(path, dataset.Options{})
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, c.kind, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		assert.Contains(t, err.Error(), path, c.name)
	}

	// An element whose header differs from element 0's: refused at open when it is the
	// last, on reading it otherwise.
	b := good.bytes()
	offsets := binary.LittleEndian.Uint64(b[22:])
	last := binary.LittleEndian.Uint64(b[offsets+2*8:]) // the third data offset
	b[last+40] = 5                                      // DataType int16
	path := filepath.Join(dir, "differs_1.ser")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "data element 2 (DataType 5, 4×4 pixels) differs from element 0 (DataType 6, 4×4 pixels)")
	b = good.bytes()
	mid := binary.LittleEndian.Uint64(b[offsets+8:])
	b[mid+42] = 2 // ArraySizeX
	require.NoError(t, os.WriteFile(path, b, 0o644))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	err = d.ReadFrames(0, 3, make([]byte, 3*d.FrameBytes()))
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "data element 1")
	require.NoError(t, d.Close())
}

// An EMI file opens the first of its SER files that holds frames, with a note naming
// them; one whose SER files hold spectra only, or that has none, is refused.
func TestEMI(t *testing.T) {
	dir := t.TempDir()
	emi := filepath.Join(dir, "acq.emi")
	require.NoError(t, os.WriteFile(emi, []byte("<ObjectInfo></ObjectInfo>"), 0o644))
	_, err := dataset.Open(emi, dataset.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.IO)
	assert.Contains(t, err.Error(), "no SER file beside this EMI file")

	serFile{version: 0x0220, dataTypeID: 0x4120, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 1, layout: "interleaved"}.write(t, filepath.Join(dir, "acq_1.ser"))
	_, err = dataset.Open(emi, dataset.Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "acq_1.ser holds spectra (1-D data elements), not frames")

	serFile{version: 0x0220, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 4, sizeY: 4, layout: "interleaved"}.write(t, filepath.Join(dir, "acq_2.ser"))
	d, err := dataset.Open(emi, dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "acq_2.ser"), d.Path())
	assert.Equal(t, []string{"the EMI file acq.emi has 2 SER files (acq_1.ser holds spectra (1-D data elements), not frames; acq_2.ser holds frames): acq_2.ser, the first that holds frames, is read (open another by its path)"}, dataset.Notes(d))
	checkFrames(t, d, 0)
	require.NoError(t, d.Close())
}

// serReference is an independent reference of every frame's sum: numpy code that parses
// a SER file from its documented layout and prints the sum of each frame's pixels.
const serReference = `
import json, struct, sys
import numpy as np
b = open(sys.argv[1], 'rb').read()
version, = struct.unpack_from('<H', b, 4)
valid, = struct.unpack_from('<I', b, 18)
w = 4 if version == 0x210 else 8
oao, = struct.unpack_from('<I' if w == 4 else '<Q', b, 22)
offs = np.frombuffer(b, '<u4' if w == 4 else '<u8', valid, oao)
types = {1: '<u1', 2: '<u2', 3: '<u4', 4: '<i1', 5: '<i2', 6: '<i4', 7: '<f4', 8: '<f8'}
out = []
for o in offs:
    dt, nx, ny = struct.unpack_from('<HII', b, int(o) + 40)
    out.append(float(np.frombuffer(b, types[dt], nx * ny, int(o) + 50).astype(np.float64).sum()))
print(json.dumps(out))
`

// The orientation of the real TIA file as ncempy 1.16 (ncempy.io.ser.fileSER.getDataset,
// which LiberTEM's SER reader uses) and RosettaSciIO 0.15 (rsciio.tia.file_reader) read
// it; both gave the same frames. Computed with
//
//	fr = np.stack([fileSER(path).getDataset(i)[0] for i in range(5)])  # (5, 128, 128) int32
//	s = fr.astype(np.float64).sum(0)
//	hashlib.sha256(s.astype('<f8').tobytes()).hexdigest(); fr[0, 0, :4]; fr[0, 127, :4]
const realSumSHA256 = "6e8f9f4649ce1f8cd61dc966bdac2bc52102973f6ee0f23fa07634db2cd32088"

var (
	realFrame0Row0   = []int32{128, 126, 250, 63}
	realFrame0Row127 = []int32{1180, 118, 120, 175}
)

// The real TIA files: 5 diffraction frames of 128×128 int32 (by .ser and by .emi), each
// frame's sum against the numpy parser, the sum frame and frame 0's first and last rows
// against ncempy's and RosettaSciIO's (the constants above), and the EDS spectrum image,
// refused both ways.
func TestRealFiles(t *testing.T) {
	ser := testfiles.File(t, "ser/128x128x5-diffraction_preview_1.ser")
	emi := testfiles.File(t, "ser/128x128x5-diffraction_preview.emi")
	var ref []float64
	require.NoError(t, json.Unmarshal(testfiles.RunPython(t, serReference, []string{"numpy"}, ser), &ref))
	require.Len(t, ref, 5)
	for _, path := range []string{ser, emi} {
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, path)
		assert.Equal(t, "ser", d.Format())
		assert.Equal(t, ser, d.Path())
		assert.Equal(t, []int{5}, d.NavShape())
		assert.Equal(t, [2]int{128, 128}, d.SigShape())
		assert.Equal(t, dataset.Int32, d.DType())
		assert.Empty(t, dataset.Notes(d))
		fb := d.FrameBytes()
		buf := make([]byte, 5*fb)
		require.NoError(t, d.ReadFrames(0, 5, buf))
		px := func(i, p int) int32 { return int32(binary.NativeEndian.Uint32(buf[i*fb+4*p:])) }
		sumFrame := make([]float64, 128*128)
		for i, want := range ref {
			var sum float64
			for p := range sumFrame {
				sum += float64(px(i, p))
				sumFrame[p] += float64(px(i, p))
			}
			assert.Equal(t, want, sum, "frame %d", i)
		}
		le, err := binary.Append(nil, binary.LittleEndian, sumFrame)
		require.NoError(t, err)
		assert.Equal(t, realSumSHA256, fmt.Sprintf("%x", sha256.Sum256(le)), "the sum frame, as ncempy and RosettaSciIO read it")
		for x := range 4 {
			assert.Equal(t, realFrame0Row0[x], px(0, x), "frame 0 pixel (0, %d)", x)
			assert.Equal(t, realFrame0Row127[x], px(0, 127*128+x), "frame 0 pixel (127, %d)", x)
		}
		require.NoError(t, d.Close())
	}
	for _, name := range []string{"ser/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser", "ser/16x16-diffraction_imagel_5x5x256x256_EDS.emi"} {
		_, err := dataset.Open(testfiles.File(t, name), dataset.Options{})
		require.Error(t, err, name)
		assert.ErrorIs(t, err, errs.Format)
		assert.Contains(t, err.Error(), "holds spectra (1-D data elements), not frames")
	}
}
