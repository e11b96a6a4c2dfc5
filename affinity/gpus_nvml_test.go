//go:build cgo

package affinity

import (
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeNVML is a stand-in for libnvidia-ml.so.1 with two GPUs, written from the NVML
// API reference's signatures: GPU 1 has no CPU affinity (NOT_SUPPORTED, 3).
const fakeNVML = `
#include <stdio.h>
#include <string.h>
typedef struct { unsigned long long total, free, used; } mem_t;
static int inited;
int nvmlInit_v2(void) { inited = 1; return 0; }
int nvmlShutdown(void) { inited = 0; return 0; }
const char *nvmlErrorString(int r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!inited) return 1; *n = FAKE_COUNT; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d) { *d = (void *)(unsigned long)(i + 1); return 0; }
int nvmlDeviceGetName(void *d, char *s, unsigned int n) { snprintf(s, n, "Fake H%lu", (unsigned long)d); return 0; }
int nvmlDeviceGetUUID(void *d, char *s, unsigned int n) { snprintf(s, n, "GPU-%08lu", (unsigned long)d); return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) {
	if ((unsigned long)d == 3) return 999;
	m->total = 141ULL << 30; m->free = ((unsigned long)d) << 30; m->used = m->total - m->free; return 0;
}
int nvmlDeviceGetCpuAffinity(void *d, unsigned int words, unsigned long *set) {
	if ((unsigned long)d != 1) return 3;
	memset(set, 0, words * sizeof *set);
	set[0] = 0xf0; set[1] = 1; return 0;
}
`

// buildFakeNVML compiles fakeNVML with count GPUs into a shared library.
func buildFakeNVML(t *testing.T, count string) string {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build a fake NVML library")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake_nvml.c")
	require.NoError(t, os.WriteFile(src, []byte(fakeNVML), 0o644))
	lib := filepath.Join(dir, "libfake-nvml.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-DFAKE_COUNT="+count, "-o", lib, src).CombinedOutput()
	require.NoError(t, err, string(out))
	return lib
}

func withNVML(t *testing.T, path string) {
	old := nvmlLibrary
	nvmlLibrary = path
	t.Cleanup(func() { nvmlLibrary = old })
}

func TestDiscoverGPUsFakeNVML(t *testing.T) {
	withNVML(t, buildFakeNVML(t, "2"))
	gpus, err := DiscoverGPUs()
	require.NoError(t, err)
	require.Equal(t, []GPU{
		{Index: 0, Name: "Fake H1", UUID: "GPU-00000001", TotalBytes: 141 << 30, FreeBytes: 1 << 30, CPUAffinity: []int{4, 5, 6, 7, bits.UintSize}},
		{Index: 1, Name: "Fake H2", UUID: "GPU-00000002", TotalBytes: 141 << 30, FreeBytes: 2 << 30},
	}, gpus)

	// A failing device call is an error naming the GPU, the function and NVML's code.
	withNVML(t, buildFakeNVML(t, "3"))
	_, err = DiscoverGPUs()
	require.ErrorContains(t, err, "NVML GPU 2: nvmlDeviceGetMemoryInfo: Unknown Error (NVML error 999)")

	// No library: no GPU, no error.
	withNVML(t, filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	gpus, err = DiscoverGPUs()
	require.NoError(t, err)
	require.Empty(t, gpus)
}
