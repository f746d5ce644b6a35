// Weight upload of the CUDA forward (src/cuda/upload.cu): one pass lays the weights out (dry: the
// bytes each tensor takes, checked against the memory plan) and a second copies them into one device
// arena through two pinned staging buffers, or fills them with random valid blocks (benchmarks on
// synthetic files). ts_cuda_ctx_new (src/cuda/forward.cu) drives both.
#ifndef TS_CUDA_UPLOAD_CUH
#define TS_CUDA_UPLOAD_CUH

extern "C" {
#include "common/error.h"
}
#include "cuda/layers.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace ts_cu {

constexpr size_t kStage = 64u << 20; // pinned staging buffer for uploads (two of them)

inline int cuda_err(char *err, size_t errlen, const char *what, cudaError_t e) {
    return ts_errf(err, errlen, "%s failed on the GPU: %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

inline double gib(size_t b) {
    return b / 1073741824.0;
}

// Plans (dry) or copies every tensor into one device arena.
struct uploader {
    bool dry;                   // plan: only count bytes
    bool random;                // fill with random valid blocks instead of the file's bytes
    uint8_t *base = nullptr;    // device arena (not dry)
    size_t used = 0;            // bytes assigned so far
    size_t done = 0, total = 0; // progress (bytes copied / to copy)
    bool progress = false;
    int last_pct = -1;
    uint8_t *stage[2] = {nullptr, nullptr}; // pinned staging buffers
    cudaEvent_t ev[2] = {nullptr, nullptr};
    int cur = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char *err;
    size_t errlen;
    int rc = 0;

    void *take(size_t bytes) {                  // bytes as the memory plan counts them (aligned)
        void *p = base ? base + used : nullptr; // a dry uploader with a base only lays out
        used += bytes;
        return p;
    }
    void tick(size_t bytes) {
        done += bytes;
        if (!progress || !total) return;
        int pct = (int)(100.0 * (double)done / (double)total);
        if (pct != last_pct) {
            last_pct = pct;
            fprintf(stderr, "\rturbospark: uploading weights to the GPU %3d%% (%.1f of %.1f GiB)", pct,
                    gib(done), gib(total));
            if (done >= total) fputc('\n', stderr);
            fflush(stderr);
        }
    }
    float frand() { // uniform in [0, 1)
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        return (float)(rng >> 40) / 16777216.0f;
    }
    // host → device through the two pinned staging buffers (the mmap is pageable memory)
    void copy(void *dst, const void *src, size_t bytes) {
        for (size_t off = 0; off < bytes && !rc; off += kStage) {
            const size_t n = bytes - off < kStage ? bytes - off : kStage;
            cudaEventSynchronize(ev[cur]);
            memcpy(stage[cur], (const uint8_t *)src + off, n);
            cudaError_t e = cudaMemcpyAsync((uint8_t *)dst + off, stage[cur], n, cudaMemcpyHostToDevice, 0);
            if (e == cudaSuccess) e = cudaEventRecord(ev[cur], 0);
            if (e != cudaSuccess) rc = cuda_err(err, errlen, "copying weights to the GPU", e);
            cur ^= 1;
            tick(n);
        }
    }
    // fills dst[0..bytes) by repeating its first `pool` bytes (already there), doubling each copy
    void tile(uint8_t *dst, size_t pool, size_t bytes) {
        for (size_t have = pool; have < bytes && !rc;) {
            const size_t n = have < bytes - have ? have : bytes - have;
            cudaError_t e = cudaMemcpyAsync(dst + have, dst, n, cudaMemcpyDeviceToDevice, 0);
            if (e != cudaSuccess) rc = cuda_err(err, errlen, "filling random weights", e);
            have += n;
        }
        tick(bytes);
    }
};

// The trunk weights without the PLE table.
void up_trunk(uploader &u, const ts_model *m, ts_cuda_model *cm);
// The PLE table (joined, or one tensor per head) as gather-only tensors; the hash constants.
void up_table(uploader &u, const ts_model *m, ts_cuda_model *cm);

} // namespace ts_cu

#endif
