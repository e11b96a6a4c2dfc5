package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pendingFile is an output written under a temporary name, renamed to its final name
// only when every output of the run has been written.
type pendingFile struct{ tmp, final string }

func (p pendingFile) commit() error { return os.Rename(p.tmp, p.final) }
func (p pendingFile) discard()      { os.Remove(p.tmp) }

// checkOutput fails early, before any work, when out cannot receive a result: its
// directory is missing, it exists but is not a regular file (a device, a directory) or
// is not writable, or it is one of the run's input files.
func checkOutput(flag, out string, inputs ...string) error {
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s %s: directory %s does not exist", flag, out, dir)
	}
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, out, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s %s: exists and is not a regular file: not replacing it", flag, out)
	}
	if st.Mode().Perm()&0o222 == 0 || unix.Access(out, unix.W_OK) != nil {
		return fmt.Errorf("%s %s: exists and is not writable: not replacing it", flag, out)
	}
	for _, in := range inputs {
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return fmt.Errorf("%s %s: is an input of this run: not replacing it", flag, out)
		}
	}
	return nil
}

// writeTemp writes a file next to final under a temporary name.
func writeTemp(final string, write func(*os.File) error) (pendingFile, error) {
	f, err := os.CreateTemp(filepath.Dir(final), "."+filepath.Base(final)+".*.tmp")
	if err != nil {
		return pendingFile{}, fmt.Errorf("writing %s: %w", final, err)
	}
	p := pendingFile{tmp: f.Name(), final: final}
	// os.CreateTemp makes the file private (0600); results are for others to read too.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		p.discard()
		return pendingFile{}, fmt.Errorf("writing %s: %w", final, err)
	}
	if err := write(f); err != nil {
		f.Close()
		p.discard()
		return pendingFile{}, fmt.Errorf("writing %s: %w", final, err)
	}
	if err := f.Close(); err != nil {
		p.discard()
		return pendingFile{}, fmt.Errorf("writing %s: %w", final, err)
	}
	return p, nil
}
