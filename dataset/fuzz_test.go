package dataset

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/internal/npy"
)

// Fuzz targets of the core's parsing of user files (run briefly by `make fuzz`; each
// format package has its own, and open_fuzz_test.go's FuzzOpen opens files of every
// format): none may panic.

// FuzzROIFile: an ROI file of any content is refused with an error or read as a mask of
// the scan's nav shape, never a panic.
func FuzzROIFile(f *testing.F) {
	h, _ := npy.Header("|b1", []int{2, 3})
	f.Add(append(h, 0, 1, 1, 0, 1, 0))
	f.Add(append(h, 0, 1, 2))
	h2, _ := npy.Header("<u2", []int{2, 3})
	f.Add(append(h2, make([]byte, 12)...))
	path := filepath.Join(f.TempDir(), "roi.npy")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		mask, err := readROIFile(path, []int{2, 3})
		if err == nil && len(mask) != 6 {
			t.Fatalf("an ROI of %d positions for nav shape (2, 3)", len(mask))
		}
	})
}
