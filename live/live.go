// Package live receives frames from a detector while the scan runs, for the engine to
// apply masks to as they arrive.
//
// A Receiver speaks one detector's stream protocol (package live/merlin: Quantum
// Detectors Merlin over TCP; package live/dectris: DECTRIS SIMPLON, stream v1 and v2
// over ZeroMQ). It connects (and, in active mode, arms and starts the detector), reads
// the acquisition's header, then hands over frames in acquisition order as they arrive,
// still encoded as the stream sent them. Decoding a frame (a Merlin frame's big-endian
// or raw-packed pixels, a DECTRIS frame's bitshuffle-LZ4 or LZ4 blob) is left to Decode,
// which the engine's workers call on their own cores, so that the goroutine reading the
// socket does nothing but read it.
//
// Data flows one way: detector → Receiver → received frames (Frames: a dataset of the
// scan whose ReadFrames waits for the frames it is asked for) → partitions → tiles →
// workers → the result, updated in place and published as snapshots (Run).
package live

import (
	"context"
	"errors"
	"fmt"

	"github.com/stemdot/stemdot/dataset"
)

// Header describes an acquisition as its stream announces it.
type Header struct {
	// Detector names the protocol and detector, e.g. "merlin" or "dectris stream v2
	// (ARINA)", for messages and the result's sidecar.
	Detector string
	// NavShape is the scan shape the stream gives (Merlin's acquisition header, when it
	// holds the scan's size), or nil when it gives none: the caller's nav shape, else
	// (Frames,), applies.
	NavShape []int
	// Frames is the number of frames the acquisition will send (Merlin's
	// NUMFRAMESTOACQUIRE, DECTRIS's nimages × ntrigger), or 0 when the stream does not
	// say or is unbounded (continuous acquisition).
	Frames int
	// SigShape is (sig_y, sig_x) of every frame in pixels.
	SigShape [2]int
	// DType is the pixel dtype Decode delivers (host byte order).
	DType dataset.DType
	// Notes are things the receiver reports about the acquisition (a pixel mask
	// applied, a counter depth widened), one sentence each without a trailing period.
	Notes []string
}

// FrameBytes is the size of one decoded frame: sig_y·sig_x·dtype size.
func (h Header) FrameBytes() int { return h.SigShape[0] * h.SigShape[1] * h.DType.Size() }

// Frame is one frame as the stream sent it.
type Frame struct {
	// Index is the frame's number in the acquisition, from 0 (Merlin's 1-based frame
	// number − 1, DECTRIS's image_id − its series' first): the scan position it belongs
	// to, before any sync offset.
	Index int
	// Payload holds the frame's encoded bytes (a Merlin frame's header and pixels, a
	// DECTRIS image's data blob). It belongs to the Receiver, which reuses it after
	// Release.
	Payload []byte
	// Enc is the receiver's note of how Payload is encoded, for Decode (e.g. the
	// compression of a DECTRIS image); 0 where one encoding holds for the acquisition.
	Enc int
}

// Stats counts what a receiver has seen, for progress reports and the result's sidecar.
// Every count only grows.
type Stats struct {
	// Received is the number of frames received so far.
	Received int
	// Bytes is the number of bytes received so far (framing and headers included).
	Bytes int64
	// Missing is the number of frames the stream skipped (a gap in the frame numbers) or
	// that never came before the acquisition ended.
	Missing int
	// Late is the number of frames that arrived out of order after a later one.
	Late int
	// Stalls is the number of times the receiver had frames to hand over but the
	// consumer had no room for them (back-pressure): the sender waited, no frame was
	// lost.
	Stalls int
}

// Receiver receives one acquisition from a detector. Start, Next and Close are called
// from one goroutine; Decode and Release may be called from any goroutine, concurrently.
type Receiver interface {
	// Start connects to the detector (in active mode also configures, arms and starts
	// it) and waits for the acquisition's header. It returns errors naming the address
	// and the fault (connection refused, a malformed header).
	Start(ctx context.Context) (Header, error)
	// Next waits until at least one frame has arrived and appends the frames that have
	// arrived to dst, in acquisition order, returning it. After the acquisition's last
	// frame it returns io.EOF. When the acquisition ends early (aborted by the detector,
	// the connection lost, a malformed or wrong-sized frame, fewer frames than
	// announced) it returns an error that wraps ErrEnded: the frames returned before
	// stay valid. ctx's cancellation ends the wait with ctx.Err().
	Next(ctx context.Context, dst []Frame) ([]Frame, error)
	// Decode decodes f's payload into dst, which holds exactly Header.FrameBytes()
	// bytes: the frame's pixels in Header.DType, host byte order, rows in the order the
	// offline reader of the same detector's files gives them. Errors name the frame.
	Decode(dst []byte, f Frame) error
	// Release hands f's payload back to the receiver for reuse; f must not be used
	// after.
	Release(f Frame)
	// Stats returns the counts so far.
	Stats() Stats
	// Close disconnects (in active mode it stops the detector's acquisition first if it
	// is still running) and releases the receiver's buffers.
	Close() error
}

// Continuer is implemented by receivers that receive acquisition after acquisition
// over one connection, for a continuous run (stemdot live --continuous): Start and the
// Receiver methods give the first acquisition, Continue moves on to the next, which the
// Receiver methods then give in the same way, frame indices from 0 again.
type Continuer interface {
	// Continue is called once the current acquisition is over: Next returned io.EOF or
	// an error wrapping ErrEnded, or Header.Frames frames came (the rest of it, which
	// Next has not given, is released unseen). Every frame of it must have been
	// decoded or released before (Decode follows the current acquisition). In active
	// mode Continue starts the next acquisition as Start does; in passive mode it
	// waits for the detector to send it, as long as ctx allows. It returns the next
	// acquisition's header, io.EOF when the stream ended between acquisitions (the
	// detector closed the connection), or an error naming why the stream cannot go on
	// (errs.Format for one out of step after a malformed message; ctx's error,
	// errs.Cancelled, when cancelled). Stats go on counting over all acquisitions.
	Continue(ctx context.Context) (Header, error)
}

// Sharer is implemented by receivers of a share of a stream that several receivers
// share (Options.Shared), each receiving some of the frames: the acquisition's header
// and its end come to one of them only, and the caller passes them on to the others.
// Its methods may be called from any goroutine, while Start and Next run.
type Sharer interface {
	// Connected says whether the receiver's socket is connected to the stream: the
	// detector may be armed once every receiver's is (frames sent before go to the
	// receivers connected then).
	Connected() bool
	// HeaderMessage is the acquisition's header as this receiver received it (the
	// message's parts, unchanged), or nil when it has received none (another receiver
	// got it).
	HeaderMessage() [][]byte
	// GiveHeader hands in the header message that another receiver of the stream
	// received (its HeaderMessage), for Start, which waits for a header: frames that
	// come before it are kept until it comes. One that came on this receiver's own
	// socket first is kept, the given one then ignored. Errors: errs.Argument for a
	// second header.
	GiveHeader(msg [][]byte) error
	// EndSeen says whether the acquisition's end message came to this receiver.
	EndSeen() bool
	// EndShared says that the acquisition ended (another receiver got its end
	// message): Next hands over the frames this receiver's socket still delivers,
	// until it has been quiet for a moment, then returns io.EOF.
	EndShared()
}

// ErrEnded is wrapped by the errors of an acquisition that ended before its last frame.
var ErrEnded = errors.New("the acquisition ended early")

// Ended returns an error that wraps ErrEnded with the reason given.
func Ended(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrEnded, fmt.Sprintf(format, args...))
}

// Recorder writes what a receiver received to a file that stemdot opens, and that gives
// the frames the receiver decoded, bit for bit (a Merlin .mib and .hdr, a DECTRIS NPY).
// Write is called from the goroutine that reads the stream, with every frame the scan
// takes, in arrival order; the file appears only at Close (written under a temporary
// name and renamed), or not at all after Abort or an error.
type Recorder interface {
	// Write records frame f (its payload is the receiver's until it returns).
	Write(f Frame) error
	// Close finishes the record of an acquisition that ended with end (nil: every
	// frame came); a record of fewer frames than the acquisition is labelled partial
	// (Path says where it is).
	Close(end error) error
	// Abort removes the record; Close after Abort fails.
	Abort()
	// Path is the record's file, after Close.
	Path() string
}

// Recordable is implemented by receivers whose acquisition can be recorded: NewRecorder
// starts a record at path, after Start.
type Recordable interface {
	NewRecorder(path string) (Recorder, error)
}
