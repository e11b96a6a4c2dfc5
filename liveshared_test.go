package stemdot

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// shareOf is the frames of a scan of n that receiver r of k gets, dealt out in turn,
// each share in a shuffled order (frames of a shared stream come in any order).
func shareOf(n, r, k int, seed uint64) []int {
	var s []int
	for i := r; i < n; i += k {
		s = append(s, i)
	}
	rand.New(rand.NewPCG(seed, 1)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// TestLiveSharedEqualsApply: the shares of a stream computed by several shared runs,
// merged by frame index, are Apply's result bit for bit; every snapshot's rows are NaN or
// final, with their frame indices. Frames of 128 KiB make tiles of 32 frames, more than a
// share: the run stops once its own frames' rows are written.
func TestLiveSharedEqualsApply(t *testing.T) {
	for _, c := range []struct {
		sig [2]int
		f64 bool
	}{{[2]int{16, 12}, false}, {[2]int{16, 12}, true}, {[2]int{256, 256}, false}} {
		data, h, nav := randomScan([]int{6, 7}, c.sig)
		want := offline(t, data, h, nav, liveSpecs, c.f64)
		const k = 3
		merged := make([]float64, 42*3)
		for i := range merged {
			merged[i] = math.NaN()
		}
		for r := range k {
			rcv := &fakeReceiver{h: h, data: data, order: shareOf(42, r, k, uint64(r)), batch: 2, badFrame: -1, pace: 10 * time.Millisecond} // 70 ms a share: snapshots every 1 ms come in between
			var snaps int
			t0 := time.Now()
			lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav, Float64: c.f64, Shared: true,
				Every: time.Millisecond, Snapshot: func(s *LiveSnapshot) {
					snaps++
					done := 0
					for row := range 42 {
						v := s.Value(row, 0)
						if math.IsNaN(v) {
							continue
						}
						done++
						if row >= len(s.Indices) {
							t.Fatalf("snapshot row %d computed, but only %d indices", row, len(s.Indices))
						}
						for m := range 3 {
							if got, w := s.Value(row, m), want.Value(s.Indices[row], m); got != w {
								t.Fatalf("snapshot row %d (frame %d) mask %d: %v, want %v", row, s.Indices[row], m, got, w)
							}
						}
					}
					if done != s.Done {
						t.Errorf("snapshot says %d rows done, holds %d", s.Done, done)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(t0) > 5*time.Second {
				t.Errorf("a share of 14 frames took %v", time.Since(t0))
			}
			if lr.Partial || !slices.Equal(lr.NavShape, []int{14}) || !slices.Equal(lr.Indices, rcv.order) || snaps < 2 {
				t.Fatalf("share %d: partial %v, nav %v, indices %v (want %v), %d snapshots", r, lr.Partial, lr.NavShape, lr.Indices, rcv.order, snaps)
			}
			if lr.Info.Live.Received != 14 || lr.Info.Live.Missing != 0 || rcv.released != 14 {
				t.Errorf("share %d: live info %+v, released %d", r, lr.Info.Live, rcv.released)
			}
			for row, f := range lr.Indices {
				for m := range 3 {
					merged[f*3+m] = lr.Value(row, m)
				}
			}
		}
		for i := range merged {
			if w := want.Value(i/3, i%3); merged[i] != w {
				t.Fatalf("sig %v float64 %v: merged value %d is %v, want %v", c.sig, c.f64, i, merged[i], want.Value(i/3, i%3))
			}
		}
	}
}

// Value is the snapshot's value of row f, mask m, as float64.
func (s *LiveSnapshot) Value(f, m int) float64 {
	if s.F64 != nil {
		return s.F64[f*s.NMasks+m]
	}
	return float64(s.F32[f*s.NMasks+m])
}

// TestLiveSharedEnds: a share whose stream failed ends with its frames (Partial, no
// error); a frame that comes twice is dropped; options a shared run cannot take are
// refused.
func TestLiveSharedEnds(t *testing.T) {
	data, h, nav := liveScan(t)
	want := offline(t, data, h, nav, liveSpecs, false)
	order := shareOf(42, 0, 2, 7)[:10]
	order = append(order, order[3])
	rcv := &fakeReceiver{h: h, data: data, order: order, batch: 3, badFrame: -1, end: live.Ended("the connection was lost")}
	lr, err := Live(context.Background(), rcv, specs(liveSpecs), Plan{GPUs: "0"}, LiveOptions{NavShape: nav, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	if !lr.Partial || len(lr.Indices) != 10 || lr.Counts.Repeated != 1 || lr.Info.Live.EndedBy == "" {
		t.Fatalf("partial %v, indices %v, counts %+v, info %+v", lr.Partial, lr.Indices, lr.Counts, lr.Info.Live)
	}
	for row, f := range lr.Indices {
		if !slices.Equal(lr.F32[row*3:row*3+3], want.F32[f*3:f*3+3]) {
			t.Fatalf("row %d (frame %d): %v, want %v", row, f, lr.F32[row*3:row*3+3], want.F32[f*3:f*3+3])
		}
	}
	for _, opt := range []LiveOptions{{Shared: true, Record: "x.npy"}, {Shared: true, Continuous: true}, {Shared: true, Shifts: []float64{1, 1}}} {
		_, err := Live(context.Background(), &fakeReceiver{h: h, data: data}, specs(liveSpecs), Plan{GPUs: "0"}, opt)
		if !errors.Is(err, errs.Argument) {
			t.Errorf("%+v: %v, want an Argument error", opt, err)
		}
	}
}
