// shift.cuh: launcher of the kernel that builds the frames' g_f of shifted masks on the
// device (shift.cu). Internal to libstemdot_kernels.a.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace stemdot {

struct ShiftArgs {
    const void *in;         // device: n_frames packed frames of dtype, host byte order
    int dtype;              // any STEMDOT_* dtype
    int64_t n_frames;       // frames of the tile
    int64_t first;          // the tile's first frame: its shift is shifts[2*first], [2*first+1]
    const double *shifts;   // device: (dy, dx) pairs of frames [0, first + n_frames) at least
    int sig_y, sig_x;       // frame shape
    float *out;             // device: n_frames x sig_y*sig_x float32 g_f
    cudaStream_t stream;
};

// Enqueues on args.stream the building of each frame's g_f (engine/shift.go): for frame
// f shifted by dy = ky + fy, dx = kx + fx (k integer, f in [0, 1)),
//   g_f(u, v) = sum_{a,b in {0,1}} wy_a*wx_b*frame_f(u + ky + a, v + kx + b),
// wy_0 = 1 - fy, wy_1 = fy, wx_0 = 1 - fx, wx_1 = fx, pixels outside the frame zero, and
// a weight of 0 reads nothing (a NaN pixel does not spread where it has no weight); in
// float32, rows shifted in x first, then blended in y, as the CPU workers do.
cudaError_t launch_shift(const ShiftArgs &args);

}  // namespace stemdot
