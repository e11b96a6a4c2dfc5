package dm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
)

// The transposed reader gives the same frames from the mapping and, where the file
// cannot be mapped, from positioned reads: frame i's pixel p is element p·frames + i.
func TestTransposedUnmapped(t *testing.T) {
	const frames, npix = 7, 6
	data := make([]byte, 3+frames*npix*2) // 3 bytes before the data: unaligned
	for p := range npix {
		for i := range frames {
			v := uint16(100*i + p)
			data[3+2*(p*frames+i)], data[3+2*(p*frames+i)+1] = byte(v), byte(v>>8)
		}
	}
	path := filepath.Join(t.TempDir(), "t.bin")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	for _, mapped := range []bool{true, false} {
		f, err := os.Open(path)
		require.NoError(t, err)
		d := newTransposed(path, f, int64(len(data)), 3, frames, [2]int{2, 3}, dataset.Uint16, false)
		require.NotNil(t, d.mapping)
		if !mapped {
			require.NoError(t, unmap(d))
		}
		dst := make([]byte, 4*d.FrameBytes())
		require.NoError(t, d.ReadFrames(2, 6, dst))
		for i := range 4 {
			for p := range npix {
				got := uint16(dst[2*(i*npix+p)]) | uint16(dst[2*(i*npix+p)+1])<<8
				assert.Equal(t, uint16(100*(i+2)+p), got, "mapped %v frame %d pixel %d", mapped, i+2, p)
			}
		}
		require.NoError(t, d.Close())
	}
}

// unmap drops d's mapping, as if the file could not be mapped.
func unmap(d *transposedFile) error {
	m := d.mapping
	d.mapping, d.data = nil, nil
	return unix.Munmap(m)
}
