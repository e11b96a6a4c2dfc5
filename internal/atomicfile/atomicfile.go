// Package atomicfile writes stemdot's output files (results, PNGs, synthetic datasets)
// all or nothing: each is written under a temporary name beside its final path and
// renamed only when complete, so a failed or interrupted run never leaves a half-written
// file under the final name. New files get mode 0666 less the umask, as os.Create gives;
// a file replaced keeps its permissions.
//
// An output path that is a symbolic link is written through: the file it points to is
// replaced, the link stays.
//
// Check refuses destinations a user cannot have meant: a missing directory, something
// that is not a regular file (a device such as /dev/null, a directory, a FIFO: rename
// would replace it), a read-only or unwritable file, or one of the run's input files.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Check reports, before any work, why path cannot receive an output: its directory
// does not exist, or it exists and is not a regular file, is not writable, or is the
// same file as one of inputs. The error (kind errs.IO) names path and the problem.
func Check(path string, inputs ...string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return errs.New(errs.IO, "%s: directory %s does not exist", path, dir)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.IO, err)
	}
	if !st.Mode().IsRegular() {
		return errs.New(errs.IO, "%s exists and %s: not replacing it", path, NotRegular(st.Mode()))
	}
	if st.Mode().Perm()&0o222 == 0 || unix.Access(path, unix.W_OK) != nil {
		return errs.New(errs.IO, "%s exists and is not writable (mode %v): not replacing it", path, st.Mode().Perm())
	}
	for _, in := range inputs {
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return errs.New(errs.IO, "%s is an input of this run: not replacing it", path)
		}
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

// umask is the process's file mode creation mask. Unix offers no call that only reads
// it: unix.Umask sets it and returns the old one, so it is read once, by setting it and
// restoring it at once (as github.com/google/renameio does); a file created by another
// goroutine in that instant would get mode 0666.
var umask = sync.OnceValue(func() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
})

// File is an output being written under a temporary name beside its final path.
type File struct {
	*os.File
	path string // as given, for messages
	dst  string // path with its symbolic links followed: what Commit replaces
	done bool
}

// Create checks path (see Check) and creates the temporary file for it beside the file
// that path names (through its symbolic links), with that file's permissions when it
// exists, else mode 0666 less the umask. Write to it, then Commit or Abort.
func Create(path string) (*File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	dst, err := followLinks(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("create %s: %w", path, err))
	}
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp")
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("create %s: %w", path, err))
	}
	mode := 0o666 &^ umask()
	if st, err := os.Stat(dst); err == nil {
		mode = st.Mode().Perm() // a file replaced keeps its permissions
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, errs.Wrap(errs.IO, fmt.Errorf("create %s: %w", path, err))
	}
	return &File{File: f, path: path, dst: dst}, nil
}

// followLinks returns path with its symbolic links followed, link after link (a link to
// a file that does not exist yet gives that file's path); an error after 40 links.
func followLinks(path string) (string, error) {
	for range 40 {
		st, err := os.Lstat(path)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return "", fmt.Errorf("too many levels of symbolic links")
}

// Path is the final path.
func (f *File) Path() string { return f.path }

// Close closes the temporary file, keeping it for Commit (or Abort).
func (f *File) Close() error {
	if err := f.File.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return errs.Wrap(errs.IO, fmt.Errorf("write %s: %w", f.path, err))
	}
	return nil
}

// Commit closes the file and renames it to its final path; on failure the temporary
// file is removed.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("write %s: already committed or aborted", f.path)
	}
	err := f.Close()
	if err == nil {
		if err = os.Rename(f.Name(), f.dst); err != nil {
			err = errs.Wrap(errs.IO, fmt.Errorf("write %s: %w", f.path, err))
		}
	}
	if err != nil {
		f.Abort()
		return err
	}
	f.done = true
	return nil
}

// Abort closes and removes the temporary file; the final path is untouched. Abort
// after Commit or Abort does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.Name())
}

// Prepare writes a whole file through write, buffered, into a temporary file for path,
// and returns it closed, ready for Commit: several outputs are prepared, then committed
// together. On error nothing is left behind.
func Prepare(path string, write func(io.Writer) error) (*File, error) {
	f, err := Create(path)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Abort()
		return nil, errs.Wrap(errs.IO, fmt.Errorf("write %s: %w", path, err))
	}
	return f, nil
}

// Write writes a whole file through write, atomically: Prepare, then Commit.
func Write(path string, write func(io.Writer) error) error {
	f, err := Prepare(path, write)
	if err != nil {
		return err
	}
	return f.Commit()
}

// CommitAll commits files in order; after the first failure it aborts the rest and
// returns the error. Files already renamed stay.
func CommitAll(files ...*File) error {
	for i, f := range files {
		if err := f.Commit(); err != nil {
			for _, rest := range files[i+1:] {
				rest.Abort()
			}
			return err
		}
	}
	return nil
}

// AbortAll aborts files.
func AbortAll(files ...*File) {
	for _, f := range files {
		f.Abort()
	}
}
