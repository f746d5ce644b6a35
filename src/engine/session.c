/* Sessions of the public API (include/turbospark.h): a backend's sequence (src/engine/backend.h) plus
 * the tables of the micro-batches the session hosts, both sized at creation, so evaluating allocates
 * nothing here. Every call is checked whole before anything runs, then packed into micro-batches of
 * at most max_rows rows (the backend's limit for this session), then the logits are checked. */
#include "turbospark.h"

#include "common/error.h"
#include "engine/backend.h"
#include "model/qwen4exp.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ts_session {
    ts_model *m;
    ts_session_params p;
    const ts_backend_ops *be;
    void *ctx;         /* the model's context of this backend */
    void *seq;         /* the backend's sequence */
    int64_t max_rows;  /* rows of a micro-batch this session hosts */
    ts_micro_batch mb; /* its tables: max_rows entries */
};

int32_t ts_model_n_vocab(const ts_model *m) {
    return (int32_t)m->hp.n_vocab;
}
int64_t ts_model_n_ctx_train(const ts_model *m) {
    return m->hp.n_ctx_train;
}

static int no_backend(ts_backend kind, char *err, size_t errlen) {
    if (kind == TS_BACKEND_CUDA)
        return ts_errf(err, errlen,
                       "this build of turbospark has no CUDA backend (nvcc was not found when it was built)");
    return ts_errf(err, errlen, "unknown backend %d", (int)kind);
}

/* The model's context of backend `kind`, made with plan p on first use. */
static int model_backend(ts_model *m, ts_backend kind, const ts_backend_plan *p, void **ctx, char *err,
                         size_t errlen) {
    const ts_backend_ops *be = ts_backend_ops_of(kind);
    if (!be) return no_backend(kind, err, errlen);
    if (!m->backend_ctx[kind]) {
        if (be->ctx_new(m, p, &m->backend_ctx[kind], err, errlen)) return -1;
        m->backend_ctx_free[kind] = be->ctx_free;
    }
    *ctx = m->backend_ctx[kind];
    return 0;
}

int ts_model_cuda_init(ts_model *m, const ts_cuda_params *p, char *err, size_t errlen) {
    if (!ts_have_cuda()) return no_backend(TS_BACKEND_CUDA, err, errlen);
    if (!p) return ts_errf(err, errlen, "ts_model_cuda_init needs its parameters (got NULL)");
    if (m->backend_ctx[TS_BACKEND_CUDA])
        return ts_errf(err, errlen, "the CUDA backend of this model is already set up");
    void *ctx;
    return model_backend(m, TS_BACKEND_CUDA, p, &ctx, err, errlen);
}

void ts_session_free(ts_session *s) {
    if (!s) return;
    if (s->seq) s->be->seq_free(s->seq);
    free(s->mb.seq), free(s->mb.ids), free(s->mb.n), free(s->mb.logits);
    free(s);
}

int ts_session_new(ts_model *m, const ts_session_params *p, ts_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_ctx < 1 || p->ubatch < 0)
        return ts_errf(err, errlen,
                       "a session needs n_ctx ≥ 1 and ubatch ≥ 1 or 0 for the backend's choice (got %" PRId64
                       " and %" PRId64 ")",
                       p->n_ctx, p->ubatch);
    const ts_backend_ops *be = ts_backend_ops_of(p->backend);
    if (!be) return no_backend(p->backend, err, errlen);
    ts_session *s = calloc(1, sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory creating a session");
    s->m = m, s->p = *p, s->be = be;
    int64_t min_rows = 0; /* ubatch 0: the backend's choice, which CUDA may lower to fit (turbospark.h) */
    if (!p->ubatch) {
        s->p.ubatch = p->backend == TS_BACKEND_CUDA ? TS_UBATCH_AUTO_CUDA : TS_UBATCH_AUTO_CPU;
        min_rows = TS_UBATCH_AUTO_CPU;
    }
    if (s->p.ubatch > p->n_ctx) s->p.ubatch = p->n_ctx;
    if (min_rows > s->p.ubatch) min_rows = s->p.ubatch;
    /* a backend set up by its first session plans for that session alone */
    const ts_backend_plan plan = {
        .plan_ctx = p->n_ctx, .plan_seqs = 1, .max_rows = s->p.ubatch, .min_rows = min_rows};
    if (model_backend(m, p->backend, &plan, &s->ctx, err, errlen) ||
        be->seq_new(s->ctx, p->n_ctx, s->p.ubatch, &s->seq, err, errlen)) {
        ts_session_free(s);
        return -1;
    }
    s->max_rows = be->max_rows(s->ctx, s->seq);
    if (s->p.ubatch > s->max_rows) s->p.ubatch = s->max_rows; /* a backend set up with fewer rows */
    const size_t cap = (size_t)(s->max_rows < INT_MAX ? s->max_rows : INT_MAX);
    s->mb.cap = (int)cap;
    s->mb.seq = malloc(cap * sizeof *s->mb.seq), s->mb.ids = malloc(cap * sizeof *s->mb.ids);
    s->mb.n = malloc(cap * sizeof *s->mb.n), s->mb.logits = malloc(cap * sizeof *s->mb.logits);
    if (!s->mb.seq || !s->mb.ids || !s->mb.n || !s->mb.logits) {
        ts_session_free(s);
        return ts_errf(err, errlen, "out of memory for the micro-batch tables of a session (%zu entries)",
                       cap);
    }
    *out = s;
    return 0;
}

void ts_session_reset(ts_session *s) {
    s->be->seq_reset(s->seq, NULL, 0);
}
int64_t ts_session_pos(const ts_session *s) {
    return s->be->seq_pos(s->seq);
}
ts_backend ts_session_backend(const ts_session *s) {
    return s->p.backend;
}
int64_t ts_session_n_ctx(const ts_session *s) {
    return s->p.n_ctx;
}

int64_t ts_session_ubatch(const ts_session *s) {
    return s->p.ubatch;
}
const ts_model *ts_session_model(const ts_session *s) {
    return s->m;
}
void *ts_session_backend_seq(const ts_session *s) {
    return s->seq;
}

size_t ts_session_state_bytes(const ts_session *s) {
    return s->be->seq_bytes(s->seq) + (size_t)s->mb.cap * (sizeof *s->mb.seq + sizeof *s->mb.ids +
                                                           sizeof *s->mb.n + sizeof *s->mb.logits);
}

int ts_session_copy(ts_session *dst, const ts_session *src, char *err, size_t errlen) {
    if (dst == src) return 0;
    if (dst->m != src->m)
        return ts_errf(err, errlen, "a session's state can only be copied to a session of the same model");
    if (dst->p.backend != src->p.backend)
        return ts_errf(err, errlen, "a session's state can only be copied to a session of the same backend");
    if (!src->be->seq_copy)
        return ts_errf(err, errlen, "copying a session's state is not implemented on the %s backend yet",
                       src->be->name);
    if (ts_session_pos(src) > dst->p.n_ctx)
        return ts_errf(err, errlen,
                       "the source holds %" PRId64 " tokens, more than the destination's context of %" PRId64,
                       ts_session_pos(src), dst->p.n_ctx);
    return src->be->seq_copy(dst->seq, src->seq, err, errlen);
}

/* The cheap guard on every backend's output: rows × V logits must be finite, else the call fails
 * (a NaN would otherwise be sampled as token 0, or written out as a "result"). The scan ORs the
 * exponent bits' all-ones test over a row without an early exit, so it vectorizes (~V/8 cycles a
 * row: 64 rows of 248,320 logits in well under a millisecond); only a bad row is searched again for
 * the sentence. */
static int check_logits(const float *x, int64_t rows, int64_t V, int64_t pos0, char *err, size_t errlen) {
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *b = (const uint32_t *)(x + r * V);
        uint32_t bad = 0;
        for (int64_t v = 0; v < V; v++) bad |= (b[v] & 0x7f800000u) == 0x7f800000u;
        if (!bad) continue;
        for (int64_t v = 0; v < V; v++)
            if (!isfinite(x[r * V + v]))
                return ts_errf(
                    err, errlen,
                    "the logits at position %" PRId64 " hold %s (vocabulary entry %" PRId64
                    "): the model produced NaN or infinity (damaged or edited weights or metadata?); "
                    "TURBOSPARK_CHECK_FINITE=1 on the CPU backend names the layer where it first appears",
                    pos0 + r, isnan(x[r * V + v]) ? "NaN" : "an infinity", v);
    }
    return 0;
}

/* Runs n_seq checked entries through host's micro-batch tables, in order, at most host->max_rows rows
 * a micro-batch (every weight read once per micro-batch). An entry that does not fit the room left
 * continues in the next micro-batch; only its last piece gets logits, or with all (one entry) each
 * piece its rows. The host's workspaces hold every entry's positions when it has the largest
 * context of the batch (the CPU backend's QSA scores); the sessions are the caller's for the call,
 * so borrowing the host's tables is safe. */
static int run_entries(ts_session *host, ts_session *const *s, const int32_t *const *ids, const int64_t *n,
                       float *const *logits, int n_seq, bool all, char *err, size_t errlen) {
    ts_micro_batch *mb = &host->mb;
    const int64_t U = host->max_rows, V = host->m->hp.n_vocab;
    int i = 0;
    int64_t done = 0; /* tokens of entry i already run */
    while (i < n_seq) {
        int k = 0;
        for (int64_t rows = 0; i < n_seq && rows < U; k++) {
            const int64_t take = n[i] - done < U - rows ? n[i] - done : U - rows;
            float *out = logits ? logits[i] : NULL;
            mb->seq[k] = s[i]->seq, mb->ids[k] = ids[i] + done, mb->n[k] = take;
            mb->logits[k] = !out ? NULL : all ? out + done * V : done + take == n[i] ? out : NULL;
            rows += take, done += take;
            if (done == n[i]) i++, done = 0;
        }
        mb->n_seq = k, mb->all_logits = all;
        if (host->be->forward(host->ctx, host->seq, mb, err, errlen)) return -1;
    }
    return 0;
}

static int check_ids(const ts_model *m, const int32_t *ids, int64_t n, int64_t pos0, char *err,
                     size_t errlen) {
    const int64_t V = m->hp.n_vocab;
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= V)
            return ts_errf(err, errlen,
                           "token id %" PRId32 " at position %" PRId64
                           " is outside the vocabulary (0 to %" PRId64 ")",
                           ids[t], pos0 + t, V - 1);
    return 0;
}

int ts_session_eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all, char *err,
                    size_t errlen) {
    if (n < 1) return ts_errf(err, errlen, "nothing to evaluate: %" PRId64 " tokens", n);
    const int64_t V = s->m->hp.n_vocab, pos0 = ts_session_pos(s);
    if (pos0 + n > s->p.n_ctx)
        return ts_errf(err, errlen,
                       "%" PRId64 " more tokens do not fit: the session holds %" PRId64 " of %" PRId64
                       " tokens",
                       n, pos0, s->p.n_ctx);
    if (check_ids(s->m, ids, n, pos0, err, errlen)) return -1;
    for (int64_t t0 = 0; t0 < n; t0 += s->p.ubatch) {
        int64_t k = n - t0 < s->p.ubatch ? n - t0 : s->p.ubatch;
        bool last = t0 + k == n;
        float *out = !logits ? NULL : all ? logits + t0 * V : last ? logits : NULL;
        const int32_t *chunk = ids + t0;
        if (run_entries(s, &s, &chunk, &k, &out, 1, all, err, errlen)) return -1;
        if (out && check_logits(out, all ? k : 1, V, all ? pos0 + t0 : pos0 + n - 1, err, errlen)) return -1;
    }
    return 0;
}

int ts_model_measure_bandwidth(ts_model *m, ts_backend b, double *bytes_per_s, char *err, size_t errlen) {
    *bytes_per_s = 0;
    const ts_backend_ops *be = ts_backend_ops_of(b);
    if (!be) return no_backend(b, err, errlen);
    if (be->needs_plan && !m->backend_ctx[b])
        return ts_errf(err, errlen, "the %s backend of this model is not set up yet (ts_model_cuda_init)",
                       be->name);
    void *ctx = NULL;
    if (model_backend(m, b, NULL, &ctx, err, errlen)) return -1;
    *bytes_per_s = be->bandwidth(ctx);
    return 0;
}

/* A batch's sessions (one model and backend, each once) and their tokens (ids[i][0 … n[i]) fit and are
 * valid): checked before anything runs, so that a refused batch leaves every session as it was. */
static int check_batch(ts_session *const *s, const int32_t *const *ids, const int64_t *n, int n_seq,
                       char *err, size_t errlen) {
    if (n_seq < 0) return ts_errf(err, errlen, "a batch of %d sessions: the count must be ≥ 0", n_seq);
    for (int i = 0; i < n_seq; i++) {
        if (s[i]->m != s[0]->m)
            return ts_errf(err, errlen, "a batch must hold sessions of one model (session %d differs)", i);
        if (s[i]->p.backend != s[0]->p.backend)
            return ts_errf(err, errlen, "a batch must hold sessions of one backend (session %d differs)", i);
        for (int j = 0; j < i; j++)
            if (s[j] == s[i])
                return ts_errf(err, errlen,
                               "a batch holds each session once (entries %d and %d are the same)", j, i);
        if (n[i] < 1 || ts_session_pos(s[i]) + n[i] > s[i]->p.n_ctx)
            return ts_errf(err, errlen,
                           "batch entry %d: %" PRId64 " tokens do not fit its session (%" PRId64
                           " of %" PRId64 " used)",
                           i, n[i], ts_session_pos(s[i]), s[i]->p.n_ctx);
        char e2[300];
        if (check_ids(s[i]->m, ids[i], n[i], ts_session_pos(s[i]), e2, sizeof e2))
            return ts_errf(err, errlen, "batch entry %d: %s", i, e2);
    }
    return 0;
}

int ts_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits,
                  int n_seq, char *err, size_t errlen) {
    if (check_batch(s, ids, n, n_seq, err, errlen)) return -1;
    if (n_seq == 0) return 0;
    ts_session *host = s[0]; /* the largest context, the first such */
    for (int i = 1; i < n_seq; i++)
        if (s[i]->p.n_ctx > host->p.n_ctx) host = s[i];
    int rc = run_entries(host, s, ids, n, logits, n_seq, false, err, errlen);
    for (int i = 0; !rc && logits && i < n_seq; i++) {
        if (!logits[i]) continue;
        char e2[400];
        if (check_logits(logits[i], 1, s[i]->m->hp.n_vocab, ts_session_pos(s[i]) - 1, e2, sizeof e2))
            rc = ts_errf(err, errlen, "batch entry %d: %s", i, e2);
    }
    return rc;
}

int ts_batch_profile_step(ts_session *const *s, const int32_t *ids, int n_seq,
                          const char *names[TS_PROFILE_MAX_KINDS], double ms[TS_PROFILE_MAX_KINDS], char *err,
                          size_t errlen) {
    if (n_seq < 1)
        return ts_errf(err, errlen, "profiling a step of %d sessions: the count must be ≥ 1", n_seq);
    if (!s[0]->be->profile_step)
        return ts_errf(err, errlen, "profiling a step is not available on the %s backend", s[0]->be->name);
    const int32_t **idp = malloc((size_t)n_seq * sizeof *idp);
    int64_t *one = malloc((size_t)n_seq * sizeof *one);
    void **seqs = malloc((size_t)n_seq * sizeof *seqs);
    int rc = !idp || !one || !seqs ? ts_errf(err, errlen, "out of memory") : 0;
    for (int i = 0; !rc && i < n_seq; i++) idp[i] = ids + i, one[i] = 1, seqs[i] = s[i]->seq;
    if (!rc) rc = check_batch(s, idp, one, n_seq, err, errlen);
    if (!rc) rc = s[0]->be->profile_step(s[0]->ctx, seqs, ids, n_seq, names, ms, err, errlen);
    free(idp), free(one), free(seqs);
    return rc;
}

int ts_session_profile_step(ts_session *s, int32_t id, const char *names[TS_PROFILE_MAX_KINDS],
                            double ms[TS_PROFILE_MAX_KINDS], char *err, size_t errlen) {
    return ts_batch_profile_step(&s, &id, 1, names, ms, err, errlen);
}
