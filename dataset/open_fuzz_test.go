package dataset_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

// FuzzOpen opens fuzzed files of every format (by extension) and reads all their frames:
// none may panic, and what they accept must be readable frame by frame. The seeds are
// the starts of real files of ../shared/data (internal/testfiles) when present.
func FuzzOpen(f *testing.F) {
	frametest.SeedFiles(f, 1<<16, "mib/001_4x2_6bit.mib", "blo/test1.blo", "hdf5/fpd_file_test.hdf5")
	if b, err := os.ReadFile(filepath.Join(frametest.EMPADTestdata(), "acquisition_legacy.xml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("\x93NUMPY\x01\x00v\x00{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3, 4), }"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ext := range []string{".mib", ".blo", ".npy", ".h5", ".xml"} {
			p := filepath.Join(t.TempDir(), "x"+ext)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := dataset.Open(p, dataset.Options{})
			if err != nil {
				continue
			}
			if n := d.NumFrames(); n > 0 && int64(n)*int64(d.FrameBytes()) <= 1<<26 {
				_ = d.ReadFrames(0, n, make([]byte, n*d.FrameBytes()))
			}
			d.Close()
		}
	})
}
