// emu.cc: the CPU emulator's runtime (see cuda_runtime.h here): the block scheduler with
// its threads and fibers, device memory with guard pages, and the CUDA runtime calls that stemdot's
// host code makes, all synchronous.
#include "cuda_runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace stemdot_emu {

thread_local dim3 thread_idx, block_idx;
dim3 block_dim, grid_dim;
thread_local uint64_t shuffle_slots[1024];

namespace {

thread_local cudaError_t last_error = cudaSuccess;

}  // namespace

cudaError_t set_error(cudaError_t err) {
    last_error = err;
    return err;
}

namespace {

[[noreturn]] void die(const char *what) {
    std::fprintf(stderr, "stemdot CUDA emulator: %s\n", what);
    std::abort();
}

size_t page_size() {
    static const size_t p = size_t(sysconf(_SC_PAGESIZE));
    return p;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// ---------------------------------------------------------------------------------------
// Fibers: the threads of the running block.

#if defined(__x86_64__)
// stemdot_emu_switch(save, to): saves the callee-saved registers, MXCSR and the x87
// control word on the current stack, stores its stack pointer in *save, and resumes the
// context whose stack pointer is to.
extern "C" void stemdot_emu_switch(void **save, void *to);
asm(R"(
    .text
    .globl stemdot_emu_switch
    .hidden stemdot_emu_switch
    .type stemdot_emu_switch, @function
stemdot_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size stemdot_emu_switch, .-stemdot_emu_switch
)");
#else
#error "the CUDA emulator switches fibers with x86-64 code only"
#endif

constexpr size_t kStackBytes = 256 << 10;
constexpr unsigned kMaxThreads = 1024;

struct Fiber {
    char *stack = nullptr;  // kStackBytes above a guard page
    void *sp = nullptr;
    bool done = false;
    const void *site = nullptr;  // the barrier it waits at
};

// The fibers of one OS thread running blocks, kept between launches.
struct Worker {
    std::vector<Fiber> fibers;
    void *scheduler_sp = nullptr;
    unsigned current = 0;
    uint64_t phases = 0;
};

std::mutex device_mu;  // one kernel at a time
std::vector<Worker *> idle_workers;  // under device_mu
void (*block_body)(void *) = nullptr;
void *block_arg = nullptr;
thread_local Worker *self = nullptr;

void fiber_main() {
    block_body(block_arg);
    self->fibers[self->current].done = true;
    stemdot_emu_switch(&self->fibers[self->current].sp, self->scheduler_sp);
    die("a finished fiber was resumed");
}

// Prepares fiber f to start at fiber_main: the frame stemdot_emu_switch pops (x87 control
// word, MXCSR, six registers) below a return address of fiber_main, 16-byte aligned as
// after a call.
void reset(Fiber &f) {
    if (f.stack == nullptr) {
        const size_t guard = page_size();
        void *m = mmap(nullptr, kStackBytes + guard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) die("cannot map a fiber stack");
        if (mprotect(m, guard, PROT_NONE) != 0) die("cannot protect a fiber stack");
        f.stack = static_cast<char *>(m) + guard;
    }
    uint64_t *top = reinterpret_cast<uint64_t *>(f.stack + kStackBytes - 16);
    top[0] = reinterpret_cast<uint64_t>(&fiber_main);
    uint64_t *frame = top - 8;
    std::memset(frame, 0, 8 * sizeof(uint64_t));
    const uint16_t fpu_cw = 0x037f;
    const uint32_t mxcsr = 0x1f80;
    std::memcpy(frame, &fpu_cw, sizeof fpu_cw);
    std::memcpy(frame + 1, &mxcsr, sizeof mxcsr);
    f.sp = frame;
    f.done = false;
    f.site = nullptr;
}

// Runs block block_idx on this thread's worker: every fiber up to its next barrier (or
// its end), in forward or reverse order, until all have ended.
void run_block(unsigned n) {
    Worker &w = *self;
    for (unsigned t = 0; t < n; t++) reset(w.fibers[t]);
    for (;;) {
        const bool reverse = w.phases++ % 2 == 1;
        for (unsigned i = 0; i < n; i++) {
            const unsigned t = reverse ? n - 1 - i : i;
            if (w.fibers[t].done) continue;
            w.current = t;
            thread_idx = dim3(t % block_dim.x, t / block_dim.x % block_dim.y,
                              t / (block_dim.x * block_dim.y));
            stemdot_emu_switch(&w.scheduler_sp, w.fibers[t].sp);
        }
        const void *site = nullptr;
        bool waiting = false;
        for (unsigned t = 0; t < n; t++) {
            if (w.fibers[t].done) continue;
            if (waiting && w.fibers[t].site != site) {
                die("the threads of a block reached different __syncthreads (or shuffles)");
            }
            waiting = true;
            site = w.fibers[t].site;
        }
        if (!waiting) return;
    }
}

// OS threads that run a grid's blocks: STEMDOT_EMU_THREADS, by default one per CPU.
unsigned grid_threads() {
    static const unsigned n = [] {
        const char *s = std::getenv("STEMDOT_EMU_THREADS");
        // At most 32 by default: each thread keeps 2 mappings per fiber stack.
        const long v = s != nullptr ? std::atol(s)
                                    : std::min(32L, long(std::thread::hardware_concurrency()));
        return unsigned(std::max(1L, v));
    }();
    return n;
}

}  // namespace

void sync_threads() {
    Worker &w = *self;
    w.fibers[w.current].site = __builtin_return_address(0);
    stemdot_emu_switch(&w.fibers[w.current].sp, w.scheduler_sp);
}

bool valid_launch(dim3 grid, dim3 block) {
    const uint64_t n = uint64_t(block.x) * block.y * block.z;
    return n > 0 && n <= kMaxThreads && block.z <= 64 && grid.x > 0 && grid.y > 0 &&
           grid.z > 0 && grid.x <= 0x7fffffffu && grid.y <= 65535 && grid.z <= 65535;
}

void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg) {
    const uint64_t n = uint64_t(block.x) * block.y * block.z;
    std::unique_lock<std::mutex> lock(device_mu);
    grid_dim = grid;
    block_dim = block;
    block_body = body;
    block_arg = arg;
    const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
    const unsigned threads = unsigned(std::min<uint64_t>(grid_threads(), blocks));
    std::vector<Worker *> workers;
    for (unsigned i = 0; i < threads; i++) {
        if (idle_workers.empty()) idle_workers.push_back(new Worker);
        workers.push_back(idle_workers.back());
        idle_workers.pop_back();
        if (workers.back()->fibers.size() < n) workers.back()->fibers.resize(n);
    }
    // Blocks in any order, several at a time: __shared__ variables are per OS thread.
    std::atomic<uint64_t> next{0};
    auto work = [&](Worker *w) {
        self = w;
        for (uint64_t b = next++; b < blocks; b = next++) {
            block_idx = dim3(unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                             unsigned(b / (uint64_t(grid.x) * grid.y)));
            run_block(unsigned(n));
        }
        self = nullptr;
    };
    std::vector<std::thread> others;
    for (unsigned i = 1; i < threads; i++) others.emplace_back(work, workers[i]);
    work(workers[0]);
    for (std::thread &t : others) t.join();
    for (Worker *w : workers) idle_workers.push_back(w);
}

namespace {

// ---------------------------------------------------------------------------------------
// Memory.

struct Allocation {
    size_t bytes;
    void *map;  // the mapping: a guard page, the allocation, a guard page
    size_t map_bytes;
};

std::mutex mem_mu;
std::map<uintptr_t, Allocation> device_allocs;  // by start
size_t device_used = 0;
std::map<uintptr_t, size_t> host_allocs;       // cudaHostAlloc, by start
std::map<uintptr_t, size_t> host_registered;  // cudaHostRegister, by start

// Device memory of the emulated GPU: STEMDOT_EMU_DEVICE_MEMORY bytes (default 8 GiB).
size_t device_total() {
    static const size_t total = [] {
        const char *s = std::getenv("STEMDOT_EMU_DEVICE_MEMORY");
        return s != nullptr ? size_t(std::strtoull(s, nullptr, 10)) : size_t(8) << 30;
    }();
    return total;
}

// Emulated devices: STEMDOT_EMU_DEVICES (default 1; 0 acts as a machine without GPU).
int device_count() {
    static const int n = [] {
        const char *s = std::getenv("STEMDOT_EMU_DEVICES");
        return s != nullptr ? std::atoi(s) : 1;
    }();
    return n;
}

// Multiprocessors: STEMDOT_EMU_SMS (default 4: few pixel splits, fast emulation; an
// H200 has 132).
int sm_count() {
    static const int n = [] {
        const char *s = std::getenv("STEMDOT_EMU_SMS");
        return s != nullptr ? std::max(1, std::atoi(s)) : 4;
    }();
    return n;
}

size_t size_of(size_t bytes) { return bytes; }
size_t size_of(const Allocation &a) { return a.bytes; }

// Whether [p, p+bytes) lies inside one range of ranges (by start; mem_mu held).
template <typename Ranges>
bool in_ranges(const Ranges &ranges, const void *p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges.upper_bound(a);
    if (it == ranges.begin()) return false;
    --it;
    const size_t n = size_of(it->second);
    return a - it->first <= n && bytes <= n - (a - it->first);
}

bool in_device(const void *p, size_t bytes) { return in_ranges(device_allocs, p, bytes); }

// cudaErrorInvalidValue unless [p, p+bytes) lies inside one device allocation.
cudaError_t check_device(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mem_mu);
    return in_device(p, bytes) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

// Overlap of [a, a+n) with a registered range (mem_mu held).
bool registered_overlap(uintptr_t a, size_t n) {
    auto it = host_registered.upper_bound(a + n - 1);
    if (it == host_registered.begin()) return false;
    --it;
    return it->first + it->second > a;
}

// Checks a copy's device side(s) against kind; *pinned says whether both sides are device
// or page-locked (cudaHostAlloc, cudaHostRegister) memory.
cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                       bool *pinned) {
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(mem_mu);
    const bool dst_dev = in_device(dst, bytes), src_dev = in_device(src, bytes);
    auto page_locked = [&](const void *p) {
        return in_ranges(host_allocs, p, bytes) || in_ranges(host_registered, p, bytes);
    };
    *pinned = (dst_dev || page_locked(dst)) && (src_dev || page_locked(src));
    switch (kind) {
    case cudaMemcpyHostToDevice:
        if (!dst_dev) return set_error(cudaErrorInvalidValue);
        break;
    case cudaMemcpyDeviceToHost:
        if (!src_dev) return set_error(cudaErrorInvalidValue);
        break;
    case cudaMemcpyDeviceToDevice:
        if (!dst_dev || !src_dev) return set_error(cudaErrorInvalidValue);
        break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        break;
    default:
        return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

// A stream's work not run yet: copies from pinned or registered memory, memsets and
// kernels wait until the host synchronizes with the stream (an event recorded on it,
// cudaStreamSynchronize, or cudaFree and the other calls that synchronize the device),
// so that host code that reuses a buffer too early reads or writes the wrong data, as it
// would on a GPU. STEMDOT_EMU_SYNC=1 runs everything at once instead.
struct Stream {
    std::mutex mu;      // queue
    std::mutex run_mu;  // held while running the queue: one thread, in order
    std::deque<std::function<void()>> queue;
};

std::mutex streams_mu;
std::set<Stream *> streams;  // live ones, under streams_mu

bool deferred() {
    static const bool d = [] {
        const char *s = std::getenv("STEMDOT_EMU_SYNC");
        return s == nullptr || std::strcmp(s, "1") != 0;
    }();
    return d;
}

// Runs s's queued work in order until done() (or the queue is empty).
template <typename Done>
void run_until(Stream *s, Done done) {
    std::lock_guard<std::mutex> running(s->run_mu);
    while (!done()) {
        std::function<void()> f;
        {
            std::lock_guard<std::mutex> lock(s->mu);
            if (s->queue.empty()) return;
            f = std::move(s->queue.front());
            s->queue.pop_front();
        }
        f();
    }
}

void drain(Stream *s) {
    run_until(s, [] { return false; });
}

// What synchronizes the whole device: every stream's work. streams_mu is held so that
// none is destroyed meanwhile (nothing takes it while running a queue).
void drain_all() {
    std::lock_guard<std::mutex> lock(streams_mu);
    for (Stream *s : streams) drain(s);
}

struct Event {
    std::chrono::steady_clock::time_point at;
    bool recorded = false;  // the latest cudaEventRecord has run
    Stream *stream = nullptr;
};

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> work) {
    if (stream == nullptr || !deferred()) {
        work();
        return;
    }
    Stream *s = reinterpret_cast<Stream *>(stream);
    std::lock_guard<std::mutex> lock(s->mu);
    s->queue.push_back(std::move(work));
}

bool device_pointer(const void *p) {
    std::lock_guard<std::mutex> lock(mem_mu);
    return in_device(p, 0);
}

}  // namespace stemdot_emu

using namespace stemdot_emu;

cudaError_t cudaGetDeviceCount(int *count) {
    *count = device_count();
    return *count > 0 ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    return device < 0 || device >= device_count() ? set_error(cudaErrorInvalidDevice) : cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    std::memset(prop, 0, sizeof(*prop));
    std::snprintf(prop->name, sizeof prop->name, "stemdot CUDA emulator (CPU)");
    prop->totalGlobalMem = device_total();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = sm_count(); break;
    case cudaDevAttrMemoryClockRate: *value = 2619000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
    case cudaDevAttrAsyncEngineCount: *value = 2; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrHostRegisterReadOnlySupported: *value = 1; break;
    default: return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device) {
    if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
    if (len < 1) return set_error(cudaErrorInvalidValue);
    std::snprintf(id, size_t(len), "0000:%02x:00.0", 0xe0 + device);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = 11080;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaGetLastError() {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    }
    return "unrecognized error code";
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    *ptr = nullptr;
    if (device_count() < 1) return set_error(cudaErrorNoDevice);
    if (bytes > device_total()) return set_error(cudaErrorMemoryAllocation);
    const size_t rounded = round_up(std::max<size_t>(bytes, 1), 256);
    std::lock_guard<std::mutex> lock(mem_mu);
    if (rounded > device_total() - device_used) return set_error(cudaErrorMemoryAllocation);
    const size_t page = page_size();
    const size_t body = round_up(rounded, page);
    const size_t map_bytes = body + 2 * page;
    void *m = mmap(nullptr, map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return set_error(cudaErrorMemoryAllocation);
    char *data = static_cast<char *>(m) + page;
    if (mprotect(data, body, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, map_bytes);
        return set_error(cudaErrorMemoryAllocation);
    }
    // The allocation ends where the trailing guard page starts: a read past its end (beyond
    // the 256-byte granule real allocations have) faults.
    char *p = data + body - rounded;
    // Device memory is not cleared: NaN as float, -1 as an integer, until written.
    std::memset(p, 0xff, bytes);
    device_allocs[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, m, map_bytes};
    device_used += rounded;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    drain_all();
    if (ptr == nullptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(mem_mu);
    auto it = device_allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == device_allocs.end()) return set_error(cudaErrorInvalidValue);
    munmap(it->second.map, it->second.map_bytes);
    device_used -= round_up(std::max<size_t>(it->second.bytes, 1), 256);
    device_allocs.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lock(mem_mu);
    *total_bytes = device_total();
    *free_bytes = device_total() - device_used;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned) {
    *ptr = std::aligned_alloc(4096, round_up(std::max<size_t>(bytes, 1), 4096));
    if (*ptr == nullptr) return set_error(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(mem_mu);
    host_allocs[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
    drain_all();
    if (ptr == nullptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(mem_mu);
    if (host_allocs.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
        return set_error(cudaErrorInvalidValue);
    }
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t bytes, unsigned) {
    if (ptr == nullptr || bytes == 0) return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(mem_mu);
    const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
    if (registered_overlap(a, bytes)) return set_error(cudaErrorHostMemoryAlreadyRegistered);
    host_registered[a] = bytes;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
    drain_all();
    std::lock_guard<std::mutex> lock(mem_mu);
    if (host_registered.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
        return set_error(cudaErrorHostMemoryNotRegistered);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    bool pinned;
    const cudaError_t err = check_copy(dst, src, bytes, kind, &pinned);
    if (err == cudaSuccess && bytes > 0) std::memmove(dst, src, bytes);
    return err;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    bool pinned;
    const cudaError_t err = check_copy(dst, src, bytes, kind, &pinned);
    if (err != cudaSuccess || bytes == 0) return err;
    // A copy from or to pageable memory returns when it is done (after the stream's
    // earlier work), as the driver's staged copies do.
    if (!pinned) {
        if (stream != nullptr) drain(reinterpret_cast<Stream *>(stream));
        std::memmove(dst, src, bytes);
        return cudaSuccess;
    }
    enqueue(stream, [=] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    if (bytes == 0) return cudaSuccess;
    const cudaError_t err = check_device(ptr, bytes);
    if (err == cudaSuccess) std::memset(ptr, value, bytes);
    return err;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    const cudaError_t err = check_device(ptr, bytes);
    if (err == cudaSuccess) enqueue(stream, [=] { std::memset(ptr, value, bytes); });
    return err;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
    Stream *s = new Stream;
    std::lock_guard<std::mutex> lock(streams_mu);
    streams.insert(s);
    *stream = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    Stream *s = reinterpret_cast<Stream *>(stream);
    {
        std::lock_guard<std::mutex> lock(streams_mu);
        if (s == nullptr || streams.count(s) == 0) return set_error(cudaErrorInvalidResourceHandle);
    }
    drain(s);  // its work completes, then it goes
    std::lock_guard<std::mutex> lock(streams_mu);
    streams.erase(s);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (stream != nullptr) drain(reinterpret_cast<Stream *>(stream));
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    *event = reinterpret_cast<cudaEvent_t>(new Event);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
    return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event == nullptr) return set_error(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    if (e->stream != nullptr) run_until(e->stream, [e] { return e->recorded; });
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (event == nullptr) return set_error(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    e->recorded = false;
    e->stream = reinterpret_cast<Stream *>(stream);
    enqueue(stream, [e] {
        e->at = std::chrono::steady_clock::now();
        e->recorded = true;
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == nullptr) return set_error(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    if (e->stream != nullptr) run_until(e->stream, [e] { return e->recorded; });
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    const Event *a = reinterpret_cast<const Event *>(start);
    const Event *b = reinterpret_cast<const Event *>(end);
    if (a == nullptr || b == nullptr || !a->recorded || !b->recorded) {
        return set_error(cudaErrorInvalidResourceHandle);
    }
    *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
    return cudaSuccess;
}
