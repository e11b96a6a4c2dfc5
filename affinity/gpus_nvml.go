//go:build cgo

package affinity

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "nvml_dl.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// nvmlLibrary is the NVML library DiscoverGPUs loads (tests load a fake one).
var nvmlLibrary = "libnvidia-ml.so.1"

// nvmlCPUSetBits is the number of CPUs DiscoverGPUs asks nvmlDeviceGetCpuAffinity to
// cover, more than Linux's largest configurable CPU count (CONFIG_NR_CPUS).
const nvmlCPUSetBits = 8192

// nvmlGPUs is DiscoverGPUs through NVML, loaded with dlopen and its eight functions
// resolved with dlsym (nvml_dl.c): the library and the programs linking it hold no
// reference to an NVML symbol, so they link and run on machines without a driver.
func nvmlGPUs() ([]GPU, error) {
	lib := C.CString(nvmlLibrary)
	defer C.free(unsafe.Pointer(lib))
	var api C.stemdot_nvml
	switch C.stemdot_nvml_open(lib, &api) {
	case C.STEMDOT_NVML_OK:
	case C.STEMDOT_NVML_NO_LIBRARY:
		return nil, nil
	default:
		return nil, fmt.Errorf("affinity: %s lacks an NVML function (%s)", nvmlLibrary, C.GoString(C.stemdot_nvml_missing(&api)))
	}
	defer C.stemdot_nvml_close(&api)
	switch ret := C.stemdot_nvml_init(&api); ret {
	case C.NVML_SUCCESS:
	case C.NVML_ERROR_LIBRARY_NOT_FOUND, C.NVML_ERROR_DRIVER_NOT_LOADED:
		return nil, nil
	default:
		return nil, fmt.Errorf("affinity: NVML initialisation failed: %s", nvmlError(&api, ret))
	}
	defer C.stemdot_nvml_shutdown(&api)

	var count C.uint
	if ret := C.stemdot_nvml_count(&api, &count); ret != C.NVML_SUCCESS {
		return nil, fmt.Errorf("affinity: NVML device count: %s", nvmlError(&api, ret))
	}
	var gpus []GPU
	for i := range int(count) {
		var d C.stemdot_nvml_device
		if ret := C.stemdot_nvml_describe(&api, C.uint(i), nvmlCPUSetBits/bits.UintSize, &d); ret != C.NVML_SUCCESS {
			return nil, fmt.Errorf("affinity: NVML GPU %d: %s: %s", i, C.GoString(d.failed), nvmlError(&api, ret))
		}
		gpu := GPU{Index: i, Name: C.GoString(&d.name[0]), UUID: C.GoString(&d.uuid[0]),
			TotalBytes: uint64(d.total), FreeBytes: uint64(d.free)}
		if d.has_affinity != 0 {
			words := unsafe.Slice((*C.ulong)(unsafe.Pointer(&d.cpu_set[0])), nvmlCPUSetBits/bits.UintSize)
			set := make([]uint, len(words))
			for w, v := range words {
				set[w] = uint(v)
			}
			gpu.CPUAffinity = cpuSetIDs(set)
		}
		gpus = append(gpus, gpu)
	}
	return gpus, nil
}

// nvmlError is NVML's text for a return code, with the code.
func nvmlError(api *C.stemdot_nvml, ret C.int) string {
	return fmt.Sprintf("%s (NVML error %d)", C.GoString(C.stemdot_nvml_error(api, ret)), int(ret))
}
