/* Tests for src/cpu/dot.c (fused quantized dot kernels) and ts_cpu_matmul.
 *
 * Reference: each weight row quantized with ts_quantize_row, dequantized with ts_dequantize_row
 * (the scalar oracle, byte-exact with ggml) and dotted with x in double precision.
 *
 * (a) Every tier-1 type (F32, F16, BF16, Q8_0, Q4_K, Q6_K, Q5_K, Q5_0, Q5_1, Q4_0, IQ4_NL; and
 *     Q4_1 and the lattice i-quants, on rows of random valid blocks) on every dispatch path this CPU has (each forced in turn), rows of 32·k and 256·k
 *     elements (32, 160, 320, 640, 2560 / 256, 512, 2560; plain types also 1, 12, 45, 100), 7 rows
 *     (4-, 2- and 1-row tiles) and T = 1, 3, 8, 13:
 *         |y − ref| ≤ 1e-6 · Σ|w·x|         (DOT_REL_BOUND)
 *     Weights are Gaussian with a per-row scale and, on some rows, an offset (exercises the
 *     K-quant mins); the worst measured ratio per path is printed.
 * (b) Decode exactness: with one-hot inputs (x = identity, T = n) every kernel must return each
 *     dequantized weight bit for bit: the SIMD decoders reproduce the reference's float ops.
 * (c) ts_cpu_matmul on a tensor (row0 offset, sizes above the threading threshold) on each path;
 *     700 products back to back, part of them from two caller threads at once (thread pool);
 *     ts_cpu_matmul bit-identical to one kernel call over all rows (independent of threads/timing).
 * (d) Dispatch: the scalar fallback is chosen with TS_DOT=scalar (SIMD disabled) and is correct;
 *     unsupported paths are refused; the automatic choice is the best supported path; every SIMD
 *     path has a fused kernel for every tier-1 type and the i-quants; the other types run the scalar
 *     kernel on every path within the same bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/dot.h"
#include "quant/quant.h"

#define DOT_REL_BOUND 1e-6

static const uint32_t k_types[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_BF16, TS_TYPE_Q8_0, TS_TYPE_Q4_K,
                                   TS_TYPE_Q6_K, TS_TYPE_Q5_K, TS_TYPE_Q5_0, TS_TYPE_Q5_1, TS_TYPE_Q4_0,
                                   TS_TYPE_IQ4_NL, TS_TYPE_Q4_1,
                                   /* the lattice i-quants (rows of random valid blocks) */
                                   TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S, TS_TYPE_IQ3_XXS,
                                   TS_TYPE_IQ3_S, TS_TYPE_IQ1_S, TS_TYPE_IQ1_M};
enum { N_TYPES = sizeof k_types / sizeof k_types[0] };

/* ---------------------------------------------------------------- helpers */

static _Thread_local uint64_t g_rng; /* per thread: the stress test draws from two threads */

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

/* nr quantized rows of n elements, and their dequantized values (the oracle's weights). */
typedef struct {
    uint32_t type;
    int64_t n, nr;
    size_t rb;
    uint8_t *q;
    float *w;
} rows;

/* Random bytes make valid i-quant blocks (every index is in its grid); only the fp16 super-scale is
 * set, to ±2^-9 .. 2^-2, so that sums stay finite: bytes 0-1, or for IQ1_M the top nibbles of its
 * four scale words (bytes 49, 51, 53, 55). */
static bool random_blocks(uint32_t type, uint8_t *q, size_t bytes) {
    const ts_type_traits *tt = ts_type_get(type);
    if (type == TS_TYPE_IQ1_S || type == TS_TYPE_IQ1_M || type == TS_TYPE_IQ2_XXS || type == TS_TYPE_IQ2_XS ||
        type == TS_TYPE_IQ2_S || type == TS_TYPE_IQ3_XXS || type == TS_TYPE_IQ3_S) {
        for (size_t k = 0; k < bytes; k++) q[k] = (uint8_t)next_u64();
        for (size_t b = 0; b < bytes; b += tt->type_size) {
            const uint16_t d =
                (uint16_t)((next_u64() & 0x8000) | (6 + next_u64() % 8) << 10 | (next_u64() & 0x3ff));
            if (type != TS_TYPE_IQ1_M)
                q[b] = (uint8_t)d, q[b + 1] = (uint8_t)(d >> 8);
            else
                for (int w = 0; w < 4; w++)
                    q[b + 49 + 2 * w] = (uint8_t)((q[b + 49 + 2 * w] & 0x0f) | ((d >> (4 * w)) & 0xf) << 4);
        }
        return true;
    }
    return false;
}

/* Rows of types we can quantize come from Gaussian data; i-quant rows are random blocks. */
static rows make_rows(uint32_t type, int64_t n, int64_t nr, uint64_t s) {
    rows R = {.type = type, .n = n, .nr = nr, .rb = ts_row_size(type, n)};
    assert_true(R.rb > 0);
    R.q = malloc(R.rb * (size_t)nr);
    R.w = malloc(sizeof(float) * (size_t)(n * nr));
    float *src = malloc(sizeof(float) * (size_t)n);
    assert_non_null(R.q);
    assert_non_null(R.w);
    assert_non_null(src);
    seed(s);
    if (random_blocks(type, R.q, R.rb * (size_t)nr)) {
        char err[256];
        assert_int_equal(ts_dequantize_row(type, R.q, R.w, n * nr, err, sizeof err), 0);
        free(src);
        return R;
    }
    for (int64_t r = 0; r < nr; r++) {
        const float scale = (float)pow(2.0, (double)(r % 7) - 3), offset = r % 3 == 1 ? 1.5f * scale : 0;
        for (int64_t i = 0; i < n; i++) src[i] = scale * gaussian() + offset;
        char err[256];
        assert_int_equal(ts_quantize_row(type, src, R.q + (size_t)r * R.rb, n, err, sizeof err), 0);
        assert_int_equal(ts_dequantize_row(type, R.q + (size_t)r * R.rb, R.w + r * n, n, err, sizeof err), 0);
    }
    free(src);
    return R;
}

static void free_rows(rows *R) {
    free(R->q);
    free(R->w);
}

static float *make_x(int64_t T, int64_t n, uint64_t s) {
    float *x = malloc(sizeof(float) * (size_t)(T * n));
    assert_non_null(x);
    seed(s);
    for (int64_t i = 0; i < T * n; i++) x[i] = gaussian();
    return x;
}

/* Worst |y − ref| / Σ|w·x| over rows and tokens; y is T × ldy (row r at column r). */
static double worst_rel(const rows *R, const float *x, int64_t T, const float *y, int64_t ldy) {
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < R->nr; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < R->n; i++) {
                const double p = (double)R->w[r * R->n + i] * x[t * R->n + i];
                ref += p;
                mag += fabs(p);
            }
            const double yv = y[t * ldy + r];
            if (!isfinite(yv)) return INFINITY;
            const double rel = mag > 0 ? fabs(yv - ref) / mag : fabs(yv - ref);
            if (rel > worst) worst = rel;
        }
    return worst;
}

static bool is_plain(uint32_t t) {
    return t == TS_TYPE_F32 || t == TS_TYPE_F16 || t == TS_TYPE_BF16;
}

/* ---------------------------------------------------------------- (a) accuracy */

static void test_kernels_match_reference(void **state) {
    (void)state;
    static const int64_t n32[] = {32, 160, 320, 640, 2560}, n256[] = {256, 512, 2560};
    static const int64_t n_plain[] = {1, 12, 45, 100, 160, 320, 640, 2560};
    static const int64_t Ts[] = {1, 3, 8, 13};
    const int64_t nr = 7; /* AVX-512 prefill tiles: 4 + 2 + 1 rows */
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
        if (!ts_cpu_dot_supported((ts_dot_path)p)) {
            printf("  path %-6s: not supported on this CPU, skipped\n", ts_cpu_dot_path_name((ts_dot_path)p));
            continue;
        }
        double path_worst = 0;
        for (int ti = 0; ti < N_TYPES; ti++) {
            const uint32_t type = k_types[ti];
            const int64_t qk = ts_type_get(type)->block_size;
            const int64_t *ns = is_plain(type) ? n_plain : qk == 256 ? n256 : n32;
            const int nn = is_plain(type) ? 8 : qk == 256 ? 3 : 5;
            const ts_dot_kernel k = ts_cpu_dot_kernel_for((ts_dot_path)p, type);
            assert_non_null(k);
            double type_worst = 0;
            for (int ni = 0; ni < nn; ni++) {
                const int64_t n = ns[ni];
                rows R = make_rows(type, n, nr, 1000 + 17 * ti + n);
                for (int tj = 0; tj < 4; tj++) {
                    const int64_t T = Ts[tj];
                    float *x = make_x(T, n, 7 * T + n);
                    const int64_t ldy = nr + 2; /* a wider output row than nr */
                    float *y = malloc(sizeof(float) * (size_t)(T * ldy));
                    assert_non_null(y);
                    for (int64_t i = 0; i < T * ldy; i++) y[i] = -12345.0f;
                    k(R.q, R.rb, nr, n, x, n, T, y, ldy);
                    for (int64_t t = 0; t < T; t++) /* columns past nr untouched */
                        for (int64_t c = nr; c < ldy; c++) assert_true(y[t * ldy + c] == -12345.0f);
                    const double rel = worst_rel(&R, x, T, y, ldy);
                    if (rel > DOT_REL_BOUND)
                        fail_msg("path %s type %s n %lld T %lld: relative error %.3g > %.1g",
                                 ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(type), (long long)n,
                                 (long long)T, rel, DOT_REL_BOUND);
                    if (rel > type_worst) type_worst = rel;
                    free(x);
                    free(y);
                }
                free_rows(&R);
            }
            printf("  path %-6s %-7s (%s): worst |y-ref|/sum|w*x| = %.2e\n",
                   ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(type),
                   ts_cpu_dot_fused((ts_dot_path)p, type) ? "fused" : "scalar", type_worst);
            if (type_worst > path_worst) path_worst = type_worst;
        }
        printf("  path %-6s: worst over all types %.2e (bound %.0e)\n", ts_cpu_dot_path_name((ts_dot_path)p),
               path_worst, DOT_REL_BOUND);
    }
}

/* ---------------------------------------------------------------- (b) exact decode */

static void test_one_hot_is_exact(void **state) {
    (void)state;
    const int64_t nr = 7;
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
        if (!ts_cpu_dot_supported((ts_dot_path)p)) continue;
        for (int ti = 0; ti < N_TYPES; ti++) {
            const uint32_t type = k_types[ti];
            const int64_t n = ts_type_get(type)->block_size == 256 ? 512 : is_plain(type) ? 100 : 320;
            rows R = make_rows(type, n, nr, 99 + ti);
            float *x = calloc((size_t)(n * n), sizeof(float));
            float *y = malloc(sizeof(float) * (size_t)(n * nr));
            assert_non_null(x);
            assert_non_null(y);
            for (int64_t i = 0; i < n; i++) x[i * n + i] = 1.0f; /* token i selects element i */
            ts_cpu_dot_kernel_for((ts_dot_path)p, type)(R.q, R.rb, nr, n, x, n, n, y, nr);
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < nr; r++)
                    if (y[i * nr + r] != R.w[r * n + i])
                        fail_msg("path %s type %s row %lld element %lld: %.9g, reference %.9g",
                                 ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(type), (long long)r,
                                 (long long)i, y[i * nr + r], R.w[r * n + i]);
            free(x);
            free(y);
            free_rows(&R);
        }
    }
}

/* ---------------------------------------------------------------- (c) ts_cpu_matmul */

/* ts_cpu_matmul of rows [row0, row0 + n_out) of a tensor holding all of R's rows. */
static double matmul_worst(const rows *R, int64_t row0, int64_t n_out, int64_t T, uint64_t s) {
    ts_gguf_tensor W;
    memset(&W, 0, sizeof W);
    W.n_dims = 2;
    W.ne[0] = R->n, W.ne[1] = R->nr, W.ne[2] = W.ne[3] = 1;
    W.type = R->type;
    W.nelements = R->n * R->nr;
    W.nbytes = R->rb * (size_t)R->nr;
    W.data = R->q;
    float *x = make_x(T, R->n, s);
    float *y = malloc(sizeof(float) * (size_t)(T * n_out));
    assert_non_null(y);
    ts_cpu_matmul(&W, row0, n_out, x, T, y);
    rows sub = *R; /* the selected rows as a rows view */
    sub.nr = n_out;
    sub.w = R->w + row0 * R->n;
    const double rel = worst_rel(&sub, x, T, y, n_out);
    free(x);
    free(y);
    return rel;
}

static void test_matmul_every_path(void **state) {
    (void)state;
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
        if (!ts_cpu_dot_supported((ts_dot_path)p)) continue;
        assert_int_equal(ts_cpu_dot_force((ts_dot_path)p), 0);
        assert_int_equal(ts_cpu_dot_path(), p);
        for (int ti = 0; ti < N_TYPES; ti++) {
            const uint32_t type = k_types[ti];
            const int64_t n = ts_type_get(type)->block_size == 256 ? 1024 : 640;
            rows R = make_rows(type, n, 203, 5 + ti);
            /* small (one thread) and large (threaded, odd row count and offset) products */
            double rel = matmul_worst(&R, 0, 4, 1, 11);
            const double rel2 = matmul_worst(&R, 3, 199, 3, 12);
            const double rel3 = matmul_worst(&R, 1, 202, 1, 13);
            rel = fmax(rel, fmax(rel2, rel3));
            if (rel > DOT_REL_BOUND)
                fail_msg("ts_cpu_matmul on path %s type %s: relative error %.3g",
                         ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(type), rel);
            free_rows(&R);
        }
    }
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
}

/* Many products back to back (the thread pool's job hand-over), from two caller threads at once
 * (one gets the pool, the other runs alone), every result checked. */
typedef struct {
    const rows *R;
    int iters;
    double worst;
} stress_arg;

static void *stress_run(void *p) {
    stress_arg *a = p;
    for (int i = 0; i < a->iters; i++) {
        const int64_t T = 1 + i % 3, row0 = i % 5, n_out = a->R->nr - row0 - (i % 7);
        a->worst = fmax(a->worst, matmul_worst(a->R, row0, n_out, T, 1000 + i));
    }
    return NULL;
}

static void test_matmul_threads_stress(void **state) {
    (void)state;
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
    rows R = make_rows(TS_TYPE_Q8_0, 512, 300, 4242);
    stress_arg one = {&R, 400, 0};
    stress_run(&one);
    stress_arg a = {&R, 150, 0}, b = {&R, 150, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stress_run, &a), 0);
    stress_run(&b);
    assert_int_equal(pthread_join(th, NULL), 0);
    const double worst = fmax(one.worst, fmax(a.worst, b.worst));
    printf("  %d products, worst relative error %.2e\n", one.iters + a.iters + b.iters, worst);
    assert_true(worst <= DOT_REL_BOUND);
    free_rows(&R);
}

/* ts_cpu_matmul (rows split over threads) equals one kernel call over all rows bit for bit, every
 * time: results do not depend on the thread count or on timing. Whether the pool actually splits a
 * given product depends on timing (workers asleep or starved run it on the caller), so the split
 * itself is checked on the kernel: pieces of 4k rows give exactly one call's results. */
static void test_matmul_deterministic(void **state) {
    (void)state;
    static const uint32_t types[] = {TS_TYPE_Q8_0, TS_TYPE_Q4_K, TS_TYPE_F16};
    static const int64_t Ts[] = {1, 13, 64, 600}; /* 600 × 512: a row is more than a chunk's work */
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
        if (!ts_cpu_dot_supported((ts_dot_path)p)) continue;
        assert_int_equal(ts_cpu_dot_force((ts_dot_path)p), 0);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            rows R = make_rows(types[ti], 512, 203, 90 + ti);
            ts_gguf_tensor W;
            memset(&W, 0, sizeof W);
            W.n_dims = 2, W.ne[0] = R.n, W.ne[1] = R.nr, W.ne[2] = W.ne[3] = 1, W.type = R.type;
            W.nelements = R.n * R.nr, W.nbytes = R.rb * (size_t)R.nr, W.data = R.q;
            for (int tj = 0; tj < 8; tj++) { /* all rows but a few, then 45 rows (chunks of 6 or 10 rows) */
                const int64_t T = Ts[tj % 4], row0 = 1 + tj, n_out = tj < 4 ? R.nr - row0 - tj : 45;
                float *x = make_x(T, R.n, 55 + tj);
                float *want = malloc(sizeof(float) * (size_t)(T * n_out)),
                      *got = malloc(sizeof(float) * (size_t)(T * n_out));
                assert_non_null(want);
                assert_non_null(got);
                ts_cpu_dot_kernel(R.type)(R.q + (size_t)row0 * R.rb, R.rb, n_out, R.n, x, R.n, T, want,
                                          n_out);
                /* the invariant ts_cpu_matmul's thread split relies on: the kernel over consecutive
                 * pieces of a multiple of 4 rows gives the rows exactly what one call gives them */
                for (int64_t piece = 4; piece <= 16; piece += 4) {
                    for (int64_t o = 0; o < n_out; o += piece)
                        ts_cpu_dot_kernel(R.type)(R.q + (size_t)(row0 + o) * R.rb, R.rb,
                                                  n_out - o < piece ? n_out - o : piece, R.n, x, R.n, T,
                                                  got + o, n_out);
                    if (memcmp(got, want, sizeof(float) * (size_t)(T * n_out)) != 0)
                        fail_msg("path %s type %s T %lld: pieces of %lld rows differ from one kernel call",
                                 ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(R.type), (long long)T,
                                 (long long)piece);
                }
                for (int rep = 0; rep < 10; rep++) {
                    ts_cpu_matmul(&W, row0, n_out, x, T, got);
                    if (memcmp(got, want, sizeof(float) * (size_t)(T * n_out)) != 0)
                        fail_msg("path %s type %s T %lld: ts_cpu_matmul differs from one kernel call",
                                 ts_cpu_dot_path_name((ts_dot_path)p), ts_type_name(R.type), (long long)T);
                }
                free(x), free(want), free(got);
            }
            free_rows(&R);
        }
    }
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
}

/* The mixes store routers as BF16 when their values are bf16 numbers (convert/mix.h), on the promise that
 * their products are then those of the F32 rows: on every path, bit for bit, at every T. */
static void test_bf16_rows_sum_as_f32(void **state) {
    (void)state;
    static const int64_t Ts[] = {1, 2, 3, 4, 9, 13};
    rows R = make_rows(TS_TYPE_BF16, 640, 11, 404);
    float *want = malloc(sizeof(float) * 13 * 11), *got = malloc(sizeof(float) * 13 * 11);
    assert_non_null(want);
    assert_non_null(got);
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
        if (!ts_cpu_dot_supported((ts_dot_path)p)) continue;
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            const int64_t T = Ts[ti];
            float *x = make_x(T, R.n, 70 + ti);
            ts_cpu_dot_kernel_for((ts_dot_path)p, TS_TYPE_F32)(
                (const uint8_t *)R.w, sizeof(float) * (size_t)R.n, R.nr, R.n, x, R.n, T, want, R.nr);
            ts_cpu_dot_kernel_for((ts_dot_path)p, TS_TYPE_BF16)(R.q, R.rb, R.nr, R.n, x, R.n, T, got, R.nr);
            if (memcmp(got, want, sizeof(float) * (size_t)(T * R.nr)) != 0)
                fail_msg("path %s T %lld: BF16 rows sum otherwise than the same values as F32 rows",
                         ts_cpu_dot_path_name((ts_dot_path)p), (long long)T);
            free(x);
        }
    }
    free(want), free(got);
    free_rows(&R);
}

/* ---------------------------------------------------------------- (d) dispatch */

static void test_scalar_fallback_when_simd_disabled(void **state) {
    (void)state;
    assert_int_equal(setenv("TS_DOT", "scalar", 1), 0);
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
    assert_int_equal(ts_cpu_dot_path(), TS_DOT_SCALAR);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = k_types[ti];
        assert_false(ts_cpu_dot_fused(TS_DOT_SCALAR, type));
        assert_true(ts_cpu_dot_kernel(type) == ts_cpu_dot_kernel_for(TS_DOT_SCALAR, type));
        const int64_t n = ts_type_get(type)->block_size == 256 ? 768 : 352;
        rows R = make_rows(type, n, 130, 77 + ti);
        const double rel = fmax(matmul_worst(&R, 0, 130, 2, 3), matmul_worst(&R, 5, 7, 1, 4));
        if (rel > DOT_REL_BOUND)
            fail_msg("scalar fallback type %s: relative error %.3g", ts_type_name(type), rel);
        free_rows(&R);
    }
    /* the other dequantizable types run the scalar kernel on every path */
    static const uint32_t others[] = {TS_TYPE_Q2_K,  TS_TYPE_Q3_K, TS_TYPE_IQ4_XS, TS_TYPE_MXFP4,
                                      TS_TYPE_NVFP4, TS_TYPE_Q1_0, TS_TYPE_Q2_0};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        assert_true(ts_can_dequantize(others[i]));
        rows R = make_rows(others[i], 512, 9, 31 + i);
        for (int p = 0; p < TS_DOT_PATH_COUNT; p++) {
            if (!ts_cpu_dot_supported((ts_dot_path)p)) continue;
            assert_false(ts_cpu_dot_fused((ts_dot_path)p, others[i]));
            assert_int_equal(ts_cpu_dot_force((ts_dot_path)p), 0);
            const double rel = matmul_worst(&R, 1, 8, 3, 5);
            if (rel > DOT_REL_BOUND) fail_msg("type %s: relative error %.3g", ts_type_name(others[i]), rel);
        }
        free_rows(&R);
    }
    assert_null(ts_cpu_dot_kernel_for(TS_DOT_SCALAR, 4)); /* a removed type id */
    assert_null(ts_cpu_dot_kernel_for(TS_DOT_SCALAR, TS_TYPE_COUNT));
    assert_int_equal(unsetenv("TS_DOT"), 0);
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
}

static void test_dispatch(void **state) {
    (void)state;
    assert_true(ts_cpu_dot_supported(TS_DOT_SCALAR));
    assert_int_equal(ts_cpu_dot_force((ts_dot_path)7), -1);
    assert_int_equal(ts_cpu_dot_force((ts_dot_path)-2), -1);
    /* AVX-512 here implies AVX2 */
    if (ts_cpu_dot_supported(TS_DOT_AVX512)) assert_true(ts_cpu_dot_supported(TS_DOT_AVX2));
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++)
        if (!ts_cpu_dot_supported((ts_dot_path)p)) {
            const ts_dot_path before = ts_cpu_dot_path();
            assert_int_equal(ts_cpu_dot_force((ts_dot_path)p), -1);
            assert_int_equal(ts_cpu_dot_path(), before);
        }
    /* automatic choice: the best supported path */
    assert_int_equal(unsetenv("TS_DOT"), 0);
    assert_int_equal(ts_cpu_dot_force(TS_DOT_AUTO), 0);
    int best = TS_DOT_SCALAR;
    for (int p = 0; p < TS_DOT_PATH_COUNT; p++)
        if (ts_cpu_dot_supported((ts_dot_path)p)) best = p;
    assert_int_equal(ts_cpu_dot_path(), best);
    printf("  automatic path on this CPU: %s\n", ts_cpu_dot_path_name(ts_cpu_dot_path()));
    /* every SIMD path has a fused kernel for every tier-1 type */
    for (int p = TS_DOT_AVX2; p < TS_DOT_PATH_COUNT; p++)
        for (int ti = 0; ti < N_TYPES && ts_cpu_dot_supported((ts_dot_path)p); ti++)
            assert_true(ts_cpu_dot_fused((ts_dot_path)p, k_types[ti]));
    assert_string_equal(ts_cpu_dot_path_name(TS_DOT_SCALAR), "scalar");
    assert_string_equal(ts_cpu_dot_path_name(TS_DOT_AVX2), "avx2");
    assert_string_equal(ts_cpu_dot_path_name(TS_DOT_AVX512), "avx512");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_kernels_match_reference),
        cmocka_unit_test(test_one_hot_is_exact),
        cmocka_unit_test(test_matmul_every_path),
        cmocka_unit_test(test_matmul_threads_stress),
        cmocka_unit_test(test_matmul_deterministic),
        cmocka_unit_test(test_bf16_rows_sum_as_f32),
        cmocka_unit_test(test_scalar_fallback_when_simd_disabled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
