package merlin

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
	"github.com/stemdot/stemdot/live"
)

// listen returns a listener on a free loopback port, closed at the test's end.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serve runs Serve(src, opt) on a loopback listener until the test ends, and returns
// the data port's address.
func serve(t testing.TB, src *Source, opt ServeOptions) string {
	t.Helper()
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, src, opt) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// received is what a receiver got from an acquisition.
type received struct {
	header live.Header
	acqHdr []byte
	frames map[int][]byte // decoded, by index
	order  []int          // indices in the order Next gave them
	stats  live.Stats
	err    error // what ended it: io.EOF or an error (nil: Start failed, see startErr)
}

// receive runs a receiver with opt through an acquisition, decoding every frame, and
// returns what it got; Start's error is returned as such.
func receive(t testing.TB, opt Options) (*received, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := New(opt)
	defer r.Close()
	h, err := r.Start(ctx)
	if err != nil {
		return nil, err
	}
	got := &received{header: h, acqHdr: r.AcquisitionHeader(), frames: map[int][]byte{}}
	var batch []live.Frame
	for {
		batch, err = r.Next(ctx, batch[:0])
		for _, f := range batch {
			dst := make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(dst, f))
			got.frames[f.Index] = dst
			got.order = append(got.order, f.Index)
			r.Release(f)
		}
		if err != nil {
			got.err = err
			break
		}
	}
	got.stats = r.Stats()
	return got, nil
}

// fileFrames returns the frames of the file at path as dataset.Open reads them.
func fileFrames(t testing.TB, path string, opt dataset.Options) (dataset.Dataset, [][]byte) {
	t.Helper()
	ds, err := dataset.Open(path, opt)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	frames := make([][]byte, ds.NumFrames())
	for i := range frames {
		frames[i] = make([]byte, ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(i, i+1, frames[i]))
	}
	return ds, frames
}

// fake runs script on the first connection to a loopback listener, then holds the
// connection open until the receiver closes it (unless script closed it), and
// returns the address.
func fake(t testing.TB, script func(conn net.Conn)) string {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		script(conn)
		io.Copy(io.Discard, conn)
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// message is b framed as an MPX message.
func message(b []byte) []byte { return append(appendPrefix(nil, len(b)), b...) }

// acqHeader is an acquisition header announcing frames frames (0: none) and the extra
// "key:\tvalue" pairs.
func acqHeader(frames int, extra ...string) []byte {
	h := []byte("HDR,\t\r\nEnd\t")
	if frames > 0 {
		h = setHdrField(h, hdrFrames, strconv.Itoa(frames))
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h = setHdrField(h, extra[i], extra[i+1])
	}
	return h
}

// testSig is the frame shape of the fake servers' frames: U16, 16×64.
var testSig = [2]int{16, 64}

// testFrame is frame i (from 0, numbered num) of the fake servers: a U16 frame whose
// pixels are (i·7 + p) mod 4096, big-endian.
func testFrame(t testing.TB, i, num int) []byte {
	t.Helper()
	mh, err := dataset.NewMIBHeaders([]int{1, 1}, testSig, dataset.Uint16, time.Unix(0, 0))
	require.NoError(t, err)
	rec := mh.Frame(nil, 0)
	require.NoError(t, setFrameNumber(rec, mh.HeaderBytes, num))
	for p := range testSig[0] * testSig[1] {
		v := (i*7 + p) % 4096
		rec = append(rec, byte(v>>8), byte(v))
	}
	return rec
}

// testPixels is testFrame(i)'s decoded pixels, host order.
func testPixels(t testing.TB, i int) []byte {
	rec := testFrame(t, i, i+1)
	px := rec[384:]
	dataset.CopyToHost(px, px, 2, true)
	return px
}

// endedWith checks that err wraps live.ErrEnded and says what.
func endedWith(t testing.TB, err error, what string) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, errors.Is(err, live.ErrEnded), "%v wraps live.ErrEnded", err)
	require.ErrorContains(t, err, what)
}
