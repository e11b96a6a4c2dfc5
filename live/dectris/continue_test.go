package dectris

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// Series after series on one stream (passive: any series' header is taken): the rest
// of a series that Next has not given is dropped; a malformed series ends early and the
// next one comes; parts of the next series sent at once after an end (single-part
// messages) are its own. Then the sender goes: io.EOF.
func TestContinueSeries(t *testing.T) {
	for _, single := range []bool{false, true} {
		s := newSender(t, Options{})
		send := s.send
		if single {
			send = s.sendParts
		}
		go func() {
			s.push.WaitPeers(s.ctx, 1)
			send(v1Header(3, 2, "basic"), v1Image(3, 0, "<", testFrame(0)), v1Image(3, 1, "<", testFrame(1)), v1End(3),
				v1Header(4, 3, "basic"), v1Image(4, 0, "<", testFrame(5)), v1Image(4, 1, "<", testFrame(6)), v1Image(4, 2, "<", testFrame(7)), v1End(4),
				v1Header(9, 2, "basic"), v1Image(9, 0, "<", testFrame(8)), v1Image(9, 0, "<", testFrame(8)), v1End(9),
				v1Header(10, 1, "basic"), v1Image(10, 0, "<", testFrame(9)), v1End(10))
		}()
		h, err := s.r.Start(s.ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, h.Frames)
		idx, got, err := s.drain()
		require.ErrorIs(t, err, io.EOF)
		assert.Equal(t, []int{0, 1}, idx)
		assert.Equal(t, testFrame(1), got[1])

		h, err = s.r.Continue(s.ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, h.Frames)
		frames, err := s.r.Next(s.ctx, nil)
		require.NoError(t, err)
		require.NotEmpty(t, frames)
		assert.Equal(t, 0, frames[0].Index) // the rest of series 4 is dropped by Continue

		h, err = s.r.Continue(s.ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, h.Frames)
		_, _, err = s.drain()
		require.ErrorIs(t, err, live.ErrEnded)
		assert.ErrorContains(t, err, "series 9 sent frame 0 twice")

		h, err = s.r.Continue(s.ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, h.Frames)
		idx, got, err = s.drain()
		require.ErrorIs(t, err, io.EOF)
		assert.Equal(t, []int{0}, idx)
		assert.Equal(t, testFrame(9), got[0], "single %v", single)
		assert.Equal(t, 2+3+1+1, s.r.Stats().Received, "counts go on over the series (frame 0 of series 9 twice)")

		s.push.Close()
		_, err = s.r.Continue(s.ctx)
		assert.Equal(t, io.EOF, err, "the sender went: %v", err)
	}
}

// Stream v2: the next series' start after an end.
func TestContinueV2(t *testing.T) {
	s := newSender(t, Options{Protocol: V2})
	msg := func(m map[string]any) [][]byte { b, _ := cbor.Marshal(m); return [][]byte{b} }
	start := func(id, n int) [][]byte {
		return msg(map[string]any{"type": "start", "series_id": id, "image_dtype": "uint16", "image_size_x": fx, "image_size_y": fy, "number_of_images": n, "channels": []string{"a"}})
	}
	image := func(id, i, v int) [][]byte {
		return msg(map[string]any{"type": "image", "series_id": id, "image_id": i,
			"data": map[string]any{"a": cbor.Tag{Number: 40, Content: []any{[]int{fy, fx}, cbor.Tag{Number: 69, Content: testFrame(v)}}}}})
	}
	end := func(id int) [][]byte { return msg(map[string]any{"type": "end", "series_id": id}) }
	_, err := s.start(start(1, 1), image(1, 0, 3), end(1), start(2, 2), image(2, 0, 4), image(2, 1, 5), end(2))
	require.NoError(t, err)
	_, got, err := s.drain()
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, testFrame(3), got[0])
	h, err := s.r.Continue(s.ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, h.Frames)
	_, got, err = s.drain()
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, map[int][]byte{0: testFrame(4), 1: testFrame(5)}, got)

	ctx, cancel := context.WithTimeout(s.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = s.r.Continue(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "passive: waits for the next series as long as ctx allows")
}

// Active mode: Continue arms the replay again, series after series; a very large
// ntrigger makes one series of the dataset's frames again and again, which
// live.Continuous cuts into scans.
func TestContinueActive(t *testing.T) {
	ds := openData(t, "mib/001_4x2_6bit.mib", dataset.Options{})
	n := ds.NumFrames()
	want := make([]byte, n*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, n, want))
	fb := ds.FrameBytes()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, api, _ := serveAsync(t, ctx, ServeOptions{Protocol: V2, API: "127.0.0.1:0"}, ds)

	r, err := New(Options{Stream: stream, API: api, Active: true, NImages: 1, NTrigger: n})
	require.NoError(t, err)
	defer r.Close()
	_, got, err := receiveAll(t, ctx, r)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, n)
	for k := range 2 {
		h, err := r.Continue(ctx)
		require.NoError(t, err, "series %d", k+2)
		assert.Equal(t, n, h.Frames)
		_, got, err := drainAll(t, ctx, r, h)
		require.ErrorIs(t, err, io.EOF)
		for i := range n {
			require.Equal(t, want[i*fb:(i+1)*fb], got[i], "series %d, frame %d", k+2, i)
		}
	}
	require.NoError(t, r.Close())

	// 3 scans of 3 frames from one endless series of the dataset's 8 frames again and
	// again: scan k holds frames 3k, 3k+1, 3k+2 mod 8.
	r, err = New(Options{Stream: stream, API: api, Active: true, NImages: 1, NTrigger: 1 << 30})
	require.NoError(t, err)
	h, err := r.Start(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1<<30, h.Frames)
	c := live.NewContinuous(r, h, 3)
	defer c.Close()
	h, err = c.Start(ctx)
	require.NoError(t, err)
	for k := range 3 {
		assert.Equal(t, 3, h.Frames)
		got := map[int][]byte{}
		var frames []live.Frame
		for len(got) < 3 {
			frames, err = c.Next(ctx, frames[:0])
			require.NoError(t, err)
			for _, f := range frames {
				buf := make([]byte, fb)
				require.NoError(t, c.Decode(buf, f))
				got[f.Index] = buf
				c.Release(f)
			}
		}
		for i := range 3 {
			j := (3*k + i) % n
			require.Equal(t, want[j*fb:(j+1)*fb], got[i], "scan %d, position %d", k, i)
		}
		h, err = c.Continue(ctx)
		require.NoError(t, err)
	}
}

// drainAll runs Next to the end of the series of header h, decoding every frame.
func drainAll(t *testing.T, ctx context.Context, r *Receiver, h live.Header) ([]int, map[int][]byte, error) {
	var idx []int
	got := map[int][]byte{}
	var frames []live.Frame
	for {
		var err error
		frames, err = r.Next(ctx, frames[:0])
		for _, f := range frames {
			buf := make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(buf, f))
			idx = append(idx, f.Index)
			got[f.Index] = buf
		}
		if err != nil {
			return idx, got, err
		}
	}
}

// Continue out of order is an error, not a panic.
func TestContinueMisuse(t *testing.T) {
	r, err := New(Options{Stream: "127.0.0.1:1"})
	require.NoError(t, err)
	_, err = r.Continue(context.Background())
	assert.EqualError(t, err, "dectris: Continue before Start")
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	require.NoError(t, r.Close())
	_, err = r.Continue(context.Background())
	assert.EqualError(t, err, "dectris: Continue after Close")
}
