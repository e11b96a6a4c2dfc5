package blo_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/blo"
	"github.com/stemdot/stemdot/errs"
)

// A record whose AA 55 prefix is damaged is refused on reading as errs.Format, naming the
// frame; the frames before it read.
func TestDamagedRecord(t *testing.T) {
	const nx, ny, side = 2, 1, 2
	le := binary.LittleEndian
	b := make([]byte, 28)
	copy(b, "IMGBLO")
	le.PutUint16(b[6:], 258)
	le.PutUint32(b[8:], 28)        // the virtual bright field
	le.PutUint32(b[12:], 28+nx*ny) // the first frame's record
	le.PutUint16(b[20:], side)
	le.PutUint16(b[24:], nx)
	le.PutUint16(b[26:], ny)
	b = append(b, make([]byte, nx*ny)...)
	for i := range nx * ny {
		b = append(b, 0xAA, 0x55)
		b = le.AppendUint32(b, uint32(i))
		b = append(b, byte(4*i), byte(4*i+1), byte(4*i+2), byte(4*i+3))
	}
	b[28+nx*ny+10] = 0 // frame 1's AA
	path := filepath.Join(t.TempDir(), "d.blo")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer ds.Close()
	buf := make([]byte, 2*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(0, 1, buf))
	assert.Equal(t, []byte{0, 1, 2, 3}, buf[:4])
	err = ds.ReadFrames(0, 2, buf)
	assert.Equal(t, errs.Format, errs.KindOf(err), "%v", err)
	assert.ErrorContains(t, err, "frame 1: its record does not start with AA 55")
}
