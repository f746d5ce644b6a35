/* Timing helpers of the CUDA benchmarks (bench_cuda_matmul, test_cuda_chain --bench): CUDA events around
 * each sample after warm-up samples, the median reported (docs/BENCHMARKS.md's method). */
#ifndef TS_TESTS_CUDA_BENCH_UTIL_H
#define TS_TESTS_CUDA_BENCH_UTIL_H

#include "cuda/cuda_common.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

static inline int bench_cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static inline float bench_median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* Median milliseconds of one launch of exec on s: `warmup` launches, then `samples` timed ones. */
static inline float bench_graph_ms(cudaGraphExec_t exec, cudaStream_t s, int warmup, int samples) {
    cudaEvent_t e0, e1;
    TS_CUDA_CHECK(cudaEventCreate(&e0));
    TS_CUDA_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc((size_t)samples * sizeof *ms);
    for (int i = 0; i < warmup + samples; i++) {
        TS_CUDA_CHECK(cudaEventRecord(e0, s));
        TS_CUDA_CHECK(cudaGraphLaunch(exec, s));
        TS_CUDA_CHECK(cudaEventRecord(e1, s));
        TS_CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= warmup) TS_CUDA_CHECK(cudaEventElapsedTime(&ms[i - warmup], e0, e1));
    }
    const float med = bench_median(ms, samples);
    free(ms);
    TS_CUDA_CHECK(cudaEventDestroy(e0));
    TS_CUDA_CHECK(cudaEventDestroy(e1));
    return med;
}

/* Device-to-device copy bandwidth, GB/s of bytes read + written: a 1 GiB cudaMemcpyAsync, median of 20
 * after 3. */
static inline double bench_copy_gbs(cudaStream_t s) {
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    TS_CUDA_CHECK(cudaMalloc(&a, bytes));
    TS_CUDA_CHECK(cudaMalloc(&b, bytes));
    TS_CUDA_CHECK(cudaMemset(a, 0x5A, bytes));
    cudaEvent_t e0, e1;
    TS_CUDA_CHECK(cudaEventCreate(&e0));
    TS_CUDA_CHECK(cudaEventCreate(&e1));
    float ms[20];
    for (int i = 0; i < 3 + 20; i++) {
        TS_CUDA_CHECK(cudaEventRecord(e0, s));
        TS_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
        TS_CUDA_CHECK(cudaEventRecord(e1, s));
        TS_CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 3) TS_CUDA_CHECK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
    }
    const float med = bench_median(ms, 20);
    TS_CUDA_CHECK(cudaEventDestroy(e0));
    TS_CUDA_CHECK(cudaEventDestroy(e1));
    TS_CUDA_CHECK(cudaFree(a));
    TS_CUDA_CHECK(cudaFree(b));
    return 2.0 * (double)bytes / (med * 1e-3) / 1e9;
}

#endif
