// resident.cu: datasets held in device memory (stemdot_frames_*): the frames are loaded
// once through two pinned staging buffers (the host reads into one while the other is
// copied), then any mask stack is applied to them by the kernels of mask_dot.cu, with
// only the results crossing PCIe. See stemdot_kernels.h for the contract of each function.
#include <algorithm>

#include "mask_dot.cuh"
#include "runtime.cuh"
#include "stemdot_kernels.h"

using namespace stemdot;

namespace {

// Pinned bytes of one staging slot.
constexpr int64_t kStageBytes = int64_t(32) << 20;
// Largest apply chunk: frames, and bytes of its results and split-K partial sums on the
// device (also keeps the tiled kernel's grid.x, frame blocks x mask groups, far below 2^31).
constexpr int64_t kChunkFrames = int64_t(1) << 22;
constexpr int64_t kChunkWorkBytes = int64_t(128) << 20;

}  // namespace

struct stemdot_frames {
    int device = 0;
    int dtype = 0;
    size_t elem = 0;
    int64_t pixels = 0;
    int64_t frame_bytes = 0;
    int64_t n_frames = 0;
    int sm_count = 0;
    char *frames = nullptr;  // device, n_frames x frame_bytes
    cudaStream_t stream = nullptr;
    // Upload staging (between create and finish).
    int stage_frames = 0;
    void *stage[2] = {nullptr, nullptr};
    cudaEvent_t staged[2] = {nullptr, nullptr};
    // Apply workspace, grown on demand.
    void *out = nullptr;
    size_t out_bytes = 0;
    void *partial = nullptr;
    size_t partial_bytes = 0;
};

namespace {

// Frees the staging buffers and their events (the stream drained; device current).
void free_staging(stemdot_frames *r, FirstError *fe) {
    for (int i = 0; i < 2; i++) {
        if (r->stage[i]) fe->check(cudaFreeHost(r->stage[i]), "cudaFreeHost");
        if (r->staged[i]) fe->check(cudaEventDestroy(r->staged[i]), "cudaEventDestroy");
        r->stage[i] = nullptr;
        r->staged[i] = nullptr;
    }
}

// Frees everything r holds and r itself (device current).
stemdot_status resident_free(stemdot_frames *r) {
    FirstError fe;
    if (r->stream) fe.check(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    free_staging(r, &fe);
    if (r->frames) fe.check(cudaFree(r->frames), "cudaFree");
    if (r->out) fe.check(cudaFree(r->out), "cudaFree");
    if (r->partial) fe.check(cudaFree(r->partial), "cudaFree");
    if (r->stream) fe.check(cudaStreamDestroy(r->stream), "cudaStreamDestroy");
    delete r;
    return fe.st;
}

// Makes *buf hold at least bytes of device memory (contents not kept).
stemdot_status reserve(void **buf, size_t *have, size_t bytes) {
    if (bytes <= *have) return kOK;
    if (*buf) {
        const cudaError_t err = cudaFree(*buf);
        *buf = nullptr;
        *have = 0;
        if (err != cudaSuccess) return STEMDOT_FAIL(err, "cudaFree");
    }
    CUDA_TRY(cudaMalloc, buf, bytes);
    *have = bytes;
    return kOK;
}

// Enqueues the kernels and result copies of frames [first, first+n) in chunks of chunk.
stemdot_status apply(stemdot_frames *r, const stemdot_masks *m, bool f64, int64_t first,
                     int64_t n, int64_t chunk, char *out_host) {
    const size_t acc = f64 ? sizeof(double) : sizeof(float);
    // The workspace for the full chunk and for the last, shorter one (the split-K of a
    // smaller chunk may want more partial sums).
    const int64_t last = n % chunk == 0 ? chunk : n % chunk;
    const int64_t cap = std::max(partial_elems(m, int(r->elem), std::min(chunk, n), r->sm_count),
                                 partial_elems(m, int(r->elem), last, r->sm_count));
    stemdot_status st = reserve(&r->out, &r->out_bytes, size_t(std::min(chunk, n)) * m->n_masks * acc);
    if (st.code == 0) st = reserve(&r->partial, &r->partial_bytes, size_t(cap) * sizeof(double));
    if (st.code != 0) return st;
    for (int64_t done = 0; done < n; done += chunk) {
        const int64_t c = std::min(chunk, n - done);
        st = launch_masks(m, r->dtype, f64, r->sm_count, r->frames + (first + done) * r->frame_bytes,
                          c, r->out, cap > 0 ? r->partial : nullptr, cap, r->stream);
        if (st.code != 0) return st;
        // Stream order: the next chunk's kernel overwrites r->out only after this copy.
        CUDA_TRY(cudaMemcpyAsync, out_host + size_t(done) * m->n_masks * acc, r->out,
                 size_t(c) * m->n_masks * acc, cudaMemcpyDeviceToHost, r->stream);
    }
    CUDA_TRY(cudaStreamSynchronize, r->stream);
    return kOK;
}

}  // namespace

extern "C" {

stemdot_status stemdot_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    CUDA_TRY(cudaSetDevice, device);
    CUDA_TRY(cudaMemGetInfo, free_bytes, total_bytes);
    return kOK;
}

stemdot_status stemdot_frames_create(int device, int dtype, int64_t pixels, int64_t n_frames,
                                       stemdot_frames **out) {
    *out = nullptr;
    if (pixels < 1 || n_frames < 1) return invalid();
    const size_t elem = dtype_size(dtype);
    if (elem == 0) return invalid(STEMDOT_ERR_UNSUPPORTED_DTYPE);
    int64_t frame_bytes, total;
    if (!mul_ok(pixels, int64_t(elem), &frame_bytes) || !mul_ok(frame_bytes, n_frames, &total)) {
        return invalid(STEMDOT_ERR_TOO_LARGE);
    }
    size_t free_bytes, total_bytes;
    const stemdot_status mem = stemdot_device_memory(device, &free_bytes, &total_bytes);
    if (mem.code != 0) return mem;
    if (free_bytes < STEMDOT_RESIDENT_RESERVE ||
        uint64_t(total) > free_bytes - STEMDOT_RESIDENT_RESERVE) {
        return invalid(STEMDOT_ERR_DEVICE_MEMORY);
    }
    stemdot_frames *r = new stemdot_frames;
    r->device = device;
    r->dtype = dtype;
    r->elem = elem;
    r->pixels = pixels;
    r->frame_bytes = frame_bytes;
    r->n_frames = n_frames;
    r->stage_frames = int(std::min(n_frames, std::max<int64_t>(1, kStageBytes / frame_bytes)));
    stemdot_status st = kOK;
    cudaError_t err = cudaDeviceGetAttribute(&r->sm_count, cudaDevAttrMultiProcessorCount, device);
    const char *fn = "cudaDeviceGetAttribute";
    if (err == cudaSuccess) {
        err = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
        fn = "cudaStreamCreateWithFlags";
    }
    if (err == cudaSuccess) {
        err = cudaMalloc(&r->frames, size_t(total));
        fn = "cudaMalloc";
    }
    if (err != cudaSuccess) {
        st = STEMDOT_FAIL(err, fn);
        resident_free(r);
        return st;
    }
    *out = r;
    return kOK;
}

stemdot_status stemdot_frames_stage(stemdot_frames *r, int slot, void **ptr, int *frames) {
    *ptr = nullptr;
    *frames = 0;
    if (slot < 0 || slot > 1) return invalid();
    CUDA_TRY(cudaSetDevice, r->device);
    if (r->staged[slot] == nullptr) {
        CUDA_TRY(cudaEventCreateWithFlags, &r->staged[slot],
                 cudaEventBlockingSync | cudaEventDisableTiming);
    }
    if (r->stage[slot] == nullptr) {
        CUDA_TRY(cudaHostAlloc, &r->stage[slot], size_t(r->stage_frames) * size_t(r->frame_bytes),
                 cudaHostAllocDefault);
    } else {
        CUDA_TRY(cudaEventSynchronize, r->staged[slot]);
    }
    *ptr = r->stage[slot];
    *frames = r->stage_frames;
    return kOK;
}

stemdot_status stemdot_frames_upload(stemdot_frames *r, int slot, int64_t first_frame,
                                       int n_frames) {
    if (slot < 0 || slot > 1 || r->stage[slot] == nullptr || n_frames < 1 ||
        n_frames > r->stage_frames || first_frame < 0 || first_frame > r->n_frames - n_frames) {
        return invalid();
    }
    CUDA_TRY(cudaSetDevice, r->device);
    CUDA_TRY(cudaMemcpyAsync, r->frames + first_frame * r->frame_bytes, r->stage[slot],
             size_t(n_frames) * size_t(r->frame_bytes), cudaMemcpyHostToDevice, r->stream);
    CUDA_TRY(cudaEventRecord, r->staged[slot], r->stream);
    return kOK;
}

stemdot_status stemdot_frames_finish(stemdot_frames *r) {
    CUDA_TRY(cudaSetDevice, r->device);
    FirstError fe;
    fe.check(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    free_staging(r, &fe);
    return fe.st;
}

stemdot_status stemdot_frames_apply(stemdot_frames *r, stemdot_masks *m, int float64,
                                      int64_t first, int64_t n, void *out_host) {
    if (m == nullptr || out_host == nullptr || m->device != r->device || m->pixels != r->pixels ||
        first < 0 || n < 1 || first > r->n_frames - n) {
        return invalid();
    }
    const int64_t acc = float64 ? 8 : 4;
    // Chunks whose results and split-K partial sums (doubles) fit kChunkWorkBytes.
    int64_t chunk =
        std::max<int64_t>(1, std::min(kChunkFrames, kChunkWorkBytes / (m->n_masks * acc)));
    while (chunk > 1 && chunk * m->n_masks * acc + partial_elems(m, int(r->elem), chunk, r->sm_count) *
                                                       int64_t(sizeof(double)) > kChunkWorkBytes) {
        chunk = (chunk + 1) / 2;
    }
    CUDA_TRY(cudaSetDevice, r->device);
    const stemdot_status st =
        apply(r, m, float64 != 0, first, n, chunk, static_cast<char *>(out_host));
    if (st.code != 0) {
        // Nothing of this call may still run when the caller reuses out_host.
        cudaStreamSynchronize(r->stream);
        cudaGetLastError();
    }
    return st;
}

stemdot_status stemdot_frames_destroy(stemdot_frames *r) {
    CUDA_TRY(cudaSetDevice, r->device);
    return resident_free(r);
}

}  // extern "C"
