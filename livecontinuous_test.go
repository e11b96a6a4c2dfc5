package stemdot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// fakeStream sends acquisition after acquisition (live.Continuer), each one of its
// fakeReceivers; after the last, Continue returns io.EOF.
type fakeStream struct {
	acqs []*fakeReceiver
	a    int
}

func (s *fakeStream) Start(ctx context.Context) (live.Header, error) { return s.acqs[0].h, nil }
func (s *fakeStream) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	return s.acqs[s.a].Next(ctx, dst)
}
func (s *fakeStream) Decode(dst []byte, f live.Frame) error { return s.acqs[s.a].Decode(dst, f) }
func (s *fakeStream) Release(f live.Frame)                  { s.acqs[s.a].Release(f) }
func (s *fakeStream) Stats() live.Stats                     { return live.Stats{} }
func (s *fakeStream) Close() error                          { return nil }
func (s *fakeStream) Continue(ctx context.Context) (live.Header, error) {
	if s.a+1 == len(s.acqs) {
		return live.Header{}, io.EOF
	}
	s.a++
	return s.acqs[s.a].h, nil
}

// randomFrames returns n random uint16 frames of sig pixels, from seed.
func randomFrames(n int, sig [2]int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 5))
	data := make([]byte, n*sig[0]*sig[1]*2)
	for i := 0; i < len(data); i += 2 {
		v := rng.IntN(4096)
		data[i], data[i+1] = byte(v), byte(v>>8)
	}
	return data
}

var contNav, contSig = []int{6, 7}, [2]int{16, 12}

// acquisition is a fake acquisition of the frames data, sent in order (the first
// frames of them, to an early end, with end).
func acquisition(data []byte, frames int, end error) *fakeReceiver {
	h := live.Header{Detector: "fake", SigShape: contSig, DType: dataset.Uint16, Frames: frames}
	n := len(data) / h.FrameBytes()
	if end != nil {
		n = n * 2 / 3
	}
	return &fakeReceiver{h: h, data: data, order: inOrderFrames(n), batch: 5, badFrame: -1, end: end}
}

// checkScan checks that a scan's result is Apply's of its frames.
func checkScan(t *testing.T, what string, lr *LiveResult, data []byte) {
	t.Helper()
	h := live.Header{SigShape: contSig, DType: dataset.Uint16}
	want := offline(t, data, h, contNav, liveSpecs, false)
	if lr.Partial || !slices.Equal(lr.NavShape, contNav) || !slices.Equal(lr.F32, want.F32) {
		t.Fatalf("%s: partial %v, nav %v: differs from Apply's", what, lr.Partial, lr.NavShape)
	}
}

// Acquisition after acquisition, each a scan: each complete scan's result is Apply's
// of its frames, handed to OnScan as it completes; one that ends early is dropped; the
// stream's end ends the run with the last complete scan.
func TestLiveContinuousRepeated(t *testing.T) {
	const n = 42
	var data [4][]byte
	for k := range data {
		data[k] = randomFrames(n, contSig, uint64(k))
	}
	ended := live.Ended("the connection closed")
	s := &fakeStream{acqs: []*fakeReceiver{acquisition(data[0], n, nil), acquisition(data[1], n, ended), acquisition(data[2], n, nil), acquisition(data[3], n, ended)}}
	var got []*LiveResult
	var finals []LiveSnapshot
	var scans []int
	lr, err := Live(context.Background(), s, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{Continuous: true, NavShape: contNav, Every: time.Millisecond,
		OnScan: func(lr *LiveResult) error { got = append(got, lr); return nil },
		Snapshot: func(s *LiveSnapshot) {
			if s.Final {
				finals = append(finals, *s)
			}
			if !s.Final {
				scans = append(scans, s.Scan)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d complete scans, want 2 (acquisitions 1 and 3)", len(got))
	}
	checkScan(t, "scan 1", got[0], data[0])
	checkScan(t, "scan 3", got[1], data[2])
	if c := got[1].Info.Live.Continuous; *c != (ContinuousInfo{Scan: 3, Complete: 2, Dropped: 1}) {
		t.Errorf("scan 3's place in the run: %+v", *c)
	}
	checkScan(t, "the run's result", lr, data[2])
	if lr.Stopped != io.EOF {
		t.Errorf("stopped by %v, not io.EOF", lr.Stopped)
	}
	if c := lr.Info.Live.Continuous; *c != (ContinuousInfo{Scan: 3, Complete: 2, Dropped: 2, Stopped: "the stream ended"}) {
		t.Errorf("the run's end: %+v", *c)
	}
	if w := lr.Warnings[len(lr.Warnings)-1]; !strings.Contains(w, "continuous run of 2 complete scans and 2 dropped; the result is scan 3, the last complete one; the stream ended") {
		t.Errorf("warning %q", w)
	}
	if len(finals) != 1 || finals[0].Scan != 3 || !slices.Equal(finals[0].F32, lr.F32) {
		t.Errorf("final snapshots %d, want one of scan 3", len(finals))
	}
	if !slices.IsSorted(scans) || scans[0] != 1 || scans[len(scans)-1] > 4 || !slices.Contains(scans, 3) {
		t.Errorf("snapshots of scans %v: want scans 1 to 4 in turn, scan 3's whole result among them", scans)
	}
}

// An unbounded acquisition is cut into scans of the nav shape's positions, frame i at
// position i mod n of scan i / n; its last scan, cut off by the stream's end, is
// dropped.
func TestLiveContinuousCut(t *testing.T) {
	const n = 42
	data := randomFrames(3*n+20, contSig, 9)
	acq := acquisition(data, 0, nil)
	acq.batch = 11 // batches across the scans' boundaries
	var got []*LiveResult
	lr, err := Live(context.Background(), &fakeStream{acqs: []*fakeReceiver{acq}}, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{Continuous: true, NavShape: contNav,
		OnScan: func(lr *LiveResult) error { got = append(got, lr); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d complete scans, want 3", len(got))
	}
	fb := contSig[0] * contSig[1] * 2
	for k, r := range got {
		checkScan(t, fmt.Sprint("scan ", k+1), r, data[k*n*fb:(k+1)*n*fb])
	}
	if c := lr.Info.Live.Continuous; *c != (ContinuousInfo{Scan: 3, Complete: 3, Dropped: 1, Stopped: "the stream ended"}) {
		t.Errorf("the run's end: %+v", *c)
	}
	if !slices.Contains(lr.Warnings, "the detector stream: the acquisition announces no frame count: its frames are cut into scans of 42 (frame i is position i mod 42 of scan i / 42)") {
		t.Errorf("no note of the cut in %q", lr.Warnings)
	}
}

// Cancelled while a scan is in progress: the result is the last complete scan, all of
// it; the one in progress is dropped, and the run says so. Cancelled before any scan
// was complete: errs.Cancelled, no result.
func TestLiveContinuousCancelled(t *testing.T) {
	const n = 42
	data := [2][]byte{randomFrames(n, contSig, 1), randomFrames(n, contSig, 2)}
	third := acquisition(data[1], n, nil)
	third.order = inOrderFrames(10)
	s := &fakeStream{acqs: []*fakeReceiver{acquisition(data[0], n, nil), acquisition(data[1], n, nil), third}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := &stallingStream{fakeStream: s}
	lr, err := Live(ctx, stream, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{Continuous: true, NavShape: contNav, Every: time.Millisecond,
		Snapshot: func(s *LiveSnapshot) {
			if s.Scan == 3 && s.Counts.Received == 10 {
				cancel()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan 2", lr, data[1])
	if !errors.Is(lr.Stopped, context.Canceled) {
		t.Errorf("stopped by %v, want context.Canceled", lr.Stopped)
	}
	want := ContinuousInfo{Scan: 2, Complete: 2, Dropped: 1, Stopped: "stopped (cancelled); scan 3, in progress (10 of 42 frames received), is dropped"}
	if c := lr.Info.Live.Continuous; *c != want {
		t.Errorf("the run's end: %+v, want %+v", *c, want)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	only := acquisition(data[0], n, nil)
	only.order = inOrderFrames(10)
	_, err = Live(ctx, &stallingStream{fakeStream: &fakeStream{acqs: []*fakeReceiver{only}}}, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{Continuous: true, NavShape: contNav})
	if !errors.Is(err, errs.Cancelled) || !strings.Contains(err.Error(), "stopped (cancelled) before a scan was complete: no result") {
		t.Errorf("cancelled before a complete scan: %v", err)
	}
}

// stallingStream's last acquisition sends its frames, then nothing more.
type stallingStream struct{ *fakeStream }

func (s *stallingStream) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	r := s.acqs[s.a]
	if s.a == len(s.acqs)-1 && r.sent == len(r.order) {
		<-ctx.Done()
		return dst, ctx.Err()
	}
	dst, err := r.Next(ctx, dst)
	if s.a == len(s.acqs)-1 {
		err = nil
	}
	return dst, err
}

// A stream whose frames change their shape ends the run with the last complete scan;
// a continuous run records nothing.
func TestLiveContinuousRefusals(t *testing.T) {
	const n = 42
	data := randomFrames(n, contSig, 3)
	other := acquisition(randomFrames(n, [2]int{12, 16}, 4), n, nil)
	other.h.SigShape = [2]int{12, 16}
	lr, err := Live(context.Background(), &fakeStream{acqs: []*fakeReceiver{acquisition(data, n, nil), other}}, specs(liveSpecs), Plan{GPUs: "0"},
		LiveOptions{Continuous: true, NavShape: contNav})
	if err != nil {
		t.Fatal(err)
	}
	checkScan(t, "scan 1", lr, data)
	if !errors.Is(lr.Stopped, errs.Shape) || !strings.Contains(lr.Info.Live.Continuous.Stopped, "the stream failed: live: the detector stream: scan 2's frames are 12×16 uint16, the run's 16×12 uint16: a continuous run keeps one frame shape") {
		t.Errorf("stopped by %v: %q", lr.Stopped, lr.Info.Live.Continuous.Stopped)
	}
	_, err = Live(context.Background(), &fakeStream{acqs: []*fakeReceiver{acquisition(data, n, nil)}}, specs(liveSpecs), Plan{GPUs: "0"},
		LiveOptions{Continuous: true, NavShape: contNav, Record: "x.mib"})
	if !errors.Is(err, errs.Argument) || !strings.Contains(err.Error(), "a continuous run records nothing") {
		t.Errorf("record in a continuous run: %v", err)
	}
}
