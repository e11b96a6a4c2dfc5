//go:build cgo

/* nvml_dl.c: NVML loaded with dlopen; see nvml_dl.h. Function names and signatures are
 * those of nvml.h (the _v2 entry points that nvml.h maps nvmlInit, nvmlDeviceGetCount
 * and nvmlDeviceGetHandleByIndex to). */
#include <dlfcn.h>
#include <string.h>
#include "nvml_dl.h"

typedef struct {
    unsigned long long total, free, used;
} nvml_memory; /* nvmlMemory_t */

#define LOAD(field, symbol)                                    \
    do {                                                       \
        *(void **)(&api->field) = dlsym(api->lib, symbol);     \
        if (api->field == NULL) {                              \
            api->missing = symbol;                             \
            dlclose(api->lib);                                 \
            api->lib = NULL;                                   \
            return STEMDOT_NVML_NO_SYMBOL;                      \
        }                                                      \
    } while (0)

int stemdot_nvml_open(const char *path, stemdot_nvml *api) {
    memset(api, 0, sizeof *api);
    api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (api->lib == NULL) {
        return STEMDOT_NVML_NO_LIBRARY;
    }
    LOAD(init, "nvmlInit_v2");
    LOAD(shutdown, "nvmlShutdown");
    LOAD(error_string, "nvmlErrorString");
    LOAD(count, "nvmlDeviceGetCount_v2");
    LOAD(handle, "nvmlDeviceGetHandleByIndex_v2");
    LOAD(name, "nvmlDeviceGetName");
    LOAD(uuid, "nvmlDeviceGetUUID");
    LOAD(memory, "nvmlDeviceGetMemoryInfo");
    LOAD(affinity, "nvmlDeviceGetCpuAffinity");
    return STEMDOT_NVML_OK;
}

void stemdot_nvml_close(stemdot_nvml *api) {
    if (api->lib != NULL) {
        dlclose(api->lib);
        api->lib = NULL;
    }
}

int stemdot_nvml_init(stemdot_nvml *api) { return api->init(); }
int stemdot_nvml_shutdown(stemdot_nvml *api) { return api->shutdown(); }
const char *stemdot_nvml_missing(stemdot_nvml *api) { return api->missing ? api->missing : ""; }

const char *stemdot_nvml_error(stemdot_nvml *api, int ret) {
    const char *s = api->error_string(ret);
    return s ? s : "unknown NVML error";
}

int stemdot_nvml_count(stemdot_nvml *api, unsigned int *count) { return api->count(count); }

int stemdot_nvml_describe(stemdot_nvml *api, unsigned int index, unsigned int words, stemdot_nvml_device *d) {
    memset(d, 0, sizeof *d);
    void *dev = NULL;
    nvml_memory mem;
    int ret;
    if ((ret = api->handle(index, &dev)) != NVML_SUCCESS) {
        d->failed = "nvmlDeviceGetHandleByIndex";
        return ret;
    }
    if ((ret = api->name(dev, d->name, sizeof d->name)) != NVML_SUCCESS) {
        d->failed = "nvmlDeviceGetName";
        return ret;
    }
    if ((ret = api->uuid(dev, d->uuid, sizeof d->uuid)) != NVML_SUCCESS) {
        d->failed = "nvmlDeviceGetUUID";
        return ret;
    }
    if ((ret = api->memory(dev, &mem)) != NVML_SUCCESS) {
        d->failed = "nvmlDeviceGetMemoryInfo";
        return ret;
    }
    d->total = mem.total;
    d->free = mem.free;
    if (words > STEMDOT_NVML_CPU_WORDS) {
        words = STEMDOT_NVML_CPU_WORDS;
    }
    /* Optional: ERROR_NOT_SUPPORTED on some systems; unknown affinity stays empty. */
    d->has_affinity = api->affinity(dev, words, d->cpu_set) == NVML_SUCCESS;
    return NVML_SUCCESS;
}
