package k2is

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/dm"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	_ "github.com/stemdot/stemdot/dataset/raw" // TestK2ISErrors: a .bin that is no sector file is a raw file
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// gtgFile is a .gtg with the scan shape (ny, nx) in SI Dimensions (none when ny is 0),
// among other tags of every kind: strings, structs, arrays of numbers and of structs.
func gtgFile(version int, little bool, ny, nx int) []byte {
	var o binary.AppendByteOrder = binary.BigEndian
	if little {
		o = binary.LittleEndian
	}
	u32 := func(v uint32) []byte { return o.AppendUint32(nil, v) }
	f64 := func(v float64) []byte { return o.AppendUint64(nil, math.Float64bits(v)) }
	pixels := make([]byte, 2*1000)
	type tag = frametest.DMTag
	tags := []tag{
		{Name: "ImageList", IsGroup: true, Tags: []tag{{IsGroup: true, Tags: []tag{
			{Name: "ImageData", IsGroup: true, Tags: []tag{{Name: "Data", Info: []uint64{20, 4, 1000}, Value: pixels}}},
			{Name: "Name", Info: []uint64{18, 8}, Value: []byte("K\x002\x00 \x00I\x00")},
			{Name: "Size X", Info: []uint64{5}, Value: u32(999)}, // not the scan's: under ImageList
		}}}},
		{Name: "Origin", Info: []uint64{15, 0, 2, 0, 6, 0, 6}, Value: make([]byte, 8)},
		{Name: "Calibrations", Info: []uint64{20, 15, 0, 2, 0, 7, 0, 3, 5}, Value: make([]byte, 5*12)},
	}
	if ny > 0 {
		tags = append(tags, tag{Name: "SI Dimensions", IsGroup: true, Tags: []tag{
			{Name: "Size X", Info: []uint64{3}, Value: u32(uint32(nx))},
			{Name: "Size Y", Info: []uint64{7}, Value: f64(float64(ny))},
		}})
	}
	return frametest.EncodeDM(version, little, tags)
}

// dm's tag reader finds the scan shape in .gtg files (DM3 and DM4, either byte order)
// past tags of every kind, and refuses damaged ones with a format error.
func TestGTGTags(t *testing.T) {
	for _, version := range []int{3, 4} {
		for _, little := range []bool{true, false} {
			b := gtgFile(version, little, 7, 5)
			tags, err := dm.ReadTags(bytes.NewReader(b), int64(len(b)), "SI Dimensions.Size Y", "SI Dimensions.Size X", "ImageList.0.Size X")
			require.NoError(t, err, "DM%d little=%v", version, little)
			for path, want := range map[string]float64{"SI Dimensions.Size Y": 7, "SI Dimensions.Size X": 5, "ImageList.0.Size X": 999} {
				v, ok := tags.Number(path)
				assert.True(t, ok, path)
				assert.Equal(t, want, v, path)
			}
			for _, cut := range []int{3, 20, len(b) / 2, len(b) - 9} {
				_, err := dm.ReadTags(bytes.NewReader(b[:cut]), int64(cut))
				assert.Equal(t, errs.Format, errs.KindOf(err), "DM%d cut at %d: %v", version, cut, err)
			}
		}
	}
	_, err := dm.ReadTags(bytes.NewReader([]byte("HDR,\x00\x00\x00\x00\x00\x00\x00\x00")), 12)
	assert.ErrorContains(t, err, "not a DigitalMicrograph 3 or 4 file")
}

// k2Set describes a K2 IS acquisition that writeK2 writes.
type k2Set struct {
	ids     []uint32          // frame ids of the frames complete in every sector
	lead    [sectors]int      // blocks of the (incomplete) frame before ids[0] that start each sector file
	shutter uint32            // frames from this id on have the shutter-active flag
	tail    [sectors][]uint32 // frame ids of blocks after the last frame (a frame's blocks in order)
}

// pixel is the 12-bit value of pixel (y, x) of frame id: a hash, so that every pixel of
// every frame is checked against a value the reader cannot know.
func pixel(id uint32, y, x int) uint16 {
	h := uint32(y)*2654435761 ^ uint32(x)*40503 ^ id*2246822519
	h ^= h >> 15
	h *= 2246822519
	h ^= h >> 13
	return uint16(h & 0xFFF)
}

// block lays out block b (0..31, LiberTEM's order: right to left along the sector, top
// half first) of sector s of frame id.
func block(id uint32, s, b int, shutter bool) []byte {
	x0, y0 := (15-b%16)*blockCols, b/16*blockRows
	out := make([]byte, blockSize)
	be := binary.BigEndian
	be.PutUint32(out, 0xFFFF0055)
	out[8] = 2
	if shutter {
		out[9] = 1
	}
	be.PutUint32(out[16:], id*32+uint32(b))
	be.PutUint16(out[20:], 256)
	be.PutUint16(out[22:], 1860)
	be.PutUint32(out[24:], id)
	be.PutUint16(out[28:], uint16(x0))
	be.PutUint16(out[30:], uint16(y0))
	be.PutUint16(out[32:], uint16(x0+15))
	be.PutUint16(out[34:], uint16(y0+929))
	be.PutUint32(out[36:], blockSize)
	p := out[headerSize:]
	for row := range blockRows {
		for j := 0; j < blockCols; j += 2 {
			a := pixel(id, y0+row, s*sectorCols+x0+j)
			c := pixel(id, y0+row, s*sectorCols+x0+j+1)
			p[0], p[1], p[2] = byte(a), byte(a>>8&0x0F|c<<4), byte(c>>4)
			p = p[3:]
		}
	}
	return out
}

// writeK2 writes the 8 sector files base1.bin ... base8.bin.
func writeK2(t *testing.T, base string, k k2Set) {
	t.Helper()
	for s := range sectors {
		f, err := os.Create(fmt.Sprintf("%s%d.bin", base, s+1))
		require.NoError(t, err)
		write := func(id uint32, b int) {
			blk := block(id, s, b, id >= k.shutter)
			_, err := f.Write(blk)
			require.NoError(t, err)
		}
		for b := blocksPerFrame - k.lead[s]; b < blocksPerFrame; b++ {
			write(k.ids[0]-1, b)
		}
		for _, id := range k.ids {
			for b := range blocksPerFrame {
				write(id, b)
			}
		}
		prev, b := uint32(0), 0
		for _, id := range k.tail[s] {
			if id != prev {
				prev, b = id, 0
			}
			write(id, b)
			b++
		}
		require.NoError(t, f.Close())
	}
}

// checkFrames reads every frame of ds and compares each pixel with frame ids[i]'s.
func checkFrames(t *testing.T, ds dataset.Dataset, ids []uint32) {
	t.Helper()
	require.Equal(t, len(ids), ds.NumFrames())
	buf := make([]byte, 2*ds.FrameBytes())
	for i := 0; i < len(ids); i += 2 {
		end := min(i+2, len(ids))
		require.NoError(t, ds.ReadFrames(i, end, buf))
		for f := i; f < end; f++ {
			fr := buf[(f-i)*ds.FrameBytes():]
			bad := 0
			for y := range sigY {
				for x := range sigX {
					if binary.NativeEndian.Uint16(fr[(y*sigX+x)*2:]) != pixel(ids[f], y, x) {
						bad++
					}
				}
			}
			require.Zero(t, bad, "frame %d (id %d): pixels that differ", f, ids[f])
		}
	}
}

// A scan: sector files that start inside a frame (a different number of blocks each),
// frames before the shutter opened, an incomplete frame at the end of one sector file;
// the .gtg gives the scan shape. Opened from the .gtg and from a .bin.
func TestK2ISScan(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "Capture1_")
	k := k2Set{ids: []uint32{100, 101, 102, 103, 104, 105}, lead: [sectors]int{0, 5, 31, 1, 17, 0, 2, 30}, shutter: 102}
	for s := range sectors {
		k.tail[s] = repeat(106, 32, 107, 8)
	}
	k.tail[0] = repeat(106, 20, 107, 32) // 12 blocks of frame 106 lost
	writeK2(t, base, k)
	require.NoError(t, os.WriteFile(base+".gtg", gtgFile(4, true, 2, 2), 0o644))

	for _, path := range []string{base + ".gtg", base + "3.bin"} {
		ds, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err, path)
		assert.Equal(t, Name, ds.Format())
		assert.Equal(t, []int{2, 2}, ds.NavShape())
		assert.Equal(t, [2]int{1860, 2048}, ds.SigShape())
		assert.Equal(t, dataset.Uint16, ds.DType())
		notes := strings.Join(dataset.Notes(ds), "\n")
		assert.Contains(t, notes, "blocks before frame id 100, the first frame complete in all 8 sector files, are not read (Capture1_2.bin: 5, Capture1_3.bin: 31")
		assert.Contains(t, notes, "the first complete frame precedes the scan and is not read (the shutter-active flag is set from frame id 102 on, and a scan starts one frame earlier")
		assert.Contains(t, notes, "the last 1 are surplus") // 101..105: 5 frames for 4 positions
		checkFrames(t, ds, []uint32{101, 102, 103, 104})
		require.NoError(t, ds.Close())
	}

	// Option sync_offset counts from the scan's first frame.
	ds, err := dataset.Open(base+".gtg", dataset.Options{SyncOffset: 1})
	require.NoError(t, err)
	checkFrames(t, ds, []uint32{102, 103, 104, 105})
	t.Run("numpy", func(t *testing.T) { compareNumpy(t, ds, base, []uint32{102, 103, 104, 105}) })
	require.NoError(t, ds.Close())
}

// numpyK2IS decodes the blocks of the given frame ids from the sector files <base>*.bin
// (sorted) with numpy, as LiberTEM's DataBlock lays them out (header fields by a
// big-endian record dtype, 12-bit pairs unpacked, each block copied to its header's
// pixel region of its sector), and prints each frame's sum and its sum weighted by
// (flat pixel index mod 1009).
const numpyK2IS = `
import sys, glob
import numpy as np
base, ids = sys.argv[1], [int(v) for v in sys.argv[2].split(",")]
hdr = np.dtype([("sync", ">u4"), ("pad1", "V4"), ("version", "u1"), ("flags", "u1"), ("pad2", "V6"),
    ("block_count", ">u4"), ("width", ">u2"), ("height", ">u2"), ("frame_id", ">u4"),
    ("x0", ">u2"), ("y0", ">u2"), ("x1", ">u2"), ("y1", ">u2"), ("block_size", ">u4")])
frames = {i: np.zeros((1860, 2048)) for i in ids}
for s, path in enumerate(sorted(glob.glob(base + "*.bin"))):
    raw = np.fromfile(path, np.uint8)
    n = len(raw) // 0x5758
    blocks = raw[:n * 0x5758].reshape(n, 0x5758)
    h = blocks[:, :40].copy().view(hdr).ravel()
    assert (h["sync"] == 0xFFFF0055).all()
    for b in np.nonzero(np.isin(h["frame_id"], ids))[0]:
        d = blocks[b, 40:].astype(np.uint16).reshape(-1, 3)
        px = np.stack([d[:, 0] | (d[:, 1] & 0x0F) << 8, d[:, 1] >> 4 | d[:, 2] << 4], 1).reshape(930, 16)
        x0 = s * 256 + int(h["x0"][b])
        frames[int(h["frame_id"][b])][h["y0"][b]:h["y1"][b] + 1, x0:x0 + 16] = px
w = np.arange(1860 * 2048).reshape(1860, 2048) % 1009
for i in ids:
    print(repr(float(frames[i].sum())), repr(float((frames[i] * w).sum())))
`

// compareNumpy compares the sums of the frames of ds with numpyK2IS's of frames ids.
func compareNumpy(t *testing.T, ds dataset.Dataset, base string, ids []uint32) {
	t.Helper()
	var list []string
	for _, id := range ids {
		list = append(list, fmt.Sprint(id))
	}
	out := strings.Fields(string(testfiles.RunPython(t, numpyK2IS, []string{"numpy"}, base, strings.Join(list, ","))))
	require.Len(t, out, 2*len(ids))
	buf := make([]byte, ds.FrameBytes())
	for i := range ids {
		require.NoError(t, ds.ReadFrames(i, i+1, buf))
		var sum, weighted float64
		for p := range sigY * sigX {
			v := float64(binary.NativeEndian.Uint16(buf[2*p:]))
			sum += v
			weighted += v * float64(p%1009)
		}
		want, err := strconv.ParseFloat(out[2*i], 64)
		require.NoError(t, err)
		wantW, err := strconv.ParseFloat(out[2*i+1], 64)
		require.NoError(t, err)
		assert.Equal(t, want, sum, "frame %d (id %d): sum", i, ids[i])
		assert.Equal(t, wantW, weighted, "frame %d (id %d): weighted sum", i, ids[i])
	}
}

func repeat(idCount ...uint32) []uint32 {
	var out []uint32
	for i := 0; i < len(idCount); i += 2 {
		for range idCount[i+1] {
			out = append(out, idCount[i])
		}
	}
	return out
}

// Without a .gtg (or one without SI Dimensions: a time series) the scan starts at the
// first frame with the shutter flag, and the nav shape is option nav_shape or guessed
// with a warning. Blocks missing inside a frame are an error naming the file and frame.
func TestK2ISTimeSeries(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "series_")
	writeK2(t, base, k2Set{ids: []uint32{7, 8, 9, 10, 11}, lead: [sectors]int{3, 3, 3, 3, 3, 3, 3, 3}, shutter: 8})

	ds, err := dataset.Open(base+"1.bin", dataset.Options{})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 4}, ds.NavShape())
	assert.True(t, dataset.NavShapeGuessed(ds))
	checkFrames(t, ds, []uint32{8, 9, 10, 11})
	require.NoError(t, ds.Close())

	require.NoError(t, os.WriteFile(base+".gtg", gtgFile(3, false, 0, 0), 0o644))
	ds, err = dataset.Open(base+".gtg", dataset.Options{NavShape: []int{2, 2}})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2}, ds.NavShape())
	checkFrames(t, ds, []uint32{8, 9, 10, 11})
	require.NoError(t, ds.Close())

	// Frame 10's block 4 in sector 6 carries frame id 99: a dropped block.
	p := base + "6.bin"
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	var id [4]byte
	binary.BigEndian.PutUint32(id[:], 99)
	_, err = f.WriteAt(id[:], int64(3+3*32+4)*blockSize+24)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	ds, err = dataset.Open(base+".gtg", dataset.Options{NavShape: []int{2, 2}})
	require.NoError(t, err)
	defer ds.Close()
	buf := make([]byte, 2*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 2, buf))
	err = ds.ReadFrames(2, 4, buf)
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "frame 2: block at byte")
	assert.Contains(t, err.Error(), "frame id 99, but the frame's first block has 10: blocks are missing")
}

// Files that are not a whole acquisition are refused, naming what is wrong; a .bin that
// is not a K2 IS sector file stays a raw file.
func TestK2ISErrors(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "c_")
	writeK2(t, base, k2Set{ids: []uint32{1, 2}, shutter: 1})
	require.NoError(t, os.Rename(base+"8.bin", filepath.Join(dir, "other.dat")))
	_, err := dataset.Open(base+".gtg", dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "a K2 IS acquisition has 8 sector files "+base+"*.bin, found 7")
	// Seven sector files: the .bin is not claimed as K2 IS, and is read as raw given its
	// layout.
	ds, err := dataset.Open(base+"1.bin", dataset.Options{SigShape: []int{2, 0x5758 / 4}, DType: dataset.Uint16})
	require.NoError(t, err)
	assert.Equal(t, "raw", ds.Format())
	ds.Close()
	require.NoError(t, os.Rename(filepath.Join(dir, "other.dat"), base+"8.bin"))

	// A damaged sync word in sector 4's first block.
	b, err := os.ReadFile(base + "4.bin")
	require.NoError(t, err)
	b[0] = 0
	require.NoError(t, os.WriteFile(base+"4.bin", b, 0o644))
	_, err = dataset.Open(base+"1.bin", dataset.Options{Format: Name})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), base+"4.bin: block 0 (byte 0): sync word 0x00FF0055, want 0xFFFF0055")

	// Sector files of different acquisitions share no frame id.
	b[0] = 0xFF
	binary.BigEndian.PutUint32(b[24:], 50)
	for blk := 1; blk < len(b)/blockSize; blk++ {
		binary.BigEndian.PutUint32(b[blk*blockSize+24:], 50+uint32(blk/32))
	}
	require.NoError(t, os.WriteFile(base+"4.bin", b, 0o644))
	_, err = dataset.Open(base+".gtg", dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), "no frame id has its 32 blocks one after the other in all 8 sector files")

	// A .gtg that is not a DigitalMicrograph file.
	writeK2(t, base, k2Set{ids: []uint32{1, 2}, shutter: 1})
	require.NoError(t, os.WriteFile(base+".gtg", []byte("not a tag file"), 0o644))
	_, err = dataset.Open(base+"2.bin", dataset.Options{})
	require.ErrorIs(t, err, errs.Format)
	assert.Contains(t, err.Error(), base+".gtg: not a DigitalMicrograph 3 or 4 file")
}

// FuzzK2ISSync syncs sector files whose block headers come from arbitrary bytes (each
// block's frame id and flags from two bytes): no panic, and a sync it finds starts a
// frame complete in all sectors.
func FuzzK2ISSync(f *testing.F) {
	f.Add([]byte{0, 3, 5, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var blocks [sectors]int64
		for s := range sectors {
			if s < len(b) {
				blocks[s] = int64(b[s]) * 3
			}
		}
		header := func(s int, blk int64) (blockHeader, error) {
			i := (int(blk)/7 + s) % max(len(b), 1)
			id := uint32(blk / blocksPerFrame)
			if len(b) > 0 && b[i]&0x80 != 0 {
				id += uint32(b[i] & 0x3)
			}
			return blockHeader{frameID: id}, nil
		}
		first, n, err := syncSectors(header, blocks)
		if err != nil {
			return
		}
		for s := range sectors {
			require.LessOrEqual(t, first[s]+int64(n)*blocksPerFrame, blocks[s])
		}
	})
}

// The sync drops a few incomplete frames at the end, and refuses files whose last
// frames are all incomplete (blocks missing inside them).
func TestK2ISEndSync(t *testing.T) {
	var blocks [sectors]int64
	for s := range blocks {
		blocks[s] = 40 * blocksPerFrame
	}
	shiftFrom := int64(0)
	header := func(s int, b int64) (blockHeader, error) {
		if s == 0 && shiftFrom > 0 && b >= shiftFrom {
			b++ // sector 0 lost a block: its frames from there on are cut
		}
		return blockHeader{frameID: uint32(b / blocksPerFrame)}, nil
	}
	first, n, err := syncSectors(header, blocks)
	require.NoError(t, err)
	assert.Equal(t, [sectors]int64{}, first)
	assert.Equal(t, 40, n)
	shiftFrom = 37*blocksPerFrame + 5
	_, n, err = syncSectors(header, blocks)
	require.NoError(t, err)
	assert.Equal(t, 37, n)
	shiftFrom = 3*blocksPerFrame + 5
	_, _, err = syncSectors(header, blocks)
	assert.ErrorContains(t, err, "the last 16 frames are not complete in all 8 sector files")
}

// Without the shutter-active flag in any block the scan starts at the first complete
// frame, with a note.
func TestK2ISNoShutterFlag(t *testing.T) {
	base := filepath.Join(t.TempDir(), "old_")
	writeK2(t, base, k2Set{ids: []uint32{5, 6, 7}, lead: [sectors]int{0, 0, 4}, shutter: 99})
	ds, err := dataset.Open(base+"5.bin", dataset.Options{NavShape: []int{3}})
	require.NoError(t, err)
	defer ds.Close()
	assert.Contains(t, dataset.Notes(ds), "no block has the shutter-active flag: the scan starts at the first complete frame")
	checkFrames(t, ds, []uint32{5, 6, 7})
}

// TestSectorDirectory: a directory where a sector file should be is named as a
// directory, not counted as a missing sector file.
func TestSectorDirectory(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "Capture1_")
	writeK2(t, base, k2Set{ids: []uint32{100, 101}})
	require.NoError(t, os.WriteFile(base+".gtg", gtgFile(4, true, 1, 1), 0o644))
	require.NoError(t, os.Remove(base+"5.bin"))
	require.NoError(t, os.Mkdir(base+"5.bin", 0o755))
	_, err := dataset.Open(base+".gtg", dataset.Options{})
	require.Error(t, err)
	assert.Equal(t, errs.IO, errs.KindOf(err), "%v", err)
	assert.Contains(t, err.Error(), base+"5.bin is a directory")
}
