package masks

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// childEnv makes this test binary, started by loadUnderLimit, load a mask file under an
// address-space limit and print a loadReport instead of running the tests: "PATH EXTRA"
// limits the address space (RLIMIT_AS) to what the process has mapped plus EXTRA bytes.
const childEnv = "STEMDOT_MASKS_TEST_LOAD_UNDER_LIMIT"

func TestMain(m *testing.M) {
	if args := strings.Fields(os.Getenv(childEnv)); len(args) == 2 {
		os.Exit(loadChild(args[0], args[1]))
	}
	os.Exit(m.Run())
}

// loadReport is what a child prints: the stack's number of masks and the sum of its
// weights, or the error and its kind.
type loadReport struct {
	N         int
	Sum       float64
	Err, Kind string
}

func loadChild(path, extra string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	var limit uint64
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			e, _ := strconv.ParseUint(extra, 10, 64)
			limit = kb<<10 + e
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		panic(err)
	}
	var rep loadReport
	s, err := LoadNPY(path)
	if err != nil {
		rep.Err, rep.Kind = err.Error(), errs.KindOf(err).Error()
	} else {
		rep.N = s.N
		for _, v := range s.Data {
			rep.Sum += float64(v)
		}
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

// loadUnderLimit runs loadChild in a child process and returns its report; it fails the
// test when the child does not exit 0 (a Go runtime crash, "fatal error: out of memory",
// included).
func loadUnderLimit(t *testing.T, path string, extra int64) loadReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", childEnv, path, extra))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%d MiB to spare: %.600s", extra>>20, stderr.String())
	var rep loadReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	return rep
}

// Item #17.10: under an address-space limit (RLIMIT_AS, ulimit -v) from a fraction of the
// stack's size to a few times it, loading a dense stack either succeeds with every weight
// or is refused with an errs.Resources error naming the sizes and the limit, never the
// Go runtime's "fatal error: out of memory" (which 028a1ad gave where its check, counting
// two copies, passed and the load took three, or before its check, on the CSR form it
// built while finding out that the stack is dense).
func TestLoadNPYUnderAddressSpaceLimit(t *testing.T) {
	if testfiles.Race {
		t.Skip("the race detector maps shadow memory of its own, which an address-space limit refuses: run without -race (make test-go does)")
	}
	path := filepath.Join(t.TempDir(), "stack.npy")
	const n = 16384 // 64 MiB of float32 masks of 32×32
	head, err := npy.Header("<f4", []int{n, 32, 32})
	require.NoError(t, err)
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	_, err = w.Write(head)
	require.NoError(t, err)
	var sum float64
	for i := range n * 1024 {
		v := float32(i%7 + 1)
		sum += float64(v)
		_, err = w.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	size := int64(n) * 1024 * 4
	refusal := "^mask file " + regexp.QuoteMeta(path) + `: (the dense mask stack of shape \(16384, 32, 32\) needs 64|reading the weights needs 1) MiB of memory, but the address-space limit \(ulimit -v [0-9]+ KiB\) leaves .* of address space and it takes .*: run it under ulimit -v [0-9]+ or more, or use fewer or smaller masks$`
	var loaded, refused int
	for _, extra := range []int64{size / 2, size, 3 * size / 2, 2 * size, 5 * size / 2, 3 * size, 4 * size, 6 * size} {
		rep := loadUnderLimit(t, path, extra)
		if rep.Err != "" {
			refused++
			require.Equal(t, "resources error", rep.Kind, rep.Err)
			require.Regexp(t, refusal, rep.Err)
			continue
		}
		loaded++
		require.Equal(t, n, rep.N)
		require.Equal(t, sum, rep.Sum, "with %d MiB of address space to spare", extra>>20)
	}
	t.Logf("%d limits loaded the stack, %d refused it", loaded, refused)
	require.NotZero(t, loaded, "a limit 6× the stack's size above the process's mapped size must let it load")
}
