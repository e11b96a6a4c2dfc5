package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// decodeBLO decodes a NanoMEGAS block file independently of package dataset: header
// fields at their byte offsets (MAGIC 6, Data_offset_2 12, DP_SZ 20, NX 24, NY 26), then
// NY·NX records of a 6-byte prefix and DP_SZ² pixels of pixelBytes bytes, little-endian.
func decodeBLO(t *testing.T, path string, pixelBytes int) (frames [][]float64, ny, nx, side int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	le := binary.LittleEndian
	require.Equal(t, "IMGBLO", string(b[:6]))
	off := int(le.Uint32(b[12:]))
	side, nx, ny = int(le.Uint16(b[20:])), int(le.Uint16(b[24:])), int(le.Uint16(b[26:]))
	stride := 6 + side*side*pixelBytes
	require.Equal(t, len(b), off+nx*ny*stride, "file size")
	for f := range nx * ny {
		rec := b[off+f*stride:]
		require.Equal(t, []byte{0xAA, 0x55}, rec[:2])
		require.Equal(t, uint32(f), le.Uint32(rec[2:]), "frame number")
		fr := make([]float64, side*side)
		for i := range fr {
			if pixelBytes == 1 {
				fr[i] = float64(rec[6+i])
			} else {
				fr[i] = float64(le.Uint16(rec[6+2*i:]))
			}
		}
		frames = append(frames, fr)
	}
	return frames, ny, nx, side
}

func TestApplyBLO(t *testing.T) {
	path := testfiles.File(t, "blo/test1.blo")
	frames, ny, nx, side := decodeBLO(t, path, 1)
	require.Equal(t, [3]int{3, 2, 144}, [3]int{ny, nx, side})
	ms := refMasks(side, side, 72, 72, 10, 20, 60)
	args := []string{path, "--mask", "disk:72,72,10", "--mask", "ring:72,72,20,60", "--mask", "com:72,72"}
	for _, extra := range [][]string{nil, {"--cpus", "0,1", "--partition-size", "40000"}, {"--float64"}} {
		shape, got, _ := applyCase(t, append(args, extra...)...)
		require.Equal(t, []int{3, 2, 5}, shape)
		checkResult(t, got, frames, ms)
	}
}

// The 16-bit variant (MAGIC 259, "Blo Bit Depth: 16 bits" in the text block), built from
// the real file's header and frames scaled into 16 bits.
func TestApplyBLO16(t *testing.T) {
	src, err := os.ReadFile(testfiles.File(t, "blo/test1.blo"))
	require.NoError(t, err)
	le := binary.LittleEndian
	off := int(le.Uint32(src[12:]))
	const side, n = 144, 6
	b := append([]byte(nil), src[:off]...)
	le.PutUint16(b[6:], 259)
	copy(b[240:], "Precession angle : \r\nBlo Bit Depth: 16 bits\r\nCamera gamma : on\r\n")
	for f := range n {
		rec := src[off+f*(6+side*side):]
		b = append(b, rec[:6]...)
		for i := range side * side {
			b = le.AppendUint16(b, uint16(rec[6+i])*257+uint16(i%7))
		}
	}
	path := filepath.Join(t.TempDir(), "t16.blo")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	frames, _, _, _ := decodeBLO(t, path, 2)
	stdout, stderr, code := run(t, "info", path)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "dtype:      uint16")
	shape, got, _ := applyCase(t, path, "--mask", "disk:72,72,10", "--mask", "ring:72,72,20,60", "--mask", "com:72,72")
	require.Equal(t, []int{3, 2, 5}, shape)
	checkResult(t, got, frames, refMasks(side, side, 72, 72, 10, 20, 60))

	// A damaged record prefix is an error, not a frame.
	b[off+3*(6+2*side*side)] = 0
	require.NoError(t, os.WriteFile(path, b, 0o644))
	refuseCase(t, "frame 3: its record does not start with AA 55", path, "--mask", "disk:72,72,10")
	// An interrupted acquisition keeps the complete scan rows.
	require.NoError(t, os.WriteFile(path, src[:len(src)-100], 0o644))
	shape, got, stderr = applyCase(t, path, "--mask", "disk:72,72,10", "--mask", "ring:72,72,20,60", "--mask", "com:72,72")
	require.Equal(t, []int{2, 2, 5}, shape)
	frames8, _, _, _ := decodeBLO(t, testfiles.File(t, "blo/test1.blo"), 1)
	checkResult(t, got, frames8[:4], refMasks(side, side, 72, 72, 10, 20, 60))
	require.Contains(t, stderr, "incomplete acquisition")
}

// writeEMPADScan writes an EMPAD acquisition: an XML naming scan_x3_y2.raw, with a search
// scan of 4×4 and an acquire scan of 2 rows × 3 columns, and that raw file of n records
// of 130×128 float32 little-endian, the last 2 rows metadata (1e30 here, so that reading
// them as signal would show). It returns the XML and raw paths and the 128×128 signal of
// each frame, decoded here from the bytes written.
func writeEMPADScan(t *testing.T, dir string, n int) (xmlPath, rawPath string, frames [][]float64) {
	t.Helper()
	xmlPath, rawPath = filepath.Join(dir, "acquisition_7.xml"), filepath.Join(dir, "scan_x3_y2.raw")
	require.NoError(t, os.WriteFile(xmlPath, []byte(`<root name="acquisition_7"><raw_file filename="/home/empad/scan_x3_y2.raw"/>`+
		`<scan_parameters mode="search"><scan_resolution_x>4</scan_resolution_x><scan_resolution_y>4</scan_resolution_y></scan_parameters>`+
		`<scan_parameters mode="acquire"><scan_resolution_x>3</scan_resolution_x><scan_resolution_y>2</scan_resolution_y></scan_parameters></root>`), 0o644))
	rng := rand.New(rand.NewPCG(10, 11))
	var b []byte
	for range n {
		for i := range 130 * 128 {
			v := float32(1e30)
			if i < 128*128 {
				v = float32(rng.ExpFloat64() * 200)
			}
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	require.NoError(t, os.WriteFile(rawPath, b, 0o644))
	for f := range n {
		fr := make([]float64, 128*128)
		for i := range fr {
			fr[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[f*130*128*4+4*i:])))
		}
		frames = append(frames, fr)
	}
	return xmlPath, rawPath, frames
}

func TestApplyEMPAD(t *testing.T) {
	dir := t.TempDir()
	xmlPath, rawPath, frames := writeEMPADScan(t, dir, 6)
	stdout, stderr, code := run(t, "info", xmlPath)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "format:     empad")
	require.Contains(t, stdout, "dtype:      float32")
	ms := refMasks(128, 128, 64, 64, 10, 20, 50)
	masks := []string{"--mask", "disk:64,64,10", "--mask", "ring:64,64,20,50", "--mask", "com:64,64"}
	for _, args := range [][]string{{xmlPath}, {rawPath}, {xmlPath, "--cpus", "0,1", "--partition-size", "70000"}, {xmlPath, "--float64"}} {
		shape, got, _ := applyCase(t, append(args, masks...)...)
		require.Equal(t, []int{2, 3, 5}, shape, args)
		checkResult(t, got, frames, ms)
	}
	shape, got, _ := applyCase(t, append([]string{xmlPath, "--sync-offset", "-1", "--nav-shape", "6"}, masks...)...)
	require.Equal(t, []int{6, 5}, shape)
	checkResult(t, got, append([][]float64{make([]float64, 128*128)}, frames[:5]...), ms)

	// The raw file of the search scan (16 frames) is read as the search scan.
	_, _, frames = writeEMPADScan(t, dir, 16)
	shape, got, stderr = applyCase(t, append([]string{xmlPath}, masks...)...)
	require.Equal(t, []int{4, 4, 5}, shape)
	checkResult(t, got, frames, ms)
	require.Contains(t, stderr, "search scan")

	// A raw file shorter than one scan row, and malformed XML: clear errors.
	b, err := os.ReadFile(rawPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(rawPath, b[:2*130*128*4+10], 0o644))
	refuseCase(t, "acquisition_7.xml's acquire scan (scan_resolution_y=2, scan_resolution_x=3) has 6 positions but the file holds 2 frames, less than one scan row of 3; give --nav-shape", xmlPath, "--mask", "disk:64,64,10")
	shape, got, _ = applyCase(t, xmlPath, "--nav-shape", "2", "--mask", "disk:64,64,10")
	require.Equal(t, []int{2, 1}, shape)
	checkResult(t, got, frames[:2], ms[:1])
	require.NoError(t, os.WriteFile(xmlPath, []byte(`<root><raw_file filename="scan_x3_y2.raw"/><pix_x>3</pix_x>`), 0o644))
	refuseCase(t, "not a well-formed XML file", xmlPath, "--mask", "disk:64,64,10")
}
