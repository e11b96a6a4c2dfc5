package planner

import (
	"fmt"
	"math"
	"testing"
	"time"

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
	assert.InDelta(t, 210.4, Shape{NMasks: 32, DTypeSize: 2}.gpuKernelRate(DefaultRates())/1e9, 0.1, "interpolated on log-log axes")
}

// The default rates are the model's measured constants: Predict and "auto" plans are
// unchanged by Rates.
func TestDefaultRates(t *testing.T) {
	r := DefaultRates()
	assert.Equal(t, []Rate{{1, 8.5e9}, {4, 7.0e9}, {16, 2.1e9}, {64, 0.73e9}}, r.CPUDense)
	assert.Equal(t, []Rate{{1, 3809e9}, {4, 3391e9}, {16, 651e9}, {64, 68e9}}, r.GPUDense)
	assert.Equal(t, Rates{CPUDense: r.CPUDense, CPUSparse: 7.6e9, HostPerCore: 5.5e9, GPUDense: r.GPUDense, GPUSparse: 3576e9,
		GPUFeed: 12e9, GPULink: 20e9, GPUStartup: 150 * time.Millisecond}, r)
	r.CPUDense[0].BPS = 1
	assert.Equal(t, 8.5e9, DefaultRates().CPUDense[0].BPS, "DefaultRates returns a copy")
	for _, s := range []Shape{{NumFrames: 130_000, SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 16},
		{NumFrames: 8, SigY: 256, SigX: 256, DTypeSize: 4, NMasks: 3, Sparse: true}} {
		got, err := s.PredictWith(DefaultRates(), 14, []int{2}, 16)
		require.NoError(t, err)
		assert.Equal(t, s.Predict(14, []int{2}, 16), got)
	}
}

// PredictWith on rates of its own, against the model's arithmetic done by hand.
func TestPredictWith(t *testing.T) {
	r := Rates{CPUDense: []Rate{{1, 5e9}, {4, 2e9}}, HostPerCore: 6e9, GPUDense: []Rate{{1, 100e9}},
		GPUFeed: 10e9, GPULink: 15e9, GPUStartup: 500 * time.Millisecond}
	s := Shape{NumFrames: 100_000, SigY: 500, SigX: 1000, DTypeSize: 2, NMasks: 1} // 100 GB
	got, err := s.PredictWith(r, 4, []int{2}, 4)
	require.NoError(t, err)
	// CPU: min(4 × 5, 4 × 6) = 20 GB/s; GPU: min(2 × 10, 15, 100) = 15 GB/s after 0.5 s;
	// together host bound at 24 GB/s: 0.5 + (100 - 10) / 24 s.
	assert.InDelta(t, 0.5+90.0/24, got.Seconds(), 1e-9)
	got, err = s.PredictWith(r, 4, nil, 4)
	require.NoError(t, err)
	assert.InDelta(t, 100.0/20, got.Seconds(), 1e-9)
	s.NMasks = 2 // log-log between 5 GB/s at 1 mask and 2 at 4: 5 × (2/5)^(1/2)
	got, err = s.PredictWith(r, 1, nil, 4)
	require.NoError(t, err)
	assert.InDelta(t, 100/(5*math.Sqrt(0.4)), got.Seconds(), 1e-9)

	// Only the rates a job needs are required, and a missing one is named.
	cpuOnly := Rates{CPUDense: r.CPUDense, HostPerCore: 6e9}
	_, err = s.PredictWith(cpuOnly, 4, nil, 4)
	assert.NoError(t, err, "no GPU worker, no GPU rate")
	_, err = s.PredictWith(cpuOnly, 3, []int{1}, 4)
	assert.ErrorContains(t, err, "GPUDense is empty")
	_, err = Shape{NumFrames: 1, SigY: 1, SigX: 1, NMasks: 1, Sparse: true}.PredictWith(cpuOnly, 4, nil, 4)
	assert.ErrorContains(t, err, "CPUSparse is 0 bytes/s: want a positive, finite rate")
	noFeed := r
	noFeed.GPUFeed = math.NaN()
	_, err = s.PredictWith(noFeed, 0, []int{1}, 4)
	assert.ErrorContains(t, err, "GPUFeed is NaN")
	unsorted := r
	unsorted.CPUDense = []Rate{{4, 2e9}, {1, 5e9}}
	_, err = s.PredictWith(unsorted, 4, nil, 4)
	assert.ErrorContains(t, err, "CPUDense lists 1 masks after 4")
	_, err = s.PredictWith(r, 0, nil, 4)
	assert.ErrorContains(t, err, "no workers")
	assert.Equal(t, time.Duration(math.MaxInt64), s.Predict(0, nil, 4), "no workers: never done")
}

// FastestGPUCount on rates of its own, by hand: 4 cores, up to 3 GPU workers on GPU 0.
func TestFastestGPUCount(t *testing.T) {
	r := Rates{CPUDense: []Rate{{1, 5e9}}, HostPerCore: 6e9, GPUDense: []Rate{{1, 100e9}},
		GPUFeed: 10e9, GPULink: 15e9, GPUStartup: 500 * time.Millisecond}
	s := Shape{NumFrames: 100_000, SigY: 500, SigX: 1000, DTypeSize: 2, NMasks: 1} // 100 GB
	// g = 0: 100/20 = 5 s; 1: 0.5 + (100 - 7.5)/24 = 4.354 s; 2: 0.5 + (100 - 5)/24 =
	// 4.458 s; 3: 0.5 + (100 - 2.5)/20 = 5.375 s.
	best, bestT, allT, err := s.FastestGPUCount(r, []int{0, 0, 0}, func(g int) int { return 4 - g }, 4)
	require.NoError(t, err)
	assert.Equal(t, 1, best)
	assert.InDelta(t, 0.5+92.5/24, bestT.Seconds(), 1e-9)
	assert.InDelta(t, 5.375, allT.Seconds(), 1e-9)
	// No CPU workers: at least one GPU worker; 2 (0.5 + 100/15) beats 1 (0.5 + 100/10).
	best, bestT, _, err = s.FastestGPUCount(r, []int{0, 0, 0}, func(int) int { return 0 }, 4)
	require.NoError(t, err)
	assert.Equal(t, 2, best)
	assert.InDelta(t, 0.5+100.0/15, bestT.Seconds(), 1e-9)
	// Two GPUs taking turns: two workers (one on each) 0.5 + 100/20; three (GPU 0 at 15,
	// GPU 1 at 10 GB/s) reach the host's 24 GB/s: 0.5 + 100/24; a fourth adds nothing.
	best, bestT, _, err = s.FastestGPUCount(r, []int{0, 1, 0, 1}, func(int) int { return 0 }, 4)
	require.NoError(t, err)
	assert.Equal(t, 3, best)
	assert.InDelta(t, 0.5+100.0/24, bestT.Seconds(), 1e-9)
	_, _, _, err = s.FastestGPUCount(r, nil, func(int) int { return 0 }, 4)
	assert.ErrorContains(t, err, "no workers")
}
