package dectris

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// A shared stream (Options.Shared): a DECTRIS detector's ZeroMQ PUSH socket deals each
// message to the next connected PULL socket in turn, so with one receiver per node
// every node gets some of the frames, and the series' header and end message reach
// one receiver each. The receiver is a live.Sharer: the caller relays the header to
// the receivers that did not get it (GiveHeader) and the end (EndShared).

// share is a Receiver's state for a shared stream.
type share struct {
	connected atomic.Bool
	lastRecv  atomic.Int64 // when the socket last delivered a message (Unix ns)
	endSeen   atomic.Bool

	given     chan [][]byte // GiveHeader's header (nil: not shared)
	gave      atomic.Bool
	fromGiven bool          // the message handled is a given header (Start's goroutine)
	header    [][]byte      // the header message this receiver received (under Receiver.mu)
	endGiven  chan struct{} // closed by EndShared (nil: not shared)
	endOnce   sync.Once

	earlyUnits []earlyUnit // messages of the series that came before its header
	earlyBytes int
}

// earlyUnit is a message of series that came before the header: take hands it over
// once the header is known.
type earlyUnit struct {
	series uint64
	take   func(dst *[]live.Frame) error
}

// maxEarlyBytes bounds the messages kept before the header: beyond, Start stops reading
// the socket (the sender waits) until the header is given.
const maxEarlyBytes = 256 << 20

// sharedQuiet is how long the socket must have been quiet, after EndShared, before Next
// returns io.EOF: the frames sent before the series' end, which another receiver got,
// are on their way (or in this socket's buffers) when the end is given.
const sharedQuiet = 200 * time.Millisecond

// errSharedEnd is recv's error at the end of a shared series (EndShared).
var errSharedEnd = errors.New("dectris: the shared series ended")

var _ live.Sharer = (*Receiver)(nil)

// Connected implements live.Sharer: whether the stream's socket is connected.
func (r *Receiver) Connected() bool { return r.connected.Load() }

// HeaderMessage implements live.Sharer: the series' header message (stream v1: the
// dheader-1.0 message's parts; v2: the start message) as received, nil if it has not
// come to this receiver.
func (r *Receiver) HeaderMessage() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header
}

// GiveHeader implements live.Sharer.
func (r *Receiver) GiveHeader(msg [][]byte) error {
	if !r.opt.Shared {
		return errs.New(errs.Argument, "dectris: a header is given to a receiver of a shared stream only (option shared)")
	}
	if len(msg) == 0 {
		return errs.New(errs.Argument, "dectris: the header given is empty")
	}
	if r.gave.Swap(true) {
		return errs.New(errs.Argument, "dectris: a header was given to this receiver already")
	}
	r.given <- slices.Clone(msg)
	return nil
}

// EndSeen implements live.Sharer.
func (r *Receiver) EndSeen() bool { return r.endSeen.Load() }

// EndShared implements live.Sharer (nothing for a receiver of a stream not shared).
func (r *Receiver) EndShared() {
	if r.endGiven != nil {
		r.endOnce.Do(func() { close(r.endGiven) })
	}
}

// keepHeader keeps the parts of the header message received (not a given one).
func (r *Receiver) keepHeader(parts [][]byte) {
	if r.opt.Shared && !r.fromGiven {
		r.mu.Lock()
		r.header = slices.Clone(parts)
		r.mu.Unlock()
	}
}

// handleGiven takes a header handed in by GiveHeader as if it had come on the socket.
func (r *Receiver) handleGiven(parts [][]byte) error {
	r.fromGiven = true
	defer func() { r.fromGiven = false }()
	if r.opt.Protocol == V1 {
		return r.handleV1(parts, &r.pending)
	}
	return r.handleV2(parts, &r.pending)
}

// early keeps, in a shared stream, a message (parts) of series that came before the
// header, for take to hand over later; outside one such messages are dropped.
func (r *Receiver) early(series uint64, parts [][]byte, take func(dst *[]live.Frame) error) error {
	if r.opt.Shared {
		r.earlyUnits = append(r.earlyUnits, earlyUnit{series, take})
		for _, p := range parts {
			r.earlyBytes += len(p)
		}
	}
	return nil
}

// earlyV1 is early for the v1 message h, parts.
func (r *Receiver) earlyV1(h v1Head, parts [][]byte) error {
	parts = slices.Clone(parts) // a slice of r.single, which goes on
	return r.early(h.Series, parts, func(dst *[]live.Frame) error { return r.unitV1(h, parts, dst) })
}

// takeEarly hands the messages kept before the header over, once it has come: those of
// its series, in the order they came.
func (r *Receiver) takeEarly() error {
	units := r.earlyUnits
	r.earlyUnits, r.earlyBytes = nil, 0
	for _, u := range units {
		if u.series != r.series {
			continue
		}
		if err := u.take(&r.pending); err != nil {
			return err
		}
	}
	return nil
}

// recvStart is recv while Start waits for the header: a message of the socket (none
// while maxEarlyBytes of messages are kept) or a given header.
func (r *Receiver) recvStart(ctx context.Context) (message, error) {
	msgs := r.msgs
	if r.earlyBytes >= maxEarlyBytes {
		msgs = nil
	}
	select {
	case m := <-msgs:
		return m, m.err
	case parts := <-r.given:
		return message{parts: parts, given: true}, nil
	case <-ctx.Done():
		return message{}, ctx.Err()
	}
}

// recvQuiet is recv after EndShared: the messages the socket still delivers, then
// errSharedEnd once it has been quiet for sharedQuiet.
func (r *Receiver) recvQuiet(ctx context.Context) (message, error) {
	for {
		quiet := time.Since(time.Unix(0, r.lastRecv.Load()))
		if quiet >= sharedQuiet {
			select {
			case m := <-r.msgs:
				return m, m.err
			default:
				return message{}, errSharedEnd
			}
		}
		t := time.NewTimer(sharedQuiet - quiet)
		select {
		case m := <-r.msgs:
			t.Stop()
			return m, m.err
		case <-ctx.Done():
			t.Stop()
			return message{}, ctx.Err()
		case <-t.C:
		}
	}
}
