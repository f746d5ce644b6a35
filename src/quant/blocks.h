/* Private to src/quant: ggml's block layouts and the small helpers the codecs share.
 *
 * Every block is a struct of byte arrays, so it has alignment 1, no padding, and the same bytes
 * on any host: fp16 scales are read and written little-endian through ts_ld_half/ts_st_half.
 * Sizes are asserted against ggml's (ggml-common.h). Element order inside a block is ggml's;
 * each codec comments where a quant of element i lives.
 *
 * Bit-exactness with ggml's reference code needs the same float operations in the same order
 * and no fused multiply-add: we build as ISO C11 (-std=c11), where GCC does not contract. */
#ifndef TS_QUANT_BLOCKS_H
#define TS_QUANT_BLOCKS_H

#include "common/half.h"

#include <stdint.h>
#include <string.h>

/* Elements per block where the codecs use them by name; the legacy formats (Q4_0 .. Q8_0, IQ4_NL,
 * MXFP4) are written with a literal 32, NVFP4 as four sub-blocks of 16. */
#define TS_QK_K 256 /* K-quant and i-quant super-blocks */
#define TS_QK1_0 128
#define TS_QK2_0 64

typedef struct {
    uint8_t d[2];
    uint8_t qs[16];
} ts_block_q4_0; /* 18 */
typedef struct {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qs[16];
} ts_block_q4_1; /* 20 */
typedef struct {
    uint8_t d[2];
    uint8_t qh[4];
    uint8_t qs[16];
} ts_block_q5_0; /* 22 */
typedef struct {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[16];
} ts_block_q5_1; /* 24 */
typedef struct {
    uint8_t d[2];
    int8_t qs[32];
} ts_block_q8_0; /* 34 */
typedef struct {
    uint8_t d[2];
    uint8_t qs[16];
} ts_block_iq4_nl; /* 18 */
typedef struct {
    uint8_t e;
    uint8_t qs[16];
} ts_block_mxfp4; /* 17 */
typedef struct {
    uint8_t d[4];
    uint8_t qs[32];
} ts_block_nvfp4; /* 36 */
typedef struct {
    uint8_t d[2];
    uint8_t qs[16];
} ts_block_q1_0; /* 18 */
typedef struct {
    uint8_t d[2];
    uint8_t qs[16];
} ts_block_q2_0; /* 18 */

typedef struct {
    uint8_t scales[16]; /* per 16-element sub-block: low nibble scale, high nibble min */
    uint8_t qs[64];     /* 2-bit quants */
    uint8_t d[2];       /* fp16 super-scale of the scales */
    uint8_t dmin[2];    /* fp16 super-scale of the mins */
} ts_block_q2_K;        /* 84 */

typedef struct {
    uint8_t hmask[32];  /* high (third) bit of each quant */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 signed 6-bit scales, biased by 32 */
    uint8_t d[2];       /* fp16 super-scale */
} ts_block_q3_K;        /* 110 */

typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12]; /* 8 scales + 8 mins, 6 bits each (see ts_scale_min_k4) */
    uint8_t qs[128];    /* 4-bit quants */
} ts_block_q4_K;        /* 144 */

typedef struct {
    uint8_t d[2], dmin[2];
    uint8_t scales[12];
    uint8_t qh[32];  /* fifth bit */
    uint8_t qs[128]; /* low 4 bits */
} ts_block_q5_K;     /* 176 */

typedef struct {
    uint8_t ql[128];   /* low 4 bits */
    uint8_t qh[64];    /* high 2 bits */
    int8_t scales[16]; /* per 16-element sub-block */
    uint8_t d[2];
} ts_block_q6_K; /* 210 */

typedef struct {
    uint8_t d[4]; /* fp32, little-endian */
    int8_t qs[256];
    uint8_t bsums[16][2]; /* int16 sums of 16 quants (only for dot products) */
} ts_block_q8_K;          /* 292 */

typedef struct {
    uint8_t d[2];
    uint8_t scales_h[2]; /* uint16, little-endian: high 2 bits of 8 scales */
    uint8_t scales_l[4]; /* low 4 bits of 8 scales */
    uint8_t qs[128];
} ts_block_iq4_xs; /* 136 */

/* The i-quants (IQ1_S .. IQ3_S): groups of 8 (IQ3: 4) weights coded as an index into a lattice
 * table (quant/iq_grids.h) plus sign bits, with 4-bit (IQ1: 3-bit) scales per 16 or 32 elements.
 * uint16/uint32 fields of ggml's structs are little-endian byte pairs/quads here. */
typedef struct {
    uint8_t d[2];
    uint8_t qs[64]; /* per 32 elements 8 bytes: 4 grid indices, then a uint32 of 4 x 7 sign bits
                     * and the 4-bit scale in bits 28-31 */
} ts_block_iq2_xxs; /* 66 */

typedef struct {
    uint8_t d[2];
    uint8_t qs[64];    /* 32 uint16: 9-bit grid index | 7-bit sign index << 9 */
    uint8_t scales[8]; /* two 4-bit scales per 32 elements (low nibble: elements 0-15) */
} ts_block_iq2_xs;     /* 74 */

typedef struct {
    uint8_t d[2];
    uint8_t qs[64];    /* bytes 0-31: low 8 bits of 32 grid indices; 32-63: 8 sign bits each */
    uint8_t qh[8];     /* per 32 elements: the top 2 bits of its 4 grid indices */
    uint8_t scales[8]; /* as IQ2_XS */
} ts_block_iq2_s;      /* 82 */

typedef struct {
    uint8_t d[2];
    uint8_t qs[96]; /* bytes 0-63: 64 grid indices (4 elements each); 64-95: 8 uint32 of
                     * 4 x 7 sign bits and a 4-bit scale in bits 28-31 */
} ts_block_iq3_xxs; /* 98 */

typedef struct {
    uint8_t d[2];
    uint8_t qs[64];    /* low 8 bits of 64 grid indices */
    uint8_t qh[8];     /* ninth bit of each index: bit k of qh[i] for index 8i + k */
    uint8_t signs[32]; /* one sign bit per element */
    uint8_t scales[4]; /* two 4-bit scales per 64 elements */
} ts_block_iq3_s;      /* 110 */

typedef struct {
    uint8_t d[2];
    uint8_t qs[32]; /* low 8 bits of 32 grid indices */
    uint8_t qh[16]; /* per 32 elements a uint16: 4 x 3 high index bits, 3-bit scale in 12-14,
                     * the delta's sign in bit 15 */
} ts_block_iq1_s;   /* 50 */

typedef struct {
    uint8_t qs[32];    /* low 8 bits of 32 grid indices */
    uint8_t qh[16];    /* per pair of indices: 3 high bits + the delta's sign, one nibble each */
    uint8_t scales[8]; /* 4 uint16: 3-bit scales per 16 elements in bits 0-11, and the fp16
                        * super-scale spread over their top nibbles */
} ts_block_iq1_m;      /* 56 */

_Static_assert(sizeof(ts_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(ts_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(ts_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(ts_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(ts_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(ts_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(ts_block_mxfp4) == 17, "mxfp4 block");
_Static_assert(sizeof(ts_block_nvfp4) == 36, "nvfp4 block");
_Static_assert(sizeof(ts_block_q1_0) == 18, "q1_0 block");
_Static_assert(sizeof(ts_block_q2_0) == 18, "q2_0 block");
_Static_assert(sizeof(ts_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(ts_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(ts_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(ts_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(ts_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(ts_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(ts_block_iq4_xs) == 136, "iq4_xs block");
_Static_assert(sizeof(ts_block_iq2_xxs) == 66, "iq2_xxs block");
_Static_assert(sizeof(ts_block_iq2_xs) == 74, "iq2_xs block");
_Static_assert(sizeof(ts_block_iq2_s) == 82, "iq2_s block");
_Static_assert(sizeof(ts_block_iq3_xxs) == 98, "iq3_xxs block");
_Static_assert(sizeof(ts_block_iq3_s) == 110, "iq3_s block");
_Static_assert(sizeof(ts_block_iq1_s) == 50, "iq1_s block");
_Static_assert(sizeof(ts_block_iq1_m) == 56, "iq1_m block");

/* The IQ4_NL / IQ4_XS codebook (ggml's kvalues_iq4nl). */
static const int8_t ts_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 (FP4) values times two, as ggml keeps them (kvalues_mxfp4); the block scales are halved
 * to match (ts_e8m0_to_fp32_half, ts_ue4m3_to_fp32_half). */
static const int8_t ts_kvalues_fp4x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float ts_ld_half(const uint8_t p[2]) {
    return ts_fp16_to_fp32((uint16_t)(p[0] | (p[1] << 8)));
}

static inline void ts_st_half(uint8_t p[2], float v) {
    uint16_t h = ts_fp32_to_fp16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static inline uint32_t ts_ld_u32(const uint8_t p[4]) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void ts_st_u32(uint8_t p[4], uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Round to nearest, ties to even, by the 1.5*2^23 trick ggml uses (nearest_int). Exact for
 * |v| < 2^22; outside that it returns the same garbage as ggml, with no undefined behaviour. */
static inline int ts_nearest_int(float v) {
    float biased = v + 12582912.f;
    int32_t i;
    memcpy(&i, &biased, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* float -> int truncation with x86 semantics for what C leaves undefined: NaN and values out of
 * int range give INT32_MIN, as cvttss2si does in ggml's builds. */
static inline int32_t ts_trunc_int(float v) {
    if (!(v > -2147483648.f && v < 2147483648.f)) return INT32_MIN;
    return (int32_t)v;
}

/* K-quant 6-bit scale j (0..7) and min j from the 12 packed bytes of Q4_K / Q5_K:
 * j < 4: low 6 bits of bytes j and j+4; j >= 4: a nibble of byte j+4 plus the top 2 bits of
 * bytes j-4 (scale) and j (min). */
static inline void ts_scale_min_k4(int j, const uint8_t *q, uint8_t *scale, uint8_t *min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *min = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* E8M0 exponent byte -> 2^(e-128), i.e. half the MX scale (NaN byte 0xff not special-cased). */
float ts_e8m0_to_fp32_half(uint8_t e);
/* UE4M3 byte (unsigned, 4-bit exponent biased by 7, 3-bit mantissa) -> half its value;
 * 0x00 and 0x7f (NaN) give 0. */
float ts_ue4m3_to_fp32_half(uint8_t x);
/* Positive float -> nearest UE4M3 byte as ggml rounds it (saturating at 0x7e = 448). */
uint8_t ts_fp32_to_ue4m3(float x);

/* Per-format block codecs: nb blocks from src to dst. Dequantizers live in dequant.c (the
 * i-quants' in dequant_iq.c);
 * quantizers in quantize.c (32-element and plain types), quantize_k.c (K-quants) and
 * quantize_iq.c (IQ4_NL, IQ4_XS, MXFP4, NVFP4), quantize_lattice.c (IQ2_XXS .. IQ3_S),
 * quantize_iq1.c (IQ1_S, IQ1_M). */
typedef void (*ts_dequant_fn)(const void *src, float *dst, int64_t nb);
typedef void (*ts_quant_fn)(const float *src, void *dst, int64_t nb);

void ts_dequantize_iq2_xxs(const void *src, float *y, int64_t nb);
void ts_dequantize_iq2_xs(const void *src, float *y, int64_t nb);
void ts_dequantize_iq2_s(const void *src, float *y, int64_t nb);
void ts_dequantize_iq3_xxs(const void *src, float *y, int64_t nb);
void ts_dequantize_iq3_s(const void *src, float *y, int64_t nb);
void ts_dequantize_iq1_s(const void *src, float *y, int64_t nb);
void ts_dequantize_iq1_m(const void *src, float *y, int64_t nb);
void ts_quantize_q2_K(const float *x, void *dst, int64_t nb);
void ts_quantize_q3_K(const float *x, void *dst, int64_t nb);
void ts_quantize_q4_K(const float *x, void *dst, int64_t nb);
void ts_quantize_q5_K(const float *x, void *dst, int64_t nb);
void ts_quantize_q6_K(const float *x, void *dst, int64_t nb);
/* With importance weights qw (nb · 256 floats; ggml's quant_weights of the row). */
typedef void (*ts_quant_w_fn)(const float *src, void *dst, int64_t nb, const float *qw);
void ts_quantize_q2_K_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_q3_K_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_q4_K_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_q5_K_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_q6_K_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq4_nl_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq4_xs_w(const float *x, void *dst, int64_t nb, const float *qw);
/* ggml's make_qp_quants (quantize_k.c): x[n] >= 0 fitted as scale · L, L in 0..nmax, weights w. */
float ts_fit_positive(int n, int nmax, const float *x, uint8_t *L, const float *w);
void ts_quantize_iq4_nl(const float *x, void *dst, int64_t nb);
void ts_quantize_iq4_xs(const float *x, void *dst, int64_t nb);
void ts_quantize_mxfp4(const float *x, void *dst, int64_t nb);
void ts_quantize_nvfp4(const float *x, void *dst, int64_t nb);
/* The lattice i-quants (quantize_lattice.c); IQ2_XXS and IQ2_XS only with weights. */
void ts_quantize_iq2_xxs_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq2_xs_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq2_s(const float *x, void *dst, int64_t nb);
void ts_quantize_iq2_s_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq3_xxs(const float *x, void *dst, int64_t nb);
void ts_quantize_iq3_xxs_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq3_s(const float *x, void *dst, int64_t nb);
void ts_quantize_iq3_s_w(const float *x, void *dst, int64_t nb, const float *qw);
/* IQ1_S (only with weights) and IQ1_M (quantize_iq1.c). */
void ts_quantize_iq1_s_w(const float *x, void *dst, int64_t nb, const float *qw);
void ts_quantize_iq1_m(const float *x, void *dst, int64_t nb);
void ts_quantize_iq1_m_w(const float *x, void *dst, int64_t nb, const float *qw);

#endif
