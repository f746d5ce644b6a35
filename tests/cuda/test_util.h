/* Shared by the CUDA twin and decoder tests in tests/cuda: a splitmix64 random stream
 * (one stream a row, so threads need no shared state) and a small parallel for (quantizing tens of
 * millions of K-quant weights takes seconds on one core). */
#ifndef TS_TESTS_CUDA_TEST_UTIL_H
#define TS_TESTS_CUDA_TEST_UTIL_H

#include <pthread.h>
#include <stdint.h>
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
