package stempy

import (
	"encoding/binary"
	"testing"
)

// FuzzMapRows fuzzes the layout checks of files before version 3: scan positions of
// any values for n rows of a scan of any size. A layout it accepts places every row
// exactly once, at the position the file gives it; never a panic.
func FuzzMapRows(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, 4, 4)
	f.Add([]byte{0, 1, 2, 3, 1, 1}, 6, 4)
	f.Add([]byte{3, 2, 1, 0}, 4, 0)
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 200}, 1, 2)
	f.Fuzz(func(t *testing.T, raw []byte, n, scans int) {
		if n < 0 || n > 1<<12 || scans < 0 || scans > 1<<12 {
			return
		}
		var pos []int64
		for len(raw) >= 2 {
			pos = append(pos, int64(int16(binary.LittleEndian.Uint16(raw))))
			raw = raw[2:]
		}
		d := &file{path: "f.h5", positions: n}
		if err := d.mapRows(pos, n, scans); err != nil {
			return
		}
		if d.ptr == nil {
			for r, p := range pos {
				if p != int64(r) {
					t.Fatalf("no map, but row %d is at position %d", r, p)
				}
			}
			return
		}
		if len(d.ptr) != d.positions+1 || d.ptr[0] != 0 || d.ptr[d.positions] != n || len(d.rows) != n {
			t.Fatalf("ptr %v rows %v for %d rows", d.ptr, d.rows, n)
		}
		seen := make([]bool, n)
		for p := range d.positions {
			for _, r := range d.rows[d.ptr[p]:d.ptr[p+1]] {
				if seen[r] || pos[r] != int64(p) {
					t.Fatalf("row %d placed at position %d, twice or not its own (%d)", r, p, pos[r])
				}
				seen[r] = true
			}
		}
	})
}
