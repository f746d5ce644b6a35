/* Synthetic qwen4exp GGUF files (turbospark synth, loader tests, benchmarks at real shapes). */
#ifndef TS_MODEL_SYNTH_H
#define TS_MODEL_SYNTH_H

#include "model/qwen4exp.h"

typedef struct ts_synth_opts {
    uint32_t type; /* ggml type of the matrices; narrow rows fall back (MODEL.md §8); vectors are F32 */
    uint64_t seed;
    bool sparse;      /* leave tensor data unwritten: a sparse file of the full size */
    bool tied_output; /* omit output.weight (the model then reuses token_embd) */
    ts_layout layout;
    const ts_gguf *tokenizer; /* NULL, or a file whose tokenizer.* keys the output carries, padded to
                                 n_vocab (ts_tokenizer_copy_gguf) */
    /* Optional hook for tests: may rename, reshape or retype a tensor, or drop it (return 0). */
    int (*edit)(void *ctx, ts_tensor_spec *spec, uint32_t *type);
    void *edit_ctx;
    /* Optional hook for tests: writes more metadata keys (after the model's and the tokenizer's);
     * 0, or −1 with err. */
    int (*meta)(void *ctx, ts_gguf_writer *w, char *err, size_t errlen);
    void *meta_ctx;
} ts_synth_opts;

int ts_synth_write(const ts_hparams *hp, const ts_synth_opts *o, const char *path, char *err, size_t errlen);

/* The type a matrix with rows of ne0 elements gets when `type` needs longer blocks. */
uint32_t ts_synth_fallback_type(uint32_t type, int64_t ne0);

#endif
