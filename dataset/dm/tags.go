package dm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/stemdot/stemdot/errs"
)

// The tag tree of a DM file, as RosettaSciIO's rsciio.digitalmicrograph and ncempy's
// ncempy.io.dm read it (facts of the format, gathered from them):
//
//	header: version (int32 BE: 3 or 4), file size (uint32 BE in DM3, uint64 in DM4), byte
//	order of the tag data (uint32 BE: 0 big-endian, 1 little-endian); then the root group.
//	group: sorted (u8), open (u8), number of tags (uint32 BE, DM4 uint64); then the tags.
//	tag: kind (u8: 20 group, 21 data), name length (u16 BE), name; in DM4 the size of the
//	rest of the tag (uint64 BE); then a group, or for data "%%%%", the length n of its
//	info array and n info entries (uint32 BE each, DM4 uint64), then the value in the
//	header's byte order.
//
// The info array describes the value's encoded type: [t] a simple value, [18, len] a
// string of len bytes, [15, 0, nfields, (0, t)×nfields] a struct, [20, type..., count]
// an array of count elements of any type (the image pixels are one: ImageData.Data).
// Simple types: 2 int16, 3 int32, 4 uint16, 5 uint32, 6 float32, 7 float64, 8 bool,
// 9 int8, 10 uint8, 11 int64, 12 uint64 (the last two DM4 only).

// maxDepth bounds the nesting of groups (real files nest a dozen deep).
const maxDepth = 64

// maxInfo bounds a data tag's info array (a struct of that many fields).
const maxInfo = 1 << 16

// maxString is the longest string value (a uint16 array or an 18 string) that is decoded;
// longer ones are skipped.
const maxString = 1024

// The tag tree is not kept: the parser hands each tag to a visitor, which keeps what it
// needs (the images' tags, the scan shape), so that the memory of a file's tags is that of
// what is read from them, not of the millions of tags a file may hold (issue #33: 5
// million empty groups, a 45 MB DM3, took 782 MB as a tree).

// pathElem is a tag of a path: its name and its index in its group.
type pathElem struct {
	name  []byte // valid until the parser moves on
	index int
}

// is reports whether the tag is named name (an unnamed tag is named "").
func (e pathElem) is(name string) bool { return string(e.name) == name }

// String is the tag's name, or its index when it has none.
func (e pathElem) String() string {
	if len(e.name) == 0 {
		return strconv.Itoa(e.index)
	}
	return string(e.name)
}

// node is a tag as the parser hands it to a visitor, valid during the call only: a group
// of count tags, or a data tag: a simple value (num), a string, or an array of count
// elements of esize bytes at off.
type node struct {
	group  bool
	simple bool
	array  bool
	count  int64
	off    int64
	esize  int64
	num    float64
	raw    []byte // a string value's bytes (text, or uint16 characters in the tag byte order)
	utf16  bool   // raw holds uint16 characters
	hasStr bool
	o      binary.ByteOrder
}

// str decodes the string value.
func (n *node) str() string {
	if !n.utf16 {
		return string(n.raw)
	}
	u := make([]uint16, len(n.raw)/2)
	for i := range u {
		u[i] = n.o.Uint16(n.raw[2*i:])
	}
	return string(utf16.Decode(u))
}

// visitor is called for every tag, a group before its tags, with the path to it from the
// root.
type visitor func(path []pathElem, n *node)

// simpleSize is the size in bytes of a simple encoded type, 0 for others.
func simpleSize(t uint64) int64 {
	switch t {
	case 8, 9, 10:
		return 1
	case 2, 4:
		return 2
	case 3, 5, 6:
		return 4
	case 7, 11, 12:
		return 8
	}
	return 0
}

// header is the DM file header.
type header struct {
	version int
	little  bool
}

// reader reads the tag tree through a window of the file, so that tags cost no syscall
// each and the image data are skipped, never read.
type reader struct {
	ra     io.ReaderAt
	size   int64
	off    int64
	win    []byte
	winOff int64
}

// window is how much of the file reader reads at a time.
const window = 1 << 16

// errCut is the end of the file inside the tag tree.
var errCut = errors.New("cut short")

// next returns the n bytes at the reader's offset and moves past them. The slice is
// valid until the next call.
func (r *reader) next(n int64) ([]byte, error) {
	if n < 0 || n > r.size-r.off {
		return nil, errCut
	}
	if r.off < r.winOff || r.off+n > r.winOff+int64(len(r.win)) {
		want := max(window, n)
		want = min(want, r.size-r.off)
		if int64(cap(r.win)) < want {
			r.win = make([]byte, want)
		}
		r.win = r.win[:want]
		if _, err := r.ra.ReadAt(r.win, r.off); err != nil && !(errors.Is(err, io.EOF) && r.off+want == r.size) {
			r.win = r.win[:0]
			if errors.Is(err, io.EOF) {
				return nil, errCut
			}
			return nil, errs.Wrap(errs.IO, err)
		}
		r.winOff = r.off
	}
	b := r.win[r.off-r.winOff : r.off-r.winOff+n]
	r.off += n
	return b, nil
}

// skip moves past n bytes without reading them.
func (r *reader) skip(n int64) error {
	if n < 0 || n > r.size-r.off {
		return errCut
	}
	r.off += n
	return nil
}

// parser parses the tag tree of one file.
type parser struct {
	r      *reader
	hdr    header
	stack  []pathElem // the tag being parsed and its enclosing groups; the names' buffers are reused
	depth  int        // the tags of stack in use
	byteOf binary.ByteOrder
	info   []uint64 // the info array of the data tag being parsed
	n      node     // the tag being visited
	visit  visitor
}

// where names the tag being parsed, quoted, as "ImageList.2.ImageData.Data".
func (p *parser) where() string {
	if p.depth == 0 {
		return "the root group"
	}
	return "tag " + pathString(p.stack[:p.depth])
}

// pathString is a tag's path, dotted and quoted; a message names at most the first 3 and
// the last 4 of a deeper path, and the first 64 bytes of a longer name (a file's names
// and nesting are its own: the message stays short, and its cost bounded).
func pathString(path []pathElem) string {
	const head, tail, long = 3, 4, 64
	var names []string
	for i, e := range path {
		switch {
		case len(path) > head+tail && i == head:
			names = append(names, fmt.Sprintf("(%d more)", len(path)-head-tail))
		case len(path) > head+tail && i > head && i < len(path)-tail:
		case len(e.name) > long:
			names = append(names, string(e.name[:long])+"…")
		default:
			names = append(names, e.String())
		}
	}
	return strconv.Quote(strings.Join(names, "."))
}

// fail returns a format error at the parser's position.
func (p *parser) fail(err error) error {
	if errors.Is(err, errCut) {
		return errs.New(errs.Format, "the file (%d bytes) ends inside %s: it is cut short", p.r.size, p.where())
	}
	if errs.KindOf(err) == errs.IO {
		return err
	}
	return errs.New(errs.Format, "%s (at byte %d): %v", p.where(), p.r.off, err)
}

// lq reads a big-endian length: uint32 in DM3, uint64 in DM4.
func (p *parser) lq() (uint64, error) {
	if p.hdr.version == 4 {
		b, err := p.r.next(8)
		if err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(b), nil
	}
	b, err := p.r.next(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint32(b)), nil
}

// Tags are numbers read from the tag tree of a DigitalMicrograph 3 or 4 file: a
// .dm3/.dm4 image, or the .gtg metadata file of a Gatan K2 IS acquisition (package
// dataset/k2is reads its scan shape from it).
type Tags struct{ nums map[string]float64 }

// ReadTags reads the header and the whole tag tree of the DM3/DM4 file of size bytes that
// r reads, keeping the values of the simple numeric data tags (any of the 11 integer,
// float and bool types) at paths: the names of a tag's groups and its own name from the
// root, joined by ".", an unnamed tag by its index in its group ("SI Dimensions.Size X",
// "ImageList.1.ImageData.DataType"); where several tags have a path, the first is kept.
// Nothing else is kept: the memory taken does not grow with the file's tags. The values of
// array tags (image pixels) are skipped, never read. A file that is not DM3/DM4 or whose
// tags are damaged or cut short gives an errs.Format error naming the tag, a failed read
// errs.IO.
func ReadTags(r io.ReaderAt, size int64, paths ...string) (*Tags, error) {
	t := &Tags{nums: map[string]float64{}}
	want := make([][]string, len(paths))
	for i, p := range paths {
		want[i] = strings.Split(p, ".")
	}
	_, err := parseTags(r, size, func(path []pathElem, n *node) {
		if !n.simple {
			return
		}
		for i, w := range want {
			if len(w) != len(path) {
				continue
			}
			match := true
			for j, e := range path {
				match = match && (e.is(w[j]) || len(e.name) == 0 && strconv.Itoa(e.index) == w[j])
			}
			if _, seen := t.nums[paths[i]]; match && !seen {
				t.nums[paths[i]] = n.num
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Number returns the value, as float64, of the simple numeric data tag at path, one of
// the paths given to ReadTags. ok is false when there is no such tag or it is a group, a
// string, a struct or an array.
func (t *Tags) Number(path string) (v float64, ok bool) {
	v, ok = t.nums[path]
	return v, ok
}

// parseTags reads the header and the whole tag tree of a DM3/DM4 file of size bytes,
// handing each tag to visit.
func parseTags(ra io.ReaderAt, size int64, visit visitor) (header, error) {
	r := &reader{ra: ra, size: size}
	b, err := r.next(4)
	if err != nil {
		return header{}, errs.New(errs.Format, "not a DigitalMicrograph file: %d bytes, too short for its header", size)
	}
	p := &parser{r: r, visit: visit}
	p.hdr.version = int(int32(binary.BigEndian.Uint32(b)))
	if p.hdr.version != 3 && p.hdr.version != 4 {
		return header{}, errs.New(errs.Format, "not a DigitalMicrograph 3 or 4 file: its header gives version %d (bytes % X; want 3 or 4)", p.hdr.version, b)
	}
	if _, err := p.lq(); err != nil { // the file size the header states: not needed
		return header{}, p.fail(err)
	}
	b, err = r.next(4)
	if err != nil {
		return header{}, p.fail(err)
	}
	switch order := binary.BigEndian.Uint32(b); order {
	case 0:
		p.byteOf = binary.BigEndian
	case 1:
		p.hdr.little, p.byteOf = true, binary.LittleEndian
	default:
		return header{}, errs.New(errs.Format, "the header's byte order field is %d (want 0 for big-endian or 1 for little-endian tag data)", order)
	}
	if err := p.group(); err != nil {
		return header{}, err
	}
	return p.hdr, nil
}

// group reads the group at the parser's depth (the root at 0): it visits the group, then
// reads its tags.
func (p *parser) group() error {
	if p.depth > maxDepth {
		return p.fail(fmt.Errorf("groups nested deeper than %d", maxDepth))
	}
	if err := p.r.skip(2); err != nil { // sorted, open
		return p.fail(err)
	}
	ntags, err := p.lq()
	if err != nil {
		return p.fail(err)
	}
	if ntags > uint64(p.r.size-p.r.off)/3 { // every tag takes at least 3 bytes
		return p.fail(fmt.Errorf("group of %d tags, more than the rest of the file holds", ntags))
	}
	if p.depth > 0 {
		p.n = node{group: true, count: int64(ntags)}
		p.visit(p.stack[:p.depth], &p.n)
	}
	if p.depth == len(p.stack) {
		p.stack = append(p.stack, pathElem{})
	}
	for i := range int(ntags) {
		b, err := p.r.next(3)
		if err != nil {
			return p.fail(err)
		}
		kind, nameLen := b[0], int64(binary.BigEndian.Uint16(b[1:]))
		nb, err := p.r.next(nameLen)
		if err != nil {
			return p.fail(err)
		}
		e := &p.stack[p.depth] // taken anew: a subgroup may grow the stack
		e.name, e.index = append(e.name[:0], nb...), i
		p.depth++
		if p.hdr.version == 4 {
			if _, err := p.lq(); err != nil { // the tag's size: recomputed from its type
				return p.fail(err)
			}
		}
		switch kind {
		case 20:
			err = p.group()
		case 21:
			err = p.data()
		default:
			err = p.fail(fmt.Errorf("tag kind %d (want 20 for a group or 21 for data)", kind))
		}
		if err != nil {
			return err
		}
		p.depth--
	}
	return nil
}

// data reads a data tag's type and its value (simple values, short strings) or where it
// lies (arrays), visits it and moves past it.
func (p *parser) data() error {
	b, err := p.r.next(4)
	if err != nil {
		return p.fail(err)
	}
	if string(b) != "%%%%" {
		return p.fail(fmt.Errorf("data tag starts with % X, not %%%%%%%%", b))
	}
	n, err := p.lq()
	if err != nil {
		return p.fail(err)
	}
	if n == 0 || n > maxInfo {
		return p.fail(fmt.Errorf("info array of %d entries (want 1 to %d)", n, maxInfo))
	}
	if n > uint64(p.r.size-p.r.off)/4 { // every entry takes at least 4 bytes
		return p.fail(errCut)
	}
	p.info = p.info[:0]
	for range n {
		v, err := p.lq()
		if err != nil {
			return p.fail(err)
		}
		p.info = append(p.info, v)
	}
	info := p.info
	size, used, err := p.typeSize(info, 0)
	if err != nil {
		return p.fail(err)
	}
	if used != len(info) {
		return p.fail(fmt.Errorf("info array %v: its type takes %d of its %d entries", info[:min(len(info), 8)], used, len(info)))
	}
	p.n = node{off: p.r.off, o: p.byteOf}
	c := &p.n
	if info[0] == 20 && len(info) == 3 { // an array of simple values
		c.array, c.count, c.esize = true, int64(info[2]), simpleSize(info[1])
	}
	switch {
	case len(info) == 1:
		c.simple = true
		v, err := p.r.next(size)
		if err != nil {
			return p.fail(err)
		}
		c.num = p.value(info[0], v)
	case info[0] == 18 && size <= maxString, c.array && info[1] == 4 && size <= 2*maxString: // text, or uint16 characters
		if c.raw, err = p.r.next(size); err != nil {
			return p.fail(err)
		}
		c.hasStr, c.utf16 = true, c.array
	default:
		if err := p.r.skip(size); err != nil {
			return p.fail(err)
		}
	}
	p.visit(p.stack[:p.depth], c)
	return nil
}

// value decodes a simple value of encoded type t.
func (p *parser) value(t uint64, b []byte) float64 {
	o := p.byteOf
	switch t {
	case 2:
		return float64(int16(o.Uint16(b)))
	case 3:
		return float64(int32(o.Uint32(b)))
	case 4:
		return float64(o.Uint16(b))
	case 5:
		return float64(o.Uint32(b))
	case 6:
		return float64(math.Float32frombits(o.Uint32(b)))
	case 7:
		return math.Float64frombits(o.Uint64(b))
	case 8, 10:
		return float64(b[0])
	case 9:
		return float64(int8(b[0]))
	case 11:
		return float64(int64(o.Uint64(b)))
	}
	return float64(o.Uint64(b)) // 12
}

// typeSize returns the size in bytes of a value of the type that info describes from
// entry i on, and the index of the entry after that type.
func (p *parser) typeSize(info []uint64, i int) (int64, int, error) {
	if i >= len(info) {
		return 0, 0, fmt.Errorf("info array %v ends inside its type", info[:min(len(info), 8)])
	}
	limit := uint64(p.r.size) // no value is larger than the file
	switch t := info[i]; t {
	case 15: // struct: name length, number of fields, (name length, simple type) per field
		if i+2 >= len(info) {
			return 0, 0, fmt.Errorf("struct type %v ends early", info[i:])
		}
		nf := info[i+2]
		if nf > uint64(len(info)-i-3)/2 {
			return 0, 0, fmt.Errorf("struct of %d fields, more than its info array of %d entries holds", nf, len(info))
		}
		var size int64
		j := i + 3
		for range nf {
			s := simpleSize(info[j+1])
			if s == 0 {
				return 0, 0, fmt.Errorf("struct field of encoded type %d (want a simple type 2 to 12)", info[j+1])
			}
			size += s
			j += 2
		}
		return size, j, nil
	case 18: // string of n bytes
		if i+1 >= len(info) {
			return 0, 0, fmt.Errorf("string type without its length")
		}
		if info[i+1] > limit {
			return 0, 0, fmt.Errorf("string of %d bytes, more than the file holds", info[i+1])
		}
		return int64(info[i+1]), i + 2, nil
	case 20: // array: element type, then count
		es, j, err := p.typeSize(info, i+1)
		if err != nil {
			return 0, 0, err
		}
		if j >= len(info) {
			return 0, 0, fmt.Errorf("array type %v without its length", info[i:min(len(info), i+8)])
		}
		n := info[j]
		if es > 0 && n > limit/uint64(es) {
			return 0, 0, fmt.Errorf("array of %d elements of %d bytes, more than the file holds", n, es)
		}
		return es * int64(n), j + 1, nil
	default:
		if s := simpleSize(t); s > 0 {
			return s, i + 1, nil
		}
		return 0, 0, fmt.Errorf("unknown encoded type %d in info array %v", t, info[:min(len(info), 8)])
	}
}
