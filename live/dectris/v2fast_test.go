package dectris

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/live"
)

// v2Outcome is what a receiver made of one message after the series' start.
type v2Outcome struct {
	err     string
	frames  []live.Frame
	channel string
	stats   live.Stats
}

// v2Take starts a receiver on start, then gives it msg, with imageV2Fast or without.
func v2Take(t *testing.T, start, msg []byte, fast bool, channel string) v2Outcome {
	v2Fast = fast
	defer func() { v2Fast = true }()
	r, err := New(Options{Stream: "127.0.0.1:1", Protocol: V2, Channel: channel})
	require.NoError(t, err)
	var dst []live.Frame
	require.NoError(t, r.handleV2([][]byte{start}, &dst))
	var o v2Outcome
	if err := r.handleV2([][]byte{msg}, &dst); err != nil {
		o.err = err.Error()
	}
	o.frames, o.channel, o.stats = dst, r.channel, r.Stats()
	return o
}

// TestV2FastEqualsGeneral: stream v2 image messages read in place (imageV2Fast) give
// the frames, errors and counts of the general decoder — for the messages of stemdot's
// replay and of fxamacker/cbor's encoder (every typed array and compression, one and
// two channels, extra keys, tags of the wrong content for RFC 8949), and for 20,000 mutations of them (bytes changed, inserted,
// removed, cut short), which the fast reading must leave to the general decoder
// whenever it would read them otherwise.
func TestV2FastEqualsGeneral(t *testing.T) {
	start := func(channels ...string) []byte {
		b, _ := cbor.Marshal(map[string]any{"type": "start", "series_id": 4, "image_dtype": "uint16",
			"image_size_x": fx, "image_size_y": fy, "number_of_images": 3, "channels": channels})
		return b
	}
	data := func(tag uint64, content any, channels ...string) map[string]any {
		m := map[string]any{}
		for _, ch := range channels {
			m[ch] = cbor.Tag{Number: 40, Content: []any{[]int{fy, fx}, cbor.Tag{Number: tag, Content: content}}}
		}
		return m
	}
	comp := func(alg string, elem int, b []byte) cbor.Tag {
		return cbor.Tag{Number: 56500, Content: []any{alg, elem, b}}
	}
	msg := func(extra map[string]any, d map[string]any) []byte {
		m := map[string]any{"type": "image", "series_id": 4, "image_id": 1, "data": d}
		for k, v := range extra {
			m[k] = v
		}
		b, err := cbor.Marshal(m)
		require.NoError(t, err)
		return b
	}
	be := testFrame(1)
	for i := 0; i < len(be); i += 2 {
		be[i], be[i+1] = be[i+1], be[i]
	}
	enc := newEncoder(ServeOptions{Protocol: V2}, fakeDataset{}, 4, 3, "exte")
	type base struct {
		name     string
		start    []byte
		msg      []byte
		channels []string // the receivers' option channel: "" and these
	}
	bases := []base{
		{"replay", start("threshold_1"), enc.image(1, 1, testFrame(1))[0], []string{""}},
		{"bslz4", start("a", "b"), msg(nil, data(69, comp("bslz4", 2, bslz4(1)), "a")), []string{"", "a", "b"}},
		{"lz4", start("a"), msg(nil, data(69, comp("lz4", 0, lz4HDF5(testFrame(1))), "a")), []string{""}},
		{"raw", start("a"), msg(nil, data(69, testFrame(1), "a")), []string{""}},
		{"big-endian", start("a"), msg(nil, data(65, be, "a")), []string{""}},
		{"two channels", start("a", "b", "c"), msg(map[string]any{"real_time": []int{1, 2}, "user_data": "x"},
			data(69, comp("bslz4", 2, bslz4(1)), "a", "b")), []string{"", "a", "b", "c"}},
		{"image_dtype in an image", start("a"), msg(map[string]any{"image_dtype": 3}, data(69, testFrame(1), "a")), []string{""}},
		{"Image_ID", start("a"), msg(map[string]any{"Image_ID": 2}, data(69, testFrame(1), "a")), []string{""}},
		{"a key twice", start("a"), pairs(t, "type", "image", "series_id", 4, "image_id", 1, "image_id", 2, "data", data(69, testFrame(1), "a")), []string{""}},
		{"RFC 8949 tags of the wrong content in other channels", start("a", "b", "c", "d", "e"), func() []byte {
			// an array where a tag needs a byte string, a number where it needs text,
			// text where it needs a number (a CI run's mutation of "two channels" made
			// the first: the fast reading had skipped it); cbor.Marshal refuses them, so
			// admissible contents of the same size are replaced in the bytes
			m := data(69, testFrame(1), "a")
			m["b"], m["c"], m["d"] = cbor.Tag{Number: 3, Content: []byte{}}, cbor.Tag{Number: 0, Content: ""}, cbor.Tag{Number: 1, Content: 0}
			m["e"] = cbor.Tag{Number: 2, Content: []byte{}} // admissible: a bignum of no bytes
			b := msg(nil, m)
			for _, r := range [][2]string{{"\x61b\xc3\x40", "\x61b\xc3\x80"}, {"\x61c\xc0\x60", "\x61c\xc0\x01"}, {"\x61d\xc1\x00", "\x61d\xc1\x60"}} {
				require.Equal(t, 1, bytes.Count(b, []byte(r[0])), "%q in %x", r[0], b)
				b = bytes.Replace(b, []byte(r[0]), []byte(r[1]), 1)
			}
			return b
		}(), []string{"a"}},
		{"a channel twice", start("a"), pairs(t, "type", "image", "series_id", 4, "image_id", 1, "data", rawPairs(t, "a", data(69, testFrame(1), "a")["a"], "a", data(69, testFrame(2), "a")["a"])), []string{""}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	mutations := 0
	for _, b := range bases {
		for _, ch := range b.channels {
			check := func(what string, m []byte) {
				t.Helper()
				want, got := v2Take(t, b.start, m, false, ch), v2Take(t, b.start, m, true, ch)
				require.Equal(t, want, got, "%s, channel %q: %s: %x", b.name, ch, what, m)
			}
			check("as sent", b.msg)
			for n := range b.msg {
				check(fmt.Sprintf("cut to %d bytes", n), b.msg[:n])
			}
			for range 1000 {
				m := append([]byte(nil), b.msg...)
				for range 1 + rng.IntN(3) {
					i := rng.IntN(len(m))
					switch rng.IntN(4) {
					case 0, 1:
						m[i] = byte(rng.Uint32())
					case 2:
						m = append(m[:i], append([]byte{byte(rng.Uint32())}, m[i:]...)...)
					default:
						m = append(m[:i], m[i+1:]...)
					}
				}
				check("mutated", m)
				mutations++
			}
		}
	}
	require.Greater(t, mutations, 10000)
	// and the fast reading does read them: the payload is the message's own bytes
	im, ok := imageV2Fast(bases[1].msg, "a")
	require.True(t, ok)
	require.Equal(t, bslz4(1), im.a.payload)
	at := bytes.Index(bases[1].msg, im.a.payload)
	require.Positive(t, at)
	require.Same(t, &bases[1].msg[at], &im.a.payload[0], "not copied")
}

// rawPairs is a CBOR map of the keys and values kv in that order, duplicates kept.
func rawPairs(t *testing.T, kv ...any) cbor.RawMessage {
	m := []byte{0xA0 | byte(len(kv)/2)}
	for _, v := range kv {
		b, err := cbor.Marshal(v)
		require.NoError(t, err)
		m = append(m, b...)
	}
	return m
}

func pairs(t *testing.T, kv ...any) []byte { return rawPairs(t, kv...) }

// lz4HDF5 is data as one block in the HDF5 LZ4 filter's framing, uncompressed (a block
// of the data's size: LZ4's literal-only encoding).
func lz4HDF5(data []byte) []byte {
	lit := []byte{0xF0}
	n := len(data) - 15
	for ; n >= 255; n -= 255 {
		lit = append(lit, 255)
	}
	lit = append(append(lit, byte(n)), data...)
	b := make([]byte, 16, 16+len(lit))
	putBE64(b, uint64(len(data)))
	putBE32(b[8:], uint32(len(data)))
	putBE32(b[12:], uint32(len(lit)))
	return append(b, lit...)
}

func putBE64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func putBE32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (24 - 8*i))
	}
}

// fakeDataset is the shape the replay's encoder reads: fy×fx uint16 frames.
type fakeDataset struct{ dataset.Dataset }

func (fakeDataset) SigShape() [2]int     { return [2]int{fy, fx} }
func (fakeDataset) DType() dataset.DType { return dataset.Uint16 }
func (fakeDataset) Path() string         { return "test" }

// TestV1HeadFastEqualsJSON: parseHeadFast reads what json.Unmarshal reads into v1Head,
// to the same values, or leaves it (ok false): stream v1 first parts as the replay,
// a detector and LiberTEM-live's simulator write them, and 50,000 mutations of them.
func TestV1HeadFastEqualsJSON(t *testing.T) {
	bases := []string{
		`{"htype":"dimage-1.0","series":7,"frame":123456,"hash":"0123456789abcdef0123456789abcdef"}`,
		`{"htype":"dheader-1.0","series":1,"header_detail":"basic"}`,
		`{"htype":"dseries_end-1.0","series":18446744073709551615}`,
		`{"frame":0,"series":0,"htype":"dimage-1.0"}`,
		`{"htype":"dimage-1.0","HType":"x","series":7}`,
		`{"htype":"dimage-1.0", "series":7}`,
		`{}`,
	}
	rng := rand.New(rand.NewPCG(5, 6))
	fast := 0
	for _, b := range bases {
		h, ok := parseHeadFast([]byte(b))
		if b != bases[4] && b != bases[5] {
			require.True(t, ok, b)
		}
		for n := range 50000 / len(bases) {
			m := []byte(b)
			if n > 0 {
				for range 1 + rng.IntN(3) {
					i := rng.IntN(len(m) + 1)
					if i == len(m) { // at the end: insert
						m = append(m, '}')
						continue
					}
					c := "0123456789\"{}:,-. \\\x00\xc3eEaAtT"[rng.IntN(26)]
					switch rng.IntN(3) {
					case 0:
						m[i] = c
					case 1:
						m = append(m[:i], append([]byte{c}, m[i:]...)...)
					default:
						m = append(m[:i], m[i+1:]...)
					}
				}
			}
			if h, ok = parseHeadFast(m); !ok {
				continue
			}
			fast++
			var want v1Head
			require.NoError(t, json.Unmarshal(m, &want), "%q", m)
			require.Equal(t, want, h, "%q", m)
		}
	}
	require.Greater(t, fast, 5000)
}

// TestSameButSize: dimage_d parts that sameButSize finds alike decode alike into
// v1Array (b as parsed before, a the part that came): 20,000 mutations of a pair that
// differs in "size", including sizes inside strings and keys.
func TestSameButSize(t *testing.T) {
	last := `{"htype":"dimage_d-1.0","shape":[192,192],"type":"uint16","encoding":"bs16-lz4<","size":6444}`
	require.True(t, sameButSize([]byte(strings.Replace(last, "6444", "123", 1)), []byte(last)))
	require.False(t, sameButSize([]byte(strings.Replace(last, "6444", "0123", 1)), []byte(last)))
	require.False(t, sameButSize([]byte(strings.Replace(last, "uint16", "uint32", 1)), []byte(last)))
	rng := rand.New(rand.NewPCG(7, 8))
	alike := 0
	for range 20000 {
		b := []byte(last)
		a := []byte(strings.Replace(last, "6444", strconv.Itoa(rng.IntN(100000)), 1))
		for range 1 + rng.IntN(2) {
			i := rng.IntN(len(last) - 12) // before the size: in both, or in one
			c := "0123456789\"{}[]:,-. \\sizeSIZE"[rng.IntN(29)]
			insert := rng.IntN(2) == 0
			for _, m := range [][]*[]byte{{&a}, {&b}, {&a, &b}, {&a, &b}}[rng.IntN(4)] {
				if insert {
					*m = append((*m)[:i], append([]byte(`"size":`+string(c)), (*m)[i:]...)...)
				} else {
					(*m)[i] = c
				}
			}
		}
		var wa, wb v1Array
		if json.Unmarshal(b, &wb) != nil || !sameButSize(a, b) {
			continue
		}
		alike++
		require.NoError(t, json.Unmarshal(a, &wa), "%s vs %s", a, b)
		require.Equal(t, wb, wa, "%s vs %s", a, b)
	}
	require.Greater(t, alike, 1000)
}
