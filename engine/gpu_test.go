package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
	"github.com/stemdot/stemdot/synth"
)

// GPU workers end to end on files (skipped without a CUDA device): raw and NPY frames
// DMA'd from the file's mapping as they are, MIB records unpacked on the device, a GPU
// worker alone and beside a CPU worker; results against a float64 reference.
func TestGPUWorkerFiles(t *testing.T) {
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skip("no CUDA device")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(81, 82))
	for _, c := range []struct {
		ext string
		dt  dataset.DType
	}{{"raw", dataset.Uint16}, {"npy", dataset.Float32}, {"mib", dataset.Uint16}, {"mib", dataset.Uint8}, {"mib", dataset.Uint32}} {
		path := filepath.Join(dir, fmt.Sprintf("scan-%s.%s", c.dt, c.ext))
		require.NoError(t, synth.Write(context.Background(), path, synth.Options{NavShape: []int{24, 25}, SigShape: [2]int{64, 48}, DType: c.dt}))
		opt := dataset.Options{}
		if c.ext == "raw" {
			opt = dataset.Options{SigShape: []int{64, 48}, DType: c.dt, NavShape: []int{24, 25}}
		}
		ds, err := dataset.Open(path, opt)
		require.NoError(t, err)
		defer ds.Close()
		mem := &memDataset{nav: []int{600}, sig: ds.SigShape(), dt: ds.DType(), data: make([]byte, 600*ds.FrameBytes())}
		require.NoError(t, ds.ReadFrames(0, 600, mem.data))
		stack := randomStack(rng, 5, ds.SigShape())
		want, mag := reference(mem, stack)
		for _, cpus := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/%s/cpus=%d", c.ext, c.dt, cpus), func(t *testing.T) {
				plan := evenPlan(anyCPUs, 1+cpus, 600, 2+2*cpus)
				plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
				res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, TileFrames: 16})
				require.NoError(t, err)
				requireClose(t, res.F32, want, mag, 1e-5)
				g := res.Stats.PerWorker[0]
				assert.True(t, g.Ready)
				assert.Equal(t, "mapped", g.Feed)
				if cpus == 0 {
					assert.Equal(t, 600, g.Frames)
				}
				t.Log(g)
			})
		}
	}
}
