/* turbospark perplexity, in llama.cpp's convention: the tokens are cut into non-overlapping
 * windows of CTX tokens; each window is evaluated from an empty state and only the predictions of
 * its second half are scored (tokens CTX/2+1 … CTX−1 of the window, each predicted from all the
 * tokens before it in the window), so every scored token has at least CTX/2 tokens of context.
 * PPL = exp(mean negative log-likelihood over the scored tokens). */
#include "cli/cli.h"

#include "common/npy.h"
#include "turbospark.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void ppl_usage(FILE *f) {
    fprintf(f, "usage: turbospark perplexity -m FILE.gguf (-f TEXT | --tokens-npy TOKENS.npy) [-c 512] [--chunks N] [-ub N]\n"
               "llama.cpp's convention: windows of -c tokens, the second half of each window scored.\n"
               "-f: a text file, tokenized with the model's tokenizer (no BOS, special tokens not parsed);\n"
               "--tokens-npy: its token ids as an int32 1-D .npy instead.\n"
               TS_CLI_BACKEND_HELP);
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
    const char *path = NULL, *tokens = NULL, *text = NULL;
    ts_backend be = TS_BACKEND_CPU;
    long ctx = 512, chunks = -1, ub = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { ppl_usage(stdout); return 0; }
        else if (!strcmp(a, "-m") && v) path = argv[++i];
        else if (!strcmp(a, "--tokens-npy") && v) tokens = argv[++i];
        else if (!strcmp(a, "-f") && v) text = argv[++i];
        else if (!strcmp(a, "-c") && v) ctx = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--chunks") && v) chunks = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "--backend") && v) { if (ts_cli_backend(argv[++i], &be)) return 2; }
        else if ((!strcmp(a, "-ub") || !strcmp(a, "--ubatch")) && v) ub = strtol(argv[++i], &end, 10);
        else { fprintf(stderr, "turbospark perplexity: unknown or incomplete option '%s'\n", a); ppl_usage(stderr); return 2; }
        if (end && (*end || ctx < 4 || ub < 1 || ctx > (1 << 24))) {
            fprintf(stderr, "turbospark perplexity: '%s %s' is not valid (-c needs at least 4 tokens)\n", a, argv[i]);
            return 2;
        }
    }
    if (!path || !tokens == !text) { fprintf(stderr, "turbospark perplexity: -m and one of -f / --tokens-npy are required\n"); ppl_usage(stderr); return 2; }
    char err[1024];
    int32_t *ids = NULL;
    int n_dims;
    int64_t shape[TS_NPY_MAX_DIMS];
    if (text ? ts_cli_tokenize_file(path, text, false, &ids, &shape[0], err, sizeof err)
             : ts_npy_read(tokens, 'i', (void **)&ids, &n_dims, shape, err, sizeof err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
        return 1;
    }
    if (text) n_dims = 1;
    int64_t n = n_dims == 1 ? shape[0] : 0, n_chunks = n / ctx;
    if (chunks >= 0 && chunks < n_chunks) n_chunks = chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "turbospark perplexity: %" PRId64 " tokens do not fill one window of %ld (use a smaller -c)\n", n, ctx);
        free(ids);
        return 1;
    }
    ts_model *m;
    ts_session *s = NULL;
    if (ts_model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
        free(ids);
        return 1;
    }
    const int64_t V = ts_model_n_vocab(m);
    ts_session_params sp = {.n_ctx = ctx, .ubatch = ub < ctx ? ub : ctx, .backend = be};
    float *logits = malloc((size_t)(ctx * V) * sizeof(float));
    int rc = !logits ? (snprintf(err, sizeof err, "out of memory for %ld x %" PRId64 " logits", ctx, V), -1)
                     : ts_session_new(m, &sp, &s, err, sizeof err);
    double total = 0;
    int64_t count = 0;
    const int64_t first = ctx / 2;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t c = 0; !rc && c < n_chunks; c++) {
        const int32_t *w = ids + c * ctx;
        ts_session_reset(s);
        rc = ts_session_eval(s, w, ctx, logits, true, err, sizeof err);
        if (rc) break;
        for (int64_t i = first; i < ctx - 1; i++) total += nll(logits + i * V, V, w[i + 1]), count++;
        fprintf(stderr, "[%" PRId64 "]%.4f%s", c + 1, exp(total / count), c + 1 == n_chunks ? "\n" : " ");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
        fprintf(stderr, "turbospark perplexity: %s\n", err);
    } else {
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("perplexity: %.6f over %" PRId64 " scored tokens (%" PRId64 " windows of %ld; mean NLL %.6f); %.1f tokens/s\n",
               exp(total / count), count, n_chunks, ctx, total / count, n_chunks * ctx / secs);
    }
    free(logits);
    free(ids);
    ts_session_free(s);
    ts_model_free(m);
    return rc ? 1 : 0;
}
