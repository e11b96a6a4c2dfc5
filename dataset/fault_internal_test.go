package dataset

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
)

// ReadFrames of a mapped file copies under guardMapped: a fault on the mapping, the file
// having shrunk after the size check, is an errs.IO error naming the file (#17.2); any
// other panic goes on.
func TestGuardMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.raw")
	require.NoError(t, os.WriteFile(path, make([]byte, 64<<10), 0o644))
	f, size, err := OpenFile(path)
	require.NoError(t, err)
	d, err := OpenFlat(Flat{Format: "raw", Path: path, File: f, Size: size, Sig: [2]int{64, 64}, DType: Uint16},
		Options{}, nil, "", FileFrames{Whole: 8, RecordBytes: 8192})
	require.NoError(t, err)
	defer d.Close()
	m := d.(*mappedFile)
	v, err := m.ViewFrames(2, 8) // checked: the file is whole
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, 100))
	dst := make([]byte, len(v))
	err = guardMapped(func() { copy(dst, v) })
	require.ErrorContains(t, err, "dataset: "+path+": the file changed while being read: it is now 100 bytes, 65536 when it was opened (truncated or rewritten by another program), and reading byte ")
	require.Equal(t, errs.IO, errs.KindOf(err))
	require.PanicsWithValue(t, "other", func() { _ = guardMapped(func() { panic("other") }) })

	// A mapping of a closed dataset is no longer a dataset's.
	base := uintptr(unsafe.Pointer(&m.mapping[0]))
	require.NoError(t, d.Close())
	regions.Lock()
	for _, r := range regions.list {
		require.NotEqual(t, base, r.base)
	}
	regions.Unlock()
}
