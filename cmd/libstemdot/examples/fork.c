/*
 * fork.c — libstemdot in a child forked (without exec) after the parent used it: every
 * call returns STEMDOT_ERR_FORKED at once, with a message that names exec and Python's
 * "spawn", instead of entering the Go runtime, whose threads do not survive fork (it
 * could hang there). The parent goes on working.
 *
 *   cc -Iinclude capi/examples/fork.c -Lbuild -lstemdot -Wl,-rpath,$PWD/build
 *   ./fork
 *
 * Needs no data file. Exits 1 when a check fails or the child does not finish within
 * 30 s (a hang); prints "fork: N passed" otherwise.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stemdot.h"

enum { FRAMES = 6, SIDE = 4, PIX = SIDE * SIDE };

static int failed, passed;

#define check(cond, ...)                                          \
    do {                                                          \
        if (cond) {                                               \
            passed++;                                             \
        } else {                                                  \
            failed++;                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, " (last error: %s)\n", stemdot_last_error()); \
        }                                                         \
    } while (0)

/* refused checks that a call in the child was refused with the fork message. */
static void refused(const char *what, stemdot_status st) {
    const char *msg = stemdot_last_error();
    check(st == STEMDOT_ERR_FORKED && strstr(msg, what) != NULL && strstr(msg, "forked") != NULL &&
              strstr(msg, "exec") != NULL && strstr(msg, "'spawn'") != NULL,
          "%s in the child: got %s, want STEMDOT_ERR_FORKED with a message naming it, exec and spawn",
          what, stemdot_status_name(st));
}

/* bright_field applies the all-ones mask to ds; the sum of frame f is f*PIX. */
static int bright_field(stemdot_dataset ds) {
    float ones[PIX], out[FRAMES];
    for (int i = 0; i < PIX; i++) {
        ones[i] = 1.0f;
    }
    if (stemdot_apply(ds, ones, 1, SIDE, SIDE, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, FRAMES)) {
        return 0;
    }
    for (int f = 0; f < FRAMES; f++) {
        if (out[f] != (float)(f * PIX)) {
            return 0;
        }
    }
    return 1;
}

static void child(stemdot_dataset ds, const unsigned short *frames) {
    stemdot_dataset d2 = 99;
    refused("stemdot_open", stemdot_open("scan.mib", NULL, &d2));
    check(d2 == 0, "stemdot_open in the child left *out = %llu, want 0", (unsigned long long)d2);
    size_t nav = FRAMES;
    refused("stemdot_dataset_from_memory",
            stemdot_dataset_from_memory(frames, sizeof(unsigned short) * FRAMES * PIX, STEMDOT_UINT16, 1,
                                        &nav, SIDE, SIDE, &d2));
    float mask[PIX] = {0}, out[FRAMES];
    refused("stemdot_apply", stemdot_apply(ds, mask, 1, SIDE, SIDE, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, FRAMES));
    size_t n = 0;
    refused("stemdot_mask_parse", stemdot_mask_parse("com", SIDE, SIDE, NULL, 0, &n));
    refused("stemdot_dataset_free", stemdot_dataset_free(ds));
    check(strcmp(stemdot_status_name(STEMDOT_ERR_FORKED), "STEMDOT_ERR_FORKED") == 0, "status name");
    check(strcmp(stemdot_version(), STEMDOT_VERSION) == 0, "version");
}

int main(void) {
    static unsigned short frames[FRAMES * PIX];
    for (int f = 0; f < FRAMES; f++) {
        for (int i = 0; i < PIX; i++) {
            frames[f * PIX + i] = (unsigned short)f;
        }
    }
    size_t nav = FRAMES;
    stemdot_dataset ds;
    if (stemdot_dataset_from_memory(frames, sizeof frames, STEMDOT_UINT16, 1, &nav, SIDE, SIDE, &ds) ||
        !bright_field(ds)) {
        fprintf(stderr, "fork: the parent's apply failed: %s\n", stemdot_last_error());
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        child(ds, frames);
        fflush(NULL);
        _exit(failed ? 1 : 0);
    }
    int status = 0, done = 0;
    for (int i = 0; i < 300 && !done; i++) { /* 30 s */
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) {
            nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
        }
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    check(done, "the forked child did not finish within 30 s: it hangs in the library");
    check(done && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child's checks failed (status %d)", status);
    check(bright_field(ds), "the parent's apply after the fork");
    check(stemdot_dataset_free(ds) == STEMDOT_OK, "free");
    printf("fork: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
