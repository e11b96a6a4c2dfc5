package npy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	npyfile "github.com/stemdot/stemdot/internal/npy"
)

// FuzzNPY opens fuzzed .npy files: what it accepts is read frame by frame without an
// error, and nothing panics.
func FuzzNPY(f *testing.F) {
	for _, c := range []struct {
		descr string
		shape []int
	}{{"<u2", []int{2, 3, 4}}, {">f4", []int{2, 2, 3, 2}}, {"|u1", []int{3, 2}}, {"<i4", []int{1, 2, 1, 2, 2}}} {
		h, err := npyfile.Header(c.descr, c.shape)
		if err != nil {
			f.Fatal(err)
		}
		n := 1
		for _, s := range c.shape {
			n *= s
		}
		f.Add(append(h, make([]byte, n*int(c.descr[2]-'0'))...))
	}
	path := filepath.Join(f.TempDir(), "x.npy")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := open(path, dataset.Options{})
		if err != nil {
			return
		}
		defer d.Close()
		if n := d.NumFrames(); int64(n)*int64(d.FrameBytes()) <= 1<<26 {
			if err := d.ReadFrames(0, n, make([]byte, n*d.FrameBytes())); err != nil {
				t.Fatalf("opened as nav %v sig %v %v, but: %v", d.NavShape(), d.SigShape(), d.DType(), err)
			}
		}
	})
}
