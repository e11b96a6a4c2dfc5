package stemdot

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/masks"
)

// fakeReceiver sends the frames of data (uint16, host order) in the order given by
// order, batch frames at a time, then ends with end (nil: io.EOF). Payloads are the
// frames' bytes; Decode copies them, failing for frame badFrame.
type fakeReceiver struct {
	h        live.Header
	data     []byte
	order    []int
	batch    int
	end      error
	stall    bool // never send anything after the header
	badFrame int
	pace     time.Duration

	mu       sync.Mutex
	sent     int
	released int
}

func (r *fakeReceiver) Start(ctx context.Context) (live.Header, error) { return r.h, nil }

func (r *fakeReceiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	if r.stall {
		<-ctx.Done()
		return dst, ctx.Err()
	}
	if r.pace > 0 {
		select {
		case <-time.After(r.pace):
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
	fb := r.h.FrameBytes()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := 0; k < r.batch && r.sent < len(r.order); k++ {
		i := r.order[r.sent]
		dst = append(dst, live.Frame{Index: i, Payload: slices.Clone(r.data[i*fb : (i+1)*fb])})
		r.sent++
	}
	if r.sent == len(r.order) {
		if r.end != nil {
			return dst, r.end
		}
		return dst, io.EOF
	}
	return dst, nil
}

func (r *fakeReceiver) Decode(dst []byte, f live.Frame) error {
	if f.Index == r.badFrame {
		return errs.New(errs.Format, "frame %d is malformed", f.Index)
	}
	copy(dst, f.Payload)
	return nil
}

func (r *fakeReceiver) Release(f live.Frame) {
	r.mu.Lock()
	r.released++
	r.mu.Unlock()
}

func (r *fakeReceiver) Stats() live.Stats { return live.Stats{} }
func (r *fakeReceiver) Close() error      { return nil }

// liveScan returns random uint16 frames of a (6, 7) scan of 16×12 pixels and the
// receiver header for them.
func liveScan(t *testing.T) ([]byte, live.Header, []int) {
	return randomScan([]int{6, 7}, [2]int{16, 12})
}

// randomScan returns random uint16 frames of a scan and the receiver header for them.
func randomScan(nav []int, sig [2]int) ([]byte, live.Header, []int) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := live.Header{Detector: "fake", SigShape: sig, DType: dataset.Uint16, Frames: product(nav)}
	data := make([]byte, h.Frames*h.FrameBytes())
	for i := 0; i < len(data); i += 2 {
		v := rng.IntN(4096)
		data[i], data[i+1] = byte(v), byte(v>>8)
	}
	return data, h, nav
}

func inOrderFrames(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

// offline is Apply's result of the same frames from memory.
func offline(t *testing.T, data []byte, h live.Header, nav []int, specs []string, f64 bool) *Result {
	ds, err := dataset.FromMemory(data, nav, h.SigShape, h.DType)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := Masks(h.SigShape, specs...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Apply(context.Background(), ds, stack, Plan{GPUs: "0"}, ApplyOptions{Float64: f64})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var liveSpecs = []string{"disk:6,8,4", "ring:6,8,3,7", "rect:0,0,5,16"}

// specs makes the stack of mask specs for the stream's sig shape.
func specs(list []string) func(live.Header) (*masks.Stack, error) {
	return func(h live.Header) (*masks.Stack, error) { return Masks(h.SigShape, list...) }
}

func TestLiveEqualsApply(t *testing.T) {
	data, h, nav := liveScan(t)
	for _, f64 := range []bool{false, true} {
		rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(42), batch: 5, badFrame: -1, pace: 5 * time.Millisecond} // 45 ms: snapshots every 2 ms come in between
		var snaps, finals int
		var last LiveSnapshot
		lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav, Float64: f64, Every: 2 * time.Millisecond,
			Snapshot: func(s *LiveSnapshot) {
				snaps++
				if s.Final {
					finals++
				}
				last = *s
			}})
		if err != nil {
			t.Fatal(err)
		}
		want := offline(t, data, h, nav, liveSpecs, f64)
		if lr.Partial || len(lr.Missing) > 0 || lr.EndErr != nil {
			t.Fatalf("complete acquisition reported partial: %+v", lr)
		}
		if !slices.Equal(lr.NavShape, nav) || !slices.Equal(lr.F32, want.F32) || !slices.Equal(lr.F64, want.F64) {
			t.Fatalf("float64 %v: live result differs from Apply's\nlive %v %v\nwant %v %v", f64, lr.F32, lr.F64, want.F32, want.F64)
		}
		if finals != 1 || !last.Final || last.Done != 42 || snaps < 2 {
			t.Errorf("snapshots: %d published, %d final, last done %d; want several, one final with 42 frames", snaps, finals, last.Done)
		}
		if rcv.released != 42 {
			t.Errorf("payloads released %d, want 42", rcv.released)
		}
	}
}

// TestLiveSnapshotsHoldDoneRows checks that every snapshot holds, for each frame, either
// NaN (not computed yet) or the final value. Frames of 128 KiB make tiles of 32 frames:
// the snapshots see the scan part-way.
func TestLiveSnapshotsHoldDoneRows(t *testing.T) {
	data, h, nav := randomScan([]int{6, 7}, [2]int{256, 256})
	want := offline(t, data, h, nav, liveSpecs, false)
	rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(42), batch: 3, badFrame: -1, pace: 2 * time.Millisecond}
	var partial int
	_, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav, Every: time.Millisecond,
		Snapshot: func(s *LiveSnapshot) {
			done := 0
			for f := range 42 {
				row := s.F32[f*3 : f*3+3]
				if math.IsNaN(float64(row[0])) {
					continue
				}
				done++
				if !slices.Equal(row, want.F32[f*3:f*3+3]) {
					t.Errorf("snapshot row %d is %v, want NaN or %v", f, row, want.F32[f*3:f*3+3])
				}
			}
			if done != s.Done {
				t.Errorf("snapshot says %d frames done, holds %d", s.Done, done)
			}
			if !s.Final && done > 0 && done < 42 {
				partial++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if partial == 0 {
		t.Error("no snapshot showed the scan part-way")
	}
}

func TestLiveEndedEarly(t *testing.T) {
	data, h, nav := liveScan(t)
	want := offline(t, data, h, nav, liveSpecs, false)
	rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(30), batch: 4, badFrame: -1,
		end: live.Ended("the connection was closed inside frame 30")}
	lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav})
	if err != nil {
		t.Fatal(err)
	}
	if !lr.Partial || !errors.Is(lr.EndErr, live.ErrEnded) || !slices.Equal(lr.Missing, inOrderFrames(42)[30:]) || lr.Counts.Missing != 12 {
		t.Fatalf("partial %v, end %v, missing %v (count %d); want positions 30-41 missing", lr.Partial, lr.EndErr, lr.Missing, lr.Counts.Missing)
	}
	for f := range 42 {
		row, w := lr.F32[f*3:f*3+3], want.F32[f*3:f*3+3]
		if f < 30 && !slices.Equal(row, w) || f >= 30 && !math.IsNaN(float64(row[0])) {
			t.Fatalf("frame %d: %v, want %v", f, row, map[bool]any{true: w, false: "NaN"}[f < 30])
		}
	}
	if w := lr.Warnings[len(lr.Warnings)-1]; !strings.Contains(w, "12 of 42 scan positions have no frame (NaN): 30-41") {
		t.Errorf("warning %q does not name the positions without a frame", w)
	}
}

func TestLiveSkippedAndLateFrames(t *testing.T) {
	data, h, nav := liveScan(t)
	want := offline(t, data, h, nav, liveSpecs, false)
	order := slices.Concat(inOrderFrames(10), []int{13, 11}, inOrderFrames(42)[14:], []int{12})
	rcv := &fakeReceiver{h: h, data: data, order: order, batch: 1, badFrame: -1}
	lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav})
	if err != nil {
		t.Fatal(err)
	}
	if !lr.Partial || !slices.Equal(lr.Missing, []int{10, 11, 12}) || lr.Counts.Late != 2 {
		t.Fatalf("missing %v, late %d; want 10, 11, 12 missing and 2 late (11 and 12 came after 13)", lr.Missing, lr.Counts.Late)
	}
	for _, f := range []int{9, 13, 41} {
		if !slices.Equal(lr.F32[f*3:f*3+3], want.F32[f*3:f*3+3]) {
			t.Errorf("frame %d differs", f)
		}
	}
}

// TestLiveStopsWithoutHanging: a cancelled run and a worker's failure while others
// wait for frames that never come both end the run.
func TestLiveStopsWithoutHanging(t *testing.T) {
	data, h, nav := liveScan(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Live(ctx, &fakeReceiver{h: h, data: data, stall: true, badFrame: -1}, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav})
	if !errors.Is(err, errs.Cancelled) {
		t.Errorf("stalled stream, cancelled: %v, want errs.Cancelled", err)
	}
	// frame 2 fails to decode; the stream then stalls after frame 5
	rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(6), batch: 6, badFrame: 2}
	done := make(chan error)
	go func() {
		_, err := Live(context.Background(), &stallAfter{rcv}, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errs.Format) || !strings.Contains(err.Error(), "frame 2") {
			t.Errorf("bad frame: %v, want the format error naming frame 2", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a run whose worker failed hangs waiting for frames")
	}
}

// stallAfter sends what its receiver sends, then waits forever.
type stallAfter struct{ *fakeReceiver }

func (s *stallAfter) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	if s.sent == len(s.order) {
		<-ctx.Done()
		return dst, ctx.Err()
	}
	dst, _ = s.fakeReceiver.Next(ctx, dst)
	return dst, nil
}

func TestLiveRefusesMismatches(t *testing.T) {
	data, h, _ := liveScan(t)
	_, err := Live(context.Background(), &fakeReceiver{h: h, data: data, badFrame: -1}, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: []int{5, 7}})
	if !errors.Is(err, errs.Shape) || !strings.Contains(err.Error(), "sends 42 frames") {
		t.Errorf("nav shape of 35 positions for 42 frames: %v", err)
	}
	other := func(live.Header) (*masks.Stack, error) { return Masks([2]int{8, 8}, "disk:4,4,2") }
	_, err = Live(context.Background(), &fakeReceiver{h: h, data: data, badFrame: -1}, other, Plan{GPUs: "0"}, LiveOptions{})
	if !errors.Is(err, errs.Shape) {
		t.Errorf("masks of another sig shape: %v", err)
	}
}

// gatedReceiver sends the frames of its receiver up to frame open (exclusive), then
// waits for gate to be closed before it sends the rest.
type gatedReceiver struct {
	*fakeReceiver
	open int
	gate chan struct{}
}

func (g *gatedReceiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	g.mu.Lock()
	wait := g.sent >= g.open
	g.mu.Unlock()
	if wait {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
	return g.fakeReceiver.Next(ctx, dst)
}

// TestApplyLiveAgain: a run over a scan that the test feeds, cancelled mid-scan, and a
// second run with other masks after live.Scan.Resume: the second reads the frames kept
// again and waits for the rest; its result is Apply's for its masks, bit for bit, and
// its snapshots' New ranges cover every frame once.
func TestApplyLiveAgain(t *testing.T) {
	data, h, nav := randomScan([]int{6, 7}, [2]int{256, 256}) // 128 KiB frames: tiles of 32
	rcv := &gatedReceiver{&fakeReceiver{h: h, data: data, order: inOrderFrames(42), batch: 5, badFrame: -1}, 35, make(chan struct{})}
	scan, err := live.NewScan(rcv, h, nav, "fake")
	if err != nil {
		t.Fatal(err)
	}
	defer scan.Close()
	scan.Keep = 1 << 30
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fed := make(chan error, 1)
	go func() { fed <- scan.Feed(ctx) }()
	pl, err := Plan{GPUs: "0"}.Planner()
	if err != nil {
		t.Fatal(err)
	}

	first := mustMasks(t, h, []string{"disk:100,100,30"})
	ctx1, stop1 := context.WithCancel(ctx)
	var done1 atomicInt
	ran := make(chan error, 1)
	go func() {
		_, err := pl.ApplyLive(ctx1, scan, first, LiveOptions{Every: time.Millisecond, Snapshot: func(s *LiveSnapshot) { done1.set(s.Done) }})
		ran <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for (scan.Received() < 35 || done1.get() == 0) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	stop1()
	if err := <-ran; !errors.Is(err, errs.Cancelled) {
		t.Fatalf("first run cancelled: %v, want errs.Cancelled", err)
	}
	done := done1.get()
	if done == 0 || done > 35 {
		t.Fatalf("first run: %d frames done, want some of the 35 sent before the rest was held back", done)
	}
	for i := range 42 {
		read, kept := scan.Decoded(i)
		if i < done && !(read && kept) || i >= 35 && read {
			t.Fatalf("frame %d: read %v, kept %v; want frames 0-%d read and kept, 35-41 not read", i, read, kept, done-1)
		}
	}

	scan.Resume()
	covered := make([]int, 42)
	go func() { time.Sleep(20 * time.Millisecond); close(rcv.gate) }()
	res, err := pl.ApplyLive(ctx, scan, mustMasks(t, h, liveSpecs), LiveOptions{Every: time.Millisecond, Snapshot: func(s *LiveSnapshot) {
		for _, r := range s.New {
			for f := r[0]; f < r[1]; f++ {
				covered[f]++
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-fed; err != nil {
		t.Fatalf("feed: %v", err)
	}
	want := offline(t, data, h, nav, liveSpecs, false)
	if !slices.Equal(res.F32, want.F32) {
		t.Fatalf("second run differs from Apply's:\n%v\n%v", res.F32, want.F32)
	}
	if !slices.Equal(covered, slices.Repeat([]int{1}, 42)) {
		t.Errorf("snapshots' New ranges cover the frames %v times, want each once", covered)
	}
}

func mustMasks(t *testing.T, h live.Header, list []string) *masks.Stack {
	stack, err := Masks(h.SigShape, list...)
	if err != nil {
		t.Fatal(err)
	}
	return stack
}

type atomicInt struct {
	mu sync.Mutex
	v  int
}

func (a *atomicInt) set(v int) { a.mu.Lock(); a.v = v; a.mu.Unlock() }
func (a *atomicInt) get() int  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }

// TestLiveTilesEqualApply: live runs with tiles of 2 to 8 frames (LiveOptions.TileFrames)
// give Apply's result bit for bit, for uint8, uint16 and float32 frames and stacks that
// take each family of kernels: one mask, 3 (padded to 4 for the pair kernel), com,
// sparse (CSR), 8 and 16 (packed); float64 too.
func TestLiveTilesEqualApply(t *testing.T) {
	stacks := [][]string{{"disk:14,11,6"}, liveSpecs, {"com"}, {"point:3,4", "point:20,9"},
		{"disk:14,11,6", "ring:14,11,3,9", "rect:0,0,5,16", "disk:3,3,2", "disk:20,20,5", "ring:10,12,2,6", "rect:4,4,20,10", "com"}}
	stacks = append(stacks, slices.Concat(stacks[4], stacks[4]))
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Float32} {
		data, h, nav := randomScan([]int{5, 9}, [2]int{24, 28})
		if dt != dataset.Uint16 { // the same values in another dtype
			px := len(data) / 2
			out := make([]byte, px*dt.Size())
			for i := range px {
				v := uint16(data[2*i]) | uint16(data[2*i+1])<<8
				switch dt {
				case dataset.Uint8:
					out[i] = byte(v)
				case dataset.Float32:
					binary.NativeEndian.PutUint32(out[4*i:], math.Float32bits(float32(v)/7))
				}
			}
			data, h.DType = out, dt
		}
		for _, list := range stacks {
			for _, f64 := range []bool{false, true} {
				want := offline(t, data, h, nav, list, f64)
				for _, tile := range []int{2, 3, 5, 8} {
					rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(45), batch: 7, badFrame: -1}
					lr, err := Live(context.Background(), rcv, specs(list), Plan{GPUs: "0"}, LiveOptions{NavShape: nav, Float64: f64, TileFrames: tile})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(lr.F32, want.F32) || !slices.Equal(lr.F64, want.F64) {
						t.Errorf("%v frames, %d masks %v, float64 %v, %d-frame tiles: differs from Apply's", dt, want.NMasks, list, f64, tile)
					}
				}
			}
		}
	}
}

// TestLiveSmallFramesFillIn: frames of a few hundred bytes make Apply's default tile
// hundreds of frames (4 MiB); a live run's is at most liveTileFrames, so that its
// snapshots fill in while a slow stream arrives instead of all at its end.
func TestLiveSmallFramesFillIn(t *testing.T) {
	data, h, nav := randomScan([]int{16, 40}, [2]int{16, 12}) // 640 frames of 384 bytes
	want := offline(t, data, h, nav, liveSpecs, false)
	rcv := &fakeReceiver{h: h, data: data, order: inOrderFrames(640), batch: 32, badFrame: -1, pace: 5 * time.Millisecond}
	var partWay int
	lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{CPUs: "1", GPUs: "0"}, LiveOptions{NavShape: nav,
		Every: 2 * time.Millisecond, Snapshot: func(s *LiveSnapshot) {
			if !s.Final && s.Done > 0 && s.Done < 640 {
				partWay++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lr.F32, want.F32) {
		t.Fatal("the live result differs from Apply's")
	}
	if partWay == 0 {
		t.Fatal("no snapshot showed the scan part-way: the frames were computed only at its end")
	}
}
