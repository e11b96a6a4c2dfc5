// mask_dot.cuh: launchers of the mask-dot kernels, shared by the library's host code
// (runtime.cu) and the kernel sources (mask_dot.cu). Internal to libstemdot_kernels.a.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace stemdot {

// Threads per block of the streaming dense kernel and the sparse kernel (4 warps).
constexpr int kDenseThreads = 128;
constexpr int kSparseThreads = 128;
// Frames per block of the sparse kernel.
constexpr int kSparseFrames = 4;
// Largest mask group of the dense kernel: masks are processed in groups of up to 64, each
// group's accumulators held in registers.
constexpr int kMaxMaskGroup = 64;
// Target resident blocks per SM when choosing the pixel split of the dense kernel.
constexpr int kBlocksPerSM = 8;
// Least number of 16-byte frame loads per thread and frame in one block: below it the
// block reduction would cost more than the loads it shares.
constexpr int kMinVecsPerThread = 4;
// Most pixels of a frame one thread of the streaming dense kernel sums in float; the
// threads' sums are added in double (block reduction, split sums), as the CPU kernels add
// their float sums of 1024-pixel blocks. The rounding errors of R-pixel runs are
// independent, so a frame of P pixels gets a relative error of about R*eps/sqrt(P)
// (eps = 6e-8): 1024-pixel runs keep it near the result's own float rounding for any frame
// size, and split a 4096x4096 frame 128 ways (256x256 frames need no split for it).
constexpr int kMaxRunPixels = 1024;
// Nonzeros one thread of the sparse kernel sums in float before adding them in double.
constexpr int kSparseRun = 32;
// CUDA grid limit of the y and z dimensions.
constexpr int64_t kMaxGridYZ = 65535;

// Mask group size of a dense stack of n masks: the next power of two, at most 64.
int mask_group(int n_masks);

// Number of pixel chunks (split-K) the dense kernel wants for n_frames frames: the larger
// of the kernels that run this mask group with float and with double accumulation (one
// workspace of splits x n_frames x n_masks accumulators serves both).
int64_t dense_splits(int elem_size, int64_t n_frames, int64_t pixels, int mask_group,
                     int n_groups, int sm_count);

struct DenseArgs {
    const void *frames;  // device, n_frames x pixels, native dtype
    int64_t n_frames;
    int64_t pixels;
    const float *masks;  // device, n_groups*mask_group rows x pixels (padded rows are 0)
    int n_masks;
    int mask_group;
    int n_groups;
    void *out;          // device, n_frames x n_masks, float or double
    double *partial;    // device workspace for split-K partial sums, in double (may be null)
    int64_t partial_cap;  // elements of partial
    int sm_count;
    cudaStream_t stream;
};

struct SparseArgs {
    const void *frames;  // device, n_frames x pixels, native dtype
    int64_t n_frames;
    int64_t pixels;
    const int32_t *rowptr;  // device CSR, n_masks+1
    const int32_t *col;
    const float *val;
    int n_masks;
    void *out;  // device, n_frames x n_masks, float or double
    cudaStream_t stream;
};

// Selects the tiled dense kernel for the mask groups kDenseChoice gives it (16-64
// masks) instead of the streaming kernel; off by default (see mask_dot.cu).
void use_tiled_dense(bool on);

// Enqueue the kernels on args.stream. Return the launch error (cudaGetLastError).
cudaError_t launch_dense(int dtype, bool f64, const DenseArgs &args);
cudaError_t launch_sparse(int dtype, bool f64, const SparseArgs &args);

}  // namespace stemdot
