package dectris

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/zmtp"
	"github.com/stemdot/stemdot/live"
)

// arinaLike is a uint16 frame of side×side pixels: a bright disc of 150-250 counts in
// the centre, 1-3 counts on 5% of the other pixels (bench/zmqpick's frames).
func arinaLike(rng *rand.Rand, side int) []byte {
	b := make([]byte, 2*side*side)
	for y := range side {
		for x := range side {
			dy, dx := y-side/2, x-side/2
			v := 0
			if dy*dy+dx*dx < side*side/80 {
				v = 150 + rng.IntN(100)
			} else if rng.IntN(20) == 0 {
				v = 1 + rng.IntN(3)
			}
			binary.LittleEndian.PutUint16(b[2*(y*side+x):], uint16(v))
		}
	}
	return b
}

// benchSender sends a stream v1 series of n ARINA-like bitshuffle-LZ4 frames to the
// first PULL socket that connects.
func benchSender(b *testing.B, side, n int) *zmtp.Push {
	push, err := zmtp.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var blobs [][]byte
	for range 16 {
		blobs = append(blobs, h5filter.EncodeBSLZ4(nil, arinaLike(rng, side), 2))
	}
	go func() {
		ctx := context.Background()
		push.WaitPeers(ctx, 1)
		push.Send(ctx, fmt.Appendf(nil, `{"htype":"dheader-1.0","series":1,"header_detail":"basic"}`),
			fmt.Appendf(nil, `{"x_pixels_in_detector":%d,"y_pixels_in_detector":%d,"bit_depth_image":16,"nimages":1,"ntrigger":%d,"trigger_mode":"exte"}`, side, side, n))
		dimaged := fmt.Appendf(nil, `{"htype":"dimage_d-1.0","shape":[%d,%d],"type":"uint16","encoding":"bs16-lz4<"}`, side, side)
		dconfig := []byte(`{"htype":"dconfig-1.0","start_time":1,"stop_time":2,"real_time":1}`)
		var dimage []byte
		for i := range n {
			dimage = fmt.Appendf(dimage[:0], `{"htype":"dimage-1.0","series":1,"frame":%d,"hash":""}`, i)
			if push.Send(ctx, dimage, dimaged, blobs[i%len(blobs)], dconfig) != nil {
				return
			}
		}
		push.Send(ctx, []byte(`{"htype":"dseries_end-1.0","series":1}`))
		push.Flush(ctx)
	}()
	return push
}

// BenchmarkReceiver: frames/s through Receiver.Next and Decode on two worker
// goroutines (ARINA-like uint16 frames, stream v1, bitshuffle-LZ4, loopback), and
// through a go-zeromq PULL socket that only receives the messages (socket-only): the
// receiver's figure as a ratio to the socket's is the cost of parsing and decoding.
func BenchmarkReceiver(b *testing.B) {
	for _, side := range []int{192, 96} {
		b.Run(fmt.Sprintf("%dx%d/socket-only", side, side), func(b *testing.B) {
			push := benchSender(b, side, b.N)
			defer push.Close()
			pull := zmq4.NewPull(context.Background())
			defer pull.Close()
			if err := pull.Dial("tcpbuf://" + push.Addr()); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < b.N+2; i++ {
				if _, err := pull.Recv(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "frames/s")
		})
		b.Run(fmt.Sprintf("%dx%d/receive+decode", side, side), func(b *testing.B) {
			push := benchSender(b, side, b.N)
			defer push.Close()
			r, err := New(Options{Stream: push.Addr(), Protocol: V1})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			ctx := context.Background()
			b.ResetTimer()
			t0 := time.Now()
			h, err := r.Start(ctx)
			if err != nil {
				b.Fatal(err)
			}
			work := make(chan []live.Frame, 64)
			var wg sync.WaitGroup
			var decodeErr error
			var once sync.Once
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, h.FrameBytes())
					for fs := range work {
						for _, f := range fs {
							if err := r.Decode(buf, f); err != nil {
								once.Do(func() { decodeErr = err })
							}
							r.Release(f)
						}
					}
				}()
			}
			for {
				fs, err := r.Next(ctx, nil)
				if len(fs) > 0 {
					work <- fs
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			close(work)
			wg.Wait()
			if decodeErr != nil {
				b.Fatal(decodeErr)
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "frames/s")
		})
	}
}
