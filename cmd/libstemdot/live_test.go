package main

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/live/merlin"
	"github.com/stemdot/stemdot/masks"
)

// snapshot mirrors stemdot_live_snapshot (include/stemdot.h) on 64-bit Linux.
type snapshot struct {
	Seq            uint64
	Final, Partial int32
	NavNdim        uint64
	NavShape       [maxNavDims]uint64
	NMasks         uint64
	NFrames, Done  uint64
	Received       uint64
	Missing, Late  uint64
	Surplus        uint64
	Repeated       uint64
	Stalls         uint64
	Elapsed, Rate  float64
}

func TestLiveSnapshotLayout(t *testing.T) {
	assert.EqualValues(t, liveSnapshotSize, unsafe.Sizeof(snapshot{}))
}

// liveScan is a scan of uint16 frames in memory, served as a Merlin's data port
// (merlin.Serve, passive) on loopback.
type liveScan struct {
	ds     dataset.Dataset
	nav    []int
	sy, sx int
}

func newLiveScan(t *testing.T, nav []int, sy, sx int) *liveScan {
	rng := rand.New(rand.NewPCG(3, 4))
	buf, _ := randomFrames(t, rng, dataset.Uint16, product(nav), sy, sx)
	ds, err := memoryDataset(buf, int(dataset.Uint16), nav, sy, sx)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	return &liveScan{ds: ds, nav: nav, sy: sy, sx: sx}
}

// serve sends the scan to each receiver that connects, at rate frames a second (0: as
// fast as it reads), until the test ends or the returned stop is called (which cuts an
// acquisition off), and returns the data port's address.
func (s *liveScan) serve(t *testing.T, rate float64) (addr string, stop func()) {
	src, err := merlin.FromDataset(s.ds)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { merlin.Serve(ctx, ln, src, merlin.ServeOptions{Rate: rate}); close(served) }()
	stop = func() { cancel(); <-served }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// apply is stemdot_apply's result of weights on the scan.
func (s *liveScan) apply(t *testing.T, weights []float32, f64 bool) []float64 {
	n := len(weights) / (s.sy * s.sx) * product(s.nav)
	stack, err := newStack(masks.New(len(weights)/(s.sy*s.sx), s.sy, s.sx, weights, nil))
	require.NoError(t, err)
	req := applyRequest{ds: s.ds, stack: stack}
	if f64 {
		req.out64 = make([]float64, n)
	} else {
		req.out32 = make([]float32, n)
	}
	require.NoError(t, apply(req))
	return values(req.out32, req.out64)
}

func values(out32 []float32, out64 []float64) []float64 {
	if out64 != nil {
		return out64
	}
	v := make([]float64, len(out32))
	for i, x := range out32 {
		v[i] = float64(x)
	}
	return v
}

// startLive calls stemdot_live_start with weights (float) of sy × sx pixels and returns
// the handle, freed when the test ends.
func startLiveC(t *testing.T, source, options string, weights []float32, sy, sx int) uint64 {
	t.Helper()
	var h uint64
	st, msg := callC(stemdot_go_live_start, cstr(source), cstr(options), unsafe.Pointer(&weights[0]), 7,
		len(weights)/(sy*sx), sy, sx, 0, unsafe.Pointer(&h))
	require.Equal(t, statusOK, st, msg)
	require.NotZero(t, h)
	t.Cleanup(func() { callC(stemdot_go_live_free, h) })
	return h
}

// cstr is s as a NUL-terminated C string (kept alive by the Go heap).
func cstr(s string) unsafe.Pointer {
	b := append([]byte(s), 0)
	return unsafe.Pointer(&b[0])
}

// poll calls stemdot_live_poll into out (float32 or float64 values; nil: NULL).
func poll(h uint64, timeout float64, out any) (snapshot, status, string) {
	var s snapshot
	p, dt, n := outArgs(out)
	st, msg := callC(stemdot_go_live_poll, h, timeout, unsafe.Pointer(&s), p, dt, n)
	return s, st, msg
}

func wait(h uint64, out any) (snapshot, status, string) {
	var s snapshot
	p, dt, n := outArgs(out)
	st, msg := callC(stemdot_go_live_wait, h, unsafe.Pointer(&s), p, dt, n)
	return s, st, msg
}

func outArgs(out any) (unsafe.Pointer, int, int) {
	switch o := out.(type) {
	case []float32:
		return unsafe.Pointer(&o[0]), 7, len(o)
	case []float64:
		return unsafe.Pointer(&o[0]), 8, len(o)
	}
	return nil, 7, 0
}

func liveTextC(t *testing.T, fn any, h uint64) (string, status, string) {
	var needed uint64
	st, msg := callC(fn, h, nil, 0, unsafe.Pointer(&needed))
	if st != statusOK {
		return "", st, msg
	}
	buf := make([]byte, needed+1)
	st, msg = callC(fn, h, unsafe.Pointer(&buf[0]), len(buf), unsafe.Pointer(&needed))
	return string(buf[:needed]), st, msg
}

func liveMissing(t *testing.T, h uint64) [][2]uint64 {
	var n uint64
	st, msg := callC(stemdot_go_live_missing, h, nil, 0, unsafe.Pointer(&n))
	require.Equal(t, statusOK, st, msg)
	if n == 0 {
		return nil
	}
	runs := make([]uint64, 2*n)
	st, msg = callC(stemdot_go_live_missing, h, unsafe.Pointer(&runs[0]), len(runs), unsafe.Pointer(&n))
	require.Equal(t, statusOK, st, msg)
	var out [][2]uint64
	for i := range n {
		out = append(out, [2]uint64{runs[2*i], runs[2*i+1]})
	}
	return out
}

func testWeights(nMasks, sy, sx int) []float32 {
	rng := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, nMasks*sy*sx)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	return w
}

// TestLiveEqualsApply: a scan served as a Merlin and received by stemdot_live_start
// gives stemdot_apply's result for the scan, bit for bit (float32 and float64); the
// snapshots polled meanwhile only grow: a position once computed keeps its value, the
// frames done never decrease, and the last is the final result.
func TestLiveEqualsApply(t *testing.T) {
	// A worker computes whole tiles (of about 4 MiB): 128 frames of 128 × 128 uint16
	// pixels, 4 tiles in the scan.
	s := newLiveScan(t, []int{16, 32}, 128, 128)
	weights := testWeights(3, s.sy, s.sx)
	for _, f64 := range []bool{false, true} {
		t.Run(map[bool]string{false: "float32", true: "float64"}[f64], func(t *testing.T) {
			want := s.apply(t, weights, f64)
			addr, _ := s.serve(t, 2000)
			opt := "passive=true;every=0.01"
			if f64 {
				opt += ";float64=true"
			}
			h := startLiveC(t, "merlin://"+addr, opt, weights, s.sy, s.sx)
			n := len(want)
			var out any = make([]float32, n)
			if f64 {
				out = make([]float64, n)
			}
			seen := make([]float64, n) // NaN: not computed in any snapshot so far
			for i := range seen {
				seen[i] = math.NaN()
			}
			var last snapshot
			partials := 0
			for last.Final == 0 {
				snap, st, msg := poll(h, 0.5, out)
				require.Equal(t, statusOK, st, msg)
				if snap.Seq == 0 {
					continue
				}
				assert.EqualValues(t, 2, snap.NavNdim)
				assert.Equal(t, [maxNavDims]uint64{16, 32}, snap.NavShape)
				assert.EqualValues(t, 3, snap.NMasks)
				assert.EqualValues(t, 512, snap.NFrames)
				assert.GreaterOrEqual(t, snap.Done, last.Done, "frames done decreased")
				assert.GreaterOrEqual(t, snap.Seq, last.Seq)
				got := values(asF32(out), asF64(out))
				computed := 0
				for i, v := range got {
					if !math.IsNaN(v) {
						computed++
						assert.Equal(t, want[i], v, "value %d differs from apply's", i)
					}
					if !math.IsNaN(seen[i]) {
						require.Equal(t, seen[i], v, "value %d changed after it was computed", i)
					}
					seen[i] = v
				}
				if snap.Final == 0 && computed > 0 && computed < n {
					partials++
				}
				last = snap
			}
			assert.Positive(t, partials, "no snapshot of part of the scan")
			assert.Zero(t, last.Partial)
			assert.EqualValues(t, 512, last.Done)
			assert.EqualValues(t, 512, last.Received)
			assert.Zero(t, last.Missing+last.Late+last.Surplus+last.Repeated)
			assert.Equal(t, want, seen, "final result differs from apply's")

			// wait after the end gives the same, as does a poll that may wait (it returns at once)
			snap, st, msg := wait(h, out)
			require.Equal(t, statusOK, st, msg)
			assert.EqualValues(t, 1, snap.Final)
			assert.Equal(t, want, values(asF32(out), asF64(out)))
			start := time.Now()
			_, st, msg = poll(h, 10, out)
			require.Equal(t, statusOK, st, msg)
			assert.Less(t, time.Since(start), time.Second, "a poll after the end waited")

			assert.Empty(t, liveMissing(t, h))
			warnings, st, msg := liveTextC(t, stemdot_go_live_warnings, h)
			require.Equal(t, statusOK, st, msg)
			assert.Empty(t, warnings)
			text, st, msg := liveTextC(t, stemdot_go_live_info, h)
			require.Equal(t, statusOK, st, msg)
			var info struct {
				Shape []int  `json:"shape"`
				DType string `json:"dtype"`
				Live  struct {
					Source   string `json:"source"`
					Partial  bool   `json:"partial"`
					Received int    `json:"received"`
				} `json:"live"`
			}
			require.NoError(t, json.Unmarshal([]byte(text), &info), text)
			assert.Equal(t, []int{16, 32, 3}, info.Shape)
			assert.Equal(t, map[bool]string{false: "float32", true: "float64"}[f64], info.DType)
			assert.Equal(t, "merlin://"+addr, info.Live.Source)
			assert.Equal(t, 512, info.Live.Received)
			assert.False(t, info.Live.Partial)
		})
	}
}

func asF32(out any) []float32 { v, _ := out.([]float32); return v }
func asF64(out any) []float64 { v, _ := out.([]float64); return v }

// TestLivePartial: an acquisition cut off mid-scan (the server stopped) is a final
// result with partial set, NaN at the positions without a frame and apply's values at
// the others; missing, warnings and info say which positions.
func TestLivePartial(t *testing.T) {
	s := newLiveScan(t, []int{16, 16}, 16, 12)
	weights := testWeights(2, s.sy, s.sx)
	want := s.apply(t, weights, false)
	addr, stop := s.serve(t, 500)
	h := startLiveC(t, "merlin://"+addr, "passive=true", weights, s.sy, s.sx)
	for {
		snap, st, msg := poll(h, 0.5, nil)
		require.Equal(t, statusOK, st, msg)
		if snap.Received > 60 {
			break
		}
	}
	stop()
	out := make([]float32, len(want))
	snap, st, msg := wait(h, out)
	require.Equal(t, statusOK, st, msg)
	assert.EqualValues(t, 1, snap.Final)
	assert.EqualValues(t, 1, snap.Partial)
	got := values(out, nil)
	nan := 0
	for f := range 256 {
		for m := range 2 {
			if v := got[f*2+m]; math.IsNaN(v) {
				nan++
			} else {
				assert.Equal(t, want[f*2+m], v, "frame %d mask %d", f, m)
			}
		}
	}
	received := 256 - nan/2
	assert.Greater(t, received, 60)
	assert.Less(t, received, 256)
	assert.EqualValues(t, received, snap.Received)
	assert.Equal(t, [][2]uint64{{uint64(received), uint64(256 - received)}}, liveMissing(t, h))
	warnings, st, msg := liveTextC(t, stemdot_go_live_warnings, h)
	require.Equal(t, statusOK, st, msg)
	assert.Contains(t, warnings, "partial result")
	text, st, msg := liveTextC(t, stemdot_go_live_info, h)
	require.Equal(t, statusOK, st, msg)
	assert.Contains(t, text, `"partial": true`)
}

// TestLiveCancel: a run waiting for an acquisition that never comes (a data port that
// accepts and sends nothing) is cancelled promptly, a running one too; calls blocked in
// wait and poll return; a freed handle is refused.
func TestLiveCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	weights := testWeights(1, 4, 4)
	h := startLiveC(t, "merlin://"+ln.Addr().String(), "passive=true", weights, 4, 4)
	waited := make(chan status, 2)
	go func() { _, st, _ := wait(h, nil); waited <- st }()
	go func() {
		for {
			snap, st, _ := poll(h, 0.05, nil)
			if st != statusOK || snap.Final != 0 {
				waited <- st
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	st, msg := callC(stemdot_go_live_cancel, h)
	require.Equal(t, statusOK, st, msg)
	for range 2 {
		select {
		case st := <-waited:
			assert.Equal(t, errCancelled, st)
		case <-time.After(5 * time.Second):
			t.Fatal("wait and poll did not return after the cancel")
		}
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	_, st, msg = poll(h, 0, nil)
	assert.Equal(t, errCancelled, st, msg)
	assert.Contains(t, msg, "stemdot_live_poll: the live run on merlin://"+ln.Addr().String()+" was cancelled (stemdot_live_cancel)")
	_, st, msg = liveTextC(t, stemdot_go_live_info, h)
	assert.Equal(t, errCancelled, st, msg)
	st, msg = callC(stemdot_go_live_cancel, h)
	assert.Equal(t, statusOK, st, msg, "a second cancel")

	// freed while an acquisition runs: returns promptly, the handle refused afterwards
	s := newLiveScan(t, []int{32, 32}, 8, 8)
	addr, _ := s.serve(t, 200)
	h2 := startLiveC(t, "merlin://"+addr, "passive=true", testWeights(1, 8, 8), 8, 8)
	for {
		snap, st, msg := poll(h2, 0.5, nil)
		require.Equal(t, statusOK, st, msg)
		if snap.Received > 0 {
			break
		}
	}
	start = time.Now()
	st, msg = callC(stemdot_go_live_free, h2)
	require.Equal(t, statusOK, st, msg)
	assert.Less(t, time.Since(start), 2*time.Second)
	for _, fn := range []any{stemdot_go_live_cancel, stemdot_go_live_free} {
		st, msg = callC(fn, h2)
		assert.Equal(t, errBadHandle, st, msg)
		assert.Contains(t, msg, "already freed")
	}
	_, st, msg = poll(h2, 0, nil)
	assert.Equal(t, errBadHandle, st, msg)
}

// TestLiveConcurrent: polls, waits and cancels from many threads at once on one run (go
// test -race).
func TestLiveConcurrent(t *testing.T) {
	s := newLiveScan(t, []int{16, 16}, 8, 8)
	addr, _ := s.serve(t, 2000)
	weights := testWeights(2, 8, 8)
	h := startLiveC(t, "merlin://"+addr, "passive=true;every=0.01", weights, 8, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, 256*2)
			for k := 0; ; k++ {
				if i == 7 && k == 20 {
					callC(stemdot_go_live_cancel, h)
				}
				snap, st, msg := poll(h, 0.01, out)
				if st != statusOK {
					assert.Equal(t, errCancelled, st, msg)
					return
				}
				if snap.Final != 0 {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); wait(h, nil) }()
	wg.Wait()
}

// TestLiveErrors: refusals at the start (naming the argument or option) and errors of
// the run (from poll and wait), each with its status.
func TestLiveErrors(t *testing.T) {
	w := testWeights(1, 4, 4)
	for _, c := range []struct {
		source, options string
		code            status
		msg             string
	}{
		{"tpx://127.0.0.1", "", errInvalidArgument, `unknown scheme "tpx": want dectris or merlin`},
		{"merlin:127.0.0.1", "", errInvalidArgument, "want SCHEME://HOST[:PORT]"},
		{"", "", errInvalidArgument, "empty source"},
		{"merlin://127.0.0.1", "colour=blue", errInvalidArgument, `unknown live option "colour" (known: passive, nav_shape`},
		{"merlin://127.0.0.1", "stream=v1", errInvalidArgument, `merlin source option "stream" is not known`},
		{"merlin://127.0.0.1", "passive=maybe", errInvalidArgument, `option passive "maybe": want true or false`},
		{"merlin://127.0.0.1", "every=0", errInvalidArgument, "option every"},
		{"merlin://127.0.0.1", "nav_shape=4x4", errShape, "option nav_shape"},
		{"merlin://127.0.0.1", "nav_shape=1,1,1,1,1,1,1,1,1", errShape, "more than 8"},
		{"merlin://127.0.0.1", "passive;x", errInvalidArgument, `"passive" is not key=value`},
		{"dectris://127.0.0.1", "", errInvalidArgument, "give source option dectris_api"},
		{"merlin://127.0.0.1", "passive=true;control=127.0.0.1", errInvalidArgument, "are for active mode"},
	} {
		var h uint64 = 99
		st, msg := callC(stemdot_go_live_start, cstr(c.source), cstr(c.options), unsafe.Pointer(&w[0]), 7, 1, 4, 4, 0, unsafe.Pointer(&h))
		assert.Equal(t, c.code, st, "%s %s: %s", c.source, c.options, msg)
		assert.Contains(t, msg, c.msg, "%s %s", c.source, c.options)
		assert.True(t, strings.HasPrefix(msg, "stemdot_live_start: "), msg)
		assert.Zero(t, h, "a failed start stores 0")
	}
	var h uint64
	st, msg := callC(stemdot_go_live_start, nil, nil, unsafe.Pointer(&w[0]), 7, 1, 4, 4, 0, unsafe.Pointer(&h))
	assert.Equal(t, errInvalidArgument, st, msg)
	st, msg = callC(stemdot_go_live_start, cstr("merlin://127.0.0.1"), nil, unsafe.Pointer(&w[0]), 1, 1, 4, 4, 0, unsafe.Pointer(&h))
	assert.Equal(t, errDType, st, msg)
	w[3] = float32(math.NaN())
	st, msg = callC(stemdot_go_live_start, cstr("merlin://127.0.0.1"), nil, unsafe.Pointer(&w[0]), 7, 1, 4, 4, 0, unsafe.Pointer(&h))
	assert.Equal(t, errInvalidArgument, st, msg)
	assert.Contains(t, msg, "NaN")
	w[3] = 1
	st, msg = callC(stemdot_go_live_start, cstr("merlin://127.0.0.1"), nil, unsafe.Pointer(&w[0]), 7, 1, 4, 4, 12345, unsafe.Pointer(&h))
	assert.Equal(t, errBadHandle, st, msg)

	// connection refused: the run's error, from poll and wait, naming the address
	h = startLiveC(t, "merlin://127.0.0.1:1", "passive=true", w, 4, 4)
	_, st, msg = wait(h, nil)
	assert.Equal(t, errIO, st, msg)
	assert.Contains(t, msg, "cannot connect to the data port 127.0.0.1:1")
	assert.True(t, strings.HasPrefix(msg, "stemdot_live_wait: "), msg)
	_, st, msg = poll(h, 0, nil)
	assert.Equal(t, errIO, st, msg)

	// masks of another sig shape than the stream's; out of another dtype or length
	s := newLiveScan(t, []int{4, 4}, 8, 8)
	addr, _ := s.serve(t, 0)
	h = startLiveC(t, "merlin://"+addr, "passive=true", w, 4, 4)
	_, st, msg = wait(h, nil)
	assert.Equal(t, errShape, st, msg)
	assert.Contains(t, msg, "masks of sig_shape (4, 4) do not match the frames' sig_shape (8, 8)")

	w8 := testWeights(1, 8, 8)
	h = startLiveC(t, "merlin://"+addr, "passive=true", w8, 8, 8)
	_, st, msg = liveTextC(t, stemdot_go_live_warnings, h)
	if st != statusOK { // the run may have ended already
		assert.Equal(t, errInvalidArgument, st, msg)
		assert.Contains(t, msg, "has not ended")
	}
	_, st, msg = wait(h, make([]float64, 16))
	assert.Equal(t, errDType, st, msg)
	assert.Contains(t, msg, "not the run's result dtype, STEMDOT_FLOAT32")
	_, st, msg = wait(h, make([]float32, 15))
	assert.Equal(t, errShape, st, msg)
	assert.Contains(t, msg, "out holds 15 values, but the result of nav_shape (4, 4) × 1 masks has 16")
	_, st, msg = wait(h, make([]float32, 16))
	assert.Equal(t, statusOK, st, msg)
	for _, timeout := range []float64{-1, math.NaN(), math.Inf(1), 3601} {
		_, st, msg = poll(h, timeout, nil)
		assert.Equal(t, errInvalidArgument, st, msg)
		assert.Contains(t, msg, "timeout")
	}
	st, msg = callC(stemdot_go_live_poll, h, 0.0, nil, nil, 7, 0)
	assert.Equal(t, errInvalidArgument, st, msg)
	st, msg = callC(stemdot_go_live_missing, h, nil, 4, unsafe.Pointer(&h))
	assert.Equal(t, errInvalidArgument, st, msg)
	_, st, msg = poll(s.dsHandle(t), 0, nil)
	assert.Equal(t, errBadHandle, st, msg)
	assert.Contains(t, msg, "is a dataset handle, not a live handle")
}

// dsHandle registers the scan's dataset as a handle (freed at the end of the test).
func (s *liveScan) dsHandle(t *testing.T) uint64 {
	h := handles.add(kindDataset, s.ds)
	t.Cleanup(func() { handles.remove(h, kindDataset, nil) })
	return h
}
