/*
 * stemdot_kernels.h: C interface of stemdot's CUDA mask-dot kernels (libstemdot_kernels.a).
 *
 * The mask-dot product of a 4D-STEM scan: for every detector frame f (sig_y*sig_x pixels,
 * "pixels" below) and every mask m of a float32 stack (n_masks x pixels, C order),
 * out[f, m] = sum_p mask[m, p] * f[p], as LiberTEM's ApplyMasksUDF computes it. Frames
 * cross PCIe in their native dtype (uint8, uint16, uint32, float32) and are converted on
 * the device; out is float32, or float64 when the accumulation is float64.
 *
 * The library keeps a device-resident mask stack (dense or CSR, uploaded once per
 * device, refcounted so that all workers on a device share it) and runners: one per
 * worker, bound to one device, with pinned host staging buffers and several streams so
 * that the host's read of tile i+1 into pinned memory, the H2D copy, the kernel and the
 * D2H copy of consecutive tiles overlap (see stemdot_runner_submit).
 *
 * Errors: every function returns a stemdot_status; code 0 is success, a positive code is
 * the cudaError_t of the failing CUDA call (named in .call), a negative code is one of the
 * STEMDOT_ERR_* argument errors. stemdot_error_string gives the message. Nothing is
 * printed. No function keeps a pointer to caller memory after it returns.
 *
 * Threads: every function selects its device (cudaSetDevice) on the calling thread first,
 * so a caller may move between OS threads. A runner is used by one thread at a time.
 */
#ifndef STEMDOT_KERNELS_H
#define STEMDOT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result of a call: code 0 on success; otherwise a cudaError_t (> 0) or STEMDOT_ERR_*
 * (< 0), and call names the failing CUDA function or "stemdot" (a static string). */
typedef struct stemdot_status {
    int code;
    const char *call;
} stemdot_status;

/* Argument errors (negative codes). */
enum {
    STEMDOT_ERR_INVALID_ARGUMENT = -1,
    STEMDOT_ERR_UNSUPPORTED_DTYPE = -2,
    STEMDOT_ERR_TOO_LARGE = -3,
    STEMDOT_ERR_UNSUPPORTED = -4,
    STEMDOT_ERR_DEVICE_MEMORY = -5 /* a resident dataset does not fit in free device memory */
};

/* Pixel dtypes of frames; the values match Go's dataset.DType. The mask kernels read
 * uint8, uint16, uint32 and float32 frames; a runner with shifts (whose g_f kernel
 * converts the frames to float32) also int8, int16, int32 and float64 ones. */
enum {
    STEMDOT_UINT8 = 1,
    STEMDOT_UINT16 = 2,
    STEMDOT_UINT32 = 3,
    STEMDOT_INT8 = 4,
    STEMDOT_INT16 = 5,
    STEMDOT_INT32 = 6,
    STEMDOT_FLOAT32 = 7,
    STEMDOT_FLOAT64 = 8
};

/* Selects, process-wide, the register- and shared-memory-tiled dense kernel for mask
 * groups of 16 to 64 masks (on != 0) instead of the streaming kernel (0, the default:
 * the tiled kernel has not been checked on a GPU yet). Both are exact to float32 (or
 * float64) accumulation. Call it while no kernel is being launched. */
void stemdot_use_tiled_dense(int on);

/* Message for a status code: cudaGetErrorString for CUDA codes. Static string. */
const char *stemdot_error_string(int code);

/* Number of CUDA devices. cudaErrorNoDevice and cudaErrorInsufficientDriver (no GPU, no
 * driver) are reported as *count = 0 with success: a machine without a GPU is normal. */
stemdot_status stemdot_device_count(int *count);

/* Properties of one device (from cudaGetDeviceProperties). */
typedef struct stemdot_props {
    char name[256];
    char pci_bus_id[32];      /* "0000:3b:00.0" */
    int major, minor;         /* compute capability */
    int multiprocessors;      /* SM count */
    int async_engines;        /* copy engines: 2 lets H2D and D2H run at once */
    int l2_bytes;             /* L2 cache size in bytes */
    int memory_bus_bits;      /* memory bus width in bits */
    int memory_clock_khz;     /* peak memory clock in kHz */
    size_t total_memory;      /* global memory in bytes */
    int runtime_version;      /* cudart version the library was built with, e.g. 11080 */
    int driver_version;       /* highest CUDA version the driver supports, e.g. 13000 */
} stemdot_props;

stemdot_status stemdot_device_props(int device, stemdot_props *props);

/* A mask stack resident on one device. Created with a reference count of 1. */
typedef struct stemdot_masks stemdot_masks;

/* Uploads a dense float32 stack: weights[m*pixels + p], n_masks x pixels, C order. The
 * host array is copied before the call returns. */
stemdot_status stemdot_masks_create_dense(int device, const float *weights, int n_masks,
                                          int64_t pixels, stemdot_masks **out);

/* Uploads a CSR stack: the nonzeros of mask m are col[rowptr[m] .. rowptr[m+1]) (pixel
 * index, 0 <= col < pixels) with weights val[...]; rowptr has n_masks+1 entries starting
 * at 0. Validated on the host (STEMDOT_ERR_INVALID_ARGUMENT). */
stemdot_status stemdot_masks_create_csr(int device, int n_masks, int64_t pixels,
                                        const int32_t *rowptr, const int32_t *col,
                                        const float *val, stemdot_masks **out);

/* Adds a reference. */
void stemdot_masks_retain(stemdot_masks *masks);

/* Drops a reference; the last one frees the device memory. *remaining (may be NULL)
 * receives the references left. */
stemdot_status stemdot_masks_release(stemdot_masks *masks, int *remaining);

/* Configuration of a runner. */
typedef struct stemdot_runner_config {
    int device;             /* must be the masks' device */
    stemdot_masks *masks;   /* retained by the runner until it is destroyed */
    int dtype;              /* STEMDOT_UINT8 ... STEMDOT_FLOAT32; any STEMDOT_* with shifts */
    int tile_frames;        /* frames per tile (>= 1) */
    int slots;              /* tiles in flight, one stream each (>= 1; 2-3 overlap) */
    int float64;            /* accumulate and write float64 instead of float32 */
    int64_t record_stride;  /* mapped feed: the largest record stride (bytes) that
                               stemdot_runner_submit_mapped will be given for records that
                               need unpacking; 0: packed frames only */
    /* Shifted masks (descan compensation, engine/shift.go), or NULL: shifts[2f], shifts[2f+1]
     * are the (dy, dx) of frame f in pixels, for frames f < shift_frames, finite; copied
     * to the device when the runner is created. Each tile's frames then go through a
     * kernel that builds their g_f (the frame read at the shifted positions with bilinear
     * weights, shift.cuh) in float32 in device memory, and the mask kernels read g_f: the
     * results are those of the masks moved by each frame's shift, without moving or
     * copying a mask. The tiles' first_frame says which shifts apply. */
    const double *shifts;
    int64_t shift_frames;
    int sig_x;              /* with shifts: the frame's width (pixels = sig_y * sig_x) */
} stemdot_runner_config;

/* A per-worker pipeline on one device. */
typedef struct stemdot_runner stemdot_runner;

stemdot_status stemdot_runner_create(const stemdot_runner_config *cfg, stemdot_runner **out);

/* Frees the runner's buffers and streams (waiting for its work) and releases its masks. */
stemdot_status stemdot_runner_destroy(stemdot_runner *runner);

/* Allocates the pinned host input buffers of the staged feed (stemdot_runner_input,
 * stemdot_runner_submit); a runner fed only by stemdot_runner_submit_mapped needs none.
 * Idempotent. */
stemdot_status stemdot_runner_stage(stemdot_runner *runner);

/* Pinned host input buffer of a slot: tile_frames frames of native pixels (NULL before
 * stemdot_runner_stage). */
void *stemdot_runner_input(stemdot_runner *runner, int slot);

/* Pinned host output buffer of a slot: tile_frames x n_masks results (float32, or float64
 * when cfg.float64), frame-major, valid after stemdot_runner_wait. */
const void *stemdot_runner_output(stemdot_runner *runner, int slot);

/* Enqueues, on the slot's stream, the H2D copy of the first n_frames frames of the slot's
 * input buffer, the mask-dot kernel (for a shifted runner, the g_f kernel first) and the
 * D2H copy of the results, then records the slot's event. first_frame is the index of
 * the tile's first frame, which selects a shifted runner's shifts (frames [first_frame,
 * first_frame + n_frames) must be < shift_frames); ignored without shifts. Returns
 * without waiting. The caller fills the next slot's input while this one runs; the
 * slot's buffers must not be touched until stemdot_runner_wait. */
stemdot_status stemdot_runner_submit(stemdot_runner *runner, int slot, int64_t first_frame,
                                     int n_frames);

/* One tile of the copy-free feed: n_frames records of stride bytes (header bytes, then
 * the frame's pixels in the file's byte order), taken from host memory registered with
 * stemdot_host_register, given as up to two pieces (src[i], len[i]) that together hold the
 * bytes from the first record's start to the last frame's last pixel, in order (two when
 * the tile spans two registered windows; len[1] = 0 otherwise). */
typedef struct stemdot_mapped_tile {
    const void *src[2];
    size_t len[2];
    int n_frames;       /* 1 .. tile_frames (and at most 65535) */
    int64_t stride;     /* >= frame bytes; > frame bytes needs cfg.record_stride >= stride */
    int header;         /* bytes before the pixels, <= stride - frame bytes */
    int swap;           /* pixels are in the other byte order than the host's */
    uint32_t magic;     /* every record starts with these magic_len bytes (byte k = bits
                           8k..8k+7), checked on the device; see stemdot_runner_bad_frame */
    int magic_len;      /* 0..4, <= header */
    int64_t first_frame; /* the first frame's index: selects a shifted runner's shifts */
} stemdot_mapped_tile;

/* Enqueues, on the slot's stream, the DMA of the tile straight from the registered host
 * memory, the unpacking into packed host-order frames on the device (skipped when the
 * records are packed host-order frames already), the magic check, the mask-dot kernel
 * and the copy of the results, then records the slot's event. The host memory must stay
 * registered until stemdot_runner_wait of the slot returns. */
stemdot_status stemdot_runner_submit_mapped(stemdot_runner *runner, int slot,
                                            const stemdot_mapped_tile *tile);

/* After stemdot_runner_wait of a slot whose tile was submitted mapped with a magic:
 * the first frame (0-based, within the tile) whose record did not start with the magic,
 * or -1. */
int stemdot_runner_bad_frame(stemdot_runner *runner, int slot);

/* Page-locks and maps [ptr, ptr+bytes) of host memory (typically a read-only memory
 * mapping of a file, pages in the page cache) for DMA by the device:
 * cudaHostRegister with cudaHostRegisterReadOnly | cudaHostRegisterPortable.
 * STEMDOT_ERR_UNSUPPORTED where the device cannot register read-only memory. */
stemdot_status stemdot_host_register(int device, void *ptr, size_t bytes);

/* Undoes stemdot_host_register of ptr. */
stemdot_status stemdot_host_unregister(int device, void *ptr);

/* Creates the device's primary CUDA context (the 0.1-0.3 s that the first CUDA call on
 * a device costs), so that a later runner starts at once. */
stemdot_status stemdot_device_init(int device);

/* Blocks (without spinning) until the slot's submitted work is done, and reports any
 * error of its copies or kernel. */
stemdot_status stemdot_runner_wait(stemdot_runner *runner, int slot);

/* Times the kernel alone: n_frames frames (filled with a constant pattern) resident on
 * the device, the kernel launched iters times; *seconds is the mean time of one launch
 * (cudaEvent timing). For a shifted runner, the mask kernel on float32 g_f frames (the
 * g_f kernel before it is not timed). */
stemdot_status stemdot_runner_time_kernel(stemdot_runner *runner, int64_t n_frames, int iters,
                                          double *seconds);

/* Copy kinds for stemdot_copy_bandwidth. */
enum {
    STEMDOT_COPY_H2D_PINNED = 1, /* pinned host -> device */
    STEMDOT_COPY_D2D = 2         /* device -> device */
};

/* Measures a copy of bytes bytes repeated iters times after one warm-up copy; *seconds is
 * the mean time of one copy (cudaEvent timing). */
stemdot_status stemdot_copy_time(int device, int kind, size_t bytes, int iters, double *seconds);

/* Free and total global memory of a device in bytes (cudaMemGetInfo). */
stemdot_status stemdot_device_memory(int device, size_t *free_bytes, size_t *total_bytes);

/* Device memory a resident dataset keeps free beside its frames for its working space
 * (the results and the split-K partial sums of one apply chunk, and the mask stacks). */
#define STEMDOT_RESIDENT_RESERVE ((size_t)256 << 20)

/* A dataset held in device memory: n_frames frames of pixels pixels of dtype, packed,
 * frame-major, loaded once (stemdot_frames_stage / _upload / _finish) and then given
 * any mask stack as often as wanted (stemdot_frames_apply). Used by one thread at a
 * time. */
typedef struct stemdot_frames stemdot_frames;

/* Allocates the device memory of n_frames frames (n_frames * pixels * dtype size bytes).
 * Refused with STEMDOT_ERR_DEVICE_MEMORY, before allocating, when that plus
 * STEMDOT_RESIDENT_RESERVE exceeds the device's free memory (stemdot_device_memory gives
 * the figures for a message). */
stemdot_status stemdot_frames_create(int device, int dtype, int64_t pixels, int64_t n_frames,
                                       stemdot_frames **out);

/* Staging slot 0 or 1 of the upload: waits until the slot's previous upload has left it,
 * then gives its pinned host buffer (*ptr) and how many frames it holds (*frames, at
 * least 1; 32 MiB of frames). The buffer is made on first use and freed by
 * stemdot_frames_finish; the caller fills it with native frames in host byte order. */
stemdot_status stemdot_frames_stage(stemdot_frames *res, int slot, void **ptr, int *frames);

/* Enqueues the copy of the first n_frames frames of staging slot `slot` to the device as
 * frames [first_frame, first_frame + n_frames) and returns without waiting; the slot is
 * busy until the next stemdot_frames_stage of it (or stemdot_frames_finish). */
stemdot_status stemdot_frames_upload(stemdot_frames *res, int slot, int64_t first_frame,
                                       int n_frames);

/* Waits for all uploads, reports any error of them, and frees the staging buffers. */
stemdot_status stemdot_frames_finish(stemdot_frames *res);

/* Applies stack masks (on the dataset's device, masks->pixels == pixels) to resident
 * frames [first, first + n): out_host[(f - first) * n_masks + m] (float, or double when
 * float64), in chunks of frames within the kernels' grid limits and a 256 MiB result
 * chunk; returns when the results are in out_host (caller memory, any kind, not kept). */
stemdot_status stemdot_frames_apply(stemdot_frames *res, stemdot_masks *masks, int float64,
                                      int64_t first, int64_t n, void *out_host);

/* Waits for the dataset's work and frees its device and host memory. */
stemdot_status stemdot_frames_destroy(stemdot_frames *res);

#ifdef __cplusplus
}
#endif

#endif /* STEMDOT_KERNELS_H */
