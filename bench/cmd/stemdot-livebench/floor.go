package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/stemdot/stemdot/live/dectris"
)

// floorResult is what a floor receiver prints (one JSON line): the frames received and
// the seconds from the acquisition's header to its last frame.
type floorResult struct {
	Frames  int     `json:"frames"`
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
}

// floorMain runs a receiver that only reads the socket, as a process of its own (args:
// dectris|merlin and its flags), and prints a floorResult.
func floorMain(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("floor: want dectris or merlin")
	}
	fs := flag.NewFlagSet("floor "+args[0], flag.ContinueOnError)
	stream := fs.String("stream", "", "dectris: the ZeroMQ stream, host:port; merlin: the data port")
	control := fs.String("control", "", "dectris: the SIMPLON API, host:port; merlin: the control port")
	frames := fs.Int("frames", 0, "frames to acquire")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var r floorResult
	var err error
	switch args[0] {
	case "dectris":
		r, err = dectrisFloor(ctx, *stream, *control, *frames)
	case "merlin":
		r, err = merlinFloor(ctx, *stream, *control, *frames)
	default:
		err = fmt.Errorf("floor %q: want dectris or merlin", args[0])
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// dectrisFloor configures and arms the detector at api for a series of n frames (exte,
// as stemdot live does), receives its messages on a go-zeromq PULL socket through the
// receiver's own transport (tcpbuf: TCP read through a 256 KiB buffer) and only counts
// them: the header, n images, the end. It disarms after.
func dectrisFloor(ctx context.Context, stream, api string, n int) (floorResult, error) {
	c := dectris.NewClient(api)
	for _, s := range []struct {
		param string
		value any
	}{{"trigger_mode", "exte"}, {"nimages", 1}, {"ntrigger", n}} {
		if err := c.SetConfig(ctx, "detector", s.param, s.value); err != nil {
			return floorResult{}, err
		}
	}
	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	if err := pull.Dial("tcpbuf://" + stream); err != nil {
		return floorResult{}, err
	}
	if _, err := c.Command(ctx, "arm"); err != nil {
		return floorResult{}, err
	}
	defer c.Command(context.Background(), "disarm")
	var r floorResult
	var t0 time.Time
	for i := 0; i < n+2; i++ {
		m, err := pull.Recv()
		if err != nil {
			return r, fmt.Errorf("after %d messages: %w", i, err)
		}
		if i == 0 {
			t0 = time.Now()
			continue
		}
		for _, p := range m.Frames {
			r.Bytes += int64(len(p))
		}
	}
	r.Seconds, r.Frames = time.Since(t0).Seconds(), n
	return r, nil
}

// merlinFloor starts an acquisition of n frames on the control port, reads the
// acquisition header from the data port, then the n frame messages into one 1 MiB
// buffer, nothing else: a plain TCP reader.
func merlinFloor(ctx context.Context, data, control string, n int) (floorResult, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", data)
	if err != nil {
		return floorResult{}, err
	}
	defer conn.Close()
	ctl, err := d.DialContext(ctx, "tcp", control)
	if err != nil {
		return floorResult{}, err
	}
	defer ctl.Close()
	cr := bufio.NewReader(ctl)
	for _, cmd := range []string{"SET,NUMFRAMESTOACQUIRE," + strconv.Itoa(n), "CMD,STARTACQUISITION"} {
		if _, err := fmt.Fprintf(ctl, "MPX,%010d,%s", len(cmd)+1, cmd); err != nil {
			return floorResult{}, err
		}
		if _, err := readMPX(cr, nil); err != nil {
			return floorResult{}, fmt.Errorf("control port: %s: %w", cmd, err)
		}
	}
	buf := make([]byte, 1<<20)
	br := bufio.NewReaderSize(conn, 1<<10)      // only the header and the first prefix go through it
	if _, err := readMPX(br, buf); err != nil { // the acquisition header
		return floorResult{}, err
	}
	t0 := time.Now()
	var p [15]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return floorResult{}, err
	}
	size, err := strconv.Atoi(string(p[4:14]))
	if err != nil {
		return floorResult{}, fmt.Errorf("frame prefix %q", p)
	}
	left := int64(n)*int64(len(p)+size-1) - int64(len(p))
	r := floorResult{Frames: n, Bytes: left + int64(len(p))}
	for left > 0 {
		k, err := br.Read(buf[:min(left, int64(len(buf)))])
		if err != nil {
			return r, err
		}
		left -= int64(k)
	}
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

// readMPX reads one MPX message (its "MPX,<10 digits>," prefix counts the comma before
// the message) into buf, returning its bytes.
func readMPX(br *bufio.Reader, buf []byte) ([]byte, error) {
	var p [15]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return nil, err
	}
	size, err := strconv.Atoi(string(p[4:14]))
	if err != nil || size < 1 {
		return nil, fmt.Errorf("%q is not an MPX prefix", p)
	}
	if cap(buf) < size-1 {
		buf = make([]byte, size-1)
	}
	buf = buf[:size-1]
	_, err = io.ReadFull(br, buf)
	return buf, err
}
