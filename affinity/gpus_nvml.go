//go:build cgo && !nonvml

package affinity

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlCPUSetBits is the number of CPUs DiscoverGPUs asks nvmlDeviceGetCpuAffinity to
// cover, more than Linux's largest configurable CPU count (CONFIG_NR_CPUS).
const nvmlCPUSetBits = 8192

// nvmlGPUs is DiscoverGPUs through NVML.
//
// go-nvml v0.12 and later return ERROR_LIBRARY_NOT_FOUND from nvml.Init when the
// library is missing (earlier versions panicked), so no recover is needed.
func nvmlGPUs() ([]GPU, error) {
	switch ret := nvml.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, nil
	default:
		return nil, fmt.Errorf("affinity: NVML initialisation failed: %v", ret)
	}
	defer nvml.Shutdown()

	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("affinity: NVML device count: %v", ret)
	}
	var gpus []GPU
	for i := range count {
		gpu, err := describeGPU(i)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, gpu)
	}
	return gpus, nil
}

// describeGPU reads NVML device i; NVML must be initialised.
func describeGPU(i int) (GPU, error) {
	dev, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("affinity: NVML handle of GPU %d: %v", i, ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("affinity: NVML name of GPU %d: %v", i, ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("affinity: NVML UUID of GPU %d: %v", i, ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("affinity: NVML memory info of GPU %d (%s): %v", i, name, ret)
	}
	gpu := GPU{Index: i, Name: name, UUID: uuid, TotalBytes: mem.Total, FreeBytes: mem.Free}
	// Affinity is optional (ERROR_NOT_SUPPORTED on some systems): unknown stays nil.
	if set, ret := dev.GetCpuAffinity(nvmlCPUSetBits); ret == nvml.SUCCESS {
		gpu.CPUAffinity = cpuSetIDs(set)
	}
	return gpu, nil
}
