package merlin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// sender writes messages to a fake server's connection.
type sender struct {
	t    testing.TB
	conn net.Conn
}

func (s sender) write(b ...[]byte) {
	for _, m := range b {
		s.conn.Write(m)
	}
}

// hdr sends an acquisition header announcing frames frames.
func (s sender) hdr(frames int, extra ...string) { s.write(message(acqHeader(frames, extra...))) }

// frames sends test frames with the frame numbers nums.
func (s sender) frames(nums ...int) {
	for _, n := range nums {
		s.write(message(testFrame(s.t, n-1, n)))
	}
}

// script returns a fake server's address whose connection runs f.
func script(t *testing.T, f func(s sender)) string {
	return fake(t, func(conn net.Conn) { f(sender{t, conn}) })
}

// checkReceived checks that got holds the test frames of numbers nums, in order.
func checkReceived(t *testing.T, got *received, nums ...int) {
	t.Helper()
	var order []int
	for _, n := range nums {
		order = append(order, n-1)
		require.Equalf(t, testPixels(t, n-1), got.frames[n-1], "frame %d", n)
	}
	assert.Equal(t, order, got.order)
	assert.Equal(t, len(nums), got.stats.Received)
}

func TestConnectionRefused(t *testing.T) {
	ln := listen(t)
	addr := ln.Addr().String()
	ln.Close()
	_, err := receive(t, Options{Addr: addr})
	require.ErrorContains(t, err, "merlin: cannot connect to the data port "+addr)
	require.ErrorContains(t, err, "connection refused")
	assert.Equal(t, errs.IO, errs.KindOf(err))

	data := script(t, func(s sender) {})
	_, err = receive(t, Options{Addr: data, Control: addr})
	require.ErrorContains(t, err, "merlin: cannot connect to the control port "+addr)
}

func TestClosedMidFrame(t *testing.T) {
	addr := script(t, func(s sender) {
		s.hdr(5)
		s.frames(1, 2)
		s.write([]byte("MPX,"))
		s.conn.Close()
	})
	got, err := receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: the data connection closed after frame 2 of 5")
	assert.Equal(t, 3, got.stats.Missing, "the frames that never came")

	addr = script(t, func(s sender) {
		s.hdr(5)
		s.frames(1, 2)
		s.write(message(testFrame(t, 2, 3))[:1000])
		s.conn.Close()
	})
	got, err = receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, "the data connection closed inside frame 3 after frame 2 of 5")

	// Closed before the first frame: a start error.
	addr = script(t, func(s sender) {
		s.hdr(5)
		s.conn.Close()
	})
	_, err = receive(t, Options{Addr: addr})
	assert.EqualError(t, err, "merlin: "+addr+": the data connection closed waiting for the first frame")
	assert.Equal(t, errs.IO, errs.KindOf(err))
}

// An acquisition of unknown length (no frame count in its header) ends when the
// detector closes the connection between frames, or sends the next header.
func TestUnknownLength(t *testing.T) {
	for _, end := range []string{"close", "header"} {
		addr := script(t, func(s sender) {
			s.hdr(0)
			s.frames(1, 2, 3)
			if end == "header" {
				s.hdr(0)
			} else {
				s.conn.Close()
			}
		})
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		assert.Zero(t, got.header.Frames)
		checkReceived(t, got, 1, 2, 3)
		assert.Equal(t, io.EOF, got.err)
	}
}

func TestMalformedFraming(t *testing.T) {
	for _, c := range []struct {
		name  string
		bytes string
		want  string
	}{
		{"garbage", "GARBAGEGARBAGEGARBAGE", `"GARBAGEGARBAGEG" is not the start of an MPX message`},
		{"length not digits", "MPX,00000x0100,HDR,", `"MPX,00000x0100," is not the start of an MPX message: its length is not 10 digits`},
		{"no comma", "MPX,0000000100;HDR,", `"MPX,0000000100;" is not the start of an MPX message`},
		{"length 0", "MPX,0000000000,", `length 0 is out of range`},
		{"length too large", "MPX,9999999999,", `length 9999999999 is out of range (1 to 67108865)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := script(t, func(s sender) { s.write([]byte(c.bytes)) })
			_, err := receive(t, Options{Addr: addr})
			require.ErrorContains(t, err, "merlin: "+addr+": waiting for the acquisition header: ")
			require.ErrorContains(t, err, c.want)
			assert.Equal(t, errs.Format, errs.KindOf(err))

			// The same inside the acquisition.
			addr = script(t, func(s sender) {
				s.hdr(5)
				s.frames(1, 2)
				s.write([]byte(c.bytes))
			})
			got, err := receive(t, Options{Addr: addr})
			require.NoError(t, err)
			checkReceived(t, got, 1, 2)
			endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: after frame 2 of 5: ")
			endedWith(t, got.err, c.want)
			assert.Equal(t, errs.Format, errs.KindOf(got.err))
		})
	}
}

func TestMalformedHeaders(t *testing.T) {
	bad := func(f []byte, at int, s string) []byte { copy(f[at:], s); return f }
	for _, c := range []struct {
		name string
		send func(s sender)
		want string
	}{
		{"not a header", func(s sender) { s.write(message([]byte("XYZ,1,2,3"))) },
			`the data port sent a message starting "XYZ,1,2,3" where the acquisition header ("HDR,") should come`},
		{"header without End", func(s sender) { s.write(message([]byte("HDR,\t\r\nFrames in Acquisition (Number):\t5\r\n"))) },
			`merlin: ADDR: the acquisition header: no "End" line: truncated .hdr file`},
		{"frame count not a number", func(s sender) { s.hdr(0, hdrFrames, "many") },
			`merlin: ADDR: the acquisition header: "Frames in Acquisition (Number)" is "many", not a number of frames`},
		{"scan shape not a number", func(s sender) { s.hdr(4, "ScanX", "2", "ScanY", "two") },
			`"ScanY" is "two", not a number of frames`},
		{"frame header not MQ1", func(s sender) { s.hdr(4); s.write(message(bad(testFrame(t, 0, 1), 0, "MQ2"))) },
			`merlin: ADDR: first frame: not a Merlin MIB frame header: it starts with "MQ2,"`},
		{"pixel type", func(s sender) { s.hdr(4); s.write(message(bad(testFrame(t, 0, 1), 30, "F32"))) },
			`merlin: ADDR: first frame: unsupported MIB pixel type "F32" (want U08, U16, U32 or R64)`},
		{"frame shorter than its header says", func(s sender) { s.hdr(4); s.write(message(testFrame(t, 0, 1)[:1000])) },
			`merlin: ADDR: first frame: the frame has 616 pixel bytes; its header says 2048 (64×16 U16)`},
		{"new header before the first frame", func(s sender) { s.hdr(4); s.hdr(4) },
			`merlin: ADDR: the acquisition ended early: a new acquisition header came before the first frame: the acquisition was stopped`},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := script(t, func(s sender) { c.send(s) })
			_, err := receive(t, Options{Addr: addr})
			require.Error(t, err)
			assert.Contains(t, err.Error(), strings.ReplaceAll(c.want, "ADDR", addr))
		})
	}

	// A frame header that differs from the first frame's.
	addr := script(t, func(s sender) {
		s.hdr(4)
		s.frames(1, 2)
		s.write(message(bad(testFrame(t, 2, 3), 30, "U32")))
	})
	got, err := receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, `merlin: `+addr+`: the acquisition ended early: frame 2: header mismatch between frames: pixel type is "U32", frame 0 has "U16"`)
	assert.Equal(t, errs.Format, errs.KindOf(got.err))

	// A frame without a frame number.
	addr = script(t, func(s sender) {
		s.hdr(4)
		s.frames(1)
		s.write(message(bad(testFrame(t, 1, 2), 4, "00000x")))
	})
	got, err = receive(t, Options{Addr: addr})
	require.NoError(t, err)
	endedWith(t, got.err, `the frame after frame 1 has no frame number: its header starts "MQ1,00000x,00384,01,0064,0016,U1"...`)
}

func TestWrongFrameSize(t *testing.T) {
	addr := script(t, func(s sender) {
		s.hdr(4)
		s.frames(1, 2)
		s.write(message(testFrame(t, 2, 3)[:2000]))
	})
	got, err := receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, `merlin: `+addr+`: the acquisition ended early: after frame 2 came a 2000-byte message starting "MQ1,000003,00384,01,0064,0016,U1"...; the acquisition's frame messages have 2432 bytes`)
	assert.Equal(t, errs.Format, errs.KindOf(got.err))
	assert.Equal(t, 2, got.stats.Missing)
}

func TestFrameOrder(t *testing.T) {
	t.Run("gap", func(t *testing.T) {
		addr := script(t, func(s sender) { s.hdr(6); s.frames(1, 2, 4, 6) })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 2, 4, 6)
		assert.Equal(t, io.EOF, got.err, "the last frame came")
		assert.Equal(t, 2, got.stats.Missing)
		assert.Zero(t, got.stats.Late)
	})
	t.Run("late", func(t *testing.T) {
		addr := script(t, func(s sender) { s.hdr(4); s.frames(1, 3, 2, 4) })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 3, 2, 4)
		assert.Equal(t, io.EOF, got.err)
		assert.Equal(t, 1, got.stats.Missing, "frame 2, counted when frame 3 came")
		assert.Equal(t, 1, got.stats.Late)
	})
	t.Run("twice", func(t *testing.T) {
		addr := script(t, func(s sender) { s.hdr(4); s.frames(1, 2, 2) })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 2)
		endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: frame 2 came twice")
	})
}

func TestFrameCount(t *testing.T) {
	t.Run("beyond the count announced", func(t *testing.T) {
		addr := script(t, func(s sender) { s.hdr(3); s.frames(1, 2, 5) })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 2)
		endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: frame number 5 is beyond the 3 frames the acquisition header announced")
	})
	t.Run("more than announced", func(t *testing.T) {
		// The acquisition is over at its last frame: frames after it are not read.
		addr := script(t, func(s sender) { s.hdr(3); s.frames(1, 2, 3, 4, 5) })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 2, 3)
		assert.Equal(t, io.EOF, got.err)
	})
	t.Run("fewer than announced", func(t *testing.T) {
		addr := script(t, func(s sender) { s.hdr(5); s.frames(1, 2, 3); s.conn.Close() })
		got, err := receive(t, Options{Addr: addr})
		require.NoError(t, err)
		checkReceived(t, got, 1, 2, 3)
		endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: the data connection closed after frame 3 of 5")
		assert.Equal(t, 2, got.stats.Missing)
	})
}

// LiberTEM-live issue #167: a stopped acquisition sends nothing more; the next one
// starts with its header.
func TestAbortedAcquisition(t *testing.T) {
	addr := script(t, func(s sender) { s.hdr(6); s.frames(1, 2); s.hdr(6); s.frames(1) })
	got, err := receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: a new acquisition header came after frame 2 of 6: the acquisition was stopped")
	assert.Equal(t, 4, got.stats.Missing)

	// Stopped, and nothing comes: the idle timeout ends it.
	addr = script(t, func(s sender) { s.hdr(6); s.frames(1, 2) })
	got, err = receive(t, Options{Addr: addr, IdleTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2)
	endedWith(t, got.err, "merlin: "+addr+": the acquisition ended early: no frame for 100ms after frame 2 of 6 (option IdleTimeout): the acquisition was stopped or the detector stalled")
}

// A sender that stalls: the context's end ends the wait at once, in Start and in Next.
func TestStalledSender(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	addr := script(t, func(s sender) { <-stall })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r := New(Options{Addr: addr})
	t0 := time.Now()
	_, err := r.Start(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, errs.Cancelled, errs.KindOf(err))
	assert.Less(t, time.Since(t0), 10*time.Second)
	require.NoError(t, r.Close())

	addr = script(t, func(s sender) { s.hdr(4); s.frames(1); <-stall })
	r = New(Options{Addr: addr})
	defer r.Close()
	_, err = r.Start(context.Background())
	require.NoError(t, err)
	frames, err := r.Next(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, frames, 1)
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.Next(ctx, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Close ends the reading goroutine while it waits for the socket.
	require.NoError(t, r.Close())
}

// Back-pressure: with every buffer held, the receiver stops reading until one is
// released; no frame is lost.
func TestBackPressure(t *testing.T) {
	addr := script(t, func(s sender) { s.hdr(10); s.frames(1, 2, 3, 4, 5, 6, 7, 8, 9, 10) })
	r := New(Options{Addr: addr, Buffers: 2})
	defer r.Close()
	ctx := context.Background()
	_, err := r.Start(ctx)
	require.NoError(t, err)
	var held []live.Frame
	for len(held) < 2 {
		held, err = r.Next(ctx, held)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return r.Stats().Stalls == 1 }, 10*time.Second, time.Millisecond)
	var all []int
	for {
		for _, f := range held {
			all = append(all, f.Index)
			r.Release(f)
		}
		held, err = r.Next(ctx, held[:0])
		if err != nil {
			break
		}
	}
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, all)
	assert.Zero(t, r.Stats().Missing)
}

// fakeControl is a control port that records the commands and answers them as
// LiberTEM-live's simulator does (its length one byte short), with code 3 for
// commands in refuse.
func fakeControl(t *testing.T, refuse string) (addr string, commands func() []string) {
	ln := listen(t)
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for {
			cmd, err := readCommand(br)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, string(cmd))
			mu.Unlock()
			f := strings.Split(string(cmd), ",")
			code := "0"
			if string(cmd) == refuse {
				code = "3"
			}
			answer := strings.Join(append(f[:2], code), ",")
			if f[0] == "GET" {
				answer = f[0] + "," + f[1] + ",42," + code
			}
			fmt.Fprintf(conn, "MPX,%010d,%s", len(answer), answer)
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

// Active mode: the commands sent, a command refused, STOPACQUISITION on Close.
func TestActiveCommands(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	data := script(t, func(s sender) { s.hdr(100); s.frames(1, 2); <-stall })
	ctrl, commands := fakeControl(t, "")
	r := New(Options{Addr: data, Control: ctrl, Frames: 100, Settings: [][2]string{{"COUNTERDEPTH", "12"}}})
	h, err := r.Start(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 100, h.Frames)
	frames, err := r.Next(context.Background(), nil)
	require.NoError(t, err)
	require.NotEmpty(t, frames)
	require.NoError(t, r.Close())
	assert.Equal(t, []string{"SET,COUNTERDEPTH,12", "SET,NUMFRAMESTOACQUIRE,100", "CMD,STARTACQUISITION", "CMD,STOPACQUISITION"}, commands())

	data = script(t, func(s sender) {})
	ctrl, _ = fakeControl(t, "SET,NUMFRAMESTOACQUIRE,100")
	_, err = receive(t, Options{Addr: data, Control: ctrl, Frames: 100})
	assert.EqualError(t, err, "merlin: control port "+ctrl+`: SET,NUMFRAMESTOACQUIRE,100: the detector answered code "3" (parameter out of range)`)
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	assert.False(t, errors.Is(err, live.ErrEnded))
}

// Frames of an acquisition that was running when the receiver connected come before
// the next acquisition's header: skipped, with a note.
func TestFramesBeforeHeader(t *testing.T) {
	addr := script(t, func(s sender) { s.frames(7, 8); s.hdr(3); s.frames(1, 2, 3) })
	got, err := receive(t, Options{Addr: addr})
	require.NoError(t, err)
	checkReceived(t, got, 1, 2, 3)
	assert.Equal(t, io.EOF, got.err)
	assert.Equal(t, []string{"2 frames of an earlier acquisition came before the acquisition header and were skipped"}, got.header.Notes)
}

// Calls out of order, and a destination of the wrong size, are errors, not panics.
func TestMisuse(t *testing.T) {
	addr := script(t, func(s sender) { s.hdr(2); s.frames(1, 2) })
	r := New(Options{Addr: addr})
	_, err := r.Next(context.Background(), nil)
	assert.EqualError(t, err, "merlin: "+addr+": Next before Start")
	h, err := r.Start(context.Background())
	require.NoError(t, err)
	_, err = r.Start(context.Background())
	assert.EqualError(t, err, "merlin: "+addr+": Start called twice")
	frames, err := r.Next(context.Background(), nil)
	require.NoError(t, err)
	err = r.Decode(make([]byte, h.FrameBytes()-1), frames[0])
	assert.EqualError(t, err, "merlin: frame 0: payload of 2432 bytes and 2047-byte destination; want 2432 and 2048")
	assert.Equal(t, errs.Shape, errs.KindOf(err))
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
	_, err = r.Next(context.Background(), nil)
	assert.EqualError(t, err, "merlin: "+addr+": Next after Close")
}
