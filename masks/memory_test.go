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

// parseChildEnv makes this test binary, started by parseUnderLimit, build the masks of a
// spec under an address-space limit and print a loadReport: "SPEC SIG_Y SIG_X EXTRA".
const parseChildEnv = "STEMDOT_MASKS_TEST_PARSE_UNDER_LIMIT"

func TestMain(m *testing.M) {
	if args := strings.Fields(os.Getenv(childEnv)); len(args) == 2 {
		os.Exit(loadChild(args[0], args[1]))
	}
	if args := strings.Fields(os.Getenv(parseChildEnv)); len(args) == 4 {
		sy, _ := strconv.Atoi(args[1])
		sx, _ := strconv.Atoi(args[2])
		os.Exit(underLimit(args[3], func() (*Stack, error) { return Parse(args[0], [2]int{sy, sx}) }))
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
	return underLimit(extra, func() (*Stack, error) { return LoadNPY(path) })
}

// underLimit limits the address space to what the process has mapped plus extra bytes,
// runs build and prints its loadReport.
func underLimit(extra string, build func() (*Stack, error)) int {
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
	s, err := build()
	if err != nil {
		rep.Err, rep.Kind = err.Error(), errs.KindOf(err).Error()
	} else {
		rep.N = s.N
		for _, v := range s.Dense() {
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
	return childReport(t, fmt.Sprintf("%s=%s %d", childEnv, path, extra), extra)
}

// childReport runs this test binary with the environment variable env (NAME=VALUE) and
// returns its report; extra is for messages.
func childReport(t *testing.T, env string, extra int64) loadReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%d MiB to spare: %.600s", extra>>20, stderr.String())
	var rep loadReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s", out)
	return rep
}

// Item #17.10: under an address-space limit (RLIMIT_AS, ulimit -v) from 80 MiB above the
// process's mapped size to 6 times the stack's size, loading a dense stack either
// succeeds with every weight or is refused with an errs.Resources error naming the sizes
// and the limit, never the Go runtime's "fatal error: out of memory" (which 028a1ad gave
// where its check, counting two copies, passed and the load took three, or before its
// check, on the CSR form it built while finding out that the stack is dense; and 83c5865
// under load: the Go runtime's new threads' stacks were not counted, nor the masks'
// names).
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
	refusal := "^mask file " + regexp.QuoteMeta(path) + `: (the dense mask stack of shape \(16384, 32, 32\) needs 64|reading the weights needs [0-9.]+) MiB of memory, but the address-space limit \(ulimit -v [0-9]+ KiB\) leaves .* of address space and it takes .*: run it under ulimit -v [0-9]+ or more(, or use fewer or smaller masks| \(no smaller step fits: the Go runtime needs more than that for itself\))$`
	var loaded, refused int
	// From 80 MiB to spare: with less than a heap arena (64 MiB) and its metadata, the Go
	// heap cannot grow at all and any allocation may be fatal, a check's included.
	for _, extra := range []int64{80 << 20, 3 * size / 2, 2 * size, 5 * size / 2, 3 * size, 4 * size, 6 * size} {
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

// Item D2: a mask spec refused under an address-space limit is described as what it
// builds, with the bytes it needs: the com masks as three masks on the whole frame (not
// a "com disk with r=0"), the others as one mask and its selected pixels; advice to use
// a smaller mask only where a smaller one would fit. Given room, the masks are built.
func TestMaskSpecsUnderAddressSpaceLimit(t *testing.T) {
	if testfiles.Race {
		t.Skip("the race detector maps shadow memory of its own, which an address-space limit refuses: run without -race (make test-go does)")
	}
	limit := `needs (.+) of memory, but the address-space limit \(ulimit -v [0-9]+ KiB\) leaves .* of address space and it takes .* there \(.*\): run it under ulimit -v [0-9]+ or more`
	// 256 MiB to spare beside what the child has mapped: room for the Go runtime's own
	// needs (with a few MiB, the runtime itself can die of a heap arena it cannot map,
	// which no check of stemdot's can prevent), and masks that need more than that.
	const extra = 256 << 20
	for _, c := range []struct {
		spec   string
		sig    int
		what   string
		need   string
		advice string
		n      int
		sum    float64
	}{
		{spec: "com", sig: 2048, need: "208 MiB", advice: `, or use a com disk of fewer pixels \(com:CX,CY,R\)$`,
			what: `building the 3 com masks on the whole frame, about (cx=1024, cy=1024) (sig_shape (2048, 2048), 4194304 pixels selected, held dense)`},
		{spec: "com:4096,4096,3000", sig: 8192, need: "3.25 GiB", advice: `, or use a com disk of fewer pixels \(com:CX,CY,R\)$`,
			what: fmt.Sprintf(`building the 3 com masks within r=3000 of (cx=4096, cy=4096) (sig_shape (8192, 8192), %d pixels selected, held dense)`, diskPixels(3000))},
		{spec: "ring:4096,4096,10,3000", sig: 8192, need: "256 MiB", advice: `, or use a smaller mask$`,
			what: fmt.Sprintf(`the ring at (cx=4096, cy=4096) with radii 10..3000 (one mask of sig_shape (8192, 8192), %d pixels selected, held dense)`, diskPixels(3000)-diskPixels(10))}, // r_i < d ≤ r_o
		// Σ 1 + Σ (y−90) + Σ (x−100) over the 256×256 pixels.
		{spec: "com:100,90", sig: 256, n: 3, sum: 65536 + 256*(32640-90*256) + 256*(32640-100*256)},
	} {
		rep := childReport(t, fmt.Sprintf("%s=%s %d %d %d", parseChildEnv, c.spec, c.sig, c.sig, extra), extra)
		if c.n > 0 {
			require.Empty(t, rep.Err, c.spec)
			require.Equal(t, c.n, rep.N)
			require.Equal(t, c.sum, rep.Sum)
			continue
		}
		require.Equal(t, "resources error", rep.Kind, "%s: %s", c.spec, rep.Err)
		require.Regexp(t, "^mask "+regexp.QuoteMeta(strconv.Quote(c.spec))+": "+regexp.QuoteMeta(c.what)+" "+limit+c.advice, rep.Err)
		require.Equal(t, c.need, regexp.MustCompile(`needs (.+?) of memory`).FindStringSubmatch(rep.Err)[1], c.spec)
	}
}

// diskPixels counts the pixels (x, y) with (x−cx)² + (y−cy)² ≤ r² of a disk that lies
// inside the frame: 2·⌊√(r²−dy²)⌋ + 1 in each row dy.
func diskPixels(r int) int {
	n := 0
	for dy := -r; dy <= r; dy++ {
		w := int(math.Sqrt(float64(r*r - dy*dy)))
		for w*w > r*r-dy*dy {
			w--
		}
		for (w+1)*(w+1) <= r*r-dy*dy {
			w++
		}
		n += 2*w + 1
	}
	return n
}
