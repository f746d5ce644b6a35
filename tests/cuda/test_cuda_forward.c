/* CUDA forward parity (label cuda: needs a GPU; exits 77, "skipped", without one).
 *
 * Every CUDA block against its CPU twin, through whole synthetic models of several shapes and
 * weight types (tiny with every feature, awkward sizes, fused experts + per-head PLE tables, a
 * mid-size model with the released head and state sizes in Q4_K and Q6_K, and with 8 experts in
 * the low-bit Q2_K and IQ1_M, and in Q8_0 with IQ2_XXS experts):
 *   1. the wide residual after the embedding and after every block, CPU vs CUDA, same chunks: the
 *      first block whose relative difference passes 1e-4 is named;
 *   2. the logits of every position within 1e-4 of max|logit| (CPU vs transformers: 3.7e-6) and
 *      the same top-1 wherever the CPU's top-2 margin is clear;
 *   3. chunked prefill on the GPU (micro-batches 1 and 7) equal to one micro-batch of 64 (5e-5);
 *   (1-3 within 2e-2 where the tensor-core products round x, against a CPU that rounds the same operands
 *   the same way, TURBOSPARK_CPU_ROUND_X: g_resid_bound below says why);
 *   4. graph replay equal to eager execution over greedy decode steps; the hyper-connection writes left to
 *      the reads that follow them (4b), the expert products run as planned GEMVs (4c) and the SwiGLU made by
 *      the down launch (4d) equal to the separate kernels, bit for bit;
 *   5. four sequences decoded together (one batched step, one graph) equal to each decoded alone;
 *   6. a copied session and one restored from a snapshot continue as the original;
 *   7. snapshots kept in GPU memory (ts_cuda_params.snapshot_bytes) hold the same bytes as host ones,
 *      restore the same state directly and after a move to pinned host memory, and fill their
 *      reservation exactly.
 * The sparse-attention regime is reached by the tiny configs (budget 16 tokens: sparse from
 * position 19 of 200). The golden fixtures against transformers run in tests/cuda/golden_cuda.sh.
 *
 *   test_cuda_forward [DIR [NAME]]   (writes its synthetic files into DIR, default $TS_TMP or /tmp; NAME:
 *                                    only the models whose names contain it) */
#include "cpu/forward.h"
#include "cuda/forward.h"
#include "model/memplan.h"
#include "model/qwen4exp.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "turbospark.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static int64_t g_hc_deferred;   /* hyper-connection writes left to reads in step 4b, over all models */
static int64_t g_moe_planned;   /* expert products run as planned GEMVs in step 4c, over all models */
static int64_t g_swiglu_staged; /* MoE blocks whose down launch made the SwiGLU in step 4d, over all models */
static int64_t g_qsa_joined;    /* QSA blocks whose projections ran as one product in step 4e, all models */
static int64_t g_hc_one;        /* hyper-connection reads run as one launch in step 4f, all models */
static bool g_must_join;        /* the model being checked must join its QSA projections in step 4e */

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("  FAIL: " __VA_ARGS__);                                                                  \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* ---- snapshots of the wide residual -------------------------------------------------------------- */

typedef struct {
    int n, cap;
    int *layer, *block;
    int64_t *rows;
    float **R;
    int64_t W;
} trace_buf;

static void record(void *ctx, int layer, int block, const float *R, int64_t T) {
    trace_buf *t = ctx;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->layer = realloc(t->layer, t->cap * sizeof *t->layer),
        t->block = realloc(t->block, t->cap * sizeof *t->block);
        t->rows = realloc(t->rows, t->cap * sizeof *t->rows), t->R = realloc(t->R, t->cap * sizeof *t->R);
    }
    t->layer[t->n] = layer, t->block[t->n] = block, t->rows[t->n] = T;
    t->R[t->n] = malloc((size_t)(T * t->W) * sizeof(float));
    memcpy(t->R[t->n], R, (size_t)(T * t->W) * sizeof(float));
    t->n++;
}

static void trace_free(trace_buf *t) {
    for (int i = 0; i < t->n; i++) free(t->R[i]);
    free(t->layer), free(t->block), free(t->rows), free(t->R);
    memset(t, 0, sizeof *t);
}

/* max|a − b| / max|b| */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return s > 0 ? d / s : d;
}

/* ---- helpers --------------------------------------------------------------------------------------- */

static ts_session *session(ts_model *m, int64_t n_ctx, int64_t ub, ts_backend be) {
    char err[1024];
    ts_session *s;
    ts_session_params p = {.n_ctx = n_ctx, .ubatch = ub, .backend = be};
    if (ts_session_new(m, &p, &s, err, sizeof err)) {
        printf("  FAIL: session: %s\n", err);
        failures++;
        return NULL;
    }
    return s;
}

static int eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all) {
    char err[1024];
    if (ts_session_eval(s, ids, n, logits, all, err, sizeof err)) {
        printf("  FAIL: eval: %s\n", err);
        failures++;
        return -1;
    }
    return 0;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

/* ---- the checks of one model ------------------------------------------------------------------------ */

enum { T_PROMPT = 200, UB = 64, N_DECODE = 24, N_SEQ = 4 };

/* The logits of every prompt position from a fresh CUDA session of m (micro-batches of ub), with the environment
 * variable name set to value (NULL: unset) for that run only. 0, or -1 (a failure, counted). */
static int prompt_with(ts_model *m, int64_t n_ctx, int64_t ub, const int32_t *ids, float *logits,
                       const char *name, const char *value) {
    const char *was = getenv(name);
    char *saved = was ? strdup(was) : NULL;
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    ts_session *s = session(m, n_ctx, ub, TS_BACKEND_CUDA);
    const int rc = s ? eval(s, ids, T_PROMPT, logits, true) : -1;
    ts_session_free(s);
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
    return rc;
}

/* How many of the prompt's logits (T_PROMPT rows of V) differ in their bits. */
static int64_t logits_differ(const float *a, const float *b, int64_t V) {
    int64_t d = 0;
    for (int64_t i = 0; i < T_PROMPT * V; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* The prompt's logits with switch `name` at `off` (into lx), then at `on` (into lc; NULL: unset), and what the
 * context's counter `count` rose by in each run (rose[0], rose[1]); the number of logits that differ in their
 * bits, or −1 when a run failed. */
static int64_t switch_pair(ts_model *m, int64_t n_ctx, int64_t ub, const int32_t *ids, float *lx, float *lc,
                           int64_t V, const char *name, const char *off, const char *on,
                           int64_t (*count)(const ts_cuda_ctx *), int64_t rose[2]) {
    const ts_cuda_ctx *cx = m->backend_ctx[TS_BACKEND_CUDA];
    const int64_t c0 = count(cx);
    const int ra = prompt_with(m, n_ctx, ub, ids, lx, name, off);
    const int64_t c1 = count(cx);
    const int rb = prompt_with(m, n_ctx, ub, ids, lc, name, on);
    rose[0] = c1 - c0, rose[1] = count(cx) - c1;
    return ra || rb ? -1 : logits_differ(lx, lc, V);
}

/* Bounds of the CPU comparisons. The CUDA products that take x in fp16 (the tensor-core GEMV and GEMM,
 * ts_cuda_matmul_rounds_x: Q4_K, Q5_K, Q6_K, Q8_0, Q5_0 at every batch size) round each activation once by
 * up to 2^-12. With those products on, the CPU reference rounds the same operands the same way
 * (TURBOSPARK_CPU_ROUND_X, set in main). That is not enough for fp32 bounds: fp32 order (CPU vs GPU, one
 * micro-batch size vs another) tips the fp16 rounding of an element now and then, 2^-11 of it, and the
 * synthetic models' random routers flip experts at such changes (margins ~1e-5). Measured on the H200
 * (session 8): with the twin reference the worst model moves by 1.2e-2 of max|logit| (mid4e8_q8_0:
 * logits and micro-batches), the worst residual by 4e-3 of max|R|; against an fp32 reference mid4_q6_k's
 * residual moved by 2.9e-2. So the bounds are 2e-2 for those models. Models without those types, or a run
 * with TURBOSPARK_CUDA_GEMV_TC=0, keep the fp32 bounds, except that one micro-batch size against another
 * may differ by 5e-5: the attention's q, k and v are rounded to fp16 on every model (the 16-bit K/V
 * caches), and the decode and prefill attention kernels sum in different orders, which tips such a
 * rounding now and then (awkward_f16: 1.02e-5, session 14; 5.3e-6 with fp32 caches). Graph replay and
 * batched decode run the same kernels on the same rows and stay tight either way. */
static double g_resid_bound = 1e-4, g_logit_bound = 1e-4, g_ub_bound = 5e-5;

static void check_model(const char *name, const char *path) {
    char err[1024];
    ts_model *m = NULL, *m2 = NULL;
    printf("%s:\n", name);
    if (ts_model_load(path, &m, err, sizeof err) || ts_model_load(path, &m2, err, sizeof err)) {
        printf("  FAIL: load: %s\n", err);
        failures++;
        ts_model_free(m);
        return;
    }
    const ts_hparams *hp = &m->hp;
    const int64_t V = hp->n_vocab, W = (int64_t)hp->hc_count * hp->n_embd, n_ctx = T_PROMPT + N_DECODE + 8;
    int32_t ids[T_PROMPT];
    uint64_t rng = 99;
    for (int t = 0; t < T_PROMPT; t++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[t] = (int32_t)((rng >> 33) % (uint64_t)V);
        if (hp->ple_layer >= 0 && (t == 17 || t == 18 || t == 90)) ids[t] = (int32_t)hp->ple_eos;
    }
    float *lc = malloc((size_t)(T_PROMPT * V) * sizeof(float)),
          *lg = malloc((size_t)(T_PROMPT * V) * sizeof(float));
    float *lx = malloc((size_t)(T_PROMPT * V) * sizeof(float));

    /* 1 + 2: traces and logits, CPU vs CUDA, micro-batches of UB */
    trace_buf tc = {.W = W}, tg = {.W = W};
    ts_session *sc = session(m, n_ctx, UB, TS_BACKEND_CPU), *sg = session(m, n_ctx, UB, TS_BACKEND_CUDA);
    if (!sc || !sg) goto out;
    { /* 0: the backend allocated what the memory plan (src/model/memplan.h) computes on the host */
        ts_backend_info info;
        size_t trunk, table;
        ts_memplan_weights(m, &trunk, &table);
        CHECK(!ts_model_backend_info(m, TS_BACKEND_CUDA, &info, err, sizeof err), "backend info: %s", err);
        CHECK(info.weight_bytes == trunk && info.table_bytes == table &&
                  info.seq_state_bytes == ts_memplan_seq_bytes(hp, n_ctx, NULL) &&
                  info.work_bytes == ts_memplan_work_bytes(hp, UB, n_ctx) &&
                  ts_cuda_seq_bytes(ts_session_cuda_seq(sg)) == ts_memplan_seq_bytes(hp, n_ctx, NULL),
              "the CUDA plan (weights %" PRIu64 ", table %" PRIu64 ", state %" PRIu64 ", workspaces %" PRIu64
              ") is not the host plan's (%zu, %zu, %zu, %zu)",
              info.weight_bytes, info.table_bytes, info.seq_state_bytes, info.work_bytes, trunk, table,
              ts_memplan_seq_bytes(hp, n_ctx, NULL), ts_memplan_work_bytes(hp, UB, n_ctx));
    }
    ts_cpu_set_trace(record, &tc);
    eval(sc, ids, T_PROMPT, lc, true);
    ts_cpu_set_trace(NULL, NULL);
    ts_cuda_set_trace(m->backend_ctx[TS_BACKEND_CUDA], record, &tg);
    eval(sg, ids, T_PROMPT, lg, true);
    ts_cuda_set_trace(m->backend_ctx[TS_BACKEND_CUDA], NULL, NULL);
    CHECK(tc.n == tg.n, "%d CPU snapshots, %d CUDA snapshots", tc.n, tg.n);
    double worst = 0;
    for (int i = 0; i < tc.n && i < tg.n; i++) {
        double d = rel_diff(tg.R[i], tc.R[i], tc.rows[i] * W);
        if (!(d <= worst)) worst = d;
        if (!(d <= g_resid_bound)) {
            printf("  FAIL: residual after layer %d %s (snapshot %d, %" PRId64
                   " rows) differs by %.3g of max|R|\n",
                   tc.layer[i],
                   tc.layer[i] < 0         ? "embedding"
                   : tc.block[i]           ? "MoE"
                   : hp->kind[tc.layer[i]] ? "QSA"
                                           : "GDN",
                   i, tc.rows[i], d);
            failures++;
            break;
        }
    }
    printf("  residual: %d snapshots, worst %.2e of max|R|\n", tc.n, worst);
    double dl = rel_diff(lg, lc, T_PROMPT * V);
    double scale = 0;
    for (int64_t i = 0; i < T_PROMPT * V; i++) scale = fmax(scale, fabs(lc[i]));
    int decided = 0, same = 0;
    for (int t = 0; t < T_PROMPT; t++) {
        const float *r = lc + t * V;
        int32_t a = argmax(r, V);
        float second = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            if (v != a && r[v] > second) second = r[v];
        if ((r[a] - second) / scale > fmax(1e-3, g_logit_bound))
            decided++, same += argmax(lg + t * V, V) == a;
    }
    printf("  logits: max|d| = %.2e of max|logit| over %d positions; top-1 equal at %d of %d decided "
           "positions\n",
           dl, T_PROMPT, same, decided);
    CHECK(dl <= g_logit_bound, "logits differ by %.3g of max|logit|", dl);
    CHECK(same == decided, "top-1 differs at %d decided positions", decided - same);

    /* 3: chunked prefill on the GPU */
    for (int k = 0; k < 2; k++) {
        const int64_t ub = k ? 7 : 1;
        ts_session *s = session(m, n_ctx, ub, TS_BACKEND_CUDA);
        if (!s) continue;
        eval(s, ids, T_PROMPT, lx, true);
        double d = rel_diff(lx, lg, T_PROMPT * V);
        printf("  micro-batch %" PRId64 " vs %d: %.2e of max|logit|\n", ub, UB, d);
        CHECK(d <= g_ub_bound, "micro-batch %" PRId64 " differs by %.3g", ub, d);
        ts_session_free(s);
    }

    /* 4: graph replay vs eager (m2's context is created with graphs off) */
    {
        setenv("TURBOSPARK_CUDA_GRAPH", "0", 1);
        ts_session *se = session(m2, n_ctx, UB, TS_BACKEND_CUDA);
        unsetenv("TURBOSPARK_CUDA_GRAPH");
        ts_session *sr = session(m, n_ctx, UB, TS_BACKEND_CUDA);
        double gd = 0;
        if (se && sr && !eval(se, ids, 50, lx, false) && !eval(sr, ids, 50, lx + V, false)) {
            int32_t te = argmax(lx, V), tr = argmax(lx + V, V);
            for (int k = 0; k < N_DECODE && te == tr; k++) {
                if (eval(se, &te, 1, lx, false) || eval(sr, &tr, 1, lx + V, false)) break;
                double d = rel_diff(lx + V, lx, V);
                gd = d > gd ? d : gd;
                te = argmax(lx, V), tr = argmax(lx + V, V);
            }
            CHECK(te == tr, "graph replay chose another token than eager execution");
        }
        printf("  graph replay vs eager over %d decode steps: max|d| = %.2e of max|logit|\n", N_DECODE, gd);
        CHECK(gd <= 1e-6, "graph replay differs from eager execution by %.3g", gd);
        ts_session_free(se), ts_session_free(sr);
    }

    /* 4b–4d: launch cuts that keep every sum, each against the kernels it replaces, bit for bit, on the whole
       prompt (m2's context runs eagerly, so the switches are read at every layer; a model that takes none of
       them says so, and main checks that some model did):
       4b: the hyper-connection writes left to the fused reads that follow them (hc.cu: their split products
           make x from the write; the attention blocks' writes of up to 4 rows), micro-batches of 1 and 3;
       4c: the expert products of micro-batches of 16 and 5 rows as planned GEMVs (moe.cu: an expert's items
           as one chunk's tokens; TURBOSPARK_CUDA_MOE_PLANNED=2, from 2 rows) against one GEMV an item;
       4d: at one token the down launch computing h = silu(gate)·up while staging its x, and the MoE combine at
           its end (moe.cu; the MoE half's write is then a plain one, left to the next read), against the
           SwiGLU kernel (TURBOSPARK_CUDA_SWIGLU_STAGED=0) and against the combine in the write
           (TURBOSPARK_CUDA_MOE_DOWN_COMBINE=0);
       4e: at one row the QSA projections as one product of their joined rows (qsa.cu) against five
           (TURBOSPARK_CUDA_QSA_JOIN=0);
       4f: at one row the hyper-connection reads that make their write as one launch (hc.cu: the split
           product, a grid barrier, the up+mix blocks) against two (TURBOSPARK_CUDA_HC_ONE=0) */
    {
        ts_cuda_ctx *cx = m2->backend_ctx[TS_BACKEND_CUDA];
        for (int k = 0; k < 2; k++) {
            const int64_t ub = k ? 3 : 1;
            int64_t rose[2];
            const int64_t differ = switch_pair(m2, n_ctx, ub, ids, lx, lc, V, "TURBOSPARK_CUDA_HC_DEFER", "0",
                                               NULL, ts_cuda_hc_writes_deferred, rose);
            g_hc_deferred += rose[1];
            printf("  micro-batch %" PRId64 ", hyper-connection writes in the reads (%" PRId64
                   " of them) vs apart: %" PRId64 " logits differ\n",
                   ub, rose[1], differ);
            CHECK(differ == 0 && rose[0] == 0, "writes in the reads change %" PRId64 " logits", differ);
        }
        for (int k = 0; k < 2; k++) {
            const int64_t ub = k ? 5 : 16;
            int64_t rose[2];
            const int64_t differ = switch_pair(m2, n_ctx, ub, ids, lx, lc, V, "TURBOSPARK_CUDA_MOE_PLANNED",
                                               "0", "2", ts_cuda_moe_planned_products, rose);
            g_moe_planned += rose[1];
            printf("  micro-batch %" PRId64 ", planned expert products (%" PRId64
                   " of them) vs one GEMV an item: %" PRId64 " logits differ\n",
                   ub, rose[1], differ);
            CHECK(differ == 0, "planned expert products change %" PRId64 " logits", differ);
        }
        const int ra = prompt_with(m2, n_ctx, 1, ids, lx, "TURBOSPARK_CUDA_SWIGLU_STAGED", "0");
        int64_t deferred[2],
            staged[2]; /* writes left to reads (the MoE half's too with the combine), blocks */
        for (int v = 0; v < 2; v++) {
            const int64_t s0 = ts_cuda_moe_swiglu_staged(cx), d0 = ts_cuda_hc_writes_deferred(cx);
            const int rb =
                prompt_with(m2, n_ctx, 1, ids, lc, "TURBOSPARK_CUDA_MOE_DOWN_COMBINE", v ? NULL : "0");
            staged[v] = ts_cuda_moe_swiglu_staged(cx) - s0, deferred[v] = ts_cuda_hc_writes_deferred(cx) - d0;
            g_swiglu_staged += staged[v];
            const int64_t differ = logits_differ(lx, lc, V);
            printf("  micro-batch 1, the SwiGLU%s in the down launch (%" PRId64
                   " blocks) vs their own kernels: %" PRId64 " logits differ\n",
                   v ? " and the combine" : "", staged[v], differ);
            CHECK(ra == 0 && rb == 0 && differ == 0, "the down launch's SwiGLU%s changes %" PRId64 " logits",
                  v ? " and combine" : "", differ);
        }
        if (staged[1] > 0) {
            printf("  hyper-connection writes left to reads: %" PRId64
                   " without the combine in the down launch, %" PRId64 " with it\n",
                   deferred[0], deferred[1]);
            CHECK(deferred[1] > deferred[0], "the combine in the down launch left no MoE write to a read");
        }
        {
            int64_t rose[2];
            const int64_t differ = switch_pair(m2, n_ctx, 1, ids, lx, lc, V, "TURBOSPARK_CUDA_QSA_JOIN", "0",
                                               NULL, ts_cuda_qsa_joined, rose);
            const int64_t joined = rose[1];
            g_qsa_joined += joined;
            printf("  micro-batch 1, the QSA projections as one product (%" PRId64
                   " blocks) vs five: %" PRId64 " logits differ\n",
                   joined, differ);
            CHECK(differ == 0, "the joined QSA projections change %" PRId64 " logits", differ);
            CHECK(joined > 0 || !g_must_join, "no QSA block joined its projections");
        }
        {
            int64_t rose[2];
            const int64_t differ = switch_pair(m2, n_ctx, 1, ids, lx, lc, V, "TURBOSPARK_CUDA_HC_ONE", "0",
                                               "1", ts_cuda_hc_one_reads, rose);
            g_hc_one += rose[1];
            printf("  micro-batch 1, hyper-connection reads in one launch (%" PRId64
                   " of them, launch mode %d) vs two: %" PRId64 " logits differ\n",
                   rose[1], ts_cuda_hc_one_mode(), differ);
            CHECK(differ == 0 && rose[0] == 0, "the one-launch reads change %" PRId64 " logits", differ);
            /* a grid of one block a split: each block takes all its split's row groups, many up+mix blocks */
            const int64_t c0 = ts_cuda_hc_one_reads(cx);
            const char *one = getenv("TURBOSPARK_CUDA_HC_ONE");
            char *saved = one ? strdup(one) : NULL;
            setenv("TURBOSPARK_CUDA_HC_ONE", "1", 1);
            const int rs = prompt_with(m2, n_ctx, 1, ids, lc, "TURBOSPARK_CUDA_HC_ONE_BLOCKS", "1");
            if (saved)
                setenv("TURBOSPARK_CUDA_HC_ONE", saved, 1), free(saved);
            else
                unsetenv("TURBOSPARK_CUDA_HC_ONE");
            const int64_t small = ts_cuda_hc_one_reads(cx) - c0, sd = rs ? -1 : logits_differ(lx, lc, V);
            printf("  micro-batch 1, the same on the smallest grid (%" PRId64 " reads): %" PRId64
                   " logits differ\n",
                   small, sd);
            CHECK(sd == 0 && small == rose[1],
                  "the one-launch reads on the smallest grid change %" PRId64 " logits", sd);
        }
    }

    /* 5: batched decode vs alone */
    {
        ts_session *b[N_SEQ] = {0}, *a[N_SEQ] = {0};
        const int64_t plen[N_SEQ] = {5, 60, 23, 130};
        float *lb[N_SEQ], *la = malloc((size_t)V * sizeof(float));
        int32_t tok[N_SEQ];
        const int32_t *idp[N_SEQ];
        int64_t one[N_SEQ];
        double bd = 0;
        bool ok = la != NULL;
        for (int i = 0; i < N_SEQ; i++) {
            lb[i] = malloc((size_t)V * sizeof(float));
            b[i] = session(m, n_ctx, UB, TS_BACKEND_CUDA), a[i] = session(m, n_ctx, UB, TS_BACKEND_CUDA);
            ok = ok && lb[i] && b[i] && a[i];
            if (ok)
                ok = !eval(b[i], ids + i, plen[i], lb[i], false) && !eval(a[i], ids + i, plen[i], la, false);
            if (ok) tok[i] = argmax(lb[i], V), idp[i] = &tok[i], one[i] = 1;
        }
        for (int k = 0; ok && k < N_DECODE; k++) {
            int32_t alone[N_SEQ];
            for (int i = 0; ok && i < N_SEQ; i++) {
                ok = !eval(a[i], &tok[i], 1, la, false);
                alone[i] = argmax(la, V);
                memcpy(lx + i * V, la, (size_t)V * sizeof(float));
            }
            if (ok && ts_batch_eval(b, idp, one, lb, N_SEQ, err, sizeof err)) {
                printf("  FAIL: batch: %s\n", err);
                failures++, ok = false;
            }
            for (int i = 0; ok && i < N_SEQ; i++) {
                double d = rel_diff(lb[i], lx + i * V, V);
                bd = d > bd ? d : bd;
                CHECK(argmax(lb[i], V) == alone[i],
                      "sequence %d: batched decode chose another token at step %d", i, k);
                tok[i] = alone[i];
            }
        }
        printf("  %d sequences decoded together vs alone over %d steps: max|d| = %.2e of max|logit|\n", N_SEQ,
               N_DECODE, bd);
        CHECK(bd <= 1e-5, "batched decode differs from decoding alone by %.3g", bd);
        for (int i = 0; i < N_SEQ; i++) ts_session_free(b[i]), ts_session_free(a[i]), free(lb[i]);
        free(la);
    }

    /* 6: a session's state copied (ts_session_copy) and through a snapshot (ts_session_snapshot, then
     * ts_session_restore into a session of a larger context: another layout) continues as the original */
    {
        char e6[1024];
        ts_session *o = session(m, n_ctx, UB, TS_BACKEND_CUDA), *c = session(m, n_ctx, UB, TS_BACKEND_CUDA),
                   *r = session(m, n_ctx + 64, UB, TS_BACKEND_CUDA);
        ts_snapshot *snap = NULL;
        float *lo = malloc((size_t)3 * V * sizeof(float));
        double dc = 0, dr = 0;
        if (o && c && r && lo && !eval(o, ids, 150, lo, false)) {
            if (ts_session_copy(c, o, e6, sizeof e6) || ts_session_snapshot(o, &snap, e6, sizeof e6) ||
                ts_session_restore(r, snap, e6, sizeof e6)) {
                printf("  FAIL: copy or snapshot: %s\n", e6);
                failures++;
            } else {
                int32_t t = argmax(lo, V);
                for (int k = 0; k < N_DECODE; k++) {
                    if (eval(o, &t, 1, lo, false) || eval(c, &t, 1, lo + V, false) ||
                        eval(r, &t, 1, lo + 2 * V, false))
                        break;
                    dc = fmax(dc, rel_diff(lo + V, lo, V)), dr = fmax(dr, rel_diff(lo + 2 * V, lo, V));
                    t = argmax(lo, V);
                }
            }
        }
        printf("  copied / restored session vs the original over %d decode steps: max|d| = %.2e / %.2e of "
               "max|logit|\n",
               N_DECODE, dc, dr);
        CHECK(dc == 0, "a copied session differs from the original by %.3g", dc);
        CHECK(dr <= 1e-6, "a restored session differs from the original by %.3g", dr);
        ts_snapshot_free(snap);
        ts_session_free(o), ts_session_free(c), ts_session_free(r);
        free(lo);
    }

    /* 7: snapshots kept in GPU memory (a model whose CUDA backend reserved room for two): taken by a
     * device-to-device copy, encoded, restored, moved to pinned host memory and restored again, each
     * time the same bytes as an ordinary host snapshot; a third is refused until one is freed */
    {
        char e7[1024];
        ts_model *m3 = NULL;
        ts_session *o = session(m, n_ctx, UB, TS_BACKEND_CUDA), *g = NULL, *r = NULL;
        ts_snapshot *host = NULL, *dev = NULL, *dev2 = NULL, *dev3 = NULL, *back = NULL;
        void *want = NULL, *got = NULL;
        size_t want_n = 0, got_n = 0;
        float *lo = malloc((size_t)2 * V * sizeof(float));
        /* the size of a snapshot at this position, from a session of the first model */
        size_t room = 0;
        if (o && lo && !eval(o, ids, 150, lo, false)) room = 2 * ts_session_snapshot_bytes(o) + 512;
        ts_cuda_params cp = {.plan_ctx = n_ctx, .plan_seqs = 2, .max_rows = UB, .snapshot_bytes = room};
        ts_backend_info bi = {0};
        int rc =
            !room || ts_model_load(path, &m3, e7, sizeof e7) || ts_model_cuda_init(m3, &cp, e7, sizeof e7);
        if (!rc) g = session(m3, n_ctx, UB, TS_BACKEND_CUDA), r = session(m3, n_ctx, UB, TS_BACKEND_CUDA);
        rc = rc || !g || !r || eval(g, ids, 150, lo, false) || ts_session_snapshot(g, &host, e7, sizeof e7) ||
             ts_snapshot_encode(host, &want, &want_n, e7, sizeof e7);
        CHECK(!rc, "setting up the device snapshots: %s", e7);
        /* same bytes as the host snapshot: the device copy itself, then a session restored from it */
        bool same_dev = false, same_restored = false, same_spilled = false, refused = false, freed = false;
        if (!rc && ts_session_snapshot_fits_device(g) &&
            !ts_session_snapshot_device(g, &dev, e7, sizeof e7) &&
            ts_snapshot_where(dev) == TS_SNAPSHOT_DEVICE &&
            !ts_snapshot_encode(dev, &got, &got_n, e7, sizeof e7)) {
            same_dev = got_n == want_n && !memcmp(got, want, want_n);
            free(got), got = NULL;
            if (!ts_session_restore(r, dev, e7, sizeof e7) && !ts_session_snapshot(r, &back, e7, sizeof e7) &&
                !ts_snapshot_encode(back, &got, &got_n, e7, sizeof e7))
                same_restored = got_n == want_n && !memcmp(got, want, want_n);
            free(got), got = NULL;
            ts_snapshot_free(back), back = NULL;
            /* room for one more; then none */
            if (ts_session_snapshot_fits_device(g) && !ts_session_snapshot_device(g, &dev2, e7, sizeof e7)) {
                refused = !ts_session_snapshot_fits_device(g) &&
                          ts_session_snapshot_device(g, &dev3, e7, sizeof e7) == -1;
                ts_model_backend_info(m3, TS_BACKEND_CUDA, &bi, e7, sizeof e7);
                ts_snapshot_free(dev2), dev2 = NULL;
                freed = ts_session_snapshot_fits_device(g);
            }
            /* moved to pinned host memory: its bytes counted in host memory now, restored the same */
            const size_t total = ts_snapshot_bytes(dev) + ts_snapshot_device_bytes(dev);
            ts_session_reset(r);
            if (!ts_snapshot_to_host(dev, e7, sizeof e7) && ts_snapshot_where(dev) == TS_SNAPSHOT_HOST &&
                ts_snapshot_bytes(dev) == total && ts_snapshot_device_bytes(dev) == 0 &&
                !ts_session_restore(r, dev, e7, sizeof e7) && !ts_session_snapshot(r, &back, e7, sizeof e7) &&
                !ts_snapshot_encode(back, &got, &got_n, e7, sizeof e7))
                same_spilled = got_n == want_n && !memcmp(got, want, want_n);
            free(got), got = NULL;
        }
        printf(
            "  device snapshots: equal to a host snapshot %d, restored %d, spilled and restored %d; a third "
            "refused %d (%" PRIu64 " held, %" PRIu64 " of %" PRIu64 " bytes), room again once freed %d\n",
            same_dev, same_restored, same_spilled, refused, bi.snapshot_count, bi.snapshot_used_bytes,
            bi.snapshot_bytes, freed);
        CHECK(same_dev, "a snapshot kept in GPU memory encodes to other bytes than a host snapshot: %s", e7);
        CHECK(same_restored, "a session restored from GPU memory holds another state: %s", e7);
        CHECK(same_spilled, "a snapshot moved to pinned host memory restores another state: %s", e7);
        CHECK(refused && bi.snapshot_count == 2 && bi.snapshot_bytes == room,
              "the reservation for two snapshots did not refuse a third (%" PRIu64 " held)",
              bi.snapshot_count);
        CHECK(freed, "freeing a device snapshot did not give its room back");
        /* the restored session continues as the one it was taken from */
        double d = -1;
        if (!rc && same_spilled) {
            int32_t t = argmax(lo, V);
            d = 0;
            for (int k = 0; k < 8; k++) {
                if (eval(g, &t, 1, lo, false) || eval(r, &t, 1, lo + V, false)) break;
                d = fmax(d, rel_diff(lo + V, lo, V));
                t = argmax(lo, V);
            }
        }
        CHECK(d == 0, "a session restored from a spilled snapshot differs from the original by %.3g", d);
        ts_snapshot_free(host), ts_snapshot_free(dev), ts_snapshot_free(dev3), ts_snapshot_free(back);
        free(want), free(lo);
        ts_session_free(o), ts_session_free(g), ts_session_free(r);
        ts_model_free(m3);
    }

out:
    ts_session_free(sc), ts_session_free(sg);
    trace_free(&tc), trace_free(&tg);
    free(lc), free(lg), free(lx);
    ts_model_free(m), ts_model_free(m2);
}

/* ---- the models -------------------------------------------------------------------------------------- */

/* Types that differ from the model's: the routed experts', the QSA values' and the routers' (0: the model's). */
typedef struct other_types {
    uint32_t experts, v, router;
} other_types;

static int other_types_at(void *ctx, ts_tensor_spec *spec, uint32_t *type) {
    const other_types *o = ctx;
    if (o->experts && strstr(spec->name, "_exps") && spec->ne[0] % 256 == 0) *type = o->experts;
    if (o->v && strstr(spec->name, ".attn_v.") && spec->ne[0] % 256 == 0) *type = o->v;
    if (o->router && strstr(spec->name, ".ffn_gate_inp.weight")) *type = o->router;
    return 1;
}

/* The rest at `type`. */
static int write_model(const char *dir, const char *name, ts_hparams *hp, uint32_t type, other_types other,
                       ts_layout layout, char *path, size_t n) {
    char err[1024];
    snprintf(path, n, "%s/cuda_fwd_%s.gguf", dir, name);
    ts_synth_opts o = {.type = type, .seed = 7, .layout = layout};
    if (other.experts || other.v || other.router) o.edit = other_types_at, o.edit_ctx = &other;
    if (ts_synth_write(hp, &o, path, err, sizeof err)) {
        printf("%s: FAIL: synth: %s\n", name, err);
        failures++;
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("TS_TMP") ? getenv("TS_TMP") : "/tmp";
    const char *only = argc > 2 ? argv[2] : NULL; /* run only the models whose names contain it */
    char err[1024], path[4096];
    if (!ts_have_cuda()) {
        printf("skipped: this build has no CUDA backend\n");
        return 77;
    }
    /* With the tensor-core products on, the CPU reference rounds the same operands the same way
       (TURBOSPARK_CPU_ROUND_X, src/cpu/ops.c): the twin of every CUDA product at every batch size. */
    const char *tc_env = getenv("TURBOSPARK_CUDA_GEMV_TC");
    if (!(tc_env && tc_env[0] == '0')) setenv("TURBOSPARK_CPU_ROUND_X", "1", 1);
    /* The attention's 16-bit operands (q, k, v), which the CUDA backend always rounds: the CPU rounds
       them alike (TURBOSPARK_CPU_ROUND_ATT), so every model keeps its fp32-class bounds there. */
    setenv("TURBOSPARK_CPU_ROUND_ATT", "1", 1);
    {
        ts_hparams hp;
        if (ts_hparams_tiny(&hp, err, sizeof err)) return 1;
        ts_model *m;
        int rc = write_model(dir, "probe", &hp, 0, (other_types){0}, (ts_layout){0}, path, sizeof path) ||
                 ts_model_load(path, &m, err, sizeof err);
        ts_hparams_free(&hp);
        if (rc) return 1;
        ts_cuda_params cp = {.plan_ctx = 16, .plan_seqs = 1, .max_rows = 1};
        if (ts_model_cuda_init(m, &cp, err, sizeof err)) {
            printf("skipped: %s\n", err);
            ts_model_free(m);
            return 77;
        }
        ts_model_free(m);
    }
    struct {
        const char *name;
        uint32_t type;
        ts_layout layout;
        int shape; /* 0 tiny, 1 awkward, 2 mid (4 layers), 3 mid with 8 experts (4 used), 4 mid with 10 of its 64
                      experts used (the released k: more than the 8 x rows a launch stages whole, so the
                      down launch stages one row at a time and may make the SwiGLU, step 4d) */
        other_types other; /* the routed experts' and the QSA values' types where they differ */
        bool must_join;    /* step 4e must join its QSA projections (at one row, unless switched off) */
    } cases[] = {
        {"tiny_f32", TS_TYPE_F32, {0}, 0, {0}, true},
        {"tiny_q8_0_fused_split", TS_TYPE_Q8_0, {.ple_split = true, .fused_experts = true}, 0, {0}, false},
        {"awkward_f16", TS_TYPE_F16, {0}, 1, {0}, false},
        /* values in Q6_K as in the q4_k_m mix's QSA layers (their projection apart from the other four's),
         * routers in BF16 as the mix stores them (the fused router reads bf16 rows; tiny_f32's read fp32) */
        {"mid4k10_q4_k_v_q6_k", TS_TYPE_Q4_K, {0}, 4, {.v = TS_TYPE_Q6_K, .router = TS_TYPE_BF16}, true},
        {"mid4_q6_k", TS_TYPE_Q6_K, {.fused_experts = true}, 2, {0}, false},
        /* the low-bit types of the UD-style mixes, with fewer experts (synth quantizes on one core;
         * the lattice search of IQ2_XXS takes ~0.4 µs a weight, so only its experts are IQ2_XXS) */
        {"mid4e8_q2_k", TS_TYPE_Q2_K, {0}, 3, {0}, false},
        {"mid4e8_iq1_m", TS_TYPE_IQ1_M, {0}, 3, {0}, false},
        {"mid4e8_q8_0_iq2_xxs_experts_fused",
         TS_TYPE_Q8_0,
         {.fused_experts = true},
         3,
         {.experts = TS_TYPE_IQ2_XXS},
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (only && !strstr(cases[i].name, only)) continue;
        ts_hparams hp;
        int rc = cases[i].shape >= 2 ? ts_hparams_mid(&hp, err, sizeof err)
                                     : ts_hparams_tiny(&hp, err, sizeof err);
        if (!rc && cases[i].shape == 1) { /* sizes that are no power of two anywhere they may be */
            hp.hc_count = 3, hp.hc_rank = 12, hp.n_head = 6, hp.n_head_kv = 2, hp.head_dim = 24, hp.n_rot = 8;
            hp.idx_n_head = 3, hp.idx_head_dim = 20, hp.compress = 3, hp.idx_top_blocks = 5,
            hp.idx_top_k = 15;
            hp.ssm_nk = 1, hp.ssm_nv = 3, hp.ssm_dk = 12, hp.ssm_dv = 20, hp.n_expert = 6,
            hp.n_expert_used = 3;
            hp.n_ff_shexp = 40, hp.n_ff_exp[0] = 24, hp.ple_n = 4, hp.ple_p = 1, hp.ple_nh = 3, hp.ple_dh = 8;
            hp.ple_conv = 3, hp.rope_sections[0] = 2, hp.rope_sections[1] = 1, hp.rope_sections[2] = 1;
            ts_ple_multipliers(hp.n_vocab, hp.ple_n, 1234, 0, hp.ple_mult);
            rc = ts_hparams_set_layers(&hp, 5, 0, err, sizeof err);
        }
        if (!rc && cases[i].shape == 3) hp.n_expert = 8, hp.n_expert_used = 4;
        if (!rc && cases[i].shape == 4) hp.n_expert_used = 10;
        if (!rc && cases[i].shape >= 2) rc = ts_hparams_set_layers(&hp, 4, 0, err, sizeof err);
        if (rc) {
            printf("%s: FAIL: hparams: %s\n", cases[i].name, err);
            failures++;
            continue;
        }
        rc = write_model(dir, cases[i].name, &hp, cases[i].type, cases[i].other, cases[i].layout, path,
                         sizeof path);
        ts_hparams_free(&hp);
        const char *tc = getenv("TURBOSPARK_CUDA_GEMV_TC");
        const uint32_t ty = cases[i].type;
        const bool rounds =
            !(tc && tc[0] == '0') && (ty == TS_TYPE_Q4_K || ty == TS_TYPE_Q5_K || ty == TS_TYPE_Q6_K ||
                                      ty == TS_TYPE_Q8_0 || ty == TS_TYPE_Q5_0);
        g_resid_bound = rounds ? 2e-2 : 1e-4, g_logit_bound = rounds ? 2e-2 : 1e-4,
        g_ub_bound = rounds ? 2e-2 : 5e-5;
        if (rounds)
            printf("%s: x rounded to fp16 in its tensor-core products, and so in the CPU reference: CPU and "
                   "micro-batch bounds 2e-2\n",
                   cases[i].name);
        const char *qj = getenv("TURBOSPARK_CUDA_QSA_JOIN");
        g_must_join = cases[i].must_join && !(qj && qj[0] == '0');
        if (!rc) check_model(cases[i].name, path);
        remove(path);
    }
    const char *hd = getenv("TURBOSPARK_CUDA_HC_DEFER");
    if (argc <= 2 && !(hd && hd[0] == '0') && g_hc_deferred == 0) {
        printf("FAIL: no model left a hyper-connection write to its read: step 4b compared one path with "
               "itself\n");
        failures++;
    }
    const char *gr = getenv("TURBOSPARK_CUDA_MOE_GROUPED"), *gt = getenv("TURBOSPARK_CUDA_GEMV_TC"),
               *wa = getenv("TURBOSPARK_TC_WA");
    if (argc <= 2 && !(gr && gr[0] != '0') && !(gt && gt[0] == '0') && !(wa && wa[0] == '0') &&
        g_moe_planned == 0) {
        printf("FAIL: no model ran a planned expert product: step 4c compared one path with itself\n");
        failures++;
    }
    const char *ss = getenv("TURBOSPARK_CUDA_SWIGLU_STAGED"),
               *sm = getenv("TURBOSPARK_CUDA_MOE_SHARED_MERGE");
    if (argc <= 2 && !(ss && ss[0] == '0') && !(sm && sm[0] == '0') && !(gt && gt[0] == '0') &&
        g_swiglu_staged == 0) {
        printf("FAIL: no model made the SwiGLU in its down launch: step 4d compared one path with itself\n");
        failures++;
    }
    const char *qj = getenv("TURBOSPARK_CUDA_QSA_JOIN");
    if (argc <= 2 && !(qj && qj[0] == '0') && g_qsa_joined == 0) {
        printf("FAIL: no model joined its QSA projections: step 4e compared one path with itself\n");
        failures++;
    }
    const char *ho = getenv("TURBOSPARK_CUDA_HC_ONE");
    if (argc <= 2 && !(ho && ho[0] == '0') && !(hd && hd[0] == '0') && g_hc_one == 0) {
        printf("FAIL: no model read its hyper-connections in one launch: step 4f compared one path with "
               "itself\n");
        failures++;
    }
    printf(failures ? "test_cuda_forward: %d FAILED\n" : "test_cuda_forward: all passed\n", failures);
    return failures ? 1 : 0;
}
