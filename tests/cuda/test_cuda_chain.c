/* The persistent product chain (src/cuda/persist.h) on the GPU.
 *
 *   test_cuda_chain            twin: 40 random chains (2-14 products of Q4_K, Q5_K, Q6_K, Q8_0 and Q5_0,
 *                              random widths, each product reading the chain's input or an earlier
 *                              product's output) against ts_cuda_matmul run product by product on the
 *                              same inputs: equal bit for bit (the same chunk sums in the same order;
 *                              with TURBOSPARK_PERSIST_WA=1, the weights as the MMAs' A operand, the
 *                              MMAs' fp32 sums run in another order: within 2e-5 of the product's
 *                              largest |y|);
 *                              then chains that must be refused with a sentence (a later product read,
 *                              an x outside the y it reads, overlapping outputs, a type the chain lacks)
 *   test_cuda_chain --bench    what one launch saves: chains at the model's shapes, µs a product and
 *                              GB/s of weights, one persistent launch against the same products as
 *                              ts_cuda_matmul launches in one CUDA graph; the copy bandwidth
 *
 * Weights are random blocks (random bytes, finite scales); every product of a timed chain has its own
 * matrix (no product finds its weights in L2). */
#include "bench_util.h"
#include "cuda/cuda_common.h"
#include "cuda/matmul.h"
#include "cuda/persist.h"
#include "quant/quant.h"
#include "test_util.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t k_types[] = {TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_Q8_0, TS_TYPE_Q5_0};

static int group_of(uint32_t type) {
    return type == TS_TYPE_Q8_0 || type == TS_TYPE_Q5_0 ? 128 : 256;
}

/* A device matrix of random blocks with 16 spare bytes (the chain may read up to 15 past the last row). */
static void *random_matrix(rng_t *r, uint32_t type, int64_t ne0, int64_t rows) {
    const size_t rb = ts_row_size(type, ne0), bytes = rb * (size_t)rows;
    const ts_type_traits *tr = ts_type_get(type);
    uint8_t *h = malloc(bytes + 16);
    for (size_t i = 0; i < bytes + 16; i++) h[i] = (uint8_t)rng_u64(r);
    for (size_t b = 0; b < bytes / tr->type_size; b++) rng_fix_scales(r, type, h + b * tr->type_size);
    void *d;
    TS_CUDA_CHECK(cudaMalloc(&d, bytes + 16));
    TS_CUDA_CHECK(cudaMemcpy(d, h, bytes + 16, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *device_floats(rng_t *r, int64_t n, double scale) {
    float *h = malloc((size_t)n * sizeof *h), *d;
    for (int64_t i = 0; i < n; i++) h[i] = (float)(rng_gauss(r) * scale);
    TS_CUDA_CHECK(cudaMalloc((void **)&d, (size_t)n * sizeof *d));
    TS_CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* ---- twin --------------------------------------------------------------------------------------- */

enum { MAXP = 14 };

static int twin_chain(rng_t *r, int trial, bool wa, double *worst, cudaStream_t s) {
    const int n = 2 + (int)(rng_u64(r) % (MAXP - 1));
    ts_cuda_chain_product p[MAXP];
    ts_cuda_tensor W[MAXP];
    float *yref[MAXP];
    int32_t *ids_d[MAXP]; /* an expert product's id (device), else NULL */
    int bad_id[MAXP];     /* its id is out of range: NaN outputs */
    memset(p, 0, sizeof p);
    const int64_t ne_in = 256 * (1 + (int64_t)(rng_u64(r) % 16));
    float *x0 = device_floats(r, ne_in, 0.5 + 4.0 * rng_unit(r));
    for (int i = 0; i < n; i++) {
        const uint32_t type = k_types[rng_u64(r) % 5];
        const int G = group_of(type);
        /* read an earlier product's y when one is wide enough (3 in 4), else the chain's input */
        int dep = -1;
        if (i > 0 && rng_u64(r) % 4 != 0) {
            const int k = (int)(rng_u64(r) % (uint64_t)i);
            if (p[k].n_out >= G) dep = k;
        }
        const int64_t avail = dep >= 0 ? p[dep].n_out : ne_in;
        int64_t ne0 = (avail / G) * G;
        if (ne0 > 2 * G && rng_u64(r) % 2) ne0 -= G * (int64_t)(rng_u64(r) % (uint64_t)(ne0 / G - 1));
        if (ne0 < G) { /* the chain's input is narrower than this type's group: read nothing earlier */
            dep = -1;
            ne0 = (ne_in / G) * G;
        }
        int64_t n_out = 1 + (int64_t)(rng_u64(r) % (i == n - 1 ? 3000 : 6000));
        if (ts_row_size(type, ne0) % 16 != 0)
            n_out = (n_out + 7) / 8 * 8; /* what ts_cuda_matmul's GEMV takes */
        p[i].type = type, p[i].ne0 = ne0, p[i].n_out = n_out, p[i].row_bytes = ts_row_size(type, ne0);
        /* one product in four is an expert product: 2-4 experts, its id random, out of range one time in
           four (read no weights, NaN outputs) */
        const int E = rng_u64(r) % 4 == 0 ? 2 + (int)(rng_u64(r) % 3) : 0;
        int32_t e = 0;
        ids_d[i] = NULL, bad_id[i] = 0;
        if (E) {
            e = (int32_t)(rng_u64(r) % (uint64_t)E);
            if (rng_u64(r) % 4 == 0) e = rng_u64(r) % 2 ? -1 : E, bad_id[i] = 1;
            TS_CUDA_CHECK(cudaMalloc((void **)&ids_d[i], sizeof e));
            TS_CUDA_CHECK(cudaMemcpy(ids_d[i], &e, sizeof e, cudaMemcpyHostToDevice));
            p[i].ids = ids_d[i], p[i].n_experts = E, p[i].expert_stride = (size_t)n_out * p[i].row_bytes;
        }
        p[i].w = random_matrix(r, type, ne0, n_out * (E ? E : 1));
        p[i].dep = dep;
        p[i].x = dep >= 0 ? p[dep].y : x0;
        TS_CUDA_CHECK(cudaMalloc((void **)&p[i].y, (size_t)n_out * sizeof(float)));
        TS_CUDA_CHECK(cudaMemset(p[i].y, 0, (size_t)n_out * sizeof(float))); /* a bad id must write NaN */
        TS_CUDA_CHECK(cudaMalloc((void **)&yref[i], (size_t)n_out * sizeof(float)));
        /* the reference's weights: the expert's rows */
        const uint8_t *we = (const uint8_t *)p[i].w + (bad_id[i] ? 0 : (size_t)e * p[i].expert_stride);
        W[i] = (ts_cuda_tensor){type, ne0, n_out, p[i].row_bytes, (void *)we, NULL};
        if (!ts_cuda_matmul_rounds_x(type, ne0, 1, 0, n_out)) {
            fprintf(stderr, "chain %d product %d: ts_cuda_matmul does not take %s %lld -> %lld on the GEMV\n",
                    trial, i, ts_type_name(type), (long long)ne0, (long long)n_out);
            return 1;
        }
    }
    char err[256] = "";
    ts_cuda_chain *c;
    if (ts_cuda_chain_new(p, n, &c, err, sizeof err) != 0) {
        fprintf(stderr, "chain %d refused: %s\n", trial, err);
        return 1;
    }
    for (int i = 0; i < n; i++) { /* the reference, product by product, on its own outputs */
        const float *x = p[i].dep >= 0 ? yref[p[i].dep] : x0;
        if (bad_id[i]) { /* all NaN */
            TS_CUDA_CHECK(cudaMemsetAsync(yref[i], 0xFF, (size_t)p[i].n_out * sizeof(float), s));
            continue;
        }
        if (ts_cuda_matmul(&W[i], 0, p[i].n_out, x, 1, yref[i], s) != 0) {
            fprintf(stderr, "chain %d: ts_cuda_matmul refused product %d\n", trial, i);
            return 1;
        }
    }
    for (int rep = 0; rep < 2; rep++) /* twice: the counters must be reset between launches */
        if (ts_cuda_chain_run(c, s) != 0) {
            fprintf(stderr, "chain %d: launch failed: %s\n", trial, cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
    TS_CUDA_CHECK(cudaStreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float *a = malloc((size_t)p[i].n_out * sizeof *a), *b = malloc((size_t)p[i].n_out * sizeof *b);
        TS_CUDA_CHECK(cudaMemcpy(a, p[i].y, (size_t)p[i].n_out * sizeof *a, cudaMemcpyDeviceToHost));
        TS_CUDA_CHECK(cudaMemcpy(b, yref[i], (size_t)p[i].n_out * sizeof *b, cudaMemcpyDeviceToHost));
        int64_t diff = 0, first = -1;
        double ymax = 0, dmax = 0;
        for (int64_t o = 0; o < p[i].n_out; o++) {
            ymax = fmax(ymax, fabs(b[o]));
            dmax = fmax(dmax, fabs((double)a[o] - b[o]));
            if (isnan(a[o]) != isnan(b[o])) dmax = INFINITY;
        }
        for (int64_t o = 0; o < p[i].n_out; o++) /* NaN equals NaN (a bad id's, and what reads it) */
            if (!(isnan(a[o]) && isnan(b[o])) &&
                (wa ? !(fabs((double)a[o] - b[o]) <= 2e-5 * ymax)
                    : memcmp(&a[o], &b[o], sizeof(float)) != 0) &&
                diff++ == 0)
                first = o;
        if (ymax > 0 && dmax / ymax > *worst) *worst = dmax / ymax;
        if (diff) {
            fprintf(
                stderr,
                "chain %d product %d (%s %lld -> %lld, reads %d): %lld of %lld outputs differ, first %lld: "
                "%.9g vs %.9g\n",
                trial, i, ts_type_name(p[i].type), (long long)p[i].ne0, (long long)p[i].n_out, p[i].dep,
                (long long)diff, (long long)p[i].n_out, (long long)first, a[first], b[first]);
            bad = 1;
        }
        free(a), free(b);
    }
    int blocks, per_sm;
    size_t smem, ring;
    ts_cuda_chain_geometry(c, &blocks, &per_sm, &smem, &ring);
    if (trial == 0)
        printf("chain launch: %d blocks (%d an SM), %zu bytes of shared memory, ring %zu\n", blocks, per_sm,
               smem, ring);
    ts_cuda_chain_free(c);
    for (int i = 0; i < n; i++) {
        cudaFree((void *)p[i].w), cudaFree(p[i].y), cudaFree(yref[i]), cudaFree(ids_d[i]);
    }
    cudaFree(x0);
    return bad;
}

/* Chains that must be refused, each with a sentence. */
static int refusals(rng_t *r) {
    const int64_t ne0 = 512, n_out = 512;
    void *w = random_matrix(r, TS_TYPE_Q4_K, ne0, n_out);
    float *x = device_floats(r, ne0, 1.0), *y;
    TS_CUDA_CHECK(cudaMalloc((void **)&y, 4 * (size_t)n_out * sizeof(float)));
    const ts_cuda_chain_product ok = {.type = TS_TYPE_Q4_K,
                                      .ne0 = ne0,
                                      .n_out = n_out,
                                      .row_bytes = ts_row_size(TS_TYPE_Q4_K, ne0),
                                      .w = w,
                                      .x = x,
                                      .y = y,
                                      .dep = -1};
    ts_cuda_chain_product p[2] = {ok, ok};
    p[1].x = y, p[1].y = y + n_out, p[1].dep = 0;
    struct {
        const char *what;
        int i; /* product changed */
        ts_cuda_chain_product v;
    } cases[] = {
        {"a product reading itself", 1, p[1]},
        {"x outside the y it reads", 1, p[1]},
        {"overlapping outputs", 1, p[1]},
        {"x overlapping a y it does not read", 1, p[1]},
        {"a type the chain lacks", 0, p[0]},
        {"inputs not a multiple of the group", 0, p[0]},
        {"a row size that is not the type's", 0, p[0]},
        {"an expert stride that does not hold the rows", 0, p[0]},
        {"an expert product without experts", 0, p[0]},
        {"an expert id inside a product's y", 1, p[1]},
    };
    cases[0].v.dep = 1;
    cases[1].v.x = y + n_out / 2;
    cases[2].v.y = y + n_out / 2;
    cases[3].v.dep = -1;
    cases[4].v.type = TS_TYPE_Q4_0;
    cases[4].v.row_bytes = ts_row_size(TS_TYPE_Q4_0, ne0);
    cases[5].v.ne0 = 384;
    cases[6].v.row_bytes += 2;
    cases[7].v.ids = (const int32_t *)x, cases[7].v.n_experts = 2, cases[7].v.expert_stride = 16;
    cases[8].v.ids = (const int32_t *)x, cases[8].v.n_experts = 0,
    cases[8].v.expert_stride = (size_t)n_out * ts_row_size(TS_TYPE_Q4_K, ne0);
    cases[9].v.ids = (const int32_t *)(y + 3), cases[9].v.n_experts = 1,
    cases[9].v.expert_stride = cases[8].v.expert_stride; /* y + 3 is inside product 0's y */
    int bad = 0;
    char err[256];
    ts_cuda_chain *c = NULL;
    if (ts_cuda_chain_new(p, 2, &c, err, sizeof err) != 0) {
        fprintf(stderr, "refusals: the valid chain was refused: %s\n", err);
        bad = 1;
    }
    ts_cuda_chain_free(c);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ts_cuda_chain_product q[2] = {p[0], p[1]};
        q[cases[k].i] = cases[k].v;
        err[0] = 0;
        c = NULL;
        if (ts_cuda_chain_new(q, 2, &c, err, sizeof err) == 0 || c || !err[0]) {
            fprintf(stderr, "refusals: %s was not refused with a sentence\n", cases[k].what);
            bad = 1;
            ts_cuda_chain_free(c);
        } else {
            printf("refused (%s): %s\n", cases[k].what, err);
        }
    }
    cudaFree(w), cudaFree(x), cudaFree(y);
    return bad;
}

/* ---- bench -------------------------------------------------------------------------------------- */

enum { WARMUP = 3, SAMPLES = 15 };

typedef struct {
    uint32_t type;
    int64_t ne0, n_out;
    int back; /* x is the output of the product this many places back (0: the one before), or the chain's
                 input when there is none */
} stage_t;

/* `reps` repetitions of the stages. */
static void bench_chain(rng_t *r, const char *what, const stage_t *st, int nst, int reps, double copy_gbs,
                        cudaStream_t s) {
    const int n = nst * reps;
    ts_cuda_chain_product *p = calloc((size_t)n, sizeof *p);
    ts_cuda_tensor *W = calloc((size_t)n, sizeof *W);
    float *x0 = device_floats(r, st[0].ne0, 1.0);
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        const stage_t *q = &st[i % nst];
        p[i].type = q->type, p[i].ne0 = q->ne0, p[i].n_out = q->n_out,
        p[i].row_bytes = ts_row_size(q->type, q->ne0);
        p[i].w = random_matrix(r, q->type, q->ne0, q->n_out);
        const int dep = i - (q->back ? q->back : 1);
        p[i].dep = dep >= 0 ? dep : -1;
        p[i].x = dep >= 0 ? p[dep].y : x0;
        TS_CUDA_CHECK(cudaMalloc((void **)&p[i].y, (size_t)q->n_out * sizeof(float)));
        W[i] = (ts_cuda_tensor){q->type, q->ne0, q->n_out, p[i].row_bytes, (void *)p[i].w, NULL};
        bytes += (double)p[i].row_bytes * (double)q->n_out;
    }
    char err[256];
    ts_cuda_chain *c;
    if (ts_cuda_chain_new(p, n, &c, err, sizeof err) != 0) {
        printf("%s: refused: %s\n", what, err);
        exit(1);
    }
    /* one eager pass of each (kernel attributes are set outside a capture), then the two graphs */
    for (int i = 0; i < n; i++) (void)ts_cuda_matmul(&W[i], 0, p[i].n_out, p[i].x, 1, p[i].y, s);
    if (ts_cuda_chain_run(c, s) != 0) printf("%s: chain launch failed\n", what);
    TS_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g1, g2;
    cudaGraphExec_t e1, e2;
    TS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; i++) (void)ts_cuda_matmul(&W[i], 0, p[i].n_out, p[i].x, 1, p[i].y, s);
    TS_CUDA_CHECK(cudaStreamEndCapture(s, &g1));
    TS_CUDA_CHECK(cudaGraphInstantiate(&e1, g1, 0));
    TS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    (void)ts_cuda_chain_run(c, s);
    TS_CUDA_CHECK(cudaStreamEndCapture(s, &g2));
    TS_CUDA_CHECK(cudaGraphInstantiate(&e2, g2, 0));
    const float ms1 = bench_graph_ms(e1, s, WARMUP, SAMPLES), ms2 = bench_graph_ms(e2, s, WARMUP, SAMPLES);
    const double floor_ms = bytes / (copy_gbs * 1e9) * 1e3; /* the weights read at the copy's bytes/s */
    int blocks, per_sm;
    size_t smem, ring;
    ts_cuda_chain_geometry(c, &blocks, &per_sm, &smem, &ring);
    printf("%s: %d blocks (%d an SM), ring %zu KiB of %zu\n", what, blocks, per_sm, ring / 1024, smem / 1024);
    printf("%-34s %4d products %8.1f MB | launches %8.2f us/product %6.0f GB/s | chain %8.2f us/product "
           "%6.0f GB/s"
           " (x%.2f) | reads at copy speed %.2f us/product\n",
           what, n, bytes / 1e6, ms1 * 1e3 / n, bytes / (ms1 * 1e-3) / 1e9, ms2 * 1e3 / n,
           bytes / (ms2 * 1e-3) / 1e9, ms1 / ms2, floor_ms * 1e3 / n);
    /* where a block's time goes: one more run of the chain with the kernel's stamps */
    setenv("TURBOSPARK_PERSIST_STAMPS", "1", 1);
    ts_cuda_chain *cs;
    double cyc[6];
    int khz = 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    if (ts_cuda_chain_new(p, n, &cs, err, sizeof err) == 0) {
        if (ts_cuda_chain_run(cs, s) == 0 && cudaStreamSynchronize(s) == cudaSuccess &&
            ts_cuda_chain_phases(cs, cyc) == 0) {
            const double us = 1e3 / khz; /* µs a cycle at the device's clock */
            printf("%-34s a block (stamped run, %d MHz): input %.1f us, x %.1f, weights %.1f, sums %.1f, "
                   "between tiles %.1f; longest block %.1f us\n",
                   "", khz / 1000, cyc[0] * us, cyc[1] * us, cyc[2] * us, cyc[3] * us, cyc[4] * us,
                   cyc[5] * us);
        }
        ts_cuda_chain_free(cs);
    }
    unsetenv("TURBOSPARK_PERSIST_STAMPS");
    TS_CUDA_CHECK(cudaGraphExecDestroy(e1));
    TS_CUDA_CHECK(cudaGraphExecDestroy(e2));
    TS_CUDA_CHECK(cudaGraphDestroy(g1));
    TS_CUDA_CHECK(cudaGraphDestroy(g2));
    ts_cuda_chain_free(c);
    for (int i = 0; i < n; i++) cudaFree((void *)p[i].w), cudaFree(p[i].y);
    cudaFree(x0);
    free(p), free(W);
}

static void bench(cudaStream_t s) {
    rng_t r = {0xC4A1u};
    const double copy_gbs = bench_copy_gbs(s);
    printf("device-to-device copy: %.0f GB/s (read + write); \"reads at copy speed\": the weights at that "
           "rate\n",
           copy_gbs);
    const stage_t big[] = {{TS_TYPE_Q4_K, 2560, 10240, 0}, {TS_TYPE_Q4_K, 10240, 2560, 0}};
    const stage_t expert[] = {{TS_TYPE_Q4_K, 2560, 1280, 0}, {TS_TYPE_Q5_0, 1280, 2560, 0}};
    const stage_t mixed[] = {{TS_TYPE_Q5_K, 2560, 12288, 0}, {TS_TYPE_Q6_K, 12288, 2560, 0},
                             {TS_TYPE_Q4_K, 2560, 8192, 0},  {TS_TYPE_Q8_0, 8192, 2560, 0},
                             {TS_TYPE_Q4_K, 2560, 640, 0},   {TS_TYPE_Q6_K, 512, 2560, 0}};
    bench_chain(&r, "Q4_K 2560->10240->2560", big, 2, 48, copy_gbs, s);
    bench_chain(&r, "expert-sized Q4_K 2560->1280, Q5_0 ->2560", expert, 2, 240, copy_gbs, s);
    bench_chain(&r, "mixed (Q5_K, Q6_K, Q4_K, Q8_0)", mixed, 6, 24, copy_gbs, s);
    /* a layer's routed experts at one token: 10 gate|up products read the layer's input (the last down of
       the layer before), then each down reads its gate|up's first 640 outputs */
    stage_t layer[20];
    for (int e = 0; e < 10; e++) {
        layer[e] = (stage_t){TS_TYPE_Q4_K, 2560, 1280, e + 1};
        layer[10 + e] = (stage_t){TS_TYPE_Q5_0, 640, 2560, 10};
    }
    bench_chain(&r, "layers of experts (10 gate|up, 10 down)", layer, 20, 24, copy_gbs, s);
}

int main(int argc, char **argv) {
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    cudaStream_t s;
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench(s);
        return 0;
    }
    rng_t r = {0x5EEDu};
    /* the reference is ts_cuda_matmul's GEMV with the weights as B (TURBOSPARK_TC_WA=0), the form whose sums
       the chain's tiles of 8 rows repeat bit for bit */
    setenv("TURBOSPARK_TC_WA", "0", 1);
    const char *v = getenv("TURBOSPARK_PERSIST_WA");
    const bool wa = v && v[0] == '1';
    int bad = 0, failed = 0;
    double worst = 0;
    for (int trial = 0; trial < 40; trial++) {
        const int b = twin_chain(&r, trial, wa, &worst, s);
        bad += b;
        if (b && ++failed >= 5) break;
    }
    printf(
        "40 random chains against ts_cuda_matmul: largest |chain - matmul| / max|y| of a product %.3g (%s)\n",
        worst, wa ? "weights as A: bound 2e-5" : "bit for bit: 0");
    bad += refusals(&r);
    printf("%s\n", bad ? "FAILED" : "all passed");
    return bad ? 1 : 0;
}
