/* turbospark bench: prompt and generation throughput against the memory-bandwidth floor.
 *
 * Floor = bytes a decode step must read per token (ts_model_decode_cost: active quantized
 * weights + recurrent state + attended K/V) over the measured read bandwidth of this machine's
 * memory (a multi-threaded streaming read of a buffer larger than the caches). Random token ids,
 * a warm-up pass, then the median of the repetitions. */
#include "cli/cli.h"

#include "model/qwen4exp.h"
#include "turbospark.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Read bandwidth in bytes/s: sum a 1 GiB buffer with all threads, best of 3. */
static double measure_read_bandwidth(void) {
    const size_t n = (size_t)1 << 27; /* 2^27 doubles = 1 GiB */
    double *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (double)(i & 1023);
    double best = 0, sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now(), s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++) s += buf[i];
        double dt = now() - t0;
        sink += s;
        if (n * sizeof *buf / dt > best) best = n * sizeof *buf / dt;
    }
    free(buf);
    return sink < 0 ? 0 : best; /* sink keeps the loop from being optimised away */
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: turbospark bench -m FILE.gguf [--backend cpu] [-p 512] [-n 64] [-r 3] [-t THREADS]\n"
               "  -p N   prompt tokens (prefill, one micro-batch of N)       -n N   generated tokens (decode)\n"
               "  -r N   repetitions (the median is reported)                -t N   CPU threads (OpenMP)\n"
               "Prints prompt and generation tokens/s and the fraction of the memory-bandwidth floor of decode.\n");
}

int ts_cmd_bench(int argc, char **argv) {
    const char *path = NULL, *backend = "cpu";
    long p = 512, n = 64, reps = 3, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); return 0; }
        else if (!strcmp(a, "-m") && v) path = argv[++i];
        else if (!strcmp(a, "--backend") && v) backend = argv[++i];
        else if (!strcmp(a, "-p") && v) p = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-n") && v) n = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-r") && v) reps = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-t") && v) threads = strtol(argv[++i], &end, 10);
        else { fprintf(stderr, "turbospark bench: unknown or incomplete option '%s'\n", a); bench_usage(stderr); return 2; }
        if (end && (*end || p < 1 || n < 1 || reps < 1 || threads < 0 || p > 1 << 20 || n > 1 << 20 || reps > 1000)) {
            fprintf(stderr, "turbospark bench: '%s %s' is not a valid count\n", a, argv[i]);
            return 2;
        }
    }
    if (!path) { fprintf(stderr, "turbospark bench: no model given (-m FILE.gguf)\n"); bench_usage(stderr); return 2; }
    if (strcmp(backend, "cpu") != 0) { fprintf(stderr, "turbospark bench: backend '%s' is not available in this build\n", backend); return 2; }
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads((int)threads);
    int nt = omp_get_max_threads();
#else
    int nt = 1;
#endif
    char err[1024];
    ts_model *m;
    if (ts_model_load(path, &m, err, sizeof err)) { fprintf(stderr, "turbospark bench: %s\n", err); return 1; }
    ts_session *s;
    ts_session_params sp = {.n_ctx = p + n, .ubatch = p};
    if (ts_session_new(m, &sp, &s, err, sizeof err)) {
        fprintf(stderr, "turbospark bench: %s\n", err);
        ts_model_free(m);
        return 1;
    }
    const int64_t V = ts_model_n_vocab(m);
    int32_t *ids = malloc((size_t)(p + n) * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    double *tp = malloc((size_t)(reps + 1) * sizeof *tp), *tg = malloc((size_t)(reps + 1) * sizeof *tg);
    int rc = !ids || !logits || !tp || !tg;
    uint64_t rng = 12345;
    for (long i = 0; !rc && i < p + n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
    for (long r = 0; !rc && r <= reps; r++) { /* r = 0 is the warm-up */
        ts_session_reset(s);
        double t0 = now();
        rc = ts_session_eval(s, ids, p, logits, false, err, sizeof err);
        double t1 = now();
        for (long i = 0; !rc && i < n; i++) rc = ts_session_eval(s, ids + p + i, 1, logits, false, err, sizeof err);
        double t2 = now();
        tp[r] = p / (t1 - t0), tg[r] = n / (t2 - t1);
    }
    if (rc) {
        fprintf(stderr, "turbospark bench: %s\n", *err ? err : "out of memory");
    } else {
        qsort(tp + 1, (size_t)reps, sizeof *tp, cmp_double);
        qsort(tg + 1, (size_t)reps, sizeof *tg, cmp_double);
        double bw = measure_read_bandwidth();
        ts_decode_cost c = ts_model_decode_cost(m, p + n / 2, 4);
        double bytes = (double)(c.weight_bytes + c.state_bytes + c.kv_bytes);
        double floor_tps = bw / bytes;
        double gen = tg[1 + reps / 2];
        printf("| model | backend | threads | test | t/s | floor t/s | of floor |\n|---|---|---|---|---|---|---|\n");
        printf("| %s | %s | %d | pp%ld | %.1f | | |\n", path, backend, nt, p, tp[1 + reps / 2]);
        printf("| %s | %s | %d | tg%ld | %.2f | %.2f | %.0f%% |\n", path, backend, nt, n, gen, floor_tps, 100 * gen / floor_tps);
        printf("\ndecode reads %.1f MiB/token (weights %.1f, recurrent state %.1f, K/V at ctx %ld %.1f); "
               "measured read bandwidth %.1f GB/s; median of %ld runs\n",
               bytes / 1048576, c.weight_bytes / 1048576.0, c.state_bytes / 1048576.0, p + n / 2, c.kv_bytes / 1048576.0,
               bw / 1e9, reps);
    }
    free(ids), free(logits), free(tp), free(tg);
    ts_session_free(s);
    ts_model_free(m);
    return rc ? 1 : 0;
}
