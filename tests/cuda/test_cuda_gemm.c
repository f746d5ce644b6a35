/* Twin test of the tiled GEMM (src/cuda/gemm.cu), run on the GPU machine (`ctest -L cuda`).
 *
 *   test_cuda_gemm            correctness (every type of matmul.h)
 *   test_cuda_gemm --quick    fewer types and shapes
 *   test_cuda_gemm --bench    timings at the model's shapes (Q4_K, Q6_K, Q8_0): GEMM vs the GEMV path
 *   test_cuda_gemm --wg       the warpgroup-MMA products' cases, then their times against the tensor-core GEMM
 *
 * Exactness: every output of the GEMM is ONE thread's chain acc = fmaf(w_k, x_k, acc) over k in
 * increasing order, acc starting at +0, with w_k exactly ts_dequantize_row's value. The CPU computes
 * that same chain with C's fmaf (correctly rounded, like the GPU's FFMA), so the GPU must match it BIT
 * FOR BIT ("exact"). A mismatch means an indexing or staging bug (or a different rounding): the
 * report says by how many ulps and whether the result still meets the bound below.
 * Bound (as tests/cuda/test_cuda_matmul.c): |y_gpu − y_ref| ≤ 2e-5 · Σ|w·x| against ts_cpu_matmul
 * (dense) or against the GEMV path (experts, ts_cuda_matmul_experts), which sum in other orders.
 *
 * Dense (ts_cuda_gemm): every configuration forced (0..4) and the automatic choice, on shapes that
 * leave partial row and token tiles, row0 ≠ 0, rows at all alignments, tiny n_out with long rows,
 * plain-type rows that are not a multiple of 4 (x rows unaligned) and not of 32 (K-tail); and
 * ts_cuda_matmul around the dispatch threshold (T = 15: GEMV, 16 and 17: GEMM).
 * Experts (ts_cuda_expert_plan_build + ts_cuda_gemm_experts): fused gate_up (one part) and split
 * gate / up (two parts, W2), then down on the items' own rows (x_div = 1), with tiles of 16, 32 and
 * 64 items (uniform, skewed and sparse routings), bad ids (→ NaN), and a CUDA-graph capture replayed
 * after the ids changed on the device. At the released shape (E 512, k 10, H 2560, F 640, N 512)
 * the whole MoE expert path against the GEMV path, and a sample of items exactly.
 * Split products (ts_cuda_gemm_tc_split, the hyper-connection down products): within 1e-6 of Σ|w·x|
 * against the CPU's fp32 product. */
#include "cpu/cpu.h"
#include "cuda/cuda_common.h"
#include "cuda/gemm.h"
#include "cuda/gemm_tc.h"
#include "model/memplan.h"
#include "model/synth.h"
#include "cuda/matmul.h"
#include "test_util.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REL_BOUND 2e-5

static const uint32_t k_types[] = {
    TS_TYPE_Q4_K,  TS_TYPE_Q8_0,    TS_TYPE_Q6_K,   TS_TYPE_F16,    TS_TYPE_F32,     TS_TYPE_BF16,
    TS_TYPE_Q4_0,  TS_TYPE_Q5_0,    TS_TYPE_Q5_1,   TS_TYPE_IQ4_NL, TS_TYPE_Q5_K,    TS_TYPE_Q2_K,
    TS_TYPE_Q3_K,  TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S,  TS_TYPE_IQ3_XXS, TS_TYPE_IQ3_S,
    TS_TYPE_IQ1_S, TS_TYPE_IQ1_M,   TS_TYPE_Q4_1,   TS_TYPE_IQ4_XS};
enum { N_TYPES = sizeof k_types / sizeof k_types[0] };

/* ---- weights ------------------------------------------------------------------------------------ */

/* A tensor of `rows` rows on the host (file encoding) and on the device, and its dequantization. */
typedef struct {
    uint32_t type;
    int64_t ne0, rows;
    size_t rb;
    uint8_t *data;
    float *deq; /* rows × ne0 */
    uint64_t seed;
    ts_gguf_tensor host;
    ts_cuda_tensor dev;
} wtensor;

static void fill_rows(void *ctx, int64_t i0, int64_t i1) {
    wtensor *w = ctx;
    float *src = malloc((size_t)w->ne0 * sizeof *src);
    char err[256];
    for (int64_t r = i0; r < i1; r++) {
        rng_t g = {mix64(w->seed ^ (uint64_t)r * 0x100000001B3ull)};
        const double scale = 0.05 + 2.0 * rng_unit(&g), shift = (r % 3 == 0) ? 1.5 * scale : 0.0;
        for (int64_t i = 0; i < w->ne0; i++) src[i] = (float)(scale * rng_gauss(&g) + shift);
        if (quantize_row_any(w->type, src, w->data + (size_t)r * w->rb, w->ne0, err, sizeof err) != 0 ||
            ts_dequantize_row(w->type, w->data + (size_t)r * w->rb, w->deq + (size_t)r * w->ne0, w->ne0, err,
                              sizeof err) != 0) {
            fprintf(stderr, "quantize/dequantize failed: %s\n", err);
            exit(2);
        }
    }
    free(src);
}

static void wtensor_make(wtensor *w, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, uint64_t seed) {
    memset(w, 0, sizeof *w);
    w->type = type;
    w->ne0 = ne0;
    w->rows = ne1 * ne2;
    w->rb = ts_row_size(type, ne0);
    w->seed = seed;
    w->data = malloc(w->rb * (size_t)w->rows);
    w->deq = malloc(sizeof(float) * (size_t)(w->rows * ne0));
    if (!w->data || !w->deq) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    parallel_for(w->rows, fill_rows, w);
    w->host.n_dims = ne2 > 1 ? 3 : 2;
    w->host.ne[0] = ne0;
    w->host.ne[1] = ne1;
    w->host.ne[2] = ne2;
    w->host.ne[3] = 1;
    w->host.type = type;
    w->host.nelements = ne0 * w->rows;
    w->host.nbytes = (uint64_t)w->rb * (uint64_t)w->rows;
    w->host.data = w->data;
    w->host.name.ptr = "test";
    w->host.name.len = 4;
    char err[256];
    if (ts_cuda_tensor_upload(&w->host, &w->dev, err, sizeof err) != 0) {
        fprintf(stderr, "upload failed: %s\n", err);
        exit(2);
    }
}

static void wtensor_free(wtensor *w) {
    ts_cuda_tensor_free(&w->dev);
    free(w->data);
    free(w->deq);
}

/* The exact expected output: the fmaf chain in increasing k, and Σ|w·x|. */
static float chain(const float *w, const float *x, int64_t n, double *mag) {
    float acc = 0.0f;
    double m = 0;
    for (int64_t k = 0; k < n; k++) {
        acc = fmaf(w[k], x[k], acc);
        m += fabs((double)w[k] * (double)x[k]);
    }
    if (mag) *mag = m;
    return acc;
}

static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

/* ---- checks ------------------------------------------------------------------------------------- */

typedef struct {
    int runs, fails;
} tstats;

/* y (T × n_out, stride ys) against the chain over rows row0 + o of w and x (T × ne0): exact, and
 * the bound against `other` (NULL: none). */
typedef struct {
    const wtensor *w;
    int64_t row0, n_out, T, ys;
    const float *x, *y, *other;
    int64_t inexact, out_of_bound, worst_ulps, first_bad;
    double worst_rel;
    pthread_mutex_t mu;
} dense_cmp;

static void dense_rows(void *ctx, int64_t i0, int64_t i1) {
    dense_cmp *c = ctx;
    int64_t inexact = 0, oob = 0, wu = 0, fb = -1;
    double wr = 0;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = i / c->n_out, o = i % c->n_out;
        double mag;
        const float want = chain(c->w->deq + (size_t)(c->row0 + o) * c->w->ne0, c->x + (size_t)t * c->w->ne0,
                                 c->w->ne0, &mag);
        const float got = c->y[t * c->ys + o];
        const int64_t u = ulps(got, want);
        if (!(got == want || (got != got && want != want)) || u != 0) {
            inexact++;
            if (u > wu || got != got) wu = got != got ? INT64_MAX : u;
            if (fb < 0) fb = i;
        }
        if (c->other) {
            const double rel = fabs((double)got - (double)c->other[t * c->ys + o]) / (mag > 0 ? mag : 1e-30);
            if (!(rel <= REL_BOUND)) oob++;
            if (rel > wr || rel != rel) wr = rel != rel ? INFINITY : rel;
        }
    }
    pthread_mutex_lock(&c->mu);
    c->inexact += inexact;
    c->out_of_bound += oob;
    if (wu > c->worst_ulps) c->worst_ulps = wu;
    if (wr > c->worst_rel) c->worst_rel = wr;
    if (fb >= 0 && (c->first_bad < 0 || fb < c->first_bad)) c->first_bad = fb;
    pthread_mutex_unlock(&c->mu);
}

static const char *cfg_name(int cfg) {
    static const char *names[] = {"128x128", "128x64", "64x64", "128x32", "128x16"};
    return cfg < 0 ? "auto" : names[cfg];
}

/* Dense: W rows [row0, row0 + n_out) of an ne0 × rows tensor, T tokens; configurations -1..4. */
static void dense_case(uint32_t type, int64_t ne0, int64_t rows, int64_t row0, int64_t n_out, int64_t T,
                       uint64_t seed, tstats *st) {
    wtensor w;
    wtensor_make(&w, type, ne0, rows, 1, seed);
    rng_t g = {mix64(seed * 7 + 1)};
    float *x = malloc(sizeof(float) * (size_t)(T * ne0));
    float *y = malloc(sizeof(float) * (size_t)(T * n_out));
    float *ycpu = malloc(sizeof(float) * (size_t)(T * n_out));
    for (int64_t i = 0; i < T * ne0; i++) x[i] = (float)rng_gauss(&g);
    ts_cpu_matmul(&w.host, row0, n_out, x, T, ycpu);
    float *xd, *yd;
    TS_CUDA_CHECK(cudaMalloc((void **)&xd, sizeof(float) * (size_t)(T * ne0)));
    TS_CUDA_CHECK(cudaMalloc((void **)&yd, sizeof(float) * (size_t)(T * n_out)));
    TS_CUDA_CHECK(cudaMemcpy(xd, x, sizeof(float) * (size_t)(T * ne0), cudaMemcpyHostToDevice));
    for (int cfg = -1; cfg < 5; cfg++) {
        TS_CUDA_CHECK(cudaMemset(yd, 0xFF, sizeof(float) * (size_t)(T * n_out))); /* NaN poison */
        ts_cuda_gemm_force_config(cfg);
        const int rc = ts_cuda_gemm(&w.dev, row0, n_out, xd, T, yd, 0);
        ts_cuda_gemm_force_config(-1);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        TS_CUDA_CHECK(cudaMemcpy(y, yd, sizeof(float) * (size_t)(T * n_out), cudaMemcpyDeviceToHost));
        dense_cmp c = {&w, row0, n_out, T, n_out, x, y, ycpu, 0, 0, 0, -1, 0, PTHREAD_MUTEX_INITIALIZER};
        parallel_for(T * n_out, dense_rows, &c);
        const int ok = rc == 0 && c.inexact == 0 && c.out_of_bound == 0;
        printf("  %-6s ne0 %5lld rows %5lld row0 %4lld n_out %5lld T %4lld %-7s: %s", ts_type_name(type),
               (long long)ne0, (long long)rows, (long long)row0, (long long)n_out, (long long)T,
               cfg_name(cfg), ok ? "exact" : "FAIL ");
        printf("  |gpu-cpu|/S %.2e", c.worst_rel);
        if (rc != 0) printf("  (ts_cuda_gemm returned %d)", rc);
        if (c.inexact)
            printf("  %lld outputs differ from the fmaf chain (worst %lld ulps; first t %lld o %lld)%s",
                   (long long)c.inexact, (long long)c.worst_ulps, (long long)(c.first_bad / n_out),
                   (long long)(c.first_bad % n_out), c.out_of_bound ? "" : ", all within the bound");
        if (c.out_of_bound) printf("  %lld outputs out of the bound", (long long)c.out_of_bound);
        printf("\n");
        st->runs++;
        st->fails += !ok;
    }
    TS_CUDA_CHECK(cudaFree(xd));
    TS_CUDA_CHECK(cudaFree(yd));
    free(x);
    free(y);
    free(ycpu);
    wtensor_free(&w);
}

/* ts_cuda_matmul around the threshold: T = min − 1 (GEMV), min, min + 1 (GEMM), against the CPU. */
static void dispatch_case(uint32_t type, uint64_t seed, tstats *st) {
    const int64_t ne0 = 2560, n_out = 640, tmin = ts_cuda_gemm_min_tokens();
    wtensor w;
    wtensor_make(&w, type, ne0, n_out, 1, seed);
    for (int64_t T = tmin - 1; T <= tmin + 1; T++) {
        rng_t g = {mix64(seed + (uint64_t)T)};
        float *x = malloc(sizeof(float) * (size_t)(T * ne0)),
              *y = malloc(sizeof(float) * (size_t)(T * n_out));
        float *ycpu = malloc(sizeof(float) * (size_t)(T * n_out));
        for (int64_t i = 0; i < T * ne0; i++) x[i] = (float)rng_gauss(&g);
        /* where the tensor-core kernels take the product, the CPU bound's reference rounds x alike */
        const int64_t group = ts_cuda_matmul_rounds_x(type, ne0, T, 0, n_out);
        float *xr = malloc(sizeof(float) * (size_t)(T * ne0));
        if (group)
            ts_round_x_like_tc(x, T * ne0, group, xr);
        else
            memcpy(xr, x, sizeof(float) * (size_t)(T * ne0));
        ts_cpu_matmul(&w.host, 0, n_out, xr, T, ycpu);
        free(xr);
        float *xd, *yd;
        TS_CUDA_CHECK(cudaMalloc((void **)&xd, sizeof(float) * (size_t)(T * ne0)));
        TS_CUDA_CHECK(cudaMalloc((void **)&yd, sizeof(float) * (size_t)(T * n_out)));
        TS_CUDA_CHECK(cudaMemcpy(xd, x, sizeof(float) * (size_t)(T * ne0), cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemset(yd, 0xFF, sizeof(float) * (size_t)(T * n_out)));
        const int rc = ts_cuda_matmul(&w.dev, 0, n_out, xd, T, yd, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        TS_CUDA_CHECK(cudaMemcpy(y, yd, sizeof(float) * (size_t)(T * n_out), cudaMemcpyDeviceToHost));
        dense_cmp c = {&w, 0, n_out, T, n_out, x, y, ycpu, 0, 0, 0, -1, 0, PTHREAD_MUTEX_INITIALIZER};
        parallel_for(T * n_out, dense_rows, &c);
        const int gemm = T >= tmin && !group; /* the fp32 GEMM: the exact chain */
        const int ok = rc == 0 && c.out_of_bound == 0 && (!gemm || c.inexact == 0);
        printf("  ts_cuda_matmul %-6s T %2lld (%s): %s  |gpu-cpu|/S %.2e%s\n", ts_type_name(type),
               (long long)T, group ? "tensor cores, x rounded" : (gemm ? "GEMM" : "GEMV"),
               ok ? "ok  " : "FAIL", c.worst_rel,
               gemm ? (c.inexact ? "  not the exact chain" : "  exact") : "");
        st->runs++;
        st->fails += !ok;
        TS_CUDA_CHECK(cudaFree(xd));
        TS_CUDA_CHECK(cudaFree(yd));
        free(x);
        free(y);
        free(ycpu);
    }
    wtensor_free(&w);
}

/* The dense tensor-core product (ts_cuda_gemm_tc) against the chain over x rounded as it rounds x
 * (ts_round_x_like_tc), within REL_BOUND of Σ|w·x|. Q8_0 and Q5_0 products of up to 768 inputs and more
 * than 128 rows take the x-resident form (unless TURBOSPARK_CUDA_GEMM_XR=0 for the whole run). */
static void tc_dense_case(uint32_t type, int64_t ne0, int64_t n_out, int64_t T, int wg, uint64_t seed,
                          tstats *st) {
    wtensor w;
    wtensor_make(&w, type, ne0, n_out, 1, seed);
    rng_t g = {mix64(seed * 11 + 5)};
    float *x = malloc(sizeof(float) * (size_t)(T * ne0)), *xr = malloc(sizeof(float) * (size_t)(T * ne0));
    float *y = malloc(sizeof(float) * (size_t)(T * n_out));
    for (int64_t i = 0; i < T * ne0; i++) x[i] = (float)rng_gauss(&g) * (i % 5 == 0 ? 20.0f : 1.0f);
    ts_round_x_like_tc(x, T * ne0, ts_tc_x_group(type), xr);
    const size_t tcx_bytes = wg ? ts_cuda_gemm_wg_x_bytes(type, ne0, T) : ts_memplan_tc_x_bytes(type, ne0, T);
    float *xd, *yd;
    void *tcx;
    TS_CUDA_CHECK(cudaMalloc((void **)&xd, sizeof(float) * (size_t)(T * ne0)));
    TS_CUDA_CHECK(cudaMalloc((void **)&yd, sizeof(float) * (size_t)(T * n_out)));
    TS_CUDA_CHECK(cudaMalloc(&tcx, tcx_bytes));
    TS_CUDA_CHECK(cudaMemcpy(xd, x, sizeof(float) * (size_t)(T * ne0), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(yd, 0xFF, sizeof(float) * (size_t)(T * n_out))); /* NaN poison */
    ts_cuda_tc_scratch_set(tcx, tcx_bytes);
    const int rc = wg ? ts_cuda_gemm_wg(&w.dev, 0, n_out, xd, T, yd, n_out, tcx, tcx_bytes, 0)
                      : ts_cuda_gemm_tc(&w.dev, 0, n_out, xd, T, yd, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    ts_cuda_tc_scratch_set(NULL, 0);
    TS_CUDA_CHECK(cudaMemcpy(y, yd, sizeof(float) * (size_t)(T * n_out), cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int64_t t = 0; rc == 0 && t < T; t++)
        for (int64_t o = 0; o < n_out; o++) {
            double mag;
            const float want = chain(w.deq + (size_t)o * ne0, xr + (size_t)t * ne0, ne0, &mag);
            const double rel = fabs((double)y[t * n_out + o] - (double)want) / (mag > 0 ? mag : 1e-30);
            if (rel > worst || rel != rel) worst = rel != rel ? INFINITY : rel;
        }
    const int ok = rc == 0 && worst <= REL_BOUND;
    printf("  %s %-6s ne0 %5lld n_out %5lld T %4lld: %s  |gpu-cpu|/S %.2e (bound %.0e)%s\n", wg ? "wg" : "tc",
           ts_type_name(type), (long long)ne0, (long long)n_out, (long long)T, ok ? "ok  " : "FAIL", worst,
           REL_BOUND, rc ? "  (refused)" : "");
    st->runs++;
    st->fails += !ok;
    TS_CUDA_CHECK(cudaFree(xd));
    TS_CUDA_CHECK(cudaFree(yd));
    TS_CUDA_CHECK(cudaFree(tcx));
    free(x);
    free(xr);
    free(y);
    wtensor_free(&w);
}

/* Split products (ts_cuda_gemm_tc_split): the parts added in order on the host against the CPU's fp32
 * product of the unrounded x, within SPLIT_BOUND of Σ|w·x| (x's hi + lo carry ~22 bits, so the error is
 * fp32's, not fp16's); the plain tensor-core product (x rounded once) is reported beside it. max_parts 1:
 * the one-part form (both halves in every block). */
#define SPLIT_BOUND 1e-6
static void split_case(uint32_t type, int64_t ne0, int64_t n_out, int64_t T, int max_parts, uint64_t seed,
                       tstats *st) {
    wtensor w;
    wtensor_make(&w, type, ne0, n_out, 1, seed);
    rng_t g = {mix64(seed * 5 + 3)};
    float *x = malloc(sizeof(float) * (size_t)(T * ne0)), *ycpu = malloc(sizeof(float) * (size_t)(T * n_out));
    float *parts = malloc(sizeof(float) * (size_t)(max_parts * T * n_out));
    float *yhi = malloc(sizeof(float) * (size_t)(T * n_out));
    for (int64_t i = 0; i < T * ne0; i++) x[i] = (float)rng_gauss(&g) * (i % 7 == 0 ? 30.0f : 1.0f);
    ts_cpu_matmul(&w.host, 0, n_out, x, T, ycpu);
    const size_t tcx_bytes = ts_memplan_tc_x_bytes(type, ne0, 2 * T);
    float *xd, *pd;
    void *tcx;
    TS_CUDA_CHECK(cudaMalloc((void **)&xd, sizeof(float) * (size_t)(T * ne0)));
    TS_CUDA_CHECK(cudaMalloc((void **)&pd, sizeof(float) * (size_t)(max_parts * T * n_out)));
    TS_CUDA_CHECK(cudaMalloc(&tcx, tcx_bytes));
    TS_CUDA_CHECK(cudaMemcpy(xd, x, sizeof(float) * (size_t)(T * ne0), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(pd, 0xFF, sizeof(float) * (size_t)(max_parts * T * n_out))); /* NaN poison */
    ts_cuda_tc_scratch_set(tcx, tcx_bytes);
    const int np = ts_cuda_gemm_tc_split(&w.dev, n_out, xd, T, pd, T * n_out, max_parts, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(
        cudaMemcpy(parts, pd, sizeof(float) * (size_t)(max_parts * T * n_out), cudaMemcpyDeviceToHost));
    /* the plain product (x rounded to fp16 once) for comparison */
    const int rc_hi = ts_cuda_gemm_tc(&w.dev, 0, n_out, xd, T, pd, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(yhi, pd, sizeof(float) * (size_t)(T * n_out), cudaMemcpyDeviceToHost));
    ts_cuda_tc_scratch_set(NULL, 0);
    double worst = 0, worst_hi = 0;
    for (int64_t t = 0; np > 0 && t < T; t++)
        for (int64_t o = 0; o < n_out; o++) {
            float sum = 0.0f;
            for (int q = 0; q < np; q++) sum += parts[(size_t)q * T * n_out + t * n_out + o];
            double mag;
            chain(w.deq + (size_t)o * ne0, x + (size_t)t * ne0, ne0, &mag);
            const double rel = fabs((double)sum - (double)ycpu[t * n_out + o]) / (mag > 0 ? mag : 1e-30);
            const double rel_hi =
                fabs((double)yhi[t * n_out + o] - (double)ycpu[t * n_out + o]) / (mag > 0 ? mag : 1e-30);
            if (rel > worst || rel != rel) worst = rel != rel ? INFINITY : rel;
            if (rel_hi > worst_hi) worst_hi = rel_hi;
        }
    const int ok =
        (max_parts == 1 ? np == 1 : np >= 2 && np % 2 == 0 && np <= max_parts) && worst <= SPLIT_BOUND;
    printf(
        "  split %-6s ne0 %5lld n_out %4lld T %4lld: %s  %d parts, |gpu-cpu|/S %.2e (bound %.0e; x rounded "
        "once: %.2e%s)\n",
        ts_type_name(type), (long long)ne0, (long long)n_out, (long long)T, ok ? "ok  " : "FAIL", np, worst,
        SPLIT_BOUND, worst_hi, rc_hi ? ", not run" : "");
    st->runs++;
    st->fails += !ok;
    TS_CUDA_CHECK(cudaFree(xd));
    TS_CUDA_CHECK(cudaFree(pd));
    TS_CUDA_CHECK(cudaFree(tcx));
    free(x);
    free(ycpu);
    free(parts);
    free(yhi);
    wtensor_free(&w);
}

/* ---- experts -------------------------------------------------------------------------------------- */

typedef struct {
    int64_t E, k, N, H, F;
    int mode;         /* 0 uniform, 1 skewed (one hot expert) + bad ids, 2 a quarter of the experts */
    int split;        /* gate and up as two tensors */
    int exact_sample; /* check exactness on this many items (0: all) */
} ecase;

static void make_ids(int32_t *ids, int64_t N, int64_t k, int64_t E, int mode, rng_t *g) {
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++) {
            int64_t e;
            for (;;) { /* distinct experts per token, as the router's top-k */
                if (mode == 0)
                    e = (int64_t)(rng_u64(g) % (uint64_t)E);
                else if (mode == 1)
                    e = rng_u64(g) % 3 == 0 ? (int64_t)(rng_u64(g) % (uint64_t)E) : (int64_t)(rng_u64(g) % 4);
                else
                    e = (int64_t)(rng_u64(g) % (uint64_t)(E / 4 > k ? E / 4 : k + 1));
                int dup = 0;
                for (int64_t q = 0; q < j; q++) dup |= ids[t * k + q] == e;
                if (!dup) break;
            }
            ids[t * k + j] = (int32_t)e;
        }
    if (mode == 1 && N * k > 20) ids[3] = -1, ids[N * k - 2] = (int32_t)(E + 5);
}

typedef struct {
    const float *deq0, *deq1; /* rows of part 0 / part 1 (NULL: one part) */
    int64_t rpe, n_part, n_out, ne0;
    const int32_t *ids;
    int64_t E, x_div, x_stride, y_stride;
    const float *x, *y, *other; /* other: the GEMV path's output */
    const int64_t *sample;      /* items to check exactly (NULL: all) */
    int64_t n_check;
    int64_t inexact, out_of_bound, bad_nan, worst_ulps;
    double worst_rel;
    pthread_mutex_t mu;
    int bound_only; /* the tensor-core GEMM: x rounded, so only the bound against `other` applies */
} expert_cmp;

static void expert_items(void *ctx, int64_t i0, int64_t i1) {
    expert_cmp *c = ctx;
    int64_t inexact = 0, oob = 0, bn = 0, wu = 0;
    double wr = 0;
    for (int64_t q = i0; q < i1; q++) {
        const int64_t i = c->sample ? c->sample[q] : q;
        const int32_t e = c->ids[i];
        const float *yr = c->y + i * c->y_stride, *orow = c->other ? c->other + i * c->y_stride : NULL;
        if (e < 0 || e >= c->E) {
            for (int64_t o = 0; o < c->n_out; o++) bn += yr[o] == yr[o];
            continue;
        }
        const float *xr = c->x + (i / c->x_div) * c->x_stride;
        for (int64_t o = 0; o < c->n_out; o++) {
            const float *wrow = o < c->n_part ? c->deq0 + (size_t)(e * c->rpe + o) * c->ne0
                                              : c->deq1 + (size_t)(e * c->rpe + o - c->n_part) * c->ne0;
            double mag;
            const float want = chain(wrow, xr, c->ne0, &mag);
            const int64_t u = c->bound_only && yr[o] == yr[o] ? 0 : ulps(yr[o], want);
            if (u != 0 || yr[o] != yr[o]) {
                inexact++;
                if (u > wu || yr[o] != yr[o]) wu = yr[o] != yr[o] ? INT64_MAX : u;
            }
            if (orow || c->bound_only) { /* bound_only without `other`: against the chain itself */
                const double ref = orow ? (double)orow[o] : (double)want;
                const double rel = fabs((double)yr[o] - ref) / (mag > 0 ? mag : 1e-30);
                if (!(rel <= REL_BOUND)) oob++;
                if (rel > wr || rel != rel) wr = rel != rel ? INFINITY : rel;
            }
        }
    }
    pthread_mutex_lock(&c->mu);
    c->inexact += inexact;
    c->out_of_bound += oob;
    c->bad_nan += bn;
    if (wu > c->worst_ulps) c->worst_ulps = wu;
    if (wr > c->worst_rel) c->worst_rel = wr;
    pthread_mutex_unlock(&c->mu);
}

static int report_experts(const char *what, const ecase *ec, uint32_t type, int rc, expert_cmp *c, int tile) {
    const int ok = rc == 0 && c->inexact == 0 && c->out_of_bound == 0 && c->bad_nan == 0;
    printf("  %-6s E %3lld k %2lld N %4lld H %4lld F %4lld %-5s %-12s tile %2d: %s  |grouped-gemv|/S %.2e",
           ts_type_name(type), (long long)ec->E, (long long)ec->k, (long long)ec->N, (long long)ec->H,
           (long long)ec->F, ec->split ? "split" : "fused", what, tile,
           ok ? (c->bound_only ? "ok   " : "exact") : "FAIL ", c->worst_rel);
    if (rc != 0) printf("  (returned %d)", rc);
    if (c->inexact)
        printf("  %lld outputs differ from the fmaf chain (worst %lld ulps)", (long long)c->inexact,
               (long long)c->worst_ulps);
    if (c->out_of_bound) printf("  %lld out of the bound", (long long)c->out_of_bound);
    if (c->bad_nan) printf("  %lld outputs of bad ids not NaN", (long long)c->bad_nan);
    printf("\n");
    return ok;
}

/* One MoE expert pass as ts_cuda_moe runs it: plan, gate/up (x_div = k, x_stride = H, y stride G),
 * down (x = the gate/up rows, x_div = 1) — grouped vs GEMV, both against the exact chain. */
static void expert_case(uint32_t type, const ecase *ec, uint64_t seed, tstats *st) {
    const int64_t E = ec->E, k = ec->k, N = ec->N, H = ec->H, F = ec->F, NK = N * k, G = 2 * F;
    wtensor wg, wu, wd;
    wtensor_make(&wg, type, H, ec->split ? F : 2 * F, E, seed);
    if (ec->split) wtensor_make(&wu, type, H, F, E, seed + 1);
    wtensor_make(&wd, ts_synth_fallback_type(type, F), F, H, E,
                 seed + 2); /* 640-wide rows: Q4_K → Q5_0 as in real files */
    rng_t g = {mix64(seed * 3 + 5)};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)NK);
    make_ids(ids, N, k, E, ec->mode, &g);
    float *x = malloc(sizeof(float) * (size_t)(N * H));
    for (int64_t i = 0; i < N * H; i++) x[i] = (float)rng_gauss(&g);
    float *gu = malloc(sizeof(float) * (size_t)(NK * G)), *gu2 = malloc(sizeof(float) * (size_t)(NK * G));
    float *eo = malloc(sizeof(float) * (size_t)(NK * H)), *eo2 = malloc(sizeof(float) * (size_t)(NK * H));

    int32_t *ids_d;
    float *x_d, *gu_d, *eo_d;
    void *scr;
    const size_t scr_bytes = ts_cuda_expert_plan_bytes(NK, E);
    TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, sizeof(int32_t) * (size_t)NK));
    TS_CUDA_CHECK(cudaMalloc((void **)&x_d, sizeof(float) * (size_t)(N * H)));
    TS_CUDA_CHECK(cudaMalloc((void **)&gu_d, sizeof(float) * (size_t)(NK * G)));
    TS_CUDA_CHECK(cudaMalloc((void **)&eo_d, sizeof(float) * (size_t)(NK * H)));
    TS_CUDA_CHECK(cudaMalloc(&scr, scr_bytes));
    TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof(int32_t) * (size_t)NK, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(x_d, x, sizeof(float) * (size_t)(N * H), cudaMemcpyHostToDevice));

    const ts_cuda_tensor *W = &wg.dev, *W2 = ec->split ? &wu.dev : NULL;
    const int64_t rpe = ec->split ? F : 2 * F, n_part = ec->split ? F : 2 * F;

    /* GEMV path first (the bound's reference), then the grouped one */
    TS_CUDA_CHECK(cudaMemset(gu_d, 0xFF, sizeof(float) * (size_t)(NK * G)));
    int rc = ts_cuda_matmul_experts(W, W2, ids_d, NK, rpe, 0, n_part, x_d, k, H, gu_d, G, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(gu2, gu_d, sizeof(float) * (size_t)(NK * G), cudaMemcpyDeviceToHost));
    ts_cuda_expert_plan plan;
    TS_CUDA_CHECK(cudaMemset(gu_d, 0xFF, sizeof(float) * (size_t)(NK * G)));
    rc |= ts_cuda_expert_plan_build(ids_d, NK, E, scr, scr_bytes, &plan, 0);
    rc |= ts_cuda_gemm_experts(&plan, W, W2, rpe, 0, n_part, x_d, k, H, gu_d, G, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(gu, gu_d, sizeof(float) * (size_t)(NK * G), cudaMemcpyDeviceToHost));

    int64_t *sample = NULL, n_check = NK;
    if (ec->exact_sample > 0 && ec->exact_sample < NK) {
        n_check = ec->exact_sample;
        sample = malloc(sizeof(int64_t) * (size_t)n_check);
        for (int64_t q = 0; q < n_check; q++) sample[q] = (int64_t)(rng_u64(&g) % (uint64_t)NK);
    }
    /* the GEMV path rounds x where it runs on the tensor cores: then the fp32 grouped GEMM answers to the
       exact chain alone, and the tensor-core grouped GEMM below to that path */
    const int gemv_rounds = ts_cuda_matmul_experts_rounds_x(type, H, NK, k, true, rpe, 0, n_part) != 0;
    expert_cmp c = {wg.deq, ec->split ? wu.deq : NULL,
                    rpe,    n_part,
                    2 * F,  H,
                    ids,    E,
                    k,      H,
                    G,      x,
                    gu,     gemv_rounds ? NULL : gu2,
                    sample, n_check,
                    0,      0,
                    0,      0,
                    0,      PTHREAD_MUTEX_INITIALIZER};
    parallel_for(n_check, expert_items, &c);
    st->runs++;
    st->fails += !report_experts("gate/up", ec, type, rc, &c, plan.tile);

    /* the tensor-core grouped GEMM (gemm_tc.h) where it takes the type, x rounded: within the bound of the
       GEMV path where that rounds x alike (the reference `other`), else of the chain over x rounded by
       ts_round_x_like_tc (at N·k beyond the GEMV's tensor-core sizes); bad ids NaN */
    /* path 0: gemm_tc.cu; 1: the warpgroup MMAs (gemm_wg.cu: Q4_K and Q5_K, plans of 64-item tiles; x
       converted in whole tiles of 128 rows, so its scratch is its own size) */
    for (int path = 0; path < 2; path++) {
        const size_t tcx_bytes =
            path ? ts_cuda_gemm_wg_x_bytes(type, H, N) : ts_memplan_tc_x_bytes(type, H, N);
        if (tcx_bytes == 0 || H % ts_tc_x_group(type) != 0)
            break; /* expert products take whole groups only */
        if (path == 1 && (plan.tile != 64 || (type != TS_TYPE_Q4_K && type != TS_TYPE_Q5_K))) break;
        float *xr = NULL;
        if (!gemv_rounds) {
            xr = malloc(sizeof(float) * (size_t)(N * H));
            ts_round_x_like_tc(x, N * H, ts_tc_x_group(type), xr);
        }
        void *tcx;
        TS_CUDA_CHECK(cudaMalloc(&tcx, tcx_bytes));
        ts_cuda_tc_scratch_set(tcx, tcx_bytes);
        TS_CUDA_CHECK(cudaMemset(gu_d, 0xFF, sizeof(float) * (size_t)(NK * G)));
        int rt;
        if (path == 0) {
            rt = !ts_cuda_gemm_tc_experts_takes(&plan, type, H, k);
            rt |= ts_cuda_gemm_tc_experts(&plan, W, W2, rpe, 0, n_part, x_d, k, H, gu_d, G, 0);
        } else {
            rt = ts_cuda_gemm_wg_experts(&plan, W, W2, rpe, 0, n_part, x_d, k, H, gu_d, G, tcx, tcx_bytes, 0);
        }
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        float *gut = malloc(sizeof(float) * (size_t)(NK * G));
        TS_CUDA_CHECK(cudaMemcpy(gut, gu_d, sizeof(float) * (size_t)(NK * G), cudaMemcpyDeviceToHost));
        expert_cmp ct = c;
        ct.other = gemv_rounds ? gu2 : NULL, ct.x = gemv_rounds ? x : xr, ct.y = gut,
        ct.inexact = ct.out_of_bound = ct.bad_nan = ct.worst_ulps = 0, ct.worst_rel = 0;
        ct.bound_only = 1;
        pthread_mutex_init(&ct.mu, NULL);
        parallel_for(n_check, expert_items, &ct);
        st->runs++;
        st->fails += !report_experts(path ? "gate/up wg" : "gate/up tc", ec, type, rt, &ct, plan.tile);
        ts_cuda_tc_scratch_set(NULL, 0);
        free(gut);
        free(xr);
        TS_CUDA_CHECK(cudaFree(tcx));
    }

    /* down on the grouped gate/up values (bad ids' NaN rows replaced, the GEMV path reads them too), each
       h row rounded as the MoE block rounds it where a tensor-core kernel may take the product (moe.cu):
       every path then reads the same values, and the tensor-core ones leave them as they are */
    for (int64_t i = 0; i < NK * G; i++)
        if (gu[i] != gu[i]) gu[i] = 0.25f;
    const int64_t dg = ts_tc_x_group(wd.type);
    if (F % dg == 0)
        for (int64_t i = 0; i < NK; i++) ts_round_x_like_tc(gu + i * G, F, dg, gu + i * G);
    TS_CUDA_CHECK(cudaMemcpy(gu_d, gu, sizeof(float) * (size_t)(NK * G), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, sizeof(float) * (size_t)(NK * H)));
    rc = ts_cuda_matmul_experts(&wd.dev, NULL, ids_d, NK, H, 0, H, gu_d, 1, G, eo_d, H, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(eo2, eo_d, sizeof(float) * (size_t)(NK * H), cudaMemcpyDeviceToHost));
    TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, sizeof(float) * (size_t)(NK * H)));
    rc |= ts_cuda_gemm_experts(&plan, &wd.dev, NULL, H, 0, H, gu_d, 1, G, eo_d, H, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(eo, eo_d, sizeof(float) * (size_t)(NK * H), cudaMemcpyDeviceToHost));
    expert_cmp d = {wd.deq, NULL, H,   H,      H,       F, ids, E, 1, G, H,
                    gu,     eo,   eo2, sample, n_check, 0, 0,   0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
    parallel_for(n_check, expert_items, &d);
    st->runs++;
    st->fails += !report_experts("down", ec, type, rc, &d, plan.tile);

    /* the down products on the tensor-core grouped GEMM (an x row an item, x_div = 1), on the h rows
       rounded above: within the bound of the chain over them */
    const size_t dx_bytes = ts_memplan_tc_x_bytes(wd.type, F, NK);
    if (dx_bytes > 0 && F % dg == 0) {
        void *tcx;
        TS_CUDA_CHECK(cudaMalloc(&tcx, dx_bytes));
        ts_cuda_tc_scratch_set(tcx, dx_bytes);
        TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, sizeof(float) * (size_t)(NK * H)));
        int rt = !ts_cuda_gemm_tc_experts_takes(&plan, wd.type, F, 1);
        rt |= ts_cuda_gemm_tc_experts(&plan, &wd.dev, NULL, H, 0, H, gu_d, 1, G, eo_d, H, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        TS_CUDA_CHECK(cudaMemcpy(eo, eo_d, sizeof(float) * (size_t)(NK * H), cudaMemcpyDeviceToHost));
        expert_cmp dt = d;
        dt.other = NULL, dt.inexact = dt.out_of_bound = dt.bad_nan = dt.worst_ulps = 0;
        dt.worst_rel = 0, dt.bound_only = 1;
        pthread_mutex_init(&dt.mu, NULL);
        parallel_for(n_check, expert_items, &dt);
        st->runs++;
        st->fails += !report_experts("down tc", ec, wd.type, rt, &dt, plan.tile);
        ts_cuda_tc_scratch_set(NULL, 0);
        TS_CUDA_CHECK(cudaFree(tcx));
    }

    /* graph: capture plan + grouped gate/up, change the ids on the device, replay */
    if (!sample) {
        cudaStream_t s;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        TS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        rc = ts_cuda_expert_plan_build(ids_d, NK, E, scr, scr_bytes, &plan, s);
        rc |= ts_cuda_gemm_experts(&plan, W, W2, rpe, 0, n_part, x_d, k, H, gu_d, G, s);
        TS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        TS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        make_ids(ids, N, k, E, (ec->mode + 1) % 3, &g);
        TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof(int32_t) * (size_t)NK, cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemset(gu_d, 0xFF, sizeof(float) * (size_t)(NK * G)));
        TS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        TS_CUDA_CHECK(cudaStreamSynchronize(s));
        TS_CUDA_CHECK(cudaMemcpy(gu, gu_d, sizeof(float) * (size_t)(NK * G), cudaMemcpyDeviceToHost));
        expert_cmp c2 = {wg.deq, ec->split ? wu.deq : NULL,
                         rpe,    n_part,
                         2 * F,  H,
                         ids,    E,
                         k,      H,
                         G,      x,
                         gu,     NULL,
                         NULL,   NK,
                         0,      0,
                         0,      0,
                         0,      PTHREAD_MUTEX_INITIALIZER};
        parallel_for(NK, expert_items, &c2);
        st->runs++;
        st->fails += !report_experts("graph replay", ec, type, rc, &c2, plan.tile);
        TS_CUDA_CHECK(cudaGraphExecDestroy(exec));
        TS_CUDA_CHECK(cudaGraphDestroy(graph));
        TS_CUDA_CHECK(cudaStreamDestroy(s));
    }

    free(sample);
    TS_CUDA_CHECK(cudaFree(ids_d));
    TS_CUDA_CHECK(cudaFree(x_d));
    TS_CUDA_CHECK(cudaFree(gu_d));
    TS_CUDA_CHECK(cudaFree(eo_d));
    TS_CUDA_CHECK(cudaFree(scr));
    free(ids);
    free(x);
    free(gu);
    free(gu2);
    free(eo);
    free(eo2);
    wtensor_free(&wg);
    if (ec->split) wtensor_free(&wu);
    wtensor_free(&wd);
}

/* ---- benchmark ------------------------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*bench_fn)(void *ctx, cudaStream_t s);

/* Median ms of fn over 15 samples after 3 warm-ups (eager launches; the GEMV path of T tokens is
 * T/8 launches, timed the same way). */
static float time_ms(bench_fn fn, void *ctx) {
    cudaEvent_t e0, e1;
    TS_CUDA_CHECK(cudaEventCreate(&e0));
    TS_CUDA_CHECK(cudaEventCreate(&e1));
    float ms[15];
    for (int i = 0; i < 18; i++) {
        TS_CUDA_CHECK(cudaEventRecord(e0, 0));
        if (fn(ctx, 0) != 0) {
            fprintf(stderr, "benchmark call refused\n");
            exit(1);
        }
        TS_CUDA_CHECK(cudaEventRecord(e1, 0));
        TS_CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 3) TS_CUDA_CHECK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    TS_CUDA_CHECK(cudaEventDestroy(e0));
    TS_CUDA_CHECK(cudaEventDestroy(e1));
    qsort(ms, 15, sizeof *ms, cmp_float);
    return ms[7];
}

typedef struct {
    const ts_cuda_tensor *W;
    int64_t n_out, T;
    const float *x;
    float *y;
} dense_bench;
static int run_gemm(void *p, cudaStream_t s) {
    const dense_bench *b = p;
    return ts_cuda_gemm(b->W, 0, b->n_out, b->x, b->T, b->y, s);
}
static int run_gemv(void *p, cudaStream_t s) { /* ts_cuda_matmul with the GEMM switched off */
    const dense_bench *b = p;
    ts_cuda_gemm_set_min_tokens(INT64_MAX);
    const int rc = ts_cuda_matmul(b->W, 0, b->n_out, b->x, b->T, b->y, s);
    ts_cuda_gemm_set_min_tokens(0);
    return rc;
}

typedef struct {
    const ts_cuda_tensor *gate_up, *down;
    const int32_t *ids;
    int64_t NK, E, k, H, F;
    const float *x;
    float *gu, *eo;
    void *scr;
    size_t scr_bytes;
    int grouped;
} moe_bench;
static int run_moe(void *p, cudaStream_t s) {
    const moe_bench *b = p;
    if (!b->grouped)
        return ts_cuda_matmul_experts(b->gate_up, NULL, b->ids, b->NK, 2 * b->F, 0, 2 * b->F, b->x, b->k,
                                      b->H, b->gu, 2 * b->F, s) ||
               ts_cuda_matmul_experts(b->down, NULL, b->ids, b->NK, b->H, 0, b->H, b->gu, 1, 2 * b->F, b->eo,
                                      b->H, s);
    ts_cuda_expert_plan plan;
    return ts_cuda_expert_plan_build(b->ids, b->NK, b->E, b->scr, b->scr_bytes, &plan, s) ||
           ts_cuda_gemm_experts(&plan, b->gate_up, NULL, 2 * b->F, 0, 2 * b->F, b->x, b->k, b->H, b->gu,
                                2 * b->F, s) ||
           ts_cuda_gemm_experts(&plan, b->down, NULL, b->H, 0, b->H, b->gu, 1, 2 * b->F, b->eo, b->H, s);
}

/* A tensor of the given shape filled by tiling 64 distinct quantized rows (fast to build). */
static void bench_tensor(ts_cuda_tensor *out, uint32_t type, int64_t ne0, int64_t rows) {
    wtensor pool;
    wtensor_make(&pool, type, ne0, 64, 1, 99);
    const size_t rb = pool.rb;
    uint8_t *h = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) memcpy(h + rb * (size_t)r, pool.data + rb * (size_t)(r % 64), rb);
    ts_gguf_tensor t = pool.host;
    t.ne[1] = rows;
    t.nelements = ne0 * rows;
    t.nbytes = (uint64_t)rb * (uint64_t)rows;
    t.data = h;
    char err[256];
    if (ts_cuda_tensor_upload(&t, out, err, sizeof err) != 0) {
        fprintf(stderr, "upload failed: %s\n", err);
        exit(2);
    }
    free(h);
    wtensor_free(&pool);
}

/* The dense products on the warpgroup MMAs (gemm_wg.cu; Hopper), the same reference: partial token
 * tiles and row blocks, one super-block, a width of ten; then grouped experts (expert_case's "gate/up wg"). */
static void wg_cases(uint64_t seed, tstats *st) {
    printf("warpgroup-MMA dense products\n");
    tc_dense_case(TS_TYPE_Q4_K, 2560, 300, 200, 1, seed + 86, st);
    tc_dense_case(TS_TYPE_Q5_K, 512, 130, 128, 1, seed + 87, st);
    tc_dense_case(TS_TYPE_Q4_K, 256, 128, 1, 1, seed + 88, st);
    tc_dense_case(TS_TYPE_Q5_K, 2560, 1000, 300, 1, seed + 89, st);
    /* the in-order types (B as hi + lo of d·q): the shared expert's down shape cut to fewer rows, a group
     * of 128, 1024 inputs at one token tile */
    tc_dense_case(TS_TYPE_Q8_0, 640, 700, 130, 1, seed + 93, st);
    tc_dense_case(TS_TYPE_Q5_0, 128, 200, 70, 1, seed + 94, st);
    tc_dense_case(TS_TYPE_Q5_0, 1024, 300, 64, 1, seed + 95, st);
    /* grouped experts with tiles of 64 (100 items an expert): gate|up fused, split, and bad ids */
    const ecase ecs[] = {
        {8, 4, 200, 512, 256, 0, 0, 0}, {8, 4, 200, 512, 256, 0, 1, 0}, {8, 4, 200, 512, 256, 1, 0, 0}};
    for (int i = 0; i < 3; i++)
        expert_case(i == 1 ? TS_TYPE_Q5_K : TS_TYPE_Q4_K, &ecs[i], seed + 90 + (uint64_t)i, st);
}

/* --wg: the warpgroup-MMA products' twin cases, then their time against the tensor-core GEMM
 * (ts_cuda_gemm_tc) at the released shapes, 4,096 tokens of random x */
typedef struct {
    const ts_cuda_tensor *W;
    int64_t n_out, T;
    float *x, *y;
    void *scr;
    size_t scr_bytes;
    int wg;
    const ts_cuda_expert_plan *plan; /* experts: the plan (items x_div = k to an x row), else NULL */
    int64_t k;
} wg_bench;
static int run_wg(void *p, cudaStream_t s) {
    const wg_bench *b = p;
    const int64_t ne0 = b->W->ne0, rpe = b->n_out;
    if (b->plan)
        return b->wg ? ts_cuda_gemm_wg_experts(b->plan, b->W, NULL, rpe, 0, b->n_out, b->x, b->k, ne0, b->y,
                                               b->n_out, b->scr, b->scr_bytes, s)
                     : ts_cuda_gemm_tc_experts(b->plan, b->W, NULL, rpe, 0, b->n_out, b->x, b->k, ne0, b->y,
                                               b->n_out, s);
    return b->wg ? ts_cuda_gemm_wg(b->W, 0, b->n_out, b->x, b->T, b->y, b->n_out, b->scr, b->scr_bytes, s)
                 : ts_cuda_gemm_tc(b->W, 0, b->n_out, b->x, b->T, b->y, s);
}
static void bench_tensor(ts_cuda_tensor *out, uint32_t type, int64_t ne0, int64_t rows);
static void bench_wg(void) {
    const struct {
        uint32_t type;
        int64_t ne0, n_out;
    } shapes[] = {{TS_TYPE_Q4_K, 2560, 6144}, {TS_TYPE_Q5_K, 2560, 10240}, {TS_TYPE_Q4_K, 2560, 2560}};
    const int64_t T = 4096, ne0 = 2560;
    float *x, *y, *xh = malloc(sizeof(float) * (size_t)(T * ne0));
    rng_t g = {mix64(7)};
    for (int64_t i = 0; i < T * ne0; i++) xh[i] = (float)rng_gauss(&g);
    const size_t scr_bytes =
        ts_memplan_tc_x_bytes(TS_TYPE_Q4_K, ne0, T) > ts_cuda_gemm_wg_x_bytes(TS_TYPE_Q4_K, ne0, T)
            ? ts_memplan_tc_x_bytes(TS_TYPE_Q4_K, ne0, T)
            : ts_cuda_gemm_wg_x_bytes(TS_TYPE_Q4_K, ne0, T);
    void *scr;
    TS_CUDA_CHECK(cudaMalloc((void **)&x, sizeof(float) * (size_t)(T * ne0)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y, sizeof(float) * (size_t)(T * 10240)));
    TS_CUDA_CHECK(cudaMalloc(&scr, scr_bytes));
    TS_CUDA_CHECK(cudaMemcpy(x, xh, sizeof(float) * (size_t)(T * ne0), cudaMemcpyHostToDevice));
    ts_cuda_tc_scratch_set(scr, scr_bytes);
    printf("\nwarpgroup MMAs (ts_cuda_gemm_wg) vs the tensor-core GEMM (ts_cuda_gemm_tc), T %lld, random x; "
           "TFLOP/s = 2·T·n_out·ne0 / time (the x conversion included)\n",
           (long long)T);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        ts_cuda_tensor W;
        bench_tensor(&W, shapes[si].type, shapes[si].ne0, shapes[si].n_out);
        wg_bench b = {&W, shapes[si].n_out, T, x, y, scr, scr_bytes, 1, NULL, 0};
        const double flop = 2.0 * (double)T * (double)shapes[si].n_out * (double)shapes[si].ne0;
        const float tw = time_ms(run_wg, &b);
        b.wg = 0;
        const float tt = time_ms(run_wg, &b);
        printf("  %-6s %5lld->%-6lld: wg %7.3f ms %6.1f TFLOP/s   tc %7.3f ms %6.1f TFLOP/s   x%.2f\n",
               ts_type_name(shapes[si].type), (long long)shapes[si].ne0, (long long)shapes[si].n_out, tw,
               flop / tw * 1e-9, tt, flop / tt * 1e-9, tt / tw);
        ts_cuda_tensor_free(&W);
    }
    TS_CUDA_CHECK(cudaFree(y));
    /* the routed gate|up of a 4,096-token prompt: 512 experts, top 10, 2560 -> 2·640, uniform routing */
    {
        const int64_t E = 512, k = 10, F = 640, NK = T * k;
        ts_cuda_tensor gu;
        bench_tensor(&gu, TS_TYPE_Q4_K, ne0, E * 2 * F);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)NK), *ids_d;
        make_ids(ids, T, k, E, 0, &g);
        void *pscr;
        const size_t pbytes = ts_cuda_expert_plan_bytes(NK, E);
        TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, sizeof(int32_t) * (size_t)NK));
        TS_CUDA_CHECK(cudaMalloc((void **)&y, sizeof(float) * (size_t)(NK * 2 * F)));
        TS_CUDA_CHECK(cudaMalloc(&pscr, pbytes));
        TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof(int32_t) * (size_t)NK, cudaMemcpyHostToDevice));
        ts_cuda_expert_plan plan;
        if (ts_cuda_expert_plan_build(ids_d, NK, E, pscr, pbytes, &plan, 0)) {
            fprintf(stderr, "plan refused\n");
            exit(1);
        }
        wg_bench b = {&gu, 2 * F, T, x, y, scr, scr_bytes, 1};
        b.plan = &plan, b.k = k;
        const double flop = 2.0 * (double)NK * (double)(2 * F) * (double)ne0;
        const float tw = time_ms(run_wg, &b);
        b.wg = 0;
        const float tt = time_ms(run_wg, &b);
        printf(
            "  %-6s experts gate|up (tiles of %d): wg %7.3f ms %6.1f TFLOP/s   tc %7.3f ms %6.1f TFLOP/s   "
            "x%.2f\n",
            ts_type_name(TS_TYPE_Q4_K), plan.tile, tw, flop / tw * 1e-9, tt, flop / tt * 1e-9, tt / tw);
        ts_cuda_tensor_free(&gu);
        TS_CUDA_CHECK(cudaFree(ids_d));
        TS_CUDA_CHECK(cudaFree(y));
        TS_CUDA_CHECK(cudaFree(pscr));
        free(ids);
    }
    ts_cuda_tc_scratch_set(NULL, 0);
    TS_CUDA_CHECK(cudaFree(x));
    TS_CUDA_CHECK(cudaFree(scr));
    free(xh);
}

static void bench(void) {
    const uint32_t types[] = {TS_TYPE_Q4_K, TS_TYPE_Q6_K, TS_TYPE_Q8_0};
    const struct { int64_t ne0, n_out; } shapes[] = {{2560, 12288}, {2560, 6144}, {6144, 2560}, {2560, 512}};
    const int64_t Ts[] = {4, 8, 12, 16, 64, 512, 2048, 8192};
    float *x, *y;
    TS_CUDA_CHECK(cudaMalloc((void **)&x, sizeof(float) * 8192 * 6144));
    TS_CUDA_CHECK(cudaMalloc((void **)&y, sizeof(float) * 8192 * 12288));
    TS_CUDA_CHECK(cudaMemset(x, 0, sizeof(float) * 8192 * 6144));
    printf("\ndense: ts_cuda_gemm (auto config) vs the GEMV path of ts_cuda_matmul (⌈T/8⌉ launches); "
           "TFLOP/s = 2·T·n_out·ne0 / time; the dispatch threshold is T >= %lld\n",
           (long long)ts_cuda_gemm_min_tokens());
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            ts_cuda_tensor W;
            bench_tensor(&W, types[ti], shapes[si].ne0, shapes[si].n_out);
            for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
                dense_bench b = {&W, shapes[si].n_out, Ts[k], x, y};
                const double flop = 2.0 * (double)Ts[k] * (double)shapes[si].n_out * (double)shapes[si].ne0;
                const float g = time_ms(run_gemm, &b);
                const float v = Ts[k] <= 2048 ? time_ms(run_gemv, &b) : -1.0f;
                printf("  %-6s %5lld->%-6lld T %5lld: GEMM %8.3f ms %6.2f TFLOP/s", ts_type_name(types[ti]),
                       (long long)shapes[si].ne0, (long long)shapes[si].n_out, (long long)Ts[k], g,
                       flop / g * 1e-9);
                if (v > 0) printf("   GEMV %8.3f ms %6.2f TFLOP/s   x%.1f", v, flop / v * 1e-9, v / g);
                printf("\n");
            }
            ts_cuda_tensor_free(&W);
        }
    TS_CUDA_CHECK(cudaFree(x));
    TS_CUDA_CHECK(cudaFree(y));

    /* MoE experts at the released shape: fused gate_up (E·2F rows × H) and down (E·H rows × F) */
    const int64_t E = 512, k = 10, H = 2560, F = 640;
    const int64_t Ns[] = {64, 128, 256, 512, 1024, 2048, 4096};
    printf("\nMoE experts (E %lld, k %lld, H %lld, F %lld, uniform random routing): gate_up + down, "
           "grouped (plan + 2 GEMMs) vs one GEMV per item\n",
           (long long)E, (long long)k, (long long)H, (long long)F);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        ts_cuda_tensor gate_up, down;
        bench_tensor(&gate_up, types[ti], H, E * 2 * F);
        bench_tensor(&down, types[ti], F, E * H);
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
            const int64_t N = Ns[ni], NK = N * k;
            rng_t g = {mix64(N)};
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)NK);
            make_ids(ids, N, k, E, 0, &g);
            int32_t *ids_d;
            float *xd, *gu, *eo;
            void *scr;
            const size_t scr_bytes = ts_cuda_expert_plan_bytes(NK, E);
            TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, sizeof(int32_t) * (size_t)NK));
            TS_CUDA_CHECK(cudaMalloc((void **)&xd, sizeof(float) * (size_t)(N * H)));
            TS_CUDA_CHECK(cudaMalloc((void **)&gu, sizeof(float) * (size_t)(NK * 2 * F)));
            TS_CUDA_CHECK(cudaMalloc((void **)&eo, sizeof(float) * (size_t)(NK * H)));
            TS_CUDA_CHECK(cudaMalloc(&scr, scr_bytes));
            TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof(int32_t) * (size_t)NK, cudaMemcpyHostToDevice));
            TS_CUDA_CHECK(cudaMemset(xd, 0, sizeof(float) * (size_t)(N * H)));
            TS_CUDA_CHECK(cudaMemset(gu, 0, sizeof(float) * (size_t)(NK * 2 * F)));
            moe_bench b = {&gate_up, &down, ids_d, NK, E, k, H, F, xd, gu, eo, scr, scr_bytes, 1};
            const double flop = 2.0 * (double)NK * 3.0 * (double)F * (double)H;
            const float tg = time_ms(run_moe, &b);
            b.grouped = 0;
            const float tv = time_ms(run_moe, &b);
            printf("  %-6s N %5lld (%5.1f items/expert): grouped %8.3f ms %6.2f TFLOP/s   GEMV %8.3f ms "
                   "%6.2f TFLOP/s   x%.2f\n",
                   ts_type_name(types[ti]), (long long)N, (double)NK / (double)E, tg, flop / tg * 1e-9, tv,
                   flop / tv * 1e-9, tv / tg);
            TS_CUDA_CHECK(cudaFree(ids_d));
            TS_CUDA_CHECK(cudaFree(xd));
            TS_CUDA_CHECK(cudaFree(gu));
            TS_CUDA_CHECK(cudaFree(eo));
            TS_CUDA_CHECK(cudaFree(scr));
            free(ids);
        }
        ts_cuda_tensor_free(&gate_up);
        ts_cuda_tensor_free(&down);
    }
}

/* ---- main ----------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("test_cuda_gemm: no CUDA device; this test runs on the GPU machine only\n");
        return 1;
    }
    /* ts_cuda_gemm_tc and ts_cuda_gemm_tc_experts on gemm_tc.cu's kernels; the warpgroup products are
     * called by name (ts_cuda_gemm_wg, ts_cuda_gemm_wg_experts) */
    setenv("TURBOSPARK_CUDA_GEMM_WG", "0", 1);
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench();
        return 0;
    }
    const uint64_t seed = 0xC0FFEEull + (uint64_t)time(NULL);
    if (argc > 1 && strcmp(argv[1], "--wg") == 0) { /* the warpgroup-MMA cases and timings only */
        tstats st = {0, 0};
        wg_cases(seed, &st);
        bench_wg();
        printf("%d runs, %d failed\n", st.runs, st.fails);
        return st.fails ? 1 : 0;
    }
    printf("test_cuda_gemm: seed %llu; exact = bit-identical to the CPU fmaf chain; bound %.0e * sum|w*x|\n",
           (unsigned long long)seed, REL_BOUND);
    tstats st = {0, 0};
    const clock_t t0 = clock();
    const int n_types = quick ? 3 : N_TYPES;
    for (int ti = 0; ti < n_types; ti++) {
        const uint32_t type = k_types[ti];
        const int qk = (int)ts_type_get(type)->block_size;
        const int plain = qk == 1;
        const uint64_t sd = seed + (uint64_t)ti * 1000;
        printf("%s\n", ts_type_name(type));
        /* an expert slice with partial tiles; odd n_out and row0 ≠ 0 over long rows */
        dense_case(type, 2560, 700, 30, 640, 130, sd + 1, &st);
        dense_case(type, 6144, 2600, 3, 2557, 33, sd + 2, &st);
        if (!quick) {
            dense_case(type, 2560, 1030, 0, 1030, 520, sd + 3, &st); /* several token tiles of every width */
            dense_case(type, 10240, 4, 0, 4, 40, sd + 4, &st);       /* tiny n_out, long rows (HC inject) */
            dense_case(type, qk == 256 ? 256 : 160, 9, 2, 7, 16, sd + 5, &st); /* one block a row */
        }
        if (plain) {
            dense_case(type, 100, 40, 1, 37, 50, sd + 6, &st); /* ne0 % 4 ≠ 0: unaligned x rows, K-tail */
            dense_case(type, 200, 40, 0, 40, 17, sd + 7, &st); /* ne0 % 32 ≠ 0 with aligned rows */
        }
        dispatch_case(type, sd + 8, &st);
        /* experts: tiles of 16 (mean 3.75 items/expert), 32 (25) and 64 (100) items */
        const int64_t H = qk == 256 ? 512 : 320, F = qk == 256 ? 256 : 96;
        const ecase ecs[] = {
            {64, 4, 60, H, F, 1, 0, 0},
            {64, 4, 60, H, F, 0, 1, 0},
            {16, 4, 100, H, F, 2, 1, 0},
            {8, 4, 200, H, F, 0, 0, 0},
        };
        for (int ci = 0; ci < 4; ci++)
            if (!quick || ci < 2) expert_case(type, &ecs[ci], sd + 20 + (uint64_t)ci * 10, &st);
    }
    /* split products: the hyper-connection down|inject shape (10240 → 324) at a partial token tile and
     * at a micro-batch, and the in-order types; the one-part form, and the up shape (320 → 10240: a
     * partial last group of 64 inputs) cut to fewer rows, with one part and with several */
    /* dense products on the tensor cores: Q8_0 and Q5_0 of up to 768 inputs in the x-resident form (the
     * shared expert's down, 640 → 2560, cut to fewer rows; odd row counts, partial token tiles), and a
     * width past it */
    printf("tensor-core dense products\n");
    tc_dense_case(TS_TYPE_Q8_0, 640, 700, 130, 0, seed + 81, &st);
    tc_dense_case(TS_TYPE_Q5_0, 640, 300, 70, 0, seed + 82, &st);
    tc_dense_case(TS_TYPE_Q8_0, 256, 260, 200, 0, seed + 83, &st);
    tc_dense_case(TS_TYPE_Q5_0, 1024, 300, 64, 0, seed + 84, &st);
    tc_dense_case(TS_TYPE_Q4_K, 512, 300, 100, 0, seed + 85, &st);
    wg_cases(seed, &st);
    printf("split products\n");
    split_case(TS_TYPE_Q4_K, 10240, 324, 70, 32, seed + 91, &st);
    split_case(TS_TYPE_Q4_K, 10240, 320, 520, 32, seed + 92, &st);
    split_case(TS_TYPE_Q8_0, 2560, 200, 33, 32, seed + 93, &st);
    split_case(TS_TYPE_Q6_K, 2560, 130, 100, 32, seed + 94, &st);
    split_case(TS_TYPE_Q5_0, 320, 300, 70, 1, seed + 97, &st);
    split_case(TS_TYPE_Q5_0, 320, 260, 150, 32, seed + 98, &st);
    split_case(TS_TYPE_Q8_0, 96, 140, 40, 1, seed + 99, &st);
    split_case(TS_TYPE_Q4_K, 2560, 200, 130, 1, seed + 100, &st);
    if (!quick) {
        split_case(TS_TYPE_Q5_K, 10240, 324, 200, 32, seed + 95, &st);
        split_case(TS_TYPE_Q5_0, 1280, 64, 17, 32, seed + 96, &st);
        split_case(TS_TYPE_Q8_0, 352, 384, 300, 1, seed + 101, &st);
    }
    /* the released shape, Q4_K: grouped vs GEMV on every item, 300 items exactly */
    {
        const ecase rel = {512, 10, 512, 2560, 640, 0, 0, 300};
        printf("released shape\n");
        expert_case(TS_TYPE_Q4_K, &rel, seed + 77, &st);
        if (!quick) {
            const ecase rel2 = {512, 10, 512, 2560, 640, 1, 1, 300};
            expert_case(TS_TYPE_Q6_K, &rel2, seed + 78, &st);
        }
    }
    printf("\n%d runs, %d failed; CPU time %.1f s\n", st.runs, st.fails,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    printf(st.fails ? "test_cuda_gemm: FAILED\n" : "test_cuda_gemm: all passed\n");
    return st.fails ? 1 : 0;
}
