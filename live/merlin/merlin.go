// Package merlin receives frames from a Quantum Detectors Merlin (Medipix3) detector over
// its TCP interface (Receiver, a live.Receiver), replays a dataset over the same
// protocol (Serve), and records what was received as a MIB file (Recorder).
//
// The protocol, as Quantum Detectors' MerlinEM documentation and LiberTEM-live
// (libertem_live.detectors.merlin) describe it:
//
//   - Every message on either port is "MPX," + a length of 10 decimal digits + "," + the
//     message. The length counts the bytes after its digits, the comma before the
//     message included: len(message) + 1.
//   - Data port (6342): at the start of an acquisition the acquisition header, a
//     message "HDR,\t\r\n" + tab-separated "key:\tvalue" lines + "End" (the text of the
//     .hdr file Merlin writes beside a .mib, 2048 bytes padded with spaces); then one
//     message per frame: its MIB frame header ("MQ1,", frame number from 1, ...: 384
//     bytes for a single chip, 768 for a quad) and its pixels, big-endian U08/U16/U32 or
//     raw-packed R64 (package dataset/mib decodes both). Nothing on the data port says
//     that an acquisition was stopped (LiberTEM-live issue #167): the frames stop, and
//     the next acquisition starts with its header.
//   - Control port (6341): the client sends "GET,NAME", "SET,NAME,VALUE" or "CMD,NAME"
//     (NUMFRAMESTOACQUIRE, STARTACQUISITION, STOPACQUISITION, ...); the detector
//     answers "GET,NAME,VALUE,CODE", "SET,NAME,CODE" or "CMD,NAME,CODE", CODE 0 for
//     success, 1 busy, 2 an unrecognised command, 3 a parameter out of range.
package merlin

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Default ports of the Merlin software.
const (
	DataPort    = 6342
	ControlPort = 6341
)

// prefixBytes is the size of a message's prefix: "MPX," + 10 digits + ",".
const prefixBytes = 15

// maxMessage bounds a message's length: the largest Merlin frame (a 24-bit raw quad
// frame, 768 + 2 MiB bytes) with room to spare; a longer one is malformed framing.
const maxMessage = 64 << 20

// appendPrefix appends the prefix of a message of n bytes to dst.
func appendPrefix(dst []byte, n int) []byte {
	return fmt.Appendf(dst, "MPX,%010d,", n+1)
}

// parsePrefix returns the size of the message after prefix p (prefixBytes), or an
// error quoting p.
func parsePrefix(p []byte) (int, error) {
	if len(p) != prefixBytes || !bytes.HasPrefix(p, []byte("MPX,")) || p[14] != ',' {
		return 0, fmt.Errorf("%q is not the start of an MPX message (\"MPX,\", 10 digits, \",\")", p)
	}
	n := 0
	for _, c := range p[4:14] {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not the start of an MPX message: its length is not 10 digits", p)
		}
		n = 10*n + int(c-'0')
	}
	if n < 1 || n-1 > maxMessage {
		return 0, fmt.Errorf("MPX message %q: length %d is out of range (1 to %d)", p, n, maxMessage+1)
	}
	return n - 1, nil
}

// frameNumber returns the frame number of MIB frame header h (field 1, from 1), or 0
// when it has none.
func frameNumber(h []byte) int {
	if !bytes.HasPrefix(h, []byte("MQ1,")) {
		return 0
	}
	n := 0
	for i, c := range h[4:min(len(h), 24)] {
		switch {
		case c >= '0' && c <= '9':
			n = 10*n + int(c-'0')
		case c == ',' && i > 0:
			return n
		default:
			return 0
		}
	}
	return 0
}

// setFrameNumber sets field 1 of MIB frame header h (its first headerBytes bytes,
// padded with NULs) to n, at least 6 digits as Merlin writes them, moving the fields
// after it into the padding when the number grows.
func setFrameNumber(h []byte, headerBytes, n int) error {
	h = h[:headerBytes]
	end := bytes.IndexByte(h[4:], ',')
	if !bytes.HasPrefix(h, []byte("MQ1,")) || end < 0 {
		return fmt.Errorf("not a MIB frame header: %q", h[:min(len(h), 16)])
	}
	end += 4
	num := fmt.Appendf(nil, "%06d", n)
	if len(num) == end-4 {
		copy(h[4:], num)
		return nil
	}
	text := h
	if i := bytes.IndexByte(h, 0); i >= 0 {
		text = h[:i]
	}
	rest := append([]byte(nil), text[end:]...)
	if 4+len(num)+len(rest) > headerBytes {
		return fmt.Errorf("frame number %d does not fit in the %d-byte frame header", n, headerBytes)
	}
	clear(h[4:])
	copy(h[4+copy(h[4:], num):], rest)
	return nil
}

// hdrKeys are the acquisition header lines that the receiver reads, and that Serve and
// the Recorder set.
const (
	hdrFrames           = "Frames in Acquisition (Number)"
	hdrFramesPerTrigger = "Frames per Trigger (Number)"
)

// setHdrField sets key's value in acquisition header hdr ("key:\tvalue\r\n" lines),
// replacing its line or adding one before "End", and returns the new header. Padding
// after "End" is kept up to the header's former size.
func setHdrField(hdr []byte, key, value string) []byte {
	lines := strings.SplitAfter(string(hdr), "\n")
	line := key + ":\t" + value + "\r\n"
	for i, l := range lines {
		k, _, ok := strings.Cut(l, "\t")
		if ok && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(k), ":")) == key {
			lines[i] = line
			return pad(strings.Join(lines, ""), len(hdr))
		}
		if strings.HasPrefix(l, "End") && i > 0 {
			lines = append(lines[:i], append([]string{line}, lines[i:]...)...)
			return pad(strings.Join(lines, ""), len(hdr))
		}
	}
	return hdr
}

// pad trims the spaces after "End" so that s is at most size bytes long, where it can.
func pad(s string, size int) []byte {
	if len(s) > size {
		if i := strings.LastIndex(s, "End"); i >= 0 {
			tail := strings.TrimRight(s[i:], " ")
			s = s[:i] + tail + strings.Repeat(" ", max(0, size-i-len(tail)))
		}
	}
	return []byte(s)
}

// quoteShort quotes the start of b for a message.
func quoteShort(b []byte) string {
	if len(b) > 32 {
		return strconv.Quote(string(b[:32])) + "..."
	}
	return strconv.Quote(string(b))
}
