package errs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKinds(t *testing.T) {
	err := New(Format, "dataset: %s: bad header", "x.mib")
	require.Equal(t, "dataset: x.mib: bad header", err.Error())
	require.ErrorIs(t, err, Format)
	require.NotErrorIs(t, err, IO)
	require.Equal(t, Format, KindOf(fmt.Errorf("open: %w", err)), "the kind survives wrapping")

	// The first classification wins; the cause stays reachable.
	io := Wrap(IO, fmt.Errorf("dataset: %w", fs.ErrNotExist))
	again := Wrap(Format, fmt.Errorf("apply: %w", io))
	require.Equal(t, IO, KindOf(again))
	require.ErrorIs(t, again, fs.ErrNotExist)
	require.Nil(t, Wrap(IO, nil))

	require.Equal(t, Cancelled, KindOf(fmt.Errorf("worker 0: %w", context.Canceled)))
	require.Equal(t, Cancelled, KindOf(context.DeadlineExceeded))
	require.Equal(t, Internal, KindOf(errors.New("something unforeseen")))
	require.Equal(t, "shape error", Shape.Error())
}
