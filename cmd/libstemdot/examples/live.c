/*
 * live.c — libstemdot's live runs from C: a Merlin acquisition sent by a sender written
 * here (a thread speaking Merlin's TCP data protocol on loopback, sending a real MIB
 * file's .hdr and frames as stored), received and computed by stemdot_live_start, its
 * snapshots polled, its final result checked against a float64 reference computed here
 * from the file's bytes and against stemdot_apply on the file (bit for bit); then an
 * acquisition cut off mid-scan (a partial result), cancellation, and misuse.
 *
 *   cc -Iinclude capi/examples/live.c -Lbuild -lstemdot -Wl,-rpath,$PWD/build -lpthread -lm
 *   ./live ../shared/data/mib/Single_9_Frame_CounterDepth_12_Rows_256.mib
 *
 * The file (Quantum Detectors Merlin, single chip, U16, with its .hdr beside it) holds 9
 * frames of a 384-byte header and 256×256 big-endian uint16 pixels. Merlin's protocol
 * (its MerlinEM documentation; LiberTEM-live's simulator sends the same): every message
 * is "MPX," + 10 decimal digits (the message's length + 1) + "," + the message; first
 * the acquisition header (the .hdr's text, starting "HDR,"), then one message per frame
 * (its MIB frame header and pixels). Without the file the file's parts are skipped with
 * a message. Prints "N passed, M failed" and exits 1 on any failure.
 */
#define _DEFAULT_SOURCE

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stemdot.h"

static int passed, failed;

#define check(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            passed++;                                                     \
        } else {                                                          \
            failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, " (last error: %s)\n", stemdot_last_error()); \
        }                                                                 \
    } while (0)

/* check_status checks that got == want and that the message contains part. */
static void check_status(int line, const char *what, stemdot_status got, stemdot_status want, const char *part) {
    const char *msg = stemdot_last_error();
    if (got == want && (part == NULL || strstr(msg, part) != NULL)) {
        passed++;
        if (want != STEMDOT_OK) {
            printf("  ok  %-40s %s: %s\n", what, stemdot_status_name(got), msg);
        }
        return;
    }
    failed++;
    fprintf(stderr, "FAIL line %d: %s: got %s, want %s with a message containing \"%s\"; message: %s\n", line, what,
            stemdot_status_name(got), stemdot_status_name(want), part ? part : "", msg);
}
#define expect(what, call, want, part) check_status(__LINE__, what, (call), want, part)

enum { HEADER = 384, SIDE = 256, PIXELS = SIDE * SIDE, RECORD = HEADER + 2 * PIXELS, FRAMES = 9 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------ the Merlin sender */

struct sender {
    int listener;         /* a listening socket on 127.0.0.1 */
    const char *hdr;      /* the acquisition header's text (NULL: send nothing, hold) */
    size_t hdr_len;
    const unsigned char *frames; /* records of RECORD bytes */
    int n_frames;         /* frames to send; then the connection is closed */
    int delay_ms;         /* between frames */
};

static int send_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) {
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_message(int fd, const void *msg, size_t n) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "MPX,%010zu,", n + 1);
    return send_all(fd, prefix, 15) || send_all(fd, msg, n) ? -1 : 0;
}

/* serve accepts one receiver and sends it the acquisition, or holds the connection
 * open without sending (hdr NULL) until the receiver closes it. */
static void *serve(void *arg) {
    struct sender *s = arg;
    int fd = accept(s->listener, NULL, NULL);
    if (fd < 0) {
        return NULL;
    }
    if (s->hdr != NULL && send_message(fd, s->hdr, s->hdr_len) == 0) {
        for (int i = 0; i < s->n_frames; i++) {
            usleep((useconds_t)s->delay_ms * 1000);
            if (send_message(fd, s->frames + (size_t)i * RECORD, RECORD) != 0) {
                break;
            }
        }
    }
    if (s->hdr == NULL || s->n_frames == FRAMES) {
        char buf[256];
        while (recv(fd, buf, sizeof buf, 0) > 0) { /* until the receiver closes */
        }
    }
    close(fd);
    return NULL;
}

/* start_sender listens on a free loopback port, writes "merlin://127.0.0.1:PORT" into
 * source and serves one receiver on a thread. */
static int start_sender(struct sender *s, pthread_t *t, char *source, size_t len) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    s->listener = socket(AF_INET, SOCK_STREAM, 0);
    if (s->listener < 0 || bind(s->listener, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->listener, 1) != 0 ||
        getsockname(s->listener, (struct sockaddr *)&a, &alen) != 0) {
        return -1;
    }
    snprintf(source, len, "merlin://127.0.0.1:%d", ntohs(a.sin_port));
    return pthread_create(t, NULL, serve, s);
}

static void stop_sender(struct sender *s, pthread_t t) {
    pthread_join(t, NULL);
    close(s->listener);
}

/* ---------------------------------------------------------------- a real file */

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = buf != NULL ? (size_t)size : 0;
    return buf;
}

static void disk_mask(float *mask, double cx, double cy, double r) {
    for (int y = 0; y < SIDE; y++) {
        for (int x = 0; x < SIDE; x++) {
            mask[y * SIDE + x] = (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r ? 1.0f : 0.0f;
        }
    }
}

static void live_file(const char *path) {
    printf("live from a Merlin sender of %s\n", path);
    size_t mib_len = 0, hdr_len = 0;
    unsigned char *mib = (unsigned char *)read_file(path, &mib_len);
    char hdr_path[4096];
    snprintf(hdr_path, sizeof hdr_path, "%.*s.hdr", (int)(strlen(path) - 4), path);
    char *hdr = read_file(hdr_path, &hdr_len);
    check(mib != NULL && mib_len == (size_t)FRAMES * RECORD && hdr != NULL && strncmp(hdr, "HDR,", 4) == 0,
          "read %s (%zu bytes, want %d) and %s", path, mib_len, FRAMES * RECORD, hdr_path);
    if (mib == NULL || hdr == NULL || mib_len != (size_t)FRAMES * RECORD) {
        free(mib);
        free(hdr);
        return;
    }
    /* two masks: a disk (bright field) and a ring (dark field); the float64 reference from
     * the file's big-endian pixels (exact integer sums; a float32 result is their
     * rounding) */
    static float masks[2 * PIXELS];
    disk_mask(masks, 128, 128, 40);
    static float outer[PIXELS];
    disk_mask(outer, 128, 128, 120);
    for (int i = 0; i < PIXELS; i++) {
        masks[PIXELS + i] = outer[i] - masks[i];
    }
    double ref[FRAMES * 2];
    for (int f = 0; f < FRAMES; f++) {
        const unsigned char *px = mib + (size_t)f * RECORD + HEADER;
        for (int m = 0; m < 2; m++) {
            double s = 0;
            for (int i = 0; i < PIXELS; i++) {
                s += masks[m * PIXELS + i] * (double)(px[2 * i] << 8 | px[2 * i + 1]);
            }
            ref[f * 2 + m] = s;
        }
    }
    /* stemdot_apply on the file */
    stemdot_dataset ds = 0;
    float applied[FRAMES * 2];
    expect("open", stemdot_open(path, "nav_shape=3,3", &ds), STEMDOT_OK, NULL);
    expect("apply", stemdot_apply(ds, masks, 2, SIDE, SIDE, 0, 0, NULL, NULL, applied, STEMDOT_FLOAT32, FRAMES * 2),
           STEMDOT_OK, NULL);
    stemdot_dataset_free(ds);

    /* the whole acquisition, a frame every 30 ms, polled */
    struct sender s = {.hdr = hdr, .hdr_len = hdr_len, .frames = mib, .n_frames = FRAMES, .delay_ms = 30};
    pthread_t t;
    char source[64];
    check(start_sender(&s, &t, source, sizeof source) == 0, "start the sender");
    stemdot_live live = 0;
    expect("live_start", stemdot_live_start(source, "passive=true;nav_shape=3,3;every=0.01", masks, STEMDOT_FLOAT32, 2, SIDE,
                                            SIDE, 0, &live),
           STEMDOT_OK, NULL);
    float out[FRAMES * 2], seen[FRAMES * 2];
    for (int i = 0; i < FRAMES * 2; i++) {
        seen[i] = NAN;
    }
    stemdot_live_snapshot snap = {0};
    uint64_t last_done = 0, polls = 0, last_seq = 0;
    int monotone = 1, equal = 1, shaped = 1;
    stemdot_status st;
    do {
        st = stemdot_live_poll(live, 0.5, &snap, out, STEMDOT_FLOAT32, FRAMES * 2);
        if (st != STEMDOT_OK || snap.seq == 0) {
            continue;
        }
        polls++;
        shaped &= snap.nav_ndim == 2 && snap.nav_shape[0] == 3 && snap.nav_shape[1] == 3 && snap.n_masks == 2 &&
                  snap.n_frames == FRAMES;
        monotone &= snap.done >= last_done && snap.seq >= last_seq;
        for (int i = 0; i < FRAMES * 2; i++) {
            monotone &= isnan(seen[i]) || seen[i] == out[i]; /* a value once computed stays */
            equal &= isnan(out[i]) || out[i] == applied[i]; /* computed: apply's value */
            seen[i] = out[i];
        }
        last_done = snap.done;
        last_seq = snap.seq;
    } while (st == STEMDOT_OK && !snap.final);
    check(st == STEMDOT_OK && snap.final && !snap.partial, "poll until final: %s, final %d, partial %d", stemdot_status_name(st),
          snap.final, snap.partial);
    check(shaped && monotone && equal, "snapshots: shape %d, monotone %d, values equal to apply's %d", shaped, monotone, equal);
    check(snap.done == FRAMES && snap.received == FRAMES && snap.missing == 0 && snap.late == 0,
          "final counts: done %llu, received %llu, missing %llu, late %llu", (unsigned long long)snap.done,
          (unsigned long long)snap.received, (unsigned long long)snap.missing, (unsigned long long)snap.late);
    int exact = 1;
    for (int i = 0; i < FRAMES * 2; i++) {
        exact &= out[i] == applied[i] && out[i] == (float)ref[i];
    }
    check(exact, "the final result differs from stemdot_apply's or the reference");
    printf("  %llu snapshots polled; final: %s\n", (unsigned long long)polls, exact ? "bit for bit stemdot_apply's" : "DIFFERS");
    float again[FRAMES * 2];
    expect("wait after the end", stemdot_live_wait(live, &snap, again, STEMDOT_FLOAT32, FRAMES * 2), STEMDOT_OK, NULL);
    check(snap.final && memcmp(again, out, sizeof out) == 0, "wait gives the final result");
    size_t n_runs = 9, needed = 0;
    expect("missing", stemdot_live_missing(live, NULL, 0, &n_runs), STEMDOT_OK, NULL);
    check(n_runs == 0, "a complete acquisition has %zu runs of positions without a frame", n_runs);
    char info[8192];
    expect("info", stemdot_live_info(live, info, sizeof info, &needed), STEMDOT_OK, NULL);
    check(strstr(info, "\"partial\": false") != NULL && strstr(info, source) != NULL, "info: %s", info);
    expect("double result dtype", stemdot_live_poll(live, 0, &snap, again, STEMDOT_FLOAT64, FRAMES * 2), STEMDOT_ERR_DTYPE,
           "STEMDOT_FLOAT32");
    expect("short out", stemdot_live_poll(live, 0, &snap, again, STEMDOT_FLOAT32, 5), STEMDOT_ERR_SHAPE, "out holds 5 values");
    expect("free", stemdot_live_free(live), STEMDOT_OK, NULL);
    expect("poll a freed handle", stemdot_live_poll(live, 0, &snap, NULL, STEMDOT_FLOAT32, 0), STEMDOT_ERR_BAD_HANDLE,
           "already freed");
    stop_sender(&s, t);

    /* cut off after 4 frames: a partial result, NaN at positions 4..8 */
    s = (struct sender){.hdr = hdr, .hdr_len = hdr_len, .frames = mib, .n_frames = 4, .delay_ms = 0};
    check(start_sender(&s, &t, source, sizeof source) == 0, "start the sender");
    double out64[FRAMES * 2];
    expect("live_start float64", stemdot_live_start(source, "passive=true;float64=true", masks, STEMDOT_FLOAT32, 2, SIDE, SIDE, 0, &live),
           STEMDOT_OK, NULL);
    expect("wait for a partial acquisition", stemdot_live_wait(live, &snap, out64, STEMDOT_FLOAT64, FRAMES * 2), STEMDOT_OK, NULL);
    int labelled = snap.final && snap.partial && snap.received == 4;
    for (int i = 0; i < FRAMES * 2; i++) {
        labelled &= i < 8 ? out64[i] == ref[i] : isnan(out64[i]);
    }
    check(labelled, "partial: final %d, partial %d, received %llu, values of frames 0-3 and NaN after", snap.final, snap.partial,
          (unsigned long long)snap.received);
    uint64_t runs[4] = {0};
    expect("missing of a partial acquisition", stemdot_live_missing(live, runs, 4, &n_runs), STEMDOT_OK, NULL);
    check(n_runs == 1 && runs[0] == 4 && runs[1] == 5, "positions without a frame: %zu runs, (%llu, %llu), want (4, 5)", n_runs,
          (unsigned long long)runs[0], (unsigned long long)runs[1]);
    char warnings[2048];
    expect("warnings of a partial acquisition", stemdot_live_warnings(live, warnings, sizeof warnings, &needed), STEMDOT_OK, NULL);
    check(strstr(warnings, "partial result, 5 of 9 scan positions have no frame (NaN): 4-8") != NULL, "warnings: %s", warnings);
    printf("  cut off after 4 frames: %s\n", warnings);
    expect("free", stemdot_live_free(live), STEMDOT_OK, NULL);
    stop_sender(&s, t);
    free(mib);
    free(hdr);
}

/* --------------------------------------------------- cancellation and misuse */

struct waiter {
    stemdot_live live;
    stemdot_status st;
};

static void *wait_thread(void *arg) {
    struct waiter *w = arg;
    stemdot_live_snapshot snap;
    w->st = stemdot_live_wait(w->live, &snap, NULL, STEMDOT_FLOAT32, 0);
    return NULL;
}

static void cancel_and_misuse(void) {
    printf("cancellation and misuse:\n");
    static float mask[16] = {1};
    /* a data port that accepts and never sends: wait blocks until cancelled */
    struct sender s = {.hdr = NULL};
    pthread_t t, w;
    char source[64];
    check(start_sender(&s, &t, source, sizeof source) == 0, "start the sender");
    struct waiter wt = {0};
    expect("live_start", stemdot_live_start(source, "passive=true", mask, STEMDOT_FLOAT32, 1, 4, 4, 0, &wt.live), STEMDOT_OK, NULL);
    pthread_create(&w, NULL, wait_thread, &wt);
    usleep(100000);
    double t0 = now();
    expect("cancel", stemdot_live_cancel(wt.live), STEMDOT_OK, NULL);
    pthread_join(w, NULL);
    double took = now() - t0;
    check(wt.st == STEMDOT_ERR_CANCELLED && took < 2, "wait after cancel: %s after %.3f s", stemdot_status_name(wt.st), took);
    stemdot_live_snapshot snap;
    expect("poll a cancelled run", stemdot_live_poll(wt.live, 0, &snap, NULL, STEMDOT_FLOAT32, 0), STEMDOT_ERR_CANCELLED,
           "cancel");
    expect("free", stemdot_live_free(wt.live), STEMDOT_OK, NULL);
    expect("free twice", stemdot_live_free(wt.live), STEMDOT_ERR_BAD_HANDLE, "already freed");
    stop_sender(&s, t);

    stemdot_live live = 7;
    expect("unknown scheme", stemdot_live_start("tpx://127.0.0.1", "", mask, STEMDOT_FLOAT32, 1, 4, 4, 0, &live),
           STEMDOT_ERR_INVALID_ARGUMENT, "unknown scheme \"tpx\"");
    check(live == 0, "a failed start stores 0, not %llu", (unsigned long long)live);
    expect("unknown option", stemdot_live_start("merlin://127.0.0.1", "colour=blue", mask, STEMDOT_FLOAT32, 1, 4, 4, 0, &live),
           STEMDOT_ERR_INVALID_ARGUMENT, "unknown live option \"colour\"");
    expect("another protocol's option", stemdot_live_start("merlin://127.0.0.1", "stream=v1", mask, STEMDOT_FLOAT32, 1, 4, 4, 0, &live),
           STEMDOT_ERR_INVALID_ARGUMENT, "stream");
    expect("NULL masks", stemdot_live_start("merlin://127.0.0.1", "", NULL, STEMDOT_FLOAT32, 1, 4, 4, 0, &live),
           STEMDOT_ERR_INVALID_ARGUMENT, "must not be NULL");
    expect("huge masks", stemdot_live_start("merlin://127.0.0.1", "", mask, STEMDOT_FLOAT32, (size_t)1 << 62, 4, 4, 0, &live),
           STEMDOT_ERR_SHAPE, "no buffer is that large");
    expect("connection refused: start", stemdot_live_start("merlin://127.0.0.1:1", "passive=true", mask, STEMDOT_FLOAT32, 1, 4, 4, 0, &live),
           STEMDOT_OK, NULL);
    expect("connection refused: wait", stemdot_live_wait(live, &snap, NULL, STEMDOT_FLOAT32, 0), STEMDOT_ERR_IO,
           "cannot connect to the data port 127.0.0.1:1");
    expect("poll timeout", stemdot_live_poll(live, -1, &snap, NULL, STEMDOT_FLOAT32, 0), STEMDOT_ERR_INVALID_ARGUMENT, "timeout");
    expect("free", stemdot_live_free(live), STEMDOT_OK, NULL);
    expect("handle never made", stemdot_live_cancel(123456789), STEMDOT_ERR_BAD_HANDLE, "not valid");
}

int main(int argc, char **argv) {
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (f != NULL) {
        fclose(f);
        live_file(argv[1]);
    } else {
        printf("file %s not found: skipping the file's part (set STEMDOT_TESTDATA)\n", argc > 1 ? argv[1] : "(no path given)");
    }
    cancel_and_misuse();
    printf("live: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
