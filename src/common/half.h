/* 16-bit floats: IEEE binary16 (fp16) and bfloat16 (bf16), as stored in GGUF files.
 *
 * fp16 <-> fp32 is exact IEEE: round-to-nearest-even, subnormals kept, overflow to inf. NaNs
 * follow ggml: fp16 -> fp32 keeps the payload and sets the quiet bit; fp32 -> fp16 gives the
 * canonical quiet NaN 0x7e00 with the sign kept.
 *
 * bf16 <-> fp32 matches ggml's ggml_compute_fp32_to_bf16 bit for bit: round-to-nearest-even
 * on the low 16 bits (fp32 subnormals are rounded, not flushed), overflow to inf, and a NaN is
 * truncated with its quiet bit forced. These two sit on hot paths, hence static inline. */
#ifndef TS_COMMON_HALF_H
#define TS_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

float ts_fp16_to_fp32(uint16_t h);
uint16_t ts_fp32_to_fp16(float f);

static inline float ts_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t ts_fp32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#endif
