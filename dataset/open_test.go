package dataset_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	_ "github.com/stemdot/stemdot/dataset/formats" // the tests open files of every format
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

func TestIgnoredOptions(t *testing.T) {
	dir := t.TempDir()
	for _, format := range []string{"npy", "mib"} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(dir, "scan."+format)
			frametest.WriteRandom(t, path, format, []int{2, 3}, [2]int{4, 6})
			opt := frametest.RawOnly
			opt.DatasetPath, opt.AllowFill = "/entry/data", true
			frametest.CheckIgnored(t, path, opt,
				"option sig_shape applies to raw files only and was ignored: the "+format+" file gives sig shape (4, 6)",
				"option dtype applies to raw files only and was ignored: the "+format+" file gives dtype uint16",
				"option byte_order applies to raw files only and was ignored: the "+format+" file gives its byte order",
				"option dataset_path applies to HDF5 files only and was ignored",
				"option allow_fill applies to HDF5 files only and was ignored")
		})
	}
	t.Run("raw", func(t *testing.T) {
		path := filepath.Join(dir, "scan.raw")
		frametest.WriteRandom(t, path, "raw", []int{2, 3}, [2]int{4, 6})
		d, err := dataset.Open(path, dataset.Options{SigShape: []int{4, 6}, DType: dataset.Uint16, BigEndian: true, NavShape: []int{2, 3}})
		require.NoError(t, err)
		assert.Empty(t, dataset.Notes(d), "raw options on a raw file")
		require.NoError(t, d.Close())
		frametest.CheckIgnored(t, path, dataset.Options{SigShape: []int{4, 6}, DType: dataset.Uint16, DatasetPath: "/data"},
			"option dataset_path applies to HDF5 files only and was ignored")
	})
	t.Run("empad", func(t *testing.T) {
		xmlPath, _, _ := frametest.WriteEMPAD(t, dir, "acquisition_v122.xml", 6, 1)
		frametest.CheckIgnored(t, xmlPath, dataset.Options{DType: dataset.Uint16},
			"option dtype applies to raw files only and was ignored: the empad file gives dtype float32")
	})
	t.Run("blo", func(t *testing.T) {
		frametest.CheckIgnored(t, testfiles.File(t, "blo/test1.blo"), dataset.Options{SigShape: []int{144, 144}},
			"option sig_shape applies to raw files only and was ignored: the blo file gives sig shape (144, 144)")
	})
}

// TestOpenDirectory: a directory given as the data file is named as a directory
// (errs.IO), whatever its name or option format, never "not found", a count of files
// beside it or a missing option.
func TestOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		opt  dataset.Options
	}{
		{"scan.raw", dataset.Options{}},
		{"scan.gtg", dataset.Options{}},
		{"scan.mib", dataset.Options{}},
		{"scan", dataset.Options{Format: "frms6"}},
		{"scan", dataset.Options{Format: "k2is"}},
	} {
		path := filepath.Join(dir, c.name)
		require.NoError(t, os.MkdirAll(path, 0o755))
		_, err := dataset.Open(path, c.opt)
		require.Error(t, err, c.name)
		assert.Equal(t, errs.IO, errs.KindOf(err), "%s: %v", c.name, err)
		assert.Contains(t, err.Error(), "dataset: "+path+" is a directory", c.name)
	}
}
