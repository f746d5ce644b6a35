/* Shared by the CUDA twin and decoder tests in tests/cuda: a splitmix64 random stream
 * (one stream a row, so threads need no shared state), finite scales for random blocks, quantizing
 * any block type, and a small parallel for (quantizing tens of millions of K-quant weights takes
 * seconds on one core). */
#ifndef TS_TESTS_CUDA_TEST_UTIL_H
#define TS_TESTS_CUDA_TEST_UTIL_H

#ifdef __cplusplus
extern "C" {
#endif
#include "quant/quant.h"
#ifdef __cplusplus
}
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
typedef struct {
    uint64_t s;
} rng_t;
static inline uint64_t rng_u64(rng_t *r) {
    return mix64(r->s += 0x9E3779B97F4A7C15ull);
}
static inline double rng_unit(rng_t *r) {
    return (rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}
static inline double rng_gauss(rng_t *r) {
    double s = 0;
    for (int i = 0; i < 4; i++) s += rng_unit(r);
    return (s - 2.0) * 1.7320508;
}

/* A finite fp16 of moderate magnitude (2^-10 .. 2^2), random sign (block scales of random blocks). */
static inline uint16_t rng_scale_fp16(rng_t *r) {
    const uint16_t exp = (uint16_t)(5 + rng_u64(r) % 12);
    return (uint16_t)((rng_u64(r) & 1) << 15 | exp << 10 | (rng_u64(r) & 0x3FF));
}
static inline void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Makes the fp16 fields of a block of random bytes finite (rng_scale_fp16): d (and dmin) where the
 * type has them; IQ1_M's d is spread over the top nibbles of its four scale words (at 48). */
static inline void rng_fix_scales(rng_t *r, uint32_t type, uint8_t *b) {
    switch (type) {
    case TS_TYPE_Q4_1:
    case TS_TYPE_Q5_1:
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
        put_u16(b, rng_scale_fp16(r));
        put_u16(b + 2, rng_scale_fp16(r));
        break;
    case TS_TYPE_Q6_K:
        put_u16(b + 208, rng_scale_fp16(r));
        break;
    case TS_TYPE_Q2_K:
        put_u16(b + 80, rng_scale_fp16(r));
        put_u16(b + 82, rng_scale_fp16(r));
        break;
    case TS_TYPE_Q3_K:
        put_u16(b + 108, rng_scale_fp16(r));
        break;
    case TS_TYPE_IQ1_M: {
        const uint16_t d = rng_scale_fp16(r);
        for (int w = 0; w < 4; w++)
            b[48 + 2 * w + 1] = (uint8_t)((b[48 + 2 * w + 1] & 0x0F) | (((d >> (4 * w)) & 0xF) << 4));
        break;
    }
    default:
        put_u16(b, rng_scale_fp16(r));
        break;
    }
}

/* Sweep t of a 4-bit block (Q4_1, IQ4_XS; other types untouched), over its random bytes: element e
 * takes nibble (t + e) mod 16 and IQ4_XS's sub-block ib the 6-bit scale (8t + ib) mod 64, so 16
 * consecutive sweeps put every nibble at every element and 8 every scale in every sub-block. The
 * fp16 fields are left to the caller. */
static inline void sweep_nibble_block(uint32_t type, uint8_t *b, int t) {
    if (type == TS_TYPE_Q4_1) {
        for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(((t + j) & 15) | (((t + j + 16) & 15) << 4));
    } else if (type == TS_TYPE_IQ4_XS) {
        unsigned sh = 0;
        for (int ib = 0; ib < 8; ib++) {
            const unsigned ls = (unsigned)(8 * t + ib) & 63u;
            b[4 + ib / 2] =
                (uint8_t)((b[4 + ib / 2] & ~(0xF << (4 * (ib % 2)))) | ((ls & 15u) << (4 * (ib % 2))));
            sh |= (ls >> 4) << (2 * ib);
            for (int j = 0; j < 16; j++) {
                const int e = 32 * ib + j;
                b[8 + 16 * ib + j] = (uint8_t)(((t + e) & 15) | (((t + e + 16) & 15) << 4));
            }
        }
        put_u16(b + 2, (uint16_t)sh);
    }
}

/* ts_quantize_row, and for the types ggml quantizes only with importance weights (IQ1_S, IQ2_XXS,
 * IQ2_XS) ts_quantize_row_imatrix with equal weights (as `synth` writes them). */
static inline int quantize_row_any(uint32_t type, const float *src, void *dst, int64_t n, char *err,
                                   size_t errlen) {
    if (!ts_quantize_needs_imatrix(type)) return ts_quantize_row(type, src, dst, n, err, errlen);
    float *qw = (float *)malloc((size_t)n * sizeof *qw);
    if (!qw) {
        if (errlen) snprintf(err, errlen, "out of host memory");
        return -1;
    }
    for (int64_t i = 0; i < n; i++) qw[i] = 1.0f;
    const int rc = ts_quantize_row_imatrix(type, src, dst, n, qw, err, errlen);
    free(qw);
    return rc;
}

typedef void (*range_fn)(void *ctx, int64_t i0, int64_t i1);
typedef struct {
    range_fn fn;
    void *ctx;
    int64_t i0, i1;
} range_job;
static inline void *range_thread(void *p) {
    range_job *j = (range_job *)p;
    j->fn(j->ctx, j->i0, j->i1);
    return NULL;
}
static inline void parallel_for(int64_t n, range_fn fn, void *ctx) {
    long nth = sysconf(_SC_NPROCESSORS_ONLN);
    if (nth < 1) nth = 1;
    if (nth > 64) nth = 64;
    if (n < 64) nth = 1;
    pthread_t th[64];
    range_job jobs[64];
    for (long t = 0; t < nth; t++) {
        jobs[t] = (range_job){fn, ctx, n * t / nth, n * (t + 1) / nth};
        if (nth == 1 || pthread_create(&th[t], NULL, range_thread, &jobs[t]) != 0) {
            range_thread(&jobs[t]);
            th[t] = 0;
        }
    }
    for (long t = 0; t < nth; t++)
        if (nth > 1 && th[t]) pthread_join(th[t], NULL);
}

#endif
