package dataset_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/errs"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
)

func TestOverflowingShapes(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "d.raw")
	require.NoError(t, os.WriteFile(raw, make([]byte, 24*4*4*2), 0o644))

	_, err := dataset.Open(raw, dataset.Options{SigShape: []int{8589934592, 1073741824}, DType: dataset.Uint16})
	assert.ErrorContains(t, err, "dataset: "+raw+": sig shape (8589934592, 1073741824) is too large: a frame of 8589934592×1073741824 pixels of uint16")
	_, err = dataset.Open(raw, dataset.Options{SigShape: []int{32768, 32769}, DType: dataset.Uint16})
	assert.ErrorContains(t, err, "exceeds the 2147483648-byte limit")
	// 4·4611686018427387910 wraps around to 24, the file's number of frames.
	_, err = dataset.Open(raw, dataset.Options{SigShape: []int{4, 4}, DType: dataset.Uint16, NavShape: []int{4, 4611686018427387910}})
	assert.ErrorContains(t, err, "dataset: "+raw+": nav shape (4, 4611686018427387910) (option nav_shape) is too large")

	npyPath := filepath.Join(dir, "big.npy")
	require.NoError(t, os.WriteFile(npyPath, frametest.NPYDict("{'descr': '<u2', 'fortran_order': False, 'shape': (4, 4611686018427387910, 1, 1), }"), 0o644))
	_, err = dataset.Open(npyPath, dataset.Options{})
	assert.ErrorContains(t, err, "NPY shape (4, 4611686018427387910, 1, 1): nav shape (4, 4611686018427387910) is too large")
	require.NoError(t, os.WriteFile(npyPath, frametest.NPYDict("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 4611686018427387904, 2), }"), 0o644))
	_, err = dataset.Open(npyPath, dataset.Options{})
	assert.ErrorContains(t, err, "sig shape (4611686018427387904, 2) is too large")
	require.NoError(t, os.WriteFile(npyPath, frametest.NPYDict("{'descr': '<f8', 'fortran_order': False, 'shape': (1073741824, 1073741824, 8, 8), }"), 0o644))
	_, err = dataset.Open(npyPath, dataset.Options{})
	assert.ErrorContains(t, err, "1152921504606846976 frames of 512 bytes (sig shape (8, 8), float64) exceed")

	mib := filepath.Join(dir, "big.mib")
	require.NoError(t, os.WriteFile(mib, []byte("MQ1,000001,00384,01,4611686018427387904,0004,U16,   1x1,01,"), 0o644))
	_, err = dataset.Open(mib, dataset.Options{})
	assert.ErrorContains(t, err, "first frame header: sig shape (4, 4611686018427387904) is too large")
	require.NoError(t, os.WriteFile(mib, []byte("MQ1,000001,9223372036854775807,01,0004,0004,U16,   1x1,01,"), 0o644))
	_, err = dataset.Open(mib, dataset.Options{})
	assert.ErrorContains(t, err, "is less than one frame of 9223372036854775807-byte header + 32 pixel bytes (4×4 U16)")

	_, err = dataset.FromMemory(make([]byte, 24*32), []int{4, 4611686018427387910}, [2]int{4, 4}, dataset.Uint16)
	assert.ErrorContains(t, err, "nav shape (4, 4611686018427387910) is too large")
	_, err = dataset.FromMemory(make([]byte, 32), nil, [2]int{1 << 62, 4}, dataset.Uint16)
	assert.ErrorContains(t, err, "sig shape (4611686018427387904, 4) is too large")

	out := filepath.Join(dir, "out.npy")
	_, err = dataset.Create(out, "npy", []int{4294967296, 4294967296}, [2]int{4, 4}, dataset.Uint16)
	assert.ErrorContains(t, err, "nav shape (4294967296, 4294967296) is too large")
	_, err = dataset.Create(out, "npy", []int{1 << 40, 1 << 20}, [2]int{64, 64}, dataset.Uint16)
	assert.ErrorContains(t, err, "1152921504606846976 frames of 8192 bytes (sig shape (64, 64), uint16) exceed")
	_, err = dataset.Create(out, "raw", []int{2}, [2]int{1 << 62, 4}, dataset.Uint8)
	assert.ErrorContains(t, err, "sig shape (4611686018427387904, 4) is too large")
	// MIB frame headers push a shape that fits as raw over the limit.
	_, err = dataset.Create(out, "mib", []int{1 << 52, 1 << 7}, [2]int{2, 2}, dataset.Uint8)
	assert.ErrorContains(t, err, "frames of 388 bytes exceed")
	assert.ErrorContains(t, stemnpy.WriteFile(out, []int{1 << 32, 1 << 32, 1}, []float32{}), "shape (4294967296, 4294967296, 1) is too large")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 3, "no output file")

	frames, fb, err := dataset.CheckShape([]int{3, 5}, [2]int{7, 11}, dataset.Float32)
	require.NoError(t, err)
	assert.Equal(t, 15, frames)
	assert.Equal(t, 7*11*4, fb)
	_, fb, err = dataset.CheckShape([]int{1}, [2]int{1 << 15, 1 << 14}, dataset.Float32)
	require.NoError(t, err, "exactly MaxFrameBytes")
	assert.Equal(t, dataset.MaxFrameBytes, fb)
}

// umask reads the process's umask.
func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestWrittenFileMode(t *testing.T) {
	dir := t.TempDir()
	want := 0o666 &^ umask()
	for _, format := range []string{"raw", "npy", "mib"} {
		path := filepath.Join(dir, "a."+format)
		frametest.WriteRandom(t, path, format, []int{1, 2}, [2]int{2, 2})
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, want, st.Mode().Perm(), format)
	}
	st, err := os.Stat(filepath.Join(dir, "a.hdr"))
	require.NoError(t, err)
	assert.Equal(t, want, st.Mode().Perm(), "MIB .hdr sidecar")

	res := filepath.Join(dir, "res.npy")
	require.NoError(t, stemnpy.WriteFile(res, []int{2}, []float32{1, 2}))
	st, err = os.Stat(res)
	require.NoError(t, err)
	assert.Equal(t, want, st.Mode().Perm(), "WriteArrayNPY")

	// A replaced file keeps its permissions, as a shell's > or os.Create would.
	require.NoError(t, os.Chmod(res, 0o600))
	require.NoError(t, stemnpy.WriteFile(res, []int{3}, []float32{1, 2, 3}))
	st, err = os.Stat(res)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Equal(t, int64(128+12), st.Size())
}

func TestWriterRefusesDestination(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.npy")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	sub := filepath.Join(dir, "sub.npy")
	require.NoError(t, os.Mkdir(sub, 0o755))
	ro := filepath.Join(dir, "ro.npy")
	require.NoError(t, os.WriteFile(ro, []byte("keep"), 0o444))
	roHdr := filepath.Join(dir, "m.hdr")
	require.NoError(t, os.WriteFile(roHdr, []byte("keep"), 0o444))

	for _, tc := range []struct{ path, want string }{
		{fifo, fifo + " exists and is a named pipe, not a regular file: not replacing it"},
		{sub, sub + " exists and is a directory: not replacing it"},
		{ro, ro + " exists and is not writable (mode -r--r--r--): not replacing it"},
	} {
		_, err := dataset.Create(tc.path, "npy", []int{1}, [2]int{2, 2}, dataset.Uint8)
		assert.ErrorContains(t, err, "dataset: create "+tc.path+": "+tc.want)
		assert.ErrorContains(t, stemnpy.WriteFile(tc.path, []int{1}, []float32{1}), tc.want)
	}
	_, err := dataset.Create(filepath.Join(dir, "m.mib"), "mib", []int{1}, [2]int{2, 2}, dataset.Uint8)
	assert.ErrorContains(t, err, roHdr+" exists and is not writable")

	st, err := os.Stat(fifo)
	require.NoError(t, err)
	assert.Equal(t, os.ModeNamedPipe, st.Mode().Type(), "the FIFO is still there")
	b, err := os.ReadFile(ro)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 4, "no temporary files left")
}

func TestOpenNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.dat")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	for _, format := range []string{"", "raw", "npy", "mib"} {
		_, err := dataset.Open(fifo, dataset.Options{Format: format, SigShape: []int{2, 2}, DType: dataset.Uint8})
		assert.EqualError(t, err, "dataset: "+fifo+" is a named pipe, not a regular file", format)
	}
}

// openPromptly opens path with opt in a goroutine and fails the test when Open has not
// returned within 10 s: a regression that blocks on a FIFO fails instead of hanging. The
// FIFOs given are then opened for writing, which releases a reader blocked on them.
func openPromptly(t *testing.T, path string, opt dataset.Options, fifos ...string) (dataset.Dataset, error) {
	t.Helper()
	type result struct {
		ds  dataset.Dataset
		err error
	}
	done := make(chan result, 1)
	go func() {
		ds, err := dataset.Open(path, opt)
		done <- result{ds, err}
	}()
	select {
	case r := <-done:
		return r.ds, r.err
	case <-time.After(10 * time.Second):
		for _, f := range fifos {
			if w, err := os.OpenFile(f, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		t.Fatalf("Open(%s) blocked for 10 s", path)
		return nil, nil
	}
}

// Every file a reader opens itself is checked to be a regular file first and opened
// without blocking (#17.9): a .hdr sidecar that is a FIFO is refused at once, naming it;
// so is an EMPAD XML file named .xml beside a raw file, which is then skipped.
func TestSidecarNotRegular(t *testing.T) {
	dir := t.TempDir()
	mib, _ := frametest.CopyMIB(t, frametest.MIB002)
	hdr := strings.TrimSuffix(mib, ".mib") + ".hdr"
	require.NoError(t, unix.Mkfifo(hdr, 0o644))
	_, err := openPromptly(t, mib, dataset.Options{}, hdr)
	assert.EqualError(t, err, "dataset: "+mib+": "+hdr+" is a named pipe, not a regular file; give option nav_shape to read the file without it")
	assert.Equal(t, errs.IO, errs.KindOf(err))
	ds, err := openPromptly(t, mib, dataset.Options{NavShape: []int{2, 4}}, hdr)
	require.NoError(t, err)
	assert.Equal(t, []string{"the .hdr sidecar was not read (" + hdr + " is a named pipe, not a regular file): the scan shape is option nav_shape's"}, dataset.Notes(ds))
	require.NoError(t, ds.Close())

	_, raw, _ := frametest.WriteEMPAD(t, dir, "acquisition_legacy.xml", 4, 1)
	require.NoError(t, os.Remove(filepath.Join(dir, "acquisition_legacy.xml")))
	fifo := filepath.Join(dir, "other.xml")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	ds, err = openPromptly(t, raw, dataset.Options{Format: "empad", NavShape: []int{2, 2}}, fifo)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2}, ds.NavShape())
	require.NoError(t, ds.Close())
}
