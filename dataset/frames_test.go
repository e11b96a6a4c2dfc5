package dataset_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// gappedRaw writes n random uint16 frames of 6×5 pixels, each record being header bytes
// of 0xAB, the pixels (little-endian) and footer bytes of 0xCD, after offset bytes; it
// returns the path and the frames' pixel bytes.
func gappedRaw(t *testing.T, n, offset, header, footer int) (string, [][]byte) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(header)))
	b := bytes.Repeat([]byte{0xEE}, offset)
	frames := make([][]byte, n)
	for f := range frames {
		for range 30 {
			frames[f] = binary.LittleEndian.AppendUint16(frames[f], uint16(rng.Uint32()))
		}
		b = append(b, bytes.Repeat([]byte{0xAB}, header)...)
		b = append(b, frames[f]...)
		b = append(b, bytes.Repeat([]byte{0xCD}, footer)...)
	}
	path := filepath.Join(t.TempDir(), "g.raw")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path, frames
}

func TestRawFrameHeaderFooter(t *testing.T) {
	for _, c := range []struct{ offset, header, footer int }{{0, 0, 0}, {0, 0, 12}, {7, 16, 0}, {3, 5, 9}} {
		path, frames := gappedRaw(t, 6, c.offset, c.header, c.footer)
		opt := dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16, Offset: int64(c.offset), FrameHeader: int64(c.header), FrameFooter: int64(c.footer)}
		d, err := dataset.Open(path, opt)
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, []int{1, 6}, d.NavShape())
		got := make([]byte, 4*60)
		require.NoError(t, d.ReadFrames(1, 5, got))
		assert.Equal(t, bytes.Join(frames[1:5], nil), got, "%+v", c)
		m, ok, err := d.(dataset.Mapper).MapFrames(2, 4)
		require.NoError(t, err)
		if ok {
			for i := range 2 {
				rec := m.Mapping[m.Offset+int64(i)*m.Stride:]
				assert.Equal(t, frames[2+i], rec[m.Header:m.Header+60], "%+v frame %d", c, 2+i)
			}
		}
		require.NoError(t, d.Close())
		_, _, err = d.(dataset.Mapper).MapFrames(0, 1)
		assert.ErrorContains(t, err, "read after Close")

		// One byte more or less per record does not fit the file.
		opt.FrameFooter++
		_, err = dataset.Open(path, opt)
		assert.ErrorContains(t, err, "is not a whole, non-zero number of frame records of")
		assert.ErrorContains(t, err, "option frame_header and option frame_footer")
	}
	path, _ := gappedRaw(t, 6, 0, 0, 0)
	_, err := dataset.Open(path, dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16, FrameHeader: -1})
	assert.ErrorContains(t, err, "negative byte count")
	_, err = dataset.Open(path, dataset.Options{Format: "npy", FrameFooter: 4})
	assert.ErrorContains(t, err, "npy files do not take per-frame header/footer bytes 0/4")
}

func TestSyncOffset(t *testing.T) {
	path, frames := gappedRaw(t, 10, 0, 0, 0)
	base := dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16}
	blank := make([]byte, 60)
	for _, c := range []struct {
		offset int
		nav    []int
		want   [][]byte
		mapped bool // MapFrames(from, to) serves the range
	}{
		{3, nil, frames[3:], true},
		{2, []int{2, 4}, frames[2:], true},
		{-2, []int{3, 4}, append([][]byte{blank, blank}, frames...), false},
		{-1, nil, append([][]byte{blank}, frames...), false},
	} {
		opt := base
		opt.SyncOffset, opt.NavShape = c.offset, c.nav
		d, err := dataset.Open(path, opt)
		require.NoError(t, err, "%+v", c)
		n := d.NumFrames()
		if c.nav != nil {
			assert.Equal(t, c.nav, d.NavShape())
		} else {
			assert.Equal(t, []int{1, len(c.want)}, d.NavShape())
		}
		got := make([]byte, n*60)
		for i := range got {
			got[i] = 0x55 // blank frames must be written, not left
		}
		require.NoError(t, d.ReadFrames(0, n, got))
		assert.Equal(t, bytes.Join(c.want[:n], nil), got, "%+v", c)
		// A range that straddles the inserted blank frames.
		require.NoError(t, d.ReadFrames(1, 4, got[:180]))
		assert.Equal(t, bytes.Join(c.want[1:4], nil), got[:180], "%+v", c)
		m, ok, err := d.(dataset.Mapper).MapFrames(0, 2)
		require.NoError(t, err)
		assert.Equal(t, c.mapped, ok, "%+v", c)
		if ok {
			assert.Equal(t, c.want[0], m.Mapping[m.Offset:m.Offset+60])
			assert.Equal(t, c.want[1], m.Mapping[m.Offset+m.Stride:m.Offset+m.Stride+60])
		}
		m, ok, err = d.(dataset.Mapper).MapFrames(3, 5)
		require.NoError(t, err)
		require.True(t, ok, "frames of the file are mapped: %+v", c)
		assert.Equal(t, c.want[3], m.Mapping[m.Offset:m.Offset+60])
		if v, isViewer := d.(dataset.Viewer); isViewer {
			require.Positive(t, c.offset, "only a pure shift views in place")
			b, err := v.ViewFrames(1, 3)
			require.NoError(t, err)
			assert.Equal(t, bytes.Join(c.want[1:3], nil), b)
		}
		assert.NotEmpty(t, dataset.Notes(d))
		_, _, err = d.(dataset.Mapper).MapFrames(0, n+1)
		assert.ErrorContains(t, err, "out of range")
		require.NoError(t, d.Close())
	}
	// The extremes of an int too: -s overflows for math.MinInt.
	for _, s := range []int{10, -10, math.MinInt, math.MinInt + 1, math.MaxInt} {
		opt := base
		opt.SyncOffset = s
		_, err := dataset.Open(path, opt)
		assert.EqualError(t, err, fmt.Sprintf("dataset: %s: sync offset %d (option sync_offset) is outside -9 to 9: the file holds 10 frames and at least one must be read", path, s))
		assert.Equal(t, errs.Argument, errs.KindOf(err))
	}
	// A raw file's frame count must match the nav shape exactly, sync offset included.
	opt := base
	opt.SyncOffset, opt.NavShape = 1, []int{2, 4}
	_, err := dataset.Open(path, opt)
	assert.ErrorContains(t, err, "nav shape (2, 4) (option nav_shape) has 8 positions but the file holds 10 frames (9 scan positions with sync offset 1)")
}
