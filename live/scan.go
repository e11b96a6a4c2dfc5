package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Scan is the dataset of one acquisition while its frames arrive: scan position p is
// frame p of the acquisition (Frame.Index). ReadFrames waits until the frames asked for
// have arrived, decodes them (Receiver.Decode, on the caller's goroutine: the engine's
// workers) and hands their payloads back to the receiver unless they are kept (Keep).
// A frame that never arrives before the acquisition ends reads as a blank (all-zero)
// frame and is counted as missing (Missing), so that a run over the scan ends with the
// frames received; the caller labels the positions without a frame.
//
// Feed runs the receiver: it moves frames from Receiver.Next into the scan until the
// acquisition ends. It holds at most MaxBacklog bytes of payloads that no worker has
// decoded yet; beyond, it stops reading the stream (the sender waits: TCP and ZeroMQ
// push back) and counts a stall, so that a slow consumer never loses a frame.
type Scan struct {
	h          Header
	source     string
	nav        []int
	n          int
	frameBytes int
	rcv        Receiver

	// MaxBacklog bounds the payload bytes received and not yet decoded (default
	// DefaultBacklog); set before Feed.
	MaxBacklog int64
	// AnyOrder accepts frames in any order (several sockets sharing one stream): a frame
	// is missing only if it has not come when the acquisition ends. By default frames
	// come in order, and a frame skipped (a later one came first) is missing at once, so
	// that the workers waiting for it go on; if it comes after all, it is late and
	// dropped. Set before Feed.
	AnyOrder bool
	// Arrival makes the scan's positions arrival slots, for a receiver that gets only
	// some of the acquisition's frames (a stream shared by several receivers, which
	// deals its frames out in turn): the k-th frame taken is at position k whatever its
	// index (Indices gives them), so that a run over the scan computes the frames as
	// they come instead of waiting at a position whose frame went to another receiver.
	// The acquisition ending with fewer frames than the scan is no early end (Feed
	// returns nil), and no frame is counted missing: which frames never came is known
	// only where the receivers' results meet. A frame whose index came before is
	// repeated and dropped. Set before Feed.
	Arrival bool
	// Record, when set, gets every frame the scan takes, before the workers do (the
	// record of `stemdot live --record`); an error of its Write ends the acquisition
	// with that error. The caller closes it. Set before Feed.
	Record Recorder
	// Keep is the budget of payload bytes kept (copied) after decoding, so that the
	// frames received so far can be read again (a virtual detector changed mid-scan); 0
	// keeps none. Set before Feed.
	Keep int64

	mu          sync.Mutex
	arrival     sync.Cond // broadcast when frames arrive or the acquisition ends
	room        sync.Cond // signalled when the backlog shrinks
	idle        sync.Cond // broadcast when a decode ends
	readers     int       // decodes in progress
	slots       []Frame
	state       []slotState
	received    int   // frames arrived (surplus and repeated ones not included)
	backlog     int64 // payload bytes arrived and not decoded
	kept        int64 // payload bytes kept after decoding
	stalls      int
	surplus     int    // frames with an index outside the scan
	repeated    int    // frames whose index had arrived already
	late        int    // frames that came after a later one, when they were declared missing
	skipped     int    // frames declared missing when a later one came
	next        int    // one past the highest frame index that came
	indices     []int  // Arrival: the frame index at each position taken
	seen        []bool // Arrival: the frame indices taken
	ended       bool
	endErr      error // nil: every frame arrived (io.EOF from Next)
	closed      bool
	interrupted bool // Interrupt: reads stop waiting
}

// slotState is where one scan position's frame is.
type slotState uint8

const (
	pending  slotState = iota // not arrived
	arrived                   // arrived, payload held
	decoding                  // being decoded by the run
	decoded                   // decoded; a copy of its payload kept (Keep)
	released                  // decoded and its payload handed back
	missing                   // the acquisition ended without it
)

// DefaultBacklog is the default of Scan.MaxBacklog: 1 GiB of payloads.
const DefaultBacklog = 1 << 30

// NewScan returns the scan of the acquisition h announced by rcv, of nav shape nav (nil:
// h.NavShape, else (h.Frames,)). source names the detector's address in messages.
// Errors (errs.Shape, errs.Argument) name the shape that does not fit, and the option
// that fixes it.
func NewScan(rcv Receiver, h Header, nav []int, source string) (*Scan, error) {
	if len(nav) == 0 {
		nav = h.NavShape
	}
	if len(nav) == 0 {
		if h.Frames <= 0 {
			return nil, errs.New(errs.Argument, "live: %s: the stream gives neither the scan shape nor its number of frames: give option nav_shape", source)
		}
		nav = []int{h.Frames}
	}
	n, frameBytes, err := dataset.CheckShape(nav, h.SigShape, h.DType)
	if err != nil {
		return nil, fmt.Errorf("live: %s: %w", source, err)
	}
	if h.Frames > 0 && h.Frames != n {
		return nil, errs.New(errs.Shape, "live: %s: nav shape %s has %d positions, but the acquisition sends %d frames: give option nav_shape of %d positions",
			source, npy.ShapeString(nav), n, h.Frames, h.Frames)
	}
	s := &Scan{h: h, source: source, nav: slices.Clone(nav), n: n, frameBytes: frameBytes, rcv: rcv,
		MaxBacklog: DefaultBacklog, slots: make([]Frame, n), state: make([]slotState, n)}
	s.arrival.L = &s.mu
	s.room.L = &s.mu
	s.idle.L = &s.mu
	return s, nil
}

// Header is the acquisition's header.
func (s *Scan) Header() Header { return s.h }

// Feed moves the frames of the receiver into the scan until the acquisition ends, and
// returns nil when every frame of the scan arrived, else the receiver's error (one that
// wraps ErrEnded for an acquisition that ended early, ctx.Err() when cancelled). In
// every case the scan is ended: readers waiting for frames that did not come get blank
// frames, counted as missing.
func (s *Scan) Feed(ctx context.Context) (err error) {
	defer func() { s.end(err) }()
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.room.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	var batch []Frame
	for {
		s.mu.Lock()
		if s.backlog >= s.MaxBacklog && !s.closed {
			s.stalls++
			for s.backlog >= s.MaxBacklog && !s.closed && ctx.Err() == nil {
				s.room.Wait()
			}
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return errs.New(errs.Cancelled, "live: %s: the scan was closed while frames were arriving", s.source)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err = s.rcv.Next(ctx, batch[:0])
		if rerr := s.add(batch); rerr != nil {
			return rerr
		}
		if errors.Is(err, io.EOF) {
			if s.Received() < s.n && !s.Arrival {
				return Ended("the stream ended after %d of the scan's %d frames", s.Received(), s.n)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if s.Received() == s.n {
			return nil
		}
	}
}

// add files the frames that arrived, after recording them (Record).
func (s *Scan) add(frames []Frame) error {
	if len(frames) == 0 {
		return nil
	}
	var take, drop []Frame
	s.mu.Lock()
	for _, f := range frames {
		switch {
		case f.Index < 0 || f.Index >= s.n:
			s.surplus++
			drop = append(drop, f)
		case s.Arrival:
			if s.seen == nil {
				s.seen = make([]bool, s.n)
			}
			if s.seen[f.Index] {
				s.repeated++
				drop = append(drop, f)
				continue
			}
			s.seen[f.Index] = true
			take = append(take, f)
		case s.state[f.Index] == missing:
			s.late++
			drop = append(drop, f)
		case s.state[f.Index] != pending || slices.ContainsFunc(take, func(t Frame) bool { return t.Index == f.Index }):
			s.repeated++
			drop = append(drop, f)
		default:
			take = append(take, f)
		}
	}
	s.mu.Unlock()
	var err error
	if s.Record != nil { // before the workers see them: their payloads go back after decoding
		for _, f := range take {
			if err = s.Record.Write(f); err != nil {
				drop, take = append(drop, take...), nil
				break
			}
		}
	}
	s.mu.Lock()
	for _, f := range take {
		pos := f.Index
		switch {
		case s.Arrival:
			pos = s.received
			s.indices = append(s.indices, f.Index)
		case !s.AnyOrder:
			for i := s.next; i < f.Index; i++ {
				if s.state[i] == pending {
					s.state[i] = missing
					s.skipped++
				}
			}
		}
		s.next = max(s.next, f.Index+1)
		s.slots[pos] = f
		s.state[pos] = arrived
		s.received++
		s.backlog += int64(len(f.Payload))
	}
	s.arrival.Broadcast()
	s.mu.Unlock()
	for _, f := range drop {
		s.rcv.Release(f)
	}
	return err
}

// end marks the acquisition over: frames not arrived will not come.
func (s *Scan) end(err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.endErr = true, err
	}
	s.arrival.Broadcast()
	s.mu.Unlock()
}

// Received is the number of the scan's frames that have arrived.
func (s *Scan) Received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

// Ended says whether the acquisition is over, and with which error (nil: complete).
func (s *Scan) Ended() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended, s.endErr
}

// Counts are the scan's counts of frames, for progress and the result's sidecar.
type Counts struct {
	// Received: frames of the scan that arrived; Missing: positions whose frame did not
	// come before the acquisition ended, or was skipped (read as blank); Surplus: frames
	// with an index beyond the scan; Repeated: frames that arrived twice; Late: frames
	// that came after they were declared missing (dropped); Stalls: times the receiver
	// waited for the workers (back-pressure, no frame lost).
	Received, Missing, Surplus, Repeated, Late, Stalls int
}

// Counts returns the counts so far.
func (s *Scan) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Counts{Received: s.received, Missing: s.skipped, Surplus: s.surplus, Repeated: s.repeated, Late: s.late, Stalls: s.stalls}
	if s.ended && !s.Arrival {
		c.Missing = s.n - s.received
	}
	return c
}

// IndicesFrom returns, with Arrival, the frame index of each position from k taken so
// far (position k+i holds frame IndicesFrom(k)[i]); nil otherwise.
func (s *Scan) IndicesFrom(k int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k >= len(s.indices) {
		return nil
	}
	return slices.Clone(s.indices[k:])
}

// MissingPositions returns the scan positions (flat indices, ascending) whose frame did
// not arrive; before the acquisition ended, those not arrived yet.
func (s *Scan) MissingPositions() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []int
	for i, st := range s.state {
		if st == pending || st == missing {
			list = append(list, i)
		}
	}
	return list
}

// Format implements dataset.Dataset: "live".
func (s *Scan) Format() string { return "live" }

// Path implements dataset.Dataset: the detector's address.
func (s *Scan) Path() string { return s.source }

// NavShape implements dataset.Dataset.
func (s *Scan) NavShape() []int { return slices.Clone(s.nav) }

// SigShape implements dataset.Dataset.
func (s *Scan) SigShape() [2]int { return s.h.SigShape }

// DType implements dataset.Dataset.
func (s *Scan) DType() dataset.DType { return s.h.DType }

// NumFrames implements dataset.Dataset.
func (s *Scan) NumFrames() int { return s.n }

// FrameBytes implements dataset.Dataset.
func (s *Scan) FrameBytes() int { return s.frameBytes }

// Notes implements dataset.Noter: the receiver's notes.
func (s *Scan) Notes() []string { return slices.Clone(s.h.Notes) }

// ReadFrames implements dataset.Dataset: it waits for frames [start, end) to arrive or
// the acquisition to end, and decodes them into dst. A frame that did not arrive reads
// as blank.
func (s *Scan) ReadFrames(start, end int, dst []byte) error {
	if start < 0 || end > s.n || start > end {
		return errs.New(errs.Shape, "live: %s: frames [%d, %d) are outside the scan's %d frames", s.source, start, end, s.n)
	}
	if len(dst) < (end-start)*s.frameBytes {
		return errs.New(errs.Shape, "live: %s: a buffer of %d bytes cannot hold frames [%d, %d) of %d bytes each", s.source, len(dst), start, end, s.frameBytes)
	}
	for i := start; i < end; i++ {
		if err := s.readFrame(i, dst[(i-start)*s.frameBytes:(i-start+1)*s.frameBytes]); err != nil {
			return err
		}
	}
	return nil
}

// readFrame waits for frame i and decodes it into dst.
func (s *Scan) readFrame(i int, dst []byte) error {
	s.mu.Lock()
	for s.state[i] == pending && !s.ended && !s.closed && !s.interrupted {
		s.arrival.Wait()
	}
	if s.closed || s.interrupted && s.state[i] == pending {
		s.mu.Unlock()
		return errs.New(errs.Cancelled, "live: %s: frame %d: the run stopped while waiting for it", s.source, i)
	}
	st, f := s.state[i], s.slots[i]
	switch st {
	case pending, missing:
		s.state[i] = missing
		s.mu.Unlock()
		clear(dst)
		return nil
	case decoding, released:
		s.mu.Unlock()
		return errs.New(errs.Internal, "live: %s: frame %d is read twice in one run", s.source, i)
	case arrived:
		s.state[i] = decoding
	}
	s.readers++
	s.mu.Unlock()
	err := s.rcv.Decode(dst, f)
	var copied []byte // a kept frame's payload, copied: the receiver's buffer goes back
	if st == arrived && err == nil && s.keepRoom(len(f.Payload)) {
		copied = slices.Clone(f.Payload)
	}
	s.mu.Lock()
	s.readers--
	if st == arrived {
		size := int64(len(f.Payload))
		s.backlog -= size
		if copied != nil && s.kept+size <= s.Keep && !s.closed {
			s.kept += size
			s.state[i] = decoded
			s.slots[i].Payload = copied
		} else {
			s.state[i] = released
			s.slots[i] = Frame{}
		}
		s.room.Signal()
	}
	s.idle.Broadcast()
	s.mu.Unlock()
	if st == arrived {
		s.rcv.Release(f)
	}
	if err != nil {
		return fmt.Errorf("live: %s: frame %d: %w", s.source, i, err)
	}
	return nil
}

// Interrupt implements dataset.Waiter: reads waiting for frames, and later ones, return
// an errs.Cancelled error instead of waiting. Feed goes on.
func (s *Scan) Interrupt() {
	s.mu.Lock()
	s.interrupted = true
	s.arrival.Broadcast()
	s.mu.Unlock()
}

// Resume undoes Interrupt, for another run over the scan (a virtual detector changed
// mid-scan: stemdot view --live): its reads of frames kept (Keep) decode them again,
// and those of frames still to come wait for them. The caller resumes once the
// interrupted run has returned.
func (s *Scan) Resume() {
	s.mu.Lock()
	s.interrupted = false
	s.mu.Unlock()
}

// Decoded says whether frame i has been read (decoded by a run) and, if so, whether its
// payload is kept (Keep), so that it reads again; a frame read and not kept (Keep's
// budget spent) cannot be read again (an error). A frame not read yet, and one that
// never came (missing: it reads as blank), is not decoded; after Close, every frame that
// came is decoded and not kept. i is a scan position, 0 to NumFrames()-1.
func (s *Scan) Decoded(i int) (read, kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state[i]
	return st == decoded || st == released, st == decoded
}

// keepRoom says whether a payload of n bytes may still be kept (Keep).
func (s *Scan) keepRoom(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept+int64(n) <= s.Keep
}

// Close ends the scan: waiting readers and Feed return; payloads still held go back to
// the receiver. It does not close the receiver.
func (s *Scan) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.arrival.Broadcast()
	s.room.Broadcast()
	for s.readers > 0 {
		s.idle.Wait()
	}
	var held []Frame // the receiver's; a kept (decoded) frame's payload is the scan's copy
	for i, st := range s.state {
		if st == arrived {
			held = append(held, s.slots[i])
		}
		if st == arrived || st == decoded {
			s.slots[i] = Frame{}
			s.state[i] = released
		}
	}
	s.mu.Unlock()
	for _, f := range held {
		s.rcv.Release(f)
	}
	return nil
}
