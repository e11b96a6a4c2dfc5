package main

import (
	"encoding/binary"
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
