/* nvml_dl.h: the part of NVIDIA's NVML (nvml.h, NVML API reference) that affinity uses,
 * loaded at run time with dlopen so that no binary references an NVML symbol. */
#ifndef STEMDOT_NVML_DL_H
#define STEMDOT_NVML_DL_H

#define NVML_SUCCESS 0
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIBRARY_NOT_FOUND 12

#define STEMDOT_NVML_OK 0
#define STEMDOT_NVML_NO_LIBRARY 1
#define STEMDOT_NVML_NO_SYMBOL 2

/* Up to 8192 CPUs, as unsigned long words. */
#define STEMDOT_NVML_CPU_WORDS (8192 / (8 * sizeof(unsigned long)))

typedef struct stemdot_nvml {
    void *lib;
    const char *missing; /* the first function not found, after STEMDOT_NVML_NO_SYMBOL */
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, void **);
    int (*name)(void *, char *, unsigned int);
    int (*uuid)(void *, char *, unsigned int);
    int (*memory)(void *, void *);
    int (*affinity)(void *, unsigned int, unsigned long *);
} stemdot_nvml;

typedef struct stemdot_nvml_device {
    char name[96];  /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
    char uuid[96];  /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
    unsigned long long total, free;
    int has_affinity;
    unsigned long cpu_set[STEMDOT_NVML_CPU_WORDS];
    const char *failed; /* the NVML function that failed */
} stemdot_nvml_device;

int stemdot_nvml_open(const char *path, stemdot_nvml *api);
void stemdot_nvml_close(stemdot_nvml *api);
int stemdot_nvml_init(stemdot_nvml *api);
int stemdot_nvml_shutdown(stemdot_nvml *api);
const char *stemdot_nvml_error(stemdot_nvml *api, int ret);
const char *stemdot_nvml_missing(stemdot_nvml *api);
int stemdot_nvml_count(stemdot_nvml *api, unsigned int *count);
int stemdot_nvml_describe(stemdot_nvml *api, unsigned int index, unsigned int words, stemdot_nvml_device *d);

#endif
