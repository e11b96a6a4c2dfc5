package raw

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stemdot/stemdot/dataset"
)

// FuzzRaw opens a fuzzed file with fuzzed layout options (sig shape, dtype, byte order,
// offset, per-frame header and footer bytes, nav shape, sync offset): what it accepts is
// read frame by frame without an error, and nothing panics.
func FuzzRaw(f *testing.F) {
	f.Add(make([]byte, 96), uint8(2), uint8(3), uint8(2), false, int16(0), int16(0), int16(0), uint8(0), int8(0))
	f.Add(make([]byte, 100), uint8(4), uint8(4), uint8(1), true, int16(4), int16(2), int16(0), uint8(3), int8(1))
	f.Add(make([]byte, 130), uint8(1), uint8(5), uint8(7), true, int16(0), int16(3), int16(5), uint8(2), int8(-1))
	path := filepath.Join(f.TempDir(), "x.raw")
	f.Fuzz(func(t *testing.T, b []byte, sy, sx, dt uint8, big bool, offset, header, footer int16, nav uint8, sync int8) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		opt := dataset.Options{SigShape: []int{int(sy), int(sx)}, DType: dataset.DType(dt % 10), BigEndian: big,
			Offset: int64(offset), FrameHeader: int64(header), FrameFooter: int64(footer), SyncOffset: int(sync)}
		if nav > 0 {
			opt.NavShape = []int{int(nav)}
		}
		d, err := open(path, opt)
		if err != nil {
			return
		}
		defer d.Close()
		n := d.NumFrames()
		if err := d.ReadFrames(0, n, make([]byte, n*d.FrameBytes())); err != nil {
			t.Fatalf("opened with %+v as nav %v, but: %v", opt, d.NavShape(), err)
		}
	})
}
