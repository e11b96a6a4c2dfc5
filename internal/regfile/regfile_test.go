package regfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "f.dat")
	require.NoError(t, os.WriteFile(reg, []byte("12345"), 0o644))
	f, size, err := Open(reg)
	require.NoError(t, err)
	require.EqualValues(t, 5, size)
	b := make([]byte, 5)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "12345", string(b))
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	require.Zero(t, flags&unix.O_NONBLOCK, "the descriptor is blocking again")
	require.NoError(t, f.Close())

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(fifo, link))
	for path, what := range map[string]string{
		fifo:        "is a named pipe, not a regular file",
		link:        "is a named pipe, not a regular file",
		dir:         "is a directory",
		"/dev/null": "is a character device, not a regular file",
	} {
		_, _, err := Open(path)
		require.EqualError(t, err, path+" "+what)
		require.Equal(t, errs.IO, errs.KindOf(err))
		require.EqualError(t, Check(path), path+" "+what)
	}
	_, _, err = Open(filepath.Join(dir, "missing"))
	require.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	require.Equal(t, errs.IO, errs.KindOf(err))
	require.NoError(t, Check(reg))
}
