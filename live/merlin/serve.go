package merlin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/mib"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Source is an acquisition for Serve to send: an acquisition header and frame records
// (a MIB frame header and the pixels, as Merlin sends them).
type Source struct {
	hdr         []byte
	frames      int
	headerBytes int
	recordBytes int
	read        func(dst []byte, i int) error // frame i's record into dst (recordBytes)
	close       func() error
	params      map[string]string // the control port's values before any SET (controlParams)
}

// controlParams are the values a Merlin's control port answers to GET before any SET:
// IMAGEX and IMAGEY, the width and height of the frames decoded (sig), and
// COUNTERDEPTH, the last field of their frame header (header). LiberTEM-live's active
// Merlin acquisition reads them to size its frames (MerlinDetectorConnection's
// read_sig_shape, read_bitdepth), as its simulator answers them.
func controlParams(sig [2]int, header []byte) map[string]string {
	if i := bytes.IndexByte(header, 0); i >= 0 {
		header = header[:i]
	}
	fields := strings.Split(strings.TrimRight(string(header), ","), ",")
	return map[string]string{"IMAGEX": strconv.Itoa(sig[1]), "IMAGEY": strconv.Itoa(sig[0]),
		"COUNTERDEPTH": strings.TrimSpace(fields[len(fields)-1])}
}

// Frames is the number of frames of the source.
func (s *Source) Frames() int { return s.frames }

// Close closes the source's file.
func (s *Source) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// FromDataset returns a source that sends the frames of ds, any dataset stemdot opens,
// as a Merlin with a single chip (a quad for 512×512 frames) sends U08, U16 or U32
// frames: uint8, uint16 and uint32 pixels big-endian behind the frame headers that
// stemdot writes in MIB files (dataset.NewMIBHeaders), and an acquisition header that
// gives the nav shape (ScanX, ScanY; a nav shape of more than two axes is sent as
// (n/nav_x, nav_x)). Other dtypes are refused (errs.DType): Merlin's counters are
// unsigned integers.
func FromDataset(ds dataset.Dataset) (*Source, error) {
	switch ds.DType() {
	case dataset.Uint8, dataset.Uint16, dataset.Uint32:
	default:
		return nil, errs.New(errs.DType, "merlin: %s holds %v pixels: a Merlin stream sends uint8, uint16 or uint32 counts (U08, U16, U32); convert the data to one of them first",
			describe(ds), ds.DType())
	}
	nav := ds.NavShape()
	if len(nav) > 2 {
		nav = []int{ds.NumFrames() / nav[len(nav)-1], nav[len(nav)-1]}
	}
	mh, err := dataset.NewMIBHeaders(nav, ds.SigShape(), ds.DType(), time.Now())
	if err != nil {
		return nil, errs.Wrap(errs.Argument, fmt.Errorf("merlin: %s: %w", describe(ds), err))
	}
	size := ds.DType().Size()
	return &Source{
		params:      controlParams(ds.SigShape(), mh.Frame(nil, 0)),
		hdr:         mh.Hdr,
		frames:      ds.NumFrames(),
		headerBytes: mh.HeaderBytes,
		recordBytes: mh.HeaderBytes + ds.FrameBytes(),
		read: func(dst []byte, i int) error {
			mh.Frame(dst[:0:mh.HeaderBytes], i)
			px := dst[mh.HeaderBytes:]
			if err := ds.ReadFrames(i, i+1, px); err != nil {
				return err
			}
			dataset.CopyToHost(px, px, size, true) // host to big-endian: the same swap
			return nil
		},
	}, nil
}

// describe names a dataset in messages.
func describe(ds dataset.Dataset) string {
	if ds.Path() != "" {
		return ds.Path()
	}
	return "the dataset"
}

// FromMIB returns a source that sends the frames of the Merlin MIB file at path as it
// stores them (their frame headers and pixels, raw-packed R64 frames included), and
// the .hdr sidecar beside it as the acquisition header, as LiberTEM-live's Merlin
// simulator replays a file. nav, when given (at most two axes), replaces the scan
// shape the sidecar gives; a file without one is sent with a header that gives only
// the frame count. Close the source after use.
func FromMIB(path string, nav []int) (*Source, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	s, err := fromMIB(f, size, path, nav)
	if err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func fromMIB(f *os.File, size int64, path string, nav []int) (*Source, error) {
	first := make([]byte, min(size, 768))
	if _, err := f.ReadAt(first, 0); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("merlin: %s: %w", path, err))
	}
	l, err := mib.ParseLayout(first)
	if err != nil {
		return nil, errs.Wrap(errs.Format, fmt.Errorf("merlin: %s: %w", path, err))
	}
	// A 24-bit raw frame whose header gives twice its width: the next frame's magic
	// tells, as dataset/mib reads the file.
	next := make([]byte, 4)
	if _, err := f.ReadAt(next, int64(l.HeaderBytes+l.PixelBytes/2)); err == nil && string(next) == "MQ1," {
		l.FitPixelBytes(l.PixelBytes / 2)
	}
	record := l.RecordBytes()
	frames := int(size / int64(record))
	if frames == 0 {
		return nil, errs.New(errs.Format, "merlin: %s: %d bytes, less than one frame of %d", path, size, record)
	}
	hdrPath := strings.TrimSuffix(path, filepath.Ext(path)) + ".hdr"
	hdr, err := readSidecar(hdrPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		hdr = []byte("HDR,\t\r\n" + hdrFrames + ":\t0\r\n" + hdrFramesPerTrigger + ":\t1\r\nEnd\t")
		hdr = append(hdr, bytes.Repeat([]byte(" "), 2048-len(hdr))...)
	case err != nil:
		return nil, errs.Wrap(errs.IO, fmt.Errorf("merlin: %w", err))
	default:
		if _, err := mib.ParseHdr(hdr, hdrPath); err != nil {
			return nil, errs.Wrap(errs.Format, fmt.Errorf("merlin: %w", err))
		}
	}
	switch len(nav) {
	case 0:
	case 1, 2:
		x, y := nav[len(nav)-1], 1
		if len(nav) == 2 {
			y = nav[0]
		}
		hdr = setHdrField(setHdrField(hdr, "ScanX", fmt.Sprint(x)), "ScanY", fmt.Sprint(y))
		hdr = setHdrField(hdr, hdrFramesPerTrigger, fmt.Sprint(x))
	default:
		return nil, errs.New(errs.Shape, "merlin: %s: nav shape %v has more than two axes", path, nav)
	}
	return &Source{
		params:      controlParams(l.Sig, first[:min(len(first), l.HeaderBytes)]),
		hdr:         hdr,
		frames:      frames,
		headerBytes: l.HeaderBytes,
		recordBytes: record,
		read: func(dst []byte, i int) error {
			if _, err := f.ReadAt(dst, int64(i)*int64(record)); err != nil {
				return errs.Wrap(errs.IO, fmt.Errorf("merlin: %s: frame %d: %w", path, i, err))
			}
			return nil
		},
		close: f.Close,
	}, nil
}

// readSidecar reads the .hdr sidecar at path, a regular file (a FIFO would block), of
// at most 1 MiB (Merlin writes 2048 bytes).
func readSidecar(path string) ([]byte, error) {
	f, _, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Rate is the frame rate in frames per second; 0 sends as fast as the receiver
	// reads.
	Rate float64
	// Control is the control port's listener: with it Serve acts as a Merlin in active
	// mode (GET of IMAGEX, IMAGEY and COUNTERDEPTH answers the source's), sending an
	// acquisition on the data connection at each
	// CMD,STARTACQUISITION (SET,NUMFRAMESTOACQUIRE frames, the source's repeated as
	// needed; all of its frames when not set) and stopping it at CMD,STOPACQUISITION.
	// Without it (passive), each data connection receives one acquisition of all the
	// source's frames at once.
	Control net.Listener
}

// Serve sends src over Merlin's TCP protocol: acquisitions on the data connections that
// ln accepts (one at a time, as Merlin does), each the acquisition header then one
// message per frame, numbered from 1. It returns nil when ctx ends, closing ln and
// opt.Control, or the error of a failed Accept or of the source's read; a receiver
// that disconnects only ends its acquisition.
func Serve(ctx context.Context, ln net.Listener, src *Source, opt ServeOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		if opt.Control != nil {
			opt.Control.Close()
		}
	})
	defer stop()
	s := &server{src: src, opt: opt, record: make([]byte, src.recordBytes)}
	var err error
	if opt.Control != nil {
		err = s.active(ctx, ln)
	} else {
		err = s.passive(ctx, ln)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// sourceError is the failure of a source's read: it ends Serve, where a receiver's
// failure only ends its acquisition.
type sourceError struct{ error }

func (e sourceError) Unwrap() error { return e.error }

type server struct {
	src    *Source
	opt    ServeOptions
	record []byte
}

// passive sends one acquisition to each connection and waits for it to close.
func (s *server) passive(ctx context.Context, ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return errs.Wrap(errs.IO, fmt.Errorf("merlin: serve: %w", err))
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		err = s.acquisition(ctx, conn, s.src.frames, nil)
		if err == nil {
			io.Copy(io.Discard, conn) // until the receiver closes
		}
		stop()
		conn.Close()
		if errors.As(err, new(sourceError)) {
			return err
		}
	}
}

// active answers the control port and sends an acquisition on the latest data
// connection at each start command.
func (s *server) active(ctx context.Context, ln net.Listener) error {
	cmds := make(chan acqCommand)
	cs := &controlServer{params: maps.Clone(s.src.params), cmds: cmds}
	go func() {
		for {
			conn, err := s.opt.Control.Accept()
			if err != nil {
				return
			}
			go cs.serve(ctx, conn)
		}
	}()
	conns := make(chan net.Conn)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			select {
			case conns <- conn:
			case <-ctx.Done():
				conn.Close()
				return
			}
		}
	}()
	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-acceptErr:
			return errs.Wrap(errs.IO, fmt.Errorf("merlin: serve: %w", err))
		case c := <-conns:
			if conn != nil {
				conn.Close()
			}
			conn = c
		case c := <-cmds:
			if !c.start {
				continue
			}
			// The newest receiver connected: one that connected and then started the
			// acquisition may still wait in the listener's queue, while the one
			// before it has closed.
			for more := true; more; {
				select {
				case c := <-conns:
					if conn != nil {
						conn.Close()
					}
					conn = c
				default:
					more = false
				}
			}
			if conn != nil && closedByPeer(conn) {
				conn.Close()
				conn = nil
			}
			if conn == nil {
				select {
				case conn = <-conns:
				case <-ctx.Done():
					return nil
				}
			}
			frames := c.frames
			if frames <= 0 {
				frames = s.src.frames
			}
			if err := s.acquisition(ctx, conn, frames, cmds); err != nil {
				if errors.As(err, new(sourceError)) {
					return err
				}
				conn.Close()
				conn = nil
			}
		}
	}
}

// closedByPeer tells whether the receiver has closed conn: a read that would not block
// finds its end (Merlin's receivers send nothing on the data connection).
func closedByPeer(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = n == 0 && err == nil
		return true
	})
	return closed
}

// acquisition sends the acquisition header and frames frames to conn, at opt.Rate,
// until a stop command comes on cmds.
func (s *server) acquisition(ctx context.Context, conn net.Conn, frames int, cmds <-chan acqCommand) error {
	hdr := setHdrField(s.src.hdr, hdrFrames, fmt.Sprint(frames))
	if _, err := conn.Write(append(appendPrefix(nil, len(hdr)), hdr...)); err != nil {
		return err
	}
	prefix := appendPrefix(nil, s.src.recordBytes)
	start := time.Now()
	var pace *time.Timer
	for i := range frames {
		select {
		case c := <-cmds:
			if !c.start {
				return nil // stopped: the data port says nothing (LiberTEM-live #167)
			}
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if s.opt.Rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / s.opt.Rate * float64(time.Second)))); wait > 0 {
				if pace == nil {
					pace = time.NewTimer(wait)
				} else {
					pace.Reset(wait)
				}
				select {
				case <-pace.C:
				case c := <-cmds:
					if !c.start {
						return nil
					}
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		if err := s.src.read(s.record, i%s.src.frames); err != nil {
			return sourceError{err}
		}
		if err := setFrameNumber(s.record, s.src.headerBytes, i+1); err != nil {
			return sourceError{errs.Wrap(errs.Format, fmt.Errorf("merlin: serve: frame %d: %w", i, err))}
		}
		bufs := net.Buffers{prefix, s.record}
		if _, err := bufs.WriteTo(conn); err != nil {
			return err
		}
	}
	return nil
}
