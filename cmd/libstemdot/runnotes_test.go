//go:build !nohdf5

package main

import (
	"encoding/json"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/h5ref"
)

// Issue #33: stemdot_dataset_run_notes gives, after stemdot_apply, what the DECTRIS
// reader counted in the frames read (its saturated pixels), as JSON with the warning the
// CLI prints; of a range of frames; refused outside the frames (SHAPE).
func TestDatasetRunNotes(t *testing.T) {
	const n, sy, sx = 6, 4, 5
	frames := make([]uint16, n*sy*sx)
	flagged := make([]uint8, sy*sx)
	flagged[7] = 1
	for f := range n {
		frames[f*sy*sx+7] = 65535 // flagged: not counted
		for i := range f % 3 {    // 0, 1, 2 saturated pixels
			frames[f*sy*sx+10+i] = 65535
		}
	}
	master, err := h5ref.DECTRIS(t.TempDir(), "scan", frames, n, sy, sx, flagged)
	require.NoError(t, err)
	cpath, opts := append([]byte(master), 0), []byte("nav_shape=2,3\x00")
	var ds uint64
	st, msg := callC(stemdot_go_open, unsafe.Pointer(&cpath[0]), unsafe.Pointer(&opts[0]), unsafe.Pointer(&ds))
	require.Equal(t, statusOK, st, msg)
	defer callC(stemdot_go_dataset_free, ds)
	notes := func(first, count uint64) ([]map[string]any, status, string) {
		buf := make([]byte, 4096)
		var needed uint64
		st, msg := callC(stemdot_go_dataset_run_notes, ds, first, count, unsafe.Pointer(&buf[0]), uint64(len(buf)), unsafe.Pointer(&needed))
		var out []map[string]any
		if st == statusOK {
			require.NoError(t, json.Unmarshal(buf[:needed], &out))
		}
		return out, st, msg
	}
	got, st, msg := notes(0, n)
	require.Equal(t, statusOK, st, msg)
	assert.Empty(t, got, "nothing read yet")

	weights := make([]float32, sy*sx)
	out := make([]float32, n)
	st, msg = callC(stemdot_go_apply, ds, unsafe.Pointer(&weights[0]), 1, sy, sx, 0, 0, nil, nil, unsafe.Pointer(&out[0]), 7, n)
	require.Equal(t, statusOK, st, msg)
	text := "saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the detector's count overflowed: {count}, in {frames} of the frames read"
	got, st, msg = notes(0, n)
	require.Equal(t, statusOK, st, msg)
	assert.Equal(t, []map[string]any{{"key": "dectris_saturated", "text": text, "count": 6.0, "frames": 4.0,
		"warning": master + ": saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the detector's count overflowed: 6, in 4 of the frames read"}}, got)
	got, _, _ = notes(1, 2) // frames 1 and 2: 1 + 2
	require.Len(t, got, 1)
	assert.Equal(t, []any{3.0, 2.0}, []any{got[0]["count"], got[0]["frames"]})
	_, st, msg = notes(5, 2)
	assert.Equal(t, errShape, st)
	assert.Equal(t, "stemdot_dataset_run_notes: first 5, count 2: the frames are not within the dataset's 6 frames", msg)
}
