package planner

import (
	"fmt"
	"strconv"
	"strings"
)

// Formatting of ids and sizes in plans and errors.

// joinInts writes ids as "0, 2, 5".
func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ", ")
}

// formatIDs writes ascending ids in Linux cpulist form ("0-3,8,10-11"); other orders
// are written item by item.
func formatIDs(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			fmt.Fprintf(&b, "-%d", ids[j])
		}
		i = j + 1
	}
	return b.String()
}

// formatBytes writes a byte count in GiB, MiB or KiB with one decimal, or in bytes.
func formatBytes(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}
