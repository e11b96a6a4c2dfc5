package stemdot_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/testformat"
)

// A format's own options (dataset.Format.FormatOptions, here of the test-only format
// skiptest) are options of Open like the shared ones: listed by OpenOptions with their
// help, set by key (SetOpenOption, ParseOptions: the C ABI and Python) into
// Options.FormatOptions, a switch's value as "true" or "false", read by the format, and
// named by their Go name Options.FormatOptions["key"] in this package's messages.
func TestFormatOptions(t *testing.T) {
	options := stemdot.OpenOptions()
	i := slices.IndexFunc(options, func(o stemdot.OpenOption) bool { return o.Key == "skip_bytes" })
	require.GreaterOrEqual(t, i, 0, "OpenOptions lists the format option skip_bytes")
	require.Equal(t, "skiptest files: bytes before the first frame", options[i].Usage)
	require.Equal(t, "0", options[i].Default)
	require.Equal(t, "--skip-bytes", options[i].FlagName())
	i = slices.IndexFunc(options, func(o stemdot.OpenOption) bool { return o.Key == "skip_note" })
	require.True(t, i >= 0 && options[i].Switch, "skip_note is a switch")

	opt, err := stemdot.ParseOptions("skip_bytes=3; SKIP_NOTE=yes")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"skip_bytes": "3", "skip_note": "true"}, opt.FormatOptions)
	var o stemdot.Options
	require.NoError(t, stemdot.SetOpenOption(&o, "skip_note", "0"))
	require.Equal(t, map[string]string{"skip_note": "false"}, o.FormatOptions)
	err = stemdot.SetOpenOption(&o, "skip_note", "maybe")
	require.EqualError(t, err, `option skip_note "maybe": not a boolean: "maybe"`)
	require.Equal(t, errs.Argument, errs.KindOf(err))
	_, err = stemdot.ParseOptions("skip_byte=3")
	require.ErrorContains(t, err, `unknown option "skip_byte" (known: format, nav_shape,`)
	require.ErrorContains(t, err, "skip_bytes, skip_note")

	// The format reads them: 3 bytes skipped, then frames 1..4, 5..8, 9..12.
	dir := t.TempDir()
	path := filepath.Join(dir, "f"+testformat.Ext)
	require.NoError(t, os.WriteFile(path, []byte{0xEE, 0xEE, 0xEE, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 0o644))
	ds, err := stemdot.Open(path, opt)
	require.NoError(t, err)
	require.Equal(t, []int{1, 3}, ds.NavShape())
	got := make([]byte, 3*4)
	require.NoError(t, ds.ReadFrames(0, 3, got))
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, got)
	require.Contains(t, stemdot.OpenWarnings(ds), path+": "+testformat.Note)
	require.NoError(t, ds.Close())

	// The format's own error, and the note on a format option another format ignores,
	// name the option as a Go caller sets it.
	_, err = stemdot.Open(path, stemdot.Options{FormatOptions: map[string]string{"skip_bytes": "x"}})
	require.EqualError(t, err, `dataset: `+path+`: Options.FormatOptions["skip_bytes"] "x" is not a byte count`)
	require.Equal(t, errs.Argument, errs.KindOf(err))
	require.Equal(t, `dataset: `+path+`: option skip_bytes "x" is not a byte count`, frontend.OptionKeys(err.Error()))
	require.Equal(t, `dataset: `+path+`: --skip-bytes "x" is not a byte count`, frontend.FlagNames(err.Error()))
	npyPath := filepath.Join(dir, "f.npy")
	w, err := dataset.Create(npyPath, "npy", []int{2}, [2]int{2, 2}, dataset.Uint8)
	require.NoError(t, err)
	require.NoError(t, w.WriteFrames(make([]byte, 8)))
	require.NoError(t, w.Close())
	ds, err = stemdot.Open(npyPath, opt)
	require.NoError(t, err)
	defer ds.Close()
	require.Equal(t, []string{
		npyPath + `: Options.FormatOptions["skip_bytes"] applies to skiptest files only and was ignored`,
		npyPath + `: Options.FormatOptions["skip_note"] applies to skiptest files only and was ignored`,
	}, stemdot.OpenWarnings(ds))
}

// The keys dataset reserves for its shared options (no format option may take one) are
// the shared options of OpenOptions, the fields of Options but FormatOptions.
func TestSharedOptionKeys(t *testing.T) {
	var shared []string
	for _, o := range stemdot.OpenOptions() {
		if _, _, isFormat := dataset.FormatOptionOf(o.Key); !isFormat {
			shared = append(shared, o.Key)
		}
	}
	require.ElementsMatch(t, dataset.SharedOptionKeys(), shared)
}
