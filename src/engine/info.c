/* Facts about a loaded model for the public API (include/turbospark.h). */
#include "turbospark.h"

#include "common/error.h"
#include "engine/backend.h"
#include "gguf/gguf.h"
#include "model/qwen4exp.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

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

int ts_model_tokenizer(const ts_model *m, const ts_tokenizer **out, char *err, size_t errlen) {
    *out = m->tokenizer;
    return m->tokenizer ? 0 : ts_errf(err, errlen, "%s", m->tokenizer_err);
}

int ts_tokenizer_load_gguf(const char *path, ts_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    ts_gguf *g;
    if (ts_gguf_open(path, &g, err, errlen)) return -1;
    int rc = ts_tokenizer_load(g, out, err, errlen); /* copies what it needs */
    ts_gguf_close(g);
    return rc;
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

void ts_model_sampling(const ts_model *m, ts_sampler_params *p, const bool given[TS_SAMPLING_N_KEYS]) {
    const ts_sampling_defaults *d = &m->sampling;
    bool take[TS_SAMPLING_N_KEYS];
    for (int i = 0; i < TS_SAMPLING_N_KEYS; i++) take[i] = d->has[i] && !(given && given[i]);
    if (take[TS_SAMPLING_TEMP]) p->temperature = d->temperature;
    if (take[TS_SAMPLING_TOP_K]) p->top_k = d->top_k;
    if (take[TS_SAMPLING_TOP_P]) p->top_p = d->top_p;
    if (take[TS_SAMPLING_MIN_P]) p->min_p = d->min_p;
}

bool ts_model_backend_ready(const ts_model *m, ts_backend b) {
    return ts_backend_ops_of(b) && m->backend_ctx[b];
}

int ts_model_backend_info(const ts_model *m, ts_backend b, ts_backend_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const ts_backend_ops *be = ts_backend_ops_of(b);
    if (!be) return ts_errf(err, errlen, "this build of turbospark has no backend %d", (int)b);
    if (!m->backend_ctx[b])
        return ts_errf(err, errlen, "the %s backend of this model is not set up yet", be->name);
    out->backend = b;
    be->info(m->backend_ctx[b], out);
    return 0;
}
