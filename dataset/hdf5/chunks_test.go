//go:build !nohdf5

package hdf5_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// chunkFiles writes one HDF5 file per case with h5py (hdf5plugin's filters for LZ4 and
// bitshuffle), and beside each the frames as h5py reads them (the independent
// reference: libhdf5 and the filters' C code), in host byte order.
const chunkFiles = `
import sys, os
import numpy as np, h5py, hdf5plugin
d = sys.argv[1]
rng = np.random.default_rng(194)
def frames(dtype, shape):
    x = rng.poisson(2, shape) * (rng.random(shape) < 0.4)
    return (x + rng.integers(0, 3, shape) * 1000).astype(dtype)
cases = {
    # name: (data, chunks, filters, fill value, frames left unwritten)
    "gzip": (frames("<u2", (6, 5, 16, 20)), (1, 1, 16, 20), dict(compression="gzip"), None, None),
    "shuffle_gzip_edges": (frames(">u2", (7, 5, 16, 20)), (2, 3, 16, 20), dict(compression="gzip", shuffle=True), None, None),
    "shuffle_gzip_fletcher_split": (frames("<i4", (4, 3, 15, 19)), (1, 2, 8, 10), dict(compression="gzip", shuffle=True, fletcher32=True), None, None),
    "fletcher_split": (frames("<u2", (4, 3, 15, 19)), (1, 2, 8, 10), dict(fletcher32=True), None, None),
    "float32be_shuffle_gzip": (frames(">f4", (5, 4, 12, 10)), (1, 4, 12, 10), dict(compression="gzip", shuffle=True), None, None),
    "lz4": (frames("<u4", (3, 4, 24, 24)), (1, 1, 24, 24), dict(**hdf5plugin.LZ4(nbytes=1000)), None, None),
    "bslz4_stack": (frames("<u4", (20, 30, 34)), (1, 30, 34), dict(**hdf5plugin.Bitshuffle(cname="lz4")), None, None),
    "bslz4_blocks_of_frames": (frames("<u2", (5, 6, 20, 22)), (3, 2, 20, 22), dict(**hdf5plugin.Bitshuffle(cname="lz4")), None, None),
    "gzip_unwritten": (frames("<u2", (4, 6, 10, 12)), (1, 2, 10, 12), dict(compression="gzip"), 7, [(1, slice(2, 6)), (3, slice(0, 2))]),
    "bslz4_userblock": (frames("<u2", (3, 4, 16, 16)), (1, 1, 16, 16), dict(**hdf5plugin.Bitshuffle(cname="lz4")), None, None),
    "lzf": (frames("<u2", (5, 4, 16, 20)), (1, 2, 16, 20), dict(compression="lzf"), None, None),
    "shuffle_lzf_split": (frames(">i4", (3, 4, 15, 19)), (2, 1, 8, 10), dict(compression="lzf", shuffle=True), None, None),
    # chunks LZF cannot shrink are stored unfiltered (h5py's LZF is optional)
    "lzf_incompressible": (rng.integers(0, 65536, (3, 4, 16, 16)).astype("<u2"), (1, 1, 16, 16), dict(compression="lzf"), None, None),
}
for name, (data, chunks, kw, fill, holes) in cases.items():
    with h5py.File(os.path.join(d, name + ".h5"), "w", userblock_size=1024 if "userblock" in name else 0) as f:
        ds = f.create_dataset("/entry/data", shape=data.shape, dtype=data.dtype, chunks=chunks, fillvalue=fill, **kw)
        if holes:
            for y in range(data.shape[0]):
                cut = [s for r, s in holes if r == y]
                if cut:
                    keep = np.ones(data.shape[1], bool)
                    keep[cut[0]] = False
                    for x in np.flatnonzero(keep):
                        ds[y, x] = data[y, x]
                else:
                    ds[y] = data[y]
        else:
            ds[...] = data
    with h5py.File(os.path.join(d, name + ".h5"), "r") as f:
        ref = f["/entry/data"][()]
    ref.astype(ref.dtype.newbyteorder("=")).tofile(os.path.join(d, name + ".ref"))
`

// TestHDF5ChunksDecodedInGo reads datasets of every filter with a Go decoder, their
// chunks holding several frames, splitting frames, cut by the extent and never
// written, in a file with a user block (HDF5 addresses start after it), and compares
// the frames with h5py's, bit for bit, over tiles of several sizes, the chunks' bytes
// read at their addresses in the chunk index read from the file, and through libhdf5
// under the lock. No filter plugin is given to libhdf5: LZF, LZ4 and bitshuffle are
// decoded in Go.
func TestHDF5ChunksDecodedInGo(t *testing.T) {
	dir := t.TempDir()
	testfiles.RunPython(t, chunkFiles, []string{"numpy", "h5py", "hdf5plugin"}, dir)
	t.Setenv("HDF5_PLUGIN_PATH", filepath.Join(dir, "no-plugins-here"))
	names, err := filepath.Glob(filepath.Join(dir, "*.h5"))
	require.NoError(t, err)
	require.Len(t, names, 13)
	for _, path := range names {
		for _, index := range []bool{true, false} {
			name := strings.TrimSuffix(filepath.Base(path), ".h5")
			t.Run(fmt.Sprintf("%s/index=%v", name, index), func(t *testing.T) {
				want, err := os.ReadFile(strings.TrimSuffix(path, ".h5") + ".ref")
				require.NoError(t, err)
				defer hdf5.ReadChunkIndex(index)()
				d, err := dataset.Open(path, dataset.Options{AllowFill: name == "gzip_unwritten"})
				require.NoError(t, err)
				defer d.Close()
				fb := d.FrameBytes()
				require.Equal(t, len(want), d.NumFrames()*fb)
				for _, tile := range []int{1, 3, 7, d.NumFrames()} {
					got := make([]byte, len(want))
					for start := 0; start < d.NumFrames(); start += tile {
						end := min(start+tile, d.NumFrames())
						require.NoError(t, d.ReadFrames(start, end, got[start*fb:end*fb]))
					}
					require.True(t, string(got) == string(want), "tiles of %d frames differ from h5py's", tile)
				}
				// Random ranges read by two workers at once (chunks decoded by both, some
				// from the cache of decoded chunks).
				var wg sync.WaitGroup
				for w := range 2 {
					rng := rand.New(rand.NewPCG(19, uint64(w)))
					wg.Go(func() {
						for range 20 {
							start := rng.IntN(d.NumFrames())
							end := start + 1 + rng.IntN(d.NumFrames()-start)
							got := make([]byte, (end-start)*fb)
							assert.NoError(t, d.ReadFrames(start, end, got))
							assert.True(t, string(got) == string(want[start*fb:end*fb]), "frames [%d, %d)", start, end)
						}
					})
				}
				wg.Wait()
				if name == "gzip_unwritten" {
					assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "read as the fill value 7")
				}
				if index {
					assert.Zero(t, hdf5.LockedNanos(d), "no chunk read under the lock")
				} else {
					assert.Positive(t, hdf5.LockedNanos(d), "chunks read under the lock")
				}
			})
		}
	}
}

// badChunks writes datasets of 2×2 frames of 16×16 uint16, one chunk per frame, with h5py
// (the raw stream of one chunk written by write_direct_chunk), and prints the names of
// those h5py reads: gzip level 0 (stored blocks) with a flipped data byte in the chunk
// of frame 2 (../shared/cases/62-hdf5-deflate-corrupt: zlib's Adler-32 no longer
// matches), its checksum's bytes changed (h5py refuses both), a zlib stream and an LZF
// stream of more bytes than the chunk holds (libhdf5 grows its buffer and keeps the
// chunk's first bytes).
const badChunks = `
import sys, os, zlib
import numpy as np, h5py
d = sys.argv[1]
data = np.arange(2 * 2 * 16 * 16, dtype="<u2").reshape(2, 2, 16, 16)
for name, kw in {"flipped": dict(compression="gzip", compression_opts=0), "checksum": dict(compression="gzip"),
                 "too_long": dict(compression="gzip"), "lzf_too_long": dict(compression="lzf")}.items():
    path = os.path.join(d, name + ".h5")
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", data=data, chunks=(1, 1, 16, 16), **kw)
        if name == "too_long":
            ds.id.write_direct_chunk((1, 0, 0, 0), zlib.compress(np.zeros(16 * 16 + 8, "<u2").tobytes()))
        if name == "lzf_too_long":  # 8 literal runs of 32 bytes, then 100 bytes more: 356 bytes of a 512-byte chunk
            ds.id.write_direct_chunk((1, 0, 0, 0), (b"\x1f" + bytes(32)) * 16 + b"\x1f" + bytes(32))
        info = ds.id.get_chunk_info_by_coord((1, 0, 0, 0))
    if name in ("flipped", "checksum"):
        b = bytearray(open(path, "rb").read())
        b[info.byte_offset + (2 + 5 + 100 if name == "flipped" else info.size - 2)] ^= 0xFF
        open(path, "wb").write(b)
    try:
        h5py.File(path, "r")["data"][()]
        print(name, "read by h5py")
    except OSError:
        pass
`

// TestHDF5CorruptChunk reads chunks that h5py refuses, decoded in Go: a format error
// naming the dataset, the chunk and the frame it holds and why (the checksum, the size),
// never the altered bytes as frames; the other frames read as h5py reads them.
func TestHDF5CorruptChunk(t *testing.T) {
	dir := t.TempDir()
	out := string(testfiles.RunPython(t, badChunks, []string{"numpy", "h5py"}, dir))
	require.NotContains(t, out, "flipped", "h5py refuses a chunk whose Adler-32 does not match")
	require.NotContains(t, out, "checksum", "h5py refuses a chunk whose Adler-32 does not match")
	for name, why := range map[string]string{
		"flipped":      "HDF5 filter deflate: Adler-32 checksum mismatch: the chunk is corrupt",
		"checksum":     "HDF5 filter deflate: Adler-32 checksum mismatch: the chunk is corrupt",
		"too_long":     "HDF5 filter deflate: the stream decodes to more than the chunk's 512 bytes",
		"lzf_too_long": "HDF5 filter lzf: the stream decodes to more than the chunk's 512 bytes",
	} {
		path := filepath.Join(dir, name+".h5")
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, name)
		fb := d.FrameBytes()
		buf := make([]byte, 4*fb)
		err = d.ReadFrames(0, 4, buf)
		require.ErrorIs(t, err, errs.Format, name)
		assert.EqualError(t, err, fmt.Sprintf("dataset: %s: frames [0, 4): dataset /data, chunk at (1, 0, 0, 0) (frame 2): %s", path, why), name)
		require.NoError(t, d.ReadFrames(0, 2, buf[:2*fb]), name)
		for i := range 2 * 16 * 16 {
			require.Equal(t, uint16(i), binary.NativeEndian.Uint16(buf[2*i:]), name)
		}
		require.NoError(t, d.Close())
	}
}

// TestHDF5ChunksShrunkFile reads a compressed file cut to half its size after it was
// opened: the read of the chunks beyond the end is an I/O error saying so, whether their
// bytes are read at their addresses in the chunk index or through libhdf5.
func TestHDF5ChunksShrunkFile(t *testing.T) {
	for _, index := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "cut.h5")
		testfiles.RunPython(t, `
import sys, numpy as np, h5py
x = np.random.default_rng(3).integers(0, 60000, (16, 32, 32)).astype("<u2")
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("/data", data=x, chunks=(1, 32, 32), compression="gzip", shuffle=True)
`, []string{"numpy", "h5py"}, path)
		restore := hdf5.ReadChunkIndex(index)
		d, err := dataset.Open(path, dataset.Options{})
		restore()
		require.NoError(t, err)
		defer d.Close()
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, st.Size()/2))
		err = d.ReadFrames(0, d.NumFrames(), make([]byte, d.NumFrames()*d.FrameBytes()))
		require.ErrorIs(t, err, errs.IO, "index %v", index)
		assert.ErrorContains(t, err, "did the file shrink?", "index %v", index)
	}
}

// benchFiles writes a 4-D scan of 256×256 uint16 frames (sparse counts, as a counting
// detector records them) gzip-compressed and bitshuffle-LZ4-compressed, one frame per
// chunk.
const benchFiles = `
import sys, os
import numpy as np, h5py, hdf5plugin
d = sys.argv[1]
rng = np.random.default_rng(1)
data = (rng.poisson(0.6, (8, 32, 256, 256)) * 3).astype("<u2")
for name, kw in {"gzip": dict(compression="gzip", shuffle=True), "bslz4": dict(**hdf5plugin.Bitshuffle(cname="lz4"))}.items():
    with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
        f.create_dataset("/entry/data", data=data, chunks=(1, 1, 256, 256), **kw)
`

// BenchmarkHDF5Compressed reads a gzip and a bitshuffle-LZ4 4-D file in 16-frame tiles
// with 1 and 2 workers (goroutines taking tiles in turn, as the engine's CPU workers
// do): bytes/s of decoded frames. The chunks are decoded in the workers, outside
// libhdf5's lock, so throughput grows with the workers.
func BenchmarkHDF5Compressed(b *testing.B) {
	dir := b.TempDir()
	testfiles.RunPython(b, benchFiles, []string{"numpy", "h5py", "hdf5plugin"}, dir)
	for _, name := range []string{"gzip", "bslz4"} {
		d, err := dataset.Open(filepath.Join(dir, name+".h5"), dataset.Options{})
		require.NoError(b, err)
		const tile = 16
		n, fb := d.NumFrames(), d.FrameBytes()
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				b.SetBytes(int64(n * fb))
				bufs := make([][]byte, workers) // one tile each, reused as a worker's
				for w := range bufs {
					bufs[w] = make([]byte, tile*fb)
				}
				cpu0, locked0 := cpuTime(), hdf5.LockedNanos(d)
				for b.Loop() {
					var wg sync.WaitGroup
					errs := make([]error, workers)
					for w := range workers {
						wg.Go(func() {
							buf := bufs[w]
							for start := w * tile; start < n && errs[w] == nil; start += workers * tile {
								end := min(start+tile, n)
								errs[w] = d.ReadFrames(start, end, buf[:(end-start)*fb])
							}
						})
					}
					wg.Wait()
					require.NoError(b, errors.Join(errs...))
				}
				// CPU time per read of the file: equal for 1 and 2 workers when the
				// decoding runs in parallel without waste, whatever else loads the machine.
				cpu := cpuTime() - cpu0
				b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
				// The part of that CPU time spent under the HDF5 lock, which one worker at
				// a time runs while the other decodes: 2 workers read at most min(2, 1/s)
				// times as fast as one, less the waits for the lock.
				b.ReportMetric(100*float64(hdf5.LockedNanos(d)-locked0)/float64(cpu), "locked-%")
			})
		}
		require.NoError(b, d.Close())
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
