package stemdot_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakeBuildsBinary checks that `make` alone builds bin/stemdot, as the README says: the
// Makefile's default goal is all (a rule written above it, such as the tags stamp, must
// not become the default). make -n only prints the commands.
func TestMakeBuildsBinary(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found: skipping the Makefile's default goal check")
	}
	out, err := exec.Command("make", "-n").CombinedOutput()
	require.NoError(t, err, "make -n: %s", out)
	require.True(t, strings.Contains(string(out), "-o bin/stemdot ./cmd/stemdot"),
		"make alone does not build bin/stemdot; make -n printed:\n%s", out)
}

// installStemdot runs `make install` with PREFIX and BIN (where make builds bin/stemdot) in
// a temporary directory, CPU-only (NVCC empty: no CMake build of the kernels), and returns
// the PREFIX and make's output.
func installStemdot(t *testing.T) (prefix, out string) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found: skipping make install")
	}
	dir := t.TempDir()
	prefix = filepath.Join(dir, "prefix")
	cmd := exec.Command("make", "--no-print-directory", "install", "NVCC=", "BIN="+filepath.Join(dir, "bin"), "PREFIX="+prefix)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(prefix, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "make install: %s", b)
	return prefix, string(b)
}

// `make install` puts a working stemdot in PREFIX/bin and says whether that directory is on
// PATH; DESTDIR is prepended to the path written; `make uninstall` removes it.
func TestMakeInstall(t *testing.T) {
	prefix, out := installStemdot(t)
	bin := filepath.Join(prefix, "bin", "stemdot")
	require.Contains(t, out, "installed "+bin+": "+filepath.Dir(bin)+" is on PATH, run stemdot")
	version, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", version)
	require.Regexp(t, `^stemdot \d+\.\d+\.\d+ `, string(version))

	// Not on PATH: the message says how to put it there. DESTDIR: written below it, and
	// the binary built above is taken as it is.
	built := "BIN=" + filepath.Join(filepath.Dir(prefix), "bin")
	dest := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "install", "uninstall", "NVCC=", built, "PREFIX=/opt/sd", "DESTDIR="+dest)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Contains(t, string(b), "installed "+dest+"/opt/sd/bin/stemdot, to be /opt/sd/bin/stemdot")
	require.NoFileExists(t, filepath.Join(dest, "opt/sd/bin/stemdot"), "make uninstall removes it")

	b, err = exec.Command("make", "--no-print-directory", "install", "NVCC=", built, "PREFIX="+prefix).CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Contains(t, string(b), "installed "+bin+": "+filepath.Dir(bin)+" is not on PATH; add it")
	require.NoError(t, exec.Command("make", "--no-print-directory", "uninstall", "PREFIX="+prefix).Run())
	require.NoFileExists(t, bin, "make uninstall removes it")
}
