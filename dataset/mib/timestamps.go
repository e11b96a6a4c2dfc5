package mib

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stemdot/stemdot/dataset"
)

// Scan rows from frame timestamps.
//
// A Merlin acquisition triggered per pixel leaves no scan shape in its .hdr sidecar
// (Frames per Trigger 1, no ScanX/ScanY). Its frame headers carry the time each frame
// was taken, and the time between frames grows at the start of each scan row, while the
// beam flies back: RosettaSciIO's quantumdetector reader guesses the row length from the
// first such jump. guessRowLen does so more strictly: the jump must stand apart from the
// jitter of the other steps, come at the start of every row and nowhere else, and the
// rows must be of one length that divides the frame count; else there is no guess.

// Timestamp fields of a frame header: the one near its end, in ns (Merlin 0.67 and
// later: "2021-05-07T16:51:10.905800928Z", RosettaSciIO's parse_timestamps field -4
// with the trailing comma), else field 9, in µs ("2021-05-07 18:51:10.905800").
const (
	stampLayout    = time.RFC3339Nano
	oldStampField  = 9
	oldStampLayout = "2006-01-02 15:04:05.999999999"
)

// Bounds of guessRowLen: it reads the timestamps of at most timestampFrames frames from
// the first on, and of dataset.FlybackRowsChecked row starts spread over the rest (each
// header read touches a frame's page: enough to be sure, few enough to cost no time).
// A jump is at least minRowJump and rowJumpJitter times the spread of the other steps.
const (
	timestampFrames = 8192
	minRowJump      = time.Microsecond
	rowJumpJitter   = 10
)

// timestamp returns the time frame was taken, from its header; false when the header
// cannot be read or gives no time.
func (d *mibFile) timestamp(frame int) (time.Time, bool) {
	h := make([]byte, d.HeaderBytes)
	if _, err := d.f.ReadAt(h, int64(frame)*int64(d.RecordBytes())); err != nil {
		return time.Time{}, false
	}
	hd, err := parseMIBHeader(h)
	if err != nil {
		return time.Time{}, false
	}
	f := hd.fields
	if len(f) > 3 {
		if t, err := time.Parse(stampLayout, strings.TrimSpace(f[len(f)-3])); err == nil {
			return t, true
		}
	}
	if len(f) > oldStampField {
		if t, err := time.Parse(oldStampLayout, strings.TrimSpace(f[oldStampField])); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// guessRowLen returns the scan row length that the frame timestamps give (0 when they
// give none, see above) and the evidence, for the note.
func (d *mibFile) guessRowLen() (rowLen int, why string) {
	n := d.numFrames
	m := min(n, timestampFrames)
	if m < 4 {
		return 0, ""
	}
	stamps := make([]time.Time, m)
	for i := range stamps {
		var ok bool
		if stamps[i], ok = d.timestamp(i); !ok {
			return 0, ""
		}
	}
	steps := make([]time.Duration, m-1)
	for i := range steps {
		if steps[i] = stamps[i+1].Sub(stamps[i]); steps[i] <= 0 {
			return 0, "" // timestamps not increasing: no clock to read rows from
		}
	}
	// The steps fall in two groups, split at the widest gap between sorted steps: the
	// steps within a row and the longer ones starting a row, each tighter than the gap.
	sorted := slices.Clone(steps)
	slices.Sort(sorted)
	g := 0
	for i := 1; i+1 < len(sorted); i++ {
		if sorted[i+1]-sorted[i] > sorted[g+1]-sorted[g] {
			g = i
		}
	}
	gap := sorted[g+1] - sorted[g]
	spread := max(sorted[g]-sorted[0], sorted[len(sorted)-1]-sorted[g+1])
	if gap < minRowJump || gap <= rowJumpJitter*spread {
		return 0, ""
	}
	threshold := sorted[g] + gap/2
	rowLen = slices.IndexFunc(steps, func(s time.Duration) bool { return s > threshold }) + 1
	if rowLen < 2 || n%rowLen != 0 || n/rowLen < 2 {
		return 0, ""
	}
	for i, s := range steps {
		if (s > threshold) != ((i+1)%rowLen == 0) {
			return 0, ""
		}
	}
	// The rows after the frames read: the step into a row start spread over them is a
	// jump, the next one is not.
	rows, firstRow := n/rowLen, m/rowLen+1
	if firstRow < rows {
		checked := min(rows-firstRow, dataset.FlybackRowsChecked)
		for i := range checked {
			r := firstRow + i*(rows-1-firstRow)/max(checked-1, 1)
			before, ok1 := d.timestamp(r*rowLen - 1)
			start, ok2 := d.timestamp(r * rowLen)
			next, ok3 := d.timestamp(r*rowLen + 1)
			if !ok1 || !ok2 || !ok3 || start.Sub(before) <= threshold || next.Sub(start) > threshold || next.Sub(start) <= 0 {
				return 0, ""
			}
		}
	}
	within, jump := sorted[g/2], sorted[(g+1+len(sorted))/2]
	why = fmt.Sprintf("the time between frames, %v, is %v longer once every %d frames (the scan's flyback before each row)",
		within.Round(time.Microsecond), (jump - within).Round(10*time.Nanosecond), rowLen)
	return rowLen, why
}
