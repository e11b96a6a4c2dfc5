package stemdot_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// Item #17.10: an NPY mask file whose masks do not fit the frames is refused from its
// header, before its weights are read: here a header of 100000 masks of 64×64 (1.5 GiB
// of float32) with no weights behind it gives the shape error, not the size error (or
// the memory) that reading it would.
func TestMasksFromChecksSigShapeFromHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.npy")
	head, err := npy.Header("<f4", []int{100000, 64, 64})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, head, 0o644))
	_, err = stemdot.MasksFrom([2]int{256, 256}, []string{path}, []string{"com"})
	require.EqualError(t, err, "mask file "+path+": masks of shape (64, 64) do not match the frames' sig_shape (256, 256)")
	require.Equal(t, errs.Shape, errs.KindOf(err))
}
