package merlin

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/live"
)

// continued receives acquisition after acquisition (Continue) until the stream ends,
// and returns each acquisition and the error that ended the stream (io.EOF: its end).
func continued(t *testing.T, opt Options) ([]*received, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := New(opt)
	defer r.Close()
	h, err := r.Start(ctx)
	require.NoError(t, err)
	var all []*received
	for {
		got := &received{header: h, acqHdr: r.AcquisitionHeader(), frames: map[int][]byte{}}
		var batch []live.Frame
		for got.err == nil {
			batch, got.err = r.Next(ctx, batch[:0])
			for _, f := range batch {
				dst := make([]byte, h.FrameBytes())
				require.NoError(t, r.Decode(dst, f))
				got.frames[f.Index] = dst
				got.order = append(got.order, f.Index)
				r.Release(f)
			}
		}
		got.stats = r.Stats()
		all = append(all, got)
		if h, err = r.Continue(ctx); err != nil {
			return all, err
		}
	}
}

// Acquisition after acquisition on one data connection: complete ones, one that a new
// header stopped, ones without a frame count that the next header ends, one stopped
// before its first frame (skipped); then the detector closes the connection: io.EOF.
func TestContinue(t *testing.T) {
	addr := script(t, func(s sender) {
		s.hdr(3)
		s.frames(1, 2, 3)
		s.hdr(4)
		s.frames(1, 2)
		s.hdr(0)
		s.frames(1, 2)
		s.hdr(0)
		s.frames(1)
		s.hdr(2)
		s.hdr(2)
		s.frames(1, 2)
		s.conn.Close()
	})
	all, err := continued(t, Options{Addr: addr})
	assert.Equal(t, io.EOF, err)
	require.Len(t, all, 5)
	for k, want := range []struct {
		frames int
		nums   []int
		end    string // "": io.EOF
	}{
		{3, []int{1, 2, 3}, ""},
		{4, []int{1, 2}, "a new acquisition header came after frame 2 of 4: the acquisition was stopped"},
		{0, []int{1, 2}, ""},
		{0, []int{1}, ""},
		{2, []int{1, 2}, ""},
	} {
		got := all[k]
		assert.Equal(t, want.frames, got.header.Frames, "acquisition %d", k)
		var order []int
		for _, n := range want.nums {
			order = append(order, n-1)
			require.Equalf(t, testPixels(t, n-1), got.frames[n-1], "acquisition %d, frame %d", k, n)
		}
		assert.Equal(t, order, got.order, "acquisition %d", k)
		if want.end == "" {
			assert.Equal(t, io.EOF, got.err, "acquisition %d", k)
		} else {
			endedWith(t, got.err, want.end)
		}
	}
	assert.Equal(t, []string{"1 acquisitions stopped before their first frame were skipped"}, all[4].header.Notes)
	assert.Equal(t, 10, all[4].stats.Received, "counts go on over the acquisitions")
	assert.Equal(t, 2, all[4].stats.Missing)
}

// Frames that go on after a complete acquisition, numbered on without a new header (as
// LiberTEM-live's simulator sends its file again with --continuous), are acquisitions
// of the same header; a frame missing at the start of one is missing.
func TestContinueNumberedOn(t *testing.T) {
	addr := script(t, func(s sender) {
		s.hdr(3)
		s.frames(1, 2, 3, 4, 5, 6)
		s.write(message(testFrame(t, 7, 8)), message(testFrame(t, 8, 9)))
		s.write(message(testFrame(t, 0, 10)))
		s.conn.Close()
	})
	all, err := continued(t, Options{Addr: addr})
	assert.Equal(t, io.EOF, err)
	require.Len(t, all, 4)
	for k, want := range []map[int]int{{0: 0, 1: 1, 2: 2}, {0: 3, 1: 4, 2: 5}, {1: 7, 2: 8}, {0: 0}} {
		assert.Len(t, all[k].frames, len(want), "acquisition %d", k)
		for i, pixels := range want {
			assert.Equalf(t, testPixels(t, pixels), all[k].frames[i], "acquisition %d, frame %d", k, i)
		}
		assert.Equal(t, 3, all[k].header.Frames)
	}
	assert.Equal(t, []string{"frames numbered on from 4 came without a new acquisition header: an acquisition of the last header's 3 frames"}, all[1].header.Notes)
	endedWith(t, all[3].err, "the data connection closed after frame 1 of 3")
	assert.Equal(t, 1+2, all[3].stats.Missing, "frame 7, and frames 11 and 12")
}

// The stream cannot go on after a read failed inside a message: Continue says so.
func TestContinueOutOfStep(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	addr := script(t, func(s sender) {
		s.hdr(3)
		s.frames(1)
		s.write(message(testFrame(t, 1, 2))[:500])
		<-stall
	})
	all, err := continued(t, Options{Addr: addr, IdleTimeout: 100 * time.Millisecond})
	require.Len(t, all, 1)
	endedWith(t, all[0].err, "no frame for 100ms after frame 1 of 3")
	assert.ErrorContains(t, err, "the data stream is out of step after a failed read")
	assert.Equal(t, errs.Format, errs.KindOf(err))

	// Between messages, the idle timeout leaves the stream in step.
	addr = script(t, func(s sender) {
		s.hdr(3)
		s.frames(1)
		time.Sleep(300 * time.Millisecond)
		s.hdr(1)
		s.frames(1)
		s.conn.Close()
	})
	all, err = continued(t, Options{Addr: addr, IdleTimeout: 100 * time.Millisecond})
	assert.Equal(t, io.EOF, err)
	require.Len(t, all, 2)
	assert.Equal(t, []int{0}, all[1].order)
	assert.Equal(t, testPixels(t, 0), all[1].frames[0])
}

// Many acquisitions without a frame count, each of whose frames the consumer holds
// until its end, through four payload buffers (its three frames and the next message):
// every buffer goes back at each acquisition's end (one lost at each would stall the
// receiver for good).
func TestContinueBuffers(t *testing.T) {
	const n = 50
	addr := script(t, func(s sender) {
		for range n {
			s.hdr(0)
			s.frames(1, 2, 3)
		}
		s.conn.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := New(Options{Addr: addr, Buffers: 4})
	defer r.Close()
	_, err := r.Start(ctx)
	require.NoError(t, err)
	for k := 0; err == nil; k++ {
		var held []live.Frame
		for err == nil {
			held, err = r.Next(ctx, held)
		}
		require.Equal(t, io.EOF, err, "acquisition %d", k)
		require.Len(t, held, 3, "acquisition %d", k)
		for _, f := range held {
			r.Release(f)
		}
		_, err = r.Continue(ctx)
		if k == n-1 {
			require.Equal(t, io.EOF, err)
		}
	}
	assert.Equal(t, 3*n, r.Stats().Received)
}

// Continue in active mode starts each acquisition (CMD,STARTACQUISITION); stemdot's
// replay sends one at each.
func TestContinueActive(t *testing.T) {
	path := testfiles.File(t, "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib")
	_, want := fileFrames(t, path, dataset.Options{})
	src, err := FromMIB(path, nil)
	require.NoError(t, err)
	defer src.Close()
	ctrl := listen(t)
	addr := serve(t, src, ServeOptions{Control: ctrl})
	ctx := context.Background()
	r := New(Options{Addr: addr, Control: ctrl.Addr().String(), Frames: 4})
	defer r.Close()
	h, err := r.Start(ctx)
	require.NoError(t, err)
	for k := range 3 {
		assert.Equal(t, 4, h.Frames)
		var frames []live.Frame
		for len(frames) < 4 {
			frames, err = r.Next(ctx, frames)
			require.NoError(t, err)
		}
		for i, f := range frames {
			dst := make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(dst, f))
			require.Equalf(t, want[i], dst, "acquisition %d, frame %d", k, i)
			r.Release(f)
		}
		h, err = r.Continue(ctx)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = r.Next(ctx, nil)
	require.NoError(t, err, "the fourth acquisition runs")
}

// mark remembers the last 2^20 frames at least, in at most seenWords words, however
// far the frame numbers go.
func TestSeenWindow(t *testing.T) {
	r := &Receiver{}
	for i := 0; i < 5<<20; i += 3 {
		require.False(t, r.mark(i), "frame %d", i)
		require.LessOrEqual(t, len(r.seen), seenWords)
	}
	last := 5<<20 - 2
	assert.True(t, r.mark(last-3*(1<<20/3)), "a frame 2^20 before the last is remembered")
	assert.False(t, r.mark(3), "frame 3 is forgotten")
}

// Continue out of order is an error, not a panic.
func TestContinueMisuse(t *testing.T) {
	addr := script(t, func(s sender) { s.hdr(1); s.frames(1) })
	r := New(Options{Addr: addr})
	_, err := r.Continue(context.Background())
	assert.EqualError(t, err, "merlin: "+addr+": Continue before Start")
	_, err = r.Start(context.Background())
	require.NoError(t, err)
	require.NoError(t, r.Close())
	_, err = r.Continue(context.Background())
	assert.EqualError(t, err, "merlin: "+addr+": Continue after Close")
}
