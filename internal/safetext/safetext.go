// Package safetext escapes terminal control characters in text that stemdot shows: the
// last line of defence against strings from files (names, paths, notes) reaching a
// terminal raw, where an escape sequence could move the cursor, rewrite earlier lines,
// recolour the screen or set the window title (ECMA-48 control functions).
//
// The CLI writes all its output through Writer; the viewer escapes its messages with
// String; the Python package mirrors String (stemdot._printable).
package safetext

import (
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every character that a terminal may act on escaped: the C0
// control characters other than newline and tab (ESC, CR, BEL, ... as \x1b, \x0d,
// \x07), DEL (\x7f), the C1 control characters U+0080 to U+009F (as \u009b, the form
// that Go's strconv.Quote and JSON give them) and bytes that are not UTF-8 (as \xNN: a
// lone 0x9b is CSI to an 8-bit terminal). Any other text, backslashes included, is
// returned as it is, so that escaping twice changes nothing more.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			hexByte(&b, `\x`, s[i])
		case r < 0x20 && r != '\n' && r != '\t' || r == 0x7f:
			hexByte(&b, `\x`, byte(r))
		case r >= 0x80 && r <= 0x9f:
			hexByte(&b, `\u00`, byte(r))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean tells whether s has nothing to escape.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			// UTF-8: a C1 character is 0xc2 0x80..0x9f; anything invalid is escaped.
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 || r <= 0x9f {
				return false
			}
			i += n - 1
		}
	}
	return true
}

func hexByte(b *strings.Builder, prefix string, c byte) {
	const digits = "0123456789abcdef"
	b.WriteString(prefix)
	b.WriteByte(digits[c>>4])
	b.WriteByte(digits[c&15])
}

// Writer writes through W what is written to it, escaped by String. Every Write is
// escaped on its own (fmt.Fprintf writes a message in one). It returns len(p) when W
// took the escaped text.
type Writer struct{ W io.Writer }

func (w Writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.W, String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Sync commits W's contents when W is a file (os.File.Sync), else does nothing.
func (w Writer) Sync() error {
	if s, ok := w.W.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}
