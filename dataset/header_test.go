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
