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
 * poisoned with NaN before each launch, so an unwritten element fails. Also: expert products
 * (run_experts_case), the shared expert's gate/up and down riding in the routed launches
 * (run_shared_merge_case, run_shared_down_case), the planned expert products (an expert's items as one
 * chunk's tokens: run_planned_case), a dense product's tokens equal to each token alone (run_alone_case),
 * and the split product of a hyper-connection read, plain and with the write before it made on the way
 * in (run_split_case).
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
#include "cuda/layers.h"
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

/* How many of n floats differ in their bits (NaN payloads included). */
static int64_t bits_differ(const float *a, const float *b, size_t n) {
    int64_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* A host copy of n floats of device memory (malloc'ed). */
static float *to_host(const float *d, size_t n) {
    float *h = malloc(n * sizeof *h);
    TS_CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* A merged launch's outcome (ts_cuda_matmul_experts_shared*: 0 merged, 1 not, -1 refused). */
static const char *merge_outcome(int merged) {
    return merged == 0 ? "merged" : merged > 0 ? "NOT merged" : "refused";
}

/* n weight tensors of this type and width, tensor p of ne1[p] × ne2[p] rows (3-D where ne2[p] > 1), random
 * as quantize_rows makes them (seed + 31·p), quantized on the host and uploaded; 0, or 1 with everything
 * freed and a line printed. */
static int make_weights(int n, uint32_t type, int64_t ne0, const int64_t *ne1, const int64_t *ne2,
                        uint64_t seed, qjob *q, ts_gguf_tensor *host, ts_cuda_tensor *dev) {
    const size_t rb = ts_row_size(type, ne0);
    char err[256];
    int uploaded = 0;
    for (int p = 0; p < n; p++) {
        const int64_t rows = ne1[p] * ne2[p];
        q[p] = (qjob){
            .type = type, .ne0 = ne0, .rows = rows, .rb = rb, .seed = seed + 31 * (uint64_t)p, .n_out = rows};
        q[p].data = calloc((size_t)rows, rb);
        parallel_for(rows, quantize_rows, &q[p]);
        host[p] = (ts_gguf_tensor){.n_dims = ne2[p] > 1 ? 3 : 2,
                                   .ne = {ne0, ne1[p], ne2[p], 1},
                                   .type = type,
                                   .nelements = ne0 * rows,
                                   .nbytes = (uint64_t)rb * (uint64_t)rows,
                                   .data = q[p].data};
        host[p].name.ptr = "weights", host[p].name.len = 7;
        if (uploaded == p && ts_cuda_tensor_upload(&host[p], &dev[p], err, sizeof err) == 0)
            uploaded++;
        else if (uploaded == p)
            printf("  upload failed: %s\n", err);
    }
    if (uploaded == n) return 0;
    for (int p = 0; p < uploaded; p++) ts_cuda_tensor_free(&dev[p]);
    for (int p = 0; p < n; p++) free(q[p].data);
    return 1;
}

static void free_weights(int n, qjob *q, ts_cuda_tensor *dev) {
    for (int p = 0; p < n; p++) ts_cuda_tensor_free(&dev[p]), free(q[p].data);
}

/* The split product of a hyper-connection read, plain (ts_cuda_matmul_split) and with the write before it
 * made on the way in (ts_cuda_matmul_split_hc_write): C = 4 streams of H = 256 inputs (Q4_K), r + C = 36
 * rows, T tokens (6: launches of 4 and 2). Every value is exact on both sides
 * (fmaf, one product, float sums in the kernel's order), so the written streams, their sums of squares
 * (each slice's warps summed by butterfly, as hc_write_ss_kernel) and the products equal the CPU's and
 * the plain split product's on the same x bit for bit. */
static float bfly_slice_sum(const float *sq, int slice) {
    float total = 0.0f;
    for (int w = 0; w < slice / 32; w++) {
        float a[32], b[32];
        memcpy(a, sq + 32 * w, sizeof a);
        for (int o = 16; o > 0; o >>= 1) {
            for (int l = 0; l < 32; l++) b[l] = a[l] + a[l ^ o];
            memcpy(a, b, sizeof a);
        }
        total += a[0];
    }
    return total;
}

static int run_split_case(int T, uint64_t seed) {
    enum { C = 4, H = 256, NP = 36, SLICE = 256 };
    const int64_t Wd = (int64_t)C * H;
    const uint32_t type = TS_TYPE_Q4_K;
    const size_t rb = ts_row_size(type, Wd);
    qjob q = {.type = type, .ne0 = Wd, .rows = NP, .rb = rb, .seed = seed, .row0 = 0, .n_out = NP};
    q.data = calloc(NP, rb);
    parallel_for(NP, quantize_rows, &q);
    ts_gguf_tensor host = {.n_dims = 2,
                           .ne = {Wd, NP, 1, 1},
                           .type = type,
                           .nelements = Wd * NP,
                           .nbytes = (uint64_t)rb * NP,
                           .data = q.data};
    host.name.ptr = "split", host.name.len = 5;
    ts_cuda_tensor dev;
    char err[256];
    if (ts_cuda_tensor_upload(&host, &dev, err, sizeof err)) {
        printf("  upload failed: %s\n", err);
        free(q.data);
        return 1;
    }
    rng_t r = {mix64(seed * 7 + 1)};
    const size_t nR = (size_t)T * Wd, nH = (size_t)T * H;
    float *R = malloc(nR * sizeof *R), *y = malloc(nH * sizeof *y),
          *inj = malloc((size_t)T * C * sizeof *inj);
    float *g = malloc((size_t)Wd * sizeof *g);
    for (size_t i = 0; i < nR; i++) R[i] = (float)rng_gauss(&r);
    for (size_t i = 0; i < nH; i++) y[i] = (float)rng_gauss(&r);
    for (int i = 0; i < T * C; i++) inj[i] = (float)(2.0 * rng_unit(&r));
    for (int64_t i = 0; i < Wd; i++) g[i] = (float)(0.5 + rng_unit(&r));

    /* the CPU: v, x = v ⊙ g, the slices' sums of squares */
    float *v = malloc(nR * sizeof *v), *xg = malloc(nR * sizeof *xg),
          *ss = malloc((size_t)T * C * sizeof *ss);
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < C; c++) {
            float sq[SLICE];
            for (int i = 0; i < H; i++) {
                const size_t e = (size_t)t * Wd + (size_t)c * H + i;
                v[e] = fmaf(y[t * H + i], inj[t * C + c], R[e]);
                xg[e] = v[e] * g[c * H + i];
                sq[i] = v[e] * v[e];
            }
            ss[t * C + c] = bfly_slice_sum(sq, SLICE); /* H = SLICE: one slice a stream */
        }
    }

    float *R_d, *y_d, *inj_d, *g_d, *v_d, *ss_d, *xg_d, *P_d, *P2_d;
    const size_t nP = (size_t)C * T * NP;
#define DEV(p, n, src)                                                                                       \
    do {                                                                                                     \
        TS_CUDA_CHECK(cudaMalloc((void **)&p, (n) * sizeof(float)));                                         \
        if (src) TS_CUDA_CHECK(cudaMemcpy(p, src, (n) * sizeof(float), cudaMemcpyHostToDevice));             \
    } while (0)
    DEV(R_d, nR, R);
    DEV(y_d, nH, y);
    DEV(inj_d, (size_t)T * C, inj);
    DEV(g_d, (size_t)Wd, g);
    DEV(xg_d, nR, xg);
    DEV(v_d, nR, (float *)NULL);
    DEV(ss_d, (size_t)T * C, (float *)NULL);
    DEV(P_d, nP, (float *)NULL);
    DEV(P2_d, nP, (float *)NULL);
#undef DEV
    TS_CUDA_CHECK(cudaMemset(v_d, 0xFF, nR * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(ss_d, 0xFF, (size_t)T * C * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(P_d, 0xFF, nP * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(P2_d, 0xFF, nP * sizeof(float)));
    const ts_cuda_hc_write_in in = {R_d, y_d, inj_d, g_d, SLICE, v_d, ss_d};
    int rc = ts_cuda_matmul_split_hc_write(&dev, NP, C, &in, T, P_d, 0);
    rc |= ts_cuda_matmul_split(&dev, NP, C, xg_d, T, Wd, P2_d, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    float *gv = malloc(nR * sizeof *gv), *gss = malloc((size_t)T * C * sizeof *gss);
    float *gP = malloc(nP * sizeof *gP), *gP2 = malloc(nP * sizeof *gP2);
    TS_CUDA_CHECK(cudaMemcpy(gv, v_d, nR * sizeof(float), cudaMemcpyDeviceToHost));
    TS_CUDA_CHECK(cudaMemcpy(gss, ss_d, (size_t)T * C * sizeof(float), cudaMemcpyDeviceToHost));
    TS_CUDA_CHECK(cudaMemcpy(gP, P_d, nP * sizeof(float), cudaMemcpyDeviceToHost));
    TS_CUDA_CHECK(cudaMemcpy(gP2, P2_d, nP * sizeof(float), cudaMemcpyDeviceToHost));

    int64_t bad_p = 0;
    const int64_t bad_v = bits_differ(gv, v, nR), bad_ss = bits_differ(gss, ss, (size_t)T * C);
    const int64_t bad_same = bits_differ(gP, gP2, nP);
    double worst = 0;
    float *w = malloc((size_t)Wd * sizeof *w);
    for (int o = 0; o < NP; o++) {
        ts_dequantize_row(type, q.data + (size_t)o * rb, w, Wd, err, sizeof err);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double sum = 0, mag = 0;
                for (int i = 0; i < H; i++) {
                    const double p = (double)w[c * H + i] * xg[(size_t)t * Wd + (size_t)c * H + i];
                    sum += p, mag += fabs(p);
                }
                const double e =
                    fabs((double)gP[((size_t)c * T + t) * NP + o] - sum) / (mag > 0 ? mag : 1e-30);
                if (!(e <= REL_BOUND)) bad_p++;
                if (e > worst || e != e) worst = e != e ? INFINITY : e;
            }
    }
    const int ok = rc == 0 && bad_v == 0 && bad_ss == 0 && bad_p == 0 && bad_same == 0;
    printf("  split with the hyper-connection write, T %d: %s  written %s, sums of squares %s, products "
           "|gpu-f64|/S %.2e, %s the plain split's\n",
           T, ok ? "ok  " : "FAIL", bad_v ? "differ" : "exact", bad_ss ? "differ" : "exact", worst,
           bad_same ? "NOT equal to" : "equal to");
    float *bufs[] = {R_d, y_d, inj_d, g_d, v_d, ss_d, xg_d, P_d, P2_d};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) TS_CUDA_CHECK(cudaFree(bufs[i]));
    ts_cuda_tensor_free(&dev);
    free(q.data), free(R), free(y), free(inj), free(g), free(v), free(xg), free(ss);
    free(gv), free(gss), free(gP), free(gP2), free(w);
    return !ok;
}

/* The shared expert's gate/up riding in the routed launch (ts_cuda_matmul_experts_shared) equals the two
 * launches it replaces bit for bit, routed rows (bad ids' NaN included), shared rows and the padding both
 * leave alone: N tokens of k = 3 items of 6 experts, Q4_K 512 → 2 × 128, gate|up rows fused in one tensor
 * or split in two, x, routed and shared outputs of three different strides; N = 1, 3 (x rows staged
 * whole) and 12 (one x row at a time). */
static int run_shared_merge_case(int N, int split, uint64_t seed) {
    enum { NE0 = 512, F = 128, E = 6, K = 3, XS = NE0 + 16, YS = 2 * F + 8, SY = 2 * F + 4 };
    const char *tc = getenv("TURBOSPARK_CUDA_GEMV_TC"), *xr = getenv("TURBOSPARK_TC_XROW");
    if ((tc && tc[0] == '0') || (xr && xr[0] == '0')) {
        printf(
            "  shared expert in the routed launch: skipped (the tensor-core GEMV is off, or stages no x row "
            "at a time)\n");
        return 0;
    }
    const uint32_t type = TS_TYPE_Q4_K;
    /* routed gate|up (fused) or gate and up (split), then shared gate and up */
    const int np = split ? 4 : 3;
    int64_t ne1[4], ne2[4];
    for (int p = 0; p < np; p++) {
        const int routed = p < np - 2;
        ne1[p] = routed && !split ? 2 * F : F, ne2[p] = routed ? E : 1;
    }
    qjob q[4];
    ts_gguf_tensor host[4];
    ts_cuda_tensor dev[4];
    if (make_weights(np, type, NE0, ne1, ne2, seed, q, host, dev)) return 1;
    const ts_cuda_tensor *W = &dev[0], *W2 = split ? &dev[1] : NULL, *Sg = &dev[np - 2], *Su = &dev[np - 1];
    const int64_t rpe = split ? F : 2 * F;
    const int NK = N * K;
    rng_t r = {mix64(seed)};
    int32_t ids[12 * K];
    for (int i = 0; i < NK; i++) ids[i] = (int32_t)(rng_unit(&r) * E) % E;
    ids[NK / 2] = -1;
    float *x = malloc((size_t)N * XS * sizeof *x);
    for (int64_t i = 0; i < (int64_t)N * XS; i++) x[i] = (float)rng_gauss(&r);
    float *x_d, *gu_d, *sh_d, *gu2_d, *sh2_d;
    int32_t *ids_d;
    const size_t ngu = (size_t)NK * YS, nsh = (size_t)N * SY;
    TS_CUDA_CHECK(cudaMalloc((void **)&x_d, (size_t)N * XS * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&gu_d, ngu * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&gu2_d, ngu * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&sh_d, nsh * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&sh2_d, nsh * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, (size_t)NK * sizeof(int32_t)));
    TS_CUDA_CHECK(cudaMemcpy(x_d, x, (size_t)N * XS * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, (size_t)NK * sizeof(int32_t), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(gu_d, 0xFF, ngu * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(gu2_d, 0xFF, ngu * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(sh_d, 0xFF, nsh * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(sh2_d, 0xFF, nsh * sizeof(float)));
    const int merged =
        ts_cuda_matmul_experts_shared(W, W2, ids_d, NK, rpe, rpe, x_d, K, XS, gu_d, YS, Sg, Su, sh_d, SY, 0);
    int rc = ts_cuda_matmul_experts(W, W2, ids_d, NK, rpe, 0, rpe, x_d, K, XS, gu2_d, YS, 0);
    rc |= ts_cuda_matmul_experts(Sg, Su, NULL, N, 0, 0, F, x_d, 1, XS, sh2_d, SY, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    float *gu = to_host(gu_d, ngu), *gu2 = to_host(gu2_d, ngu), *sh = to_host(sh_d, nsh),
          *sh2 = to_host(sh2_d, nsh);
    const int64_t differ = bits_differ(gu, gu2, ngu) + bits_differ(sh, sh2, nsh);
    int64_t unwritten = 0;
    for (int t = 0; t < N; t++) /* the shared rows were written (the poison is NaN) */
        for (int o = 0; o < 2 * F; o++) unwritten += sh[(size_t)t * SY + o] != sh[(size_t)t * SY + o];
    const int ok = merged == 0 && rc == 0 && differ == 0 && unwritten == 0;
    printf("  shared expert in the routed launch, %s gate|up, N %2d: %s  (%s; %lld outputs differ from two "
           "launches)\n",
           split ? "split" : "fused", N, ok ? "ok  " : "FAIL", merge_outcome(merged), (long long)differ);
    TS_CUDA_CHECK(cudaFree(x_d));
    TS_CUDA_CHECK(cudaFree(gu_d));
    TS_CUDA_CHECK(cudaFree(gu2_d));
    TS_CUDA_CHECK(cudaFree(sh_d));
    TS_CUDA_CHECK(cudaFree(sh2_d));
    TS_CUDA_CHECK(cudaFree(ids_d));
    free_weights(np, q, dev);
    free(x), free(gu), free(gu2), free(sh), free(sh2);
    return !ok;
}

/* The shared expert's down riding in the routed down launch (ts_cuda_matmul_experts_shared_down) equals
 * ts_cuda_matmul_experts plus ts_cuda_matmul bit for bit: one token's k = 10 items of 12 experts (more x rows
 * than staged whole: one at a time), h rows G = F + 8 apart, in Q4_K (F = 256) and the released downs'
 * Q5_0 and Q8_0 (F = 640), H = 4096 outputs (so that a block takes several chunks and restages x from a
 * routed row to the shared one). */
static int run_shared_down_case(uint32_t type, uint64_t seed) {
    enum { H = 4096, E = 12, K = 10 };
    const char *tc = getenv("TURBOSPARK_CUDA_GEMV_TC"), *xr = getenv("TURBOSPARK_TC_XROW");
    if ((tc && tc[0] == '0') || (xr && xr[0] == '0')) {
        printf("  shared down in the routed launch: skipped (the tensor-core GEMV is off, or takes no routed "
               "downs)\n");
        return 0;
    }
    const int64_t F = type == TS_TYPE_Q4_K ? 256 : 640, G = F + 8;
    const int64_t ne1[2] = {H, H}, ne2[2] = {E, 1};
    qjob q[2];
    ts_gguf_tensor host[2];
    ts_cuda_tensor dev[2];
    if (make_weights(2, type, F, ne1, ne2, seed, q, host, dev)) return 1;
    rng_t r = {mix64(seed)};
    int32_t ids[K];
    for (int i = 0; i < K; i++) ids[i] = (int32_t)(rng_unit(&r) * E) % E;
    ids[4] = E; /* out of range: NaN rows on both sides */
    const size_t nh = (size_t)K * G, ne = (size_t)K * H;
    float *h = malloc(nh * sizeof *h), *hs = malloc((size_t)F * sizeof *hs);
    for (size_t i = 0; i < nh; i++) h[i] = (float)rng_gauss(&r);
    for (int64_t i = 0; i < F; i++) hs[i] = (float)rng_gauss(&r);
    float *h_d, *hs_d, *eo_d, *eo2_d, *y_d, *y2_d;
    int32_t *ids_d;
    TS_CUDA_CHECK(cudaMalloc((void **)&h_d, nh * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&hs_d, (size_t)F * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&eo_d, ne * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&eo2_d, ne * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y_d, H * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y2_d, H * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, sizeof ids));
    TS_CUDA_CHECK(cudaMemcpy(h_d, h, nh * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(hs_d, hs, (size_t)F * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof ids, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, ne * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(eo2_d, 0xFF, ne * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(y_d, 0xFF, H * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(y2_d, 0xFF, H * sizeof(float)));
    const int merged = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, h_d, G, eo_d, H, &dev[1],
                                                          hs_d, F, 1, y_d, NULL, 0);
    int rc = ts_cuda_matmul_experts(&dev[0], NULL, ids_d, K, H, 0, H, h_d, 1, G, eo2_d, H, 0);
    rc |= ts_cuda_matmul(&dev[1], 0, H, hs_d, 1, y2_d, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    float *eo = to_host(eo_d, ne), *eo2 = to_host(eo2_d, ne), *y = to_host(y_d, H), *y2 = to_host(y2_d, H);
    const int64_t differ = bits_differ(eo, eo2, ne) + bits_differ(y, y2, H);
    int64_t unwritten = 0;
    for (int o = 0; o < H; o++) unwritten += y[o] != y[o];
    int ok = merged == 0 && rc == 0 && differ == 0 && unwritten == 0;
    printf("  shared down in the routed launch, %-5s %4lld -> %d: %s  (%s; %lld outputs differ from two "
           "launches)\n",
           ts_type_name(type), (long long)F, H, ok ? "ok  " : "FAIL", merge_outcome(merged),
           (long long)differ);
    /* the same launch computing h = silu(gate)·up while staging (up_off F: rows of gate then up values), against
       the launch above on the same h made on the host (its expf may differ from the device's in the last bit,
       and fp16 rounding can then move an element by 2^-11 of its group's max: a bound, not bits) */
    {
        const size_t ng = (size_t)K * 2 * F;
        float *gu = malloc(ng * sizeof *gu), *gs = malloc((size_t)(2 * F) * sizeof *gs);
        for (size_t i = 0; i < ng; i++) gu[i] = (float)rng_gauss(&r);
        for (int64_t i = 0; i < 2 * F; i++) gs[i] = (float)rng_gauss(&r);
        for (int i = 0; i < K; i++)
            for (int64_t c = 0; c < F; c++) {
                const float g = gu[(size_t)i * 2 * F + c], u = gu[(size_t)i * 2 * F + F + c];
                h[(size_t)i * G + c] = g / (1.0f + expf(-g)) * u;
            }
        for (int64_t c = 0; c < F; c++) hs[c] = gs[c] / (1.0f + expf(-gs[c])) * gs[F + c];
        float *gu_d, *gs_d;
        TS_CUDA_CHECK(cudaMalloc((void **)&gu_d, ng * sizeof(float)));
        TS_CUDA_CHECK(cudaMalloc((void **)&gs_d, (size_t)(2 * F) * sizeof(float)));
        TS_CUDA_CHECK(cudaMemcpy(gu_d, gu, ng * sizeof(float), cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemcpy(gs_d, gs, (size_t)(2 * F) * sizeof(float), cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemcpy(h_d, h, nh * sizeof(float), cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemcpy(hs_d, hs, (size_t)F * sizeof(float), cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, ne * sizeof(float)));
        TS_CUDA_CHECK(cudaMemset(y_d, 0xFF, H * sizeof(float)));
        const ts_cuda_moe_down_fused fs = {F, 0, NULL, NULL, NULL};
        const int ms = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, gu_d, 2 * F, eo_d, H,
                                                          &dev[1], gs_d, 2 * F, 1, y_d, &fs, 0);
        const int mr = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, h_d, G, eo2_d, H, &dev[1],
                                                          hs_d, F, 1, y2_d, NULL, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        float *a = to_host(eo_d, ne), *b = to_host(eo2_d, ne), *ya = to_host(y_d, H), *yb = to_host(y2_d, H);
        double amax = 0, worst = 0;
        int64_t nan_mismatch = 0;
        for (size_t i = 0; i < ne; i++) amax = fabs(b[i]) > amax ? fabs(b[i]) : amax;
        for (int o = 0; o < H; o++) amax = fabs(yb[o]) > amax ? fabs(yb[o]) : amax;
        for (size_t i = 0; i < ne + H; i++) {
            const float va = i < ne ? a[i] : ya[i - ne], vb = i < ne ? b[i] : yb[i - ne];
            if ((va != va) != (vb != vb)) nan_mismatch++;
            if (va == va && vb == vb && fabs((double)va - vb) > worst) worst = fabs((double)va - vb);
        }
        worst /= amax > 0 ? amax : 1;
        const int ok2 = ms == 0 && mr == 0 && nan_mismatch == 0 && worst <= 1e-3;
        printf("  ... with the SwiGLU staged (up_off %lld): %s  (%s; max|d| %.2e of max|y|, %lld NaN "
               "mismatches)\n",
               (long long)F, ok2 ? "ok  " : "FAIL", merge_outcome(ms), worst, (long long)nan_mismatch);
        ok = ok && ok2;
        /* and the combine in the launch: y = σ(sg)·y + Σ_j tw_j·eo_j by the block completing each row tile, twice
           in a row (the counters must be left zero), against the same sum on the host from the outputs of the
           launch without it (its sigmoid's expf may differ from the device's in the last bit, and the routed h is
           rounded once more here: a bound); every id in range here, or every combined value would be NaN */
        ids[4] = ids[3];
        TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, sizeof ids, cudaMemcpyHostToDevice));
        const int m0 = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, gu_d, 2 * F, eo_d, H,
                                                          &dev[1], gs_d, 2 * F, 1, y_d, &fs, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        free(a), free(ya);
        a = to_host(eo_d, ne), ya = to_host(y_d, H);
        float sg = (float)rng_gauss(&r), tw[K];
        for (int j = 0; j < K; j++) tw[j] = (float)rng_unit(&r);
        float *sg_d, *tw_d;
        unsigned *cnt_d;
        TS_CUDA_CHECK(cudaMalloc((void **)&sg_d, sizeof sg));
        TS_CUDA_CHECK(cudaMalloc((void **)&tw_d, sizeof tw));
        TS_CUDA_CHECK(cudaMalloc((void **)&cnt_d, (H / 8) * sizeof(unsigned)));
        TS_CUDA_CHECK(cudaMemcpy(sg_d, &sg, sizeof sg, cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemcpy(tw_d, tw, sizeof tw, cudaMemcpyHostToDevice));
        TS_CUDA_CHECK(cudaMemset(cnt_d, 0, (H / 8) * sizeof(unsigned)));
        const ts_cuda_moe_down_fused fc = {F, 1, cnt_d, sg_d,
                                           tw_d}; /* the routed h pre-rounded, as moe.cu asks */
        int mc = 0;
        for (int rep = 0; rep < 2; rep++)
            mc |= ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, gu_d, 2 * F, eo_d, H, &dev[1],
                                                     gs_d, 2 * F, 1, y_d, &fc, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        float *yc = to_host(y_d, H);
        unsigned cnt[H / 8];
        TS_CUDA_CHECK(cudaMemcpy(cnt, cnt_d, sizeof cnt, cudaMemcpyDeviceToHost));
        int64_t left = 0, nan_c = 0;
        for (int i = 0; i < H / 8; i++) left += cnt[i] != 0;
        double wc = 0, c_max = 0;
        const float sgm = 1.0f / (1.0f + expf(-sg));
        for (int o = 0; o < H; o++) {
            float acc = ya[o] * sgm;
            for (int j = 0; j < K; j++) acc += tw[j] * a[(size_t)j * H + o];
            if ((acc != acc) != (yc[o] != yc[o])) nan_c++;
            if (acc == acc && yc[o] == yc[o]) {
                wc = fabs((double)acc - yc[o]) > wc ? fabs((double)acc - yc[o]) : wc;
                c_max = fabs(acc) > c_max ? fabs(acc) : c_max;
            }
        }
        wc /= c_max > 0 ? c_max : 1;
        const int ok3 = m0 == 0 && mc == 0 && left == 0 && nan_c == 0 && c_max > 0 && wc <= 1e-5;
        printf("  ... and the combine in the launch: %s  (max|d| %.2e of max|y|, %lld NaN mismatches, %lld "
               "counters "
               "left)\n",
               ok3 ? "ok  " : "FAIL", wc, (long long)nan_c, (long long)left);
        ok = ok && ok3;
        TS_CUDA_CHECK(cudaFree(sg_d));
        TS_CUDA_CHECK(cudaFree(tw_d));
        TS_CUDA_CHECK(cudaFree(cnt_d));
        free(yc);
        /* and bit for bit against the MoE's SwiGLU kernel and then the launch, on rows made to hit the case where
           the pre-rounding matters: in every routed row a group whose max h (~32764 at scale 1) rounds up to
           2^15, so the launch's own rounding takes the next scale down, and tiny values (~3·2^-24) beside it
           that lose a bit there (without the pre-rounding the staged h would keep it) */
        {
            const float s10 =
                10.0f / (1.0f + expf(-10.0f)); /* silu(10) on the host: u is only an approximation */
            for (int i = 0; i < K; i++) { /* (h = 0 past the three: only then can ±2^-24 show in a sum) */
                float *row = gu + (size_t)i * 2 * F;
                for (int64_t c = 3; c < F; c++) row[c] = 0.0f;
                row[0] = row[1] = row[2] = 10.0f;
                row[F] = 32764.0f / s10, row[F + 1] = 3.0f * 5.9604645e-8f / s10, row[F + 2] = -row[F + 1];
            }
            float *gua_d, *gsa_d;
            TS_CUDA_CHECK(cudaMalloc((void **)&gua_d, ng * sizeof(float)));
            TS_CUDA_CHECK(cudaMalloc((void **)&gsa_d, (size_t)(2 * F) * sizeof(float)));
            TS_CUDA_CHECK(cudaMemcpy(gu_d, gu, ng * sizeof(float), cudaMemcpyHostToDevice));
            TS_CUDA_CHECK(cudaMemcpy(gua_d, gu, ng * sizeof(float), cudaMemcpyHostToDevice));
            TS_CUDA_CHECK(cudaMemcpy(gsa_d, gs, (size_t)(2 * F) * sizeof(float), cudaMemcpyHostToDevice));
            const int64_t grp = ts_cuda_matmul_experts_rounds_x(type, F, K, 1, true, H, 0, H);
            const int round = grp > 0 && grp <= 256 && F % grp == 0 ? (int)grp : 0;
            int rs = ts_cuda_moe_swiglu(gua_d, gua_d + F, K, 2 * F, F, round, 0);
            rs |= ts_cuda_moe_swiglu(gsa_d, gsa_d + F, 1, 2 * F, F, 0, 0);
            TS_CUDA_CHECK(cudaMemset(eo_d, 0xFF, ne * sizeof(float)));
            TS_CUDA_CHECK(cudaMemset(eo2_d, 0xFF, ne * sizeof(float)));
            TS_CUDA_CHECK(cudaMemset(y_d, 0xFF, H * sizeof(float)));
            TS_CUDA_CHECK(cudaMemset(y2_d, 0xFF, H * sizeof(float)));
            const int ma = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, gua_d, 2 * F, eo2_d, H,
                                                              &dev[1], gsa_d, 2 * F, 1, y2_d, NULL, 0);
            const ts_cuda_moe_down_fused fp = {F, round > 0, NULL, NULL, NULL};
            const int mb = ts_cuda_matmul_experts_shared_down(&dev[0], ids_d, K, H, H, gu_d, 2 * F, eo_d, H,
                                                              &dev[1], gs_d, 2 * F, 1, y_d, &fp, 0);
            TS_CUDA_CHECK(cudaDeviceSynchronize());
            float *ea = to_host(eo2_d, ne), *eb = to_host(eo_d, ne), *y_a = to_host(y2_d, H),
                  *y_b = to_host(y_d, H);
            const int64_t differ4 = bits_differ(ea, eb, ne) + bits_differ(y_a, y_b, H);
            int64_t unwritten4 =
                0; /* NaN poison left where a launch wrote nothing (ids[4] is in range now) */
            for (size_t e = 0; e < ne; e++) unwritten4 += eb[e] != eb[e];
            for (int o = 0; o < H; o++) unwritten4 += y_b[o] != y_b[o];
            const int ok4 = rs == 0 && ma == 0 && mb == 0 && differ4 == 0 && unwritten4 == 0;
            printf(
                "  ... the SwiGLU staged vs its kernel then the launch, groups rounding up to 2^15 (rounding "
                "groups of %d): %s  (%lld outputs differ, %lld unwritten)\n",
                round, ok4 ? "ok  " : "FAIL", (long long)differ4, (long long)unwritten4);
            ok = ok && ok4;
            TS_CUDA_CHECK(cudaFree(gua_d));
            TS_CUDA_CHECK(cudaFree(gsa_d));
            free(ea), free(eb), free(y_a), free(y_b);
        }
        TS_CUDA_CHECK(cudaFree(gu_d));
        TS_CUDA_CHECK(cudaFree(gs_d));
        free(gu), free(gs), free(a), free(b), free(ya), free(yb);
    }
    TS_CUDA_CHECK(cudaFree(h_d));
    TS_CUDA_CHECK(cudaFree(hs_d));
    TS_CUDA_CHECK(cudaFree(eo_d));
    TS_CUDA_CHECK(cudaFree(eo2_d));
    TS_CUDA_CHECK(cudaFree(y_d));
    TS_CUDA_CHECK(cudaFree(y2_d));
    TS_CUDA_CHECK(cudaFree(ids_d));
    free_weights(2, q, dev);
    free(h), free(hs), free(eo), free(eo2), free(y), free(y2);
    return !ok;
}

/* ts_cuda_matmul_experts_planned (a plan's tiles of up to 8 items of one expert as one chunk's tokens)
 * against ts_cuda_matmul_experts on the same items, bit for bit: n items over 24 experts (full and partial
 * tiles of 8), two of them out of range (NaN rows on both sides), n_out 200 (a last chunk of 8 rows), one or
 * two parts, x rows shared by x_div items or one an item (the downs: ne0 640). */
static int run_planned_case(uint32_t type, int64_t ne0, int n, int x_div, int parts, uint64_t seed) {
    enum { E = 24 };
    const char *tc = getenv("TURBOSPARK_CUDA_GEMV_TC"), *wa = getenv("TURBOSPARK_TC_WA"),
               *xr = getenv("TURBOSPARK_TC_XROW");
    if ((tc && tc[0] == '0') || (wa && wa[0] == '0') || (x_div == 1 && xr && xr[0] == '0')) {
        printf("  planned experts %-5s: skipped (the tensor-core GEMV is off, takes the weights as B or "
               "takes no "
               "routed downs)\n",
               ts_type_name(type));
        return 0;
    }
    const int64_t n_out = 200, ys = parts * n_out + 8, nx = (n + x_div - 1) / x_div;
    const int64_t ne1[2] = {n_out, n_out}, ne2[2] = {E, E};
    qjob q[2];
    ts_gguf_tensor host[2];
    ts_cuda_tensor dev[2];
    if (make_weights(parts, type, ne0, ne1, ne2, seed, q, host, dev)) return 1;
    rng_t r = {mix64(seed)};
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(rng_unit(&r) * E) % E;
    ids[n / 3] = -1, ids[n - 1] = E + 5;
    const size_t nxe = (size_t)(nx * ne0), ny = (size_t)n * (size_t)ys;
    float *x = malloc(nxe * sizeof *x);
    for (size_t i = 0; i < nxe; i++) x[i] = (float)rng_gauss(&r);
    float *x_d, *y_d, *y2_d;
    int32_t *ids_d;
    void *scr;
    const size_t scr_bytes = ts_cuda_expert_plan_bytes(n, E);
    TS_CUDA_CHECK(cudaMalloc((void **)&x_d, nxe * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y_d, ny * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y2_d, ny * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&ids_d, (size_t)n * sizeof *ids));
    TS_CUDA_CHECK(cudaMalloc(&scr, scr_bytes));
    TS_CUDA_CHECK(cudaMemcpy(x_d, x, nxe * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(ids_d, ids, (size_t)n * sizeof *ids, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(y_d, 0xFF, ny * sizeof(float)));
    TS_CUDA_CHECK(cudaMemset(y2_d, 0xFF, ny * sizeof(float)));
    ts_cuda_expert_plan plan;
    int rc = ts_cuda_expert_plan_build_tile(ids_d, n, E, 8, scr, scr_bytes, &plan, 0);
    const int planned = rc ? -1
                           : ts_cuda_matmul_experts_planned(&plan, &dev[0], parts > 1 ? &dev[1] : NULL, n_out,
                                                            0, n_out, x_d, x_div, ne0, y_d, ys, 0);
    rc |= ts_cuda_matmul_experts(&dev[0], parts > 1 ? &dev[1] : NULL, ids_d, n, n_out, 0, n_out, x_d, x_div,
                                 ne0, y2_d, ys, 0);
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    float *y = to_host(y_d, ny), *y2 = to_host(y2_d, ny);
    const int64_t differ = bits_differ(y, y2, ny);
    int64_t unwritten = 0; /* 0xFF bytes are a NaN: count the written rows of good items that are NaN */
    for (int i = 0; i < n; i++)
        for (int64_t o = 0; ids[i] >= 0 && ids[i] < E && o < parts * n_out; o++)
            unwritten += y[(size_t)i * (size_t)ys + (size_t)o] != y[(size_t)i * (size_t)ys + (size_t)o];
    const int ok = planned == 0 && rc == 0 && differ == 0 && unwritten == 0;
    printf("  planned experts %-5s %5lld -> %d x %lld, %d items, x_div %d: %s  (%s; %lld outputs differ from "
           "one GEMV an item, %lld unwritten)\n",
           ts_type_name(type), (long long)ne0, parts, (long long)n_out, n, x_div, ok ? "ok  " : "FAIL",
           planned == 0  ? "planned"
           : planned > 0 ? "NOT planned"
                         : "refused",
           (long long)differ, (long long)unwritten);
    TS_CUDA_CHECK(cudaFree(x_d));
    TS_CUDA_CHECK(cudaFree(y_d));
    TS_CUDA_CHECK(cudaFree(y2_d));
    TS_CUDA_CHECK(cudaFree(ids_d));
    TS_CUDA_CHECK(cudaFree(scr));
    free_weights(parts, q, dev);
    free(ids), free(x), free(y), free(y2);
    return !ok;
}

/* A dense product of T tokens on the tensor-core GEMV gives every token the bits it gets alone (T = 1): 12 tokens
 * (one launch, two groups of 8 with the weights as A), 40 (launches of 16, 16 and 8), 2560 inputs, 9000 rows
 * (a last chunk of 8; several chunks a block, so both halves of the double-buffered partial sums and the
 * weight ring's turns are used). Skipped where the GEMV takes the weights as B (TURBOSPARK_TC_WA=0 or WA16=0: 9–16 tokens
 * then sum in another order than one). */
static int run_alone_case(uint32_t type, uint64_t seed) {
    enum { NE0 = 2560, NOUT = 9000, TMAX = 40 };
    const char *wa = getenv("TURBOSPARK_TC_WA"), *wa16 = getenv("TURBOSPARK_TC_WA16"),
               *tc = getenv("TURBOSPARK_CUDA_GEMV_TC");
    if ((wa && wa[0] == '0') || (wa16 && wa16[0] == '0') || (tc && tc[0] == '0')) {
        printf("  %-5s tokens vs alone: skipped (the weights as B for 9-16 tokens, or the GEMV off)\n",
               ts_type_name(type));
        return 0;
    }
    const int64_t ne1[1] = {NOUT}, ne2[1] = {1};
    qjob q[1];
    ts_gguf_tensor host[1];
    ts_cuda_tensor dev[1];
    if (make_weights(1, type, NE0, ne1, ne2, seed, q, host, dev)) return 1;
    rng_t r = {mix64(seed)};
    const size_t nx = (size_t)TMAX * NE0, ny = (size_t)TMAX * NOUT;
    float *x = malloc(nx * sizeof *x);
    for (size_t i = 0; i < nx; i++) x[i] = (float)rng_gauss(&r) * (i % 7 == 0 ? 30.0f : 1.0f);
    float *x_d, *y_d, *y1_d;
    TS_CUDA_CHECK(cudaMalloc((void **)&x_d, nx * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y_d, ny * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y1_d, ny * sizeof(float)));
    TS_CUDA_CHECK(cudaMemcpy(x_d, x, nx * sizeof(float), cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(y1_d, 0xFF, ny * sizeof(float)));
    int rc = 0;
    for (int t = 0; t < TMAX; t++)
        rc |= ts_cuda_matmul(&dev[0], 0, NOUT, x_d + (size_t)t * NE0, 1, y1_d + (size_t)t * NOUT, 0);
    int ok = 1;
    const int Ts[2] = {12, TMAX};
    for (int i = 0; i < 2; i++) {
        TS_CUDA_CHECK(cudaMemset(y_d, 0xFF, ny * sizeof(float)));
        rc |= ts_cuda_matmul(&dev[0], 0, NOUT, x_d, Ts[i], y_d, 0);
        TS_CUDA_CHECK(cudaDeviceSynchronize());
        float *y = to_host(y_d, (size_t)Ts[i] * NOUT), *y1 = to_host(y1_d, (size_t)Ts[i] * NOUT);
        const int64_t differ = bits_differ(y, y1, (size_t)Ts[i] * NOUT);
        int64_t nan = 0;
        for (size_t e = 0; e < (size_t)Ts[i] * NOUT; e++) nan += y[e] != y[e];
        const int ok1 = rc == 0 && differ == 0 && nan == 0;
        printf("  %-5s %d tokens vs each alone, %d -> %d: %s  (%lld outputs differ, %lld NaN)\n",
               ts_type_name(type), Ts[i], NE0, NOUT, ok1 ? "ok  " : "FAIL", (long long)differ,
               (long long)nan);
        ok = ok && ok1;
        free(y), free(y1);
    }
    TS_CUDA_CHECK(cudaFree(x_d));
    TS_CUDA_CHECK(cudaFree(y_d));
    TS_CUDA_CHECK(cudaFree(y1_d));
    free_weights(1, q, dev);
    free(x);
    return !ok;
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
        const uint32_t down[] = {TS_TYPE_Q4_K, TS_TYPE_Q5_0, TS_TYPE_Q8_0};
        for (int m = 0; m < 3; m++) fails += run_shared_down_case(down[m], seed + 600 + (uint64_t)m);
    }
    {
        const uint32_t tc[] = {TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_Q8_0, TS_TYPE_Q5_0};
        for (int i = 0; i < 5; i++) fails += run_alone_case(tc[i], seed + 800 + (uint64_t)i);
    }
    fails += run_planned_case(TS_TYPE_Q4_K, 2560, 160, 10, 2, seed + 700);
    fails += run_planned_case(TS_TYPE_Q5_K, 2560, 150, 10, 1, seed + 701);
    fails += run_planned_case(TS_TYPE_Q6_K, 2560, 64, 4, 2, seed + 702);
    fails += run_planned_case(TS_TYPE_Q8_0, 640, 640, 1, 1, seed + 703);
    fails += run_planned_case(TS_TYPE_Q5_0, 640, 250, 1, 1, seed + 704);
    for (int m = 0; m < 6; m++)
        fails += run_shared_merge_case(m % 3 == 0 ? 1 : m % 3 == 1 ? 3 : 12, m / 3, seed + 500 + (uint64_t)m);
    {
        const int Ts[] = {1, 3, 6};
        for (int i = 0; i < 3; i++) fails += run_split_case(Ts[i], seed + 400 + (uint64_t)i);
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
