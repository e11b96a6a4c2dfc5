package affinity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// cpuLimit is a CFS bandwidth limit: quotaUs of CPU time per periodUs of wall time, i.e.
// quotaUs/periodUs CPUs.
type cpuLimit struct {
	quotaUs, periodUs int64
	file              string // the file that set it
}

func (l cpuLimit) cpus() float64 { return float64(l.quotaUs) / float64(l.periodUs) }

// ceilCPUs is ceil(quotaUs/periodUs) in integer arithmetic.
func (l cpuLimit) ceilCPUs() int { return int((l.quotaUs + l.periodUs - 1) / l.periodUs) }

// cgroupEntry is one line "hierarchy-ID:controller-list:cgroup-path" of /proc/self/cgroup
// (proc(5), section /proc/pid/cgroup).
type cgroupEntry struct {
	controllers []string // empty for the cgroup v2 unified hierarchy (ID 0)
	path        string
}

// readProcCgroup returns the entries of procCgroup, which holds either the contents of
// /proc/self/cgroup or the path of such a file: it is taken as contents when its first
// line has the two colons of an entry. An empty procCgroup gives no entries.
func readProcCgroup(procCgroup string) ([]cgroupEntry, error) {
	text, name := procCgroup, "cgroup membership"
	first, _, _ := strings.Cut(procCgroup, "\n")
	if procCgroup != "" && strings.Count(first, ":") < 2 {
		b, err := os.ReadFile(procCgroup)
		if err != nil {
			return nil, fmt.Errorf("reading cgroup membership: %w", err)
		}
		text, name = string(b), procCgroup
	}
	var entries []cgroupEntry
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return nil, fmt.Errorf("%s: line %q is not of the form hierarchy-ID:controller-list:/cgroup-path", name, line)
		}
		e := cgroupEntry{path: parts[2]}
		if parts[1] != "" {
			e.controllers = strings.Split(parts[1], ",")
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// cgroupCPULimit returns the smallest CPU bandwidth limit that applies to a process with
// the given cgroup membership, looking at every level from its cgroup up to the root of
// each hierarchy below cgroupRoot:
//   - cgroup v2 (the entry with ID 0): cpu.max in <cgroupRoot>/<path>, "max 100000" (no
//     limit) or "150000 100000" (quota and period in µs);
//   - cgroup v1 (the entry whose controllers include cpu): cpu.cfs_quota_us and
//     cpu.cfs_period_us in <cgroupRoot>/cpu,cpuacct/<path> or <cgroupRoot>/cpu/<path>,
//     quota -1 meaning no limit.
//
// Directories that do not exist are skipped: a container without its own cgroup namespace
// sees the host's path in /proc/self/cgroup but only its own cgroup, mounted as the root.
// ok is false when no level sets a limit.
func cgroupCPULimit(cgroupRoot string, entries []cgroupEntry) (limit cpuLimit, ok bool, err error) {
	consider := func(l cpuLimit, found bool, err error) error {
		if err == nil && found && (!ok || l.cpus() < limit.cpus()) {
			limit, ok = l, true
		}
		return err
	}
	for _, e := range entries {
		switch {
		case len(e.controllers) == 0:
			for _, dir := range cgroupLevels(cgroupRoot, e.path) {
				if err := consider(readCPUMax(filepath.Join(dir, "cpu.max"))); err != nil {
					return cpuLimit{}, false, err
				}
			}
		case slices.Contains(e.controllers, "cpu"):
			for _, mount := range []string{"cpu,cpuacct", "cpu"} {
				for _, dir := range cgroupLevels(filepath.Join(cgroupRoot, mount), e.path) {
					if err := consider(readCFSQuota(dir)); err != nil {
						return cpuLimit{}, false, err
					}
				}
			}
		}
	}
	return limit, ok, nil
}

// cgroupLevels returns <mount>/<path> and each parent directory up to mount itself.
func cgroupLevels(mount, path string) []string {
	var dirs []string
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		dirs = append(dirs, filepath.Join(mount, p))
		if p == "/" {
			return dirs
		}
	}
}

// readCPUMax reads a cgroup v2 cpu.max file ("$MAX $PERIOD", Documentation/admin-guide/
// cgroup-v2.rst). found is false when the file is absent or the quota is "max".
func readCPUMax(file string) (l cpuLimit, found bool, err error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return cpuLimit{}, false, nil
	}
	if err != nil {
		return cpuLimit{}, false, err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields) > 2 {
		return cpuLimit{}, false, fmt.Errorf("%s: %q is not \"$MAX $PERIOD\"", file, strings.TrimSpace(string(b)))
	}
	if fields[0] == "max" {
		return cpuLimit{}, false, nil
	}
	l = cpuLimit{periodUs: 100000, file: file} // the kernel's default period
	if l.quotaUs, err = strconv.ParseInt(fields[0], 10, 64); err != nil || l.quotaUs <= 0 {
		return cpuLimit{}, false, fmt.Errorf("%s: quota %q is neither \"max\" nor a positive number of µs", file, fields[0])
	}
	if len(fields) == 2 {
		if l.periodUs, err = strconv.ParseInt(fields[1], 10, 64); err != nil || l.periodUs <= 0 {
			return cpuLimit{}, false, fmt.Errorf("%s: period %q is not a positive number of µs", file, fields[1])
		}
	}
	return l, true, nil
}

// readCFSQuota reads cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us in dir
// (Documentation/scheduler/sched-bwc.rst). found is false when the quota file is absent
// or holds -1.
func readCFSQuota(dir string) (l cpuLimit, found bool, err error) {
	quotaFile := filepath.Join(dir, "cpu.cfs_quota_us")
	b, err := os.ReadFile(quotaFile)
	if errors.Is(err, fs.ErrNotExist) {
		return cpuLimit{}, false, nil
	}
	if err != nil {
		return cpuLimit{}, false, err
	}
	quota, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || quota == 0 || quota < -1 {
		return cpuLimit{}, false, fmt.Errorf("%s: %q is neither -1 nor a positive number of µs", quotaFile, strings.TrimSpace(string(b)))
	}
	if quota == -1 {
		return cpuLimit{}, false, nil
	}
	periodFile := filepath.Join(dir, "cpu.cfs_period_us")
	b, err = os.ReadFile(periodFile)
	if err != nil {
		return cpuLimit{}, false, fmt.Errorf("cpu quota set in %s but its period is unreadable: %w", quotaFile, err)
	}
	period, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || period <= 0 {
		return cpuLimit{}, false, fmt.Errorf("%s: %q is not a positive number of µs", periodFile, strings.TrimSpace(string(b)))
	}
	return cpuLimit{quotaUs: quota, periodUs: period, file: quotaFile}, true, nil
}
