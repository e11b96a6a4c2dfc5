package dectris

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// v2Sender is a stream v2 sender written from DECTRIS's public specs
// (stream_v2/README.md, cbor/dectris-compression-tag.md) with cbor2, pyzmq and
// python-lz4; its bitshuffle is numpy's bit unpacking, not stemdot's. Every blob it
// builds is first checked against DECTRIS's own codec (dectris-compression). It sends a
// series of 5 uint16 frames of 37×41 on two channels: frame 0 uncompressed, frame 1
// "lz4", the others "bslz4", a pixel mask flagging pixel (3, 7) of threshold_1, then
// writes the frames a receiver must decode (the mask applied) to OUT.threshold_N.
const v2Sender = `
import sys, struct, numpy as np, zmq, cbor2, lz4.block
from dectris.compression import decompress
out = sys.argv[1]
rng = np.random.default_rng(5)
f1 = (rng.poisson(2, (5, 37, 41)) * (rng.random((5, 37, 41)) < 0.4)).astype("<u2")
f1[:, 3, 7] = 65535   # flagged in the mask: reads 0
f1[:, 10, 20] = 65535  # saturated, not flagged: keeps its value
f2 = (f1 // 2 + 1).astype("<u2")
mask = np.zeros((37, 41), "<u4"); mask[3, 7] = 1

def bslz4(a, elem):  # bitshuffle-LZ4 in the HDF5 filter's framing (bshuf_h5filter.c)
    raw = a.tobytes(); n = len(raw) // elem
    bs = max(8192 // elem // 8 * 8, 128)
    b = np.frombuffer(raw, np.uint8).reshape(n, elem)
    parts = [struct.pack(">QI", len(raw), bs * elem)]
    off = 0
    while off + 8 <= n:
        m = min(bs, (n - off) // 8 * 8)
        blk = b[off:off + m]
        rows = [np.packbits(np.unpackbits(blk[:, j:j + 1], axis=1, bitorder="little").T, axis=1, bitorder="little") for j in range(elem)]
        c = lz4.block.compress(np.concatenate(rows).tobytes(), store_size=False)
        parts.append(struct.pack(">I", len(c)) + c)
        off += m
    parts.append(b[off:].tobytes())
    return b"".join(parts)

def lz4h5(a):  # the HDF5 LZ4 filter's framing: one block
    raw = a.tobytes(); c = lz4.block.compress(raw, store_size=False)
    return struct.pack(">QI", len(raw), len(raw)) + struct.pack(">I", len(c)) + c

def arr(a, i):
    if i == 0:
        data = a.tobytes()
    elif i == 1:
        blob = lz4h5(a); assert decompress(blob, "lz4") == a.tobytes()
        data = cbor2.CBORTag(56500, ["lz4", 0, blob])
    else:
        blob = bslz4(a, 2); assert decompress(blob, "bslz4", elem_size=2) == a.tobytes()
        data = cbor2.CBORTag(56500, ["bslz4", 2, blob])
    return cbor2.CBORTag(40, [list(a.shape), cbor2.CBORTag(69, data)])

ctx = zmq.Context(); s = ctx.socket(zmq.PUSH)
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
s.send(cbor2.dumps({"type": "image", "series_id": 6, "image_id": 3, "data": {}}))  # the last series' tail
s.send(cbor2.dumps({"type": "start", "series_id": 7, "series_unique_id": "u7",
    "arm_date": cbor2.CBORTag(0, "2024-01-01T00:00:00Z"), "channels": ["threshold_1", "threshold_2"],
    "image_dtype": "uint16", "image_size_x": 41, "image_size_y": 37, "number_of_images": 5,
    "detector_description": "sender of the test", "pixel_mask_enabled": True,
    "pixel_mask": {"threshold_1": cbor2.CBORTag(40, [[37, 41], cbor2.CBORTag(70, mask.tobytes())]),
                   "threshold_2": cbor2.CBORTag(40, [[37, 41], cbor2.CBORTag(70, np.zeros_like(mask).tobytes())])}}))
for i in range(5):
    s.send(cbor2.dumps({"type": "image", "series_id": 7, "series_unique_id": "u7", "image_id": i,
        "real_time": [1, 1000], "start_time": [i, 1000], "stop_time": [i + 1, 1000],
        "data": {"threshold_1": arr(f1[i], i), "threshold_2": arr(f2[i], i)}}))
s.send(cbor2.dumps({"type": "end", "series_id": 7, "series_unique_id": "u7"}))
w1 = f1.copy(); w1[:, 3, 7] = 0
w1.tofile(out + ".threshold_1"); f2.tofile(out + ".threshold_2")
s.close(linger=10000)
`

// TestV2AgainstPythonSender receives stream v2 from v2Sender, on its first channel and
// on the one option Channel names, and compares every frame with what it wrote.
func TestV2AgainstPythonSender(t *testing.T) {
	py := testfiles.Python(t, "numpy", "zmq", "cbor2", "lz4.block", "dectris.compression")
	for _, ch := range []string{"", "threshold_2"} {
		t.Run("channel "+ch, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "want")
			cmd := exec.Command(py, "-c", v2Sender, out)
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			defer cmd.Wait()
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := New(Options{Stream: "127.0.0.1:" + strings.TrimSpace(line), Protocol: V2, Channel: ch})
			require.NoError(t, err)
			defer r.Close()
			h, got, err := receiveAll(t, ctx, r)
			require.ErrorIs(t, err, io.EOF)
			assert.Equal(t, "dectris stream v2 (sender of the test)", h.Detector)
			assert.Equal(t, [2]int{37, 41}, h.SigShape)
			require.NoError(t, cmd.Wait())
			name := map[string]string{"": "threshold_1"}[ch]
			if name == "" {
				name = ch
			}
			want, err := os.ReadFile(out + "." + name)
			require.NoError(t, err)
			fb := h.FrameBytes()
			require.Len(t, got, 5)
			for i := range 5 {
				require.Equal(t, want[i*fb:(i+1)*fb], got[i], "frame %d", i)
			}
		})
	}
}

// TestEncoderAgainstDECTRIS decodes EncodeBSLZ4's blobs with DECTRIS's own codec
// (dectris-compression): 1-, 2- and 4-byte elements, frames with a tail of n mod 8
// elements and a last short block, sparse counts and incompressible noise.
func TestEncoderAgainstDECTRIS(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(8, 9))
	var cases []string
	for _, elem := range []int{1, 2, 4} {
		for _, n := range []int{8, 13, 4096 + 3, 192 * 192, 96*96 + 7} {
			for _, noise := range []bool{false, true} {
				raw := make([]byte, n*elem)
				for i := range raw {
					if noise || rng.IntN(9) == 0 {
						raw[i] = byte(rng.Uint32())
					}
				}
				name := fmt.Sprintf("e%d_n%d_%v", elem, n, noise)
				require.NoError(t, os.WriteFile(filepath.Join(dir, name+".raw"), raw, 0o644))
				require.NoError(t, os.WriteFile(filepath.Join(dir, name+".bslz4"), h5filter.EncodeBSLZ4(nil, raw, elem), 0o644))
				cases = append(cases, fmt.Sprintf("%s:%d", name, elem))
			}
		}
	}
	out := testfiles.RunPython(t, `
import sys, os
from dectris.compression import decompress
d = sys.argv[1]
for c in sys.argv[2:]:
    name, elem = c.split(":")
    raw = open(os.path.join(d, name + ".raw"), "rb").read()
    got = decompress(open(os.path.join(d, name + ".bslz4"), "rb").read(), "bslz4", elem_size=int(elem))
    print(name, "ok" if got == raw else "DIFFERS")
`, []string{"dectris.compression"}, append([]string{dir}, cases...)...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(cases))
	for _, l := range lines {
		assert.True(t, strings.HasSuffix(l, " ok"), l)
	}
}
