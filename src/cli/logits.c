/* turbospark logits | generate: run a token prompt through the model (the test and user contract
 * of issue 3): logits of every position as float32 .npy, or a greedy continuation as int32 .npy. */
#include "cli/cli.h"

#include "cli/npy.h"
#include "turbospark.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct run_opts {
    const char *model, *tokens, *out, *backend;
    ts_backend be;
    int64_t ubatch, n_predict, n_ctx;
    bool random_weights; /* CUDA: random valid weight blocks filled on the GPU, not the file's */
} run_opts;

static void usage(FILE *f, bool generate) {
    if (generate)
        fprintf(
            f,
            "usage: turbospark generate -m FILE.gguf --tokens-npy IN.npy -n N -o OUT.npy [--backend "
            "cpu|cuda]\n"
            "                           [--ubatch N] [-c CTX]\n"
            "Greedy decoding of N tokens after the prompt (int32 1-D .npy); writes the N ids as int32 .npy.\n"
            "Ties in the argmax go to the lowest token id.\n");
    else
        fprintf(f, "usage: turbospark logits -m FILE.gguf --tokens-npy IN.npy -o OUT.npy [--backend "
                   "cpu|cuda] [--ubatch N]\n"
                   "                         [-c CTX]\n"
                   "Runs the prompt (int32 1-D .npy) in chunks of --ubatch tokens (default 512) and writes "
                   "the float32\n"
                   "logits of every position, shape [T, vocab].\n");
    fprintf(
        f, TS_CLI_BACKEND_HELP
        "  -c CTX           context size (default: the prompt plus the tokens to generate)\n"
        "  --random-weights CUDA: every weight filled with random valid blocks on the GPU instead of the\n"
        "                   file's (synthetic files: synth --sparse), as bench and serve fill them\n");
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

static int parse(int argc, char **argv, bool generate, run_opts *o) {
    *o = (run_opts){.backend = "cpu", .ubatch = 512, .n_predict = -1, .n_ctx = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, generate);
            exit(0);
        } else if (!strcmp(a, "-m") && v)
            o->model = argv[++i];
        else if (!strcmp(a, "--tokens-npy") && v)
            o->tokens = argv[++i];
        else if (!strcmp(a, "-o") && v)
            o->out = argv[++i];
        else if (!strcmp(a, "--backend") && v)
            o->backend = argv[++i];
        else if ((!strcmp(a, "--ubatch") || !strcmp(a, "-ub")) && v) {
            if (parse_i64(argv[++i], 1, 1 << 20, &o->ubatch)) {
                fprintf(stderr, "--ubatch must be 1 to 1048576\n");
                return -1;
            }
        } else if (!strcmp(a, "-c") && v) {
            if (parse_i64(argv[++i], 1, INT32_MAX, &o->n_ctx)) {
                fprintf(stderr, "-c must be a positive number\n");
                return -1;
            }
        } else if (!strcmp(a, "--random-weights")) {
            o->random_weights = true;
        } else if (generate && !strcmp(a, "-n") && v) {
            if (parse_i64(argv[++i], 0, 1 << 24, &o->n_predict)) {
                fprintf(stderr, "-n must be 0 to 16777216\n");
                return -1;
            }
        } else {
            fprintf(stderr, "unknown or incomplete option '%s'\n", a);
            return -1;
        }
    }
    if (!o->model || !o->tokens || !o->out || (generate && o->n_predict < 0)) {
        fprintf(stderr, "missing %s\n",
                !o->model    ? "-m FILE.gguf"
                : !o->tokens ? "--tokens-npy IN.npy"
                : !o->out    ? "-o OUT.npy"
                             : "-n N");
        return -1;
    }
    if (ts_cli_backend(o->backend, &o->be)) return -1;
    if (o->random_weights && o->be != TS_BACKEND_CUDA) {
        fprintf(stderr, "--random-weights needs --backend cuda (the weights are filled on the GPU)\n");
        return -1;
    }
    return 0;
}

/* The model, one session and the prompt. */
typedef struct runner {
    ts_model *m;
    ts_session *s;
    int32_t *ids;
    int64_t T;
    int64_t ub; /* micro-batch */
} runner;

static void runner_free(runner *r) {
    ts_session_free(r->s);
    ts_model_free(r->m);
    free(r->ids);
}

static int runner_init(runner *r, const run_opts *o, int64_t extra, const char *cmd) {
    char err[1024];
    int n_dims;
    int64_t shape[TS_NPY_MAX_DIMS];
    memset(r, 0, sizeof *r);
    if (ts_npy_read(o->tokens, 'i', (void **)&r->ids, &n_dims, shape, err, sizeof err)) goto fail;
    if (n_dims != 1 || shape[0] < 1) {
        snprintf(err, sizeof err, "%s must be a non-empty 1-D array of token ids", o->tokens);
        goto fail;
    }
    r->T = shape[0];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (ts_model_load(o->model, &r->m, err, sizeof err)) goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t n_ctx = o->n_ctx ? o->n_ctx : r->T + extra;
    if (r->T + extra > n_ctx) {
        snprintf(err, sizeof err,
                 "the prompt (%" PRId64 " tokens) and %" PRId64
                 " generated tokens do not fit a context of %" PRId64,
                 r->T, extra, n_ctx);
        goto fail;
    }
    r->ub = o->ubatch < r->T ? o->ubatch : r->T;
    if (o->random_weights) { /* the CUDA backend set up here, for this one session, with random weights */
        ts_cuda_params cp = {.plan_ctx = n_ctx, .plan_seqs = 1, .max_rows = r->ub, .random_weights = true};
        if (ts_model_cuda_init(r->m, &cp, err, sizeof err)) goto fail;
    }
    ts_session_params sp = {.n_ctx = n_ctx, .ubatch = r->ub, .backend = o->be};
    if (ts_session_new(r->m, &sp, &r->s, err, sizeof err)) goto fail;
    fprintf(stderr,
            "%s: loaded %s in %.2f s; session state and workspaces %.2f MiB for %" PRId64
            " tokens (micro-batch %" PRId64 ")\n",
            cmd, o->model, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9,
            ts_session_state_bytes(r->s) / 1048576.0, n_ctx, r->ub);
    return 0;
fail:
    fprintf(stderr, "turbospark %s: %s\n", cmd, err);
    runner_free(r);
    return -1;
}

int ts_cmd_logits(int argc, char **argv) {
    run_opts o;
    if (parse(argc, argv, false, &o)) {
        usage(stderr, false);
        return 2;
    }
    runner r;
    if (runner_init(&r, &o, 0, "logits")) return 1;
    const int64_t V = ts_model_n_vocab(r.m);
    float *logits = malloc((size_t)(r.ub * V) * sizeof(float));
    FILE *f = fopen(o.out, "wb");
    char err[1024] = "";
    int rc =
        !logits || !f ? (snprintf(err, sizeof err, "cannot create %s or allocate the logits", o.out), -1) : 0;
    int64_t shape[2] = {r.T, V};
    if (!rc) rc = ts_npy_write_header(f, "<f4", 2, shape, err, sizeof err);
    for (int64_t t0 = 0; !rc && t0 < r.T; t0 += r.ub) {
        int64_t n = r.T - t0 < r.ub ? r.T - t0 : r.ub;
        rc = ts_session_eval(r.s, r.ids + t0, n, logits, true, err, sizeof err);
        if (!rc && fwrite(logits, sizeof(float), (size_t)(n * V), f) != (size_t)(n * V))
            rc = -1, snprintf(err, sizeof err, "cannot write %s", o.out);
    }
    if (f && fclose(f) && !rc) rc = -1, snprintf(err, sizeof err, "cannot write %s", o.out);
    if (rc) {
        fprintf(stderr, "turbospark logits: %s\n", err);
        remove(o.out);
    }
    free(logits);
    runner_free(&r);
    return rc ? 1 : 0;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i; /* strict: the lowest id wins ties */
    return (int32_t)best;
}

int ts_cmd_generate(int argc, char **argv) {
    run_opts o;
    if (parse(argc, argv, true, &o)) {
        usage(stderr, true);
        return 2;
    }
    runner r;
    if (runner_init(&r, &o, o.n_predict, "generate")) return 1;
    const int64_t V = ts_model_n_vocab(r.m);
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t *out = malloc((size_t)(o.n_predict + 1) * sizeof(int32_t));
    char err[1024] = "";
    int rc = !logits || !out ? (snprintf(err, sizeof err, "out of memory"), -1) : 0;
    if (!rc) rc = ts_session_eval(r.s, r.ids, r.T, logits, false, err, sizeof err);
    for (int64_t i = 0; !rc && i < o.n_predict; i++) {
        out[i] = argmax(logits, V);
        if (i + 1 < o.n_predict) rc = ts_session_eval(r.s, &out[i], 1, logits, false, err, sizeof err);
    }
    if (!rc) {
        FILE *f = fopen(o.out, "wb");
        int64_t shape[1] = {o.n_predict};
        rc = !f ? (snprintf(err, sizeof err, "cannot create %s", o.out), -1)
                : ts_npy_write_header(f, "<i4", 1, shape, err, sizeof err);
        if (!rc && fwrite(out, sizeof(int32_t), (size_t)o.n_predict, f) != (size_t)o.n_predict)
            rc = -1, snprintf(err, sizeof err, "cannot write %s", o.out);
        if (f && fclose(f) && !rc) rc = -1, snprintf(err, sizeof err, "cannot write %s", o.out);
    }
    if (rc) fprintf(stderr, "turbospark generate: %s\n", err);
    free(logits);
    free(out);
    runner_free(&r);
    return rc ? 1 : 0;
}
