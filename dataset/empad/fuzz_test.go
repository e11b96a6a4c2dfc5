package empad

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzEMPADXML parses fuzzed EMPAD XML metadata, seeded from the test's XML files: what
// it accepts names a raw file and gives a nav shape of positive sizes, or none.
func FuzzEMPADXML(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.xml"))
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
