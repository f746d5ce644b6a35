/* The qwen4exp forward on the CPU, top to bottom (docs/MODEL.md §5.1, §5.3):
 *
 *   R = [embed(id)] × C
 *   for each layer l:
 *       if l is the PLE layer:  R += PLE(R, ids)
 *       x, inj = HC_attn(R);  y = GDN(x) or QSA(x);  R_s += y·inj_s
 *       x, inj = HC_ffn(R);   y = MoE(x);             R_s += y·inj_s
 *   logits = output · FinalMixer(R)          (no final RMSNorm)
 */
#include "cpu/forward.h"

#include "common/error.h"
#include "cpu/layers.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-sequence state -------------------------------------------------------------------- */

static float *state_alloc(ts_seq_state *st, size_t n) {
    st->bytes += n * sizeof(float);
    return calloc(n ? n : 1, sizeof(float));
}

int ts_seq_state_init(ts_seq_state *st, const ts_model *m, int64_t n_ctx, char *err, size_t errlen) {
    const ts_hparams *hp = &m->hp;
    memset(st, 0, sizeof *st);
    if (n_ctx < 1)
        return ts_errf(err, errlen, "the context must hold at least one token (got %" PRId64 ")", n_ctx);
    st->n_ctx = n_ctx;
    st->n_layer = hp->n_layer;
    const int64_t L = hp->n_layer, kvw = ts_qsa_kv_width(hp);
    st->k = calloc(L, sizeof *st->k), st->v = calloc(L, sizeof *st->v);
    st->idx_raw = calloc(L, sizeof *st->idx_raw), st->idx_blk = calloc(L, sizeof *st->idx_blk);
    st->conv = calloc(L, sizeof *st->conv), st->S = calloc(L, sizeof *st->S);
    bool ok = st->k && st->v && st->idx_raw && st->idx_blk && st->conv && st->S;
    for (int64_t l = 0; ok && l < L; l++) {
        if (hp->kind[l] == TS_LAYER_QSA) {
            ok =
                (st->k[l] = state_alloc(st, (size_t)(n_ctx * kvw))) &&
                (st->v[l] = state_alloc(st, (size_t)(n_ctx * kvw))) &&
                (st->idx_raw[l] = state_alloc(st, (size_t)(n_ctx * hp->idx_head_dim))) &&
                (st->idx_blk[l] = state_alloc(st, (size_t)(ts_qsa_block_rows(hp, n_ctx) * hp->idx_head_dim)));
        } else {
            ok = (st->conv[l] = state_alloc(st, (size_t)ts_gdn_conv_floats(hp))) &&
                 (st->S[l] = state_alloc(st, (size_t)ts_gdn_state_floats(hp)));
        }
    }
    if (ok && hp->ple_layer >= 0)
        ok = (st->ple_conv = state_alloc(st, (size_t)ts_ple_conv_floats(hp))) != NULL;
    if (!ok) {
        size_t asked = st->bytes;
        ts_seq_state_free(st);
        return ts_errf(err, errlen,
                       "out of memory allocating the sequence state for %" PRId64 " tokens (%.1f MiB)", n_ctx,
                       asked / 1048576.0);
    }
    ts_seq_state_reset(st, m);
    return 0;
}

void ts_seq_state_reset(ts_seq_state *st, const ts_model *m) {
    const ts_hparams *hp = &m->hp;
    st->pos = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (st->conv[l]) memset(st->conv[l], 0, (size_t)ts_gdn_conv_floats(hp) * sizeof(float));
        if (st->S[l]) memset(st->S[l], 0, (size_t)ts_gdn_state_floats(hp) * sizeof(float));
    }
    if (st->ple_conv) memset(st->ple_conv, 0, (size_t)ts_ple_conv_floats(hp) * sizeof(float));
    for (int i = 0; i < TS_MAX_NGRAM; i++) st->ple_ctx[i] = (int32_t)hp->ple_eos; /* context starts as EOS */
    /* K/V and indexer caches are position-indexed: entries ≥ pos are never read */
}

void ts_seq_state_copy(ts_seq_state *dst, const ts_seq_state *src, const ts_model *m) {
    const ts_hparams *hp = &m->hp;
    const int64_t kvw = ts_qsa_kv_width(hp);
    const int64_t P = src->pos, blocks = ts_qsa_block_rows(hp, src->pos); /* rows written so far */
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (src->k[l]) {
            memcpy(dst->k[l], src->k[l], (size_t)(P * kvw) * sizeof(float));
            memcpy(dst->v[l], src->v[l], (size_t)(P * kvw) * sizeof(float));
            memcpy(dst->idx_raw[l], src->idx_raw[l], (size_t)(P * hp->idx_head_dim) * sizeof(float));
            memcpy(dst->idx_blk[l], src->idx_blk[l], (size_t)(blocks * hp->idx_head_dim) * sizeof(float));
        }
        if (src->conv[l]) memcpy(dst->conv[l], src->conv[l], (size_t)ts_gdn_conv_floats(hp) * sizeof(float));
        if (src->S[l]) memcpy(dst->S[l], src->S[l], (size_t)ts_gdn_state_floats(hp) * sizeof(float));
    }
    if (src->ple_conv) memcpy(dst->ple_conv, src->ple_conv, (size_t)ts_ple_conv_floats(hp) * sizeof(float));
    memcpy(dst->ple_ctx, src->ple_ctx, sizeof dst->ple_ctx);
    dst->pos = src->pos;
}

void ts_seq_state_regions(ts_seq_state *st, const ts_model *m, int64_t pos, ts_seq_region_fn fn, void *ctx) {
    const ts_hparams *hp = &m->hp;
    const int64_t kvw = ts_qsa_kv_width(hp), blocks = ts_qsa_block_rows(hp, pos);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (st->k[l]) {
            fn(ctx, st->k[l], (size_t)(pos * kvw));
            fn(ctx, st->v[l], (size_t)(pos * kvw));
            fn(ctx, st->idx_raw[l], (size_t)(pos * hp->idx_head_dim));
            fn(ctx, st->idx_blk[l], (size_t)(blocks * hp->idx_head_dim));
        }
        if (st->conv[l]) fn(ctx, st->conv[l], (size_t)ts_gdn_conv_floats(hp));
        if (st->S[l]) fn(ctx, st->S[l], (size_t)ts_gdn_state_floats(hp));
    }
    if (st->ple_conv) fn(ctx, st->ple_conv, (size_t)ts_ple_conv_floats(hp));
}

void ts_seq_state_free(ts_seq_state *st) {
    for (int64_t l = 0; l < st->n_layer; l++) {
        if (st->k) free(st->k[l]);
        if (st->v) free(st->v[l]);
        if (st->idx_raw) free(st->idx_raw[l]);
        if (st->idx_blk) free(st->idx_blk[l]);
        if (st->conv) free(st->conv[l]);
        if (st->S) free(st->S[l]);
    }
    free(st->k), free(st->v), free(st->idx_raw), free(st->idx_blk), free(st->conv), free(st->S),
        free(st->ple_conv);
    memset(st, 0, sizeof *st);
}

/* ---- workspaces ---------------------------------------------------------------------------- */

static float *work_alloc(ts_cpu_work *w, int64_t n) {
    w->bytes += (size_t)n * sizeof(float);
    return malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* Every buffer a workspace allocates, for the allocation check and for freeing (one list). */
enum { N_WORK_BUFFERS = 34 };
static void work_buffers(const ts_cpu_work *w, void *all[N_WORK_BUFFERS]) {
    void *const b[N_WORK_BUFFERS] = {w->R,     w->xn,      w->mix,          w->lr,    w->x,       w->y,
                                     w->inj,   w->vec,     w->vec2,         w->qkv,   w->u,       w->z,
                                     w->o,     w->ba,      w->qg,           w->kv,    w->ik,      w->iq,
                                     w->att,   w->scores,  w->probs,        w->order, w->allowed, w->router,
                                     w->moe_w, w->moe_idx, w->xg,           w->gu,    w->eo,      w->emb,
                                     w->pv,    w->pn,      (void *)w->hist, w->lg};
    memcpy(all, b, sizeof b);
}

ts_cpu_work *ts_cpu_work_new(const ts_model *m, int64_t ubatch, int64_t n_ctx, char *err, size_t errlen) {
    const ts_hparams *hp = &m->hp;
    if (ubatch < 1 || n_ctx < 1) {
        ts_errf(err, errlen, "micro-batch and context must be at least 1 (got %" PRId64 " and %" PRId64 ")",
                ubatch, n_ctx);
        return NULL;
    }
    if (hp->ssm_dk > 512 || hp->ssm_dv > 512 || hp->n_expert_used > 64) {
        ts_errf(err, errlen,
                "this CPU backend supports GDN head dims up to 512 and up to 64 experts per token");
        return NULL;
    }
    ts_cpu_work *w = calloc(1, sizeof *w);
    if (!w) {
        ts_errf(err, errlen, "out of memory");
        return NULL;
    }
    const int64_t T = ubatch, H = hp->n_embd, C = hp->hc_count, W = C * H;
    const int64_t cd = ts_gdn_conv_dim(hp);
    const int64_t vdim = (int64_t)hp->ssm_nv * hp->ssm_dv, nh = hp->n_head, hd = hp->head_dim;
    const int64_t kvw = (int64_t)hp->n_head_kv * hd, E = hp->n_expert, NE = (int64_t)hp->ple_nh * hp->ple_dh;
    int64_t Fmax = hp->n_ff_shexp;
    for (uint32_t l = 0; l < hp->n_block; l++) Fmax = max64(Fmax, hp->n_ff_exp[l]);
    const int64_t ple_hist = hp->ple_layer >= 0 ? (int64_t)(hp->ple_conv - 1) * hp->ple_n : 0;
    const int64_t conv_hist = max64(hp->ssm_conv - 1, ple_hist);
    /* the largest weight vector dequantized at once: conv weights, norms, or the packed GDN/QSA vectors */
    const int64_t vec = max64(max64(W * max64(hp->ple_conv, 1), cd * hp->ssm_conv),
                              max64(2 * hd + hp->idx_head_dim, max64(H, 2 * hp->ssm_nv + hp->ssm_dv)));
    w->m = m, w->ubatch = ubatch, w->n_ctx = n_ctx;
    const char *cf = getenv("TURBOSPARK_CHECK_FINITE");
    w->check_finite = cf && *cf && strcmp(cf, "0") != 0;
    w->R = work_alloc(w, T * W), w->xn = work_alloc(w, T * W), w->mix = work_alloc(w, T * W);
    w->lr = work_alloc(w, T * hp->hc_rank), w->x = work_alloc(w, T * H), w->y = work_alloc(w, T * H);
    w->inj = work_alloc(w, T * C), w->vec = work_alloc(w, vec), w->vec2 = work_alloc(w, vec);
    w->qkv = work_alloc(w, T * cd), w->u = work_alloc(w, T * cd);
    w->z = work_alloc(w, T * vdim), w->o = work_alloc(w, T * vdim), w->ba = work_alloc(w, 2 * T * hp->ssm_nv);
    w->qg = work_alloc(w, T * nh * 2 * hd), w->kv = work_alloc(w, 2 * T * kvw);
    w->ik = work_alloc(w, T * hp->idx_head_dim);
    w->iq = work_alloc(w, T * (int64_t)hp->idx_n_head * hp->idx_head_dim),
    w->att = work_alloc(w, T * nh * hd);
    w->scores = work_alloc(w, n_ctx), w->probs = work_alloc(w, n_ctx);
    w->order = malloc((size_t)n_ctx * sizeof *w->order),
    w->allowed = malloc((size_t)n_ctx * sizeof *w->allowed);
    w->bytes += 2 * (size_t)n_ctx * sizeof(int64_t);
    const int64_t G = T < MOE_GROUP ? T : MOE_GROUP, Gk = G * hp->n_expert_used;
    w->router = work_alloc(w, G * E), w->moe_w = work_alloc(w, Gk), w->xg = work_alloc(w, G * H);
    w->moe_idx = malloc((size_t)(3 * Gk + E + 1) * sizeof *w->moe_idx);
    w->bytes += (size_t)(3 * Gk + E + 1) * sizeof *w->moe_idx;
    w->gu = work_alloc(w, 2 * Fmax * T), w->eo = work_alloc(w, Gk * H);
    w->emb = work_alloc(w, T * NE), w->pv = work_alloc(w, T * H), w->pn = work_alloc(w, T * W);
    w->hist = malloc((size_t)(conv_hist + T) * sizeof *w->hist);
    w->bytes += (size_t)(conv_hist + T) * sizeof *w->hist;
    w->n_lg = T * (hp->n_vocab < LOGIT_SLICE ? hp->n_vocab : LOGIT_SLICE), w->lg = work_alloc(w, w->n_lg);
    void *all[N_WORK_BUFFERS];
    work_buffers(w, all);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!all[i]) {
            ts_errf(err, errlen,
                    "out of memory allocating CPU workspaces (%.1f MiB for micro-batches of %" PRId64 ")",
                    w->bytes / 1048576.0, ubatch);
            ts_cpu_work_free(w);
            return NULL;
        }
    return w;
}

void ts_cpu_work_free(ts_cpu_work *w) {
    if (!w) return;
    void *all[N_WORK_BUFFERS];
    work_buffers(w, all);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(w);
}

size_t ts_cpu_work_bytes(const ts_cpu_work *w) {
    return w->bytes;
}

/* ---- the forward --------------------------------------------------------------------------- */

static ts_cpu_trace_fn g_trace;
static void *g_trace_ctx;

void ts_cpu_set_trace(ts_cpu_trace_fn fn, void *ctx) {
    g_trace = fn, g_trace_ctx = ctx;
}

/* After the embedding (layer −1) and after each block of each layer: the trace hook, and with
 * TURBOSPARK_CHECK_FINITE the debug check that finds where a NaN or infinity first appears. */
static void trace(ts_cpu_work *w, int layer, int block, const float *R, int64_t T) {
    if (g_trace) g_trace(g_trace_ctx, layer, block, R, T);
    if (!w->check_finite || w->bad_layer != -2) return;
    const int64_t n = T * (int64_t)w->m->hp.hc_count * w->m->hp.n_embd;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(R[i])) {
            w->bad_layer = layer, w->bad_block = block;
            return;
        }
}

static int finite_error(const ts_cpu_work *w, char *err, size_t errlen) {
    if (w->bad_layer == -2) return 0;
    const ts_hparams *hp = &w->m->hp;
    if (w->bad_layer < 0)
        return ts_errf(err, errlen,
                       "a non-finite value (NaN or infinity) first appears in the token embedding "
                       "(token_embd.weight)");
    const char *mixer = hp->kind[w->bad_layer] == TS_LAYER_GDN ? "GDN" : "QSA";
    return ts_errf(err, errlen,
                   "a non-finite value (NaN or infinity) first appears in layer %d, after its %s block "
                   "(blk.%d.%s)",
                   w->bad_layer, w->bad_block == 0 ? mixer : "MoE", w->bad_layer,
                   w->bad_block == 0 ? (w->bad_layer == hp->ple_layer ? "ple_* / hc_attn / attn_* / ssm_*"
                                                                      : "hc_attn / attn_* / ssm_*")
                                     : "hc_ffn / ffn_*");
}

/* Refuses, before anything runs, a micro-batch the workspaces or a state cannot take. */
static int check_batch(const ts_cpu_work *w, const ts_cpu_batch *b, char *err, size_t errlen) {
    const ts_hparams *hp = &w->m->hp;
    int64_t N = 0;
    for (int s = 0; s < b->n_seq; s++) {
        const ts_seq_state *st = b->st[s];
        const int64_t T = b->T[s], n_ctx = st->n_ctx < w->n_ctx ? st->n_ctx : w->n_ctx;
        char pre[48] = "";
        if (b->n_seq > 1) snprintf(pre, sizeof pre, "batch sequence %d: ", s);
        if (T < 1 || T > w->ubatch - N)
            return ts_errf(err, errlen,
                           "%sa micro-batch holds 1 to %" PRId64 " tokens in all (got %" PRId64 "%s)", pre,
                           w->ubatch, N + T, T < 1 ? " with an empty sequence" : "");
        N += T;
        if (st->pos + T > n_ctx)
            return ts_errf(err, errlen,
                           "%sthe sequence would reach %" PRId64 " tokens, past the context of %" PRId64
                           "; start a new sequence or use a larger context",
                           pre, st->pos + T, n_ctx);
        for (int64_t t = 0; t < T; t++)
            if (b->ids[s][t] < 0 || (uint32_t)b->ids[s][t] >= hp->n_vocab)
                return ts_errf(err, errlen,
                               "%stoken id %" PRId32 " at position %" PRId64
                               " is outside the vocabulary (0 to %" PRIu32 ")",
                               pre, b->ids[s][t], st->pos + t, hp->n_vocab - 1);
        for (int q = 0; q < s; q++)
            if (b->st[q] == st)
                return ts_errf(err, errlen, "%sthe same sequence as batch sequence %d", pre, q);
    }
    return 0;
}

/* Embedding and every layer over the micro-batch's rows (left in w->R); advances the states. */
static void forward_rows(ts_cpu_work *w, const ts_cpu_batch *b) {
    const ts_model *m = w->m;
    const ts_hparams *hp = &m->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, N = b->N;

    /* the embedding, replicated into the C streams */
    for (int64_t s = 0, r = 0; s < b->n_seq; s++)
        for (int64_t t = 0; t < b->T[s]; t++, r++) {
            ts_cpu_get_row(m->token_embd, b->ids[s][t], w->R + r * W);
            for (int64_t c = 1; c < C; c++)
                memcpy(w->R + r * W + c * H, w->R + r * W, (size_t)H * sizeof(float));
        }
    w->bad_layer = -2;
    w->batch = b;
    trace(w, -1, 0, w->R, N);

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const ts_layer_weights *L = &m->layers[l];
        if ((int32_t)l == hp->ple_layer) ts_cpu_ple(w, L, b, w->R);

        ts_cpu_hc_read(w, &L->hc_attn, w->R, N, w->x, w->inj);
        if (L->kind == TS_LAYER_GDN)
            ts_cpu_gdn(w, L, l, b, w->x, w->y);
        else
            ts_cpu_qsa(w, L, l, b, w->x, w->y);
        ts_cpu_hc_write(hp, w->R, w->y, w->inj, N);
        trace(w, (int)l, 0, w->R, N);

        ts_cpu_hc_read(w, &L->hc_ffn, w->R, N, w->x, w->inj);
        ts_cpu_moe(w, L, l, w->x, N, w->y);
        ts_cpu_hc_write(hp, w->R, w->y, w->inj, N);
        trace(w, (int)l, 1, w->R, N);
    }
    w->batch = NULL;
    for (int s = 0; s < b->n_seq; s++) b->st[s]->pos += b->T[s];
}

/* The final mixer and the output over n rows of the wide residual: logits[n × V]. */
static void output_rows(ts_cpu_work *w, const float *R, int64_t n, float *logits) {
    ts_cpu_hc_read(w, &w->m->output_hc, R, n, w->x, NULL);
    ts_cpu_matmul(w->m->output, 0, w->m->hp.n_vocab, w->x, n, logits);
}

int ts_cpu_forward(ts_cpu_work *w, ts_seq_state *st, const int32_t *ids, int64_t T, float *logits,
                   bool all_logits, char *err, size_t errlen) {
    const ts_cpu_batch b = {.n_seq = 1, .N = T, .st = &st, .ids = &ids, .T = &T};
    if (check_batch(w, &b, err, errlen)) return -1;
    forward_rows(w, &b);
    if (finite_error(w, err, errlen)) return -1;

    if (!logits) return 0;
    const int64_t first = all_logits ? 0 : T - 1;
    output_rows(w, w->R + first * (int64_t)w->m->hp.hc_count * w->m->hp.n_embd, T - first, logits);
    return 0;
}

int ts_cpu_forward_batch(ts_cpu_work *w, ts_seq_state *const *st, const int32_t *const *ids, const int64_t *T,
                         int n_seq, float *const *logits, char *err, size_t errlen) {
    const ts_model *m = w->m;
    const int64_t W = (int64_t)m->hp.hc_count * m->hp.n_embd, V = m->hp.n_vocab;
    if (n_seq < 1) return ts_errf(err, errlen, "a micro-batch needs at least one sequence (got %d)", n_seq);
    ts_cpu_batch b = {.n_seq = n_seq, .st = st, .ids = ids, .T = T};
    for (int s = 0; s < n_seq; s++) b.N += T[s];
    if (check_batch(w, &b, err, errlen)) return -1;
    forward_rows(w, &b);
    if (finite_error(w, err, errlen)) return -1;

    /* the last row of every sequence that wants logits, moved up to rows 0 … n−1 of R (in order:
     * a row never moves down), then the final mixer and the output over those rows together */
    int64_t n = 0, r = 0;
    for (int s = 0; s < n_seq; r += T[s++])
        if (logits && logits[s])
            memmove(w->R + n++ * W, w->R + (r + T[s] - 1) * W, (size_t)W * sizeof(float));
    if (n == 1) /* straight into the one logits row, as ts_cpu_forward */
        for (int s = 0; s < n_seq; s++)
            if (logits[s]) output_rows(w, w->R, 1, logits[s]);
    if (n <= 1) return 0;
    /* n rows of V logits, a slice of the vocabulary at a time through w->lg (whole 16-row groups, so
     * every row is computed as in one product over all V) */
    ts_cpu_hc_read(w, &m->output_hc, w->R, n, w->x, NULL);
    int64_t cols = w->n_lg / n / 16 * 16;
    if (cols < 16) cols = 16; /* n ≤ ubatch and n_lg ≥ 16·ubatch unless V < 16 */
    for (int64_t v0 = 0; v0 < V; v0 += cols) {
        const int64_t nv = V - v0 < cols ? V - v0 : cols;
        ts_cpu_matmul(m->output, v0, nv, w->x, n, w->lg);
        int64_t k = 0;
        for (int s = 0; s < n_seq; s++)
            if (logits[s]) memcpy(logits[s] + v0, w->lg + k++ * nv, (size_t)nv * sizeof(float));
    }
    return 0;
}
