// Hyper-connections on the GPU (spec §5.2), the twin of src/cpu/hc.c: read the C residual streams
// into one block input, write the block output back into every stream with its inject weight.
//
// Math, per token (W = C·H, streams s = 0..C−1 of H floats each):
//   Xn  = grouped_rmsnorm(R; norm, group H, eps)              → w->xn   (N × W)
//   lr  = silu((Dn·Xn) / C)                                   → w->lr   (N × r)
//   M   = Up·lr                                               → w->mix  (N × W)
//   x   = (Σ_s σ(M_s) ⊙ Xn_s) / C                             → x       (N × H)
//   inj = 2σ((Inj·Xn) / C)  (skipped for the final mixer)     → inj     (N × C)
// and the write: R_s += y ⊙ inj_s.
//
// Launches of hc_read: rmsnorm (ops.cu), the down and inject products (ts_cuda_matmul; one launch
// when the upload placed the inject rows right after the down rows, hc->down_inject), one
// elementwise kernel for both activations (lr and inj), the up product, and one kernel for the
// stream mix. Decode is latency-bound (96 reads a token), so two fusions save launches: the write of
// a block followed by the read of the next one is one kernel (ts_cuda_hc_write_norm: R += y·inj,
// then the next read's norm into w->xn), and ts_cuda_hc_read_xn starts from that w->xn. Elementwise kernels map one thread to one output element (grid-stride, 256 threads a
// block); their grids depend only on N and the shapes, so the whole sequence is graph-capturable.
// Formulas follow the CPU operation for operation (true divisions by C, expf-based sigmoid); the
// products sum in a different order, so results agree to fp32 rounding, not bit for bit.
#include "cuda/layers.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20; // grid-stride beyond this

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// lr[i] = silu(lr[i] / C) for i < n_lr; inj[j] = 2σ(inj[j] / C) for j < n_inj (n_inj = 0 without inject).
__global__ void hc_act_kernel(float *__restrict__ lr, int64_t n_lr, float *__restrict__ inj, int64_t n_inj, float C) {
    const int64_t n = n_lr + n_inj;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        if (e < n_lr) lr[e] = ts_dsilu(lr[e] / C);
        else inj[e - n_lr] = 2.0f * ts_dsigmoid(inj[e - n_lr] / C);
    }
}

// The combined down|inject product P (N × (r + C)) split: lr = silu(P[:, :r] / C), inj = 2σ(P[:, r:] / C).
__global__ void hc_act_split_kernel(const float *__restrict__ P, int64_t N, int64_t r, int64_t C, float *__restrict__ lr,
                                    float *__restrict__ inj) {
    const int64_t w = r + C, n = N * w;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / w, j = e % w;
        if (j < r) lr[t * r + j] = ts_dsilu(P[e] / (float)C);
        else inj[t * C + (j - r)] = 2.0f * ts_dsigmoid(P[e] / (float)C);
    }
}

// R_s += y ⊙ inj_s, then xn_s = R_s · rsqrt(mean(R_s²) + eps) · g_s: one block per (row, stream).
__global__ void hc_write_norm_kernel(float *__restrict__ R, const float *__restrict__ y, const float *__restrict__ inj,
                                     int64_t H, int64_t C, const float *__restrict__ g, float eps,
                                     float *__restrict__ xn) {
    const int64_t t = blockIdx.x, c = blockIdx.y, W = C * H;
    float *Rs = R + t * W + c * H, *Xs = xn + t * W + c * H;
    const float *yt = y + t * H, *gs = g + c * H;
    const float k = inj[t * C + c];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        const float v = Rs[i] + yt[i] * k;
        Rs[i] = v;
        ss += v * v;
    }
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float rs = 1.0f / sqrtf(part[0] / (float)H + eps);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) Xs[i] = (Rs[i] * rs) * gs[i];
}

// x[t, i] = (Σ_c σ(M[t, c·H + i]) · Xn[t, c·H + i]) / C, one thread per (t, i).
__global__ void hc_mix_kernel(const float *__restrict__ M, const float *__restrict__ Xn, int64_t N, int64_t H,
                              int64_t C, float *__restrict__ x) {
    const int64_t n = N * H, W = C * H;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / H, i = e % H;
        const float *Mt = M + t * W + i, *Xt = Xn + t * W + i;
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) s += ts_dsigmoid(Mt[c * H]) * Xt[c * H];
        x[e] = s / static_cast<float>(C);
    }
}

// R[t, c·H + i] += y[t, i] · inj[t, c], one thread per element of R.
__global__ void hc_write_kernel(float *__restrict__ R, const float *__restrict__ y, const float *__restrict__ inj,
                                int64_t N, int64_t H, int64_t C) {
    const int64_t W = C * H, n = N * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / W, j = e % W, c = j / H, i = j % H;
        R[e] += y[t * H + i] * inj[t * C + c];
    }
}

} // namespace

extern "C" int ts_cuda_hc_read_xn(ts_cuda_work *w, const ts_cuda_hc *hc, int64_t N, float *x, float *inj,
                                  cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    if (N <= 0) return 0;
    const bool with_inj = inj != nullptr;
    if (with_inj && !hc->inject.data) return -1;

    if (with_inj && hc->down_inject.data) { /* one product for both, split by the activation kernel */
        if (ts_cuda_matmul(&hc->down_inject, 0, r + C, w->xn, N, w->mix, s)) return -1;
        hc_act_split_kernel<<<blocks_for(N * (r + C)), kThreads, 0, s>>>(w->mix, N, r, C, w->lr, inj);
    } else {
        if (ts_cuda_matmul(&hc->down, 0, r, w->xn, N, w->lr, s)) return -1;
        if (with_inj && ts_cuda_matmul(&hc->inject, 0, C, w->xn, N, inj, s)) return -1;
        const int64_t n_lr = N * r, n_inj = with_inj ? N * C : 0;
        hc_act_kernel<<<blocks_for(n_lr + n_inj), kThreads, 0, s>>>(w->lr, n_lr, inj, n_inj, static_cast<float>(C));
    }
    if (cudaGetLastError() != cudaSuccess) return -1;

    if (ts_cuda_matmul(&hc->up, 0, W, w->lr, N, w->mix, s)) return -1;
    hc_mix_kernel<<<blocks_for(N * H), kThreads, 0, s>>>(w->mix, w->xn, N, H, C, x);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int ts_cuda_hc_read(ts_cuda_work *w, const ts_cuda_hc *hc, const float *R, int64_t N, float *x, float *inj,
                               cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, W = (int64_t)hp->hc_count * H;
    if (N <= 0) return 0;
    if (ts_cuda_rmsnorm(R, W, hc->norm, N, W, H, hp->eps, w->xn, W, s)) return -1;
    return ts_cuda_hc_read_xn(w, hc, N, x, inj, s);
}

extern "C" int ts_cuda_hc_write_norm(ts_cuda_work *w, float *R, const float *y, const float *inj, int64_t N,
                                     const float *g_next, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count;
    if (N <= 0) return 0;
    const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>(C));
    const int threads = H >= 1024 ? 512 : H >= 256 ? 256 : 64;
    hc_write_norm_kernel<<<grid, threads, 0, s>>>(R, y, inj, H, C, g_next, hp->eps, w->xn);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int ts_cuda_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t N,
                                cudaStream_t s) {
    const int64_t H = hp->n_embd, C = hp->hc_count;
    if (N <= 0) return 0;
    hc_write_kernel<<<blocks_for(N * C * H), kThreads, 0, s>>>(R, y, inj, N, H, C);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
