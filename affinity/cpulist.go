package affinity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ParseCPUList parses a Linux cpulist such as "0-3,6" (the format of
// /sys/devices/system/cpu/online, node cpulists, thread_siblings_list and taskset -c; see
// the kernel's Documentation/admin-guide/cputopology.rst). Items are single CPU ids or
// inclusive ranges "a-b", separated by commas; surrounding white space (the trailing
// newline of a sysfs file) is ignored. The result is ascending and without duplicates; an
// empty or blank list gives an empty result. A malformed item, a negative id, an id of
// MaxCPUs or more, or a descending range is an error naming the item. The stride form "a-b:s/g" is not
// supported (sysfs never writes it).
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return []int{}, nil
	}
	var cpus []int
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := parseCPUID(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: item %q: %w", s, item, err)
		}
		last := first
		if isRange {
			if last, err = parseCPUID(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: item %q: %w", s, item, err)
			}
			if last < first {
				return nil, fmt.Errorf("cpu list %q: item %q: range end %d is below its start %d", s, item, last, first)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// MaxCPUs bounds CPU ids (and so the CPU count) stemdot accepts: 8192, the largest
// NR_CPUS of Linux on x86-64.
const MaxCPUs = 8192

func parseCPUID(s string) (int, error) {
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("%q is not a CPU id (a non-negative integer)", s)
	}
	if id >= MaxCPUs {
		return 0, fmt.Errorf("CPU id %d is beyond the %d CPUs Linux supports", id, MaxCPUs)
	}
	return id, nil
}

// FormatCPUList writes cpus as a Linux cpulist ("0-3,6"): ascending, duplicates dropped,
// runs of consecutive ids as inclusive ranges. It is the inverse of ParseCPUList; an empty
// set gives "". cpus itself is not modified.
func FormatCPUList(cpus []int) string {
	sorted := slices.Compact(slices.Sorted(slices.Values(cpus)))
	var b strings.Builder
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sorted[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(sorted[j]))
		}
		i = j + 1
	}
	return b.String()
}
