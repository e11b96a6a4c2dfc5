//go:build linux

package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// BenchmarkReduce is one reduce worker's throughput on one pinned core over the
// benchmark file (BenchmarkStreamingRead is its floor), read in place ("_view") or with
// ReadFrames: the sum alone (as the mean), the maximum, the std (which gives the sum and
// mean too), and all four.
func BenchmarkReduce(b *testing.B) {
	file := benchFile(b)
	mapped := mapFile(b, file)
	for _, c := range []struct {
		name string
		opt  ReduceOptions
	}{
		{"sum", ReduceOptions{Sum: true}},
		{"max", ReduceOptions{Max: true}},
		{"std", ReduceOptions{Std: true}},
		{"all", ReduceOptions{Sum: true, Mean: true, Max: true, Std: true}},
	} {
		for _, view := range []bool{false, true} {
			var ds dataset.Dataset = file
			name := c.name
			if view {
				ds, name = mapped, name+"_view"
			}
			b.Run(name, func(b *testing.B) {
				pinBench(b)
				tile := AutoTileFrames(ds.FrameBytes())
				w, err := newReduceWorker(ds, c.opt, tile)
				if err != nil {
					b.Fatal(err)
				}
				all := planner.Partition{Start: 0, End: benchFrames}
				measure(b, func() {
					if err := w.Process(context.Background(), all, Output{}, nil); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkReduceMemory is one reduce worker on one pinned core over 256×256 frames of
// uint16 and float32 already in process memory (64 MiB, viewed in place), for the sum,
// the maximum and the std alone (each its SIMD kernel), beside "floor": a bytes.Count
// sweep of the same memory.
func BenchmarkReduceMemory(b *testing.B) {
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		n := (64 << 20) / (benchSig * benchSig * dt.Size())
		ds := viewDataset{&memDataset{nav: []int{n}, sig: [2]int{benchSig, benchSig}, dt: dt, data: make([]byte, 64<<20)}}
		for i := range ds.data {
			ds.data[i] = byte(i * 7 % 61) // finite float32 values
		}
		bytesPerPass := int64(len(ds.data))
		for _, c := range []struct {
			name string
			opt  ReduceOptions
		}{{"sum", ReduceOptions{Sum: true}}, {"max", ReduceOptions{Max: true}}, {"std", ReduceOptions{Std: true}}} {
			b.Run(dt.String()+"/"+c.name, func(b *testing.B) {
				pinBench(b)
				w, err := newReduceWorker(ds, c.opt, AutoTileFrames(ds.FrameBytes()))
				if err != nil {
					b.Fatal(err)
				}
				measureBytes(b, bytesPerPass, func() {
					if err := w.Process(context.Background(), planner.Partition{Start: 0, End: n}, Output{}, nil); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
		b.Run(dt.String()+"/floor", func(b *testing.B) {
			pinBench(b)
			var count int
			measureBytes(b, bytesPerPass, func() { count += bytes.Count(ds.data, sweepByte) })
			if count == -1 {
				b.Log(count)
			}
		})
	}
}

// measureBytes is measure for passes of n bytes: MB/s and cpu-MB/s (the thread's own
// CPU time, which other processes on a shared machine do not inflate).
func measureBytes(b *testing.B, n int64, pass func()) {
	b.SetBytes(n)
	b.ResetTimer()
	cpu := threadCPUTime(b)
	for range b.N {
		pass()
	}
	b.ReportMetric(float64(n)*float64(b.N)/(threadCPUTime(b)-cpu).Seconds()/1e6, "cpu-MB/s")
}
