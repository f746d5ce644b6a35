// Split-K partial products (ts_cuda_matmul_split, matmul.h): few-row products at decode whose caller sums
// the splits (the hyper-connection down|inject rows). Split q of a launch runs the block-type product
// of matmul_blocks.cuh (design: the top comment of matmul.cu) on its columns of the rows, its part of x
// staged in shared memory.
extern "C" {
#include "quant/quant.h"
}
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
    // this block's rows of split q (groups of kWarps rows, as blocks_product takes them) into L2 while
    // the kernel before finishes
    for (int o = static_cast<int>(blockIdx.x) * kWarps + (threadIdx.x >> 5); o < n_out;
         o += gridDim.x * kWarps)
        prefetch_l2(W + static_cast<size_t>(o) * rb + q * wsplit, wsplit, threadIdx.x & 31, 32);
    pdl_wait();
    stage_x<qtype<TYPE>, T>(xs, x + static_cast<size_t>(q) * ne0, ne0, xstride, kWarps * 32);
    __syncthreads();
    blocks_product<TYPE, 1, T, true>(dense_rows{W + q * wsplit, rb}, n_out, nb, ne0, nullptr, xs,
                                     y + q * ysplit, static_cast<int>(blockIdx.x),
                                     static_cast<int>(gridDim.x));
}

struct split_args {
    const uint8_t *w;
    size_t rb, wsplit;
    int n_out, ne0, splits, xstride;
    const float *x;
    float *y;
    size_t ysplit;
    cudaStream_t s;
};

template <int TYPE, int T> void launch_split_T(const split_args &a) {
    const auto kernel = matmul_split_kernel<TYPE, T>;
    const size_t xbytes = static_cast<size_t>(T) * a.ne0 * sizeof(float);
    thread_local occupancy_cache cache;
    const int res = resident_blocks(kernel, xbytes, true, cache);
    const int gx = max(1, min(blocks_for(a.n_out, 1), res / a.splits));
    const int nb = a.ne0 / qtype<TYPE>::QK;
    launch(kernel, dim3(gx, a.splits), kWarps * 32, xbytes, a.s, a.w, a.rb, a.wsplit, a.n_out, nb, a.ne0, a.x,
           a.xstride, a.y, a.ysplit);
}

// T tokens in launches of up to kMaxSplitT (x staged in shared memory); each token's partial sums land
// where one launch of all T would put them (split q at q·ysplit, ysplit = T·n_out) and do not depend on
// the launch it rode in.
template <int TYPE> void launch_split(int T, const split_args &a) {
    for (int t0 = 0; t0 < T; t0 += kMaxSplitT) {
        split_args c = a;
        c.x = a.x + static_cast<size_t>(t0) * static_cast<size_t>(a.xstride);
        c.y = a.y + static_cast<size_t>(t0) * static_cast<size_t>(a.n_out);
        switch (T - t0 < kMaxSplitT ? T - t0 : kMaxSplitT) {
        case 1:
            launch_split_T<TYPE, 1>(c);
            break;
        case 2:
            launch_split_T<TYPE, 2>(c);
            break;
        case 3:
            launch_split_T<TYPE, 3>(c);
            break;
        default:
            launch_split_T<TYPE, 4>(c);
            break;
        }
    }
}

} // namespace

extern "C" int ts_cuda_matmul_split(const ts_cuda_tensor *W, int64_t n_out, int splits, const float *x_dev,
                                    int64_t T, int64_t x_stride, float *y_dev, cudaStream_t s) {
    if (!W || !W->data || n_out < 0 || n_out > W->rows || n_out > INT_MAX || T < 0 || splits < 1) return -1;
    if (n_out == 0 || T == 0) return 0;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u))
        return -1;
    const ts_type_traits *tr = ts_type_get(W->type);
    if (!tr || is_plain(W->type) || !ts_cuda_matmul_supports(W->type) || !g_x_shared) return 1;
    if (W->ne0 % splits != 0 || (W->ne0 / splits) % tr->block_size != 0 || x_stride < W->ne0 ||
        x_stride % 4 != 0 || x_stride > INT_MAX || T > INT_MAX / 2 ||
        W->row_bytes != ts_row_size(W->type, W->ne0) || (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return 1;
    const int ne0 = static_cast<int>(W->ne0 / splits);
    if ((T < kMaxSplitT ? T : kMaxSplitT) * ne0 * sizeof(float) > static_cast<size_t>(kXsBudgetBytes))
        return 1;
    const size_t wsplit = ts_row_size(W->type, ne0);
    if (wsplit % 16 != 0 && (W->type == TS_TYPE_Q4_K || W->type == TS_TYPE_Q5_K)) return 1; // A16 blocks
    const split_args a = {static_cast<const uint8_t *>(W->data),
                          W->row_bytes,
                          wsplit,
                          static_cast<int>(n_out),
                          ne0,
                          splits,
                          static_cast<int>(x_stride),
                          x_dev,
                          y_dev,
                          static_cast<size_t>(T) * static_cast<size_t>(n_out),
                          s};
    const int t = static_cast<int>(T);
    if (!with_block_type(W->type, [&](auto tt) { launch_split<decltype(tt)::value>(t, a); })) return 1;
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}
