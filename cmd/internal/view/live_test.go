package view

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// The live scan of the tests: lny×lnx frames of lsy×lsx uint16 pixels, liveValue.
const lny, lnx, lsy, lsx = 6, 8, 20, 24

func liveValue(f, y, x int) uint16 {
	v := uint16((f*13+y*7+x*3)%29 + 1)
	if y == 9+f%3 && x == 11+f%4 {
		v += 500
	}
	return v
}

func liveData() []byte {
	b := make([]byte, lny*lnx*lsy*lsx*2)
	for f := range lny * lnx {
		for y := range lsy {
			for x := range lsx {
				binary.NativeEndian.PutUint16(b[((f*lsy+y)*lsx+x)*2:], liveValue(f, y, x))
			}
		}
	}
	return b
}

// gatedReceiver sends the frames of data in order once the test lets them through
// (send), its header once header is closed, and ends with end after the last frame let
// through when end is set (else io.EOF after the last frame of the scan).
type gatedReceiver struct {
	h      live.Header
	data   []byte
	header chan struct{}
	fail   error // Start's error
	bad    int   // the frame whose Decode fails, or -1

	mu      sync.Mutex
	allowed int
	sent    int
	end     error
	more    chan struct{} // closed and replaced when allowed or end change
}

func newGated(data []byte) *gatedReceiver {
	return &gatedReceiver{h: live.Header{Detector: "gated", SigShape: [2]int{lsy, lsx}, DType: dataset.Uint16, Frames: lny * lnx, NavShape: []int{lny, lnx}},
		data: data, header: make(chan struct{}), more: make(chan struct{}), bad: -1}
}

// send lets frames up to n through; end, when set, ends the acquisition after them.
func (g *gatedReceiver) send(n int, end error) {
	g.mu.Lock()
	g.allowed, g.end = n, end
	close(g.more)
	g.more = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedReceiver) Start(ctx context.Context) (live.Header, error) {
	select {
	case <-g.header:
	case <-ctx.Done():
		return live.Header{}, ctx.Err()
	}
	return g.h, g.fail
}

func (g *gatedReceiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	fb := g.h.FrameBytes()
	for {
		g.mu.Lock()
		more := g.more
		for ; g.sent < g.allowed; g.sent++ {
			dst = append(dst, live.Frame{Index: g.sent, Payload: slices.Clone(g.data[g.sent*fb : (g.sent+1)*fb])})
		}
		sent, end := g.sent, g.end
		g.mu.Unlock()
		switch {
		case sent == g.h.Frames:
			return dst, io.EOF
		case end != nil && sent == g.allowed:
			return dst, end
		case len(dst) > 0:
			return dst, nil
		}
		select {
		case <-more:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

func (g *gatedReceiver) Decode(dst []byte, f live.Frame) error {
	if f.Index == g.bad {
		return errs.New(errs.Format, "frame %d is malformed", f.Index)
	}
	copy(dst, f.Payload)
	return nil
}
func (g *gatedReceiver) Release(live.Frame) {}
func (g *gatedReceiver) Stats() live.Stats  { return live.Stats{} }
func (g *gatedReceiver) Close() error       { return nil }

// liveServer serves rcv's acquisition (Keep bytes kept) until the test ends, and
// returns its base URL (…/TOKEN/). Its workers read tiles of one frame: a tile waits
// for all its frames, and the scheduler may start a claim at any frame (a claim of
// one frame when the rate is low), so with longer tiles the image of the frames sent
// so far could wait for a frame the test has not sent.
func liveServer(t *testing.T, rcv live.Receiver, keep int64) string {
	t.Helper()
	apply, err := stemdot.Plan{CPUs: "1"}.Planner()
	require.NoError(t, err)
	s, err := NewLive(rcv, Options{File: "gated://scan", Apply: apply}, LiveOptions{Source: "gated://scan", Keep: keep, Every: 5 * time.Millisecond, TileFrames: 1})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Error("Serve did not stop")
		}
	})
	return "http://" + ln.Addr().String() + "/" + s.Token() + "/"
}

// liveImg is an answer of /api/live: its meta and values.
type liveImg struct {
	liveMeta
	vals []float64
}

// nextImage waits for the first image after image after that satisfies ok.
func nextImage(t *testing.T, base string, after uint64, ok func(liveImg) bool) liveImg {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, body := get(t, fmt.Sprintf("%sapi/live?after=%d", base, after))
		if resp.StatusCode == 503 { // before the header
			time.Sleep(time.Millisecond)
			continue
		}
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		n := binary.LittleEndian.Uint32(body)
		var img liveImg
		require.NoError(t, json.Unmarshal(body[4:4+n], &img.liveMeta))
		data := body[(4+n+7)/8*8:]
		switch img.DType {
		case "f4":
			for i := 0; i < len(data); i += 4 {
				img.vals = append(img.vals, float64(math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))))
			}
		case "f8":
			for i := 0; i < len(data); i += 8 {
				img.vals = append(img.vals, math.Float64frombits(binary.LittleEndian.Uint64(data[i:])))
			}
		}
		require.Greater(t, img.Seq, after)
		if ok(img) {
			return img
		}
		after = img.Seq
	}
	t.Fatal("no such image within a minute")
	return liveImg{}
}

// offlineImage is /api/image's image of spec over frames: Apply's, as the file viewer
// computes it.
func offlineImage(t *testing.T, data []byte, spec string) []float64 {
	t.Helper()
	ds, err := dataset.FromMemory(data, []int{lny, lnx}, [2]int{lsy, lsx}, dataset.Uint16)
	require.NoError(t, err)
	stack, err := detector(ds.SigShape(), spec, nil)
	require.NoError(t, err)
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	dtype, _, b, err := imageOf(res.NavShape, stack.N, res.F32)
	require.NoError(t, err)
	var v []float64
	if dtype == "f4" {
		for i := 0; i < len(b); i += 4 {
			v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	} else {
		for i := 0; i < len(b); i += 8 {
			v = append(v, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
		}
	}
	return v
}

// requireImage checks img's values: want's (bit for bit) at the frames [0, n) except
// those of nan, NaN elsewhere (for com: in each of the three maps).
func requireImage(t *testing.T, img liveImg, want []float64, n int, nan ...int) {
	t.Helper()
	require.Len(t, img.vals, len(want))
	frames := lny * lnx
	for i, w := range want {
		f := i % frames
		if f < n && !slices.Contains(nan, f) {
			require.Equal(t, w, img.vals[i], "%s, value %d (frame %d)", img.Spec, i, f)
		} else {
			require.True(t, math.IsNaN(img.vals[i]), "%s, value %d (frame %d): %v, want NaN", img.Spec, i, f, img.vals[i])
		}
	}
}

func setDetector(t *testing.T, base, spec string) uint64 {
	t.Helper()
	resp, err := http.Post(base+"api/live/detector?spec="+url.QueryEscape(spec), "", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var r struct {
		Gen  uint64 `json:"gen"`
		Spec string `json:"spec"`
	}
	require.NoError(t, json.Unmarshal(body, &r))
	require.Equal(t, spec, r.Spec)
	return r.Gen
}

// TestLiveFillsIn: the image fills in as frames arrive; the sum frame is that of the
// frames received; a detector moved mid-scan is recomputed from the frames received and
// goes on filling in; after the acquisition, another detector is computed from the
// frames kept; every image is Apply's values of its frames, bit for bit.
func TestLiveFillsIn(t *testing.T) {
	data := liveData()
	rcv := newGated(data)
	base := liveServer(t, rcv, 1<<30)
	n := lny * lnx

	// Before the header: waiting, on the event stream and in the info.
	resp, err := http.Get(base + "api/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	nextEvent := func() string {
		for events.Scan() {
			if e, ok := strings.CutPrefix(events.Text(), "event: "); ok {
				return e
			}
		}
		return ""
	}
	require.Equal(t, "waiting", nextEvent())
	r, body := get(t, base+"api/live?after=0")
	require.Equal(t, 503, r.StatusCode)
	require.Contains(t, string(body), "waiting for the acquisition's header from gated://scan")
	close(rcv.header)
	require.Equal(t, "ready", nextEvent())
	var info map[string]any
	_, body = get(t, base+"api/info")
	require.NoError(t, json.Unmarshal(body, &info))
	require.Equal(t, true, info["live"])
	require.Equal(t, []any{float64(lny), float64(lnx)}, info["nav_shape"])
	require.Equal(t, "disk:12,10,3", info["spec"]) // the page's default: the centre, 1/8 of 20
	require.Equal(t, float64(n), info["frames"])

	// 20 frames: the default detector's image holds them, NaN after.
	rcv.send(20, nil)
	img := nextImage(t, base, 0, func(i liveImg) bool { return i.Done == 20 })
	require.Equal(t, "disk:12,10,3", img.Spec)
	require.Equal(t, "receiving", img.Acquisition)
	require.Equal(t, 20, img.Received)
	require.False(t, img.Complete)
	requireImage(t, img, offlineImage(t, data, "disk:12,10,3"), 20)
	shape, sum := array(t, base+"api/frame?kind=sum")
	require.Equal(t, fmt.Sprintf("%d,%d", lsy, lsx), shape)
	for i, v := range sum {
		want := 0.0
		for f := range 20 {
			want += float64(liveValue(f, i/lsx, i%lsx))
		}
		require.Equal(t, want, v, "sum of 20 frames, pixel %d", i)
	}
	_, fr := array(t, base+"api/pick?y=1&x=3")
	for i, v := range fr {
		require.Equal(t, float64(liveValue(11, i/lsx, i%lsx)), v)
	}

	// A ring mid-scan: recomputed from the 20 frames, then filling in with 10 more.
	gen := setDetector(t, base, "ring:12,10,3,8")
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Gen == gen && i.Done == 20 })
	ring := offlineImage(t, data, "ring:12,10,3,8")
	requireImage(t, img, ring, 20)
	rcv.send(30, nil)
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Done == 30 })
	requireImage(t, img, ring, 30)
	rcv.send(n, nil)
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Complete })
	requireImage(t, img, ring, n)
	require.Equal(t, "complete", img.Acquisition)
	require.Zero(t, img.NotKeptAll)

	// After the acquisition: CoM from the frames kept, as the file viewer gives it.
	gen = setDetector(t, base, "com:12,10")
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Gen == gen && i.Complete })
	require.Equal(t, []int{3, lny, lnx}, img.Shape)
	requireImage(t, img, offlineImage(t, data, "com:12,10"), n)
	_, sum = array(t, base+"api/frame?kind=sum")
	_, mx := array(t, base+"api/frame?kind=max")
	for i := range sum {
		want, wmax := 0.0, 0.0
		for f := range n {
			v := float64(liveValue(f, i/lsx, i%lsx))
			want, wmax = want+v, math.Max(wmax, v)
		}
		require.Equal(t, want, sum[i], "sum of all frames (each once), pixel %d", i)
		require.Equal(t, wmax, mx[i], "max, pixel %d", i)
	}

	for _, c := range []struct {
		url  string
		code int
		want string
	}{
		{"api/live?after=x", 400, "want the number of the image shown"},
		{"api/pick?y=6&x=0", 400, "want a whole number from 0 to 5"},
		{"api/frame?kind=std", 400, "want sum, mean or max"},
	} {
		r, body := get(t, base+c.url)
		require.Equal(t, c.code, r.StatusCode, c.url)
		require.Contains(t, string(body), c.want, c.url)
	}
	for spec, want := range map[string]string{"disk:1,2": "want disk:CX,CY,R", "disk:-9,-9,2": "no pixel"} {
		resp, err := http.Post(base+"api/live/detector?spec="+url.QueryEscape(spec), "", nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, spec)
		require.Contains(t, string(body), want, spec)
	}
}

// TestLiveNotKept: with a budget of 5 frames, a detector moved mid-scan shows the
// frames received and not kept as NaN, and says how many; the page cannot pick them.
func TestLiveNotKept(t *testing.T) {
	data := liveData()
	rcv := newGated(data)
	close(rcv.header)
	fb := int64(lsy * lsx * 2)
	base := liveServer(t, rcv, 5*fb)
	rcv.send(12, nil)
	img := nextImage(t, base, 0, func(i liveImg) bool { return i.Done == 12 })
	require.Equal(t, 7, img.NotKeptAll)
	require.Zero(t, img.NotKept)
	gen := setDetector(t, base, "disk:5,5,4")
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Gen == gen && i.Done == 12 })
	notKept := []int{5, 6, 7, 8, 9, 10, 11}
	requireImage(t, img, offlineImage(t, data, "disk:5,5,4"), 12, notKept...)
	require.Equal(t, 7, img.NotKept)
	r, body := get(t, base+"api/pick?y=0&x=7")
	require.Equal(t, 404, r.StatusCode)
	require.Contains(t, string(body), "the frame at scan position (0, 7) was not kept: the budget of")
	r, body = get(t, base+"api/pick?y=5&x=0")
	require.Equal(t, 404, r.StatusCode)
	require.Contains(t, string(body), "no frame at scan position (5, 0) yet")
	// The rest comes: computed by this detector, not kept either.
	rcv.send(lny*lnx, nil)
	img = nextImage(t, base, img.Seq, func(i liveImg) bool { return i.Complete })
	requireImage(t, img, offlineImage(t, data, "disk:5,5,4"), lny*lnx, notKept...)
	require.Equal(t, lny*lnx-5, img.NotKeptAll)
}

// TestLiveEndedEarly: an acquisition cut off after 30 frames: the image is complete with
// NaN at the 18 positions without a frame, and says why the acquisition ended.
func TestLiveEndedEarly(t *testing.T) {
	data := liveData()
	rcv := newGated(data)
	close(rcv.header)
	base := liveServer(t, rcv, 1<<30)
	rcv.send(30, live.Ended("the detector stopped"))
	img := nextImage(t, base, 0, func(i liveImg) bool { return i.Complete })
	require.Equal(t, "ended", img.Acquisition)
	require.Contains(t, img.End, "the detector stopped")
	require.Equal(t, lny*lnx-30, img.NoFrame)
	requireImage(t, img, offlineImage(t, data, "disk:12,10,3"), 30)
	_, sum := array(t, base+"api/frame?kind=mean")
	for i, v := range sum {
		want := 0.0
		for f := range 30 {
			want += float64(liveValue(f, i/lsx, i%lsx))
		}
		require.Equal(t, want/30, v, "mean of the 30 frames received, pixel %d", i)
	}
}

// TestLiveStartFails: an acquisition that does not start stops the server, whose
// Serve returns the receiver's error.
func TestLiveStartFails(t *testing.T) {
	rcv := newGated(nil)
	rcv.fail = errs.New(errs.IO, "cannot connect to the data port 127.0.0.1:1")
	close(rcv.header)
	apply, err := stemdot.Plan{CPUs: "1"}.Planner()
	require.NoError(t, err)
	s, err := NewLive(rcv, Options{Apply: apply}, LiveOptions{Source: "gated://scan"})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errs.IO)
		require.ErrorContains(t, err, "cannot connect to the data port 127.0.0.1:1")
	case <-time.After(20 * time.Second):
		t.Fatal("Serve goes on after the acquisition did not start")
	}
}

// TestLiveRunFails: a frame that cannot be decoded stops the detector's run; its image
// says why, and the page shows it.
func TestLiveRunFails(t *testing.T) {
	rcv := newGated(liveData())
	rcv.bad = 7
	close(rcv.header)
	base := liveServer(t, rcv, 1<<30)
	rcv.send(lny*lnx, nil)
	img := nextImage(t, base, 0, func(i liveImg) bool { return i.Error != "" })
	require.Contains(t, img.Error, "frame 7 is malformed")
	require.Equal(t, "disk:12,10,3", img.Spec)
}
