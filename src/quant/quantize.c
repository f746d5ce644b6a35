/* Reference quantization of one row: fp32 -> ggml block bytes, as ggml's quantize_row_*_ref.
 *
 * This file holds the dispatch, the plain types (F32/F16/BF16) and the simple block formats whose
 * scale is one fp16 per block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q1_0, Q2_0). The K-quants are in
 * quantize_k.c, the codebook formats (IQ4_NL, IQ4_XS, MXFP4, NVFP4) in quantize_iq.c, the lattice
 * formats IQ2_XXS .. IQ3_S in quantize_lattice.c, IQ1_S / IQ1_M in quantize_iq1.c.
 *
 * Results are bit-identical to ggml's reference quantizers for finite input: the same float
 * operations in the same order, including which element wins a tie for the largest magnitude,
 * and the scale computed in fp32 but stored as fp16 (so quants are chosen against the unrounded
 * scale, exactly as ggml does). Where ggml converts float to a small integer by a C cast we go
 * through ts_trunc_int, which has ggml's x86 result and no undefined behaviour.
 *
 * A NaN or infinity in the input of a block format is refused: ggml would write a meaningless
 * block, and a converter should say where the bad value is instead. */
#include "common/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#include <float.h>
#include <math.h>

static int trunc_i8(float v) {
    return (int8_t)ts_trunc_int(v);
}

/* ggml's MIN(15, q) stored into a nibble; unsigned so no shift of a negative value is possible. */
static unsigned nibble_max15(int q) {
    return (unsigned)(q < 15 ? q : 15) & 0xfu;
}

static void quant_f32(const float *x, void *dst, int64_t n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

static void quant_f16(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) ts_st_half(p + 2 * i, x[i]);
}

static void quant_bf16(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t h = ts_fp32_to_bf16(x[i]);
        p[2 * i] = (uint8_t)(h & 0xff);
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* The element of largest magnitude, with its sign; the first one wins a tie. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

/* Q8_0: d = absmax / 127, q = round(x / d). */
static void quant_q8_0(const float *x, void *dst, int64_t nb) {
    ts_block_q8_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        ts_st_half(y[i].d, d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)ts_trunc_int(roundf(x[j] * id));
    }
}

/* Q4_0: d = -max/8 with max the signed largest-magnitude value, so max itself maps to q = 0
 * (value -8 * d) and the asymmetric range -8..7 is used on the side that needs it. */
static void quant_q4_0(const float *x, void *dst, int64_t nb) {
    ts_block_q4_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        ts_st_half(y[i].d, d);
        for (int j = 0; j < 16; j++) {
            const unsigned lo = nibble_max15(trunc_i8(x[j] * id + 8.5f));
            const unsigned hi = nibble_max15(trunc_i8(x[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Q4_1: d = (max - min) / 15, m = min, q = round-half-up((x - min) / d). */
static void quant_q4_1(const float *x, void *dst, int64_t nb) {
    ts_block_q4_1 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        min_max(x, 32, &min, &max);
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        ts_st_half(y[i].d, d);
        ts_st_half(y[i].m, min);
        for (int j = 0; j < 16; j++) {
            const unsigned lo = nibble_max15(trunc_i8((x[j] - min) * id + 0.5f));
            const unsigned hi = nibble_max15(trunc_i8((x[j + 16] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Pack 32 five-bit quants: low nibbles as Q4_0, fifth bit of element k into bit k of qh. */
static void pack_q5(const int *q, uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    ts_st_u32(qh, h);
}

/* Q5_0: as Q4_0 with 5 bits: d = -max/16, q in 0..31. */
static void quant_q5_0(const float *x, void *dst, int64_t nb) {
    ts_block_q5_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        ts_st_half(y[i].d, d);
        int q[32];
        for (int j = 0; j < 32; j++) {
            const int v = trunc_i8(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v < 31 ? v : 31);
        }
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

/* Q5_1: as Q4_1 with 5 bits: d = (max - min) / 31 (ggml does not clamp q here; it cannot exceed
 * 31 for finite input). */
static void quant_q5_1(const float *x, void *dst, int64_t nb) {
    ts_block_q5_1 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float min, max;
        min_max(x, 32, &min, &max);
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        ts_st_half(y[i].d, d);
        ts_st_half(y[i].m, min);
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)ts_trunc_int((x[j] - min) * id + 0.5f);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

/* Q1_0: d = mean |x|, one sign bit per element (x >= 0 sets it). */
static void quant_q1_0(const float *x, void *dst, int64_t nb) {
    ts_block_q1_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK1_0) {
        float sum_abs = 0.0f;
        for (int j = 0; j < TS_QK1_0; j++) sum_abs += fabsf(x[j]);
        ts_st_half(y[i].d, sum_abs / TS_QK1_0);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < TS_QK1_0; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

/* Q2_0: d = absmax, code = clamp(round(x / d), -1, 2) + 1, four codes a byte, LSB first. */
static void quant_q2_0(const float *x, void *dst, int64_t nb) {
    ts_block_q2_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK2_0) {
        float amax = 0.0f;
        for (int j = 0; j < TS_QK2_0; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
        const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
        ts_st_half(y[i].d, amax);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < TS_QK2_0; j++) {
            int q = ts_trunc_int(roundf(x[j] * id));
            q = q < -1 ? 0 : q > 2 ? 3 : q + 1; /* ggml: +1 first, then clamp to 0..3 */
            y[i].qs[j / 4] |= (uint8_t)(q << (2 * (j % 4)));
        }
    }
}

static const ts_quant_fn k_quant[TS_TYPE_COUNT] = {
    [TS_TYPE_F32] = quant_f32,
    [TS_TYPE_F16] = quant_f16,
    [TS_TYPE_BF16] = quant_bf16,
    [TS_TYPE_Q8_0] = quant_q8_0,
    [TS_TYPE_Q4_0] = quant_q4_0,
    [TS_TYPE_Q4_1] = quant_q4_1,
    [TS_TYPE_Q5_0] = quant_q5_0,
    [TS_TYPE_Q5_1] = quant_q5_1,
    [TS_TYPE_Q2_K] = ts_quantize_q2_K,
    [TS_TYPE_Q3_K] = ts_quantize_q3_K,
    [TS_TYPE_Q4_K] = ts_quantize_q4_K,
    [TS_TYPE_Q5_K] = ts_quantize_q5_K,
    [TS_TYPE_Q6_K] = ts_quantize_q6_K,
    [TS_TYPE_IQ4_NL] = ts_quantize_iq4_nl,
    [TS_TYPE_IQ4_XS] = ts_quantize_iq4_xs,
    [TS_TYPE_MXFP4] = ts_quantize_mxfp4,
    [TS_TYPE_NVFP4] = ts_quantize_nvfp4,
    [TS_TYPE_Q1_0] = quant_q1_0,
    [TS_TYPE_Q2_0] = quant_q2_0,
    [TS_TYPE_IQ2_S] = ts_quantize_iq2_s,
    [TS_TYPE_IQ1_M] = ts_quantize_iq1_m,
    [TS_TYPE_IQ3_XXS] = ts_quantize_iq3_xxs,
    [TS_TYPE_IQ3_S] = ts_quantize_iq3_s,
};

/* Types whose quantizer uses importance weights (ggml's quantize_<type> with quant_weights). */
static const ts_quant_w_fn k_quant_w[TS_TYPE_COUNT] = {
    [TS_TYPE_Q2_K] = ts_quantize_q2_K_w,       [TS_TYPE_Q3_K] = ts_quantize_q3_K_w,
    [TS_TYPE_Q4_K] = ts_quantize_q4_K_w,       [TS_TYPE_Q5_K] = ts_quantize_q5_K_w,
    [TS_TYPE_Q6_K] = ts_quantize_q6_K_w,       [TS_TYPE_IQ4_NL] = ts_quantize_iq4_nl_w,
    [TS_TYPE_IQ4_XS] = ts_quantize_iq4_xs_w,   [TS_TYPE_IQ1_S] = ts_quantize_iq1_s_w,
    [TS_TYPE_IQ1_M] = ts_quantize_iq1_m_w,     [TS_TYPE_IQ2_XXS] = ts_quantize_iq2_xxs_w,
    [TS_TYPE_IQ2_XS] = ts_quantize_iq2_xs_w,   [TS_TYPE_IQ2_S] = ts_quantize_iq2_s_w,
    [TS_TYPE_IQ3_XXS] = ts_quantize_iq3_xxs_w, [TS_TYPE_IQ3_S] = ts_quantize_iq3_s_w,
};

bool ts_can_quantize_imatrix(uint32_t type) {
    return ts_type_get(type) && k_quant_w[type];
}

bool ts_can_quantize(uint32_t type) {
    return ts_type_get(type) && k_quant[type];
}

bool ts_quantize_needs_imatrix(uint32_t type) {
    return ts_can_quantize_imatrix(type) && !k_quant[type];
}

/* Index of the first NaN or infinity, or -1. */
static int64_t first_non_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* The checks of ts_quantize_row: a known type with a quantizer (one with importance weights when
 * weighted), whole blocks, finite input. */
static int check_row(uint32_t type, const float *src, void *dst, int64_t n, bool weighted, char *err,
                     size_t errlen) {
    const ts_type_traits *t = ts_type_get(type);
    if (!t) return ts_errf(err, errlen, "cannot quantize: %u is not a ggml tensor type id", type);
    if (!weighted && ts_quantize_needs_imatrix(type))
        return ts_errf(err, errlen,
                       "cannot quantize to %s without an importance matrix: ggml's %s quantizer needs one "
                       "(make it with `turbospark imatrix -m MODEL.gguf -f TEXT`, then pass --imatrix FILE)",
                       t->name, t->name);
    if (weighted ? !k_quant_w[type] : !k_quant[type])
        return ts_errf(err, errlen, "cannot quantize to type %s (id %u): this type is not supported yet",
                       t->name, type);
    if (n < 0 || n % t->block_size != 0)
        return ts_errf(
            err, errlen,
            "cannot quantize a row of %lld elements to %s: the count must be a multiple of the block "
            "size %lld",
            (long long)n, t->name, (long long)t->block_size);
    if (n > 0 && (!src || !dst))
        return ts_errf(err, errlen, "cannot quantize to %s: source or destination is NULL", t->name);
    if (t->block_size > 1) {
        const int64_t bad = first_non_finite(src, n);
        if (bad >= 0)
            return ts_errf(
                err, errlen,
                "cannot quantize to %s: element %lld of the row is %s (%s holds finite values only)", t->name,
                (long long)bad, isnan(src[bad]) ? "NaN" : "infinite", t->name);
    }
    return 0;
}

int ts_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, char *err, size_t errlen) {
    if (check_row(type, src, dst, n, false, err, errlen)) return -1;
    k_quant[type](src, dst, n / ts_type_get(type)->block_size);
    return 0;
}

int ts_quantize_row_imatrix(uint32_t type, const float *src, void *dst, int64_t n, const float *qw, char *err,
                            size_t errlen) {
    if (!qw) return ts_quantize_row(type, src, dst, n, err, errlen);
    if (!ts_can_quantize_imatrix(type))
        return ts_errf(err, errlen,
                       "cannot quantize to %s with importance weights: not supported for this type",
                       ts_type_name(type));
    for (int64_t i = 0; i < n; i++)
        if (!(qw[i] >= 0 && isfinite(qw[i])))
            return ts_errf(err, errlen, "importance weight %lld is %g (weights are finite and >= 0)",
                           (long long)i, (double)qw[i]);
    if (check_row(type, src, dst, n, true, err, errlen)) return -1;
    k_quant_w[type](src, dst, n / ts_type_get(type)->block_size, qw);
    return 0;
}
