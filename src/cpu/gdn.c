/* Gated DeltaNet (docs/MODEL.md §5.5), file head order: value head j uses key head j mod nk.
 *
 * The CPU forward runs the token recurrence for prefill too (bit-identical to decode; DECISIONS.md,
 * GDN prefill). The chunked (WY/UT) form of the reference is here as well, the twin of the CUDA
 * prefill kernel: the same recurrence in exact arithmetic, equal to fp32 rounding. */
#include "cpu/layers.h"

#include <math.h>
#include <string.h>

void ts_cpu_conv_silu(const float **rows, float *hist, const float *cw, int64_t K, int64_t dil, int64_t n,
                      const float *x, int64_t T, float *out) {
    const int64_t h = (K - 1) * dil;
    for (int64_t j = 0; j < h; j++) rows[j] = hist + j * n;
    for (int64_t t = 0; t < T; t++) rows[h + t] = x + t * n;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < n; c++) {
            float s = 0;
            for (int64_t k = 0; k < K; k++) s += cw[c * K + k] * rows[t + k * dil][c];
            out[t * n + c] = ts_silu(s);
        }
    /* the last h rows become the history; a source still in hist lies after its destination */
    for (int64_t j = 0; j < h; j++) memmove(hist + j * n, rows[T + j], (size_t)n * sizeof(float));
}

void ts_cpu_gdn_recur(const ts_gdn_head *h, float *S, float *delta) {
    const int64_t dk = h->dk, dv = h->dv;
    for (int64_t t = 0; t < h->T; t++) {
        const float *qh = h->q + t * h->qs, *kh = h->k + t * h->qs, *v = h->v + t * h->vs;
        const float beta = h->beta[t * h->gs], decay = expf(h->lg[t * h->gs]);
        for (int64_t i = 0; i < dk * dv; i++) S[i] *= decay; /* decay before the read */
        for (int64_t e = 0; e < dv; e++) delta[e] = v[e];
        for (int64_t i = 0; i < dk; i++)
            for (int64_t e = 0; e < dv; e++) delta[e] -= S[i * dv + e] * kh[i];
        for (int64_t e = 0; e < dv; e++) delta[e] *= beta;
        float *o = h->o + t * h->os;
        for (int64_t e = 0; e < dv; e++) o[e] = 0;
        for (int64_t i = 0; i < dk; i++)
            for (int64_t e = 0; e < dv; e++) {
                S[i * dv + e] += kh[i] * delta[e];
                o[e] += S[i * dv + e] * qh[i];
            }
    }
}

int64_t ts_cpu_gdn_chunk_scratch(int64_t dv) {
    return TS_GDN_CHUNK + TS_GDN_CHUNK * TS_GDN_CHUNK + TS_GDN_CHUNK * dv;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Per chunk of n rows, with G_t = Σ_{s≤t} g_s inside the chunk and S the state before it:
 *   A[t][s] = β_t·e^(G_t−G_s)·k̂_t·k̂_s (s < t);  R_t = β_t·(v_t − e^(G_t)·Sᵀk̂_t)
 *   δ = (I + A)⁻¹R (forward substitution: δ_t = R_t − Σ_{s<t} A[t][s]·δ_s)  — the recurrence's δ
 *   o_t = e^(G_t)·Sᵀq̂_t + Σ_{s≤t} e^(G_t−G_s)·(q̂_t·k̂_s)·δ_s
 *   S ← e^(G_{n−1})·S + Σ_t e^(G_{n−1}−G_t)·k̂_t δ_tᵀ
 * Every exponent is ≤ 0. */
void ts_cpu_gdn_chunked(const ts_gdn_head *h, float *S, float *scratch) {
    const int64_t dk = h->dk, dv = h->dv, C = TS_GDN_CHUNK;
    float *G = scratch, *A = G + C, *D = A + C * C; /* G[C], A[C][C], δ[C][dv] */
    for (int64_t c0 = 0; c0 < h->T; c0 += C) {
        const int64_t n = h->T - c0 < C ? h->T - c0 : C;
        const float *q = h->q + c0 * h->qs, *k = h->k + c0 * h->qs, *v = h->v + c0 * h->vs;
        const float *beta = h->beta + c0 * h->gs, *lg = h->lg + c0 * h->gs;
        for (int64_t t = 0; t < n; t++) G[t] = (t ? G[t - 1] : 0.0f) + lg[t * h->gs];
        for (int64_t t = 0; t < n; t++)
            for (int64_t s = 0; s < t; s++)
                A[t * C + s] = beta[t * h->gs] * expf(G[t] - G[s]) * dot(k + t * h->qs, k + s * h->qs, dk);
        for (int64_t t = 0; t < n; t++) {
            const float *kt = k + t * h->qs, eg = expf(G[t]), bt = beta[t * h->gs];
            float *d = D + t * dv;
            for (int64_t e = 0; e < dv; e++) {
                float sk = 0;
                for (int64_t i = 0; i < dk; i++) sk += kt[i] * S[i * dv + e];
                d[e] = bt * (v[t * h->vs + e] - eg * sk);
            }
            for (int64_t s = 0; s < t; s++)
                for (int64_t e = 0; e < dv; e++) d[e] -= A[t * C + s] * D[s * dv + e];
        }
        for (int64_t t = 0; t < n; t++) {
            const float *qt = q + t * h->qs, eg = expf(G[t]);
            float *o = h->o + (c0 + t) * h->os;
            for (int64_t e = 0; e < dv; e++) {
                float sq = 0;
                for (int64_t i = 0; i < dk; i++) sq += qt[i] * S[i * dv + e];
                o[e] = eg * sq;
            }
            for (int64_t s = 0; s <= t; s++) {
                const float p = expf(G[t] - G[s]) * dot(qt, k + s * h->qs, dk);
                for (int64_t e = 0; e < dv; e++) o[e] += p * D[s * dv + e];
            }
        }
        const float gl = G[n - 1], el = expf(gl);
        for (int64_t i = 0; i < dk * dv; i++) S[i] *= el;
        for (int64_t t = 0; t < n; t++) {
            const float w = expf(gl - G[t]);
            for (int64_t i = 0; i < dk; i++) {
                const float ki = w * k[t * h->qs + i];
                for (int64_t e = 0; e < dv; e++) S[i * dv + e] += ki * D[t * dv + e];
            }
        }
    }
}

/* The conv and recurrence of one sequence on its T rows (from row r0 of the micro-batch's N):
 * conv: [Kc−1, conv_dim] history (updated); S: [nv, dk, dv] state (updated); writes w->o's rows.
 * β and the log-decays replace their logits in w->ba, q̂ and k̂ their u rows. */
static void gdn_seq(ts_cpu_work *w, const ts_layer_weights *L, float *conv, float *S, int64_t r0, int64_t T,
                    int64_t N) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t nk = hp->ssm_nk, nv = hp->ssm_nv, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int64_t key_dim = nk * dk, vdim = nv * dv, cd = ts_gdn_conv_dim(hp), Kc = hp->ssm_conv;
    float *b = w->ba + r0 * nv, *a = w->ba + N * nv + r0 * nv;

    /* causal depthwise conv (tap Kc−1 = current token) and SiLU on all channels */
    const float *cw = ts_cpu_f32(L->ssm_conv1d, w->vec2); /* [cd][Kc] */
    ts_cpu_conv_silu(w->hist, conv, cw, Kc, 1, cd, w->qkv + r0 * cd, T, w->u + r0 * cd);

    const float *A = ts_cpu_f32(L->ssm_a, w->vec);
    const float *dt = ts_cpu_f32(L->ssm_dt, w->vec + nv);
    const float *gamma = ts_cpu_f32(L->ssm_norm, w->vec + 2 * nv);
    const float qscale = 1.0f / sqrtf((float)dk);
    float delta[512]; /* dv ≤ 512 (checked at state creation) */

    for (int64_t t = 0; t < T; t++) { /* q̂, k̂ of every key head; β and g of every value head */
        float *u = w->u + (r0 + t) * cd;
        for (int64_t kappa = 0; kappa < nk; kappa++) {
            float *q = u + kappa * dk, *k = u + key_dim + kappa * dk;
            float qq = 0, kk = 0;
            for (int64_t i = 0; i < dk; i++) qq += q[i] * q[i], kk += k[i] * k[i];
            const float rq = qscale / sqrtf(qq + 1e-6f),
                        rk = 1.0f / sqrtf(kk + 1e-6f); /* eps inside the sum */
            for (int64_t i = 0; i < dk; i++) q[i] *= rq, k[i] *= rk;
        }
        for (int64_t j = 0; j < nv; j++) {
            b[t * nv + j] = ts_sigmoid(b[t * nv + j]);
            a[t * nv + j] = A[j] * ts_softplus(a[t * nv + j] + dt[j]);
        }
    }
    for (int64_t j = 0; j < nv; j++) {
        const int64_t kappa = j % nk;
        const float *u = w->u + r0 * cd;
        const ts_gdn_head h = {.T = T,
                               .dk = dk,
                               .dv = dv,
                               .q = u + kappa * dk,
                               .k = u + key_dim + kappa * dk,
                               .qs = cd,
                               .v = u + 2 * key_dim + j * dv,
                               .vs = cd,
                               .beta = b + j,
                               .lg = a + j,
                               .gs = nv,
                               .o = w->o + r0 * vdim + j * dv,
                               .os = vdim};
        ts_cpu_gdn_recur(&h, S + j * dk * dv, delta);
    }
    for (int64_t t = 0; t < T; t++) /* gated norm: rmsnorm(o)·γ·σ(z) */
        for (int64_t j = 0; j < nv; j++) {
            float *o = w->o + (r0 + t) * vdim + j * dv;
            const float *z = w->z + (r0 + t) * vdim + j * dv;
            float ss = 0;
            for (int64_t e = 0; e < dv; e++) ss += o[e] * o[e];
            const float r = 1.0f / sqrtf(ss / (float)dv + hp->eps);
            for (int64_t e = 0; e < dv; e++) o[e] = o[e] * r * gamma[e] * ts_sigmoid(z[e]);
        }
}

/* x: N × H → y: N × H. Projections and the output over all rows; conv and recurrence per sequence. */
void ts_cpu_gdn(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const ts_cpu_batch *b, const float *x,
                float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, nv = hp->ssm_nv, vdim = nv * hp->ssm_dv, N = b->N;
    const int64_t cd = ts_gdn_conv_dim(hp);

    ts_cpu_matmul(L->attn_qkv, 0, cd, x, N, w->qkv);
    ts_cpu_matmul(L->attn_gate, 0, vdim, x, N, w->z);
    ts_cpu_matmul(L->ssm_beta, 0, nv, x, N, w->ba);
    ts_cpu_matmul(L->ssm_alpha, 0, nv, x, N, w->ba + N * nv);
    for (int64_t s = 0, r0 = 0; s < b->n_seq; r0 += b->T[s++])
        gdn_seq(w, L, b->st[s]->conv[l], b->st[s]->S[l], r0, b->T[s], N);
    ts_cpu_matmul(L->ssm_out, 0, H, w->o, N, y);
}
