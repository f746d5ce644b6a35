/* turbospark bench: prompt and generation throughput against the memory-bandwidth floor, in the
 * manner of llama-bench.
 *
 *   pp N      one sequence evaluates N prompt tokens (micro-batches of -ub, each size of the list): tokens/s.
 *   tg N @ b  b sequences, each already holding -d tokens (each depth of the list), decode N tokens together (one
 *             batched step a token): b·N / time. The step asks for the first sequence's logits, or with
 *             --all-logits every sequence's, as a server's step does ("tg N @ b … +logits"); on CUDA a step
 *             that asks for every row's logits (batch 1, or --all-logits) runs as one captured graph.
 *
 * Floor = bytes one decode step must read (ts_model_decode_cost_batch: dense weights once, the
 * expected union of the experts the batch routes to, per-sequence rows, recurrent state and the
 * attended K/V at the mean context, 2 bytes a value on CUDA and 4 on the CPU) over the measured read
 * bandwidth (GPU: a streaming-read kernel; CPU: a multi-threaded sum over 1 GiB); times b. Random
 * token ids, a warm-up run, then the median of -r repetitions. On CUDA a per-block GPU time breakdown of one batch-1 decode step follows. */
#include "cli/cli.h"

#include "cli/args.h"

#include "turbospark.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
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
static void bench_usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark bench -m FILE.gguf [--backend cpu|cuda] [-p 512,8192] [-n 128] [-b 1,8,64] [-d "
        "N]\n"
        "                        [-r 3] [-ub 512,2048] [-t THREADS] [-o md|json|csv] [--ple auto|gpu|host] "
        "[--random-weights]\n"
        "                        [--profile-batch B] [--gpu-mem GiB] [--all-logits]\n"
        "  -p, --n-prompt LIST   prompt sizes (one sequence; 0 skips prefill)\n"
        "  -n, --n-gen N         tokens decoded per sequence\n"
        "  -b, --batch-size LIST decode batch sizes (sequences decoded together)\n"
        "  -d, --n-depth LIST    tokens each sequence holds before decode is timed (default 128; also\n"
        "                        --ctx); each batch size at each; the -r runs follow each other (the\n"
        "                        context grows). CUDA plans -b's largest count of sequences of the\n"
        "                        longest depth\n"
        "  -r, --repetitions N   timed runs after a warm-up (median and standard deviation reported)\n"
        "  --all-logits          a batched decode step asks for every sequence's logits, as a server's\n"
        "                        step does (default: the first sequence's)\n"
        "  -o, --output FMT      md (default: a llama-bench-like table), json (an array), csv\n"
        "  --ple P               CUDA: where the PLE table lives (default auto: on the GPU when it fits)\n"
        "  --random-weights      CUDA: fill every weight with random valid blocks on the GPU instead of\n"
        "                        reading the file (for synthetic files: turbospark synth --released "
        "--sparse)\n"
        "  --profile-batch B     CUDA, md: the per-block table of one decode step at batch B (default 1;\n"
        "                        B ≤ the largest -b; 0: none); a profiler range for `ncu\n"
        "                        --profile-from-start off` covers that step alone\n"
        "  --gpu-mem GiB         CUDA: run as on a GPU of this much memory (as 80, or 48GB): the rest of\n"
        "                        the device is held unused, so the memory plan and every allocation see\n"
        "                        only this much (what fits a smaller card, measured on a larger one)\n");
    fprintf(
        f,
        "  -ub, --ubatch-size LIST prompt tokens one forward call evaluates (micro-batches; default: 512\n"
        "                        on the CPU, 4096 on CUDA, halved while the GPU cannot hold its workspaces;\n"
        "                        stderr says which): each prompt size is timed at each\n");
    ts_cli_args_help(f, 0);
    fprintf(f,
            "Prints tokens/s (median ± standard deviation of the runs), the memory-bandwidth floor and the\n"
            "fraction of it; with md on CUDA also the GPU time of each block kind in one decode step.\n");
}

static int parse_list(const char *s, long *out, int *n, long lo, long hi) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || *n == MAX_LIST) return -1;
        out[(*n)++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return *n ? 0 : -1;
}

static double median(double *v, int n);

static long list_max(const long *v, int n) {
    long m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

enum { OUT_MD, OUT_JSON, OUT_CSV };
enum {
    OPT_PLE = TS_ARGS_OWN,
    OPT_RANDOM_WEIGHTS,
    OPT_DEPTH,
    OPT_PROFILE_BATCH,
    OPT_GPU_MEM,
    OPT_UB,
    OPT_ALL_LOGITS
};

typedef struct bench_opts {
    const char *ple;
    long pl[MAX_LIST], bl[MAX_LIST], ubl[MAX_LIST], dl[MAX_LIST], n, reps, profile_batch;
    int np, nb, nub, nd, out;
    bool random_weights;
    bool all_logits; /* a decode step asks for every sequence's logits, not the first's alone */
    size_t gpu_mem;  /* bytes; 0: the whole GPU */
} bench_opts;

static const struct option k_bench_opts[] = {
    {"n-prompt", required_argument, NULL, 'p'},
    {"n-gen", required_argument, NULL, 'n'},
    {"batch-size", required_argument, NULL, 'b'},
    {"repetitions", required_argument, NULL, 'r'},
    {"n-depth", required_argument, NULL, 'd'},
    {"ctx", required_argument, NULL, OPT_DEPTH},
    {"output", required_argument, NULL, 'o'},
    {"ple", required_argument, NULL, OPT_PLE},
    {"random-weights", no_argument, NULL, OPT_RANDOM_WEIGHTS},
    {"all-logits", no_argument, NULL, OPT_ALL_LOGITS},
    {"profile-batch", required_argument, NULL, OPT_PROFILE_BATCH},
    {"gpu-mem", required_argument, NULL, OPT_GPU_MEM},
    {"ubatch-size", required_argument, NULL, OPT_UB},
    {"ubatch", required_argument, NULL, OPT_UB},
    {"ub", required_argument, NULL, OPT_UB},
    {0},
};

static int bench_option(void *ctx, int id, const char *v) {
    bench_opts *o = ctx;
    int bad = 0;
    switch (id) {
    case 'p':
        bad = parse_list(v, o->pl, &o->np, 0, 1 << 20);
        break;
    case 'b':
        bad = parse_list(v, o->bl, &o->nb, 1, 4096);
        break;
    case OPT_UB:
        bad = parse_list(v, o->ubl, &o->nub, 1, 1 << 20);
        break;
    case 'n':
        bad = ts_cli_long(v, 1, 1 << 20, &o->n);
        break;
    case 'r':
        bad = ts_cli_long(v, 1, 1000, &o->reps);
        break;
    case 'd':
    case OPT_DEPTH:
        bad = parse_list(v, o->dl, &o->nd, 1, 1 << 24);
        break;
    case OPT_PLE:
        o->ple = v;
        break;
    case OPT_RANDOM_WEIGHTS:
        o->random_weights = true;
        break;
    case OPT_ALL_LOGITS:
        o->all_logits = true;
        break;
    case OPT_PROFILE_BATCH:
        bad = ts_cli_long(v, 0, 4096, &o->profile_batch);
        break;
    case OPT_GPU_MEM:
        if (ts_cli_gpu_mem(v, &o->gpu_mem)) {
            fprintf(
                stderr,
                "turbospark bench: --gpu-mem takes a GPU's memory in GiB, a number above 0 (as 80, 47.5 or "
                "48GB; from 1 MiB to 64 TiB), not '%s'\n",
                v);
            return -1;
        }
        break;
    case 'o':
        if (!strcmp(v, "md"))
            o->out = OUT_MD;
        else if (!strcmp(v, "json"))
            o->out = OUT_JSON;
        else if (!strcmp(v, "csv"))
            o->out = OUT_CSV;
        else
            bad = 1;
        break;
    default:
        return -1;
    }
    if (bad) {
        const char *name = "?";
        for (const struct option *p = k_bench_opts; p->name; p++)
            if (p->val == id) {
                name = p->name;
                break;
            }
        fprintf(stderr, "turbospark bench: '%s' is not a valid value for --%s%s\n", v, name,
                id == 'o' ? " (md, json or csv)" : "");
    }
    return bad ? -1 : 0;
}

/* One result: the runs' tokens/s t[0..n) (the warm-up excluded). */
typedef struct bench_row {
    const char *model, *backend, *device, *test;
    uint64_t size, params;
    int threads;
    long n_prompt, n_gen, n_batch, n_depth;
    double floor_tps; /* 0: none */
} bench_row;

static void print_row(FILE *f, int fmt, bool *first, const bench_row *r, double *t, int n) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += t[i] / n;
    for (int i = 0; i < n; i++) var += (t[i] - mean) * (t[i] - mean);
    const double sd = n > 1 ? sqrt(var / (n - 1)) : 0;
    double samples[1001]; /* the runs in order (median sorts t); -r is at most 1000 */
    memcpy(samples, t, (size_t)n * sizeof *t);
    const double med = median(t, n);
    if (fmt == OUT_MD) {
        char size[32], floor_s[32] = "", of[32] = "";
        if (r->size >= (1ull << 30))
            snprintf(size, sizeof size, "%.2f GiB", r->size / 1073741824.0);
        else
            snprintf(size, sizeof size, "%.2f MiB", r->size / 1048576.0);
        if (r->floor_tps > 0)
            snprintf(floor_s, sizeof floor_s, "%.1f", r->floor_tps),
                snprintf(of, sizeof of, "%.0f%%", 100 * med / r->floor_tps);
        fprintf(f, "| %s | %s | %.2f %s | %s | %s | %d | %s | %.2f ± %.2f | %s | %s |\n", r->model, size,
                r->params >= 1000000000 ? r->params / 1e9 : r->params / 1e6,
                r->params >= 1000000000 ? "B" : "M", r->backend, r->device, r->threads, r->test, med, sd,
                floor_s, of);
    } else if (fmt == OUT_CSV) {
        fprintf(f, "\"%s\",%" PRIu64 ",%" PRIu64 ",%s,\"%s\",%d,%s,%ld,%ld,%ld,%ld,%.3f,%.3f,%.3f,%.3f\n",
                r->model, r->size, r->params, r->backend, r->device, r->threads, r->test, r->n_prompt,
                r->n_gen, r->n_batch, r->n_depth, mean, sd, med, r->floor_tps);
    } else {
        fprintf(f, "%s  {\"model_filename\": ", *first ? "" : ",\n");
        ts_cli_json_str(f, r->model);
        fprintf(f,
                ", \"model_size\": %" PRIu64 ", \"model_n_params\": %" PRIu64
                ", \"backend\": \"%s\", \"device\": ",
                r->size, r->params, r->backend);
        ts_cli_json_str(f, r->device);
        fprintf(f,
                ", \"n_threads\": %d, \"test\": \"%s\", \"n_prompt\": %ld, \"n_gen\": %ld, \"n_batch\": %ld, "
                "\"n_depth\": %ld,"
                " \"avg_ts\": %.3f, \"stddev_ts\": %.3f, \"median_ts\": %.3f, \"floor_ts\": %.3f, "
                "\"samples_ts\": [",
                r->threads, r->test, r->n_prompt, r->n_gen, r->n_batch, r->n_depth, mean, sd, med,
                r->floor_tps);
        for (int i = 0; i < n; i++) fprintf(f, "%s%.3f", i ? ", " : "", samples[i]);
        fprintf(f, "]}");
    }
    *first = false;
    fflush(f);
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
    ts_cli_args a;
    ts_cli_args_init(&a);
    bench_opts o = {.ple = "auto",
                    .pl = {512},
                    .bl = {1},
                    .ubl = {0}, /* the backend's choice (ts_session_params) */
                    .n = 128,
                    .reps = 3,
                    .dl = {128},
                    .nd = 1,
                    .profile_batch = 1,
                    .np = 1,
                    .nb = 1,
                    .nub = 1,
                    .out = OUT_MD};
    ts_cli_spec spec = {.cmd = "bench",
                        .groups = 0,
                        .own = k_bench_opts,
                        .own_short = "p:n:b:r:d:o:",
                        .own_cb = bench_option,
                        .ctx = &o};
    int pr = ts_cli_parse(argc, argv, &spec, &a);
    if (pr) {
        pr < 0 ? bench_usage(stderr) : bench_usage(stdout);
        return pr < 0 ? 2 : 0;
    }
    const char *path = a.model, *backend = a.backend_name, *ple = o.ple;
    long *pl = o.pl, *bl = o.bl;
    const long n = o.n, reps = o.reps, ub = o.ubl[0];
    const int np = o.np, nb = o.nb;
    const bool random_weights = o.random_weights;
    if (!path) {
        fprintf(stderr, "turbospark bench: no model given (-m FILE.gguf)\n");
        bench_usage(stderr);
        return 2;
    }
    const ts_backend be = a.backend;
    ts_ple_placement placement = !strcmp(ple, "auto")   ? TS_PLE_AUTO
                                 : !strcmp(ple, "gpu")  ? TS_PLE_DEVICE
                                 : !strcmp(ple, "host") ? TS_PLE_HOST
                                                        : (ts_ple_placement)-1;
    if ((int)placement < 0) {
        fprintf(stderr, "turbospark bench: --ple is auto, gpu or host (got '%s')\n", ple);
        return 2;
    }
    if (o.gpu_mem && be != TS_BACKEND_CUDA) {
        fprintf(stderr, "turbospark bench: --gpu-mem needs --backend cuda\n");
        return 2;
    }
    if (random_weights && be != TS_BACKEND_CUDA) {
        fprintf(stderr, "turbospark bench: --random-weights needs --backend cuda\n");
        return 2;
    }
#ifdef _OPENMP
    int nt = omp_get_max_threads();
#else
    int nt = 1;
#endif
    const long pmax = list_max(pl, np), bmax = list_max(bl, nb), ubmax = list_max(o.ubl, o.nub),
               dmax = list_max(o.dl, o.nd);
    if (o.profile_batch > bmax) {
        fprintf(stderr,
                "turbospark bench: --profile-batch %ld is more sequences than the largest batch (-b) %ld\n",
                o.profile_batch, bmax);
        return 2;
    }
    const int64_t seq_ctx = (pmax > dmax + (reps + 1) * n ? pmax : dmax + (reps + 1) * n) + 1;
    char err[1024] = "";
    ts_model *m;
    if (ts_model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "turbospark bench: %s\n", err);
        return 1;
    }
    double bw = 0;
    char device_name[128];
    const char *device = "CPU";
    if (be == TS_BACKEND_CUDA) {
        /* -ub as given, or the sessions' automatic choice (ubmax 0): TS_UBATCH_AUTO_CUDA rows, halved
         * down to TS_UBATCH_AUTO_CPU while the plan does not fit; a decode batch needs bmax rows */
        int64_t rows = ubmax ? ubmax : (seq_ctx < TS_UBATCH_AUTO_CUDA ? seq_ctx : TS_UBATCH_AUTO_CUDA);
        int64_t min_rows = ubmax ? 0 : (rows < TS_UBATCH_AUTO_CPU ? rows : TS_UBATCH_AUTO_CPU);
        rows = rows > bmax ? rows : bmax;
        min_rows = min_rows && min_rows < bmax ? bmax : min_rows;
        ts_cuda_params cp = {.ple = placement,
                             .plan_ctx = seq_ctx,
                             .plan_seqs = (int)bmax,
                             .max_rows = rows,
                             .min_rows = min_rows,
                             .progress = true,
                             .random_weights = random_weights,
                             .gpu_mem = o.gpu_mem};
        if (ts_model_cuda_init(m, &cp, err, sizeof err)) {
            fprintf(stderr, "turbospark bench: %s\n", err);
            ts_model_free(m);
            return 1;
        }
        ts_backend_info P;
        if (ts_model_backend_info(m, be, &P, err, sizeof err)) {
            fprintf(stderr, "turbospark bench: %s\n", err);
            ts_model_free(m);
            return 1;
        }
        snprintf(device_name, sizeof device_name, "%s", P.device);
        device = device_name;
        fprintf(stderr,
                "bench: %s: weights %.2f GiB on the GPU, PLE table %.2f GiB %s, state %.1f MiB a sequence; "
                "GPU memory %.2f GiB%s, %.2f free when planned; micro-batches of up to %" PRId64 " rows\n",
                device, P.weight_bytes / 1073741824.0, P.table_bytes / 1073741824.0,
                P.table_on_host ? "in pinned host memory" : "on the GPU", P.seq_state_bytes / 1048576.0,
                P.total_bytes / 1073741824.0, o.gpu_mem ? " (--gpu-mem)" : "", P.free_bytes / 1073741824.0,
                P.max_rows);
    }
    if (ts_model_measure_bandwidth(m, be, &bw, err, sizeof err)) {
        fprintf(stderr, "turbospark bench: %s\n", err);
        ts_model_free(m);
        return 1;
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
    float *logits = malloc((size_t)(o.all_logits ? bmax : 1) * (size_t)V * sizeof *logits);
    float **lp = calloc((size_t)bmax, sizeof *lp);
    if (!ids || !t || !ss || !idp || !cnt || !step || !logits || !lp) {
        fprintf(stderr, "turbospark bench: out of memory\n");
        rc = 1;
    }
    ts_session_params sp = {.n_ctx = seq_ctx, .ubatch = ub, .backend = be};
    for (long i = 0; !rc && i < bmax; i++)
        if (ts_session_new(m, &sp, &ss[i], err, sizeof err)) {
            fprintf(stderr, "turbospark bench: %s\n", err);
            rc = 1;
        }

    bool first = true;
    char test[64];
    bench_row row = {.model = path,
                     .backend = backend,
                     .device = device,
                     .test = test,
                     .size = ts_model_size_bytes(m),
                     .params = ts_model_n_params(m),
                     .threads = nt};
    if (o.out == OUT_MD)
        printf("| model | size | params | backend | device | threads | test | t/s (median ± sd) | floor t/s "
               "| of floor |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
    else if (o.out == OUT_CSV)
        printf("model_filename,model_size,model_n_params,backend,device,n_threads,test,n_prompt,n_gen,n_"
               "batch,n_depth,avg_ts,"
               "stddev_ts,median_ts,floor_ts\n");
    else
        printf("[\n");
    for (int ui = 0; !rc && ui < o.nub; ui++) { /* prefill: session 0 with each micro-batch size */
        if (o.ubl[ui] != sp.ubatch) {
            ts_session_free(ss[0]);
            sp.ubatch = o.ubl[ui];
            if (ts_session_new(m, &sp, &ss[0], err, sizeof err)) {
                ss[0] = NULL;
                fprintf(stderr, "turbospark bench: %s\n", err);
                rc = 1;
                break;
            }
        }
        for (int pi = 0; !rc && pi < np; pi++) {
            const long p = pl[pi];
            if (p == 0) continue;
            random_ids(ids, p, V, &rng);
            for (long r = 0; !rc && r <= reps; r++) { /* r = 0 is the warm-up */
                ts_session_reset(ss[0]);
                double t0 = now();
                rc = ts_session_eval(ss[0], ids, p, logits, false, err, sizeof err);
                t[r] = p / (now() - t0);
            }
            if (o.nub > 1)
                snprintf(test, sizeof test, "pp%ld @ ub%ld", p, o.ubl[ui]);
            else
                snprintf(test, sizeof test, "pp%ld", p);
            row.n_prompt = p, row.n_gen = 0, row.n_batch = 1, row.n_depth = 0, row.floor_tps = 0;
            if (!rc) print_row(stdout, o.out, &first, &row, t + 1, (int)reps);
        }
    }
    /* decode at each depth and batch: prefill the depth's tokens once, then the timed runs in a row */
    for (int di = 0; !rc && di < o.nd; di++)
        for (int bi = 0; !rc && bi < nb; bi++) {
            const long b = bl[bi], ctx = o.dl[di];
            random_ids(ids, ctx, V, &rng);
            for (long i = 0; i < b; i++) {
                ts_session_reset(ss[i]);
                idp[i] = ids, cnt[i] = ctx, lp[i] = NULL;
            }
            rc = ts_batch_eval(ss, idp, cnt, lp, (int)b, err, sizeof err);
            for (long i = 0; i < b; i++)
                idp[i] = step + i, cnt[i] = 1, lp[i] = o.all_logits ? logits + i * V : i == 0 ? logits : NULL;
            for (long r = 0; !rc && r <= reps; r++) {
                double t0 = now();
                for (long k = 0; !rc && k < n; k++) {
                    random_ids(step, b, V, &rng);
                    rc = ts_batch_eval(ss, idp, cnt, lp, (int)b, err, sizeof err);
                }
                t[r] = (double)b * n / (now() - t0);
            }
            if (rc) break;
            ts_decode_cost c =
                ts_model_decode_cost_batch(m, ctx + (reps + 1) * n / 2, be == TS_BACKEND_CUDA ? 2 : 4, b);
            const double bytes = (double)(c.weight_bytes + c.state_bytes + c.kv_bytes),
                         floor_tps = bw / bytes * b;
            snprintf(test, sizeof test, "tg%ld @ b%ld ctx%ld%s", n, b, ctx,
                     o.all_logits && b > 1 ? " +logits" : "");
            row.n_prompt = 0, row.n_gen = n, row.n_batch = b, row.n_depth = ctx, row.floor_tps = floor_tps;
            print_row(stdout, o.out, &first, &row, t + 1, (int)reps);
            fprintf(
                stderr,
                "bench: batch %ld reads %.1f MiB a step (weights %.1f, state %.1f, K/V %.1f); bandwidth %.1f "
                "GB/s\n",
                b, bytes / 1048576, c.weight_bytes / 1048576.0, c.state_bytes / 1048576.0,
                c.kv_bytes / 1048576.0, bw / 1e9);
        }
    if (o.out == OUT_JSON) printf("%s]\n", first ? "" : "\n");
    if (rc) fprintf(stderr, "turbospark bench: %s\n", *err ? err : "failed");
    const int pb = (int)o.profile_batch;
    if (!rc && be == TS_BACKEND_CUDA && o.out == OUT_MD && pb > 0) { /* where the time of one step goes */
        const char *names[TS_PROFILE_MAX_KINDS];
        double ms[TS_PROFILE_MAX_KINDS], total = 0;
        random_ids(step, pb, V, &rng); /* sessions 0 … pb − 1, one more token each */
        const int kinds = ts_batch_profile_step(ss, step, pb, names, ms, err, sizeof err);
        if (kinds < 0) fprintf(stderr, "turbospark bench: the per-block profile: %s\n", err);
        if (kinds > 0) {
            for (int k = 0; k < kinds; k++) total += ms[k];
            printf("\n| block (batch %d, one decode step) | GPU ms | share |\n|---|---|---|\n", pb);
            for (int k = 0; k < kinds; k++)
                printf("| %s | %.3f | %.1f%% |\n", names[k], ms[k], total > 0 ? 100 * ms[k] / total : 0);
            printf("| total (blocks timed one by one) | %.3f | |\n", total);
        }
    }
    for (long i = 0; ss && i < bmax; i++) ts_session_free(ss[i]);
    free(ids), free(t), free(ss), free(idp), free(cnt), free(step), free(logits), free(lp);
    ts_model_free(m);
    return rc ? 1 : 0;
}
