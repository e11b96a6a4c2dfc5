// feed.cuh: launcher of the unpack kernel of the copy-free feed (feed.cu). Internal to
// libstemdot_kernels.a.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace stemdot {

struct UnpackArgs {
    const void *raw;      // device: n_frames records of stride bytes
    int64_t n_frames;     // at most 65535 (grid.y)
    int64_t stride;       // bytes from one record to the next
    int header;           // bytes before the pixels in a record
    int64_t frame_bytes;  // pixel bytes of a frame
    int elem;             // bytes per pixel (1, 2, 4 or 8)
    bool swap;            // reverse the bytes of each pixel
    uint32_t magic;       // the first magic_len bytes of every record, little-endian packed
    int magic_len;        // 0 to 4; 0: no check
    int *bad_frame;       // device: lowered to the first record whose magic differs
    void *out;            // device: n_frames x frame_bytes, packed
    cudaStream_t stream;
};

// Enqueues the magic check and the unpacking on args.stream.
cudaError_t launch_unpack(const UnpackArgs &args);

}  // namespace stemdot
