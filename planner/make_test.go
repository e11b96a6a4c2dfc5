package planner

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/affinity"
)

// smtTopology is a machine of n physical cores with 2-way SMT numbered the Linux way
// (core i holds CPUs i and i+n), of which the first usable are usable (CPU quota).
func smtTopology(n, usable int) *affinity.Topology {
	topo := &affinity.Topology{Usable: usable}
	if usable < n {
		topo.Quota = float64(usable)
	}
	for i := range 2 * n {
		topo.Allowed = append(topo.Allowed, i)
	}
	for i := range n {
		topo.Cores = append(topo.Cores, affinity.Core{Key: i, CoreID: i, Node: 0, CPUs: []int{i, i + n}})
	}
	return topo
}

// twoSockets is 16 cores without SMT: cores 0-7 on socket 0, 8-15 on socket 1.
func twoSockets() *affinity.Topology {
	topo := DescribedTopology(16)
	for i := range topo.Cores {
		topo.Cores[i].Package, topo.Cores[i].CoreID, topo.Cores[i].Node = i/8, i%8, i/8
	}
	return topo
}

// h200s are GPUs with freeBytes free each; GPU g is attached to socket g (CPUs
// 8g..8g+7) when withAffinity.
func h200s(n int, freeBytes uint64, withAffinity bool) []affinity.GPU {
	var gpus []affinity.GPU
	for g := range n {
		gpu := affinity.GPU{Index: g, Name: "NVIDIA H200", UUID: "GPU-test", TotalBytes: 150e9, FreeBytes: freeBytes}
		if withAffinity {
			for cpu := 8 * g; cpu < 8*g+8; cpu++ {
				gpu.CPUAffinity = append(gpu.CPUAffinity, cpu)
			}
		}
		gpus = append(gpus, gpu)
	}
	return gpus
}

func cpuW(core, cpu int) Worker      { return Worker{Kind: CPU, Core: core, CPU: cpu, GPU: -1} }
func gpuW(gpu, core, cpu int) Worker { return Worker{Kind: GPU, Core: core, CPU: cpu, GPU: gpu} }

// cpuWs are CPU workers on the given cores, each pinned on the CPU of the same id.
func cpuWs(cores ...int) []Worker {
	var ws []Worker
	for _, c := range cores {
		ws = append(ws, cpuW(c, c))
	}
	return ws
}

func TestMakeWorkers(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name         string
		topo         *affinity.Topology
		gpus         []affinity.GPU
		req          Request
		want         []Worker
		wantWarnings []string
	}{
		{
			name: "default CPU plan: one worker per physical core, first SMT sibling",
			topo: smtTopology(4, 4),
			want: cpuWs(0, 1, 2, 3),
		},
		{
			name: "CPU count",
			topo: smtTopology(4, 4),
			req:  Request{CPUs: 2},
			want: cpuWs(0, 1),
		},
		{
			name: "CPU list pins exactly there, in list order",
			topo: smtTopology(4, 4),
			req:  Request{CPUList: []int{6, 1}, CPUs: 3},
			want: []Worker{cpuW(2, 6), cpuW(1, 1)},
		},
		{
			name:         "CPU list with SMT siblings warns",
			topo:         smtTopology(4, 4),
			req:          Request{CPUList: []int{1, 5, 2}},
			want:         []Worker{cpuW(1, 1), cpuW(1, 5), cpuW(2, 2)},
			wantWarnings: []string{"CPUs 1, 5 share physical core 1 (SMT siblings): their workers compete for one core"},
		},
		{
			name: "quota limits the usable cores",
			topo: smtTopology(4, 2),
			want: cpuWs(0, 1),
		},
		{
			name:         "oversubscribed count goes beyond the quota first",
			topo:         smtTopology(4, 2),
			req:          Request{CPUs: 3, Oversubscribe: true},
			want:         cpuWs(0, 1, 2),
			wantWarnings: []string{"oversubscribed: 3 CPU workers requested but only 2 usable cores are free (2 usable, 0 reserved for GPU workers)"},
		},
		{
			name:         "oversubscribed count uses SMT siblings, then repeats",
			topo:         smtTopology(2, 2),
			req:          Request{CPUs: 6, Oversubscribe: true},
			want:         []Worker{cpuW(0, 0), cpuW(1, 1), cpuW(0, 2), cpuW(1, 3), cpuW(0, 0), cpuW(1, 1)},
			wantWarnings: []string{"oversubscribed: 6 CPU workers requested but only 2 usable cores are free (2 usable, 0 reserved for GPU workers)"},
		},
		{
			name:         "oversubscribed list beyond the quota",
			topo:         smtTopology(4, 2),
			req:          Request{CPUList: []int{3}, Oversubscribe: true},
			want:         []Worker{cpuW(3, 3)},
			wantWarnings: []string{"oversubscribed: CPUs 3 lie on cores beyond the 2 usable ones (CPU quota 2 CPUs)"},
		},
		{
			name: "hybrid auto, max-limited: 4 workers per GPU, reserved cores follow GPU affinity",
			topo: twoSockets(),
			gpus: h200s(2, 141e9, true),
			req:  Request{GPUAuto: true, CUDA: true},
			want: append([]Worker{
				gpuW(0, 0, 0), gpuW(1, 8, 8), gpuW(0, 1, 1), gpuW(1, 9, 9),
				gpuW(0, 2, 2), gpuW(1, 10, 10), gpuW(0, 3, 3), gpuW(1, 11, 11),
			}, cpuWs(4, 5, 6, 7, 12, 13, 14, 15)...),
		},
		{
			name: "hybrid auto, explicit max per GPU",
			topo: twoSockets(),
			gpus: h200s(2, 141e9, true),
			req:  Request{GPUAuto: true, MaxWorkersPerGPU: 1, CUDA: true},
			want: append([]Worker{gpuW(0, 0, 0), gpuW(1, 8, 8)},
				cpuWs(1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15)...),
		},
		{
			name: "hybrid auto, memory-limited: 10 GiB free / 4 GiB = 2 per GPU",
			topo: twoSockets(),
			gpus: h200s(2, 10*gib, false),
			req:  Request{GPUAuto: true, CUDA: true},
			want: append([]Worker{gpuW(0, 0, 0), gpuW(1, 1, 1), gpuW(0, 2, 2), gpuW(1, 3, 3)},
				cpuWs(4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)...),
		},
		{
			name: "hybrid auto, memory-limited with RAMPerGPUWorker; GPU without room skipped",
			topo: DescribedTopology(4),
			gpus: []affinity.GPU{{Index: 0, FreeBytes: 1 * gib}, {Index: 1, FreeBytes: 5 * gib}},
			req:  Request{GPUAuto: true, RAMPerGPUWorker: 2 * gib, NoCPU: true, CUDA: true},
			want: []Worker{gpuW(1, 0, 0), gpuW(1, 1, 1)},
		},
		{
			name: "GPU list 0,0: two workers on GPU 0",
			topo: DescribedTopology(4),
			gpus: h200s(2, 141e9, false),
			req:  Request{GPUList: []int{0, 0}, CUDA: true},
			want: append([]Worker{gpuW(0, 0, 0), gpuW(0, 1, 1)}, cpuWs(2, 3)...),
		},
		{
			name: "GPU list is spread before stacking, in order of first mention",
			topo: DescribedTopology(4),
			gpus: h200s(2, 141e9, false),
			req:  Request{GPUList: []int{1, 1, 0}, GPUs: 4, NoCPU: true, CUDA: true},
			want: []Worker{gpuW(1, 0, 0), gpuW(0, 1, 1), gpuW(1, 2, 2)},
		},
		{
			name: "GPU count round-robin over visible GPUs",
			topo: twoSockets(),
			gpus: h200s(2, 141e9, true),
			req:  Request{GPUs: 3, CPUs: 2, CUDA: true},
			want: []Worker{gpuW(0, 0, 0), gpuW(1, 8, 8), gpuW(0, 1, 1), cpuW(2, 2), cpuW(3, 3)},
		},
		{
			name: "GPU workers avoid cores of the CPU list",
			topo: twoSockets(),
			gpus: h200s(1, 141e9, true),
			req:  Request{GPUs: 1, CPUList: []int{0, 1}, CUDA: true},
			want: []Worker{gpuW(0, 2, 2), cpuW(0, 0), cpuW(1, 1)},
		},
		{
			name: "GPU affinity outside the usable cores: lowest free core, with a warning",
			topo: func() *affinity.Topology { t := twoSockets(); t.Usable, t.Quota = 4, 4; return t }(),
			gpus: h200s(2, 141e9, true),
			req:  Request{GPUs: 2, CUDA: true},
			want: []Worker{gpuW(0, 0, 0), gpuW(1, 1, 1), cpuW(2, 2), cpuW(3, 3)},
			wantWarnings: []string{
				"GPU worker on GPU 1: no free core in the GPU's CPU affinity (CPUs 8-15), reserved core 1 instead",
			},
		},
		{
			name:         "GPU workers take all cores: no CPU worker by default, with a warning",
			topo:         DescribedTopology(2),
			gpus:         h200s(1, 141e9, false),
			req:          Request{GPUs: 2, CUDA: true},
			want:         []Worker{gpuW(0, 0, 0), gpuW(0, 1, 1)},
			wantWarnings: []string{"no CPU workers: the 2 GPU workers reserve all 2 usable cores"},
		},
		{
			name: "auto fits the cores: 8 GPUs of up to 4 workers on 16 cores, spread 2 per GPU",
			topo: DescribedTopology(16),
			gpus: h200s(8, 141e9, false),
			req:  Request{GPUAuto: true, CUDA: true},
			want: []Worker{
				gpuW(0, 0, 0), gpuW(1, 1, 1), gpuW(2, 2, 2), gpuW(3, 3, 3),
				gpuW(4, 4, 4), gpuW(5, 5, 5), gpuW(6, 6, 6), gpuW(7, 7, 7),
				gpuW(0, 8, 8), gpuW(1, 9, 9), gpuW(2, 10, 10), gpuW(3, 11, 11),
				gpuW(4, 12, 12), gpuW(5, 13, 13), gpuW(6, 14, 14), gpuW(7, 15, 15),
			},
			wantWarnings: []string{"no CPU workers: the 16 GPU workers reserve all 16 usable cores"},
		},
		{
			name:         "auto fits the cores: 2 GPUs on 2 cores, one each",
			topo:         DescribedTopology(2),
			gpus:         h200s(2, 141e9, false),
			req:          Request{GPUAuto: true, CUDA: true},
			want:         []Worker{gpuW(0, 0, 0), gpuW(1, 1, 1)},
			wantWarnings: []string{"no CPU workers: the 2 GPU workers reserve all 2 usable cores"},
		},
		{
			name: "auto fits the cores: spread first, then stack on GPUs with room",
			topo: DescribedTopology(3),
			gpus: []affinity.GPU{{Index: 0, FreeBytes: 16 * gib}, {Index: 1, FreeBytes: 4 * gib}},
			req:  Request{GPUAuto: true, NoCPU: true, CUDA: true},
			want: []Worker{gpuW(0, 0, 0), gpuW(1, 1, 1), gpuW(0, 2, 2)},
		},
		{
			name: "auto leaves the cores of an explicit CPU count",
			topo: DescribedTopology(16),
			gpus: h200s(8, 141e9, false),
			req:  Request{GPUAuto: true, CPUs: 4, CUDA: true},
			want: append([]Worker{
				gpuW(0, 0, 0), gpuW(1, 1, 1), gpuW(2, 2, 2), gpuW(3, 3, 3),
				gpuW(4, 4, 4), gpuW(5, 5, 5), gpuW(6, 6, 6), gpuW(7, 7, 7),
				gpuW(0, 8, 8), gpuW(1, 9, 9), gpuW(2, 10, 10), gpuW(3, 11, 11),
			}, cpuWs(12, 13, 14, 15)...),
		},
		{
			name: "auto fits the cores not in the CPU list",
			topo: DescribedTopology(4),
			gpus: h200s(2, 141e9, false),
			req:  Request{GPUAuto: true, CPUList: []int{0}, CPUs: 3, CUDA: true},
			want: []Worker{gpuW(0, 1, 1), gpuW(1, 2, 2), gpuW(0, 3, 3), cpuW(0, 0)},
		},
		{
			name: "auto leaves the CPU count's cores also when oversubscription is allowed",
			topo: DescribedTopology(2),
			gpus: h200s(1, 141e9, false),
			req:  Request{GPUAuto: true, CPUs: 1, Oversubscribe: true, CUDA: true},
			want: []Worker{gpuW(0, 0, 0), cpuW(1, 1)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(tc.topo, tc.gpus, tc.req, nil)
			require.NoError(t, err)
			for i := range tc.want {
				tc.want[i].ID = i
			}
			assert.Equal(t, tc.want, p.Workers)
			assert.Equal(t, tc.wantWarnings, p.Warnings)
			assert.Equal(t, tc.topo.Usable, p.CoresUsable)
			assert.Empty(t, p.Partitions)
		})
	}
}

func TestMakeErrors(t *testing.T) {
	gpus := h200s(2, 141e9, false)
	tests := []struct {
		name    string
		topo    *affinity.Topology
		gpus    []affinity.GPU
		req     Request
		shape   *Shape
		wantErr string
	}{
		{"nil topology", nil, nil, Request{}, nil, "planner: no topology"},
		{"usable above cores", &affinity.Topology{Usable: 1}, nil, Request{}, nil, "topology has 1 usable of 0 cores"},
		{"core without CPU", &affinity.Topology{Usable: 1, Cores: []affinity.Core{{Key: 3}}}, nil, Request{}, nil, "core 3 has no allowed CPU"},
		{"zero workers", DescribedTopology(4), nil, Request{NoCPU: true}, nil, "no workers"},
		{"zero workers: GPU count 0", DescribedTopology(4), gpus, Request{NoCPU: true, GPUs: 0, CUDA: true}, nil,
			"no workers: the request asks for no CPU worker (option cpus 0) and no GPU worker: give option cpus or option gpus"},
		{"zero workers: auto without GPU", DescribedTopology(4), nil, Request{NoCPU: true, GPUAuto: true, CUDA: true}, nil,
			"no workers: option gpus auto uses no GPU here (no GPU was found), and option cpus 0 leaves nothing to run on: give option cpus 1 or more"},
		{"zero workers: auto without CUDA", DescribedTopology(4), nil, Request{NoCPU: true, GPUAuto: true}, nil,
			"no workers: option gpus auto uses no GPU here (this build of stemdot has no CUDA support)"},
		{"negative CPUs", DescribedTopology(4), nil, Request{CPUs: -1}, nil, "planner: -1 CPU workers requested; want a count >= 0"},
		{"negative GPUs", DescribedTopology(4), gpus, Request{GPUs: -2, CUDA: true}, nil, "planner: -2 GPU workers requested; want a count >= 0"},
		{"negative max per GPU", DescribedTopology(4), gpus, Request{GPUAuto: true, MaxWorkersPerGPU: -1, CUDA: true}, nil,
			"option max_workers_per_gpu -1: want a count >= 0 (0: the default 4)"},
		{"negative partition size", DescribedTopology(4), nil, Request{PartitionBytes: -1}, nil,
			"partition size -1 bytes requested; want a positive size (0: the default 512.0 MiB)"},
		{"no CPU worker with CPUs", DescribedTopology(4), nil, Request{NoCPU: true, CPUs: 2}, nil,
			"the request asks for no CPU worker and also for 2 CPU workers"},
		{"no CPU worker with a list", DescribedTopology(4), nil, Request{NoCPU: true, CPUList: []int{1, 3}}, nil,
			"the request asks for no CPU worker and also for CPU workers on CPUs 1, 3"},
		{"auto with a GPU count", DescribedTopology(4), gpus, Request{GPUAuto: true, GPUs: 2, CUDA: true}, nil,
			"the request asks for automatic GPU workers (gpus auto) and also for 2 GPU workers"},
		{"auto with a GPU list", DescribedTopology(4), gpus, Request{GPUAuto: true, GPUList: []int{0}, CUDA: true}, nil,
			"the request asks for automatic GPU workers (gpus auto) and also for GPU workers on GPUs 0"},
		{"repeated CPU", DescribedTopology(4), nil, Request{CPUList: []int{1, 1}}, nil, "CPU list 1, 1 names CPU 1 twice"},
		{"negative CPU id", DescribedTopology(4), nil, Request{CPUList: []int{1, -1}}, nil, "CPU list 1, -1: CPU id -1 is negative"},
		{"CPU not allowed", smtTopology(4, 4), nil, Request{CPUList: []int{2, 9}}, nil, "CPU 9 is not allowed; allowed CPUs: 0-7"},
		{"CPU count above usable", smtTopology(4, 2), nil, Request{CPUs: 3}, nil,
			"planner: 3 CPU workers requested but only 2 usable cores are free (2 usable, 0 reserved for GPU workers); pass option oversubscribe to allow it"},
		{"CPU list beyond quota", smtTopology(4, 2), nil, Request{CPUList: []int{0, 3}}, nil,
			"planner: CPUs 3 lie on cores beyond the 2 usable ones (CPU quota 2 CPUs); pass option oversubscribe to allow it"},
		{"CPU list plus GPU workers above usable", DescribedTopology(3), gpus, Request{CPUList: []int{0, 1}, GPUs: 2, CUDA: true}, nil,
			"planner: 2 GPU workers requested but only 1 usable core is free for them (3 usable, 2 taken by the CPU list); each GPU worker needs a core of its own"},
		{"CPU list and GPU workers more than usable", smtTopology(2, 2), gpus, Request{CPUList: []int{0, 2}, GPUs: 1, CUDA: true}, nil,
			"planner: 3 workers (2 CPU, 1 GPU) requested but only 2 usable cores; pass option oversubscribe to allow it"},
		{"CPU count plus GPU workers above usable", DescribedTopology(4), gpus, Request{CPUs: 3, GPUs: 2, CUDA: true}, nil,
			"3 CPU workers requested but only 2 usable cores are free (4 usable, 2 reserved for GPU workers)"},
		{"GPU without CUDA", DescribedTopology(4), gpus, Request{GPUs: 1}, nil, "stemdot was built without CUDA support"},
		{"GPU list without CUDA", DescribedTopology(4), gpus, Request{GPUList: []int{0}}, nil, "stemdot was built without CUDA support"},
		{"no GPU found", DescribedTopology(4), nil, Request{GPUs: 1, CUDA: true}, nil, "no GPU was found"},
		{"GPU not visible", DescribedTopology(4), gpus, Request{GPUList: []int{0, 2}, CUDA: true}, nil, "GPU 2 is not visible; visible GPUs: 0, 1"},
		{"duplicate GPU index", DescribedTopology(4), []affinity.GPU{{Index: 1}, {Index: 1}}, Request{GPUs: 1, CUDA: true}, nil, "lists GPU index 1 twice"},
		{"too many GPU workers", DescribedTopology(4), gpus, Request{GPUs: 5, CUDA: true}, nil,
			"5 GPU workers requested but only 4 usable cores are free for them (4 usable, 0 taken by the CPU list)"},
		{"explicit GPU count above the cores stays an error", DescribedTopology(16), h200s(8, 141e9, false), Request{GPUs: 32, CUDA: true}, nil,
			"32 GPU workers requested but only 16 usable cores are free for them"},
		{"too many GPU workers even with Oversubscribe", DescribedTopology(2), gpus, Request{GPUList: []int{0, 1, 0}, Oversubscribe: true, CUDA: true}, nil,
			"3 GPU workers requested but only 2 usable cores are free for them"},
		{"GPUAuto without memory", DescribedTopology(4), h200s(2, 3<<30, false), Request{GPUAuto: true, CUDA: true}, nil,
			"planner: gpus auto: no GPU has the 4.0 GiB of free memory one GPU worker needs (free: GPU 0: 3.0 GiB, GPU 1: 3.0 GiB)"},
		{"auto without a core: CPU count", DescribedTopology(4), gpus, Request{GPUAuto: true, CPUs: 4, CUDA: true}, nil,
			"planner: gpus auto: no core left for a GPU worker: 4 CPU workers requested on 4 usable cores"},
		{"auto without a core: CPU list", DescribedTopology(2), gpus, Request{GPUAuto: true, CPUList: []int{1, 0}, CUDA: true}, nil,
			"planner: gpus auto: no core left for a GPU worker: the CPU list takes all 2 usable cores"},
		{"no frames", DescribedTopology(4), nil, Request{}, &Shape{NumFrames: 0, SigY: 4, SigX: 4}, "dataset shape 0 frames of 4x4 pixels"},
		{"empty frame", DescribedTopology(4), nil, Request{}, &Shape{NumFrames: 10, SigY: 0, SigX: 4}, "dataset shape 10 frames of 0x4 pixels"},
		{"too large", DescribedTopology(4), nil, Request{}, &Shape{NumFrames: 1 << 40, SigY: 1 << 20, SigX: 1 << 20}, "is too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(tc.topo, tc.gpus, tc.req, tc.shape)
			require.ErrorContains(t, err, tc.wantErr)
			assert.Nil(t, p)
		})
	}
}

func TestMakeOversubscribedListWarns(t *testing.T) {
	p, err := Make(smtTopology(2, 2), h200s(1, 141e9, false),
		Request{CPUList: []int{0, 2}, GPUs: 1, Oversubscribe: true, CUDA: true}, nil)
	require.NoError(t, err)
	assert.Equal(t, []Worker{{ID: 0, Kind: GPU, Core: 1, CPU: 1}, {ID: 1, Kind: CPU, Core: 0, CPU: 0, GPU: -1}, {ID: 2, Kind: CPU, Core: 0, CPU: 2, GPU: -1}}, p.Workers)
	assert.Equal(t, []string{
		"oversubscribed: 3 workers (2 CPU, 1 GPU) requested but only 2 usable cores",
		"CPUs 0, 2 share physical core 0 (SMT siblings): their workers compete for one core",
	}, p.Warnings)
}

func TestMakePartitionsExamples(t *testing.T) {
	tests := []struct {
		name      string
		workers   int
		req       Request
		shape     Shape
		wantCount int
	}{
		// 256x256 frames of 256x256 float32 = 16 GiB: 32 partitions of 512 MiB.
		{"16 workers, 16 GiB", 16, Request{}, Shape{NumFrames: 65536, SigY: 256, SigX: 256}, 32},
		{"12 workers: rounded up to a multiple", 12, Request{}, Shape{NumFrames: 65536, SigY: 256, SigX: 256}, 36},
		{"small data: one partition per worker", 4, Request{}, Shape{NumFrames: 100, SigY: 64, SigX: 64}, 4},
		{"fewer frames than workers: one frame each", 8, Request{}, Shape{NumFrames: 5, SigY: 64, SigX: 64}, 5},
		{"tiny target: one frame each, a multiple of workers", 4, Request{PartitionBytes: 1}, Shape{NumFrames: 12, SigY: 2, SigX: 2}, 12},
		{"tiny target: largest multiple of workers that fits", 4, Request{PartitionBytes: 1}, Shape{NumFrames: 14, SigY: 2, SigX: 2}, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(DescribedTopology(tc.workers), nil, tc.req, &tc.shape)
			require.NoError(t, err)
			require.Len(t, p.Workers, tc.workers)
			assert.Len(t, p.Partitions, tc.wantCount)
			assert.Equal(t, int64(tc.shape.SigY*tc.shape.SigX*4), p.FrameBytes)
			checkPartitions(t, p.Partitions, tc.shape.NumFrames)
		})
	}
}

// TestMakePartitionsProperties checks the partition invariants over random shapes,
// worker counts and partition sizes.
func TestMakePartitionsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		workers := 1 + rng.IntN(40)
		shape := Shape{NumFrames: 1 + rng.IntN(5000), SigY: 1 + rng.IntN(600), SigX: 1 + rng.IntN(600)}
		if rng.IntN(10) == 0 {
			shape.NumFrames = 1 + rng.IntN(workers) // fewer frames than workers
		}
		target := int64(1 + rng.IntN(64<<20))
		p, err := Make(DescribedTopology(workers), nil, Request{PartitionBytes: target}, &shape)
		require.NoError(t, err)
		parts := p.Partitions
		n := len(parts)
		checkPartitions(t, parts, shape.NumFrames)

		total := int64(shape.NumFrames) * int64(shape.SigY) * int64(shape.SigX) * 4
		if shape.NumFrames < workers {
			require.Equal(t, shape.NumFrames, n, "%+v, %d workers", shape, workers)
			continue
		}
		require.Zero(t, n%workers, "%d partitions for %d workers", n, workers)
		require.GreaterOrEqual(t, n, workers)
		require.LessOrEqual(t, n, shape.NumFrames)
		// Enough partitions to stay within the target size, unless frames run out ...
		require.True(t, int64(n)*target >= total || n+workers > shape.NumFrames,
			"%d partitions of %d bytes too few for %d bytes", n, target, total)
		// ... and no more than needed: one fewer round would not do.
		require.True(t, n == workers || int64(n-workers)*target < total,
			"%d partitions of %d bytes more than needed for %d bytes", n, target, total)
	}
}

// checkPartitions asserts that parts cover [0, numFrames) contiguously, each non-empty,
// with sizes differing by at most one frame.
func checkPartitions(t *testing.T, parts []Partition, numFrames int) {
	t.Helper()
	require.NotEmpty(t, parts)
	require.Equal(t, 0, parts[0].Start)
	require.Equal(t, numFrames, parts[len(parts)-1].End)
	lo, hi := numFrames, 0
	for i, p := range parts {
		require.Positive(t, p.Frames(), "partition %d: %+v", i, p)
		if i > 0 {
			require.Equal(t, parts[i-1].End, p.Start, "gap or overlap before partition %d", i)
		}
		lo, hi = min(lo, p.Frames()), max(hi, p.Frames())
	}
	require.LessOrEqual(t, hi-lo, 1, "unbalanced partitions: %d to %d frames", lo, hi)
}

// "gpus auto" uses what is there: without GPUs or without CUDA it plans CPU workers only
// and says why in one warning.
func TestGPUAutoWithoutGPU(t *testing.T) {
	for _, c := range []struct {
		gpus []affinity.GPU
		cuda bool
		want string
	}{
		{nil, true, "gpus auto: no GPU was found: CPU workers only"},
		{[]affinity.GPU{{Index: 0, FreeBytes: 80 << 30}}, false, "gpus auto: this build of stemdot has no CUDA support: CPU workers only"},
	} {
		p, err := Make(DescribedTopology(4), c.gpus, Request{GPUAuto: true, CUDA: c.cuda}, nil)
		require.NoError(t, err)
		require.Len(t, p.Workers, 4)
		for _, w := range p.Workers {
			require.Equal(t, CPU, w.Kind)
		}
		require.Equal(t, []string{c.want}, p.Warnings)
	}
}
