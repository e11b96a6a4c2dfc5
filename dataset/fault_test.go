package dataset_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
)

// readView reads every byte of a view as a consumer of ViewFrames does: under
// debug.SetPanicOnFault, a recovered panic turned into an error by MappingFault.
func readView(v []byte) (sum int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if err = dataset.MappingFault(r); err == nil {
				panic(r)
			}
		}
	}()
	for _, b := range v {
		sum += int(b)
	}
	return sum, nil
}

// A mapped file that shrinks while open fails its reads with errs.IO naming it (#17.2):
// the size check of ViewFrames, ReadFrames and MapFrames, the recovered fault of a view
// taken before, a pread that comes up short. A file renamed over it leaves the open
// file's frames as they were.
func TestFileShrinks(t *testing.T) {
	const n, frameBytes = 12, 6 * 5 * 2
	changed := func(path string, size int) string {
		return fmt.Sprintf("dataset: %s: the file changed while being read: it is now 100 bytes, %d when it was opened (truncated or rewritten by another program)", path, size)
	}
	t.Run("raw in place", func(t *testing.T) {
		path, frames := frametest.GappedRaw(t, n*100, 0, 0, 0) // 1200 frames of 60 bytes: 18 pages
		d, err := dataset.Open(path, dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16})
		require.NoError(t, err)
		defer d.Close()
		v, err := d.(dataset.Viewer).ViewFrames(600, 1200)
		require.NoError(t, err)
		want := 0
		for _, f := range frames[600:] {
			for _, b := range f {
				want += int(b)
			}
		}
		sum, err := readView(v)
		require.NoError(t, err)
		require.Equal(t, want, sum)

		require.NoError(t, os.Truncate(path, 100))
		_, err = readView(v)
		require.ErrorContains(t, err, changed(path, 72000)+", and reading byte ")
		require.ErrorContains(t, err, " of its memory mapping failed; read it again once it is complete")
		require.Equal(t, errs.IO, errs.KindOf(err))
		_, err = d.(dataset.Viewer).ViewFrames(0, 1)
		require.EqualError(t, err, changed(path, 72000)+"; read it again once it is complete")
		require.Equal(t, errs.IO, errs.KindOf(err))
		err = d.ReadFrames(0, 2, make([]byte, 2*frameBytes))
		require.EqualError(t, err, changed(path, 72000)+"; read it again once it is complete")
		_, _, err = d.(dataset.Mapper).MapFrames(0, 2)
		require.EqualError(t, err, changed(path, 72000)+"; read it again once it is complete")
		require.Nil(t, dataset.MappingFault("not a fault"))
	})
	t.Run("MIB read with pread", func(t *testing.T) {
		path, raw := frametest.CopyMIB(t, frametest.MIB002)
		d, err := dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, os.Truncate(path, 100))
		err = d.ReadFrames(0, 1, make([]byte, d.FrameBytes()))
		require.EqualError(t, err, changed(path, len(raw))+"; read it again once it is complete")
		require.Equal(t, errs.IO, errs.KindOf(err))
		_, _, err = d.(dataset.Mapper).MapFrames(0, 1)
		require.EqualError(t, err, changed(path, len(raw))+"; read it again once it is complete")
	})
	t.Run("renamed over", func(t *testing.T) {
		path, frames := frametest.GappedRaw(t, n, 0, 0, 0)
		opt := dataset.Options{SigShape: []int{6, 5}, DType: dataset.Uint16}
		d, err := dataset.Open(path, opt)
		require.NoError(t, err)
		defer d.Close()
		other := filepath.Join(filepath.Dir(path), "other.raw")
		require.NoError(t, os.WriteFile(other, make([]byte, 3*frameBytes), 0o644))
		require.NoError(t, os.Rename(other, path))
		got := make([]byte, n*frameBytes)
		require.NoError(t, d.ReadFrames(0, n, got))
		require.Equal(t, bytes.Join(frames, nil), got, "the open file's frames, none of the new file's")
	})
}

// Frames of FromMemory in memory that faults, a memory-mapped file truncated by another
// program (#17r D3): ReadFrames and a reader of ViewFrames get an errs.IO error saying
// at which byte of the buffer; after Close the buffer is no longer the dataset's.
func TestMemoryFault(t *testing.T) {
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "frames.u8")
	frames := make([]byte, 8*page)
	for i := range frames {
		frames[i] = byte(i % 251)
	}
	require.NoError(t, os.WriteFile(path, frames, 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	mapping, err := unix.Mmap(int(f.Fd()), 0, len(frames), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mapping)
	// Frames of one page each, from byte 100 of the mapping on.
	d, err := dataset.FromMemory(mapping[100:100+7*page], nil, [2]int{1, page}, dataset.Uint8)
	require.NoError(t, err)
	got := make([]byte, 2*page)
	require.NoError(t, d.ReadFrames(3, 5, got))
	require.Equal(t, frames[100+3*page:100+5*page], got)

	require.NoError(t, os.Truncate(path, int64(4*page)))
	unreadable := func(at int) string {
		return fmt.Sprintf("dataset: in-memory data: the frames' memory became unreadable at byte %d of the buffer of %d bytes (e.g. a memory-mapped file truncated by another program)", at, 7*page)
	}
	err = d.ReadFrames(3, 5, got)
	require.Equal(t, errs.IO, errs.KindOf(err))
	var at int
	_, scanErr := fmt.Sscanf(strings.TrimPrefix(err.Error(), "dataset: in-memory data: the frames' memory became unreadable at byte "), "%d", &at)
	require.NoError(t, scanErr, err.Error())
	require.EqualError(t, err, unreadable(at))
	require.True(t, at >= 4*page-100 && at < 5*page, "byte %d: on the pages gone of frames 3 and 4 (the copy may start from the end)", at)
	v, err := d.(dataset.Viewer).ViewFrames(5, 7)
	require.NoError(t, err)
	_, err = readView(v)
	require.EqualError(t, err, unreadable(5*page))
	require.Equal(t, errs.IO, errs.KindOf(err))

	require.NoError(t, d.Close())
	require.NoError(t, d.Close())
	require.Panics(t, func() { _, _ = readView(v) }, "a fault on the buffer of a closed dataset is not the dataset's")
}
