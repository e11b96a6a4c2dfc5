package mib

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// FuzzMIBHeader parses fuzzed frame headers and decodes a raw-packed frame of what an
// R64 header describes: no panic.
func FuzzMIBHeader(f *testing.F) {
	frametest.SeedFiles(f, 768, "mib/001_4x2_6bit.mib", "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib", "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib")
	f.Add([]byte("MQ1,000001,00384,04,1024,0256,R64,   2x2,01,x,12,"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hd, err := parseMIBHeader(b)
		if err != nil || hd.pixelType != "R64" {
			return
		}
		if r, sig, dt, err := newMIBRaw(hd); err == nil && sig[0]*sig[1] <= 1<<20 && r.rawBytes <= 1<<22 {
			fb, err := dataset.CheckSig(sig, dt)
			if err != nil {
				return
			}
			r.decode(make([]byte, fb), make([]byte, r.rawBytes), sig, dt)
		}
	})
}

// FuzzHdr reads fuzzed .hdr sidecars: no panic, and no more allocated than the
// scanner's buffer and a small multiple of the file's size.
func FuzzHdr(f *testing.F) {
	frametest.SeedFiles(f, 4096, "mib/001_4x2_6bit.hdr", "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr")
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.hdr")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, _, _ = mibNavFromHdr(p)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<10+2*uint64(len(b)) {
			t.Fatalf("reading a .hdr of %d bytes allocated %d bytes", len(b), alloc)
		}
	})
}
