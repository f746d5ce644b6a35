/* Gated DeltaNet (spec §5.5), file head order: value head j uses key head j mod nk.
 *
 * The recurrence runs token by token for prefill too: the reference's chunked (WY/UT) form is the
 * same recurrence in exact arithmetic, so both agree to fp32 rounding. */
#include "cpu/layers.h"

#include <math.h>
#include <string.h>

/* x: T × H → y: T × H. conv: [Kc−1, conv_dim] history (updated); S: [nv, dk, dv] state (updated). */
void ts_cpu_gdn(ts_cpu_work *w, const ts_layer_weights *L, float *conv, float *S, const float *x, int64_t T, float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, nk = hp->ssm_nk, nv = hp->ssm_nv, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int64_t key_dim = nk * dk, vdim = nv * dv, cd = 2 * key_dim + vdim, Kc = hp->ssm_conv;

    /* projections; the raw qkv rows go after the Kc−1 rows of conv history */
    memcpy(w->qkv, conv, (size_t)((Kc - 1) * cd) * sizeof(float));
    float *qkv = w->qkv + (Kc - 1) * cd;
    ts_cpu_matmul(L->attn_qkv, 0, cd, x, T, qkv);
    ts_cpu_matmul(L->attn_gate, 0, vdim, x, T, w->z);
    float *b = w->ba, *a = w->ba + T * nv;
    ts_cpu_matmul(L->ssm_beta, 0, nv, x, T, b);
    ts_cpu_matmul(L->ssm_alpha, 0, nv, x, T, a);

    /* causal depthwise conv (tap Kc−1 = current token) and SiLU on all channels */
    const float *cw = ts_cpu_f32(L->ssm_conv1d, w->vec2); /* [cd][Kc] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < cd; c++) {
            float s = 0;
            for (int64_t k = 0; k < Kc; k++) s += cw[c * Kc + k] * w->qkv[(t + k) * cd + c];
            w->u[t * cd + c] = ts_silu(s);
        }
    memcpy(conv, w->qkv + T * cd, (size_t)((Kc - 1) * cd) * sizeof(float));

    const float *A = ts_cpu_f32(L->ssm_a, w->vec);
    const float *dt = ts_cpu_f32(L->ssm_dt, w->vec + nv);
    const float *gamma = ts_cpu_f32(L->ssm_norm, w->vec + 2 * nv);
    const float qscale = 1.0f / sqrtf((float)dk);
    float qh[512], kh[512], delta[512]; /* dk, dv ≤ 512 (checked at state creation) */

    for (int64_t t = 0; t < T; t++) {
        const float *u = w->u + t * cd;
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
            float *o = w->o + t * vdim + j * dv;
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
            const float *z = w->z + t * vdim + j * dv;
            for (int64_t e = 0; e < dv; e++) o[e] = o[e] * r * gamma[e] * ts_sigmoid(z[e]);
        }
    }
    ts_cpu_matmul(L->ssm_out, 0, H, w->o, T, y);
}
