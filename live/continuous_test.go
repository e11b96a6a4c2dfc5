package live

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// acq is an acquisition of the fake receiver: its header's frame count, the frame
// indices it sends in order, batch at a time, and its end (nil: io.EOF).
type acq struct {
	frames int
	order  []int
	end    error
}

// fakeRcv sends acquisition after acquisition (Continuer); the payload of frame i of
// acquisition a is {a, i}.
type fakeRcv struct {
	acqs     []acq
	a, sent  int
	batch    int
	released [][2]int
}

func (r *fakeRcv) header() Header {
	return Header{Detector: "fake", Frames: r.acqs[r.a].frames, SigShape: [2]int{1, 2}, DType: dataset.Uint8}
}

func (r *fakeRcv) Start(context.Context) (Header, error) { return r.header(), nil }

func (r *fakeRcv) Next(ctx context.Context, dst []Frame) ([]Frame, error) {
	a := r.acqs[r.a]
	for k := 0; k < r.batch && r.sent < len(a.order); k++ {
		i := a.order[r.sent]
		dst = append(dst, Frame{Index: i, Payload: []byte{byte(r.a), byte(i)}})
		r.sent++
	}
	if r.sent < len(a.order) {
		return dst, nil
	}
	if a.end != nil {
		return dst, a.end
	}
	return dst, io.EOF
}

func (r *fakeRcv) Continue(context.Context) (Header, error) {
	if r.a+1 == len(r.acqs) {
		return Header{}, io.EOF
	}
	r.a, r.sent = r.a+1, 0
	return r.header(), nil
}

func (r *fakeRcv) Decode(dst []byte, f Frame) error { copy(dst, f.Payload); return nil }
func (r *fakeRcv) Release(f Frame) {
	r.released = append(r.released, [2]int{int(f.Payload[0]), int(f.Payload[1])})
}
func (r *fakeRcv) Stats() Stats { return Stats{} }
func (r *fakeRcv) Close() error { return nil }

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// scanOf is one scan that Continuous gave: its header's frame count, its frames as
// {acquisition, frame of the acquisition} by index in the scan, and how it ended.
type scanOf struct {
	frames int
	got    map[int][2]int
	end    error
}

// scans runs c to the end of the stream, taking every frame of each scan (or, with
// stopAt, frames until stopAt of them came, as live.Scan's Feed stops at a complete
// scan).
func scans(t *testing.T, c *Continuous, stopAt int) []scanOf {
	t.Helper()
	ctx := context.Background()
	h, err := c.Start(ctx)
	require.NoError(t, err)
	var out []scanOf
	for {
		s := scanOf{frames: h.Frames, got: map[int][2]int{}}
		var batch []Frame
		for s.end == nil && (stopAt == 0 || len(s.got) < stopAt) {
			batch, s.end = c.Next(ctx, batch[:0])
			for _, f := range batch {
				require.NotContains(t, s.got, f.Index, "frame %d given twice", f.Index)
				s.got[f.Index] = [2]int{int(f.Payload[0]), int(f.Payload[1])}
			}
		}
		out = append(out, s)
		if h, err = c.Continue(ctx); errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
	}
}

// frames is the map of a scan of n frames from frames from..from+n-1 of acquisition a.
func frames(a, from, n int) map[int][2]int {
	m := map[int][2]int{}
	for i := range n {
		m[i] = [2]int{a, from + i}
	}
	return m
}

// Repeated acquisitions of a scan's frames are scans as they are.
func TestContinuousRepeated(t *testing.T) {
	r := &fakeRcv{batch: 2, acqs: []acq{{frames: 4, order: seq(0, 4)}, {frames: 4, order: seq(0, 4)}}}
	got := scans(t, NewContinuous(r, r.header(), 4), 0)
	require.Len(t, got, 2)
	for a, s := range got {
		assert.Equal(t, io.EOF, s.end)
		assert.Equal(t, 4, s.frames)
		assert.Equal(t, frames(a, 0, 4), s.got)
	}
}

// An unbounded acquisition (no frame count) and one of more frames than the scan are
// cut into blocks of the scan's frames: frame i is position i mod n of scan i / n; the
// last block of fewer frames ends early; then the next acquisition is cut afresh.
func TestContinuousCut(t *testing.T) {
	ended := Ended("the connection closed")
	r := &fakeRcv{batch: 3, acqs: []acq{{frames: 0, order: seq(0, 10), end: ended}, {frames: 8, order: seq(0, 8)}}}
	c := NewContinuous(r, r.header(), 4)
	h, err := c.Start(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, h.Frames)
	assert.Equal(t, []string{"the acquisition announces no frame count: its frames are cut into scans of 4 (frame i is position i mod 4 of scan i / 4)"}, h.Notes)
	got := scans(t, c, 0)
	require.Len(t, got, 5)
	for k, want := range []map[int][2]int{frames(0, 0, 4), frames(0, 4, 4), frames(0, 8, 2), frames(1, 0, 4), frames(1, 4, 4)} {
		assert.Equal(t, want, got[k].got, "scan %d", k)
		assert.Equal(t, 4, got[k].frames)
	}
	assert.Equal(t, io.EOF, got[0].end, "a block ends at the next block's first frame")
	assert.Equal(t, ended, got[2].end, "the acquisition's end ends its last block")
	assert.Equal(t, io.EOF, got[4].end)
	assert.Empty(t, r.released)

	// Taking frames only until the scan is complete (as live.Scan does) gives the same.
	r = &fakeRcv{batch: 3, acqs: []acq{{frames: 0, order: seq(0, 10), end: ended}, {frames: 8, order: seq(0, 8)}}}
	got2 := scans(t, NewContinuous(r, r.header(), 4), 4)
	for k := range got {
		assert.Equal(t, got[k].got, got2[k].got, "scan %d", k)
	}
	assert.Empty(t, r.released, "no frame is dropped")
}

// Out of order: a block ends when a frame of a later block comes; its frames that come
// after that are released unseen; a block without any frame is skipped.
func TestContinuousDisorder(t *testing.T) {
	order := []int{0, 1, 3, 4, 2, 5, 6, 13, 12, 14, 15}
	r := &fakeRcv{batch: 2, acqs: []acq{{frames: 16, order: order}}}
	got := scans(t, NewContinuous(r, r.header(), 4), 0)
	require.Len(t, got, 3)
	assert.Equal(t, map[int][2]int{0: {0, 0}, 1: {0, 1}, 3: {0, 3}}, got[0].got)
	assert.Equal(t, map[int][2]int{0: {0, 4}, 1: {0, 5}, 2: {0, 6}}, got[1].got)
	assert.Equal(t, map[int][2]int{0: {0, 12}, 1: {0, 13}, 2: {0, 14}, 3: {0, 15}}, got[2].got)
	assert.Equal(t, [][2]int{{0, 2}}, r.released, "frame 2 came after frame 4 of the next scan")
}

// An acquisition of fewer frames than the scan passes as it is (live.NewScan refuses it);
// a receiver that cannot continue ends the stream after its acquisition.
func TestContinuousPassThrough(t *testing.T) {
	r := &fakeRcv{batch: 5, acqs: []acq{{frames: 3, order: seq(0, 3)}}}
	c := NewContinuous(onlyReceiver{r}, r.header(), 4)
	h, err := c.Start(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, h.Frames)
	assert.Empty(t, h.Notes)
	got := scans(t, c, 0)
	require.Len(t, got, 1)
	assert.Equal(t, frames(0, 0, 3), got[0].got)
	assert.Equal(t, 3, got[0].frames)
}

// onlyReceiver hides a receiver's Continue.
type onlyReceiver struct{ Receiver }
