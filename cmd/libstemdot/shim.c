/*
 * The parts of libstemdot written in C: the thread-local last error message, the
 * version and status names, the progress-callback trampoline, and the detection of a
 * forked child (which abi.c's public wrappers check first). They live in a .c file
 * rather than the cgo preamble because a preamble of a file with //export is compiled
 * into two translation units, which would give each its own copy.
 *
 * The message buffer is thread-specific data (pthread_key_create with free as the
 * destructor), allocated on a thread's first error and freed when the thread exits.
 * It is not a _Thread_local array: the Go runtime makes libstemdot use the static TLS
 * block, whose few spare bytes a 4 KiB buffer would exceed when the library is loaded
 * with dlopen (as Python's ctypes does).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define STEMDOT_ERROR_CAP 4096

static pthread_key_t error_key;
static pthread_once_t error_once = PTHREAD_ONCE_INIT;
static int error_key_ok;

static void make_error_key(void) { error_key_ok = pthread_key_create(&error_key, free) == 0; }

/* thread_buffer returns the calling thread's message buffer, allocating it when alloc
 * is set; NULL when there is none (or no memory). */
static char *thread_buffer(int alloc) {
    pthread_once(&error_once, make_error_key);
    if (!error_key_ok) {
        return NULL;
    }
    char *buf = pthread_getspecific(error_key);
    if (buf == NULL && alloc) {
        buf = malloc(STEMDOT_ERROR_CAP);
        if (buf != NULL && pthread_setspecific(error_key, buf) != 0) {
            free(buf);
            buf = NULL;
        }
    }
    return buf;
}

void stemdot_capi_set_error(const char *msg, size_t n) {
    char *buf = thread_buffer(n > 0);
    if (buf == NULL) {
        return;
    }
    if (n >= STEMDOT_ERROR_CAP) {
        n = STEMDOT_ERROR_CAP - 1;
    }
    memcpy(buf, msg, n);
    buf[n] = '\0';
}

const char *stemdot_last_error(void) {
    const char *buf = thread_buffer(0);
    return buf != NULL ? buf : "";
}

const char *stemdot_version(void) { return STEMDOT_VERSION; }

const char *stemdot_status_name(stemdot_status status) {
    switch (status) {
    case STEMDOT_OK: return "STEMDOT_OK";
    case STEMDOT_ERR_INVALID_ARGUMENT: return "STEMDOT_ERR_INVALID_ARGUMENT";
    case STEMDOT_ERR_IO: return "STEMDOT_ERR_IO";
    case STEMDOT_ERR_FORMAT: return "STEMDOT_ERR_FORMAT";
    case STEMDOT_ERR_SHAPE: return "STEMDOT_ERR_SHAPE";
    case STEMDOT_ERR_DTYPE: return "STEMDOT_ERR_DTYPE";
    case STEMDOT_ERR_PLAN: return "STEMDOT_ERR_PLAN";
    case STEMDOT_ERR_CANCELLED: return "STEMDOT_ERR_CANCELLED";
    case STEMDOT_ERR_BAD_HANDLE: return "STEMDOT_ERR_BAD_HANDLE";
    case STEMDOT_ERR_CUDA_UNAVAILABLE: return "STEMDOT_ERR_CUDA_UNAVAILABLE";
    case STEMDOT_ERR_INTERNAL: return "STEMDOT_ERR_INTERNAL";
    case STEMDOT_ERR_FORKED: return "STEMDOT_ERR_FORKED";
    }
    return "STEMDOT_ERR_UNKNOWN";
}

void stemdot_capi_call_progress(stemdot_progress_fn fn, uint64_t done, uint64_t total,
                                void *user) {
    fn(done, total, user);
}

const char *stemdot_capi_call_cli(const stemdot_cli_backend *backend, const char *op,
                                  const char *request, const void *masks, size_t masks_bytes,
                                  const double *shifts, size_t n_shifts, void *out, size_t out_bytes) {
    return backend->call(backend->user, op, request, masks, masks_bytes, shifts, n_shifts, out,
                         out_bytes);
}

/*
 * A forked child. The Go runtime starts its threads when the library is loaded; fork()
 * copies only the calling thread, so in a child forked without exec the runtime's other
 * threads are gone, with whatever locks they held, and entering Go can hang. The child
 * handler, registered when the library is loaded (before any fork can copy it), marks
 * the child; abi.c's wrappers then refuse every call before entering Go. Go's own
 * fork+exec (os/exec) uses clone directly and runs no handlers.
 */
int stemdot_capi_forked;

static void mark_forked_child(void) { stemdot_capi_forked = 1; }

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, mark_forked_child);
}

stemdot_status stemdot_capi_refuse_forked(const char *fn) {
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "%s: stemdot cannot be used in a process forked from one that had loaded it "
                     "(the library's Go runtime does not survive fork); start the child with exec "
                     "(Python: multiprocessing.get_context('spawn') or 'forkserver')",
                     fn);
    stemdot_capi_set_error(msg, n > 0 ? (size_t)n : 0);
    return STEMDOT_ERR_FORKED;
}
