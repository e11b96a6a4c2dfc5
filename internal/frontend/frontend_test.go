package frontend_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/stemdot/stemdot" // sets the variables
	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
)

// Package stemdot sets every variable of the plumbing when it is initialised.
func TestSet(t *testing.T) {
	require.Equal(t, "--sig-shape", frontend.FlagName("sig_shape"))
	require.Equal(t, "give --nav-shape", frontend.FlagNames("give Options.NavShape"))
	require.Equal(t, "give option nav_shape", frontend.OptionKeys("give Options.NavShape"))
	require.ErrorContains(t, frontend.CheckShiftsFile(t.TempDir()+"/shifts.txt"), ".npy")
	require.EqualError(t, frontend.CheckScan2D([]int{2, 2, 1}, "view: the virtual images are"),
		"view: the virtual images are of 1-D and 2-D scans, not of nav shape (2, 2, 1): give Options.NavShape 2,2 to read the scan as a 2-D one, without its axes of size 1")
	require.Equal(t, 256, frontend.GreyImage([]int{2, 4}, make([]float64, 8)).Rect.Dy())
}

// PinThread pins the thread to an allowed CPU; a CPU that does not exist is
// errs.Resources, naming the CPU.
func TestPinThread(t *testing.T) {
	cpus, err := affinity.ThreadCPUs()
	require.NoError(t, err)
	unpin, err := frontend.PinThread(cpus[len(cpus)-1])
	require.NoError(t, err)
	pinned, err := affinity.ThreadCPUs()
	require.NoError(t, err)
	require.Equal(t, cpus[len(cpus)-1:], pinned)
	require.NoError(t, unpin())
	_, err = frontend.PinThread(1 << 20)
	require.ErrorContains(t, err, "cpu 1048576")
	require.Equal(t, errs.Resources, errs.KindOf(err))
}
