package dataset_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// Raw and NPY files in host byte order are mapped and viewed in place; the views equal
// the frames read with ReadFrames and the values written. Byte-swapped files are not
// viewable (their frames need a swap).
func TestMappedFramesViewInPlace(t *testing.T) {
	dir := t.TempDir()
	const n, sy, sx = 5, 3, 4
	le, be := make([]byte, 0, n*sy*sx*2+6), make([]byte, 0, n*sy*sx*2+6)
	le, be = append(le, 1, 2, 3, 4, 5, 6), append(be, 1, 2, 3, 4, 5, 6) // 6-byte offset
	for i := range n * sy * sx {
		le = binary.LittleEndian.AppendUint16(le, uint16(1000+i))
		be = binary.BigEndian.AppendUint16(be, uint16(1000+i))
	}
	lePath, bePath := filepath.Join(dir, "le.raw"), filepath.Join(dir, "be.raw")
	require.NoError(t, os.WriteFile(lePath, le, 0o644))
	require.NoError(t, os.WriteFile(bePath, be, 0o644))
	opt := dataset.Options{Format: "raw", SigShape: []int{sy, sx}, DType: dataset.Uint16, Offset: 6}

	ds, err := dataset.Open(lePath, opt)
	require.NoError(t, err)
	v, ok := ds.(dataset.Viewer)
	require.True(t, ok, "a little-endian raw file is viewable in place")
	view, err := v.ViewFrames(1, 4)
	require.NoError(t, err)
	for i := range 3 * sy * sx {
		require.Equal(t, uint16(1000+sy*sx+i), binary.LittleEndian.Uint16(view[2*i:]))
	}
	buf := make([]byte, 3*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(1, 4, buf))
	require.Equal(t, view, buf)
	_, err = v.ViewFrames(4, 6)
	require.ErrorContains(t, err, "frames")
	require.NoError(t, ds.Close())
	_, err = v.ViewFrames(0, 1)
	require.ErrorContains(t, err, "after Close")

	opt.BigEndian = true
	ds, err = dataset.Open(bePath, opt)
	require.NoError(t, err)
	defer ds.Close()
	_, ok = ds.(dataset.Viewer)
	require.False(t, ok, "a byte-swapped file is read with pread and swapped")
	require.NoError(t, ds.ReadFrames(1, 4, buf))
	require.Equal(t, uint16(1000+sy*sx), binary.LittleEndian.Uint16(buf))
}
