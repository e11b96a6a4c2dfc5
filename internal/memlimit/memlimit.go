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
package memlimit

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/errs"
)

// Limit is the tightest of the limits: Bytes more may be allocated; Name says which limit
// that is, in a user's words.
type Limit struct {
	Bytes int64
	Name  string
}

// addressSpaceSlack is what the Go runtime maps beyond the bytes a program allocates
// (heap arenas are reserved in 64 MiB steps, plus metadata and stacks): under an
// address-space limit, an allocation needs this much room besides its own size.
const addressSpaceSlack = 256 << 20

// Available returns the tightest limit on further allocation (math.MaxInt64 bytes, name
// "no limit", when none can be read).
func Available() Limit {
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
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &rl) == nil && rl.Cur != unix.RLIM_INFINITY && rl.Cur < math.MaxInt64 {
		if kb, ok := field("/proc/self/status", "VmSize:"); ok {
			tighter(int64(rl.Cur)-kb<<10-addressSpaceSlack, fmt.Sprintf("the address-space limit (ulimit -v %d KiB)", rl.Cur>>10))
		}
	}
	return l
}

// Check returns nil when need bytes for what fit in Available, else an error (errs.Resources)
// naming both sizes, the limit, and advice (the option that helps).
func Check(what string, need int64, advice string) error {
	l := Available()
	if need <= l.Bytes {
		return nil
	}
	return errs.New(errs.Resources, "%s needs %s of memory, but %s leaves %s; %s", what, Size(need), l.Name, Size(l.Bytes), advice)
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
