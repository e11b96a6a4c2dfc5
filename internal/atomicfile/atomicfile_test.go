package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An output path that is a symbolic link (absolute, relative, a chain, or to a file not
// there yet) is written through: the target gets the content, the link stays a link.
func TestWriteThroughSymlinks(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	target := filepath.Join(sub, "c.npy")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	abs, rel, chain, dangling := filepath.Join(dir, "abs.npy"), filepath.Join(dir, "rel.npy"), filepath.Join(dir, "chain.npy"), filepath.Join(dir, "new.npy")
	require.NoError(t, os.Symlink(target, abs))
	require.NoError(t, os.Symlink("sub/c.npy", rel))
	require.NoError(t, os.Symlink("rel.npy", chain))
	require.NoError(t, os.Symlink("sub/new-target.npy", dangling))
	for _, link := range []string{abs, rel, chain, dangling} {
		want := "via " + filepath.Base(link)
		require.NoError(t, Write(link, func(w io.Writer) error { _, err := io.WriteString(w, want); return err }))
		st, err := os.Lstat(link)
		require.NoError(t, err)
		require.NotZero(t, st.Mode()&os.ModeSymlink, "%s is still a link", link)
		got, err := os.ReadFile(link)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
	got, err := os.ReadFile(filepath.Join(sub, "new-target.npy"))
	require.NoError(t, err)
	require.Equal(t, "via new.npy", string(got))
	entries, err := os.ReadDir(sub)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left behind")
}

// A file replaced keeps its permissions (a private result stays private); a new file
// gets 0666 less the umask.
func TestReplacedFileKeepsItsMode(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private.npy")
	require.NoError(t, os.WriteFile(private, []byte("old"), 0o600))
	require.NoError(t, os.Chmod(private, 0o640))
	link := filepath.Join(dir, "link.npy")
	require.NoError(t, os.Symlink(private, link))
	for _, path := range []string{private, link} {
		require.NoError(t, Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }))
		st, err := os.Stat(private)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "via %s", path)
	}
	fresh := filepath.Join(dir, "fresh.npy")
	require.NoError(t, Write(fresh, func(w io.Writer) error { return nil }))
	st, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, 0o666&^umask(), st.Mode().Perm())
}
