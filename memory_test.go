package stemdot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// childEnv makes this test binary, started by runUnderLimit, apply the centre-of-mass
// masks to the MIB file it names under an address-space limit and print a limitReport
// instead of running the tests: "MIB EXTRA CPUS" limits the address space (RLIMIT_AS) to
// what the process has mapped once the dataset and masks are open, plus EXTRA bytes.
const childEnv = "STEMDOT_TEST_APPLY_UNDER_LIMIT"

func TestMain(m *testing.M) {
	if args := strings.Fields(os.Getenv(childEnv)); len(args) == 3 {
		os.Exit(applyUnderLimit(args))
	}
	os.Exit(m.Run())
}

type limitReport struct {
	Values     []float32
	Err, Kind  string
	Limit, Map int64 // the limit set and the mapped size when it was set, bytes
}

func applyUnderLimit(args []string) int {
	extra, _ := strconv.ParseInt(args[1], 10, 64)
	ds, err := stemdot.Open(args[0], stemdot.Options{NavShape: []int{2, 4}})
	if err != nil {
		panic(err)
	}
	stack, err := stemdot.Masks(ds.SigShape(), "com")
	if err != nil {
		panic(err)
	}
	var rep limitReport
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			rep.Map = kb << 10
		}
	}
	rep.Limit = rep.Map + extra
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: uint64(rep.Limit), Max: uint64(rep.Limit)}); err != nil {
		panic(err)
	}
	res, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: args[2], Oversubscribe: true}, stemdot.ApplyOptions{})
	if err != nil {
		rep.Err, rep.Kind = err.Error(), errs.KindOf(err).Error()
	} else {
		rep.Values = res.F32
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

// runUnderLimit runs applyUnderLimit in a child process; it fails the test when the
// child does not exit 0 (a Go runtime crash, "fatal error: out of memory" or
// "pthread_create failed", included). The child runs with MALLOC_ARENA_MAX=1, as
// internal/memlimit sets it for a process started under an address-space limit (this one
// sets its limit after starting).
func runUnderLimit(t *testing.T, mib string, extra int64, cpus int) limitReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", childEnv, mib, extra, cpus), "MALLOC_ARENA_MAX=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%d MiB to spare, %d cpus: %.600s", extra>>20, cpus, stderr.String())
	var rep limitReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	return rep
}

// Item #17.11: under an address-space limit (ulimit -v), a small job (8 frames of
// 256×256, the 3 centre-of-mass masks, 2 or 8 workers) either runs, giving the values
// it gives without a limit, or is refused up front with a message that names the limit
// and the ulimit -v it needs; never the Go runtime's crash. The check counts what the
// run maps (its new threads' stacks, its Go heap growth in 64 MiB arenas), not a fixed
// 256 MiB of slack: with 240 MiB to spare the job runs (028a1ad refused it below 256).
// The limits leave at least 80 MiB: with less than an arena (and its metadata) to
// spare, the Go heap cannot grow at all and any allocation may be fatal, a check's
// included. 64 workers, whose threads and tiles do not fit in 96 MiB, are refused.
func TestApplyUnderAddressSpaceLimit(t *testing.T) {
	if testfiles.Race {
		t.Skip("the race detector maps shadow memory of its own, which an address-space limit refuses: run without -race (make test-go does)")
	}
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	ds, err := stemdot.Open(mib, stemdot.Options{NavShape: []int{2, 4}})
	require.NoError(t, err)
	stack, err := stemdot.Masks(ds.SigShape(), "com")
	require.NoError(t, err)
	want, err := stemdot.Apply(context.Background(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	require.NoError(t, ds.Close())
	refusal := `the run \(.*\) needs .* of memory, but the address-space limit \(ulimit -v [0-9]+ KiB\) leaves .* of address space and it takes .* there \(.*for the Go runtime\): run it under ulimit -v [0-9]+ or more(, or | \(no smaller step fits)`
	for _, cpus := range []int{2, 8} {
		ran := 0
		for extra := int64(80 << 20); extra <= 240<<20; extra += 16 << 20 {
			rep := runUnderLimit(t, mib, extra, cpus)
			if rep.Err == "" {
				ran++
				require.Equal(t, want.F32, rep.Values, "%d MiB to spare, %d cpus", extra>>20, cpus)
				continue
			}
			require.Equal(t, "resources error", rep.Kind, rep.Err)
			require.Regexp(t, refusal, rep.Err)
			require.NotEqual(t, int64(240<<20), extra, "%d cpus refused with 240 MiB to spare: %s", cpus, rep.Err)
		}
		t.Logf("%d cpus: ran with %d of 11 limits, refused the others", cpus, ran)
	}
	rep := runUnderLimit(t, mib, 96<<20, 64)
	require.Equal(t, "resources error", rep.Kind, rep.Err)
	require.Regexp(t, refusal, rep.Err)
}
