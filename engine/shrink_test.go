package engine

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// shrinkNPY writes a little-endian uint16 NPY file of n frames of 64×64 pixels (8 KiB
// each: a frame spans pages), which Open maps and CPU workers read in place.
func shrinkNPY(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scan.npy")
	w, err := dataset.Create(path, "npy", []int{n}, [2]int{64, 64}, dataset.Uint16)
	require.NoError(t, err)
	frame := make([]byte, 64*64*2)
	for i := range n {
		for p := range 64 * 64 {
			binary.NativeEndian.PutUint16(frame[2*p:], uint16(i+p%7))
		}
		require.NoError(t, w.WriteFrames(frame))
	}
	require.NoError(t, w.Close())
	return path
}

// cutAfterView is a dataset whose ViewFrames truncates the file to 100 bytes after the
// dataset's own check of the file's size, at the cut-th call: the worker then reads
// frames of pages that are gone, and faults.
type cutAfterView struct {
	dataset.Dataset
	path  string
	cut   int32
	calls atomic.Int32
}

func (d *cutAfterView) ViewFrames(start, end int) ([]byte, error) {
	v, err := d.Dataset.(dataset.Viewer).ViewFrames(start, end)
	if d.calls.Add(1) == d.cut {
		if err := os.Truncate(d.path, 100); err != nil {
			panic(err)
		}
	}
	return v, err
}

// A memory-mapped file that shrinks under a run is an I/O error naming it, without a
// stack, never a crash (#17.2): when it shrank before a tile, the dataset's size check
// finds it; when it shrinks while a worker reads the frames in place, the fault (SIGBUS)
// is recovered.
func TestApplyMasksFileShrinks(t *testing.T) {
	noLeak(t)
	rng := rand.New(rand.NewPCG(2, 17))
	stack := randomStack(rng, 3, [2]int{64, 64})
	check := func(err error, path, how string) {
		t.Helper()
		require.Error(t, err)
		require.Equal(t, errs.IO, errs.KindOf(err), err.Error())
		require.Regexp(t, `^worker \d \(cpu \d\): frames \[\d+, \d+\): dataset: `+path+`: the file changed while being read: it is now 100 bytes, 524416 when it was opened \(truncated or rewritten by another program\)`+how+`; read it again once it is complete$`, err.Error())
	}

	path := shrinkNPY(t, 64)
	ds, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	_, viewer := ds.(dataset.Viewer)
	require.True(t, viewer, "the NPY file is read in place")
	require.NoError(t, os.Truncate(path, 100))
	_, err = ApplyMasks(context.Background(), ds, stack, evenPlan(anyCPUs, 2, 64, 4), Options{TileFrames: 4, NoPin: true})
	check(err, path, "")
	require.NoError(t, ds.Close())

	for _, cut := range []int32{1, 3} {
		path = shrinkNPY(t, 64)
		ds, err = dataset.Open(path, dataset.Options{})
		require.NoError(t, err)
		cutting := &cutAfterView{Dataset: ds, path: path, cut: cut}
		_, err = ApplyMasks(context.Background(), cutting, stack, evenPlan(anyCPUs, 1, 64, 4), Options{TileFrames: 4, NoPin: true})
		check(err, path, `, and reading byte \d+ of its memory mapping failed`)
		require.NoError(t, ds.Close())
	}
}

// Frames in the caller's memory (FromMemory: Python's from_array of a numpy.memmap, C's
// stemdot_dataset_from_memory) that fault while a worker reads them, a memory-mapped
// file truncated meanwhile, are an I/O error saying where the memory became
// unreadable, without a stack (#17r D3).
func TestApplyMasksMemoryFault(t *testing.T) {
	noLeak(t)
	path := shrinkNPY(t, 64)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	mapping, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mapping)
	const header = 128 // the NPY header dataset.Create writes
	ds, err := dataset.FromMemory(mapping[header:], []int{64}, [2]int{64, 64}, dataset.Uint16)
	require.NoError(t, err)
	defer ds.Close()
	require.NoError(t, os.Truncate(path, 100))
	stack := randomStack(rand.New(rand.NewPCG(3, 17)), 3, [2]int{64, 64})
	_, err = ApplyMasks(context.Background(), ds, stack, evenPlan(anyCPUs, 2, 64, 4), Options{TileFrames: 4, NoPin: true})
	require.Error(t, err)
	require.Equal(t, errs.IO, errs.KindOf(err), err.Error())
	require.Regexp(t, `^worker \d \(cpu \d\): frames \[\d+, \d+\): dataset: in-memory data: the frames' memory became unreadable at byte \d+ of the buffer of 524288 bytes \(e\.g\. a memory-mapped file truncated by another program\)$`, err.Error())
	// The first page of the mapping holds the 100 bytes left: the fault is past it.
	m := regexp.MustCompile(`at byte (\d+) `).FindStringSubmatch(err.Error())
	at, _ := strconv.Atoi(m[1])
	require.GreaterOrEqual(t, at+header, os.Getpagesize())
}
