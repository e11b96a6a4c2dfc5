package mib_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// timestampMIB writes a MIB file without a .hdr of frames taken at the times of steps
// (step i between frames i and i+1, ns) from 2021-05-07T16:51:10Z, in the header field
// Merlin 0.67 and later write (old: in field 9, in µs, as older Merlin software does),
// frame i's pixel 0 holding i.
func timestampMIB(t *testing.T, steps []int64, old bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scan.mib")
	at := time.Date(2021, 5, 7, 16, 51, 10, 0, time.UTC)
	var b []byte
	for i := range len(steps) + 1 {
		if i > 0 {
			at = at.Add(time.Duration(steps[i-1]))
		}
		old9, stamp := "2021-05-07 18:51:10.905800", at.Format("2006-01-02T15:04:05.000000000Z")
		if old {
			old9, stamp = at.Format("2006-01-02 15:04:05.000000"), "-"
		}
		// The fields of 001_4x2_6bit.mib's frame headers.
		hd := fmt.Sprintf("MQ1,%06d,00384,01,0002,0003,U16,   1x1,01,%s,0.100000,0,0,0,4.000000E+1,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,3RX,MQ1A,%s,100000000ns,12,",
			i+1, old9, stamp)
		b = append(b, hd...)
		b = append(b, make([]byte, 384-len(hd))...)
		b = binary.BigEndian.AppendUint16(b, uint16(i))
		b = append(b, make([]byte, 10)...)
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// rowSteps are the steps between the frames of rows of rowLen: base ns with jitter
// (the real 001's: 0, -10, -20, 0 ns in turn), and jump ns more before each row's first.
func rowSteps(frames, rowLen int, base, jump int64) []int64 {
	steps := make([]int64, frames-1)
	for i := range steps {
		steps[i] = base - []int64{0, 10, 20, 0}[i%4]
		if (i+1)%rowLen == 0 {
			steps[i] += jump
		}
	}
	return steps
}

func TestNavShapeFromTimestamps(t *testing.T) {
	open := func(t *testing.T, path string, opt dataset.Options) dataset.Dataset {
		t.Helper()
		d, err := dataset.Open(path, opt)
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		return d
	}
	firstPixels := func(t *testing.T, d dataset.Dataset) []uint16 {
		buf := make([]byte, d.NumFrames()*d.FrameBytes())
		require.NoError(t, d.ReadFrames(0, d.NumFrames(), buf))
		var v []uint16
		for i := range d.NumFrames() {
			v = append(v, binary.NativeEndian.Uint16(buf[i*d.FrameBytes():]))
		}
		return v
	}
	t.Run("a jump before every row gives the rows", func(t *testing.T) {
		for _, old := range []bool{false, true} {
			// The real 001's steps: 102 ms, 20.82 µs more at each row start (µs in field 9);
			// the note gives the median steps.
			d := open(t, timestampMIB(t, rowSteps(15, 5, 102_000_000, 20_820), old), dataset.Options{})
			assert.Equal(t, []int{3, 5}, d.NavShape())
			assert.False(t, dataset.NavShapeGuessed(d), "the rows are the timestamps', not (1, n)")
			jump := "20.83µs"
			if old {
				jump = "21µs" // field 9 holds µs
			}
			assert.Equal(t, []string{"the file gives no scan shape: nav shape (3, 5) is guessed from the frame headers' timestamps: the time between frames, 102ms, is " + jump + " longer once every 5 frames (the scan's flyback before each row); give option nav_shape if the scan is another"},
				dataset.Notes(d))
			assert.Equal(t, []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, firstPixels(t, d), "every frame a scan position, in order")
		}
	})
	t.Run("option nav_shape wins", func(t *testing.T) {
		path := timestampMIB(t, rowSteps(15, 5, 102_000_000, 20_820), false)
		for _, nav := range [][]int{{5, 3}, {15}, {2, 5}} {
			d := open(t, path, dataset.Options{NavShape: nav})
			assert.Equal(t, nav, d.NavShape())
			for _, n := range dataset.Notes(d) {
				assert.NotContains(t, n, "timestamps")
			}
		}
	})
	t.Run("flyback stated: no guess", func(t *testing.T) {
		path := timestampMIB(t, rowSteps(15, 5, 102_000_000, 20_820), false)
		_, err := dataset.Open(path, dataset.Options{Flyback: dataset.Flyback{Place: dataset.FlybackEnd}})
		assert.ErrorContains(t, err, "option flyback end needs the scan's rows, and the file gives no scan shape: give option nav_shape")
	})
	// with returns steps with step i set to v.
	with := func(steps []int64, i int, v int64) []int64 { steps[i] = v; return steps }
	for _, c := range []struct {
		name  string
		steps []int64
	}{
		{"steps alike (the real 9-frame files)", rowSteps(9, 9, 1_000_000, 0)},
		{"jitter only, no jump of 1 µs (the real 002)", rowSteps(8, 4, 1_849_990, 10)},
		{"a jump lost in the jitter", with(rowSteps(9, 3, 1_000_000, 2_000), 6, 1_000_900)},
		{"rows of two lengths", with(with(rowSteps(16, 4, 1_000_000, 20_000), 11, 1_000_000), 12, 1_020_000)},
		{"frames not a multiple of the row", rowSteps(14, 5, 1_000_000, 20_000)},
		{"one row", rowSteps(5, 5, 1_000_000, 20_000)},
		{"a clock that stands still", make([]int64, 7)},
		{"a clock going back", with(rowSteps(12, 4, 1_000_000, 20_000), 5, -5_000_000)},
	} {
		t.Run(c.name+": read as (1, n)", func(t *testing.T) {
			d := open(t, timestampMIB(t, c.steps, false), dataset.Options{})
			assert.Equal(t, []int{1, len(c.steps) + 1}, d.NavShape())
			assert.True(t, dataset.NavShapeGuessed(d))
			assert.Empty(t, dataset.Notes(d))
		})
	}
	t.Run("rows past the frames read first are checked", func(t *testing.T) {
		// 100 rows of 100: the first 8192 frames' steps are read, then row starts spread
		// over the rest; a row of 99 frames there leaves the file (1, n).
		steps := rowSteps(10_000, 100, 1_000_000, 20_000)
		d := open(t, timestampMIB(t, steps, false), dataset.Options{})
		assert.Equal(t, []int{100, 100}, d.NavShape())
		steps[9_798], steps[9_799] = steps[9_798]+20_000, steps[9_799]-20_000 // row 98 starts a frame early
		d = open(t, timestampMIB(t, steps, false), dataset.Options{})
		assert.Equal(t, []int{1, 10_000}, d.NavShape())
	})
}

// The real 001_4x2_6bit.mib: its .hdr gives no scan shape (Frames per Trigger 1); its
// frame timestamps give the 2 rows of 4 of its README (RosettaSciIO reads the same).
func TestRealMIBNavShapeFromTimestamps(t *testing.T) {
	path := testfiles.File(t, "mib/001_4x2_6bit.mib")
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, []int{2, 4}, d.NavShape())
	require.Len(t, dataset.Notes(d), 1)
	assert.True(t, strings.HasPrefix(dataset.Notes(d)[0], "the file gives no scan shape: nav shape (2, 4) is guessed from the frame headers' timestamps: the time between frames, 102ms, is 20.83µs longer once every 4 frames"), dataset.Notes(d)[0])
}
