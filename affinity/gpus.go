package affinity

import "math/bits"

// GPU is one NVIDIA GPU as NVML reports it.
type GPU struct {
	// Index is the NVML device index (PCI bus order). CUDA numbers devices in the same
	// order only with CUDA_DEVICE_ORDER=PCI_BUS_ID; match devices by UUID otherwise.
	// NVML ignores CUDA_VISIBLE_DEVICES.
	Index int
	// Name is the product name (e.g. "NVIDIA H200"); UUID is the device UUID
	// ("GPU-" followed by hex groups).
	Name, UUID string
	// TotalBytes and FreeBytes are the device memory in bytes, total and free at
	// discovery time.
	TotalBytes, FreeBytes uint64
	// CPUAffinity are the logical CPU ids close to the GPU (nvmlDeviceGetCpuAffinity,
	// typically the CPUs of the GPU's NUMA node), ascending; nil if unknown. They are not
	// restricted to the CPUs this process may use.
	CPUAffinity []int
}

// DiscoverGPUs lists the NVIDIA GPUs through NVML (libnvidia-ml.so.1, loaded at run
// time, so it works in builds without CUDA). No NVML library, no loaded driver, or no
// device is a normal state and gives nil, nil. Other NVML failures (at initialisation
// or reading a device) give an error naming the NVML return code and the device index;
// callers that do not need GPUs may ignore it. NVML needs cgo: a build without cgo
// finds no GPU.
func DiscoverGPUs() ([]GPU, error) {
	return nvmlGPUs()
}

// cpuSetIDs decodes an NVML CPU bitmask (bit b of word w is CPU w*UintSize+b, as C
// unsigned long words) into ascending CPU ids; nil when no bit is set.
func cpuSetIDs(set []uint) []int {
	var ids []int
	for w, word := range set {
		for word != 0 {
			b := bits.TrailingZeros(word)
			ids = append(ids, w*bits.UintSize+b)
			word &^= 1 << b
		}
	}
	return ids
}
