/* PLE, the hashed n-gram embedding of one layer (docs/MODEL.md §5.4): token context with EOS segment
 * resets, the multiply-XOR hash into 16 prime-sized head tables, the row gather, the
 * stream-gated value and the dilated causal conv. Adds its output to the wide residual R. */
#include "cpu/layers.h"

#include <math.h>
#include <string.h>

/* The n-gram context of a token: ctx[0] = the token, ctx[s] = the token s back, or EOS once an
 * EOS has been passed (a token still sees an EOS right before it, but nothing before that EOS).
 * hist holds the n−1 ids before `ids` (oldest first); positions before the sequence read EOS. */
static void ngram_context(const ts_hparams *hp, const int32_t *hist, const int32_t *ids, int64_t t,
                          uint64_t *ctx) {
    const int64_t n1 = hp->ple_n - 1;
    ctx[0] = (uint64_t)ids[t];
    bool cut = false;
    for (int64_t s = 1; s <= n1; s++) {
        int64_t q = t - s; /* index into ids; negative reaches into hist */
        int32_t tok = q >= 0 ? ids[q] : hist[n1 + q];
        ctx[s] = cut ? hp->ple_eos : (uint64_t)tok;
        if (tok == (int32_t)hp->ple_eos) cut = true;
    }
}

/* Table row of head h for a context: (XOR_{j<k} ctx_j·m_j) mod S_h + O_h, k = the head's order. */
static uint64_t ngram_row(const ts_hparams *hp, const uint64_t *ctx, uint32_t h) {
    uint32_t order = 2 + h / hp->ple_p;
    uint64_t mixed = 0;
    for (uint32_t j = 0; j < order; j++) mixed ^= ctx[j] * hp->ple_mult[j];
    return mixed % hp->ple_sizes[h] + hp->ple_offsets[h];
}

/* e[NH·dh]: the concatenated head rows for one token. */
static void gather(const ts_model *m, const uint64_t *ctx, float *e) {
    const ts_hparams *hp = &m->hp;
    for (uint32_t h = 0; h < hp->ple_nh; h++) {
        uint64_t row = ngram_row(hp, ctx, h);
        if (m->ple_table)
            ts_cpu_get_row(m->ple_table, (int64_t)row, e + (size_t)h * hp->ple_dh);
        else
            ts_cpu_get_row(m->ple_head_tables[h], (int64_t)(row - hp->ple_offsets[h]),
                           e + (size_t)h * hp->ple_dh);
    }
}

/* The n-gram rows of one sequence's T tokens into emb (from row r0), then its last n − 1 ids carried. */
static void ple_gather_seq(ts_cpu_work *w, ts_seq_state *st, const int32_t *ids, int64_t r0, int64_t T) {
    const ts_model *m = w->m;
    const ts_hparams *hp = &m->hp;
    const int64_t E = (int64_t)hp->ple_nh * hp->ple_dh, n1 = hp->ple_n - 1;
    uint64_t ctx[TS_MAX_NGRAM];
    for (int64_t t = 0; t < T; t++) {
        ngram_context(hp, st->ple_ctx, ids, t, ctx);
        gather(m, ctx, w->emb + (r0 + t) * E);
    }
    int32_t ids_all[2 * TS_MAX_NGRAM];
    int64_t keep = T < n1 ? T : n1;
    memcpy(ids_all, st->ple_ctx, (size_t)n1 * sizeof(int32_t));
    memmove(ids_all, ids_all + keep, (size_t)(n1 - keep) * sizeof(int32_t));
    memcpy(ids_all + (n1 - keep), ids + (T - keep), (size_t)keep * sizeof(int32_t));
    memcpy(st->ple_ctx, ids_all, (size_t)n1 * sizeof(int32_t));
}

/* The n-gram gather and the conv per sequence, the rest over all N rows of the micro-batch. */
void ts_cpu_ple(ts_cpu_work *w, const ts_layer_weights *L, const ts_cpu_batch *b, float *R) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, Kp = hp->ple_conv, dil = hp->ple_n, N = b->N;

    for (int64_t s = 0, r0 = 0; s < b->n_seq; r0 += b->T[s++])
        ple_gather_seq(w, b->st[s], b->ids[s], r0, b->T[s]);
    /* keys per stream K = grouped_rmsnorm(ple_key·e), value Vp = ple_value·e, query = grouped_rmsnorm(R) */
    ts_cpu_matmul(L->ple_key, 0, W, w->emb, N, w->mix);
    ts_cpu_matmul(L->ple_value, 0, H, w->emb, N, w->pv);
    const float *gk = ts_cpu_f32(L->ple_norm_key, w->vec);
    for (int64_t t = 0; t < N; t++) ts_cpu_rmsnorm(w->mix + t * W, gk, W, H, hp->eps, w->mix + t * W);
    const float *gq = ts_cpu_f32(L->ple_norm_query, w->vec);
    for (int64_t t = 0; t < N; t++) ts_cpu_rmsnorm(R + t * W, gq, W, H, hp->eps, w->xn + t * W);

    /* G_s = σ(signed_sqrt(K_s·Q_s / √H)) · Vp, written into xn (the query is no longer needed) */
    float *G = w->xn;
    for (int64_t t = 0; t < N; t++)
        for (int64_t c = 0; c < C; c++) {
            const float *K = w->mix + t * W + c * H;
            float *Gs = G + t * W + c * H;
            float a = 0;
            for (int64_t i = 0; i < H; i++) a += K[i] * Gs[i];
            a /= sqrtf((float)H);
            float sa = (a > 0) - (a < 0);
            a = sa * sqrtf(fmaxf(fabsf(a), 1e-6f)); /* sign(0) = 0 → gate σ(0) = ½ */
            float gate = ts_sigmoid(a);
            for (int64_t i = 0; i < H; i++) Gs[i] = gate * w->pv[t * H + i];
        }

    /* the conv input grouped_rmsnorm(G) (MODEL.md's N), into pn */
    const float *gc = ts_cpu_f32(L->ple_norm_conv, w->vec);
    for (int64_t t = 0; t < N; t++) ts_cpu_rmsnorm(G + t * W, gc, W, H, hp->eps, w->pn + t * W);

    /* out = G + silu(Σ_k w[c,k]·pn_{t−(Kp−1−k)·n}[c]), the conv per sequence (its history: its last
     * (Kp−1)·n rows of pn), written into mix (the keys are no longer needed), then added to R */
    const float *cw = ts_cpu_f32(L->ple_conv1d, w->vec2); /* [W][Kp] */
    for (int64_t s = 0, r0 = 0; s < b->n_seq; r0 += b->T[s++])
        ts_cpu_conv_silu(w->hist, b->st[s]->ple_conv, cw, Kp, dil, W, w->pn + r0 * W, b->T[s],
                         w->mix + r0 * W);
    for (int64_t i = 0; i < N * W; i++) R[i] += G[i] + w->mix[i];
}
