// Shared small ops of the CUDA blocks (src/cuda/layers.h): the grouped RMS norm, twin of
// ts_cpu_rmsnorm (src/cpu/ops.c), and the token embedding, twin of the embedding step of
// ts_cpu_forward (src/cpu/forward.c).
//
// ts_cuda_rmsnorm — one thread block per (row, group): a block-wide fp32 sum of squares, then
//   y = (x · r) · g with r = 1 / sqrtf(Σx² / group + eps), the CPU's formula (a true division and
//   square root, not rsqrtf). Blocks are 32..256 threads, about 4 elements a thread, so groups of
//   64 (head norms) and of 2560 (stream norms) both keep the threads busy. In place is safe: a
//   thread writes only the elements it read itself.
//
// ts_cuda_embed — one thread block per row t: element i of token_embd row ids[t] is decoded once
//   (rows.cuh, bit-identical to ts_dequantize_row) and written into the C streams
//   R[t, c·H + i]. A token id outside the vocabulary (the host validates ids before they reach the
//   device) gives a zero row rather than a read out of bounds.
//
// Both launch grids depend only on the row count and the shapes: capturable in a CUDA graph.
#include "cuda/layers.h"
#include "cuda/rows.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kMaxThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the thread block, returned to every thread. blockDim.x a multiple of 32, ≤ 1024.
// Safe to call repeatedly in one kernel (the leading barrier protects the shared slots).
__device__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? part[lane] : 0.0f);
}

// Threads for a reduction over `n` elements: about 4 elements a thread, whole warps, 32..256.
int threads_for(int64_t n) {
    int64_t t = (n + 3) / 4;
    t = (t + 31) / 32 * 32;
    return static_cast<int>(t < 32 ? 32 : t > kMaxThreads ? kMaxThreads : t);
}

// Block b = (row b / gpr, group b % gpr).
__global__ void rmsnorm_kernel(const float *__restrict__ x, int64_t sx, const float *__restrict__ g,
                               int64_t gpr, int64_t group, float eps, float *y, int64_t sy) {
    const int64_t row = blockIdx.x / gpr, gi = blockIdx.x % gpr;
    const float *xr = x + row * sx + gi * group;
    float *yr = y + row * sy + gi * group;
    const float *gr = g ? g + gi * group : nullptr;

    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
    for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
        const float v = xr[i] * r;
        yr[i] = gr ? v * gr[i] : v;
    }
}

// Block t: token_embd row ids[t] replicated into the C streams of R (row stride W = C·H).
__global__ void embed_kernel(ts_cuda_tensor emb, const int32_t *__restrict__ ids, int64_t H, int64_t C,
                             float *__restrict__ R) {
    const int64_t t = blockIdx.x, W = C * H;
    float *Rt = R + t * W;
    const int32_t id = ids[t];
    if (id < 0 || id >= emb.rows) {
        for (int64_t i = threadIdx.x; i < W; i += blockDim.x) Rt[i] = 0.0f;
        return;
    }
    ts_cu::row_for_each(emb.type, ts_cu::tensor_row(emb, id), H, threadIdx.x, blockDim.x,
                        [&](int64_t i, float v) {
                            for (int64_t c = 0; c < C; c++) Rt[c * H + i] = v;
                        });
}

} // namespace

extern "C" int ts_cuda_rmsnorm(const float *x, int64_t sx, const float *g, int64_t rows, int64_t n,
                               int64_t group, float eps, float *y, int64_t sy, cudaStream_t s) {
    if (rows < 0 || n < 0 || group <= 0 || n % group != 0) return -1;
    const int64_t gpr = n / group, blocks = rows * gpr;
    if (blocks == 0) return 0;
    if (blocks > INT32_MAX) return -1;
    rmsnorm_kernel<<<static_cast<unsigned>(blocks), threads_for(group), 0, s>>>(x, sx, g, gpr, group, eps, y,
                                                                                sy);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int ts_cuda_embed(ts_cuda_work *w, const ts_cuda_batch *b, float *R, cudaStream_t s) {
    const ts_cuda_tensor *emb = &w->cm->token_embd;
    const int64_t H = w->hp->n_embd, C = w->hp->hc_count, N = b->n_rows;
    if (!ts_cu::row_type_supported(emb->type) || emb->ne0 != H || !emb->data) return -1;
    if (N <= 0) return 0;
    embed_kernel<<<static_cast<unsigned>(N), threads_for(H), 0, s>>>(*emb, b->ids, H, C, R);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
