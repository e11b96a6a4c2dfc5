package dataset

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/stemdot/stemdot/internal/atomicfile"
	"github.com/stemdot/stemdot/internal/npy"
)

// Writer streams frames to a new file. The frames go to a temporary file in the target
// directory, renamed to the final name only by a successful Close: a failed or aborted
// write never leaves a half-written file under the final name.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	path      string
	format    string
	nav       []int
	sig       [2]int
	dt        DType
	frames    int   // frames the file must hold
	fileBytes int64 // size of the finished file
	written   int   // frames written so far
	tmp       *atomicfile.File
	w         *bufio.Writer
	scratch   []byte // one frame in file byte order
	err       error  // sticky: set by the first failure, which aborts the write
	done      bool

	// MIB only.
	mib          MIBHeaders
	mibHeaderBuf []byte
}

// Create starts writing a new file at path in format "raw" (headerless, little-endian),
// "npy" (NumPy format 1.0, little-endian, C order, shape nav_shape + sig_shape) or "mib"
// (Merlin MIB, U08/U16/U32 pixels big-endian, 384-byte single-chip frame headers, or
// 768-byte quad headers when sigShape is 512×512, plus a .hdr sidecar beside it giving
// ScanX = nav_x, ScanY = nav_y, Frames per Trigger = nav_x and Frames in Acquisition, so
// that Open reads the nav shape back). navShape is (nav_y, nav_x) or any shape for raw and
// NPY; MIB takes at most two nav axes (a 1-D nav shape (n,) reads back as (1, n)).
//
// The file must then receive exactly product(navShape) frames through WriteFrames before
// Close. Create returns an error for an invalid dtype, shapes that CheckShape rejects, a
// format that cannot store them, and a path (or MIB .hdr sidecar path) that exists but
// is not a regular file or is read-only. The finished file gets mode 0666 less the
// umask, as a new file from os.Create.
func Create(path string, format string, navShape []int, sigShape [2]int, dt DType) (*Writer, error) {
	if len(navShape) == 0 {
		return nil, fmt.Errorf("dataset: create %s: empty nav shape", path)
	}
	frames, frameBytes, err := CheckShape(navShape, sigShape, dt)
	if err != nil {
		return nil, fmt.Errorf("dataset: create %s: %w", path, err)
	}
	w := &Writer{
		path:    path,
		format:  strings.ToLower(format),
		nav:     append([]int(nil), navShape...),
		sig:     sigShape,
		dt:      dt,
		frames:  frames,
		scratch: make([]byte, frameBytes),
	}
	var header []byte
	perFrame := 0 // header bytes per frame
	switch w.format {
	case "raw":
	case "npy":
		if header, err = npy.Header(npyDescr(dt), append(append([]int(nil), navShape...), sigShape[:]...)); err != nil {
			return nil, fmt.Errorf("dataset: create %s: %w", path, err)
		}
	case "mib":
		if w.mib, err = NewMIBHeaders(navShape, sigShape, dt, time.Now()); err != nil {
			return nil, fmt.Errorf("dataset: create %s: %w", path, err)
		}
		perFrame = w.mib.HeaderBytes
		if err := atomicfile.Check(w.hdrPath()); err != nil {
			return nil, fmt.Errorf("dataset: create %s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("dataset: create %s: unknown format %q (want raw, npy or mib)", path, format)
	}
	if int64(frames) > (math.MaxInt64-int64(len(header)))/int64(perFrame+frameBytes) {
		return nil, fmt.Errorf("dataset: create %s: nav shape %s is too large: %d frames of %d bytes exceed %d bytes",
			path, npy.ShapeString(navShape), frames, perFrame+frameBytes, int64(math.MaxInt64))
	}
	w.fileBytes = int64(len(header)) + int64(frames)*int64(perFrame+frameBytes)
	tmp, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: create %s: %w", path, err)
	}
	w.tmp = tmp
	w.w = bufio.NewWriterSize(tmp, 1<<20)
	if _, err := w.w.Write(header); err != nil {
		w.fail(err)
		return nil, w.err
	}
	return w, nil
}

// FileBytes is the size in bytes that the finished file will have (for MIB, without the
// 2048-byte .hdr sidecar).
func (w *Writer) FileBytes() int64 { return w.fileBytes }

// WriteFrames appends whole frames: data holds k frames of sig_y·sig_x pixels of the
// writer's dtype, in host byte order. Writing more frames than the nav shape holds is an
// error. Any error aborts the write (the temporary file is removed) and is returned again
// by later calls and by Close.
func (w *Writer) WriteFrames(data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("dataset: write %s: writer already closed", w.path)
	}
	fb := len(w.scratch)
	if len(data)%fb != 0 {
		w.fail(fmt.Errorf("%d bytes is not a whole number of frames of %d bytes (%d×%d×%d)", len(data), fb, w.sig[0], w.sig[1], w.dt.Size()))
		return w.err
	}
	k := len(data) / fb
	if w.written+k > w.frames {
		w.fail(fmt.Errorf("%d frames written plus %d more exceed the %d frames of nav shape %s", w.written, k, w.frames, npy.ShapeString(w.nav)))
		return w.err
	}
	for i := range k {
		frame := data[i*fb : (i+1)*fb]
		var err error
		switch {
		case w.format == "mib":
			w.mibHeaderBuf = w.mib.Frame(w.mibHeaderBuf, w.written+i)
			if _, err = w.w.Write(w.mibHeaderBuf); err == nil {
				swapToBigEndian(w.scratch, frame, w.dt.Size())
				_, err = w.w.Write(w.scratch)
			}
		case npy.HostBigEndian:
			swapCopy(w.scratch, frame, w.dt.Size())
			_, err = w.w.Write(w.scratch)
		default:
			_, err = w.w.Write(frame)
		}
		if err != nil {
			w.fail(err)
			return w.err
		}
	}
	w.written += k
	return nil
}

// swapToBigEndian copies host-order src into dst in big-endian order.
func swapToBigEndian(dst, src []byte, size int) {
	if npy.HostBigEndian {
		copy(dst, src)
	} else {
		swapCopy(dst, src, size)
	}
}

// Close finishes the file: it checks that every frame was written, flushes, and renames
// the temporary file (and the MIB .hdr sidecar) to the final names. On error no file is
// left under the final name.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("dataset: write %s: writer already closed", w.path)
	}
	if w.written != w.frames {
		w.fail(fmt.Errorf("closed after %d of the %d frames of nav shape %s", w.written, w.frames, npy.ShapeString(w.nav)))
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		w.fail(err)
		return w.err
	}
	if w.mib.Hdr != nil {
		if err := atomicfile.Write(w.hdrPath(), func(out io.Writer) error {
			_, err := out.Write(w.mib.Hdr)
			return err
		}); err != nil {
			w.fail(err)
			return w.err
		}
	}
	if err := w.tmp.Commit(); err != nil {
		w.fail(err)
		return w.err
	}
	w.done = true
	return nil
}

// Abort stops writing and removes the temporary file; the final file is not created.
// Abort after Close or after another Abort does nothing.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.tmp.Abort()
}

// fail records the first error, naming the file, and aborts the write.
func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = fmt.Errorf("dataset: write %s: %w", w.path, err)
	}
	w.Abort()
}

// hdrPath is the path of the .hdr sidecar of a MIB file.
func (w *Writer) hdrPath() string {
	return strings.TrimSuffix(w.path, filepath.Ext(w.path)) + ".hdr"
}

// MIBHeaders are the frame headers and the .hdr sidecar of a Merlin MIB file that Create
// writes, and that a replayed Merlin stream sends (package live/merlin).
type MIBHeaders struct {
	// HeaderBytes is the size of a frame header: 384 bytes, 768 for a 512×512 quad.
	HeaderBytes int
	// Frame appends the header of frame (from 0; its field 1 is frame+1) to dst[:0].
	Frame func(dst []byte, frame int) []byte
	// Hdr is the .hdr sidecar (2048 bytes): ScanX = nav_x, ScanY = nav_y, Frames per
	// Trigger = nav_x and Frames in Acquisition, so that the nav shape reads back.
	Hdr []byte
}

// NewMIBHeaders returns the headers of a MIB file of navShape (at most two axes) frames
// of sigShape pixels of dt (uint8, uint16 or uint32: U08, U16, U32) written at t.
func NewMIBHeaders(navShape []int, sigShape [2]int, dt DType, t time.Time) (MIBHeaders, error) {
	pixelType := map[DType]string{Uint8: "U08", Uint16: "U16", Uint32: "U32"}[dt]
	if pixelType == "" {
		return MIBHeaders{}, fmt.Errorf("MIB stores uint8, uint16 or uint32 pixels, not %v", dt)
	}
	if len(navShape) == 0 || len(navShape) > 2 {
		return MIBHeaders{}, fmt.Errorf("MIB takes a nav shape of at most two axes (nav_y, nav_x), got %s", npy.ShapeString(navShape))
	}
	scanY, scanX := 1, navShape[len(navShape)-1]
	if len(navShape) == 2 {
		scanY = navShape[0]
	}
	depth := map[DType]int{Uint8: 6, Uint16: 12, Uint32: 24}[dt]
	headerBytes, chips, layout, chipSelect := 384, 1, "1x1", "01"
	if sigShape == [2]int{512, 512} {
		headerBytes, chips, layout, chipSelect = 768, 4, "2x2", "0F"
	}
	t = t.UTC()
	// Fields after the frame number, as the Merlin software writes them: header size,
	// chips, width, height, pixel type, layout, chip select, time stamp, shutter time (s),
	// counter, colour mode, gain mode, 8 thresholds (keV), per chip "3RX" and 27 DACs,
	// extended time stamp, shutter time (ns), counter depth.
	var b strings.Builder
	fmt.Fprintf(&b, ",%05d,%02d,%04d,%04d,%s,%6s,%s,%s,0.001000,0,0,0", headerBytes, chips, sigShape[1], sigShape[0],
		pixelType, layout, chipSelect, t.Format("2006-01-02 15:04:05.000000"))
	b.WriteString(strings.Repeat(",0.000000E+0", 8))
	b.WriteString(strings.Repeat(",3RX"+strings.Repeat(",000", 27), chips))
	fmt.Fprintf(&b, ",MQ1A,%s,1000000ns,%d,", t.Format("2006-01-02T15:04:05.000000000Z"), depth)
	rest := b.String()
	if len("MQ1,000000")+len(rest) > headerBytes {
		return MIBHeaders{}, fmt.Errorf("MIB frame header of %d bytes does not fit in %d", len("MQ1,000000")+len(rest), headerBytes)
	}
	m := MIBHeaders{HeaderBytes: headerBytes}
	m.Frame = func(dst []byte, frame int) []byte {
		dst = fmt.Appendf(dst[:0], "MQ1,%06d%s", frame+1, rest)
		for len(dst) < headerBytes {
			dst = append(dst, 0)
		}
		return dst
	}
	var h strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&h, "%s:\t%v\r\n", k, v) }
	h.WriteString("HDR,\t\r\n")
	line("Time and Date Stamp (day, mnth, yr, hr, min, s)", t.Format("02/01/2006 15:04:05"))
	line("Assembly Size (NX1, 2X2)", "   "+layout)
	line("Chip Mode  (SPM, CSM, CM, CSCM)", "SPM")
	line("Counter Depth (number)", depth)
	line("Acquisition Type (Normal, Th_scan, Config)", "Normal")
	line("Frames in Acquisition (Number)", scanY*scanX)
	line("Frames per Trigger (Number)", scanX)
	line("Software Version", "stemdot")
	line("ScanX", scanX)
	line("ScanY", scanY)
	h.WriteString("End\t")
	for h.Len() < 2048 {
		h.WriteByte(' ')
	}
	m.Hdr = []byte(h.String())
	return m, nil
}

// npyDescr is the little-endian NPY descr of a valid dt ("<u2", "|u1", ...).
func npyDescr(dt DType) string {
	kind := map[DType]byte{Uint8: 'u', Uint16: 'u', Uint32: 'u', Int8: 'i', Int16: 'i', Int32: 'i', Float32: 'f', Float64: 'f'}[dt]
	return npy.Descr{Kind: kind, Size: dt.Size()}.String()
}
