/* turbospark perplexity, in llama.cpp's convention: the tokens are cut into non-overlapping
 * windows of CTX tokens; each window is evaluated from an empty state and only the predictions of
 * its second half are scored (tokens CTX/2+1 … CTX−1 of the window, each predicted from all the
 * tokens before it in the window), so every scored token has at least CTX/2 tokens of context.
 * PPL = exp(mean negative log-likelihood over the scored tokens). */
#include "cli/cli.h"

#include "cli/args.h"

#include "cli/npy.h"
#include "turbospark.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PPL_GROUPS (TS_ARGS_FILE | TS_ARGS_CONTEXT | TS_ARGS_UBATCH | TS_ARGS_BATCH)

static void ppl_usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark perplexity -m FILE.gguf (-f TEXT | --tokens-npy TOKENS.npy) [-c 512] [--chunks "
        "N]\n"
        "llama.cpp's convention: windows of -c tokens (default 512), the second half of each window scored.\n"
        "-f: a text file (- for standard input), tokenized with the model's tokenizer (no BOS, special\n"
        "tokens not parsed); --tokens-npy: its token ids as an int32 1-D .npy instead.\n"
        "  --chunks N            score only the first N windows\n");
    ts_cli_args_help(f, PPL_GROUPS);
}

enum { OPT_TOKENS_NPY = TS_ARGS_OWN, OPT_CHUNKS };
static const struct option k_ppl_opts[] = {
    {"tokens-npy", required_argument, NULL, OPT_TOKENS_NPY},
    {"chunks", required_argument, NULL, OPT_CHUNKS},
    {0},
};

typedef struct ppl_opts {
    const char *tokens;
    long chunks;
} ppl_opts;

static int ppl_option(void *ctx, int id, const char *v) {
    ppl_opts *o = ctx;
    if (id == OPT_TOKENS_NPY) return o->tokens = v, 0;
    if (id == OPT_CHUNKS && !ts_cli_long(v, 0, LONG_MAX, &o->chunks)) return 0;
    fprintf(stderr, "turbospark perplexity: '--chunks %s' is not a valid value\n", v);
    return -1;
}

/* −log softmax(logits)[target], computed stably in double. */
static double nll(const float *logits, int64_t V, int32_t target) {
    double mx = logits[0];
    for (int64_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < V; i++) s += exp(logits[i] - mx);
    return log(s) + mx - logits[target];
}

int ts_cmd_perplexity(int argc, char **argv) {
    ts_cli_args a;
    ts_cli_args_init(&a);
    a.n_ctx = 512;
    ppl_opts po = {.tokens = NULL, .chunks = -1};
    ts_cli_spec spec = {
        .cmd = "perplexity", .groups = PPL_GROUPS, .own = k_ppl_opts, .own_cb = ppl_option, .ctx = &po};
    int pr = ts_cli_parse(argc, argv, &spec, &a);
    if (pr) {
        pr < 0 ? ppl_usage(stderr) : ppl_usage(stdout);
        return pr < 0 ? 2 : 0;
    }
    const char *path = a.model, *tokens = po.tokens, *text = a.file;
    const ts_backend be = a.backend;
    long ctx = a.n_ctx;
    const long chunks = po.chunks;
    if (!path || !tokens == !text) {
        fprintf(stderr, "turbospark perplexity: -m and one of -f / --tokens-npy are required\n");
        ppl_usage(stderr);
        return 2;
    }
    char err[1024];
    ts_model *m;
    ts_session *s = NULL;
    if (ts_model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
        return 1;
    }
    int32_t *ids = NULL;
    int n_dims;
    int64_t shape[TS_NPY_MAX_DIMS];
    const ts_tokenizer *tok = NULL;
    if (text ? ts_model_tokenizer(m, &tok, err, sizeof err) ||
                   ts_cli_tokenize_file(tok, text, false, &ids, &shape[0], err, sizeof err)
             : ts_npy_read(tokens, 'i', (void **)&ids, &n_dims, shape, err, sizeof err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
        ts_model_free(m);
        return 1;
    }
    if (text) n_dims = 1;
    int64_t n = n_dims == 1 ? shape[0] : 0, n_chunks = n / ctx;
    if (chunks >= 0 && chunks < n_chunks) n_chunks = chunks;
    if (n_chunks < 1) {
        fprintf(stderr,
                "turbospark perplexity: %" PRId64
                " tokens do not fill one window of %ld (use a smaller -c)\n",
                n, ctx);
        free(ids);
        ts_model_free(m);
        return 1;
    }
    const int64_t V = ts_model_n_vocab(m);
    if (ctx > ts_model_n_ctx_train(m))
        fprintf(stderr,
                "turbospark perplexity: warning: -c %ld is more than the %" PRId64
                " tokens the model was trained on\n",
                ctx, ts_model_n_ctx_train(m));
    long ub = ts_cli_ubatch("perplexity", &a); /* 0: the backend's choice, at most the window */
    if (a.ubatch_given || a.batch_given)
        ts_cli_cap("perplexity", a.ubatch_given ? "-ub" : "-b", &ub, ctx, "the window -c");
    ts_session_params sp = {.n_ctx = ctx, .ubatch = ub, .backend = be};
    float *logits = malloc((size_t)(ctx * V) * sizeof(float));
    int rc = !logits ? (snprintf(err, sizeof err, "out of memory for %ld x %" PRId64 " logits", ctx, V), -1)
                     : ts_session_new(m, &sp, &s, err, sizeof err);
    double total = 0, total2 = 0; /* sums of the NLL and of its square */
    int64_t count = 0;
    const int64_t first = ctx / 2;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t c = 0; !rc && c < n_chunks; c++) {
        const int32_t *w = ids + c * ctx;
        ts_session_reset(s);
        rc = ts_session_eval(s, w, ctx, logits, true, err, sizeof err);
        if (rc) break;
        for (int64_t i = first; i < ctx - 1; i++) {
            const double x = nll(logits + i * V, V, w[i + 1]);
            total += x, total2 += x * x, count++;
        }
        fprintf(stderr, "[%" PRId64 "]%.4f%s", c + 1, exp(total / count), c + 1 == n_chunks ? "\n" : " ");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
    } else {
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("perplexity: %.6f over %" PRId64 " scored tokens (%" PRId64
               " windows of %ld; mean NLL %.6f); %.1f tokens/s\n",
               exp(total / count), count, n_chunks, ctx, total / count, n_chunks * ctx / secs);
        /* llama.cpp's estimate: the standard error of the mean NLL, carried through exp */
        const double mean = total / count, var = total2 / count - mean * mean, ppl = exp(mean);
        if (count > 1 && var > 0)
            printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * sqrt(var / (count - 1)));
        else
            printf("Final estimate: PPL = %.4f +/- nan\n", ppl);
    }
    free(logits);
    free(ids);
    ts_session_free(s);
    ts_model_free(m);
    return rc ? 1 : 0;
}
