package h5filter

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// refChunks writes datasets compressed by h5py and hdf5plugin (the filters' own C
// implementations) and, for each, the raw chunk bytes (read_direct_chunk), the filter
// pipeline and the chunk h5py decodes (the independent reference), under dir.
const refChunks = `
import sys, os, json
import numpy as np, h5py, hdf5plugin
d = sys.argv[1]
rng = np.random.default_rng(19)
def frames(dtype, shape):
    x = (rng.poisson(3, shape) * (rng.random(shape) < 0.3)).astype(dtype)
    x[..., 3, 7] = np.iinfo(dtype).max if np.dtype(dtype).kind in "ui" else 1e30
    return x
cases = {
    "gzip_u16": (frames("<u2", (2, 32, 48)), dict(compression="gzip", compression_opts=4)),
    "shuffle_gzip_u16be": (frames(">u2", (2, 32, 48)), dict(compression="gzip", shuffle=True)),
    "shuffle_gzip_fletcher_i32": (frames("<i4", (3, 17, 19)), dict(compression="gzip", shuffle=True, fletcher32=True)),
    "fletcher_odd_u8": (frames("u1", (1, 7, 9)), dict(fletcher32=True)),
    "shuffle_odd_f64": (frames("<f8", (1, 5, 9)), dict(shuffle=True)),
    "lz4_u16": (frames("<u2", (2, 64, 64)), dict(**hdf5plugin.LZ4())),
    "lz4_small_blocks_u32": (frames("<u4", (1, 61, 67)), dict(**hdf5plugin.LZ4(nbytes=1000))),
    "bslz4_u32": (frames("<u4", (1, 192, 192)), dict(**hdf5plugin.Bitshuffle(cname="lz4"))),
    "bslz4_u16_odd": (frames("<u2", (1, 37, 41)), dict(**hdf5plugin.Bitshuffle(cname="lz4"))),
    "bslz4_u8_block": (frames("u1", (1, 100, 103)), dict(**hdf5plugin.Bitshuffle(nelems=256, cname="lz4"))),
    "bslz4_f32_block": (frames("<f4", (1, 50, 51)), dict(**hdf5plugin.Bitshuffle(nelems=1024, cname="lz4"))),
    "bs_none_u16": (frames("<u2", (1, 33, 35)), dict(**hdf5plugin.Bitshuffle(cname="none"))),
    "bs_none_i16_block": (frames("<i2", (1, 40, 41)), dict(**hdf5plugin.Bitshuffle(nelems=64, cname="none"))),
    "lzf_u16": (frames("<u2", (2, 32, 48)), dict(compression="lzf")),
    "shuffle_lzf_fletcher_i32": (frames("<i4", (2, 17, 19)), dict(compression="lzf", shuffle=True, fletcher32=True)),
    # LZF is optional in h5py: a chunk it cannot shrink is stored as it is, its filter
    # mask bit set
    "lzf_incompressible_u8": (rng.integers(0, 256, (2, 16, 16)).astype("u1"), dict(compression="lzf")),
}
meta = {}
with h5py.File(os.path.join(d, "f.h5"), "w") as f:
    for name, (data, kw) in cases.items():
        ds = f.create_dataset(name, data=data, chunks=(1,) + data.shape[1:], **kw)
    f.flush()
    for name, (data, kw) in cases.items():
        ds = f[name]
        dcpl = ds.id.get_create_plist()
        filters = [dict(id=int(x[0]), values=[int(v) for v in x[2]]) for x in (dcpl.get_filter(i) for i in range(dcpl.get_nfilters()))]
        mask, raw = ds.id.read_direct_chunk((1 if data.shape[0] > 1 else 0, 0, 0))
        want = ds[1 if data.shape[0] > 1 else 0]
        open(os.path.join(d, name + ".raw"), "wb").write(raw)
        open(os.path.join(d, name + ".want"), "wb").write(want.tobytes())
        meta[name] = dict(filters=filters, mask=int(mask), size=want.nbytes)
json.dump(meta, open(os.path.join(d, "meta.json"), "w"))
`

func TestDecodeAgainstH5py(t *testing.T) {
	dir := t.TempDir()
	testfiles.RunPython(t, refChunks, []string{"numpy", "h5py", "hdf5plugin"}, dir)
	var meta map[string]struct {
		Filters []struct {
			ID     int      `json:"id"`
			Values []uint32 `json:"values"`
		} `json:"filters"`
		Mask uint32 `json:"mask"`
		Size int    `json:"size"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &meta))
	require.Len(t, meta, 16)
	for name, m := range meta {
		t.Run(name, func(t *testing.T) {
			var p Pipeline
			for _, f := range m.Filters {
				p = append(p, Filter{f.ID, f.Values})
			}
			require.NoError(t, p.Check(), "pipeline %v", m.Filters)
			raw, err := os.ReadFile(filepath.Join(dir, name+".raw"))
			require.NoError(t, err)
			want, err := os.ReadFile(filepath.Join(dir, name+".want"))
			require.NoError(t, err)
			got, err := p.Decode(raw, m.Mask, m.Size)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "decoded chunk differs from h5py's")
			dst := bytes.Repeat([]byte{0xA5}, m.Size)
			got, err = p.DecodeInto(dst, raw, m.Mask, m.Size)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, dst), "chunk decoded into dst differs from h5py's")
			assert.Same(t, &dst[0], &got[0], "DecodeInto returns dst")
			// A corrupted or cut stream is an error (a Fletcher-32 or size check), or
			// decodes to other bytes; never a panic.
			for _, cut := range []int{0, 3, 11, len(raw) / 2, len(raw) - 1} {
				if cut < len(raw) {
					_, err := p.Decode(raw[:cut], m.Mask, m.Size)
					if err != nil {
						assert.ErrorIs(t, err, errs.Format)
					}
				}
			}
		})
	}
}

// TestDeflateChecksum decodes zlib streams whose data or Adler-32 checksum was altered
// (../shared/cases/62-hdf5-deflate-corrupt: a stored block with a flipped byte, which
// h5py refuses): a format error, never the altered bytes, whether the stream decodes to
// the chunk's size exactly or with a Fletcher-32 checksum still to undo; a stream cut
// short is an error too.
func TestDeflateChecksum(t *testing.T) {
	data := bytes.Repeat([]byte("4D-STEM frame "), 40)
	for _, level := range []int{zlib.NoCompression, zlib.DefaultCompression} {
		var b bytes.Buffer
		w, err := zlib.NewWriterLevel(&b, level)
		require.NoError(t, err)
		_, _ = w.Write(data)
		require.NoError(t, w.Close())
		good := b.Bytes()
		got, err := Pipeline{{ID: Deflate}}.Decode(good, 0, len(data))
		require.NoError(t, err)
		require.Equal(t, data, got)
		at := []int{len(good) - 1, len(good) - 4} // the checksum's bytes
		if level == zlib.NoCompression {
			at = append(at, 2+5+100) // a data byte of the stored block
		}
		for _, i := range at {
			bad := bytes.Clone(good)
			bad[i] ^= 0x10
			for _, size := range []int{len(data), len(data) + 100} { // the chunk's size, or a stream shorter than the chunk
				_, err := Pipeline{{ID: Deflate}}.Decode(bad, 0, size)
				require.ErrorIs(t, err, errs.Format, "level %d, byte %d", level, i)
				assert.ErrorContains(t, err, "HDF5 filter deflate: Adler-32 checksum mismatch: the chunk is corrupt")
			}
		}
		_, err = Pipeline{{ID: Deflate}}.Decode(good[:len(good)-2], 0, len(data))
		require.ErrorIs(t, err, errs.Format)
		assert.ErrorContains(t, err, "the stream is cut short")
	}
}

func TestFletcher32Corrupt(t *testing.T) {
	data := []byte("0123456789abcdefg")
	sum := Fletcher32Sum(data)
	chunk := binary.LittleEndian.AppendUint32(append([]byte(nil), data...), sum)
	p := Pipeline{{ID: Fletcher32}}
	got, err := p.Decode(chunk, 0, len(data))
	require.NoError(t, err)
	assert.Equal(t, data, got)
	chunk[3] ^= 1
	_, err = p.Decode(chunk, 0, len(data))
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "fletcher32: checksum mismatch")
	// The mask skips the filter: the chunk is taken as it is, and is then of the wrong size.
	_, err = p.Decode(chunk, 1, len(data))
	assert.ErrorContains(t, err, "decoded chunk has 21 bytes, want 17")
}

// TestStageBuffersNotShared decodes chunks whose last stage returns its input (a
// Fletcher-32 checksum after deflate): each result stays the caller's, not a buffer that
// a later chunk's decoding reuses.
func TestStageBuffersNotShared(t *testing.T) {
	p := Pipeline{{ID: Fletcher32}, {ID: Deflate}}
	chunk := func(data []byte) []byte {
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		_, _ = w.Write(binary.LittleEndian.AppendUint32(append([]byte(nil), data...), Fletcher32Sum(data)))
		require.NoError(t, w.Close())
		return b.Bytes()
	}
	var got [][]byte
	for i := range 4 {
		out, err := p.Decode(chunk(bytes.Repeat([]byte{byte(i)}, 64)), 0, 64)
		require.NoError(t, err)
		got = append(got, out)
	}
	dst := make([]byte, 64)
	_, err := p.DecodeInto(dst, chunk(bytes.Repeat([]byte{9}, 64)), 0, 64)
	require.NoError(t, err)
	for i, out := range got {
		assert.Equal(t, bytes.Repeat([]byte{byte(i)}, 64), out, "chunk %d", i)
	}
	assert.Equal(t, bytes.Repeat([]byte{9}, 64), dst)
}

func TestDeflateBeyondChunk(t *testing.T) {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	_, _ = w.Write(make([]byte, 1<<20))
	require.NoError(t, w.Close())
	_, err := Pipeline{{ID: Deflate}}.Decode(b.Bytes(), 0, 4096)
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "more than the chunk's 4096 bytes")
}

// lzfCompress is a plain LZF encoder (liblzf's format: the longest match in the 8 KiB
// window, found by search, where lzf_c.c hashes), for round trips through decodeLZF.
func lzfCompress(in []byte) []byte {
	var out, lit []byte
	flush := func() {
		for len(lit) > 0 {
			n := min(len(lit), 32)
			out = append(append(out, byte(n-1)), lit[:n]...)
			lit = lit[n:]
		}
	}
	for i := 0; i < len(in); {
		best, off := 0, 0
		for j := max(0, i-8192); j < i; j++ {
			n := 0
			for n < 264 && i+n < len(in) && in[j+n] == in[i+n] {
				n++
			}
			if n > best {
				best, off = n, i-j-1
			}
		}
		if best < 3 {
			lit = append(lit, in[i])
			i++
			continue
		}
		flush()
		if l := best - 2; l < 7 {
			out = append(out, byte(l<<5|off>>8), byte(off))
		} else {
			out = append(out, byte(7<<5|off>>8), byte(l-7), byte(off))
		}
		i += best
	}
	flush()
	return out
}

// TestLZF decodes LZF streams: literal runs, back references short and long, overlapping
// their output (runs of a repeated byte); and refuses streams that decode to more than
// the chunk, refer before its start or are cut off, naming the byte.
func TestLZF(t *testing.T) {
	data := append(bytes.Repeat([]byte{7}, 1000), []byte("abcabcabcabd 0123456789 abcabcabc")...)
	data = append(data, data[:300]...)
	stream := lzfCompress(data)
	require.Less(t, len(stream), len(data)/4)
	p := Pipeline{{ID: LZF, Values: []uint32{4, 1, uint32(len(data))}}}
	require.NoError(t, p.Check())
	got, err := p.Decode(stream, 0, len(data))
	require.NoError(t, err)
	require.Equal(t, data, got)
	for _, c := range []struct {
		stream []byte
		size   int
		err    string
	}{
		{stream, len(data) - 1, fmt.Sprintf("HDF5 filter lzf: the stream decodes to more than the chunk's %d bytes", len(data)-1)},
		{[]byte{2, 'a', 'b', 'c', 0x20, 3}, 10, "back reference at byte 4 points 4 bytes back, before the start of the chunk (at decoded byte 3)"},
		{[]byte{4, 'a', 'b'}, 10, "literal run of 5 bytes at byte 0 runs past the 3 bytes stored"},
		{[]byte{0, 'a', 0xe0}, 10, "back reference at byte 2 cut off by the end of the 3 bytes stored"},
		{[]byte{0, 'a', 0x20}, 10, "back reference at byte 2 cut off by the end of the 3 bytes stored"},
		{[]byte{0, 'a', 0xe0, 255, 0}, 100, "the stream decodes to more than the chunk's 100 bytes"},
		{[]byte{2, 'a', 'b', 'c'}, 4, "HDF5 filters lzf: the decoded chunk has 3 bytes, want 4"},
	} {
		_, err := Pipeline{{ID: LZF}}.Decode(c.stream, 0, c.size)
		require.ErrorIs(t, err, errs.Format, "%x", c.stream)
		assert.ErrorContains(t, err, c.err)
	}
}

func TestHeaderSizesBounded(t *testing.T) {
	for _, p := range []Pipeline{{{ID: LZ4}}, {{ID: Bitshuffle, Values: []uint32{0, 0, 2, 0, 2}}}} {
		hdr := binary.BigEndian.AppendUint64(nil, 1<<40)
		hdr = binary.BigEndian.AppendUint32(hdr, 8192)
		_, err := p.Decode(hdr, 0, 1024)
		require.ErrorIs(t, err, errs.Format)
		assert.Contains(t, err.Error(), "header size 1099511627776 is more than the chunk's 1024 bytes")
	}
}

func TestCheckNamesUnsupported(t *testing.T) {
	assert.ErrorContains(t, Pipeline{{ID: Deflate}, {ID: 32001}}.Check(), "filter 32001 has no Go decoder")
	assert.ErrorContains(t, Pipeline{{ID: Bitshuffle, Values: []uint32{0, 4, 2, 0, 3}}}.Check(), "bitshuffle-zstd is not decoded in Go")
	assert.NoError(t, Pipeline{{ID: Shuffle, Values: []uint32{2}}, {ID: Deflate, Values: []uint32{4}}, {ID: Fletcher32}}.Check())
}

func TestTranspose8x8(t *testing.T) {
	for _, x := range []uint64{1, 0x8000000000000000, 0x0123456789abcdef, 0xff} {
		want := uint64(0)
		for r := range 8 {
			for c := range 8 {
				if x>>(8*r+c)&1 != 0 {
					want |= 1 << (8*c + r)
				}
			}
		}
		assert.Equal(t, want, transpose8x8(x), "%#x", x)
	}
}

// TestUntransposeBits checks the bit transposition, with the AVX2 kernels where the CPU
// has them and in Go, against its definition taken bit by bit, on blocks of 8 to 8200
// elements (the kernels' 32-byte groups, and the bytes after them) of 1 to 8 bytes.
func TestUntransposeBits(t *testing.T) {
	paths := []bool{false}
	if haveAVX2 {
		paths = append(paths, true)
	}
	defer func(h bool) { haveAVX2 = h }(haveAVX2)
	for _, avx2 := range paths {
		haveAVX2 = avx2
		for _, elem := range []int{1, 2, 3, 4, 8} {
			for _, rows := range []int{1, 31, 32, 33, 95, 512, 1025} {
				in := make([]byte, 8*rows*elem)
				for i := range in {
					in[i] = byte(i*2654435761>>13) ^ byte(i>>9)
				}
				want := make([]byte, len(in))
				m := 8 * rows
				for i := range m {
					for j := range elem {
						for k := range 8 {
							row := in[(8*j+k)*rows:]
							want[i*elem+j] |= (row[i/8] >> (i % 8) & 1) << k
						}
					}
				}
				got := bytes.Repeat([]byte{0xA5}, len(in))
				untransposeBits(in, got, make([]byte, len(in)), elem)
				require.Equal(t, want, got, "avx2=%v elem=%d rows=%d", avx2, elem, rows)
			}
		}
	}
}

// TestUnshuffle checks HDF5's unshuffle, with the AVX2 kernels where the CPU has them
// and in Go, against its definition on planes of 1 to 200 elements and a tail.
func TestUnshuffle(t *testing.T) {
	paths := []bool{false}
	if haveAVX2 {
		paths = append(paths, true)
	}
	defer func(h bool) { haveAVX2 = h }(haveAVX2)
	for _, avx2 := range paths {
		haveAVX2 = avx2
		for _, size := range []int{2, 3, 4} {
			for _, n := range []int{1, 31, 32, 33, 64, 200} {
				in := make([]byte, n*size+size-1)
				for i := range in {
					in[i] = byte(i*40503) ^ byte(i>>8)
				}
				want := make([]byte, len(in))
				for i := range n {
					for j := range size {
						want[i*size+j] = in[j*n+i]
					}
				}
				copy(want[n*size:], in[n*size:])
				got := make([]byte, len(in))
				unshuffle(got, in, size)
				require.Equal(t, want, got, "avx2=%v size=%d n=%d", avx2, size, n)
			}
		}
	}
}

// FuzzDecode runs every decoder on arbitrary chunks: errors, never panics, and never
// more than the chunk's bytes.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x08\x00\x00\x00\x08abcdefgh\x00\x00\x00\x08ijklmnop"), uint8(3), uint16(16))
	f.Add([]byte("\x78\x9c\x63\x60\x00\x00\x00\x02\x00\x01"), uint8(0), uint16(2))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x20\x00\x00\x00\x05\x40\x00\x01\x00\x00"), uint8(4), uint16(16))
	pipelines := []Pipeline{
		{{ID: Deflate}}, {{ID: Shuffle, Values: []uint32{2}}, {ID: Deflate}}, {{ID: Fletcher32}},
		{{ID: LZ4}}, {{ID: Bitshuffle, Values: []uint32{0, 0, 2, 0, 2}}}, {{ID: Bitshuffle, Values: []uint32{0, 0, 4, 16, 0}}},
		{{ID: Shuffle, Values: []uint32{4}}, {ID: Deflate}, {ID: Fletcher32}},
		{{ID: Bitshuffle, Values: []uint32{0, 0, 2, 0, 0}}}, // blocks of 4096 elements: the AVX2 kernels
		{{ID: LZF}}, {{ID: Shuffle, Values: []uint32{2}}, {ID: LZF}, {ID: Fletcher32}},
	}
	f.Add(bytes.Repeat([]byte("\x01\x80\x00\xff"), 300), uint8(7), uint16(1200))
	f.Add([]byte("\x02abc\xe0\xff\x02\x01xy"), uint8(8), uint16(300))
	f.Fuzz(func(t *testing.T, chunk []byte, which uint8, size uint16) {
		p := pipelines[int(which)%len(pipelines)]
		out, err := p.Decode(chunk, 0, int(size))
		if err == nil && len(out) != int(size) {
			t.Fatalf("decoded %d bytes, want %d", len(out), size)
		}
		if err != nil && errs.KindOf(err) != errs.Format {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

// FuzzChecksums encodes arbitrary data with the filters that carry a checksum or decode
// in Go from a format without one (zlib stored blocks, Fletcher-32, LZF), checks that it
// decodes back, that decoding into a chunk a byte smaller is refused (bounded
// inflation), and that one altered byte of the data under a checksum is always found:
// zlib's Adler-32 and Fletcher-32 sums change with any single byte (Fletcher-32 also
// accepts the byte-swapped sum of HDF5 before 1.6.3, which is then the only way through).
func FuzzChecksums(f *testing.F) {
	f.Add([]byte("0123456789abcdefghij"), uint16(3), byte(1))
	f.Add(bytes.Repeat([]byte{0xff, 0}, 200), uint16(399), byte(0x80))
	f.Fuzz(func(t *testing.T, data []byte, at uint16, flip byte) {
		if len(data) == 0 || len(data) > 4096 || flip == 0 {
			return
		}
		i := int(at) % len(data)
		var b bytes.Buffer
		w, _ := zlib.NewWriterLevel(&b, zlib.NoCompression)
		_, _ = w.Write(data)
		require.NoError(t, w.Close())
		z := b.Bytes()
		require.Equal(t, data, z[7:7+len(data)], "one stored block after the 2-byte zlib header and its 5-byte block header")
		fletcher := binary.LittleEndian.AppendUint32(bytes.Clone(data), Fletcher32Sum(data))
		for _, c := range []struct {
			p      Pipeline
			stream []byte
			at     int // where data[i] is in the stream (-1: no checksum covers it)
		}{
			{Pipeline{{ID: Deflate}}, z, 7 + i},
			{Pipeline{{ID: Fletcher32}}, fletcher, i},
			{Pipeline{{ID: LZF}}, lzfCompress(data), -1},
		} {
			got, err := c.p.Decode(c.stream, 0, len(data))
			require.NoError(t, err, "%v", c.p)
			require.Equal(t, data, got, "%v", c.p)
			if c.p[0].ID != Fletcher32 { // Fletcher-32 does not decode: it checks
				_, err = c.p.Decode(c.stream, 0, len(data)-1)
				require.ErrorIs(t, err, errs.Format, "%v decoded into a smaller chunk", c.p)
			}
			if c.at < 0 {
				continue
			}
			bad := bytes.Clone(c.stream)
			bad[c.at] ^= flip
			_, err = c.p.Decode(bad, 0, len(data))
			if err == nil && c.p[0].ID == Fletcher32 {
				sum := Fletcher32Sum(bad[:len(data)])
				require.Equal(t, binary.LittleEndian.Uint32(bad[len(data):]), (sum&0x00ff00ff)<<8|(sum&0xff00ff00)>>8, "a changed byte passed Fletcher-32")
				continue
			}
			require.ErrorIs(t, err, errs.Format, "%v: byte %d changed by %#x", c.p, c.at, flip)
		}
	})
}

// BenchmarkUntransposeBits undoes bitshuffle's bit transposition of a 256×256 frame
// of uint16 and uint32 (bytes/s of decoded frame): dense values (every bit row set),
// and counts below 8 (only the 3 low bit rows of the first byte set, as a counting
// detector's sparse frames are).
func BenchmarkUntransposeBits(b *testing.B) {
	for _, elem := range []int{2, 4} {
		for _, counts := range []bool{false, true} {
			b.Run(fmt.Sprintf("elem=%d/counts=%v", elem, counts), func(b *testing.B) {
				in := make([]byte, 256*256*elem)
				block := 8192 / elem * elem
				rows := block / elem / 8
				for i := range in {
					if !counts || i%block < 3*rows {
						in[i] = byte(i * 7919 >> 3)
					}
				}
				out, scratch := make([]byte, len(in)), make([]byte, block)
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					for off := 0; off < len(in); off += block {
						untransposeBits(in[off:off+block], out[off:off+block], scratch, elem)
					}
				}
			})
		}
	}
}
