package dataset

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// Fuzz targets for every reader's parsing of user files (run briefly by `make fuzz`):
// none may panic, and what they accept must be readable frame by frame. The seeds are
// the starts of the real files in ../shared/data (internal/testfiles) when present.

// seedNames are the real files each fuzz target is seeded from.
var seedNames = map[string][]string{
	"FuzzMIBHeader": {"mib/001_4x2_6bit.mib", "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib", "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib"},
	"FuzzBLOHeader": {"blo/test1.blo"},
	"FuzzHdr":       {"mib/001_4x2_6bit.hdr", "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr"},
	"FuzzOpen":      {"mib/001_4x2_6bit.mib", "blo/test1.blo", "hdf5/fpd_file_test.hdf5"},
}

// seeds returns the first n bytes of each real file of target that is present.
func seeds(target string, n int) [][]byte {
	dir, ok := testfiles.Lookup()
	if !ok {
		return nil
	}
	var out [][]byte
	for _, name := range seedNames[target] {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			out = append(out, b[:min(len(b), n)])
		}
	}
	return out
}

func seedFiles(f *testing.F, target string, n int) {
	for _, b := range seeds(target, n) {
		f.Add(b)
	}
}

// The fuzz targets are seeded with every real file they name when the data is there.
func TestFuzzSeedsFound(t *testing.T) {
	dir := testfiles.Dir(t)
	for target, names := range seedNames {
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Skipf("%s not found: skipping", name)
			}
		}
		if got := seeds(target, 16); len(got) != len(names) {
			t.Errorf("%s: %d seeds from %s, want %d (%v)", target, len(got), dir, len(names), names)
		}
	}
}

func FuzzMIBHeader(f *testing.F) {
	seedFiles(f, "FuzzMIBHeader", 768)
	f.Add([]byte("MQ1,000001,00384,04,1024,0256,R64,   2x2,01,x,12,"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hd, err := parseMIBHeader(b)
		if err != nil || hd.pixelType != "R64" {
			return
		}
		if r, sig, dt, err := newMIBRaw(hd); err == nil && sig[0]*sig[1] <= 1<<20 && r.rawBytes <= 1<<22 {
			fb, err := checkSig(sig, dt)
			if err != nil {
				return
			}
			r.decode(make([]byte, fb), make([]byte, r.rawBytes), sig, dt)
		}
	})
}

func FuzzBLOHeader(f *testing.F) {
	seedFiles(f, "FuzzBLOHeader", bloHeaderBytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseBLOHeader(b)
	})
}

func FuzzHdr(f *testing.F) {
	seedFiles(f, "FuzzHdr", 4096)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.hdr")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _ = mibNavFromHdr(p)
	})
}

// FuzzOpen opens fuzzed files of every format (by extension) and reads all their frames.
func FuzzOpen(f *testing.F) {
	seedFiles(f, "FuzzOpen", 1<<16)
	if b, err := os.ReadFile(filepath.Join("testdata", "empad", "acquisition_legacy.xml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("\x93NUMPY\x01\x00v\x00{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3, 4), }"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ext := range []string{".mib", ".blo", ".npy", ".h5", ".xml"} {
			p := filepath.Join(t.TempDir(), "x"+ext)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := Open(p, Options{})
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

// FuzzEMPADXML parses fuzzed EMPAD XML metadata, seeded from the test's XML files: what
// it accepts names a raw file and gives a nav shape of positive sizes, or none.
func FuzzEMPADXML(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "empad", "*.xml"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseEMPADXML(b)
		if err != nil {
			return
		}
		if m.rawFile == "" {
			t.Fatal("accepted without a raw file name")
		}
		for _, n := range append(append([]int(nil), m.nav...), m.search...) {
			if n <= 0 {
				t.Fatalf("accepted nav shape %v (search %v)", m.nav, m.search)
			}
		}
	})
}

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
