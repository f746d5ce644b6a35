/* Gated DeltaNet (spec §5.5), file head order: value head j uses key head j mod nk.
 *
 * The recurrence runs token by token for prefill too: the reference's chunked (WY/UT) form is the
 * same recurrence in exact arithmetic, so both agree to fp32 rounding. */
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

/* The conv and recurrence of one sequence on its T rows (from row r0 of the micro-batch's N):
 * conv: [Kc−1, conv_dim] history (updated); S: [nv, dk, dv] state (updated); writes w->o's rows. */
static void gdn_seq(ts_cpu_work *w, const ts_layer_weights *L, float *conv, float *S, int64_t r0, int64_t T,
                    int64_t N) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t nk = hp->ssm_nk, nv = hp->ssm_nv, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int64_t key_dim = nk * dk, vdim = nv * dv, cd = 2 * key_dim + vdim, Kc = hp->ssm_conv;
    const float *b = w->ba + r0 * nv, *a = w->ba + N * nv + r0 * nv;

    /* causal depthwise conv (tap Kc−1 = current token) and SiLU on all channels */
    const float *cw = ts_cpu_f32(L->ssm_conv1d, w->vec2); /* [cd][Kc] */
    ts_cpu_conv_silu(w->hist, conv, cw, Kc, 1, cd, w->qkv + r0 * cd, T, w->u + r0 * cd);

    const float *A = ts_cpu_f32(L->ssm_a, w->vec);
    const float *dt = ts_cpu_f32(L->ssm_dt, w->vec + nv);
    const float *gamma = ts_cpu_f32(L->ssm_norm, w->vec + 2 * nv);
    const float qscale = 1.0f / sqrtf((float)dk);
    float qh[512], kh[512], delta[512]; /* dk, dv ≤ 512 (checked at state creation) */

    for (int64_t t = 0; t < T; t++) {
        const float *u = w->u + (r0 + t) * cd;
        for (int64_t j = 0; j < nv; j++) {
            const int64_t kappa = j % nk;
            const float *q = u + kappa * dk, *k = u + key_dim + kappa * dk, *v = u + 2 * key_dim + j * dv;
            float qq = 0, kk = 0;
            for (int64_t i = 0; i < dk; i++) qq += q[i] * q[i], kk += k[i] * k[i];
            const float rq = qscale / sqrtf(qq + 1e-6f), rk = 1.0f / sqrtf(kk + 1e-6f); /* eps inside the sum */
            for (int64_t i = 0; i < dk; i++) qh[i] = q[i] * rq, kh[i] = k[i] * rk;
            const float beta = ts_sigmoid(b[t * nv + j]);
            const float decay = expf(A[j] * ts_softplus(a[t * nv + j] + dt[j]));

            float *Sj = S + j * dk * dv; /* Sj[i][e]: key dim i, value dim e */
            for (int64_t i = 0; i < dk * dv; i++) Sj[i] *= decay; /* decay before the read */
            for (int64_t e = 0; e < dv; e++) delta[e] = v[e];
            for (int64_t i = 0; i < dk; i++)
                for (int64_t e = 0; e < dv; e++) delta[e] -= Sj[i * dv + e] * kh[i];
            for (int64_t e = 0; e < dv; e++) delta[e] *= beta;
            float *o = w->o + (r0 + t) * vdim + j * dv;
            for (int64_t e = 0; e < dv; e++) o[e] = 0;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t e = 0; e < dv; e++) {
                    Sj[i * dv + e] += kh[i] * delta[e];
                    o[e] += Sj[i * dv + e] * qh[i];
                }
            /* gated norm: rmsnorm(o)·γ·σ(z) */
            float ss = 0;
            for (int64_t e = 0; e < dv; e++) ss += o[e] * o[e];
            const float r = 1.0f / sqrtf(ss / (float)dv + hp->eps);
            const float *z = w->z + (r0 + t) * vdim + j * dv;
            for (int64_t e = 0; e < dv; e++) o[e] = o[e] * r * gamma[e] * ts_sigmoid(z[e]);
        }
    }
}

/* x: N × H → y: N × H. Projections and the output over all rows; conv and recurrence per sequence. */
void ts_cpu_gdn(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const ts_cpu_batch *b, const float *x,
                float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, nv = hp->ssm_nv, vdim = nv * hp->ssm_dv, N = b->N;
    const int64_t cd = 2 * (int64_t)hp->ssm_nk * hp->ssm_dk + vdim;

    ts_cpu_matmul(L->attn_qkv, 0, cd, x, N, w->qkv);
    ts_cpu_matmul(L->attn_gate, 0, vdim, x, N, w->z);
    ts_cpu_matmul(L->ssm_beta, 0, nv, x, N, w->ba);
    ts_cpu_matmul(L->ssm_alpha, 0, nv, x, N, w->ba + N * nv);
    for (int64_t s = 0, r0 = 0; s < b->n_seq; r0 += b->T[s++])
        gdn_seq(w, L, b->st[s]->conv[l], b->st[s]->S[l], r0, b->T[s], N);
    ts_cpu_matmul(L->ssm_out, 0, H, w->o, N, y);
}
