// mask_dot.cu: the dense and sparse (CSR) mask-dot kernels.
//
// out[f, m] = sum_p mask[m, p] * frame[f, p] for a tile of frames in native dtype
// (uint8, uint16, uint32, float32), converted to the accumulator type (float or double)
// in registers.
//
// Dense kernel, launch geometry and why:
//   The product is a tall-skinny GEMM: many frames (rows) x ~64k pixels (the reduction
//   dimension) x 1..64 masks. It is bound by reading the frames (1-4 bytes per pixel, read
//   once), so the kernel streams every frame byte exactly once with 16-byte loads and
//   keeps everything else on chip:
//   - grid.x: groups of FB frames. A thread loads 16 bytes (V pixels) of each of the FB
//     frames at the same pixel offset, so that every mask weight it loads (float4, from
//     L1/L2: the whole stack, at most 64 x 64k x 4 B = 16 MiB, stays in L2) is used for
//     FB frames. FB*MG accumulators live in registers: FB = 32/MG, 1 to 8.
//   - grid.y: S pixel chunks (split-K). With few frames per tile there are too few frame
//     groups to fill the device, so the pixels are split until about kBlocksPerSM blocks
//     per SM run, each thread keeping at least kMinVecsPerThread loads per frame.
//   - grid.z: groups of MG masks (MG = next power of two of n_masks, at most 64; the
//     stack is padded with zero rows). More than 64 masks re-read the frames once per
//     group, mostly from L2.
//   - 128 threads per block: consecutive threads load consecutive 16-byte vectors
//     (coalesced 512-byte warps' requests). Each block reduces its FB*MG sums (warp
//     shuffles, then across the 4 warps in shared memory) and writes each once; with S > 1
//     the partial sums go to a workspace that a second kernel adds in a fixed order, so
//     results are deterministic (no atomics).
//   Frames whose size in bytes is not a multiple of 16 use the same kernel with scalar
//   loads (V = 1).
//
// Sparse kernel: one block per (group of kSparseFrames frames, mask); threads walk the
// mask's nonzeros (col ascending, so neighbouring threads gather neighbouring pixels),
// each weight is used for the block's frames; block reduction, one write per result.
#include "mask_dot.cuh"

#include <algorithm>
#include <type_traits>

#include "stemdot_kernels.h"

namespace stemdot {
namespace {

constexpr int kWarp = 32;

// Accumulators per thread of the dense kernel: FB*MG <= 32, except MG = 64 (FB = 1).
constexpr int kAccBudget = 32;
constexpr int frames_per_block_for(int mg) {
    return kAccBudget / mg > 8 ? 8 : (kAccBudget / mg < 1 ? 1 : kAccBudget / mg);
}

// Registers the dense kernel needs, roughly: accumulators, one float4 of weights per mask
// (the compiler issues a step's weight loads together), FB frame vectors, addressing.
template <typename Acc, int MG>
constexpr int dense_registers() {
    return int(sizeof(Acc)) / 4 * frames_per_block_for(MG) * MG + 4 * MG +
           8 * frames_per_block_for(MG) + 24;
}

// Least resident blocks per SM the dense kernel is compiled for (__launch_bounds__): 4
// blocks of 128 threads cap a thread at 128 registers (16 warps per SM to hide memory
// latency); kernels that need more get up to 255 (2 blocks) rather than spill.
template <typename Acc, int MG>
constexpr int dense_min_blocks() {
    return dense_registers<Acc, MG>() > 128 ? 2 : 4;
}

// V pixels of one frame: a 16-byte vector (V = 16/sizeof(T)) or one scalar (V = 1),
// handed out W = 4 (or 1) pixels at a time, converted to Acc.
template <typename T, int V>
struct FramePixels {
    static constexpr int W = 4;
    uint4 raw;
    __device__ __forceinline__ void load(const T *__restrict__ frame, int64_t j) {
        raw = __ldg(reinterpret_cast<const uint4 *>(frame) + j);
    }
    __device__ __forceinline__ void zero() { raw = make_uint4(0, 0, 0, 0); }
    // Pixels [4q, 4q+4); q is a runtime index (selects, no local memory).
    template <typename Acc>
    __device__ __forceinline__ void quad(int q, Acc (&x)[W]) const {
        if constexpr (sizeof(T) == 1) {
            const uint32_t w = q == 0 ? raw.x : q == 1 ? raw.y : q == 2 ? raw.z : raw.w;
#pragma unroll
            for (int k = 0; k < 4; k++) x[k] = Acc((w >> (8 * k)) & 0xffu);
        } else if constexpr (sizeof(T) == 2) {
            const uint32_t lo = q == 0 ? raw.x : raw.z;
            const uint32_t hi = q == 0 ? raw.y : raw.w;
            x[0] = Acc(lo & 0xffffu);
            x[1] = Acc(lo >> 16);
            x[2] = Acc(hi & 0xffffu);
            x[3] = Acc(hi >> 16);
        } else if constexpr (std::is_floating_point<T>::value) {
            x[0] = Acc(__uint_as_float(raw.x));
            x[1] = Acc(__uint_as_float(raw.y));
            x[2] = Acc(__uint_as_float(raw.z));
            x[3] = Acc(__uint_as_float(raw.w));
        } else {
            x[0] = Acc(raw.x);
            x[1] = Acc(raw.y);
            x[2] = Acc(raw.z);
            x[3] = Acc(raw.w);
        }
    }
};

template <typename T>
struct FramePixels<T, 1> {
    static constexpr int W = 1;
    T raw;
    __device__ __forceinline__ void load(const T *__restrict__ frame, int64_t j) {
        raw = __ldg(frame + j);
    }
    __device__ __forceinline__ void zero() { raw = T(0); }
    template <typename Acc>
    __device__ __forceinline__ void quad(int, Acc (&x)[W]) const {
        x[0] = Acc(raw);
    }
};

// W weights of one mask row starting at pixel p: a float4 (W = 4, p % 4 == 0) or a scalar.
template <int W>
__device__ __forceinline__ void load_weights(const float *__restrict__ row, int64_t p,
                                             float (&w)[W]) {
    if constexpr (W == 4) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(row + p));
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    } else {
        w[0] = __ldg(row + p);
    }
}

// Sums v[i] over the block (kThreads threads) and calls write(i, sum) for each i, from
// thread i (mod kThreads). Fixed order, so deterministic.
template <int kThreads, typename Acc, int N, typename Write>
__device__ __forceinline__ void block_reduce(Acc (&v)[N], Write write) {
    constexpr int kWarps = kThreads / kWarp;
    __shared__ Acc red[kWarps][N];
    const int lane = threadIdx.x % kWarp;
    const int warp = threadIdx.x / kWarp;
#pragma unroll
    for (int i = 0; i < N; i++) {
#pragma unroll
        for (int off = kWarp / 2; off > 0; off /= 2) {
            v[i] += __shfl_down_sync(0xffffffffu, v[i], off);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) red[warp][i] = v[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += kThreads) {
        Acc s = red[0][i];
#pragma unroll
        for (int w = 1; w < kWarps; w++) s += red[w][i];
        write(i, s);
    }
}

template <typename T, typename Acc, int V, int MG>
__global__ void __launch_bounds__(kDenseThreads, (dense_min_blocks<Acc, MG>()))
    dense_kernel(const T *__restrict__ frames, int64_t n_frames, int64_t pixels,
                 const float *__restrict__ masks, int n_masks, int64_t vecs_per_chunk,
                 Acc *__restrict__ out) {
    constexpr int FB = frames_per_block_for(MG);
    constexpr int W = FramePixels<T, V>::W;  // pixels per weight load
    const int64_t f0 = int64_t(blockIdx.x) * FB;
    const int64_t chunk = blockIdx.y;
    const int group = blockIdx.z;
    const int64_t n_vec = pixels / V;
    const int64_t v_begin = chunk * vecs_per_chunk;
    const int64_t v_end = min(n_vec, v_begin + vecs_per_chunk);
    const float *__restrict__ group_masks = masks + int64_t(group) * MG * pixels;

    Acc acc[FB * MG];
#pragma unroll
    for (int i = 0; i < FB * MG; i++) acc[i] = Acc(0);

#pragma unroll 1
    for (int64_t j = v_begin + threadIdx.x; j < v_end; j += kDenseThreads) {
        FramePixels<T, V> px[FB];
#pragma unroll
        for (int f = 0; f < FB; f++) {
            if (f0 + f < n_frames) {
                px[f].load(frames + (f0 + f) * pixels, j);
            } else {
                px[f].zero();
            }
        }
        // One quad of pixels per step (not unrolled): keeps the weight loads in flight
        // to MG float4 instead of V/4*MG.
#pragma unroll 1
        for (int q = 0; q < V / W; q++) {
            Acc x[FB][W];
#pragma unroll
            for (int f = 0; f < FB; f++) px[f].quad(q, x[f]);
#pragma unroll
            for (int m = 0; m < MG; m++) {
                float w[W];
                load_weights<W>(group_masks + m * pixels, j * V + q * W, w);
#pragma unroll
                for (int k = 0; k < W; k++) {
#pragma unroll
                    for (int f = 0; f < FB; f++) {
                        acc[f * MG + m] = fma(Acc(w[k]), x[f][k], acc[f * MG + m]);
                    }
                }
            }
        }
    }

    Acc *dst = out + chunk * n_frames * n_masks;
    block_reduce<kDenseThreads>(acc, [&](int i, Acc s) {
        const int64_t f = f0 + i / MG;
        const int m = group * MG + i % MG;
        if (f < n_frames && m < n_masks) dst[f * n_masks + m] = s;
    });
}

// out[i] = sum over splits of partial[s*n + i], in split order.
template <typename Acc>
__global__ void sum_splits(const Acc *__restrict__ partial, int64_t splits, int64_t n,
                           Acc *__restrict__ out) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        Acc s = partial[i];
        for (int64_t k = 1; k < splits; k++) s += partial[k * n + i];
        out[i] = s;
    }
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(kSparseThreads)
    sparse_kernel(const T *__restrict__ frames, int64_t n_frames, int64_t pixels,
                  const int32_t *__restrict__ rowptr, const int32_t *__restrict__ col,
                  const float *__restrict__ val, int n_masks, Acc *__restrict__ out) {
    const int64_t f0 = int64_t(blockIdx.x) * kSparseFrames;
    const int m = blockIdx.y;
    Acc acc[kSparseFrames];
#pragma unroll
    for (int f = 0; f < kSparseFrames; f++) acc[f] = Acc(0);
    const int end = rowptr[m + 1];
    for (int k = rowptr[m] + threadIdx.x; k < end; k += kSparseThreads) {
        const int64_t c = __ldg(col + k);
        const Acc w = Acc(__ldg(val + k));
#pragma unroll
        for (int f = 0; f < kSparseFrames; f++) {
            if (f0 + f < n_frames) {
                acc[f] = fma(w, Acc(__ldg(frames + (f0 + f) * pixels + c)), acc[f]);
            }
        }
    }
    block_reduce<kSparseThreads>(acc, [&](int f, Acc s) {
        if (f0 + f < n_frames) out[(f0 + f) * n_masks + m] = s;
    });
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int vector_width(int elem_size, int64_t pixels) {
    return (pixels * elem_size) % 16 == 0 ? 16 / elem_size : 1;
}

template <typename T, typename Acc, int V, int MG>
cudaError_t dense_launch(const DenseArgs &a) {
    constexpr int FB = frames_per_block_for(MG);
    const int64_t n_vec = a.pixels / V;
    int64_t splits =
        dense_splits(sizeof(T), a.n_frames, a.pixels, MG, a.n_groups, a.sm_count);
    const int64_t per_split = a.n_frames * a.n_masks;
    const int64_t fit = a.partial == nullptr ? 1 : a.partial_cap / per_split;
    splits = std::max<int64_t>(1, std::min(splits, fit));
    const int64_t vecs_per_chunk = ceil_div(n_vec, splits);
    splits = ceil_div(n_vec, vecs_per_chunk);
    const dim3 grid(unsigned(ceil_div(a.n_frames, FB)), unsigned(splits), unsigned(a.n_groups));
    Acc *dst = static_cast<Acc *>(splits > 1 ? a.partial : a.out);
    dense_kernel<T, Acc, V, MG><<<grid, kDenseThreads, 0, a.stream>>>(
        static_cast<const T *>(a.frames), a.n_frames, a.pixels, a.masks, a.n_masks,
        vecs_per_chunk, dst);
    if (splits > 1) {
        const int64_t n = per_split;
        const int64_t blocks = std::min<int64_t>(ceil_div(n, 256), int64_t(a.sm_count) * 4);
        sum_splits<Acc><<<unsigned(blocks), 256, 0, a.stream>>>(
            static_cast<const Acc *>(a.partial), splits, n, static_cast<Acc *>(a.out));
    }
    return cudaGetLastError();
}

template <typename T, typename Acc, int V>
cudaError_t dense_dispatch_group(const DenseArgs &a) {
    switch (a.mask_group) {
    case 1: return dense_launch<T, Acc, V, 1>(a);
    case 2: return dense_launch<T, Acc, V, 2>(a);
    case 4: return dense_launch<T, Acc, V, 4>(a);
    case 8: return dense_launch<T, Acc, V, 8>(a);
    case 16: return dense_launch<T, Acc, V, 16>(a);
    case 32: return dense_launch<T, Acc, V, 32>(a);
    case 64: return dense_launch<T, Acc, V, 64>(a);
    }
    return cudaErrorInvalidValue;
}

template <typename T, typename Acc>
cudaError_t dense_dispatch(const DenseArgs &a) {
    if (vector_width(sizeof(T), a.pixels) > 1) {
        return dense_dispatch_group<T, Acc, 16 / sizeof(T)>(a);
    }
    return dense_dispatch_group<T, Acc, 1>(a);
}

template <typename T, typename Acc>
cudaError_t sparse_launch(const SparseArgs &a) {
    const dim3 grid(unsigned(ceil_div(a.n_frames, kSparseFrames)), unsigned(a.n_masks));
    sparse_kernel<T, Acc><<<grid, kSparseThreads, 0, a.stream>>>(
        static_cast<const T *>(a.frames), a.n_frames, a.pixels, a.rowptr, a.col, a.val,
        a.n_masks, static_cast<Acc *>(a.out));
    return cudaGetLastError();
}

}  // namespace

int mask_group(int n_masks) {
    int g = 1;
    while (g < n_masks && g < kMaxMaskGroup) g *= 2;
    return g;
}

int64_t dense_splits(int elem_size, int64_t n_frames, int64_t pixels, int mask_group,
                     int n_groups, int sm_count) {
    const int64_t n_vec = pixels / vector_width(elem_size, pixels);
    const int64_t blocks = ceil_div(n_frames, frames_per_block_for(mask_group)) * n_groups;
    const int64_t want = ceil_div(int64_t(sm_count) * kBlocksPerSM, blocks);
    const int64_t most = std::min<int64_t>(
        kMaxGridYZ, std::max<int64_t>(1, n_vec / (kDenseThreads * kMinVecsPerThread)));
    return std::max<int64_t>(1, std::min(want, most));
}

cudaError_t launch_dense(int dtype, bool f64, const DenseArgs &a) {
    switch (dtype) {
    case STEMDOT_UINT8:
        return f64 ? dense_dispatch<uint8_t, double>(a) : dense_dispatch<uint8_t, float>(a);
    case STEMDOT_UINT16:
        return f64 ? dense_dispatch<uint16_t, double>(a) : dense_dispatch<uint16_t, float>(a);
    case STEMDOT_UINT32:
        return f64 ? dense_dispatch<uint32_t, double>(a) : dense_dispatch<uint32_t, float>(a);
    case STEMDOT_FLOAT32:
        return f64 ? dense_dispatch<float, double>(a) : dense_dispatch<float, float>(a);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch_sparse(int dtype, bool f64, const SparseArgs &a) {
    switch (dtype) {
    case STEMDOT_UINT8:
        return f64 ? sparse_launch<uint8_t, double>(a) : sparse_launch<uint8_t, float>(a);
    case STEMDOT_UINT16:
        return f64 ? sparse_launch<uint16_t, double>(a) : sparse_launch<uint16_t, float>(a);
    case STEMDOT_UINT32:
        return f64 ? sparse_launch<uint32_t, double>(a) : sparse_launch<uint32_t, float>(a);
    case STEMDOT_FLOAT32:
        return f64 ? sparse_launch<float, double>(a) : sparse_launch<float, float>(a);
    }
    return cudaErrorInvalidValue;
}

}  // namespace stemdot
