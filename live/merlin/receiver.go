package merlin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
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

// Receiver receives acquisitions from a Merlin detector (live.Receiver, and
// live.Continuer for acquisition after acquisition). A goroutine reads the data port
// into a fixed set of payload buffers and does nothing else; frames are decoded by
// Decode, on the caller's workers.
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
//
// Continue takes the next acquisition from the same data connection: the acquisition
// header that ended the last one (a header without a frame count, or a stopped
// acquisition's), else the next that comes (in active mode after CMD,STARTACQUISITION
// again). Frames that come after a complete acquisition without a new header, numbered
// on beyond its frame count, are taken as the next acquisition of the same header:
// LiberTEM-live's Merlin simulator with --continuous sends its file's frames again so,
// numbered on, after the file's .hdr.
type Receiver struct {
	opt  Options
	data net.Conn
	ctrl *control // active mode

	layout *mib.Layout
	header live.Header
	acqHdr []byte // the acquisition header as received
	record int    // bytes of a frame message: frame header and pixels
	base   int    // the frame number before the acquisition's first (frames numbered on)

	ready   chan item   // frames (and the end) from the reader goroutine, in order
	free    chan []byte // released payload buffers
	bufSize int         // the size of the buffers in free
	nbuf    int         // the payload buffers at most
	stop    chan struct{}
	done    chan struct{}
	end     error // io.EOF or the error that ended the acquisition, once Next met it

	// The reader goroutine's state.
	in       wire
	first    []byte // the first frame, read by Start
	allocd   int    // payload buffers of bufSize made so far
	next     int    // index after the highest frame received
	seen     []uint64
	seenBase int         // the frame index of seen's first bit
	nextHdr  []byte      // the acquisition header that ended the acquisition: the next one's
	lost     error       // why the stream cannot go on after the acquisition (Continue)
	running  atomic.Bool // the acquisition has not ended yet (for Close's STOPACQUISITION)

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
	m, err := io.ReadFull(w.conn, p[k:])
	if err != nil { // what came is read again by the next call (after a timeout)
		w.n = copy(w.carry[:], p[:k+m])
	}
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
	h, err := r.readStart(false)
	if err != nil {
		return live.Header{}, r.startError(ctx, err)
	}
	if !stopWatch() {
		return live.Header{}, r.startError(ctx, ctx.Err())
	}
	conn.SetReadDeadline(time.Time{})
	r.begin(h)
	return h, nil
}

// begin starts the reader goroutine on the acquisition of header h, whose first frame
// readStart read.
func (r *Receiver) begin(h live.Header) {
	r.header = h
	if r.record != r.bufSize { // the first acquisition, or frames of another size
		r.nbuf = r.opt.Buffers
		if r.nbuf <= 0 {
			r.nbuf = max(64, live.DefaultBacklog/max(r.record, 1))
		}
		r.ready = make(chan item, r.nbuf+1)
		r.free = make(chan []byte, r.nbuf)
		r.bufSize, r.allocd = r.record, 1 // the first frame's
	}
	r.end, r.next, r.seen, r.seenBase = nil, 0, r.seen[:0], 0
	r.done = make(chan struct{})
	r.running.Store(true)
	go r.read()
}

// Continue implements live.Continuer: it waits for the reader goroutine to end the
// acquisition, releases the frames Next has not given, and takes the next acquisition
// from the data connection as Start does (after the acquisition header that ended the
// last one, where one did; in active mode after CMD,STARTACQUISITION and SOFTTRIGGER
// again, unless that header came). It returns io.EOF when the detector closed the data
// connection, an errs.Format error when a read failed inside a message (the stream is
// out of step).
func (r *Receiver) Continue(ctx context.Context) (live.Header, error) {
	switch {
	case r.closed:
		return live.Header{}, errs.New(errs.Argument, "merlin: %s: Continue after Close", r.opt.Addr)
	case r.ready == nil:
		return live.Header{}, errs.New(errs.Argument, "merlin: %s: Continue before Start", r.opt.Addr)
	}
	cancelled := func() error {
		return errs.Wrap(errs.Cancelled, fmt.Errorf("merlin: %s: waiting for the next acquisition: %w", r.opt.Addr, ctx.Err()))
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return live.Header{}, cancelled()
	}
	for drained := false; !drained; {
		select {
		case it := <-r.ready:
			if it.err != nil {
				r.end = it.err
			} else {
				r.Release(it.f)
			}
		default:
			drained = true
		}
	}
	if r.lost != nil {
		return live.Header{}, r.lost
	}
	stopWatch := context.AfterFunc(ctx, func() { r.data.SetReadDeadline(time.Unix(1, 0)) })
	defer stopWatch()
	r.data.SetReadDeadline(time.Time{})
	if r.ctrl != nil && r.nextHdr == nil {
		if err := r.start(ctx); err != nil {
			return live.Header{}, err
		}
	}
	h, err := r.readStart(true)
	if ctx.Err() != nil {
		return live.Header{}, cancelled()
	}
	if err != nil {
		return live.Header{}, err
	}
	if !stopWatch() {
		return live.Header{}, cancelled()
	}
	r.data.SetReadDeadline(time.Time{})
	r.begin(h)
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
	return r.start(ctx)
}

// start starts an acquisition: STARTACQUISITION, and SOFTTRIGGER where asked.
func (r *Receiver) start(ctx context.Context) error {
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
// say. In continuous mode (cont, for Continue) the stream ending before the header is
// io.EOF; a header that comes where the first frame should (an acquisition stopped
// before its first frame) is skipped, with a note; and a frame numbered on beyond the
// last acquisition's frames, where the header should come, is the first of an
// acquisition of the same header.
func (r *Receiver) readStart(cont bool) (live.Header, error) {
	skipped, stopped := 0, 0
	for {
		hdr := r.nextHdr
		r.nextHdr = nil
		if hdr == nil {
			var frame []byte
			var err error
			if hdr, frame, err = r.readHeader(cont, &skipped); err != nil {
				return live.Header{}, err
			}
			if frame != nil {
				return r.numberedOn(frame, skipped), nil
			}
		}
		h, err := r.parseHeader(hdr)
		if err != nil {
			return h, err
		}
		if skipped > 0 {
			h.Notes = append(h.Notes, fmt.Sprintf("%d frames of an earlier acquisition came before the acquisition header and were skipped", skipped))
		}
		if stopped > 0 {
			h.Notes = append(h.Notes, fmt.Sprintf("%d acquisitions stopped before their first frame were skipped", stopped))
		}
		// The first frame gives the frame's layout.
		n, err := r.readPrefix()
		if err != nil {
			return h, r.streamError(err, "waiting for the first frame")
		}
		msg := r.spare(n)
		if err := r.in.body(msg); err != nil {
			return h, r.streamError(err, "reading the first frame")
		}
		r.bytes.Add(int64(n))
		if bytes.HasPrefix(msg, []byte("HDR,")) {
			if !cont {
				return h, r.endErr(errs.IO, "a new acquisition header came before the first frame: the acquisition was stopped")
			}
			r.nextHdr = slices.Clone(msg)
			r.Release(live.Frame{Payload: msg})
			stopped++
			continue
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
		r.record, r.first, r.base = n, msg, 0
		h.SigShape, h.DType = r.layout.Sig, r.layout.DType
		h.Detector = "merlin (" + r.layout.String() + ")"
		if h.Frames > 0 && len(h.NavShape) > 0 && product(h.NavShape) != h.Frames {
			h.Notes = append(h.Notes, fmt.Sprintf("the acquisition header gives a scan of %d positions (%v) and %d frames", product(h.NavShape), h.NavShape, h.Frames))
		}
		return h, nil
	}
}

// readHeader reads messages until the acquisition header, skipping frames (counted in
// skipped). In continuous mode (cont) it returns io.EOF when the stream ends before,
// and returns a frame (in a payload buffer) numbered on beyond the last acquisition's
// frames instead of the header.
func (r *Receiver) readHeader(cont bool, skipped *int) (hdr, frame []byte, err error) {
	var msg []byte
	for {
		n, err := r.readPrefix()
		if err == io.EOF && cont {
			return nil, nil, io.EOF
		}
		if err != nil {
			return nil, nil, r.streamError(err, "waiting for the acquisition header")
		}
		if n <= len("MQ1,") {
			return nil, nil, errs.New(errs.Format, "merlin: %s: a %d-byte MPX message where the acquisition header should come", r.opt.Addr, n)
		}
		if cap(msg) < n+prefixBytes {
			msg = make([]byte, n, n+prefixBytes)
		}
		msg = msg[:n]
		if err := r.in.body(msg); err != nil {
			return nil, nil, r.streamError(err, "reading the acquisition header")
		}
		r.bytes.Add(int64(n))
		if bytes.HasPrefix(msg, []byte("HDR,")) {
			return msg, nil, nil
		}
		if !bytes.HasPrefix(msg, []byte("MQ1,")) {
			return nil, nil, errs.New(errs.Format, "merlin: %s: the data port sent a message starting %s where the acquisition header (\"HDR,\") should come", r.opt.Addr, quoteShort(msg))
		}
		if cont && n == r.record && r.header.Frames > 0 && frameNumber(msg)-r.base > r.header.Frames {
			frame = r.spare(n)
			copy(frame, msg)
			return nil, frame, nil
		}
		*skipped++
	}
}

// parseHeader reads acquisition header hdr.
func (r *Receiver) parseHeader(hdr []byte) (live.Header, error) {
	h := live.Header{Detector: "merlin"}
	r.acqHdr = hdr
	parsed, err := mib.ParseHdr(hdr, "the acquisition header")
	if err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}
	nav, _, err := parsed.NavShape()
	if err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}
	h.NavShape = nav
	if h.Frames, _, err = parsed.Number(hdrFrames); err != nil {
		return h, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", r.opt.Addr, err))
	}
	return h, nil
}

// numberedOn starts an acquisition of the last header at frame, numbered on beyond the
// last acquisition's frames: its frame numbers start after the last multiple of the
// header's frame count before frame's.
func (r *Receiver) numberedOn(frame []byte, skipped int) live.Header {
	r.base += r.header.Frames * ((frameNumber(frame) - 1 - r.base) / r.header.Frames)
	r.first = frame
	h := r.header
	h.Notes = []string{fmt.Sprintf("frames numbered on from %d came without a new acquisition header: an acquisition of the last header's %d frames", r.base+1, h.Frames)}
	if skipped > 0 {
		h.Notes = append(h.Notes, fmt.Sprintf("%d frames of an earlier acquisition came before it and were skipped", skipped))
	}
	return h
}

// spare returns a payload buffer of n bytes: a free one of frames of that size, else a
// new one.
func (r *Receiver) spare(n int) []byte {
	if n == r.bufSize {
		select {
		case b := <-r.free:
			return b[:n]
		default:
			r.allocd++
		}
	}
	return make([]byte, n, n+prefixBytes)
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
	first := r.first
	r.first = nil
	if err := r.frame(first); err != nil {
		r.Release(live.Frame{Payload: first})
		return err
	}
	for !r.complete() {
		buf, err := r.buffer()
		if err != nil {
			return err
		}
		if err := r.readFrame(buf); err != nil {
			r.Release(live.Frame{Payload: buf}) // not handed over
			return err
		}
	}
	return io.EOF
}

// maxHeader bounds the acquisition header read after an acquisition (Merlin sends
// 2048 bytes); a message of another size than the frames' and longer is malformed.
const maxHeader = 1 << 20

// readFrame reads the next message into buf (r.record bytes) and hands it over if it
// is a frame; else it ends the acquisition (a new acquisition header, kept for
// Continue, or a malformed message).
func (r *Receiver) readFrame(buf []byte) error {
	if r.opt.IdleTimeout > 0 {
		r.data.SetReadDeadline(time.Now().Add(r.opt.IdleTimeout))
	}
	n, err := r.readPrefix()
	if err != nil {
		return r.ended(err, "")
	}
	msg := buf
	if n != r.record { // a new acquisition header, or a message of another size
		if n > maxHeader {
			r.lost = errs.New(errs.Format, "merlin: %s: the stream cannot go on after a %d-byte message inside an acquisition of %d-byte frame messages", r.opt.Addr, n, r.record)
			return r.endErr(errs.Format, "after frame %d came a %d-byte message; the acquisition's frame messages have %d bytes", r.next, n, r.record)
		}
		msg = make([]byte, n, n+prefixBytes)
	}
	if err := r.in.body(msg); err != nil {
		where := fmt.Sprintf(" inside frame %d", r.next+1)
		if n != r.record {
			where = " inside a message"
		}
		return r.ended(err, where)
	}
	r.bytes.Add(int64(n))
	if bytes.HasPrefix(msg, []byte("HDR,")) {
		r.nextHdr = msg
		if n == r.record {
			r.nextHdr = slices.Clone(msg)
		}
		return r.newAcquisition()
	}
	if n != r.record {
		return r.endErr(errs.Format, "after frame %d came a %d-byte message starting %s; the acquisition's frame messages have %d bytes",
			r.next, n, quoteShort(msg), r.record)
	}
	return r.frame(buf)
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
	if r.allocd < r.nbuf {
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
	i := num - 1 - r.base
	switch {
	case i < 0:
		return r.endErr(errs.Format, "frame number %d comes before this acquisition's frames, numbered on from %d", num, r.base+1)
	case r.header.Frames > 0 && i >= r.header.Frames && r.base > 0:
		return r.endErr(errs.Format, "frame number %d is beyond this acquisition's %d frames, numbered on from %d", num, r.header.Frames, r.base+1)
	case r.header.Frames > 0 && i >= r.header.Frames:
		return r.endErr(errs.Format, "frame number %d is beyond the %d frames the acquisition header announced", num, r.header.Frames)
	}
	switch {
	case r.mark(i):
		return r.endErr(errs.Format, "frame %d came twice", num)
	case i < r.next:
		r.late.Add(1)
	case i > r.next:
		r.missing.Add(int64(i - r.next))
	}
	r.next = max(r.next, i+1)
	r.received.Add(1)
	return r.send(item{f: live.Frame{Index: i, Payload: msg}})
}

// seenWords bounds the record of the frames that came, to find one that came twice:
// at most 256 KiB, the last 2^20 frame indices at least, however long an unbounded
// acquisition runs. A frame older than those counts as late, not as repeated.
const seenWords = 1 << 15

// mark records that frame index i came and tells whether it had come before.
func (r *Receiver) mark(i int) bool {
	if i < r.seenBase {
		return false
	}
	w := (i - r.seenBase) / 64
	if w >= seenWords { // forget the oldest half or more
		d := max(w-seenWords+1, seenWords/2)
		r.seen = r.seen[:copy(r.seen, r.seen[min(d, len(r.seen)):])]
		r.seenBase += 64 * d
		w -= d
	}
	if w >= len(r.seen) {
		r.seen = append(r.seen, make([]uint64, min(max(w+1, 2*len(r.seen)), seenWords)-len(r.seen))...)
	}
	bit := uint64(1) << ((i - r.seenBase) % 64)
	seen := r.seen[w]&bit != 0
	r.seen[w] |= bit
	return seen
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
	eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	if errs.KindOf(err) == errs.Format || where != "" && !eof {
		r.lost = errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: the data stream is out of step after a failed read (%v): no further acquisition can be read from it", r.opt.Addr, err))
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
	case eof:
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
