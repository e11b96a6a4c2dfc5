package dataset_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// failingReaderAt fails every read.
type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk gone") }

// ReadHeader returns a header's bytes, fewer for a shorter file (for the format's parser
// to refuse), and a failed read as errs.IO.
func TestReadHeader(t *testing.T) {
	file := []byte("0123456789")
	head, err := dataset.ReadHeader(bytes.NewReader(file), 10, 4)
	require.NoError(t, err)
	assert.Equal(t, []byte("0123"), head)
	head, err = dataset.ReadHeader(bytes.NewReader(file), 10, 64)
	require.NoError(t, err)
	assert.Equal(t, file, head)
	_, err = dataset.ReadHeader(failingReaderAt{}, 10, 4)
	assert.Equal(t, errs.IO, errs.KindOf(err))
	assert.ErrorContains(t, err, "reading the header: disk gone")
}

// A switch format option is spelled alike for every format: true/1/yes/on,
// false/0/no/off in any case, the default when absent or empty, else errs.Argument
// naming the option.
func TestSwitchOption(t *testing.T) {
	opt := func(v string) dataset.Options { return dataset.Options{FormatOptions: map[string]string{"k": v}} }
	for v, want := range map[string]bool{"true": true, "1": true, "Yes": true, " on ": true, "false": false, "0": false, "NO": false, "off": false} {
		for _, def := range []bool{true, false} {
			got, err := dataset.SwitchOption(opt(v), "k", def)
			require.NoError(t, err, v)
			assert.Equal(t, want, got, v)
		}
	}
	for _, def := range []bool{true, false} {
		got, err := dataset.SwitchOption(dataset.Options{}, "k", def)
		require.NoError(t, err)
		assert.Equal(t, def, got)
		got, err = dataset.SwitchOption(opt(""), "k", def)
		require.NoError(t, err)
		assert.Equal(t, def, got)
	}
	_, err := dataset.SwitchOption(opt("maybe"), "k", true)
	assert.Equal(t, errs.Argument, errs.KindOf(err))
	assert.ErrorContains(t, err, `option k "maybe" is not true or false`)
}
