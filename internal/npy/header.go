package npy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Info is what an NPY header says about the array that follows it.
type Info struct {
	// Major is the format version's major number: 1, 2 or 3 (versions 1.0, 2.0, 3.0).
	Major byte
	// Descr is the dtype descr, unquoted: "<u2", "|u1", ">f8", ...
	Descr string
	// Fortran is the header's fortran_order: the array is in Fortran (column-major)
	// order.
	Fortran bool
	// Shape is the array's shape; every size is at least 0.
	Shape []int
}

// ParseDict parses an NPY header dict (the text between the length field and the data,
// padding and '\n' included) of format version major (1, 2 or 3) as numpy's reader
// (numpy.lib.format.read_array_header_1_0/_2_0) does: the text is a Python literal,
// evaluated by ast.literal_eval there and by a small parser of that syntax here (strings
// in single, double or triple quotes with an optional u or r prefix, and adjacent strings
// joined; integers in decimal, 0x, 0o or 0b with optional sign and underscores; True,
// False, None; tuples, lists and dicts with or without a trailing comma; spaces, newlines
// and # comments between tokens); versions 1.0 and 2.0 also take Python 2's long
// integers (3L), as numpy's _filter_header does. The value must be a dict with exactly
// the keys 'descr' (a string), 'fortran_order' (True or False) and 'shape' (a tuple of
// integers), in any order; unknown, missing and repeated keys, another type, and a
// negative or huge size are errors that say which. A repeated key numpy reads, taking the
// last value; the header is refused here, as a header whose writer's intent is unsure.
// Version 3.0 headers are UTF-8, the others Latin-1 (any byte).
func ParseDict(dict string, major byte) (Info, error) {
	h := Info{Major: major}
	if major >= 3 && !utf8.ValidString(dict) {
		return h, fmt.Errorf("a version %d.0 header must be UTF-8", major)
	}
	p := &literal{s: dict, long: major <= 2}
	v, err := p.value(0)
	if err == nil {
		p.space()
		if p.i < len(p.s) {
			err = p.errorf("unexpected %s after the dict", p.near())
		}
	}
	if err != nil {
		return h, err
	}
	d, ok := v.(mapping)
	if !ok {
		return h, fmt.Errorf("the header is %s, not a dict", kind(v))
	}
	seen := map[string]bool{}
	for _, kv := range d {
		key, ok := kv.key.(string)
		if !ok {
			return h, fmt.Errorf("key %s is not a string (want 'descr', 'fortran_order' and 'shape')", kind(kv.key))
		}
		if seen[key] {
			return h, fmt.Errorf("key %q is given twice: numpy would read the last value, but which one the writer meant is unsure; save the array again (numpy.save)", key)
		}
		seen[key] = true
		switch key {
		case "descr":
			s, ok := kv.val.(string)
			if !ok {
				return h, fmt.Errorf("descr is %s, not a dtype string (structured dtypes are not supported)", kind(kv.val))
			}
			h.Descr = s
		case "fortran_order":
			b, ok := kv.val.(bool)
			if !ok {
				return h, fmt.Errorf("fortran_order is %s, not True or False", kind(kv.val))
			}
			h.Fortran = b
		case "shape":
			t, ok := kv.val.(tuple)
			if !ok {
				return h, fmt.Errorf("shape is %s, not a tuple of integers", kind(kv.val))
			}
			h.Shape = make([]int, len(t))
			for i, e := range t {
				n, ok := e.(int64)
				switch {
				case !ok:
					return h, fmt.Errorf("shape size %d is %s, not an integer", i, kind(e))
				case n < 0:
					return h, fmt.Errorf("shape size %d is negative (%d)", i, n)
				case n > math.MaxInt:
					return h, fmt.Errorf("shape size %d (%d) is too large", i, n)
				}
				h.Shape[i] = int(n)
			}
		default:
			return h, fmt.Errorf("unknown key %q (want 'descr', 'fortran_order' and 'shape')", key)
		}
	}
	for _, key := range []string{"descr", "fortran_order", "shape"} {
		if !seen[key] {
			return h, fmt.Errorf("key %q is missing", key)
		}
	}
	return h, nil
}

// The values of the literal syntax: string, int64, float (a number that is not an
// integer, kept as written), bool, nil (None), tuple, list and mapping.
type (
	tuple   []any
	list    []any
	float   string
	mapping []pair
	pair    struct{ key, val any }
)

// kind describes a value for messages: "the integer 3", "a list", ...
func kind(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float:
		return fmt.Sprintf("the number %s", string(v))
	case bool:
		return map[bool]string{true: "True", false: "False"}[v]
	case nil:
		return "None"
	case tuple:
		return "a tuple"
	case list:
		return "a list"
	case mapping:
		return "a dict"
	}
	return fmt.Sprintf("%T", v)
}

// maxDepth bounds the nesting of literals (a header of 10000 '(' must not exhaust the
// stack).
const maxDepth = 32

// literal parses Python literal syntax from s at i; long accepts Python 2's 3L.
type literal struct {
	s    string
	i    int
	long bool
}

func (p *literal) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

// near quotes what is at p.i, for messages.
func (p *literal) near() string {
	if p.i >= len(p.s) {
		return "end of header"
	}
	rest := p.s[p.i:]
	if len(rest) > 12 {
		rest = rest[:12] + "..."
	}
	return strconv.Quote(rest)
}

// space skips white space, line continuations and comments.
func (p *literal) space() {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			p.i++
		case c == '\\' && p.i+1 < len(p.s) && p.s[p.i+1] == '\n':
			p.i += 2
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

func (p *literal) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errorf("literals nested more than %d deep", maxDepth)
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, p.errorf("the header ends where a value should be")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.dict(depth)
	case c == '(':
		return p.tuple(depth)
	case c == '[':
		p.i++
		items, _, err := p.items(depth, ']')
		return list(items), err
	case c == '\'' || c == '"' || p.prefixed():
		return p.strings()
	case c == '+' || c == '-' || c == '.' || c >= '0' && c <= '9':
		return p.number()
	case isNameStart(c):
		start := p.i
		for p.i < len(p.s) && isNameChar(p.s[p.i]) {
			p.i++
		}
		switch name := p.s[start:p.i]; {
		case name == "True":
			return true, nil
		case name == "False":
			return false, nil
		case name == "None":
			return nil, nil
		}
		p.i = start
		return nil, p.errorf("%s is not a literal (True, False, None, a string, number, tuple, list or dict)", p.near())
	}
	return nil, p.errorf("unexpected %s", p.near())
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameChar(c byte) bool  { return isNameStart(c) || c >= '0' && c <= '9' }

// items parses comma-separated values up to end (the opening bracket read), a trailing
// comma allowed; it reports whether a comma was seen.
func (p *literal) items(depth int, end byte) ([]any, bool, error) {
	var items []any
	comma := false
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return items, comma, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, false, err
		}
		items = append(items, v)
		p.space()
		switch {
		case p.i < len(p.s) && p.s[p.i] == ',':
			p.i++
			comma = true
		case p.i < len(p.s) && p.s[p.i] == end:
		default:
			return nil, false, p.errorf("expected ',' or %q, found %s", end, p.near())
		}
	}
}

// tuple parses "()", "(x,)", "(x, y)", "(x, y,)"; "(x)" is x itself.
func (p *literal) tuple(depth int) (any, error) {
	p.i++
	items, comma, err := p.items(depth, ')')
	if err != nil {
		return nil, err
	}
	if len(items) == 1 && !comma {
		return items[0], nil
	}
	return tuple(items), nil
}

// dict parses "{key: value, ...}", a trailing comma allowed.
func (p *literal) dict(depth int) (any, error) {
	p.i++
	var d mapping
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		k, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.errorf("expected ':' after a dict key, found %s", p.near())
		}
		p.i++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d = append(d, pair{k, v})
		p.space()
		switch {
		case p.i < len(p.s) && p.s[p.i] == ',':
			p.i++
		case p.i < len(p.s) && p.s[p.i] == '}':
		default:
			return nil, p.errorf("expected ',' or '}' in the dict, found %s", p.near())
		}
	}
}

// strings parses one string literal or several adjacent ones, joined.
func (p *literal) strings() (any, error) {
	var b strings.Builder
	for {
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
		save := p.i
		p.space()
		if p.i >= len(p.s) || !(p.s[p.i] == '\'' || p.s[p.i] == '"' || p.prefixed()) {
			p.i = save
			return b.String(), nil
		}
	}
}

// prefixed reports whether a string prefix (u or r) and a quote start at p.i.
func (p *literal) prefixed() bool {
	return p.i+1 < len(p.s) && strings.ContainsRune("uUrR", rune(p.s[p.i])) && (p.s[p.i+1] == '\'' || p.s[p.i+1] == '"')
}

// str parses one string literal: an optional u or r prefix, then a string in single or
// double quotes, or tripled ones, with backslash escapes unless raw (r).
func (p *literal) str() (string, error) {
	raw := false
	if p.prefixed() {
		raw = p.s[p.i] == 'r' || p.s[p.i] == 'R'
		p.i++
	}
	q := p.s[p.i : p.i+1]
	if strings.HasPrefix(p.s[p.i:], q+q+q) {
		q += q + q
	}
	p.i += len(q)
	var b strings.Builder
	for {
		if p.i >= len(p.s) {
			return "", p.errorf("unterminated string")
		}
		if strings.HasPrefix(p.s[p.i:], q) {
			p.i += len(q)
			return b.String(), nil
		}
		c := p.s[p.i]
		if c == '\n' && len(q) == 1 {
			return "", p.errorf("unterminated string")
		}
		if c != '\\' || p.i+1 >= len(p.s) {
			b.WriteByte(c)
			p.i++
			continue
		}
		if raw {
			b.WriteString(p.s[p.i : p.i+2])
			p.i += 2
			continue
		}
		// Python's escapes: \<newline>, \\, \', \", \a \b \f \n \r \t \v, \ooo, \xhh,
		// \uXXXX, \UXXXXXXXX; others stay as written.
		e := p.s[p.i+1]
		p.i += 2
		if r, ok := map[byte]string{'\n': "", '\\': `\`, '\'': "'", '"': `"`, 'a': "\a", 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t", 'v': "\v"}[e]; ok {
			b.WriteString(r)
			continue
		}
		digits, base := 0, 16
		switch {
		case e == 'x':
			digits = 2
		case e == 'u':
			digits = 4
		case e == 'U':
			digits = 8
		case e >= '0' && e <= '7':
			p.i--
			digits, base = 1, 8
			for digits < 3 && p.i+digits < len(p.s) && p.s[p.i+digits] >= '0' && p.s[p.i+digits] <= '7' {
				digits++
			}
		default:
			b.WriteString(p.s[p.i-2 : p.i])
			continue
		}
		if p.i+digits > len(p.s) {
			return "", p.errorf("truncated \\%c escape", e)
		}
		n, err := strconv.ParseUint(p.s[p.i:p.i+digits], base, 32)
		if err != nil || n > utf8.MaxRune {
			return "", p.errorf("bad \\%c escape", e)
		}
		p.i += digits
		b.WriteRune(rune(n))
	}
}

// number parses an integer (an int64) or another number (a float): an optional sign,
// then a Python number token.
func (p *literal) number() (any, error) {
	start := p.i
	sign := ""
	if c := p.s[p.i]; c == '+' || c == '-' {
		sign = p.s[p.i : p.i+1]
		p.i++
		p.space()
	}
	tok := p.i
	for p.i < len(p.s) && (isNameChar(p.s[p.i]) || p.s[p.i] == '.' ||
		(p.s[p.i] == '+' || p.s[p.i] == '-') && p.i > tok && (p.s[p.i-1] == 'e' || p.s[p.i-1] == 'E') && !isPrefixed(p.s[tok:p.i])) {
		p.i++
	}
	text := p.s[tok:p.i]
	if p.long && strings.HasSuffix(text, "L") {
		text = text[:len(text)-1]
	}
	if isInt(text) {
		if strings.Trim(text, "0_") == "" {
			text = "0" // Python's 00 and 0_0; Go would read a leading 0 as octal
		}
		n, err := strconv.ParseInt(sign+text, 0, 64)
		if err != nil {
			return nil, p.errorf("integer %s%s does not fit in 64 bits", sign, text)
		}
		return n, nil
	}
	if _, err := strconv.ParseFloat(strings.TrimRight(strings.ReplaceAll(text, "_", ""), "jJ"), 64); err == nil &&
		strings.ContainsAny(text, ".eEjJ") && !isPrefixed(text) && (text[0] == '.' || text[0] >= '0' && text[0] <= '9') {
		return float(sign + text), nil
	}
	p.i = start
	return nil, p.errorf("%s is not a number", p.near())
}

// isPrefixed reports whether a number token starts with 0x, 0o or 0b (its e is a
// digit, not an exponent).
func isPrefixed(s string) bool {
	return len(s) >= 2 && s[0] == '0' && strings.ContainsRune("xXoObB", rune(s[1]))
}

// isInt reports whether s is a Python integer token: 0 (also 00, 0_0), a decimal without
// leading zeros, or 0x, 0o, 0b digits, with single underscores between digits.
func isInt(s string) bool {
	digits, body := "0123456789", s
	if isPrefixed(s) {
		digits = map[byte]string{'x': "0123456789abcdefABCDEF", 'o': "01234567", 'b': "01"}[s[1]|0x20]
		body = strings.TrimPrefix(s[2:], "_")
	} else if len(s) > 1 && s[0] == '0' && strings.Trim(s, "0_") != "" {
		return false
	}
	if body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return false
	}
	for _, c := range body {
		if c != '_' && !strings.ContainsRune(digits, c) {
			return false
		}
	}
	return true
}
