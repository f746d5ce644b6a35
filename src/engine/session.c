/* Sessions of the public API (include/turbospark.h) over the CPU backend: one sequence's state
 * plus the workspaces its forward calls use, both sized at creation. */
#include "turbospark.h"

#include "common/error.h"
#include "cpu/forward.h"
#include "model/qwen4exp.h"

#include <inttypes.h>
#include <stdlib.h>

struct ts_session {
    const ts_model *m;
    ts_session_params p;
    ts_seq_state st;
    ts_cpu_work *w;
};

int32_t ts_model_n_vocab(const ts_model *m) { return (int32_t)m->hp.n_vocab; }
int64_t ts_model_n_ctx_train(const ts_model *m) { return m->hp.n_ctx_train; }

int ts_session_new(ts_model *m, const ts_session_params *p, ts_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_ctx < 1 || p->ubatch < 1)
        return ts_errf(err, errlen, "a session needs n_ctx ≥ 1 and ubatch ≥ 1 (got %" PRId64 " and %" PRId64 ")",
                       p->n_ctx, p->ubatch);
    ts_session *s = calloc(1, sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory creating a session");
    s->m = m;
    s->p = *p;
    if (s->p.ubatch > p->n_ctx) s->p.ubatch = p->n_ctx;
    if (ts_seq_state_init(&s->st, m, p->n_ctx, err, errlen)) {
        free(s);
        return -1;
    }
    if (!(s->w = ts_cpu_work_new(m, s->p.ubatch, p->n_ctx, err, errlen))) {
        ts_seq_state_free(&s->st);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void ts_session_free(ts_session *s) {
    if (!s) return;
    ts_cpu_work_free(s->w);
    ts_seq_state_free(&s->st);
    free(s);
}

void ts_session_reset(ts_session *s) { ts_seq_state_reset(&s->st, s->m); }
int64_t ts_session_pos(const ts_session *s) { return s->st.pos; }
size_t ts_session_state_bytes(const ts_session *s) { return s->st.bytes + ts_cpu_work_bytes(s->w); }

int ts_session_eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all, char *err, size_t errlen) {
    if (n < 1) return ts_errf(err, errlen, "nothing to evaluate: %" PRId64 " tokens", n);
    if (s->st.pos + n > s->p.n_ctx)
        return ts_errf(err, errlen, "%" PRId64 " more tokens do not fit: the session holds %" PRId64 " of %" PRId64
                       " tokens", n, s->st.pos, s->p.n_ctx);
    const int64_t V = s->m->hp.n_vocab;
    for (int64_t t0 = 0; t0 < n; t0 += s->p.ubatch) {
        int64_t k = n - t0 < s->p.ubatch ? n - t0 : s->p.ubatch;
        bool last = t0 + k == n;
        float *out = !logits ? NULL : all ? logits + t0 * V : last ? logits : NULL;
        if (ts_cpu_forward(s->w, &s->st, ids + t0, k, out, all, err, errlen)) return -1;
    }
    return 0;
}

int ts_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits, int n_seq,
                  char *err, size_t errlen) {
    /* check everything first, so that a refused batch leaves every session as it was */
    for (int i = 0; i < n_seq; i++) {
        if (s[i]->m != s[0]->m) return ts_errf(err, errlen, "a batch must hold sessions of one model (session %d differs)", i);
        if (n[i] < 1 || s[i]->st.pos + n[i] > s[i]->p.n_ctx)
            return ts_errf(err, errlen, "batch entry %d: %" PRId64 " tokens do not fit its session (%" PRId64 " of %" PRId64
                           " used)", i, n[i], s[i]->st.pos, s[i]->p.n_ctx);
        for (int64_t t = 0; t < n[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= (int32_t)s[i]->m->hp.n_vocab)
                return ts_errf(err, errlen, "batch entry %d: token id %" PRId32 " is outside the vocabulary", i, ids[i][t]);
    }
    for (int i = 0; i < n_seq; i++) {
        if (ts_session_eval(s[i], ids[i], n[i], logits ? logits[i] : NULL, false, err, errlen)) return -1;
    }
    return 0;
}
