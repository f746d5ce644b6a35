/* Microbenchmark of ts_cuda_matmul (not a test): GB/s of weight bytes streamed at the model's
 * shapes, per type, against the device-to-device copy bandwidth measured in the same run.
 *
 *   bench_cuda_matmul [samples [type ...]]   (default 60 samples, every type; types by name, e.g. q4_K)
 *
 * Method (docs/BENCHMARKS.md): weights are 64 distinct quantized random rows tiled to the full
 * matrix, then copied until the copies hold ≥ 4× the L2 cache (at least 3 copies), so every launch
 * reads its weights from HBM. One sample is a CUDA graph of one launch per copy (the decode path
 * runs as a graph too, so host launch gaps do not count), timed with events; after 5 warm-up
 * samples the median of `samples` samples is reported, per launch. Copy bandwidth: a 1 GiB
 * cudaMemcpyAsync device to device, counted as bytes read + bytes written, median of 20.
 *
 * BENCH_STAMPS=1: after each shape, one more launch at T = 1 (weights from HBM) with the tensor-core GEMV's
 * phase stamps (ts_cuda_matmul_tc_stamps), and where a block's time went, averaged over its blocks. */
#include "cuda/cuda_common.h"
#include "bench_util.h"
#include "cuda/matmul.h"
#include "quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t k_types[] = {
    TS_TYPE_Q8_0,  TS_TYPE_Q4_K,    TS_TYPE_Q4_0,   TS_TYPE_Q5_0,  TS_TYPE_Q5_1,    TS_TYPE_IQ4_NL,
    TS_TYPE_Q5_K,  TS_TYPE_Q6_K,    TS_TYPE_F16,    TS_TYPE_BF16,  TS_TYPE_F32,     TS_TYPE_Q2_K,
    TS_TYPE_Q3_K,  TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S, TS_TYPE_IQ3_XXS, TS_TYPE_IQ3_S,
    TS_TYPE_IQ1_S, TS_TYPE_IQ1_M,   TS_TYPE_Q4_1,   TS_TYPE_IQ4_XS};
enum { N_TYPES = sizeof k_types / sizeof k_types[0] };

typedef struct {
    int64_t ne0, n_out;
    const char *what;
} shape_t;
static const shape_t k_shapes[] = {
    {2560, 10240, "2560->10240"},
    {2560, 640, "2560->640 (1 expert)"},
    {6144, 2560, "6144->2560"},
};
enum { N_SHAPES = sizeof k_shapes / sizeof k_shapes[0], POOL_ROWS = 64, WARMUP = 5 };

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static double rng_gauss(void) {
    double s = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        s += (z >> 11) * (1.0 / 9007199254740992.0);
    }
    return (s - 2.0) * 1.7320508;
}

/* Median milliseconds of one graph launch holding one matmul per copy. */
static float time_graph(ts_cuda_tensor *copies, int ncopies, int64_t n_out, const float *x, int64_t T,
                        float *y, cudaStream_t s, int samples) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    /* one eager call first: it sets the kernel's attributes, which is no business for a capture */
    if (ts_cuda_matmul(&copies[0], 0, n_out, x, T, y, s) != 0) {
        fprintf(stderr, "ts_cuda_matmul refused the benchmark call\n");
        exit(1);
    }
    TS_CUDA_CHECK(cudaStreamSynchronize(s));
    TS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < ncopies; c++) {
        if (ts_cuda_matmul(&copies[c], 0, n_out, x, T, y, s) != 0) {
            fprintf(stderr, "ts_cuda_matmul refused the benchmark call\n");
            exit(1);
        }
    }
    TS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    TS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const float med = bench_graph_ms(exec, s, WARMUP, samples) / (float)ncopies;
    TS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    TS_CUDA_CHECK(cudaGraphDestroy(graph));
    return med;
}

/* One eager launch of W at T = 1 with the GEMV's phase stamps, and a line of where a block's time went (µs at
 * the SM clock, averaged over the blocks; "span" and "start skew" from %globaltimer across blocks). */
enum { STAMP_MAX_BLOCKS = 4096 };
static void print_stamps(const ts_cuda_tensor *W, int64_t n_out, const float *x, float *y, cudaStream_t s,
                         long long *dev, double clock_mhz) {
    const int words = TS_CUDA_TC_STAMP_WORDS, chunks = (words - 8) / 2;
    TS_CUDA_CHECK(cudaMemset(dev, 0, (size_t)STAMP_MAX_BLOCKS * words * sizeof(long long)));
    if (ts_cuda_matmul_tc_stamps(dev, STAMP_MAX_BLOCKS) != 0 ||
        ts_cuda_matmul(W, 0, n_out, x, 1, y, s) != 0) {
        fprintf(stderr, "stamps: the stamped launch failed\n");
        exit(1);
    }
    TS_CUDA_CHECK(cudaStreamSynchronize(s));
    if (ts_cuda_matmul_tc_stamps(NULL, 0) != 0) exit(1);
    long long *h = malloc((size_t)STAMP_MAX_BLOCKS * words * sizeof *h);
    TS_CUDA_CHECK(cudaMemcpy(h, dev, (size_t)STAMP_MAX_BLOCKS * words * sizeof *h, cudaMemcpyDeviceToHost));
    /* per block: issue, wait, x, first weights, per chunk (wait for weights, sums + barrier), tail, total */
    double issue = 0, wait = 0, stage = 0, first = 0, wchunk = 0, schunk = 0, tail = 0, total = 0, tmax = 0;
    double cycles = 0, ns = 0; /* the SM clock the blocks ran at: their cycles over their %globaltimer time */
    long long g0 = 0, g1 = 0, gs = 0;
    int nb = 0, nw = 0, nsum = 0, nchunks = 0, nfirst = 0, ntail = 0;
    for (int b = 0; b < STAMP_MAX_BLOCKS; b++) {
        const long long *v = h + (size_t)b * words;
        if (v[5] == 0) continue; /* no such block (this launch had fewer) */
        const int n = (int)v[7], m = n < chunks ? n : chunks;
        issue += (double)(v[1] - v[0]), wait += (double)(v[2] - v[1]), stage += (double)(v[3] - v[2]);
        total += (double)(v[4] - v[0]);
        if ((double)(v[4] - v[0]) > tmax) tmax = (double)(v[4] - v[0]);
        cycles += (double)(v[4] - v[0]), ns += (double)(v[6] - v[5]);
        if (m > 0) first += (double)(v[8] - v[3]), nfirst++;
        for (int j = 0; j < m; j++) {
            if (j > 0) wchunk += (double)(v[8 + 2 * j] - v[7 + 2 * j]), nw++;
            schunk += (double)(v[9 + 2 * j] - v[8 + 2 * j]), nsum++;
        }
        if (m > 0 && m == n) tail += (double)(v[4] - v[7 + 2 * m]), ntail++; /* all its chunks stamped */
        if (!nb || v[5] < g0) g0 = v[5];
        if (!nb || v[6] > g1) g1 = v[6];
        if (!nb || v[5] > gs) gs = v[5];
        nchunks += n, nb++;
    }
    free(h);
    if (!nb) {
        printf("  stamps: no block stamped (not the tensor-core GEMV)\n");
        return;
    }
    /* cycles → µs at the clock the stamps show where %globaltimer saw enough time, else the device's */
    const double mhz = ns > 1e3 * nb ? cycles / ns * 1e3 : clock_mhz, us = 1.0 / mhz;
    printf("  stamps, %d blocks of %.1f chunks, %.0f MHz (us a block): issue %.2f, dependency wait %.2f, x "
           "%.2f, "
           "first weights %.2f, a chunk's weights wait %.2f and sums %.2f, tail %.2f; block %.2f (max %.2f); "
           "kernel span %.2f, start skew %.2f (%%globaltimer)\n",
           nb, (double)nchunks / nb, mhz, issue / nb * us, wait / nb * us, stage / nb * us,
           nfirst ? first / nfirst * us : 0.0, nw ? wchunk / nw * us : 0.0, nsum ? schunk / nsum * us : 0.0,
           ntail ? tail / ntail * us : 0.0, total / nb * us, tmax * us, (g1 - g0) * 1e-3, (gs - g0) * 1e-3);
}

int main(int argc, char **argv) {
    const int samples = argc > 1 ? atoi(argv[1]) : 60;
    if (samples < 1) return 2;
    struct cudaDeviceProp p;
    TS_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    cudaStream_t s;
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double copy_gbs = bench_copy_gbs(s);
    printf("device: %s, %d SMs, L2 %.0f MiB, %.1f GiB\n", p.name, p.multiProcessorCount,
           p.l2CacheSize / 1048576.0, p.totalGlobalMem / 1073741824.0);
    printf("device-to-device copy: %.0f GB/s (read + write, 1 GiB, median of 20)\n", copy_gbs);
    printf("per launch: median of %d CUDA-graph samples after %d warm-up; weights rotated over >= 4x L2\n\n",
           samples, WARMUP);

    const size_t l2 = p.l2CacheSize > 0 ? (size_t)p.l2CacheSize : (size_t)50 << 20;
    const char *st = getenv("BENCH_STAMPS");
    long long *stamps = NULL;
    int clock_khz = 0;
    if (st && strcmp(st, "1") == 0) {
        TS_CUDA_CHECK(
            cudaMalloc((void **)&stamps, (size_t)STAMP_MAX_BLOCKS * TS_CUDA_TC_STAMP_WORDS * sizeof *stamps));
        TS_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
        printf("stamps: clock64 at %.0f MHz (the SM clock the device reports)\n", clock_khz / 1e3);
    }
    float *x, *y;
    TS_CUDA_CHECK(cudaMalloc((void **)&x, 8 * 6144 * sizeof(float)));
    TS_CUDA_CHECK(cudaMalloc((void **)&y, 8 * 10240 * sizeof(float)));
    {
        float *hx = malloc(8 * 6144 * sizeof *hx);
        for (int i = 0; i < 8 * 6144; i++) hx[i] = (float)rng_gauss();
        TS_CUDA_CHECK(cudaMemcpy(x, hx, 8 * 6144 * sizeof(float), cudaMemcpyHostToDevice));
        free(hx);
    }

    printf("%-7s %-21s %7s %6s %8s %6s %6s %8s %8s   %-21s  %6s\n", "type", "shape", "MB", "copies", "T=1 us",
           "GB/s", "%copy", "T=2 us", "T=8 us", "GB/s R=1 / R=2 / R=4", "x-L1");
    for (int ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = k_types[ti];
        bool wanted = argc <= 2;
        for (int a = 2; a < argc; a++) wanted = wanted || strcmp(argv[a], ts_type_name(type)) == 0;
        if (!wanted) continue;
        for (int si = 0; si < N_SHAPES; si++) {
            const shape_t *sh = &k_shapes[si];
            const size_t rb = ts_row_size(type, sh->ne0), bytes = rb * (size_t)sh->n_out;
            /* 64 distinct quantized rows, tiled */
            uint8_t *host = malloc(bytes);
            float *src = malloc((size_t)sh->ne0 * sizeof *src);
            /* equal importance weights for the types ggml quantizes only with them (IQ1_S, IQ2_XXS, IQ2_XS) */
            float *qw = NULL;
            if (ts_quantize_needs_imatrix(type)) {
                qw = malloc((size_t)sh->ne0 * sizeof *qw);
                for (int64_t i = 0; i < sh->ne0; i++) qw[i] = 1.0f;
            }
            char err[256];
            for (int r = 0; r < POOL_ROWS && r < sh->n_out; r++) {
                const double scale = 0.5 + 0.02 * r;
                for (int64_t i = 0; i < sh->ne0; i++)
                    src[i] = (float)(scale * rng_gauss() + (r % 3 ? 0 : scale));
                if (ts_quantize_row_imatrix(type, src, host + (size_t)r * rb, sh->ne0, qw, err, sizeof err) !=
                    0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
            }
            for (int64_t r = POOL_ROWS; r < sh->n_out; r++)
                memcpy(host + (size_t)r * rb, host + (size_t)(r % POOL_ROWS) * rb, rb);
            free(src);
            free(qw);

            int ncopies = (int)((4 * l2 + bytes - 1) / bytes);
            if (ncopies < 3) ncopies = 3;
            ts_cuda_tensor *copies = calloc((size_t)ncopies, sizeof *copies);
            ts_gguf_tensor t = {0};
            t.n_dims = 2;
            t.ne[0] = sh->ne0;
            t.ne[1] = sh->n_out;
            t.ne[2] = t.ne[3] = 1;
            t.type = type;
            t.nbytes = bytes;
            t.nelements = sh->ne0 * sh->n_out;
            t.data = host;
            t.name.ptr = "bench";
            t.name.len = 5;
            if (ts_cuda_tensor_upload(&t, &copies[0], err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            for (int c = 1; c < ncopies; c++) {
                void *d;
                TS_CUDA_CHECK(cudaMalloc(&d, (bytes + 15) & ~(size_t)15));
                TS_CUDA_CHECK(
                    cudaMemcpy(d, copies[0].data, (bytes + 15) & ~(size_t)15, cudaMemcpyDeviceToDevice));
                copies[c] = copies[0];
                copies[c].data = d;
                copies[c].owned = d;
            }
            free(host);

            const float ms1 = time_graph(copies, ncopies, sh->n_out, x, 1, y, s, samples);
            const float ms2 = time_graph(copies, ncopies, sh->n_out, x, 2, y, s, samples);
            const float ms8 = time_graph(copies, ncopies, sh->n_out, x, 8, y, s, samples);
            float forced[3];
            const int rows_variants[3] = {1, 2, 4};
            for (int v = 0; v < 3; v++) {
                ts_cuda_matmul_force_rows_per_warp(rows_variants[v]);
                forced[v] = time_graph(copies, ncopies, sh->n_out, x, 1, y, s, samples);
            }
            ts_cuda_matmul_force_rows_per_warp(0);
            ts_cuda_matmul_allow_x_shared(false);
            const float ms_l1 = time_graph(copies, ncopies, sh->n_out, x, 1, y, s, samples);
            ts_cuda_matmul_allow_x_shared(true);
            TS_CUDA_CHECK(cudaStreamSynchronize(s));
            const double gbs = (double)bytes / (ms1 * 1e-3) / 1e9;
            printf("%-7s %-21s %7.2f %6d %8.2f %6.0f %5.0f%% %8.2f %8.2f   %5.0f / %5.0f / %5.0f  %6.0f\n",
                   ts_type_name(type), sh->what, bytes / 1e6, ncopies, ms1 * 1e3, gbs, 100.0 * gbs / copy_gbs,
                   ms2 * 1e3, ms8 * 1e3, (double)bytes / (forced[0] * 1e-3) / 1e9,
                   (double)bytes / (forced[1] * 1e-3) / 1e9, (double)bytes / (forced[2] * 1e-3) / 1e9,
                   (double)bytes / (ms_l1 * 1e-3) / 1e9);
            if (stamps) print_stamps(&copies[0], sh->n_out, x, y, s, stamps, clock_khz / 1e3);
            fflush(stdout);
            for (int c = 0; c < ncopies; c++) ts_cuda_tensor_free(&copies[c]);
            free(copies);
        }
    }
    if (stamps) TS_CUDA_CHECK(cudaFree(stamps));
    TS_CUDA_CHECK(cudaFree(x));
    TS_CUDA_CHECK(cudaFree(y));
    TS_CUDA_CHECK(cudaStreamDestroy(s));
    printf("\nGB/s = weight bytes of one launch / median time of one launch; %%copy = of the copy bandwidth "
           "above\n");
    return 0;
}
