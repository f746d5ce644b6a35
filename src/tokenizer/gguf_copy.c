/* The tokenizer of one GGUF file written into another (turbospark synth --tokenizer-from): see
 * ts_tokenizer_copy_gguf in tokenizer.h. */
#include "tokenizer/internal.h"

#include "common/error.h"
#include "gguf/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The per-token arrays: the value of src's key padded to n_vocab entries. */
static int put_padded(ts_gguf_writer *w, const char *key, const ts_gguf_value *v, uint64_t n,
                      uint32_t n_vocab, char *err, size_t errlen) {
    int rc = 0;
    if (!strcmp(key, "tokenizer.ggml.tokens")) { /* "[PAD<id>]", as llama.cpp's converter names them */
        ts_gguf_value *items = malloc((size_t)n_vocab * sizeof *items);
        char *arena = malloc((size_t)(n_vocab - n) * 16 + 1);
        if (!items || !arena) rc = ts_errf(err, errlen, "out of memory padding %u tokens", n_vocab);
        for (uint64_t i = 0, off = 0; !rc && i < n_vocab; i++) {
            if (i < n) {
                items[i] = v->arr.items[i];
                continue;
            }
            int len = snprintf(arena + off, 16, "[PAD%" PRIu64 "]", i);
            items[i] = (ts_gguf_value){.type = TS_GGUF_STRING, .str = {arena + off, (uint64_t)len}};
            off += (uint64_t)len;
        }
        ts_gguf_value out = {.type = TS_GGUF_ARRAY,
                             .arr = {.elem_type = TS_GGUF_STRING, .count = n_vocab, .items = items}};
        if (!rc && ts_gguf_writer_set_value(w, key, &out))
            rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        free(items), free(arena);
        return rc;
    }
    if (!strcmp(key, "tokenizer.ggml.token_type")) { /* i32 whatever the source's integer type */
        int32_t *t = malloc((size_t)n_vocab * sizeof *t);
        if (!t) return ts_errf(err, errlen, "out of memory padding %u token types", n_vocab);
        for (uint64_t i = 0; i < n_vocab; i++)
            t[i] = i < n ? (int32_t)ts_gguf_arr_i64(v, i) : TS_TOKEN_UNUSED;
        if (ts_gguf_writer_set_arr(w, key, TS_GGUF_I32, t, n_vocab))
            rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        free(t);
        return rc;
    }
    /* tokenizer.ggml.scores (not read by this runtime): -1000 for padding, as llama.cpp pads them */
    if (v->type != TS_GGUF_ARRAY || v->arr.count != n ||
        (v->arr.elem_type != TS_GGUF_F32 && v->arr.elem_type != TS_GGUF_F64))
        return ts_errf(err, errlen, "%s must be an array of numbers with one entry per token (%" PRIu64 ")",
                       key, n);
    float *s = malloc((size_t)n_vocab * sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory padding %u token scores", n_vocab);
    for (uint64_t i = 0; i < n_vocab; i++) s[i] = i < n ? (float)ts_gguf_arr_f64(v, i) : -1000.0f;
    if (ts_gguf_writer_set_arr(w, key, TS_GGUF_F32, s, n_vocab))
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    free(s);
    return rc;
}

int ts_tokenizer_copy_gguf(ts_gguf_writer *w, const ts_gguf *src, uint32_t n_vocab, uint32_t *n_tokens,
                           char *err, size_t errlen) {
    ts_tokenizer *t;
    if (ts_tokenizer_load(src, &t, err, errlen)) return -1; /* every key checked as a run would read it */
    const uint64_t n = (uint64_t)ts_tokenizer_n_tokens(t);
    ts_tokenizer_free(t);
    *n_tokens = (uint32_t)n;
    if (n > n_vocab)
        return ts_errf(err, errlen,
                       "the tokenizer has %" PRIu64
                       " tokens, more than the model's vocabulary of %u (ids past "
                       "it would have no embedding row)",
                       n, n_vocab);
    if (!ts_gguf_find(src, "tokenizer.ggml.token_type")) { /* all NORMAL there; the padding needs types */
        int32_t *normal = malloc((size_t)n * sizeof *normal);
        if (!normal) return ts_errf(err, errlen, "out of memory");
        for (uint64_t i = 0; i < n; i++) normal[i] = TS_TOKEN_NORMAL;
        ts_gguf_value types = {
            .type = TS_GGUF_ARRAY,
            .arr = {.elem_type = TS_GGUF_I32, .count = n, .data = (const uint8_t *)normal}};
        int rc = put_padded(w, "tokenizer.ggml.token_type", &types, n, n_vocab, err, errlen);
        free(normal);
        if (rc) return rc;
    }
    for (int64_t i = 0; i < ts_gguf_kv_count(src); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(src, i);
        char key[256];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        if (kv->key.len >= sizeof key)
            return ts_errf(err, errlen, "the key %.40s... is longer than %zu bytes", kv->key.ptr,
                           sizeof key - 1);
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (!strcmp(key, "tokenizer.ggml.tokens") || !strcmp(key, "tokenizer.ggml.token_type") ||
            !strcmp(key, "tokenizer.ggml.scores")) {
            if (put_padded(w, key, &kv->value, n, n_vocab, err, errlen)) return -1;
        } else if (ts_gguf_writer_set_value(w, key, &kv->value)) {
            return ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        }
    }
    return 0;
}
