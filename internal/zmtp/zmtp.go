// Package zmtp is a ZeroMQ PUSH socket that binds a TCP address and sends to the PULL
// sockets that connect to it, each message to the next connection in turn (round robin,
// as libzmq's PUSH), over ZMTP 3.0 with the NULL mechanism (rfc.zeromq.org/spec/23,
// ZMTP; spec/37 for the framing). It is the sending side of stemdot's DECTRIS replay
// server and of its tests: github.com/go-zeromq/zmq4's PUSH, which live/dectris's
// receiver uses to receive, sends every message to every connection, not in turn.
//
// A message's frames are written to the connection's buffer and reach the socket when
// the buffer fills or at Flush; a receiver that does not read holds its connection's
// writes (TCP back-pressure), as a PUSH at its high-water mark blocks.
package zmtp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Push is a PUSH socket bound to a TCP address.
type Push struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*conn
	next  int
	added chan struct{} // closed and replaced when a connection is added
	done  chan struct{}
}

type conn struct {
	c    net.Conn
	mu   sync.Mutex // holds w
	w    *bufio.Writer
	dead chan struct{} // closed when the peer's side ends
	once sync.Once
	err  error
}

// Listen binds a PUSH socket to addr ("127.0.0.1:0" picks a free port).
func Listen(addr string) (*Push, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Push{ln: ln, added: make(chan struct{}), done: make(chan struct{})}
	go p.accept()
	return p, nil
}

// Addr is the bound address, e.g. "127.0.0.1:40123".
func (p *Push) Addr() string { return p.ln.Addr().String() }

// Endpoint is the ZeroMQ endpoint of the bound address, "tcp://HOST:PORT".
func (p *Push) Endpoint() string { return "tcp://" + p.Addr() }

func (p *Push) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			cn, err := handshake(c)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			select {
			case <-p.done:
				c.Close()
			default:
				p.conns = append(p.conns, cn)
				close(p.added)
				p.added = make(chan struct{})
			}
			p.mu.Unlock()
		}()
	}
}

// greeting is ZMTP 3.0's greeting with the NULL mechanism: signature, version 3.0,
// mechanism, as-server 0, filler.
func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xFF, 0x7F, 3
	copy(g[12:], "NULL")
	return g
}

// handshake exchanges greetings and READY commands with a connecting peer, which must
// be a PULL socket, and starts reading what the peer sends (nothing but commands) to
// see when it goes.
func handshake(c net.Conn) (*conn, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(greeting()); err != nil {
		return nil, err
	}
	var peer [64]byte
	if _, err := io.ReadFull(c, peer[:]); err != nil {
		return nil, err
	}
	if peer[0] != 0xFF || peer[9] != 0x7F || peer[10] < 3 {
		return nil, errors.New("zmtp: the peer is not a ZMTP 3 socket")
	}
	ready := []byte{5}
	ready = append(ready, "READY"...)
	ready = append(ready, 11)
	ready = append(ready, "Socket-Type"...)
	ready = binary.BigEndian.AppendUint32(ready, 4)
	ready = append(ready, "PUSH"...)
	if _, err := c.Write(append([]byte{0x04, byte(len(ready))}, ready...)); err != nil {
		return nil, err
	}
	flags, body, err := readFrame(c)
	if err != nil {
		return nil, err
	}
	if flags&0x04 == 0 || len(body) < 6 || string(body[1:6]) != "READY" {
		return nil, errors.New("zmtp: the peer sent no READY command")
	}
	c.SetDeadline(time.Time{})
	cn := &conn{c: c, w: bufio.NewWriterSize(c, 256<<10), dead: make(chan struct{})}
	go func() { // a PULL peer sends nothing but commands (heartbeats): read until it goes
		var err error
		for err == nil {
			_, _, err = readFrame(c)
		}
		cn.fail(fmt.Errorf("zmtp: the PULL peer %s went: %w", c.RemoteAddr(), err))
	}()
	return cn, nil
}

func (cn *conn) fail(err error) {
	cn.once.Do(func() { cn.err = err; close(cn.dead); cn.c.Close() })
}

// readFrame reads one ZMTP frame of at most 1 MiB.
func readFrame(r io.Reader) (flags byte, body []byte, err error) {
	var h [9]byte
	if _, err = io.ReadFull(r, h[:2]); err != nil {
		return 0, nil, err
	}
	flags, size := h[0], uint64(h[1])
	if flags&0x02 != 0 {
		if _, err = io.ReadFull(r, h[2:9]); err != nil {
			return 0, nil, err
		}
		size = binary.BigEndian.Uint64(h[1:9])
	}
	if size > 1<<20 {
		return 0, nil, fmt.Errorf("zmtp: a frame of %d bytes from the peer", size)
	}
	body = make([]byte, size)
	_, err = io.ReadFull(r, body)
	return flags, body, err
}

// Peers is the number of PULL sockets connected now.
func (p *Push) Peers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// WaitPeers waits until n PULL sockets are connected or ctx ends.
func (p *Push) WaitPeers(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		have, added := len(p.conns), p.added
		p.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return net.ErrClosed
		case <-added:
		}
	}
}

// Send writes a message of the parts given (a multipart message where there are
// several) to the next connection in turn, waiting for one where none is connected
// (until ctx ends). A connection whose peer went is dropped and the message goes to
// the next. Send and Flush may be called from several goroutines.
func (p *Push) Send(ctx context.Context, parts ...[]byte) error {
	defer p.unblockOn(ctx)()
	for {
		if err := p.WaitPeers(ctx, 1); err != nil {
			return err
		}
		p.mu.Lock()
		if len(p.conns) == 0 {
			p.mu.Unlock()
			continue
		}
		p.next %= len(p.conns)
		cn := p.conns[p.next]
		p.next++
		p.mu.Unlock()
		if err := cn.write(parts); err == nil {
			return nil
		}
		p.drop(cn)
	}
}

func (cn *conn) write(parts [][]byte) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	select {
	case <-cn.dead:
		return cn.err
	default:
	}
	var h [9]byte
	for i, b := range parts {
		var flags byte
		if i < len(parts)-1 {
			flags = 0x01 // more
		}
		n := 2
		if len(b) > 255 {
			h[0] = flags | 0x02 // long
			binary.BigEndian.PutUint64(h[1:], uint64(len(b)))
			n = 9
		} else {
			h[0], h[1] = flags, byte(len(b))
		}
		if _, err := cn.w.Write(h[:n]); err != nil {
			cn.fail(err)
			return err
		}
		if _, err := cn.w.Write(b); err != nil {
			cn.fail(err)
			return err
		}
	}
	return nil
}

func (p *Push) drop(cn *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.conns {
		if c == cn {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// unblockOn makes the writes under way fail when ctx ends; the function returned stops
// that.
func (p *Push) unblockOn(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, cn := range p.conns {
			cn.c.SetWriteDeadline(time.Unix(1, 0))
		}
	})
}

// Flush writes what the connections' buffers hold to their sockets, until ctx ends.
func (p *Push) Flush(ctx context.Context) error {
	defer p.unblockOn(ctx)()
	p.mu.Lock()
	conns := append([]*conn(nil), p.conns...)
	p.mu.Unlock()
	var first error
	for _, cn := range conns {
		cn.mu.Lock()
		err := cn.w.Flush()
		cn.mu.Unlock()
		if err != nil {
			cn.fail(err)
			p.drop(cn)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// Close closes the connections, dropping what they have not sent (Flush first), and
// the listener.
func (p *Push) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	for _, cn := range p.conns {
		cn.fail(net.ErrClosed)
	}
	p.conns = nil
	return p.ln.Close()
}
