// mask_dot.cu: the dense and sparse (CSR) mask-dot kernels.
//
// out[f, m] = sum_p mask[m, p] * frame[f, p] for a tile of frames in native dtype
// (uint8, uint16, uint32, float32), converted to the accumulator type (float or double)
// in registers.
//
// Streaming dense kernel (few masks), launch geometry and why:
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
//     per SM run, each thread keeping at least kMinVecsPerThread loads per frame; and
//     large frames are split so that no thread sums more than kMaxRunPixels of a frame.
//   - grid.z: groups of MG masks (MG = next power of two of n_masks, at most 64; the
//     stack is padded with zero rows). More than 64 masks re-read the frames once per
//     group, mostly from L2.
//   - 128 threads per block: consecutive threads load consecutive 16-byte vectors
//     (coalesced 512-byte warps' requests). Each block reduces its FB*MG sums in double
//     (warp shuffles, then across the 4 warps in shared memory) and writes each once; with
//     S > 1 the partial sums go to a workspace of doubles that a second kernel adds in a
//     fixed order, so results are deterministic (no atomics). Only a thread's own run of
//     pixels is summed in float.
//   Frames whose size in bytes is not a multiple of 16 use the same kernel with scalar
//   loads (V = 1).
//
// Tiled dense kernel (many masks; which kernel runs which mask group is kDenseChoice):
//   The same product as a GEMM tiled for arithmetic: with 16-64 masks per group the
//   streaming kernel is bound by its weight loads (one load per 1-8 FMAs). Here a block
//   computes a BF-frames x MG-masks tile of out: per stage of BK pixels (64 bytes of a
//   uint16 frame row) its threads load BF frame rows (16-byte loads, native dtype,
//   converted in registers to Acc) and the MG mask rows into shared memory, then each
//   thread forms a TF x TM register tile of sums (TF*TM FMAs per TF+TM shared loads of
//   one pixel; float: 8 x 4 or 8 x 8). The next stage's global loads are issued before the
//   current stage's arithmetic (register prefetch). Each mask weight is read from L2 once
//   per BF (64-256) frames instead of once per 1-8.
//   - grid.x: frame blocks x mask groups (groups fastest, so that the groups of the same
//     frames run together and the second group's frame reads hit L2);
//   - grid.y: pixel chunks (split-K) of at most kTiledMaxChunk pixels, for precision (a
//     thread sums one chunk serially) and, with few frames, to fill the device; the chunk
//     sums go to the workspace and sum_splits adds them in split order (in double).
//   Frames whose byte size is not a multiple of 16 (or unaligned pointers) use scalar
//   loads (V = 1) in the same kernel.
//
// Sparse kernel: one block per (group of kSparseFrames frames, mask); threads walk the
// mask's nonzeros (col ascending, so neighbouring threads gather neighbouring pixels),
// each weight is used for the block's frames; block reduction, one write per result.
#include "mask_dot.cuh"

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "launch.cuh"
#include "stemdot_kernels.h"

namespace stemdot {
namespace {

constexpr int kWarp = 32;

// The dense kernels, and which one runs each mask group (mask_group(n_masks): 1, 2, 4, ...,
// 64 masks per group) with float and with double accumulation: the one place to retune
// after measuring (scripts/gpu-check.sh prints GB/s per mask count). Only the kernels
// named here are compiled. kTiled needs mask groups of at least 8.
enum class Dense { kStreaming, kTiled };
struct DenseChoice {
    int mask_group;
    Dense f32, f64;
};
constexpr DenseChoice kDenseChoice[] = {
    {1, Dense::kStreaming, Dense::kStreaming},  {2, Dense::kStreaming, Dense::kStreaming},
    {4, Dense::kStreaming, Dense::kStreaming},  {8, Dense::kStreaming, Dense::kStreaming},
    {16, Dense::kTiled, Dense::kTiled},         {32, Dense::kTiled, Dense::kTiled},
    {64, Dense::kTiled, Dense::kTiled},
};

// Whether kDenseChoice's tiled entries are used: off until the tiled kernel has been
// checked and timed on a GPU (the streaming kernel is correct at every mask count).
std::atomic<bool> g_tiled_dense{false};

constexpr Dense dense_choice(int mask_group, bool f64) {
    for (const DenseChoice &c : kDenseChoice) {
        if (c.mask_group == mask_group) return f64 ? c.f64 : c.f32;
    }
    return Dense::kStreaming;
}

constexpr bool dense_choices_valid() {
    for (const DenseChoice &c : kDenseChoice) {
        if (c.mask_group < 8 && (c.f32 == Dense::kTiled || c.f64 == Dense::kTiled)) return false;
    }
    return true;
}
static_assert(dense_choices_valid(), "kDenseChoice: the tiled kernel needs mask groups >= 8");

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

// Sums v[i] over the block (kThreads threads) in double and calls write(i, sum) for each
// i, from thread i (mod kThreads). Fixed order, so deterministic. The threads' float sums
// are short (kMaxRunPixels, kSparseRun) and everything above them is added in double, as
// the CPU kernels do: float results carry little more than their final rounding.
template <int kThreads, typename Acc, int N, typename Write>
__device__ __forceinline__ void block_reduce(const Acc (&v)[N], Write write) {
    constexpr int kWarps = kThreads / kWarp;
    __shared__ double red[kWarps][N];
    const int lane = threadIdx.x % kWarp;
    const int warp = threadIdx.x / kWarp;
#pragma unroll
    for (int i = 0; i < N; i++) {
        double s = v[i];
#pragma unroll
        for (int off = kWarp / 2; off > 0; off /= 2) {
            s += __shfl_down_sync(0xffffffffu, s, off);
        }
        if (lane == 0) red[warp][i] = s;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += kThreads) {
        double s = red[0][i];
#pragma unroll
        for (int w = 1; w < kWarps; w++) s += red[w][i];
        write(i, s);
    }
}

// Writes result i's sum (of n results per pixel chunk): when the pixels are split
// (gridDim.y > 1), dst is the workspace of doubles and the sum goes to dst[chunk*n + i];
// else dst is the Acc output and it goes to dst[i]. (One pointer, not two: the streaming
// kernels of 2 and 64 masks spilled with a second one.)
template <typename Acc>
__device__ __forceinline__ void write_sum(void *__restrict__ dst, int64_t chunk, int64_t n,
                                          int64_t i, double s) {
    if (gridDim.y > 1) {
        static_cast<double *>(dst)[chunk * n + i] = s;
    } else {
        static_cast<Acc *>(dst)[i] = Acc(s);
    }
}

template <typename T, typename Acc, int V, int MG>
__global__ void __launch_bounds__(kDenseThreads, (dense_min_blocks<Acc, MG>()))
    dense_kernel(const T *__restrict__ frames, int64_t n_frames, int64_t pixels,
                 const float *__restrict__ masks, int n_masks, int64_t vecs_per_chunk,
                 void *__restrict__ dst) {
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

    block_reduce<kDenseThreads>(acc, [&](int i, double s) {
        const int64_t f = f0 + i / MG;
        const int m = group * MG + i % MG;
        if (f < n_frames && m < n_masks) write_sum<Acc>(dst, chunk, n_frames * n_masks, f * n_masks + m, s);
    });
}

// out[i] = sum over splits of partial[s*n + i], in split order, in double.
template <typename Acc>
__global__ void sum_splits(const double *__restrict__ partial, int64_t splits, int64_t n,
                           Acc *__restrict__ out) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        double s = partial[i];
        for (int64_t k = 1; k < splits; k++) s += partial[k * n + i];
        out[i] = Acc(s);
    }
}

// ---------------------------------------------------------------------------------------
// Tiled dense kernel.

constexpr int kTiledThreads = 128;
// Pixels per shared-memory stage: 64 bytes of each frame row (32 for uint8). Pixel
// chunks (split-K) are multiples of kTiledChunkAlign.
template <typename T>
constexpr int tiled_bk() {
    return sizeof(T) == 4 ? 16 : 32;
}
constexpr int kTiledChunkAlign = 32;
// Most pixels one thread sums serially in float; more pixels split, and the chunks' sums
// are added in double. Here one thread sums each result's chunk, so the relative error is
// about sqrt(chunk/P)*sqrt(chunk)*eps for P pixels: 1024 keeps it near 1e-7 for 256x256
// frames.
constexpr int64_t kTiledMaxChunk = 1024;
// Least pixels per split when splitting to fill the device.
constexpr int64_t kTiledMinChunk = 512;
// Target resident blocks per SM when choosing the pixel split.
constexpr int kTiledBlocksPerSM = 4;

// Thread columns (masks c, c+C, ...) and frames per thread of the tiled kernel, and the
// frames per block that follow (BF = kTiledThreads / C * TF).
constexpr int tiled_cols(int mask_group) { return mask_group <= 16 ? 4 : 8; }
constexpr int tiled_frames_per_thread(int acc_size) { return acc_size == 4 ? 8 : 4; }
constexpr int tiled_block_frames(int mask_group, int acc_size) {
    return kTiledThreads / tiled_cols(mask_group) * tiled_frames_per_thread(acc_size);
}

// Tile shape of the tiled kernel for frames of T and mask group MG: C x R threads, each
// TF frames x TM masks; BF = R*TF frames per block. Shared rows hold BK pixels plus one
// 16-byte pad (LD elements), so that the rows a warp reads together fall in distinct banks.
template <typename T, typename Acc, int MG>
struct TiledShape {
    static constexpr int C = tiled_cols(MG);
    static constexpr int TM = MG / C;
    static constexpr int R = kTiledThreads / C;  // thread rows (frames r, r+R, ...)
    static constexpr int TF = tiled_frames_per_thread(sizeof(Acc));
    static constexpr int BF = R * TF;
    static constexpr int BK = tiled_bk<T>();
    static constexpr int KV = 16 / int(sizeof(Acc));  // Acc per 16-byte shared access
    static constexpr int LD = BK + KV;
    static_assert(MG % C == 0 && TM >= 1, "mask group too small for the tiled kernel");
    static_assert(kTiledChunkAlign % BK == 0, "chunks hold whole stages");
    static_assert((BF + MG) * LD * sizeof(Acc) <= 48 * 1024, "static shared memory limit");
};

// Least resident blocks per SM the tiled kernel is compiled for (__launch_bounds__): with
// 32 or more float accumulators (16 double), the prefetched stage and the operands
// compiled at 3 blocks (168 registers) spilled; 2 blocks allow 255.
template <typename T, typename Acc, int MG>
constexpr int tiled_min_blocks() {
    using S = TiledShape<T, Acc, MG>;
    return S::TF * S::TM * int(sizeof(Acc)) / 4 >= 32 ? 2 : 3;
}

// A uint8 or uint16 value as float: exact, without the slower integer conversion unit
// (2^23 + u as float bits, minus 2^23).
__device__ __forceinline__ float small_uint_to_float(uint32_t u) {
    return __uint_as_float(0x4B000000u | u) - 8388608.0f;
}

// Element k of 16 bytes of native frame data, as Acc.
template <typename T, typename Acc>
__device__ __forceinline__ Acc element(const uint4 &raw, int k) {
    const uint32_t w = k * int(sizeof(T)) / 4 == 0   ? raw.x
                       : k * int(sizeof(T)) / 4 == 1 ? raw.y
                       : k * int(sizeof(T)) / 4 == 2 ? raw.z
                                                     : raw.w;
    if constexpr (std::is_floating_point<T>::value) {
        return Acc(__uint_as_float(w));
    } else if constexpr (sizeof(T) == 4) {
        return Acc(w);
    } else {
        constexpr int bits = 8 * int(sizeof(T));
        const uint32_t u = (w >> (bits * (k % (4 / int(sizeof(T)))))) & ((1u << bits) - 1);
        if constexpr (sizeof(Acc) == 4) {
            return small_uint_to_float(u);
        } else {
            return Acc(u);
        }
    }
}

// Stores V consecutive Acc values to shared memory (16-byte aligned dst) in 16-byte pieces.
template <typename Acc, int V>
__device__ __forceinline__ void store_row(Acc *dst, const Acc (&x)[V]) {
    if constexpr (V == 1) {
        dst[0] = x[0];
    } else if constexpr (sizeof(Acc) == 4) {
#pragma unroll
        for (int q = 0; q < V; q += 4) {
            *reinterpret_cast<float4 *>(dst + q) = make_float4(x[q], x[q + 1], x[q + 2], x[q + 3]);
        }
    } else {
#pragma unroll
        for (int q = 0; q < V; q += 2) {
            *reinterpret_cast<double2 *>(dst + q) = make_double2(x[q], x[q + 1]);
        }
    }
}

// One stage of ROWS rows x BK pixels of a row-major matrix (frames in native dtype T or
// mask weights in float) moved into shared memory as Acc: V elements per load (V*sizeof(T)
// = 16 bytes, or V = 1), converted in registers. Rows at or beyond n_rows and pixels at or
// beyond p_end read as 0. load + store hold the whole stage in registers in between (the
// prefetch); copy moves it a few loads at a time.
template <typename T, typename Acc, int V, int ROWS, int BK>
struct Stage {
    static constexpr int kRowVecs = BK / V;
    static constexpr int kTotal = ROWS * kRowVecs;
    static constexpr int kN = (kTotal + kTiledThreads - 1) / kTiledThreads;
    static_assert(V == 1 || V * sizeof(T) == 16, "16-byte or scalar loads");
    using Raw = typename std::conditional<V == 1, T, uint4>::type;
    Raw raw[kN];

    // The thread's i-th load of the stage is element idx = threadIdx.x + i*kTiledThreads
    // (consecutive threads, consecutive addresses): row idx / kRowVecs, vector idx % kRowVecs.
    static __device__ __forceinline__ bool mine(int idx) {
        return kTotal % kTiledThreads == 0 || idx < kTotal;
    }

    static __device__ __forceinline__ Raw fetch(int idx, const T *__restrict__ base,
                                                int64_t row0, int64_t n_rows, int64_t pixels,
                                                int64_t p0, int64_t p_end) {
        const int64_t row = row0 + idx / kRowVecs;
        const int64_t p = p0 + int64_t(idx % kRowVecs) * V;
        const bool in = mine(idx) && row < n_rows && p < p_end;
        if constexpr (V == 1) {
            return in ? __ldg(base + row * pixels + p) : T(0);
        } else {
            return in ? __ldg(reinterpret_cast<const uint4 *>(base + row * pixels + p))
                      : make_uint4(0, 0, 0, 0);
        }
    }

    template <int LD>
    static __device__ __forceinline__ void put(int idx, const Raw &v, Acc (*s)[LD]) {
        Acc x[V];
        if constexpr (V == 1) {
            if constexpr (std::is_integral<T>::value && sizeof(T) < 4 && sizeof(Acc) == 4) {
                x[0] = small_uint_to_float(v);
            } else {
                x[0] = Acc(v);
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) x[k] = element<T, Acc>(v, k);
        }
        store_row<Acc, V>(&s[idx / kRowVecs][(idx % kRowVecs) * V], x);
    }

    __device__ __forceinline__ void load(const T *__restrict__ base, int64_t row0, int64_t n_rows,
                                         int64_t pixels, int64_t p0, int64_t p_end) {
#pragma unroll
        for (int i = 0; i < kN; i++) {
            raw[i] = fetch(int(threadIdx.x) + i * kTiledThreads, base, row0, n_rows, pixels, p0,
                           p_end);
        }
    }

    template <int LD>
    __device__ __forceinline__ void store(Acc (*s)[LD]) const {
#pragma unroll
        for (int i = 0; i < kN; i++) {
            const int idx = int(threadIdx.x) + i * kTiledThreads;
            if (mine(idx)) put(idx, raw[i], s);
        }
    }

    template <int LD>
    static __device__ __forceinline__ void copy(const T *__restrict__ base, int64_t row0,
                                                int64_t n_rows, int64_t pixels, int64_t p0,
                                                int64_t p_end, Acc (*s)[LD]) {
#pragma unroll 4
        for (int i = 0; i < kN; i++) {
            const int idx = int(threadIdx.x) + i * kTiledThreads;
            if (mine(idx)) put(idx, fetch(idx, base, row0, n_rows, pixels, p0, p_end), s);
        }
    }
};

// Reads KV consecutive Acc values (16 bytes) from shared memory.
template <typename Acc, int KV>
__device__ __forceinline__ void load16(const Acc *src, Acc (&x)[KV]) {
    if constexpr (sizeof(Acc) == 4) {
        const float4 v = *reinterpret_cast<const float4 *>(src);
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
    } else {
        const double2 v = *reinterpret_cast<const double2 *>(src);
        x[0] = v.x;
        x[1] = v.y;
    }
}

// out[f, m] (or the chunk's partial sums with gridDim.y > 1) for the block's BF frames x
// MG masks over pixels [chunk*chunk_pixels, +chunk_pixels); chunk_pixels is a multiple of
// kTiledChunkAlign. V: frame elements per load (16 bytes or 1); mask weights load 4 at a
// time when V > 1 (then pixels is a multiple of 4). With V > 1 the next stage's loads are
// in flight during the current stage's arithmetic; scalar loads (V = 1, 32-64 per thread)
// are not held across it, to keep the registers for the accumulators.
template <typename T, typename Acc, int V, int MG>
__global__ void __launch_bounds__(kTiledThreads, (tiled_min_blocks<T, Acc, MG>()))
    tiled_kernel(const T *__restrict__ frames, int64_t n_frames, int64_t pixels,
                 const float *__restrict__ masks, int n_masks, int n_groups,
                 int64_t chunk_pixels, void *__restrict__ dst) {
    using S = TiledShape<T, Acc, MG>;
    constexpr int VM = V == 1 ? 1 : 4;
    constexpr bool kPrefetch = V > 1;
    __shared__ __align__(16) Acc sf[S::BF][S::LD];
    __shared__ __align__(16) Acc sm[MG][S::LD];

    const int group = int(blockIdx.x % unsigned(n_groups));
    const int64_t f0 = int64_t(blockIdx.x / unsigned(n_groups)) * S::BF;
    const int64_t p_begin = int64_t(blockIdx.y) * chunk_pixels;
    const int64_t p_end = min(pixels, p_begin + chunk_pixels);
    const int stages = int((p_end - p_begin + S::BK - 1) / S::BK);
    const float *__restrict__ group_masks = masks + int64_t(group) * MG * pixels;
    const int c = int(threadIdx.x) % S::C;
    const int r = int(threadIdx.x) / S::C;

    using FrameStage = Stage<T, Acc, V, S::BF, S::BK>;
    using MaskStage = Stage<float, Acc, VM, MG, S::BK>;
    FrameStage fs;
    MaskStage ms;
    if (kPrefetch) {
        fs.load(frames, f0, n_frames, pixels, p_begin, p_end);
        ms.load(group_masks, 0, MG, pixels, p_begin, p_end);
    }

    Acc acc[S::TF][S::TM];
#pragma unroll
    for (int i = 0; i < S::TF; i++) {
#pragma unroll
        for (int j = 0; j < S::TM; j++) acc[i][j] = Acc(0);
    }

#pragma unroll 1
    for (int s = 0; s < stages; s++) {
        const int64_t p = p_begin + int64_t(s) * S::BK;
        __syncthreads();  // the previous stage's reads of sf, sm are done
        if (kPrefetch) {
            fs.store(sf);
            ms.store(sm);
        } else {
            FrameStage::copy(frames, f0, n_frames, pixels, p, p_end, sf);
            MaskStage::copy(group_masks, 0, MG, pixels, p, p_end, sm);
        }
        __syncthreads();
        if (kPrefetch && s + 1 < stages) {
            fs.load(frames, f0, n_frames, pixels, p + S::BK, p_end);
            ms.load(group_masks, 0, MG, pixels, p + S::BK, p_end);
        }
#pragma unroll
        for (int q = 0; q < S::BK; q += S::KV) {
            Acc a[S::TF][S::KV], b[S::TM][S::KV];
#pragma unroll
            for (int i = 0; i < S::TF; i++) load16(&sf[r + S::R * i][q], a[i]);
#pragma unroll
            for (int j = 0; j < S::TM; j++) load16(&sm[c + S::C * j][q], b[j]);
#pragma unroll
            for (int k = 0; k < S::KV; k++) {
#pragma unroll
                for (int i = 0; i < S::TF; i++) {
#pragma unroll
                    for (int j = 0; j < S::TM; j++) acc[i][j] = fma(a[i][k], b[j][k], acc[i][j]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < S::TF; i++) {
        const int64_t f = f0 + r + S::R * i;
#pragma unroll
        for (int j = 0; j < S::TM; j++) {
            const int m = group * MG + c + S::C * j;
            if (f < n_frames && m < n_masks) {
                write_sum<Acc>(dst, blockIdx.y, n_frames * n_masks, f * n_masks + m, double(acc[i][j]));
            }
        }
    }
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(kSparseThreads)
    sparse_kernel(const T *__restrict__ frames, int64_t n_frames, int64_t pixels,
                  const int32_t *__restrict__ rowptr, const int32_t *__restrict__ col,
                  const float *__restrict__ val, int n_masks, Acc *__restrict__ out) {
    const int64_t f0 = int64_t(blockIdx.x) * kSparseFrames;
    const int m = blockIdx.y;
    Acc acc[kSparseFrames];       // the current run of at most kSparseRun weights
    double total[kSparseFrames];  // the runs before it
#pragma unroll
    for (int f = 0; f < kSparseFrames; f++) acc[f] = Acc(0), total[f] = 0;
    const int end = rowptr[m + 1];
    int run = 0;
    for (int k = rowptr[m] + threadIdx.x; k < end; k += kSparseThreads) {
        const int64_t c = __ldg(col + k);
        const Acc w = Acc(__ldg(val + k));
#pragma unroll
        for (int f = 0; f < kSparseFrames; f++) {
            if (f0 + f < n_frames) {
                acc[f] = fma(w, Acc(__ldg(frames + (f0 + f) * pixels + c)), acc[f]);
            }
        }
        if (++run == kSparseRun) {
#pragma unroll
            for (int f = 0; f < kSparseFrames; f++) total[f] += acc[f], acc[f] = Acc(0);
            run = 0;
        }
    }
#pragma unroll
    for (int f = 0; f < kSparseFrames; f++) total[f] += acc[f];
    block_reduce<kSparseThreads>(total, [&](int f, double s) {
        if (f0 + f < n_frames) out[(f0 + f) * n_masks + m] = Acc(s);
    });
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int vector_width(int elem_size, int64_t pixels) {
    return (pixels * elem_size) % 16 == 0 ? 16 / elem_size : 1;
}

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Pixel splits of the streaming kernel for n_frames frames: enough that a thread sums at
// most kMaxRunPixels pixels of a frame (precision), more while the device has too few
// blocks and threads keep kMinVecsPerThread loads per frame.
int64_t streaming_splits(int elem_size, int64_t n_frames, int64_t pixels, int mask_group,
                         int n_groups, int sm_count) {
    const int v = vector_width(elem_size, pixels);
    const int64_t n_vec = pixels / v;
    const int64_t blocks = ceil_div(n_frames, frames_per_block_for(mask_group)) * n_groups;
    const int64_t want = ceil_div(int64_t(sm_count) * kBlocksPerSM, blocks);
    const int64_t most = std::max<int64_t>(1, n_vec / (kDenseThreads * kMinVecsPerThread));
    const int64_t least =
        ceil_div(n_vec, kDenseThreads * std::max<int64_t>(kMinVecsPerThread, kMaxRunPixels / v));
    return std::min<int64_t>(kMaxGridYZ, std::max(least, std::min(want, most)));
}

// Pixel splits of the tiled kernel for n_frames frames: chunks of at most kTiledMaxChunk
// pixels, more while the device has too few blocks and chunks hold kTiledMinChunk pixels.
int64_t tiled_splits(int acc_size, int64_t n_frames, int64_t pixels, int mask_group,
                     int n_groups, int sm_count) {
    const int64_t blocks =
        ceil_div(n_frames, tiled_block_frames(mask_group, acc_size)) * n_groups;
    const int64_t want = ceil_div(int64_t(sm_count) * kTiledBlocksPerSM, blocks);
    const int64_t most = std::max<int64_t>(1, pixels / kTiledMinChunk);
    const int64_t least = ceil_div(pixels, kTiledMaxChunk);
    return std::min<int64_t>(kMaxGridYZ, std::max(least, std::min(want, most)));
}

int64_t splits_of(Dense kernel, int acc_size, int elem_size, int64_t n_frames, int64_t pixels,
                  int mask_group, int n_groups, int sm_count) {
    return kernel == Dense::kTiled
               ? tiled_splits(acc_size, n_frames, pixels, mask_group, n_groups, sm_count)
               : streaming_splits(elem_size, n_frames, pixels, mask_group, n_groups, sm_count);
}

// Splits s limited to those whose partial sums fit the workspace (1 without one).
int64_t fit_splits(int64_t s, const DenseArgs &a) {
    const int64_t fit = a.partial == nullptr ? 1 : a.partial_cap / (a.n_frames * a.n_masks);
    return std::max<int64_t>(1, std::min(s, fit));
}

// Enqueues sum_splits of the partial sums of `splits` chunks into a.out.
template <typename Acc>
void launch_sum_splits(const DenseArgs &a, int64_t splits) {
    const int64_t n = a.n_frames * a.n_masks;
    const int64_t blocks = std::min<int64_t>(ceil_div(n, 256), int64_t(a.sm_count) * 4);
    STEMDOT_LAUNCH(unsigned(blocks), 256, a.stream, sum_splits<Acc>)(
        a.partial, splits, n, static_cast<Acc *>(a.out));
}

template <typename T, typename Acc, int V, int MG>
cudaError_t streaming_launch(const DenseArgs &a) {
    constexpr int FB = frames_per_block_for(MG);
    const int64_t n_vec = a.pixels / V;
    int64_t splits = fit_splits(
        streaming_splits(sizeof(T), a.n_frames, a.pixels, MG, a.n_groups, a.sm_count), a);
    const int64_t vecs_per_chunk = ceil_div(n_vec, splits);
    splits = ceil_div(n_vec, vecs_per_chunk);
    const dim3 grid(unsigned(ceil_div(a.n_frames, FB)), unsigned(splits), unsigned(a.n_groups));
    STEMDOT_LAUNCH(grid, kDenseThreads, a.stream, dense_kernel<T, Acc, V, MG>)(
        static_cast<const T *>(a.frames), a.n_frames, a.pixels, a.masks, a.n_masks,
        vecs_per_chunk, splits > 1 ? static_cast<void *>(a.partial) : a.out);
    if (splits > 1) launch_sum_splits<Acc>(a, splits);
    return cudaGetLastError();
}

template <typename T, typename Acc, int V, int MG>
cudaError_t tiled_launch(const DenseArgs &a) {
    const int64_t frame_blocks = ceil_div(a.n_frames, tiled_block_frames(MG, sizeof(Acc)));
    if (frame_blocks * a.n_groups > int64_t(INT32_MAX)) return cudaErrorInvalidConfiguration;
    int64_t splits = fit_splits(
        tiled_splits(sizeof(Acc), a.n_frames, a.pixels, MG, a.n_groups, a.sm_count), a);
    const int64_t chunk =
        ceil_div(ceil_div(a.pixels, splits), kTiledChunkAlign) * kTiledChunkAlign;
    splits = ceil_div(a.pixels, chunk);
    const dim3 grid(unsigned(frame_blocks * a.n_groups), unsigned(splits));
    STEMDOT_LAUNCH(grid, kTiledThreads, a.stream, tiled_kernel<T, Acc, V, MG>)(
        static_cast<const T *>(a.frames), a.n_frames, a.pixels, a.masks, a.n_masks,
        a.n_groups, chunk, splits > 1 ? static_cast<void *>(a.partial) : a.out);
    if (splits > 1) launch_sum_splits<Acc>(a, splits);
    return cudaGetLastError();
}

// The kernel kDenseChoice names for MG and Acc when the tiled kernel is enabled
// (stemdot_use_tiled_dense), else the streaming one.
template <typename T, typename Acc, int V, int MG>
cudaError_t dense_group_launch(const DenseArgs &a) {
    if constexpr (dense_choice(MG, sizeof(Acc) == 8) == Dense::kTiled) {
        if (g_tiled_dense.load(std::memory_order_relaxed)) return tiled_launch<T, Acc, V, MG>(a);
    }
    return streaming_launch<T, Acc, V, MG>(a);
}

template <typename T, typename Acc, int V>
cudaError_t dense_dispatch_group(const DenseArgs &a) {
    switch (a.mask_group) {
    case 1: return dense_group_launch<T, Acc, V, 1>(a);
    case 2: return dense_group_launch<T, Acc, V, 2>(a);
    case 4: return dense_group_launch<T, Acc, V, 4>(a);
    case 8: return dense_group_launch<T, Acc, V, 8>(a);
    case 16: return dense_group_launch<T, Acc, V, 16>(a);
    case 32: return dense_group_launch<T, Acc, V, 32>(a);
    case 64: return dense_group_launch<T, Acc, V, 64>(a);
    }
    return cudaErrorInvalidValue;
}

// 16-byte loads where the frame size and both pointers allow them, else scalar loads.
template <typename T, typename Acc>
cudaError_t dense_dispatch(const DenseArgs &a) {
    if (a.n_frames < 1) return cudaSuccess;
    if (vector_width(sizeof(T), a.pixels) > 1 && aligned16(a.frames) && aligned16(a.masks)) {
        return dense_dispatch_group<T, Acc, 16 / sizeof(T)>(a);
    }
    return dense_dispatch_group<T, Acc, 1>(a);
}

template <typename T, typename Acc>
cudaError_t sparse_launch(const SparseArgs &a) {
    const dim3 grid(unsigned(ceil_div(a.n_frames, kSparseFrames)), unsigned(a.n_masks));
    STEMDOT_LAUNCH(grid, kSparseThreads, a.stream, sparse_kernel<T, Acc>)(
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
    // The largest of float and double accumulation and of both kernels: the caller sizes
    // one workspace for all.
    int64_t s = 1;
    for (const int acc_size : {4, 8}) {
        for (const Dense d : {Dense::kStreaming, dense_choice(mask_group, acc_size == 8)}) {
            s = std::max(s, splits_of(d, acc_size, elem_size, n_frames, pixels, mask_group,
                                      n_groups, sm_count));
        }
    }
    return s;
}

void use_tiled_dense(bool on) { g_tiled_dense.store(on); }

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
