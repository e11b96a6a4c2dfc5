package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/testformat"
)

// execute runs the command line args in this process (the test binary, which has the
// test-only format skiptest) and returns its output and the error as main prints it.
func execute(t *testing.T, args ...string) (stdout, stderr, err string) {
	t.Helper()
	root := NewRootCmd()
	var o, e bytes.Buffer
	root.SetOut(&o)
	root.SetErr(&e)
	root.SetArgs(args)
	if rerr := root.ExecuteContext(t.Context()); rerr != nil {
		err = "stemdot: " + frontend.FlagNames(rerr.Error())
	}
	return o.String(), e.String(), err
}

// Every registered format's own options are flags of the commands that open files, with
// their help (a switch given alone is on), and reach the format (#19.1).
func TestFormatOptionFlags(t *testing.T) {
	stdout, _, err := execute(t, "info", "--help")
	require.Empty(t, err)
	require.Regexp(t, `--skip-bytes string +skiptest files: bytes before the first frame \(default "0"\)`, stdout)
	require.Regexp(t, `--skip-note +skiptest files: add a note`, stdout)

	path := filepath.Join(t.TempDir(), "f"+testformat.Ext)
	require.NoError(t, os.WriteFile(path, []byte{0xEE, 0xEE, 1, 2, 3, 4, 5, 6, 7, 8}, 0o644))
	stdout, stderr, err := execute(t, "info", path, "--skip-bytes", "2", "--skip-note", "--nav-shape", "2")
	require.Empty(t, err)
	require.Contains(t, stdout, "format:     skiptest\nnav_shape:  (2)\nsig_shape:  (2, 2)\n")
	require.Equal(t, "stemdot: warning: "+path+": "+testformat.Note+"\n", stderr)

	_, _, err = execute(t, "info", path, "--skip-bytes", "x")
	require.Equal(t, "stemdot: dataset: "+path+`: --skip-bytes "x" is not a byte count`, err)
	_, _, err = execute(t, "info", path, "--skip-note=maybe")
	require.Equal(t, `stemdot: --skip-note "maybe": not a boolean: "maybe"`, err)
}
