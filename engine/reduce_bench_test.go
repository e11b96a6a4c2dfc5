//go:build linux

package engine

import (
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
