package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// childEnv makes this test binary, started by TestKilledWriter, create the temporary
// file of the path it names, print the temporary's name and wait to be killed.
const childEnv = "STEMDOT_ATOMICFILE_TEST_CREATE"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		f, err := Create(path)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(f.Name())
		select {}
	}
	os.Exit(m.Run())
}

// deadPID returns the pid of a process that has exited (and been waited for).
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// Item #17.13: a writer killed while writing (SIGKILL) leaves its temporary file; the
// next write of the same name removes it. While the writer lives, a concurrent write of
// the same name leaves its temporary alone (it replaces the final file, as the last of
// two runs writing one name does).
func TestKilledWriter(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.npy")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+out)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	tmp := strings.TrimSpace(line)
	require.Regexp(t, "^"+regexp.QuoteMeta(fmt.Sprintf("%s/.r.npy.%d.", dir, cmd.Process.Pid))+`[0-9]+\.tmp$`, tmp, ".NAME.PID.NNN.tmp")

	require.NoError(t, Write(out, writeString("first")))
	require.FileExists(t, tmp, "a live writer's temporary stays")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.FileExists(t, tmp, "SIGKILL leaves the temporary behind")
	require.NoError(t, Write(out, writeString("second")))
	require.NoFileExists(t, tmp, "the next write removes it")
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "second", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the result")
}

// Item #17.13: only temporaries of the name written, of the form .NAME.PID.NNN.tmp, whose
// writer is gone (no such process here, no lock on the file) are removed: not those of a
// live process, nor one locked by a writer elsewhere (a process on another machine
// sharing the directory), nor other names.
func TestStaleTemporariesOnly(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.npy")
	dead := deadPID(t)
	live := exec.Command("sleep", "60")
	require.NoError(t, live.Start())
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	name := func(format string, args ...any) string {
		p := filepath.Join(dir, fmt.Sprintf(format, args...))
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o644))
		return p
	}
	stale := name(".out.npy.%d.111.tmp", dead)
	keep := []string{
		name(".out.npy.%d.222.tmp", live.Process.Pid),
		name(".out.npy.%d.333.tmp", dead), // locked below
		name(".other.npy.%d.444.tmp", dead),
		name(".out.npy.%d.tmp", dead),
		name(".out.npy.x%d.555.tmp", dead),
		name("out.npy.%d.666.tmp", dead),
		name(".out.npy.%d.777.tmp~", dead),
	}
	locked, err := os.Open(keep[1])
	require.NoError(t, err)
	defer locked.Close()
	require.NoError(t, unix.Flock(int(locked.Fd()), unix.LOCK_EX))

	require.NoError(t, Write(out, writeString("result")))
	require.NoFileExists(t, stale)
	for _, p := range keep {
		require.FileExists(t, p)
	}
}

// Item #17.13: Commit flushes the file to the disk before the rename and the directory
// after it, so that a power loss cannot leave the final name empty or pointing nowhere.
func TestCommitFlushesFileThenDirectory(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.npy")
	type call struct {
		name       string
		finalThere bool
	}
	var calls []call
	saved := fsync
	t.Cleanup(func() { fsync = saved })
	fsync = func(f *os.File) error {
		_, err := os.Stat(out)
		calls = append(calls, call{filepath.Base(f.Name()), err == nil})
		return saved(f)
	}
	require.NoError(t, Write(out, writeString("data")))
	require.Len(t, calls, 2, "%+v", calls)
	require.True(t, strings.HasPrefix(calls[0].name, ".r.npy."), "the temporary first: %+v", calls)
	require.False(t, calls[0].finalThere, "the file is flushed before it is renamed")
	require.Equal(t, call{filepath.Base(dir), true}, calls[1], "then the directory, after the rename")

	// A file written through Create is flushed at Commit too.
	calls = nil
	f, err := Create(out)
	require.NoError(t, err)
	_, err = f.WriteString("more")
	require.NoError(t, err)
	require.NoError(t, f.Commit())
	require.Len(t, calls, 2, "%+v", calls)
	require.True(t, calls[1].finalThere)
}

// unwritableDir is a directory in which this process cannot create files: a read-only
// one, or for root (whom permissions do not stop) /proc.
func unwritableDir(t *testing.T) string {
	if os.Geteuid() == 0 {
		return "/proc"
	}
	dir := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(dir, 0o555))
	return dir
}

// Item #17.13: Check finds a directory in which no file can be created before any work,
// and leaves nothing behind where it can.
func TestCheckUnwritableDirectory(t *testing.T) {
	dir := unwritableDir(t)
	path := filepath.Join(dir, "r.npy")
	err := Check(path)
	require.ErrorContains(t, err, path+": cannot write in directory "+dir+": ")
	_, err = Create(path)
	require.ErrorContains(t, err, "cannot write in directory")

	ok := t.TempDir()
	require.NoError(t, Check(filepath.Join(ok, "r.npy")))
	entries, err := os.ReadDir(ok)
	require.NoError(t, err)
	require.Empty(t, entries, "the probe is removed")
}
