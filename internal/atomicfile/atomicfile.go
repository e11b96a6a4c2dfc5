// Package atomicfile writes stemdot's output files (results, PNGs, synthetic datasets)
// all or nothing: each is written under a temporary name beside its final path,
// flushed to the disk (fsync) and renamed only when complete, and the rename is flushed
// too (fsync of the directory), so a failed or interrupted run, or a power loss, never
// leaves a half-written or empty file under the final name. New files get mode 0666 less
// the umask, as os.Create gives; a file replaced keeps its permissions.
//
// The temporary file of NAME is .NAME.PID.NNN.tmp in NAME's directory: PID is the
// writer's process id, NNN random, and the writer holds an exclusive flock on it until
// it is renamed or removed. A writer killed (SIGKILL, a power loss) leaves it behind;
// each later write of NAME removes the temporaries of NAME whose writer is gone: no
// process PID on this machine and no lock held on the file (a writer on another machine
// sharing the directory holds its lock). Two runs writing the same NAME at once never
// remove each other's.
//
// An output path that is a symbolic link is written through: the file it points to is
// replaced, the link stays.
//
// Check refuses destinations a user cannot have meant or that cannot be written: a
// missing directory, one in which no file can be created, something that is not a
// regular file (a device such as /dev/null, a directory, a FIFO: rename would replace
// it), a read-only or unwritable file, or one of the run's input files.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/regfile"
)

// Check reports, before any work, why path cannot receive an output: its directory
// does not exist or no file can be created in it (its temporary file is created and
// removed to find out), or path exists and is not a regular file, is not writable, or is
// the same file as one of inputs. The error (kind errs.IO) names path and the problem.
func Check(path string, inputs ...string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return errs.New(errs.IO, "%s: directory %s does not exist", path, dir)
	}
	if dst, err := followLinks(path); err == nil {
		f, err := createTemp(dst)
		if err != nil {
			return errs.New(errs.IO, "%s: cannot write in directory %s: %v", path, filepath.Dir(dst), errors.Unwrap(err))
		}
		f.Close()
		os.Remove(f.Name())
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.IO, err)
	}
	if !st.Mode().IsRegular() {
		return errs.New(errs.IO, "%s exists and %s: not replacing it", path, regfile.NotRegular(st.Mode()))
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
	path   string // as given, for messages
	dst    string // path with its symbolic links followed: what Commit replaces
	synced bool   // flushed to the disk already (by Prepare)
	done   bool
}

// Create checks path (see Check), removes the temporaries of earlier writers of the
// file path names (through its symbolic links) that are gone, and creates and locks the
// temporary file for it beside that file, with that file's permissions when it exists,
// else mode 0666 less the umask. Write to it, then Commit or Abort.
func Create(path string) (*File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	dst, err := followLinks(path)
	if err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("create %s: %w", path, err))
	}
	removeStale(dst)
	f, err := createTemp(dst)
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

// createTemp creates the temporary file of dst, .NAME.PID.NNN.tmp beside it, and takes
// an exclusive flock on it (where the file system has locks) that it holds while open.
func createTemp(dst string) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Dir(dst), tempPrefix(dst)+strconv.Itoa(os.Getpid())+".*.tmp")
	if err != nil {
		return nil, err
	}
	unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) // new: nobody else holds it
	return f, nil
}

// tempPrefix is what the names of dst's temporary files start with: ".NAME.".
func tempPrefix(dst string) string { return "." + filepath.Base(dst) + "." }

// removeStale removes the temporary files of dst (.NAME.PID.NNN.tmp beside it) left by
// writers that are gone: no process PID lives on this machine, and the file's flock is
// free. Errors are ignored: what cannot be removed stays.
func removeStale(dst string) {
	dir, prefix := filepath.Dir(dst), tempPrefix(dst)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := tempPID(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		name := filepath.Join(dir, e.Name())
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			os.Remove(name)
		}
		f.Close()
	}
}

// tempPID returns the writer's pid of a temporary file named prefix+"PID.NNN.tmp" (PID
// and NNN decimal), and whether name has that form.
func tempPID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".tmp")
	p, n, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || !digits(p) || !digits(n) {
		return 0, false
	}
	pid, err := strconv.Atoi(p)
	return pid, err == nil && pid > 0
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
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

// Close flushes the temporary file to the disk and closes it, keeping it for Commit (or
// Abort); its lock goes with it.
func (f *File) Close() error {
	err := f.sync()
	if cerr := f.File.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) && err == nil {
		err = errs.Wrap(errs.IO, fmt.Errorf("write %s: %w", f.path, cerr))
	}
	return err
}

// fsync flushes a file or directory to the disk (a variable for tests).
var fsync = (*os.File).Sync

// sync flushes the file's data to the disk, once.
func (f *File) sync() error {
	if f.synced {
		return nil
	}
	if err := fsync(f.File); err != nil && !errors.Is(err, os.ErrClosed) {
		return errs.Wrap(errs.IO, fmt.Errorf("write %s: %w", f.path, err))
	}
	f.synced = true
	return nil
}

// Commit flushes the file to the disk, closes it, renames it to its final path and
// flushes the directory, so that the final name holds the whole file after a power
// loss; on failure before the rename the temporary file is removed.
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
	if err := syncDir(filepath.Dir(f.dst)); err != nil {
		return errs.Wrap(errs.IO, fmt.Errorf("write %s: flushing directory %s: %w", f.path, filepath.Dir(f.dst), err))
	}
	return nil
}

// syncDir flushes directory dir (a rename in it) to the disk; file systems that cannot
// (EINVAL, ENOTSUP) are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := fsync(d); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTSUP) {
		return err
	}
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
// flushed to the disk, and returns it open (holding its lock), ready for Commit: several
// outputs are prepared, then committed together. On error nothing is left behind.
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
		err = f.sync()
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
