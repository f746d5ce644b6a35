// CUDA device discovery for `turbospark devices`: what the runtime sees, as sentences.
// The first piece of the CUDA backend; the kernels (one per op, beside their CPU twins) follow.
#include "cuda/cuda_device.h"
#include "cuda/pdl.cuh"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" int ts_cuda_list_devices(FILE *out, char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "no usable CUDA device: %s", cudaGetErrorString(e));
        return -1;
    }
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    fprintf(out, "CUDA driver %d.%d, runtime %d.%d, %d device(s)\n", driver / 1000, driver % 1000 / 10,
            runtime / 1000, runtime % 1000 / 10, n);
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        size_t free_b = 0, total_b = 0;
        cudaSetDevice(i);
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(out, "  %d: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free), L2 %.0f MiB\n", i, p.name, p.major,
                p.minor, p.multiProcessorCount, total_b / 1073741824.0, free_b / 1073741824.0,
                p.l2CacheSize / 1048576.0);
    }
    return 0;
}

extern "C" int ts_cuda_sm_count(void) {
    thread_local int dev = -1, n = 0;
    int d = 0;
    cudaGetDevice(&d);
    if (d != dev) {
        dev = d;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d) != cudaSuccess || n < 1) n = 1;
    }
    return n;
}

extern "C" int ts_cuda_switch_on(const char *name) {
    const char *v = getenv(name);
    return !(v && v[0] == '0');
}

// ts_cu::pdl_enabled (src/cuda/pdl.cuh): programmatic dependent launches unless TURBOSPARK_CUDA_PDL=0.
namespace ts_cu {
bool pdl_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_PDL");
    return on;
}
bool mma_enabled() {
    static const bool on = [] {
        const char *v = getenv("TURBOSPARK_CUDA_MMA");
        return v && v[0] == '1';
    }();
    return on;
}
} // namespace ts_cu
