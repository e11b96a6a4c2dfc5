// Package testfiles locates the real detector files that tests read.
//
// The files live outside the repository (GPL-3.0 data, never copied in): by default in
// ../shared/data beside the repository root, or wherever STEMDOT_TESTDATA points.
package testfiles

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the test data directory, or skips the test with a message when it is
// absent.
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("STEMDOT_TESTDATA")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		// file is <repo>/internal/testfiles/testfiles.go
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Skipf("real detector files not found at %s (set STEMDOT_TESTDATA): skipping", dir)
	}
	return dir
}

// File returns the path of a file under Dir, or skips the test when it is absent.
func File(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("test file %s not found (set STEMDOT_TESTDATA): skipping", p)
	}
	return p
}
