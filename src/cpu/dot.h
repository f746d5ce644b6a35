/* Fused dot-product kernels of quantized weight rows with fp32 activations (the inner loop of
 * ts_cpu_matmul).
 *
 * A kernel takes nr consecutive weight rows of any ggml type and T fp32 input vectors and writes
 *     y[t·ldy + r] = Σ_i W_r[i] · x[t·ldx + i]      r < nr, t < T, i < n
 * decoding each block straight into registers (no fp32 row buffer). The decoded weights are
 * bit-identical to ts_dequantize_row (same float operations in the same order, no FMA in the
 * decode); only the summation differs: fp32 lane-parallel partial sums with FMA. Activations are
 * never quantized. The error of one dot product is a few fp32 ulps of Σ|w·x| (tests/unit/test_dot.c
 * bounds it by 1e-6 · Σ|w·x| and measures far less).
 *
 * Determinism: on one path, y[t, r] depends only on (T, n, the path, and r's position modulo 4 in
 * the rows of the call and whether r is among the last nr % 4): ts_cpu_matmul cuts its rows for
 * threads at multiples of 4, so its results are bit-identical for any thread count and timing. A
 * different T (another chunking of the same tokens) may round differently.
 *
 * Paths, picked once at run time from the CPU (__builtin_cpu_supports), so the build needs no
 * -march flag and the binary runs on any x86-64:
 *   avx512  AVX-512 F/BW/VL/DQ + FMA + F16C: register tiles of one row × up to four tokens, four
 *           rows × four tokens for blocks of 8 tokens or more (prefill)
 *   avx2    AVX2 + FMA + F16C: one row × up to four tokens
 *   scalar  portable C: the reference dequantizer on 256-element pieces + an 8-lane fp32 dot
 * Fused SIMD kernels exist for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and
 * IQ4_NL (the tier-1 types, plus Q4_1) and for the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (grid gathers, src/cpu/dot_iq.h); every other dequantizable type
 * uses the scalar kernel on every path. The environment variable TS_DOT=scalar|avx2|avx512 overrides the automatic choice
 * (a path the CPU lacks is ignored). */
#ifndef TS_CPU_DOT_H
#define TS_CPU_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* w: first row; rb: bytes between rows; n: elements per row (a multiple of the type's block). */
typedef void (*ts_dot_kernel)(const uint8_t *w, size_t rb, int64_t nr, int64_t n, const float *x, int64_t ldx,
                              int64_t T, float *y, int64_t ldy);

typedef enum ts_dot_path {
    TS_DOT_AUTO = -1, /* for ts_cpu_dot_force: the best path this CPU has (or TS_DOT's) */
    TS_DOT_SCALAR = 0,
    TS_DOT_AVX2 = 1,
    TS_DOT_AVX512 = 2,
    TS_DOT_PATH_COUNT = 3,
} ts_dot_path;

/* Whether a path is compiled in and this CPU (and OS) can run it. Scalar always can. */
bool ts_cpu_dot_supported(ts_dot_path p);

/* Select the path every later ts_cpu_matmul uses: 0, or -1 (path unchanged) when the CPU cannot
 * run it. TS_DOT_AUTO re-runs the automatic choice, reading TS_DOT again. Not thread-safe against
 * matmuls running at the same time (meant for start-up, tests and benchmarks). */
int ts_cpu_dot_force(ts_dot_path p);

/* The path in use (chosen automatically on first use). */
ts_dot_path ts_cpu_dot_path(void);

/* "scalar", "avx2", "avx512"; "auto" for TS_DOT_AUTO; "?" otherwise. */
const char *ts_cpu_dot_path_name(ts_dot_path p);

/* The kernel for a type on the path in use / on path p (which must be supported); NULL when the
 * type cannot be dequantized at all. */
ts_dot_kernel ts_cpu_dot_kernel(uint32_t type);
ts_dot_kernel ts_cpu_dot_kernel_for(ts_dot_path p, uint32_t type);

/* Whether path p has a fused SIMD kernel for the type (false: the scalar kernel stands in). */
bool ts_cpu_dot_fused(ts_dot_path p, uint32_t type);

#endif
