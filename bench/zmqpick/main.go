//go:build zmqcgo

// Command zmqpick measures how fast a ZeroMQ PULL socket receives DECTRIS stream v1
// messages (4 parts: dimage-1.0, dimage_d-1.0, the bitshuffle-LZ4 blob of an ARINA-like
// uint16 frame, dconfig-1.0) over loopback, through the pure-Go github.com/go-zeromq/zmq4
// (-recv go) or through libzmq with cgo, github.com/pebbe/zmq4 (-recv cgo): receive only,
// no parsing. The sender is stemdot's own PUSH (internal/zmtp) in the same process for both, writing
// through a 256 KiB buffer. It prints the
// frames/s from the first message received to the last.
//
// Build: go build -tags zmqcgo ./bench/zmqpick (needs libzmq3-dev). Used to choose live/dectris's
// ZeroMQ library (issue #34): A/B pairs of -recv go against -recv cgo.
package main

import (
	"bufio"
	"context"
	"net"
	"strings"

	"encoding/binary"
	"flag"
	"fmt"
	"github.com/go-zeromq/zmq4/transport"
	"math/rand/v2"
	"os"
	"time"

	gozmq "github.com/go-zeromq/zmq4"
	czmq "github.com/pebbe/zmq4"

	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/zmtp"
)

// bufTransport is TCP whose connections read through a 256 KiB buffer.
type bufTransport struct{}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (bufTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return bufConn{c, bufio.NewReaderSize(c, 256<<10)}, nil
}
func (bufTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}
func (bufTransport) Addr(ep string) (string, error) { return strings.TrimPrefix(ep, "tcpbuf://"), nil }

func main() {
	gozmq.RegisterTransport("tcpbuf", bufTransport{})
	recv := flag.String("recv", "go", "receiver: go (go-zeromq/zmq4) or cgo (pebbe/zmq4 over libzmq)")
	side := flag.Int("side", 192, "frame side in pixels (uint16 frames side×side)")
	frames := flag.Int("frames", 100000, "frames to send")
	flag.Parse()
	if err := run(*recv, *side, *frames); err != nil {
		fmt.Fprintln(os.Stderr, "zmqpick:", err)
		os.Exit(1)
	}
}

// arinaLike is a uint16 frame of side×side pixels: a bright disc of about 200 counts
// a pixel in the centre, 1-3 counts on 5% of the other pixels.
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

func run(recv string, side, n int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	var blobs [][]byte
	for range 16 {
		blobs = append(blobs, h5filter.EncodeBSLZ4(nil, arinaLike(rng, side), 2))
	}
	push, err := zmtp.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer push.Close()
	ep := push.Endpoint()
	dimaged := fmt.Appendf(nil, `{"htype":"dimage_d-1.0","shape":[%d,%d],"type":"uint16","encoding":"bs16-lz4<","size":%d}`, side, side, len(blobs[0]))
	dconfig := []byte(`{"htype":"dconfig-1.0","start_time":1,"stop_time":2,"real_time":1}`)
	ctx := context.Background()
	go func() {
		var dimage []byte
		for i := range n {
			dimage = fmt.Appendf(dimage[:0], `{"htype":"dimage-1.0","series":1,"frame":%d,"hash":""}`, i)
			push.Send(ctx, dimage, dimaged, blobs[i%len(blobs)], dconfig)
		}
		push.Send(ctx, []byte(`{"htype":"dseries_end-1.0","series":1}`))
		push.Flush(ctx)
	}()
	var next func() ([][]byte, error)
	switch recv {
	case "go":
		pull := gozmq.NewPull(context.Background())
		defer pull.Close()
		if err := pull.Dial(ep); err != nil {
			return err
		}
		next = func() ([][]byte, error) { m, err := pull.Recv(); return m.Frames, err }
	case "gobuf":
		pull := gozmq.NewPull(context.Background())
		defer pull.Close()
		if err := pull.Dial(strings.Replace(ep, "tcp://", "tcpbuf://", 1)); err != nil {
			return err
		}
		next = func() ([][]byte, error) { m, err := pull.Recv(); return m.Frames, err }
	case "cgo":
		pull, err := czmq.NewSocket(czmq.PULL)
		if err != nil {
			return err
		}
		defer pull.Close()
		pull.SetRcvhwm(1000)
		if err := pull.Connect(ep); err != nil {
			return err
		}
		next = func() ([][]byte, error) { return pull.RecvMessageBytes(0) }
	default:
		return fmt.Errorf("-recv %q: go or cgo", recv)
	}
	var start time.Time
	got, bytes := 0, 0
	for {
		parts, err := next()
		if err != nil {
			return err
		}
		if got == 0 {
			start = time.Now()
		}
		if len(parts) == 1 {
			break
		}
		got++
		for _, p := range parts {
			bytes += len(p)
		}
	}
	s := time.Since(start).Seconds()
	fmt.Printf("%s %dx%d: %d frames (%.1f KiB each) in %.3f s: %.0f frames/s\n", recv, side, side, got, float64(bytes)/float64(got)/1024, s, float64(got-1)/s)
	return nil
}
