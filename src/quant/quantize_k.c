/* Reference K-quant quantizers (Q2_K .. Q6_K), as ggml's quantize_row_q*_K_ref.
 *
 * A K-quant super-block of 256 elements has sub-blocks of 16 or 32 elements, each with its own
 * scale (and min, for Q2_K/Q4_K/Q5_K); those scales are themselves quantized to 4, 6 or 8 bits
 * against an fp16 super-scale. Quantizing one therefore runs in three steps:
 *   1. fit each sub-block on its own (a small search for the scale, and min, that minimise a
 *      weighted squared or absolute error): fit_symmetric, fit_symmetric_q3, fit_affine;
 *   2. quantize the sub-block scales against the largest one;
 *   3. re-quantize every element against its sub-block's *stored* (rounded) scale, then pack.
 * Steps 1-3 follow ggml's arithmetic operation for operation, so the bytes are identical.
 * All five also quantize with importance weights (an imatrix: ts_quantize_*_w), as ggml's
 * quantize_row_*_impl: step 1 weighs element l by qw[l] · sqrt(sigma2 + x[l]²) (Q6_K: by qw[l]),
 * and step 2 fits the sub-block scales (and mins) to the super-scale by weighted least squares
 * (Q6_K: as without weights).
 * A sub-block whose stored scale rounds to zero keeps the quants from step 1, as in ggml. */
#include "quant/blocks.h"

#include <math.h>
#include <stdbool.h>

#define GROUP_MAX_EPS 1e-15f /* below this largest magnitude a group counts as all zero */

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Largest-magnitude element with its sign (first wins a tie); its magnitude in *amax. */
static float signed_max(const float *x, int n, float *amax) {
    float max = 0.0f;
    *amax = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > *amax) {
            *amax = fabsf(x[i]);
            max = x[i];
        }
    }
    return max;
}

/* Symmetric fit with weights w, or x^2 when w is NULL (ggml's make_qx_quants, rmse_type 1): try
 * the scale that maps max to -nmax and 18 nearby ones, keep the least-squares best. L gets
 * q + nmax, q in -nmax..nmax-1. Returns the scale. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float amax;
    const float max = signed_max(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(ts_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(ts_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(ts_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric fit for Q3_K (ggml's make_q3_quants with rmse): start from max -> -nmax, then up to
 * five passes of coordinate descent moving single quants while the weighted fit improves. */
static float fit_symmetric_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_max(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(ts_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue; /* written so a NaN skips, as in ggml */
            float sl2 = suml2 - w * L[i] * L[i];
            const int new_l = clampi(ts_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Affine fit x ~ scale * q - min, q in 0..nmax (ggml's make_qkx2_quants): start from the min/max
 * range, then for nstep+1 trial scales solve the weighted least-squares scale and offset for the
 * quants they give, keeping the lowest error (squared, or absolute when use_mad). The offset is
 * kept <= 0 so the stored min is >= 0. Returns the scale, the positive min in *the_min. */
typedef struct {
    float rmin, rdelta; /* trial iscale = (rmin + rdelta * is + nmax) / (max - min) */
    int nstep;
    bool use_mad;
} affine_search;

static float affine_error(int n, const float *x, const float *w, const uint8_t *L, float scale, float min,
                          bool use_mad) {
    float err = 0;
    for (int i = 0; i < n; i++) {
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        err += w[i] * diff;
    }
    return err;
}

static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                        affine_search p) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clampi(ts_nearest_int(iscale * (x[i] - min)), 0, nmax);
    float best_error = affine_error(n, x, w, L, scale, min, p.use_mad);
    uint8_t Laux[32];
    for (int is = 0; is <= p.nstep; is++) {
        iscale = (p.rmin + p.rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(ts_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float cur_error = affine_error(n, x, w, Laux, this_scale, this_min, p.use_mad);
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* Fit of values that are all >= 0 (the sub-block scales or mins of the importance-weighted
 * quantizers, IQ2_XXS's magnitudes) as ggml's make_qp_quants: L in 0..nmax against one scale; try
 * max -> nmax and 8 nearby inverse scales by weighted squared error, then up to five passes of
 * coordinate descent. 0 when all are (nearly) zero or all weights are. */
float ts_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)ts_nearest_int(iscale * x[i]); /* uint8 as in ggml */
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = ts_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) best_mse = mse, iscale = iscale_is;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = ts_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            int new_l = ts_nearest_int(x[i] * sl2 / slx);
            new_l = new_l < nmax ? new_l : nmax;
            if (new_l == L[i]) continue;
            slx += w[i] * x[i] * new_l;
            sl2 += w[i] * new_l * new_l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)new_l, sumlx = slx, suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

/* Importance weights of n elements (ggml's quantize_row_*_impl): qw · sqrt(sigma2 + x²); their sum. */
static float weigh(int n, const float *x, const float *qw, float sigma2, float *w) {
    float sum = 0;
    for (int l = 0; l < n; l++) w[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
    for (int l = 0; l < n; l++) sum += w[l];
    return sum;
}

static float mean_square(const float *x, int n) {
    float sum_x2 = 0;
    for (int l = 0; l < n; l++) sum_x2 += x[l] * x[l];
    return sum_x2 / n;
}

/* Q2_K / Q3_K quant layout: byte l of each 32-byte group holds elements l, l+32, l+64, l+96 of
 * its 128-element half in bit pairs 0-1, 2-3, 4-5, 6-7. */
static void pack_2bit(const uint8_t *L, uint8_t qs[64]) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *q = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
        }
}

/* Q2_K's last step: every element against its sub-block's stored scale and min, then packed. */
static void q2_K_finish(const float *x, ts_block_q2_K *y, uint8_t L[TS_QK_K]) {
    for (int j = 0; j < 16; j++) {
        const float d = ts_ld_half(y->d) * (y->scales[j] & 0xf);
        if (!d) continue;
        const float dm = ts_ld_half(y->dmin) * (y->scales[j] >> 4);
        for (int k = 0; k < 16; k++)
            L[16 * j + k] = (uint8_t)clampi(ts_nearest_int((x[16 * j + k] + dm) / d), 0, 3);
    }
    pack_2bit(L, y->qs);
}

void ts_quantize_q2_K(const float *x, void *dst, int64_t nb) {
    ts_block_q2_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K) {
        uint8_t L[TS_QK_K];
        float scales[16], mins[16], weights[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_affine(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                   (affine_search){-0.5f, 0.1f, 15, true});
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* 4-bit scale in the low nibble, 4-bit min in the high nibble (ggml's uint8 wrap kept). */
        memset(y[i].scales, 0, 16);
        ts_st_half(y[i].d, 0.0f);
        ts_st_half(y[i].dmin, 0.0f);
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)ts_nearest_int(iscale * scales[j]);
            ts_st_half(y[i].d, max_scale / 15.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] |= (uint8_t)((unsigned)ts_nearest_int(iscale * mins[j]) << 4);
            ts_st_half(y[i].dmin, max_min / 15.f);
        }
        q2_K_finish(x, &y[i], L);
    }
}

/* With importance weights (ggml's quantize_row_q2_K_impl): weighted affine fits, and the 4-bit
 * scales and mins fitted by fit_positive with the sub-blocks' weight sums. */
void ts_quantize_q2_K_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_q2_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw += TS_QK_K) {
        uint8_t L[TS_QK_K], Ls[16], Lm[16];
        float scales[16], mins[16], sw[16], weight[16];
        const float sigma2 = mean_square(x, TS_QK_K);
        for (int j = 0; j < 16; j++) {
            sw[j] = weigh(16, x + 16 * j, qw + 16 * j, sigma2, weight);
            scales[j] = fit_affine(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j],
                                   (affine_search){-0.9f, 0.05f, 36, false});
        }
        ts_st_half(y[i].d, ts_fit_positive(16, 15, scales, Ls, sw));
        ts_st_half(y[i].dmin, ts_fit_positive(16, 15, mins, Lm, sw));
        for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
        q2_K_finish(x, &y[i], L);
    }
}

/* Q3_K 6-bit scale packing: the inverse of the layout read by dequant (see blocks.h users). */
static void q3_K_put_scale(uint8_t sc[12], int j, int biased) {
    if (j < 8)
        sc[j] = (uint8_t)(biased & 0xf);
    else
        sc[j - 8] |= (uint8_t)((biased & 0xf) << 4);
    sc[8 + j % 4] |= (uint8_t)((biased >> 4) << (2 * (j / 4)));
}

static int q3_K_get_scale(const uint8_t sc[12], int j) {
    const int low = j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4;
    return (low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/* Q3_K's last step: every element against its sub-block's stored scale, the third bits into
 * hmask (element e: bit e/32 of hmask[e%32]), the low two bits packed. */
static void q3_K_finish(const float *x, ts_block_q3_K *y, int8_t L[TS_QK_K]) {
    for (int j = 0; j < 16; j++) {
        const float d = ts_ld_half(y->d) * q3_K_get_scale(y->scales, j);
        if (!d) continue;
        for (int k = 0; k < 16; k++)
            L[16 * j + k] = (int8_t)(clampi(ts_nearest_int(x[16 * j + k] / d), -4, 3) + 4);
    }
    uint8_t low[TS_QK_K];
    memset(y->hmask, 0, 32);
    for (int e = 0; e < TS_QK_K; e++) {
        int q = L[e];
        if (q > 3) {
            y->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            q -= 4;
        }
        low[e] = (uint8_t)q;
    }
    pack_2bit(low, y->qs);
}

void ts_quantize_q3_K(const float *x, void *dst, int64_t nb) {
    ts_block_q3_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K) {
        int8_t L[TS_QK_K];
        float scales[16], amax = 0, max_scale = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_symmetric_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        ts_st_half(y[i].d, 0.0f);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int8_t l = (int8_t)ts_nearest_int(iscale * scales[j]);
                q3_K_put_scale(y[i].scales, j, clampi(l, -32, 31) + 32);
            }
            ts_st_half(y[i].d, 1 / iscale);
        }
        q3_K_finish(x, &y[i], L);
    }
}

/* With importance weights (ggml's quantize_row_q3_K_impl): sub-blocks fitted by fit_symmetric with
 * weights qw·sqrt(sigma2 + x²), and their 16 scales fitted (6 bits, biased by 32) the same way
 * with the sub-blocks' weight sums. */
void ts_quantize_q3_K_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_q3_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw += TS_QK_K) {
        int8_t L[TS_QK_K], Ls[16];
        float scales[16], sw[16], weight[16];
        const float sigma2 = 2 * mean_square(x, TS_QK_K);
        for (int j = 0; j < 16; j++) {
            sw[j] = weigh(16, x + 16 * j, qw + 16 * j, sigma2, weight);
            scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = fit_symmetric(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; j++) q3_K_put_scale(y[i].scales, j, Ls[j]);
        ts_st_half(y[i].d, d_block);
        q3_K_finish(x, &y[i], L);
    }
}

/* Q4_K / Q5_K 6-bit scale and min packing, the inverse of ts_scale_min_k4. */
static void k4_put_scale_min(uint8_t sc[12], int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
    } else {
        sc[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
        sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
        sc[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Step 3 of Q4_K / Q5_K: every element against its sub-block's stored scale and min. */
static void k4_requantize(const float *x, int nmax, const uint8_t d[2], const uint8_t dmin[2],
                          const uint8_t sc[12], uint8_t L[TS_QK_K]) {
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        ts_scale_min_k4(j, sc, &s, &m);
        const float dl = ts_ld_half(d) * s;
        if (!dl) continue;
        const float ml = ts_ld_half(dmin) * m;
        for (int k = 0; k < 32; k++)
            L[32 * j + k] = (uint8_t)clampi(ts_nearest_int((x[32 * j + k] + ml) / dl), 0, nmax);
    }
}

/* Steps 1-3 shared by Q4_K and Q5_K: fit 8 sub-blocks of 32 with weights rms + |x| (or, with
 * importance weights qw, as ggml's quantize_row_q4_K_impl), store 6-bit scales and mins,
 * re-quantize against the stored values into L (0..nmax). */
static void quantize_k4_common(const float *x, int nmax, affine_search p, const float *qw, uint8_t d[2],
                               uint8_t dmin[2], uint8_t sc[12], uint8_t L[TS_QK_K]) {
    float scales[8], mins[8], weights[32], max_scale = 0, max_min = 0;
    if (qw) { /* ggml's quantize_row_q4_K_impl / q5_K_impl */
        uint8_t Ls[8], Lm[8];
        float sw[8];
        const float sigma2 = 2 * mean_square(x, TS_QK_K);
        for (int j = 0; j < 8; j++) {
            sw[j] = weigh(32, x + 32 * j, qw + 32 * j, sigma2, weights);
            scales[j] = fit_affine(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                   (affine_search){-0.9f, 0.05f, 36, false});
        }
        ts_st_half(d, ts_fit_positive(8, 63, scales, Ls, sw));
        ts_st_half(dmin, ts_fit_positive(8, 63, mins, Lm, sw));
        for (int j = 0; j < 8; j++) k4_put_scale_min(sc, j, Ls[j] < 63 ? Ls[j] : 63, Lm[j] < 63 ? Lm[j] : 63);
        k4_requantize(x, nmax, d, dmin, sc, L);
        return;
    }
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_affine(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], p);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)ts_nearest_int(inv_scale * scales[j]); /* uint8 wrap as in ggml */
        uint8_t lm = (uint8_t)ts_nearest_int(inv_min * mins[j]);
        k4_put_scale_min(sc, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    ts_st_half(d, max_scale / 63.f);
    ts_st_half(dmin, max_min / 63.f);
    k4_requantize(x, nmax, d, dmin, sc, L);
}

void ts_quantize_q4_K(const float *x, void *dst, int64_t nb) {
    ts_quantize_q4_K_w(x, dst, nb, NULL);
}

void ts_quantize_q4_K_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_q4_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw = qw ? qw + TS_QK_K : NULL) {
        uint8_t L[TS_QK_K];
        quantize_k4_common(x, 15, (affine_search){-1.f, 0.1f, 20, false}, qw, y[i].d, y[i].dmin, y[i].scales,
                           L);
        /* Sub-blocks 2p and 2p+1 share bytes 32p..32p+31: low and high nibble. */
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * p + l] = (uint8_t)(L[64 * p + l] | L[64 * p + 32 + l] << 4);
    }
}

void ts_quantize_q5_K(const float *x, void *dst, int64_t nb) {
    ts_quantize_q5_K_w(x, dst, nb, NULL);
}

void ts_quantize_q5_K_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_q5_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw = qw ? qw + TS_QK_K : NULL) {
        uint8_t L[TS_QK_K];
        quantize_k4_common(x, 31, (affine_search){-0.5f, 0.1f, 15, false}, qw, y[i].d, y[i].dmin, y[i].scales,
                           L);
        /* Low nibbles as Q4_K; the fifth bit of element l of sub-block sb goes to bit sb of qh[l]. */
        memset(y[i].qh, 0, 32);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                const int q1 = L[64 * p + l], q2 = L[64 * p + 32 + l];
                y[i].qh[l] |= (uint8_t)(((q1 >> 4) & 1) << (2 * p) | ((q2 >> 4) & 1) << (2 * p + 1));
                y[i].qs[32 * p + l] = (uint8_t)((q1 & 0xf) | (q2 & 0xf) << 4);
            }
    }
}

void ts_quantize_q6_K(const float *x, void *dst, int64_t nb) {
    ts_quantize_q6_K_w(x, dst, nb, NULL);
}

/* With importance weights qw (ggml's quantize_row_q6_K_impl): the sub-block fits weigh element l by
 * qw[l] itself (ggml leaves its sqrt(sigma2 + x²) form commented out), instead of x². */
void ts_quantize_q6_K_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_q6_K *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw = qw ? qw + TS_QK_K : NULL) {
        int8_t L[TS_QK_K];
        float scales[16], max_abs_scale = 0, max_scale = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j, qw ? qw + 16 * j : NULL);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        ts_st_half(y[i].d, 1 / iscale);
        for (int j = 0; j < 16; j++) {
            const int l = ts_nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(l < 127 ? l : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = ts_ld_half(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int k = 0; k < 16; k++)
                L[16 * j + k] = (int8_t)(clampi(ts_nearest_int(x[16 * j + k] / d), -32, 31) + 32);
        }
        /* Per 128-element half h, element 32*s + l: low nibble into ql[64h + l + 32*(s%2)] (high
         * nibble when s >= 2), top two bits into bits 2s..2s+1 of qh[32h + l]. */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *q = L + 128 * h + l;
                y[i].ql[64 * h + l] = (uint8_t)((q[0] & 0xf) | (q[64] & 0xf) << 4);
                y[i].ql[64 * h + l + 32] = (uint8_t)((q[32] & 0xf) | (q[96] & 0xf) << 4);
                y[i].qh[32 * h + l] =
                    (uint8_t)((q[0] >> 4) | (q[32] >> 4) << 2 | (q[64] >> 4) << 4 | (q[96] >> 4) << 6);
            }
    }
}
