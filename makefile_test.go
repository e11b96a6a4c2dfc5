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
// PATH (and whether another stemdot comes first there); DESTDIR is prepended to the path
// written; `make uninstall` removes it.
func TestMakeInstall(t *testing.T) {
	prefix, out := installStemdot(t)
	bin := filepath.Join(prefix, "bin", "stemdot")
	require.Contains(t, out, "installed "+bin+": "+filepath.Dir(bin)+" is on PATH, run stemdot")
	version, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", version)
	require.Regexp(t, `^stemdot \d+\.\d+\.\d+ `, string(version))

	// The binary built above, installed again: make with the PATH given.
	built := "BIN=" + filepath.Join(filepath.Dir(prefix), "bin")
	runMake := func(path string, args ...string) string {
		cmd := exec.Command("make", append([]string{"--no-print-directory", "NVCC=", built}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "make %s: %s", args, b)
		return string(b)
	}
	path := os.Getenv("PATH")
	require.Contains(t, runMake(path, "install", "PREFIX="+prefix), "installed "+bin+": "+filepath.Dir(bin)+" is not on PATH; add it")
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "stemdot"), []byte("#!/bin/sh\n"), 0o755))
	require.Contains(t, runMake(other+":"+filepath.Dir(bin)+":"+path, "install", "PREFIX="+prefix),
		"installed "+bin+": "+filepath.Dir(bin)+" is on PATH, but "+filepath.Join(other, "stemdot")+" comes first there")
	runMake(path, "uninstall", "PREFIX="+prefix)
	require.NoFileExists(t, bin, "make uninstall removes it")

	dest := t.TempDir()
	require.Contains(t, runMake(path, "install", "PREFIX=/opt/sd", "DESTDIR="+dest), "installed "+dest+"/opt/sd/bin/stemdot, to be /opt/sd/bin/stemdot")
	st, err := os.Stat(filepath.Join(dest, "opt/sd/bin/stemdot"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	runMake(path, "uninstall", "PREFIX=/opt/sd", "DESTDIR="+dest)
	require.NoFileExists(t, filepath.Join(dest, "opt/sd/bin/stemdot"), "make uninstall removes it")
}
