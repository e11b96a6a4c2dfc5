package merlin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stemdot/stemdot/dataset/mib"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// Options configure a Receiver.
type Options struct {
	// Addr is the data port's address, "host:port" (default "127.0.0.1:6342").
	Addr string
	// Control is the control port's address ("host:6341") for active mode, where the
	// receiver sets the acquisition up (Frames, Settings) and starts it
	// (CMD,STARTACQUISITION), and stops it on Close if it still runs. "" is passive
	// mode: the receiver only listens on the data port, for an acquisition started
	// by someone else.
	Control string
	// Frames is, in active mode, the number of frames to acquire
	// (SET,NUMFRAMESTOACQUIRE); 0 leaves the detector's setting.
	Frames int
	// Settings are further SET commands sent in active mode before the acquisition
	// starts, in order: {"COUNTERDEPTH", "12"}, {"TRIGGERSTART", "5"}, ...
	Settings [][2]string
	// SoftTrigger sends CMD,SOFTTRIGGER after CMD,STARTACQUISITION in active mode: the
	// trigger of an acquisition set up with TRIGGERSTART 5 (soft trigger).
	SoftTrigger bool
	// IdleTimeout ends the acquisition (an error wrapping live.ErrEnded) when no frame
	// has come for that long after Start; 0 waits as long as Next's context allows.
	// Start waits for the acquisition as long as its context allows.
	IdleTimeout time.Duration
	// DialTimeout bounds each connection and each control command (default 5 s).
	DialTimeout time.Duration
	// Buffers is the number of frames received but not yet released that the receiver
	// holds before it stops reading the socket (back-pressure, Stats.Stalls); default:
	// as many as live.DefaultBacklog bytes hold, at least 64, so that a consumer that
	// waits for a whole tile of frames (live.Scan's workers) gets them.
	Buffers int
}

// Receiver receives one acquisition from a Merlin detector (live.Receiver). A goroutine
// reads the data port into a fixed set of payload buffers and does nothing else; frames
// are decoded by Decode, on the caller's workers.
//
// The acquisition ends normally (Next's io.EOF) when the frame numbered as the
// acquisition header's Frames in Acquisition has come (what follows on the connection
// belongs to the next acquisition and is not read), or, when the header gives no frame
// count, when the detector closes the connection between frames or sends the next
// acquisition header. It ends early (an error wrapping live.ErrEnded) when the
// connection closes before the last frame, a new acquisition header comes before it (a
// stopped acquisition: LiberTEM-live issue #167), no frame comes for
// Options.IdleTimeout, or a frame is malformed: a message of another size, a frame
// header unlike the first frame's, no frame number, a number beyond the frame count, or
// one that came before. Frame numbers that skip count as Stats.Missing, and a frame that
// comes after a later one as Stats.Late (it was counted missing when the later one came:
// Missing − Late never came); neither ends the acquisition.
type Receiver struct {
	opt  Options
	data net.Conn
	ctrl *control // active mode

	layout *mib.Layout
	header live.Header
	acqHdr []byte // the acquisition header as received
	record int    // bytes of a frame message: frame header and pixels

	ready chan item   // frames (and the end) from the reader goroutine, in order
	free  chan []byte // released payload buffers
	stop  chan struct{}
	done  chan struct{}
	end   error // io.EOF or the error that ended the acquisition, once Next met it

	// The reader goroutine's state.
	in      wire
	first   []byte // the first frame, read by Start
	allocd  int    // payload buffers made so far
	next    int    // index after the highest frame received
	seen    []uint64
	running atomic.Bool // the acquisition has not ended yet (for Close's STOPACQUISITION)

	received, missing, late, stalls, bytes atomic.Int64

	closeOnce sync.Once
	closed    bool
}

// wire reads MPX messages from the data connection without copying them: a message is
// read straight into its buffer, whose capacity has room for the next message's prefix
// after it, and what came of that prefix is carried over to the next read. No read
// waits for more than the message it reads.
type wire struct {
	conn  net.Conn
	carry [prefixBytes]byte
	n     int // bytes in carry
}

// prefix reads a message's prefix into p: io.EOF when the connection closed before it.
func (w *wire) prefix(p *[prefixBytes]byte) error {
	k := copy(p[:], w.carry[:w.n])
	w.n = 0
	if k == prefixBytes {
		return nil
	}
	_, err := io.ReadFull(w.conn, p[k:])
	if err == io.EOF && k > 0 {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// body reads the len(msg) bytes of a message into msg, and what comes after it into
// msg's capacity beyond, up to a prefix, for the next prefix.
func (w *wire) body(msg []byte) error {
	n := len(msg)
	ext := msg[:min(cap(msg), n+prefixBytes)]
	got := 0
	for got < n {
		m, err := w.conn.Read(ext[got:])
		got += m
		if err != nil && got < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	w.n = copy(w.carry[:], ext[n:got])
	return nil
}

// item is a received frame, or the end of the acquisition (err: io.EOF or the error).
type item struct {
	f   live.Frame
	err error
}

var _ live.Receiver = (*Receiver)(nil)

// New returns a Receiver with options opt; Start connects it.
func New(opt Options) *Receiver {
	if opt.Addr == "" {
		opt.Addr = fmt.Sprintf("127.0.0.1:%d", DataPort)
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 5 * time.Second
	}
	return &Receiver{opt: opt}
}

// AcquisitionHeader returns the acquisition header as the detector sent it (the text
// of a .hdr sidecar), after Start; the Recorder writes it beside the frames.
func (r *Receiver) AcquisitionHeader() []byte { return r.acqHdr }

// Start connects to the data port (and in active mode to the control port, sets the
// acquisition up and starts it), and waits for the acquisition header and the first
// frame, whose header gives the frame's shape and dtype. Frame messages that come
// before the acquisition header (the tail of an acquisition that was running when the
// receiver connected) are skipped, with a note. Errors name the address and the fault:
// a connection refused (errs.IO), a malformed header or frame (errs.Format), a control
// command the detector refused (errs.Argument), an acquisition that ended before its
// first frame (errs.IO, wrapping live.ErrEnded).
func (r *Receiver) Start(ctx context.Context) (live.Header, error) {
	if r.data != nil {
		return live.Header{}, errs.New(errs.Argument, "merlin: %s: Start called twice", r.opt.Addr)
	}
	d := net.Dialer{Timeout: r.opt.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", r.opt.Addr)
	if err != nil {
		return live.Header{}, r.startError(ctx, errs.Wrap(errs.IO, fmt.Errorf("merlin: cannot connect to the data port %s: %w", r.opt.Addr, err)))
	}
	r.data = conn
	r.in.conn = conn
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	// Reads end when ctx does: closing the connection unblocks them.
	stopWatch := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stopWatch()
	if r.opt.Control != "" {
		if r.ctrl, err = dialControl(ctx, r.opt.Control, r.opt.DialTimeout); err != nil {
			return live.Header{}, r.startError(ctx, err)
		}
		if err := r.arm(ctx); err != nil {
			return live.Header{}, r.startError(ctx, err)
		}
	}
	h, err := r.readStart()
	if err != nil {
		return live.Header{}, r.startError(ctx, err)
	}
	if !stopWatch() {
		return live.Header{}, r.startError(ctx, ctx.Err())
	}
	conn.SetReadDeadline(time.Time{})
	r.header = h
	if r.opt.Buffers <= 0 {
		r.opt.Buffers = max(64, live.DefaultBacklog/max(r.record, 1))
	}
	r.ready = make(chan item, r.opt.Buffers+1)
	r.free = make(chan []byte, r.opt.Buffers)
	r.allocd = 1 // the first frame's
	if h.Frames > 0 {
		r.seen = make([]uint64, (h.Frames+63)/64)
	}
	r.running.Store(true)
	go r.read()
	return h, nil
}

// startError closes what Start opened and returns err, or ctx's error when ctx ended.
func (r *Receiver) startError(ctx context.Context, err error) error {
	if r.ctrl != nil {
		r.ctrl.close()
		r.ctrl = nil
	}
	if r.data != nil {
		r.data.Close()
	}
	if ctx.Err() != nil {
		return errs.Wrap(errs.Cancelled, fmt.Errorf("merlin: %s: waiting for the acquisition: %w", r.opt.Addr, ctx.Err()))
	}
	return err
}

// arm sends the active mode's commands: the settings, the number of frames,
// STARTACQUISITION and SOFTTRIGGER.
func (r *Receiver) arm(ctx context.Context) error {
	for _, s := range r.opt.Settings {
		if _, err := r.ctrl.do(ctx, "SET", s[0], s[1]); err != nil {
			return err
		}
	}
	if r.opt.Frames > 0 {
		if _, err := r.ctrl.do(ctx, "SET", "NUMFRAMESTOACQUIRE", fmt.Sprint(r.opt.Frames)); err != nil {
			return err
		}
	}
	if _, err := r.ctrl.do(ctx, "CMD", "STARTACQUISITION", ""); err != nil {
		return err
	}
	if r.opt.SoftTrigger {
		if _, err := r.ctrl.do(ctx, "CMD", "SOFTTRIGGER", ""); err != nil {
			return err
		}
	}
	return nil
}

// readPrefix reads a message's prefix and returns the size of the message after it.
func (r *Receiver) readPrefix() (int, error) {
	var p [prefixBytes]byte
	if err := r.in.prefix(&p); err != nil {
		return 0, err
	}
	r.bytes.Add(prefixBytes)
	n, err := parsePrefix(p[:])
	if err != nil {
		return 0, errs.Wrap(errs.Format, err)
	}
	return n, nil
}

// readStart reads the acquisition header and the first frame, and returns what they
// say.
func (r *Receiver) readStart() (live.Header, error) {
	h := live.Header{Detector: "merlin"}
	skipped := 0
	var msg []byte
	for {
		n, err := r.readPrefix()
		if err != nil {
			return h, r.streamError(err, "waiting for the acquisition header")
		}
		if n <= len("MQ1,") {
			return h, errs.New(errs.Format, "merlin: %s: a %d-byte MPX message where the acquisition header should come", r.opt.Addr, n)
		}
		if cap(msg) < n+prefixBytes {
			msg = make([]byte, n, n+prefixBytes)
		}
		msg = msg[:n]
		if err := r.in.body(msg); err != nil {
			return h, r.streamError(err, "reading the acquisition header")
		}
		r.bytes.Add(int64(n))
		if bytes.HasPrefix(msg, []byte("MQ1,")) {
			skipped++
			continue
		}
		if !bytes.HasPrefix(msg, []byte("HDR,")) {
			return h, errs.New(errs.Format, "merlin: %s: the data port sent a message starting %s where the acquisition header (\"HDR,\") should come", r.opt.Addr, quoteShort(msg))
		}
		r.acqHdr = msg
		break
	}
	if skipped > 0 {
		h.Notes = append(h.Notes, fmt.Sprintf("%d frames of an earlier acquisition came before the acquisition header and were skipped", skipped))
	}
	hdr, err := mib.ParseHdr(r.acqHdr, "the acquisition header")
	if err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}
	nav, _, err := hdr.NavShape()
	if err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}
	h.NavShape = nav
	if h.Frames, _, err = hdr.Number(hdrFrames); err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}

	// The first frame gives the frame's layout.
	n, err := r.readPrefix()
	if err != nil {
		return h, r.streamError(err, "waiting for the first frame")
	}
	msg = make([]byte, n, n+prefixBytes) // a payload buffer, as buffer's
	if err := r.in.body(msg); err != nil {
		return h, r.streamError(err, "reading the first frame")
	}
	r.bytes.Add(int64(n))
	if bytes.HasPrefix(msg, []byte("HDR,")) {
		return h, r.endErr(errs.IO, "a new acquisition header came before the first frame: the acquisition was stopped")
	}
	if r.layout, err = mib.ParseLayout(msg); err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: first frame: %w", r.opt.Addr, err))
	}
	if n < r.layout.HeaderBytes {
		return h, errs.New(errs.Format, "merlin: %s: the first frame's message has %d bytes, less than its %d-byte frame header", r.opt.Addr, n, r.layout.HeaderBytes)
	}
	if err := r.layout.FitPixelBytes(n - r.layout.HeaderBytes); err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: first frame: %w", r.opt.Addr, err))
	}
	r.record = n
	r.first = msg
	h.SigShape, h.DType = r.layout.Sig, r.layout.DType
	h.Detector = "merlin (" + r.layout.String() + ")"
	if h.Frames > 0 && len(h.NavShape) > 0 && product(h.NavShape) != h.Frames {
		h.Notes = append(h.Notes, fmt.Sprintf("the acquisition header gives a scan of %d positions (%v) and %d frames", product(h.NavShape), h.NavShape, h.Frames))
	}
	return h, nil
}

// streamError describes a failed read while doing what: the stream closed, a
// malformed message, the context or idle timeout.
func (r *Receiver) streamError(err error, doing string) error {
	switch {
	case errs.KindOf(err) == errs.Format:
		return fmt.Errorf("merlin: %s: %s: %w", r.opt.Addr, doing, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errs.New(errs.IO, "merlin: %s: the data connection closed %s", r.opt.Addr, doing)
	}
	return errs.Wrap(errs.IO, fmt.Errorf("merlin: %s: %s: %w", r.opt.Addr, doing, err))
}

// read is the goroutine that reads the data port: frame messages into payload buffers,
// handed to Next in order through r.ready, until the acquisition ends.
func (r *Receiver) read() {
	defer close(r.done)
	err := r.readFrames()
	r.running.Store(err != io.EOF)
	if err != io.EOF && r.header.Frames > r.next {
		r.missing.Add(int64(r.header.Frames - r.next))
	}
	r.send(item{err: err})
}

// readFrames reads frames until the last one (io.EOF) or the end of the acquisition.
func (r *Receiver) readFrames() error {
	if err := r.frame(r.first); err != nil {
		return err
	}
	r.first = nil
	for !r.complete() {
		buf, err := r.buffer()
		if err != nil {
			return err
		}
		if r.opt.IdleTimeout > 0 {
			r.data.SetReadDeadline(time.Now().Add(r.opt.IdleTimeout))
		}
		n, err := r.readPrefix()
		if err != nil {
			return r.ended(err, "")
		}
		if n != r.record {
			// A new acquisition header, or a frame of another size.
			msg := buf[:min(n, len(buf))]
			if err := r.in.body(msg); err != nil {
				return r.ended(err, " inside a message")
			}
			if bytes.HasPrefix(msg, []byte("HDR,")) {
				return r.newAcquisition()
			}
			return r.endErr(errs.Format, "after frame %d came a %d-byte message starting %s; the acquisition's frame messages have %d bytes",
				r.next, n, quoteShort(msg), r.record)
		}
		if err := r.in.body(buf); err != nil {
			return r.ended(err, fmt.Sprintf(" inside frame %d", r.next+1))
		}
		r.bytes.Add(int64(n))
		if bytes.HasPrefix(buf, []byte("HDR,")) {
			return r.newAcquisition()
		}
		if err := r.frame(buf); err != nil {
			return err
		}
	}
	return io.EOF
}

// complete tells whether the acquisition's last frame has come.
func (r *Receiver) complete() bool { return r.header.Frames > 0 && r.next >= r.header.Frames }

// buffer returns a free payload buffer of r.record bytes, waiting for one to be
// released when all are in use.
func (r *Receiver) buffer() ([]byte, error) {
	select {
	case b := <-r.free:
		return b[:r.record], nil
	default:
	}
	if r.allocd < r.opt.Buffers {
		r.allocd++
		return make([]byte, r.record, r.record+prefixBytes), nil
	}
	r.stalls.Add(1)
	select {
	case b := <-r.free:
		return b[:r.record], nil
	case <-r.stop:
		return nil, errs.New(errs.Cancelled, "merlin: %s: the receiver was closed", r.opt.Addr)
	}
}

// frame checks the frame message msg (r.record bytes) and hands it over.
func (r *Receiver) frame(msg []byte) error {
	num := frameNumber(msg)
	at := r.next // the frame's index for messages
	if num > 0 {
		at = num - 1
	}
	if err := r.layout.Check(msg[:r.layout.HeaderBytes], at); err != nil {
		return r.endErr(errs.Format, "%v", err)
	}
	if num == 0 {
		return r.endErr(errs.Format, "the frame after frame %d has no frame number: its header starts %s", r.next, quoteShort(msg))
	}
	i := num - 1
	if r.header.Frames > 0 && i >= r.header.Frames {
		return r.endErr(errs.Format, "frame number %d is beyond the %d frames the acquisition header announced", num, r.header.Frames)
	}
	word, bit := i/64, uint64(1)<<(i%64)
	if word >= len(r.seen) {
		r.seen = append(r.seen, make([]uint64, max(word+1, 2*len(r.seen))-len(r.seen))...)
	}
	switch {
	case r.seen[word]&bit != 0:
		return r.endErr(errs.Format, "frame %d came twice", num)
	case i < r.next:
		r.late.Add(1)
	case i > r.next:
		r.missing.Add(int64(i - r.next))
	}
	r.seen[word] |= bit
	r.next = max(r.next, i+1)
	r.received.Add(1)
	return r.send(item{f: live.Frame{Index: i, Payload: msg}})
}

// send hands it to Next, unless the receiver is closed.
func (r *Receiver) send(it item) error {
	select {
	case r.ready <- it:
		return nil
	case <-r.stop:
		return errs.New(errs.Cancelled, "merlin: %s: the receiver was closed", r.opt.Addr)
	}
}

// endErr is the error of an acquisition that ended early: kind, wrapping
// live.ErrEnded, naming the data port.
func (r *Receiver) endErr(kind errs.Kind, format string, args ...any) error {
	return errs.Wrap(kind, fmt.Errorf("merlin: %s: %w", r.opt.Addr, live.Ended(format, args...)))
}

// newAcquisition ends the acquisition at a new acquisition header: normally when the
// header gave no frame count, else the acquisition was stopped before its last frame.
func (r *Receiver) newAcquisition() error {
	if r.header.Frames == 0 {
		return io.EOF
	}
	return r.endErr(errs.IO, "a new acquisition header came after frame %d of %d: the acquisition was stopped",
		r.next, r.header.Frames)
}

// ended is the end of the acquisition at a failed read: the connection closed (between
// messages, or where inside a message), the idle timeout, or Close.
func (r *Receiver) ended(err error, where string) error {
	select {
	case <-r.stop:
		return errs.New(errs.Cancelled, "merlin: %s: the receiver was closed", r.opt.Addr)
	default:
	}
	of := ""
	if r.header.Frames > 0 {
		of = fmt.Sprintf(" of %d", r.header.Frames)
	}
	switch {
	case errs.KindOf(err) == errs.Format:
		return r.endErr(errs.Format, "after frame %d%s: %v", r.next, of, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return r.endErr(errs.IO, "no frame for %v after frame %d%s (option IdleTimeout): the acquisition was stopped or the detector stalled",
			r.opt.IdleTimeout, r.next, of)
	case errors.Is(err, io.EOF) && where == "" && r.header.Frames == 0:
		return io.EOF // an acquisition of unknown length ends when the detector closes
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return r.endErr(errs.IO, "the data connection closed%s after frame %d%s", where, r.next, of)
	}
	return r.endErr(errs.IO, "after frame %d%s: %v", r.next, of, err)
}

// Next waits until at least one frame has arrived and appends the frames that have
// arrived to dst, in the order they came (acquisition order; a late frame, Stats.Late,
// after the later ones). After the last frame it returns io.EOF; an acquisition that
// ended early returns an error wrapping live.ErrEnded, after the frames before it.
func (r *Receiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	switch {
	case r.closed:
		return dst, errs.New(errs.Argument, "merlin: %s: Next after Close", r.opt.Addr)
	case r.ready == nil:
		return dst, errs.New(errs.Argument, "merlin: %s: Next before Start", r.opt.Addr)
	}
	if r.end != nil {
		return dst, r.end
	}
	n0 := len(dst)
	var it item
	select {
	case it = <-r.ready:
	case <-ctx.Done():
		return dst, ctx.Err()
	}
	for {
		if it.err != nil {
			r.end = it.err
			break
		}
		dst = append(dst, it.f)
		select {
		case it = <-r.ready:
			continue
		default:
		}
		return dst, nil
	}
	if len(dst) > n0 {
		return dst, nil // the frames first; the end on the next call
	}
	return dst, r.end
}

// Decode decodes frame f into dst (Header.FrameBytes() bytes): its pixels in
// Header.DType, host byte order, rows as dataset/mib reads them from a file.
func (r *Receiver) Decode(dst []byte, f live.Frame) error {
	if len(f.Payload) != r.record || len(dst) != r.header.FrameBytes() {
		return errs.New(errs.Shape, "merlin: frame %d: payload of %d bytes and %d-byte destination; want %d and %d",
			f.Index, len(f.Payload), len(dst), r.record, r.header.FrameBytes())
	}
	r.layout.Decode(dst, f.Payload[r.layout.HeaderBytes:])
	return nil
}

// Release hands f's payload back for the next frames.
func (r *Receiver) Release(f live.Frame) {
	if cap(f.Payload) >= r.record+prefixBytes {
		select {
		case r.free <- f.Payload[:cap(f.Payload)]:
		default:
		}
	}
}

// Stats returns the counts so far.
func (r *Receiver) Stats() live.Stats {
	return live.Stats{
		Received: int(r.received.Load()),
		Bytes:    r.bytes.Load(),
		Missing:  int(r.missing.Load()),
		Late:     int(r.late.Load()),
		Stalls:   int(r.stalls.Load()),
	}
}

// Close stops the acquisition in active mode if it still runs (CMD,STOPACQUISITION),
// disconnects and waits for the reading goroutine to end.
func (r *Receiver) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.closed = true
		if r.data == nil {
			return
		}
		if r.ctrl != nil {
			if r.running.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), r.opt.DialTimeout)
				_, err = r.ctrl.do(ctx, "CMD", "STOPACQUISITION", "")
				cancel()
			}
			r.ctrl.close()
		}
		if r.stop != nil {
			close(r.stop)
		}
		r.data.Close()
		if r.ready != nil {
			<-r.done
		}
	})
	return err
}

func product(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}
