package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	stemnpy "github.com/stemdot/stemdot/internal/npy"
)

// runPromptly runs stemdot with args and fails the test when it has not ended within
// 20 s (then it is killed): a regression that blocks fails instead of hanging.
func runPromptly(t *testing.T, args ...string) (stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, stemdotBin, args...)
	var e bytes.Buffer
	cmd.Stderr = &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "stemdot %v blocked", args)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return e.String(), code
}

// Files stemdot opens itself are refused at once, naming them, when they are FIFOs: a
// .hdr sidecar (#17.9), a --masks file.
func TestFIFOInputsRefused(t *testing.T) {
	dir := t.TempDir()
	frames := poissonish(9, 4, 16*16)
	mib := filepath.Join(dir, "scan.mib")
	writeCaseMIB(t, mib, frames, 16, 16, "U16")
	hdr := filepath.Join(dir, "scan.hdr")
	require.NoError(t, unix.Mkfifo(hdr, 0o644))
	stderr, code := runPromptly(t, "info", mib)
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "stemdot: dataset: "+mib+": "+hdr+" is a named pipe, not a regular file; give --nav-shape to read the file without it\n", stderr)

	require.NoError(t, os.Remove(hdr))
	masks := filepath.Join(dir, "m.npy")
	require.NoError(t, unix.Mkfifo(masks, 0o644))
	stderr, code = runPromptly(t, "apply", mib, "--masks", masks, "--out", filepath.Join(dir, "o.npy"))
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, masks+" is a named pipe, not a regular file")
}

// openFiles lists the paths of the files process pid has open.
func openFiles(pid int) []string {
	fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fd", "*"))
	var paths []string
	for _, fd := range fds {
		if p, err := os.Readlink(fd); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
}

// An interrupt while stemdot reads its inputs (before the computation, which stops by
// itself) ends it at once with status 1 and a message, as other cancellations do: an
// open may block where no cancellation reaches (#17.9). The test stops stemdot while
// it reads a large --masks file, sends SIGINT, and lets it go on.
func TestInterruptWhileReadingInputs(t *testing.T) {
	const s, nMasks = 64, 2048 // 64 MiB of float64 weights: long to read
	dir := t.TempDir()
	data := filepath.Join(dir, "scan.npy")
	frames := make([]float32, 16*s*s)
	for i := range frames {
		frames[i] = float32(i % 7)
	}
	require.NoError(t, stemnpy.WriteFile(data, []int{4, 4, s, s}, frames))
	masks := filepath.Join(dir, "m.npy")
	rng := rand.New(rand.NewPCG(17, 9))
	weights := make([]float64, nMasks*s*s)
	for i := range weights {
		weights[i] = rng.Float64()
	}
	require.NoError(t, stemnpy.WriteFile(masks, []int{nMasks, s, s}, weights))
	out := filepath.Join(dir, "o.npy")

	cmd := exec.Command(stemdotBin, "apply", data, "--masks", masks, "--out", out, "-q")
	var e bytes.Buffer
	cmd.Stderr = &e
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	reading := func() bool {
		for _, p := range openFiles(pid) {
			if p == masks {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(20 * time.Second)
	for !reading() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	caught := reading() // stopped while reading the masks, before the computation
	require.NoError(t, syscall.Kill(pid, syscall.SIGINT))
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	err := cmd.Wait()
	require.True(t, caught, "stemdot was not caught reading %s", masks)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, e.String())
	require.Equal(t, 1, ee.ExitCode(), "%v: %s", ee, e.String())
	require.Equal(t, "stemdot: interrupted\n", e.String())
	require.NoFileExists(t, out)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")
}
