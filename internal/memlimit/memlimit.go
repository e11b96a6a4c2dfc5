// Package memlimit tells how much memory the process may still allocate, so that stemdot
// checks a job's memory before allocating it and refuses with a message instead of being
// killed: a Go program that runs out of memory dies with "fatal error: out of memory",
// and one over its cgroup limit is killed by the kernel without a word.
//
// Three limits count (Linux): the memory available to the system (MemAvailable in
// /proc/meminfo), the cgroup's memory limit less its usage (cgroup v2 memory.max and
// memory.current, v1 memory.limit_in_bytes and memory.usage_in_bytes), and the
// address-space limit (RLIMIT_AS, `ulimit -v`) less the process's mapped size (VmSize in
// /proc/self/status). Where a limit cannot be read it does not count.
//
// The address-space limit counts mappings, not bytes used: what the process has mapped
// already (the Go runtime's reservations made at start-up, 0.6-1.1 GiB, a memory-mapped
// dataset at its full size, the threads' stacks) is in VmSize; what a step adds is its
// Go heap growth, reserved in 64 MiB arenas (none while the current arena's unused end
// and the heap's free pages hold it), the stacks of the threads it starts (RLIMIT_STACK each, as glibc's
// pthread_create gives them, in builds with cgo), and 16 MiB for the runtime's own
// buffers. Under such a limit each glibc malloc arena would reserve another 64 MiB for a
// thread that calls C code (libhdf5), at random moments; with cgo, stemdot keeps glibc
// to one arena (mallopt M_ARENA_MAX, set when the process starts under the limit or at
// the first check), so that a check that passes stays true. The Go runtime's own
// start-up reserves 1.07 GiB of address space (runtimeReserveBytes): under limits below
// about 1.35 GB (1.45 GB in a Python process) it fails before main, whatever the job,
// or, below about 1.15 GB, starts without part of it, which CheckStart refuses.
package memlimit

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Limit is a limit on memory: Bytes more may be allocated; Name says which limit that
// is, in a user's words.
type Limit struct {
	Bytes int64
	Name  string
}

// heapArenaBytes is the unit in which the Go runtime reserves heap address space
// (runtime.heapArenaBytes on 64-bit Linux).
const heapArenaBytes = 64 << 20

// runtimeBytes is the address space kept, under an address-space limit, for what the Go
// runtime maps for itself outside the heap as a step runs (the garbage collector's work
// buffers and span queues, persistent allocations in 256 KiB chunks): without it, the
// collector crashes where the limit is reached.
const runtimeBytes = 16 << 20

// RAM is the memory the process may still fill: the tightest of MemAvailable and the
// cgroup's limit less its usage ({math.MaxInt64, "no limit"} where neither can be read),
// for budgets of memory held over time (stemdot view --live keeps half of it of frames).
func RAM() Limit { return ramLimit() }

// ramLimit is the tightest of the memory limits: MemAvailable and the cgroup's.
func ramLimit() Limit {
	l := Limit{Bytes: math.MaxInt64, Name: "no limit"}
	tighter := func(b int64, name string) {
		if b < l.Bytes {
			l = Limit{Bytes: max(b, 0), Name: name}
		}
	}
	if kb, ok := field("/proc/meminfo", "MemAvailable:"); ok {
		tighter(kb<<10, "the memory available on this machine (MemAvailable)")
	}
	if b, name, ok := cgroupLeft(); ok {
		tighter(b, name)
	}
	return l
}

// Check returns nil when need bytes, about to be allocated on the Go heap in one piece,
// fit in what the process may still allocate, else an error (errs.Resources) naming both
// sizes, the limit, and advice (the option that helps).
func Check(what string, need int64, advice string) error {
	return CheckRun(what, need, need, 0, advice)
}

// CheckRun is Check for a step that allocates need bytes in pieces of at most largest
// bytes and runs workers goroutines locked to OS threads of their own (a run's pinned
// workers; 0 for a step on the calling goroutine). Under an address-space limit, the
// stacks of the threads the Go runtime may still start count too (see runtimeThreads).
// The error for that limit says how much address space the step takes and the `ulimit
// -v` that lets it run, and gives the advice only where a smaller step would fit.
func CheckRun(what string, need, largest int64, workers int, advice string) error {
	if l := ramLimit(); need > l.Bytes {
		return errs.New(errs.Resources, "%s needs %s of memory, but %s leaves %s; %s", what, Size(need), l.Name, Size(l.Bytes), advice)
	}
	as, ok := readAddressSpace()
	if !ok {
		return nil
	}
	return as.check(what, need, largest, newThreads(workers), advice)
}

// runtimeThreads is how many OS threads, beyond one per GOMAXPROCS and one per locked
// worker, the Go runtime may run while a step runs: the main thread, the system monitor,
// the template thread of a cgo program, and one blocked in a system call or a C call
// (reading a file, libhdf5) whose P another thread took over. With GOMAXPROCS 2, loading
// a 64 MiB mask stack on a loaded machine peaked at 6 threads (100 runs); with
// GOMAXPROCS 16, at 10: the count bounds both.
const runtimeThreads = 4

// newThreads is how many threads a step with workers locked goroutines may add to the
// Go runtime's (runtime/metrics /sched/threads/total): a parked locked worker keeps its
// thread while another runs Go code on its P, so workers + GOMAXPROCS + runtimeThreads
// may live at once. Threads of the host process that Go does not own (Python's, C
// threads calling in) are not counted: they never take a Go stack.
func newThreads(workers int) int {
	s := []metrics.Sample{{Name: "/sched/threads/total:threads"}}
	metrics.Read(s)
	var live int
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = int(s[0].Value.Uint64())
	}
	return max(0, workers+runtime.GOMAXPROCS(0)+runtimeThreads-live)
}

// check is CheckRun's check of the address-space limit, for threads new threads. The
// advice is left out where it cannot help: where even a step that needs nothing (no
// memory, no thread) would not fit, what the Go runtime keeps for itself, beside the
// step, is more than the limit leaves.
func (as addressSpace) check(what string, need, largest int64, threads int, advice string) error {
	heap, stacks := as.heapGrowth(need, largest), int64(threads)*threadStackBytes()
	takes := heap + stacks + runtimeBytes
	if as.used+takes <= as.limit {
		return nil
	}
	if as.used+as.heapGrowth(0, 0)+runtimeBytes <= as.limit {
		advice = ", or " + advice
	} else {
		advice = " (no smaller step fits: the Go runtime needs more than that for itself)"
	}
	var parts []string
	if heap > 0 {
		parts = append(parts, fmt.Sprintf("%s of Go heap arenas", Size(heap)))
	}
	if stacks > 0 {
		parts = append(parts, fmt.Sprintf("%d new thread stacks of %s", threads, Size(threadStackBytes())))
	}
	parts = append(parts, fmt.Sprintf("%s for the Go runtime", Size(runtimeBytes)))
	return errs.New(errs.Resources, "%s needs %s of memory, but %s leaves %s of address space and it takes %s there (%s): run it under ulimit -v %d or more%s",
		what, Size(need), as.name(), Size(max(as.limit-as.used, 0)), Size(takes), strings.Join(parts, ", "), advisedKiB(as.used+takes), advice)
}

// adviceSlackBytes is the room an advised `ulimit -v` leaves beyond what a refused step
// would take: what a process has mapped varies a little between runs of the same command
// (stemdot apply on 4096×4096 frames, 2 workers: by 256 KiB, so that the exact limit
// failed 3 times in 6).
const adviceSlackBytes = 4 << 20

// advisedKiB is the `ulimit -v` (KiB) advised for a process that would map b bytes:
// b plus adviceSlackBytes, rounded up to a MiB.
func advisedKiB(b int64) int64 {
	return (b + adviceSlackBytes + 1<<20 - 1) >> 20 << 10
}

// startThreads is how many threads a program may start before its first step checks its
// memory (the Go runtime's for blocking system calls, signal handling).
const startThreads = 4

// runtimeReserveBytes is the address space the Go runtime reserves as it starts on
// 64-bit Linux (amd64, arm64: 48-bit heap addresses), before any heap: its page
// allocator's summaries (585 MiB) and the scavenger's index (512 MiB; runtime
// mpagealloc_64bit.go). They are PROT_NONE mappings that hold no memory, but an
// address-space limit counts them (golang/go#38010). Under a limit that leaves no room
// for the index, the runtime starts without it (its reservation's failure is not
// checked) and later maps the index's pages at addresses nothing reserved; with room for
// it but not for a heap arena and the first threads beside it, the runtime dies before
// main ("fatal error: out of memory", "runtime/cgo: pthread_create failed").
const runtimeReserveBytes = (585 + 512) << 20

// CheckStart returns an error (errs.Resources) when, at a program's start, an
// address-space limit leaves less than any run needs besides its own memory: the room
// for the runtime's buffers and the first threads. Below it the Go runtime would fail
// at a random place, creating a thread or growing its heap; the error says the
// `ulimit -v` that gives the room. It also refuses a limit under which the Go runtime
// started without its own reservations (see runtimeReserveBytes): the process has
// mapped less than they take.
func CheckStart() error {
	as, ok := readAddressSpace()
	if !ok {
		return nil
	}
	need := runtimeBytes + startThreads*threadStackBytes()
	if as.used < runtimeReserveBytes && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		return errs.New(errs.Resources, "%s leaves the Go runtime no room for the %s of address space (no memory) it reserves as it starts, so it started without part of it (golang/go#38010): run under ulimit -v %d or more",
			as.name(), Size(runtimeReserveBytes), (as.used+512<<20+need+1023)>>10)
	}
	if as.used+need <= as.limit {
		return nil
	}
	return errs.New(errs.Resources, "%s leaves %s of address space once the Go runtime has started, less than the %s any run needs before its own memory (%d thread stacks of %s, %s for the Go runtime): run under ulimit -v %d or more",
		as.name(), Size(max(as.limit-as.used, 0)), Size(need), startThreads, Size(threadStackBytes()), Size(runtimeBytes), advisedKiB(as.used+need))
}

// addressSpace is the state of the address-space limit: the limit and the size mapped
// (bytes), and the room in the Go heap's arenas: the unused end of the current one and
// the free pages.
type addressSpace struct {
	limit, used, tail, free int64
}

// readAddressSpace reads the address-space limit (false when there is none) and caps
// glibc's malloc arenas under it (see the package doc).
func readAddressSpace() (addressSpace, bool) {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &rl) != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur >= math.MaxInt64 {
		return addressSpace{}, false
	}
	kb, ok := field("/proc/self/status", "VmSize:")
	if !ok {
		return addressSpace{}, false
	}
	capMallocArenas()
	return addressSpace{limit: int64(rl.Cur), used: kb << 10, tail: heapTail(), free: heapFree()}, true
}

// heapFree is the Go heap's free pages, in arenas already reserved: free and released
// to the system (runtime/metrics).
func heapFree() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	var n int64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += int64(v.Value.Uint64())
		}
	}
	return n
}

func (a addressSpace) name() string {
	return fmt.Sprintf("the address-space limit (ulimit -v %d KiB)", a.limit>>10)
}

// incidentalBytes is what the heap must hold besides a step's own bytes for heapGrowth to
// count no growth: the small allocations around it (messages, buffers of the outputs).
const incidentalBytes = 8 << 20

// smallPiece is the largest allocation heapGrowth places in the heap's free pages: they
// lie scattered, a larger one needs contiguous room.
const smallPiece = 4 << 20

// heapGrowth is the address space the Go heap reserves to allocate need bytes in pieces
// of at most largest bytes: none while its arenas hold them and incidentalBytes more
// (the current one's unused end, or with pieces of at most smallPiece, it and the free
// pages), else the whole arenas an allocation of need bytes reserves (the runtime
// reserves for the allocation's size, not for what the arenas lack), one more when need
// exceeds an arena, as each piece may reserve its own, and one more when what the new
// arenas leave beside need, with the current one's end and the free pages, cannot hold
// the incidental bytes that follow (a 64 MiB stack fills its arena exactly).
func (a addressSpace) heapGrowth(need, largest int64) int64 {
	if need+incidentalBytes <= a.tail || largest <= smallPiece && need+incidentalBytes <= a.tail+a.free {
		return 0
	}
	g := (need + heapArenaBytes - 1) / heapArenaBytes * heapArenaBytes
	if need > heapArenaBytes {
		g += heapArenaBytes
	}
	if g-need+a.tail+a.free < incidentalBytes {
		g += heapArenaBytes
	}
	return g
}

// heapTail returns the unused end of the Go heap's current arena, found in
// /proc/self/maps through the address of a heap object (the buffer it is read into);
// 0 where it cannot be found.
func heapTail() int64 {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil || len(b) == 0 {
		return 0
	}
	return arenaTail(string(b), uint64(uintptr(unsafe.Pointer(&b[0]))))
}

// arenaTail returns, from a /proc/PID/maps text, the inaccessible (---p) mapping that
// ends the contiguous run of anonymous mappings holding address p, when it ends at a
// heap arena boundary: the unused end of the arena the heap grows into. 0 otherwise.
func arenaTail(maps string, p uint64) int64 {
	var end uint64 // end of the run of mappings from the one holding p
	var tail int64
	for line := range strings.Lines(maps) {
		var lo, hi, off, inode uint64
		var perms, dev string
		if n, _ := fmt.Sscanf(line, "%x-%x %s %x %s %d", &lo, &hi, &perms, &off, &dev, &inode); n != 6 || inode != 0 {
			if end != 0 {
				break
			}
			continue
		}
		switch {
		case end == 0 && lo <= p && p < hi:
			end = hi
		case end != 0 && lo == end:
			end = hi
		case end != 0:
			return tail
		default:
			continue
		}
		tail = 0
		if perms == "---p" && hi%heapArenaBytes == 0 {
			tail = int64(hi - lo)
		}
	}
	return tail
}

// Size formats bytes for people: "512 B", "3.2 MiB", "8.00 GiB".
func Size(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	v, i := float64(b), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.3g %ciB", v, "KMGTP"[i])
}

// field returns the number after key in a "key value [kB]" file.
func field(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// cgroupLeft returns the memory the process's cgroup may still use: its limit (the
// tightest of the cgroup and its ancestors) less its usage.
func cgroupLeft() (int64, string, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, "", false
	}
	best, name, found := int64(math.MaxInt64), "", false
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile, usageFile string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, limitFile, usageFile = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max", "memory.current"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile, usageFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes", "memory.usage_in_bytes"
		default:
			continue
		}
		for d := dir; ; d = filepath.Dir(d) {
			limit, ok1 := readInt(filepath.Join(d, limitFile))
			usage, ok2 := readInt(filepath.Join(d, usageFile))
			if ok1 && ok2 && limit < 1<<60 && limit-usage < best {
				best, name, found = limit-usage, fmt.Sprintf("the cgroup memory limit (%s, %s)", filepath.Join(d, limitFile), Size(limit)), true
			}
			if d == "/" || d == "." || len(d) <= len("/sys/fs/cgroup") {
				break
			}
		}
	}
	return best, name, found
}

func readInt(file string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
