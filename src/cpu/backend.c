/* The CPU backend behind the engine's interface (src/engine/backend.h).
 *
 * A CPU sequence owns its state and the workspaces of micro-batches of up to `ubatch` rows (sized
 * for its own context: the QSA scores of every position). A micro-batch runs in the workspaces of
 * its host sequence, which the engine picks with the largest context of the batch, so they hold
 * every sequence's positions. The context only remembers the model: weights are read in place. */
#include "engine/backend.h"

#include "common/error.h"
#include "cpu/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cpu_ctx {
    const ts_model *m;
} cpu_ctx;

typedef struct cpu_seq {
    const ts_model *m;
    ts_seq_state st;
    ts_cpu_work *w; /* workspaces for micro-batches of up to ubatch rows */
    int64_t ubatch;
    ts_seq_state **states; /* [ubatch] the states of a micro-batch this sequence hosts */
} cpu_seq;

static int cpu_ctx_new(const ts_model *m, const ts_backend_plan *p, void **out, char *err, size_t errlen) {
    (void)p;
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return ts_errf(err, errlen, "out of memory creating the CPU backend");
    c->m = m;
    *out = c;
    return 0;
}

static void cpu_ctx_free(void *c) {
    free(c);
}

static void cpu_seq_free(void *p) {
    cpu_seq *q = p;
    if (!q) return;
    ts_cpu_work_free(q->w);
    ts_seq_state_free(&q->st);
    free(q->states);
    free(q);
}

static int cpu_seq_new(void *ctx, int64_t n_ctx, int64_t ubatch, void **out, char *err, size_t errlen) {
    const ts_model *m = ((cpu_ctx *)ctx)->m;
    *out = NULL;
    cpu_seq *q = calloc(1, sizeof *q);
    if (!q) return ts_errf(err, errlen, "out of memory creating a session");
    q->m = m, q->ubatch = ubatch;
    if (ts_seq_state_init(&q->st, m, n_ctx, err, errlen)) {
        free(q);
        return -1;
    }
    q->states = malloc((size_t)ubatch * sizeof *q->states);
    if (!q->states) {
        cpu_seq_free(q);
        return ts_errf(err, errlen, "out of memory for the micro-batch tables of %lld rows",
                       (long long)ubatch);
    }
    if (!(q->w = ts_cpu_work_new(m, ubatch, n_ctx, err, errlen))) {
        cpu_seq_free(q);
        return -1;
    }
    *out = q;
    return 0;
}

static int cpu_seq_reset(void *p, char *err, size_t errlen) {
    (void)err, (void)errlen;
    cpu_seq *q = p;
    ts_seq_state_reset(&q->st, q->m);
    return 0;
}

static int64_t cpu_seq_pos(const void *p) {
    return ((const cpu_seq *)p)->st.pos;
}

static size_t cpu_seq_bytes(const void *p) {
    const cpu_seq *q = p;
    return q->st.bytes + ts_cpu_work_bytes(q->w) + (size_t)q->ubatch * sizeof *q->states;
}

static int64_t cpu_max_rows(const void *ctx, const void *p) {
    (void)ctx;
    return ((const cpu_seq *)p)->ubatch;
}

static int cpu_seq_copy(void *dst, const void *src, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const cpu_seq *s = src;
    ts_seq_state_copy(&((cpu_seq *)dst)->st, &s->st, s->m);
    return 0;
}

/* A snapshot: the n-gram context (TS_MAX_NGRAM ids), then the floats of the state's regions at its
 * position (ts_seq_state_regions: position-indexed caches up to the position only). */
typedef struct pack_ctx {
    unsigned char *buf; /* NULL: only count */
    size_t n;           /* bytes so far */
    bool out;           /* true: state → buf; false: buf → state */
} pack_ctx;

static void pack_region(void *ctx, float *p, size_t n) {
    pack_ctx *c = ctx;
    if (c->buf && c->out) memcpy(c->buf + c->n, p, n * sizeof *p);
    if (c->buf && !c->out) memcpy(p, c->buf + c->n, n * sizeof *p);
    c->n += n * sizeof *p;
}

static size_t snapshot_size(const cpu_seq *q, int64_t pos) {
    pack_ctx c = {.n = sizeof q->st.ple_ctx};
    ts_seq_state_regions((ts_seq_state *)&q->st, q->m, pos, pack_region, &c); /* only counts */
    return c.n;
}

static size_t cpu_snapshot_bytes(const void *p) {
    const cpu_seq *q = p;
    return snapshot_size(q, q->st.pos);
}

static int cpu_snapshot_save(const void *p, void *data, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const cpu_seq *q = p;
    memcpy(data, q->st.ple_ctx, sizeof q->st.ple_ctx);
    pack_ctx c = {.buf = data, .n = sizeof q->st.ple_ctx, .out = true};
    ts_seq_state_regions((ts_seq_state *)&q->st, q->m, q->st.pos, pack_region,
                         &c); /* the regions are only read */
    return 0;
}

static int cpu_snapshot_load(void *p, const void *data, size_t bytes, int64_t pos, char *err, size_t errlen) {
    cpu_seq *q = p;
    const size_t want = snapshot_size(q, pos);
    if (bytes != want)
        return ts_errf(
            err, errlen,
            "the snapshot holds %zu bytes of state where %lld tokens of this model on the CPU backend "
            "take %zu: it was saved from another model or backend, or it is damaged",
            bytes, (long long)pos, want);
    pack_ctx c = {.buf = (unsigned char *)data, .n = sizeof q->st.ple_ctx, .out = false};
    ts_seq_state_regions(&q->st, q->m, pos, pack_region, &c);
    memcpy(q->st.ple_ctx, data, sizeof q->st.ple_ctx);
    q->st.pos = pos;
    return 0;
}

static int cpu_forward(void *ctx, void *host, const ts_micro_batch *mb, char *err, size_t errlen) {
    (void)ctx;
    cpu_seq *h = host;
    if (mb->all_logits) {
        cpu_seq *q = mb->seq[0];
        return ts_cpu_forward(h->w, &q->st, mb->ids[0], mb->n[0], mb->logits[0], true, err, errlen);
    }
    for (int i = 0; i < mb->n_seq; i++) h->states[i] = &((cpu_seq *)mb->seq[i])->st;
    return ts_cpu_forward_batch(h->w, h->states, mb->ids, mb->n, mb->n_seq, mb->logits, err, errlen);
}

static void cpu_info(const void *ctx, ts_backend_info *out) {
    (void)ctx;
    snprintf(out->device, sizeof out->device, "CPU");
}

/* A streaming read of 1 GiB (much more than the caches), best of three, on every thread. */
static double cpu_bandwidth(void *ctx) {
    (void)ctx;
    const size_t n = (size_t)1 << 27; /* 2^27 doubles */
    double *buf = malloc(n * sizeof *buf);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (double)(i & 1023);
    double best = 0, sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct timespec t0, t1;
        double s = 0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++) s += buf[i];
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        sink += s;
        if (n * sizeof *buf / dt > best) best = n * sizeof *buf / dt;
    }
    free(buf);
    return sink < 0 ? 0 : best; /* sink keeps the loop from being optimised away */
}

const ts_backend_ops ts_cpu_backend = {
    .name = "CPU",
    .ctx_new = cpu_ctx_new,
    .ctx_free = cpu_ctx_free,
    .seq_new = cpu_seq_new,
    .seq_free = cpu_seq_free,
    .seq_reset = cpu_seq_reset,
    .seq_pos = cpu_seq_pos,
    .seq_bytes = cpu_seq_bytes,
    .max_rows = cpu_max_rows,
    .seq_copy = cpu_seq_copy,
    .snapshot_bytes = cpu_snapshot_bytes,
    .snapshot_save = cpu_snapshot_save,
    .snapshot_load = cpu_snapshot_load,
    .forward = cpu_forward,
    .info = cpu_info,
    .bandwidth = cpu_bandwidth,
};
