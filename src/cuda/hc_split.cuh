// The split down|inject product with the hyper-connection write before it, one block's part: the body of
// ts_cuda_matmul_split_hc_write's kernel (matmul_split.cu) and the first phase of the one-launch read
// (hc.cu). It includes matmul_blocks.cuh (blocks_product), whose anonymous namespace it shares.
#ifndef TS_CUDA_HC_SPLIT_CUH
#define TS_CUDA_HC_SPLIT_CUH

#include "cuda/matmul.h"
#include "cuda/matmul_blocks.cuh"

namespace {

constexpr int kMaxSliceWarps = 16; // ts_cuda_hc_write_in.slice ≤ 512

// This block's rows of split q (groups of KW rows, as blocks_product takes them: group bx, bx + gx, ...) into
// L2 while the kernel before finishes; from its second group on with `after_first` (the first group's copies
// into shared memory made by blocks_issue_first).
template <int KW>
__device__ __forceinline__ void prefetch_split_rows(const uint8_t *W, size_t rb, size_t wsplit, int n_out,
                                                    int q, int bx, int gx, bool after_first = false) {
    for (int o = (bx + (after_first ? gx : 0)) * KW + (static_cast<int>(threadIdx.x) >> 5); o < n_out;
         o += gx * KW)
        prefetch_l2(W + static_cast<size_t>(o) * rb + q * wsplit, wsplit, threadIdx.x & 31, 32);
}

// Split q's rows of this block's first group: their first steps copied into shared memory before the wait
// (blocks_issue_first), the later groups' rows into L2; the product then runs with PRE = true.
template <int TYPE, int KW>
__device__ __forceinline__ void issue_split_rows(const uint8_t *W, size_t rb, size_t wsplit, int n_out,
                                                 int nb, int q, int bx, int gx) {
    blocks_issue_first<TYPE, 1, KW>(dense_rows{W + q * wsplit, rb}, n_out, nb, bx);
    prefetch_split_rows<KW>(W, rb, wsplit, n_out, q, bx, gx, true);
}

// Split q's x is stream q of tokens t0 .. t0 + T − 1 as the write leaves it, times g (matmul.h), staged in xs
// (T·ne0/4 float4s) by the block's KW warps; then the (token, slice) pairs of stream q are dealt to the gx
// blocks of the split (this one is bx): each writes its slice of v to r_out and its sum of squares to ss,
// element s·slice + w·32 + lane in warp w's butterfly, the warps' sums added in order, as hc_write_ss_kernel
// (hc.cu) adds them; then the block's rows of the product (blocks_product, groups bx, bx + gx, ...) into
// y + q·ysplit. A row's sums, and every written value, do not depend on KW, bx or gx.
template <int TYPE, int T, int KW, bool PRE = false>
__device__ __forceinline__ void
split_hc_write_block(const uint8_t *__restrict__ W, size_t rb, size_t wsplit, int n_out, int nb, int ne0,
                     const ts_cuda_hc_write_in &in, int C, int t0, float *__restrict__ y, size_t ysplit,
                     int q, int bx, int gx, float4 *xs) {
    __shared__ float part[kMaxSliceWarps];
    const int tid = static_cast<int>(threadIdx.x);
    const int64_t H = ne0, Wd = static_cast<int64_t>(C) * ne0;
    const int n4 = ne0 / 4;
    for (int f = tid; f < T * n4; f += KW * 32) {
        const int t = f / n4, j = f - t * n4;
        const int64_t tt = t0 + t, i = 4 * static_cast<int64_t>(j);
        const float4 r = *reinterpret_cast<const float4 *>(in.R + tt * Wd + q * H + i);
        const float4 g = *reinterpret_cast<const float4 *>(in.g + q * H + i);
        const float4 yv = *reinterpret_cast<const float4 *>(in.y + tt * H + i);
        const float k = in.inj[tt * C + q];
        float4 v;
        v.x = __fmaf_rn(yv.x, k, r.x) * g.x;
        v.y = __fmaf_rn(yv.y, k, r.y) * g.y;
        v.z = __fmaf_rn(yv.z, k, r.z) * g.z;
        v.w = __fmaf_rn(yv.w, k, r.w) * g.w;
        xs[x_swizzle<qtype<TYPE>>(static_cast<uint32_t>(f))] = v;
    }

    const int warp = tid >> 5, lane = tid & 31, nvw = in.slice / 32;
    const int nsl = static_cast<int>((H + in.slice - 1) / in.slice);
    for (int task = bx; task < T * nsl; task += gx) {
        const int t = task / nsl, sl = task - t * nsl;
        const int64_t tt = t0 + t;
        for (int vw = warp; vw < nvw; vw += KW) {
            const int64_t i = static_cast<int64_t>(sl) * in.slice + vw * 32 + lane;
            float sq = 0.0f;
            if (i < H) {
                const float v = __fmaf_rn(in.y[tt * H + i], in.inj[tt * C + q], in.R[tt * Wd + q * H + i]);
                in.r_out[tt * Wd + q * H + i] = v;
                sq = v * v;
            }
            for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
            if (lane == 0) part[vw] = sq;
        }
        __syncthreads();
        if (tid == 0) {
            float a = 0.0f;
            for (int vw = 0; vw < nvw; vw++) a += part[vw];
            in.ss[(tt * nsl + sl) * C + q] = a;
        }
        __syncthreads();
    }
    __syncthreads(); // xs complete
    blocks_product<TYPE, 1, T, true, KW, PRE>(dense_rows{W + q * wsplit, rb}, n_out, nb, ne0, nullptr, xs,
                                              y + q * ysplit, bx, gx);
}

} // namespace

#endif
