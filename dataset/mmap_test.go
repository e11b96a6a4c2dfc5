package dataset_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
)

// Raw and NPY files in host byte order are mapped and viewed in place; the views equal
// the frames read with ReadFrames and the values written. Byte-swapped files are not
// viewable (their frames need a swap).
func TestMappedFramesViewInPlace(t *testing.T) {
	dir := t.TempDir()
	const n, sy, sx = 5, 3, 4
	le, be := make([]byte, 0, n*sy*sx*2+6), make([]byte, 0, n*sy*sx*2+6)
	le, be = append(le, 1, 2, 3, 4, 5, 6), append(be, 1, 2, 3, 4, 5, 6) // 6-byte offset
	for i := range n * sy * sx {
		le = binary.LittleEndian.AppendUint16(le, uint16(1000+i))
		be = binary.BigEndian.AppendUint16(be, uint16(1000+i))
	}
	lePath, bePath := filepath.Join(dir, "le.raw"), filepath.Join(dir, "be.raw")
	require.NoError(t, os.WriteFile(lePath, le, 0o644))
	require.NoError(t, os.WriteFile(bePath, be, 0o644))
	opt := dataset.Options{Format: "raw", SigShape: []int{sy, sx}, DType: dataset.Uint16, Offset: 6}

	ds, err := dataset.Open(lePath, opt)
	require.NoError(t, err)
	v, ok := ds.(dataset.Viewer)
	require.True(t, ok, "a little-endian raw file is viewable in place")
	view, err := v.ViewFrames(1, 4)
	require.NoError(t, err)
	for i := range 3 * sy * sx {
		require.Equal(t, uint16(1000+sy*sx+i), binary.LittleEndian.Uint16(view[2*i:]))
	}
	buf := make([]byte, 3*ds.FrameBytes())
	require.NoError(t, ds.ReadFrames(1, 4, buf))
	require.Equal(t, view, buf)
	_, err = v.ViewFrames(4, 6)
	require.ErrorContains(t, err, "frames")
	require.NoError(t, ds.Close())
	_, err = v.ViewFrames(0, 1)
	require.ErrorContains(t, err, "after Close")

	opt.BigEndian = true
	ds, err = dataset.Open(bePath, opt)
	require.NoError(t, err)
	defer ds.Close()
	_, ok = ds.(dataset.Viewer)
	require.False(t, ok, "a byte-swapped file is read with pread and swapped")
	require.NoError(t, ds.ReadFrames(1, 4, buf))
	require.Equal(t, uint16(1000+sy*sx), binary.LittleEndian.Uint16(buf))
}

// mappingRSS is the resident memory, in bytes, of this process's mapping that starts at
// m[0] (/proc/self/smaps).
func mappingRSS(t *testing.T, m []byte) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	addr := uint64(uintptr(unsafe.Pointer(&m[0])))
	in := false
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && !strings.HasSuffix(f[0], ":"): // a mapping's header line
			lo, _, _ := strings.Cut(f[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && v == addr
		case in && len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	return 0
}

// A BlockReleaser drops each 2 MiB block of a mapping once every byte of it has been
// reported read, whatever the order and size of the ranges reported, and the ranges'
// blocks only: after each report of uneven ranges in a shuffled order the mapping's
// resident pages are those of the blocks not yet read whole (a model of the reported
// bytes), and after every range, reported from four goroutines at once, none but the
// file's last partial page. The mapping is kept to 4 KiB pages (MADV_NOHUGEPAGE), so
// that the resident sizes count pages, not 2 MiB mappings.
func TestBlockReleaser(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps")
	}
	const block = dataset.ReleaseBlock
	size := int64(4*block + block/3 + 1000)
	path := filepath.Join(t.TempDir(), "events.bin")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	require.NoError(t, os.WriteFile(path, data, 0o644))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m := dataset.MapFile(path, f, size)
	require.NotNil(t, m)
	defer dataset.Unmap(m)
	require.NoError(t, unix.Madvise(m, unix.MADV_NOHUGEPAGE))
	page := int64(os.Getpagesize())
	readAll := func() {
		sum := 0
		for i := int64(0); i < size; i += page {
			sum += int(m[i])
		}
		require.NotZero(t, sum)
		require.Equal(t, (size+page-1)/page*page, mappingRSS(t, m))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var bounds []int64 // uneven ranges, 1 byte to 300 KB
	for at := int64(0); at < size; at = min(at+1+rng.Int64N(300_000), size) {
		bounds = append(bounds, at)
	}
	bounds = append(bounds, size)
	order := rng.Perm(len(bounds) - 1)

	readAll()
	r := dataset.NewBlockReleaser(m)
	read := make([]bool, size)
	for _, k := range order {
		lo, hi := bounds[k], bounds[k+1]
		require.NoError(t, r.Read(lo, hi))
		for i := lo; i < hi; i++ {
			read[i] = true
		}
		want := (size + page - 1) / page * page
		for b := int64(0); b < size; b += block {
			e := min(b+block, size)
			if !slices.Contains(read[b:e], false) {
				want -= e/page*page - b // ReleasePages keeps the file's last partial page
			}
		}
		require.Equal(t, want, mappingRSS(t, m), "after reporting bytes [%d, %d)", lo, hi)
	}

	readAll()
	r = dataset.NewBlockReleaser(m)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(order); i += 4 {
				k := order[i]
				assert.NoError(t, r.Read(bounds[k], bounds[k+1]))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, page, mappingRSS(t, m), "after every range, from four goroutines")
	require.Equal(t, data, m, "the mapping still reads the file")
}
