// runtime.cuh: what runtime.cu shares with resident.cu: status helpers, the device-resident
// mask stack and the launcher of the mask-dot kernel for a stack. Internal to
// libstemdot_kernels.a.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <limits>

#include "stemdot_kernels.h"

// Status of a failed CUDA call fn.
#define STEMDOT_FAIL(code, fn) (stemdot_status{int(code), fn})
// Calls a CUDA runtime function and returns its status from the enclosing function when
// it fails.
#define CUDA_TRY(fn, ...)                                              \
    do {                                                               \
        const cudaError_t err_ = fn(__VA_ARGS__);                      \
        if (err_ != cudaSuccess) return STEMDOT_FAIL(err_, #fn);       \
    } while (0)

struct stemdot_masks {
    int device = 0;
    std::atomic<int> refs{1};
    int n_masks = 0;
    int64_t pixels = 0;
    bool sparse = false;
    // Dense: n_groups*mask_group rows of pixels weights, padding rows zero.
    int mask_group = 0;
    int n_groups = 0;
    float *dense = nullptr;
    // CSR.
    int32_t *rowptr = nullptr;
    int32_t *col = nullptr;
    float *val = nullptr;
};

namespace stemdot {

constexpr stemdot_status kOK = {0, nullptr};

inline stemdot_status invalid(int code = STEMDOT_ERR_INVALID_ARGUMENT) {
    return {code, "stemdot"};
}

// First failure of a sequence of cleanup calls.
struct FirstError {
    stemdot_status st = kOK;
    void check(cudaError_t err, const char *fn) {
        if (err != cudaSuccess && st.code == 0) st = STEMDOT_FAIL(err, fn);
    }
};

// Bytes of one pixel of a STEMDOT_* dtype, 0 for an unknown dtype.
inline size_t dtype_size(int dtype) {
    switch (dtype) {
    case STEMDOT_UINT8: return 1;
    case STEMDOT_UINT16: return 2;
    case STEMDOT_UINT32: return 4;
    case STEMDOT_FLOAT32: return 4;
    }
    return 0;
}

// Bytes of one pixel of the frames of a runner with shifts, whose g_f kernel reads every
// STEMDOT_* dtype; 0 for an unknown dtype.
inline size_t shifted_dtype_size(int dtype) {
    switch (dtype) {
    case STEMDOT_INT8: return 1;
    case STEMDOT_INT16: return 2;
    case STEMDOT_INT32: return 4;
    case STEMDOT_FLOAT64: return 8;
    }
    return dtype_size(dtype);
}

// a*b, or false when it overflows int64.
inline bool mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
    *out = a * b;
    return true;
}

// Partial-sum workspace (elements) the dense kernel wants for n_frames frames of elem-byte
// pixels on a device of sm_count SMs; 0 for a CSR stack or a kernel without split-K.
int64_t partial_elems(const stemdot_masks *m, int elem, int64_t n_frames, int sm_count);

// Enqueues on stream the mask-dot kernel of stack m (its device current) for n_frames
// frames of dtype at dev_in, results (float, or double when f64) to dev_out; dev_partial
// is the split-K workspace of partial_cap doubles, whatever the result type (may be null:
// no split).
stemdot_status launch_masks(const stemdot_masks *m, int dtype, bool f64, int sm_count,
                            const void *dev_in, int64_t n_frames, void *dev_out,
                            void *dev_partial, int64_t partial_cap, cudaStream_t stream);

}  // namespace stemdot
