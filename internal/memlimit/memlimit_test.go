package memlimit

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/internal/testfiles"
)

// childEnv makes this test binary, started by TestCheckStart, limit its address space to
// what it has mapped plus the bytes given, and print CheckStart's error.
const childEnv = "STEMDOT_MEMLIMIT_TEST_START"

func TestMain(m *testing.M) {
	if extra := os.Getenv(childEnv); extra == "started" { // under the limit it was started with
		fmt.Print(CheckStart())
		os.Exit(0)
	} else if extra != "" {
		kb, _ := field("/proc/self/status", "VmSize:")
		e, _ := strconv.ParseInt(extra, 10, 64)
		limit := uint64(kb<<10 + e)
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
			panic(err)
		}
		fmt.Print(CheckStart())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Item #17.11: a program started under an address-space limit that leaves less than the
// runtime's buffers and first threads need is refused up front, with the ulimit -v that
// gives the room (the CLI checks it first thing: below it the Go runtime died creating a
// thread for signal handling or a blocking system call).
func TestCheckStart(t *testing.T) {
	for _, c := range []struct {
		extra int64
		want  string
	}{
		{8 << 20, "leaves 8 MiB of address space once the Go runtime has started, less than the "},
		{256 << 20, "<nil>"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", childEnv, c.extra))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), c.want)
	}
}

// Item #17.11: the Go heap's growth in address space is counted in its 64 MiB arenas:
// nothing while the current arena's unused end holds the bytes and 8 MiB of incidental
// ones (or, in pieces of at most 4 MiB, it and the free pages do), else the arenas an
// allocation of that size reserves, one more past an arena (several pieces), and one more
// where the arenas it reserves leave no room for the incidental bytes after it.
func TestHeapGrowth(t *testing.T) {
	const mib = 1 << 20
	a := addressSpace{tail: 20 * mib, free: 10 * mib}
	for _, c := range []struct{ need, largest, want int64 }{
		{0, 0, 0}, {12 * mib, 12 * mib, 0}, {22 * mib, mib, 0}, {22 * mib, 4 * mib, 0},
		{13 * mib, 13 * mib, 64 * mib}, {22 * mib, 5 * mib, 64 * mib}, {23 * mib, mib, 64 * mib},
		{64 * mib, 64 * mib, 64 * mib}, {65 * mib, 65 * mib, 192 * mib}, {500 * mib, mib, 576 * mib},
	} {
		require.Equal(t, c.want, a.heapGrowth(c.need, c.largest), "need %d MiB in pieces of %d MiB", c.need/mib, c.largest/mib)
	}
	// With 2 MiB left in the current arena and no free pages, a 64 MiB stack fills its new
	// arena and the next small allocations take another; a 50 MiB one leaves them room.
	a = addressSpace{tail: 2 * mib}
	for _, c := range []struct{ need, want int64 }{{64 * mib, 128 * mib}, {60 * mib, 128 * mib}, {50 * mib, 64 * mib}} {
		require.Equal(t, c.want, a.heapGrowth(c.need, c.need), "need %d MiB with 2 MiB of arena left", c.need/mib)
	}
}

// arenaTail finds the unused end of the heap's current arena: the inaccessible mapping
// ending, at a 64 MiB boundary, the run of anonymous mappings that holds the heap
// address; none when the run ends otherwise or the address is elsewhere.
func TestArenaTail(t *testing.T) {
	maps := `00400000-00403000 r--p 00000000 fe:00 9980881                            /tmp/stemdot
00acb000-02b12000 rw-p 00000000 00:00 0
1f0c94000000-1f0c95800000 ---p 00000000 00:00 0
1f0c95800000-1f0c95c00000 rw-p 00000000 00:00 0
1f0c95c00000-1f0c98000000 ---p 00000000 00:00 0
2000c0000000-2000c0400000 rw-p 00000000 00:00 0
7fee24000000-7fee24021000 rw-p 00000000 00:00 0
7fee24021000-7fee27000000 ---p 00000000 00:00 0
7fee407da000-7fee4085b000 r--s 00000000 fe:00 5308494                    /data/scan.mib
`
	require.Equal(t, int64(0x1f0c98000000-0x1f0c95c00000), arenaTail(maps, 0x1f0c95900000), "the ---p end of the heap's run")
	require.Equal(t, int64(0), arenaTail(maps, 0x2000c0100000), "a run that ends accessible")
	require.Equal(t, int64(0), arenaTail(maps, 0x7fee24000100), "an end that is not an arena boundary")
	require.Equal(t, int64(0), arenaTail(maps, 0x10000), "an address outside every mapping")
	last := maps[:strings.Index(maps, "2000c0000000-")]
	require.Equal(t, int64(0x1f0c98000000-0x1f0c95c00000), arenaTail(last, 0x1f0c95900000), "the last mapping")
	// This process's own heap: an arena's unused end is at most an arena.
	require.LessOrEqual(t, heapTail(), int64(heapArenaBytes))
}

// Item D2: under an address-space limit, the refusal gives the caller's advice (a
// smaller step) only where a smaller step would fit; where what the Go runtime keeps
// for itself does not fit in what is left, it says so instead, and only the ulimit -v
// that lets the step run helps.
func TestCheckAdvice(t *testing.T) {
	const mib = 1 << 20
	used := int64(1200 * mib)
	for _, c := range []struct {
		left, need int64
		want       string
	}{
		{8 * mib, 256 << 10, "the com masks needs 256 KiB of memory, but the address-space limit (ulimit -v 1236992 KiB) leaves 8 MiB of address space and it takes 16 MiB there (16 MiB for the Go runtime): run it under ulimit -v 1249280 or more (no smaller step fits: the Go runtime needs more than that for itself)"},
		{100 * mib, 200 * mib, "the com masks needs 200 MiB of memory, but the address-space limit (ulimit -v 1331200 KiB) leaves 100 MiB of address space and it takes 336 MiB there (320 MiB of Go heap arenas, 16 MiB for the Go runtime): run it under ulimit -v 1576960 or more, or use a smaller mask"},
		{100 * mib, 20 * mib, "<nil>"},
	} {
		as := addressSpace{limit: used + c.left, used: used, tail: 32 * mib}
		err := as.check("the com masks", c.need, c.need, 0, "use a smaller mask")
		require.Equal(t, c.want, fmt.Sprint(err))
		if err == nil {
			continue
		}
		// The ulimit -v advised lets the step run, also where the process maps a little
		// more by then: between runs of the same command (stemdot apply, 4096×4096 frames,
		// 2 workers) what it had mapped varied by 256 KiB, and the exact limit failed 3
		// times in 6.
		var kib int64
		_, serr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "run it under ulimit -v "):], "run it under ulimit -v %d or more", &kib)
		require.NoError(t, serr)
		as = addressSpace{limit: kib << 10, used: used + 2*mib, tail: 32 * mib}
		require.NoError(t, as.check("the com masks", c.need, c.need, 0, "use a smaller mask"), "under the advised ulimit -v %d", kib)
	}
}

// Item D2: a program started under an address-space limit too small for the Go
// runtime's own start-up reservations (1.07 GiB on 64-bit Linux) either dies before main
// (the Go runtime's error) or, below about 1.15 GB, starts without its scavenger index:
// CheckStart refuses the latter, naming the limit that lets the runtime reserve it.
func TestCheckStartWithoutRuntimeReservations(t *testing.T) {
	if testfiles.Race {
		t.Skip("the race detector maps shadow memory of its own, which an address-space limit refuses")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the runtime's reservations are known for amd64 and arm64")
	}
	cmd := exec.Command("sh", "-c", `ulimit -v 1000000 && exec "$0" -test.run='^$'`, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=started")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `^the address-space limit \(ulimit -v 1000000 KiB\) leaves the Go runtime no room for the 1.07 GiB of address space \(no memory\) it reserves as it starts, so it started without part of it \(golang/go#38010\): run under ulimit -v 1[3-5][0-9]{5} or more$`, string(out))
}
