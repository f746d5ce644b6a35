// Split-K partial products (ts_cuda_matmul_split, matmul.h): few-row products at decode whose caller sums
// the splits (the hyper-connection down|inject rows). Split q of a launch runs the block-type product
// of matmul_blocks.cuh (design: the top comment of matmul.cu) on its columns of the rows, its part of x
// staged in shared memory. ts_cuda_matmul_split_hc_write makes that x from the hyper-connection write
// before the read (one launch fewer a read at decode): every block of split q computes stream q's
// written values for its staging, and the blocks share out the write's stores, slice by slice
// (hc_split.cuh, whose body the one-launch read of hc.cu runs too).
extern "C" {
#include "quant/quant.h"
}
#include "cuda/layers.h"
#include "cuda/matmul.h"
#include "cuda/hc_split.cuh"
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
    issue_split_rows<TYPE, kWarps>(W, rb, wsplit, n_out, nb, q, static_cast<int>(blockIdx.x),
                                   static_cast<int>(gridDim.x));
    pdl_wait();
    stage_x<qtype<TYPE>, T>(xs, x + static_cast<size_t>(q) * ne0, ne0, xstride, kWarps * 32);
    __syncthreads();
    blocks_product<TYPE, 1, T, true, kWarps, true>(dense_rows{W + q * wsplit, rb}, n_out, nb, ne0, nullptr,
                                                   xs, y + q * ysplit, static_cast<int>(blockIdx.x),
                                                   static_cast<int>(gridDim.x));
}

// ts_cuda_matmul_split_hc_write: split q = blockIdx.y of the product with the write before it
// (split_hc_write_block, hc_split.cuh).
template <int TYPE, int T>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_split_hc_write_kernel(const uint8_t *__restrict__ W, size_t rb, size_t wsplit, int n_out, int nb,
                                 int ne0, ts_cuda_hc_write_in in, int C, int t0, float *__restrict__ y,
                                 size_t ysplit) {
    extern __shared__ float4 xs[]; // T·ne0/4 float4s
    const int q = static_cast<int>(blockIdx.y), bx = static_cast<int>(blockIdx.x),
              gx = static_cast<int>(gridDim.x);
    pdl_trigger();
    issue_split_rows<TYPE, kWarps>(W, rb, wsplit, n_out, nb, q, bx, gx);
    pdl_wait();
    split_hc_write_block<TYPE, T, kWarps, true>(W, rb, wsplit, n_out, nb, ne0, in, C, t0, y, ysplit, q, bx,
                                                gx, xs);
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
