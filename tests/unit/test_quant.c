/* Tests for src/quant (ggml block formats) and src/common/half (fp16/bf16).
 *
 * (a) Hand-built blocks: every dequantized format gets a block whose bytes are written here from
 *     the format's definition (where each element's bits live, how the scales are packed), and
 *     the expected floats come from the format's formula, not from the code under test. All scales
 *     are powers of two or small integers so the expected values are exact and compared exactly.
 * (b) Quantize -> dequantize error bounds on seeded Gaussian rows (relative RMS per type, and a
 *     per-element bound from the format's step size for the 32-element formats), on the row
 *     widths the model uses: 160, 320, 640 (32-element blocks) and 256, 2560 (256-element).
 * (c) Exact round trips where the format can represent the data, and fp16/bf16 edge cases.
 * (d) Refusals: ragged n, unsupported or unknown types, non-finite input; all with a sentence.
 * (e) The type table against ggml's type_traits (ids 0..42), ts_row_size, names; digests of the
 *     exact bytes ggml writes for a platform-independent row, and rules (tie-breaks, rounding)
 *     checked byte by byte.
 * (f) Optional, skipped unless TS_GGML_BASE_LIB names a ggml libggml-base.so (for instance the one
 *     in the npm package @node-llama-cpp/linux-x64, bins/linux-x64/): bit-for-bit comparison of
 *     every codec with ggml's own quantize_row_*_ref / dequantize_row_* and fp16/bf16 routines
 *     (the i-quants' dequantizers on random bytes too). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t g_rng;

static void seed(uint64_t s) {
    g_rng = s * 0x9E3779B97F4A7C15ull + 1;
}

static uint64_t next_u64(void) { /* xorshift64 */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double uniform01(void) {
    return ((next_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static float gaussian(void) {
    return (float)(sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

/* A quant pattern for element e in 0..mod-1 with no short period, so that a bit placed at the
 * wrong element shows up (a pattern periodic in 64 would hide a half/quarter mix-up). */
static int pattern(int e, int mod) {
    return (int)(((uint32_t)e * 2654435761u) >> 13) % mod;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

static float f32_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static void dequant_ok(uint32_t type, const void *src, float *dst, int64_t n) {
    char err[256] = "";
    if (ts_dequantize_row(type, src, dst, n, err, sizeof err) != 0)
        fail_msg("dequantize %s: %s", ts_type_name(type), err);
}

static void quant_ok(uint32_t type, const float *src, void *dst, int64_t n) {
    char err[256] = "";
    if (ts_quantize_row(type, src, dst, n, err, sizeof err) != 0)
        fail_msg("quantize %s: %s", ts_type_name(type), err);
}

/* Exact comparison (all expected values in these tests are exactly representable). */
static void expect_floats(const char *what, const float *want, const float *got, int n) {
    for (int i = 0; i < n; i++) {
        const bool same = want[i] == got[i] || (isnan(want[i]) && isnan(got[i]));
        if (!same) fail_msg("%s: element %d is %.9g, expected %.9g", what, i, got[i], want[i]);
    }
}

/* fp16 encodings used to build blocks by hand. */
enum {
    H_0_125 = 0x3000,
    H_0_25 = 0x3400,
    H_0_5 = 0x3800,
    H_0_75 = 0x3a00,
    H_1 = 0x3c00,
    H_1_5 = 0x3e00,
    H_2 = 0x4000,
    H_M2 = 0xc000,
    H_M1 = 0xbc00,
    H_1_64 = 0x2400,
};

/* The IQ4_NL/IQ4_XS codebook and the E2M1 values, from the format definitions. */
static const int kIQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* ------------------------------------------------- (a) hand-built blocks */

static void test_dequant_plain(void **state) {
    (void)state;
    const float f32[4] = {1.5f, -0.0f, 3e-41f, -65536.f};
    float got[8];
    dequant_ok(TS_TYPE_F32, f32, got, 4);
    expect_floats("f32", f32, got, 4);

    uint8_t f16[16];
    const uint16_t h[8] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x3555, 0x8000, 0x7c00, 0x0400};
    for (int i = 0; i < 8; i++) put16(f16 + 2 * i, h[i]);
    const float want16[8] = {1, -2, ldexpf(1, -24), 65504, 0.333251953125f, -0.0f, INFINITY, ldexpf(1, -14)};
    dequant_ok(TS_TYPE_F16, f16, got, 8);
    expect_floats("f16", want16, got, 8);
    assert_true(signbit(got[5]));

    uint8_t bf[10];
    const uint16_t b[5] = {0x3f80, 0xc040, 0x3e80, 0x7f80, 0x0001};
    for (int i = 0; i < 5; i++) put16(bf + 2 * i, b[i]);
    const float wantb[5] = {1, -3, 0.25f, INFINITY, ldexpf(1, -133)};
    dequant_ok(TS_TYPE_BF16, bf, got, 5);
    expect_floats("bf16", wantb, got, 5);
}

/* Q8_0: [fp16 d][32 x int8], y = d * q. Two blocks to check the stride. */
static void test_dequant_q8_0(void **state) {
    (void)state;
    uint8_t blk[68];
    float want[64], got[64];
    put16(blk, H_0_5);
    put16(blk + 34, H_M2);
    for (int j = 0; j < 32; j++) {
        blk[2 + j] = (uint8_t)(int8_t)(8 * j - 128);
        blk[36 + j] = (uint8_t)(int8_t)(127 - j);
        want[j] = 0.5f * (8 * j - 128);
        want[32 + j] = -2.0f * (127 - j);
    }
    dequant_ok(TS_TYPE_Q8_0, blk, got, 64);
    expect_floats("q8_0", want, got, 64);
}

/* Q4_0: [fp16 d][16 bytes]; byte j = element j (low nibble), element j+16 (high); y = d*(q-8). */
static void test_dequant_q4_0(void **state) {
    (void)state;
    uint8_t blk[18];
    float want[32], got[32];
    put16(blk, H_2);
    for (int j = 0; j < 16; j++) {
        blk[2 + j] = (uint8_t)(j | (15 - j) << 4);
        want[j] = 2.0f * (j - 8);
        want[j + 16] = 2.0f * (15 - j - 8);
    }
    dequant_ok(TS_TYPE_Q4_0, blk, got, 32);
    expect_floats("q4_0", want, got, 32);
}

/* Q4_1: [fp16 d][fp16 m][16 bytes], y = d*q + m. */
static void test_dequant_q4_1(void **state) {
    (void)state;
    uint8_t blk[20];
    float want[32], got[32];
    put16(blk, H_0_25);
    put16(blk + 2, H_M1);
    for (int j = 0; j < 16; j++) {
        blk[4 + j] = (uint8_t)((15 - j) | j << 4);
        want[j] = 0.25f * (15 - j) - 1;
        want[j + 16] = 0.25f * j - 1;
    }
    dequant_ok(TS_TYPE_Q4_1, blk, got, 32);
    expect_floats("q4_1", want, got, 32);
}

/* Q5_0 / Q5_1: [fp16 d]([fp16 m])[uint32 LE qh][16 bytes]: nibbles as Q4_0, fifth bit of
 * element k is bit k of qh. Q5_0: y = d*(q-16); Q5_1: y = d*q + m. */
static void pack_q5(const int *v, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((v[j] & 15) | (v[j + 16] & 15) << 4);
    for (int k = 0; k < 32; k++) h |= (uint32_t)(v[k] >> 4) << k;
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> (8 * i));
}

static void test_dequant_q5(void **state) {
    (void)state;
    int v[32];
    float want[32], got[32];
    for (int k = 0; k < 32; k++) v[k] = pattern(k, 32);

    uint8_t b0[22];
    put16(b0, H_0_5);
    pack_q5(v, b0 + 2, b0 + 6);
    for (int k = 0; k < 32; k++) want[k] = 0.5f * (v[k] - 16);
    dequant_ok(TS_TYPE_Q5_0, b0, got, 32);
    expect_floats("q5_0", want, got, 32);

    uint8_t b1[24];
    put16(b1, H_0_25);
    put16(b1 + 2, H_M2);
    pack_q5(v, b1 + 4, b1 + 8);
    for (int k = 0; k < 32; k++) want[k] = 0.25f * v[k] - 2;
    dequant_ok(TS_TYPE_Q5_1, b1, got, 32);
    expect_floats("q5_1", want, got, 32);
}

/* Placement shared by Q2_K and Q3_K low bits: element e = 128*h + 32*s + l sits in bits 2s..2s+1
 * of qs[32*h + l]. */
static void put_2bit(uint8_t *qs, int e, int q) {
    qs[32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
}

/* Q2_K (84 bytes): scales[16] @0 (low nibble scale, high nibble min, per 16 elements),
 * qs[64] @16, fp16 d @80, fp16 dmin @82. y = d*scale*q - dmin*min. */
static void test_dequant_q2_K(void **state) {
    (void)state;
    uint8_t blk[84] = {0};
    float want[256], got[256];
    for (int k = 0; k < 16; k++) blk[k] = (uint8_t)(((k * 3 + 1) % 16) | ((k * 7) % 16) << 4);
    put16(blk + 80, H_0_5);
    put16(blk + 82, H_0_25);
    for (int e = 0; e < 256; e++) {
        const int q = pattern(e, 4), sc = (e / 16 * 3 + 1) % 16, mn = (e / 16 * 7) % 16;
        put_2bit(blk + 16, e, q);
        want[e] = 0.5f * sc * q - 0.25f * mn;
    }
    dequant_ok(TS_TYPE_Q2_K, blk, got, 256);
    expect_floats("q2_K", want, got, 256);
}

/* Q3_K (110 bytes): hmask[32] @0, qs[64] @32, scales[12] @96, fp16 d @108. q = low2 - (hbit ? 0 : 4)
 * with hbit of element e = 128h + 32s + l at bit 4h+s of hmask[l]. 16 six-bit scales biased by 32:
 * low 4 bits in byte k (k < 8) or the high nibble of byte k-8, top 2 bits at bit 2*(k/4) of byte
 * 8 + k%4. y = d * (scale - 32) * q. */
static void test_dequant_q3_K(void **state) {
    (void)state;
    uint8_t blk[110] = {0};
    float want[256], got[256];
    int sc[16];
    for (int k = 0; k < 16; k++) {
        sc[k] = (k * 5 + 9) % 64;
        const int lo = sc[k] & 15, hi = sc[k] >> 4;
        blk[96 + (k < 8 ? k : k - 8)] |= (uint8_t)(k < 8 ? lo : lo << 4);
        blk[96 + 8 + k % 4] |= (uint8_t)(hi << (2 * (k / 4)));
    }
    put16(blk + 108, H_0_125);
    for (int e = 0; e < 256; e++) {
        const int q = pattern(e, 8) - 4; /* -4..3 */
        const int hbit = q >= 0, low = hbit ? q : q + 4;
        put_2bit(blk + 32, e, low);
        blk[e % 32] |= (uint8_t)(hbit << (4 * (e / 128) + (e % 128) / 32));
        want[e] = 0.125f * (sc[e / 16] - 32) * q;
    }
    dequant_ok(TS_TYPE_Q3_K, blk, got, 256);
    expect_floats("q3_K", want, got, 256);
}

/* Q4_K / Q5_K scales: 8 six-bit scales and mins in 12 bytes, written out by hand.
 *   scales = {1, 2, 3, 4, 33, 40, 63, 17}, mins = {0, 5, 10, 15, 20, 48, 1, 63}
 *   bytes 0-3: scale j | (top 2 bits of scale j+4) << 6  -> 1|2<<6, 2|2<<6, 3|3<<6, 4|1<<6
 *   bytes 4-7: min j   | (top 2 bits of min j+4) << 6    -> 0|1<<6, 5|3<<6, 10|0<<6, 15|3<<6
 *   bytes 8-11: low 4 bits of scale j+4 | low 4 bits of min j+4 << 4 -> 1|4<<4, 8|0, 15|1<<4, 1|15<<4 */
static const uint8_t kK4Scales[12] = {0x81, 0x82, 0xc3, 0x44, 0x40, 0xc5, 0x0a, 0xcf, 0x41, 0x08, 0x1f, 0xf1};
static const int kK4Sc[8] = {1, 2, 3, 4, 33, 40, 63, 17}, kK4Mn[8] = {0, 5, 10, 15, 20, 48, 1, 63};

/* Q4_K (144 bytes): fp16 d @0, fp16 dmin @2, scales @4, qs[128] @16. Sub-blocks 2p, 2p+1 (32
 * elements each) share qs[32p..32p+31], low then high nibble. y = d*sc*q - dmin*mn. */
static void test_dequant_q4_K(void **state) {
    (void)state;
    uint8_t blk[144] = {0};
    float want[256], got[256];
    put16(blk, H_0_5);
    put16(blk + 2, H_0_125);
    memcpy(blk + 4, kK4Scales, 12);
    for (int e = 0; e < 256; e++) {
        const int q = pattern(e, 16), sb = e / 32;
        blk[16 + 32 * (e / 64) + e % 32] |= (uint8_t)(q << (4 * (sb % 2)));
        want[e] = 0.5f * kK4Sc[sb] * q - 0.125f * kK4Mn[sb];
    }
    dequant_ok(TS_TYPE_Q4_K, blk, got, 256);
    expect_floats("q4_K", want, got, 256);
}

/* Q5_K (176 bytes): as Q4_K with qh[32] @16 and qs[128] @48; the fifth bit of element l of
 * sub-block sb is bit sb of qh[l]. */
static void test_dequant_q5_K(void **state) {
    (void)state;
    uint8_t blk[176] = {0};
    float want[256], got[256];
    put16(blk, H_0_25);
    put16(blk + 2, H_1);
    memcpy(blk + 4, kK4Scales, 12);
    for (int e = 0; e < 256; e++) {
        const int q = pattern(e, 32), sb = e / 32;
        blk[48 + 32 * (e / 64) + e % 32] |= (uint8_t)((q & 15) << (4 * (sb % 2)));
        blk[16 + e % 32] |= (uint8_t)((q >> 4) << sb);
        want[e] = 0.25f * kK4Sc[sb] * q - 1.0f * kK4Mn[sb];
    }
    dequant_ok(TS_TYPE_Q5_K, blk, got, 256);
    expect_floats("q5_K", want, got, 256);
}

/* Q6_K (210 bytes): ql[128] @0, qh[64] @128, int8 scales[16] @192, fp16 d @208. Element
 * e = 128h + 32s + l: low nibble in ql[64h + l + 32*(s%2)] (high nibble when s >= 2), top 2 bits
 * at bits 2s..2s+1 of qh[32h + l]; q = 6-bit value - 32; y = d * scale[e/16] * q. */
static void test_dequant_q6_K(void **state) {
    (void)state;
    uint8_t blk[210] = {0};
    float want[256], got[256];
    for (int k = 0; k < 16; k++) blk[192 + k] = (uint8_t)(int8_t)(k * 17 - 128);
    put16(blk + 208, H_1_64);
    for (int e = 0; e < 256; e++) {
        const int q = pattern(e, 64) - 32, u = q + 32;
        const int h = e / 128, s = (e % 128) / 32, l = e % 32;
        blk[64 * h + l + 32 * (s % 2)] |= (uint8_t)((u & 15) << (4 * (s / 2)));
        blk[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * s));
        want[e] = (1.0f / 64) * ((e / 16) * 17 - 128) * q;
    }
    dequant_ok(TS_TYPE_Q6_K, blk, got, 256);
    expect_floats("q6_K", want, got, 256);
}

/* Q8_K (292 bytes): fp32 d @0, int8 qs[256] @4, int16 bsums[16] @260 (not used to dequantize). */
static void test_dequant_q8_K(void **state) {
    (void)state;
    uint8_t blk[292];
    float want[256], got[256];
    memset(blk, 0x5a, sizeof blk);
    const uint32_t d = bits_of_f32(0.125f);
    for (int i = 0; i < 4; i++) blk[i] = (uint8_t)(d >> (8 * i));
    for (int j = 0; j < 256; j++) {
        blk[4 + j] = (uint8_t)(int8_t)(j - 128);
        want[j] = 0.125f * (j - 128);
    }
    dequant_ok(TS_TYPE_Q8_K, blk, got, 256);
    expect_floats("q8_K", want, got, 256);
}

/* IQ4_NL: [fp16 d][16 bytes], nibbles placed as Q4_0, each indexing the codebook; y = d*kIQ4[q]. */
static void test_dequant_iq4_nl(void **state) {
    (void)state;
    uint8_t blk[36];
    float want[64], got[64];
    put16(blk, H_0_5);
    put16(blk + 18, H_M2);
    for (int j = 0; j < 16; j++) {
        blk[2 + j] = (uint8_t)(j | (15 - j) << 4);
        blk[20 + j] = (uint8_t)((j * 5 % 16) | (j * 3 % 16) << 4);
        want[j] = 0.5f * kIQ4[j];
        want[j + 16] = 0.5f * kIQ4[15 - j];
        want[32 + j] = -2.0f * kIQ4[j * 5 % 16];
        want[48 + j] = -2.0f * kIQ4[j * 3 % 16];
    }
    dequant_ok(TS_TYPE_IQ4_NL, blk, got, 64);
    expect_floats("iq4_nl", want, got, 64);
}

/* IQ4_XS (136 bytes): fp16 d @0, uint16 LE scales_h @2, scales_l[4] @4, qs[128] @8. Sub-block ib
 * (32 elements) has a 6-bit scale ls: low 4 bits in nibble ib%2 of scales_l[ib/2], top 2 bits at
 * bit 2*ib of scales_h; y = d*(ls-32)*kIQ4[q], quants placed as IQ4_NL within the sub-block. */
static void test_dequant_iq4_xs(void **state) {
    (void)state;
    uint8_t blk[136] = {0};
    float want[256], got[256];
    const int ls[8] = {0, 1, 31, 32, 33, 47, 62, 63};
    unsigned scales_h = 0;
    put16(blk, H_0_25);
    for (int ib = 0; ib < 8; ib++) {
        blk[4 + ib / 2] |= (uint8_t)((ls[ib] & 15) << (4 * (ib % 2)));
        scales_h |= (unsigned)(ls[ib] >> 4) << (2 * ib);
        for (int j = 0; j < 32; j++) {
            const int q = pattern(32 * ib + j, 16);
            blk[8 + 16 * ib + j % 16] |= (uint8_t)(q << (j < 16 ? 0 : 4));
            want[32 * ib + j] = 0.25f * (ls[ib] - 32) * kIQ4[q];
        }
    }
    put16(blk + 2, (uint16_t)scales_h);
    dequant_ok(TS_TYPE_IQ4_XS, blk, got, 256);
    expect_floats("iq4_xs", want, got, 256);
}

/* MXFP4 (17 bytes): E8M0 byte e (scale 2^(e-127)), E2M1 nibbles placed as Q4_0. */
static void test_dequant_mxfp4(void **state) {
    (void)state;
    const int e[3] = {127, 130, 120};
    uint8_t blk[51];
    float want[96], got[96];
    for (int b = 0; b < 3; b++) {
        blk[17 * b] = (uint8_t)e[b];
        for (int j = 0; j < 16; j++) {
            const int lo = (j + b) % 16, hi = (15 - j + 3 * b) % 16;
            blk[17 * b + 1 + j] = (uint8_t)(lo | hi << 4);
            want[32 * b + j] = kE2M1[lo] * ldexpf(1, e[b] - 127);
            want[32 * b + j + 16] = kE2M1[hi] * ldexpf(1, e[b] - 127);
        }
    }
    dequant_ok(TS_TYPE_MXFP4, blk, got, 96);
    expect_floats("mxfp4", want, got, 96);
}

/* UE4M3 by definition: unsigned, 4-bit exponent (bias 7), 3-bit mantissa, exponent 0 subnormal. */
static float ue4m3(uint8_t x) {
    const int exp = (x >> 3) & 15, man = x & 7;
    return exp ? ldexpf(1 + man / 8.0f, exp - 7) : ldexpf((float)man, -9);
}

/* NVFP4 (36 bytes, 64 elements): 4 UE4M3 scales @0, qs[32] @4; sub-block s (16 elements) uses
 * bytes 8s..8s+7, byte j holding element j (low nibble) and element j+8 (high). */
static void test_dequant_nvfp4(void **state) {
    (void)state;
    const uint8_t scales[8] = {0x38, 0x3c, 0x30, 0x41, 0x03, 0x77, 0x01, 0x08};
    uint8_t blk[72];
    float want[128], got[128];
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < 4; s++) {
            const uint8_t sc = scales[4 * b + s];
            blk[36 * b + s] = sc;
            for (int j = 0; j < 8; j++) {
                const int lo = (j * 3 + s + b) % 16, hi = (j * 5 + 2 * s + 1) % 16;
                blk[36 * b + 4 + 8 * s + j] = (uint8_t)(lo | hi << 4);
                want[64 * b + 16 * s + j] = kE2M1[lo] * ue4m3(sc);
                want[64 * b + 16 * s + j + 8] = kE2M1[hi] * ue4m3(sc);
            }
        }
    dequant_ok(TS_TYPE_NVFP4, blk, got, 128);
    expect_floats("nvfp4", want, got, 128);
}

/* Q1_0 (18 bytes, 128 elements): fp16 d, then bit j (LSB first) of byte j/8: set +d, clear -d.
 * Q2_0 (18 bytes, 64 elements): fp16 d, then 2-bit code of element j at bit 2*(j%4) of byte j/4;
 * y = (code - 1) * d. */
static void test_dequant_q1_0_q2_0(void **state) {
    (void)state;
    uint8_t blk[18];
    float want[128], got[128];
    put16(blk, H_1_5);
    for (int b = 0; b < 16; b++) blk[2 + b] = (uint8_t)(0xa5 ^ b);
    for (int j = 0; j < 128; j++) want[j] = ((0xa5 ^ (j / 8)) >> (j % 8) & 1) ? 1.5f : -1.5f;
    dequant_ok(TS_TYPE_Q1_0, blk, got, 128);
    expect_floats("q1_0", want, got, 128);

    memset(blk, 0, sizeof blk);
    put16(blk, H_0_75);
    for (int j = 0; j < 64; j++) {
        const int code = (j * 3 + j / 16) % 4;
        blk[2 + j / 4] |= (uint8_t)(code << (2 * (j % 4)));
        want[j] = (code - 1) * 0.75f;
    }
    dequant_ok(TS_TYPE_Q2_0, blk, got, 64);
    expect_floats("q2_0", want, got, 64);
}

/* ------------------------------------------- (b) quantize -> dequantize error bounds */

/* Relative RMS error sqrt(sum (x - x')^2 / sum x^2) on N(0,1) rows. Each bound is about 1.25x
 * the worst of 200 seeds measured over widths 160..2560 when the test was written (in comments). */
typedef struct {
    uint32_t type;
    double rel_rms;
} error_bound;

static const error_bound kBounds[] = {
    {TS_TYPE_F16, 3.5e-4},  /* 2.4e-4 (about 2^-11 / sqrt 3) */
    {TS_TYPE_BF16, 3.0e-3}, /* 2.1e-3 */
    {TS_TYPE_Q8_0, 0.0095}, /* 0.0069 */
    {TS_TYPE_Q4_0, 0.14},   /* 0.105 */
    {TS_TYPE_Q4_1, 0.125},  /* 0.093 */
    {TS_TYPE_Q5_0, 0.075},  /* 0.053 */
    {TS_TYPE_Q5_1, 0.06},   /* 0.044 */
    {TS_TYPE_Q2_K, 0.42},   /* 0.361 */
    {TS_TYPE_Q3_K, 0.21},   /* 0.176 */
    {TS_TYPE_Q4_K, 0.10},   /* 0.081 */
    {TS_TYPE_Q5_K, 0.05},   /* 0.040 */
    {TS_TYPE_Q6_K, 0.027},  /* 0.021 */
    {TS_TYPE_IQ4_NL, 0.12}, /* 0.093 */
    {TS_TYPE_IQ4_XS, 0.11}, /* 0.089 */
    {TS_TYPE_MXFP4, 0.18},  /* 0.134 */
    {TS_TYPE_NVFP4, 0.14},  /* 0.109 */
    {TS_TYPE_Q1_0, 0.70},   /* 0.652; sign * mean|x| gives sqrt(1 - 2/pi) = 0.603 on Gaussians */
    {TS_TYPE_Q2_0, 0.95},   /* 0.817; codes -1..2 times absmax: made for ternary weights */
};

static double rel_rms_error(uint32_t type, const float *x, int n) {
    uint8_t q[2560 * 4];
    float y[2560];
    quant_ok(type, x, q, n);
    dequant_ok(type, q, y, n);
    double se = 0, sx = 0;
    for (int i = 0; i < n; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        sx += (double)x[i] * x[i];
    }
    return sqrt(se / sx);
}

static void test_error_bounds(void **state) {
    (void)state;
    static const int widths[] = {160, 256, 320, 640, 2560};
    float x[2560];
    for (size_t t = 0; t < sizeof kBounds / sizeof kBounds[0]; t++) {
        const ts_type_traits *tr = ts_type_get(kBounds[t].type);
        int tested = 0;
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            const int n = widths[w];
            if (n % tr->block_size) continue;
            for (int rep = 0; rep < 6; rep++) {
                seed(1000 * t + 10 * w + rep);
                for (int i = 0; i < n; i++) x[i] = gaussian();
                const double e = rel_rms_error(kBounds[t].type, x, n);
                if (!(e <= kBounds[t].rel_rms))
                    fail_msg("%s, %d elements: relative RMS error %.5f over the bound %.5f", tr->name, n, e,
                             kBounds[t].rel_rms);
            }
            tested++;
        }
        if (tested < 2) fail_msg("%s was checked on %d row widths only", tr->name, tested);
    }
}

/* Per-element bound from the step size, per 32-element block with absmax a and range r:
 *   Q8_0 step a/127, error <= half a step plus the fp16 rounding of d (<= 127 * 2^-11 * step);
 *   Q4_0/Q5_0 step a/8, a/16: the side opposite the largest value can lack one level, so <= 1 step;
 *   Q4_1/Q5_1 step r/15, r/31: half a step, plus fp16 rounding of d (x nmax) and of the min. */
static void test_error_per_element(void **state) {
    (void)state;
    static const uint32_t types[] = {TS_TYPE_Q8_0, TS_TYPE_Q4_0, TS_TYPE_Q5_0, TS_TYPE_Q4_1, TS_TYPE_Q5_1};
    float x[640], y[640];
    uint8_t q[640 * 2];
    for (size_t t = 0; t < 5; t++) {
        for (int rep = 0; rep < 20; rep++) {
            seed(77 + 31 * t + rep);
            for (int i = 0; i < 640; i++)
                x[i] = gaussian() * (1 + (i / 32) % 5) + (rep % 3 == 0 ? 2.0f : 0.0f);
            quant_ok(types[t], x, q, 640);
            dequant_ok(types[t], q, y, 640);
            for (int b = 0; b < 20; b++) {
                float a = 0, mn = x[32 * b], mx = x[32 * b];
                for (int j = 0; j < 32; j++) {
                    a = fmaxf(a, fabsf(x[32 * b + j]));
                    mn = fminf(mn, x[32 * b + j]);
                    mx = fmaxf(mx, x[32 * b + j]);
                }
                const float r = mx - mn, u = ldexpf(1, -11);
                const float bound = types[t] == TS_TYPE_Q8_0   ? (a / 127) * (0.5f + 127 * u)
                                    : types[t] == TS_TYPE_Q4_0 ? (a / 8) * (1 + 8 * u)
                                    : types[t] == TS_TYPE_Q5_0 ? (a / 16) * (1 + 16 * u)
                                    : types[t] == TS_TYPE_Q4_1 ? (r / 15) * (0.5f + 15 * u) + fabsf(mn) * u
                                                               : (r / 31) * (0.5f + 31 * u) + fabsf(mn) * u;
                for (int j = 0; j < 32; j++) {
                    const float err = fabsf(x[32 * b + j] - y[32 * b + j]);
                    if (err > bound * 1.0001f)
                        fail_msg("%s: element %d off by %g, bound %g", ts_type_name(types[t]), 32 * b + j,
                                 err, bound);
                }
            }
        }
    }
}

/* Every block type reads its scale from its own block: a row whose blocks differ in magnitude by
 * 10^6 keeps the same relative error in each block. */
static void test_error_per_block_scale(void **state) {
    (void)state;
    static const uint32_t types[] = {TS_TYPE_Q8_0, TS_TYPE_Q4_K, TS_TYPE_Q6_K, TS_TYPE_IQ4_NL,
                                     TS_TYPE_IQ4_XS};
    float x[2560];
    for (size_t t = 0; t < 5; t++) {
        const int64_t bs = ts_type_get(types[t])->block_size;
        seed(4242 + t);
        for (int i = 0; i < 2560; i++) x[i] = gaussian() * powf(10.0f, (float)((i / bs) % 7) - 3.0f);
        uint8_t q[2560 * 2];
        float y[2560];
        quant_ok(types[t], x, q, 2560);
        dequant_ok(types[t], q, y, 2560);
        for (int64_t b = 0; b < 2560 / bs; b++) {
            double se = 0, sx = 0;
            for (int64_t j = b * bs; j < (b + 1) * bs; j++) {
                se += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                sx += (double)x[j] * x[j];
            }
            if (sqrt(se / sx) > 0.15)
                fail_msg("%s block %lld: relative error %.4f", ts_type_name(types[t]), (long long)b,
                         sqrt(se / sx));
        }
    }
}

/* ----------------------------------------------------- (c) exact round trips */

/* Rows of values that lie on the format's grid, with the extreme that fixes the scale present in
 * every block: quantize -> dequantize must give them back exactly. */
static void expect_exact_round_trip(uint32_t type, const float *x, int n) {
    uint8_t q[1024];
    float y[256];
    quant_ok(type, x, q, n);
    dequant_ok(type, q, y, n);
    char what[64];
    snprintf(what, sizeof what, "%s round trip", ts_type_name(type));
    expect_floats(what, x, y, n);
}

static void test_round_trip_32_blocks(void **state) {
    (void)state;
    float x[256];
    seed(5);
    /* Q8_0: k * 0.25, k in -127..127, 127 * 0.25 first in each block (so d = 0.25 exactly). */
    for (int i = 0; i < 256; i++)
        x[i] = i % 32 == 0 ? 31.75f : (float)((int)(next_u64() % 255) - 127) * 0.25f;
    expect_exact_round_trip(TS_TYPE_Q8_0, x, 256);
    /* Q4_0 / Q5_0: k * d with k in -8..7 (-16..15); the value -8d (-16d) fixes d = max / -8. */
    for (int i = 0; i < 256; i++) x[i] = i % 32 == 5 ? -1.0f : (float)((int)(next_u64() % 16) - 8) * 0.125f;
    expect_exact_round_trip(TS_TYPE_Q4_0, x, 256);
    for (int i = 0; i < 256; i++) x[i] = i % 32 == 9 ? -4.0f : (float)((int)(next_u64() % 32) - 16) * 0.25f;
    expect_exact_round_trip(TS_TYPE_Q5_0, x, 256);
    /* Q4_1: min -2 and max 1.75 present, so d = 3.75/15 = 0.25; values -2 + k/4. */
    for (int i = 0; i < 256; i++)
        x[i] = i % 32 == 0 ? -2.0f : i % 32 == 1 ? 1.75f : -2 + (float)(next_u64() % 16) * 0.25f;
    expect_exact_round_trip(TS_TYPE_Q4_1, x, 256);
    /* Q5_1: min -8 and max 7.5: d = 15.5/31 = 0.5; values -8 + k/2. */
    for (int i = 0; i < 256; i++)
        x[i] = i % 32 == 0 ? -8.0f : i % 32 == 1 ? 7.5f : -8 + (float)(next_u64() % 32) * 0.5f;
    expect_exact_round_trip(TS_TYPE_Q5_1, x, 256);
    /* IQ4_NL: codebook entries times 2^-6, -127 * 2^-6 the largest magnitude in each block. */
    for (int i = 0; i < 256; i++) x[i] = ldexpf((float)(i % 32 == 3 ? -127 : kIQ4[next_u64() % 16]), -6);
    expect_exact_round_trip(TS_TYPE_IQ4_NL, x, 256);
    /* MXFP4: E2M1 values times 2^-3 with 6 * 2^-3 present (floor(log2 amax) - 2 = -3). */
    for (int i = 0; i < 256; i++) x[i] = (i % 32 == 7 ? 6 : kE2M1[next_u64() % 16]) * 0.125f;
    expect_exact_round_trip(TS_TYPE_MXFP4, x, 256);
    /* NVFP4: E2M1 values times 1.25 (UE4M3 0x3a) with 6 * 1.25 present in each sub-block of 16. */
    for (int i = 0; i < 256; i++) x[i] = (i % 16 == 2 ? -6 : kE2M1[next_u64() % 16]) * 1.25f;
    expect_exact_round_trip(TS_TYPE_NVFP4, x, 256);
}

static void test_round_trip_k_quants(void **state) {
    (void)state;
    float x[256];
    seed(6);
    /* Q6_K: q * 2^-3, q in -32..31, -32 * 2^-3 in every 16: sub-block scales all 2^-3, stored as
     * -128 against d = -2^-10. Q3_K: same with q in -4..3 (scales stored as -32 against -2^-8). */
    for (int i = 0; i < 256; i++) x[i] = i % 16 == 4 ? -4.0f : (float)((int)(next_u64() % 64) - 32) * 0.125f;
    expect_exact_round_trip(TS_TYPE_Q6_K, x, 256);
    for (int i = 0; i < 256; i++) x[i] = i % 16 == 11 ? -0.5f : (float)((int)(next_u64() % 8) - 4) * 0.125f;
    expect_exact_round_trip(TS_TYPE_Q3_K, x, 256);
    /* IQ4_XS: codebook entries times 2^-4, -127 * 2^-4 in every 32 (scales stored as -32 against
     * d = -2^-9). Q2_K, Q4_K, Q5_K fit an offset by search and are not exact even on grid data. */
    for (int i = 0; i < 256; i++) x[i] = ldexpf((float)(i % 32 == 30 ? -127 : kIQ4[next_u64() % 16]), -4);
    expect_exact_round_trip(TS_TYPE_IQ4_XS, x, 256);
    /* A row of zeros stays zeros in every block format. */
    memset(x, 0, sizeof x);
    for (uint32_t t = 0; t < TS_TYPE_COUNT; t++) /* every block size divides 256 */
        if (ts_can_quantize(t)) expect_exact_round_trip(t, x, 256);
}

static void test_f16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ts_fp16_to_fp32((uint16_t)h);
        const uint16_t back = ts_fp32_to_fp16(f);
        const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            if (!isnan(f) || back != ((h & 0x8000) | 0x7e00))
                fail_msg("fp16 NaN %04x -> %g -> %04x", h, f, back);
        } else if (back != h) {
            fail_msg("fp16 %04x -> %.9g -> %04x", h, f, back);
        }
    }
}

static void test_bf16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ts_bf16_to_fp32((uint16_t)h);
        assert_int_equal(bits_of_f32(f), h << 16);
        const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        assert_int_equal(ts_fp32_to_bf16(f), is_nan ? (h | 0x40) : h);
    }
}

typedef struct {
    uint32_t f32;
    uint16_t half;
} conv_case;

static void test_f16_edges(void **state) {
    (void)state;
    static const conv_case cases[] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, /* +-0 */
        {0x7f800000, 0x7c00}, {0xff800000, 0xfc00}, /* +-inf */
        {0x7fc00000, 0x7e00}, {0xff800001, 0xfe00}, /* NaNs: quiet, sign kept */
        {0x477fe000, 0x7bff},                       /* 65504, the largest half */
        {0x477fefff, 0x7bff},                       /* just under the halfway point to 65536 */
        {0x477ff000, 0x7c00},                       /* 65520: tie, rounds to even = inf */
        {0x49742400, 0x7c00},                       /* 1e6 */
        {0x33800000, 0x0001},                       /* 2^-24, smallest subnormal */
        {0x33000000, 0x0000},                       /* 2^-25: tie between 0 and 2^-24 -> 0 */
        {0x33000001, 0x0001},                       /* just above the tie */
        {0x33c00000, 0x0002},                       /* 1.5 * 2^-24: tie -> even 2 */
        {0x34200000, 0x0002},                       /* 2.5 * 2^-24: tie -> even 2 */
        {0x387fc000, 0x03ff},                       /* 1023 * 2^-24, largest subnormal */
        {0x387fe000, 0x0400},                       /* 1023.5 * 2^-24: tie -> even 0x400 (normal) */
        {0x38800000, 0x0400},                       /* 2^-14, smallest normal */
        {0x3f801000, 0x3c00},                       /* 1 + 2^-11: tie -> even 1.0 */
        {0x3f803000, 0x3c02},                       /* 1 + 3 * 2^-11: tie -> even 1 + 2^-9 */
        {0x3f801001, 0x3c01},                       /* just above the tie */
        {0xc0000000, 0xc000},                       /* -2 */
        {0x3dcccccd, 0x2e66},                       /* 0.1f */
        {0x3eaaaaab, 0x3555},                       /* 1/3 */
        {0x00000001, 0x0000},                       /* fp32 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = ts_fp32_to_fp16(f32_of_bits(cases[i].f32));
        if (got != cases[i].half)
            fail_msg("fp32 %08x -> fp16 %04x, expected %04x", cases[i].f32, got, cases[i].half);
    }
    assert_true(ts_fp16_to_fp32(0x0001) == ldexpf(1, -24));
    assert_true(ts_fp16_to_fp32(0x03ff) == ldexpf(1023, -24));
    assert_true(ts_fp16_to_fp32(0x3c01) == 1.0009765625f);
    assert_true(signbit(ts_fp16_to_fp32(0x8000)) && ts_fp16_to_fp32(0x8000) == 0);
    assert_true(isinf(ts_fp16_to_fp32(0xfc00)) && ts_fp16_to_fp32(0xfc00) < 0);
    assert_true(isnan(ts_fp16_to_fp32(0x7c01)));
}

static void test_bf16_edges(void **state) {
    (void)state;
    static const conv_case cases[] = {
        {0x3f800000, 0x3f80}, /* 1 */
        {0x3f808000, 0x3f80}, /* 1 + 2^-8: tie -> even */
        {0x3f818000, 0x3f82}, /* 1 + 3 * 2^-8: tie -> even */
        {0x3f808001, 0x3f81}, /* just above the tie */
        {0x80000000, 0x8000}, /* -0 */
        {0x7f800000, 0x7f80}, /* inf */
        {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds up to inf */
        {0x7f800001, 0x7fc0}, /* signalling NaN made quiet */
        {0xffc00001, 0xffc0}, /* NaN payload truncated, sign kept */
        {0x00008000, 0x0000}, /* fp32 subnormal, tie -> even 0 (not flushed: rounded) */
        {0x00018000, 0x0002}, /* subnormal tie -> even */
        {0x00000001, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = ts_fp32_to_bf16(f32_of_bits(cases[i].f32));
        if (got != cases[i].half)
            fail_msg("fp32 %08x -> bf16 %04x, expected %04x", cases[i].f32, got, cases[i].half);
    }
    /* The row functions use the same conversions: F16/BF16 quantize keeps inf and NaN. */
    const float x[3] = {INFINITY, NAN, -0.0f};
    uint8_t q[6];
    float y[3];
    quant_ok(TS_TYPE_F16, x, q, 3);
    dequant_ok(TS_TYPE_F16, q, y, 3);
    assert_true(isinf(y[0]) && isnan(y[1]) && signbit(y[2]));
    quant_ok(TS_TYPE_BF16, x, q, 3);
    dequant_ok(TS_TYPE_BF16, q, y, 3);
    assert_true(isinf(y[0]) && isnan(y[1]) && signbit(y[2]));
}

/* --------------------------------------------------------------- (d) refusals */

static void expect_refusal(int rc, const char *err, const char *must_contain) {
    assert_int_equal(rc, -1);
    if (!strstr(err, must_contain)) fail_msg("message \"%s\" does not mention \"%s\"", err, must_contain);
}

static void test_refusals(void **state) {
    (void)state;
    char err[256];
    float x[512] = {0}, y[512];
    uint8_t q[2048] = {0};

    expect_refusal(ts_dequantize_row(TS_TYPE_Q4_K, q, y, 100, err, sizeof err), err, "256");
    expect_refusal(ts_dequantize_row(TS_TYPE_Q4_K, q, y, 100, err, sizeof err), err, "q4_K");
    expect_refusal(ts_quantize_row(TS_TYPE_Q8_0, x, q, 33, err, sizeof err), err,
                   "multiple of the block size 32");
    expect_refusal(ts_quantize_row(TS_TYPE_NVFP4, x, q, 32, err, sizeof err), err, "64");
    expect_refusal(ts_dequantize_row(TS_TYPE_F16, q, y, -1, err, sizeof err), err, "-1");
    expect_refusal(ts_dequantize_row(TS_TYPE_TQ1_0, q, y, 256, err, sizeof err), err, "tq1_0");
    expect_refusal(ts_quantize_row(TS_TYPE_Q8_K, x, q, 256, err, sizeof err), err, "q8_K");
    expect_refusal(ts_quantize_row(TS_TYPE_I32, x, q, 4, err, sizeof err), err, "not supported");
    static const uint32_t not_types[] = {4, 5, 31, 32, 33, 36, 37, 38, TS_TYPE_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof not_types / sizeof not_types[0]; i++) {
        expect_refusal(ts_dequantize_row(not_types[i], q, y, 32, err, sizeof err), err,
                       "not a ggml tensor type");
        expect_refusal(ts_quantize_row(not_types[i], x, q, 32, err, sizeof err), err,
                       "not a ggml tensor type");
    }

    /* Non-finite input to a block format is refused with the element's index. */
    x[37] = NAN;
    expect_refusal(ts_quantize_row(TS_TYPE_Q4_K, x, q, 256, err, sizeof err), err, "element 37");
    expect_refusal(ts_quantize_row(TS_TYPE_Q8_0, x, q, 64, err, sizeof err), err, "NaN");
    x[37] = -INFINITY;
    expect_refusal(ts_quantize_row(TS_TYPE_IQ4_NL, x, q, 64, err, sizeof err), err, "infinite");
    assert_int_equal(ts_quantize_row(TS_TYPE_F16, x, q, 64, err, sizeof err), 0);
    x[37] = 0;

    /* A NULL or tiny error buffer is fine; an empty row is fine. */
    assert_int_equal(ts_dequantize_row(TS_TYPE_Q4_K, q, y, 100, NULL, 0), -1);
    char tiny[8];
    assert_int_equal(ts_dequantize_row(TS_TYPE_Q4_K, q, y, 100, tiny, sizeof tiny), -1);
    assert_true(memchr(tiny, '\0', sizeof tiny) != NULL);
    assert_int_equal(ts_quantize_row(TS_TYPE_Q4_K, NULL, NULL, 0, err, sizeof err), 0);
    assert_int_equal(ts_dequantize_row(TS_TYPE_Q4_K, NULL, NULL, 0, err, sizeof err), 0);
    expect_refusal(ts_dequantize_row(TS_TYPE_Q4_K, NULL, y, 256, err, sizeof err), err, "NULL");
}

static void test_capabilities(void **state) {
    (void)state;
    static const uint32_t dq[] = {0,  1,  2,  3,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16,
                                  17, 18, 19, 20, 21, 22, 23, 29, 30, 39, 40, 41, 42};
    static const uint32_t qz[] = {0,  1,  2,  3,  6,  7,  8,  10, 11, 12, 13, 14,
                                  18, 20, 21, 22, 23, 29, 30, 39, 40, 41, 42};
    for (uint32_t t = 0; t < TS_TYPE_COUNT + 8; t++) {
        bool want_dq = false, want_qz = false;
        for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++) want_dq |= dq[i] == t;
        for (size_t i = 0; i < sizeof qz / sizeof qz[0]; i++) want_qz |= qz[i] == t;
        if (ts_can_dequantize(t) != want_dq) fail_msg("ts_can_dequantize(%u) is %d", t, ts_can_dequantize(t));
        if (ts_can_quantize(t) != want_qz) fail_msg("ts_can_quantize(%u) is %d", t, ts_can_quantize(t));
    }
}

/* ------------------------------------------------------------- (e) type table */

typedef struct {
    const char *name; /* NULL: id not a type */
    int64_t block;
    size_t bytes;
} ggml_row;

/* ggml type_traits (ggml.c) and block structs (ggml-common.h), ids 0..42. */
static const ggml_row kGgml[43] = {
    {"f32", 1, 4},      {"f16", 1, 2},        {"q4_0", 32, 18},    {"q4_1", 32, 20},     {NULL, 0, 0},
    {NULL, 0, 0},       {"q5_0", 32, 22},     {"q5_1", 32, 24},    {"q8_0", 32, 34},     {"q8_1", 32, 36},
    {"q2_K", 256, 84},  {"q3_K", 256, 110},   {"q4_K", 256, 144},  {"q5_K", 256, 176},   {"q6_K", 256, 210},
    {"q8_K", 256, 292}, {"iq2_xxs", 256, 66}, {"iq2_xs", 256, 74}, {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
    {"iq4_nl", 32, 18}, {"iq3_s", 256, 110},  {"iq2_s", 256, 82},  {"iq4_xs", 256, 136}, {"i8", 1, 1},
    {"i16", 1, 2},      {"i32", 1, 4},        {"i64", 1, 8},       {"f64", 1, 8},        {"iq1_m", 256, 56},
    {"bf16", 1, 2},     {NULL, 0, 0},         {NULL, 0, 0},        {NULL, 0, 0},         {"tq1_0", 256, 54},
    {"tq2_0", 256, 66}, {NULL, 0, 0},         {NULL, 0, 0},        {NULL, 0, 0},         {"mxfp4", 32, 17},
    {"nvfp4", 64, 36},  {"q1_0", 128, 18},    {"q2_0", 64, 18},
};

static void test_type_table(void **state) {
    (void)state;
    assert_int_equal(TS_TYPE_COUNT, 43);
    for (uint32_t id = 0; id < 43; id++) {
        const ts_type_traits *t = ts_type_get(id);
        if (!kGgml[id].name) {
            if (t) fail_msg("id %u was removed from ggml but is known as %s", id, t->name);
            assert_string_equal(ts_type_name(id), "unknown");
            assert_int_equal(ts_row_size(id, 256), 0);
            continue;
        }
        if (!t) fail_msg("ggml type %u (%s) is unknown", id, kGgml[id].name);
        assert_string_equal(t->name, kGgml[id].name);
        assert_int_equal(t->block_size, kGgml[id].block);
        assert_int_equal(t->type_size, kGgml[id].bytes);
        assert_int_equal(ts_type_from_name(t->name), (int)id);
    }
    assert_null(ts_type_get(43));
    assert_null(ts_type_get(UINT32_MAX));
    assert_int_equal(ts_type_from_name("Q4_K"), TS_TYPE_Q4_K);
    assert_int_equal(ts_type_from_name("BF16"), TS_TYPE_BF16);
    assert_int_equal(ts_type_from_name("q4_k_m"), -1);
    assert_int_equal(ts_type_from_name(NULL), -1);

    assert_int_equal(ts_row_size(TS_TYPE_Q4_K, 2560), 10 * 144);
    assert_int_equal(ts_row_size(TS_TYPE_IQ4_NL, 160), 90); /* a PLE row */
    assert_int_equal(ts_row_size(TS_TYPE_Q8_0, 640), 20 * 34);
    assert_int_equal(ts_row_size(TS_TYPE_NVFP4, 320), 5 * 36);
    assert_int_equal(ts_row_size(TS_TYPE_F32, 7), 28);
    assert_int_equal(ts_row_size(TS_TYPE_Q4_K, 160), 0); /* ragged */
    assert_int_equal(ts_row_size(TS_TYPE_Q4_0, -32), 0);
    assert_int_equal(ts_row_size(TS_TYPE_BF16, 0), 0);
    /* 64-bit sizes: a 51.2e9-element PLE table in IQ4_NL is over 4 GiB. */
    assert_true(ts_row_size(TS_TYPE_IQ4_NL, 51200000000LL) == (size_t)1600000000 * 18);
}

/* ------------------------------------- (e2) ggml's exact bytes without ggml */

/* A row built without libm (sums of scaled 32-bit integers, power-of-two magnitudes from 2^-12 to
 * 2^12 per super-block, outliers, uniform, all-positive and constant stretches), the same on any
 * IEEE machine. The digests are FNV-1a of the bytes ggml's own quantize_row_*_ref (and
 * ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref) wrote for it, recorded from libggml-base of
 * the llama.cpp line with NVFP4/Q1_0/Q2_0: our quantizers must write the very same bytes. This
 * pins details no error bound sees: search ranges, tie-breaks, rounding modes. */
enum { GOLDEN_N = 65536 };

static void golden_row(float *x) {
    seed(2026);
    for (int i = 0; i < GOLDEN_N; i++) {
        const int sb = i / 256, mag = sb * 7 % 25 - 12; /* per super-block scale 2^-12 .. 2^12 */
        float v = 0;
        for (int k = 0; k < 4; k++) v += (float)(int32_t)(uint32_t)(next_u64() >> 32) * 0x1p-31f;
        if (sb % 4 == 2) v = (float)(int32_t)(uint32_t)(next_u64() >> 32) * 0x1p-31f; /* uniform */
        if (sb % 5 == 3) v += 3;                                   /* all-positive super-blocks */
        if (i % 331 == 17 || (sb % 3 == 1 && i % 7 == 0)) v *= 16; /* outliers, sparse and dense */
        if (sb % 7 == 5 && i % 256 < 32) v = 0.75f;                /* a constant sub-block */
        x[i] = ldexpf(v, mag);
    }
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static const struct {
    uint32_t type;
    uint64_t digest;
} kGolden[] = {
    {TS_TYPE_Q4_0, 0xeda76bed6541c7e2ull},    {TS_TYPE_Q4_1, 0x9c0256539375e9e5ull},
    {TS_TYPE_Q5_0, 0x1ffcc6adc5f3bc03ull},    {TS_TYPE_Q5_1, 0x6df250a0d0e627aeull},
    {TS_TYPE_Q8_0, 0x2cbdbc98c191b528ull},    {TS_TYPE_Q2_K, 0x87c8a93cc163f4d3ull},
    {TS_TYPE_Q3_K, 0xc2fe043f65af8931ull},    {TS_TYPE_Q4_K, 0xe8a96c58528bb948ull},
    {TS_TYPE_Q5_K, 0xa257a09c9e19659full},    {TS_TYPE_Q6_K, 0x8aef82dc79fef0e8ull},
    {TS_TYPE_IQ4_NL, 0x1034ad635281c4b9ull},  {TS_TYPE_IQ4_XS, 0x97b08a26e08565eeull},
    {TS_TYPE_MXFP4, 0x30ecb666e9b980a0ull},   {TS_TYPE_NVFP4, 0x8f65b1a9510e5de3ull},
    {TS_TYPE_Q1_0, 0x961940889a8ba298ull},    {TS_TYPE_Q2_0, 0x6f4357c9ebc45d28ull},
    {TS_TYPE_F16, 0xc7709a0fd44e309cull},     {TS_TYPE_BF16, 0xb1bbd3606f322884ull},
    {TS_TYPE_IQ3_XXS, 0x47189073f38fa862ull}, {TS_TYPE_IQ3_S, 0xd8faf5c80e6285f2ull},
    {TS_TYPE_IQ2_S, 0x33ac53a9b4872209ull},   {TS_TYPE_IQ1_M, 0x69e6821bb7f13a0aull},
};

static void test_golden_digests(void **state) {
    (void)state;
    static float x[GOLDEN_N];
    static uint8_t q[GOLDEN_N * 2];
    golden_row(x);
    for (size_t t = 0; t < sizeof kGolden / sizeof kGolden[0]; t++) {
        memset(q, 0, sizeof q);
        quant_ok(kGolden[t].type, x, q, GOLDEN_N);
        const uint64_t d = fnv1a(q, ts_row_size(kGolden[t].type, GOLDEN_N));
        if (d != kGolden[t].digest)
            fail_msg("%s: bytes differ from ggml's (digest %016llx, ggml %016llx)",
                     ts_type_name(kGolden[t].type), (unsigned long long)d,
                     (unsigned long long)kGolden[t].digest);
    }
}

/* Rules worked out by hand from ggml's reference code, checked on the bytes. */
static void test_quant_bytes_by_hand(void **state) {
    (void)state;
    float x[32] = {0};
    uint8_t q[34];

    /* Q4_0: +1 and -1 tie for the largest magnitude; the first (+1) sets d = 1 / -8 = -0.125
     * (fp16 0xb000). q = trunc(x / d + 8.5): +1 -> 0, -1 -> 16 clamped to 15, 0 -> 8. */
    x[3] = 1;
    x[10] = -1;
    quant_ok(TS_TYPE_Q4_0, x, q, 32);
    assert_int_equal(q[0] | q[1] << 8, 0xb000);
    for (int j = 0; j < 16; j++) assert_int_equal(q[2 + j], j == 3 ? 0x80 : j == 10 ? 0x8f : 0x88);

    /* Q8_0 rounds half away from zero (roundf): with amax 127, d = 1 and q = round(x). */
    const float v8[6] = {127, 2.5f, -2.5f, 0.5f, -0.49f, -126.5f};
    const int8_t q8[6] = {127, 3, -3, 1, 0, -127};
    memset(x, 0, sizeof x);
    memcpy(x, v8, sizeof v8);
    quant_ok(TS_TYPE_Q8_0, x, q, 32);
    assert_int_equal(q[0] | q[1] << 8, 0x3c00);
    for (int j = 0; j < 6; j++) assert_int_equal((int8_t)q[2 + j], q8[j]);

    /* IQ4_NL: -127 * 2^-6 first fixes id = 64, so element 1+i, at the midpoint of entries i and
     * i+1 (times 2^-6), sits on a tie: it takes the upper entry i+1. Elements 16..31 are entries. */
    x[0] = ldexpf(-127, -6);
    for (int i = 0; i < 15; i++) x[1 + i] = ldexpf((kIQ4[i] + kIQ4[i + 1]) / 2.0f, -6);
    for (int j = 16; j < 32; j++) x[j] = ldexpf((float)kIQ4[j - 16], -6);
    quant_ok(TS_TYPE_IQ4_NL, x, q, 32);
    for (int j = 0; j < 16; j++) assert_int_equal(q[2 + j], (j == 0 ? 0 : j) | j << 4);

    /* MXFP4: amax 6 gives E8M0 127 (scale 1); a value halfway between two E2M1 values takes the
     * one listed first in code order (2.5 -> 2.0, code 4; -5 -> -4, code 14; -0.25 -> +0). */
    memset(x, 0, sizeof x);
    x[0] = 6;
    x[1] = 2.5f;
    x[2] = -5;
    x[3] = -0.25f;
    x[4] = 0.25f;
    quant_ok(TS_TYPE_MXFP4, x, q, 32);
    assert_int_equal(q[0], 127);
    const uint8_t want[5] = {7, 4, 14, 0, 0};
    for (int j = 0; j < 5; j++) assert_int_equal(q[1 + j] & 15, want[j]);
}

/* ------------------------------------------------- (f) optional: ggml itself */

typedef void (*ggml_quant_fn)(const float *, void *, int64_t);
typedef void (*ggml_dequant_fn)(const void *, float *, int64_t);

static void *ggml_sym(void *lib, const char *fmt, const char *name) {
    char sym[64];
    snprintf(sym, sizeof sym, fmt, name);
    void *p = dlsym(lib, sym);
    if (!p) fail_msg("%s not found in TS_GGML_BASE_LIB", sym);
    return p;
}

static bool same_floats(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (bits_of_f32(a[i]) != bits_of_f32(b[i]) && !(isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

/* Older ggml leaves stale quants in an IQ4_NL block whose scale is zero (newer ggml, and we, write
 * zeros): accept a difference only there. */
static bool iq4_nl_blocks_match(const uint8_t *a, const uint8_t *b, size_t bytes) {
    for (size_t k = 0; k < bytes; k += 18)
        if (memcmp(a + k, b + k, 18) && !(a[k] == 0 && a[k + 1] == 0 && b[k] == 0 && b[k + 1] == 0))
            return false;
    return true;
}

static void test_against_ggml(void **state) {
    (void)state;
    const char *path = getenv("TS_GGML_BASE_LIB");
    if (!path || !*path) skip();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail_msg("cannot load %s: %s", path, dlerror());
    static const char *names[] = {"q4_0", "q4_1", "q5_0",   "q5_1",   "q8_0",  "q2_K",  "q3_K", "q4_K",
                                  "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4", "nvfp4", "q1_0", "q2_0"};
    enum { N = 2560 };
    static float x[N], a[N], b[N];
    static uint8_t qa[N * 2], qb[N * 2];
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        const uint32_t id = (uint32_t)ts_type_from_name(names[t]);
        ggml_quant_fn gq = (ggml_quant_fn)ggml_sym(lib, "quantize_row_%s_ref", names[t]);
        ggml_dequant_fn gd = (ggml_dequant_fn)ggml_sym(lib, "dequantize_row_%s", names[t]);
        const size_t bytes = ts_row_size(id, N);
        for (int rep = 0; rep < 40; rep++) {
            seed(900 + 50 * t + rep);
            const float scale = powf(10.0f, (float)(rep % 9) - 4.0f);
            for (int i = 0; i < N; i++)
                x[i] = gaussian() * scale * (rep % 4 == 1 && i % 7 == 0 ? 20.0f : 1.0f) +
                       (rep % 5 == 2 ? scale : 0);
            if (rep % 6 == 3)
                for (int i = 0; i < N; i += 96) memset(x + i, 0, 32 * sizeof(float)); /* zero blocks */
            gq(x, qa, N);
            quant_ok(id, x, qb, N);
            const bool ok =
                id == TS_TYPE_IQ4_NL ? iq4_nl_blocks_match(qa, qb, bytes) : memcmp(qa, qb, bytes) == 0;
            if (!ok) fail_msg("%s: quantized bytes differ from ggml (rep %d)", names[t], rep);
            for (size_t k = 0; k < bytes; k++) qa[k] = (uint8_t)next_u64(); /* any bytes at all */
            gd(qa, a, N);
            dequant_ok(id, qa, b, N);
            if (!same_floats(a, b, N))
                fail_msg("%s: dequantized random bytes differ from ggml (rep %d)", names[t], rep);
        }
    }
    /* IQ3_XXS / IQ3_S / IQ2_S reference quantization (ggml builds its lattice tables first). Rows
     * with an all-zero 32-element sub-block are left out for IQ3_S: there ggml misplaces the later
     * sub-blocks' bytes and we do not (src/quant/quantize_lattice.c); test_iq checks such rows. The
     * golden row is compared too, so kGolden's digests are ggml's. */
    void (*iq3_init)(int) = (void (*)(int))ggml_sym(lib, "%s", "iq3xs_init_impl");
    void (*iq2_init)(int) = (void (*)(int))ggml_sym(lib, "%s", "iq2xs_init_impl");
    iq3_init(256);
    iq3_init(512);
    iq2_init(TS_TYPE_IQ2_S);
    static float xg[GOLDEN_N];
    static uint8_t ga[GOLDEN_N], gb[GOLDEN_N];
    golden_row(xg);
    static const char *iq3_names[] = {"iq3_xxs", "iq3_s", "iq2_s"};
    for (size_t t = 0; t < 3; t++) {
        const uint32_t id = (uint32_t)ts_type_from_name(iq3_names[t]);
        ggml_quant_fn gq = (ggml_quant_fn)ggml_sym(lib, "quantize_row_%s_ref", iq3_names[t]);
        for (int rep = 0; rep < 30; rep++) {
            seed(700 + 50 * t + rep);
            const float scale = powf(10.0f, (float)(rep % 9) - 4.0f);
            for (int i = 0; i < N; i++)
                x[i] = gaussian() * scale * (rep % 4 == 1 && i % 7 == 0 ? 20.0f : 1.0f) +
                       (rep % 5 == 2 ? scale : 0);
            if (rep % 6 == 3 && id != TS_TYPE_IQ3_S)
                for (int i = 0; i < N; i += 96) memset(x + i, 0, 32 * sizeof(float));
            gq(x, qa, N);
            quant_ok(id, x, qb, N);
            if (memcmp(qa, qb, ts_row_size(id, N)) != 0)
                fail_msg("%s: quantized bytes differ from ggml (rep %d)", iq3_names[t], rep);
        }
        gq(xg, ga, GOLDEN_N);
        quant_ok(id, xg, gb, GOLDEN_N);
        if (memcmp(ga, gb, ts_row_size(id, GOLDEN_N)) != 0)
            fail_msg("%s: golden row differs from ggml", iq3_names[t]);
    }
    /* IQ1_M without weights: ggml has no quantize_row_iq1_m_ref; quantize_iq1_m with NULL weights is
     * what ggml_quantize_chunk runs (after building the IQ1 lattice). */
    typedef size_t (*ggml_quant_rows_fn)(const float *, void *, int64_t, int64_t, const float *);
    ggml_quant_rows_fn q1m = (ggml_quant_rows_fn)ggml_sym(lib, "%s", "quantize_iq1_m");
    iq2_init(TS_TYPE_IQ1_M);
    for (int rep = 0; rep < 30; rep++) {
        seed(600 + rep);
        const float scale = powf(10.0f, (float)(rep % 9) - 4.0f);
        for (int i = 0; i < N; i++) x[i] = gaussian() * scale + (rep % 5 == 2 ? scale : 0);
        q1m(x, qa, 1, N, NULL);
        quant_ok(TS_TYPE_IQ1_M, x, qb, N);
        if (memcmp(qa, qb, ts_row_size(TS_TYPE_IQ1_M, N)) != 0)
            fail_msg("iq1_m: quantized bytes differ from ggml (rep %d)", rep);
    }
    q1m(xg, ga, 1, GOLDEN_N, NULL);
    quant_ok(TS_TYPE_IQ1_M, xg, gb, GOLDEN_N);
    if (memcmp(ga, gb, ts_row_size(TS_TYPE_IQ1_M, GOLDEN_N)) != 0)
        fail_msg("iq1_m: golden row differs from ggml");
    /* the lattice i-quants (dequantization only here; tests/unit/test_iq.c holds ggml fixtures) */
    static const char *iq_names[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"};
    for (size_t t = 0; t < sizeof iq_names / sizeof iq_names[0]; t++) {
        const uint32_t id = (uint32_t)ts_type_from_name(iq_names[t]);
        ggml_dequant_fn gd = (ggml_dequant_fn)ggml_sym(lib, "dequantize_row_%s", iq_names[t]);
        for (int rep = 0; rep < 40; rep++) {
            for (size_t k = 0; k < ts_row_size(id, N); k++) qa[k] = (uint8_t)next_u64();
            gd(qa, a, N);
            dequant_ok(id, qa, b, N);
            if (!same_floats(a, b, N))
                fail_msg("%s: dequantized random bytes differ from ggml (rep %d)", iq_names[t], rep);
        }
    }
    ggml_dequant_fn gd8k = (ggml_dequant_fn)ggml_sym(lib, "dequantize_row_%s", "q8_K");
    for (size_t k = 0; k < ts_row_size(TS_TYPE_Q8_K, N); k++) qa[k] = (uint8_t)next_u64();
    gd8k(qa, a, N);
    dequant_ok(TS_TYPE_Q8_K, qa, b, N);
    assert_true(same_floats(a, b, N));

    float (*g_h2f)(uint16_t) = (float (*)(uint16_t))ggml_sym(lib, "%s", "ggml_fp16_to_fp32");
    void (*g_f2h)(const float *, uint16_t *, int64_t) =
        (void (*)(const float *, uint16_t *, int64_t))ggml_sym(lib, "%s", "ggml_fp32_to_fp16_row");
    void (*g_f2b)(const float *, uint16_t *, int64_t) =
        (void (*)(const float *, uint16_t *, int64_t))ggml_sym(lib, "%s", "ggml_fp32_to_bf16_row_ref");
    for (uint32_t h = 0; h < 65536; h++) {
        const float u = g_h2f((uint16_t)h), v = ts_fp16_to_fp32((uint16_t)h);
        if (bits_of_f32(u) != bits_of_f32(v))
            fail_msg("fp16 %04x: ggml %08x, ours %08x", h, bits_of_f32(u), bits_of_f32(v));
    }
    for (int r = 0; r < 2000000; r++) {
        uint32_t bits = (uint32_t)next_u64();
        if (r % 2) bits = (bits & 0x807fffffu) | (uint32_t)(96 + r % 40) << 23; /* near the fp16 range */
        const float f = f32_of_bits(bits);
        uint16_t g;
        g_f2h(&f, &g, 1);
        if (g != ts_fp32_to_fp16(f))
            fail_msg("fp32 %08x -> fp16: ggml %04x, ours %04x", bits, g, ts_fp32_to_fp16(f));
        g_f2b(&f, &g, 1);
        if (g != ts_fp32_to_bf16(f))
            fail_msg("fp32 %08x -> bf16: ggml %04x, ours %04x", bits, g, ts_fp32_to_bf16(f));
    }
    dlclose(lib);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_plain),
        cmocka_unit_test(test_dequant_q8_0),
        cmocka_unit_test(test_dequant_q4_0),
        cmocka_unit_test(test_dequant_q4_1),
        cmocka_unit_test(test_dequant_q5),
        cmocka_unit_test(test_dequant_q2_K),
        cmocka_unit_test(test_dequant_q3_K),
        cmocka_unit_test(test_dequant_q4_K),
        cmocka_unit_test(test_dequant_q5_K),
        cmocka_unit_test(test_dequant_q6_K),
        cmocka_unit_test(test_dequant_q8_K),
        cmocka_unit_test(test_dequant_iq4_nl),
        cmocka_unit_test(test_dequant_iq4_xs),
        cmocka_unit_test(test_dequant_mxfp4),
        cmocka_unit_test(test_dequant_nvfp4),
        cmocka_unit_test(test_dequant_q1_0_q2_0),
        cmocka_unit_test(test_error_bounds),
        cmocka_unit_test(test_error_per_element),
        cmocka_unit_test(test_error_per_block_scale),
        cmocka_unit_test(test_round_trip_32_blocks),
        cmocka_unit_test(test_round_trip_k_quants),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_golden_digests),
        cmocka_unit_test(test_quant_bytes_by_hand),
        cmocka_unit_test(test_against_ggml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
