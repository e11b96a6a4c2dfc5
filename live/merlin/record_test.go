package merlin

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/mib"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/live"
)

// record receives an acquisition with opt, writing every frame to a Recorder at path,
// and returns the decoded frames by index and how the acquisition ended.
func record(t *testing.T, opt Options, path string) (live.Header, map[int][]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := New(opt)
	defer r.Close()
	h, err := r.Start(ctx)
	require.NoError(t, err)
	rec, err := NewRecorder(path, h, r.AcquisitionHeader())
	require.NoError(t, err)
	got := map[int][]byte{}
	var batch []live.Frame
	for err == nil {
		batch, err = r.Next(ctx, batch[:0])
		for _, f := range batch {
			require.NoError(t, rec.Write(f))
			got[f.Index] = make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(got[f.Index], f))
			r.Release(f)
		}
	}
	require.NoError(t, rec.Close(err))
	return h, got, err
}

// A record of a whole acquisition reopens with dataset/mib frame for frame, with the
// scan shape of the acquisition header.
func TestRecord(t *testing.T) {
	for _, name := range []string{"002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", "Single_9_Frame_CounterDepth_1_Rows_256RAW.mib", "Quad_9_Frame_CounterDepth_12_Rows_256.mib"} {
		t.Run(name, func(t *testing.T) {
			path := testfiles.File(t, "mib/"+name)
			_, want := fileFrames(t, path, dataset.Options{})
			src, err := FromMIB(path, nil)
			require.NoError(t, err)
			defer src.Close()
			out := filepath.Join(t.TempDir(), "rec.mib")
			h, got, end := record(t, Options{Addr: serve(t, src, ServeOptions{})}, out)
			assert.Equal(t, io.EOF, end)
			ds, reread := fileFrames(t, out, dataset.Options{})
			require.Len(t, reread, len(want))
			for i := range want {
				require.Equalf(t, want[i], got[i], "frame %d received", i)
				require.Equalf(t, want[i], reread[i], "frame %d recorded", i)
			}
			assert.Empty(t, dataset.Notes(ds))
			if h.NavShape != nil {
				assert.Equal(t, h.NavShape, ds.NavShape())
			}
			hdr, err := os.ReadFile(filepath.Join(filepath.Dir(out), "rec.hdr"))
			require.NoError(t, err)
			assert.Contains(t, string(hdr), fmt.Sprintf("\r\nRecorded by stemdot:\tcomplete acquisition, %d of %d frames\r\nEnd", len(want), len(want)))
		})
	}
}

// A partial acquisition's record: the frames that never came before the last one as
// zeros, the complete scan rows read back, the .hdr and the reader's note say so.
func TestRecordPartial(t *testing.T) {
	addr := script(t, func(s sender) { s.hdr(9, "ScanX", "3", "ScanY", "3"); s.frames(1, 2, 4, 5); s.conn.Close() })
	out := filepath.Join(t.TempDir(), "part.mib")
	h, got, end := record(t, Options{Addr: addr}, out)
	endedWith(t, end, "the data connection closed after frame 5 of 9")
	assert.Equal(t, []int{3, 3}, h.NavShape)
	assert.Len(t, got, 4)
	hdr, err := os.ReadFile(filepath.Join(filepath.Dir(out), "part.hdr"))
	require.NoError(t, err)
	label := "partial acquisition: merlin: " + addr + ": the acquisition ended early: the data connection closed after frame 5 of 9; 4 of the 9 frames announced received; frames 3 never came and are recorded as zeros"
	assert.Contains(t, string(hdr), "\r\nRecorded by stemdot:\t"+label+"\r\nEnd")
	ds, reread := fileFrames(t, out, dataset.Options{})
	assert.Equal(t, []int{1, 3}, ds.NavShape(), "the complete scan row")
	require.Len(t, reread, 3)
	assert.Equal(t, testPixels(t, 0), reread[0])
	assert.Equal(t, testPixels(t, 1), reread[1])
	assert.Equal(t, make([]byte, len(reread[2])), reread[2], "frame 3 never came")
	notes := dataset.Notes(ds)
	require.NotEmpty(t, notes)
	assert.Equal(t, `part.hdr says the file records a "`+label+`"`, notes[0])

	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	stride := len(testFrame(t, 0, 1))
	require.Len(t, raw, 5*stride, "frames 1-5, none after the last received")
	assert.Equal(t, 3, frameNumber(raw[2*stride:]))
	assert.Equal(t, testFrame(t, 4, 5), raw[4*stride:])
	l, err := mib.ParseLayout(raw)
	require.NoError(t, err)
	require.NoError(t, l.Check(raw[2*stride:], 2), "the missing frame's header matches the others")
}

func TestRecordFaults(t *testing.T) {
	dir := t.TempDir()
	_, err := NewRecorder(filepath.Join(dir, "x.raw"), live.Header{}, nil)
	assert.EqualError(t, err, "merlin: record "+filepath.Join(dir, "x.raw")+": the record is a MIB file: give a path ending in .mib")
	_, err = NewRecorder(filepath.Join(dir, "missing", "x.mib"), live.Header{}, nil)
	assert.ErrorContains(t, err, "does not exist")

	// No frame: no file.
	rec, err := NewRecorder(filepath.Join(dir, "empty.mib"), live.Header{}, acqHeader(4))
	require.NoError(t, err)
	assert.EqualError(t, rec.Close(nil), "merlin: record "+filepath.Join(dir, "empty.mib")+": no frame was received: nothing recorded")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "no file, no temporary file left")

	// A frame of another size; Abort.
	rec, err = NewRecorder(filepath.Join(dir, "a.mib"), live.Header{}, acqHeader(4))
	require.NoError(t, err)
	require.NoError(t, rec.Write(live.Frame{Index: 0, Payload: testFrame(t, 0, 1)}))
	err = rec.Write(live.Frame{Index: 1, Payload: testFrame(t, 1, 2)[:100]})
	assert.EqualError(t, err, "merlin: record "+filepath.Join(dir, "a.mib")+": frame 1: 100 bytes; the first frame had 2432")
	assert.Equal(t, err, rec.Close(io.EOF))
	rec, err = NewRecorder(filepath.Join(dir, "b.mib"), live.Header{}, acqHeader(4))
	require.NoError(t, err)
	require.NoError(t, rec.Write(live.Frame{Index: 0, Payload: testFrame(t, 0, 1)}))
	rec.Abort()
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}
