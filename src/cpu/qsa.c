/* Qwen Sparse Attention (docs/MODEL.md §5.6–5.7): gated GQA attention whose keys are chosen per query by a
 * block indexer.
 *
 * Indexer: raw keys are cached per token; when a block of B tokens completes, its key
 * rope(rmsnorm(mean of the B raw keys), 4b) is computed once and cached. A query at p scores the
 * nb = ⌊(p+1)/B⌋ complete blocks with Σ_heads ReLU(q_h·K_b)/√di, keeps the top Kb blocks, and
 * always keeps the tail (the 0..B−1 tokens after the last complete block).
 * Tie rule (reference order is unspecified): higher score first, then LOWER block index.
 * While nb ≤ Kb every block is kept and the layer is dense causal attention.
 * TURBOSPARK_QSA_FORCE_DENSE=1 keeps dense attention beyond the budget (a diagnostic).
 * With TURBOSPARK_CPU_ROUND_ATT or _ROUND_X (the CUDA twin), q of each head and k, v of each kv head
 * are kept as the CUDA backend keeps them: fp16 at the power-of-two scale of their max (round_head). */
#include "cpu/layers.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool force_dense(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("TURBOSPARK_QSA_FORCE_DENSE");
        cached = e && *e && strcmp(e, "0") != 0;
    }
    return cached;
}

/* Orders block indices by (score desc, index asc); ctx is the score array (glibc qsort_r). */
static int by_score(const void *a, const void *b, void *ctx) {
    const float *scores = ctx;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    float si = scores[i], sj = scores[j];
    if (si != sj) return si > sj ? -1 : 1;
    return i < j ? -1 : i > j;
}

static int by_index(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return i < j ? -1 : i > j;
}

/* Fills allowed[] with the positions query p attends to (ascending); returns their count. A choice
 * (more complete blocks than the budget) goes to the recorder (ts_cpu_choice) when one listens; seq:
 * the sequence's index in its micro-batch. */
static int64_t select_positions(ts_cpu_work *w, const ts_seq_state *st, uint32_t l, int seq, const float *iq,
                                int64_t p) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t B = hp->compress, nb = (p + 1) / B, Kb = hp->idx_top_blocks, ni = hp->idx_n_head,
                  di = hp->idx_head_dim;
    int64_t n = 0;
    if (nb <= Kb || force_dense()) {
        for (int64_t t = 0; t <= p; t++) w->allowed[n++] = t;
        return n;
    }
    for (int64_t b = 0; b < nb; b++) {
        const float *K = st->idx_blk[l] + b * di;
        float s = 0;
        for (int64_t h = 0; h < ni; h++) {
            float d = 0;
            for (int64_t i = 0; i < di; i++) d += iq[h * di + i] * K[i];
            s += d > 0 ? d : 0; /* ReLU per head, then the sum */
        }
        w->scores[b] = s / sqrtf((float)di) + 0.0f; /* + 0 turns −0 into +0 */
        w->order[b] = b;
    }
    qsort_r(w->order, (size_t)nb, sizeof *w->order, by_score, w->scores);
    const float margin = w->scores[w->order[Kb - 1]] - w->scores[w->order[Kb]]; /* nb > Kb here */
    qsort(w->order, (size_t)Kb, sizeof *w->order, by_index);
    if (ts_cpu_choices_on()) ts_cpu_choice(TS_CPU_CHOICE_INDEXER, (int)l, seq, p, margin, Kb, w->order);
    for (int64_t k = 0; k < Kb; k++)
        for (int64_t t = 0; t < B; t++) w->allowed[n++] = w->order[k] * B + t;
    for (int64_t t = nb * B; t <= p; t++) w->allowed[n++] = t;
    return n;
}

/* Pools, norms and ropes the key of block b once its last token is cached. Its norm weights go to
 * vec2: vec holds the q/k norm weights that the tokens after this one still use. */
static void complete_block(ts_cpu_work *w, ts_seq_state *st, const ts_layer_weights *L, uint32_t l,
                           int64_t b) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t B = hp->compress, di = hp->idx_head_dim;
    float *K = st->idx_blk[l] + b * di;
    for (int64_t i = 0; i < di; i++) {
        float s = 0;
        for (int64_t t = 0; t < B; t++) s += st->idx_raw[l][(b * B + t) * di + i];
        K[i] = s / (float)B;
    }
    ts_cpu_rmsnorm(K, ts_cpu_f32(L->idx_k_norm, w->vec2), di, di, hp->eps, K);
    ts_cpu_rope(K, hp->n_rot, hp->rope_base, b * B); /* at the block's FIRST position */
}

/* The CUDA backend's 16-bit attention operands, emulated (ts_cpu_round_att_enabled): v[0 … hd) rounded as
 * one group of ts_round_x_like_tc (fp16 after the power of two that puts max|v| in [2^14, 2^15)), in
 * place. The CUDA K/V caches hold exactly these values, and q enters the scores as them. */
static void round_head(float *v, int64_t hd) {
    if (ts_cpu_round_att_enabled()) ts_round_x_like_tc(v, hd, hd, v);
}

/* Norms, rope and cache writes, then selection and attention, for the T rows of one sequence
 * (from row r0 of the micro-batch's N); writes w->att's rows. */
static void qsa_seq(ts_cpu_work *w, const ts_layer_weights *L, ts_seq_state *st, int seq, uint32_t l,
                    int64_t r0, int64_t T, int64_t N) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, G = nh / nkv;
    const int64_t ni = hp->idx_n_head, di = hp->idx_head_dim, B = hp->compress, p0 = st->pos;
    const int64_t kvw = nkv * hd;
    float *qg = w->qg + r0 * nh * 2 * hd, *iq = w->iq + r0 * ni * di;
    const float *kr = w->kv + r0 * kvw, *vr = w->kv + N * kvw + r0 * kvw;

    memcpy(st->idx_raw[l] + p0 * di, w->ik + r0 * di, (size_t)(T * di) * sizeof(float)); /* raw keys: cache */
    const float *qn = ts_cpu_f32(L->attn_q_norm, w->vec);
    const float *kn = ts_cpu_f32(L->attn_k_norm, w->vec + hd);
    const float *iqn = ts_cpu_f32(L->idx_q_norm, w->vec + 2 * hd);
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = p0 + t;
        for (int64_t h = 0; h < nh; h++) { /* query rows of head h: qg[512h … 512h+255] (gate follows) */
            float *q = qg + t * nh * 2 * hd + h * 2 * hd;
            ts_cpu_rmsnorm(q, qn, hd, hd, hp->eps, q);
            ts_cpu_rope(q, hp->n_rot, hp->rope_base, p);
            round_head(q, hd);
        }
        for (int64_t j = 0; j < nkv; j++) {
            float *k = st->k[l] + (p * nkv + j) * hd, *v = st->v[l] + (p * nkv + j) * hd;
            ts_cpu_rmsnorm(kr + t * kvw + j * hd, kn, hd, hd, hp->eps, k);
            ts_cpu_rope(k, hp->n_rot, hp->rope_base, p);
            round_head(k, hd);
            memcpy(v, vr + t * kvw + j * hd, (size_t)hd * sizeof(float));
            round_head(v, hd);
        }
        for (int64_t h = 0; h < ni; h++) {
            float *q = iq + t * ni * di + h * di;
            ts_cpu_rmsnorm(q, iqn, di, di, hp->eps, q);
            ts_cpu_rope(q, hp->n_rot, hp->rope_base, p);
        }
        if ((p + 1) % B == 0) complete_block(w, st, L, l, (p + 1) / B - 1);
    }

    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = p0 + t;
        const int64_t n = select_positions(w, st, l, seq, iq + t * ni * di, p);
        for (int64_t h = 0; h < nh; h++) {
            const int64_t j = h / G; /* contiguous GQA groups */
            const float *q = qg + t * nh * 2 * hd + h * 2 * hd, *gate = q + hd;
            float mx = -INFINITY;
            for (int64_t a = 0; a < n; a++) {
                const float *k = st->k[l] + (w->allowed[a] * nkv + j) * hd;
                float s = 0;
                for (int64_t i = 0; i < hd; i++) s += q[i] * k[i];
                w->probs[a] = s * scale;
                mx = fmaxf(mx, w->probs[a]);
            }
            float sum = 0;
            for (int64_t a = 0; a < n; a++) sum += (w->probs[a] = expf(w->probs[a] - mx));
            float *o = w->att + (r0 + t) * nh * hd + h * hd;
            for (int64_t i = 0; i < hd; i++) o[i] = 0;
            for (int64_t a = 0; a < n; a++) {
                const float *v = st->v[l] + (w->allowed[a] * nkv + j) * hd;
                const float pa = w->probs[a] / sum;
                for (int64_t i = 0; i < hd; i++) o[i] += pa * v[i];
            }
            for (int64_t i = 0; i < hd; i++) o[i] *= ts_sigmoid(gate[i]);
        }
    }
}

/* x: N × H → y: N × H. Projections and the output over all rows; the rest per sequence. */
void ts_cpu_qsa(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const ts_cpu_batch *b, const float *x,
                float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, nh = hp->n_head, hd = hp->head_dim, kvw = (int64_t)hp->n_head_kv * hd;
    const int64_t ni = hp->idx_n_head, di = hp->idx_head_dim, N = b->N;

    ts_cpu_matmul(L->attn_q, 0, nh * 2 * hd, x, N, w->qg);
    ts_cpu_matmul(L->attn_k, 0, kvw, x, N, w->kv);
    ts_cpu_matmul(L->attn_v, 0, kvw, x, N, w->kv + N * kvw);
    ts_cpu_matmul(L->idx_q, 0, ni * di, x, N, w->iq);
    ts_cpu_matmul(L->idx_k, 0, di, x, N, w->ik);
    for (int64_t s = 0, r0 = 0; s < b->n_seq; r0 += b->T[s++])
        qsa_seq(w, L, b->st[s], (int)s, l, r0, b->T[s], N);
    ts_cpu_matmul(L->attn_output, 0, H, w->att, N, y);
}
