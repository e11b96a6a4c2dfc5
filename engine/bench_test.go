//go:build linux

package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// The benchmarks stream a raw uint16 file of 256×256 frames, benchFrames of them
// (256 MiB: several times a core's L2, within the page cache of a small machine).
const (
	benchSig    = 256
	benchFrames = 2048
)

// rawFile is a headerless file of uint16 or float32 frames (host order) read with
// positioned reads.
type rawFile struct {
	f      *os.File
	frames int
	dt     dataset.DType
}

func (r *rawFile) Format() string       { return "raw" }
func (r *rawFile) Path() string         { return r.f.Name() }
func (r *rawFile) NavShape() []int      { return []int{r.frames} }
func (r *rawFile) SigShape() [2]int     { return [2]int{benchSig, benchSig} }
func (r *rawFile) DType() dataset.DType { return r.dt }
func (r *rawFile) NumFrames() int       { return r.frames }
func (r *rawFile) FrameBytes() int      { return benchSig * benchSig * r.dt.Size() }
func (r *rawFile) Close() error         { return r.f.Close() }

func (r *rawFile) ReadFrames(start, end int, dst []byte) error {
	n := (end - start) * r.FrameBytes()
	if _, err := r.f.ReadAt(dst[:n], int64(start)*int64(r.FrameBytes())); err != nil {
		return fmt.Errorf("%s: frames [%d, %d): %w", r.f.Name(), start, end, err)
	}
	return nil
}

// mappedFile is rawFile with its frames mapped into memory: a dataset.Viewer, whose
// frames a CPU worker reads in place.
type mappedFile struct {
	*rawFile
	data []byte
}

func (m *mappedFile) ViewFrames(start, end int) ([]byte, error) {
	return m.data[start*m.FrameBytes() : end*m.FrameBytes()], nil
}

func mapFile(b *testing.B, r *rawFile) *mappedFile {
	b.Helper()
	data, err := unix.Mmap(int(r.f.Fd()), 0, r.frames*r.FrameBytes(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Munmap(data) })
	return &mappedFile{rawFile: r, data: data}
}

// benchFile writes the benchmark file of uint16 frames (12-bit counts) into a temporary
// directory and reads it once, so that it is in the page cache.
func benchFile(b *testing.B) *rawFile { return benchFileOf(b, dataset.Uint16, benchFrames) }

// benchFileOf is benchFile for frames of dt (uint16 or float32: the same counts) and that
// many of them.
func benchFileOf(b *testing.B, dt dataset.DType, frames int) *rawFile {
	b.Helper()
	path := filepath.Join(b.TempDir(), "frames.raw")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	frame := make([]byte, benchSig*benchSig*dt.Size())
	for range frames {
		for i := 0; i < len(frame); i += dt.Size() {
			v := rng.IntN(4096)
			if dt == dataset.Float32 {
				binary.NativeEndian.PutUint32(frame[i:], math.Float32bits(float32(v)))
			} else {
				binary.NativeEndian.PutUint16(frame[i:], uint16(v))
			}
		}
		if _, err := f.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	ds := &rawFile{f: f, frames: frames, dt: dt}
	b.Cleanup(func() { ds.Close() })
	for i := range frames {
		if err := ds.ReadFrames(i, i+1, frame); err != nil {
			b.Fatal(err)
		}
	}
	return ds
}

// pinBench pins the benchmark goroutine to one allowed CPU, as a worker would be.
func pinBench(b *testing.B) {
	b.Helper()
	cpus, err := affinity.ThreadCPUs()
	if err != nil {
		b.Fatal(err)
	}
	unpin, err := affinity.Pin(cpus[len(cpus)-1:])
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := unpin(); err != nil {
			b.Error(err)
		}
	})
}

// threadCPUTime is the CPU time (user and system) of the calling OS thread.
func threadCPUTime(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// measure runs pass b.N times on the pinned benchmark thread and reports, besides the
// wall-clock MB/s of SetBytes, frames/s and "cpu-MB/s": the bytes per second of the
// thread's own CPU time, which other processes on a shared machine do not inflate.
func measure(b *testing.B, pass func()) {
	measureVsSweep(b, benchFrames, benchSig*benchSig*2, nil, pass)
}

// measureVsSweep is measure for passes over frames of frameBytes each; where m is not nil, each pass followed by a sweep of m's
// frames in place (bytes.Count, as BenchmarkStreamingRead's "in_place"; not counted in
// the figures of measure), and also reports "×sweep": the median over the passes of sweep
// time / pass time, the pass's fraction of the in-place read floor, each pair seeing the
// same memory bandwidth on a shared machine.
func measureVsSweep(b *testing.B, frames, frameBytes int, m *mappedFile, pass func()) {
	b.SetBytes(int64(frames) * int64(frameBytes))
	ratios := make([]float64, 0, b.N)
	var count int
	var elapsed, cpu time.Duration
	b.ResetTimer()
	for range b.N {
		t, c := time.Now(), threadCPUTime(b)
		pass()
		d := time.Since(t)
		elapsed, cpu = elapsed+d, cpu+threadCPUTime(b)-c
		if m != nil {
			b.StopTimer()
			t = time.Now()
			count += bytes.Count(m.data, sweepByte)
			ratios = append(ratios, time.Since(t).Seconds()/d.Seconds())
			b.StartTimer()
		}
	}
	bytes := float64(b.N) * float64(frames) * float64(frameBytes)
	b.ReportMetric(float64(frames)*float64(b.N)/elapsed.Seconds(), "frames/s")
	b.ReportMetric(bytes/cpu.Seconds()/1e6, "cpu-MB/s")
	if m != nil {
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "×sweep")
	}
	if count == -1 {
		b.Log(count) // keeps the sweeps from being optimised away
	}
}

// ringMask is a ring of radii [60, 70) px at the centre: about 6% of the pixels.
func ringMask() *masks.Stack {
	s := &masks.Stack{N: 1, SigY: benchSig, SigX: benchSig, Data: make([]float32, benchSig*benchSig), Names: []string{"ring"}}
	for y := range benchSig {
		for x := range benchSig {
			if r := math.Hypot(float64(y)-benchSig/2, float64(x)-benchSig/2); r >= 60 && r < 70 {
				s.Data[y*benchSig+x] = 1
			}
		}
	}
	return s
}

// BenchmarkCPUWorker is one CPU worker's throughput on one pinned core, streaming the
// page-cached file with ReadFrames, or ("_view") reading it in place through a memory
// map: 1, 4, 16, 64 and 256 dense masks, and a ring mask applied sparse and dense. Dense
// stacks run with float32 results on the AVX2 block kernels ("simd", on CPUs that have
// them) and on the pure-Go kernels ("go": fused loop, gonum Gemm), and with float64
// results on the float64 broadcast kernels ("float64", on CPUs with AVX2 and FMA) and in
// pure Go ("float64_go"); the sparse gather has no SIMD variant ("float32"). The "f32_"
// rows are 1 and 4 dense masks on a file of float32 frames (the same counts, 256 MiB),
// block kernels only. The "_view" rows stream the frames in place and report ×sweep, the
// pass's fraction of the in-place read floor; BenchmarkSIMDDense is the same kernels on a
// tile already in cache.
func BenchmarkCPUWorker(b *testing.B) {
	file := benchFile(b)
	mapped := mapFile(b, file)
	file32 := benchFileOf(b, dataset.Float32, benchFrames/2)
	mapped32 := mapFile(b, file32)
	rng := rand.New(rand.NewPCG(2, 2))
	sig := [2]int{benchSig, benchSig}
	ring := ringMask()
	type variant struct {
		name      string
		simd, f64 bool
	}
	denseVariants := []variant{{"simd", true, false}, {"go", false, false}, {"float64", true, true}, {"float64_go", false, true}}
	sparseVariants := []variant{{"float32", true, false}, {"float64", false, true}}
	cases := []struct {
		name        string
		stack       *masks.Stack
		sparse, f32 bool
	}{
		{"dense1", randomStack(rng, 1, sig), false, false},
		{"dense4", randomStack(rng, 4, sig), false, false},
		{"dense16", randomStack(rng, 16, sig), false, false},
		{"dense64", randomStack(rng, 64, sig), false, false},
		{"dense256", randomStack(rng, 256, sig), false, false},
		{"sparse_ring", ring, true, false},
		{"dense_ring", ring, false, false},
		{"f32_dense1", randomStack(rng, 1, sig), false, true},
		{"f32_dense4", randomStack(rng, 4, sig), false, true},
	}
	for _, c := range cases {
		variants, f, m := denseVariants, file, mapped
		switch {
		case c.sparse:
			variants = sparseVariants
		case c.f32:
			variants, f, m = denseVariants[:1], file32, mapped32
		}
		for _, view := range []bool{false, true} {
			var ds dataset.Dataset = f
			name := c.name
			if view {
				ds, name = m, name+"_view"
			}
			for _, v := range variants {
				b.Run(name+"/"+v.name, func(b *testing.B) {
					if v.simd && simdKernels[uint16]() == nil {
						b.Skip("no AVX2+FMA block kernels on this CPU")
					}
					if !v.simd && !c.sparse && c.stack.N > 64 {
						b.Skip("the pure-Go kernels take tens of seconds a pass with more than 64 masks")
					}
					old := useSIMD
					useSIMD = v.simd
					defer func() { useSIMD = old }()
					pinBench(b)
					job := &Job{Dataset: ds, Masks: c.stack, NMasks: c.stack.N, Float64: v.f64,
						TileFrames: autoTileFrames(ds.FrameBytes(), c.stack.N, c.sparse)}
					if c.sparse {
						job.Sparse = c.stack.ToCSR()
					}
					w, err := NewCPUWorker(job)
					if err != nil {
						b.Fatal(err)
					}
					out := Output{F32: make([]float32, f.frames*c.stack.N)}
					if v.f64 {
						out = Output{F64: make([]float64, f.frames*c.stack.N)}
					}
					all := planner.Partition{Start: 0, End: f.frames}
					pass := func() {
						if err := w.Process(context.Background(), all, out, nil); err != nil {
							b.Fatal(err)
						}
					}
					var sweep *mappedFile
					if view {
						sweep = m
					}
					measureVsSweep(b, f.frames, f.FrameBytes(), sweep, pass)
				})
			}
		}
	}
}

// BenchmarkCPUWorkerShifted is the CPU workers' throughput with shifted masks
// (Job.Shifts), beside the same job unshifted, on the memory-mapped file of uint16 frames
// and on one of float32 frames (the same counts, 256 MiB): 1, 4 and 16 dense masks
// (float32 results, the AVX2 block kernels where the CPU has them) and the sparse ring,
// with per-frame shifts along a plane across the scan ("integer": rounded to whole
// pixels; "subpixel": bilinear), as a descan gives them. "workers1" is one CPU worker on
// one pinned core ("cpu-MB/s": per second of its thread's CPU time); "workers2" is
// ApplyMasks with two CPU workers on the first two allowed CPUs, 16 partitions
// ("cpu-MB/s": per second of the process's CPU time).
func BenchmarkCPUWorkerShifted(b *testing.B) {
	files := map[dataset.DType]*mappedFile{
		dataset.Uint16:  mapFile(b, benchFile(b)),
		dataset.Float32: mapFile(b, benchFileOf(b, dataset.Float32, benchFrames/2)),
	}
	rng := rand.New(rand.NewPCG(2, 2))
	sig := [2]int{benchSig, benchSig}
	cases := []struct {
		name   string
		stack  *masks.Stack
		sparse bool
	}{
		{"dense1", randomStack(rng, 1, sig), false},
		{"dense4", randomStack(rng, 4, sig), false},
		{"dense16", randomStack(rng, 16, sig), false},
		{"sparse_ring", ringMask(), true},
	}
	cpus, err := affinity.ThreadCPUs()
	if err != nil {
		b.Fatal(err)
	}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		mapped := files[dt]
		frames := mapped.frames
		plane := make([]float64, 2*frames)
		for f := range frames {
			plane[2*f], plane[2*f+1] = 3.3*float64(f)/float64(frames)-1.2, -2.7*float64(f)/float64(frames)+0.4
		}
		integer := make([]float64, len(plane))
		for i, v := range plane {
			integer[i] = math.Round(v)
		}
		for _, c := range cases {
			for _, workers := range []int{1, 2} {
				for _, sh := range []struct {
					name   string
					shifts []float64
				}{{"unshifted", nil}, {"integer", integer}, {"subpixel", plane}} {
					b.Run(fmt.Sprintf("%v/%s/workers%d/%s", dt, c.name, workers, sh.name), func(b *testing.B) {
						if workers > len(cpus) {
							b.Skip("fewer CPUs allowed than workers")
						}
						stack := c.stack
						if c.sparse {
							stack = &masks.Stack{N: c.stack.N, SigY: benchSig, SigX: benchSig, Sparse: c.stack.ToCSR(), Names: c.stack.Names}
						}
						out := make([]float32, frames*c.stack.N)
						if workers > 1 {
							plan := evenPlan(cpus, workers, frames, 16)
							measureProcess(b, frames, mapped.FrameBytes(), func() {
								if _, err := ApplyMasks(context.Background(), mapped, stack, plan, Options{Out32: out, Shifts: sh.shifts}); err != nil {
									b.Fatal(err)
								}
							})
							return
						}
						pinBench(b)
						job := &Job{Dataset: mapped, Masks: c.stack, NMasks: c.stack.N, Shifts: sh.shifts,
							TileFrames: autoTileFrames(mapped.FrameBytes(), c.stack.N, c.sparse)}
						if c.sparse {
							job.Sparse = c.stack.ToCSR()
						}
						w, err := NewCPUWorker(job)
						if err != nil {
							b.Fatal(err)
						}
						all := planner.Partition{Start: 0, End: frames}
						measureVsSweep(b, frames, mapped.FrameBytes(), nil, func() {
							if err := w.Process(context.Background(), all, Output{F32: out}, nil); err != nil {
								b.Fatal(err)
							}
						})
					})
				}
			}
		}
	}
}

// measureProcess runs pass b.N times and reports, besides the wall-clock MB/s of
// SetBytes, frames/s and "cpu-MB/s": the bytes per second of the process's CPU time (all
// its threads: the workers of a run).
func measureProcess(b *testing.B, frames, frameBytes int, pass func()) {
	b.SetBytes(int64(frames) * int64(frameBytes))
	cpuTime := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var elapsed, cpu time.Duration
	b.ResetTimer()
	for range b.N {
		t, c := time.Now(), cpuTime()
		pass()
		elapsed, cpu = elapsed+time.Since(t), cpu+cpuTime()-c
	}
	bytes := float64(b.N) * float64(frames) * float64(frameBytes)
	b.ReportMetric(float64(frames)*float64(b.N)/elapsed.Seconds(), "frames/s")
	b.ReportMetric(bytes/cpu.Seconds()/1e6, "cpu-MB/s")
}

// BenchmarkStreamingRead is the bandwidth the CPU worker is measured against, on one
// pinned core, touching every byte with a vectorised sweep (bytes.Count, AVX2 on amd64):
// frames of the page-cached file viewed in place (the memory map the worker reads), the
// same frames read with ReadFrames into a tile buffer of the worker's size, and the same
// number of bytes already in process memory.
func BenchmarkStreamingRead(b *testing.B) {
	ds := benchFile(b)
	tile := AutoTileFrames(ds.FrameBytes())
	var count int
	b.Run("in_place", func(b *testing.B) {
		v := mapFile(b, ds)
		pinBench(b)
		measure(b, func() {
			for f := 0; f < benchFrames; f += tile {
				frames, err := v.ViewFrames(f, min(f+tile, benchFrames))
				if err != nil {
					b.Fatal(err)
				}
				count += bytes.Count(frames, sweepByte)
			}
		})
	})
	b.Run("read_frames", func(b *testing.B) {
		pinBench(b)
		buf := make([]byte, tile*ds.FrameBytes())
		measure(b, func() {
			for f := 0; f < benchFrames; f += tile {
				n := min(tile, benchFrames-f) * ds.FrameBytes()
				if err := ds.ReadFrames(f, f+n/ds.FrameBytes(), buf); err != nil {
					b.Fatal(err)
				}
				count += bytes.Count(buf[:n], sweepByte)
			}
		})
	})
	b.Run("memory", func(b *testing.B) {
		pinBench(b)
		data := make([]byte, benchFrames*ds.FrameBytes())
		for i := range data {
			data[i] = byte(i)
		}
		measure(b, func() { count += bytes.Count(data, sweepByte) })
	})
	if count == -1 {
		b.Log(count) // keeps the sweeps from being optimised away
	}
}

// sweepByte is the byte the streaming sweeps count: any value makes bytes.Count read
// every byte.
var sweepByte = []byte{0x5a}

// BenchmarkSIMDDense is the float32 dense kernel on the block kernels alone, on one
// pinned core, over a tile of 256×256 frames already in memory (autoTileFrames of them:
// 8 of uint16 and 4 of float32 for 1 and 4 masks, 64 and 32 for 8 and more), with 1, 4,
// 8, 16 and 64 random masks: the compute side of BenchmarkCPUWorker's "simd" variants,
// for more pixel types. The "GFLOP/s" metric counts 2 flops per pixel and mask.
func BenchmarkSIMDDense(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	sig := [2]int{benchSig, benchSig}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		all := randomDataset(rng, dt, []int{autoTileFrames(benchSig*benchSig*dt.Size(), 64, false)}, sig)
		for _, nMasks := range []int{1, 4, 8, 16, 64} {
			frames := autoTileFrames(benchSig*benchSig*dt.Size(), nMasks, false)
			ds := &memDataset{nav: []int{frames}, sig: sig, dt: dt, data: all.data[:frames*benchSig*benchSig*dt.Size()]}
			stack := randomStack(rng, nMasks, sig)
			b.Run(fmt.Sprintf("%v/masks%d", dt, nMasks), func(b *testing.B) {
				var k interface {
					apply(tile []byte, frames int, acc []float64)
				}
				switch dt {
				case dataset.Uint16:
					if kern := simdKernels[uint16](); kern != nil {
						k = newSIMDDense(stack.Dense(), nMasks, benchSig*benchSig, kern, nil)
					}
				case dataset.Float32:
					if kern := simdKernels[float32](); kern != nil {
						k = newSIMDDense(stack.Dense(), nMasks, benchSig*benchSig, kern, nil)
					}
				}
				if k == nil {
					b.Skip("no AVX2+FMA block kernels on this CPU")
				}
				pinBench(b)
				acc := make([]float64, frames*nMasks)
				b.SetBytes(int64(len(ds.data)))
				for b.Loop() {
					k.apply(ds.data, frames, acc)
				}
				b.ReportMetric(float64(b.N)*float64(frames*benchSig*benchSig*nMasks*2)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkSIMDDense64 is the float64 dense kernel (simdDense64) alone, on one pinned
// core, over a tile of 256×256 frames already in memory (autoTileFrames of them), with 2,
// 4, 16, 64 and 256 random masks, uint16 and float64 frames, on the kernels this CPU
// selects: the compute side of BenchmarkCPUWorker's "float64" variants. "GFLOP/s" counts
// 2 flops per pixel and mask, "cpu-GFLOP/s" per second of the thread's CPU time.
func BenchmarkSIMDDense64(b *testing.B) {
	if bcast64KernelsFor(64) == nil {
		b.Skip("no float64 SIMD kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	sig := [2]int{benchSig, benchSig}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float64} {
		all := randomDataset(rng, dt, []int{autoTileFrames(benchSig*benchSig*dt.Size(), 64, false)}, sig)
		for _, nMasks := range []int{2, 4, 16, 64, 256} {
			frames := autoTileFrames(benchSig*benchSig*dt.Size(), nMasks, false)
			data := all.data[:frames*benchSig*benchSig*dt.Size()]
			stack := randomStack(rng, nMasks, sig)
			b.Run(fmt.Sprintf("%v/masks%d", dt, nMasks), func(b *testing.B) {
				kern := float64Kernel(bcast64KernelsFor(nMasks), dt, stack, frames)
				pinBench(b)
				acc := make([]float64, frames*nMasks)
				b.SetBytes(int64(len(data)))
				cpu := threadCPUTime(b)
				for b.Loop() {
					kern.apply(data, frames, acc)
				}
				flops := float64(b.N) * float64(frames*benchSig*benchSig*nMasks*2)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(threadCPUTime(b)-cpu).Seconds()/1e9, "cpu-GFLOP/s")
			})
		}
	}
}

// BenchmarkShiftDot is the fused shifted-mask kernels alone (shiftDot.tile) on one
// pinned core, over a tile of 8 256×256 uint16 frames in memory with sub-pixel shifts,
// 1 and 4 masks, beside the unshifted block kernels (simdDense) on the same tile: the
// compute side of BenchmarkCPUWorkerShifted's dense subpixel rows. "cpu-MB/s" counts the
// thread's CPU time.
func BenchmarkShiftDot(b *testing.B) {
	if shiftDotKernels[uint16]() == nil {
		b.Skip("no AVX2+FMA on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 3))
	sig := [2]int{benchSig, benchSig}
	const frames = 8
	ds := randomDataset(rng, dataset.Uint16, []int{frames}, sig)
	shifts := make([]float64, 2*frames)
	for i := range shifts {
		shifts[i] = rng.Float64()*4 - 2
	}
	for _, nMasks := range []int{1, 4} {
		stack := randomStack(rng, nMasks, sig)
		for _, shifted := range []bool{false, true} {
			b.Run(fmt.Sprintf("masks%d/shifted=%v", nMasks, shifted), func(b *testing.B) {
				k := newShiftDot[uint16](&Job{Masks: stack, NMasks: nMasks})
				u := newSIMDDense(stack.Data, nMasks, benchSig*benchSig, simdKernels[uint16](), nil)
				px := asNative[uint16](ds.data)
				acc := make([]float64, frames*nMasks)
				pinBench(b)
				b.SetBytes(int64(len(ds.data)))
				cpu := threadCPUTime(b)
				for b.Loop() {
					if shifted {
						k.tile(px, frames, shifts, acc)
					} else {
						u.apply(ds.data, frames, acc)
					}
				}
				b.ReportMetric(float64(b.N)*float64(len(ds.data))/(threadCPUTime(b)-cpu).Seconds()/1e6, "cpu-MB/s")
			})
		}
	}
}
