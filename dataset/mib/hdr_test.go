package mib

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A .hdr sidecar of a million lines (issue #33: what a file holds must not size the
// memory that reading it takes) is read keeping the four values the scan shape comes
// from, not every line.
func TestMIBHdrLong(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("HDR,\t\n")
	for i := range 1_000_000 {
		fmt.Fprintf(&b, "Comment %d:\tsome value\n", i)
	}
	b.WriteString("ScanX:\t4\nScanY:\t2\nEnd\t\n")
	p := filepath.Join(t.TempDir(), "long.hdr")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	nav, _, _, err := mibNavFromHdr(p)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 4}, nav)
	// TotalAlloc, every byte allocated, bounds the peak heap (over 100 MB before).
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated reading a .hdr of %d bytes", b.Len())
}
