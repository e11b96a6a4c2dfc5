package planner

import (
	"fmt"
	"math"
	"time"
)

// Rates are the speed model's inputs, the rates that "auto" GPU plans are chosen by.
// Every rate is in bytes per second of native uint16 frame bytes (other dtypes scale by
// bytes per pixel: a worker's cost is per pixel, a transfer's per byte). DefaultRates are
// those measured on the GPU machine of bench/RESULTS.md; bench/gpurecord builds them from a
// GPU record's own measurements.
type Rates struct {
	// CPUDense is one CPU worker's rate on a dense stack by mask count, ascending;
	// between entries it is interpolated on log-log axes, beyond the last it falls as
	// 1/masks, below the first it is the first.
	CPUDense []Rate
	// CPUSparse is one CPU worker's rate on a sparse (CSR) stack.
	CPUSparse float64
	// HostPerCore bounds what all workers together read from host memory, CPU workers and
	// DMA alike, per usable core.
	HostPerCore float64
	// GPUDense is the dense mask-dot kernel's rate on frames held on the device by mask
	// count, ascending, interpolated like CPUDense.
	GPUDense []Rate
	// GPUSparse is the CSR kernel's rate on frames held on the device.
	GPUSparse float64
	// GPUFeed is what one GPU worker moves end to end while busy (its feed, the kernel,
	// the results); GPULink what all GPU workers of one GPU move together.
	GPUFeed, GPULink float64
	// GPUStartup is the time from the start of a run until a GPU worker takes work.
	GPUStartup time.Duration
}

// Rate is a rate in bytes per second of native uint16 frame bytes at a mask count.
type Rate struct {
	Masks int
	BPS   float64
}

// The rates measured on the GPU machine of bench/RESULTS.md (one H200 on PCIe Gen5,
// 16-core Xeon host) with frames in the page cache.
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
	// gpuSparseGBps is the CSR kernel's rate on uint16 frames on the device.
	gpuSparseGBps = 3576e9
)

// GPUStartup is the time from the start of a run until a GPU worker takes work: its CUDA
// context (0.13 s on the H200), its masks and buffers.
const GPUStartup = 150 * time.Millisecond

// cpuCoreGBps is one CPU worker's rate on uint16 frames by dense mask count: 2.1 and 0.73
// GB/s at 16 and 64 masks (16 workers, compute bound); at 1 and 4 masks 16 workers reach
// the host's memory bandwidth, and one core computes 0.6× the rate of the bench VM's
// (13.7 and 11.0 GB/s) as at 16 and 64 masks.
var cpuCoreGBps = []Rate{{1, 8.5e9}, {4, 7.0e9}, {16, 2.1e9}, {64, 0.73e9}}

// gpuKernelGBps is the dense mask-dot kernel's rate on uint16 frames held on the device,
// by mask count (kernel timings on the H200).
var gpuKernelGBps = []Rate{{1, 3809e9}, {4, 3391e9}, {16, 651e9}, {64, 68e9}}

// DefaultRates returns the rates measured on the GPU machine of bench/RESULTS.md, those
// that Make's "auto" GPU plans, Predict and GPUsMayHelp use.
func DefaultRates() Rates {
	return Rates{
		CPUDense:    append([]Rate(nil), cpuCoreGBps...),
		CPUSparse:   cpuSparseGBps,
		HostPerCore: hostGBpsPerCore,
		GPUDense:    append([]Rate(nil), gpuKernelGBps...),
		GPUSparse:   gpuSparseGBps,
		GPUFeed:     gpuFeedGBps,
		GPULink:     gpuLinkGBps,
		GPUStartup:  GPUStartup,
	}
}

// at interpolates the table t (not empty, ascending) at m masks on log-log axes; beyond
// its last entry the rate falls as 1/masks.
func at(t []Rate, m int) float64 {
	if m <= t[0].Masks {
		return t[0].BPS
	}
	for i := 1; i < len(t); i++ {
		if m <= t[i].Masks {
			a, b := t[i-1], t[i]
			f := math.Log(float64(m)/float64(a.Masks)) / math.Log(float64(b.Masks)/float64(a.Masks))
			return math.Exp(math.Log(a.BPS) + f*(math.Log(b.BPS)-math.Log(a.BPS)))
		}
	}
	last := t[len(t)-1]
	return last.BPS * float64(last.Masks) / float64(m)
}

// checkTable refuses a rate table that at cannot read.
func checkTable(name string, t []Rate) error {
	if len(t) == 0 {
		return fmt.Errorf("planner: rates: %s is empty: give at least one mask count's rate", name)
	}
	for i, r := range t {
		if r.Masks < 1 || !(r.BPS > 0) || math.IsInf(r.BPS, 0) {
			return fmt.Errorf("planner: rates: %s[%d] is %d masks at %g bytes/s: want at least 1 mask at a positive, finite rate", name, i, r.Masks, r.BPS)
		}
		if i > 0 && r.Masks <= t[i-1].Masks {
			return fmt.Errorf("planner: rates: %s lists %d masks after %d: want mask counts in ascending order", name, r.Masks, t[i-1].Masks)
		}
	}
	return nil
}

// checkRate refuses a rate that is not positive and finite.
func checkRate(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("planner: rates: %s is %g bytes/s: want a positive, finite rate", name, v)
	}
	return nil
}

// rateScale converts a rate in uint16 bytes to the job's dtype: the same pixels per
// second.
func (s Shape) rateScale() float64 { return float64(max(s.DTypeSize, 1)) / 2 }

// bytes is the native size of the job's frames.
func (s Shape) bytes() float64 {
	return float64(s.NumFrames) * float64(s.SigY) * float64(s.SigX) * float64(max(s.DTypeSize, 1))
}

// cpuRate is one CPU worker's rate in native bytes per second at the rates r.
func (s Shape) cpuRate(r Rates) float64 {
	if s.Sparse {
		return r.CPUSparse * s.rateScale()
	}
	return at(r.CPUDense, s.NMasks) * s.rateScale()
}

// gpuKernelRate is the kernel's rate in native bytes per second at the rates r.
func (s Shape) gpuKernelRate(r Rates) float64 {
	if s.Sparse {
		return r.GPUSparse * s.rateScale()
	}
	return at(r.GPUDense, s.NMasks) * s.rateScale()
}

// Predict is the model's run time of the job s with cpuWorkers CPU workers and, on each
// GPU, perGPU[i] GPU workers (each reserving a core, as planned) on a machine of cores
// usable cores, with DefaultRates: see PredictWith. A job with no workers never ends: the
// largest Duration.
func (s Shape) Predict(cpuWorkers int, perGPU []int, cores int) time.Duration {
	t, err := s.PredictWith(DefaultRates(), cpuWorkers, perGPU, cores)
	if err != nil { // no workers: the defaults hold every rate
		return time.Duration(math.MaxInt64)
	}
	return t
}

// PredictWith is the model's run time of the job s with the rates r, cpuWorkers CPU
// workers and, on each GPU, perGPU[i] GPU workers on a machine of cores usable cores: the
// CPU workers start at once at cpuWorkers × one worker's rate, the GPU workers after
// r.GPUStartup, each GPU at min(its workers × r.GPUFeed, r.GPULink, the kernel's rate);
// host memory (r.HostPerCore × cores) bounds the CPU workers and then the sum.
//
// It returns an error naming the rate when one that the job needs is missing or not
// positive: the CPU rate for the job's masks (CPUDense, or CPUSparse for a sparse job) with
// CPU workers, HostPerCore always, and GPUDense or GPUSparse, GPUFeed, GPULink and a
// non-negative GPUStartup with GPU workers; also for no workers at all.
func (s Shape) PredictWith(r Rates, cpuWorkers int, perGPU []int, cores int) (time.Duration, error) {
	gpus := 0
	for _, g := range perGPU {
		gpus += max(g, 0)
	}
	if err := r.check(s, cpuWorkers > 0, gpus > 0); err != nil {
		return 0, err
	}
	if cpuWorkers <= 0 && gpus == 0 {
		return 0, fmt.Errorf("planner: predict: no workers (%d CPU workers, no GPU worker)", cpuWorkers)
	}
	total := s.bytes()
	host := r.HostPerCore * float64(max(cores, 1))
	var cpu float64
	if cpuWorkers > 0 {
		cpu = math.Min(float64(cpuWorkers)*s.cpuRate(r), host)
	}
	var gpu float64
	for _, g := range perGPU {
		if g > 0 {
			gpu += math.Min(math.Min(float64(g)*r.GPUFeed, r.GPULink), s.gpuKernelRate(r))
		}
	}
	seconds := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	if gpu == 0 {
		return seconds(total / cpu), nil
	}
	start := r.GPUStartup.Seconds()
	if cpu > 0 && total <= cpu*start {
		return seconds(total / cpu), nil
	}
	return seconds(start + (total-cpu*start)/math.Min(cpu+gpu, host)), nil
}

// check refuses rates that a prediction of the job s needs and r lacks.
func (r Rates) check(s Shape, cpu, gpu bool) error {
	if err := checkRate("HostPerCore", r.HostPerCore); err != nil {
		return err
	}
	if cpu && s.Sparse {
		if err := checkRate("CPUSparse", r.CPUSparse); err != nil {
			return err
		}
	} else if cpu {
		if err := checkTable("CPUDense", r.CPUDense); err != nil {
			return err
		}
	}
	if !gpu {
		return nil
	}
	if s.Sparse {
		if err := checkRate("GPUSparse", r.GPUSparse); err != nil {
			return err
		}
	} else if err := checkTable("GPUDense", r.GPUDense); err != nil {
		return err
	}
	if err := checkRate("GPUFeed", r.GPUFeed); err != nil {
		return err
	}
	if err := checkRate("GPULink", r.GPULink); err != nil {
		return err
	}
	if r.GPUStartup < 0 {
		return fmt.Errorf("planner: rates: GPUStartup is %v: want 0 or more", r.GPUStartup)
	}
	return nil
}

// FastestGPUCount is how many of the GPU workers gpuOf lists (each worker's GPU index, in
// the order "auto" adds them) the speed model keeps for the job s with the rates r on
// cores usable cores, cpuWorkers(g) being the CPU workers beside g GPU workers: the
// shortest predicted run, fewer GPU workers unless more are at least 2% faster, at least
// one when cpuWorkers(0) is 0. It returns the count, its predicted time and the predicted
// time with all of gpuOf; errors are PredictWith's.
func (s Shape) FastestGPUCount(r Rates, gpuOf []int, cpuWorkers func(g int) int, cores int) (best int, bestT, allT time.Duration, err error) {
	predict := func(g int) (time.Duration, error) {
		per := map[int]int{}
		var order []int
		for _, i := range gpuOf[:g] {
			if per[i] == 0 {
				order = append(order, i)
			}
			per[i]++
		}
		counts := make([]int, 0, len(per))
		for _, i := range order {
			counts = append(counts, per[i])
		}
		return s.PredictWith(r, cpuWorkers(g), counts, cores)
	}
	if cpuWorkers(0) == 0 {
		if len(gpuOf) == 0 {
			return 0, 0, 0, fmt.Errorf("planner: predict: no workers (no CPU worker, no GPU worker)")
		}
		best = 1
	}
	if bestT, err = predict(best); err != nil {
		return 0, 0, 0, err
	}
	for g := best + 1; g <= len(gpuOf); g++ {
		t, err := predict(g)
		if err != nil {
			return 0, 0, 0, err
		}
		if float64(t) < 0.98*float64(bestT) {
			best, bestT = g, t
		}
	}
	if allT, err = predict(len(gpuOf)); err != nil {
		return 0, 0, 0, err
	}
	return best, bestT, allT, nil
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
