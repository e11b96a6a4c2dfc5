package dataset

import (
	"os"
	"path/filepath"
	"testing"
)

// Fuzz targets for every reader's parsing of user files (run briefly by `make fuzz`):
// none may panic, and what they accept must be readable frame by frame. The seeds are
// the starts of the real files in ../shared/data when present.

func seedFiles(f *testing.F, names []string, n int) {
	dir := os.Getenv("STEMDOT_TESTDATA")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "data")
	}
	for _, name := range names {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			f.Add(b[:min(len(b), n)])
		}
	}
}

func FuzzMIBHeader(f *testing.F) {
	seedFiles(f, []string{"mib/001_4x2_6bit.mib", "mib/Quad_9_Frame_CounterDepth_12_Rows_256.mib", "mib/Single_9_Frame_CounterDepth_1_Rows_256RAW.mib"}, 768)
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
	seedFiles(f, []string{"blo/test1.blo"}, bloHeaderBytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseBLOHeader(b)
	})
}

func FuzzHdr(f *testing.F) {
	seedFiles(f, []string{"mib/001_4x2_6bit.hdr", "mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.hdr"}, 4096)
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
	seedFiles(f, []string{"mib/001_4x2_6bit.mib", "blo/test1.blo", "hdf5/fpd_file_test.hdf5"}, 1<<16)
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
