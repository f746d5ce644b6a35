/* Fused quantized-weight × fp32-activation dot kernels (see dot.h).
 *
 * Layout of this file:
 *   1. the scalar kernel: any dequantizable type, through the reference dequantizer
 *   2. x86 SIMD (compiled with function target attributes, chosen at run time):
 *      a. per-type block decoders: a block context (the K-quants' sub-block scales, unpacked once
 *         per super-block) and chunk c (32 elements) of a block -> 32 small integers q (int8), the
 *         scale of elements 0-15 and 16-31 and an additive offset, so that the weight is
 *         fp32(q)·s (+ o) — exactly the operations of the reference dequantizer, so the decoded
 *         weights are bit-identical to ts_dequantize_row's (no FMA in the decode);
 *         AVX-512 decodes the 4-bit types (Q4_0, Q4_1, IQ4_NL, Q4_K) by a 16-entry vpermps table
 *         of the weights a (sub-)block can take, computed with the same float operations;
 *      b. the register-tile drivers: R rows × TG tokens of accumulators, FMA of each decoded
 *         chunk with TG token vectors. AVX-512 (16 lanes): one row × up to 4 tokens, or for token
 *         blocks of 8 tokens or more (prefill) four rows × up to 4 tokens (one accumulator each);
 *         AVX2 (8 lanes): one row × up to 4 tokens;
 *      c. the per-type kernels and their tables
 *   3. path selection
 *
 * Summation: every (row, token) keeps 2 vector accumulators (1 in the 4-row × 4-token tile; 4
 * when a tile holds at most two dot products, to hide the FMA latency in decode): 32 (64) fp32 lanes on AVX-512, 16 (32) on AVX2,
 * reduced at the end of the row; the plain-type tail (n not a multiple of 32) is added in scalar.
 * Tokens are processed in blocks whose activations (≈192 KiB) stay in L2 while the rows stream
 * through. Build with -DTS_DOT_NO_SIMD for the scalar kernel only. */
#include "cpu/dot.h"

#include "common/half.h"
#include "quant/blocks.h" /* ggml block layouts (byte-identical to ggml-common.h) */
#include "quant/iq_grids.h"
#include "quant/quant.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(TS_DOT_NO_SIMD)
#define TS_DOT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- 1. scalar kernel ----------------------------------------------------------------------- */

enum { SCALAR_PIECE = 256, SCALAR_TG = 8 };

/* Dequantize the row in pieces of ≤ 256 elements (whole blocks) with the reference dequantizer and
 * dot each piece with up to 8 tokens at once, 8 fp32 partial sums a token (vectorisable without
 * reassociation). Pieces are re-dequantized for each group of 8 tokens: this is the fallback. */
static void dot_scalar(uint32_t type, const uint8_t *w, size_t rb, int64_t nr, int64_t n, const float *x,
                       int64_t ldx, int64_t T, float *y, int64_t ldy) {
    const ts_type_traits *tt = ts_type_get(type);
    const int64_t qk = tt->block_size;
    const int64_t piece = SCALAR_PIECE / qk * qk; /* every dequantizable type has qk ≤ 256 */
    const size_t piece_bytes = ts_row_size(type, piece);
    float buf[SCALAR_PIECE];
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        for (int64_t t0 = 0; t0 < T; t0 += SCALAR_TG) {
            const int64_t tg = T - t0 < SCALAR_TG ? T - t0 : SCALAR_TG;
            float acc[SCALAR_TG][8] = {{0}};
            float tail[SCALAR_TG] = {0};
            for (int64_t i0 = 0; i0 < n; i0 += piece) {
                const int64_t len = n - i0 < piece ? n - i0 : piece;
                ts_dequantize_row(type, row + (size_t)(i0 / piece) * piece_bytes, buf, len, NULL, 0);
                const int64_t len8 = len / 8 * 8;
                for (int64_t t = 0; t < tg; t++) {
                    const float *xt = x + (t0 + t) * ldx + i0;
                    for (int64_t i = 0; i < len8; i += 8)
                        for (int k = 0; k < 8; k++) acc[t][k] += buf[i + k] * xt[i + k];
                    for (int64_t i = len8; i < len; i++) tail[t] += buf[i] * xt[i]; /* plain types only */
                }
            }
            for (int64_t t = 0; t < tg; t++) {
                const float *a = acc[t];
                y[(t0 + t) * ldy + r] =
                    ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])) + tail[t];
            }
        }
    }
}

#define SCALAR_KERNEL(name, id)                                                                              \
    static void name##_scalar(const uint8_t *w, size_t rb, int64_t nr, int64_t n, const float *x,            \
                              int64_t ldx, int64_t T, float *y, int64_t ldy) {                               \
        dot_scalar(id, w, rb, nr, n, x, ldx, T, y, ldy);                                                     \
    }
SCALAR_KERNEL(f32, TS_TYPE_F32)
SCALAR_KERNEL(f16, TS_TYPE_F16)
SCALAR_KERNEL(bf16, TS_TYPE_BF16)
SCALAR_KERNEL(q4_0, TS_TYPE_Q4_0)
SCALAR_KERNEL(q4_1, TS_TYPE_Q4_1)
SCALAR_KERNEL(q5_0, TS_TYPE_Q5_0)
SCALAR_KERNEL(q5_1, TS_TYPE_Q5_1)
SCALAR_KERNEL(q8_0, TS_TYPE_Q8_0)
SCALAR_KERNEL(q2_K, TS_TYPE_Q2_K)
SCALAR_KERNEL(q3_K, TS_TYPE_Q3_K)
SCALAR_KERNEL(q4_K, TS_TYPE_Q4_K)
SCALAR_KERNEL(q5_K, TS_TYPE_Q5_K)
SCALAR_KERNEL(q6_K, TS_TYPE_Q6_K)
SCALAR_KERNEL(q8_K, TS_TYPE_Q8_K)
SCALAR_KERNEL(iq4_nl, TS_TYPE_IQ4_NL)
SCALAR_KERNEL(iq4_xs, TS_TYPE_IQ4_XS)
SCALAR_KERNEL(mxfp4, TS_TYPE_MXFP4)
SCALAR_KERNEL(nvfp4, TS_TYPE_NVFP4)
SCALAR_KERNEL(q1_0, TS_TYPE_Q1_0)
SCALAR_KERNEL(q2_0, TS_TYPE_Q2_0)
SCALAR_KERNEL(iq2_xxs, TS_TYPE_IQ2_XXS)
SCALAR_KERNEL(iq2_xs, TS_TYPE_IQ2_XS)
SCALAR_KERNEL(iq2_s, TS_TYPE_IQ2_S)
SCALAR_KERNEL(iq3_xxs, TS_TYPE_IQ3_XXS)
SCALAR_KERNEL(iq3_s, TS_TYPE_IQ3_S)
SCALAR_KERNEL(iq1_s, TS_TYPE_IQ1_S)
SCALAR_KERNEL(iq1_m, TS_TYPE_IQ1_M)

static const ts_dot_kernel k_scalar[TS_TYPE_COUNT] = {
    [TS_TYPE_F32] = f32_scalar,       [TS_TYPE_F16] = f16_scalar,     [TS_TYPE_BF16] = bf16_scalar,
    [TS_TYPE_Q4_0] = q4_0_scalar,     [TS_TYPE_Q4_1] = q4_1_scalar,   [TS_TYPE_Q5_0] = q5_0_scalar,
    [TS_TYPE_Q5_1] = q5_1_scalar,     [TS_TYPE_Q8_0] = q8_0_scalar,   [TS_TYPE_Q2_K] = q2_K_scalar,
    [TS_TYPE_Q3_K] = q3_K_scalar,     [TS_TYPE_Q4_K] = q4_K_scalar,   [TS_TYPE_Q5_K] = q5_K_scalar,
    [TS_TYPE_Q6_K] = q6_K_scalar,     [TS_TYPE_Q8_K] = q8_K_scalar,   [TS_TYPE_IQ4_NL] = iq4_nl_scalar,
    [TS_TYPE_IQ4_XS] = iq4_xs_scalar, [TS_TYPE_MXFP4] = mxfp4_scalar, [TS_TYPE_NVFP4] = nvfp4_scalar,
    [TS_TYPE_Q1_0] = q1_0_scalar,     [TS_TYPE_Q2_0] = q2_0_scalar,   [TS_TYPE_IQ2_XXS] = iq2_xxs_scalar,
    [TS_TYPE_IQ2_XS] = iq2_xs_scalar, [TS_TYPE_IQ2_S] = iq2_s_scalar, [TS_TYPE_IQ3_XXS] = iq3_xxs_scalar,
    [TS_TYPE_IQ3_S] = iq3_s_scalar,   [TS_TYPE_IQ1_S] = iq1_s_scalar, [TS_TYPE_IQ1_M] = iq1_m_scalar,
};

/* ---- 2. x86 SIMD ------------------------------------------------------------------------------ */
#ifdef TS_DOT_X86

#define AI static inline __attribute__((always_inline))
#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define UNROLL _Pragma("GCC unroll 8")

/* Activations per token block: ≈192 KiB of x stays in L2 while a thread's rows stream past. */
static int64_t token_block(int64_t n, int64_t T) {
    int64_t tb = (192 * 1024) / (n * (int64_t)sizeof(float));
    tb = tb / 4 * 4;
    if (tb < 4) tb = 4;
    return tb < T ? tb : T;
}

/* Scalar dot of the plain-type tail elements i0..n-1 (n not a multiple of 32). */
static float tail_plain(uint32_t type, const uint8_t *row, int64_t i0, int64_t n, const float *x) {
    float s = 0;
    for (int64_t i = i0; i < n; i++) {
        float v;
        if (type == TS_TYPE_F32)
            memcpy(&v, row + 4 * i, 4);
        else if (type == TS_TYPE_F16)
            v = ts_fp16_to_fp32((uint16_t)(row[2 * i] | row[2 * i + 1] << 8));
        else
            v = ts_bf16_to_fp32((uint16_t)(row[2 * i] | row[2 * i + 1] << 8));
        s += v * x[i];
    }
    return s;
}

/* -- 2a. block decoders (AVX2 integer ops; inlined into the AVX-512 kernels as well) ------------ */

AI TGT2 float h2f(const uint8_t *p) { /* fp16 -> fp32, exact (as ts_fp16_to_fp32) */
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 16 bytes -> 32 nibbles: elements 0-15 the low nibbles of bytes 0-15, 16-31 the high ones. */
AI TGT2 __m256i nibbles(const uint8_t *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

/* 32 bits (little-endian at p) -> 32 bytes, 0xff where bit k is set. */
AI TGT2 __m256i bit_bytes(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf); /* byte k <- byte k/8 */
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));      /* all bits but k%8 */
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* 32 bytes at p shifted right by `shift` bits (per byte) and masked. */
AI TGT2 __m256i bits_at(const uint8_t *p, int shift, int mask) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}

/* Each type has a block context cx_<type>, filled once per block by prep_<type> (the K-quants'
 * sub-block scales and offsets, decoded with SIMD), and a chunk decoder dec_<type>: chunk c of the
 * block at b -> q (32 × int8), s0/s1 (scale of elements 0-15 / 16-31), o (offset; used only where
 * the type has one). Weight = fp32(q)·s (+ o). */
#define PREP(name) AI TGT2 void prep_##name(const uint8_t *b, cx_##name *cx)
#define DEC(name)                                                                                            \
    AI TGT2 void dec_##name(const uint8_t *b, const cx_##name *cx, int c, __m256i *q, float *s0, float *s1,  \
                            float *o)
#define NO_CX(name)                                                                                          \
    typedef struct {                                                                                         \
        char unused;                                                                                         \
    } cx_##name;                                                                                             \
    PREP(name) {                                                                                             \
        (void)b, (void)cx;                                                                                   \
    }

NO_CX(q8_0)
DEC(q8_0) { /* y = q·d */
    const ts_block_q8_0 *B = (const void *)b;
    (void)cx, (void)c, (void)o;
    *q = _mm256_loadu_si256((const __m256i *)B->qs);
    *s0 = *s1 = h2f(B->d);
}
NO_CX(q4_0)
DEC(q4_0) { /* y = (q − 8)·d */
    const ts_block_q4_0 *B = (const void *)b;
    (void)cx, (void)c, (void)o;
    *q = _mm256_sub_epi8(nibbles(B->qs), _mm256_set1_epi8(8));
    *s0 = *s1 = h2f(B->d);
}
NO_CX(q4_1)
DEC(q4_1) { /* y = q·d + m */
    const ts_block_q4_1 *B = (const void *)b;
    (void)cx, (void)c;
    *q = nibbles(B->qs);
    *s0 = *s1 = h2f(B->d);
    *o = h2f(B->m);
}
NO_CX(q5_0)
DEC(q5_0) { /* y = (q − 16)·d, fifth bit of element k = bit k of qh */
    const ts_block_q5_0 *B = (const void *)b;
    (void)cx, (void)c, (void)o;
    const __m256i hb = _mm256_and_si256(bit_bytes(B->qh), _mm256_set1_epi8(16));
    *q = _mm256_sub_epi8(_mm256_or_si256(nibbles(B->qs), hb), _mm256_set1_epi8(16));
    *s0 = *s1 = h2f(B->d);
}
NO_CX(q5_1)
DEC(q5_1) { /* y = q·d + m */
    const ts_block_q5_1 *B = (const void *)b;
    (void)cx, (void)c;
    const __m256i hb = _mm256_and_si256(bit_bytes(B->qh), _mm256_set1_epi8(16));
    *q = _mm256_or_si256(nibbles(B->qs), hb);
    *s0 = *s1 = h2f(B->d);
    *o = h2f(B->m);
}
NO_CX(iq4_nl)
DEC(iq4_nl) { /* y = d·kv[q] */
    const ts_block_iq4_nl *B = (const void *)b;
    (void)cx, (void)c, (void)o;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ts_kvalues_iq4nl));
    *q = _mm256_shuffle_epi8(kv, nibbles(B->qs));
    *s0 = *s1 = h2f(B->d);
}

/* Q4_K / Q5_K: the 8 sub-block scales d·sc and offsets −dmin·m of a super-block. The 12 packed
 * bytes are unpacked as ggml does (ts_scale_min_k4 element by element): bytes 0-7 scales, 8-15 mins. */
typedef struct {
    float s[8], o[8];
} cx_k4;
AI TGT2 void prep_k4(const uint8_t *scales, float d, float dmin, cx_k4 *cx) {
    uint32_t u[4];
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4); /* mins 4-7 */
    const uint32_t mins_lo = u[1] & 0x3f3f3f3f;                            /* mins 0-3 */
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);        /* scales 4-7 */
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3f; /* scales 0-3 */
    const __m128i v = _mm_loadu_si128((const __m128i *)u);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
    _mm256_storeu_ps(cx->s, _mm256_mul_ps(_mm256_set1_ps(d), sc)); /* d·sc, as the reference */
    /* −(dmin·m): y = dl·q − ml is exactly dl·q + (−ml) */
    _mm256_storeu_ps(cx->o, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), mn), _mm256_set1_ps(-0.0f)));
}
typedef cx_k4 cx_q4_K;
typedef cx_k4 cx_q5_K;
PREP(q4_K) {
    const ts_block_q4_K *B = (const void *)b;
    prep_k4(B->scales, h2f(B->d), h2f(B->dmin), cx);
}
PREP(q5_K) {
    const ts_block_q5_K *B = (const void *)b;
    prep_k4(B->scales, h2f(B->d), h2f(B->dmin), cx);
}
DEC(q4_K) { /* sub-block c: nibble c%2 of qs[32·(c/2) + l]; y = (d·sc)·q − dmin·m */
    const ts_block_q4_K *B = (const void *)b;
    *q = bits_at(B->qs + 32 * (c >> 1), 4 * (c & 1), 0x0f);
    *s0 = *s1 = cx->s[c];
    *o = cx->o[c];
}
DEC(q5_K) { /* as Q4_K, fifth bit = bit c of qh[l] */
    const ts_block_q5_K *B = (const void *)b;
    const __m256i hb = _mm256_slli_epi16(bits_at(B->qh, c, 1), 4);
    *q = _mm256_or_si256(bits_at(B->qs + 32 * (c >> 1), 4 * (c & 1), 0x0f), hb);
    *s0 = *s1 = cx->s[c];
    *o = cx->o[c];
}

/* Q6_K: the 16 sub-block scales d·scale[k]. */
typedef struct {
    float s[16];
} cx_q6_K;
PREP(q6_K) {
    const ts_block_q6_K *B = (const void *)b;
    const __m128i sc = _mm_loadu_si128((const __m128i *)B->scales);
    const __m256 d = _mm256_set1_ps(h2f(B->d));
    _mm256_storeu_ps(cx->s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(cx->s + 8,
                     _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
}
DEC(q6_K) { /* chunk c = 4h + s: low nibble from ql[64h + 32(s%2) + l] (high nibble if s ≥ 2), high 2
             * bits from qh[32h + l] bits 2s; y = (d·scale[e/16])·(q − 32) */
    const ts_block_q6_K *B = (const void *)b;
    (void)o;
    const int h = c >> 2, s = c & 3;
    const __m256i lo = bits_at(B->ql + 64 * h + 32 * (s & 1), 4 * (s >> 1), 0x0f);
    const __m256i hi = bits_at(B->qh + 32 * h, 2 * s, 0x03);
    *q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    *s0 = cx->s[2 * c];
    *s1 = cx->s[2 * c + 1];
}

/* The lattice i-quants (IQ1_S .. IQ3_S): grid gathers, in their own file. */
#include "cpu/dot_iq.h"

/* -- 2b. chunk -> fp32 vectors ---------------------------------------------------------------- */

AI TGT512 void cvt512(__m256i q, float s0, float s1, float o, int has_o, __m512 *w) {
    w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))),
                         _mm512_set1_ps(s0));
    w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                         _mm512_set1_ps(s1));
    if (has_o) {
        w[0] = _mm512_add_ps(w[0], _mm512_set1_ps(o));
        w[1] = _mm512_add_ps(w[1], _mm512_set1_ps(o));
    }
}

AI TGT2 void cvt256(__m256i q, float s0, float s1, float o, int has_o, __m256 *w) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m256 S0 = _mm256_set1_ps(s0), S1 = _mm256_set1_ps(s1);
    w[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), S0);
    w[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), S0);
    w[2] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), S1);
    w[3] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), S1);
    if (has_o) {
        const __m256 O = _mm256_set1_ps(o);
        for (int k = 0; k < 4; k++) w[k] = _mm256_add_ps(w[k], O);
    }
}

#define CK512_CVT(name, has_o)                                                                               \
    AI TGT512 void ck512_##name(const uint8_t *b, const cx_##name *cx, int c, __m512 *w) {                   \
        __m256i q;                                                                                           \
        float s0, s1, o = 0;                                                                                 \
        dec_##name(b, cx, c, &q, &s0, &s1, &o);                                                              \
        cvt512(q, s0, s1, o, has_o, w);                                                                      \
    }
#define CK256_CVT(name, has_o)                                                                               \
    AI TGT2 void ck256_##name(const uint8_t *b, const cx_##name *cx, int c, __m256 *w) {                     \
        __m256i q;                                                                                           \
        float s0, s1, o = 0;                                                                                 \
        dec_##name(b, cx, c, &q, &s0, &s1, &o);                                                              \
        cvt256(q, s0, s1, o, has_o, w);                                                                      \
    }
CK512_CVT(q8_0, 0)
CK512_CVT(q5_0, 0)
CK512_CVT(q5_1, 1)
CK512_CVT(q5_K, 1)
CK512_CVT(q6_K, 0)
CK256_CVT(q8_0, 0)
CK256_CVT(q4_0, 0)
CK256_CVT(q4_1, 1)
CK256_CVT(q5_0, 0)
CK256_CVT(q5_1, 1)
CK256_CVT(iq4_nl, 0)
CK256_CVT(q4_K, 1)
CK256_CVT(q5_K, 1)
CK256_CVT(q6_K, 0)
#define IQ_CVT(name) CK512_CVT(name, 0) CK256_CVT(name, 0)
IQ_CVT(iq2_xxs)
IQ_CVT(iq2_xs)
IQ_CVT(iq2_s)
IQ_CVT(iq3_xxs)
IQ_CVT(iq3_s)
IQ_CVT(iq1_s)
IQ_CVT(iq1_m)

/* AVX-512, 4-bit types: the 16 weights a block (sub-block) can take are computed once, exactly as
 * the reference computes them (level·s (+ o), same float ops), and each element is a vpermps
 * lookup on its nibble: bit-identical to the conversion path, with fewer operations per element
 * (measured 1.2-1.5x on decode; a 32-entry vpermt2ps table for the 5-bit types was no faster). */
static const float k_iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* 32 codes at p (16 bytes): elements 0-15 the low nibbles, 16-31 the high ones; lookups ignore the
 * index bits above 3, so the low nibble needs no mask. */
AI TGT512 void lut16_nibbles(const uint8_t *p, __m512 tab, __m512 *w) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    w[0] = _mm512_permutexvar_ps(v, tab);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tab);
}
AI TGT512 __m512 iota16(void) {
    return _mm512_loadu_ps(k_iota16);
}

AI TGT512 void ck512_q4_0(const uint8_t *b, const cx_q4_0 *cx, int c, __m512 *w) { /* (q − 8)·d */
    const ts_block_q4_0 *B = (const void *)b;
    (void)cx, (void)c;
    const __m512 tab = _mm512_mul_ps(_mm512_sub_ps(iota16(), _mm512_set1_ps(8)), _mm512_set1_ps(h2f(B->d)));
    lut16_nibbles(B->qs, tab, w);
}
AI TGT512 void ck512_q4_1(const uint8_t *b, const cx_q4_1 *cx, int c, __m512 *w) { /* q·d + m */
    const ts_block_q4_1 *B = (const void *)b;
    (void)cx, (void)c;
    const __m512 tab =
        _mm512_add_ps(_mm512_mul_ps(iota16(), _mm512_set1_ps(h2f(B->d))), _mm512_set1_ps(h2f(B->m)));
    lut16_nibbles(B->qs, tab, w);
}
AI TGT512 void ck512_iq4_nl(const uint8_t *b, const cx_iq4_nl *cx, int c, __m512 *w) { /* d·kv[q] */
    const ts_block_iq4_nl *B = (const void *)b;
    (void)cx, (void)c;
    const __m512 kv =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)ts_kvalues_iq4nl)));
    lut16_nibbles(B->qs, _mm512_mul_ps(kv, _mm512_set1_ps(h2f(B->d))), w);
}
AI TGT512 void ck512_q4_K(const uint8_t *b, const cx_q4_K *cx, int c, __m512 *w) { /* (d·sc)·q − dmin·m */
    const ts_block_q4_K *B = (const void *)b;
    const __m512 tab =
        _mm512_add_ps(_mm512_mul_ps(iota16(), _mm512_set1_ps(cx->s[c])), _mm512_set1_ps(cx->o[c]));
    const uint8_t *q = B->qs + 32 * (c >> 1); /* 32 bytes: elements 0-31 of sub-block c, nibble c%2 */
    __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
    if (c & 1) v0 = _mm512_srli_epi32(v0, 4), v1 = _mm512_srli_epi32(v1, 4);
    w[0] = _mm512_permutexvar_ps(v0, tab);
    w[1] = _mm512_permutexvar_ps(v1, tab);
}

/* Plain types: a "block" is 32 elements, no context. */
NO_CX(f32)
NO_CX(f16)
NO_CX(bf16)
AI TGT512 void ck512_f32(const uint8_t *b, const cx_f32 *cx, int c, __m512 *w) {
    (void)cx, (void)c;
    w[0] = _mm512_loadu_ps((const float *)b);
    w[1] = _mm512_loadu_ps((const float *)b + 16);
}
AI TGT512 void ck512_f16(const uint8_t *b, const cx_f16 *cx, int c, __m512 *w) {
    (void)cx, (void)c;
    w[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
    w[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b + 1));
}
AI TGT512 void ck512_bf16(const uint8_t *b, const cx_bf16 *cx, int c, __m512 *w) {
    (void)cx, (void)c;
    w[0] = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)b)), 16));
    w[1] = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)b + 1)), 16));
}
AI TGT2 void ck256_f32(const uint8_t *b, const cx_f32 *cx, int c, __m256 *w) {
    (void)cx, (void)c;
    for (int k = 0; k < 4; k++) w[k] = _mm256_loadu_ps((const float *)b + 8 * k);
}
AI TGT2 void ck256_f16(const uint8_t *b, const cx_f16 *cx, int c, __m256 *w) {
    (void)cx, (void)c;
    for (int k = 0; k < 4; k++) w[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b + k));
}
AI TGT2 void ck256_bf16(const uint8_t *b, const cx_bf16 *cx, int c, __m256 *w) {
    (void)cx, (void)c;
    for (int k = 0; k < 4; k++)
        w[k] = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)b + k)), 16));
}

AI TGT2 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* -- 2c. drivers and kernels ------------------------------------------------------------------ */

/* One register tile: R rows (stride rb) × TG tokens over the whole row of n elements. R and TG are
 * compile-time constants at every call, so the accumulators live in registers: two a (row, token)
 * (one when R·TG > 8: 16 accumulators + 8 weight vectors fill the 32 registers), and for tiles of
 * one or two dot products (decode) two sets of them, alternating by chunk, so that four FMA chains
 * hide the FMA latency. */
#define TILE512(name, QK, BB, id)                                                                            \
    AI TGT512 void blk512_##name(const uint8_t *w, size_t rb, const int R, const int TG, const int NS,       \
                                 int64_t ib, const int set0, const float *x, int64_t ldx,                    \
                                 __m512 acc[2][4][4][2]) {                                                   \
        cx_##name cx[4];                                                                                     \
        const int NA = R * TG > 8 ? 1 : 2;                                                                   \
        UNROLL for (int r = 0; r < R; r++) prep_##name(w + r * rb + (size_t)ib * (BB), &cx[r]);              \
        UNROLL for (int c = 0; c < (QK) / 32; c++) {                                                         \
            const int set = NS == 2 && (QK) > 32 ? (c & 1) : set0;                                           \
            __m512 wv[4][2];                                                                                 \
            UNROLL for (int r = 0; r < R; r++)                                                               \
                ck512_##name(w + r * rb + (size_t)ib * (BB), &cx[r], c, wv[r]);                              \
            const float *xc = x + ib * (QK) + c * 32;                                                        \
            UNROLL for (int t = 0; t < TG; t++) {                                                            \
                const __m512 x0 = _mm512_loadu_ps(xc + t * ldx), x1 = _mm512_loadu_ps(xc + t * ldx + 16);    \
                UNROLL for (int r = 0; r < R; r++) {                                                         \
                    acc[set][r][t][0] = _mm512_fmadd_ps(wv[r][0], x0, acc[set][r][t][0]);                    \
                    acc[set][r][t][NA - 1] = _mm512_fmadd_ps(wv[r][1], x1, acc[set][r][t][NA - 1]);          \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    AI TGT512 void tile512_##name(const uint8_t *w, size_t rb, const int R, const int TG, int64_t n,         \
                                  const float *x, int64_t ldx, float *y, int64_t ldy) {                      \
        const int64_t nb = n / (QK);                                                                         \
        const int NS = R * TG <= 2 ? 2 : 1;                                                                  \
        __m512 acc[2][4][4][2];                                                                              \
        UNROLL for (int s = 0; s < 2; s++) UNROLL for (int r = 0; r < R; r++)                                \
            UNROLL for (int t = 0; t < TG; t++) acc[s][r][t][0] = acc[s][r][t][1] = _mm512_setzero_ps();     \
        int64_t ib = 0;                                                                                      \
        if (NS == 2 && (QK) == 32)                                                                           \
            for (; ib + 2 <= nb; ib += 2) {                                                                  \
                blk512_##name(w, rb, R, TG, NS, ib, 0, x, ldx, acc);                                         \
                blk512_##name(w, rb, R, TG, NS, ib + 1, 1, x, ldx, acc);                                     \
            }                                                                                                \
        for (; ib < nb; ib++) blk512_##name(w, rb, R, TG, NS, ib, 0, x, ldx, acc);                           \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < TG; t++) {                             \
            __m512 v = R * TG > 8 ? acc[0][r][t][0] : _mm512_add_ps(acc[0][r][t][0], acc[0][r][t][1]);       \
            if (NS == 2) v = _mm512_add_ps(v, _mm512_add_ps(acc[1][r][t][0], acc[1][r][t][1]));              \
            float s = _mm512_reduce_add_ps(v);                                                               \
            if (nb * (QK) < n) s += tail_plain(id, w + r * rb, nb * (QK), n, x + t * ldx);                   \
            y[t * ldy + r] = s;                                                                              \
        }                                                                                                    \
    }

#define TILE256(name, QK, BB, id)                                                                            \
    AI TGT2 void blk256_##name(const uint8_t *w, const int TG, const int NS, int64_t ib, const int set0,     \
                               const float *x, int64_t ldx, __m256 acc[2][4][2]) {                           \
        cx_##name cx;                                                                                        \
        prep_##name(w + (size_t)ib * (BB), &cx);                                                             \
        UNROLL for (int c = 0; c < (QK) / 32; c++) {                                                         \
            const int set = NS == 2 && (QK) > 32 ? (c & 1) : set0;                                           \
            __m256 wv[4];                                                                                    \
            ck256_##name(w + (size_t)ib * (BB), &cx, c, wv);                                                 \
            const float *xc = x + ib * (QK) + c * 32;                                                        \
            UNROLL for (int t = 0; t < TG; t++) {                                                            \
                const float *xt = xc + t * ldx;                                                              \
                acc[set][t][0] = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(xt), acc[set][t][0]);                \
                acc[set][t][1] = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(xt + 8), acc[set][t][1]);            \
                acc[set][t][0] = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(xt + 16), acc[set][t][0]);           \
                acc[set][t][1] = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(xt + 24), acc[set][t][1]);           \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    AI TGT2 void tile256_##name(const uint8_t *w, const int TG, int64_t n, const float *x, int64_t ldx,      \
                                float *y, int64_t ldy) {                                                     \
        const int64_t nb = n / (QK);                                                                         \
        const int NS = TG <= 2 ? 2 : 1;                                                                      \
        __m256 acc[2][4][2];                                                                                 \
        UNROLL for (int s = 0; s < 2; s++) UNROLL for (int t = 0; t < TG; t++) acc[s][t][0] = acc[s][t][1] = \
            _mm256_setzero_ps();                                                                             \
        int64_t ib = 0;                                                                                      \
        if (NS == 2 && (QK) == 32)                                                                           \
            for (; ib + 2 <= nb; ib += 2) {                                                                  \
                blk256_##name(w, TG, NS, ib, 0, x, ldx, acc);                                                \
                blk256_##name(w, TG, NS, ib + 1, 1, x, ldx, acc);                                            \
            }                                                                                                \
        for (; ib < nb; ib++) blk256_##name(w, TG, NS, ib, 0, x, ldx, acc);                                  \
        UNROLL for (int t = 0; t < TG; t++) {                                                                \
            __m256 v = _mm256_add_ps(acc[0][t][0], acc[0][t][1]);                                            \
            if (NS == 2) v = _mm256_add_ps(v, _mm256_add_ps(acc[1][t][0], acc[1][t][1]));                    \
            float s = hsum256(v);                                                                            \
            if (nb * (QK) < n) s += tail_plain(id, w, nb * (QK), n, x + t * ldx);                            \
            y[t * ldy] = s;                                                                                  \
        }                                                                                                    \
    }

/* Kernels: token blocks (L2), then rows, then token groups of 4, 2, 1. AVX-512 takes 4 rows at a
 * time (then 2, then 1) only for blocks of at least MULTI_ROW_MIN_T tokens: 4 rows × 4 tokens load
 * each activation vector once for 4 rows (compute-bound prefill: measured 1.4-2x at T = 16-64),
 * but split the weight read into short interleaved streams that the hardware prefetcher follows
 * worse than one contiguous stream (memory-bound decode: 2 rows measured 2x slower at T = 1). */
enum { MULTI_ROW_MIN_T = 8 };
#define KERNELS(name, QK, BB, id)                                                                            \
    TILE512(name, QK, BB, id)                                                                                \
    TILE256(name, QK, BB, id)                                                                                \
    static TGT512 void name##_avx512(const uint8_t *w, size_t rb, int64_t nr, int64_t n, const float *x,     \
                                     int64_t ldx, int64_t T, float *y, int64_t ldy) {                        \
        const int64_t tb = token_block(n, T);                                                                \
        for (int64_t t0 = 0; t0 < T; t0 += tb) {                                                             \
            const int64_t tn = T - t0 < tb ? T - t0 : tb;                                                    \
            const float *xb = x + t0 * ldx;                                                                  \
            float *yb = y + t0 * ldy;                                                                        \
            int64_t r = 0;                                                                                   \
            for (; tn >= MULTI_ROW_MIN_T && r + 4 <= nr; r += 4) {                                           \
                const uint8_t *wr = w + (size_t)r * rb;                                                      \
                int64_t t = 0;                                                                               \
                for (; t + 4 <= tn; t += 4)                                                                  \
                    tile512_##name(wr, rb, 4, 4, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);               \
                if (tn - t >= 2)                                                                             \
                    tile512_##name(wr, rb, 4, 2, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy), t += 2;       \
                if (t < tn) tile512_##name(wr, rb, 4, 1, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);       \
            }                                                                                                \
            for (; tn >= MULTI_ROW_MIN_T && r + 2 <= nr; r += 2) {                                           \
                const uint8_t *wr = w + (size_t)r * rb;                                                      \
                int64_t t = 0;                                                                               \
                for (; t + 4 <= tn; t += 4)                                                                  \
                    tile512_##name(wr, rb, 2, 4, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);               \
                if (tn - t >= 2)                                                                             \
                    tile512_##name(wr, rb, 2, 2, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy), t += 2;       \
                if (t < tn) tile512_##name(wr, rb, 2, 1, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);       \
            }                                                                                                \
            for (; r < nr; r++) {                                                                            \
                const uint8_t *wr = w + (size_t)r * rb;                                                      \
                int64_t t = 0;                                                                               \
                for (; t + 4 <= tn; t += 4)                                                                  \
                    tile512_##name(wr, rb, 1, 4, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);               \
                if (tn - t >= 2)                                                                             \
                    tile512_##name(wr, rb, 1, 2, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy), t += 2;       \
                if (t < tn) tile512_##name(wr, rb, 1, 1, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);       \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    static TGT2 void name##_avx2(const uint8_t *w, size_t rb, int64_t nr, int64_t n, const float *x,         \
                                 int64_t ldx, int64_t T, float *y, int64_t ldy) {                            \
        const int64_t tb = token_block(n, T);                                                                \
        for (int64_t t0 = 0; t0 < T; t0 += tb) {                                                             \
            const int64_t tn = T - t0 < tb ? T - t0 : tb;                                                    \
            const float *xb = x + t0 * ldx;                                                                  \
            float *yb = y + t0 * ldy;                                                                        \
            for (int64_t r = 0; r < nr; r++) {                                                               \
                const uint8_t *wr = w + (size_t)r * rb;                                                      \
                int64_t t = 0;                                                                               \
                for (; t + 4 <= tn; t += 4)                                                                  \
                    tile256_##name(wr, 4, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);                      \
                if (tn - t >= 2) tile256_##name(wr, 2, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy), t += 2; \
                if (t < tn) tile256_##name(wr, 1, n, xb + t * ldx, ldx, yb + t * ldy + r, ldy);              \
            }                                                                                                \
        }                                                                                                    \
    }

KERNELS(f32, 32, 128, TS_TYPE_F32)
KERNELS(f16, 32, 64, TS_TYPE_F16)
KERNELS(bf16, 32, 64, TS_TYPE_BF16)
KERNELS(q8_0, 32, sizeof(ts_block_q8_0), TS_TYPE_Q8_0)
KERNELS(q4_0, 32, sizeof(ts_block_q4_0), TS_TYPE_Q4_0)
KERNELS(q4_1, 32, sizeof(ts_block_q4_1), TS_TYPE_Q4_1)
KERNELS(q5_0, 32, sizeof(ts_block_q5_0), TS_TYPE_Q5_0)
KERNELS(q5_1, 32, sizeof(ts_block_q5_1), TS_TYPE_Q5_1)
KERNELS(iq4_nl, 32, sizeof(ts_block_iq4_nl), TS_TYPE_IQ4_NL)
KERNELS(q4_K, TS_QK_K, sizeof(ts_block_q4_K), TS_TYPE_Q4_K)
KERNELS(q5_K, TS_QK_K, sizeof(ts_block_q5_K), TS_TYPE_Q5_K)
KERNELS(q6_K, TS_QK_K, sizeof(ts_block_q6_K), TS_TYPE_Q6_K)
KERNELS(iq2_xxs, TS_QK_K, sizeof(ts_block_iq2_xxs), TS_TYPE_IQ2_XXS)
KERNELS(iq2_xs, TS_QK_K, sizeof(ts_block_iq2_xs), TS_TYPE_IQ2_XS)
KERNELS(iq2_s, TS_QK_K, sizeof(ts_block_iq2_s), TS_TYPE_IQ2_S)
KERNELS(iq3_xxs, TS_QK_K, sizeof(ts_block_iq3_xxs), TS_TYPE_IQ3_XXS)
KERNELS(iq3_s, TS_QK_K, sizeof(ts_block_iq3_s), TS_TYPE_IQ3_S)
KERNELS(iq1_s, TS_QK_K, sizeof(ts_block_iq1_s), TS_TYPE_IQ1_S)
KERNELS(iq1_m, TS_QK_K, sizeof(ts_block_iq1_m), TS_TYPE_IQ1_M)

#define SIMD_TABLE(isa)                                                                                      \
    static const ts_dot_kernel k_##isa[TS_TYPE_COUNT] = {                                                    \
        [TS_TYPE_F32] = f32_##isa,         [TS_TYPE_F16] = f16_##isa,       [TS_TYPE_BF16] = bf16_##isa,     \
        [TS_TYPE_Q8_0] = q8_0_##isa,       [TS_TYPE_Q4_0] = q4_0_##isa,     [TS_TYPE_Q4_1] = q4_1_##isa,     \
        [TS_TYPE_Q5_0] = q5_0_##isa,       [TS_TYPE_Q5_1] = q5_1_##isa,     [TS_TYPE_IQ4_NL] = iq4_nl_##isa, \
        [TS_TYPE_Q4_K] = q4_K_##isa,       [TS_TYPE_Q5_K] = q5_K_##isa,     [TS_TYPE_Q6_K] = q6_K_##isa,     \
        [TS_TYPE_IQ2_XXS] = iq2_xxs_##isa, [TS_TYPE_IQ2_XS] = iq2_xs_##isa, [TS_TYPE_IQ2_S] = iq2_s_##isa,   \
        [TS_TYPE_IQ3_XXS] = iq3_xxs_##isa, [TS_TYPE_IQ3_S] = iq3_s_##isa,   [TS_TYPE_IQ1_S] = iq1_s_##isa,   \
        [TS_TYPE_IQ1_M] = iq1_m_##isa,                                                                       \
    };
SIMD_TABLE(avx512)
SIMD_TABLE(avx2)

#endif /* TS_DOT_X86 */

/* ---- 3. path selection ------------------------------------------------------------------------ */

static const ts_dot_kernel *path_table(ts_dot_path p) {
#ifdef TS_DOT_X86
    if (p == TS_DOT_AVX512) return k_avx512;
    if (p == TS_DOT_AVX2) return k_avx2;
#endif
    (void)p;
    return k_scalar;
}

bool ts_cpu_dot_supported(ts_dot_path p) {
    if (p == TS_DOT_SCALAR) return true;
#ifdef TS_DOT_X86
    __builtin_cpu_init();
    unsigned a, b, c, d; /* F16C by CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports lacks it */
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (p == TS_DOT_AVX2) return avx2;
    if (p == TS_DOT_AVX512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    return false;
}

const char *ts_cpu_dot_path_name(ts_dot_path p) {
    static const char *const names[TS_DOT_PATH_COUNT] = {"scalar", "avx2", "avx512"};
    if (p == TS_DOT_AUTO) return "auto";
    return p >= 0 && p < TS_DOT_PATH_COUNT ? names[p] : "?";
}

static atomic_int g_path = -1; /* -1: not chosen yet */

static ts_dot_path choose(void) {
    ts_dot_path best = TS_DOT_SCALAR;
    for (int p = TS_DOT_SCALAR; p < TS_DOT_PATH_COUNT; p++)
        if (ts_cpu_dot_supported((ts_dot_path)p)) best = (ts_dot_path)p;
    const char *env = getenv("TS_DOT");
    for (int p = TS_DOT_SCALAR; env && p < TS_DOT_PATH_COUNT; p++)
        if (!strcmp(env, ts_cpu_dot_path_name((ts_dot_path)p)) && ts_cpu_dot_supported((ts_dot_path)p))
            best = (ts_dot_path)p;
    return best;
}

int ts_cpu_dot_force(ts_dot_path p) {
    if (p == TS_DOT_AUTO)
        p = choose();
    else if (p < 0 || p >= TS_DOT_PATH_COUNT || !ts_cpu_dot_supported(p))
        return -1;
    atomic_store_explicit(&g_path, (int)p, memory_order_relaxed);
    return 0;
}

ts_dot_path ts_cpu_dot_path(void) {
    int p = atomic_load_explicit(&g_path, memory_order_relaxed);
    if (p < 0) {
        p = (int)choose();
        atomic_store_explicit(&g_path, p, memory_order_relaxed);
    }
    return (ts_dot_path)p;
}

ts_dot_kernel ts_cpu_dot_kernel_for(ts_dot_path p, uint32_t type) {
    if (type >= TS_TYPE_COUNT || p < 0 || p >= TS_DOT_PATH_COUNT) return NULL;
    const ts_dot_kernel k = path_table(p)[type];
    return k ? k : k_scalar[type];
}

ts_dot_kernel ts_cpu_dot_kernel(uint32_t type) {
    return ts_cpu_dot_kernel_for(ts_cpu_dot_path(), type);
}

bool ts_cpu_dot_fused(ts_dot_path p, uint32_t type) {
    return p != TS_DOT_SCALAR && type < TS_TYPE_COUNT && p >= 0 && p < TS_DOT_PATH_COUNT &&
           path_table(p)[type];
}
