/* fp16 <-> fp32 in portable integer code (no F16C), exact IEEE round-to-nearest-even.
 * Bit-identical to ggml's ggml_fp16_to_fp32 / ggml_fp32_to_fp16 for all inputs, NaNs included.
 *
 * fp32 -> fp16 works on the bit pattern: normal results round by adding half an ulp (plus the
 * tie-to-even bit) before the shift, so a carry walks into the exponent (and up to inf) by itself;
 * subnormal results are the 24-bit significand shifted right with an explicit remainder test. */
#include "common/half.h"

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float f32_from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

float ts_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f && man) return f32_from_bits(sign | 0x7fc00000u | (man << 13)); /* NaN, made quiet */
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u);
    if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    float mag = (float)man * 0x1p-24f; /* subnormal (or zero): man * 2^-24, exact in fp32 */
    return sign ? -mag : mag;
}

/* |x| < 2^-14 (the smallest normal fp16): result is a subnormal fp16 or zero. */
static uint16_t fp16_subnormal(uint32_t abs_bits) {
    uint32_t exp = abs_bits >> 23; /* biased fp32 exponent, at most 112 here */
    if (exp < 102) return 0;       /* below 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
    uint32_t sig = (abs_bits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp; /* value / 2^-24 = sig * 2^(exp - 126) */
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into 0x0400, the smallest normal */
    return (uint16_t)q;
}

uint16_t ts_fp32_to_fp16(float f) {
    uint32_t bits = f32_bits(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t a = bits & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN: ggml's canonical quiet NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf (and inf) */
    if (a < 0x38800000u) return (uint16_t)(sign | fp16_subnormal(a));
    uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13)); /* rebias 127 -> 15 */
}
