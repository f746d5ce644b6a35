/* Facts about a loaded model for the public API (include/turbospark.h). */
#include "turbospark.h"

#include "gguf/gguf.h"
#include "model/qwen4exp.h"
#include "tokenizer/tokenizer.h"

uint64_t ts_model_n_params(const ts_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < ts_gguf_tensor_count(m->gguf); i++)
        n += (uint64_t)ts_gguf_tensor_at(m->gguf, i)->nelements;
    return n;
}

uint64_t ts_model_size_bytes(const ts_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < ts_gguf_tensor_count(m->gguf); i++) n += ts_gguf_tensor_at(m->gguf, i)->nbytes;
    return n;
}

int ts_model_tokenizer(const ts_model *m, ts_tokenizer **out, char *err, size_t errlen) {
    return ts_tokenizer_load(m->gguf, out, err, errlen);
}

int64_t ts_tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len, bool parse_special,
                            int32_t *ids, int64_t cap, char *err, size_t errlen) {
    ts_tokens v = {0};
    if (ts_tokenize(t, text, len, parse_special, &v, err, errlen)) {
        ts_tokens_free(&v);
        return -1;
    }
    for (size_t i = 0; i < v.n && (int64_t)i < cap; i++) ids[i] = v.ids[i];
    const int64_t n = (int64_t)v.n;
    ts_tokens_free(&v);
    return n;
}
