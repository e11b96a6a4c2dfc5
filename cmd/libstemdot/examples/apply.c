/*
 * apply.c — libstemdot from C: a virtual bright-field image of a real Merlin MIB file,
 * checked against a float64 reference computed here from the file's bytes, then the
 * same on synthetic in-memory frames, and the ABI's behaviour on misuse.
 *
 *   cc -Iinclude capi/examples/apply.c -Lbuild -lstemdot -Wl,-rpath,$PWD/build \
 *      -Wl,--allow-shlib-undefined -lpthread -lm
 *   ./apply ../shared/data/mib/001_4x2_6bit.mib
 *
 * The MIB file (Quantum Detectors Merlin, single chip, U08) holds frames of a 384-byte
 * ASCII header followed by 256×256 uint8 pixels. Without the file (or argument), the
 * real-file part is skipped with a message. Prints "N passed, M failed" and exits 1 on
 * any failure.
 */
#define _DEFAULT_SOURCE /* mkstemps */

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stemdot.h"

static int passed, failed;

/* check records one assertion; on failure it prints the message and the last error. */
#define check(cond, ...)                                                              \
    do {                                                                              \
        if (cond) {                                                                   \
            passed++;                                                                 \
        } else {                                                                      \
            failed++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                      \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, " (last error: %s)\n", stemdot_last_error());             \
        }                                                                             \
    } while (0)

/* check_status checks that got == want and that the message contains `part`. */
static void check_status(int line, const char *what, stemdot_status got, stemdot_status want,
                         const char *part) {
    const char *msg = stemdot_last_error();
    if (got == want && (part == NULL || strstr(msg, part) != NULL)) {
        passed++;
        if (want != STEMDOT_OK) {
            printf("  ok  %-44s %s: %s\n", what, stemdot_status_name(got), msg);
        }
        return;
    }
    failed++;
    fprintf(stderr, "FAIL line %d: %s: got %s, want %s with message containing \"%s\"; message: %s\n",
            line, what, stemdot_status_name(got), stemdot_status_name(want), part ? part : "",
            msg);
}
#define expect(what, call, want, part) check_status(__LINE__, what, (call), want, part)

/* disk_mask fills mask (sig_y × sig_x) with 1 where (x−cx)² + (y−cy)² ≤ r² (LiberTEM's
 * masks.circular rule, as stemdot's disk), else 0. */
static void disk_mask(float *mask, size_t sig_y, size_t sig_x, double cx, double cy, double r) {
    for (size_t y = 0; y < sig_y; y++) {
        for (size_t x = 0; x < sig_x; x++) {
            double dx = (double)x - cx, dy = (double)y - cy;
            mask[y * sig_x + x] = dx * dx + dy * dy <= r * r ? 1.0f : 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- real MIB file */

enum { MIB_HEADER = 384, MIB_SIDE = 256, MIB_PIXELS = MIB_SIDE * MIB_SIDE };

/* mib_reference computes ref[f] = Σ mask·frame_f for every frame of a single-chip U08
 * MIB file by reading it directly. Returns the frame count, or -1. */
static long mib_reference(const char *path, const float *mask, double *ref, long max_frames) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return -1;
    }
    static unsigned char frame[MIB_HEADER + MIB_PIXELS];
    long n = 0;
    while (n < max_frames && fread(frame, 1, sizeof frame, f) == sizeof frame) {
        if (memcmp(frame, "MQ1,", 4) != 0) {
            fclose(f);
            return -1;
        }
        double sum = 0;
        for (size_t i = 0; i < MIB_PIXELS; i++) {
            sum += (double)mask[i] * frame[MIB_HEADER + i];
        }
        ref[n++] = sum;
    }
    fclose(f);
    return n;
}

/* reduce_and_pick checks stemdot_reduce (sum, max) and stemdot_pick on the 8 frames of a
 * single-chip U08 MIB file against its frames read directly. */
static void reduce_and_pick(stemdot_dataset ds, const char *path) {
    static unsigned char frames[8][MIB_HEADER + MIB_PIXELS];
    FILE *f = fopen(path, "rb");
    check(f != NULL && fread(frames, 1, sizeof frames, f) == sizeof frames, "read the 8 frames of %s", path);
    if (f != NULL) {
        fclose(f);
    }
    static double sum[MIB_PIXELS], max[MIB_PIXELS];
    expect("reduce sum and max", stemdot_reduce(ds, 0, 0, NULL, NULL, sum, NULL, max, NULL, MIB_PIXELS), STEMDOT_OK, NULL);
    size_t bad = MIB_PIXELS; /* the first pixel that differs */
    double want_sum = 0, want_max = 0;
    for (size_t i = 0; i < MIB_PIXELS && bad == MIB_PIXELS; i++) {
        want_sum = want_max = 0;
        for (int k = 0; k < 8; k++) {
            want_sum += frames[k][MIB_HEADER + i];
            want_max = frames[k][MIB_HEADER + i] > want_max ? frames[k][MIB_HEADER + i] : want_max;
        }
        if (sum[i] != want_sum || max[i] != want_max) {
            bad = i;
        }
    }
    check(bad == MIB_PIXELS, "pixel %zu: sum %.0f max %.0f, reference %.0f and %.0f", bad,
          bad < MIB_PIXELS ? sum[bad] : 0, bad < MIB_PIXELS ? max[bad] : 0, want_sum, want_max);
    expect("reduce without a buffer", stemdot_reduce(ds, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, MIB_PIXELS),
           STEMDOT_ERR_INVALID_ARGUMENT, "all NULL");
    expect("reduce out_len", stemdot_reduce(ds, 0, 0, NULL, NULL, sum, NULL, NULL, NULL, 7), STEMDOT_ERR_SHAPE, "out_len 7");

    /* stemdot_centre: the centre of the sum frame; with shifts, of the frames moved back */
    double want[3], got[3];
    expect("reduce sum", stemdot_reduce(ds, 0, 0, NULL, NULL, sum, NULL, NULL, NULL, MIB_PIXELS), STEMDOT_OK, NULL);
    expect("find_centre", stemdot_find_centre(sum, 256, 256, want), STEMDOT_OK, NULL);
    expect("centre", stemdot_centre(ds, 0, NULL, 0, got), STEMDOT_OK, NULL);
    check(memcmp(got, want, sizeof got) == 0, "centre (%g, %g, %g), the sum frame's (%g, %g, %g)", got[0], got[1], got[2], want[0], want[1], want[2]);
    const double shift[2] = {-3, -2};
    expect("centre n_shifts", stemdot_centre(ds, 0, shift, 3, got), STEMDOT_ERR_SHAPE, "option shifts holds 3 values");
    /* With shifts, the frames are moved back by them first: a disk of radius 6 about
     * (x, y) = (14, 17) in 4 frames of 40 × 40, moved by (dy, dx) = (1, -2) in each, is
     * found about (16, 16) (whole pixels: exactly moved). */
    static uint16_t disks[4][40][40];
    for (int k = 0; k < 4; k++) {
        for (int y = 0; y < 40; y++) {
            for (int x = 0; x < 40; x++) {
                disks[k][y][x] = (x - 14) * (x - 14) + (y - 17) * (y - 17) <= 36 ? 900 + k : 3;
            }
        }
    }
    stemdot_dataset mem;
    const size_t nav[1] = {4};
    expect("disks", stemdot_dataset_from_memory(disks, sizeof disks, STEMDOT_UINT16, 1, nav, 40, 40, &mem), STEMDOT_OK, NULL);
    const double moved[2] = {1, -2};
    expect("centre shifted", stemdot_centre(mem, 0, moved, 2, got), STEMDOT_OK, NULL);
    check(fabs(got[0] - 16) < 0.1 && fabs(got[1] - 16) < 0.1 && fabs(got[2] - 6) < 0.5, "centre with shift (1, -2): (%g, %g, %g), want (16, 16, 6)",
          got[0], got[1], got[2]);
    stemdot_dataset_free(mem);

    static unsigned char picked[2][MIB_PIXELS];
    const size_t at[] = {1, 1, 0, 2}; /* (y, x) of the 2 × 4 scan the frames' timestamps give */
    expect("pick", stemdot_pick(ds, at, 2, 2, picked, sizeof picked), STEMDOT_OK, NULL);
    check(memcmp(picked[0], frames[5] + MIB_HEADER, MIB_PIXELS) == 0 && memcmp(picked[1], frames[2] + MIB_HEADER, MIB_PIXELS) == 0,
          "picked frames 5 and 2 differ from the file's");
    const size_t outside[] = {2, 0};
    expect("pick outside", stemdot_pick(ds, outside, 1, 2, picked, MIB_PIXELS), STEMDOT_ERR_SHAPE, "option at: scan position (2, 0) is outside");
}

static void real_file(const char *path) {
    printf("real file: %s\n", path);
    stemdot_dataset ds = 0;
    expect("open MIB", stemdot_open(path, "", &ds), STEMDOT_OK, NULL);
    if (ds == 0) {
        return;
    }
    stemdot_dataset_info info;
    expect("dataset info", stemdot_dataset_get_info(ds, &info), STEMDOT_OK, NULL);
    check(info.n_frames == 8 && info.sig_shape[0] == MIB_SIDE && info.sig_shape[1] == MIB_SIDE &&
              info.dtype == STEMDOT_UINT8,
          "info: %llu frames of %zu×%zu dtype %d, want 8 of 256×256 uint8",
          (unsigned long long)info.n_frames, info.sig_shape[0], info.sig_shape[1], (int)info.dtype);
    printf("  nav shape (");
    for (size_t i = 0; i < info.nav_ndim; i++) {
        printf(i ? ", %zu" : "%zu", info.nav_shape[i]);
    }
    printf("), sig shape (%zu, %zu)\n", info.sig_shape[0], info.sig_shape[1]);
    char notes[512];
    size_t notes_len = 0;
    expect("dataset warnings", stemdot_dataset_warnings(ds, notes, sizeof notes, &notes_len), STEMDOT_OK, NULL);
    check(strstr(notes, "nav_shape") != NULL, "a scan shape guessed from the timestamps warns, naming nav_shape: %s", notes);
    stemdot_dataset whole = 0;
    expect("open MIB as a 2x4 scan", stemdot_open(path, "nav_shape=2,4", &whole), STEMDOT_OK, NULL);
    notes_len = 99;
    expect("warnings of a 2x4 scan", stemdot_dataset_warnings(whole, notes, sizeof notes, &notes_len), STEMDOT_OK, NULL);
    check(notes_len == 0 && notes[0] == 0, "warnings of a whole scan: %s", notes);
    expect("free the 2x4 scan", stemdot_dataset_free(whole), STEMDOT_OK, NULL);
    stemdot_dataset cut = 0;
    expect("open MIB as a 3x3 scan", stemdot_open(path, "nav_shape=3,3", &cut), STEMDOT_OK, NULL);
    expect("warnings length", stemdot_dataset_warnings(cut, NULL, 0, &notes_len), STEMDOT_OK, NULL);
    check(notes_len > 0, "the length query gives the warnings' length: %zu", notes_len);
    expect("warnings small buffer", stemdot_dataset_warnings(cut, notes, 2, &notes_len), STEMDOT_ERR_SHAPE, "too small");
    expect("warnings", stemdot_dataset_warnings(cut, notes, sizeof notes, &notes_len), STEMDOT_OK, NULL);
    check(notes_len == strlen(notes) && strstr(notes, "8 frames") != NULL, "warnings of a 3x3 scan of 8 frames: %s", notes);
    expect("free the 3x3 scan", stemdot_dataset_free(cut), STEMDOT_OK, NULL);

    /* Virtual bright field: a disk over the direct beam, centred near (x=42, y=126). */
    static float mask[MIB_PIXELS], parsed[MIB_PIXELS];
    disk_mask(mask, MIB_SIDE, MIB_SIDE, 42, 126, 30);
    size_t n_masks = 0;
    expect("mask_parse disk", stemdot_mask_parse("disk:42,126,30", MIB_SIDE, MIB_SIDE, parsed, MIB_PIXELS, &n_masks),
           STEMDOT_OK, NULL);
    check(n_masks == 1 && memcmp(mask, parsed, sizeof mask) == 0,
          "stemdot_mask_parse(disk) differs from the disk built in C");

    double ref[8], out64[8];
    float out32[8];
    long n = mib_reference(path, mask, ref, 8);
    check(n == 8, "reference read %ld frames, want 8", n);

    stemdot_plan plan = 0;
    expect("plan (default)", stemdot_plan_new("", "", &plan), STEMDOT_OK, NULL);
    expect("apply float64", stemdot_apply(ds, mask, 1, MIB_SIDE, MIB_SIDE, plan, 0, NULL, NULL, out64, STEMDOT_FLOAT64, 8),
           STEMDOT_OK, NULL);
    expect("apply float32", stemdot_apply(ds, mask, 1, MIB_SIDE, MIB_SIDE, 0, 0, NULL, NULL, out32, STEMDOT_FLOAT32, 8),
           STEMDOT_OK, NULL);
    /* Integer pixels × 0/1 weights: every partial sum is an integer below 2^24, so both
     * dtypes are exact. */
    for (long f = 0; f < n; f++) {
        check(out64[f] == ref[f] && (double)out32[f] == ref[f],
              "frame %ld: float64 %.1f, float32 %.1f, reference %.1f", f, out64[f], (double)out32[f], ref[f]);
    }
    printf("  virtual bright field (disk x=42 y=126 r=30), nav %zu × %zu:\n",
           info.nav_ndim == 2 ? info.nav_shape[0] : 1, info.nav_ndim == 2 ? info.nav_shape[1] : (size_t)n);
    size_t cols = info.nav_ndim == 2 ? info.nav_shape[1] : (size_t)n;
    for (long f = 0; f < n; f++) {
        printf("%s%9.0f", f % cols == 0 ? "   " : " ", out64[f]);
        if ((size_t)f % cols == cols - 1) {
            printf("\n");
        }
    }
    reduce_and_pick(ds, path);
    expect("plan free", stemdot_plan_free(plan), STEMDOT_OK, NULL);
    expect("dataset free", stemdot_dataset_free(ds), STEMDOT_OK, NULL);
}

/* ------------------------------------------------------- synthetic in-memory frames */

enum { NAV_Y = 3, NAV_X = 5, SIG_Y = 16, SIG_X = 12, FRAMES = NAV_Y * NAV_X, PIX = SIG_Y * SIG_X };

struct progress_log {
    pthread_t caller;
    int calls, monotone, on_caller;
    uint64_t last, total;
    stemdot_run cancel_run; /* when set: cancel this run at the first report */
};

static void on_progress(uint64_t done, uint64_t total, void *user) {
    struct progress_log *log = user;
    log->monotone &= done > log->last && done <= total;
    log->on_caller &= pthread_equal(pthread_self(), log->caller);
    log->calls++;
    log->last = done;
    log->total = total;
    if (log->cancel_run != 0) {
        stemdot_run_cancel(log->cancel_run);
    }
}

static void synthetic(void) {
    printf("synthetic frames: nav (%d, %d), sig (%d, %d), uint16 and float32\n", NAV_Y, NAV_X, SIG_Y, SIG_X);
    static uint16_t frames16[FRAMES * PIX];
    static float frames32[FRAMES * PIX];
    srand(5);
    for (size_t i = 0; i < FRAMES * PIX; i++) {
        frames16[i] = (uint16_t)(rand() % 65536);
        frames32[i] = (float)rand() / RAND_MAX * 200.0f - 100.0f;
    }
    /* masks: ring (1) + centre of mass (3), from the CLI specs */
    size_t n_ring = 0, n_com = 0;
    expect("mask_parse count ring", stemdot_mask_parse("ring:6,8,2,5", SIG_Y, SIG_X, NULL, 0, &n_ring), STEMDOT_OK, NULL);
    expect("mask_parse count com", stemdot_mask_parse("com", SIG_Y, SIG_X, NULL, 0, &n_com), STEMDOT_OK, NULL);
    check(n_ring == 1 && n_com == 3, "mask counts ring %zu com %zu, want 1 and 3", n_ring, n_com);
    size_t n_masks = n_ring + n_com;
    static float masks[4 * PIX];
    expect("mask_parse ring", stemdot_mask_parse("ring:6,8,2,5", SIG_Y, SIG_X, masks, PIX, &n_ring), STEMDOT_OK, NULL);
    expect("mask_parse com", stemdot_mask_parse("com", SIG_Y, SIG_X, masks + PIX, 3 * PIX, &n_com), STEMDOT_OK, NULL);

    const size_t nav[2] = {NAV_Y, NAV_X};
    struct {
        const void *data;
        size_t bytes;
        stemdot_dtype dtype;
    } inputs[2] = {{frames16, sizeof frames16, STEMDOT_UINT16}, {frames32, sizeof frames32, STEMDOT_FLOAT32}};
    for (int k = 0; k < 2; k++) {
        stemdot_dataset ds = 0;
        expect("from_memory", stemdot_dataset_from_memory(inputs[k].data, inputs[k].bytes, inputs[k].dtype, 2, nav, SIG_Y, SIG_X, &ds),
               STEMDOT_OK, NULL);
        /* float64 reference, and the sum of |terms|, which bounds the rounding error of
         * any summation order */
        double ref[FRAMES * 4], scale[FRAMES * 4], out64[FRAMES * 4];
        float out32[FRAMES * 4];
        for (size_t f = 0; f < FRAMES; f++) {
            for (size_t m = 0; m < n_masks; m++) {
                double s = 0, a = 0;
                for (size_t i = 0; i < PIX; i++) {
                    double v = k == 0 ? frames16[f * PIX + i] : frames32[f * PIX + i];
                    s += (double)masks[m * PIX + i] * v;
                    a += fabs((double)masks[m * PIX + i] * v);
                }
                ref[f * n_masks + m] = s;
                scale[f * n_masks + m] = a > 0 ? a : 1;
            }
        }
        struct progress_log log = {pthread_self(), 0, 1, 1, 0, 0, 0};
        expect("apply float64 with progress",
               stemdot_apply(ds, masks, n_masks, SIG_Y, SIG_X, 0, 0, on_progress, &log, out64, STEMDOT_FLOAT64, FRAMES * n_masks),
               STEMDOT_OK, NULL);
        check(log.calls >= 1 && log.monotone && log.on_caller && log.last == FRAMES && log.total == FRAMES,
              "progress: %d calls, monotone %d, on calling thread %d, last %llu of %llu", log.calls, log.monotone,
              log.on_caller, (unsigned long long)log.last, (unsigned long long)log.total);
        expect("apply float32",
               stemdot_apply(ds, masks, n_masks, SIG_Y, SIG_X, 0, 0, NULL, NULL, out32, STEMDOT_FLOAT32, FRAMES * n_masks),
               STEMDOT_OK, NULL);
        double worst64 = 0, worst32 = 0;
        for (size_t i = 0; i < FRAMES * n_masks; i++) {
            worst64 = fmax(worst64, fabs(out64[i] - ref[i]) / scale[i]);
            worst32 = fmax(worst32, fabs((double)out32[i] - ref[i]) / scale[i]);
        }
        check(worst64 < 1e-12 && worst32 < 1e-5, "%s: error relative to Σ|terms|: float64 %g, float32 %g",
              k == 0 ? "uint16" : "float32", worst64, worst32);
        printf("  %-7s: 4 masks × %d frames, worst error / Σ|terms| float64 %.1e, float32 %.1e\n",
               k == 0 ? "uint16" : "float32", FRAMES, worst64, worst32);

        /* cancellation */
        stemdot_run run = 0;
        expect("run new", stemdot_run_new(&run), STEMDOT_OK, NULL);
        struct progress_log cancel_log = {pthread_self(), 0, 1, 1, 0, 0, run};
        expect("cancel from the progress callback",
               stemdot_apply(ds, masks, n_masks, SIG_Y, SIG_X, 0, run, on_progress, &cancel_log, out64, STEMDOT_FLOAT64, FRAMES * n_masks),
               STEMDOT_ERR_CANCELLED, "cancelled");
        expect("apply on a cancelled run",
               stemdot_apply(ds, masks, n_masks, SIG_Y, SIG_X, 0, run, NULL, NULL, out64, STEMDOT_FLOAT64, FRAMES * n_masks),
               STEMDOT_ERR_CANCELLED, "stemdot_run_reset");
        expect("run reset", stemdot_run_reset(run), STEMDOT_OK, NULL);
        expect("apply on a reset run",
               stemdot_apply(ds, masks, n_masks, SIG_Y, SIG_X, 0, run, NULL, NULL, out64, STEMDOT_FLOAT64, FRAMES * n_masks),
               STEMDOT_OK, NULL);
        expect("run free", stemdot_run_free(run), STEMDOT_OK, NULL);
        expect("dataset free", stemdot_dataset_free(ds), STEMDOT_OK, NULL);
    }
}

/* ------------------------------------------------------------------ mask stacks */

/* write_npy writes n float64 masks of sig_y × sig_x (C order, little-endian host) to path
 * as NPY format 1.0: the magic, a header dictionary padded to 64 bytes, the data. */
static int write_npy(const char *path, const double *data, int n, int sig_y, int sig_x) {
    char dict[118];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d, %d), }", n,
                       sig_y, sig_x);
    memset(dict + len, ' ', sizeof dict - len);
    dict[sizeof dict - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return 0;
    }
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof dict, 0};
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(dict, 1, sizeof dict, f) == sizeof dict &&
             fwrite(data, sizeof *data, (size_t)n * sig_y * sig_x, f) == (size_t)n * sig_y * sig_x;
    return fclose(f) == 0 && ok;
}

/* mask_stacks checks stemdot_mask_stack: the masks of the files first, then those of the
 * specs (the order of `stemdot apply --masks ... --mask ...`), their names, the size
 * queries, float64 weights, and its errors. */
static void mask_stacks(void) {
    enum { N_FILE = 2, SY = 4, SX = 6, P = SY * SX, N = N_FILE + 1 + 3 };
    printf("mask stacks: files then specs\n");
    static double file_masks[N_FILE * P];
    for (int i = 0; i < N_FILE * P; i++) {
        file_masks[i] = 0.1 * (i + 1); /* not exact in float32 */
    }
    char path[] = "/tmp/stemdot-capi-masks-XXXXXX.npy";
    int fd = mkstemps(path, 4);
    check(fd >= 0 && write_npy(path, file_masks, N_FILE, SY, SX), "writing %s", path);
    if (fd >= 0) {
        close(fd);
    }
    const char *files[] = {path}, *specs[] = {"point:1,2", "com"};
    size_t n = 0, needed = 0;
    expect("mask_stack sizes", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, &needed), STEMDOT_OK, NULL);
    check(n == N, "mask_stack count %zu, want %d", n, N);
    static float got[N * P], want[N * P];
    static double got64[N * P];
    char names[128];
    expect("mask_stack", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, got, STEMDOT_FLOAT32, N * P, &n, names, sizeof names, &needed),
           STEMDOT_OK, NULL);
    const char *base = strrchr(path, '/') + 1;
    char want_names[128];
    snprintf(want_names, sizeof want_names, "%.*s[0]\n%.*s[1]\npoint\ncom_sum\ncom_y\ncom_x", (int)(strlen(base) - 4), base,
             (int)(strlen(base) - 4), base);
    check(strcmp(names, want_names) == 0 && needed == strlen(want_names), "mask names \"%s\", want \"%s\"", names, want_names);
    for (int i = 0; i < N_FILE * P; i++) {
        want[i] = (float)file_masks[i];
    }
    size_t k;
    stemdot_mask_parse("point:1,2", SY, SX, want + N_FILE * P, P, &k);
    stemdot_mask_parse("com", SY, SX, want + (N_FILE + 1) * P, 3 * P, &k);
    check(memcmp(got, want, sizeof got) == 0, "mask_stack weights differ from the file's and stemdot_mask_parse's, in that order");
    expect("mask_stack float64", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, got64, STEMDOT_FLOAT64, N * P, &n, NULL, 0, NULL),
           STEMDOT_OK, NULL);
    double worst = 0;
    for (int i = 0; i < N_FILE * P; i++) {
        worst = fmax(worst, fabs(got64[i] - file_masks[i]) / file_masks[i]);
    }
    check(worst <= 0x1p-48, "mask_stack float64: the file's weights are off by %g (relative), want ≤ 2^-48", worst);

    expect("mask_stack out too short", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, got, STEMDOT_FLOAT32, N * P - 1, &n, NULL, 0, NULL),
           STEMDOT_ERR_SHAPE, "need 144");
    expect("mask_stack names too short", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, NULL, 0, 0, &n, names, 4, &needed),
           STEMDOT_ERR_SHAPE, "too small");
    expect("mask_stack bad dtype", stemdot_mask_stack(files, 1, specs, 2, SY, SX, NULL, got, STEMDOT_UINT8, N * P, &n, NULL, 0, NULL),
           STEMDOT_ERR_DTYPE, "out dtype");
    expect("mask_stack no masks", stemdot_mask_stack(NULL, 0, NULL, 0, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_INVALID_ARGUMENT, "no masks");
    expect("mask_stack files NULL", stemdot_mask_stack(NULL, 1, specs, 2, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_INVALID_ARGUMENT, "files is NULL");
    expect("mask_stack NULL spec", stemdot_mask_stack(NULL, 0, (const char *[]){"com", NULL}, 2, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_INVALID_ARGUMENT, "specs[1] is NULL");
    expect("mask_stack bad spec", stemdot_mask_stack(files, 1, (const char *[]){"disk:1,2"}, 1, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_INVALID_ARGUMENT, "disk:1,2");
    expect("mask_stack other sig shape", stemdot_mask_stack(files, 1, NULL, 0, SX, SY, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_SHAPE, "do not match");
    /* auto specs: refused without a centre, made about it as stemdot_mask_parse_centred makes them */
    const char *auto_specs[] = {"disk:auto"};
    expect("mask_stack auto without centre", stemdot_mask_stack(NULL, 0, auto_specs, 1, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_INVALID_ARGUMENT, "centre");
    const double centre[3] = {2.5, 1.0, 1.5};
    expect("mask_stack auto", stemdot_mask_stack(NULL, 0, auto_specs, 1, SY, SX, centre, got, STEMDOT_FLOAT32, P, &n, NULL, 0, NULL),
           STEMDOT_OK, NULL);
    expect("mask_parse_centred", stemdot_mask_parse_centred("disk:2.5,1,1.5", SY, SX, centre, want, P, &n), STEMDOT_OK, NULL);
    check(n == 1 && memcmp(got, want, P * sizeof(float)) == 0, "mask_stack disk:auto differs from disk:2.5,1,1.5 about the centre given");
    remove(path);
    expect("mask_stack missing file", stemdot_mask_stack(files, 1, NULL, 0, SY, SX, NULL, NULL, 0, 0, &n, NULL, 0, NULL),
           STEMDOT_ERR_IO, path);
}

/* ------------------------------------------------------------ prepared masks */

/*
 * A mask stack prepared once (stemdot_masks_new) gives results bit-identical to
 * stemdot_apply, stemdot_apply64 and stemdot_apply_shifted on the same weights: random
 * frames, dense masks with double weights, sparse ones (a ring and points), unshifted,
 * a constant whole-pixel shift and sub-pixel shifts per frame, float and double results.
 */
static void prepared_masks(void) {
    printf("prepared masks:\n");
    enum { PY = 12, PX = 10, PPIX = PY * PX, PNAV = 6, NM = 3 };
    static uint16_t frames[PNAV * PPIX];
    static double dense[NM * PPIX], sparse[NM * PPIX], shifts[2 * PNAV];
    static double want64[PNAV * NM], got64[PNAV * NM];
    static float want32[PNAV * NM], got32[PNAV * NM];
    srand(11);
    for (size_t i = 0; i < PNAV * PPIX; i++) {
        frames[i] = (uint16_t)(rand() % 4096);
    }
    for (size_t i = 0; i < NM * PPIX; i++) {
        dense[i] = (double)rand() / RAND_MAX - 0.5;
    }
    float ring[PPIX];
    size_t n1 = 0;
    expect("mask_parse ring", stemdot_mask_parse("ring:5,6,2,3", PY, PX, ring, PPIX, &n1), STEMDOT_OK, NULL);
    for (size_t i = 0; i < PPIX; i++) {
        sparse[i] = ring[i];
    }
    sparse[PPIX + 7] = 1.0 / 3; /* not exact in float */
    sparse[2 * PPIX + 50] = -2.5;
    for (size_t i = 0; i < 2 * PNAV; i++) {
        shifts[i] = 3.0 * rand() / RAND_MAX - 1.5;
    }
    const double constant[2] = {1, -2};
    const size_t nav[1] = {PNAV};
    stemdot_dataset ds = 0;
    expect("from_memory", stemdot_dataset_from_memory(frames, sizeof frames, STEMDOT_UINT16, 1, nav, PY, PX, &ds), STEMDOT_OK, NULL);
    const double *stacks[2] = {dense, sparse};
    const char *names[2] = {"dense", "sparse"};
    for (int k = 0; k < 2; k++) {
        static float w32[NM * PPIX];
        for (size_t i = 0; i < NM * PPIX; i++) {
            w32[i] = (float)stacks[k][i];
        }
        stemdot_masks h32 = 0, h64 = 0;
        expect("masks_new float", stemdot_masks_new(w32, STEMDOT_FLOAT32, NM, PY, PX, &h32), STEMDOT_OK, NULL);
        expect("masks_new double", stemdot_masks_new(stacks[k], STEMDOT_FLOAT64, NM, PY, PX, &h64), STEMDOT_OK, NULL);
        int identical = 1;
        for (int s = 0; s < 3; s++) {
            const double *sh = s == 0 ? NULL : s == 1 ? constant : shifts;
            size_t n_sh = s == 0 ? 0 : s == 1 ? 2 : 2 * PNAV;
            for (int w = 0; w < 2; w++) { /* float weights, double weights */
                stemdot_masks h = w == 0 ? h32 : h64;
                const void *m = w == 0 ? (const void *)w32 : (const void *)stacks[k];
                stemdot_dtype mdt = w == 0 ? STEMDOT_FLOAT32 : STEMDOT_FLOAT64;
                if (sh == NULL) {
                    expect("apply", w == 0 ? stemdot_apply(ds, w32, NM, PY, PX, 0, 0, NULL, NULL, want64, STEMDOT_FLOAT64, PNAV * NM)
                                           : stemdot_apply64(ds, stacks[k], NM, PY, PX, 0, 0, NULL, NULL, want64, STEMDOT_FLOAT64, PNAV * NM),
                           STEMDOT_OK, NULL);
                    expect("apply float", w == 0 ? stemdot_apply(ds, w32, NM, PY, PX, 0, 0, NULL, NULL, want32, STEMDOT_FLOAT32, PNAV * NM)
                                                 : stemdot_apply64(ds, stacks[k], NM, PY, PX, 0, 0, NULL, NULL, want32, STEMDOT_FLOAT32, PNAV * NM),
                           STEMDOT_OK, NULL);
                } else {
                    expect("apply_shifted", stemdot_apply_shifted(ds, m, mdt, NM, PY, PX, sh, n_sh, 0, 0, NULL, NULL, want64, STEMDOT_FLOAT64, PNAV * NM),
                           STEMDOT_OK, NULL);
                    expect("apply_shifted float", stemdot_apply_shifted(ds, m, mdt, NM, PY, PX, sh, n_sh, 0, 0, NULL, NULL, want32, STEMDOT_FLOAT32, PNAV * NM),
                           STEMDOT_OK, NULL);
                }
                expect("apply_masks double", stemdot_apply_masks(ds, h, sh, n_sh, 0, 0, NULL, NULL, got64, STEMDOT_FLOAT64, PNAV * NM), STEMDOT_OK, NULL);
                expect("apply_masks float", stemdot_apply_masks(ds, h, sh, n_sh, 0, 0, NULL, NULL, got32, STEMDOT_FLOAT32, PNAV * NM), STEMDOT_OK, NULL);
                int same = memcmp(got64, want64, sizeof got64) == 0 && memcmp(got32, want32, sizeof got32) == 0;
                check(same, "%s masks, shifts %d, weights %s: stemdot_apply_masks differs", names[k], s, w == 0 ? "float" : "double");
                identical &= same;
                check(want64[0] != 0, "%s: a zero result", names[k]);
            }
        }
        if (identical) {
            printf("  %-6s: bit-identical to stemdot_apply, apply64, apply_shifted (3 shifts × 2 weight and 2 result dtypes)\n", names[k]);
        }
        expect("masks free", stemdot_masks_free(h32), STEMDOT_OK, NULL);
        expect("masks free twice", stemdot_masks_free(h32), STEMDOT_ERR_BAD_HANDLE, "already freed");
        expect("apply freed masks", stemdot_apply_masks(ds, h32, NULL, 0, 0, 0, NULL, NULL, got32, STEMDOT_FLOAT32, PNAV * NM),
               STEMDOT_ERR_BAD_HANDLE, "masks handle");
        expect("masks free", stemdot_masks_free(h64), STEMDOT_OK, NULL);
    }
    stemdot_masks h = 7;
    float bad[PPIX] = {0};
    bad[5] = NAN;
    expect("masks_new NaN", stemdot_masks_new(bad, STEMDOT_FLOAT32, 1, PY, PX, &h), STEMDOT_ERR_INVALID_ARGUMENT, "weight NaN at pixel (y=0, x=5)");
    check(h == 0, "a failed masks_new stores 0, not %llu", (unsigned long long)h);
    expect("masks_new dtype", stemdot_masks_new(bad, STEMDOT_UINT16, 1, PY, PX, &h), STEMDOT_ERR_DTYPE, "mask dtype");
    expect("masks_new NULL", stemdot_masks_new(NULL, STEMDOT_FLOAT32, 1, PY, PX, &h), STEMDOT_ERR_INVALID_ARGUMENT, "must not be NULL");
    bad[5] = 1;
    expect("masks_new other sig", stemdot_masks_new(bad, STEMDOT_FLOAT32, 1, PX, PY, &h), STEMDOT_OK, NULL);
    expect("apply_masks sig shape", stemdot_apply_masks(ds, h, NULL, 0, 0, 0, NULL, NULL, got32, STEMDOT_FLOAT32, PNAV), STEMDOT_ERR_SHAPE, "sig_shape");
    expect("apply_masks NULL shifts", stemdot_apply_masks(ds, h, NULL, 2, 0, 0, NULL, NULL, got32, STEMDOT_FLOAT32, PNAV),
           STEMDOT_ERR_INVALID_ARGUMENT, "n_shifts is 2");
    expect("apply_masks a dataset handle", stemdot_apply_masks(ds, ds, NULL, 0, 0, 0, NULL, NULL, got32, STEMDOT_FLOAT32, PNAV),
           STEMDOT_ERR_BAD_HANDLE, "not a masks handle");
    expect("masks free", stemdot_masks_free(h), STEMDOT_OK, NULL);
    expect("dataset free", stemdot_dataset_free(ds), STEMDOT_OK, NULL);
}

/* ---------------------------------------------------------------------- misuse */

static void *set_error_in_thread(void *arg) {
    (void)arg;
    stemdot_dataset ds;
    stemdot_open("/nonexistent/other-thread.mib", "", &ds);
    return NULL;
}

static void misuse(void) {
    printf("misuse:\n");
    stemdot_dataset ds = 0;
    expect("open NULL path", stemdot_open(NULL, "", &ds), STEMDOT_ERR_INVALID_ARGUMENT, "must not be NULL");
    expect("open NULL out", stemdot_open("x.mib", "", NULL), STEMDOT_ERR_INVALID_ARGUMENT, "must not be NULL");
    expect("open missing file", stemdot_open("/nonexistent/scan.mib", "", &ds), STEMDOT_ERR_IO, "/nonexistent/scan.mib");
    expect("open unknown option", stemdot_open("/nonexistent/scan.raw", "colour=blue", &ds), STEMDOT_ERR_INVALID_ARGUMENT,
           "unknown option \"colour\"");
    expect("open bad dtype option", stemdot_open("/nonexistent/scan.raw", "format=raw;sig_shape=4,4;dtype=uint12", &ds),
           STEMDOT_ERR_DTYPE, "uint12");
    expect("open bad sig_shape", stemdot_open("/nonexistent/scan.raw", "sig_shape=4,0", &ds), STEMDOT_ERR_SHAPE,
           "not a positive size");

    /* thread-local messages: another thread's error leaves this thread's alone */
    const char *before = "stemdot_open: option sig_shape \"4,0\"";
    pthread_t t;
    pthread_create(&t, NULL, set_error_in_thread, NULL);
    pthread_join(t, NULL);
    check(strncmp(stemdot_last_error(), before, strlen(before)) == 0,
          "last error changed by another thread: \"%s\"", stemdot_last_error());

    uint16_t frames[2 * 3 * 4] = {0};
    const size_t nav[1] = {2};
    expect("from_memory wrong size", stemdot_dataset_from_memory(frames, sizeof frames - 2, STEMDOT_UINT16, 1, nav, 3, 4, &ds),
           STEMDOT_ERR_SHAPE, "46 bytes");
    expect("from_memory bad dtype", stemdot_dataset_from_memory(frames, sizeof frames, (stemdot_dtype)42, 1, nav, 3, 4, &ds),
           STEMDOT_ERR_DTYPE, "42");
    expect("from_memory NULL frames", stemdot_dataset_from_memory(NULL, sizeof frames, STEMDOT_UINT16, 1, nav, 3, 4, &ds),
           STEMDOT_ERR_INVALID_ARGUMENT, "NULL");
    expect("from_memory nav_ndim 0", stemdot_dataset_from_memory(frames, sizeof frames, STEMDOT_UINT16, 0, nav, 3, 4, &ds),
           STEMDOT_ERR_INVALID_ARGUMENT, "nav_ndim 0");
    expect("from_memory", stemdot_dataset_from_memory(frames, sizeof frames, STEMDOT_UINT16, 1, nav, 3, 4, &ds), STEMDOT_OK, NULL);
    check(stemdot_last_error()[0] == '\0', "last error after success: \"%s\"", stemdot_last_error());

    float mask[3 * 4] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    float out[2];
    double out64[2];
    expect("apply NULL masks", stemdot_apply(ds, NULL, 1, 3, 4, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_INVALID_ARGUMENT, "NULL");
    expect("apply NULL out", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, NULL, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_INVALID_ARGUMENT, "NULL");
    expect("apply short result", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, 1),
           STEMDOT_ERR_SHAPE, "holds 1 values, but 2 frames × 1 masks need 2");
    expect("apply mask sig shape", stemdot_apply(ds, mask, 1, 4, 3, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_SHAPE, "masks of sig_shape (4, 3) do not match the frames' sig_shape (3, 4)");
    expect("apply result dtype", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, out, STEMDOT_UINT16, 2),
           STEMDOT_ERR_DTYPE, "result dtype 2");
    mask[5] = NAN;
    expect("apply NaN weight", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_INVALID_ARGUMENT, "NaN");
    mask[5] = 1;
    expect("apply ok", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, out64, STEMDOT_FLOAT64, 2), STEMDOT_OK, NULL);

    /* a dataset held on the GPU: the same results as stemdot_apply, or CUDA_UNAVAILABLE */
    stemdot_resident res = 0;
    stemdot_status st = stemdot_to_device(ds, 0, &res);
    if (st == STEMDOT_OK) {
        double res64[2] = {-1, -1};
        expect("resident apply", stemdot_resident_apply(res, mask, 1, 3, 4, res64, STEMDOT_FLOAT64, 2), STEMDOT_OK, NULL);
        check(res64[0] == out64[0] && res64[1] == out64[1], "resident results %g %g, want %g %g", res64[0], res64[1],
              out64[0], out64[1]);
        expect("resident short result", stemdot_resident_apply(res, mask, 1, 3, 4, out, STEMDOT_FLOAT32, 1),
               STEMDOT_ERR_SHAPE, "holds 1 values");
        expect("resident free", stemdot_resident_free(res), STEMDOT_OK, NULL);
    } else {
        expect("to_device without a GPU", st, STEMDOT_ERR_CUDA_UNAVAILABLE, "GPU");
    }
    expect("to_device NULL out", stemdot_to_device(ds, 0, NULL), STEMDOT_ERR_INVALID_ARGUMENT, "NULL");
    expect("resident free never made", stemdot_resident_free(res == 0 ? 123456789 : res), STEMDOT_ERR_BAD_HANDLE,
           "not valid");

    expect("mask_parse bad spec", stemdot_mask_parse("disk:1,2", 3, 4, NULL, 0, &(size_t){0}),
           STEMDOT_ERR_INVALID_ARGUMENT, "disk:1,2");
    expect("mask_parse small out", stemdot_mask_parse("com", 3, 4, out, 2, &(size_t){0}), STEMDOT_ERR_SHAPE, "need 36");

    stemdot_plan plan = 0;
    expect("plan bad cpus", stemdot_plan_new("two", "", &plan), STEMDOT_ERR_INVALID_ARGUMENT, "two");
    expect("plan cpu not allowed", stemdot_plan_new("4095,", "", &plan), STEMDOT_ERR_PLAN, "4095");
    st = stemdot_plan_new("", "1", &plan);
    if (st == STEMDOT_OK) {
        printf("  (a GPU plan was possible on this machine)\n");
        stemdot_plan_free(plan);
    } else {
        expect("plan with a GPU", st, STEMDOT_ERR_CUDA_UNAVAILABLE, "GPU");
    }
    plan = 12345;
    expect("plan options unknown key", stemdot_plan_new_options("threads=2", &plan), STEMDOT_ERR_INVALID_ARGUMENT, "threads");
    check(plan == 0, "a failed plan_new_options stores handle 0, not %llu", (unsigned long long)plan);
    expect("plan options beyond the cores", stemdot_plan_new_options("topology=1;cpus=2", &plan), STEMDOT_ERR_PLAN,
           "option oversubscribe");
    expect("plan options oversubscribed", stemdot_plan_new_options("topology=1;cpus=2;oversubscribe=true", &plan),
           STEMDOT_OK, NULL);
    size_t needed = 0;
    char json[4096];
    expect("plan describe oversubscribed", stemdot_plan_describe(plan, 0, json, sizeof json, &needed), STEMDOT_OK, NULL);
    check(strstr(json, "oversubscribed") != NULL, "oversubscribed plan JSON warns: %s", json);
    expect("apply with a described plan", stemdot_apply(ds, mask, 1, 3, 4, plan, 0, NULL, NULL, out, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_INVALID_ARGUMENT, "described machine");
    stemdot_plan_free(plan);
    expect("plan", stemdot_plan_new("1", "", &plan), STEMDOT_OK, NULL);
    expect("plan describe length", stemdot_plan_describe(plan, ds, NULL, 0, &needed), STEMDOT_OK, NULL);
    check(needed > 0, "the length query gives the length: %zu", needed);
    expect("plan describe small", stemdot_plan_describe(plan, ds, json, 4, &needed), STEMDOT_ERR_SHAPE, "too small");
    expect("plan describe", stemdot_plan_describe(plan, ds, json, sizeof json, &needed), STEMDOT_OK, NULL);
    check(needed == strlen(json) && strstr(json, "\"partitions\":[[0,") != NULL, "plan JSON: %s", json);
    printf("  plan for 2 frames on 1 CPU: %s\n", json);

    /* handles: wrong kind, freed, double free, zero */
    expect("plan handle as dataset", stemdot_dataset_get_info(plan, &(stemdot_dataset_info){0}),
           STEMDOT_ERR_BAD_HANDLE, "is a plan handle, not a dataset handle");
    expect("plan free", stemdot_plan_free(plan), STEMDOT_OK, NULL);
    expect("plan double free", stemdot_plan_free(plan), STEMDOT_ERR_BAD_HANDLE, "already freed");
    expect("dataset free", stemdot_dataset_free(ds), STEMDOT_OK, NULL);
    expect("freed dataset used", stemdot_apply(ds, mask, 1, 3, 4, 0, 0, NULL, NULL, out, STEMDOT_FLOAT32, 2),
           STEMDOT_ERR_BAD_HANDLE, "already freed");
    expect("dataset double free", stemdot_dataset_free(ds), STEMDOT_ERR_BAD_HANDLE, "already freed");
    expect("dataset handle 0", stemdot_dataset_get_info(0, &(stemdot_dataset_info){0}), STEMDOT_ERR_BAD_HANDLE, "0 (none)");
    expect("run handle never made", stemdot_run_cancel(987654321), STEMDOT_ERR_BAD_HANDLE, "987654321");
}

int main(int argc, char **argv) {
    printf("libstemdot %s (header %s)\n", stemdot_version(), STEMDOT_VERSION);
    check(strcmp(stemdot_version(), STEMDOT_VERSION) == 0, "library version %s, header %s", stemdot_version(), STEMDOT_VERSION);
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (f != NULL) {
        fclose(f);
        real_file(argv[1]);
    } else {
        printf("real file %s not found: skipping the real-file part (set STEMDOT_TESTDATA)\n",
               argc > 1 ? argv[1] : "(no path given)");
    }
    synthetic();
    mask_stacks();
    prepared_masks();
    misuse();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
