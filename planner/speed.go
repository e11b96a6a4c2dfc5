package planner

import (
	"math"
	"time"
)

// The speed model that "auto" GPU plans are chosen by. Rates are in native frame bytes
// per second of uint16 frames (other dtypes scale by bytes per pixel: a worker's cost is
// per pixel, a transfer's per byte), measured on the GPU machine of bench/RESULTS.md (one
// H200 on PCIe Gen5, 16-core Xeon host) with frames in the page cache.
const (
	// cpuSparseGBps is one CPU worker on a sparse (CSR) stack (7.6 GB/s per core for a
	// ring).
	cpuSparseGBps = 7.6e9
	// hostGBpsPerCore bounds what all workers together read from host memory, CPU workers
	// and DMA alike (88.5 GB/s with 16 cores at 1 mask).
	hostGBpsPerCore = 5.5e9
	// gpuFeedGBps is what one GPU worker's copy-free feed moved end to end (registering
	// the mapping, DMA, kernel, results: 11.6-15 GB/s while busy on a 17 GB raw file);
	// gpuLinkGBps what the GPU workers of one GPU moved together (two: 17-20 GB/s). Both are
	// bound by cudaHostRegister, not by the link's 55 GB/s (bench/RESULTS.md).
	gpuFeedGBps = 12e9
	gpuLinkGBps = 20e9
)

// GPUStartup is the time from the start of a run until a GPU worker takes work: its CUDA
// context (0.13 s on the H200), its masks and buffers.
const GPUStartup = 150 * time.Millisecond

// cpuCoreGBps is one CPU worker's rate on uint16 frames by dense mask count: 2.1 and 0.73
// GB/s at 16 and 64 masks (16 workers, compute bound); at 1 and 4 masks 16 workers reach
// the host's memory bandwidth, and one core computes 0.6× the rate of the bench VM's
// (13.7 and 11.0 GB/s) as at 16 and 64 masks. Interpolated like gpuKernelGBps.
var cpuCoreGBps = []rate{{1, 8.5e9}, {4, 7.0e9}, {16, 2.1e9}, {64, 0.73e9}}

// rate is a rate in bytes per second at a mask count.
type rate struct {
	masks int
	gbps  float64
}

// at interpolates the table t at m masks on log-log axes; beyond its last entry the rate
// falls as 1/masks.
func at(t []rate, m int) float64 {
	if m <= t[0].masks {
		return t[0].gbps
	}
	for i := 1; i < len(t); i++ {
		if m <= t[i].masks {
			a, b := t[i-1], t[i]
			f := math.Log(float64(m)/float64(a.masks)) / math.Log(float64(b.masks)/float64(a.masks))
			return math.Exp(math.Log(a.gbps) + f*(math.Log(b.gbps)-math.Log(a.gbps)))
		}
	}
	last := t[len(t)-1]
	return last.gbps * float64(last.masks) / float64(m)
}

// gpuKernelGBps is the dense mask-dot kernel's rate on uint16 frames held on the device,
// by mask count (kernel timings on the H200); between entries it is interpolated on
// log-log axes, beyond 64 masks it falls as 1/masks.
var gpuKernelGBps = []rate{{1, 3809e9}, {4, 3391e9}, {16, 651e9}, {64, 68e9}}

// gpuSparseGBps is the CSR kernel's rate on uint16 frames on the device.
const gpuSparseGBps = 3576e9

// rateScale converts a rate in uint16 bytes to the job's dtype: the same pixels per
// second.
func (s Shape) rateScale() float64 { return float64(max(s.DTypeSize, 1)) / 2 }

// bytes is the native size of the job's frames.
func (s Shape) bytes() float64 {
	return float64(s.NumFrames) * float64(s.SigY) * float64(s.SigX) * float64(max(s.DTypeSize, 1))
}

// cpuRate is one CPU worker's rate in native bytes per second.
func (s Shape) cpuRate() float64 {
	if s.Sparse {
		return cpuSparseGBps * s.rateScale()
	}
	return at(cpuCoreGBps, s.NMasks) * s.rateScale()
}

// gpuKernelRate is the kernel's rate in native bytes per second.
func (s Shape) gpuKernelRate() float64 {
	if s.Sparse {
		return gpuSparseGBps * s.rateScale()
	}
	return at(gpuKernelGBps, s.NMasks) * s.rateScale()
}

// Predict is the model's run time of the job s with cpuWorkers CPU workers and, on each
// GPU, perGPU[i] GPU workers (each reserving a core, as planned): the CPU workers start
// at once, the GPU workers after GPUStartup; host memory bounds the sum.
func (s Shape) Predict(cpuWorkers int, perGPU []int, cores int) time.Duration {
	total := s.bytes()
	host := hostGBpsPerCore * float64(max(cores, 1))
	cpu := math.Min(float64(cpuWorkers)*s.cpuRate(), host)
	var gpu float64
	for _, g := range perGPU {
		if g > 0 {
			gpu += math.Min(math.Min(float64(g)*gpuFeedGBps, gpuLinkGBps), s.gpuKernelRate())
		}
	}
	seconds := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	if gpu == 0 {
		return seconds(total / cpu)
	}
	start := GPUStartup.Seconds()
	if cpu > 0 && total <= cpu*start {
		return seconds(total / cpu)
	}
	return seconds(start + (total-cpu*start)/math.Min(cpu+gpu, host))
}

// GPUsMayHelp tells whether GPU workers could shorten the job on a machine of cores
// usable cores: the CPU workers alone take longer than a GPU worker's start-up, and one
// GPU worker in place of a CPU worker is predicted at least 2% faster (it is not where the
// host's memory bandwidth bounds the job: 1-4 masks, sparse masks). Where they cannot,
// "auto" plans need not even look for GPUs.
func (s Shape) GPUsMayHelp(cores int) bool {
	if s.NMasks == 0 {
		return true
	}
	cpu := s.Predict(cores, nil, cores)
	return cpu > GPUStartup && float64(s.Predict(cores-1, []int{1}, cores)) < 0.98*float64(cpu)
}
