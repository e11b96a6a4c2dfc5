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
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// childEnv selects, in a test binary started by runChild, what it does instead of running
// the tests: "load PATH [EXTRA]" loads PATH with LoadNPY, first limiting the address space
// (RLIMIT_AS) to what is mapped now plus EXTRA bytes when given, and prints a childReport.
const childEnv = "STEMDOT_MASKS_TEST_CHILD"

func TestMain(m *testing.M) {
	if args := strings.Fields(os.Getenv(childEnv)); len(args) > 0 {
		os.Exit(child(args))
	}
	os.Exit(m.Run())
}

// childReport is what a child prints: the stack's shape and checksum, or the error and its
// kind; its resident memory before loading and its peak (ru_maxrss), in bytes.
type childReport struct {
	N, SigY, SigX int
	Sum, LoSum    float64
	Err, Kind     string
	RSSBefore     int64
	PeakRSS       int64
}

func child(args []string) int {
	var rep childReport
	rep.RSSBefore = statusKiB("VmRSS:") << 10
	if len(args) == 3 {
		extra, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			panic(err)
		}
		limit := uint64(statusKiB("VmSize:")<<10 + extra)
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
			panic(err)
		}
	}
	s, err := LoadNPY(args[1])
	if err != nil {
		rep.Err, rep.Kind = err.Error(), errs.KindOf(err).Error()
	} else {
		rep.N, rep.SigY, rep.SigX = s.N, s.SigY, s.SigX
		for _, v := range s.Data {
			rep.Sum += float64(v)
		}
		for _, v := range s.Lo {
			rep.LoSum += float64(v)
		}
	}
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	rep.PeakRSS = ru.Maxrss << 10
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

// statusKiB is a "Key: N kB" field of /proc/self/status.
func statusKiB(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				panic(err)
			}
			return n
		}
	}
	panic("no " + key + " in /proc/self/status")
}

// runChild runs this test binary as a child doing args (see childEnv) and returns its
// report; it fails the test when the child does not exit 0 (a Go runtime crash such as
// "fatal error: out of memory" included).
func runChild(t *testing.T, args ...string) childReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, " "))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "child %v: %s", args, firstLines(stderr.String(), 5))
	var rep childReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	return rep
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// writeDenseNPY writes a stack of n masks of 32×32 weights of descr "<f4" or "<f8",
// weight i being weight(i), and returns the sum of the weights as float32 holds them and
// of their float32 rests.
func writeDenseNPY(t *testing.T, path, descr string, n int, weight func(i int) float64) (sum, loSum float64) {
	t.Helper()
	head, err := npy.Header(descr, []int{n, 32, 32})
	require.NoError(t, err)
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	_, err = w.Write(head)
	require.NoError(t, err)
	buf := make([]byte, 0, 1<<16)
	for i := range n * 1024 {
		v := weight(i)
		hi, lo := Split(v)
		sum += float64(hi)
		loSum += float64(lo)
		if descr == "<f4" {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(v)))
		} else {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(v))
		}
		if len(buf) == cap(buf) {
			_, err = w.Write(buf)
			require.NoError(t, err)
			buf = buf[:0]
		}
	}
	_, err = w.Write(buf)
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	return sum, loSum
}

// Item #17.10: under an address-space limit (RLIMIT_AS, ulimit -v) from a fraction of the
// stack's size to a few times it, loading a dense stack either succeeds with every weight
// or is refused with an errs.Resources error naming the sizes and the limit, never the
// Go runtime's "fatal error: out of memory" (which 028a1ad gave where its check, counting
// two copies, passed and the load took three).
func TestLoadNPYUnderAddressSpaceLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stack.npy")
	const n = 16384 // 64 MiB of float32
	sum, _ := writeDenseNPY(t, path, "<f4", n, func(i int) float64 { return float64(i%7 + 1) })
	size := int64(n) * 1024 * 4
	var loaded, refused int
	for _, extra := range []int64{size / 2, size, 3 * size / 2, 2 * size, 5 * size / 2, 3 * size, 4 * size, 6 * size} {
		rep := runChild(t, "load", path, fmt.Sprint(extra))
		if rep.Err != "" {
			refused++
			require.Equal(t, "resources error", rep.Kind, rep.Err)
			require.Contains(t, rep.Err, "mask file "+path+": the dense mask stack of shape (16384, 32, 32) needs 64 MiB of memory, but the address-space limit (ulimit -v ")
			continue
		}
		loaded++
		require.Equal(t, n, rep.N)
		require.Equal(t, sum, rep.Sum, "with %d MiB of address space to spare", extra>>20)
	}
	t.Logf("%d limits loaded the stack, %d refused it", loaded, refused)
	require.NotZero(t, loaded, "a limit 6× the stack's size above the process's mapped size must let it load")
}
