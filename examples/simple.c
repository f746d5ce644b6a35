/* The smallest program on libturbospark: load a model, tokenize a prompt, evaluate it, then
 * sample and print a continuation token by token. Only the public header is used.
 *
 *   cc simple.c $(pkg-config --cflags --libs turbospark) -o simple
 *   ./simple models/demo.gguf "And it came to pass" 32
 */
#include <turbospark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    const char *prompt = argv[2];
    const int n_predict = argc > 3 ? atoi(argv[3]) : 32;
    char err[1024];
    ts_model *m = NULL;
    const ts_tokenizer *tok = NULL; /* the model's own: freed with it */
    ts_session *s = NULL;
    ts_sampler *smp = NULL;
    float *logits = NULL;
    int32_t ids[512];
    int rc = 1;

    if (ts_model_load(argv[1], &m, err, sizeof err) || ts_model_tokenizer(m, &tok, err, sizeof err)) goto out;
    const int64_t n = ts_tokenizer_encode(tok, prompt, strlen(prompt), false, ids, 512, err, sizeof err);
    if (n < 0) goto out;
    if (n < 1 || n > 512) {
        snprintf(err, sizeof err, "the prompt must be 1 to 512 tokens (it is %lld)", (long long)n);
        goto out;
    }
    ts_session_params sp = {.n_ctx = n + n_predict + 1, .ubatch = 512, .backend = TS_BACKEND_CPU};
    ts_sampler_params pp = ts_sampler_default_params();
    pp.seed = 42;
    const int32_t V = ts_model_n_vocab(m);
    if (ts_session_new(m, &sp, &s, err, sizeof err) || ts_sampler_new(&pp, V, &smp, err, sizeof err))
        goto out;
    if (!(logits = malloc((size_t)V * sizeof *logits))) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < n; i++) ts_sampler_accept(smp, ids[i]);
    if (ts_session_eval(s, ids, n, logits, false, err, sizeof err)) goto out; /* the prompt */
    fputs(prompt, stdout);
    int generated = 0;
    for (; generated < n_predict; generated++) {
        int32_t id = ts_sampler_sample(smp, logits);
        if (ts_tokenizer_is_eog(tok, id)) break;
        size_t len;
        const char *bytes = ts_token_bytes(tok, id, false, &len);
        fwrite(bytes, 1, len, stdout);
        fflush(stdout);
        ts_sampler_accept(smp, id);
        if (ts_session_eval(s, &id, 1, logits, false, err, sizeof err)) goto out; /* one decode step */
    }
    printf("\n");
    fprintf(stderr, "turbospark %s (%s): %lld prompt tokens, %d generated\n", ts_version(), ts_build_commit(),
            (long long)n, generated);
    rc = 0;
out:
    if (rc) fprintf(stderr, "simple: %s\n", err);
    free(logits);
    ts_sampler_free(smp);
    ts_session_free(s);
    ts_model_free(m);
    return rc;
}
