package merlin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stemdot/stemdot/errs"
)

// control is a connection to the control port.
type control struct {
	addr    string
	conn    net.Conn
	br      *bufio.Reader
	timeout time.Duration
}

// dialControl connects to the control port at addr.
func dialControl(ctx context.Context, addr string, timeout time.Duration) (*control, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("merlin: cannot connect to the control port %s: %w", addr, err))
	}
	return &control{addr: addr, conn: conn, br: bufio.NewReader(conn), timeout: timeout}, nil
}

func (c *control) close() { c.conn.Close() }

// codes are the meanings of the control port's answer codes.
var codes = map[string]string{"1": "the detector is busy", "2": "unrecognised command", "3": "parameter out of range"}

// do sends the command typ,name[,value] ("GET", "SET" or "CMD") and returns the value
// of a GET's answer. An answer code other than 0 is an error (errs.Argument) naming the
// command and the code.
func (c *control) do(ctx context.Context, typ, name, value string) (string, error) {
	cmd := typ + "," + name
	if typ == "SET" {
		cmd += "," + value
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) (string, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", errs.Wrap(errs.IO, fmt.Errorf("merlin: control port %s: %s: %w", c.addr, cmd, err))
	}
	if _, err := c.conn.Write(append(appendPrefix(nil, len(cmd)), cmd...)); err != nil {
		return fail(err)
	}
	answer, err := readAnswer(c.br)
	if err != nil {
		return fail(err)
	}
	fields := strings.Split(string(answer), ",")
	want := 3
	if typ == "GET" {
		want = 4
	}
	if len(fields) != want || !strings.EqualFold(fields[0], typ) || !strings.EqualFold(fields[1], name) {
		return "", errs.New(errs.Format, "merlin: control port %s: %s: the answer %q is not %s,%s,...,CODE", c.addr, cmd, answer, typ, name)
	}
	if code := fields[len(fields)-1]; code != "0" {
		why := codes[code]
		if why == "" {
			why = "unknown code"
		}
		return "", errs.New(errs.Argument, "merlin: control port %s: %s: the detector answered code %q (%s)", c.addr, cmd, code, why)
	}
	if typ == "GET" {
		return fields[2], nil
	}
	return "", nil
}

// readAnswer reads one message from the control port. Merlin's length counts the
// comma before the message; LiberTEM-live's simulator counts one byte less, so an
// answer that would end with a comma (its code missing) is read one byte further.
func readAnswer(br *bufio.Reader) ([]byte, error) {
	msg, err := readCommand(br)
	if err != nil {
		return nil, err
	}
	if bytes.HasSuffix(msg, []byte(",")) {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		msg = append(msg, b)
	}
	return msg, nil
}

// controlServer answers the control port for Serve: GET and SET of any parameter (GET
// of one never set answers code 2), CMD,STARTACQUISITION and CMD,STOPACQUISITION
// (passed to the acquisition loop), CMD,SOFTTRIGGER, RESET and ABORT (accepted).
type controlServer struct {
	mu     sync.Mutex
	params map[string]string
	cmds   chan<- acqCommand
}

// acqCommand is a command for the acquisition loop: start (with the frames to
// acquire, 0 for all) or stop.
type acqCommand struct {
	start  bool
	frames int
}

// serve answers the commands of one control connection until it closes or ctx ends.
func (s *controlServer) serve(ctx context.Context, conn net.Conn) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	br := bufio.NewReader(conn)
	for {
		msg, err := readCommand(br)
		if errors.Is(err, io.EOF) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		answer := s.answer(ctx, string(msg))
		if _, err := conn.Write(append(appendPrefix(nil, len(answer)), answer...)); err != nil {
			return nil
		}
	}
}

// readCommand reads one control message (length counting the comma before it): a
// command, or the answer readAnswer completes.
func readCommand(br *bufio.Reader) ([]byte, error) {
	var p [prefixBytes]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return nil, err
	}
	n, err := parsePrefix(p[:])
	if err != nil {
		return nil, err
	}
	if n > 1<<16 {
		return nil, fmt.Errorf("a control message of %d bytes", n)
	}
	msg := make([]byte, n)
	_, err = io.ReadFull(br, msg)
	return msg, err
}

// answer carries out a command and returns the answer's text.
func (s *controlServer) answer(ctx context.Context, cmd string) string {
	f := strings.Split(strings.TrimRight(cmd, "\r\n"), ",")
	typ := strings.ToUpper(f[0])
	if len(f) < 2 {
		return cmd + ",2"
	}
	name := strings.ToUpper(f[1])
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case typ == "GET":
		v, ok := s.params[name]
		if !ok {
			return "GET," + f[1] + ",0,2"
		}
		return "GET," + f[1] + "," + v + ",0"
	case typ == "SET" && len(f) == 3:
		s.params[name] = f[2]
		return "SET," + f[1] + ",0"
	case typ == "CMD" && (name == "STARTACQUISITION" || name == "STOPACQUISITION"):
		c := acqCommand{start: name == "STARTACQUISITION"}
		c.frames, _ = strconv.Atoi(s.params["NUMFRAMESTOACQUIRE"])
		select {
		case s.cmds <- c:
		case <-ctx.Done():
		}
		return "CMD," + f[1] + ",0"
	case typ == "CMD" && (name == "SOFTTRIGGER" || name == "RESET" || name == "ABORT"):
		return "CMD," + f[1] + ",0"
	}
	return typ + "," + f[1] + ",2"
}
