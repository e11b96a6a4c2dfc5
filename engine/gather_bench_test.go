//go:build linux

package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// gatherBenchFrames is the frames of BenchmarkGatherTargets: 32 MB of sparse bytes,
// beyond the last-level cache of a small machine, and 1 GiB densified.
const gatherBenchFrames = 8192

// BenchmarkGatherTargets measures issue #19.3's targets for the gather kernel on
// gatherBenchFrames uint16 frames of 256×256 with 1% of the pixels hit (655 events per frame,
// at distinct random pixels in pixel order, values 1-20), held in memory in CSR form (indptr int,
// indices int32, data uint16: 6 bytes per event), on 1 and 2 pinned CPU workers, with 1,
// 4 and 16 dense masks and 16 concentric rings 4 px wide (a sparse stack: the gather's
// pixel-major CSR layout). Each iteration times, one after the other on the same workers:
//
//   - floor: a plain sweep over the sparse bytes (each worker sums the indptr, indices
//     and data of its half of the frames), the read floor;
//   - gather: ApplyMasks over the sparse dataset (the CPU workers' gather kernel, the
//     events viewed in place: FromSparse is a dataset.SparseViewer);
//   - dense: ApplyMasks over the same frames densified in memory (the dense kernels,
//     frames viewed in place).
//
// and reports each one's throughput in GB/s of sparse bytes, and the ratios
// gather/floor (target ≥ 0.8) and gather/dense (target ≥ 10), of wall time and (-cpu)
// of the process's CPU time (getrusage), which time slices lost to other processes on a
// shared machine do not inflate.
func BenchmarkGatherTargets(b *testing.B) {
	const sig = 256
	pixels := sig * sig
	rng := rand.New(rand.NewPCG(1, 1))
	dense := make([]uint16, gatherBenchFrames*pixels)
	sf := hitFrames(rng, gatherBenchFrames, pixels, dense)
	sparseBytes := int64(8*len(sf.Indptr) + 4*len(sf.Indices) + len(sf.Data))
	sp, err := dataset.FromSparse(sf, nil, [2]int{sig, sig}, dataset.Uint16)
	if err != nil {
		b.Fatal(err)
	}
	dn, err := dataset.FromMemory(asBytes(dense), nil, [2]int{sig, sig}, dataset.Uint16)
	if err != nil {
		b.Fatal(err)
	}
	cpus := coreCPUs(b)
	for _, workers := range []int{1, 2} {
		if workers > len(cpus) {
			continue
		}
		for _, c := range []struct {
			name  string
			stack *masks.Stack
		}{{"1", randomStack(rng, 1, [2]int{sig, sig})}, {"4", randomStack(rng, 4, [2]int{sig, sig})}, {"16", randomStack(rng, 16, [2]int{sig, sig})}, {"16rings", rings(16, sig)}} {
			stack := c.stack
			b.Run(fmt.Sprintf("workers=%d/masks=%s", workers, c.name), func(b *testing.B) {
				plan := evenPlan(cpus[:workers], workers, gatherBenchFrames, 4*workers)
				var floor, gather, dense, floorCPU, gatherCPU, denseCPU time.Duration
				for b.Loop() {
					c0 := processCPU(b)
					floor += sweep(b, &sf, cpus[:workers])
					floorCPU += processCPU(b) - c0
					for _, c := range []struct {
						ds     dataset.Dataset
						d, cpu *time.Duration
					}{{sp, &gather, &gatherCPU}, {dn, &dense, &denseCPU}} {
						t0, c0 := time.Now(), processCPU(b)
						res, err := ApplyMasks(context.Background(), c.ds, stack, plan, Options{})
						if err != nil {
							b.Fatal(err)
						}
						*c.d += time.Since(t0)
						*c.cpu += processCPU(b) - c0
						if c.ds == sp && !res.Stats.Gather {
							b.Fatal("the sparse run did not gather")
						}
					}
				}
				gbs := func(d time.Duration) float64 { return float64(sparseBytes) * float64(b.N) / d.Seconds() / 1e9 }
				b.ReportMetric(gbs(floor), "floor-GB/s")
				b.ReportMetric(gbs(gather), "gather-GB/s")
				b.ReportMetric(gbs(dense), "dense-GB/s")
				b.ReportMetric(floor.Seconds()/gather.Seconds(), "gather/floor")
				b.ReportMetric(dense.Seconds()/gather.Seconds(), "gather/dense")
				b.ReportMetric(floorCPU.Seconds()/gatherCPU.Seconds(), "gather/floor-cpu")
				b.ReportMetric(denseCPU.Seconds()/gatherCPU.Seconds(), "gather/dense-cpu")
			})
		}
	}
}

// hitFrames returns frames uint16 frames of pixels pixels with 1% of the pixels hit, at
// distinct random pixels in pixel order (as scipy's canonical CSR), values 1-20, in CSR
// form; dense, when not nil, receives them densified (frames·pixels values).
func hitFrames(rng *rand.Rand, frames, pixels int, dense []uint16) dataset.SparseFrames {
	var sf dataset.SparseFrames
	sf.Reset()
	frame := make([]uint16, pixels)
	for f := range frames {
		if dense != nil {
			frame = dense[f*pixels : (f+1)*pixels]
		}
		for n := 0; n < pixels/100; {
			if p := rng.IntN(pixels); frame[p] == 0 {
				frame[p] = uint16(1 + rng.IntN(20))
				n++
			}
		}
		for p, v := range frame {
			if v != 0 {
				sf.Indices = append(sf.Indices, int32(p))
				sf.Data = append(sf.Data, byte(v), byte(v>>8))
			}
		}
		sf.Indptr = append(sf.Indptr, len(sf.Indices))
		if dense == nil {
			clear(frame)
		}
	}
	return sf
}

// BenchmarkGatherLarge is BenchmarkGatherTargets' floor and gather on a scan of 65536
// frames (256 MB of sparse bytes, as a counted scan of 256×256 positions holds GBs),
// without the dense path (16 GiB densified), where ApplyMasks' cost per run weighs what
// it weighs in use.
func BenchmarkGatherLarge(b *testing.B) {
	const sig, frames = 256, 65536
	rng := rand.New(rand.NewPCG(2, 2))
	sf := hitFrames(rng, frames, sig*sig, nil)
	sparseBytes := int64(8*len(sf.Indptr) + 4*len(sf.Indices) + len(sf.Data))
	sp, err := dataset.FromSparse(sf, nil, [2]int{sig, sig}, dataset.Uint16)
	if err != nil {
		b.Fatal(err)
	}
	cpus := coreCPUs(b)
	for _, workers := range []int{1, 2} {
		if workers > len(cpus) {
			continue
		}
		for _, c := range []struct {
			name  string
			stack *masks.Stack
		}{{"1", randomStack(rng, 1, [2]int{sig, sig})}, {"16", randomStack(rng, 16, [2]int{sig, sig})}, {"16rings", rings(16, sig)}} {
			b.Run(fmt.Sprintf("workers=%d/masks=%s", workers, c.name), func(b *testing.B) {
				plan := evenPlan(cpus[:workers], workers, frames, 16*workers)
				var floor, gather time.Duration
				for b.Loop() {
					floor += sweep(b, &sf, cpus[:workers])
					t0 := time.Now()
					if _, err := ApplyMasks(context.Background(), sp, c.stack, plan, Options{}); err != nil {
						b.Fatal(err)
					}
					gather += time.Since(t0)
				}
				gbs := func(d time.Duration) float64 { return float64(sparseBytes) * float64(b.N) / d.Seconds() / 1e9 }
				b.ReportMetric(gbs(floor), "floor-GB/s")
				b.ReportMetric(gbs(gather), "gather-GB/s")
				b.ReportMetric(floor.Seconds()/gather.Seconds(), "gather/floor")
			})
		}
	}
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGatherKernel times the gather kernel alone (eventGather.apply over tiles of
// 64 of BenchmarkGatherTargets' frames, no ApplyMasks) against the floor's sweep loop
// over the same events, alternating within each iteration on one locked thread, in
// thread CPU time per event (clock_gettime CLOCK_THREAD_CPUTIME_ID: the time slices
// that other processes of a shared machine take are not counted), with 1, 4 and 16
// dense masks.
func BenchmarkGatherKernel(b *testing.B) {
	const sig, tile = 256, 64
	rng := rand.New(rand.NewPCG(1, 1))
	sf := hitFrames(rng, gatherBenchFrames, sig*sig, nil)
	val := asNative[uint16](sf.Data)
	cpu := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	for _, n := range []int{1, 4, 16} {
		g := newEventGather[uint16](newGatherMasks[float32](&Job{Masks: randomStack(rng, n, [2]int{sig, sig}), NMasks: n}, false), false)
		b.Run(fmt.Sprintf("masks=%d", n), func(b *testing.B) {
			// each b.Run runs on a goroutine of its own: the thread CPU clock is its
			// thread's only while it stays locked to it
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			acc := make([]float64, tile*n)
			var view dataset.SparseFrames
			var floor, gather time.Duration
			var sum uint64
			for b.Loop() {
				t0 := cpu()
				var s0, s1 uint64
				idx, data := sf.Indices, val[:len(sf.Indices)]
				for k := 0; k+2 <= len(idx); k += 2 {
					s0 += uint64(idx[k]) + uint64(data[k])
					s1 += uint64(idx[k+1]) + uint64(data[k+1])
				}
				sum += s0 + s1
				t1 := cpu()
				for f0 := 0; f0 < gatherBenchFrames; f0 += tile {
					sf.Slice(f0, f0+tile, &view)
					if err := g.apply(&view, acc); err != nil {
						b.Fatal(err)
					}
				}
				floor, gather = floor+t1-t0, gather+cpu()-t1
			}
			if sum == 0 {
				b.Fatal("empty sweep")
			}
			events := float64(len(sf.Indices)) * float64(b.N)
			b.ReportMetric(float64(floor.Nanoseconds())/events, "floor-ns/event")
			b.ReportMetric(float64(gather.Nanoseconds())/events, "gather-ns/event")
			b.ReportMetric(floor.Seconds()/gather.Seconds(), "gather/floor")
		})
	}
}

// coreCPUs returns one CPU of each physical core this process may run on.
func coreCPUs(b *testing.B) []int {
	topo, err := affinity.Detect()
	if err != nil {
		b.Fatal(err)
	}
	var cpus []int
	for _, c := range topo.Cores {
		if len(c.CPUs) > 0 {
			cpus = append(cpus, c.CPUs[0])
		}
	}
	return cpus
}

// sweep sums sf's indptr, indices and data on one goroutine per CPU (pinned), each over
// its share of the frames, and returns the time taken.
func sweep(b *testing.B, sf *dataset.SparseFrames, cpus []int) time.Duration {
	var wg sync.WaitGroup
	sums := make([]uint64, len(cpus)*8)
	n := sf.Frames()
	t0 := time.Now()
	for i, cpu := range cpus {
		wg.Go(func() {
			unpin, err := affinity.Pin([]int{cpu})
			if err != nil {
				b.Error(err)
				return
			}
			defer unpin()
			f0, f1 := i*n/len(cpus), (i+1)*n/len(cpus)
			var s0, s1, s2, s3 uint64
			for _, p := range sf.Indptr[f0 : f1+1] {
				s0 += uint64(p)
			}
			a, e := sf.Indptr[f0], sf.Indptr[f1]
			idx, data := sf.Indices[a:e], asNative[uint16](sf.Data[2*a:2*e])
			k := 0
			for ; k+2 <= len(idx); k += 2 {
				s1 += uint64(idx[k]) + uint64(data[k])
				s2 += uint64(idx[k+1]) + uint64(data[k+1])
			}
			for ; k < len(idx); k++ {
				s3 += uint64(idx[k]) + uint64(data[k])
			}
			sums[8*i] = s0 + s1 + s2 + s3 // one cache line per worker
		})
	}
	wg.Wait()
	d := time.Since(t0)
	var total uint64
	for _, s := range sums {
		total += s
	}
	if total == 0 {
		b.Fatal("empty sweep")
	}
	return d
}

// asBytes reinterprets host-order uint16 values as bytes.
func asBytes(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	copy(asNative[uint16](out), v)
	return out
}

// rings returns n concentric rings of 4 px width about the centre of sig×sig frames.
func rings(n, sig int) *masks.Stack {
	s := &masks.Stack{N: n, SigY: sig, SigX: sig, Data: make([]float32, n*sig*sig)}
	for y := range sig {
		for x := range sig {
			r := math.Hypot(float64(y-sig/2), float64(x-sig/2))
			if m := int(r / 4); m < n {
				s.Data[m*sig*sig+y*sig+x] = 1
			}
		}
	}
	return s
}

// BenchmarkGatherTable times the one-mask gather kernel over the events of 64 frames of
// 256×256 pixels at 1% hits (42k events, 250 KB: in cache), applied again and again,
// with their pixels spread over float32 weight tables of 16 KiB to 4 MiB (frames of 64²
// to 1024² pixels), in ns per event: the cost of the kernel's one random table read per
// event, by the cache level the table lives in, without the events' stream from memory.
func BenchmarkGatherTable(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	sf := hitFrames(rng, 64, 256*256, nil)
	spread := make([]int32, len(sf.Indices))
	for _, sig := range []int{64, 128, 256, 512, 1024} {
		g := newEventGather[uint16](newGatherMasks[float32](&Job{Masks: randomStack(rng, 1, [2]int{sig, sig}), NMasks: 1}, false), false)
		for k := range spread {
			spread[k] = int32(rng.IntN(sig * sig))
		}
		events := sf
		events.Indices = spread
		b.Run(fmt.Sprintf("table=%dKiB", sig*sig*4>>10), func(b *testing.B) {
			acc := make([]float64, events.Frames())
			for b.Loop() {
				if err := g.apply(&events, acc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events.NNZ()), "ns/event")
		})
	}
}
