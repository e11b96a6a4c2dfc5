// Package regfile opens the files stemdot reads (datasets, their sidecars, mask stacks)
// only when they are regular files, and never blocks in open(2) doing so: opening a
// named pipe (FIFO) for reading waits for a writer, possibly forever, and opening a
// device can have effects of its own (a tape rewinds, a terminal becomes the reader's).
// A path that names something else gets an error saying what it is instead.
package regfile

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Check returns nil when path is a regular file (symbolic links followed), without
// opening it. Errors are errs.IO: the stat error (an *fs.PathError, so that
// errors.Is(err, fs.ErrNotExist) holds for a missing file), or "PATH is a named pipe,
// not a regular file" (a directory, a socket, a character or block device likewise).
// Code that hands the path to a library which opens it (libhdf5) checks it with Check
// first.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return errs.Wrap(errs.IO, err)
	}
	if !st.Mode().IsRegular() {
		return notRegular(path, st.Mode())
	}
	return nil
}

// NotRegular says what a file of mode m that is not a regular file is, for messages:
// "is a directory", "is a named pipe, not a regular file", ...
func NotRegular(m fs.FileMode) string {
	t := m.Type()
	switch {
	case t&fs.ModeDir != 0:
		return "is a directory"
	case t&fs.ModeNamedPipe != 0:
		return "is a named pipe, not a regular file"
	case t&fs.ModeSocket != 0:
		return "is a socket, not a regular file"
	case t&fs.ModeCharDevice != 0:
		return "is a character device, not a regular file"
	case t&fs.ModeDevice != 0:
		return "is a block device, not a regular file"
	}
	return fmt.Sprintf("is not a regular file (mode %v)", m)
}

// notRegular is the errs.IO error "PATH is a named pipe, not a regular file" for path of
// mode m.
func notRegular(path string, m fs.FileMode) error {
	return errs.New(errs.IO, "%s %s", path, NotRegular(m))
}

// Open opens the regular file path for reading and returns it with its size in bytes.
// It checks the path with Check, then opens it with O_NONBLOCK, which cannot block even
// if a FIFO was put in its place meanwhile, checks the opened file's type again (fstat),
// and only then makes the descriptor blocking again (reads of regular files never wait
// anyway). Errors are those of Check.
func Open(path string) (*os.File, int64, error) {
	if err := Check(path); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, errs.Wrap(errs.IO, err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		err = errs.Wrap(errs.IO, err)
	case !st.Mode().IsRegular():
		err = notRegular(path, st.Mode())
	default:
		if e := unix.SetNonblock(int(f.Fd()), false); e != nil {
			err = errs.Wrap(errs.IO, fmt.Errorf("%s: %w", path, e))
		}
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}
