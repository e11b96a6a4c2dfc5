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

/* Sets the calling thread's last error message to msg[0..n) (truncated to 4095 bytes). */
__attribute__((visibility("hidden"))) void stemdot_capi_set_error(const char *msg, size_t n);

/* Calls a progress callback: cgo cannot call a C function pointer directly. */
__attribute__((visibility("hidden"))) void stemdot_capi_call_progress(stemdot_progress_fn fn, uint64_t done, uint64_t total,
                                void *user);

#endif
