/*
 * Internal C helpers of the cgo layer (not part of the public ABI; see
 * include/stemdot.h for that).
 */
#ifndef STEMDOT_SHIM_H
#define STEMDOT_SHIM_H

#include "stemdot.h"

/*
 * Const-qualified aliases for the parameters of Go-exported functions: cgo writes an
 * exported function's prototype from the Go parameter types and has no const, so these
 * typedef names make its prototype identical to the one in stemdot.h, which the C
 * compiler then checks.
 */
typedef const char stemdot_cchar;
typedef const float stemdot_cfloat;
typedef const double stemdot_cdouble;
typedef const void stemdot_cvoid;
typedef const size_t stemdot_csize;
typedef const char *const stemdot_cstring;

/*
 * The functions of stemdot.h that enter Go, as F(name, parameters, arguments), or
 * H(...) for those that store a handle in *out. Go exports each as stemdot_go_<name>,
 * declared here hidden (no part of the library's interface); abi.c defines the public
 * stemdot_<name> around it, refusing calls in a forked child before Go is entered.
 */
#define STEMDOT_GO_FUNCTIONS(F, H)                                                                 \
    H(open, (const char *path, const char *options, stemdot_dataset *out), (path, options, out))   \
    H(dataset_from_memory,                                                                        \
      (const void *frames, size_t frames_bytes, stemdot_dtype dtype, size_t nav_ndim,             \
       const size_t *nav_shape, size_t sig_y, size_t sig_x, stemdot_dataset *out),               \
      (frames, frames_bytes, dtype, nav_ndim, nav_shape, sig_y, sig_x, out))                      \
    F(dataset_get_info, (stemdot_dataset dataset, stemdot_dataset_info *info), (dataset, info))   \
    F(dataset_free, (stemdot_dataset dataset), (dataset))                                         \
    H(plan_new, (const char *cpus, const char *gpus, stemdot_plan *out), (cpus, gpus, out))       \
    H(plan_new_options, (const char *options, stemdot_plan *out), (options, out))                 \
    F(plan_describe,                                                                              \
      (stemdot_plan plan, stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed),    \
      (plan, dataset, buf, buf_len, needed))                                                      \
    F(dataset_warnings, (stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed),     \
      (dataset, buf, buf_len, needed))                                                            \
    F(dataset_run_notes,                                                                          \
      (stemdot_dataset dataset, size_t first, size_t count, char *buf, size_t buf_len,            \
       size_t *needed),                                                                           \
      (dataset, first, count, buf, buf_len, needed))                                              \
    F(dataset_format, (stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed),       \
      (dataset, buf, buf_len, needed))                                                            \
    F(dataset_path, (stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed),         \
      (dataset, buf, buf_len, needed))                                                            \
    F(dataset_calibration, (stemdot_dataset dataset, char *buf, size_t buf_len, size_t *needed),  \
      (dataset, buf, buf_len, needed))                                                            \
    H(dataset_select, (stemdot_dataset dataset, const char *roi, stemdot_dataset *out),           \
      (dataset, roi, out))                                                                        \
    F(dataset_scan,                                                                               \
      (stemdot_dataset dataset, int *is_roi, size_t *scan_ndim, size_t *scan_shape,               \
       uint64_t *positions, size_t positions_len),                                                \
      (dataset, is_roi, scan_ndim, scan_shape, positions, positions_len))                         \
    F(dataset_blanks, (stemdot_dataset dataset, uint64_t *runs, size_t runs_len, size_t *n_runs), \
      (dataset, runs, runs_len, n_runs))                                                          \
    F(plan_free, (stemdot_plan plan), (plan))                                                     \
    H(run_new, (stemdot_run *out), (out))                                                         \
    F(run_cancel, (stemdot_run run), (run))                                                       \
    F(run_reset, (stemdot_run run), (run))                                                        \
    F(run_free, (stemdot_run run), (run))                                                         \
    F(mask_parse,                                                                                 \
      (const char *spec, size_t sig_y, size_t sig_x, float *out, size_t out_len, size_t *n_masks),\
      (spec, sig_y, sig_x, out, out_len, n_masks))                                                \
    F(mask_parse_centred,                                                                         \
      (const char *spec, size_t sig_y, size_t sig_x, const double *centre, float *out,            \
       size_t out_len, size_t *n_masks),                                                          \
      (spec, sig_y, sig_x, centre, out, out_len, n_masks))                                        \
    F(find_centre, (const double *frame, size_t sig_y, size_t sig_x, double *centre),             \
      (frame, sig_y, sig_x, centre))                                                              \
    F(centre,                                                                                     \
      (stemdot_dataset dataset, stemdot_plan plan, const double *shifts, size_t n_shifts,         \
       double *centre),                                                                           \
      (dataset, plan, shifts, n_shifts, centre))                                                  \
    F(mask_stack,                                                                                 \
      (const char *const *files, size_t n_files, const char *const *specs, size_t n_specs,        \
       size_t sig_y, size_t sig_x, const double *centre, void *out, stemdot_dtype out_dtype,      \
       size_t out_len, size_t *n_masks, char *names, size_t names_len, size_t *names_needed),     \
      (files, n_files, specs, n_specs, sig_y, sig_x, centre, out, out_dtype, out_len, n_masks,    \
       names, names_len, names_needed))                                                                  \
    F(apply,                                                                                      \
      (stemdot_dataset dataset, const float *masks, size_t n_masks, size_t sig_y, size_t sig_x,   \
       stemdot_plan plan, stemdot_run run, stemdot_progress_fn progress, void *progress_user,     \
       void *out, stemdot_dtype out_dtype, size_t out_len),                                       \
      (dataset, masks, n_masks, sig_y, sig_x, plan, run, progress, progress_user, out, out_dtype, \
       out_len))                                                                                  \
    F(apply64,                                                                                    \
      (stemdot_dataset dataset, const double *masks, size_t n_masks, size_t sig_y, size_t sig_x,  \
       stemdot_plan plan, stemdot_run run, stemdot_progress_fn progress, void *progress_user,     \
       void *out, stemdot_dtype out_dtype, size_t out_len),                                       \
      (dataset, masks, n_masks, sig_y, sig_x, plan, run, progress, progress_user, out, out_dtype, \
       out_len))                                                                                  \
    F(reduce,                                                                                     \
      (stemdot_dataset dataset, stemdot_plan plan, stemdot_run run, stemdot_progress_fn progress, \
       void *progress_user, double *sum, double *mean, double *max, double *std, size_t out_len), \
      (dataset, plan, run, progress, progress_user, sum, mean, max, std, out_len))                \
    F(pick,                                                                                       \
      (stemdot_dataset dataset, const size_t *positions, size_t n_positions, size_t ndim,         \
       void *out, size_t out_bytes),                                                              \
      (dataset, positions, n_positions, ndim, out, out_bytes))                                    \
    F(apply_shifted,                                                                              \
      (stemdot_dataset dataset, const void *masks, stemdot_dtype masks_dtype, size_t n_masks,     \
       size_t sig_y, size_t sig_x, const double *shifts, size_t n_shifts, stemdot_plan plan,      \
       stemdot_run run, stemdot_progress_fn progress, void *progress_user, void *out,             \
       stemdot_dtype out_dtype, size_t out_len),                                                  \
      (dataset, masks, masks_dtype, n_masks, sig_y, sig_x, shifts, n_shifts, plan, run, progress, \
       progress_user, out, out_dtype, out_len))                                                   \
    H(masks_new,                                                                                  \
      (const void *masks, stemdot_dtype masks_dtype, size_t n_masks, size_t sig_y, size_t sig_x,  \
       stemdot_masks *out),                                                                       \
      (masks, masks_dtype, n_masks, sig_y, sig_x, out))                                           \
    F(masks_free, (stemdot_masks masks), (masks))                                                 \
    F(apply_masks,                                                                                \
      (stemdot_dataset dataset, stemdot_masks masks, const double *shifts, size_t n_shifts,       \
       stemdot_plan plan, stemdot_run run, stemdot_progress_fn progress, void *progress_user,     \
       void *out, stemdot_dtype out_dtype, size_t out_len),                                       \
      (dataset, masks, shifts, n_shifts, plan, run, progress, progress_user, out, out_dtype,      \
       out_len))                                                                                  \
    F(descan_fit,                                                                                 \
      (stemdot_dataset dataset, const char *com, stemdot_plan plan, double *coeffs,               \
       double *shifts, size_t shifts_len, size_t *used),                                          \
      (dataset, com, plan, coeffs, shifts, shifts_len, used))                                     \
    F(com_shifts,                                                                                 \
      (const void *result, stemdot_dtype result_dtype, size_t n_frames, size_t n_masks,           \
       size_t sum_mask, double *shifts),                                                          \
      (result, result_dtype, n_frames, n_masks, sum_mask, shifts))                                \
    F(com_products,                                                                               \
      (const double *shifts, size_t nav_y, size_t nav_x, double rotation, int flip_y,             \
       double *field, double *magnitude, double *divergence, double *curl, double *icom,          \
       char *warning, size_t warning_len),                                                        \
      (shifts, nav_y, nav_x, rotation, flip_y, field, magnitude, divergence, curl, icom, warning, \
       warning_len))                                                                              \
    H(to_device, (stemdot_dataset dataset, int device, stemdot_resident *out),                    \
      (dataset, device, out))                                                                     \
    F(resident_apply,                                                                             \
      (stemdot_resident resident, const float *masks, size_t n_masks, size_t sig_y, size_t sig_x, \
       void *out, stemdot_dtype out_dtype, size_t out_len),                                       \
      (resident, masks, n_masks, sig_y, sig_x, out, out_dtype, out_len))                          \
    F(resident_apply64,                                                                           \
      (stemdot_resident resident, const double *masks, size_t n_masks, size_t sig_y,              \
       size_t sig_x, void *out, stemdot_dtype out_dtype, size_t out_len),                         \
      (resident, masks, n_masks, sig_y, sig_x, out, out_dtype, out_len))                          \
    F(resident_free, (stemdot_resident resident), (resident))                                     \
    H(live_start,                                                                                 \
      (const char *source, const char *options, const void *masks, stemdot_dtype masks_dtype,     \
       size_t n_masks, size_t sig_y, size_t sig_x, stemdot_plan plan, stemdot_live *out),         \
      (source, options, masks, masks_dtype, n_masks, sig_y, sig_x, plan, out))                    \
    F(live_poll,                                                                                  \
      (stemdot_live live, double timeout, stemdot_live_snapshot *snap, void *out,                 \
       stemdot_dtype out_dtype, size_t out_len),                                                  \
      (live, timeout, snap, out, out_dtype, out_len))                                             \
    F(live_wait,                                                                                  \
      (stemdot_live live, stemdot_live_snapshot *snap, void *out, stemdot_dtype out_dtype,        \
       size_t out_len),                                                                           \
      (live, snap, out, out_dtype, out_len))                                                      \
    F(live_cancel, (stemdot_live live), (live))                                                   \
    F(live_missing, (stemdot_live live, uint64_t *runs, size_t runs_len, size_t *n_runs),         \
      (live, runs, runs_len, n_runs))                                                             \
    F(live_warnings, (stemdot_live live, char *buf, size_t buf_len, size_t *needed),              \
      (live, buf, buf_len, needed))                                                               \
    F(live_info, (stemdot_live live, char *buf, size_t buf_len, size_t *needed),                  \
      (live, buf, buf_len, needed))                                                               \
    F(live_free, (stemdot_live live), (live))                                                     \
    F(live_share_state, (stemdot_live live, char *buf, size_t buf_len, size_t *needed),           \
      (live, buf, buf_len, needed))                                                               \
    F(live_share_give, (stemdot_live live, const char *message), (live, message))                 \
    F(live_take,                                                                                  \
      (stemdot_live live, double timeout, stemdot_live_snapshot *snap, void *rows,                \
       stemdot_dtype rows_dtype, size_t max_rows, uint64_t *indices, size_t *n_rows),             \
      (live, timeout, snap, rows, rows_dtype, max_rows, indices, n_rows))                         \
    H(view_start, (stemdot_dataset dataset, const char *options, stemdot_view *out),             \
      (dataset, options, out))                                                                    \
    F(view_url, (stemdot_view view, char *buf, size_t buf_len, size_t *needed),                   \
      (view, buf, buf_len, needed))                                                               \
    F(view_free, (stemdot_view view), (view))

#define STEMDOT_GO_DECLARE(name, params, args) \
    __attribute__((visibility("hidden"))) stemdot_status stemdot_go_##name params;
STEMDOT_GO_FUNCTIONS(STEMDOT_GO_DECLARE, STEMDOT_GO_DECLARE)
#undef STEMDOT_GO_DECLARE

/* Nonzero in a child forked from a process that had loaded the library (set by the
 * pthread_atfork child handler of shim.c). */
__attribute__((visibility("hidden"))) extern int stemdot_capi_forked;

/* Sets the last error of a call of fn in a forked child and returns STEMDOT_ERR_FORKED. */
__attribute__((visibility("hidden"))) stemdot_status stemdot_capi_refuse_forked(const char *fn);

/* Sets the calling thread's last error message to msg[0..n) (truncated to 4095 bytes). */
__attribute__((visibility("hidden"))) void stemdot_capi_set_error(const char *msg, size_t n);

/* Calls a progress callback: cgo cannot call a C function pointer directly. */
__attribute__((visibility("hidden"))) void stemdot_capi_call_progress(stemdot_progress_fn fn, uint64_t done, uint64_t total,
                                void *user);

/* Calls a command line backend's callback (stemdot_cli_main). */
__attribute__((visibility("hidden"))) const char *stemdot_capi_call_cli(const stemdot_cli_backend *backend, const char *op,
                                const char *request, const void *masks, size_t masks_bytes,
                                const double *shifts, size_t n_shifts, void *out, size_t out_bytes);

/* The Go export behind stemdot_cli_main (abi.c refuses a forked child first). */
__attribute__((visibility("hidden"))) int stemdot_go_cli_main(int argc, char **argv, stemdot_cli_backend *backend);

#endif
