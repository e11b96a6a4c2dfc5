// Package testfiles locates the real detector files that tests read.
//
// The files live outside the repository (GPL-3.0 data, never copied in): by default in
// ../shared/data beside the repository root, or wherever STEMDOT_TESTDATA points.
package testfiles

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Lookup returns the test data directory (STEMDOT_TESTDATA, else ../shared/data beside
// the repository root, wherever the test runs) and whether it exists. Fuzz targets seed
// from it when it does, and run without it otherwise.
func Lookup() (dir string, ok bool) {
	dir = os.Getenv("STEMDOT_TESTDATA")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		// file is <repo>/internal/testfiles/testfiles.go
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data")
	}
	st, err := os.Stat(dir)
	return dir, err == nil && st.IsDir()
}

// Dir returns the test data directory, or skips the test with a message when it is
// absent.
func Dir(t testing.TB) string {
	t.Helper()
	dir, ok := Lookup()
	if !ok {
		t.Skipf("real detector files not found at %s (set STEMDOT_TESTDATA): skipping", dir)
	}
	return dir
}

// File returns the path of a file under Dir, or skips the test when it is absent.
func File(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("test file %s not found (set STEMDOT_TESTDATA): skipping", p)
	}
	return p
}

// MIBFile is a Merlin MIB file decoded by DecodeMIB.
type MIBFile struct {
	// Frames holds every frame's pixels, row-major, as stored.
	Frames [][]uint32
	// SigY, SigX is the frame shape; PixelBytes is 1, 2 or 4 (U08, U16, U32).
	SigY, SigX, PixelBytes int
}

// DecodeMIB decodes every frame of a MIB file independently of package dataset, as a
// reference for tests: the header fields by splitting the first header at commas (field 2
// header bytes, 4 width, 5 height, 6 pixel type), the pixels by big-endian reads at
// computed offsets. It fails the test for raw-packed (R64) files.
func DecodeMIB(t testing.TB, path string) *MIBFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(string(raw[:min(len(raw), 100)]), ",")
	if len(fields) < 7 || fields[0] != "MQ1" {
		t.Fatalf("%s: not a MIB file", path)
	}
	header, _ := strconv.Atoi(fields[2])
	m := &MIBFile{PixelBytes: map[string]int{"U08": 1, "U16": 2, "U32": 4}[fields[6]]}
	m.SigX, _ = strconv.Atoi(fields[4])
	m.SigY, _ = strconv.Atoi(fields[5])
	if m.PixelBytes == 0 || header == 0 || m.SigX == 0 || m.SigY == 0 {
		t.Fatalf("%s: unsupported MIB header %q", path, fields[:7])
	}
	stride := header + m.SigY*m.SigX*m.PixelBytes
	if len(raw)%stride != 0 {
		t.Fatalf("%s: %d bytes is not a whole number of %d-byte frames", path, len(raw), stride)
	}
	for off := 0; off < len(raw); off += stride {
		px := raw[off+header : off+stride]
		frame := make([]uint32, m.SigY*m.SigX)
		for i := range frame {
			switch m.PixelBytes {
			case 1:
				frame[i] = uint32(px[i])
			case 2:
				frame[i] = uint32(binary.BigEndian.Uint16(px[2*i:]))
			case 4:
				frame[i] = binary.BigEndian.Uint32(px[4*i:])
			}
		}
		m.Frames = append(m.Frames, frame)
	}
	return m
}
