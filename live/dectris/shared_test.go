package dectris

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// TestSharedEarly: frames that come to a shared receiver before the header (which went
// to another receiver) are kept until the header is given, those of another series
// dropped; after EndShared, Next hands over what is left and ends with io.EOF.
func TestSharedEarly(t *testing.T) {
	s := newSender(t, Options{Shared: true})
	started := make(chan error, 1)
	go func() { _, err := s.r.Start(s.ctx); started <- err }()
	require.NoError(t, s.push.WaitPeers(s.ctx, 1))
	s.send(v1Image(1, 2, "<", testFrame(2)), v1Image(7, 0, "<", testFrame(9)), v1Image(1, 0, "<", testFrame(0)))
	time.Sleep(100 * time.Millisecond) // the images are taken before the header is given
	require.Nil(t, s.r.HeaderMessage())
	require.NoError(t, s.r.GiveHeader(v1Header(1, 4, "basic")))
	require.ErrorIs(t, s.r.GiveHeader(v1Header(1, 4, "basic")), errs.Argument)
	require.NoError(t, <-started)
	assert.Nil(t, s.r.HeaderMessage(), "a given header is not this receiver's")
	s.send(v1Image(1, 3, "<", testFrame(3)))
	s.r.EndShared()
	t0 := time.Now()
	idx, got, err := s.drain()
	require.ErrorIs(t, err, io.EOF)
	assert.GreaterOrEqual(t, time.Since(t0), sharedQuiet/2)
	assert.Equal(t, []int{2, 0, 3}, idx)
	assert.Equal(t, testFrame(3), got[3])
	assert.Equal(t, testFrame(0), got[0])
	assert.False(t, s.r.EndSeen())
}

// TestSharedReplay: three shared receivers on the replay's round-robin stream (v1 and
// v2), armed once all are connected: the header relayed from the one that got it (with
// its pixel mask), the end from the one that got the end message; every frame comes to
// exactly one receiver, decoded as the offline reader reads it (the flagged pixels 0).
func TestSharedReplay(t *testing.T) {
	const n, side = 300, 16
	rng := rand.New(rand.NewPCG(34, 5))
	data := make([]byte, n*side*side*2)
	for i := 0; i < len(data); i += 2 {
		binary.LittleEndian.PutUint16(data[i:], uint16(rng.IntN(4000)))
	}
	ds, err := dataset.FromMemory(data, []int{n}, [2]int{side, side}, dataset.Uint16)
	require.NoError(t, err)
	mask := make([]uint32, side*side)
	mask[3], mask[side*side-1] = 1, 4
	fb := side * side * 2
	for _, p := range []Protocol{V1, V2} {
		t.Run(p.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream, api, _ := serveAsync(t, ctx, ServeOptions{Protocol: p, API: "127.0.0.1:0", PixelMask: mask, Rate: 5000}, ds)
			rcvs := make([]*Receiver, 3)
			got := make([]map[int][]byte, len(rcvs))
			errc := make([]error, len(rcvs))
			var wg sync.WaitGroup
			for i := range rcvs {
				r, err := New(Options{Stream: stream, Protocol: p, Shared: true})
				require.NoError(t, err)
				t.Cleanup(func() { r.Close() })
				rcvs[i] = r
				wg.Go(func() { _, got[i], errc[i] = receiveAll(t, ctx, r) })
			}
			require.Eventually(t, func() bool {
				return rcvs[0].Connected() && rcvs[1].Connected() && rcvs[2].Connected()
			}, 10*time.Second, 5*time.Millisecond)
			c := NewClient(api)
			require.NoError(t, c.SetConfig(ctx, "detector", "ntrigger", n))
			_, err := c.Command(ctx, "arm")
			require.NoError(t, err)
			var header [][]byte
			require.Eventually(t, func() bool {
				for _, r := range rcvs {
					if header = r.HeaderMessage(); header != nil {
						return true
					}
				}
				return false
			}, 10*time.Second, 5*time.Millisecond)
			for _, r := range rcvs {
				if r.HeaderMessage() == nil {
					require.NoError(t, r.GiveHeader(header))
				}
			}
			require.Eventually(t, func() bool {
				return rcvs[0].EndSeen() || rcvs[1].EndSeen() || rcvs[2].EndSeen()
			}, 20*time.Second, 5*time.Millisecond)
			for _, r := range rcvs {
				r.EndShared()
			}
			wg.Wait()
			seen := map[int]bool{}
			for i := range rcvs {
				require.ErrorIs(t, errc[i], io.EOF)
				assert.NotEmpty(t, got[i], "receiver %d got no frame", i)
				for f, b := range got[i] {
					require.False(t, seen[f], "frame %d came twice", f)
					seen[f] = true
					want := append([]byte(nil), data[f*fb:(f+1)*fb]...)
					clear(want[3*2 : 4*2])
					clear(want[fb-2:])
					require.Equal(t, want, b, "frame %d", f)
				}
				assert.Equal(t, live.Stats{Received: len(got[i]), Bytes: rcvs[i].Stats().Bytes}, rcvs[i].Stats())
			}
			assert.Len(t, seen, n)
		})
	}
}

// TestSharedRefused: a shared stream is armed by the caller, not by a receiver; a header
// is given to a shared receiver only.
func TestSharedRefused(t *testing.T) {
	_, err := New(Options{Stream: "127.0.0.1:1", Shared: true, Active: true, API: "127.0.0.1:2"})
	require.ErrorIs(t, err, errs.Argument)
	assert.ErrorContains(t, err, "passive mode")
	r, err := New(Options{Stream: "127.0.0.1:1"})
	require.NoError(t, err)
	require.ErrorIs(t, r.GiveHeader([][]byte{[]byte("{}")}), errs.Argument)
	r.EndShared() // nothing for a stream not shared
}
