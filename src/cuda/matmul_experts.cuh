// The expert SIMT kernels of ts_cuda_matmul_experts (matmul.cu, whose top comment is the design): the
// block-type, plain-type and integer-MMA products (matmul_blocks.cuh, matmul_plain.cuh, matvec_mma.cuh) run
// once per item, each item's rows picked by its expert id on the device. Included by matmul.cu.
#ifndef TS_CUDA_MATMUL_EXPERTS_CUH
#define TS_CUDA_MATMUL_EXPERTS_CUH

#include "cuda/gemv_tc.h"
#include "cuda/matmul_blocks.cuh"
#include "cuda/matmul_plain.cuh"
#include "cuda/matvec_mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/unit_dot.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

// ---- expert products (ts_cuda_matmul_experts) -------------------------------------------------
//
// The same bodies as the dense kernels, one product per item. Grid: blockIdx.y walks the items (i, i +
// gridDim.y, ...; gridDim.y = min(n_items, 65535)), blockIdx.x the row groups of one item as in the
// dense kernels (block types: a resident grid looping over groups, plain types: one group a
// block). Each item reads its expert id from device memory, so the launch is the same whatever
// the router chose (capturable in a CUDA graph); x is restaged per item (T = 1: items of
// different experts share no weights).

// Where the rows of an item live (dense_rows, matmul_blocks.cuh, says what a Rows type is): one or two
// ranges (gate and up of split tensors) chosen per item from the expert id.
struct expert_rows {
    const uint8_t *p0, *p1; // first row of each part (p1 unused when n_part ≥ n_out)
    size_t rb;
    int n_part; // rows of part 0
    __device__ __forceinline__ const uint8_t *row(int o) const {
        return o < n_part ? p0 + static_cast<size_t>(o) * rb : p1 + static_cast<size_t>(o - n_part) * rb;
    }
};

// Arguments of one expert launch (gemv_tc.h); bind_item resolves an item's rows, x row and y row from them.
using expert_args = tc_expert_job;

// Item i: its weight rows (part 0: expert rows row_off .. row_off + n_part − 1 of W; part 1: the
// same rows of W2), its x row and its y row. False when its id is out of range.
__device__ __forceinline__ bool bind_item(const expert_args &a, int i, expert_rows &rows, const float *&x,
                                          float *&y) {
    x = a.x + static_cast<size_t>(i / a.x_div) * static_cast<size_t>(a.x_stride);
    y = a.y + static_cast<size_t>(i) * static_cast<size_t>(a.y_stride);
    const int e = a.ids ? __ldg(a.ids + i) : 0;
    rows.rb = a.rb;
    rows.n_part = a.n_part;
    if (e < 0 || e > a.e_max) {
        rows.p0 = rows.p1 = nullptr;
        return false;
    }
    const size_t r0 =
        (static_cast<size_t>(e) * static_cast<size_t>(a.rows_per_expert) + static_cast<size_t>(a.row_off)) *
        a.rb;
    rows.p0 = a.w0 + r0;
    rows.p1 = a.w1 ? a.w1 + r0 : rows.p0;
    return true;
}

// An item with an out-of-range id: the rows of y this block would have written become NaN (no
// weight is read), so a bad id shows up downstream instead of reading out of bounds.
__device__ __forceinline__ void fill_nan(float *y, int n_out, int rows_per_group, int g0, int gstep) {
    const float nan = __int_as_float(0x7fffffff);
    for (int g = g0; static_cast<int64_t>(g) * rows_per_group < n_out; g += gstep) {
        const int o1 =
            static_cast<int>(min(static_cast<int64_t>(n_out), static_cast<int64_t>(g + 1) * rows_per_group));
        for (int o = g * rows_per_group + static_cast<int>(threadIdx.x); o < o1; o += kWarps * 32) y[o] = nan;
    }
}

template <int TYPE, int R, bool XS>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_experts_blocks_kernel(const expert_args a, int nb, int ne0) {
    pdl_trigger();
    pdl_wait();                    // the expert ids come from the router kernel
    extern __shared__ float4 xs[]; // XS: ne0/4 float4s, the current item's x row
    for (int i = blockIdx.y; i < a.n_items; i += gridDim.y) {
        expert_rows rows;
        const float *x;
        float *y;
        const bool ok = bind_item(a, i, rows, x, y);
        if constexpr (XS) {
            __syncthreads(); // every warp is done with the previous item's x
            stage_x<qtype<TYPE>, 1>(xs, x, ne0, ne0, kWarps * 32);
            __syncthreads();
        }
        if (ok)
            blocks_product<TYPE, R, 1, XS>(rows, a.n_out, nb, ne0, x, xs, y, static_cast<int>(blockIdx.x),
                                           static_cast<int>(gridDim.x));
        else
            fill_nan(y, a.n_out, kWarps * R, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    }
}

// Expert products on the integer matrix units (matvec_mma.cuh): grid (⌈n_out/16⌉, items), a
// block per 16-row tile of one item; the item's x is staged as digits by every block of the item.
template <int TYPE>
__global__ void __launch_bounds__(kMmaWarps * 32) matmul_experts_mma_kernel(const expert_args a, int ne0) {
    extern __shared__ __align__(16) uint8_t sm[];
    const mma_smem m(sm, ne0);
    pdl_trigger();
    pdl_wait(); // the expert ids come from the router kernel
    for (int i = blockIdx.y; i < a.n_items; i += gridDim.y) {
        expert_rows rows;
        const float *x;
        float *y;
        const bool ok = bind_item(a, i, rows, x, y);
        __syncthreads(); // every warp is done with the previous item's digits
        mma_stage_digits(x, ne0, m.dg, m.xsc, m.xsum);
        __syncthreads();
        if (ok)
            mma_tile<TYPE>(rows, a.n_out, ne0, m.dg, m.xsc, m.xsum, y, static_cast<int>(blockIdx.x));
        else if (threadIdx.x < 16 &&
                 static_cast<int>(blockIdx.x) * 16 + static_cast<int>(threadIdx.x) < a.n_out)
            y[blockIdx.x * 16 + threadIdx.x] = __int_as_float(0x7fffffff);
    }
}

template <int TYPE, int R>
__global__ void __launch_bounds__(kWarps * 32) matmul_experts_plain_kernel(const expert_args a, int ne0) {
    pdl_trigger();
    pdl_wait(); // the expert ids come from the router kernel
    for (int i = blockIdx.y; i < a.n_items; i += gridDim.y) {
        expert_rows rows;
        const float *x;
        float *y;
        if (bind_item(a, i, rows, x, y))
            plain_product<TYPE, R, 1>(rows, a.n_out, ne0, x, y, static_cast<int>(blockIdx.x));
        else
            fill_nan(y, a.n_out, kWarps * R, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    }
}

template <int TYPE>
__global__ void __launch_bounds__(kWarps * 32) matmul_experts_plain_any_kernel(const expert_args a, int ne0) {
    pdl_trigger();
    pdl_wait(); // the expert ids come from the router kernel
    for (int i = blockIdx.y; i < a.n_items; i += gridDim.y) {
        expert_rows rows;
        const float *x;
        float *y;
        if (bind_item(a, i, rows, x, y))
            plain_any_product<TYPE>(rows, a.n_out, ne0, x, 1, y, static_cast<int>(blockIdx.x));
        else
            fill_nan(y, a.n_out, kWarps, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
    }
}

} // namespace

#endif
