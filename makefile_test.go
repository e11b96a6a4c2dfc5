package stemdot_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakeBuildsBinary checks that `make` alone builds bin/stemdot, as the README says: the
// Makefile's default goal is all (a rule written above it, such as the tags stamp, must
// not become the default). make -n only prints the commands.
func TestMakeBuildsBinary(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not found: skipping the Makefile's default goal check")
	}
	out, err := exec.Command("make", "-n").CombinedOutput()
	require.NoError(t, err, "make -n: %s", out)
	require.True(t, strings.Contains(string(out), "-o bin/stemdot ./cmd/stemdot"),
		"make alone does not build bin/stemdot; make -n printed:\n%s", out)
}
