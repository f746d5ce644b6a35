/* The CUDA backend behind the engine's interface (src/engine/backend.h): the entry points of
 * src/cuda/forward.h, unchanged. The context is the ts_cuda_ctx (weights on the GPU, one runner
 * whose workspaces and micro-batch tables every sequence shares); a sequence is a ts_cuda_seq. */
#include "engine/backend.h"

#include "common/error.h"
#include "cuda/forward.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct cuda_seq {
    ts_cuda_seq *q;
    int cap;          /* entries of the table below: the context's max_rows */
    ts_cuda_seq **qs; /* [cap] the sequences of a micro-batch this one hosts */
} cuda_seq;

static int cuda_ctx_new(const ts_model *m, const ts_backend_plan *p, void **out, char *err, size_t errlen) {
    return ts_cuda_ctx_new(m, p, (ts_cuda_ctx **)out, err, errlen);
}

static void cuda_ctx_free(void *c) {
    ts_cuda_ctx_free(c);
}

static void cuda_seq_free(void *p) {
    cuda_seq *s = p;
    if (!s) return;
    ts_cuda_seq_free(s->q);
    free(s->qs);
    free(s);
}

static int cuda_seq_new(void *ctx, int64_t n_ctx, int64_t ubatch, void **out, char *err, size_t errlen) {
    (void)ubatch; /* micro-batches are the context's: up to its max_rows rows */
    *out = NULL;
    cuda_seq *s = calloc(1, sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory creating a session");
    const int cap = (int)ts_cuda_ctx_max_rows(ctx);
    s->cap = cap;
    if (!(s->qs = malloc((size_t)cap * sizeof *s->qs))) {
        free(s);
        return ts_errf(err, errlen, "out of memory for the micro-batch tables of %d rows", cap);
    }
    if (ts_cuda_seq_new(ctx, n_ctx, &s->q, err, errlen)) {
        cuda_seq_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

static int cuda_seq_reset(void *p, char *err, size_t errlen) {
    return ts_cuda_seq_reset(((cuda_seq *)p)->q, err, errlen);
}
static int64_t cuda_seq_pos(const void *p) {
    return ts_cuda_seq_pos(((const cuda_seq *)p)->q);
}
static size_t cuda_seq_bytes(const void *p) {
    return ts_cuda_seq_bytes(((const cuda_seq *)p)->q);
}

static int cuda_seq_copy(void *dst, const void *src, char *err, size_t errlen) {
    return ts_cuda_seq_copy(((cuda_seq *)dst)->q, ((const cuda_seq *)src)->q, err, errlen);
}
static size_t cuda_snapshot_bytes(const void *p) {
    return ts_cuda_seq_snapshot_bytes(((const cuda_seq *)p)->q);
}
static int cuda_snapshot_save(const void *p, void *data, char *err, size_t errlen) {
    return ts_cuda_seq_snapshot_save(((const cuda_seq *)p)->q, data, err, errlen);
}
static int cuda_snapshot_load(void *p, const void *data, size_t bytes, int64_t pos, char *err,
                              size_t errlen) {
    return ts_cuda_seq_snapshot_load(((cuda_seq *)p)->q, data, bytes, pos, err, errlen);
}

static void *cuda_snap_alloc(void *ctx, ts_snapshot_place where, size_t bytes) {
    return ts_cuda_snap_alloc(ctx, where, bytes);
}
static void cuda_snap_free(void *ctx, ts_snapshot_place where, void *p) {
    ts_cuda_snap_free(ctx, where, p);
}
static bool cuda_snap_fits(const void *ctx, size_t bytes) {
    return ts_cuda_snap_fits((ts_cuda_ctx *)ctx, bytes);
}
static int cuda_snap_copy(void *ctx, void *dst, const void *src, size_t bytes, char *err, size_t errlen) {
    return ts_cuda_snap_copy(ctx, dst, src, bytes, err, errlen);
}

static int64_t cuda_max_rows(const void *ctx, const void *p) {
    (void)p;
    return ts_cuda_ctx_max_rows(ctx);
}

static int cuda_forward(void *ctx, void *host, const ts_micro_batch *mb, char *err, size_t errlen) {
    cuda_seq *h = host;
    for (int i = 0; i < mb->n_seq; i++) h->qs[i] = ((cuda_seq *)mb->seq[i])->q;
    return ts_cuda_forward(ctx, h->qs, mb->ids, mb->n, mb->n_seq, mb->logits, mb->all_logits, err, errlen);
}

static void cuda_info(const void *ctx, ts_backend_info *out) {
    const ts_cuda_plan *p = ts_cuda_ctx_plan(ctx);
    snprintf(out->device, sizeof out->device, "%s", ts_cuda_ctx_device_name(ctx));
    out->weight_bytes = p->weights, out->table_bytes = p->table, out->table_on_host = p->table_on_host;
    out->work_bytes = p->work, out->free_bytes = p->free_bytes, out->total_bytes = p->total_bytes;
    out->seq_state_bytes = p->seq_state;
    out->max_rows = ts_cuda_ctx_max_rows(ctx);
    size_t used, count;
    ts_cuda_snap_usage((ts_cuda_ctx *)ctx, &used, &count);
    out->snapshot_bytes = p->snapshots, out->snapshot_used_bytes = used, out->snapshot_count = count;
}

static double cuda_bandwidth(void *ctx) {
    return ts_cuda_measure_bandwidth(ctx);
}

static int cuda_profile_step(void *ctx, void *const *seqs, const int32_t *ids, int n_seq, const char **names,
                             double *ms, char *err, size_t errlen) {
    _Static_assert(TS_PROF_KINDS <= TS_PROFILE_MAX_KINDS, "more block kinds than the public API reports");
    ts_cuda_seq **q = malloc((size_t)n_seq * sizeof *q);
    if (!q) return ts_errf(err, errlen, "out of memory");
    for (int i = 0; i < n_seq; i++) q[i] = ((cuda_seq *)seqs[i])->q;
    const int rc = ts_cuda_profile_step(ctx, q, ids, n_seq, ms, err, errlen);
    free(q);
    if (rc) return -1;
    for (int k = 0; k < TS_PROF_KINDS; k++) names[k] = ts_cuda_prof_names[k];
    return TS_PROF_KINDS;
}

const ts_backend_ops ts_cuda_backend = {
    .name = "CUDA",
    .ctx_new = cuda_ctx_new,
    .ctx_free = cuda_ctx_free,
    .seq_new = cuda_seq_new,
    .seq_free = cuda_seq_free,
    .seq_reset = cuda_seq_reset,
    .seq_pos = cuda_seq_pos,
    .seq_bytes = cuda_seq_bytes,
    .max_rows = cuda_max_rows,
    .forward = cuda_forward,
    .info = cuda_info,
    .bandwidth = cuda_bandwidth,
    .profile_step = cuda_profile_step,
    .seq_copy = cuda_seq_copy,
    .snapshot_bytes = cuda_snapshot_bytes,
    .snapshot_save = cuda_snapshot_save,
    .snapshot_load = cuda_snapshot_load,
    .snap_alloc = cuda_snap_alloc,
    .snap_free = cuda_snap_free,
    .snap_fits = cuda_snap_fits,
    .snap_copy = cuda_snap_copy,
    .needs_plan = true,
};

ts_cuda_seq *ts_session_cuda_seq(ts_session *s) {
    return ts_session_backend(s) == TS_BACKEND_CUDA ? ((cuda_seq *)ts_session_backend_seq(s))->q : NULL;
}
