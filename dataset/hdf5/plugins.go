//go:build !nohdf5

package hdf5

/*
#cgo LDFLAGS: -ldl
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <hdf5.h>

// sd_plugin_failures writes into buf (cap bytes) the loader's message for every plugin
// file in libhdf5's plugin search path that fails to load, one per line. It looks at the
// files libhdf5 tries (H5PL__find_plugin_in_path, HDF5 1.10 to 1.14: names starting
// "lib" and holding ".so"), regular files only (opening a FIFO could block), and closes
// those that load.
static void sd_plugin_failures(char *buf, size_t cap) {
	size_t len = 0;
	unsigned n = 0;
	buf[0] = 0;
	if (H5PLsize(&n) < 0) return;
	for (unsigned i = 0; i < n && len < cap; i++) {
		char dir[4096];
		if (H5PLget(i, dir, sizeof dir) <= 0) continue;
		DIR *d = opendir(dir);
		if (d == NULL) continue;
		struct dirent *e;
		while ((e = readdir(d)) != NULL && len < cap) {
			if (strncmp(e->d_name, "lib", 3) != 0 || strstr(e->d_name, ".so") == NULL) continue;
			char path[8192];
			struct stat st;
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
			void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
			if (h != NULL) {
				dlclose(h);
				continue;
			}
			const char *msg = dlerror();
			len += snprintf(buf + len, cap - len, "%s\n", msg != NULL ? msg : path);
		}
		closedir(d);
	}
	H5Eclear2(H5E_DEFAULT);
}
*/
import "C"

import (
	"strings"
	"unsafe"
)

// h5PluginFailures returns the loader's messages (dlerror) for the plugin files in
// libhdf5's plugin search path (HDF5_PLUGIN_PATH as libhdf5 read it when it started, or
// its default) that fail to load: libhdf5 passes over them in silence, and then reports
// a filter whose plugin is present but cannot be loaded (a missing dependency, another
// architecture, a damaged file) as missing. Called with h5lock held.
func h5PluginFailures() []string {
	const size = 8192
	buf := (*C.char)(C.malloc(size))
	defer C.free(unsafe.Pointer(buf))
	C.sd_plugin_failures(buf, size)
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(C.GoString(buf)), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}
