package raw_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

func TestRawFrameHeaderFooter(t *testing.T) {
	for _, c := range []struct{ offset, header, footer int }{{0, 0, 0}, {0, 0, 12}, {7, 16, 0}, {3, 5, 9}} {
		path, frames := frametest.GappedRaw(t, 6, c.offset, c.header, c.footer)
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
	path, _ := frametest.GappedRaw(t, 6, 0, 0, 0)
	_, err := dataset.Open(path, dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16, FrameHeader: -1})
	assert.ErrorContains(t, err, "negative byte count")
	_, err = dataset.Open(path, dataset.Options{Format: "npy", FrameFooter: 4})
	assert.ErrorContains(t, err, "npy files do not take per-frame header/footer bytes 0/4")
}
