package dectris

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/live"
)

// serveAsync starts Serve on loopback and returns the stream and API addresses and a
// channel of Serve's result.
func serveAsync(t *testing.T, ctx context.Context, opt ServeOptions, ds dataset.Dataset) (stream, api string, done chan error) {
	t.Helper()
	if opt.Stream == "" {
		opt.Stream = "127.0.0.1:0"
	}
	ready := make(chan [2]string, 1)
	opt.Ready = func(s, a string) { ready <- [2]string{s, a} }
	done = make(chan error, 1)
	go func() { done <- Serve(ctx, opt, ds) }()
	select {
	case a := <-ready:
		return a[0], a[1], done
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not listen within 10 s")
	}
	return
}

// receiveAll runs a receiver to the end of its series and returns its header, the
// decoded frames by index, and Next's last error (io.EOF at a whole series).
func receiveAll(t *testing.T, ctx context.Context, r *Receiver) (live.Header, map[int][]byte, error) {
	t.Helper()
	h, err := r.Start(ctx)
	if err != nil {
		return h, nil, err
	}
	got := map[int][]byte{}
	var frames []live.Frame
	for {
		frames, err = r.Next(ctx, frames[:0])
		for _, f := range frames {
			buf := make([]byte, h.FrameBytes())
			require.NoError(t, r.Decode(buf, f))
			got[f.Index] = buf
			r.Release(f)
		}
		if err != nil {
			return h, got, err
		}
	}
}

func openData(t *testing.T, rel string, opt dataset.Options) dataset.Dataset {
	t.Helper()
	ds, err := dataset.Open(testfiles.File(t, rel), opt)
	require.NoError(t, err)
	t.Cleanup(func() { ds.Close() })
	return ds
}

// TestReplayRealFiles replays real files (the DECTRIS ARINA master, uint32 bslz4; a
// Merlin MIB of uint16, one of uint8) through the replay server, in stream v1 and v2,
// passive (no API) and active (configure, arm, disarm through the API), and checks
// every frame the receiver decodes against the offline reader's, bit for bit.
func TestReplayRealFiles(t *testing.T) {
	for _, c := range []struct {
		file string
		opt  dataset.Options
	}{
		{"arina/test_00_master.h5", dataset.Options{}},
		{"mib/002_merlin_test_roi_sig256x128_nav4x2_hot_pixel_52x_39y.mib", dataset.Options{}},
		{"mib/001_4x2_6bit.mib", dataset.Options{}},
	} {
		ds := openData(t, c.file, c.opt)
		want := make([]byte, ds.NumFrames()*ds.FrameBytes())
		require.NoError(t, ds.ReadFrames(0, ds.NumFrames(), want))
		for _, p := range []Protocol{V1, V2} {
			for _, active := range []bool{false, true} {
				t.Run(c.file+"/"+p.String()+map[bool]string{false: "/passive", true: "/active"}[active], func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					so := ServeOptions{Protocol: p}
					if active {
						so.API = "127.0.0.1:0"
					}
					stream, api, done := serveAsync(t, ctx, so, ds)
					r, err := New(Options{Stream: stream, Protocol: p, API: api, Active: active})
					require.NoError(t, err)
					defer r.Close()
					h, got, err := receiveAll(t, ctx, r)
					require.ErrorIs(t, err, io.EOF)
					require.Equal(t, ds.NumFrames(), h.Frames)
					require.Equal(t, ds.SigShape(), h.SigShape)
					require.Equal(t, ds.DType(), h.DType)
					require.Len(t, got, ds.NumFrames())
					fb := ds.FrameBytes()
					for i := range ds.NumFrames() {
						require.Equal(t, want[i*fb:(i+1)*fb], got[i], "frame %d", i)
					}
					st := r.Stats()
					require.Equal(t, ds.NumFrames(), st.Received)
					require.Zero(t, st.Missing)
					require.NoError(t, r.Close())
					if !active {
						require.NoError(t, <-done)
					}
				})
			}
		}
	}
}

var _ = errors.Is

// A series longer than the dataset sends its frames repeated (frame i is frame i mod
// n), in stream v1 and v2; a second series sends the blobs kept from the first.
func TestReplayRepeats(t *testing.T) {
	ds := openData(t, "mib/001_4x2_6bit.mib", dataset.Options{})
	n, fb := ds.NumFrames(), ds.FrameBytes()
	want := make([]byte, n*fb)
	require.NoError(t, ds.ReadFrames(0, n, want))
	const frames = 21
	for _, p := range []Protocol{V1, V2} {
		t.Run(p.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream, api, _ := serveAsync(t, ctx, ServeOptions{Protocol: p, API: "127.0.0.1:0"}, ds)
			for series := range 2 {
				r, err := New(Options{Stream: stream, Protocol: p, API: api, Active: true, NImages: 1, NTrigger: frames, TriggerMode: "exte"})
				require.NoError(t, err)
				h, got, err := receiveAll(t, ctx, r)
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, frames, h.Frames)
				require.Len(t, got, frames)
				for i := range frames {
					require.Equal(t, want[i%n*fb:(i%n+1)*fb], got[i], "series %d, frame %d", series, i)
				}
				require.NoError(t, r.Close())
			}
		})
	}
}

// Stream v1's dimage-1.0 part gives the MD5 of the image's data blob as "hash" (DECTRIS
// stream v1 documentation; LiberTEM-live refuses an empty one), in the first series and
// from the blobs kept for the next.
func TestReplayV1Hash(t *testing.T) {
	ds := openData(t, "mib/001_4x2_6bit.mib", dataset.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, api, _ := serveAsync(t, ctx, ServeOptions{Protocol: V1, API: "127.0.0.1:0"}, ds)
	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	require.NoError(t, pull.Dial("tcp://"+stream))
	c := NewClient(api)
	images := 0
	for range 2 {
		_, err := c.Command(ctx, "arm")
		require.NoError(t, err)
		for {
			m, err := pull.Recv()
			require.NoError(t, err)
			var d struct{ HType, Hash string }
			require.NoError(t, json.Unmarshal(m.Frames[0], &d))
			if d.HType == "dseries_end-1.0" {
				break
			}
			if d.HType != "dimage-1.0" {
				continue
			}
			require.Len(t, m.Frames, 4)
			sum := md5.Sum(m.Frames[2])
			require.Equal(t, hex.EncodeToString(sum[:]), d.Hash)
			images++
		}
	}
	require.Equal(t, 2*ds.NumFrames(), images)
}
