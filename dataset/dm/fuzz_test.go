package dm_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// FuzzOpenDM opens fuzzed DM3 and DM4 files and reads all their frames: no panic, the
// open allocates no more than a small multiple of the file's size (the tag tree is not
// kept), and what opens reads, seeded with the start of the real files' tag trees (when present) and the test's synthetic
// 3-D and transposed 4-D files.
func FuzzOpenDM(f *testing.F) {
	frametest.SeedFiles(f, 1<<10, "dm/test-1.dm3", "dm/test-1.dm4") // small seeds: the fuzzer minimizes what it finds in reasonable time
	seed := filepath.Join(f.TempDir(), "seed.dm4")
	for _, im := range []dmImage{
		{dataType: 1, elemType: 2, dims: []int{3, 2, 2}, data: encodePixels(2, 6, dataset.Int16, binary.BigEndian, false)},
		{dataType: 2, elemType: 6, dims: []int{2, 2, 3, 1}, data: encodePixels(4, 3, dataset.Float32, binary.BigEndian, true)},
	} {
		writeDM(f, seed, 4, false, im)
		if b, err := os.ReadFile(seed); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ext := ".dm3"
		if bytes.HasPrefix(b, []byte{0, 0, 0, 4}) {
			ext = ".dm4"
		}
		p := filepath.Join(t.TempDir(), "x"+ext)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d, err := dataset.Open(p, dataset.Options{})
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<10+8*uint64(len(b)) {
			t.Fatalf("opening a file of %d bytes allocated %d bytes", len(b), alloc)
		}
		if err != nil {
			return
		}
		defer d.Close()
		if n := d.NumFrames(); n > 0 && int64(n)*int64(d.FrameBytes()) <= 1<<24 {
			if err := d.ReadFrames(0, n, make([]byte, n*d.FrameBytes())); err != nil {
				t.Fatalf("opened, but reading its %d frames failed: %v", n, err)
			}
		}
	})
}
