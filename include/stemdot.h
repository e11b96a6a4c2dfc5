/*
 * stemdot.h — C ABI of libstemdot, the stemdot 4D-STEM mask-dot engine.
 *
 * A 4D-STEM scan holds one detector frame (sig_shape = (sig_y, sig_x) pixels) at every
 * scan position of the navigation grid (nav_shape, e.g. (nav_y, nav_x)). stemdot applies
 * a stack of masks (n_masks × sig_y × sig_x, float32, C order) to every frame:
 *
 *     out[f, m] = Σ_{y,x} mask[m, y, x] · frame_f[y, x]
 *
 * giving a result of n_frames × n_masks (frame-major; frame f is scan position f in
 * row-major order over nav_shape), as LiberTEM's ApplyMasksUDF does.
 *
 * Build: `make capi` (with CUDA where nvcc is found, else CPU-only; or
 * `go build -buildmode=c-shared -o build/libstemdot.so ./cmd/libstemdot`). See cmd/libstemdot/examples/apply.c
 * (and live.c for live streams).
 *
 * Linking
 *   cc -Iinclude app.c -Lbuild -lstemdot -Wl,-rpath,$PWD/build
 *   for every build: the library loads NVIDIA's NVML (GPU discovery) with dlopen at run
 *   time, when it is there, and references none of its symbols.
 *
 * Errors
 *   Every function that returns stemdot_status returns STEMDOT_OK (0) on success and a
 *   nonzero code on failure, and sets the calling thread's last error message, read with
 *   stemdot_last_error(). No function aborts or crashes the host process on bad input;
 *   an unexpected failure inside the library (a Go panic) is recovered and reported as
 *   STEMDOT_ERR_INTERNAL. Invalid (non-NULL but dangling) pointers cannot be detected.
 *   Sizes whose product (in elements or bytes) cannot be the size of a buffer are
 *   STEMDOT_ERR_SHAPE. Messages (errors, stemdot_dataset_warnings) carry no terminal
 *   control characters: those of strings from files are escaped (ESC as \x1b).
 *
 * Handles
 *   Datasets, plans, runs, mask stacks, live runs and viewers are opaque 64-bit handles; 0 is never a valid handle. A
 *   function that makes one stores 0 in *out when it fails.
 *   Each handle is freed by its stemdot_*_free function. A freed, unknown or wrong-kind
 *   handle is detected and rejected with STEMDOT_ERR_BAD_HANDLE (freeing twice too).
 *
 * Memory
 *   The caller owns every buffer it passes (paths, option strings, frames, masks,
 *   results). The library keeps no pointer to a caller buffer after a call returns,
 *   except the frame buffer given to stemdot_dataset_from_memory, which it reads (never
 *   writes) until that dataset handle is freed. Strings returned by the library are
 *   owned by it (see each function). The library keeps no Go pointer in C memory.
 *
 * Threads
 *   Functions may be called from any thread. Distinct handles may be used concurrently
 *   from several threads; a dataset or plan handle may be shared by concurrent applies;
 *   a run handle serves one apply at a time; a live run handle may be polled, waited on
 *   and cancelled from several threads at once. Thread-safety notes are given per function.
 *
 * Processes
 *   The library runs the Go runtime, started when the library is loaded, whose threads
 *   do not survive fork(): a child forked (without exec) from a process that had loaded
 *   the library could hang in any call. There every function returns
 *   STEMDOT_ERR_FORKED at once, without entering the runtime (stemdot_last_error,
 *   stemdot_version and stemdot_status_name work). Start such children with exec
 *   (posix_spawn, fork + exec; Python: multiprocessing.get_context("spawn") or
 *   "forkserver"); a child that loads the library itself, after fork, can use it.
 */
#ifndef STEMDOT_H
#define STEMDOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Library version (semantic versioning); stemdot_version() returns the same string. */
#define STEMDOT_VERSION "0.3.0"

/* Status codes returned by every fallible function. */
typedef enum stemdot_status {
    STEMDOT_OK = 0,
    STEMDOT_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad option string, bad request */
    STEMDOT_ERR_IO = 2,               /* file not found or unreadable; read error in a run */
    STEMDOT_ERR_FORMAT = 3,           /* file content not supported, truncated, inconsistent */
    STEMDOT_ERR_SHAPE = 4,            /* sizes do not match (buffers, masks, nav/sig shapes) */
    STEMDOT_ERR_DTYPE = 5,            /* unsupported or wrong dtype */
    STEMDOT_ERR_PLAN = 6,             /* resource request cannot be planned (cpus/gpus) */
    STEMDOT_ERR_CANCELLED = 7,        /* the run was cancelled by stemdot_run_cancel */
    STEMDOT_ERR_BAD_HANDLE = 8,       /* handle unknown, freed, or of another kind */
    STEMDOT_ERR_CUDA_UNAVAILABLE = 9, /* GPUs requested but no CUDA build or no device */
    STEMDOT_ERR_INTERNAL = 10,        /* a bug in stemdot; the message says where */
    STEMDOT_ERR_FORKED = 11           /* called in a child forked from a process that had
                                         loaded the library (see Processes) */
} stemdot_status;

/* Pixel and result dtypes; the numbers and names follow numpy's dtype names. */
typedef enum stemdot_dtype {
    STEMDOT_DTYPE_INVALID = 0,
    STEMDOT_UINT8 = 1,
    STEMDOT_UINT16 = 2,
    STEMDOT_UINT32 = 3,
    STEMDOT_INT8 = 4,
    STEMDOT_INT16 = 5,
    STEMDOT_INT32 = 6,
    STEMDOT_FLOAT32 = 7,
    STEMDOT_FLOAT64 = 8
} stemdot_dtype;

/* Opaque handles; 0 means "none". */
typedef uint64_t stemdot_dataset;
typedef uint64_t stemdot_plan;
typedef uint64_t stemdot_run;
typedef uint64_t stemdot_resident;
typedef uint64_t stemdot_masks;
typedef uint64_t stemdot_live;
typedef uint64_t stemdot_view;

/* Most navigation dimensions a dataset can report. */
#define STEMDOT_MAX_NAV_DIMS 8

/* Shape and dtype of a dataset, filled by stemdot_dataset_get_info. */
typedef struct stemdot_dataset_info {
    size_t nav_ndim;                          /* number of nav dimensions (1..8) */
    size_t nav_shape[STEMDOT_MAX_NAV_DIMS];   /* nav_shape[0..nav_ndim-1]; rest 0 */
    size_t sig_shape[2];                      /* (sig_y, sig_x) in pixels */
    stemdot_dtype dtype;                      /* native pixel dtype */
    uint64_t n_frames;                        /* product of nav_shape */
} stemdot_dataset_info;

/*
 * Progress callback of stemdot_apply (and stemdot_reduce): `done` frames of `total` are finished. It is
 * called on the thread that called stemdot_apply (never on a worker thread, never
 * concurrently), with `done` strictly increasing, and a last time with done == total
 * when the apply succeeds. Workers keep running while it runs. It may call
 * stemdot_run_cancel. `user` is the pointer given to stemdot_apply.
 */
typedef void (*stemdot_progress_fn)(uint64_t done, uint64_t total, void *user);

/* Version string, e.g. "0.3.0"; static storage, never freed. Thread-safe. */
const char *stemdot_version(void);

/*
 * The message of the last failed call on the calling thread ("" if the last call
 * succeeded or none was made). The string is stored in thread-local storage, owned by
 * the library, and stays valid until the next stemdot_* call on the same thread or the
 * thread's exit; copy it to keep it. Messages longer than 4095 bytes are truncated.
 */
const char *stemdot_last_error(void);

/* Name of a status code ("STEMDOT_ERR_SHAPE", ...); static storage. Thread-safe. */
const char *stemdot_status_name(stemdot_status status);

/*
 * Opens a dataset file and stores its handle in *out.
 * path: a file of any format of doc/formats.md's table: a Merlin .mib (or its .hdr),
 *   .npy, NanoMEGAS .blo, HDF5, a DECTRIS master, Gatan .dm3/.dm4 or K2 IS, TIA .ser/.emi,
 *   MRC, TVIPS, SEQ, FRMS6, EMPAD .xml (or its .raw), LiberTEM's raw_csr .toml, stempy
 *   counts, or a raw file.
 * options: NULL or "" to detect the format, else "key=value;key=value" with keys
 *   format      a format's name: mib | hdf5 | dectris | dm | ser | mrc | tvips | raw | ...
 *               (doc/formats.md's table; default: detected from extension and content)
 *   a format's own options by key (pixel_mask, dm_image, rotator_index, frms6_raw,
 *               seq_corrections, ...: doc/formats.md's table); another format's are ignored
 *               with a warning, an unknown key is INVALID_ARGUMENT
 *   dataset_path  HDF5: the dataset of frames (default: the largest of rank 3 to 5)
 *   allow_fill  HDF5: true reads storage that is missing or was never written (a virtual
 *               dataset's missing source file, chunks never written, external raw
 *               storage cut short) as the fill value, with a warning counting the frames
 *               (stemdot_dataset_warnings); false (default) refuses the file (IO, FORMAT)
 *   nav_shape   N, Y,X or Z,Y,X, e.g. 4,4 or 2,4,4 (overrides the file's scan shape,
 *               an array's nav axes as stored, when it has as many positions, or as
 *               many as the file has frames; another, or more than 3 sizes: SHAPE)
 *   sig_shape   e.g. 256,256 (raw only)
 *   dtype       uint8 | uint16 | uint32 | int8 | int16 | int32 | float32 | float64 (raw)
 *   byte_order  little | big (raw; default little)
 *   offset      header bytes to skip (raw; default 0)
 *   frame_header, frame_footer  bytes before/after every frame's pixels, e.g. 1024 or 1KiB
 *               (raw; default 0); offset takes units too
 *   sync_offset scan position p reads the file's frame p+N: N > 0 skips N leading
 *               frames, N < 0 inserts -N blank frames first (default 0); the nav shape is
 *               kept: positions without a frame read as blank frames, left out of
 *               stemdot_reduce (stemdot_dataset_blanks names them)
 *   flyback     flyback frames of each scan row, read as no scan position: start | end
 *               (one per row) | start:N | end:N | none | auto (default: one per row when
 *               the file holds (nav_x+1)*nav_y frames, with a warning)
 *   roi         a region of interest: only the scan positions it selects are read, as
 *               a dataset of nav shape (n_selected,) in scan order (stemdot_dataset_scan
 *               gives their positions): rect:X,Y,W,H (scan columns X..X+W-1, rows
 *               Y..Y+H-1; of every plane of a nav shape Z,Y,X), the path of an NPY file of booleans (or 0/1) of the scan's
 *               nav shape, or bits:SHAPE:HEX (e.g. bits:64,64:ff00...: the positions
 *               packed 8 a byte in C order, the first in the most significant bit, as
 *               numpy.packbits(roi.ravel()).tobytes().hex()); applied after nav_shape,
 *               sync_offset and flyback. SHAPE for another shape than the scan's or a
 *               rect outside it, INVALID_ARGUMENT for an ROI that selects nothing or an
 *               array that is not boolean
 *   frames      first,count: open only frames [first, first+count) of the file (in
 *               scan order, after nav_shape, sync_offset and flyback; of the positions
 *               roi selects when given), as a dataset of nav shape (count,) whose frame
 *               i is frame first+i; nothing outside the range is read (a distributed
 *               task computes its range this way)
 * e.g. "format=raw;sig_shape=256,256;dtype=uint16;nav_shape=4,4;byte_order=big".
 * Errors: INVALID_ARGUMENT (NULL, bad options), IO (missing or unreadable file), FORMAT
 * (unknown format, a size that does not fit the frames described, inconsistent headers),
 * SHAPE (bad shape option, a nav_shape contradicting the file's scan shape, a frames range
 * outside the file), DTYPE (bad dtype option).
 * A nav_shape that does not match the frame count is fitted as the CLI does (surplus
 * frames ignored, an incomplete scan's complete rows kept) and reported by
 * stemdot_dataset_warnings.
 * Thread-safe.
 */
stemdot_status stemdot_open(const char *path, const char *options, stemdot_dataset *out);

/*
 * Wraps frames in a caller-owned buffer as a dataset, without copying: `frames` holds
 * n_frames × sig_y × sig_x pixels of `dtype`, C order, host byte order, where n_frames
 * is the product of nav_shape[0..nav_ndim-1]; frames_bytes is the buffer's size and
 * must equal n_frames*sig_y*sig_x*sizeof(dtype). The buffer must stay valid and
 * unchanged until stemdot_dataset_free; the library never writes to it.
 * Errors: INVALID_ARGUMENT (NULL pointers, nav_ndim not in 1..8), SHAPE (zero sizes,
 * frames_bytes mismatch), DTYPE (invalid dtype). Thread-safe.
 */
stemdot_status stemdot_dataset_from_memory(const void *frames, size_t frames_bytes,
                                           stemdot_dtype dtype, size_t nav_ndim,
                                           const size_t *nav_shape, size_t sig_y,
                                           size_t sig_x, stemdot_dataset *out);

/* Fills *info with the dataset's shapes and dtype. Thread-safe. */
stemdot_status stemdot_dataset_get_info(stemdot_dataset dataset, stemdot_dataset_info *info);

/*
 * Closes the dataset and frees its handle. While an apply on it runs in another thread,
 * it fails with STEMDOT_ERR_INVALID_ARGUMENT and leaves the dataset open (free it after
 * that apply returns). Thread-safe.
 */
stemdot_status stemdot_dataset_free(stemdot_dataset dataset);

/*
 * Makes a resource plan request for this machine and stores its handle in *out.
 * cpus: NULL or "" = one CPU worker on every usable physical core not reserved by a GPU
 *   worker; "N" = N CPU workers on distinct cores; "0,2-3" = workers pinned to exactly
 *   these logical CPU ids; "0" = no CPU worker (only with GPUs).
 * gpus: NULL or "" = none; "N" = N GPU workers; "0,0" = device ids (repeats allowed);
 *   "auto" = workers per GPU from its free memory.
 * The request is checked against the machine now; partitions are planned per dataset
 * at each apply. Errors: PLAN (e.g. a CPU id not allowed), CUDA_UNAVAILABLE (GPUs asked
 * for in a build without CUDA, or no GPU), INVALID_ARGUMENT (unparsable strings).
 * Thread-safe.
 */
stemdot_status stemdot_plan_new(const char *cpus, const char *gpus, stemdot_plan *out);

/*
 * stemdot_plan_new with every option of a plan: options is NULL or "" for the default
 * plan, else "key=value;key=value" with keys
 *   cpus, gpus          as in stemdot_plan_new
 *   oversubscribe       true | false: allow more CPU workers than usable physical cores
 *                       (the plan then warns; default false)
 *   partition_size      target partition size in decoded float32 bytes, e.g. 512MiB
 *   ram_per_gpu_worker  GPU memory one worker needs under gpus=auto, e.g. 4GiB
 *   max_workers_per_gpu cap on the workers per GPU under gpus=auto
 *   topology            plan for a described machine of N physical cores
 *   gpu_inventory       plan for described GPUs, e.g. 2x141GB
 *                       (both: plans for stemdot_plan_describe only; stemdot_apply refuses
 *                       them with INVALID_ARGUMENT)
 * e.g. "cpus=32;oversubscribe=true". Errors as stemdot_plan_new; INVALID_ARGUMENT also
 * for an unknown key, a key given twice or a malformed value. Thread-safe.
 */
stemdot_status stemdot_plan_new_options(const char *options, stemdot_plan *out);

/*
 * Writes what the user should know about how the dataset was read, one line each
 * (newline-separated, "" for none): a guessed nav shape, surplus or missing frames, a
 * sync offset, the HDF5 dataset chosen, ... (the CLI prints them as warnings). Same
 * buffer conventions as stemdot_plan_describe.
 */
stemdot_status stemdot_dataset_warnings(stemdot_dataset dataset, char *buf, size_t buf_len,
                                        size_t *needed);

/*
 * Writes what the dataset's reader counted in frames [first, first+count) of the dataset
 * when it last read them (run notes: e.g. a DECTRIS detector's saturated pixels, values
 * 2^N-1 that its pixel_mask does not flag), as a JSON array, "[]" for none: one object
 * per thing counted, {"key": what is counted, "count", "frames": the frames holding any,
 * "text": the sentence with "{count}" and "{frames}" in place of the numbers, "warning":
 * the sentence with them, after the file, as the CLI prints it}. After a run, those of
 * the frames it read are its warnings: stemdot_apply, stemdot_reduce, stemdot_centre and
 * stemdot_descan_fit read every frame of the dataset (first 0, count n_frames),
 * stemdot_pick the frames picked. A frame counts once in each run that reads it (a
 * dataset applied twice: each run's count, not a running total), and notes of several
 * datasets (frame ranges read by several processes) add up by key. SHAPE for frames
 * outside the dataset's. Same buffer conventions as stemdot_plan_describe. Thread-safe.
 */
stemdot_status stemdot_dataset_run_notes(stemdot_dataset dataset, size_t first, size_t count,
                                         char *buf, size_t buf_len, size_t *needed);

/*
 * Writes the format the dataset was read as: a format's name ("mib", "hdf5", "dm", ...),
 * or "memory" (stemdot_dataset_from_memory), as a result's sidecar records it. Same
 * buffer conventions as stemdot_plan_describe.
 */
stemdot_status stemdot_dataset_format(stemdot_dataset dataset, char *buf, size_t buf_len,
                                      size_t *needed);

/*
 * Writes the calibrations the dataset's file states, as JSON: the "calibration" section
 * of a result's sidecar, {"nav": [{"name": "y", "scale": 1.5, "offset": 0, "units":
 * "nm"}, {"name": "x", ...}], "sig": [{"name": "ky", ...}, {"name": "kx", ...}],
 * "camera_length_m": 0.12}: axes in numpy order (nav axes of the scan, scan_shape of
 * stemdot_dataset_scan), units as HyperSpy writes them ("nm", "µm", "1/nm", "mrad"),
 * every key absent when unknown ("{}" for a file that states none). Same buffer
 * conventions as stemdot_plan_describe.
 */
stemdot_status stemdot_dataset_calibration(stemdot_dataset dataset, char *buf, size_t buf_len,
                                           size_t *needed);

/*
 * Writes the path of the file the dataset reads its frames from, as stemdot_open resolved
 * it (e.g. an EMI file's SER file, <name>_1.ser), as a result's sidecar
 * records it (made absolute there); "" for one without a file (stemdot_dataset_from_memory).
 * Same buffer conventions as stemdot_plan_describe.
 */
stemdot_status stemdot_dataset_path(stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed);

/*
 * Selects the scan positions of a region of interest (roi: as option roi of
 * stemdot_open, e.g. "rect:2,0,4,3" or "bits:4,8:0ff0ff0f") of an opened dataset, for
 * data without options (stemdot_dataset_from_memory): *out is a dataset of nav shape
 * (n_selected,) that reads only those frames; it owns `dataset`, whose handle is freed
 * (free *out instead). On failure `dataset` stays open and *out is 0. The ROI is of the
 * dataset's nav shape. Errors: as option roi of stemdot_open; INVALID_ARGUMENT while
 * an apply runs on `dataset`. Thread-safe.
 */
stemdot_status stemdot_dataset_select(stemdot_dataset dataset, const char *roi, stemdot_dataset *out);

/*
 * Where the dataset's frames lie in the scan they were read from: *is_roi is 1 for a
 * dataset of a region of interest (option roi, stemdot_dataset_select), else 0;
 * scan_shape[0..*scan_ndim-1] is the whole scan's nav shape (STEMDOT_MAX_NAV_DIMS
 * entries, the rest 0); positions, unless NULL, receives the scan position of every
 * frame (positions_len must be n_frames), flat indices in C order over the scan shape,
 * ascending. stemdot_apply writes the frames of an ROI in this order (n_selected rows):
 * the caller places row i at scan position positions[i] (stemdot.apply_masks fills
 * the others with NaN). For a frames range the scan is the dataset's before the range.
 * Errors: INVALID_ARGUMENT (NULL), SHAPE (positions_len). Thread-safe.
 */
stemdot_status stemdot_dataset_scan(stemdot_dataset dataset, int *is_roi, size_t *scan_ndim,
                                    size_t *scan_shape, uint64_t *positions, size_t positions_len);

/*
 * The scan positions of the dataset's frames that have no frame in the file: a sync
 * offset (option sync_offset, LiberTEM's) moved the file's frames off them, the first
 * ones for a negative offset, the last ones for a positive one. They read as blank
 * (all-zero) frames, so stemdot_apply gives 0 there; stemdot_reduce leaves them out.
 * Writes *n_runs runs of them into runs as (first, count) pairs of flat scan positions
 * (C order over the scan shape of stemdot_dataset_scan), ascending: runs[2i] is the
 * first position of run i, runs[2i+1] its count. runs_len is the number of uint64_t
 * runs holds (2 per run); runs NULL with runs_len 0 asks for *n_runs only (OK); a
 * too-small buffer gives SHAPE (and *n_runs). *n_runs is 0 when every position has a
 * frame. Errors: BAD_HANDLE, INVALID_ARGUMENT (n_runs NULL), SHAPE. Thread-safe.
 */
stemdot_status stemdot_dataset_blanks(stemdot_dataset dataset, uint64_t *runs, size_t runs_len,
                                      size_t *n_runs);

/*
 * Writes the plan as JSON ({"cores_usable":..,"workers":[..],"partitions":[..]}) into
 * buf (NUL-terminated, at most buf_len bytes including the NUL) and its length without
 * the NUL into *needed. dataset may be 0 (no partitions). buf NULL with buf_len 0 asks
 * for the length only (OK, *needed set); a too-small buffer gives SHAPE (and *needed).
 */
stemdot_status stemdot_plan_describe(stemdot_plan plan, stemdot_dataset dataset, char *buf,
                                     size_t buf_len, size_t *needed);

/* Frees a plan handle. Applies already running with it are not affected. */
stemdot_status stemdot_plan_free(stemdot_plan plan);

/*
 * Creates a run handle: it lets another thread cancel an apply. A run serves one
 * apply at a time (a second concurrent apply on it fails with INVALID_ARGUMENT).
 */
stemdot_status stemdot_run_new(stemdot_run *out);

/*
 * Cancels the run: an apply running on it stops promptly (between tiles) and returns
 * STEMDOT_ERR_CANCELLED; an apply started later on it returns STEMDOT_ERR_CANCELLED at
 * once, until stemdot_run_reset. Safe to call from any thread (also from a progress
 * callback or a signal-handling thread, but not from a signal handler itself).
 */
stemdot_status stemdot_run_cancel(stemdot_run run);

/* Clears a cancellation so that the run can be reused. Fails if an apply is running. */
stemdot_status stemdot_run_reset(stemdot_run run);

/* Frees a run handle. Fails with INVALID_ARGUMENT while an apply is running on it. */
stemdot_status stemdot_run_free(stemdot_run run);

/*
 * Builds masks from a CLI --mask spec for frames of sig_y × sig_x pixels, with the same
 * generators as the stemdot CLI (bit-identical results):
 *   disk:CX,CY,R   ring:CX,CY,RI,RO   point:X,Y   rect:X,Y,W,H   com   com:CX,CY[,R]
 * (x = column, y = row, in pixels). Stores the mask count in *n_masks (com gives 3:
 * sum, y moment, x moment) and, when out is not NULL, writes n_masks × sig_y × sig_x
 * float32 weights (C order) into out, whose length in floats is out_len. Call with
 * out = NULL to ask for the count. Errors: INVALID_ARGUMENT (bad spec), SHAPE (out_len
 * too small, zero sig sizes). Thread-safe.
 */
stemdot_status stemdot_mask_parse(const char *spec, size_t sig_y, size_t sig_x, float *out,
                                  size_t out_len, size_t *n_masks);

/*
 * The direct beam's disk in a frame (in practice the scan's sum frame): frame holds
 * sig_y × sig_x doubles, C order; centre receives 3 doubles: the disk's centre x
 * (column) and y (row), in the masks' pixel coordinates (pixel centres at integers),
 * and its radius in pixels. The method (a maximally stable bright region measured at
 * half maximum above its surroundings: its intensity-weighted centroid and
 * sqrt(area/pi), or a circle fitted to its edge where the frame's edge cuts it) is
 * documented at the Go API's masks.FindCentre. Errors: INVALID_ARGUMENT (NULL; no disk
 * to find: a flat frame, noise only, NaN or infinite values, a disk cut by the frame's
 * edge showing half its circle or less), SHAPE (zero sizes). Thread-safe.
 */
stemdot_status stemdot_find_centre(const double *frame, size_t sig_y, size_t sig_x, double *centre);

/*
 * The direct beam's centre and radius (3 doubles x, y, r into centre, as
 * stemdot_find_centre) in the sum frame of a dataset: one reduction over its frames on
 * the CPU workers of plan (0: the default plan; its GPU workers are not used), then
 * stemdot_find_centre (`stemdot info --centre`). With shifts (n_shifts doubles, as
 * stemdot_apply_shifted takes them; NULL and 0 for none), every frame is moved back by
 * its shift first: the centre at zero shift, about which the auto specs' masks follow the
 * shifts (`stemdot apply --mask disk:auto --shifts ...`). Blocks until done. Errors:
 * BAD_HANDLE, INVALID_ARGUMENT (NULL centre; no disk to find, naming the sum frame; a
 * NaN or infinite shift), SHAPE (n_shifts), PLAN, IO, INTERNAL. Thread-safe.
 */
stemdot_status stemdot_centre(stemdot_dataset dataset, stemdot_plan plan, const double *shifts,
                              size_t n_shifts, double *centre);

/*
 * stemdot_mask_parse that also takes the auto specs, about the direct beam's centre
 * (centre: 3 doubles x, y, r, as stemdot_find_centre gives them):
 *   disk:auto (radius r)   disk:auto,R   ring:auto,RI,RO   com:auto   com:auto,R
 * stemdot_mask_parse refuses these, saying they need the centre. Errors as
 * stemdot_mask_parse; INVALID_ARGUMENT for a NULL centre. Thread-safe.
 */
stemdot_status stemdot_mask_parse_centred(const char *spec, size_t sig_y, size_t sig_x,
                                          const double *centre, float *out, size_t out_len,
                                          size_t *n_masks);

/*
 * Builds the mask stack of NPY mask files and CLI --mask specs for frames of sig_y × sig_x
 * pixels, exactly as `stemdot apply --masks FILE ... --mask SPEC ...` does (the Go API's
 * stemdot.MasksFrom): the masks of files[0], files[1], ... first, then those of specs[0],
 * specs[1], ..., in the order given. A file holds one mask (sig_y, sig_x) or a stack
 * (n, sig_y, sig_x) of bool, integer or float dtype; a spec is as for stemdot_mask_parse,
 * or, with centre (3 doubles x, y, r, as stemdot_find_centre gives them; NULL for none),
 * as for stemdot_mask_parse_centred (disk:auto, ...). files (n_files entries) and specs
 * (n_specs entries) may be NULL when their count is 0.
 *
 * Stores the mask count in *n_masks and, when out is not NULL, writes n_masks × sig_y ×
 * sig_x weights (C order) of out_dtype into out, whose length in elements is out_len:
 * STEMDOT_FLOAT32, as stemdot_apply takes them, or STEMDOT_FLOAT64, for stemdot_apply64
 * (float64 weights of a file then keep their precision, to within 2^-48, as with
 * `stemdot apply --float64`). When names_needed is not NULL, it also gives the masks' names, one per
 * line ("disk", "com_sum", "com_y", "com_x", "stack[0]" for mask 0 of stack.npy, ...; the
 * names of the CLI's PNG files), with the buffer conventions of stemdot_plan_describe
 * (names NULL with names_len 0 asks for the length). A call with out = NULL and names =
 * NULL asks for the sizes; each call builds the stack (and reads the files) again.
 * Errors: INVALID_ARGUMENT (NULL pointers, a bad spec, no file and no spec), IO (a file
 * missing or unreadable), FORMAT (a file that is not a mask NPY, non-finite weights),
 * SHAPE (masks of another sig shape, out_len or names_len too small), DTYPE (out_dtype,
 * a file of another dtype: complex, object, ...).
 * Thread-safe.
 */
stemdot_status stemdot_mask_stack(const char *const *files, size_t n_files,
                                  const char *const *specs, size_t n_specs, size_t sig_y,
                                  size_t sig_x, const double *centre, void *out,
                                  stemdot_dtype out_dtype,
                                  size_t out_len, size_t *n_masks, char *names,
                                  size_t names_len, size_t *names_needed);

/*
 * Applies a mask stack to every frame of a dataset.
 * masks: n_masks × sig_y × sig_x float32, C order (sig must equal the dataset's);
 *   read during the call only.
 * plan: 0 = the default plan (CPU workers on all usable cores).
 * run: 0 = not cancellable, else a run handle not in use by another apply.
 * progress, progress_user: optional callback (NULL = none), see stemdot_progress_fn.
 * out: caller-owned result buffer of out_len elements of out_dtype (STEMDOT_FLOAT32 or
 *   STEMDOT_FLOAT64; float64 accumulates in float64 too); out_len must equal
 *   n_frames*n_masks. Layout: out[f*n_masks + m], frame-major, i.e. C order of shape
 *   nav_shape + (n_masks,); for a dataset of a region of interest (option roi) the
 *   selected positions' frames, in scan order (stemdot_dataset_scan gives each one's
 *   scan position). On failure its content is unspecified.
 * Blocks until done. Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL pointers, run busy),
 * SHAPE (mask sig shape vs dataset, out_len), DTYPE (out_dtype), PLAN,
 * CUDA_UNAVAILABLE, IO (read errors; a file truncated or rewritten by another program
 * while it is read: "the file changed while being read", never a crash of the caller),
 * CANCELLED, INTERNAL.
 */
stemdot_status stemdot_apply(stemdot_dataset dataset, const float *masks, size_t n_masks,
                             size_t sig_y, size_t sig_x, stemdot_plan plan, stemdot_run run,
                             stemdot_progress_fn progress, void *progress_user, void *out,
                             stemdot_dtype out_dtype, size_t out_len);

/*
 * As stemdot_apply, with the mask weights as double. With STEMDOT_FLOAT64 results they
 * count at double precision (each weight is held as its float rounding plus the float
 * rounding of the rest, within 2^-48 of it, on CPU and GPU workers alike); with
 * STEMDOT_FLOAT32 results they are rounded to float, as stemdot_apply takes them. A mask
 * whose weights are not all 0 but all under 2^-102 in magnitude (float would round them
 * to 0 or to fewer bits) is refused: INVALID_ARGUMENT, naming the mask.
 */
stemdot_status stemdot_apply64(stemdot_dataset dataset, const double *masks, size_t n_masks,
                               size_t sig_y, size_t sig_x, stemdot_plan plan, stemdot_run run,
                               stemdot_progress_fn progress, void *progress_user, void *out,
                               stemdot_dtype out_dtype, size_t out_len);

/*
 * Reduces every frame of a dataset in one pass on CPU workers: each of sum, mean, max and
 * std that is not NULL receives that frame, out_len doubles (out_len must be
 * sig_y*sig_x), C order of shape (sig_y, sig_x); only the frames asked are computed.
 *   sum[i]  = Σ_f frame_f[i] (LiberTEM's SumUDF; exact for integer frames up to 2^53)
 *   mean[i] = sum[i] / n
 *   max[i]  = max_f frame_f[i]
 *   std[i]  = sqrt(Σ_f (frame_f[i] − mean[i])² / n): the population standard
 *             deviation (ddof 0), as LiberTEM's StdDevUDF and numpy's std; computed from
 *             shifted sums per worker merged by Chan et al.'s update (numerically stable)
 * over the n frames of the file: the positions without a frame (a sync offset's,
 * stemdot_dataset_blanks) are left out, as LiberTEM's StdDevUDF leaves them out (none
 * left: sum 0, mean, max and std NaN). A NaN pixel in any frame makes that pixel NaN in
 * each; ±Inf gives ±Inf sums, means and maxima (NaN where both occur) and a NaN std, as
 * numpy does.
 * plan: 0 = the default plan. Reductions are bound by memory bandwidth: they run on CPU
 *   workers only; a plan with gpus "auto" gives CPU workers, one with GPU workers by count
 *   or list is refused (INVALID_ARGUMENT naming option gpus).
 * run, progress, progress_user: as in stemdot_apply. On failure the buffers' content is
 *   unspecified. Blocks until done. Errors: BAD_HANDLE, INVALID_ARGUMENT (all buffers
 *   NULL, run busy, GPU workers), SHAPE (out_len), PLAN, IO, CANCELLED, INTERNAL.
 */
stemdot_status stemdot_reduce(stemdot_dataset dataset, stemdot_plan plan, stemdot_run run,
                              stemdot_progress_fn progress, void *progress_user, double *sum,
                              double *mean, double *max, double *std, size_t out_len);

/*
 * Copies the frames at n_positions scan positions into out, in the order given, in the
 * dataset's native dtype (host byte order), C order of shape (n_positions, sig_y, sig_x),
 * as LiberTEM's PickUDF. positions: n_positions × ndim coordinates, ndim = the nav
 * shape's dimensions ((y, x) for a 2-D nav shape, (n) for a 1-D one, (z, y, x) for a
 * 3-D one), each from 0 to its
 * size − 1. out_bytes must be n_positions × the frame's bytes. Errors: BAD_HANDLE,
 * INVALID_ARGUMENT (NULL pointers, no position), SHAPE (a position outside the nav shape
 * or with ndim other than the nav shape's, out_bytes), IO. Thread-safe.
 */
stemdot_status stemdot_pick(stemdot_dataset dataset, const size_t *positions, size_t n_positions,
                            size_t ndim, void *out, size_t out_bytes);

/*
 * As stemdot_apply (masks_dtype STEMDOT_FLOAT32: masks is float*) or stemdot_apply64
 * (STEMDOT_FLOAT64: double*), with the masks moved with the diffraction pattern (descan
 * compensation): the masks of frame f are applied moved by (dy, dx) pixels,
 *   out[f, m] = sum_{y,x} mask_m(y - dy, x - dx) * frame_f(y, x),
 * mask pixels moved outside the frame dropped, as LiberTEM's ApplyMasksUDF(shifts=...)
 * (a positive dy moves the masks down, a positive dx right); integer shifts exactly,
 * sub-pixel ones by the bilinear interpolation of the mask at (y - dy, x - dx).
 * shifts: n_shifts doubles, read during the call only: 2 (dy, dx for every frame), or 2
 * per scan position, C order of shape nav_shape + (2,) (with the option frames, of the
 * whole scan, or 2 per frame of the range), as stemdot_descan_fit writes them.
 * Errors: as stemdot_apply, and SHAPE (n_shifts neither 2 nor 2 per scan position),
 * INVALID_ARGUMENT (shifts NULL, a NaN or infinite shift), DTYPE (masks_dtype).
 */
stemdot_status stemdot_apply_shifted(stemdot_dataset dataset, const void *masks,
                                     stemdot_dtype masks_dtype, size_t n_masks, size_t sig_y,
                                     size_t sig_x, const double *shifts, size_t n_shifts,
                                     stemdot_plan plan, stemdot_run run,
                                     stemdot_progress_fn progress, void *progress_user,
                                     void *out, stemdot_dtype out_dtype, size_t out_len);

/*
 * Prepares a mask stack once, for many applies (stemdot_apply_masks): e.g. every frame
 * range a worker computes for one job. masks: n_masks × sig_y × sig_x weights, C order,
 * masks_dtype STEMDOT_FLOAT32 (float*) or STEMDOT_FLOAT64 (double*, held as
 * stemdot_apply64 holds them), read during the call only: the handle owns a copy. The
 * weights are checked once (a NaN or infinite weight is refused) and held in the form
 * every apply runs them (in compressed sparse rows when under 10 % of them are nonzero,
 * else dense), with their counts, so that an apply starts without scanning them: 0.8 ms
 * instead of 22 ms for 128 masks of 256×256 of which 3 % are nonzero. Stores the handle in
 * *out (0 on failure). Errors: INVALID_ARGUMENT (NULL pointers, a size 0, a NaN or
 * infinite weight, naming the mask and pixel), SHAPE (more than 2^31 - 1 weights),
 * DTYPE (masks_dtype), PLAN (a copy that does not fit in the memory left).
 */
stemdot_status stemdot_masks_new(const void *masks, stemdot_dtype masks_dtype, size_t n_masks,
                                 size_t sig_y, size_t sig_x, stemdot_masks *out);

/*
 * Frees a prepared mask stack. Safe while an apply runs with it (that apply keeps the
 * stack until it returns). Errors: BAD_HANDLE.
 */
stemdot_status stemdot_masks_free(stemdot_masks masks);

/*
 * As stemdot_apply (or stemdot_apply_shifted, with shifts), with a mask stack prepared by
 * stemdot_masks_new: results bit-identical to theirs on the same weights. shifts: NULL
 * with n_shifts 0 (unshifted), or as stemdot_apply_shifted takes them. Applies with one
 * handle may run at the same time on several threads. Errors: as stemdot_apply_shifted,
 * BAD_HANDLE (masks), INVALID_ARGUMENT (shifts NULL with n_shifts > 0).
 */
stemdot_status stemdot_apply_masks(stemdot_dataset dataset, stemdot_masks masks,
                                   const double *shifts, size_t n_shifts, stemdot_plan plan,
                                   stemdot_run run, stemdot_progress_fn progress,
                                   void *progress_user, void *out, stemdot_dtype out_dtype,
                                   size_t out_len);

/*
 * Fits the descan plane to the centre-of-mass shift map of a dataset (the Go API's
 * stemdot.DescanFit; `stemdot descan fit`): the com masks of spec com (NULL or "": "com";
 * "com:CX,CY[,R]"; "com:auto[,R]" about the direct beam's centre in the sum frame)
 * applied with plan (0: the default plan), their shifts fitted by least squares per
 * component, frames without counts left out:
 *   dy = coeffs[0] + coeffs[1]*y + coeffs[2]*x,   dx = coeffs[3] + coeffs[4]*y + coeffs[5]*x
 * in pixels, (y, x) the scan row and column from 0 (a nav shape (n,): y = 0, x = index);
 * coeffs[6] and coeffs[7] are the rms residuals of dy and dx. coeffs: 8 doubles. When
 * shifts is not NULL, writes the plane at every scan position of the scan the dataset's
 * frames come from (of an ROI or a frames range: the whole scan, stemdot_dataset_scan;
 * the positions not read are left out of the fit), 2 per position (dy, dx), C order of
 * shape scan_shape + (2,), as stemdot_apply_shifted takes them; shifts_len (doubles)
 * must be 2 * the scan's positions. *used (when not NULL): the scan
 * positions fitted. Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL coeffs, a bad spec, too
 * few frames with counts to fit a plane), SHAPE (shifts_len), and those of stemdot_apply.
 */
stemdot_status stemdot_descan_fit(stemdot_dataset dataset, const char *com, stemdot_plan plan,
                                  double *coeffs, double *shifts, size_t shifts_len,
                                  size_t *used);

/*
 * Centre-of-mass shift maps from a result of stemdot_apply whose masks n_masks include
 * the three com masks (stemdot_mask_parse "com": sum, y moment, x moment) at indices
 * sum_mask, sum_mask+1, sum_mask+2. For every frame f it writes, in pixels,
 *   shifts[2f] = y moment / sum,   shifts[2f+1] = x moment / sum
 * (the centre of mass relative to the com reference point, as LiberTEM's CoM analysis
 * gives it; NaN where the sum is 0). result: n_frames*n_masks values of result_dtype
 * (STEMDOT_FLOAT32 or STEMDOT_FLOAT64); shifts: 2*n_frames doubles. The default com
 * reference point is (sig_x/2, sig_y/2) in integer division, e.g. (128, 128) on 256×256
 * frames, as LiberTEM's. Errors: INVALID_ARGUMENT (NULL pointers, sum_mask+2 >= n_masks),
 * DTYPE, SHAPE (sizes overflow). Thread-safe.
 */
stemdot_status stemdot_com_shifts(const void *result, stemdot_dtype result_dtype, size_t n_frames,
                                  size_t n_masks, size_t sum_mask, double *shifts);

/*
 * CoM products of shift maps as stemdot_com_shifts writes them (shifts: 2*nav_y*nav_x
 * doubles, position-major, y then x, in pixels) over a scan of nav_y x nav_x positions
 * (at least 2 x 2), after flipping y (flip_y nonzero: y -> -y) and then rotating the
 * vectors by rotation degrees (y' = cos*y + sin*x, x' = -sin*y + cos*x), as LiberTEM's
 * CoM analysis (flip_y, scan_rotation). Each output that is not NULL receives nav_y*nav_x
 * doubles, row-major (field: 2*nav_y*nav_x, the corrected y, x): magnitude sqrt(y^2+x^2);
 * divergence dy/drow + dx/dcolumn and curl dy/dcolumn - dx/drow (numpy.gradient's
 * differences, per scan step); icom, the integrated CoM by Fourier integration,
 * F^-1[(kx F[x] + ky F[y]) / (2 pi i |k|^2)] with zero mean (Lazic et al. 2016). Positions
 * whose shift is not finite (frames summing to 0) are read as 0 by the iCoM; warning
 * (warning_len bytes, may be NULL) then receives a one-line warning naming them, NUL-
 * terminated and cut to fit, else "". Errors: INVALID_ARGUMENT (NULL shifts, a rotation
 * that is not finite), SHAPE (fewer than 2 x 2 positions, sizes overflow), PLAN (maps
 * that do not fit in memory). Thread-safe.
 */
stemdot_status stemdot_com_products(const double *shifts, size_t nav_y, size_t nav_x, double rotation,
                                    int flip_y, double *field, double *magnitude, double *divergence,
                                    double *curl, double *icom, char *warning, size_t warning_len);

/*
 * Copies every frame of a dataset into the memory of GPU device (0, 1, ...) once, in its
 * native dtype (n_frames * frame bytes), for stemdot_resident_apply; the dataset handle
 * stays valid and owned by the caller. Blocks until loaded. Errors: BAD_HANDLE,
 * INVALID_ARGUMENT (NULL out, no such device), CUDA_UNAVAILABLE (a build without CUDA, no
 * GPU), DTYPE (frames not uint8, uint16, uint32 or float32), PLAN (the frames and 256 MiB
 * of working space do not fit in the device's free memory: the message gives the bytes
 * needed and free), IO (read errors), INTERNAL.
 */
stemdot_status stemdot_to_device(stemdot_dataset dataset, int device, stemdot_resident *out);

/*
 * Applies a mask stack to every frame of a resident dataset on its GPU: as stemdot_apply
 * (same masks, out, out_dtype and out_len conventions and results), without plan, run or
 * progress; the frames do not cross PCIe again, only the masks and the results. Blocks
 * until done; calls on one handle run one at a time. Errors: BAD_HANDLE,
 * INVALID_ARGUMENT, SHAPE, DTYPE, INTERNAL (a CUDA failure).
 */
stemdot_status stemdot_resident_apply(stemdot_resident resident, const float *masks,
                                      size_t n_masks, size_t sig_y, size_t sig_x, void *out,
                                      stemdot_dtype out_dtype, size_t out_len);

/* As stemdot_resident_apply, with the mask weights as double (see stemdot_apply64). */
stemdot_status stemdot_resident_apply64(stemdot_resident resident, const double *masks,
                                        size_t n_masks, size_t sig_y, size_t sig_x, void *out,
                                        stemdot_dtype out_dtype, size_t out_len);

/* Frees the GPU memory of a resident dataset. Errors: BAD_HANDLE, INVALID_ARGUMENT (an
 * apply on it is running). */
stemdot_status stemdot_resident_free(stemdot_resident resident);

/*
 * Live streams: masks applied to a detector's frames while the scan runs (`stemdot
 * live`). stemdot_live_start connects to the detector and computes its acquisition on a
 * thread of the library's own; the caller polls snapshots of the result so far
 * (stemdot_live_poll), and at the end reads the final result (stemdot_live_wait), which
 * equals stemdot_apply's on the same frames (read from a file of them, e.g. the record)
 * bit for bit. Use:
 *
 *   stemdot_live live;
 *   stemdot_live_snapshot snap;
 *   float *out = NULL;
 *   size_t len = 0;
 *   if (stemdot_live_start("merlin://10.0.0.5", "nav_shape=256,256", masks, STEMDOT_FLOAT32,
 *                          n_masks, 256, 256, 0, &live) != STEMDOT_OK)
 *       return;                            // stemdot_last_error() says why
 *   for (;;) {
 *       if (stemdot_live_poll(live, 0.5, &snap, out, STEMDOT_FLOAT32, len) != STEMDOT_OK)
 *           break;                         // the run failed: stemdot_last_error()
 *       if (out == NULL && snap.seq > 0) { // the first snapshot: the result's size
 *           out = calloc(len = snap.n_frames * snap.n_masks, sizeof *out);
 *           continue;                      // poll again, into out
 *       }
 *       if (snap.final)
 *           break;                         // out: the final result (snap.partial: NaN at
 *                                          // the positions without a frame)
 *       // show out (NaN where not computed yet), snap.done, snap.rate, snap.missing, ...
 *   }
 *   stemdot_live_free(live);               // cancels the run if it still runs
 */

/*
 * A live run at one moment (stemdot_live_poll, stemdot_live_wait). Counts are of the
 * acquisition's frames (scan positions) since its header arrived, and only grow.
 */
typedef struct stemdot_live_snapshot {
    uint64_t seq;      /* snapshots published so far, the end included; 0: none yet (the
                          acquisition has not started: the shapes below are 0 and out is
                          left as it is) */
    int final;         /* 1: the run has ended with its result: out holds it */
    int partial;       /* 1 (with final): the acquisition ended before every frame came;
                          NaN at the positions without a frame (stemdot_live_missing) */
    size_t nav_ndim;                        /* the scan's nav dimensions (1..8) */
    size_t nav_shape[STEMDOT_MAX_NAV_DIMS]; /* nav_shape[0..nav_ndim-1]; rest 0 */
    size_t n_masks;                         /* the masks' count */
    uint64_t n_frames; /* scan positions, the product of nav_shape */
    uint64_t done;     /* frames computed: their rows of the result are final */
    uint64_t received; /* frames of the scan received */
    uint64_t missing;  /* positions whose frame the stream skipped or (at the end) that
                          never came */
    uint64_t late;     /* frames that came after they were counted missing (dropped) */
    uint64_t surplus;  /* frames with an index beyond the scan (ignored) */
    uint64_t repeated; /* frames that came twice (the first kept) */
    uint64_t stalls;   /* times the receiver waited for the workers (back-pressure: the
                          detector's sender waited, no frame was lost) */
    double elapsed;    /* seconds since the acquisition's header arrived */
    double rate;       /* frames computed per second since the previous snapshot */
} stemdot_live_snapshot;

/*
 * Starts a live run: receives one acquisition from the detector at source and applies
 * the masks to its frames as they arrive, on the workers of plan (0: the default plan),
 * and stores its handle in *out. Returns at once: connecting, waiting for the
 * acquisition and computing happen on the library's threads, and their errors end the
 * run (stemdot_live_poll and stemdot_live_wait return them).
 * source: merlin://HOST[:PORT] (Quantum Detectors Merlin's TCP data port, default 6342)
 *   or dectris://HOST[:PORT] (a DECTRIS detector's SIMPLON ZeroMQ stream, default port
 *   31001 for stream v2, 9999 for v1).
 * options: NULL or "", else "key=value;key=value" with keys
 *   passive     true: only listen for an acquisition someone else starts; default false:
 *               active mode starts it (Merlin's control port, DECTRIS's SIMPLON API)
 *               with as many frames as nav_shape has positions
 *   nav_shape   the scan shape, e.g. 256,256: the stream's where it gives one (Merlin's
 *               acquisition header), else this, else one row of the frames announced
 *   record      a file to record what is received to (merlin: a .mib with its .hdr;
 *               dectris: an .npy), which stemdot_open reads to the same result
 *   float64     true: compute the result in float64 (default float32: out_dtype of
 *               poll and wait follows)
 *   every       seconds between snapshots (default 0.1)
 *   shared      true: receive a share of a stream that several receivers share (passive
 *               DECTRIS only; see stemdot_live_share_state)
 *   the source options of the source's protocol (`stemdot live --help`):
 *     merlin:   control (HOST[:PORT], default HOST:6341), soft_trigger (true|false),
 *               idle_timeout (seconds)
 *     dectris:  stream (v1|v2, default v2), dectris_api (HOST[:PORT] of the SIMPLON API:
 *               needed in active mode), channel, pixel_mask (false keeps the flagged
 *               pixels' values), trigger_mode (ints|inte|exts|exte), nimages, ntrigger,
 *               start_timeout (seconds)
 *   e.g. "passive=true;nav_shape=64,64;stream=v1".
 * masks: n_masks × sig_y × sig_x weights of masks_dtype (STEMDOT_FLOAT32: float, or
 *   STEMDOT_FLOAT64: double, held as stemdot_apply64 holds them), C order, read during
 *   the call only; sig_y × sig_x must be the detector's frame shape (the run fails with
 *   SHAPE otherwise, once the acquisition's header says it).
 * plan: its workers are taken at the call; the plan handle may be freed after it.
 * Errors here: INVALID_ARGUMENT (NULL pointers, a source that is not SCHEME://HOST[:PORT]
 *   of a known scheme, an unknown option or one of another protocol, a bad value, active
 *   DECTRIS without dectris_api, a NaN or infinite weight), SHAPE (sizes, nav_shape),
 *   DTYPE (masks_dtype), BAD_HANDLE (plan), PLAN.
 * Errors of the run (from poll and wait): IO (connection refused or lost before the
 *   acquisition started, naming the address; a record that cannot be written), FORMAT
 *   (a malformed stream), SHAPE (masks of another sig shape, a nav_shape that does not
 *   fit the acquisition), INVALID_ARGUMENT, CANCELLED (stemdot_live_cancel), INTERNAL.
 *   An acquisition that ends early (aborted, the connection lost mid-scan, fewer frames
 *   than the scan) is no error: its result is final with partial set.
 * Thread-safe.
 */
stemdot_status stemdot_live_start(const char *source, const char *options, const void *masks,
                                  stemdot_dtype masks_dtype, size_t n_masks, size_t sig_y,
                                  size_t sig_x, stemdot_plan plan, stemdot_live *out);

/*
 * Copies the run's latest snapshot into *snap and, when out is not NULL and a snapshot
 * is out (snap->seq > 0), its result into out: n_frames × n_masks values (frame-major,
 * frame f at scan position f in C order over nav_shape) of out_dtype, which must be the
 * run's (STEMDOT_FLOAT32; STEMDOT_FLOAT64 with option float64), out_len (values) exactly
 * n_frames × n_masks; NaN at the positions not computed yet. A position's values, once
 * computed, do not change. Waits up to timeout seconds (0 to 3600; 0: not at all) for a
 * snapshot newer than the one this handle's last poll or wait returned, or for the end.
 * With snap->final set, out holds the final result (as stemdot_live_wait gives it).
 * When the run failed, returns its error (every later call too), *snap holding the
 * counts so far and out left as it is. Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL snap,
 * timeout), DTYPE (out_dtype), SHAPE (out_len), and the run's (stemdot_live_start).
 * Thread-safe: may run on any thread beside wait and cancel.
 */
stemdot_status stemdot_live_poll(stemdot_live live, double timeout, stemdot_live_snapshot *snap,
                                 void *out, stemdot_dtype out_dtype, size_t out_len);

/*
 * Waits for the end of the run and fills *snap and out as stemdot_live_poll does: on
 * success snap->final is 1 and out (unless NULL) holds the final result, with NaN at the
 * positions without a frame of a partial acquisition (snap->partial). Blocks until the
 * acquisition ends or the run is cancelled (from another thread); a passive run waits
 * for an acquisition to start. Errors: as stemdot_live_poll.
 */
stemdot_status stemdot_live_wait(stemdot_live live, stemdot_live_snapshot *snap, void *out,
                                 stemdot_dtype out_dtype, size_t out_len);

/*
 * Cancels the run: the receiver disconnects (in active mode it stops the detector's
 * acquisition first), the workers stop between tiles, and poll and wait then return
 * STEMDOT_ERR_CANCELLED. Returns at once; a run that has already ended keeps its
 * outcome. Thread-safe (not from a signal handler). Errors: BAD_HANDLE.
 */
stemdot_status stemdot_live_cancel(stemdot_live live);

/*
 * The scan positions without a frame of a run that has ended with a partial result
 * (NaN in it): *n_runs runs written into runs as (first, count) pairs of flat scan
 * positions (C order over nav_shape), ascending, as stemdot_dataset_blanks writes them
 * (runs NULL with runs_len 0 asks for *n_runs; 0 runs for a complete acquisition).
 * Errors: BAD_HANDLE, INVALID_ARGUMENT (n_runs NULL; the run has not ended), SHAPE
 * (runs_len), and the error of a run that failed.
 */
stemdot_status stemdot_live_missing(stemdot_live live, uint64_t *runs, size_t runs_len,
                                    size_t *n_runs);

/*
 * What the user should know about a run that has ended, one line each ("" for none): how
 * the acquisition was received (a pixel mask applied), a partial acquisition (why it
 * ended, the positions without a frame). Same buffer conventions as
 * stemdot_plan_describe. Errors: as stemdot_live_missing.
 */
stemdot_status stemdot_live_warnings(stemdot_live live, char *buf, size_t buf_len, size_t *needed);

/*
 * The sidecar JSON of the result of a run that has ended, as `stemdot live --out R.npy`
 * writes it beside R.npy (the Go API's ResultInfo: shape, dtype, nav and sig shapes,
 * masks, plan, and "live": source, detector, partial, ended_by, received, missing,
 * late, surplus, repeated, stalls, positions_without_frame, record). Same buffer
 * conventions as stemdot_plan_describe. Errors: as stemdot_live_missing.
 */
stemdot_status stemdot_live_info(stemdot_live live, char *buf, size_t buf_len, size_t *needed);

/*
 * Frees a live run handle; a run still running is cancelled first. Blocks until the
 * run's threads have stopped (promptly: at the cancellation the receiver's waits and the
 * workers end). Calls on the handle blocked in stemdot_live_wait or stemdot_live_poll on
 * other threads then return (CANCELLED, unless the run had ended), and later calls with
 * it fail with BAD_HANDLE. Errors: BAD_HANDLE.
 */
stemdot_status stemdot_live_free(stemdot_live live);

/*
 * Live streams shared by several receivers (stemdot.dask.live): a DECTRIS detector's
 * stream deals its frames out in turn to every connected receiver (ZeroMQ PUSH to PULL
 * sockets), one per node. Each node starts a run with options "passive=true;shared=true"
 * (and nav_shape: the scan's positions bound the frame indices); the caller (the client
 * of all of them):
 *   1. polls stemdot_live_share_state until every run's socket is connected, then arms
 *      the detector (SIMPLON API: PUT .../command/arm);
 *   2. passes the series' header, which comes to one run only (its share state's
 *      "header"), to the others (stemdot_live_share_give with {"header": ...});
 *   3. takes each run's rows as they are computed (stemdot_live_take: values and frame
 *      indices) and merges them by frame index;
 *   4. passes the series' end, which comes to one run only ("end_seen"), to all
 *      ({"end": true}), after which each run ends once its socket is quiet.
 * The frames no run received are the acquisition's missing ones.
 */

/*
 * The state of a shared run as JSON text: {"connected": true|false (its socket is
 * connected to the stream), "header": null, or the series' header message that came to
 * this run, as its parts in base64 (["...", ...], to pass on unchanged), "end_seen":
 * true|false (the series' end message came to this run)}. Same buffer conventions as
 * stemdot_plan_describe. Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL needed; a run
 * without option shared), SHAPE (buf_len). Thread-safe.
 */
stemdot_status stemdot_live_share_state(stemdot_live live, char *buf, size_t buf_len, size_t *needed);

/*
 * Passes what another run of the stream received to a shared run, message a JSON
 * object with "header": the other run's share state's header (the run waits for a
 * header: frames that came before it are kept), and/or "end": true (the series has
 * ended: the run takes what its socket still delivers until it is quiet for 0.2 s, then
 * ends). Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL message, not such JSON, a header
 * given twice, a run without option shared). Thread-safe.
 */
stemdot_status stemdot_live_share_give(stemdot_live live, const char *message);

/*
 * Takes the rows a shared run has computed since the last take: waits up to timeout
 * seconds (0 to 3600) for some (not once the run has ended), then writes at most
 * max_rows of them into rows (max_rows × n_masks values of rows_dtype, the run's:
 * STEMDOT_FLOAT32, STEMDOT_FLOAT64 with option float64), row-major, and the frame index
 * of each (its scan position, flat in C order over nav_shape) into indices, *n_rows the
 * rows written; each row is taken once. *snap is filled as stemdot_live_poll fills it
 * (n_frames: the scan's positions; done: the rows computed; received: the frames this
 * run received), snap->final set once the run has ended and every row has been taken.
 * A run whose stream failed ends with the rows of the frames it received (partial).
 * Errors: BAD_HANDLE, INVALID_ARGUMENT (NULL snap or n_rows, NULL rows or indices with
 * max_rows > 0, timeout, a run without option shared), DTYPE (rows_dtype), SHAPE
 * (max_rows), and the run's (stemdot_live_start). Thread-safe.
 */
stemdot_status stemdot_live_take(stemdot_live live, double timeout, stemdot_live_snapshot *snap,
                                 void *rows, stemdot_dtype rows_dtype, size_t max_rows,
                                 uint64_t *indices, size_t *n_rows);

/*
 * The viewer: stemdot view's server (`stemdot view FILE`: an interactive virtual detector
 * in the browser, its page served from the library) of a dataset, on the library's
 * threads, for a host program that shows it, e.g. Python's stemdot.view in a notebook's
 * IFrame. Use:
 *
 *   stemdot_view view;
 *   char url[256];
 *   size_t n;
 *   if (stemdot_view_start(ds, "frame_ancestors=http://localhost:8888", &view) != STEMDOT_OK ||
 *       stemdot_view_url(view, url, sizeof url, &n) != STEMDOT_OK)
 *       return;                            // stemdot_last_error() says why
 *   // show url (http://127.0.0.1:PORT/TOKEN/) in a browser or a frame ...
 *   stemdot_view_free(view);               // stops the server
 */

/*
 * Starts the viewer's server of dataset and stores its handle in *out. Returns once it
 * listens: its first pass (the sum, mean and max frames) and the page's requests run on
 * the library's threads until stemdot_view_free; a server still running when the process
 * exits ends with it (nothing outlives the process). The dataset handle is in use until
 * then: stemdot_dataset_free refuses it (INVALID_ARGUMENT); a dataset from memory reads
 * the caller's frames meanwhile. Every URL of the server starts with its random token
 * (128 bits), and it answers only requests whose Host is an IP address, localhost or one
 * of option hosts; only the pages of option frame_ancestors may show it in a frame. Its
 * page's URLs are relative: it works under a proxy's path prefix (jupyter-server-proxy's
 * /proxy/PORT/ in front of the token).
 * options: NULL or "", else "key=value;key=value" with keys
 *   listen      HOST:PORT to listen on (default 127.0.0.1:0: loopback only, any free
 *               port; 0.0.0.0:PORT lets other machines in, the token guarding it)
 *   name        the dataset's name shown on the page (default: its path; "frames in
 *               memory" for stemdot_dataset_from_memory's)
 *   command     the CLI command that opens the dataset, to which the page adds the
 *               detector's --mask and --out, e.g. "stemdot apply scan.mib --nav-shape=64,64"
 *               (default: none, and the page shows no command)
 *   frame_ancestors  the pages that may show the viewer in a frame (an IFrame): the
 *               sources of the Content-Security-Policy frame-ancestors directive,
 *               separated by blanks, e.g. "http://localhost:8888" or "*" (default 'none',
 *               as stemdot view: no page)
 *   hosts       host names accepted in a request's Host header besides IP addresses and
 *               localhost, separated by commas; "*" accepts any (behind a proxy that
 *               passes on the browser's Host, as jupyter-server-proxy does)
 *   the plan's keys (stemdot_plan_new_options: cpus, gpus, oversubscribe, ...): the
 *               workers of the virtual images; the first pass runs on its CPU workers
 *               (default: CPU workers on every usable core)
 * Errors: INVALID_ARGUMENT (NULL out, an unknown or bad option), BAD_HANDLE (dataset),
 *   SHAPE (a dataset of 3 nav dimensions: give a nav_shape of 2), IO (listen: an address
 *   in use or not of this machine), PLAN, CUDA_UNAVAILABLE. Thread-safe.
 */
stemdot_status stemdot_view_start(stemdot_dataset dataset, const char *options, stemdot_view *out);

/*
 * The viewer's URL, http://HOST:PORT/TOKEN/ (HOST 127.0.0.1 for a server listening on
 * every address). Same buffer conventions as stemdot_plan_describe. Errors: BAD_HANDLE,
 * INVALID_ARGUMENT, SHAPE (buf_len). Thread-safe.
 */
stemdot_status stemdot_view_url(stemdot_view view, char *buf, size_t buf_len, size_t *needed);

/*
 * Stops the viewer's server and frees its handle: the page's requests in progress and
 * the first pass are cancelled, and it returns once they have ended and the port is
 * closed; the dataset handle is free to be freed then. Errors: BAD_HANDLE. Thread-safe.
 */
stemdot_status stemdot_view_free(stemdot_view view);

/*
 * The command line. stemdot_cli_main runs the stemdot command line argv[1..argc) (argv[0],
 * the program's name, is not read) and returns its exit status: 0, or 1 after an error
 * (printed on stderr as "NAME: ...", naming the flag that helps) or an interrupt. With
 * backend NULL it runs stemdot's apply and sum commands on this machine, as the stemdot
 * binary does (without handling signals). With a backend it runs the same apply and sum
 * commands (the default: apply) with the flags of the backend added (`NAME --help` lists
 * them), computed by the backend's callback: the same flags, checks, mask stack,
 * centre, outputs (RESULT.npy, RESULT.json, PNGs, COM shift maps, written all or
 * nothing), warnings, messages and exit statuses as the stemdot binary's, only the
 * prefix of the messages and the plan's workers in RESULT.json differing. python -m
 * stemdot.dask is such a backend (the Dask cluster's workers read the file; this process
 * need not). Signals are not handled here: a callback that sees an interrupt returns the
 * status STEMDOT_ERR_CANCELLED, and the command writes nothing and returns 1. Returns 1
 * also in a forked child (see above). Not thread-safe: one command at a time per process.
 */

/* A flag of a backend: --NAME, a string (repeatable: a list of strings, each given with
 * its own --NAME), default_value (NULL: none), usage the help text (a word in backquotes
 * names its value: "the scheduler's `ADDRESS`"). */
typedef struct stemdot_cli_flag {
    const char *name;
    const char *default_value;
    const char *usage;
    int repeatable;
} stemdot_cli_flag;

/*
 * The backend's callback: runs operation op ("check", "open", "centre", "apply",
 * "reduce") with request, a JSON object, and returns its reply, a JSON object in UTF-8
 * owned by the callback and valid until its next call (or until stemdot_cli_main
 * returns). On failure the reply is {"error": "message", "status": STEMDOT_ERR_...}
 * (STEMDOT_ERR_CANCELLED: interrupted). masks (apply: the mask stack, float32, or float64
 * when the request's "float64" is true, C order (n_masks, sig_y, sig_x)) and shifts (as
 * stemdot_apply_shifted takes them) are read during the call only; out (apply: n_frames ×
 * n_masks values of the result's dtype, frame-major; reduce: one sig_y × sig_x frame of
 * doubles per reduction asked) is filled by the callback. The operations, requests and
 * replies are documented at the Go package cmd/internal/cli (Remote). It runs on the thread
 * that called stemdot_cli_main.
 */
typedef const char *(*stemdot_cli_fn)(void *user, const char *op, const char *request,
                                      const void *masks, size_t masks_bytes,
                                      const double *shifts, size_t n_shifts, void *out,
                                      size_t out_bytes);

/* A backend of stemdot_cli_main: name starts its messages ("stemdot.dask"); use is the
 * command as typed, for the help ("python -m stemdot.dask"); flags[0..n_flags) its own
 * flags; call its callback, given user. */
typedef struct stemdot_cli_backend {
    const char *name;
    const char *use;
    const stemdot_cli_flag *flags;
    size_t n_flags;
    stemdot_cli_fn call;
    void *user;
} stemdot_cli_backend;

int stemdot_cli_main(int argc, char **argv, const stemdot_cli_backend *backend);

#ifdef __cplusplus
}
#endif

#endif /* STEMDOT_H */
