// cuda_runtime.h of the CPU emulator of stemdot's kernels (kernels/emu): the part of the
// CUDA runtime API and of CUDA C++ that kernels/*.cu use, so that the same sources compile
// with a host C++ compiler (g++ -x c++ -I kernels/emu) into a libstemdot_kernels.a that
// runs everything on the CPU. It exists to test the kernels' logic, and the host code
// around them, on machines without a GPU: `go test -tags cuda,cudaemu ./cuda` runs the GPU
// tests against it (make test-cuda-emu). It checks what a GPU would not forgive: launch
// configurations beyond CUDA's limits, reads and writes outside device allocations (guard
// pages), copies from or to device memory that was never allocated, and __syncthreads
// reached at different places by the threads of a block, and host code that uses a
// buffer before the stream work that fills or reads it has run. It says nothing about
// speed.
//
// Execution model: one kernel runs at a time (process-wide lock); its blocks run in any
// order on one OS thread per CPU (STEMDOT_EMU_THREADS), each with its own __shared__
// variables (thread_local); a block's threads are fibers of one OS thread, switched at
// __syncthreads and warp shuffles (which act as block-wide barriers: stemdot's kernels
// shuffle with every thread of the block). Between two barriers the fibers run one after another, in an
// order that alternates between phases, so that a thread reading shared memory another
// writes in the same phase (a missing __syncthreads) gives wrong results. Work on a
// stream (kernels, copies from or to pinned memory, memsets) runs when the host waits for
// it (an event recorded after it, cudaStreamSynchronize, cudaFree and the other calls that
// synchronize the device), not before, as late as a GPU may run it.
//
// Built into a c-shared library (libstemdot.so for Python), the thread_local __shared__
// variables (about 5 MB) exceed the static TLS that glibc keeps for libraries loaded after
// start-up (Go's runtime marks them STATIC_TLS): preload it, as a CUDA build of it
// (LD_PRELOAD=.../libstemdot.so; python/tests pass so on the emulated device).
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// CUDA C++ qualifiers.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(16))) double2 {
    double x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// The error codes of the CUDA runtime (driver_types.h) that stemdot's code meets.
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalAddress = 700,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrAsyncEngineCount = 40,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrHostRegisterReadOnlySupported = 113,
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDisableTiming = 0x02;
constexpr unsigned cudaEventBlockingSync = 0x01;
constexpr unsigned cudaHostAllocDefault = 0x00;
constexpr unsigned cudaHostRegisterPortable = 0x01;
constexpr unsigned cudaHostRegisterReadOnly = 0x08;

// The runtime API (kernels/emu/emu.cc).
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaGetLastError();
const char *cudaGetErrorString(cudaError_t err);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

// The typed overloads of cuda_runtime.h.
template <typename T>
cudaError_t cudaMalloc(T **ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), bytes);
}
template <typename T>
cudaError_t cudaHostAlloc(T **ptr, size_t bytes, unsigned flags) {
    return cudaHostAlloc(reinterpret_cast<void **>(ptr), bytes, flags);
}

namespace stemdot_emu {

// The built-in variables of the running thread.
extern thread_local dim3 thread_idx, block_idx;
extern dim3 block_dim, grid_dim;

// Whether grid and block are within CUDA's limits.
bool valid_launch(dim3 grid, dim3 block);

// Runs body once per thread of every block of a valid grid.
void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg);

// Runs work now (legacy default stream) or queues it on stream (see emu.cc).
void enqueue(cudaStream_t stream, std::function<void()> work);

// The block-wide barrier. Every thread of the block must reach it from the same call
// (its return address).
void sync_threads();

// Whether p lies in (or at the end of) a device allocation.
bool device_pointer(const void *p);

// Sets cudaGetLastError's error and returns it.
cudaError_t set_error(cudaError_t err);

template <typename T>
bool device_argument(const T &) {
    return true;
}
template <typename T>
bool device_argument(T *p) {
    return p == nullptr || device_pointer(p);
}

// The 64-bit exchange slots of the warp shuffles, one per thread of a block.
extern thread_local uint64_t shuffle_slots[1024];

template <typename... P>
struct Launch {
    dim3 grid, block;
    cudaStream_t stream;
    void (*kernel)(P...);
    template <typename... A>
    void operator()(A &&...args) const {
        if (!valid_launch(grid, block)) {
            set_error(cudaErrorInvalidConfiguration);
            return;
        }
        struct Call {
            void (*kernel)(P...);
            std::tuple<P...> args;
        };
        auto call = std::make_shared<Call>(Call{kernel, std::tuple<P...>(std::forward<A>(args)...)});
        // A kernel reads and writes device memory only (stemdot maps no host memory into
        // the device's address space): a GPU would fault.
        const bool ok = std::apply([](const auto &...a) { return (device_argument(a) && ...); },
                                   call->args);
        if (!ok) {
            set_error(cudaErrorIllegalAddress);
            return;
        }
        enqueue(stream, [g = grid, b = block, call] {
            run_grid(g, b, [](void *c) {
                Call *k = static_cast<Call *>(c);
                std::apply(k->kernel, k->args);
            }, call.get());
        });
    }
};

template <typename... P>
Launch<P...> launch(dim3 grid, dim3 block, cudaStream_t stream, void (*kernel)(P...)) {
    return {grid, block, stream, kernel};
}

inline unsigned linear_thread() {
    return thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z);
}

}  // namespace stemdot_emu

#define threadIdx (::stemdot_emu::thread_idx)
#define blockIdx (::stemdot_emu::block_idx)
#define blockDim (::stemdot_emu::block_dim)
#define gridDim (::stemdot_emu::grid_dim)
#define __syncthreads() ::stemdot_emu::sync_threads()
// kernels/launch.cuh: kernel<<<grid, block, 0, stream>>> under nvcc.
#define STEMDOT_LAUNCH(grid, block, stream, ...) \
    ::stemdot_emu::launch(grid, block, stream, __VA_ARGS__)

// Device functions.
template <typename T>
inline T __ldg(const T *p) {
    return *p;
}
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = uint64_t(y) << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline int atomicMin(int *p, int v) {
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <typename T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "64-bit shuffles");
    const unsigned t = ::stemdot_emu::linear_thread();
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    ::stemdot_emu::shuffle_slots[t] = bits;
    ::stemdot_emu::sync_threads();
    T r = v;
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    if (t % 32 + delta < 32 && t + delta < n) {
        std::memcpy(&r, &::stemdot_emu::shuffle_slots[t + delta], sizeof r);
    }
    // Nobody overwrites a slot before every thread has read its source.
    ::stemdot_emu::sync_threads();
    return r;
}
template <typename T>
inline T min(T a, T b) {
    return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
    return a < b ? b : a;
}
