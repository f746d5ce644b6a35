/* Twin test of ts_cuda_matmul (src/cuda/matmul.cu) against ts_cpu_matmul (src/cpu/ops.c), run on
 * the GPU machine (`ctest -L cuda`), never in CI.
 *
 * For every type the kernels read: random Gaussian weights (a per-row scale, an offset on some rows
 * so the K-quant mins matter) quantized with ts_quantize_row (IQ1_S / IQ2_XXS / IQ2_XS with equal
 * importance weights: quantize_row_any), random activations, then the same tensor
 * bytes through both twins. Shapes: rows of 32·k / 256·k elements (160, 320, 640 / 256, 768, and
 * 2560, 6144 for all; plain types also 100, which takes the scalar path), 1, 3, 640, 2557 and 10240
 * outputs, T = 1, 2, 3, 5, 8 and 11 (two launches), row0 ≠ 0 inside 3-D expert tensors, and rows
 * per warp automatic and forced to 1, 2 and 4 (R=4 exists for T = 1 only, larger T falls back to
 * 2), and x read through L1 instead of shared memory ("x-L1"; also what T·ne0 > 12288 takes). The output is
 * poisoned with NaN before each launch, so an unwritten element fails.
 *
 * Bound: both twins decode the same exact weights and sum in fp32 in different orders, so
 *     |y_gpu − y_cpu| ≤ REL_BOUND · Σ_i |w_i·x_i|        for every output
 * with REL_BOUND = 2e-5: each side's error is a few ulps of Σ|w·x| (summation depth ≈ 30 on the
 * GPU; the K-quant min split a·Σq·x + b·Σx can cancel, which costs up to ~4× more). A wrong
 * element, scale or row gives errors of order 1e-2 and more. The error against a double-precision
 * sum of the dequantized weights is printed too. */
#include "cpu/cpu.h"
#include "cuda/cuda_common.h"
#include "cuda/gemm_tc.h"
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
    TS_TYPE_F32,   TS_TYPE_F16,     TS_TYPE_BF16,   TS_TYPE_Q8_0,  TS_TYPE_Q4_0,    TS_TYPE_Q5_0,
    TS_TYPE_Q5_1,  TS_TYPE_IQ4_NL,  TS_TYPE_Q4_K,   TS_TYPE_Q5_K,  TS_TYPE_Q6_K,    TS_TYPE_Q2_K,
    TS_TYPE_Q3_K,  TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S, TS_TYPE_IQ3_XXS, TS_TYPE_IQ3_S,
    TS_TYPE_IQ1_S, TS_TYPE_IQ1_M,   TS_TYPE_Q4_1,   TS_TYPE_IQ4_XS};
enum { N_TYPES = sizeof k_types / sizeof k_types[0] };

/* ---- the tensor under test --------------------------------------------------------------------- */

typedef struct {
    uint32_t type;
    int64_t ne0, rows;
    size_t rb;
    uint8_t *data; /* rows × rb; only [row0, row0 + n_out) filled, the rest zero */
    uint64_t seed;
    int64_t row0, n_out;
    int failed;
    char err[256];
} qjob;

static void quantize_rows(void *ctx, int64_t i0, int64_t i1) {
    qjob *q = ctx;
    float *src = malloc((size_t)q->ne0 * sizeof *src);
    char err[256];
    for (int64_t o = i0; o < i1; o++) {
        const int64_t row = q->row0 + o;
        rng_t r = {mix64(q->seed ^ (uint64_t)row * 0x100000001B3ull)};
        const double scale = 0.05 + 2.0 * rng_unit(&r), shift = (row % 3 == 0) ? 1.5 * scale : 0.0;
        for (int64_t i = 0; i < q->ne0; i++) src[i] = (float)(scale * rng_gauss(&r) + shift);
        if (quantize_row_any(q->type, src, q->data + (size_t)row * q->rb, q->ne0, err, sizeof err) != 0) {
            q->failed = 1;
            snprintf(q->err, sizeof q->err, "%s", err);
        }
    }
    free(src);
}

/* Per output: the double-precision sum and Σ|w·x| of the dequantized row. */
typedef struct {
    const qjob *q;
    const float *x;
    int64_t T;
    double *ref, *mag; /* T × n_out */
} refjob;

static void reference_rows(void *ctx, int64_t i0, int64_t i1) {
    refjob *j = ctx;
    const qjob *q = j->q;
    float *w = malloc((size_t)q->ne0 * sizeof *w);
    char err[256];
    for (int64_t o = i0; o < i1; o++) {
        ts_dequantize_row(q->type, q->data + (size_t)(q->row0 + o) * q->rb, w, q->ne0, err, sizeof err);
        for (int64_t t = 0; t < j->T; t++) {
            const float *xt = j->x + t * q->ne0;
            double s = 0, m = 0;
            for (int64_t i = 0; i < q->ne0; i++) {
                const double p = (double)w[i] * (double)xt[i];
                s += p;
                m += fabs(p);
            }
            j->ref[t * q->n_out + o] = s;
            j->mag[t * q->n_out + o] = m;
        }
    }
    free(w);
}

typedef struct {
    int64_t ne0, ne1, ne2; /* tensor shape (rows = ne1·ne2) */
    int64_t row0, n_out;
    int T[5];
    int nT;
    int variants[5]; /* GPU runs: rows per warp forced to v (0 = automatic); -1: automatic, x read
                        through L1 instead of shared memory */
    int nV;
} tcase;

typedef struct {
    double worst_cpu, worst_ref; /* max |gpu − cpu| / Σ|w·x| and max |gpu − double| / Σ|w·x| */
    int runs, fails;
} tstats;

static int block_of(uint32_t type) {
    return (int)ts_type_get(type)->block_size;
}

static void run_case(uint32_t type, const tcase *c, uint64_t seed, tstats *st) {
    const int64_t rows = c->ne1 * c->ne2;
    qjob q = {.type = type,
              .ne0 = c->ne0,
              .rows = rows,
              .rb = ts_row_size(type, c->ne0),
              .seed = seed,
              .row0 = c->row0,
              .n_out = c->n_out};
    q.data = calloc((size_t)rows, q.rb);
    if (!q.data) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    parallel_for(c->n_out, quantize_rows, &q);
    if (q.failed) {
        printf("  %s: quantizing failed: %s\n", ts_type_name(type), q.err);
        st->fails++;
        free(q.data);
        return;
    }

    ts_gguf_tensor host = {0};
    host.n_dims = c->ne2 > 1 ? 3 : 2;
    host.ne[0] = c->ne0;
    host.ne[1] = c->ne1;
    host.ne[2] = c->ne2;
    host.ne[3] = 1;
    host.type = type;
    host.nelements = c->ne0 * rows;
    host.nbytes = (uint64_t)q.rb * (uint64_t)rows;
    host.data = q.data;
    host.name.ptr = "test";
    host.name.len = 4;

    ts_cuda_tensor dev;
    char err[256];
    if (ts_cuda_tensor_upload(&host, &dev, err, sizeof err) != 0) {
        printf("  upload failed: %s\n", err);
        st->fails++;
        free(q.data);
        return;
    }

    for (int it = 0; it < c->nT; it++) {
        const int64_t T = c->T[it];
        float *x = malloc((size_t)(T * c->ne0) * sizeof *x);
        float *y_cpu = malloc((size_t)(T * c->n_out) * sizeof *y_cpu);
        float *y_gpu = malloc((size_t)(T * c->n_out) * sizeof *y_gpu);
        double *ref = malloc((size_t)(T * c->n_out) * sizeof *ref);
        double *mag = malloc((size_t)(T * c->n_out) * sizeof *mag);
        rng_t r = {mix64(seed * 31 + (uint64_t)T)};
        for (int64_t i = 0; i < T * c->ne0; i++) x[i] = (float)rng_gauss(&r);

        /* the reference of the tensor-core path rounds x as it does ("auto" variant only) */
        const int64_t group = ts_cuda_matmul_rounds_x(type, c->ne0, T, c->row0, c->n_out);
        float *xr = malloc((size_t)(T * c->ne0) * sizeof *xr);
        if (group)
            ts_round_x_like_tc(x, T * c->ne0, group, xr); /* quant.h, as the kernel rounds it */
        else
            memcpy(xr, x, (size_t)(T * c->ne0) * sizeof *xr);
        float *y_cpu_r = malloc((size_t)(T * c->n_out) * sizeof *y_cpu_r);
        ts_cpu_matmul(&host, c->row0, c->n_out, x, T, y_cpu);
        ts_cpu_matmul(&host, c->row0, c->n_out, xr, T, y_cpu_r);
        refjob rj = {&q, x, T, ref, mag};
        parallel_for(c->n_out, reference_rows, &rj);

        float *x_dev, *y_dev;
        TS_CUDA_CHECK(cudaMalloc((void **)&x_dev, (size_t)(T * c->ne0) * sizeof(float)));
        TS_CUDA_CHECK(cudaMalloc((void **)&y_dev, (size_t)(T * c->n_out) * sizeof(float)));
        TS_CUDA_CHECK(cudaMemcpy(x_dev, x, (size_t)(T * c->ne0) * sizeof(float), cudaMemcpyHostToDevice));
        for (int iv = 0; iv < c->nV; iv++) {
            const int v = c->variants[iv];
            char vname[16];
            if (v > 0)
                snprintf(vname, sizeof vname, "R=%d", v);
            else
                snprintf(vname, sizeof vname, "%s", v == 0 ? (group ? "tc" : "auto") : "x-L1");
            TS_CUDA_CHECK(cudaMemset(y_dev, 0xFF, (size_t)(T * c->n_out) * sizeof(float))); /* NaN poison */
            ts_cuda_matmul_force_rows_per_warp(v > 0 ? v : 0);
            ts_cuda_matmul_allow_x_shared(v >= 0);
            const int rc = ts_cuda_matmul(&dev, c->row0, c->n_out, x_dev, T, y_dev, 0);
            ts_cuda_matmul_force_rows_per_warp(0);
            ts_cuda_matmul_allow_x_shared(true);
            TS_CUDA_CHECK(cudaDeviceSynchronize());
            TS_CUDA_CHECK(
                cudaMemcpy(y_gpu, y_dev, (size_t)(T * c->n_out) * sizeof(float), cudaMemcpyDeviceToHost));

            double worst_cpu = 0, worst_ref = 0;
            int64_t bad = 0, first_bad = -1;
            const float *cpu = (v == 0 && group) ? y_cpu_r : y_cpu;
            for (int64_t i = 0; i < T * c->n_out; i++) {
                const double m = mag[i] > 0 ? mag[i] : 1e-30;
                const double ec = fabs((double)y_gpu[i] - (double)cpu[i]) / m;
                const double er = fabs((double)y_gpu[i] - ref[i]) / m;
                if (!(ec <= REL_BOUND)) {
                    if (first_bad < 0) first_bad = i;
                    bad++;
                }
                if (ec > worst_cpu || ec != ec) worst_cpu = ec != ec ? INFINITY : ec;
                if (er > worst_ref || er != er) worst_ref = er != er ? INFINITY : er;
            }
            const int ok = rc == 0 && bad == 0;
            printf("  %-6s ne0 %5lld rows %6lld row0 %5lld n_out %5lld T %2lld %-4s: %s  |gpu-cpu|/S %.2e  "
                   "|gpu-f64|/S %.2e\n",
                   ts_type_name(type), (long long)c->ne0, (long long)rows, (long long)c->row0,
                   (long long)c->n_out, (long long)T, vname, ok ? "ok  " : "FAIL", worst_cpu, worst_ref);
            if (!ok) {
                if (rc != 0) printf("    ts_cuda_matmul returned %d\n", rc);
                if (first_bad >= 0)
                    printf("    %lld outputs out of bound; first t %lld o %lld: gpu %.9g cpu %.9g f64 %.9g S "
                           "%.3g\n",
                           (long long)bad, (long long)(first_bad / c->n_out),
                           (long long)(first_bad % c->n_out), (double)y_gpu[first_bad],
                           (double)cpu[first_bad], ref[first_bad], mag[first_bad]);
                st->fails++;
            }
            if (worst_cpu > st->worst_cpu) st->worst_cpu = worst_cpu;
            if (worst_ref > st->worst_ref) st->worst_ref = worst_ref;
            st->runs++;
        }
        TS_CUDA_CHECK(cudaFree(x_dev));
        TS_CUDA_CHECK(cudaFree(y_dev));
        free(x);
        free(xr);
        free(y_cpu_r);
        free(y_cpu);
        free(y_gpu);
        free(ref);
        free(mag);
    }
    ts_cuda_tensor_free(&dev);
    free(q.data);
}

/* Expert products (ts_cuda_matmul_experts) of a pair of 3-D tensors [2560, 640, 6] against the CPU,
 * x rounded as the kernel rounds it when it does (the tensor-core types): items of x_div = 5
 * (gate/up: two tokens of five experts) and x_div = 1 (each item its own x row), two items with
 * out-of-range ids (NaN outputs). The tensor-core types and the low-bit types of the UD-style mixes. */
static int run_experts_case(uint32_t type, uint64_t seed, int x_div) {
    const int64_t ne0 = 2560, rpe = 640, E = 6, n_items = 10, n_out = 640;
    const size_t rb = ts_row_size(type, ne0);
    qjob q[2];
    ts_gguf_tensor host[2];
    ts_cuda_tensor dev[2];
    char err[256];
    for (int p = 0; p < 2; p++) {
        q[p] = (qjob){.type = type,
                      .ne0 = ne0,
                      .rows = rpe * E,
                      .rb = rb,
                      .seed = seed + 17 * p,
                      .row0 = 0,
                      .n_out = rpe * E};
        q[p].data = calloc((size_t)(rpe * E), rb);
        parallel_for(rpe * E, quantize_rows, &q[p]);
        host[p] = (ts_gguf_tensor){.n_dims = 3,
                                   .ne = {ne0, rpe, E, 1},
                                   .type = type,
                                   .nelements = ne0 * rpe * E,
                                   .nbytes = (uint64_t)rb * (uint64_t)(rpe * E),
                                   .data = q[p].data};
        host[p].name.ptr = "experts", host[p].name.len = 7;
        if (ts_cuda_tensor_upload(&host[p], &dev[p], err, sizeof err)) {
            printf("  upload failed: %s\n", err);
            return 1;
        }
    }
    const int64_t nx = (n_items + x_div - 1) / x_div, ys = 2 * n_out;
    int32_t ids[10];
    rng_t r = {mix64(seed)};
    for (int i = 0; i < n_items; i++) ids[i] = (int32_t)(rng_unit(&r) * E) % (int32_t)E;
    ids[3] = -1, ids[7] = 99;
    float *x = malloc((size_t)(nx * ne0) * sizeof *x), *xr = malloc((size_t)(nx * ne0) * sizeof *xr);
    for (int64_t i = 0; i < nx * ne0; i++) x[i] = (float)rng_gauss(&r);
    const int64_t group = ts_cuda_matmul_experts_rounds_x(type, ne0, n_items, x_div, true, rpe, 0, n_out);
    const int rounds = group != 0;
    if (rounds)
        ts_round_x_like_tc(x, nx * ne0, group, xr);
    else
        memcpy(xr, x, (size_t)(nx * ne0) * sizeof *xr);
    float *x_d, *y_d;
    int32_t *ids_d;
    float *y = malloc((size_t)(n_items * ys) * sizeof *y), *ref = malloc((size_t)n_out * sizeof *ref);
    TS_CUDA_CHECK(cudaMalloc((void **)&x_d, (size_t)(nx * ne0) * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y_d, (size_t)(n_items * ys) * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, sizeof ids));
    TS_CUDA_CHECK(cudaMemcpy(x_d, x, (size_t)(nx * ne0) * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof ids, cudaMemcpyHostToDevice));
    /* zeros, not NaN: the bad ids' outputs must be written as NaN, the others as their sums */
    TS_CUDA_CHECK(cudaMemset(y_d, 0, (size_t)(n_items * ys) * sizeof(float)));
    const int rc =
        ts_cuda_matmul_experts(&dev[0], &dev[1], ids_d, n_items, rpe, 0, n_out, x_d, x_div, ne0, y_d, ys, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(y, y_d, (size_t)(n_items * ys) * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0;
    int64_t bad = 0;
    float *w = malloc((size_t)ne0 * sizeof *w);
    for (int i = 0; i < n_items; i++) {
        const float *xi = xr + (i / x_div) * ne0, *xo = x + (i / x_div) * ne0;
        for (int p = 0; p < 2; p++) {
            const float *yi = y + i * ys + p * n_out;
            if (ids[i] < 0 || ids[i] >= E) {
                for (int64_t o = 0; o < n_out; o++) bad += yi[o] == yi[o]; /* must be NaN */
                continue;
            }
            ts_cpu_matmul(&host[p], ids[i] * rpe, n_out, xi, 1, ref);
            for (int64_t o = 0; o < n_out; o++) {
                ts_dequantize_row(type, q[p].data + (size_t)(ids[i] * rpe + o) * rb, w, ne0, err, sizeof err);
                double m = 0;
                for (int64_t c = 0; c < ne0; c++) m += fabs((double)w[c] * xo[c]);
                const double e = fabs((double)yi[o] - ref[o]) / (m > 0 ? m : 1e-30);
                if (!(e <= REL_BOUND)) bad++;
                if (e > worst || e != e) worst = e != e ? INFINITY : e;
            }
        }
    }
    printf("  experts %-7s 2560 -> 2 x 640, 10 items, x_div %d%s: %s  |gpu-cpu|/S %.2e\n", ts_type_name(type),
           x_div, rounds ? " (tc)" : "", rc == 0 && bad == 0 ? "ok  " : "FAIL", worst);
    TS_CUDA_CHECK(cudaFree(x_d));
    TS_CUDA_CHECK(cudaFree(y_d));
    TS_CUDA_CHECK(cudaFree(ids_d));
    for (int p = 0; p < 2; p++) ts_cuda_tensor_free(&dev[p]), free(q[p].data);
    free(x), free(xr), free(y), free(ref), free(w);
    return rc != 0 || bad != 0;
}

/* Argument checks that need no data: invalid calls are refused and enqueue nothing. */
static int check_refusals(void) {
    ts_cuda_tensor w = {
        .type = TS_TYPE_Q8_0, .ne0 = 64, .rows = 4, .row_bytes = ts_row_size(TS_TYPE_Q8_0, 64)};
    void *buf;
    float *x, *y;
    TS_CUDA_CHECK(cudaMalloc(&buf, 4 * w.row_bytes + 16));
    TS_CUDA_CHECK(cudaMalloc((void **)&x, 64 * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y, 64 * sizeof(float)));
    w.data = buf;
    int bad = 0;
    bad += ts_cuda_matmul(&w, 0, 4, x, 1, y, 0) != 0;  /* valid */
    bad += ts_cuda_matmul(&w, 1, 4, x, 1, y, 0) != -1; /* rows out of range */
    bad += ts_cuda_matmul(&w, -1, 1, x, 1, y, 0) != -1;
    bad += ts_cuda_matmul(&w, 0, 1, x + 1, 1, y, 0) != -1; /* misaligned x */
    bad += ts_cuda_matmul(&w, 0, 0, x, 1, y, 0) != 0;      /* empty is fine */
    w.type = TS_TYPE_TQ1_0;
    bad += ts_cuda_matmul(&w, 0, 1, x, 1, y, 0) != -1; /* unsupported type */
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaFree(buf));
    TS_CUDA_CHECK(cudaFree(x));
    TS_CUDA_CHECK(cudaFree(y));
    printf("argument refusals: %s\n", bad ? "FAIL" : "ok");
    return bad;
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("test_cuda_matmul: no CUDA device; this test runs on the GPU machine only\n");
        return 1;
    }
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0; /* skips the 10240-row cases */
    const uint64_t seed = 0x5EEDull + (uint64_t)time(NULL);        /* fresh inputs every run */
    printf("test_cuda_matmul: seed %llu, bound |gpu - cpu| <= %.0e * sum|w*x|\n", (unsigned long long)seed,
           REL_BOUND);
    int fails = check_refusals();
    /* x records of the tensor-core GEMM (gemm_tc.h): enough for 128 rows of 10240 inputs */
    void *tcx = NULL;
    const size_t tcx_bytes = (size_t)128 * 10240 / 128 * 288;
    TS_CUDA_CHECK(cudaMalloc(&tcx, tcx_bytes));
    ts_cuda_tc_scratch_set(tcx, tcx_bytes);
    tstats stats[N_TYPES];
    memset(stats, 0, sizeof stats);
    const double t_start = (double)clock();
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = k_types[ti];
        const int k = block_of(type) == 256;
        const int plain = block_of(type) == 1;
        const tcase cases[] = {
            /* small, row0 inside a 3-D expert tensor */
            {k ? 256 : 160, 5, 3, 7, 3, {1, 2, 5, 8}, 4, {0}, 1},
            {k ? 768 : 320, 1, 1, 0, 1, {1, 5}, 2, {0, -1}, 2},
            {k ? 256 : 640, 9, 1, 2, 7, {3}, 1, {0, 4}, 2},
            /* an expert slice: 2560 → 640 of expert 2 of 3 */
            /* (T = 11, 16: one tensor-core launch of 16 tokens; 40: launches of 16, 16 and 8; 100: the
               tensor-core GEMM, two token tiles of 64, the second partial) */
            {2560, 640, 3, 1280, 640, {1, 11, 16, 40, 100}, 5, {0, 1, 2, 4, -1}, 5},
            /* 6144 → 2560 with an odd number of rows and row0 ≠ 0 (T = 12, 20: launches of 8 tokens where
               16 rows of x do not fit in shared memory; 70: the tensor-core GEMM, rows of Q6_K, Q8_0 and
               Q5_0 not 16-byte aligned) */
            {6144, 2560, 1, 3, 2557, {1, 2, 12, 20, 70}, 5, {0, 1, 2, 4, -1}, 5},
            /* 2560 → 10240 */
            {2560, 10240, 1, 0, 10240, {1, 8}, 2, {0, 1, 4}, 3},
            /* plain types only: a row length that is not a multiple of 8 (scalar path) */
            {100, 7, 1, 2, 5, {1, 3, 9}, 3, {0}, 1},
        };
        const int n_cases = (int)(sizeof cases / sizeof cases[0]);
        for (int ci = 0; ci < n_cases; ci++) {
            if (ci == n_cases - 1 && !plain) continue;
            if (quick && cases[ci].n_out == 10240) continue;
            run_case(type, &cases[ci], seed + (uint64_t)ti * 1000 + (uint64_t)ci, &stats[ti]);
        }
    }
    fails += run_experts_case(TS_TYPE_Q4_K, seed + 99, 5);
    fails += run_experts_case(TS_TYPE_Q4_K, seed + 98, 1);
    { /* the other tensor-core types, both ways: 2 x rows staged whole, 10 items each its own x row (more
         than kTcExpertXRows: staged one at a time) */
        const uint32_t tc[] = {TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_Q8_0, TS_TYPE_Q5_0};
        for (int i = 0; i < 4; i++)
            for (int xd = 0; xd < 2; xd++)
                fails += run_experts_case(tc[i], seed + 300 + (uint64_t)(2 * i + xd), xd ? 1 : 5);
    }
    {
        const uint32_t low_bit[] = {TS_TYPE_Q2_K,   TS_TYPE_Q3_K,  TS_TYPE_IQ2_XXS,
                                    TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S, TS_TYPE_IQ3_XXS,
                                    TS_TYPE_IQ3_S,  TS_TYPE_IQ1_S, TS_TYPE_IQ1_M};
        for (int i = 0; i < (int)(sizeof low_bit / sizeof low_bit[0]); i++)
            fails += run_experts_case(low_bit[i], seed + 200 + (uint64_t)i, i % 2 ? 1 : 5);
    }
    printf("\n%-8s %5s %14s %14s  %s\n", "type", "runs", "max|gpu-cpu|/S", "max|gpu-f64|/S", "result");
    for (int ti = 0; ti < N_TYPES; ti++) {
        printf("%-8s %5d %14.3e %14.3e  %s\n", ts_type_name(k_types[ti]), stats[ti].runs, stats[ti].worst_cpu,
               stats[ti].worst_ref, stats[ti].fails ? "FAIL" : "ok");
        fails += stats[ti].fails;
    }
    printf("S = sum_i |w_i*x_i| of each output; bound %.0e; CPU time %.1f s\n", REL_BOUND,
           ((double)clock() - t_start) / CLOCKS_PER_SEC);
    printf(fails ? "test_cuda_matmul: FAILED\n" : "test_cuda_matmul: all passed\n");
    return fails ? 1 : 0;
}
