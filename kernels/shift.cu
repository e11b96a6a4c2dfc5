// shift.cu: the device side of shifted masks (descan compensation). A GPU worker with
// per-frame shifts receives the native frames as an unshifted one does (staged or
// copy-free, unpacked by feed.cu), and this kernel builds each frame's g_f in float32 in
// device memory; the unshifted mask-dot kernels then apply the masks to g_f, so that no
// mask is moved or copied per frame (engine/shift.go gives the identity).
#include "shift.cuh"

#include <algorithm>

#include "launch.cuh"
#include "stemdot_kernels.h"

namespace stemdot {
namespace {

constexpr int kShiftThreads = 256;

// The integer part and the fraction in [0, 1) of a shift, clamped to +-2^30 (far outside
// any frame) as the CPU workers do, so that offsets stay in int range.
__device__ __forceinline__ int split_shift(double s, double *frac) {
    s = fmax(-1073741824.0, fmin(1073741824.0, s));
    const double k = floor(s);
    *frac = s - k;
    return int(k);
}

// Source row r of the frame at column c = v + kx, shifted by fx when lerp: (1 - fx)*src(r,
// c) + fx*src(r, c+1), else src(r, c); pixels outside the frame zero and not read.
template <typename T>
__device__ __forceinline__ float shifted_row(const T *__restrict__ src, int h, int w, int r,
                                             int c, bool lerp, float wx0, float wx1) {
    if (r < 0 || r >= h) return 0.0f;
    const T *s = src + int64_t(r) * w;
    const float a = c >= 0 && c < w ? float(s[c]) : 0.0f;
    if (!lerp) return a;
    const float b = c + 1 >= 0 && c + 1 < w ? float(s[c + 1]) : 0.0f;
    return wx0 * a + wx1 * b;
}

// grid.x covers a frame's pixels, grid.y strides over the tile's frames.
template <typename T>
__global__ void shift_frames(const T *__restrict__ in, int64_t n_frames, int64_t first,
                             const double *__restrict__ shifts, int h, int w,
                             float *__restrict__ out) {
    const int64_t pixels = int64_t(h) * w;
    for (int64_t f = blockIdx.y; f < n_frames; f += gridDim.y) {
        double fy, fx;
        const int ky = split_shift(shifts[2 * (first + f)], &fy);
        const int kx = split_shift(shifts[2 * (first + f) + 1], &fx);
        const float wy0 = float(1 - fy), wy1 = float(fy);
        const float wx0 = float(1 - fx), wx1 = float(fx);
        const bool lerp = fx > 0;
        const T *src = in + f * pixels;
        float *dst = out + f * pixels;
        for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pixels;
             i += int64_t(gridDim.x) * blockDim.x) {
            const int u = int(i / w), v = int(i % w);
            const float h0 = shifted_row(src, h, w, u + ky, v + kx, lerp, wx0, wx1);
            dst[i] = fy > 0 ? wy0 * h0 + wy1 * shifted_row(src, h, w, u + ky + 1, v + kx, lerp,
                                                          wx0, wx1)
                            : h0;
        }
    }
}

template <typename T>
cudaError_t shift_launch(const ShiftArgs &a) {
    const int64_t pixels = int64_t(a.sig_y) * a.sig_x;
    const int64_t per_block = int64_t(kShiftThreads) * 4;
    const dim3 grid(unsigned(std::min<int64_t>((pixels + per_block - 1) / per_block, 1024)),
                    unsigned(std::min<int64_t>(a.n_frames, 65535)));
    STEMDOT_LAUNCH(grid, kShiftThreads, a.stream, shift_frames<T>)(
        static_cast<const T *>(a.in), a.n_frames, a.first, a.shifts, a.sig_y, a.sig_x, a.out);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_shift(const ShiftArgs &a) {
    switch (a.dtype) {
    case STEMDOT_UINT8: return shift_launch<uint8_t>(a);
    case STEMDOT_UINT16: return shift_launch<uint16_t>(a);
    case STEMDOT_UINT32: return shift_launch<uint32_t>(a);
    case STEMDOT_INT8: return shift_launch<int8_t>(a);
    case STEMDOT_INT16: return shift_launch<int16_t>(a);
    case STEMDOT_INT32: return shift_launch<int32_t>(a);
    case STEMDOT_FLOAT32: return shift_launch<float>(a);
    case STEMDOT_FLOAT64: return shift_launch<double>(a);
    }
    return cudaErrorInvalidValue;
}

}  // namespace stemdot
