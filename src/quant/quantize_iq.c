/* Reference quantizers for the codebook formats: IQ4_NL, IQ4_XS (16-entry non-linear table),
 * MXFP4 and NVFP4 (E2M1 4-bit floats). As ggml's quantize_row_*_ref, bit for bit.
 *
 * IQ4_NL and IQ4_XS pick, per 32 elements, the scale that best fits the data in the least-squares
 * sense with weights x^2, each element taking the nearest codebook entry. ggml's reference for
 * IQ4_NL (ntry = -1) stops after the first fit from max -> -127; IQ4_XS also tries 15 scales
 * around it (ntry = 7), then stores 6-bit sub-block scales against an fp16 super-scale and
 * re-picks every entry against its stored scale. With importance weights (ts_quantize_iq4_*_w,
 * ggml's quantize_iq4_nl / quantize_iq4_xs) the weights are qw · sqrt(sigma2 + x²), and IQ4_NL
 * also tries the 15 scales, then re-picks its entries against the fitted scale.
 *
 * MXFP4 and NVFP4 choose the block scale directly from the largest magnitude (a power of two, or
 * a UE4M3 float) and then each element's nearest E2M1 value. */
#include "quant/blocks.h"

#include <math.h>

#define GROUP_MAX_EPS 1e-15f

/* Index of the codebook entry nearest to x in the sorted table val[16]: entry i is chosen once x
 * reaches the midpoint of val[i-1] and val[i] (ties go up). Compared at twice the scale so that
 * both sides are exact. */
static int nearest_iq4(const int8_t *val, float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (x2 >= (float)(val[j - 1] + val[j])) idx = j;
    }
    return idx;
}

typedef struct {
    float sumqx, sumq2;
} fit_sums;

/* Weighted sums for the codebook entries chosen at inverse scale id (weights w, or x^2). */
static fit_sums iq4_sums(const float *x, const float *w32, float id, uint8_t *L) {
    fit_sums s = {0, 0};
    for (int j = 0; j < 32; j++) {
        const int l = nearest_iq4(ts_kvalues_iq4nl, id * x[j]);
        if (L) L[j] = (uint8_t)l;
        const float q = ts_kvalues_iq4nl[l], w = w32 ? w32[j] : x[j] * x[j];
        s.sumqx += w * q * x[j];
        s.sumq2 += w * q * q;
    }
    return s;
}

/* Best scale for 32 elements with weights w (NULL: x^2) (ggml's quantize_row_iq4_nl_impl inner
 * fit). ntry < 0: one fit from max -> -127; ntry > 0: start from max -> +127 and also try
 * id = (t - 127)/max, |t| <= ntry. L gets the entries of the first fit. */
static float iq4_fit_block(const float *x, const float *w, uint8_t *L, int ntry) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, 32);
        return 0.0f;
    }
    const float v0 = ts_kvalues_iq4nl[0];
    const float d0 = ntry > 0 ? -max / v0 : max / v0;
    fit_sums s = iq4_sums(x, w, 1 / d0, L);
    float d = s.sumq2 > 0 ? s.sumqx / s.sumq2 : 0.f;
    float best = d * s.sumqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        s = iq4_sums(x, w, (itry + ts_kvalues_iq4nl[0]) / max, NULL);
        if (s.sumq2 > 0 && s.sumqx * s.sumqx > best * s.sumq2) {
            d = s.sumqx / s.sumq2;
            best = d * s.sumqx;
        }
    }
    return d;
}

/* 32 entries into 16 bytes: element j in the low nibble of byte j, element j+16 in the high. */
static void pack_nibbles(const uint8_t *L, uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

/* sigma2 of ggml's quantize_row_iq4_nl_impl: 2 · mean x² over the (super-)block of n. */
static float iq4_sigma2(const float *x, int n) {
    float sigma2 = 0;
    for (int j = 0; j < n; j++) sigma2 += x[j] * x[j];
    return sigma2 * (2.f / n);
}

/* Importance weights of 32 elements: qw · sqrt(sigma2 + x²). */
static void iq4_weights(const float *x, float sigma2, const float *qw, float w[32]) {
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

void ts_quantize_iq4_nl(const float *x, void *dst, int64_t nb) {
    ts_block_iq4_nl *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        uint8_t L[32];
        ts_st_half(y[i].d, iq4_fit_block(x, NULL, L, -1));
        pack_nibbles(L, y[i].qs);
    }
}

/* With importance weights (ggml's quantize_iq4_nl): 15 trial scales as IQ4_XS, then every entry
 * re-picked against the fitted (unrounded) scale. */
void ts_quantize_iq4_nl_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_iq4_nl *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32, qw += 32) {
        uint8_t L[32];
        float w[32];
        iq4_weights(x, iq4_sigma2(x, 32), qw, w);
        const float d = iq4_fit_block(x, w, L, 7), id = d ? 1 / d : 0.f;
        ts_st_half(y[i].d, d);
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_iq4(ts_kvalues_iq4nl, id * x[j]);
        pack_nibbles(L, y[i].qs);
    }
}

void ts_quantize_iq4_xs(const float *x, void *dst, int64_t nb) {
    ts_quantize_iq4_xs_w(x, dst, nb, NULL);
}

void ts_quantize_iq4_xs_w(const float *x, void *dst, int64_t nb, const float *qw) {
    ts_block_iq4_xs *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K, qw = qw ? qw + TS_QK_K : NULL) {
        uint8_t L[TS_QK_K];
        float scales[8], max_scale = 0, amax_scale = 0, w[32];
        const float sigma2 = qw ? iq4_sigma2(x, TS_QK_K) : 0;
        for (int ib = 0; ib < 8; ib++) {
            if (qw) iq4_weights(x + 32 * ib, sigma2, qw + 32 * ib, w);
            scales[ib] = iq4_fit_block(x + 32 * ib, qw ? w : NULL, L + 32 * ib, 7);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        /* 6-bit signed sub-block scales l (-32..31) against d = -max_scale/32; entries re-picked. */
        const float d = -max_scale / 32;
        const float id = d ? 1 / d : 0.f;
        unsigned scales_h = 0;
        ts_st_half(y[i].d, d);
        memset(y[i].scales_l, 0, 4);
        for (int ib = 0; ib < 8; ib++) {
            int l = ts_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)nearest_iq4(ts_kvalues_iq4nl, idl * x[32 * ib + j]);
            l += 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
            scales_h |= (unsigned)(l >> 4) << (2 * ib);
        }
        y[i].scales_h[0] = (uint8_t)(scales_h & 0xff);
        y[i].scales_h[1] = (uint8_t)(scales_h >> 8);
        for (int ib = 0; ib < 8; ib++) pack_nibbles(L + 32 * ib, y[i].qs + 16 * ib);
    }
}

/* Nearest of the 16 E2M1 values (times two) at half-scale d; the first wins a tie, so +0 beats -0. */
static uint8_t nearest_fp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(ts_kvalues_fp4x2[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(ts_kvalues_fp4x2[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return (uint8_t)best;
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    return amax;
}

/* MXFP4: E8M0 exponent e = floor(log2(amax)) - 2 + 127, so amax lands in the top binade of E2M1
 * (4..6, times the scale 2^(e-127)). */
void ts_quantize_mxfp4(const float *x, void *dst, int64_t nb) {
    ts_block_mxfp4 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float amax = absmax(x, 32);
        const uint8_t e = amax > 0.0f ? (uint8_t)ts_trunc_int(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ts_e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(nearest_fp4(x[j], d) | nearest_fp4(x[j + 16], d) << 4);
    }
}

uint8_t ts_fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int exp = (int)((bits >> 23) & 0xff) - 127 + 7;
    if (exp <= 0) { /* subnormal: man * 2^-9, rounded half up */
        int man = (int)(x * 512.0f + 0.5f);
        if (man > 7) man = 7;
        return (uint8_t)(man < 1 ? 0 : man);
    }
    if (exp >= 15) return 0x7e;
    int man = (int)((bits >> 20) & 0x7) + (int)((bits >> 19) & 1); /* round half up on the 4th bit */
    if (man > 7) {
        man = 0;
        if (++exp >= 15) return 0x7e;
    }
    return (uint8_t)(exp << 3 | man);
}

/* NVFP4: per 16-element sub-block, a UE4M3 scale of amax/6 (6 being the largest E2M1 value);
 * byte j of the sub-block holds element j (low nibble) and element j+8 (high). */
void ts_quantize_nvfp4(const float *x, void *dst, int64_t nb) {
    ts_block_nvfp4 *y = dst;
    for (int64_t i = 0; i < nb; i++) {
        for (int s = 0; s < 4; s++, x += 16) {
            const uint8_t ue = ts_fp32_to_ue4m3(absmax(x, 16) / 6.0f);
            const float d = ts_ue4m3_to_fp32_half(ue);
            y[i].d[s] = ue;
            for (int j = 0; j < 8; j++)
                y[i].qs[8 * s + j] = (uint8_t)(nearest_fp4(x[j], d) | nearest_fp4(x[j + 8], d) << 4);
        }
    }
}
