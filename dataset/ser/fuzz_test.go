package ser_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// FuzzOpenSER opens fuzzed SER files and reads all their frames: no panic, and what opens
// reads, seeded with the starts of the real files (when present) and the test's
// synthetic series and scans of every layout.
func FuzzOpenSER(f *testing.F) {
	frametest.SeedFiles(f, 1<<10, "ser/128x128x5-diffraction_preview_1.ser", "ser/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser") // small seeds: the fuzzer minimizes what it finds in reasonable time
	for _, s := range []serFile{
		{version: 0x0210, dataTypeID: 0x4122, dims: []int{3}, total: 3, valid: 3, dataType: 6, sizeX: 3, sizeY: 2, layout: "interleaved"},
		{version: 0x0220, dataTypeID: 0x4122, dims: []int{2, 2}, xFirst: true, total: 4, valid: 3, dataType: 2, sizeX: 2, sizeY: 2, layout: "irregular"},
		{version: 0x0220, dataTypeID: 0x4122, total: 2, valid: 2, dataType: 7, sizeX: 2, sizeY: 3, layout: "tags-at-end"},
	} {
		f.Add(s.bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x_1.ser")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := dataset.Open(p, dataset.Options{})
		if err != nil {
			return
		}
		defer d.Close()
		if n := d.NumFrames(); n > 0 && int64(n)*int64(d.FrameBytes()) <= 1<<24 {
			// Elements whose headers differ from element 0's are refused on reading.
			_ = d.ReadFrames(0, n, make([]byte, n*d.FrameBytes()))
		}
	})
}
