package planner

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// "auto" on a 16-core machine with one H200: GPU workers only where the model says they
// pay off, never a plan predicted slower than CPU workers alone.
func TestAutoGPUsBySpeed(t *testing.T) {
	topo := DescribedTopology(16)
	gpus, err := ParseGPUInventory("1x141GB")
	require.NoError(t, err)
	const big = 130_000 // 256×256 uint16 frames: 17 GB
	cases := []struct {
		frames, masks int
		sparse        bool
		wantGPU       func(int) bool
	}{
		{big, 1, false, func(g int) bool { return g == 0 }},  // host memory bound
		{big, 4, false, func(g int) bool { return g == 0 }},  // host memory bound
		{big, 0, true, func(g int) bool { return g == 0 }},   // sparse ring: as fast on CPUs
		{big, 16, false, func(g int) bool { return g >= 1 }}, // compute bound on CPUs
		{big, 64, false, func(g int) bool { return g >= 1 }},
		{8, 64, false, func(g int) bool { return g == 0 }}, // start-up dominates
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dframes/%dmasks/sparse=%v", c.frames, c.masks, c.sparse), func(t *testing.T) {
			shape := Shape{NumFrames: c.frames, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: max(c.masks, 1), Sparse: c.sparse}
			p, err := Make(topo, gpus, Request{GPUAuto: true, CUDA: true}, &shape)
			require.NoError(t, err)
			g := 0
			for _, w := range p.Workers {
				if w.Kind == GPU {
					g++
				}
			}
			assert.True(t, c.wantGPU(g), "%d GPU workers; warnings %q", g, p.Warnings)
			cpuOnly := shape.Predict(16, nil, 16)
			chosen := shape.Predict(len(p.Workers)-g, []int{g}, 16)
			assert.LessOrEqual(t, chosen, cpuOnly, "the chosen plan is not predicted slower than CPU workers alone")
			if g < 4 {
				require.NotEmpty(t, p.Warnings)
				assert.Contains(t, p.Warnings[len(p.Warnings)-1], fmt.Sprintf("gpus auto: %d of the 4 GPU workers that fit, by speed", g))
			}
		})
	}
	assert.False(t, Shape{NumFrames: 8, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 64}.GPUsMayHelp(16), "start-up")
	assert.False(t, Shape{NumFrames: big, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 1}.GPUsMayHelp(16), "memory bound")
	assert.True(t, Shape{NumFrames: big, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 64}.GPUsMayHelp(16))
}

func TestPredict(t *testing.T) {
	s := Shape{NumFrames: 100_000, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 64}
	cpu := s.Predict(16, nil, 16)
	// 13.1 GB at 16 × 0.73 GB/s
	assert.InDelta(t, 100_000*256*256*2/(16*0.73e9), cpu.Seconds(), 1e-6)
	assert.Less(t, s.Predict(15, []int{1}, 16), cpu)
	assert.Less(t, s.Predict(14, []int{2}, 16), s.Predict(15, []int{1}, 16), "a second worker on the GPU adds feed")
	u8 := s
	u8.DTypeSize = 1
	assert.InDelta(t, cpu.Seconds(), u8.Predict(16, nil, 16).Seconds(), 1e-9, "CPU workers: the same pixels, the same time")
	assert.InDelta(t, 210.4, Shape{NMasks: 32, DTypeSize: 2}.gpuKernelRate()/1e9, 0.1, "interpolated on log-log axes")
}
