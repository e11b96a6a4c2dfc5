//go:build cuda

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
)

// mapRecords writes fs's frames as records (header bytes starting with magic, the pixels
// big- or little-endian, footer bytes) after lead bytes into a file, maps it read-only and
// returns the FrameMap of frames [0, n).
func mapRecords(t *testing.T, fs frameSet, dt dataset.DType, n, lead, header, footer int, bigEndian bool, magic string) dataset.FrameMap {
	t.Helper()
	fb := len(fs.raw) / n
	stride := header + fb + footer
	buf := make([]byte, lead+n*stride)
	for f := range n {
		rec := buf[lead+f*stride:]
		copy(rec, magic)
		px := rec[header : header+fb]
		copy(px, fs.raw[f*fb:(f+1)*fb])
		if bigEndian && dt.Size() > 1 {
			for i := 0; i < fb; i += dt.Size() {
				for a, b := i, i+dt.Size()-1; a < b; a, b = a+1, b-1 {
					px[a], px[b] = px[b], px[a]
				}
			}
		}
		for i := range footer {
			rec[header+fb+i] = 0xEE
		}
	}
	path := filepath.Join(t.TempDir(), "frames.bin")
	require.NoError(t, os.WriteFile(path, buf, 0o600))
	file, err := os.Open(path)
	require.NoError(t, err)
	defer file.Close()
	data, err := unix.Mmap(int(file.Fd()), 0, len(buf), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(data) })
	return dataset.FrameMap{Mapping: data, Offset: int64(lead), Stride: int64(stride), Header: header, BigEndian: bigEndian, Magic: magic}
}

// TestRunMapped: frames DMA'd from a registered read-only file mapping, as raw/NPY
// (packed, host order) and MIB (384-byte headers with "MQ1,", big-endian) store them, and
// odd layouts (3-byte header, 5-byte footer: the byte path), over small registration
// windows so that tiles span two windows; results against a float64 reference.
func TestRunMapped(t *testing.T) {
	requireDevice(t)
	defer func(w int) { windowBytes = w }(windowBytes)
	windowBytes = 64 << 10
	cases := []struct {
		name                 string
		lead, header, footer int
		bigEndian            bool
		magic                string
	}{
		{"packed", 0, 0, 0, false, ""},
		{"packed-offset", 128, 0, 0, false, ""},
		{"mib", 0, 384, 0, true, "MQ1,"},
		{"odd", 7, 3, 5, true, "Q"},
	}
	for _, c := range cases {
		for _, dt := range gpuDTypes {
			for _, f64 := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/f64=%v", c.name, dt, f64), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(dt), 99))
					const n, sig = 60, 40
					fs := randomFrames(rng, dt, n, sig*sig)
					s := randomStack(rng, 3, sig, sig, false)
					fm := mapRecords(t, fs, dt, n, c.lead, c.header, c.footer, c.bigEndian, c.magic)
					cfg := RunnerConfig{DType: dt, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data, TileFrames: 7, Streams: 2, Float64: f64}
					if !fm.Packed(int64(sig * sig * dt.Size())) {
						cfg.RecordStride = fm.Stride
					}
					r, err := NewRunner(cfg)
					require.NoError(t, err)
					defer func() { require.NoError(t, r.Close()) }()
					const start, end = 5, 53
					sub := fm
					sub.Offset += start * fm.Stride
					out32, out64 := nanOut(n*s.N, f64)
					require.NoError(t, r.RunMapped(context.Background(), start, end, sub, out32, out64))
					checkResults(t, fs, s, start, end, func(i int) float64 {
						if f64 {
							return out64[i]
						}
						return float64(out32[i])
					})
				})
			}
		}
	}
}

func nanOut(n int, f64 bool) ([]float32, []float64) {
	if f64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = math.NaN()
		}
		return nil, out
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return out, nil
}

// A record whose header lacks the magic is reported with its frame number, and a runner
// made for packed frames refuses records that need unpacking.
func TestRunMappedErrors(t *testing.T) {
	requireDevice(t)
	rng := rand.New(rand.NewPCG(5, 5))
	const n, sig = 30, 16
	fs := randomFrames(rng, dataset.Uint16, n, sig*sig)
	s := randomStack(rng, 2, sig, sig, false)
	fm := mapRecords(t, fs, dataset.Uint16, n, 0, 384, 0, true, "MQ1,")
	bad, err := unix.Mmap(-1, 0, len(fm.Mapping), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer unix.Munmap(bad)
	copy(bad, fm.Mapping)
	binary.LittleEndian.PutUint32(bad[17*int(fm.Stride):], 0)
	require.NoError(t, unix.Mprotect(bad, unix.PROT_READ))
	badMap := fm
	badMap.Mapping = bad
	r, err := NewRunner(RunnerConfig{DType: dataset.Uint16, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data, TileFrames: 8, RecordStride: fm.Stride})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	out32, _ := nanOut(n*s.N, false)
	err = r.RunMapped(context.Background(), 0, n, badMap, out32, nil)
	require.ErrorContains(t, err, `frame 17: its header does not start with "MQ1,"`)

	packed, err := NewRunner(RunnerConfig{DType: dataset.Uint16, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data})
	require.NoError(t, err)
	defer func() { require.NoError(t, packed.Close()) }()
	err = packed.RunMapped(context.Background(), 0, n, fm, out32, nil)
	require.ErrorContains(t, err, "need unpacking, but the runner was made for RecordStride 0")
	err = packed.RunMapped(context.Background(), 0, n+1, fm, out32, nil)
	require.Error(t, err)
}

// Two runners reading the same mapping at once share its registered windows (the driver
// refuses to register a range twice) and both compute right results.
func TestRunMappedSharedWindows(t *testing.T) {
	requireDevice(t)
	defer func(w int) { windowBytes = w }(windowBytes)
	windowBytes = 64 << 10
	rng := rand.New(rand.NewPCG(8, 8))
	const n, sig = 200, 64
	fs := randomFrames(rng, dataset.Uint16, n, sig*sig)
	s := randomStack(rng, 2, sig, sig, false)
	fm := mapRecords(t, fs, dataset.Uint16, n, 0, 0, 0, false, "")
	out32, _ := nanOut(n*s.N, false)
	errs := make(chan error, 2)
	for part := range 2 {
		r, err := NewRunner(RunnerConfig{DType: dataset.Uint16, Pixels: s.Pixels(), NMasks: s.N, Masks: s.Data, TileFrames: 5, Streams: MappedStreams})
		require.NoError(t, err)
		go func() {
			var err error
			// Interleaved ranges, as two GPU workers' claims of one partition are.
			for a := part * 10; a < n && err == nil; a += 20 {
				sub := fm
				sub.Offset += int64(a) * fm.Stride
				err = r.RunMapped(context.Background(), a, a+10, sub, out32, nil)
			}
			errs <- errors.Join(err, r.Close())
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	checkResults(t, fs, s, 0, n, func(i int) float64 { return float64(out32[i]) })
}

// TestRegistrationScaling measures how fast the driver registers a page-cached file
// mapping (read-only cudaHostRegister, then unregister) from 1, 2, 4 and 8 threads at
// once, each on its own 64 MiB windows of a 2 GiB file, and how fast the device copies
// from registered windows: the figures that bound the copy-free feed. It logs them (the
// GPU check prints them) and checks only that every call succeeds.
func TestRegistrationScaling(t *testing.T) {
	requireDevice(t)
	if testing.Short() {
		t.Skip("writes a 2 GiB file")
	}
	const size, win = 2 << 30, 64 << 20
	path := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(path)
	require.NoError(t, err)
	chunk := make([]byte, win)
	for range size / win {
		_, err = f.Write(chunk)
		require.NoError(t, err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	defer unix.Munmap(data)
	for _, threads := range []int{1, 2, 4, 8} {
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, threads)
		for th := range threads {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for k := th; k < size/win && errs[th] == nil; k += threads {
					errs[th] = registerAndUnregister(0, unsafe.Pointer(&data[k*win]), win)
				}
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		t.Logf("registration: %d thread(s): %.1f GB/s (register + unregister)", threads, float64(size)/time.Since(t0).Seconds()/1e9)
	}
}
