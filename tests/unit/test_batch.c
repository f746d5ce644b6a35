/* Continuous batching on the CPU (ts_batch_eval → ts_cpu_forward_batch): sessions evaluated
 * together give the logits each gets alone through ts_session_eval, for prompts of different
 * lengths, decode steps, mixed steps (one entry several tokens, the others one), subsets of the
 * sessions in any order, sessions of different n_ctx/ubatch, and micro-batches that cut an entry.
 * With the scalar dot path the kernels round a token the same way whatever the token count, so the
 * batch must be bit-identical; on the SIMD paths a multi-token product rounds differently (measured
 * ~2e-6 of max|logit| after 24 steps), so the bound is the one golden.sh puts on chunked prefill,
 * 1e-5 of max|logit|. A refused batch leaves every session as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cpu/dot.h"
#include "cpu/forward.h"
#include "model/qwen4exp.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "turbospark.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NS = 4, MAX_STEPS = 24, MAX_TOK = 64 };

static char g_path[256];
static ts_model *g_m;
static int64_t g_V;

static int setup(void **state) {
    (void)state;
    char err[512];
    snprintf(g_path, sizeof g_path, "/tmp/ts_test_batch_%d.gguf", (int)getpid());
    ts_hparams hp;
    if (ts_hparams_tiny(&hp, err, sizeof err)) return -1;
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .seed = 7};
    int rc = ts_synth_write(&hp, &o, g_path, err, sizeof err);
    ts_hparams_free(&hp);
    if (rc || ts_model_load(g_path, &g_m, err, sizeof err)) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    g_V = ts_model_n_vocab(g_m);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ts_model_free(g_m);
    unlink(g_path);
    return 0;
}

/* A schedule: at step k, session i takes n[k][i] tokens (0: not in that step's batch), in the
 * order order[k][0..] (a permutation of the sessions that take part). */
typedef struct {
    int steps;
    int64_t n[MAX_STEPS][NS];
    int order[MAX_STEPS][NS];
    ts_session_params p[NS];
} schedule;

/* The token of session i at position pos (the tiny model's EOS, 500, shows up now and then). */
static int32_t tok(int i, int64_t pos) {
    return (int32_t)((pos * 131 + i * 57 + 7 + (pos % 11 == 5) * 500) % 512);
}

static void ids_of(int i, int64_t pos, int64_t n, int32_t *ids) {
    for (int64_t t = 0; t < n; t++) ids[t] = tok(i, pos + t);
}

static float *logits_at(float *all, int k, int i) {
    return all + ((size_t)k * NS + (size_t)i) * (size_t)g_V;
}

static ts_session *session(const ts_session_params *p) {
    char err[512];
    ts_session *s;
    if (ts_session_new(g_m, p, &s, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

/* Each session alone, step by step, through ts_session_eval. */
static void run_alone(const schedule *sc, float *out) {
    char err[512];
    int32_t ids[MAX_TOK];
    for (int i = 0; i < NS; i++) {
        ts_session *s = session(&sc->p[i]);
        for (int k = 0; k < sc->steps; k++) {
            if (!sc->n[k][i]) continue;
            ids_of(i, ts_session_pos(s), sc->n[k][i], ids);
            if (ts_session_eval(s, ids, sc->n[k][i], logits_at(out, k, i), false, err, sizeof err))
                fail_msg("alone: %s", err);
        }
        ts_session_free(s);
    }
}

/* The refusals of one batch; each must leave every session where it was. */
static void refusals(ts_session **s) {
    char err[512];
    int32_t ids[NS][MAX_TOK], *big = malloc(1024 * sizeof *big);
    assert_non_null(big);
    const int32_t *idp[NS];
    int64_t n[NS], pos[NS];
    float *lp[NS] = {0};
    for (int i = 0; i < NS; i++) {
        pos[i] = ts_session_pos(s[i]);
        ids_of(i, pos[i], 1, ids[i]);
        idp[i] = ids[i], n[i] = 1;
    }
    ts_session *dup[NS] = {s[0], s[1], s[0], s[3]};
    struct {
        const char *want;
        int entry;
        int32_t id;
        int64_t n;
        bool dup;
    } cases[] = {
        {"outside the vocabulary", 2, (int32_t)g_V, 1, false},
        {"outside the vocabulary", 3, -1, 1, false},
        {"1000 tokens do not fit", 1, 0, 1000, false}, /* past every session's context */
        {"0 tokens do not fit", 0, 0, 0, false},
        {"each session once", 0, 0, 1, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int e = cases[c].entry;
        const int64_t ne = cases[c].n;
        for (int64_t t = 0; t < 1000; t++) big[t] = tok(e, pos[e] + t);
        const int32_t *save = idp[e];
        const int64_t save_n = n[e];
        if (ne > 1)
            idp[e] = big;
        else
            ids[e][0] = cases[c].id ? cases[c].id : ids[e][0];
        n[e] = ne;
        err[0] = 0;
        assert_int_equal(ts_batch_eval(cases[c].dup ? dup : s, idp, n, lp, NS, err, sizeof err), -1);
        if (!strstr(err, cases[c].want)) fail_msg("refusal %zu: '%s' lacks '%s'", c, err, cases[c].want);
        idp[e] = save, n[e] = save_n;
        ids_of(e, pos[e], 1, ids[e]);
        for (int i = 0; i < NS; i++) assert_int_equal(ts_session_pos(s[i]), pos[i]);
    }
    free(big);
}

/* max|a − b| over max|a|, over every (step, session) of the schedule. */
static double compare(const schedule *sc, const float *ref, const float *got, bool *bitwise) {
    double worst = 0;
    *bitwise = true;
    for (int k = 0; k < sc->steps; k++)
        for (int i = 0; i < NS; i++) {
            if (!sc->n[k][i]) continue;
            const float *a = logits_at((float *)ref, k, i), *b = logits_at((float *)got, k, i);
            double mx = 0, d = 0;
            for (int64_t v = 0; v < g_V; v++) {
                mx = fmax(mx, fabs(a[v]));
                d = fmax(d, fabs((double)a[v] - b[v]));
            }
            if (!(d <= mx)) fail_msg("step %d session %d: logits far apart (%g vs max %g)", k, i, d, mx);
            if (memcmp(a, b, (size_t)g_V * sizeof *a)) *bitwise = false;
            worst = fmax(worst, d / mx);
        }
    return worst;
}

/* The sessions together, one ts_batch_eval a step (refusals tried after the prompts). */
static void run_batched(const schedule *sc, float *out) {
    char err[512];
    ts_session *s[NS], *b_s[NS];
    int32_t ids[NS][MAX_TOK];
    const int32_t *b_ids[NS];
    int64_t b_n[NS];
    float *b_lg[NS];
    for (int i = 0; i < NS; i++) s[i] = session(&sc->p[i]);
    for (int k = 0; k < sc->steps; k++) {
        int nb = 0;
        for (int j = 0; j < NS; j++) {
            const int i = sc->order[k][j];
            if (!sc->n[k][i]) continue;
            ids_of(i, ts_session_pos(s[i]), sc->n[k][i], ids[i]);
            b_s[nb] = s[i], b_ids[nb] = ids[i], b_n[nb] = sc->n[k][i], b_lg[nb++] = logits_at(out, k, i);
        }
        if (ts_batch_eval(b_s, b_ids, b_n, b_lg, nb, err, sizeof err)) fail_msg("batch step %d: %s", k, err);
        if (k == 0) refusals(s);
    }
    for (int i = 0; i < NS; i++) ts_session_free(s[i]);
}

/* Prompts of 5, 17, 30 and 41 tokens, then decode steps, mixed steps, subsets, other orders. */
static void make_schedule(schedule *sc, const ts_session_params *p) {
    memset(sc, 0, sizeof *sc);
    static const int64_t prompt[NS] = {5, 17, 30, 41};
    for (int i = 0; i < NS; i++) sc->p[i] = p[i];
    int k = 0;
    for (int i = 0; i < NS; i++) sc->n[k][i] = prompt[i], sc->order[k][i] = i;
    for (k = 1; k < MAX_STEPS; k++) {
        for (int i = 0; i < NS; i++) sc->n[k][i] = 1, sc->order[k][i] = k % 3 == 0 ? NS - 1 - i : i;
        if (k % 5 == 2) sc->n[k][k % NS] = 3 + k % 7; /* mixed: one entry several tokens */
        if (k % 7 == 4) sc->n[k][(k + 1) % NS] = 0;   /* a session sits this step out */
    }
    sc->steps = MAX_STEPS;
}

static void scenario(const ts_session_params *p, const char *name) {
    schedule sc;
    make_schedule(&sc, p);
    const size_t sz = (size_t)MAX_STEPS * NS * (size_t)g_V * sizeof(float);
    float *ref = malloc(sz), *got = malloc(sz);
    assert_non_null(ref);
    assert_non_null(got);
    bool bitwise;
    /* the scalar path: bit for bit */
    assert_int_equal(ts_cpu_dot_force(TS_DOT_SCALAR), 0);
    run_alone(&sc, ref);
    run_batched(&sc, got);
    double d = compare(&sc, ref, got, &bitwise);
    if (!bitwise) fail_msg("%s, scalar path: the batch is not bit-identical (%.3g of max|logit|)", name, d);
    /* the automatic path (SIMD): within 1e-5 of max|logit| */
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
    run_alone(&sc, ref);
    run_batched(&sc, got);
    d = compare(&sc, ref, got, &bitwise);
    printf("  %s, %s path: batch vs alone %.2e of max|logit|%s\n", name,
           ts_cpu_dot_path_name(ts_cpu_dot_path()), d, bitwise ? " (bit-identical)" : "");
    if (d > 1e-5) fail_msg("%s: batch differs from alone by %.3g of max|logit|", name, d);
    free(ref);
    free(got);
}

static void test_same_params(void **state) {
    (void)state;
    ts_session_params p[NS];
    for (int i = 0; i < NS; i++) p[i] = (ts_session_params){.n_ctx = 128, .ubatch = 16};
    scenario(p, "ubatch 16");
}

static void test_large_ubatch(void **state) { /* the prompts in two micro-batches, decode steps in one */
    (void)state;
    ts_session_params p[NS];
    for (int i = 0; i < NS; i++) p[i] = (ts_session_params){.n_ctx = 128, .ubatch = 64};
    scenario(p, "ubatch 64");
}

static void test_mixed_params(void **state) { /* session 2 has the largest context: its ubatch 3 rules */
    (void)state;
    ts_session_params p[NS] = {{.n_ctx = 128, .ubatch = 16},
                               {.n_ctx = 100, .ubatch = 64},
                               {.n_ctx = 150, .ubatch = 3},
                               {.n_ctx = 128, .ubatch = 7}};
    scenario(p, "mixed n_ctx and ubatch");
}

/* The CPU entry point itself: n_seq = 1 is ts_cpu_forward bit for bit; what it refuses changes nothing. */
/* ts_session_copy and snapshots: a session that held another sequence, given a copy of A's state, continues
 * exactly as A does (bit-identical logits: same state, same calls), and a CUDA-less copy across
 * models or past the destination's context is refused. */
static void test_session_copy(void **state) {
    (void)state;
    char err[256];
    ts_session *a, *b, *small;
    ts_session_params sp = {.n_ctx = 96, .ubatch = 8}, sp_small = {.n_ctx = 16, .ubatch = 8};
    assert_int_equal(ts_session_new(g_m, &sp, &a, err, sizeof err), 0);
    assert_int_equal(ts_session_new(g_m, &sp, &b, err, sizeof err), 0);
    assert_int_equal(ts_session_new(g_m, &sp_small, &small, err, sizeof err), 0);
    int32_t prompt[45], other[7];
    uint32_t x = 12345;
    for (int i = 0; i < 45; i++)
        x = x * 1664525u + 1013904223u, prompt[i] = (int32_t)((x >> 8) % (uint32_t)g_V);
    for (int i = 0; i < 7; i++)
        x = x * 1664525u + 1013904223u, other[i] = (int32_t)((x >> 8) % (uint32_t)g_V);
    float *la = malloc((size_t)g_V * sizeof *la), *lb = malloc((size_t)g_V * sizeof *lb);
    assert_int_equal(ts_session_eval(a, prompt, 45, la, false, err, sizeof err), 0);
    assert_int_equal(ts_session_eval(b, other, 7, lb, false, err, sizeof err),
                     0); /* stale state to overwrite */
    assert_int_equal(ts_session_copy(b, a, err, sizeof err), 0);
    assert_int_equal(ts_session_pos(b), 45);
    assert_int_not_equal(ts_session_copy(small, a, err, sizeof err), 0); /* 45 tokens do not fit 16 */
    for (int t = 0; t < 6; t++) {
        int32_t id = (int32_t)((t * 7919) % g_V);
        assert_int_equal(ts_session_eval(a, &id, 1, la, false, err, sizeof err), 0);
        assert_int_equal(ts_session_eval(b, &id, 1, lb, false, err, sizeof err), 0);
        assert_memory_equal(la, lb, (size_t)g_V * sizeof *la);
    }
    /* a snapshot of a (51 tokens now), restored into b after b has moved on, continues as a does */
    ts_snapshot *snap;
    assert_int_equal(ts_session_snapshot(a, &snap, err, sizeof err), 0);
    assert_int_equal(ts_snapshot_pos(snap), 51);
    assert_true(ts_snapshot_bytes(snap) < ts_session_state_bytes(a)); /* caches only up to the position */
    assert_int_equal(ts_session_snapshot_bytes(a), ts_snapshot_bytes(snap));
    assert_int_equal(ts_session_eval(b, other, 7, lb, false, err, sizeof err), 0);
    assert_int_not_equal(ts_session_restore(small, snap, err, sizeof err), 0);
    assert_int_equal(ts_session_restore(b, snap, err, sizeof err), 0);
    assert_int_equal(ts_session_pos(b), 51);
    for (int t = 0; t < 6; t++) {
        int32_t id = (int32_t)((t * 104729 + 3) % g_V);
        assert_int_equal(ts_session_eval(a, &id, 1, la, false, err, sizeof err), 0);
        assert_int_equal(ts_session_eval(b, &id, 1, lb, false, err, sizeof err), 0);
        assert_memory_equal(la, lb, (size_t)g_V * sizeof *la);
    }
    ts_snapshot_free(snap);
    free(la), free(lb);
    ts_session_free(a), ts_session_free(b), ts_session_free(small);
}

static void test_cpu_forward_batch(void **state) {
    (void)state;
    char err[512];
    ts_seq_state a, b;
    assert_int_equal(ts_seq_state_init(&a, g_m, 32, err, sizeof err), 0);
    assert_int_equal(ts_seq_state_init(&b, g_m, 32, err, sizeof err), 0);
    ts_cpu_work *w = ts_cpu_work_new(g_m, 4, 32, err, sizeof err);
    assert_non_null(w);
    float *la = malloc((size_t)g_V * sizeof *la), *lb = malloc((size_t)g_V * sizeof *lb);
    assert_non_null(la);
    assert_non_null(lb);
    const int32_t ids[4] = {3, 500, 17, 42}, *idp[2] = {ids, ids};
    int64_t T[2] = {3, 2};
    ts_seq_state *st[2] = {&a, &b}, *same[2] = {&a, &a};
    float *lp[2] = {la, lb};

    assert_int_equal(ts_cpu_forward_batch(w, st, idp, T, 2, lp, err, sizeof err),
                     -1); /* 5 tokens > ubatch 4 */
    assert_non_null(strstr(err, "1 to 4 tokens"));
    T[1] = 1;
    assert_int_equal(ts_cpu_forward_batch(w, same, idp, T, 2, lp, err, sizeof err), -1);
    assert_non_null(strstr(err, "the same sequence"));
    assert_int_equal(a.pos, 0);
    assert_int_equal(b.pos, 0);

    assert_int_equal(ts_cpu_forward_batch(w, st, idp, T, 1, lp, err, sizeof err), 0);
    assert_int_equal(ts_cpu_forward(w, &b, ids, 3, lb, false, err, sizeof err), 0);
    assert_memory_equal(la, lb, (size_t)g_V * sizeof *la);
    assert_int_equal(a.pos, 3);

    ts_cpu_work_free(w);
    ts_seq_state_free(&a);
    ts_seq_state_free(&b);
    free(la);
    free(lb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_forward_batch), cmocka_unit_test(test_session_copy),
        cmocka_unit_test(test_same_params),       cmocka_unit_test(test_large_ubatch),
        cmocka_unit_test(test_mixed_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
