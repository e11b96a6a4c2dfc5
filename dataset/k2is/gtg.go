package k2is

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Gatan DigitalMicrograph tag files (DM3, DM4), of which a .gtg file is one, as read by
// ncempy (ncempy.io.dm, which LiberTEM uses for the .gtg) and RosettaSciIO
// (rsciio.digitalmicrograph): a header (version u32 3 or 4, the root's length u32 (DM3) or
// u64 (DM4), the byte order u32 of the data: 1 little-endian, 0 big-endian), then the
// root tag group. The structure's integers are big-endian and 4 bytes wide in DM3, 8 in
// DM4 (below, "count"):
//
//	group:   sorted u8, open u8, count tags, then the tags
//	tag:     kind u8 (20 group, 21 data), name length u16, name, (DM4: count byte length)
//	data:    "%%%%", count n, n counts of type info, then the value
//
// Type info: one code for a simple value (2 int16, 3 int32, 4 uint16, 5 uint32, 6 float32,
// 7 float64, 8 bool, 9 char, 10 int8, 11 int64, 12 uint64); 18 and a length for a UTF-16
// string; 15, a name length, n fields and (name length, code) per field for a struct; 20,
// the element's info and a length for an array. Values are in the header's byte order.

// gtgTags reads the simple numeric tags of a DM3/DM4 file, keyed by their path from the
// root as ncempy's allTags names them (".SI Dimensions.Size X"; an unnamed tag by its
// index in its group). Strings, structs and arrays are skipped.
func gtgTags(r io.ReaderAt, size int64) (map[string]float64, error) {
	p := &dmParser{r: r, size: size, tags: map[string]float64{}}
	var head [16]byte
	if err := p.read(head[:4], 0); err != nil {
		return nil, err
	}
	switch binary.BigEndian.Uint32(head[:]) {
	case 3:
		p.wide, p.pos = false, 12
	case 4:
		p.wide, p.pos = true, 16
	default:
		return nil, fmt.Errorf("not a DigitalMicrograph file: version %d, want 3 or 4", binary.BigEndian.Uint32(head[:]))
	}
	if err := p.read(head[:p.pos], 0); err != nil {
		return nil, err
	}
	switch binary.BigEndian.Uint32(head[p.pos-4:]) {
	case 0:
		p.order = binary.BigEndian
	case 1:
		p.order = binary.LittleEndian
	default:
		return nil, fmt.Errorf("DigitalMicrograph header: byte order %d, want 0 or 1", binary.BigEndian.Uint32(head[p.pos-4:]))
	}
	if err := p.group("", 0); err != nil {
		return nil, err
	}
	return p.tags, nil
}

// Limits against malformed files.
const (
	maxDepth = 64
	maxTags  = 1 << 20
)

type dmParser struct {
	r     io.ReaderAt
	size  int64
	pos   int64
	wide  bool // DM4: 8-byte counts
	order binary.ByteOrder
	n     int // tags seen
	tags  map[string]float64
}

var errShort = errors.New("DigitalMicrograph file ends inside its tags")

func (p *dmParser) read(b []byte, at int64) error {
	if at < 0 || at+int64(len(b)) > p.size {
		return errShort
	}
	if _, err := p.r.ReadAt(b, at); err != nil {
		return fmt.Errorf("reading the DigitalMicrograph tags: %w", err)
	}
	return nil
}

func (p *dmParser) next(n int) ([]byte, error) {
	b := make([]byte, n)
	if err := p.read(b, p.pos); err != nil {
		return nil, err
	}
	p.pos += int64(n)
	return b, nil
}

// count reads a structural integer (u32 in DM3, u64 in DM4, big-endian).
func (p *dmParser) count() (uint64, error) {
	if p.wide {
		b, err := p.next(8)
		if err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(b), nil
	}
	b, err := p.next(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint32(b)), nil
}

func (p *dmParser) group(path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("DigitalMicrograph tags nested deeper than %d groups", maxDepth)
	}
	if _, err := p.next(2); err != nil { // sorted, open
		return err
	}
	n, err := p.count()
	if err != nil {
		return err
	}
	for i := uint64(0); i < n; i++ {
		if p.n++; p.n > maxTags {
			return fmt.Errorf("more than %d DigitalMicrograph tags", maxTags)
		}
		b, err := p.next(3)
		if err != nil {
			return err
		}
		kind, nameLen := b[0], int(binary.BigEndian.Uint16(b[1:]))
		name, err := p.next(nameLen)
		if err != nil {
			return err
		}
		key := string(name)
		if nameLen == 0 {
			key = fmt.Sprint(i)
		}
		key = path + "." + key
		if p.wide {
			if _, err := p.count(); err != nil { // the tag's byte length
				return err
			}
		}
		switch kind {
		case 20:
			err = p.group(key, depth+1)
		case 21:
			err = p.data(key)
		default:
			err = fmt.Errorf("DigitalMicrograph tag %q: kind %d, want 20 (group) or 21 (data)", key, kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// simpleSize is the byte size of a simple type code (0: not simple).
func simpleSize(code uint64) int64 {
	switch code {
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

func (p *dmParser) data(key string) error {
	b, err := p.next(4)
	if err != nil {
		return err
	}
	if string(b) != "%%%%" {
		return fmt.Errorf("DigitalMicrograph tag %q: no %%%%%%%% before its type", key)
	}
	n, err := p.count()
	if err != nil {
		return err
	}
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("DigitalMicrograph tag %q: %d type codes", key, n)
	}
	info := make([]uint64, n)
	for i := range info {
		if info[i], err = p.count(); err != nil {
			return err
		}
	}
	size, err := valueSize(info)
	if err != nil {
		return fmt.Errorf("DigitalMicrograph tag %q: %w", key, err)
	}
	if size < 0 || size > p.size-p.pos {
		return errShort
	}
	if len(info) == 1 {
		v, err := p.next(int(size))
		if err != nil {
			return err
		}
		p.tags[key] = p.number(info[0], v)
		return nil
	}
	p.pos += size
	return nil
}

// valueSize is the byte size of a value of the type info (-1 when it overflows).
func valueSize(info []uint64) (int64, error) {
	bad := fmt.Errorf("unknown type info %v", info)
	structSize := func(fields []uint64, nf uint64) (int64, error) {
		if uint64(len(fields)) < 2*nf {
			return 0, bad
		}
		var s int64
		for i := range nf {
			fs := simpleSize(fields[2*i+1])
			if fs == 0 {
				return 0, bad
			}
			s += fs
		}
		return s, nil
	}
	switch {
	case len(info) == 1 && simpleSize(info[0]) > 0:
		return simpleSize(info[0]), nil
	case len(info) == 2 && info[0] == 18:
		if info[1] > math.MaxInt64/2 {
			return -1, nil
		}
		return int64(2 * info[1]), nil
	case len(info) >= 3 && info[0] == 15:
		if uint64(len(info)) != 3+2*info[2] {
			return 0, bad
		}
		return structSize(info[3:], info[2])
	case len(info) == 3 && info[0] == 20 && simpleSize(info[1]) > 0:
		return mulSize(simpleSize(info[1]), info[2]), nil
	case len(info) >= 5 && info[0] == 20 && info[1] == 15:
		if uint64(len(info)) != 5+2*info[3] {
			return 0, bad
		}
		s, err := structSize(info[4:len(info)-1], info[3])
		if err != nil {
			return 0, err
		}
		return mulSize(s, info[len(info)-1]), nil
	}
	return 0, bad
}

func mulSize(elem int64, n uint64) int64 {
	if elem == 0 || n > uint64(math.MaxInt64/elem) {
		return -1
	}
	return elem * int64(n)
}

// number decodes a simple value.
func (p *dmParser) number(code uint64, b []byte) float64 {
	o := p.order
	switch code {
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
	case 8, 9:
		return float64(b[0])
	case 10:
		return float64(int8(b[0]))
	case 11:
		return float64(int64(o.Uint64(b)))
	case 12:
		return float64(o.Uint64(b))
	}
	return math.NaN()
}
