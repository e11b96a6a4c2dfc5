package merlin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/stemdot/stemdot/dataset/mib"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/atomicfile"
	"github.com/stemdot/stemdot/live"
)

// Recorder writes the frames of a Merlin acquisition, as they were received, to a MIB
// file that dataset/mib reads back frame for frame: each frame's message (its MIB frame
// header and pixels as Merlin sent them) at the place of its frame number, so that the
// file's frame i is the scan position i of the acquisition. Its .hdr sidecar is the
// acquisition header, with the scan shape the receiver used and a line (mib.RecordKey)
// saying whether the record is complete. Both are written under temporary names and
// renamed by Close: an unfinished record leaves no file behind.
//
// A Recorder is not safe for concurrent use; Write it each frame before Release.
type Recorder struct {
	path, hdrPath string
	h             live.Header
	acqHdr        []byte
	f             *atomicfile.File
	layout        *mib.Layout // from the first frame
	template      []byte      // the first frame's header, for frames that never came
	record        int         // bytes of one frame's record
	written       []bool
	count         int
	err           error
}

var _ live.Recordable = (*Receiver)(nil)

// NewRecorder starts a record of the acquisition that header h and acquisition header
// acqHeader (Receiver.AcquisitionHeader) describe, at path (a .mib; the .hdr beside it).
// h.NavShape, when it has two axes, is the scan shape the .hdr gives. Errors (errs.IO)
// name a path that cannot be written.
func NewRecorder(path string, h live.Header, acqHeader []byte) (*Recorder, error) {
	if !strings.EqualFold(filepath.Ext(path), ".mib") {
		return nil, errs.New(errs.Argument, "merlin: record %s: the record is a MIB file: give a path ending in .mib", path)
	}
	r := &Recorder{path: path, hdrPath: strings.TrimSuffix(path, filepath.Ext(path)) + ".hdr", h: h, acqHdr: acqHeader}
	if err := atomicfile.Check(r.hdrPath); err != nil {
		return nil, fmt.Errorf("merlin: record %s: %w", path, err)
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("merlin: record %s: %w", path, err)
	}
	r.f = f
	return r, nil
}

// Write writes frame f (its payload as received) at the place of its index.
func (r *Recorder) Write(f live.Frame) error {
	if r.err != nil {
		return r.err
	}
	if r.layout == nil {
		l, err := mib.ParseLayout(f.Payload)
		if err != nil {
			return r.fail(errs.Wrap(errs.Format, err))
		}
		r.layout, r.record = l, len(f.Payload)
		r.template = append([]byte(nil), f.Payload[:l.HeaderBytes]...)
	}
	if len(f.Payload) != r.record || f.Index < 0 {
		return r.fail(errs.New(errs.Shape, "frame %d: %d bytes; the first frame had %d", f.Index, len(f.Payload), r.record))
	}
	if f.Index >= len(r.written) {
		r.written = append(r.written, make([]bool, max(f.Index+1, 2*len(r.written))-len(r.written))...)
	}
	if !r.written[f.Index] {
		r.count++
	}
	r.written[f.Index] = true
	if _, err := r.f.WriteAt(f.Payload, int64(f.Index)*int64(r.record)); err != nil {
		return r.fail(errs.Wrap(errs.IO, err))
	}
	return nil
}

// fail records the first error, naming the record, and removes the temporary file.
func (r *Recorder) fail(err error) error {
	if r.err == nil {
		r.err = fmt.Errorf("merlin: record %s: %w", r.path, err)
	}
	r.f.Abort()
	return r.err
}

// Close finishes the record of an acquisition that ended with end: nil or io.EOF for
// one that ended normally, else the error that ended it (Receiver.Next's). Frames that
// never came before the last one written are written as frames of zeros (their
// header the first frame's, with their frame number) and named in the .hdr, which
// labels the record partial; so do an end error and fewer frames than h.Frames. A
// record without a frame is an error and leaves no file.
func (r *Recorder) Close(end error) error {
	if r.err != nil {
		return r.err
	}
	if r.count == 0 {
		return r.fail(errs.New(errs.IO, "no frame was received: nothing recorded"))
	}
	last := len(r.written)
	for last > 0 && !r.written[last-1] {
		last--
	}
	var missing []int
	zeros := make([]byte, r.record)
	for i := range last {
		if r.written[i] {
			continue
		}
		missing = append(missing, i)
		copy(zeros, r.template)
		if err := setFrameNumber(zeros, r.layout.HeaderBytes, i+1); err != nil {
			return r.fail(errs.Wrap(errs.Format, err))
		}
		if _, err := r.f.WriteAt(zeros, int64(i)*int64(r.record)); err != nil {
			return r.fail(errs.Wrap(errs.IO, err))
		}
	}
	label := fmt.Sprintf("complete acquisition, %d of %d frames", r.count, max(last, r.h.Frames))
	var why []string
	if end != nil && !errors.Is(end, io.EOF) {
		why = append(why, strings.ReplaceAll(end.Error(), "\n", " "))
	}
	if r.h.Frames > 0 && r.count < r.h.Frames {
		why = append(why, fmt.Sprintf("%d of the %d frames announced received", r.count, r.h.Frames))
	}
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("frames %s never came and are recorded as zeros", frameList(missing)))
	}
	if len(why) > 0 {
		label = "partial acquisition: " + strings.Join(why, "; ")
	}
	hdr := r.acqHdr
	if _, err := mib.ParseHdr(hdr, "the acquisition header"); err != nil {
		hdr = []byte("HDR,\t\r\nEnd\t")
	}
	if len(r.h.NavShape) == 2 {
		hdr = setHdrField(setHdrField(hdr, "ScanX", fmt.Sprint(r.h.NavShape[1])), "ScanY", fmt.Sprint(r.h.NavShape[0]))
	}
	hdr = setHdrField(hdr, mib.RecordKey, label)
	sidecar, err := atomicfile.Prepare(r.hdrPath, func(w io.Writer) error {
		_, err := w.Write(hdr)
		return err
	})
	if err != nil {
		return r.fail(err)
	}
	if err := atomicfile.CommitAll(r.f, sidecar); err != nil {
		r.err = fmt.Errorf("merlin: record %s: %w", r.path, err)
		return r.err
	}
	r.err = fmt.Errorf("merlin: record %s: already closed", r.path)
	return nil
}

// Path is the record's .mib file.
func (r *Recorder) Path() string { return r.path }

// NewRecorder starts a record of the acquisition r received the header of
// (live.Recordable), at path.
func (r *Receiver) NewRecorder(path string) (live.Recorder, error) {
	return NewRecorder(path, r.header, r.acqHdr)
}

// Abort stops the record and removes its temporary file.
func (r *Recorder) Abort() {
	if r.err == nil {
		r.fail(errors.New("aborted"))
	}
}

// frameList writes frame indices (from 0) as frame numbers (from 1) in ranges:
// "3, 6-8".
func frameList(idx []int) string {
	var b bytes.Buffer
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", idx[i]+1, idx[j]+1)
		} else {
			fmt.Fprintf(&b, "%d", idx[i]+1)
		}
		i = j + 1
	}
	return b.String()
}
