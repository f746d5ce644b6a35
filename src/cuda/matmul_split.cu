// Split-K partial products (ts_cuda_matmul_split, matmul.h): few-row products at decode whose caller sums
// the splits (the hyper-connection down|inject rows). Split q of a launch runs the block-type product
// of matmul_blocks.cuh (design: the top comment of matmul.cu) on its columns of the rows, its part of x
// staged in shared memory. ts_cuda_matmul_split_hc_write makes that x from the hyper-connection write
// before the read (one launch fewer a read at decode): every block of split q computes stream q's
// written values for its staging, and the blocks share out the write's stores, slice by slice.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/layers.h"
#include "cuda/matmul.h"
#include "cuda/matmul_blocks.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/unit_dot.cuh"

#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

namespace {

using namespace ts_cu;

constexpr int kMaxSplitT = 4; // tokens of one ts_cuda_matmul_split launch (more: several launches)

// This block's rows of split q (groups of kWarps rows, as blocks_product takes them) into L2 while the
// kernel before finishes.
__device__ __forceinline__ void prefetch_split_rows(const uint8_t *W, size_t rb, size_t wsplit, int n_out,
                                                    int q) {
    for (int o = static_cast<int>(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < n_out;
         o += gridDim.x * kWarps)
        prefetch_l2(W + static_cast<size_t>(o) * rb + q * wsplit, wsplit, threadIdx.x & 31, 32);
}

// Split-K (ts_cuda_matmul_split): split q = blockIdx.y multiplies columns q·ne0 .. q·ne0 + ne0 − 1
// of the rows (bytes q·wsplit on of each row) by the same columns of x (T rows of stride xstride)
// and writes its partial sums to y + q·ysplit (T × n_out). x of the split is staged in shared memory.
template <int TYPE, int T>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_split_kernel(const uint8_t *__restrict__ W, size_t rb, size_t wsplit, int n_out, int nb, int ne0,
                        const float *__restrict__ x, int xstride, float *__restrict__ y, size_t ysplit) {
    extern __shared__ float4 xs[]; // T·ne0/4 float4s
    const int q = static_cast<int>(blockIdx.y);
    pdl_trigger();
    prefetch_split_rows(W, rb, wsplit, n_out, q);
    pdl_wait();
    stage_x<qtype<TYPE>, T>(xs, x + static_cast<size_t>(q) * ne0, ne0, xstride, kWarps * 32);
    __syncthreads();
    blocks_product<TYPE, 1, T, true>(dense_rows{W + q * wsplit, rb}, n_out, nb, ne0, nullptr, xs,
                                     y + q * ysplit, static_cast<int>(blockIdx.x),
                                     static_cast<int>(gridDim.x));
}

constexpr int kMaxSliceWarps = 16; // ts_cuda_hc_write_in.slice ≤ 512

// ts_cuda_matmul_split_hc_write: split q's x is stream q of tokens t0 .. t0 + T − 1 as the write leaves
// it, times g (matmul.h); then the (token, slice) pairs of stream q are dealt to the blocks of the split:
// each writes its slice of v to r_out and its sum of squares to ss, element s·slice + w·32 + lane in
// warp w's butterfly, the warps' sums added in order, as hc_write_ss_kernel (hc.cu) adds them.
template <int TYPE, int T>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_split_hc_write_kernel(const uint8_t *__restrict__ W, size_t rb, size_t wsplit, int n_out, int nb,
                                 int ne0, ts_cuda_hc_write_in in, int C, int t0, float *__restrict__ y,
                                 size_t ysplit) {
    extern __shared__ float4 xs[]; // T·ne0/4 float4s
    __shared__ float part[kMaxSliceWarps];
    const int q = static_cast<int>(blockIdx.y), tid = static_cast<int>(threadIdx.x);
    const int64_t H = ne0, Wd = static_cast<int64_t>(C) * ne0;
    pdl_trigger();
    prefetch_split_rows(W, rb, wsplit, n_out, q);
    pdl_wait();
    const int n4 = ne0 / 4;
    for (int f = tid; f < T * n4; f += kWarps * 32) {
        const int t = f / n4, j = f - t * n4;
        const int64_t tt = t0 + t, i = 4 * static_cast<int64_t>(j);
        const float4 r = *reinterpret_cast<const float4 *>(in.R + tt * Wd + q * H + i);
        const float4 g = *reinterpret_cast<const float4 *>(in.g + q * H + i);
        const float4 y = *reinterpret_cast<const float4 *>(in.y + tt * H + i);
        const float k = in.inj[tt * C + q];
        float4 v;
        v.x = __fmaf_rn(y.x, k, r.x) * g.x;
        v.y = __fmaf_rn(y.y, k, r.y) * g.y;
        v.z = __fmaf_rn(y.z, k, r.z) * g.z;
        v.w = __fmaf_rn(y.w, k, r.w) * g.w;
        xs[x_swizzle<qtype<TYPE>>(static_cast<uint32_t>(f))] = v;
    }

    const int warp = tid >> 5, lane = tid & 31, nvw = in.slice / 32;
    const int nsl = static_cast<int>((H + in.slice - 1) / in.slice);
    for (int task = static_cast<int>(blockIdx.x); task < T * nsl; task += static_cast<int>(gridDim.x)) {
        const int t = task / nsl, sl = task - t * nsl;
        const int64_t tt = t0 + t;
        for (int vw = warp; vw < nvw; vw += kWarps) {
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
    blocks_product<TYPE, 1, T, true>(dense_rows{W + q * wsplit, rb}, n_out, nb, ne0, nullptr, xs,
                                     y + q * ysplit, static_cast<int>(blockIdx.x),
                                     static_cast<int>(gridDim.x));
}

struct split_args {
    const uint8_t *w;
    size_t rb, wsplit;
    int n_out, ne0, splits, xstride;
    const float *x;
    const ts_cuda_hc_write_in *hw; // the hyper-connection write that makes x (x unused), or NULL
    float *y;
    size_t ysplit;
    cudaStream_t s;
};

template <int TYPE, int T> void launch_split_T(const split_args &a, int t0) {
    const size_t xbytes = static_cast<size_t>(T) * a.ne0 * sizeof(float);
    const int nb = a.ne0 / qtype<TYPE>::QK;
    float *y = a.y + static_cast<size_t>(t0) * static_cast<size_t>(a.n_out);
    thread_local occupancy_cache cache, cache_hw;
    const int res = a.hw ? resident_blocks(matmul_split_hc_write_kernel<TYPE, T>, xbytes, true, cache_hw)
                         : resident_blocks(matmul_split_kernel<TYPE, T>, xbytes, true, cache);
    const dim3 grid(max(1, min(blocks_for(a.n_out, 1), res / a.splits)), a.splits);
    if (a.hw)
        launch(matmul_split_hc_write_kernel<TYPE, T>, grid, kWarps * 32, xbytes, a.s, a.w, a.rb, a.wsplit,
               a.n_out, nb, a.ne0, *a.hw, a.splits, t0, y, a.ysplit);
    else
        launch(matmul_split_kernel<TYPE, T>, grid, kWarps * 32, xbytes, a.s, a.w, a.rb, a.wsplit, a.n_out, nb,
               a.ne0, a.x + static_cast<size_t>(t0) * static_cast<size_t>(a.xstride), a.xstride, y, a.ysplit);
}

// T tokens in launches of up to kMaxSplitT (x staged in shared memory); each token's partial sums land
// where one launch of all T would put them (split q at q·ysplit, ysplit = T·n_out) and do not depend on
// the launch it rode in.
template <int TYPE> void launch_split(int T, const split_args &a) {
    for (int t0 = 0; t0 < T; t0 += kMaxSplitT) {
        switch (T - t0 < kMaxSplitT ? T - t0 : kMaxSplitT) {
        case 1:
            launch_split_T<TYPE, 1>(a, t0);
            break;
        case 2:
            launch_split_T<TYPE, 2>(a, t0);
            break;
        case 3:
            launch_split_T<TYPE, 3>(a, t0);
            break;
        default:
            launch_split_T<TYPE, 4>(a, t0);
            break;
        }
    }
}

// The shape checks of ts_cuda_matmul_split: 0 (ne0 and wsplit set), 1 for a shape its kernel does not take,
// -1 for invalid arguments.
int split_shape(const ts_cuda_tensor *W, int64_t n_out, int splits, int64_t T, int64_t x_stride, int *ne0,
                size_t *wsplit) {
    if (!W || !W->data || n_out < 0 || n_out > W->rows || n_out > INT_MAX || T < 0 || splits < 1) return -1;
    const ts_type_traits *tr = ts_type_get(W->type);
    if (!tr || is_plain(W->type) || !ts_cuda_matmul_supports(W->type) || !g_x_shared) return 1;
    if (W->ne0 % splits != 0 || (W->ne0 / splits) % tr->block_size != 0 || x_stride < W->ne0 ||
        x_stride % 4 != 0 || x_stride > INT_MAX || T > INT_MAX / 2 ||
        W->row_bytes != ts_row_size(W->type, W->ne0) || (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return 1;
    *ne0 = static_cast<int>(W->ne0 / splits);
    if ((T < kMaxSplitT ? T : kMaxSplitT) * *ne0 * sizeof(float) > static_cast<size_t>(kXsBudgetBytes))
        return 1;
    *wsplit = ts_row_size(W->type, *ne0);
    if (*wsplit % 16 != 0 && (W->type == TS_TYPE_Q4_K || W->type == TS_TYPE_Q5_K)) return 1; // A16 blocks
    return 0;
}

int run_split(const ts_cuda_tensor *W, int64_t n_out, int splits, const float *x_dev,
              const ts_cuda_hc_write_in *hw, int64_t T, int64_t x_stride, float *y_dev, cudaStream_t s) {
    if (!W || !W->data || n_out < 0 || n_out > W->rows || n_out > INT_MAX || T < 0 || splits < 1) return -1;
    if (n_out == 0 || T == 0) return 0;
    int ne0 = 0;
    size_t wsplit = 0;
    const int rc = split_shape(W, n_out, splits, T, x_stride, &ne0, &wsplit);
    if (rc != 0) return rc;
    const split_args a = {static_cast<const uint8_t *>(W->data),
                          W->row_bytes,
                          wsplit,
                          static_cast<int>(n_out),
                          ne0,
                          splits,
                          static_cast<int>(x_stride),
                          x_dev,
                          hw,
                          y_dev,
                          static_cast<size_t>(T) * static_cast<size_t>(n_out),
                          s};
    const int t = static_cast<int>(T);
    if (!with_block_type(W->type, [&](auto tt) { launch_split<decltype(tt)::value>(t, a); })) return 1;
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

bool aligned16(const void *p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

} // namespace

extern "C" int ts_cuda_matmul_split(const ts_cuda_tensor *W, int64_t n_out, int splits, const float *x_dev,
                                    int64_t T, int64_t x_stride, float *y_dev, cudaStream_t s) {
    if (T > 0 && n_out > 0 && (!x_dev || !y_dev || !aligned16(x_dev) || !aligned16(y_dev))) return -1;
    return run_split(W, n_out, splits, x_dev, nullptr, T, x_stride, y_dev, s);
}

extern "C" bool ts_cuda_matmul_split_takes(const ts_cuda_tensor *W, int64_t n_out, int splits, int64_t T,
                                           int64_t x_stride) {
    int ne0 = 0;
    size_t wsplit = 0;
    return split_shape(W, n_out, splits, T, x_stride, &ne0, &wsplit) == 0;
}

extern "C" int ts_cuda_matmul_split_hc_write(const ts_cuda_tensor *W, int64_t n_out, int splits,
                                             const ts_cuda_hc_write_in *in, int64_t T, float *y_dev,
                                             cudaStream_t s) {
    if (!W || !in || splits < 1 || splits > INT_MAX / 2) return -1;
    if (T > 0 && n_out > 0) {
        if (!in->R || !in->y || !in->inj || !in->g || !in->r_out || !in->ss || !y_dev || !aligned16(y_dev) ||
            !aligned16(in->R) || !aligned16(in->y) || !aligned16(in->g) || in->R == in->r_out ||
            in->slice < 32 || in->slice % 32 != 0 || in->slice > 32 * kMaxSliceWarps)
            return -1;
    }
    return run_split(W, n_out, splits, nullptr, in, T, W ? W->ne0 : 0, y_dev, s);
}
