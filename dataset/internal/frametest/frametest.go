// Package frametest holds the helpers that the tests of package dataset and of its
// format packages share, independent of the readers: random pixel values of every dtype,
// their encoding in either byte order and the decoding of host-order frames; test files
// written by hand (NPY, raw with per-frame bytes, EMPAD, DigitalMicrograph tag trees) or
// copied from ../shared/data (MIB); numpy's reference results; the seeds of fuzz targets;
// the check of the notes on ignored options.
package frametest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// AllDTypes are the pixel dtypes that stemdot reads.
var AllDTypes = []dataset.DType{
	dataset.Uint8, dataset.Uint16, dataset.Uint32,
	dataset.Int8, dataset.Int16, dataset.Int32,
	dataset.Float32, dataset.Float64,
}

// RandomValues returns n random values representable in dt, as float64.
func RandomValues(rng *rand.Rand, dt dataset.DType, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		switch dt {
		case dataset.Uint8:
			v[i] = float64(rng.UintN(1 << 8))
		case dataset.Uint16:
			v[i] = float64(rng.UintN(1 << 16))
		case dataset.Uint32:
			v[i] = float64(rng.Uint32())
		case dataset.Int8:
			v[i] = float64(int8(rng.Uint32()))
		case dataset.Int16:
			v[i] = float64(int16(rng.Uint32()))
		case dataset.Int32:
			v[i] = float64(int32(rng.Uint32()))
		case dataset.Float32:
			v[i] = float64(float32(rng.NormFloat64() * 1e3))
		case dataset.Float64:
			v[i] = rng.NormFloat64() * 1e6
		}
	}
	return v
}

// Encode encodes values as dt in the byte order bo.
func Encode(v []float64, dt dataset.DType, bo binary.ByteOrder) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		p := b[i*dt.Size():]
		switch dt {
		case dataset.Uint8, dataset.Int8:
			p[0] = byte(int64(x))
		case dataset.Uint16, dataset.Int16:
			bo.PutUint16(p, uint16(int64(x)))
		case dataset.Uint32, dataset.Int32:
			bo.PutUint32(p, uint32(int64(x)))
		case dataset.Float32:
			bo.PutUint32(p, math.Float32bits(float32(x)))
		case dataset.Float64:
			bo.PutUint64(p, math.Float64bits(x))
		}
	}
	return b
}

// Decode decodes host-order bytes of dt into float64 values.
func Decode(b []byte, dt dataset.DType) []float64 {
	bo := binary.NativeEndian
	v := make([]float64, len(b)/dt.Size())
	for i := range v {
		p := b[i*dt.Size():]
		switch dt {
		case dataset.Uint8:
			v[i] = float64(p[0])
		case dataset.Int8:
			v[i] = float64(int8(p[0]))
		case dataset.Uint16:
			v[i] = float64(bo.Uint16(p))
		case dataset.Int16:
			v[i] = float64(int16(bo.Uint16(p)))
		case dataset.Uint32:
			v[i] = float64(bo.Uint32(p))
		case dataset.Int32:
			v[i] = float64(int32(bo.Uint32(p)))
		case dataset.Float32:
			v[i] = float64(math.Float32frombits(bo.Uint32(p)))
		case dataset.Float64:
			v[i] = math.Float64frombits(bo.Uint64(p))
		}
	}
	return v
}

// DMTag is a tag of a DigitalMicrograph file that EncodeDM writes: a group (IsGroup, with
// its Tags) or a data tag (Info, the encoded type's info array, and Value, the value's
// bytes in the file's tag byte order).
type DMTag struct {
	Name    string
	IsGroup bool
	Tags    []DMTag
	Info    []uint64
	Value   []byte
}

// EncodeDM lays out a DigitalMicrograph file of version 3 or 4 whose root group holds
// tags, with the tag byte order little (else big-endian), as package dataset/dm's doc and
// RosettaSciIO's reader describe it: the tests' own encoding, so that what a reader
// returns is checked against values the test chose.
func EncodeDM(version int, little bool, tags []DMTag) []byte {
	be := binary.BigEndian
	lq := func(b []byte, v uint64) []byte { // uint32 in DM3, uint64 in DM4
		if version == 4 {
			return be.AppendUint64(b, v)
		}
		return be.AppendUint32(b, uint32(v))
	}
	var group func(tags []DMTag) []byte
	group = func(tags []DMTag) []byte {
		b := lq([]byte{1, 0}, uint64(len(tags))) // sorted, open
		for _, t := range tags {
			var body []byte
			kind := byte(21)
			if t.IsGroup {
				kind, body = 20, group(t.Tags)
			} else {
				body = lq([]byte("%%%%"), uint64(len(t.Info)))
				for _, v := range t.Info {
					body = lq(body, v)
				}
				body = append(body, t.Value...)
			}
			b = append(b, kind)
			b = be.AppendUint16(b, uint16(len(t.Name)))
			b = append(b, t.Name...)
			if version == 4 {
				b = be.AppendUint64(b, uint64(len(body)))
			}
			b = append(b, body...)
		}
		return b
	}
	root := group(tags)
	b := be.AppendUint32(nil, uint32(version))
	b = lq(b, uint64(len(root)+16))
	order := uint32(0)
	if little {
		order = 1
	}
	b = be.AppendUint32(b, order)
	return append(append(b, root...), make([]byte, 8)...) // the end of file zeros GMS writes
}

// ReadFloats reads the file at path as host-order float32 or float64 values, as numpy's
// tofile writes them (the references that the tests' Python scripts compute).
func ReadFloats[F float32 | float64](t *testing.T, path string) []F {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var z F
	size := int(binary.Size(z))
	out := make([]F, len(b)/size)
	for i := range out {
		if size == 4 {
			out[i] = F(math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:])))
		} else {
			out[i] = F(math.Float64frombits(binary.NativeEndian.Uint64(b[8*i:])))
		}
	}
	return out
}

// ReadAll reads every frame of d, in two ReadFrames calls to cover a split range.
func ReadAll(t *testing.T, d dataset.Dataset) []byte {
	t.Helper()
	n := d.NumFrames()
	buf := make([]byte, n*d.FrameBytes())
	mid := n / 2
	require.NoError(t, d.ReadFrames(0, mid, buf))
	require.NoError(t, d.ReadFrames(mid, n, buf[mid*d.FrameBytes():]))
	return buf
}

// RawOnly are options of raw files that other formats ignore with a note.
var RawOnly = dataset.Options{SigShape: []int{3, 5}, DType: dataset.Int8, BigEndian: true}

// CheckIgnored opens path with opt and wants exactly the notes want first, with and
// without a sync offset and a frame range (the views that carry notes).
func CheckIgnored(t *testing.T, path string, opt dataset.Options, want ...string) {
	t.Helper()
	for _, o := range []dataset.Options{opt, withSync(opt, 1), withFrames(opt, 1, 2)} {
		d, err := dataset.Open(path, o)
		require.NoError(t, err)
		notes := dataset.Notes(d)
		require.GreaterOrEqual(t, len(notes), len(want), "notes %q", notes)
		assert.Equal(t, want, notes[:len(want)])
		require.NoError(t, d.Close())
	}
}

func withSync(o dataset.Options, n int) dataset.Options { o.SyncOffset = n; return o }
func withFrames(o dataset.Options, first, count int) dataset.Options {
	o.Frames = dataset.FrameSpan{First: first, Count: count}
	return o
}

// CopyMIB copies a real MIB file (without its .hdr) into a temporary directory.
func CopyMIB(t *testing.T, name string) (string, []byte) {
	t.Helper()
	raw, err := os.ReadFile(testfiles.File(t, "mib/"+name))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	return path, raw
}

// MIB002 is a real MIB file of ../shared/data/mib with its .hdr sidecar (sig 256×128,
// nav 4×2, uint16).
const MIB002 = "002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib"

// NPYBytes builds an NPY 1.0 file by hand (independently of dataset.Create's writer).
func NPYBytes(descr string, fortran bool, shape string, data []byte) []byte {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, map[bool]string{false: "False", true: "True"}[fortran], shape)
	for (10+len(dict)+1)%64 != 0 {
		dict += " "
	}
	dict += "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), byte(len(dict)>>8))
	out = append(out, dict...)
	return append(out, data...)
}

// EMPAD frames as the detector writes them: 130 rows of 128 float32 little-endian, the
// last 2 rows per-frame metadata.
const (
	EMPADRows, EMPADCols = 130, 128
	EMPADRecord          = EMPADRows * EMPADCols * 4
)

var empadRawName = regexp.MustCompile(`<raw_file filename="([^"]*)"`)

// WriteEMPAD copies xmlName of EMPADTestdata into dir and writes beside it the raw file
// it names, of n frames of random signal whose metadata rows hold 1e30 (a reader that
// took them for signal would give sums of that size). It returns the XML and raw paths and
// the frames' 128×128 signal as float64, decoded here from the bytes written.
func WriteEMPAD(t *testing.T, dir, xmlName string, n int, seed uint64) (xmlPath, rawPath string, frames [][]float64) {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(EMPADTestdata(), xmlName))
	require.NoError(t, err)
	xmlPath = filepath.Join(dir, xmlName)
	require.NoError(t, os.WriteFile(xmlPath, x, 0o644))
	m := empadRawName.FindSubmatch(x)
	require.NotNil(t, m, "raw_file in %s", xmlName)
	name := string(m[1])
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	rawPath = filepath.Join(dir, name)
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 0, n*EMPADRecord)
	for range n {
		for i := range EMPADRows * EMPADCols {
			v := float32(rng.NormFloat64()*100 + 50)
			if i >= 128*EMPADCols {
				v = 1e30
			}
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	require.NoError(t, os.WriteFile(rawPath, b, 0o644))
	return xmlPath, rawPath, decodeEMPAD(b)
}

// decodeEMPAD decodes whole EMPAD records: the first 128 rows of each, as float64.
func decodeEMPAD(b []byte) [][]float64 {
	var frames [][]float64
	for off := 0; off+EMPADRecord <= len(b); off += EMPADRecord {
		fr := make([]float64, 128*128)
		for i := range fr {
			fr[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[off+4*i:])))
		}
		frames = append(frames, fr)
	}
	return frames
}

// EMPADTestdata is the folder of the EMPAD XML files of the tests (dataset/empad/testdata),
// wherever the test runs from.
func EMPADTestdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "empad", "testdata")
}

// WriteRandom writes a uint16 file of random frames and returns the frames written.
func WriteRandom(tb testing.TB, path, format string, nav []int, sig [2]int) []byte {
	tb.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	data := make([]byte, nav[0]*nav[1]*sig[0]*sig[1]*2) // nav of two axes
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	w, err := dataset.Create(path, format, nav, sig, dataset.Uint16)
	require.NoError(tb, err)
	require.NoError(tb, w.WriteFrames(data))
	require.NoError(tb, w.Close())
	return data
}

// NPYDict returns an NPY 1.0 file whose header dict is dict, without data.
func NPYDict(dict string) []byte {
	total := 10 + len(dict) + 1
	total += (64 - total%64) % 64
	b := binary.LittleEndian.AppendUint16([]byte("\x93NUMPY\x01\x00"), uint16(total-10))
	b = append(b, dict...)
	b = append(b, strings.Repeat(" ", total-1-len(b))...)
	return append(b, '\n')
}

// GappedRaw writes n random uint16 frames of 6×5 pixels, each record being header bytes
// of 0xAB, the pixels (little-endian) and footer bytes of 0xCD, after offset bytes; it
// returns the path and the frames' pixel bytes.
func GappedRaw(t *testing.T, n, offset, header, footer int) (string, [][]byte) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(header)))
	b := bytes.Repeat([]byte{0xEE}, offset)
	frames := make([][]byte, n)
	for f := range frames {
		for range 30 {
			frames[f] = binary.LittleEndian.AppendUint16(frames[f], uint16(rng.Uint32()))
		}
		b = append(b, bytes.Repeat([]byte{0xAB}, header)...)
		b = append(b, frames[f]...)
		b = append(b, bytes.Repeat([]byte{0xCD}, footer)...)
	}
	path := filepath.Join(t.TempDir(), "g.raw")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path, frames
}

// SeedFiles adds to f's seed corpus the first n bytes of each real file of
// ../shared/data (internal/testfiles) named: the fuzz targets of every reader are seeded
// from real files where they are there (a missing one is logged).
func SeedFiles(f *testing.F, n int, names ...string) {
	dir, ok := testfiles.Lookup()
	if !ok {
		return
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			f.Logf("fuzzing without the seed %s: %v", name, err)
			continue
		}
		f.Add(b[:min(len(b), n)])
	}
}
