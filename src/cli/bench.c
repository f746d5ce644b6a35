/* turbospark bench: prompt and generation throughput against the memory-bandwidth floor, in the
 * manner of llama-bench.
 *
 *   pp N      one sequence evaluates N prompt tokens (micro-batches of -ub): tokens/s.
 *   tg N @ b  b sequences, each already holding --ctx tokens, decode N tokens together (one
 *             batched step a token; on CUDA one captured graph a step): b·N / time.
 *
 * Floor = bytes one decode step must read (ts_model_decode_cost_batch: dense weights once, the
 * expected union of the experts the batch routes to, per-sequence rows, recurrent state and the
 * attended K/V at the mean context) over the measured read bandwidth (GPU: a streaming-read kernel;
 * CPU: a multi-threaded sum over 1 GiB); times b. Random token ids, a warm-up run, then the median
 * of -r repetitions. On CUDA a per-block GPU time breakdown of one batch-1 decode step follows. */
#include "cli/cli.h"

#include "model/qwen4exp.h"
#include "turbospark.h"
#ifdef TS_HAVE_CUDA
#include "cuda/forward.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_LIST 16

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* CPU read bandwidth in bytes/s: sum a 1 GiB buffer with all threads, best of 3. */
static double cpu_read_bandwidth(void) {
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
    fprintf(f, "usage: turbospark bench -m FILE.gguf [--backend cpu|cuda] [-p 512,8192] [-n 128] [-b 1,8,64] [--ctx N]\n"
               "                        [-r 3] [-ub N] [-t THREADS] [--ple auto|gpu|host] [--random-weights]\n"
               "  -p LIST   prompt sizes (one sequence; 0 skips prefill)     -n N     tokens decoded per sequence\n"
               "  -b LIST   decode batch sizes (sequences decoded together)  --ctx N  tokens each sequence holds\n"
               "            before decode is timed (default 128); the -r runs follow each other (context grows)\n"
               "  -r N      repetitions (the median is reported)             -ub N    prefill micro-batch (default 512)\n"
               "  -t N      CPU threads (OpenMP)\n"
               "  --ple P   CUDA: where the PLE table lives (default auto: on the GPU when it fits)\n"
               "  --random-weights  CUDA: fill every weight with random valid blocks on the GPU instead of reading\n"
               "            the file (for synthetic files: turbospark synth --released --sparse)\n"
               "Prints a llama-bench-like table: tokens/s, the memory-bandwidth floor and the fraction of it; on CUDA\n"
               "also the GPU time of each block kind in one batch-1 decode step.\n");
}

static int parse_list(const char *s, long *out, int *n, long lo, long hi) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || *n == MAX_LIST) return -1;
        out[(*n)++] = v;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return *n ? 0 : -1;
}

static void random_ids(int32_t *ids, int64_t n, int64_t V, uint64_t *rng) {
    for (int64_t i = 0; i < n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((*rng >> 33) % (uint64_t)V);
    }
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int ts_cmd_bench(int argc, char **argv) {
    const char *path = NULL, *backend = "cpu", *ple = "auto";
    long pl[MAX_LIST] = {512}, bl[MAX_LIST] = {1}, n = 128, reps = 3, threads = 0, ctx = 128, ub = 512;
    int np = 1, nb = 1;
    bool random_weights = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        char *end = NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); return 0; }
        else if (!strcmp(a, "--random-weights")) { random_weights = true; continue; }
        else if (!strcmp(a, "-m") && v) path = argv[++i];
        else if (!strcmp(a, "--backend") && v) backend = argv[++i];
        else if (!strcmp(a, "--ple") && v) ple = argv[++i];
        else if (!strcmp(a, "-p") && v) bad = parse_list(argv[++i], pl, &np, 0, 1 << 20);
        else if (!strcmp(a, "-b") && v) bad = parse_list(argv[++i], bl, &nb, 1, 4096);
        else if (!strcmp(a, "-n") && v) n = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--ctx") && v) ctx = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-r") && v) reps = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-ub") && v) ub = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-t") && v) threads = strtol(argv[++i], &end, 10);
        else { fprintf(stderr, "turbospark bench: unknown or incomplete option '%s'\n", a); bench_usage(stderr); return 2; }
        if (bad || (end && (*end || n < 1 || reps < 1 || threads < 0 || ctx < 1 || ub < 1 || n > 1 << 20 || reps > 1000 ||
                            ctx > 1 << 24 || ub > 1 << 16))) {
            fprintf(stderr, "turbospark bench: '%s %s' is not a valid value\n", a, argv[i]);
            return 2;
        }
    }
    if (!path) { fprintf(stderr, "turbospark bench: no model given (-m FILE.gguf)\n"); bench_usage(stderr); return 2; }
    ts_backend be;
    if (ts_cli_backend(backend, &be)) return 2;
    ts_ple_placement placement = !strcmp(ple, "auto") ? TS_PLE_AUTO : !strcmp(ple, "gpu") ? TS_PLE_DEVICE
                                 : !strcmp(ple, "host") ? TS_PLE_HOST : (ts_ple_placement)-1;
    if ((int)placement < 0) { fprintf(stderr, "turbospark bench: --ple is auto, gpu or host (got '%s')\n", ple); return 2; }
    if (random_weights && be != TS_BACKEND_CUDA) { fprintf(stderr, "turbospark bench: --random-weights needs --backend cuda\n"); return 2; }
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads((int)threads);
    int nt = omp_get_max_threads();
#else
    int nt = 1;
#endif
    long pmax = 0, bmax = 0;
    for (int i = 0; i < np; i++) pmax = pl[i] > pmax ? pl[i] : pmax;
    for (int i = 0; i < nb; i++) bmax = bl[i] > bmax ? bl[i] : bmax;
    const int64_t seq_ctx = (pmax > ctx + (reps + 1) * n ? pmax : ctx + (reps + 1) * n) + 1;
    char err[1024];
    ts_model *m;
    if (ts_model_load(path, &m, err, sizeof err)) { fprintf(stderr, "turbospark bench: %s\n", err); return 1; }
    double bw = 0;
    const char *device = "CPU";
    if (be == TS_BACKEND_CUDA) {
        ts_cuda_params cp = {.ple = placement, .plan_ctx = seq_ctx, .plan_seqs = (int)bmax,
                             .max_rows = ub > bmax ? ub : bmax, .progress = true, .random_weights = random_weights};
        if (ts_model_cuda_init(m, &cp, err, sizeof err)) {
            fprintf(stderr, "turbospark bench: %s\n", err);
            ts_model_free(m);
            return 1;
        }
#ifdef TS_HAVE_CUDA
        const ts_cuda_plan *P = ts_cuda_ctx_plan(m->cuda);
        device = ts_cuda_ctx_device_name(m->cuda);
        bw = ts_cuda_measure_bandwidth(m->cuda);
        fprintf(stderr, "bench: %s: weights %.2f GiB on the GPU, PLE table %.2f GiB %s, state %.1f MiB a sequence\n",
                device, P->weights / 1073741824.0, P->table / 1073741824.0, P->table_on_host ? "in pinned host memory" : "on the GPU",
                P->seq_state / 1048576.0);
#endif
    } else {
        bw = cpu_read_bandwidth();
    }
    const int64_t V = ts_model_n_vocab(m);
    uint64_t rng = 12345;
    int rc = 0;
    int32_t *ids = malloc((size_t)(seq_ctx > bmax ? seq_ctx : bmax) * sizeof *ids);
    double *t = malloc((size_t)(reps + 1) * sizeof *t);
    ts_session **ss = calloc((size_t)bmax, sizeof *ss);
    const int32_t **idp = calloc((size_t)bmax, sizeof *idp);
    int64_t *cnt = calloc((size_t)bmax, sizeof *cnt);
    int32_t *step = malloc((size_t)bmax * sizeof *step);
    float *logits = malloc((size_t)V * sizeof *logits);
    float **lp = calloc((size_t)bmax, sizeof *lp);
    if (!ids || !t || !ss || !idp || !cnt || !step || !logits || !lp) { fprintf(stderr, "turbospark bench: out of memory\n"); rc = 1; }
    ts_session_params sp = {.n_ctx = seq_ctx, .ubatch = ub, .backend = be};
    for (long i = 0; !rc && i < bmax; i++)
        if (ts_session_new(m, &sp, &ss[i], err, sizeof err)) { fprintf(stderr, "turbospark bench: %s\n", err); rc = 1; }

    printf("| model | backend | device | threads | test | t/s | floor t/s | of floor |\n|---|---|---|---|---|---|---|---|\n");
    for (int pi = 0; !rc && pi < np; pi++) { /* prefill */
        const long p = pl[pi];
        if (p == 0) continue;
        random_ids(ids, p, V, &rng);
        for (long r = 0; !rc && r <= reps; r++) { /* r = 0 is the warm-up */
            ts_session_reset(ss[0]);
            double t0 = now();
            rc = ts_session_eval(ss[0], ids, p, logits, false, err, sizeof err);
            t[r] = p / (now() - t0);
        }
        if (!rc) printf("| %s | %s | %s | %d | pp%ld | %.1f | | |\n", path, backend, device, nt, p, median(t + 1, (int)reps));
        fflush(stdout);
    }
    for (int bi = 0; !rc && bi < nb; bi++) { /* decode: prefill --ctx tokens once, then the timed runs in a row */
        const long b = bl[bi];
        random_ids(ids, ctx, V, &rng);
        for (long i = 0; i < b; i++) {
            ts_session_reset(ss[i]);
            idp[i] = ids, cnt[i] = ctx, lp[i] = NULL;
        }
        rc = ts_batch_eval(ss, idp, cnt, lp, (int)b, err, sizeof err);
        for (long i = 0; i < b; i++) idp[i] = step + i, cnt[i] = 1, lp[i] = i == 0 ? logits : NULL;
        for (long r = 0; !rc && r <= reps; r++) {
            double t0 = now();
            for (long k = 0; !rc && k < n; k++) {
                random_ids(step, b, V, &rng);
                rc = ts_batch_eval(ss, idp, cnt, lp, (int)b, err, sizeof err);
            }
            t[r] = (double)b * n / (now() - t0);
        }
        if (rc) break;
        ts_decode_cost c = ts_model_decode_cost_batch(m, ctx + (reps + 1) * n / 2, 4, b);
        const double bytes = (double)(c.weight_bytes + c.state_bytes + c.kv_bytes), floor_tps = bw / bytes * b;
        const double tps = median(t + 1, (int)reps);
        printf("| %s | %s | %s | %d | tg%ld @ b%ld ctx%ld | %.1f | %.1f | %.0f%% |\n", path, backend, device, nt, n, b, ctx, tps,
               floor_tps, 100 * tps / floor_tps);
        fprintf(stderr, "bench: batch %ld reads %.1f MiB a step (weights %.1f, state %.1f, K/V %.1f); bandwidth %.1f GB/s\n", b,
                bytes / 1048576, c.weight_bytes / 1048576.0, c.state_bytes / 1048576.0, c.kv_bytes / 1048576.0, bw / 1e9);
        fflush(stdout);
    }
    if (rc) fprintf(stderr, "turbospark bench: %s\n", *err ? err : "failed");
#ifdef TS_HAVE_CUDA
    if (!rc && be == TS_BACKEND_CUDA) { /* where the time of one batch-1 decode step goes */
        double ms[TS_PROF_KINDS], total = 0;
        ts_cuda_seq *q = NULL;
        random_ids(step, 1, V, &rng);
        q = ts_session_cuda_seq(ss[0]); /* session 0's state, one more token */
        if (q && ts_cuda_seq_pos(q) < ts_cuda_seq_n_ctx(q) && !ts_cuda_profile_step(m->cuda, &q, step, 1, ms, err, sizeof err)) {
            for (int k = 0; k < TS_PROF_KINDS; k++) total += ms[k];
            printf("\n| block (batch 1, one decode step) | GPU ms | share |\n|---|---|---|\n");
            for (int k = 0; k < TS_PROF_KINDS; k++)
                printf("| %s | %.3f | %.1f%% |\n", ts_cuda_prof_names[k], ms[k], total > 0 ? 100 * ms[k] / total : 0);
            printf("| total (blocks timed one by one) | %.3f | |\n", total);
        }
    }
#endif
    for (long i = 0; ss && i < bmax; i++) ts_session_free(ss[i]);
    free(ids), free(t), free(ss), free(idp), free(cnt), free(step), free(logits), free(lp);
    ts_model_free(m);
    return rc ? 1 : 0;
}
