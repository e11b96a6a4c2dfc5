package main

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/live/dectris"
)

// shareStateC is stemdot_live_share_state's JSON of h.
func shareStateC(t *testing.T, h uint64) shareState {
	text, st, msg := liveTextC(t, stemdot_go_live_share_state, h)
	require.Equal(t, statusOK, st, msg)
	var s shareState
	require.NoError(t, json.Unmarshal([]byte(text), &s))
	return s
}

func shareGiveC(t *testing.T, h uint64, g shareGive) {
	b, err := json.Marshal(g)
	require.NoError(t, err)
	st, msg := callC(stemdot_go_live_share_give, h, cstr(string(b)))
	require.Equal(t, statusOK, st, msg)
}

// TestLiveShared: two shared runs on a DECTRIS replay's stream, driven through the C
// ABI as stemdot.dask.live drives them (the barrier, the header and the end passed on,
// the rows taken), give together stemdot_apply's result, each frame once.
func TestLiveShared(t *testing.T) {
	s := newLiveScan(t, []int{8, 32}, 64, 64)
	weights := testWeights(3, s.sy, s.sx)
	want := s.apply(t, weights, false)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ready := make(chan [2]string, 1)
	go dectris.Serve(ctx, dectris.ServeOptions{Stream: "127.0.0.1:0", API: "127.0.0.1:0", Rate: 4000,
		Ready: func(stream, api string) { ready <- [2]string{stream, api} }}, s.ds)
	addr := <-ready
	runs := []uint64{
		startLiveC(t, "dectris://"+addr[0], "passive=true;shared=true;nav_shape=8,32;every=0.01", weights, s.sy, s.sx),
		startLiveC(t, "dectris://"+addr[0], "passive=true;shared=true;nav_shape=8,32;every=0.01", weights, s.sy, s.sx),
	}
	require.Eventually(t, func() bool { return shareStateC(t, runs[0]).Connected && shareStateC(t, runs[1]).Connected },
		10*time.Second, 5*time.Millisecond)
	_, err := dectris.NewClient(addr[1]).Command(ctx, "arm")
	require.NoError(t, err)

	got := make([]float64, len(want))
	for i := range got {
		got[i] = math.NaN()
	}
	rows, idx := make([]float32, 16*3), make([]uint64, 16)
	final := make([]bool, len(runs))
	gave, ended := false, false
	deadline := time.Now().Add(30 * time.Second)
	for !final[0] || !final[1] {
		require.True(t, time.Now().Before(deadline), "the shared runs did not end")
		for i, h := range runs {
			if !gave {
				if hdr := shareStateC(t, h).Header; hdr != nil {
					shareGiveC(t, runs[1-i], shareGive{Header: hdr})
					gave = true
				}
			}
			if !ended && shareStateC(t, h).EndSeen {
				for _, o := range runs {
					shareGiveC(t, o, shareGive{End: true})
				}
				ended = true
			}
			var snap snapshot
			var n uint64
			st, msg := callC(stemdot_go_live_take, h, 0.01, unsafe.Pointer(&snap), unsafe.Pointer(&rows[0]), 7, 16,
				unsafe.Pointer(&idx[0]), unsafe.Pointer(&n))
			require.Equal(t, statusOK, st, msg)
			for r := range n {
				f := idx[r]
				require.True(t, math.IsNaN(got[f*3]), "frame %d taken twice", f)
				for m := range 3 {
					got[f*3+uint64(m)] = float64(rows[r*3+uint64(m)])
				}
			}
			final[i] = snap.Final == 1
		}
	}
	assert.Equal(t, want, got)

	// a run not shared has no share state, takes no rows
	a := testABI(t)
	st, msg := callC(stemdot_go_live_share_give, a.live, cstr(`{"end": true}`))
	assert.Equal(t, errInvalidArgument, st)
	assert.Contains(t, msg, "option shared=true")
	st, msg = callC(stemdot_go_live_share_give, runs[0], cstr(`{"header": 1}`))
	assert.Equal(t, errInvalidArgument, st, msg)
}
