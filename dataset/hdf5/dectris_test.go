//go:build !nohdf5

package hdf5_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// dectrisFiles writes DECTRIS-style acquisitions with h5py, as LiberTEM #1544 and
// ../shared/cases/45-dectris-multiblock-master describe them: a master whose
// /entry/data/data_00000k are external links to blocks of 16 frames (uint32,
// bitshuffle-LZ4, one frame per chunk) in acq/, nimages and ntrigger, and a
// pixel_mask flagging 3 pixels; frames carry the marker 2^32-1 at masked pixels and at
// some overflowing ones, and a frame-index marker. A decoy data file of the first
// block's name but other content sits in the parent directory (h5py #860: external
// links must resolve beside the master, not in the working directory). Beside them:
// the frames as numpy computes them with the mask applied (masked pixels 0, overflowing
// ones kept at 2^32-1) and without (every value as recorded), float64, and variants: a
// master with a block missing from the links, one whose second block's file is missing,
// one asking for nimages·ntrigger = 2^64 frames, one of uint16 frames with plain
// storage (its pixel_mask flagging no pixel, or one); and case 60's: uint16 frames of a
// disk whose centre saturates at 65535 on half of the scan, one flagged pixel away from
// it.
const dectrisFiles = `
import sys, os
import numpy as np, h5py, hdf5plugin
d = sys.argv[1]
acq = os.path.join(d, "acq")
os.makedirs(acq)
rng = np.random.default_rng(1544)
H, W, NB, PER = 32, 34, 4, 16
frames = rng.poisson(30, (NB * PER, H, W)).astype(np.uint32)
frames[:, 16, 16] += np.arange(NB * PER, dtype=np.uint32) * 100
mask = np.zeros((H, W), np.uint32)
mask[0, 0] = 1; mask[5, 7] = 2; mask[31, 33] = 8
frames[:, mask != 0] = 2**32 - 1
frames[3, 10, 11] = 2**32 - 1  # overflow in one frame
frames[40, 2, 3] = 2**32 - 1
frames[rng.random(frames.shape) < 0.003] = 2**32 - 1  # and scattered overflows
def master(name, blocks, stem, nimages=1, ntrigger=NB * PER, m=mask):
    with h5py.File(os.path.join(acq, name), "w") as f:
        for b in blocks:
            f["/entry/data/data_%06d" % b] = h5py.ExternalLink("%s_data_%06d.h5" % (stem, b), "/entry/data/data")
        s = "/entry/instrument/detector/detectorSpecific/"
        f[s + "nimages"] = np.uint64(nimages)
        f[s + "ntrigger"] = np.uint64(ntrigger)
        if m is not None:
            f[s + "pixel_mask"] = m
def data(stem, b, x, chunks=None, **kw):
    with h5py.File(os.path.join(acq, "%s_data_%06d.h5" % (stem, b)), "w") as f:
        ds = f.create_dataset("/entry/data/data", data=x, chunks=chunks or (1,) + x.shape[1:], **kw)
        ds.attrs["image_nr_low"] = np.uint64((b - 1) * PER + 1)
        ds.attrs["image_nr_high"] = np.uint64(b * PER)
for b in range(1, NB + 1):
    data("scan", b, frames[(b - 1) * PER:b * PER], **hdf5plugin.Bitshuffle(cname="lz4"))
master("scan_master.h5", range(1, NB + 1), "scan")
# the same frames in chunks of 4 frames, and of half a frame
for stem, chunks in (("four", (4, H, W)), ("half", (1, H // 2, W))):
    for b in range(1, NB + 1):
        data(stem, b, frames[(b - 1) * PER:b * PER], chunks=chunks, **hdf5plugin.Bitshuffle(cname="lz4"))
    master(stem + "_master.h5", range(1, NB + 1), stem)
master("asked_more_master.h5", range(1, NB + 1), "scan", nimages=2)
master("gap_master.h5", [1, 3, 4], "scan")
master("nomask_master.h5", range(1, NB + 1), "scan", m=None)
master("huge_master.h5", range(1, NB + 1), "scan", nimages=4, ntrigger=2**62)
master("lost_master.h5", range(1, 3), "lost")
data("lost", 1, frames[:PER], compression="gzip")
small = (frames[:2 * PER] % 60000).astype(np.uint16)
small[:, 1, 1] = 65535
data("u16", 1, small[:PER]); data("u16", 2, small[PER:])
master("u16_master.h5", [1, 2], "u16", ntrigger=2 * PER, m=np.zeros((H, W), np.uint32))
one = np.zeros((H, W), np.uint32); one[5, 7] = 2
master("u16_one_master.h5", [1, 2], "u16", ntrigger=2 * PER, m=one)
with h5py.File(os.path.join(d, "scan_data_000001.h5"), "w") as f:
    f.create_dataset("/entry/data/data", data=np.full((PER, H, W), 7, np.uint32))
with h5py.File(os.path.join(acq, "scan_master.h5"), "r") as f:
    got = np.concatenate([f["/entry/data/data_%06d" % b][()] for b in range(1, NB + 1)])
assert (got == frames).all()
raw = frames.astype(np.float64)
raw.tofile(os.path.join(d, "unmasked.f64"))
raw[:, mask != 0] = 0
raw.tofile(os.path.join(d, "masked.f64"))
small.astype(np.float64).tofile(os.path.join(d, "u16.f64"))
# the run notes' reference: per frame, the values 2^N-1 that pixel_mask does not flag,
# and all of them (no pixel_mask)
((frames == 2**32 - 1) & (mask == 0)).sum(axis=(1, 2)).astype(np.int64).tofile(os.path.join(d, "saturated.i64"))
(frames == 2**32 - 1).sum(axis=(1, 2)).astype(np.int64).tofile(os.path.join(d, "markers.i64"))
# case 60: 4x4 positions of 32x32 frames, a disk of 2000 counts whose centre overflows
# to 65535 on scan rows 0 and 2, one flagged pixel (2, 30) at the marker
yy, xx = np.mgrid[0:32, 0:32]
sat = np.full((16, 32, 32), 3, np.uint16)
sat[:, (yy - 16) ** 2 + (xx - 16) ** 2 <= 36] = 2000
for i in range(16):
    if (i // 4) % 2 == 0:
        sat[i, (yy - 16) ** 2 + (xx - 16) ** 2 <= 4] = 65535
sat[:, 2, 30] = 65535
m60 = np.zeros((32, 32), np.uint32); m60[2, 30] = 1
with h5py.File(os.path.join(acq, "sat_data_000001.h5"), "w") as f:
    f.create_dataset("/entry/data/data", data=sat, chunks=(1, 32, 32), **hdf5plugin.Bitshuffle(cname="lz4"))
master("sat_master.h5", [1], "sat", ntrigger=16, m=m60)
s = sat.astype(np.float64)
s.tofile(os.path.join(d, "sat_unmasked.f64"))
s[:, 2, 30] = 0
s.tofile(os.path.join(d, "sat.f64"))
`

// readI64 reads an int64 file the reference script wrote.
func readI64(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	v := make([]int64, len(b)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v
}

// wantNote is the run note of the per-frame counts of the frames pos of key and text:
// their sum, and the frames whose count is not 0.
func wantNote(counts []int64, pos []int, key, text string) []dataset.RunNote {
	n := dataset.RunNote{Key: key, Text: text}
	for _, p := range pos {
		n.Count += counts[p]
		if counts[p] > 0 {
			n.Frames++
		}
	}
	return []dataset.RunNote{n}
}

// readConcurrently reads every frame of d as 2 workers do: each its own frames, a few at
// a time, at the same time.
func readConcurrently(t *testing.T, d dataset.Dataset) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		wg.Go(func() {
			buf := make([]byte, 3*d.FrameBytes())
			for f := 3 * w; f < d.NumFrames() && errs[w] == nil; f += 6 {
				errs[w] = d.ReadFrames(f, min(f+3, d.NumFrames()), buf[:(min(f+3, d.NumFrames())-f)*d.FrameBytes()])
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// noteStrings are the sentences of notes.
func noteStrings(notes []dataset.RunNote) []string {
	var s []string
	for _, n := range notes {
		s = append(s, n.String())
	}
	return s
}

// readF64 reads a float64 file the reference script wrote.
func readF64(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return frametest.Decode(b, dataset.Float64)
}

func TestDECTRISMaster(t *testing.T) {
	dir := t.TempDir()
	testfiles.RunPython(t, dectrisFiles, []string{"numpy", "h5py", "hdf5plugin"}, dir)
	t.Setenv("HDF5_PLUGIN_PATH", filepath.Join(dir, "no-plugins-here"))
	t.Chdir(dir) // the decoy block is in the working directory
	master := filepath.Join("acq", "scan_master.h5")

	t.Run("the blocks as one scan, pixel_mask applied", func(t *testing.T) {
		d, err := dataset.Open(master, dataset.Options{NavShape: []int{8, 8}})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, "dectris", d.Format())
		assert.Equal(t, []int{8, 8}, d.NavShape())
		assert.Equal(t, [2]int{32, 34}, d.SigShape())
		assert.Equal(t, dataset.Uint32, d.DType())
		notes := strings.Join(dataset.Notes(d), "\n")
		assert.Contains(t, notes, "the scan is 4 blocks linked from /entry/data: data_000001 to data_000004, 64 frames")
		assert.Contains(t, notes, "pixel_mask applied: the 3 of 1088 pixels it flags read as 0 (option pixel_mask=false keeps their values)")
		assert.Contains(t, notes, "(option pixel_mask=false keeps their values); unflagged pixels at 4294967295 (2^32−1, DECTRIS's marker of masked and of overflowing pixels) are saturated and keep that value")
		assert.NotContains(t, notes, "asked for")
		assert.Equal(t, readF64(t, filepath.Join(dir, "masked.f64")), frametest.Decode(frametest.ReadAll(t, d), d.DType()))
	})
	t.Run("pixel_mask=false keeps the values", func(t *testing.T) {
		d, err := dataset.Open(master, dataset.Options{NavShape: []int{8, 8}, FormatOptions: map[string]string{"pixel_mask": "false"}})
		require.NoError(t, err)
		defer d.Close()
		assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "pixel_mask not applied (option pixel_mask=false): the 3 pixels it flags keep their recorded values")
		assert.Equal(t, readF64(t, filepath.Join(dir, "unmasked.f64")), frametest.Decode(frametest.ReadAll(t, d), d.DType()))
	})
	t.Run("no nav shape: the warning names nav_shape", func(t *testing.T) {
		d, err := dataset.Open(master, dataset.Options{})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, []int{1, 64}, d.NavShape())
		assert.True(t, dataset.NavShapeGuessed(d))
	})
	t.Run("a block read alone through dataset_path is format hdf5", func(t *testing.T) {
		d, err := dataset.Open(master, dataset.Options{DatasetPath: "/entry/data/data_000002"})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, "hdf5", d.Format())
		assert.Equal(t, readF64(t, filepath.Join(dir, "unmasked.f64"))[16*32*34:32*32*34], frametest.Decode(frametest.ReadAll(t, d), d.DType()))
	})
	t.Run("uint16, marker 65535", func(t *testing.T) {
		d, err := dataset.Open(filepath.Join("acq", "u16_master.h5"), dataset.Options{})
		require.NoError(t, err)
		defer d.Close()
		assert.Equal(t, dataset.Uint16, d.DType())
		assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "pixel_mask flags none of the 1088 pixels; unflagged pixels at 65535 (2^16−1, DECTRIS's marker of masked and of overflowing pixels) are saturated and keep that value")
		assert.NotContains(t, strings.Join(dataset.Notes(d), "\n"), "the 0 ")
		assert.Equal(t, readF64(t, filepath.Join(dir, "u16.f64")), frametest.Decode(frametest.ReadAll(t, d), d.DType()))
		assert.Equal(t, []string{"saturated pixels, kept at 65535: pixel values at 65535 (2^16−1) that pixel_mask does not flag, where the detector's count overflowed: 32, in 32 of the frames read"},
			noteStrings(dataset.RunNotes(d, 0, 32)), "pixel (1, 1) of every frame")
	})
	t.Run("a pixel_mask flagging one pixel", func(t *testing.T) {
		for use, want := range map[string]string{
			"true":  "pixel_mask applied: the 1 of 1088 pixels it flags reads as 0 (option pixel_mask=false keeps its value)",
			"false": "pixel_mask not applied (option pixel_mask=false): the 1 pixel it flags keeps its recorded value",
		} {
			d, err := dataset.Open(filepath.Join("acq", "u16_one_master.h5"), dataset.Options{FormatOptions: map[string]string{"pixel_mask": use}})
			require.NoError(t, err)
			assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), want)
			require.NoError(t, d.Close())
		}
	})
	// ../shared/cases/60-dectris-saturated-vs-masked: 2^N−1 marks the pixels pixel_mask
	// flags and the pixels that overflowed; only the flagged ones are invalid, so the
	// saturated centre of the direct beam keeps its counts and the bright field does not
	// drop where the beam saturates.
	t.Run("saturated pixels kept, flagged ones 0", func(t *testing.T) {
		for use, ref := range map[string]string{"true": "sat.f64", "false": "sat_unmasked.f64"} {
			d, err := dataset.Open(filepath.Join("acq", "sat_master.h5"), dataset.Options{NavShape: []int{4, 4}, FormatOptions: map[string]string{"pixel_mask": use}})
			require.NoError(t, err)
			want := readF64(t, filepath.Join(dir, ref))
			got := frametest.Decode(frametest.ReadAll(t, d), d.DType())
			require.Equal(t, want, got, "pixel_mask=%s", use)
			// The bright field (the disk of radius 6) of a saturated position is brighter than
			// an unsaturated one's.
			bf := func(f int) (sum float64) {
				for y := range 32 {
					for x := range 32 {
						if (y-16)*(y-16)+(x-16)*(x-16) <= 36 {
							sum += got[f*32*32+y*32+x]
						}
					}
				}
				return sum
			}
			assert.Greater(t, bf(0), bf(4), "pixel_mask=%s", use)
			notes := strings.Join(dataset.Notes(d), "\n")
			if use == "true" {
				assert.Contains(t, notes, "pixel_mask applied: the 1 of 1024 pixels it flags reads as 0 (option pixel_mask=false keeps its value); unflagged pixels at 65535 (2^16−1, DECTRIS's marker of masked and of overflowing pixels) are saturated and keep that value")
			}
			require.NoError(t, d.Close())
		}
	})
	t.Run("notes: fewer frames than asked, no pixel_mask", func(t *testing.T) {
		d, err := dataset.Open(filepath.Join("acq", "asked_more_master.h5"), dataset.Options{})
		require.NoError(t, err)
		assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "the master asked for 128 frames (nimages 2 × ntrigger 64), its blocks hold 64")
		require.NoError(t, d.Close())
		// nimages 4 × ntrigger 2^62 = 2^64 wraps to 0 in 64 bits: named as too many, not as 0.
		d, err = dataset.Open(filepath.Join("acq", "huge_master.h5"), dataset.Options{})
		require.NoError(t, err)
		assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "the master's nimages 4 × ntrigger 4611686018427387904 is more than 2^64 frames: not a frame count (its blocks hold 64)")
		assert.NotContains(t, strings.Join(dataset.Notes(d), "\n"), "asked for 0 frames")
		require.NoError(t, d.Close())
		d, err = dataset.Open(filepath.Join("acq", "nomask_master.h5"), dataset.Options{})
		require.NoError(t, err)
		assert.Contains(t, strings.Join(dataset.Notes(d), "\n"), "the master has no pixel_mask of the frames' 32×34 pixels (/entry/instrument/detector/detectorSpecific/pixel_mask): no pixel is masked; "+
			"values 4294967295 (2^32−1, DECTRIS's marker of masked and of overflowing pixels) are kept: without a pixel_mask the two cannot be told apart")
		require.NoError(t, d.Close())
	})
	// Issue #33: the unflagged values 2^N−1 (saturated pixels) of the frames read are
	// counted (dataset.RunNoter), against numpy's count of the frames: of a whole scan read
	// by 2 workers at once, again (a second run counts the same, not twice as many), of a
	// frame range and of an ROI; flagged pixels are not counted, also when
	// pixel_mask=false keeps their values; without a pixel_mask every 2^N−1 is.
	t.Run("saturated pixels counted in the frames read", func(t *testing.T) {
		saturated := readI64(t, filepath.Join(dir, "saturated.i64"))
		const text = "saturated pixels, kept at 4294967295: pixel values at 4294967295 (2^32−1) that pixel_mask does not flag, where the detector's count overflowed: {count}, in {frames} of the frames read"
		all := make([]int, 64)
		for i := range all {
			all[i] = i
		}
		// Chunks of one frame, of 4 frames (read 3 frames at a time: some served from the
		// cache of decoded chunks) and of half a frame; pixel_mask applied or not.
		for _, c := range []struct{ file, use string }{{"scan", "true"}, {"scan", "false"}, {"four", "true"}, {"half", "true"}} {
			use := c.use
			d, err := dataset.Open(filepath.Join("acq", c.file+"_master.h5"), dataset.Options{NavShape: []int{8, 8}, FormatOptions: map[string]string{"pixel_mask": use}})
			require.NoError(t, err)
			assert.Nil(t, dataset.RunNotes(d, 0, 64), "nothing read yet")
			assert.Equal(t, readF64(t, filepath.Join(dir, map[string]string{"true": "masked.f64", "false": "unmasked.f64"}[use])),
				frametest.Decode(frametest.ReadAll(t, d), d.DType()), c.file)
			for range 2 {
				readConcurrently(t, d)
				want := wantNote(saturated, all, "dectris_saturated", text)
				require.Equal(t, want, dataset.RunNotes(d, 0, 64), "%s, pixel_mask=%s", c.file, use)
				require.Greater(t, want[0].Frames, int64(10))
				assert.Equal(t, fmt.Sprintf("saturated pixels, kept at 4294967295: pixel values at 4294967295 (2^32−1) that pixel_mask does not flag, where the detector's count overflowed: %d, in %d of the frames read",
					want[0].Count, want[0].Frames), want[0].String())
			}
			require.NoError(t, d.Close())
		}
		// A range of frames 5 to 44 counts its frames only; an ROI its positions only.
		d, err := dataset.Open(master, dataset.Options{NavShape: []int{8, 8}, Frames: dataset.FrameSpan{First: 5, Count: 40}})
		require.NoError(t, err)
		readConcurrently(t, d)
		assert.Equal(t, wantNote(saturated, all[5:45], "dectris_saturated", text), dataset.RunNotes(d, 0, 40))
		assert.Equal(t, wantNote(saturated, all[15:25], "dectris_saturated", text), dataset.RunNotes(d, 10, 20))
		assert.Nil(t, dataset.RunNotes(d, 0, 41), "outside the range")
		require.NoError(t, d.Close())
		roi := dataset.ROI{}
		roi.Rect.X, roi.Rect.Y, roi.Rect.W, roi.Rect.H = 1, 2, 3, 5 // columns 1-3 of rows 2-6
		d, err = dataset.Open(master, dataset.Options{NavShape: []int{8, 8}, ROI: roi})
		require.NoError(t, err)
		readConcurrently(t, d)
		_, pos := dataset.ScanPositions(d)
		require.Len(t, pos, 15)
		assert.Equal(t, wantNote(saturated, pos, "dectris_saturated", text), dataset.RunNotes(d, 0, 15))
		require.NoError(t, d.Close())
		// Without a pixel_mask, every 2^32−1 counts, under its own key.
		d, err = dataset.Open(filepath.Join("acq", "nomask_master.h5"), dataset.Options{})
		require.NoError(t, err)
		readConcurrently(t, d)
		assert.Equal(t, wantNote(readI64(t, filepath.Join(dir, "markers.i64")), all, "dectris_marker",
			"pixel values at 4294967295 (2^32−1), saturated or masked (the master has no pixel_mask to tell them apart), kept: {count}, in {frames} of the frames read"),
			dataset.RunNotes(d, 0, 64))
		require.NoError(t, d.Close())
	})
	t.Run("errors", func(t *testing.T) {
		_, err := dataset.Open(filepath.Join("acq", "gap_master.h5"), dataset.Options{})
		require.ErrorIs(t, err, errs.Format)
		assert.ErrorContains(t, err, "group /entry/data links blocks data_000001, data_000003, data_000004 but not data_000002: a block of the scan is missing")
		_, err = dataset.Open(filepath.Join("acq", "lost_master.h5"), dataset.Options{})
		require.Error(t, err)
		assert.ErrorContains(t, err, "block data_000002")
		_, err = dataset.Open(master, dataset.Options{FormatOptions: map[string]string{"pixel_mask": "maybe"}})
		require.ErrorIs(t, err, errs.Argument)
		assert.ErrorContains(t, err, `option pixel_mask "maybe" is not true or false`)
	})
}

// TestDECTRISMarkers: the word-at-a-time count of the values 2^N−1 against one value at
// a time, for uint8, uint16 and uint32 elements, buffers whose length is not a multiple
// of 8 bytes, and values one bit short of the marker in every position.
func TestDECTRISMarkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 60))
	for _, size := range []int{1, 2, 4} {
		for _, n := range []int{0, 1, 3, 7, 8, 9, 33, 1000} {
			buf := make([]byte, n*size)
			for i := range n {
				el := buf[i*size : (i+1)*size]
				switch rng.IntN(4) {
				case 0: // the marker
					for b := range el {
						el[b] = 0xff
					}
				case 1: // one bit short of it
					for b := range el {
						el[b] = 0xff
					}
					bit := rng.IntN(8 * size)
					el[bit/8] &^= 1 << (bit % 8)
				default:
					for b := range el {
						el[b] = byte(rng.IntN(256))
					}
				}
			}
			want := 0
			for i := range n {
				if bytes.Count(buf[i*size:(i+1)*size], []byte{0xff}) == size {
					want++
				}
			}
			assert.Equal(t, want, hdf5.Markers(buf, size), "%d elements of %d bytes", n, size)
		}
		// Small counts, passed over 64 bytes at a time, and one marker at each place.
		buf := make([]byte, 100*size)
		for i := range buf {
			buf[i] = byte(i % 64)
		}
		require.Zero(t, hdf5.Markers(buf, size))
		for i := range 100 {
			el := buf[i*size : (i+1)*size]
			saved := slices.Clone(el)
			for b := range el {
				el[b] = 0xff
			}
			assert.Equal(t, 1, hdf5.Markers(buf, size), "the marker at element %d of %d bytes", i, size)
			copy(el, saved)
		}
	}
}

// TestDECTRISARINA reads the real ARINA master and its data file, and compares the
// frames with h5py's (hdf5plugin decoding bitshuffle-LZ4).
func TestDECTRISARINA(t *testing.T) {
	master := testfiles.File(t, "arina/test_00_master.h5")
	out := filepath.Join(t.TempDir(), "ref.f64")
	testfiles.RunPython(t, `
import sys, numpy as np, h5py, hdf5plugin
with h5py.File(sys.argv[1], "r") as f:
    x = f["/entry/data/data_000001"][()]
    m = f["/entry/instrument/detector/detectorSpecific/pixel_mask"][()]
y = x.astype(np.float64)
y[:, m != 0] = 0
y.tofile(sys.argv[2])
`, []string{"numpy", "h5py", "hdf5plugin"}, master, out)
	want := readF64(t, out)
	for _, c := range []struct{ file, format string }{{"arina/test_00_master.h5", "dectris"}, {"arina/test_00_data_000001.h5", "hdf5"}} {
		d, err := dataset.Open(testfiles.File(t, c.file), dataset.Options{NavShape: []int{4, 4}})
		require.NoError(t, err, c.file)
		assert.Equal(t, c.format, d.Format())
		assert.Equal(t, [2]int{192, 192}, d.SigShape())
		assert.Equal(t, dataset.Uint32, d.DType())
		assert.Equal(t, want, frametest.Decode(frametest.ReadAll(t, d), d.DType()), c.file)
		require.NoError(t, d.Close())
	}
	// The acquisition's metadata file holds no frames: the error names the master.
	_, err := dataset.Open(testfiles.File(t, "arina/test_00.h5"), dataset.Options{})
	require.Error(t, err)
	assert.ErrorContains(t, err, "the file has no dataset of rank 3 to 5; the frames of this DECTRIS acquisition are read from its master file "+master)
}
