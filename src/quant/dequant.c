/* Reference dequantization of one row: ggml block bytes -> fp32.
 *
 * One small function per format, each the format's definition written out: which bits of which
 * byte hold element i, and the scale arithmetic in ggml's order (so results are bit-identical to
 * ggml's dequantize_row_*). Scalar on purpose: this is the oracle the SIMD and CUDA kernels are
 * tested against, so it favours being obviously right over being fast.
 *
 * The lattice i-quants (IQ1_S .. IQ3_S) are in dequant_iq.c.
 *
 * ts_dequantize_row dispatches through a table indexed by type id; a NULL entry means "known
 * type, no dequantizer yet" and is refused with a message naming the type. */
#include "common/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#include <math.h>

float ts_e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23; /* 2^(e-128) */
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float ts_ue4m3_to_fp32_half(uint8_t x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    int exp = (x >> 3) & 0xf, man = x & 0x7;
    float raw = exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return raw * 0.5f;
}

static void dequant_f32(const void *src, float *y, int64_t n) {
    memcpy(y, src, (size_t)n * sizeof(float));
}

static void dequant_f16(const void *src, float *y, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) y[i] = ts_ld_half(p + 2 * i);
}

static void dequant_bf16(const void *src, float *y, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) y[i] = ts_bf16_to_fp32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
}

/* Q8_0: y = d * q, q a signed byte. */
static void dequant_q8_0(const void *src, float *y, int64_t nb) {
    const ts_block_q8_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = b[i].qs[j] * d;
    }
}

/* Q4_0: byte j holds element j (low nibble) and element j+16 (high); y = d * (q - 8). */
static void dequant_q4_0(const void *src, float *y, int64_t nb) {
    const ts_block_q4_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = ((b[i].qs[j] & 0xf) - 8) * d;
            y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: nibbles as Q4_0; y = d * q + m. */
static void dequant_q4_1(const void *src, float *y, int64_t nb) {
    const ts_block_q4_1 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d), m = ts_ld_half(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (b[i].qs[j] & 0xf) * d + m;
            y[j + 16] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0: nibbles as Q4_0, fifth bit of element k is bit k of the little-endian qh; y = d*(q-16). */
static void dequant_q5_0(const void *src, float *y, int64_t nb) {
    const ts_block_q5_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d);
        const uint32_t qh = ts_ld_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (lo - 16) * d;
            y[j + 16] = (hi - 16) * d;
        }
    }
}

/* Q5_1: bits as Q5_0; y = d * q + m. */
static void dequant_q5_1(const void *src, float *y, int64_t nb) {
    const ts_block_q5_1 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d), m = ts_ld_half(b[i].m);
        const uint32_t qh = ts_ld_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = lo * d + m;
            y[j + 16] = hi * d + m;
        }
    }
}

/* Q2_K: each 128-element half uses 32 bytes of qs; element 32*s + l of the half sits in bits
 * 2s..2s+1 of byte l. Sub-block k (16 elements) has scale byte k: y = d*(sc&15)*q - dmin*(sc>>4). */
static void dequant_q2_K(const void *src, float *y, int64_t nb) {
    const ts_block_q2_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d), dmin = ts_ld_half(b[i].dmin);
        for (int e = 0; e < TS_QK_K; e++) {
            const int half = e / 128, s = (e % 128) / 32, l = e % 32;
            const uint8_t sc = b[i].scales[e / 16];
            const int q = (b[i].qs[32 * half + l] >> (2 * s)) & 3;
            *y++ = d * (sc & 0xf) * q - dmin * (sc >> 4);
        }
    }
}

/* Q3_K 6-bit scale k (0..15): low nibble from byte k (k < 8) or high nibble of byte k-8,
 * top 2 bits from byte 8 + k%4 at bit 2*(k/4). Biased by 32. */
static int q3_K_scale(const uint8_t *sc, int k) {
    const int low = k < 8 ? sc[k] & 0xf : sc[k - 8] >> 4;
    const int high = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (low | (high << 4)) - 32;
}

/* Q3_K: low 2 bits placed as Q2_K; the third bit of element 32*s + l of half h is bit 4h+s of
 * hmask[l], and a clear bit means subtract 4. y = d * scale * q, q in -4..3. */
static void dequant_q3_K(const void *src, float *y, int64_t nb) {
    const ts_block_q3_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int k = 0; k < 16; k++) {
            const float dl = d * q3_K_scale(b[i].scales, k);
            for (int e = 16 * k; e < 16 * k + 16; e++) {
                const int half = e / 128, s = (e % 128) / 32, l = e % 32;
                const int low = (b[i].qs[32 * half + l] >> (2 * s)) & 3;
                const int high_set = (b[i].hmask[l] >> (4 * half + s)) & 1;
                *y++ = dl * (low - (high_set ? 0 : 4));
            }
        }
    }
}

/* Q4_K: 64-element pairs of sub-blocks share 32 bytes: sub-block 2p in the low nibbles, 2p+1 in
 * the high. y = d*scale*q - dmin*min with 6-bit scale/min per 32 elements. */
static void dequant_q4_K(const void *src, float *y, int64_t nb) {
    const ts_block_q4_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d), dmin = ts_ld_half(b[i].dmin);
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            ts_scale_min_k4(sb, b[i].scales, &sc, &m);
            const float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            for (int l = 0; l < 32; l++) *y++ = dl * ((q[l] >> shift) & 0xf) - ml;
        }
    }
}

/* Q5_K: low 4 bits as Q4_K; the fifth bit of element l of sub-block sb is bit sb of qh[l]. */
static void dequant_q5_K(const void *src, float *y, int64_t nb) {
    const ts_block_q5_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d), dmin = ts_ld_half(b[i].dmin);
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            ts_scale_min_k4(sb, b[i].scales, &sc, &m);
            const float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 0xf) + (((b[i].qh[l] >> sb) & 1) ? 16 : 0);
                *y++ = dl * v - ml;
            }
        }
    }
}

/* Q6_K: per 128-element half h, quarter s (32 elements), element l: low nibble from
 * ql[64h + l + 32*(s%2)] (low nibble for s < 2, high for s >= 2), high 2 bits from bits 2s..2s+1
 * of qh[32h + l]. q = that 6-bit value - 32; y = d * scale[e/16] * q. */
static void dequant_q6_K(const void *src, float *y, int64_t nb) {
    const ts_block_q6_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int e = 0; e < TS_QK_K; e++) {
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            const int lo = (b[i].ql[64 * h + l + 32 * (s % 2)] >> (4 * (s / 2))) & 0xf;
            const int hi = (b[i].qh[32 * h + l] >> (2 * s)) & 3;
            const int q = (lo | (hi << 4)) - 32;
            *y++ = d * b[i].scales[e / 16] * q;
        }
    }
}

/* Q8_K: fp32 scale, y = d * q. */
static void dequant_q8_K(const void *src, float *y, int64_t nb) {
    const ts_block_q8_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const uint32_t bits = ts_ld_u32(b[i].d);
        float d;
        memcpy(&d, &bits, sizeof d);
        for (int j = 0; j < TS_QK_K; j++) *y++ = d * b[i].qs[j];
    }
}

/* IQ4_NL: nibbles placed as Q4_0, each an index into the non-linear codebook; y = d * kv[q]. */
static void dequant_iq4_nl(const void *src, float *y, int64_t nb) {
    const ts_block_iq4_nl *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_ld_half(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ts_kvalues_iq4nl[b[i].qs[j] & 0xf];
            y[j + 16] = d * ts_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

/* IQ4_XS: eight IQ4_NL-style 32-element sub-blocks with 6-bit scales biased by 32: low 4 bits in
 * scales_l (two per byte), high 2 bits in scales_h (two bits per sub-block). */
static void dequant_iq4_xs(const void *src, float *y, int64_t nb) {
    const ts_block_iq4_xs *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        const unsigned scales_h = b[i].scales_h[0] | (b[i].scales_h[1] << 8);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls =
                ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            const uint8_t *q = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * ts_kvalues_iq4nl[q[j] & 0xf];
                y[j + 16] = dl * ts_kvalues_iq4nl[q[j] >> 4];
            }
        }
    }
}

/* MXFP4: E2M1 nibbles placed as Q4_0, one E8M0 power-of-two scale per 32 elements. */
static void dequant_mxfp4(const void *src, float *y, int64_t nb) {
    const ts_block_mxfp4 *b = src;
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = ts_e8m0_to_fp32_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = ts_kvalues_fp4x2[b[i].qs[j] & 0xf] * d;
            y[j + 16] = ts_kvalues_fp4x2[b[i].qs[j] >> 4] * d;
        }
    }
}

/* NVFP4: four 16-element sub-blocks, each with a UE4M3 scale and 8 bytes: byte j holds element j
 * (low nibble) and element j+8 (high) of its sub-block. */
static void dequant_nvfp4(const void *src, float *y, int64_t nb) {
    const ts_block_nvfp4 *b = src;
    for (int64_t i = 0; i < nb; i++) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = ts_ue4m3_to_fp32_half(b[i].d[s]);
            const uint8_t *q = b[i].qs + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = ts_kvalues_fp4x2[q[j] & 0xf] * d;
                y[j + 8] = ts_kvalues_fp4x2[q[j] >> 4] * d;
            }
        }
    }
}

/* Q1_0: bit i (LSB first) set means +d, clear means -d. */
static void dequant_q1_0(const void *src, float *y, int64_t nb) {
    const ts_block_q1_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += TS_QK1_0) {
        const float d = ts_ld_half(b[i].d);
        for (int j = 0; j < TS_QK1_0; j++) y[j] = ((b[i].qs[j / 8] >> (j % 8)) & 1) ? d : -d;
    }
}

/* Q2_0: element j in bits 2*(j%4) of byte j/4; codes 0..3 mean -1, 0, +1, +2 times d. */
static void dequant_q2_0(const void *src, float *y, int64_t nb) {
    const ts_block_q2_0 *b = src;
    for (int64_t i = 0; i < nb; i++, y += TS_QK2_0) {
        const float d = ts_ld_half(b[i].d);
        for (int j = 0; j < TS_QK2_0; j++) y[j] = (((b[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

static const ts_dequant_fn k_dequant[TS_TYPE_COUNT] = {
    [TS_TYPE_F32] = dequant_f32,
    [TS_TYPE_F16] = dequant_f16,
    [TS_TYPE_BF16] = dequant_bf16,
    [TS_TYPE_Q8_0] = dequant_q8_0,
    [TS_TYPE_Q4_0] = dequant_q4_0,
    [TS_TYPE_Q4_1] = dequant_q4_1,
    [TS_TYPE_Q5_0] = dequant_q5_0,
    [TS_TYPE_Q5_1] = dequant_q5_1,
    [TS_TYPE_Q2_K] = dequant_q2_K,
    [TS_TYPE_Q3_K] = dequant_q3_K,
    [TS_TYPE_Q4_K] = dequant_q4_K,
    [TS_TYPE_Q5_K] = dequant_q5_K,
    [TS_TYPE_Q6_K] = dequant_q6_K,
    [TS_TYPE_Q8_K] = dequant_q8_K,
    [TS_TYPE_IQ4_NL] = dequant_iq4_nl,
    [TS_TYPE_IQ4_XS] = dequant_iq4_xs,
    [TS_TYPE_MXFP4] = dequant_mxfp4,
    [TS_TYPE_NVFP4] = dequant_nvfp4,
    [TS_TYPE_Q1_0] = dequant_q1_0,
    [TS_TYPE_Q2_0] = dequant_q2_0,
    [TS_TYPE_IQ2_XXS] = ts_dequantize_iq2_xxs,
    [TS_TYPE_IQ2_XS] = ts_dequantize_iq2_xs,
    [TS_TYPE_IQ2_S] = ts_dequantize_iq2_s,
    [TS_TYPE_IQ3_XXS] = ts_dequantize_iq3_xxs,
    [TS_TYPE_IQ3_S] = ts_dequantize_iq3_s,
    [TS_TYPE_IQ1_S] = ts_dequantize_iq1_s,
    [TS_TYPE_IQ1_M] = ts_dequantize_iq1_m,
};

bool ts_can_dequantize(uint32_t type) {
    return ts_type_get(type) && k_dequant[type];
}

int ts_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n, char *err, size_t errlen) {
    const ts_type_traits *t = ts_type_get(type);
    if (!t) return ts_errf(err, errlen, "cannot dequantize: %u is not a ggml tensor type id", type);
    if (!k_dequant[type])
        return ts_errf(err, errlen, "cannot dequantize type %s (id %u): this type is not supported yet",
                       t->name, type);
    if (n < 0 || n % t->block_size != 0)
        return ts_errf(err, errlen,
                       "cannot dequantize a row of %lld %s elements: the count must be a multiple of the "
                       "block size %lld",
                       (long long)n, t->name, (long long)t->block_size);
    if (n > 0 && (!src || !dst))
        return ts_errf(err, errlen, "cannot dequantize %s: source or destination is NULL", t->name);
    k_dequant[type](src, dst, n / t->block_size);
    return 0;
}
