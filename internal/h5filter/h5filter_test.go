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
	require.Len(t, meta, 13)
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
	}
	f.Add(bytes.Repeat([]byte("\x01\x80\x00\xff"), 300), uint8(7), uint16(1200))
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
