// feed.cu: the device side of the copy-free feed. Frames DMA'd straight from a registered
// memory mapping of the file arrive as records (a per-frame header, the pixels in the
// file's byte order, maybe a footer) at a fixed stride; unpack_frames turns them into the
// packed frames in host byte order that the mask-dot kernels read, and checks each
// record's header magic (MIB's "MQ1,"). At device-copy speed (TB/s) this costs a few
// percent of the PCIe transfer it follows.
#include "feed.cuh"

#include "launch.cuh"

namespace stemdot {
namespace {

constexpr int kUnpackThreads = 256;

// Byte-swaps the elements of one 32-bit word holding 4/elem elements.
__device__ __forceinline__ uint32_t swap_word(uint32_t w, int elem) {
    if (elem == 2) return __byte_perm(w, 0, 0x2301);
    if (elem == 4) return __byte_perm(w, 0, 0x0123);
    return w;
}

// Word path: header, stride and frame bytes are multiples of 4. grid.y = frames.
__global__ void unpack_words(const uint8_t *__restrict__ raw, int64_t stride, int header,
                             int64_t frame_words, int elem, bool swap,
                             uint32_t *__restrict__ out) {
    const int64_t f = blockIdx.y;
    const uint32_t *src = reinterpret_cast<const uint32_t *>(raw + f * stride + header);
    uint32_t *dst = out + f * frame_words;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < frame_words;
         i += int64_t(gridDim.x) * blockDim.x) {
        const uint32_t w = src[i];
        dst[i] = swap ? swap_word(w, elem) : w;
    }
}

// Byte path for any layout. grid.y = frames.
__global__ void unpack_bytes(const uint8_t *__restrict__ raw, int64_t stride, int header,
                             int64_t frame_bytes, int elem, bool swap,
                             uint8_t *__restrict__ out) {
    const int64_t f = blockIdx.y;
    const uint8_t *src = raw + f * stride + header;
    uint8_t *dst = out + f * frame_bytes;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < frame_bytes;
         i += int64_t(gridDim.x) * blockDim.x) {
        // Element e's byte k comes from byte elem-1-k when swapping.
        const int64_t k = i % elem;
        dst[i] = swap ? src[i - k + (elem - 1 - k)] : src[i];
    }
}

// Sets *bad to the lowest frame whose record does not start with the magic bytes.
__global__ void check_magic(const uint8_t *__restrict__ raw, int64_t stride, int64_t n_frames,
                            uint32_t magic, int magic_len, int *bad) {
    const int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (f >= n_frames) return;
    const uint8_t *h = raw + f * stride;
    for (int k = 0; k < magic_len; k++) {
        if (h[k] != ((magic >> (8 * k)) & 0xffu)) {
            atomicMin(bad, int(f));
            return;
        }
    }
}

}  // namespace

cudaError_t launch_unpack(const UnpackArgs &a) {
    if (a.magic_len > 0) {
        const int blocks = int((a.n_frames + kUnpackThreads - 1) / kUnpackThreads);
        STEMDOT_LAUNCH(blocks, kUnpackThreads, a.stream, check_magic)(
            static_cast<const uint8_t *>(a.raw), a.stride, a.n_frames, a.magic, a.magic_len,
            a.bad_frame);
    }
    // 8-byte pixels are swapped across two words: the byte path.
    const bool words = a.header % 4 == 0 && a.stride % 4 == 0 && a.frame_bytes % 4 == 0 &&
                       !(a.swap && a.elem > 4);
    const int64_t units = words ? a.frame_bytes / 4 : a.frame_bytes;
    // Enough blocks per frame to keep the device busy with few frames, each thread a few
    // units: frames are 64 KiB to 64 MiB.
    const int64_t per_block = int64_t(kUnpackThreads) * 4;
    const dim3 grid(unsigned(std::min<int64_t>((units + per_block - 1) / per_block, 1024)),
                    unsigned(a.n_frames));
    if (words) {
        STEMDOT_LAUNCH(grid, kUnpackThreads, a.stream, unpack_words)(
            static_cast<const uint8_t *>(a.raw), a.stride, a.header, units, a.elem, a.swap,
            static_cast<uint32_t *>(a.out));
    } else {
        STEMDOT_LAUNCH(grid, kUnpackThreads, a.stream, unpack_bytes)(
            static_cast<const uint8_t *>(a.raw), a.stride, a.header, units, a.elem, a.swap,
            static_cast<uint8_t *>(a.out));
    }
    return cudaGetLastError();
}

}  // namespace stemdot
