package dectris

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"math/bits"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
)

// Protocol is the stream's message format.
type Protocol int

// The stream protocols.
const (
	// V1 is SIMPLON's stream v1 ("legacy"): multipart messages of JSON and binary
	// parts, ZeroMQ port 9999.
	V1 Protocol = 1
	// V2 is stream v2 ("cbor"): one CBOR map a message, ZeroMQ port 31001.
	V2 Protocol = 2
)

// Port is the protocol's default ZeroMQ port.
func (p Protocol) Port() int {
	if p == V1 {
		return 9999
	}
	return 31001
}

func (p Protocol) String() string { return "stream v" + strconv.Itoa(int(p)) }

// Options configure a Receiver.
type Options struct {
	// Stream is the address of the detector's ZeroMQ PUSH socket: "tcp://host:port",
	// "host:port" or "host" (the protocol's port, Protocol.Port).
	Stream string
	// Protocol is V1 or V2 (0: V2).
	Protocol Protocol
	// API is the address of the SIMPLON REST API ("host[:port]" or "http://host:port"),
	// for active mode.
	API string
	// Active configures, arms and disarms the detector through API; else (passive) the
	// receiver only listens and takes the first series whose header it receives.
	Active bool
	// NImages, NTrigger and TriggerMode ("ints", "inte", "exts", "exte") are set on the
	// detector in active mode where given (0 or "": the detector's own). With ints and
	// inte the receiver sends the NTrigger triggers itself.
	NImages, NTrigger int
	TriggerMode       string
	// Channel is the stream v2 channel (threshold) to take; "": the first of the start
	// message's channels.
	Channel string
	// KeepMaskedPixels keeps the values of the pixels that the header's pixel mask flags;
	// else they read as 0, as the offline DECTRIS reader reads them.
	KeepMaskedPixels bool
	// Shared is for several receivers connected to one stream, which deals its messages
	// out in turn (ZeroMQ PUSH to several PULL sockets): each receives some of the frames,
	// so a gap in the frame numbers is not counted as missing, and the end of the series
	// does not check that every frame came. The header and the end message reach one of
	// the receivers only: sharing them is the caller's (the receiver is a live.Sharer).
	// Frames that come before the header are kept until it comes (its own, or one
	// handed in: GiveHeader). A shared stream is armed by the caller once every
	// receiver is connected: Active is refused.
	Shared bool
	// StartTimeout bounds how long Start waits to connect and for the series' header
	// (0: 30 s; negative: until ctx ends).
	StartTimeout time.Duration
}

// The encodings of a frame's payload, in Frame.Enc: kind | element size << 4 | swap << 8.
const (
	encRaw      = iota // the pixels as they are
	encBSLZ4           // bitshuffle-LZ4, HDF5 framing
	encLZ4Block        // one LZ4 block (stream v1 "lz4<")
	encLZ4HDF5         // LZ4 in HDF5 framing (stream v2 "lz4")
	encSwap     = 1 << 8
)

func encName(enc int) string {
	s := [...]string{"uncompressed", "bitshuffle-LZ4", "LZ4", "LZ4 (HDF5 framing)"}[enc&15]
	if enc&encSwap != 0 {
		s += ", big-endian"
	}
	return s
}

// Receiver receives a series from a DECTRIS detector's stream: it implements
// live.Receiver, and live.Continuer for series after series (Continue).
type Receiver struct {
	opt      Options
	endpoint string
	client   *Client
	sock     zmq4.Socket
	msgs     chan message
	quit     chan struct{}
	wg       sync.WaitGroup
	armed    bool
	trigStop context.CancelFunc
	asked    uint64 // active mode: the images the configuration asks for (0: unknown)
	mode     string // active mode: the trigger mode

	hdr      live.Header
	series   uint64
	haveSer  bool
	frames   int    // the frames announced (0: not said)
	dims     [2]int // (y, x)
	masked   []int  // the pixels read as 0
	started  bool
	detail   string // v1 header_detail
	channel  string // v2
	lastD    []byte // v1: the last dimage_d part, and its encoding
	lastEnc  int
	single   [][]byte // v1: single-part messages not yet a whole unit
	pending  []live.Frame
	next     int // the highest frame number received + 1
	gaps     map[int]struct{}
	received int
	done     error // io.EOF or the ErrEnded error, once the series is over

	mu      sync.Mutex
	stats   live.Stats
	readErr error // the socket's failure, which ended the reading goroutine

	share // Options.Shared: see shared.go
}

var _ live.Receiver = (*Receiver)(nil)

// New returns a receiver of the stream that opt names; Start connects.
func New(opt Options) (*Receiver, error) {
	if opt.Protocol == 0 {
		opt.Protocol = V2
	}
	if opt.Protocol != V1 && opt.Protocol != V2 {
		return nil, errs.New(errs.Argument, "dectris: protocol %d: want 1 (stream v1) or 2 (stream v2)", opt.Protocol)
	}
	ep, err := Endpoint(opt.Stream, opt.Protocol)
	if err != nil {
		return nil, err
	}
	if opt.Active && opt.API == "" {
		return nil, errs.New(errs.Argument, "dectris: active mode needs the SIMPLON API's address (option dectris_api)")
	}
	if opt.Active && opt.Shared {
		return nil, errs.New(errs.Argument, "dectris: a shared stream is armed by the caller once every receiver is connected, not by one receiver: passive mode (option passive)")
	}
	switch opt.TriggerMode {
	case "", "ints", "inte", "exts", "exte":
	default:
		return nil, errs.New(errs.Argument, "dectris: trigger mode %q: want ints, inte, exts or exte", opt.TriggerMode)
	}
	if opt.NImages < 0 || opt.NTrigger < 0 {
		return nil, errs.New(errs.Argument, "dectris: nimages %d, ntrigger %d: want counts ≥ 0", opt.NImages, opt.NTrigger)
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = 30 * time.Second
	}
	r := &Receiver{opt: opt, endpoint: ep, quit: make(chan struct{}), gaps: map[int]struct{}{}}
	if opt.Shared {
		r.given, r.endGiven = make(chan [][]byte, 1), make(chan struct{})
	}
	if opt.Active {
		r.client = NewClient(opt.API)
	}
	return r, nil
}

// Endpoint is the ZeroMQ endpoint of addr: "tcp://host:port", the protocol's port
// where addr gives none.
func Endpoint(addr string, p Protocol) (string, error) {
	a := strings.TrimPrefix(addr, "tcp://")
	if a == "" || strings.Contains(a, "://") {
		return "", errs.New(errs.Argument, "dectris: stream address %q: want tcp://host:port, host:port or host", addr)
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		a = net.JoinHostPort(strings.Trim(a, "[]"), strconv.Itoa(p.Port()))
	}
	host, port, err := net.SplitHostPort(a)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n <= 0 || n > 65535 {
		return "", errs.New(errs.Argument, "dectris: stream address %q: want tcp://host:port, host:port or host", addr)
	}
	return "tcp://" + a, nil
}

func init() {
	// "tcpbuf": TCP whose connections are read through a 256 KiB buffer. go-zeromq reads
	// a frame's 2-byte header and its body with one read call each; buffered, a
	// message of four parts costs a read call per 256 KiB, not eight (bench/zmqpick:
	// 96×96 v1 frames, whole process CPU 0.73× libzmq's through pebbe/zmq4, unbuffered
	// 2.6×).
	_ = zmq4.RegisterTransport("tcpbuf", bufTransport{})
}

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

// Start connects to the stream (in active mode it first configures the detector, and
// arms it once connected) and waits for the series' header: stream v1's dheader-1.0 (and
// with header_detail basic or none the first image, for the frames' shape where the
// header does not give it) or stream v2's start message. Messages of other series before
// it are skipped.
func (r *Receiver) Start(ctx context.Context) (live.Header, error) {
	if r.sock != nil {
		return live.Header{}, errs.New(errs.Argument, "dectris: Start called twice")
	}
	if r.opt.StartTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opt.StartTimeout)
		defer cancel()
	}
	if r.opt.Active {
		if err := r.configure(ctx); err != nil {
			return live.Header{}, err
		}
	}
	if err := r.connect(ctx); err != nil {
		return live.Header{}, err
	}
	if r.opt.Active {
		seq, err := r.client.Command(ctx, "arm")
		if err != nil {
			return live.Header{}, err
		}
		r.armed = true
		r.series, r.haveSer = seq, true
		r.trigger()
	}
	return r.awaitHeader(ctx, r.opt.StartTimeout > 0)
}

// awaitHeader waits for the series' header (and, where it gives no frame shape, its
// first image), skipping the messages of other series; ctx is bounded by
// Options.StartTimeout where bounded.
func (r *Receiver) awaitHeader(ctx context.Context, bounded bool) (live.Header, error) {
	if len(r.single) > 0 { // parts that came after the last series' end
		if err := r.handleV1(nil, &r.pending); err != nil {
			return live.Header{}, r.startErr(err)
		}
	}
	for !r.started || (r.hdr.SigShape == [2]int{} && len(r.pending) == 0) {
		m, err := r.recvStart(ctx)
		if err != nil {
			if ctx.Err() != nil && !bounded {
				return live.Header{}, errs.New(errs.Cancelled, "dectris: waiting for a series' header from %s: %w", r.endpoint, err)
			}
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
				what := "the series' header"
				if r.started {
					what = "the series' first image (its header, header_detail none, gives no frame shape)"
				}
				return live.Header{}, errs.New(errs.IO, "dectris: connected to %s but %s did not come within %v (is the detector armed? option start_timeout waits longer)", r.endpoint, what, r.opt.StartTimeout)
			}
			return live.Header{}, r.startErr(err)
		}
		if m.given {
			err = r.handleGiven(m.parts)
		} else {
			err = r.handle(m, &r.pending)
		}
		if err == nil && r.started {
			err = r.takeEarly()
		}
		if err != nil {
			return live.Header{}, r.startErr(err)
		}
		if r.done != nil && len(r.pending) == 0 && r.hdr.SigShape == [2]int{} {
			return live.Header{}, errs.New(errs.Format, "dectris: series %d at %s ended before its first image: no frame shape", r.series, r.endpoint)
		}
	}
	return r.hdr, nil
}

// Continue implements live.Continuer: it takes the series' messages up to its end
// message (the frames that Next has not given are dropped), then waits for the next
// series' header as Start does: in active mode it arms the detector again (and with
// trigger modes ints and inte triggers it) and waits at most Options.StartTimeout; in
// passive mode it takes the next series whose header comes, as long as ctx allows (a
// DECTRIS stream says nothing when the detector goes away). It returns io.EOF when the
// stream's connection ended, and an errs.IO error when the socket failed.
func (r *Receiver) Continue(ctx context.Context) (live.Header, error) {
	select {
	case <-r.quit:
		return live.Header{}, errs.New(errs.Argument, "dectris: Continue after Close")
	default:
	}
	if r.sock == nil {
		return live.Header{}, errs.New(errs.Argument, "dectris: Continue before Start")
	}
	for r.done == nil { // the rest of the series
		m, err := r.recv(ctx)
		if err == nil {
			var drop []live.Frame
			err = r.handle(m, &drop)
		}
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return live.Header{}, errs.New(errs.Cancelled, "dectris: waiting for the end of series %d from %s: %w", r.series, r.endpoint, err)
			}
			r.stop(err)
		}
	}
	r.mu.Lock()
	readErr := r.readErr
	r.next, r.gaps = 0, map[int]struct{}{}
	r.mu.Unlock()
	switch {
	case errors.Is(readErr, io.EOF):
		return live.Header{}, io.EOF
	case readErr != nil:
		return live.Header{}, errs.New(errs.IO, "dectris: the stream from %s failed after series %d: %w", r.endpoint, r.series, readErr)
	}
	r.hdr, r.started, r.frames, r.masked, r.detail, r.channel = live.Header{}, false, 0, nil, "", ""
	r.lastD, r.pending, r.received, r.done = nil, r.pending[:0], 0, nil
	r.haveSer = false
	if r.opt.Active {
		if r.opt.StartTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.opt.StartTimeout)
			defer cancel()
		}
		seq, err := r.client.Command(ctx, "arm")
		if err != nil {
			return live.Header{}, err
		}
		r.armed = true
		r.series, r.haveSer = seq, true
		r.trigger()
	}
	h, err := r.awaitHeader(ctx, r.opt.Active && r.opt.StartTimeout > 0)
	if errors.Is(err, io.EOF) {
		return h, io.EOF
	}
	return h, err
}

func (r *Receiver) startErr(err error) error {
	if errs.KindOf(err) != errs.Internal || errors.Is(err, context.Canceled) {
		return err
	}
	return errs.Wrap(errs.IO, err)
}

// connect dials the stream, bounded by ctx.
func (r *Receiver) connect(ctx context.Context) error {
	r.sock = zmq4.NewPull(context.Background(), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(-1), zmq4.WithLogger(nullLogger))
	dialed := make(chan error, 1)
	go func() { dialed <- r.sock.Dial(strings.Replace(r.endpoint, "tcp://", "tcpbuf://", 1)) }()
	select {
	case err := <-dialed:
		if err != nil {
			return errs.New(errs.IO, "dectris: connecting to %s: %w", r.endpoint, err)
		}
	case <-ctx.Done():
		r.sock.Close()
		<-dialed
		reason := ""
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(r.endpoint, "tcp://"), time.Second); err != nil {
			reason = ": " + err.Error()
		} else {
			c.Close()
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errs.New(errs.IO, "dectris: could not connect to the stream at %s within %v%s (is the detector's stream enabled, at that address? option start_timeout waits longer)", r.endpoint, r.opt.StartTimeout, reason)
		}
		return errs.New(errs.Cancelled, "dectris: connecting to %s: %w", r.endpoint, ctx.Err())
	}
	r.msgs = make(chan message, 1024)
	r.connected.Store(true)
	r.wg.Add(1)
	go r.read()
	return nil
}

// message is a ZeroMQ message's parts, or the error that ended the socket; given: a
// header handed in (GiveHeader).
type message struct {
	parts [][]byte
	err   error
	given bool
}

// nullLogger drops go-zeromq's log lines: its errors reach Next.
var nullLogger = log.New(io.Discard, "", 0)

// read receives the socket's messages into r.msgs until the socket fails or Close.
func (r *Receiver) read() {
	defer r.wg.Done()
	for {
		zm, err := r.sock.Recv()
		r.lastRecv.Store(time.Now().UnixNano())
		if err != nil {
			r.mu.Lock()
			r.readErr = err
			r.mu.Unlock()
		}
		m := message{parts: zm.Frames, err: err}
		select {
		case r.msgs <- m:
		default:
			r.mu.Lock()
			r.stats.Stalls++
			r.mu.Unlock()
			select {
			case r.msgs <- m:
			case <-r.quit:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// recv waits for the next message; in a shared stream whose end was given (EndShared),
// errSharedEnd once the socket is quiet.
func (r *Receiver) recv(ctx context.Context) (message, error) {
	select {
	case m := <-r.msgs:
		return m, m.err
	case <-ctx.Done():
		return message{}, ctx.Err()
	case <-r.endGiven:
		return r.recvQuiet(ctx)
	}
}

// Next waits for at least one frame and returns those that have arrived.
func (r *Receiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	if r.sock == nil {
		return dst, errs.New(errs.Argument, "dectris: Next before Start")
	}
	if len(r.pending) > 0 {
		dst = append(dst, r.pending...)
		r.pending = r.pending[:0]
		return dst, nil
	}
	n := len(dst)
	for len(dst) == n && r.done == nil {
		m, err := r.recv(ctx)
		if err == nil {
			err = r.handle(m, &dst)
		}
		// what else has arrived, without waiting
		for i := 0; err == nil && r.done == nil && i < 256; i++ {
			select {
			case m = <-r.msgs:
				if m.err != nil {
					err = m.err
				} else {
					err = r.handle(m, &dst)
				}
				continue
			default:
			}
			break
		}
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return dst, errs.New(errs.Cancelled, "dectris: waiting for frames from %s: %w", r.endpoint, err)
			}
			r.stop(err)
		}
	}
	if len(dst) > n {
		return dst, nil
	}
	return dst, r.done
}

// lost is the error of a stream that failed: ErrEnded already, or the connection's.
func (r *Receiver) lost(err error) error {
	if errors.Is(err, live.ErrEnded) {
		return err
	}
	return errs.Wrap(errs.IO, fmt.Errorf("%w: the stream from %s failed after %d frames of series %d: %v", live.ErrEnded, r.endpoint, r.received, r.series, err))
}

// stop ends the series after err: a shared end (io.EOF) or a failed stream.
func (r *Receiver) stop(err error) {
	if errors.Is(err, errSharedEnd) {
		r.end(io.EOF)
		return
	}
	r.end(r.lost(err))
}

// end records the end of the series (io.EOF or an error) and, in active mode, disarms.
func (r *Receiver) end(err error) {
	if r.done != nil {
		return
	}
	r.done = err
	r.disarm()
}

// frame records frame number idx of the series and appends its payload to dst.
func (r *Receiver) frame(idx uint64, payload []byte, enc int, dst *[]live.Frame) error {
	if r.frames > 0 && idx >= uint64(r.frames) {
		return live.Ended("series %d sent frame %d, more than the %d frames its header announced", r.series, idx, r.frames)
	}
	if idx > math.MaxInt32*1024 {
		return live.Ended("series %d sent frame number %d: not a frame of a scan", r.series, idx)
	}
	i := int(idx)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case i >= r.next:
		if !r.opt.Shared && i > r.next {
			if len(r.gaps)+i-r.next > 1<<24 {
				return live.Ended("series %d jumped from frame %d to %d", r.series, r.next-1, i)
			}
			for g := r.next; g < i; g++ {
				r.gaps[g] = struct{}{}
			}
			r.stats.Missing += i - r.next
		}
		r.next = i + 1
	case r.opt.Shared:
	default:
		if _, ok := r.gaps[i]; !ok {
			return live.Ended("series %d sent frame %d twice", r.series, i)
		}
		delete(r.gaps, i)
		r.stats.Late++
	}
	r.received++
	r.stats.Received++
	*dst = append(*dst, live.Frame{Index: i, Payload: payload, Enc: enc})
	return nil
}

// seriesEnd checks, at the series' end message, that every frame came.
func (r *Receiver) seriesEnd() {
	if r.opt.Shared {
		r.endSeen.Store(true)
		r.end(io.EOF)
		return
	}
	r.mu.Lock()
	missing := len(r.gaps)
	if r.frames > r.next {
		r.stats.Missing += r.frames - r.next
		missing += r.frames - r.next
	}
	r.mu.Unlock()
	if missing > 0 {
		r.end(live.Ended("series %d ended after %d of its %d frames: %d never came", r.series, r.received, r.frames, missing))
		return
	}
	r.end(io.EOF)
}

// setHeader sets the acquisition's header from what the stream's header says.
func (r *Receiver) setHeader(detector string, frames uint64, sig [2]int, dt dataset.DType, mask []uint32, maskShape [2]int) error {
	if frames > math.MaxInt32*1024 {
		return errs.New(errs.Format, "dectris: series %d announces %d frames: not a scan's", r.series, frames)
	}
	r.frames = int(frames)
	r.hdr = live.Header{Detector: detector, Frames: r.frames, SigShape: sig, DType: dt}
	r.started = true
	if mask == nil {
		r.hdr.Notes = append(r.hdr.Notes, "the stream's header holds no pixel mask (header_detail all sends it): no pixel is masked")
		return nil
	}
	if sig != [2]int{} && maskShape != sig {
		return errs.New(errs.Format, "dectris: the pixel mask of series %d is %d×%d, its frames %d×%d", r.series, maskShape[0], maskShape[1], sig[0], sig[1])
	}
	var flagged []int
	for i, v := range mask {
		if v != 0 {
			flagged = append(flagged, i)
		}
	}
	switch {
	case len(flagged) == 0:
		r.hdr.Notes = append(r.hdr.Notes, fmt.Sprintf("the pixel mask flags none of the %d pixels", len(mask)))
	case r.opt.KeepMaskedPixels:
		r.hdr.Notes = append(r.hdr.Notes, fmt.Sprintf("pixel mask not applied: the %d pixels it flags keep their values", len(flagged)))
	default:
		r.masked = flagged
		r.hdr.Notes = append(r.hdr.Notes, fmt.Sprintf("pixel mask applied: the %d of %d pixels it flags read as 0 (option pixel_mask=false keeps their values)", len(flagged), len(mask)))
	}
	if dt == dataset.Uint8 || dt == dataset.Uint16 || dt == dataset.Uint32 {
		r.hdr.Notes = append(r.hdr.Notes, fmt.Sprintf("unflagged pixels at %d (2^%d−1) are saturated and keep that value", uint64(1)<<(8*dt.Size())-1, 8*dt.Size()))
	}
	return nil
}

// imagesAsked is the number of images a series of the SIMPLON configuration gives:
// ntrigger with exte and inte (one image per trigger, nimages unused), nimages·ntrigger
// with exts and ints (LiberTEM-live's DetectorConfig.get_num_images); ok false when the
// product does not fit in 64 bits.
func imagesAsked(nimages, ntrigger uint64, mode string) (uint64, bool) {
	if mode == "exte" || mode == "inte" {
		return ntrigger, true
	}
	hi, n := bits.Mul64(nimages, ntrigger)
	return n, hi == 0
}

// Decode decodes f's payload into dst (Header.FrameBytes() bytes) and sets the pixels
// that the pixel mask flags to 0.
func (r *Receiver) Decode(dst []byte, f live.Frame) error {
	if len(dst) != r.hdr.FrameBytes() {
		return errs.New(errs.Shape, "dectris: decoding frame %d into %d bytes, want %d", f.Index, len(dst), r.hdr.FrameBytes())
	}
	elem := f.Enc >> 4 & 15
	var err error
	switch f.Enc & 15 {
	case encRaw:
		if len(f.Payload) != len(dst) {
			err = fmt.Errorf("%d bytes sent, want %d", len(f.Payload), len(dst))
		} else {
			copy(dst, f.Payload)
		}
	case encBSLZ4:
		err = decodeBSLZ4(dst, f.Payload, elem)
	case encLZ4Block:
		var n int
		if n, err = lz4Block(dst, f.Payload); err == nil && n != len(dst) {
			err = fmt.Errorf("the LZ4 block decodes to %d bytes, want %d", n, len(dst))
		}
	case encLZ4HDF5:
		err = decodeLZ4(dst, f.Payload)
	}
	if err != nil {
		return errs.New(errs.Format, "dectris: frame %d of series %d (%s): %w", f.Index, r.series, encName(f.Enc), err)
	}
	if f.Enc&encSwap != 0 {
		swap(dst, r.hdr.DType.Size())
	}
	size := r.hdr.DType.Size()
	for _, p := range r.masked {
		clear(dst[p*size : (p+1)*size])
	}
	return nil
}

// swap reverses the bytes of each element of size bytes in b.
func swap(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		for j, k := i, i+size-1; j < k; j, k = j+1, k-1 {
			b[j], b[k] = b[k], b[j]
		}
	}
}

// Release does nothing: a payload is a slice of the message received, which the
// garbage collector frees.
func (r *Receiver) Release(live.Frame) {}

// Stats returns the counts so far.
func (r *Receiver) Stats() live.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close disarms the detector in active mode if the series is still running (abort, then
// disarm) and closes the connection.
func (r *Receiver) Close() error {
	if r.done == nil && r.armed {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.client.Command(ctx, "abort")
	}
	r.disarm()
	select {
	case <-r.quit:
		return nil
	default:
	}
	close(r.quit)
	var err error
	if r.sock != nil {
		if err = r.sock.Close(); errors.Is(err, net.ErrClosed) {
			err = nil // the sender closed it first
		}
		r.wg.Wait()
	}
	return err
}

// handle takes one message of the stream.
func (r *Receiver) handle(m message, dst *[]live.Frame) error {
	var n int64
	for _, p := range m.parts {
		n += int64(len(p))
	}
	r.mu.Lock()
	r.stats.Bytes += n
	r.mu.Unlock()
	if r.opt.Protocol == V1 {
		return r.handleV1(m.parts, dst)
	}
	return r.handleV2(m.parts, dst)
}
