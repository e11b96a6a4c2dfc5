//go:build cgo && linux

package memlimit

/*
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>

// stemdot_cap_arenas keeps glibc's malloc to one arena: each further arena reserves 64 MiB
// of address space (see the package doc).
static void stemdot_cap_arenas(void) {
#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, 1);
#endif
}

// Run when the program (or library) is loaded, before Go starts its threads: under an
// address-space limit, no thread gets an arena of its own.
__attribute__((constructor)) static void stemdot_cap_arenas_at_start(void) {
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		stemdot_cap_arenas();
	}
}

static size_t stemdot_thread_stack(void) {
	pthread_attr_t attr;
	size_t size = 0;
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_getstacksize(&attr, &size);
		pthread_attr_destroy(&attr);
	}
	return size;
}
*/
import "C"

import "sync"

// capMallocArenas keeps glibc's malloc to one arena from now on.
func capMallocArenas() { capOnce.Do(func() { C.stemdot_cap_arenas() }) }

var capOnce sync.Once

// threadStackBytes is the stack a new thread maps: glibc's default pthread stack size
// (RLIMIT_STACK, or 2 MiB where that is unlimited), plus its guard page, as Go's cgo
// runtime creates its threads with the default attributes.
var threadStackBytes = sync.OnceValue(func() int64 { return int64(C.stemdot_thread_stack()) + 4096 })
