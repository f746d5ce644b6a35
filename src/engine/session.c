/* Sessions of the public API (include/turbospark.h): one sequence's state plus the workspaces its
 * forward calls use, both sized at creation, on the CPU backend (src/cpu) or on the CUDA backend
 * (src/cuda, state on the GPU, workspaces shared by the model's CUDA context). A CPU batch
 * (ts_batch_eval) runs in the workspaces of one of its sessions (cpu_batch_eval). */
#include "turbospark.h"

#include "common/error.h"
#include "cpu/forward.h"
#include "model/qwen4exp.h"
#ifdef TS_HAVE_CUDA
#include "cuda/forward.h"
#endif

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ts_session {
    const ts_model *m;
    ts_session_params p;
    ts_seq_state st;  /* CPU backend */
    ts_cpu_work *w;   /* CPU backend */
    void *cuda_seq;   /* CUDA backend: the ts_cuda_seq */
};

int32_t ts_model_n_vocab(const ts_model *m) { return (int32_t)m->hp.n_vocab; }
int64_t ts_model_n_ctx_train(const ts_model *m) { return m->hp.n_ctx_train; }

#ifdef TS_HAVE_CUDA
bool ts_have_cuda(void) { return true; }

static void cuda_ctx_free(void *c) { ts_cuda_ctx_free(c); }

int ts_model_cuda_init(ts_model *m, const ts_cuda_params *p, char *err, size_t errlen) {
    if (m->cuda) return ts_errf(err, errlen, "the CUDA backend of this model is already set up");
    ts_cuda_ctx *c;
    if (ts_cuda_ctx_new(m, p, &c, err, errlen)) return -1;
    m->cuda = c, m->cuda_free = cuda_ctx_free;
    return 0;
}
#else
bool ts_have_cuda(void) { return false; }

int ts_model_cuda_init(ts_model *m, const ts_cuda_params *p, char *err, size_t errlen) {
    (void)m, (void)p;
    return ts_errf(err, errlen, "this build of turbospark has no CUDA backend (nvcc was not found when it was built)");
}
#endif

int ts_session_new(ts_model *m, const ts_session_params *p, ts_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_ctx < 1 || p->ubatch < 1)
        return ts_errf(err, errlen, "a session needs n_ctx ≥ 1 and ubatch ≥ 1 (got %" PRId64 " and %" PRId64 ")",
                       p->n_ctx, p->ubatch);
    if (p->backend != TS_BACKEND_CPU && p->backend != TS_BACKEND_CUDA)
        return ts_errf(err, errlen, "unknown backend %d", (int)p->backend);
    ts_session *s = calloc(1, sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory creating a session");
    s->m = m;
    s->p = *p;
    if (s->p.ubatch > p->n_ctx) s->p.ubatch = p->n_ctx;
    if (p->backend == TS_BACKEND_CUDA) {
#ifdef TS_HAVE_CUDA
        if (!m->cuda) {
            ts_cuda_params cp = {.plan_ctx = p->n_ctx, .plan_seqs = 1, .max_rows = s->p.ubatch, .progress = false};
            if (ts_model_cuda_init(m, &cp, err, errlen)) {
                free(s);
                return -1;
            }
        }
        if (ts_cuda_seq_new(m->cuda, p->n_ctx, (ts_cuda_seq **)&s->cuda_seq, err, errlen)) {
            free(s);
            return -1;
        }
        *out = s;
        return 0;
#else
        free(s);
        return ts_model_cuda_init(m, NULL, err, errlen);
#endif
    }
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
#ifdef TS_HAVE_CUDA
    if (s->cuda_seq) ts_cuda_seq_free(s->cuda_seq);
#endif
    ts_cpu_work_free(s->w);
    if (!s->cuda_seq) ts_seq_state_free(&s->st);
    free(s);
}

void ts_session_reset(ts_session *s) {
#ifdef TS_HAVE_CUDA
    if (s->cuda_seq) {
        ts_cuda_seq_reset(s->cuda_seq, NULL, 0);
        return;
    }
#endif
    ts_seq_state_reset(&s->st, s->m);
}

int64_t ts_session_pos(const ts_session *s) {
#ifdef TS_HAVE_CUDA
    if (s->cuda_seq) return ts_cuda_seq_pos(s->cuda_seq);
#endif
    return s->st.pos;
}

size_t ts_session_state_bytes(const ts_session *s) {
#ifdef TS_HAVE_CUDA
    if (s->cuda_seq) return ts_cuda_seq_bytes(s->cuda_seq);
#endif
    return s->st.bytes + ts_cpu_work_bytes(s->w);
}

int ts_session_copy(ts_session *dst, const ts_session *src, char *err, size_t errlen) {
    if (dst == src) return 0;
    if (dst->m != src->m) return ts_errf(err, errlen, "a session's state can only be copied to a session of the same model");
    if (dst->p.backend != src->p.backend)
        return ts_errf(err, errlen, "a session's state can only be copied to a session of the same backend");
    if (src->p.backend != TS_BACKEND_CPU)
        return ts_errf(err, errlen, "copying a session's state is not implemented on the CUDA backend yet");
    if (ts_session_pos(src) > dst->p.n_ctx)
        return ts_errf(err, errlen, "the source holds %" PRId64 " tokens, more than the destination's context of %" PRId64,
                       ts_session_pos(src), dst->p.n_ctx);
    ts_seq_state_copy(&dst->st, &src->st, src->m);
    return 0;
}

struct ts_snapshot {
    const ts_model *m;
    int64_t pos;
    int32_t ple_ctx[TS_MAX_NGRAM];
    size_t n; /* floats in data */
    float *data;
};

typedef struct pack_ctx {
    float *buf;
    size_t n;
    bool out; /* true: state → buf; false: buf → state */
} pack_ctx;

static void count_region(void *ctx, float *p, size_t n) {
    (void)p;
    ((pack_ctx *)ctx)->n += n;
}

static void pack_region(void *ctx, float *p, size_t n) {
    pack_ctx *c = ctx;
    if (c->out)
        memcpy(c->buf + c->n, p, n * sizeof *p);
    else
        memcpy(p, c->buf + c->n, n * sizeof *p);
    c->n += n;
}

int ts_session_snapshot(const ts_session *s, ts_snapshot **out, char *err, size_t errlen) {
    *out = NULL;
    if (s->p.backend != TS_BACKEND_CPU)
        return ts_errf(err, errlen, "snapshots of a session's state are not implemented on the CUDA backend yet");
    ts_seq_state *st = (ts_seq_state *)&s->st; /* the regions are only read */
    pack_ctx c = {0};
    ts_seq_state_regions(st, s->m, st->pos, count_region, &c);
    ts_snapshot *snap = calloc(1, sizeof *snap);
    float *buf = malloc((c.n ? c.n : 1) * sizeof *buf);
    if (!snap || !buf) {
        free(snap), free(buf);
        return ts_errf(err, errlen, "out of memory for a snapshot of %.1f MiB", c.n * sizeof(float) / 1048576.0);
    }
    *snap = (ts_snapshot){.m = s->m, .pos = st->pos, .n = c.n, .data = buf};
    memcpy(snap->ple_ctx, st->ple_ctx, sizeof snap->ple_ctx);
    pack_ctx w = {.buf = buf, .out = true};
    ts_seq_state_regions(st, s->m, st->pos, pack_region, &w);
    *out = snap;
    return 0;
}

int ts_session_restore(ts_session *s, const ts_snapshot *snap, char *err, size_t errlen) {
    if (snap->m != s->m) return ts_errf(err, errlen, "a snapshot can only be restored into a session of its model");
    if (s->p.backend != TS_BACKEND_CPU)
        return ts_errf(err, errlen, "snapshots of a session's state are not implemented on the CUDA backend yet");
    if (snap->pos > s->p.n_ctx)
        return ts_errf(err, errlen, "the snapshot holds %" PRId64 " tokens, more than the session's context of %" PRId64,
                       snap->pos, s->p.n_ctx);
    pack_ctx r = {.buf = snap->data, .out = false};
    ts_seq_state_regions(&s->st, s->m, snap->pos, pack_region, &r);
    memcpy(s->st.ple_ctx, snap->ple_ctx, sizeof snap->ple_ctx);
    s->st.pos = snap->pos;
    return 0;
}

int64_t ts_snapshot_pos(const ts_snapshot *snap) { return snap->pos; }
size_t ts_snapshot_bytes(const ts_snapshot *snap) { return sizeof *snap + snap->n * sizeof(float); }

void ts_snapshot_free(ts_snapshot *snap) {
    if (!snap) return;
    free(snap->data);
    free(snap);
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
                return ts_errf(err, errlen,
                               "the logits at position %" PRId64 " hold %s (vocabulary entry %" PRId64
                               "): the model produced NaN or infinity (damaged or edited weights or metadata?); "
                               "TURBOSPARK_CHECK_FINITE=1 on the CPU backend names the layer where it first appears",
                               pos0 + r, isnan(x[r * V + v]) ? "NaN" : "an infinity", v);
    }
    return 0;
}

int ts_session_eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all, char *err, size_t errlen) {
    if (n < 1) return ts_errf(err, errlen, "nothing to evaluate: %" PRId64 " tokens", n);
    if (ts_session_pos(s) + n > s->p.n_ctx)
        return ts_errf(err, errlen, "%" PRId64 " more tokens do not fit: the session holds %" PRId64 " of %" PRId64
                       " tokens", n, ts_session_pos(s), s->p.n_ctx);
#ifdef TS_HAVE_CUDA
#endif
    const int64_t V = s->m->hp.n_vocab, pos0 = ts_session_pos(s);
    for (int64_t t0 = 0; t0 < n; t0 += s->p.ubatch) {
        int64_t k = n - t0 < s->p.ubatch ? n - t0 : s->p.ubatch;
        bool last = t0 + k == n;
        float *out = !logits ? NULL : all ? logits + t0 * V : last ? logits : NULL;
#ifdef TS_HAVE_CUDA
        if (s->cuda_seq) {
            ts_cuda_seq *q = s->cuda_seq;
            const int32_t *chunk = ids + t0;
            if (ts_cuda_forward(s->m->cuda, &q, &chunk, &k, 1, &out, all, err, errlen)) return -1;
        } else
#endif
            if (ts_cpu_forward(s->w, &s->st, ids + t0, k, out, all, err, errlen))
            return -1;
        if (out && check_logits(out, all ? k : 1, V, all ? pos0 + t0 : pos0 + n - 1, err, errlen)) return -1;
    }
    return 0;
}

/* The CPU batch: its entries packed, in order, into micro-batches of at most U rows, each one
 * ts_cpu_forward_batch (every weight read once per micro-batch). An entry that does not fit the
 * room left continues in the next micro-batch (only its last piece gets logits). The batch runs
 * in the workspaces of the session with the largest context (the first such): they hold every
 * session's positions (QSA scores), and U is that session's ubatch. The sessions are the caller's
 * for the call, so borrowing one's workspaces is safe. */
static int cpu_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits,
                          int n_seq, char *err, size_t errlen) {
    ts_session *host = s[0];
    for (int i = 1; i < n_seq; i++)
        if (s[i]->p.n_ctx > host->p.n_ctx) host = s[i];
    const int64_t U = host->p.ubatch;
    const int cap = n_seq < U ? n_seq : (int)U; /* sequences in one micro-batch */
    ts_seq_state **st = malloc((size_t)cap * sizeof *st);
    const int32_t **mb_ids = malloc((size_t)cap * sizeof *mb_ids);
    int64_t *mb_n = malloc((size_t)cap * sizeof *mb_n);
    float **mb_logits = malloc((size_t)cap * sizeof *mb_logits);
    int rc = st && mb_ids && mb_n && mb_logits ? 0 : ts_errf(err, errlen, "out of memory");
    int i = 0;
    int64_t done = 0; /* tokens of entry i already run */
    while (!rc && i < n_seq) {
        int k = 0;
        for (int64_t rows = 0; i < n_seq && rows < U; k++) {
            const int64_t take = n[i] - done < U - rows ? n[i] - done : U - rows;
            st[k] = &s[i]->st, mb_ids[k] = ids[i] + done, mb_n[k] = take;
            mb_logits[k] = logits && done + take == n[i] ? logits[i] : NULL;
            rows += take, done += take;
            if (done == n[i]) i++, done = 0;
        }
        rc = ts_cpu_forward_batch(host->w, st, mb_ids, mb_n, k, mb_logits, err, errlen);
    }
    free(st), free(mb_ids), free(mb_n), free(mb_logits);
    return rc;
}

int ts_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits, int n_seq,
                  char *err, size_t errlen) {
    /* check everything first, so that a refused batch leaves every session as it was */
    for (int i = 0; i < n_seq; i++) {
        if (s[i]->m != s[0]->m) return ts_errf(err, errlen, "a batch must hold sessions of one model (session %d differs)", i);
        if (s[i]->p.backend != s[0]->p.backend)
            return ts_errf(err, errlen, "a batch must hold sessions of one backend (session %d differs)", i);
        for (int j = 0; j < i; j++)
            if (s[j] == s[i])
                return ts_errf(err, errlen, "a batch holds each session once (entries %d and %d are the same)", j, i);
        if (n[i] < 1 || ts_session_pos(s[i]) + n[i] > s[i]->p.n_ctx)
            return ts_errf(err, errlen, "batch entry %d: %" PRId64 " tokens do not fit its session (%" PRId64 " of %" PRId64
                           " used)", i, n[i], ts_session_pos(s[i]), s[i]->p.n_ctx);
        for (int64_t t = 0; t < n[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= (int32_t)s[i]->m->hp.n_vocab)
                return ts_errf(err, errlen, "batch entry %d: token id %" PRId32 " is outside the vocabulary", i, ids[i][t]);
    }
    int rc = 0;
#ifdef TS_HAVE_CUDA
    if (n_seq > 0 && s[0]->cuda_seq) {
        ts_cuda_seq **q = malloc((size_t)n_seq * sizeof *q);
        if (!q) return ts_errf(err, errlen, "out of memory");
        for (int i = 0; i < n_seq; i++) q[i] = s[i]->cuda_seq;
        rc = ts_cuda_forward(s[0]->m->cuda, q, ids, n, n_seq, logits, false, err, errlen);
        free(q);
    } else
#endif
        rc = n_seq > 0 ? cpu_batch_eval(s, ids, n, logits, n_seq, err, errlen) : 0;
    for (int i = 0; !rc && logits && i < n_seq; i++) {
        if (!logits[i]) continue;
        char e2[400];
        if (check_logits(logits[i], 1, s[i]->m->hp.n_vocab, ts_session_pos(s[i]) - 1, e2, sizeof e2))
            rc = ts_errf(err, errlen, "batch entry %d: %s", i, e2);
    }
    return rc;
}

#ifdef TS_HAVE_CUDA
ts_cuda_seq *ts_session_cuda_seq(ts_session *s) { return s->cuda_seq; }
#endif
