// runtime.cu: host side of libstemdot_kernels.a: devices, device-resident mask stacks,
// per-worker runners (pinned staging buffers, streams, events) and copy timing. See
// stemdot_kernels.h for the contract of each function.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include "feed.cuh"
#include "mask_dot.cuh"
#include "runtime.cuh"
#include "shift.cuh"
#include "stemdot_kernels.h"

using namespace stemdot;  // runtime.cuh: kOK, invalid, FirstError, dtype_size, mul_ok

namespace {

// Frees the device memory of m (its device must be current) and deletes it.
stemdot_status masks_free(stemdot_masks *m) {
    FirstError fe;
    if (m->dense) fe.check(cudaFree(m->dense), "cudaFree");
    if (m->rowptr) fe.check(cudaFree(m->rowptr), "cudaFree");
    if (m->col) fe.check(cudaFree(m->col), "cudaFree");
    if (m->val) fe.check(cudaFree(m->val), "cudaFree");
    delete m;
    return fe.st;
}

stemdot_status upload(void **dst, const void *src, size_t bytes) {
    CUDA_TRY(cudaMalloc, dst, std::max<size_t>(bytes, 1));
    if (bytes > 0) CUDA_TRY(cudaMemcpy, *dst, src, bytes, cudaMemcpyHostToDevice);
    return kOK;
}

// Waits until uploads from pageable memory (legacy default stream) reached the device,
// so that kernels on non-blocking streams see them.
stemdot_status finish_upload(stemdot_masks *m, stemdot_status st) {
    if (st.code == 0) {
        const cudaError_t err = cudaStreamSynchronize(0);
        if (err != cudaSuccess) st = STEMDOT_FAIL(err, "cudaStreamSynchronize");
    }
    if (st.code != 0) masks_free(m);
    return st;
}

}  // namespace

struct Slot {
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    void *host_in = nullptr;   // pinned, tile_frames frames (staged feed, made on demand)
    void *host_out = nullptr;  // pinned, tile_frames x n_masks results
    int *host_bad = nullptr;   // pinned: first record of the tile with a wrong magic, or -1
    void *dev_in = nullptr;
    void *dev_raw = nullptr;   // tile_frames records (mapped feed with repacking)
    int *dev_bad = nullptr;
    void *dev_out = nullptr;
    void *dev_partial = nullptr;  // split-K workspace of the dense kernel (doubles)
    float *dev_g = nullptr;       // shifted runner: the tile's g_f, float32 frames
};

struct stemdot_runner {
    int device = 0;
    stemdot_masks *masks = nullptr;
    int dtype = 0;
    size_t elem = 0;
    size_t acc = 0;  // 4 or 8
    bool f64 = false;
    int tile_frames = 0;
    int sm_count = 0;
    int64_t frame_bytes = 0;
    int64_t record_stride = 0;  // mapped feed: bytes per record (0: none)
    int64_t partial_cap = 0;    // elements of each slot's workspace
    // Shifted masks: the (dy, dx) pairs of shift_frames frames on the device, and the
    // frame shape; the mask kernels then read the float32 g_f built from the frames.
    double *dev_shifts = nullptr;
    int64_t shift_frames = 0;
    int sig_y = 0, sig_x = 0;
    int kernel_dtype = 0;  // the dtype the mask kernels read: dtype, or float32 if shifted
    std::vector<Slot> slots;
};

namespace {

// Partial-sum workspace (elements) the dense kernel wants for n_frames frames.
int64_t partial_elems(const stemdot_runner *r, int64_t n_frames) {
    return stemdot::partial_elems(r->masks, int(dtype_size(r->kernel_dtype)), n_frames,
                                  r->sm_count);
}

// Enqueues the kernel for n_frames frames at dev_in, results to dev_out.
stemdot_status launch(const stemdot_runner *r, const void *dev_in, int64_t n_frames,
                      void *dev_out, void *dev_partial, int64_t partial_cap,
                      cudaStream_t stream) {
    return stemdot::launch_masks(r->masks, r->kernel_dtype, r->f64, r->sm_count, dev_in,
                                 n_frames, dev_out, dev_partial, partial_cap, stream);
}

// Enqueues the work of a tile of n_frames native frames at s.dev_in, the first of them
// frame first: for a shifted runner the building of their g_f into s.dev_g, then the
// mask kernel (on g_f, or on the frames), results to s.dev_out.
stemdot_status compute(const stemdot_runner *r, const Slot &s, int64_t first, int n_frames) {
    const void *in = s.dev_in;
    if (r->dev_shifts) {
        cudaGetLastError();  // see launch_masks
        const stemdot::ShiftArgs a{s.dev_in, r->dtype, n_frames,  first,   r->dev_shifts,
                                   r->sig_y, r->sig_x, s.dev_g,   s.stream};
        const cudaError_t err = stemdot::launch_shift(a);
        if (err != cudaSuccess) return STEMDOT_FAIL(err, "cudaLaunchKernel");
        in = s.dev_g;
    }
    return launch(r, in, n_frames, s.dev_out, s.dev_partial, r->partial_cap, s.stream);
}

// Frees what a (partly) created runner holds; its device must be current.
stemdot_status runner_free(stemdot_runner *r) {
    FirstError fe;
    for (Slot &s : r->slots) {
        if (s.stream) fe.check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
        if (s.host_in) fe.check(cudaFreeHost(s.host_in), "cudaFreeHost");
        if (s.host_out) fe.check(cudaFreeHost(s.host_out), "cudaFreeHost");
        if (s.host_bad) fe.check(cudaFreeHost(s.host_bad), "cudaFreeHost");
        if (s.dev_in) fe.check(cudaFree(s.dev_in), "cudaFree");
        if (s.dev_raw) fe.check(cudaFree(s.dev_raw), "cudaFree");
        if (s.dev_bad) fe.check(cudaFree(s.dev_bad), "cudaFree");
        if (s.dev_out) fe.check(cudaFree(s.dev_out), "cudaFree");
        if (s.dev_partial) fe.check(cudaFree(s.dev_partial), "cudaFree");
        if (s.dev_g) fe.check(cudaFree(s.dev_g), "cudaFree");
        if (s.done) fe.check(cudaEventDestroy(s.done), "cudaEventDestroy");
        if (s.stream) fe.check(cudaStreamDestroy(s.stream), "cudaStreamDestroy");
    }
    if (r->dev_shifts) fe.check(cudaFree(r->dev_shifts), "cudaFree");
    if (r->masks) {
        const stemdot_status st = stemdot_masks_release(r->masks, nullptr);
        if (st.code != 0 && fe.st.code == 0) fe.st = st;
    }
    delete r;
    return fe.st;
}

stemdot_status runner_init(stemdot_runner *r, int slots, const double *shifts) {
    const stemdot_masks *m = r->masks;
    CUDA_TRY(cudaDeviceGetAttribute, &r->sm_count, cudaDevAttrMultiProcessorCount, r->device);
    int64_t in_bytes, out_elems, raw_bytes = 0, g_bytes = 0;
    if (!mul_ok(r->tile_frames, r->frame_bytes, &in_bytes) ||
        (shifts && !mul_ok(r->tile_frames, m->pixels * int64_t(sizeof(float)), &g_bytes)) ||
        !mul_ok(r->tile_frames, m->n_masks, &out_elems) ||
        (r->record_stride != r->frame_bytes &&
         !mul_ok(r->tile_frames, r->record_stride, &raw_bytes))) {
        return invalid(STEMDOT_ERR_TOO_LARGE);
    }
    const size_t out_bytes = size_t(out_elems) * r->acc;
    if (shifts) {
        // Once per runner, from pageable memory: wait until it reached the device (see
        // finish_upload).
        const size_t bytes = size_t(r->shift_frames) * 2 * sizeof(double);
        CUDA_TRY(cudaMalloc, reinterpret_cast<void **>(&r->dev_shifts), bytes);
        CUDA_TRY(cudaMemcpy, r->dev_shifts, shifts, bytes, cudaMemcpyHostToDevice);
        CUDA_TRY(cudaStreamSynchronize, 0);
    }
    r->partial_cap = partial_elems(r, r->tile_frames);
    r->slots.resize(slots);
    for (Slot &s : r->slots) {
        CUDA_TRY(cudaStreamCreateWithFlags, &s.stream, cudaStreamNonBlocking);
        // Blocking sync: a waiting worker sleeps instead of spinning on a CPU core that a
        // CPU worker could use.
        CUDA_TRY(cudaEventCreateWithFlags, &s.done,
                 cudaEventBlockingSync | cudaEventDisableTiming);
        CUDA_TRY(cudaHostAlloc, &s.host_out, out_bytes, cudaHostAllocDefault);
        CUDA_TRY(cudaHostAlloc, reinterpret_cast<void **>(&s.host_bad), sizeof(int),
                 cudaHostAllocDefault);
        *s.host_bad = -1;
        CUDA_TRY(cudaMalloc, reinterpret_cast<void **>(&s.dev_bad), sizeof(int));
        CUDA_TRY(cudaMalloc, &s.dev_in, size_t(in_bytes));
        if (raw_bytes > 0) CUDA_TRY(cudaMalloc, &s.dev_raw, size_t(raw_bytes));
        CUDA_TRY(cudaMalloc, &s.dev_out, out_bytes);
        if (g_bytes > 0) {
            CUDA_TRY(cudaMalloc, reinterpret_cast<void **>(&s.dev_g), size_t(g_bytes));
        }
        if (r->partial_cap > 0) {
            CUDA_TRY(cudaMalloc, &s.dev_partial, size_t(r->partial_cap) * sizeof(double));
        }
    }
    return kOK;
}

// Device-resident frames and results for stemdot_runner_time_kernel.
struct TimingBuffers {
    void *frames = nullptr;
    void *out = nullptr;
    void *partial = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    stemdot_status release() {
        FirstError fe;
        if (frames) fe.check(cudaFree(frames), "cudaFree");
        if (out) fe.check(cudaFree(out), "cudaFree");
        if (partial) fe.check(cudaFree(partial), "cudaFree");
        if (start) fe.check(cudaEventDestroy(start), "cudaEventDestroy");
        if (stop) fe.check(cudaEventDestroy(stop), "cudaEventDestroy");
        if (stream) fe.check(cudaStreamDestroy(stream), "cudaStreamDestroy");
        return fe.st;
    }
};

stemdot_status time_kernel(const stemdot_runner *r, TimingBuffers *b, int64_t n_frames,
                           int iters, double *seconds) {
    int64_t frame_total, out_elems;
    const int64_t frame_bytes = r->masks->pixels * int64_t(dtype_size(r->kernel_dtype));
    if (!mul_ok(n_frames, frame_bytes, &frame_total) ||
        !mul_ok(n_frames, r->masks->n_masks, &out_elems)) {
        return invalid(STEMDOT_ERR_TOO_LARGE);
    }
    const int64_t cap = partial_elems(r, n_frames);
    CUDA_TRY(cudaMalloc, &b->frames, size_t(frame_total));
    CUDA_TRY(cudaMalloc, &b->out, size_t(out_elems) * r->acc);
    if (cap > 0) CUDA_TRY(cudaMalloc, &b->partial, size_t(cap) * sizeof(double));
    CUDA_TRY(cudaStreamCreateWithFlags, &b->stream, cudaStreamNonBlocking);
    CUDA_TRY(cudaEventCreate, &b->start);
    CUDA_TRY(cudaEventCreate, &b->stop);
    CUDA_TRY(cudaMemsetAsync, b->frames, 0x11, size_t(frame_total), b->stream);
    stemdot_status st = launch(r, b->frames, n_frames, b->out, b->partial, cap, b->stream);
    if (st.code != 0) return st;
    // Event timing resolves about 0.5 us: repeat with more launches (at most 3 rounds)
    // until they take at least 1 ms, so that a tiny kernel is not timed as 0; the host
    // clock stands in if the events still read 0.
    for (int round = 0;; round++) {
        const auto t0 = std::chrono::steady_clock::now();
        CUDA_TRY(cudaEventRecord, b->start, b->stream);
        for (int i = 0; i < iters; i++) {
            st = launch(r, b->frames, n_frames, b->out, b->partial, cap, b->stream);
            if (st.code != 0) return st;
        }
        CUDA_TRY(cudaEventRecord, b->stop, b->stream);
        CUDA_TRY(cudaEventSynchronize, b->stop);
        const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime, &ms, b->start, b->stop);
        if (ms >= 1.0f || round == 2) {
            *seconds = (ms > 0 ? double(ms) * 1e-3 : host) / iters;
            return kOK;
        }
        iters *= ms > 0.01f ? std::min(64, int(2.0f / ms) + 1) : 64;
    }
}

// Buffers of stemdot_copy_time.
struct CopyBuffers {
    void *src = nullptr;
    bool src_host = false;
    void *dst = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    stemdot_status release() {
        FirstError fe;
        if (src) fe.check(src_host ? cudaFreeHost(src) : cudaFree(src),
                          src_host ? "cudaFreeHost" : "cudaFree");
        if (dst) fe.check(cudaFree(dst), "cudaFree");
        if (start) fe.check(cudaEventDestroy(start), "cudaEventDestroy");
        if (stop) fe.check(cudaEventDestroy(stop), "cudaEventDestroy");
        if (stream) fe.check(cudaStreamDestroy(stream), "cudaStreamDestroy");
        return fe.st;
    }
};

stemdot_status copy_time(CopyBuffers *b, int kind, size_t bytes, int iters, double *seconds) {
    b->src_host = kind == STEMDOT_COPY_H2D_PINNED;
    CUDA_TRY(cudaStreamCreateWithFlags, &b->stream, cudaStreamNonBlocking);
    if (b->src_host) {
        CUDA_TRY(cudaHostAlloc, &b->src, bytes, cudaHostAllocDefault);
        std::memset(b->src, 0x11, bytes);
    } else {
        CUDA_TRY(cudaMalloc, &b->src, bytes);
        CUDA_TRY(cudaMemsetAsync, b->src, 0x11, bytes, b->stream);
    }
    CUDA_TRY(cudaMalloc, &b->dst, bytes);
    CUDA_TRY(cudaEventCreate, &b->start);
    CUDA_TRY(cudaEventCreate, &b->stop);
    const cudaMemcpyKind dir = b->src_host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
    CUDA_TRY(cudaMemcpyAsync, b->dst, b->src, bytes, dir, b->stream);  // warm-up
    CUDA_TRY(cudaEventRecord, b->start, b->stream);
    for (int i = 0; i < iters; i++) {
        CUDA_TRY(cudaMemcpyAsync, b->dst, b->src, bytes, dir, b->stream);
    }
    CUDA_TRY(cudaEventRecord, b->stop, b->stream);
    CUDA_TRY(cudaEventSynchronize, b->stop);
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime, &ms, b->start, b->stop);
    *seconds = double(ms) * 1e-3 / iters;
    return kOK;
}

}  // namespace

namespace stemdot {

int64_t partial_elems(const stemdot_masks *m, int elem, int64_t n_frames, int sm_count) {
    if (m->sparse) return 0;
    const int64_t s =
        dense_splits(elem, n_frames, m->pixels, m->mask_group, m->n_groups, sm_count);
    return s > 1 ? s * n_frames * m->n_masks : 0;
}

stemdot_status launch_masks(const stemdot_masks *m, int dtype, bool f64, int sm_count,
                            const void *dev_in, int64_t n_frames, void *dev_out,
                            void *dev_partial, int64_t partial_cap, cudaStream_t stream) {
    // The launchers report cudaGetLastError: clear what an earlier failed call on this
    // thread left (an invalid device ordinal, a refused registration), so that it is not
    // reported as this launch's error.
    cudaGetLastError();
    cudaError_t err;
    if (m->sparse) {
        SparseArgs a{dev_in, n_frames, m->pixels, m->rowptr, m->col,
                     m->val, m->n_masks, dev_out, stream};
        err = launch_sparse(dtype, f64, a);
    } else {
        DenseArgs a{dev_in,      n_frames,      m->pixels,   m->dense,
                    m->n_masks,  m->mask_group, m->n_groups, dev_out,
                    static_cast<double *>(dev_partial), partial_cap, sm_count, stream};
        err = launch_dense(dtype, f64, a);
    }
    if (err != cudaSuccess) return STEMDOT_FAIL(err, "cudaLaunchKernel");
    return kOK;
}

}  // namespace stemdot

extern "C" {

void stemdot_use_tiled_dense(int on) { stemdot::use_tiled_dense(on != 0); }

const char *stemdot_error_string(int code) {
    switch (code) {
    case 0: return "no error";
    case STEMDOT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case STEMDOT_ERR_UNSUPPORTED_DTYPE:
        return "unsupported dtype (want uint8, uint16, uint32 or float32)";
    case STEMDOT_ERR_TOO_LARGE: return "sizes too large";
    case STEMDOT_ERR_UNSUPPORTED:
        return "read-only host memory registration is not supported by this device";
    case STEMDOT_ERR_DEVICE_MEMORY: return "not enough free device memory for the dataset";
    }
    if (code < 0) return "unknown stemdot error";
    return cudaGetErrorString(cudaError_t(code));
}

stemdot_status stemdot_device_count(int *count) {
    *count = 0;
    const cudaError_t err = cudaGetDeviceCount(count);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        cudaGetLastError();  // clear: no GPU or no driver is a normal state
        *count = 0;
        return kOK;
    }
    if (err != cudaSuccess) return STEMDOT_FAIL(err, "cudaGetDeviceCount");
    return kOK;
}

stemdot_status stemdot_device_props(int device, stemdot_props *p) {
    std::memset(p, 0, sizeof(*p));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties, &prop, device);
    std::memcpy(p->name, prop.name, sizeof(p->name) - 1);
    p->total_memory = prop.totalGlobalMem;
    CUDA_TRY(cudaDeviceGetPCIBusId, p->pci_bus_id, int(sizeof(p->pci_bus_id)), device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->major, cudaDevAttrComputeCapabilityMajor, device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->minor, cudaDevAttrComputeCapabilityMinor, device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->multiprocessors, cudaDevAttrMultiProcessorCount,
             device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->async_engines, cudaDevAttrAsyncEngineCount, device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->l2_bytes, cudaDevAttrL2CacheSize, device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth,
             device);
    CUDA_TRY(cudaDeviceGetAttribute, &p->memory_clock_khz, cudaDevAttrMemoryClockRate, device);
    CUDA_TRY(cudaRuntimeGetVersion, &p->runtime_version);
    CUDA_TRY(cudaDriverGetVersion, &p->driver_version);
    return kOK;
}

stemdot_status stemdot_masks_create_dense(int device, const float *weights, int n_masks,
                                          int64_t pixels, stemdot_masks **out) {
    *out = nullptr;
    if (weights == nullptr || n_masks < 1 || pixels < 1) return invalid();
    const int group = stemdot::mask_group(n_masks);
    const int n_groups = (n_masks + group - 1) / group;
    int64_t padded, weight_bytes;
    if (n_groups > stemdot::kMaxGridYZ || !mul_ok(int64_t(n_groups) * group, pixels, &padded) ||
        !mul_ok(padded, sizeof(float), &padded) ||
        !mul_ok(int64_t(n_masks) * pixels, sizeof(float), &weight_bytes)) {
        return invalid(STEMDOT_ERR_TOO_LARGE);
    }
    CUDA_TRY(cudaSetDevice, device);
    stemdot_masks *m = new stemdot_masks;
    m->device = device;
    m->n_masks = n_masks;
    m->pixels = pixels;
    m->mask_group = group;
    m->n_groups = n_groups;
    stemdot_status st = kOK;
    {
        cudaError_t err = cudaMalloc(&m->dense, size_t(padded));
        const char *fn = "cudaMalloc";
        if (err == cudaSuccess && padded > weight_bytes) {
            err = cudaMemset(reinterpret_cast<char *>(m->dense) + weight_bytes, 0,
                             size_t(padded - weight_bytes));
            fn = "cudaMemset";
        }
        if (err == cudaSuccess) {
            err = cudaMemcpy(m->dense, weights, size_t(weight_bytes), cudaMemcpyHostToDevice);
            fn = "cudaMemcpy";
        }
        if (err != cudaSuccess) st = STEMDOT_FAIL(err, fn);
    }
    st = finish_upload(m, st);
    if (st.code == 0) *out = m;
    return st;
}

stemdot_status stemdot_masks_create_csr(int device, int n_masks, int64_t pixels,
                                        const int32_t *rowptr, const int32_t *col,
                                        const float *val, stemdot_masks **out) {
    *out = nullptr;
    if (rowptr == nullptr || n_masks < 1 || n_masks > stemdot::kMaxGridYZ || pixels < 1 ||
        rowptr[0] != 0) {
        return invalid();
    }
    for (int i = 0; i < n_masks; i++) {
        if (rowptr[i + 1] < rowptr[i]) return invalid();
    }
    const int64_t nnz = rowptr[n_masks];
    if (nnz > 0 && (col == nullptr || val == nullptr)) return invalid();
    for (int64_t k = 0; k < nnz; k++) {
        if (col[k] < 0 || col[k] >= pixels) return invalid();
    }
    CUDA_TRY(cudaSetDevice, device);
    stemdot_masks *m = new stemdot_masks;
    m->device = device;
    m->n_masks = n_masks;
    m->pixels = pixels;
    m->sparse = true;
    stemdot_status st = upload(reinterpret_cast<void **>(&m->rowptr), rowptr,
                               sizeof(int32_t) * size_t(n_masks + 1));
    if (st.code == 0) {
        st = upload(reinterpret_cast<void **>(&m->col), col, sizeof(int32_t) * size_t(nnz));
    }
    if (st.code == 0) {
        st = upload(reinterpret_cast<void **>(&m->val), val, sizeof(float) * size_t(nnz));
    }
    st = finish_upload(m, st);
    if (st.code == 0) *out = m;
    return st;
}

void stemdot_masks_retain(stemdot_masks *m) { m->refs.fetch_add(1); }

stemdot_status stemdot_masks_release(stemdot_masks *m, int *remaining) {
    const int left = m->refs.fetch_sub(1) - 1;
    if (remaining) *remaining = left;
    if (left > 0) return kOK;
    CUDA_TRY(cudaSetDevice, m->device);
    return masks_free(m);
}

stemdot_status stemdot_runner_create(const stemdot_runner_config *cfg, stemdot_runner **out) {
    *out = nullptr;
    if (cfg->masks == nullptr || cfg->device != cfg->masks->device || cfg->tile_frames < 1 ||
        cfg->slots < 1 || cfg->record_stride < 0 ||
        (cfg->shifts && (cfg->shift_frames < 1 || cfg->sig_x < 1 ||
                         cfg->masks->pixels % cfg->sig_x != 0 ||
                         cfg->shift_frames > std::numeric_limits<int64_t>::max() / 16))) {
        return invalid();
    }
    const size_t elem = cfg->shifts ? shifted_dtype_size(cfg->dtype) : dtype_size(cfg->dtype);
    if (elem == 0) return invalid(STEMDOT_ERR_UNSUPPORTED_DTYPE);
    int64_t frame_bytes;
    if (!mul_ok(cfg->masks->pixels, int64_t(elem), &frame_bytes)) {
        return invalid(STEMDOT_ERR_TOO_LARGE);
    }
    if (cfg->record_stride > 0 && cfg->record_stride < frame_bytes) return invalid();
    CUDA_TRY(cudaSetDevice, cfg->device);
    stemdot_runner *r = new stemdot_runner;
    r->device = cfg->device;
    r->dtype = cfg->dtype;
    r->elem = elem;
    r->f64 = cfg->float64 != 0;
    r->acc = r->f64 ? sizeof(double) : sizeof(float);
    r->tile_frames = cfg->tile_frames;
    r->frame_bytes = frame_bytes;
    r->record_stride = cfg->record_stride > 0 ? cfg->record_stride : frame_bytes;
    r->kernel_dtype = cfg->dtype;
    if (cfg->shifts) {
        r->shift_frames = cfg->shift_frames;
        r->sig_x = cfg->sig_x;
        r->sig_y = int(cfg->masks->pixels / cfg->sig_x);
        r->kernel_dtype = STEMDOT_FLOAT32;
    }
    stemdot_masks_retain(cfg->masks);
    r->masks = cfg->masks;
    const stemdot_status st = runner_init(r, cfg->slots, cfg->shifts);
    if (st.code != 0) {
        runner_free(r);
        return st;
    }
    *out = r;
    return kOK;
}

stemdot_status stemdot_runner_destroy(stemdot_runner *r) {
    CUDA_TRY(cudaSetDevice, r->device);
    return runner_free(r);
}

void *stemdot_runner_input(stemdot_runner *r, int slot) { return r->slots[slot].host_in; }

const void *stemdot_runner_output(stemdot_runner *r, int slot) {
    return r->slots[slot].host_out;
}

// drain_on_error returns st; when it is a failure, it first drains the slot's stream: the
// caller will not wait on the slot's event, and its buffers must not be reused while
// queued work may still read them (the error to report is st, not the drain's).
static stemdot_status drain_on_error(Slot &s, stemdot_status st) {
    if (st.code != 0) {
        cudaStreamSynchronize(s.stream);
        cudaGetLastError();
    }
    return st;
}

// submit queues tile copy-in, kernels, result copy-out and the slot's event on its stream.
static stemdot_status submit(stemdot_runner *r, Slot &s, int64_t first, int n_frames) {
    CUDA_TRY(cudaMemcpyAsync, s.dev_in, s.host_in, size_t(n_frames) * size_t(r->frame_bytes),
             cudaMemcpyHostToDevice, s.stream);
    const stemdot_status st = compute(r, s, first, n_frames);
    if (st.code != 0) return st;
    CUDA_TRY(cudaMemcpyAsync, s.host_out, s.dev_out,
             size_t(n_frames) * size_t(r->masks->n_masks) * r->acc, cudaMemcpyDeviceToHost,
             s.stream);
    CUDA_TRY(cudaEventRecord, s.done, s.stream);
    return kOK;
}

// Whether frames [first, first + n_frames) have shifts, for a shifted runner.
static bool shifts_cover(const stemdot_runner *r, int64_t first, int64_t n_frames) {
    return !r->dev_shifts || (first >= 0 && first <= r->shift_frames - n_frames);
}

stemdot_status stemdot_runner_submit(stemdot_runner *r, int slot, int64_t first_frame,
                                     int n_frames) {
    if (slot < 0 || slot >= int(r->slots.size()) || n_frames < 1 || n_frames > r->tile_frames ||
        r->slots[slot].host_in == nullptr || !shifts_cover(r, first_frame, n_frames)) {
        return invalid();
    }
    CUDA_TRY(cudaSetDevice, r->device);
    Slot &s = r->slots[slot];
    return drain_on_error(s, submit(r, s, first_frame, n_frames));
}

stemdot_status stemdot_runner_stage(stemdot_runner *r) {
    CUDA_TRY(cudaSetDevice, r->device);
    for (Slot &s : r->slots) {
        if (s.host_in == nullptr) {
            CUDA_TRY(cudaHostAlloc, &s.host_in, size_t(r->tile_frames) * size_t(r->frame_bytes),
                     cudaHostAllocDefault);
        }
    }
    return kOK;
}

// submit_mapped queues the DMA of the tile's pieces, the unpacking (when records are not
// packed host-order frames), the kernel and the copies of results and magic check.
static stemdot_status submit_mapped(stemdot_runner *r, Slot &s, const stemdot_mapped_tile *t) {
    const bool packed = t->stride == r->frame_bytes && t->header == 0 && !t->swap;
    char *dst = static_cast<char *>(packed ? s.dev_in : s.dev_raw);
    for (int i = 0; i < 2; i++) {
        if (t->len[i] == 0) continue;
        CUDA_TRY(cudaMemcpyAsync, dst, t->src[i], t->len[i], cudaMemcpyHostToDevice, s.stream);
        dst += t->len[i];
    }
    CUDA_TRY(cudaMemsetAsync, s.dev_bad, 0x7f, sizeof(int), s.stream);
    if (!packed) {
        cudaGetLastError();  // see launch
        stemdot::UnpackArgs u{s.dev_raw,   t->n_frames, t->stride,   t->header,
                              r->frame_bytes, int(r->elem), t->swap != 0, t->magic,
                              t->magic_len, s.dev_bad,   s.dev_in,    s.stream};
        const cudaError_t err = stemdot::launch_unpack(u);
        if (err != cudaSuccess) return STEMDOT_FAIL(err, "cudaLaunchKernel");
    }
    const stemdot_status st = compute(r, s, t->first_frame, t->n_frames);
    if (st.code != 0) return st;
    CUDA_TRY(cudaMemcpyAsync, s.host_out, s.dev_out,
             size_t(t->n_frames) * size_t(r->masks->n_masks) * r->acc, cudaMemcpyDeviceToHost,
             s.stream);
    CUDA_TRY(cudaMemcpyAsync, s.host_bad, s.dev_bad, sizeof(int), cudaMemcpyDeviceToHost,
             s.stream);
    CUDA_TRY(cudaEventRecord, s.done, s.stream);
    return kOK;
}

stemdot_status stemdot_runner_submit_mapped(stemdot_runner *r, int slot,
                                            const stemdot_mapped_tile *t) {
    if (slot < 0 || slot >= int(r->slots.size()) || t->n_frames < 1 ||
        t->n_frames > r->tile_frames || t->n_frames > stemdot::kMaxGridYZ ||
        t->stride < r->frame_bytes || t->header < 0 ||
        t->header > t->stride - r->frame_bytes || t->magic_len < 0 || t->magic_len > 4 ||
        t->magic_len > t->header || !shifts_cover(r, t->first_frame, t->n_frames)) {
        return invalid();
    }
    const bool packed = t->stride == r->frame_bytes && t->header == 0 && !t->swap;
    if (!packed && (r->slots[slot].dev_raw == nullptr || t->stride > r->record_stride)) {
        return invalid();  // the runner was not made for these records
    }
    // The pieces hold exactly the records' bytes up to the last frame's pixels.
    const size_t want = size_t(t->n_frames - 1) * size_t(t->stride) + size_t(t->header) +
                        size_t(r->frame_bytes);
    if (t->len[0] + t->len[1] != want || (t->len[0] > 0 && t->src[0] == nullptr) ||
        (t->len[1] > 0 && t->src[1] == nullptr)) {
        return invalid();
    }
    CUDA_TRY(cudaSetDevice, r->device);
    Slot &s = r->slots[slot];
    return drain_on_error(s, submit_mapped(r, s, t));
}

int stemdot_runner_bad_frame(stemdot_runner *r, int slot) {
    const int v = *r->slots[slot].host_bad;
    return v == 0x7f7f7f7f ? -1 : v;
}

stemdot_status stemdot_host_register(int device, void *ptr, size_t bytes) {
    if (ptr == nullptr || bytes == 0) return invalid();
    CUDA_TRY(cudaSetDevice, device);
    int ro = 0;
    CUDA_TRY(cudaDeviceGetAttribute, &ro, cudaDevAttrHostRegisterReadOnlySupported, device);
    if (!ro) return invalid(STEMDOT_ERR_UNSUPPORTED);
    CUDA_TRY(cudaHostRegister, ptr, bytes, cudaHostRegisterReadOnly | cudaHostRegisterPortable);
    return kOK;
}

stemdot_status stemdot_host_unregister(int device, void *ptr) {
    CUDA_TRY(cudaSetDevice, device);
    CUDA_TRY(cudaHostUnregister, ptr);
    return kOK;
}

stemdot_status stemdot_device_init(int device) {
    CUDA_TRY(cudaSetDevice, device);
    CUDA_TRY(cudaFree, nullptr);  // creates the device's primary context
    return kOK;
}

stemdot_status stemdot_runner_wait(stemdot_runner *r, int slot) {
    if (slot < 0 || slot >= int(r->slots.size())) return invalid();
    CUDA_TRY(cudaSetDevice, r->device);
    CUDA_TRY(cudaEventSynchronize, r->slots[slot].done);
    return kOK;
}

stemdot_status stemdot_runner_time_kernel(stemdot_runner *r, int64_t n_frames, int iters,
                                          double *seconds) {
    if (n_frames < 1 || iters < 1) return invalid();
    CUDA_TRY(cudaSetDevice, r->device);
    TimingBuffers b;
    const stemdot_status st = time_kernel(r, &b, n_frames, iters, seconds);
    const stemdot_status rel = b.release();
    return st.code != 0 ? st : rel;
}

stemdot_status stemdot_copy_time(int device, int kind, size_t bytes, int iters,
                                 double *seconds) {
    if ((kind != STEMDOT_COPY_H2D_PINNED && kind != STEMDOT_COPY_D2D) || bytes == 0 ||
        iters < 1) {
        return invalid();
    }
    CUDA_TRY(cudaSetDevice, device);
    CopyBuffers b;
    const stemdot_status st = copy_time(&b, kind, bytes, iters, seconds);
    const stemdot_status rel = b.release();
    return st.code != 0 ? st : rel;
}

}  // extern "C"
