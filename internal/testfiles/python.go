package testfiles

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Python returns a Python interpreter that imports every module of modules ("numpy",
// "h5py", "hdf5plugin"), for tests whose independent reference is numpy or h5py code:
// STEMDOT_PYTHON, else the repository's python/.venv (make py-refs installs them there),
// else python3. It skips the test with a message when none does.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0) // <repo>/internal/testfiles/python.go
	candidates := []string{filepath.Join(filepath.Dir(file), "..", "..", "python", ".venv", "bin", "python"), "python3"}
	if p := os.Getenv("STEMDOT_PYTHON"); p != "" {
		candidates = []string{p}
	}
	code := "import " + strings.Join(append([]string{"sys"}, modules...), ", ")
	for _, py := range candidates {
		if err := exec.Command(py, "-c", code).Run(); err == nil {
			return py
		}
	}
	t.Skipf("no Python interpreter with %s found (tried %s; run make py-refs or set STEMDOT_PYTHON): skipping the independent reference", strings.Join(modules, ", "), strings.Join(candidates, ", "))
	return ""
}

// RunPython runs the Python code with the interpreter of Python(t, modules...) and the
// arguments args (sys.argv[1:]), and returns its standard output; the test fails with
// the script's standard error when it exits non-zero.
func RunPython(t testing.TB, code string, modules []string, args ...string) []byte {
	t.Helper()
	py := Python(t, modules...)
	cmd := exec.Command(py, append([]string{"-c", code}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python reference failed: %v\n%s", err, stderr.String())
	}
	return out
}
