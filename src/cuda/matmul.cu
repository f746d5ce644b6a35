// Quantized GEMV and small-batch matrix products, the CUDA twin of ts_cpu_matmul (see matmul.h).
//
// Design (decode is memory-bound: every weight byte is read once per launch, so the kernels are
// built to keep HBM busy and to spend as few instructions as possible per weight):
//
//  * One warp owns R whole rows (R = 1, 2 or 4) and loops over them in steps of 32 "units", one
//    unit a lane. A unit is 32 weights that share their scales: a 32-element block (Q8_0, Q4_0,
//    Q4_1, Q5_0, Q5_1, IQ4_NL) or an eighth of a 256-element super-block (Q4_K, Q5_K, Q6_K, IQ4_XS,
//    and the low-bit Q2_K, Q3_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), seen as two runs of
//    16 consecutive elements (src/cuda/quant_decode.cuh). Reusing each decoded weight for
//    T ≤ 8 tokens costs only the FMAs.
//  * x is staged once per thread block in shared memory (T·ne0 floats up to 48 KiB), swizzled so
//    that the lanes' float4 reads, 32 to 128 bytes apart, hit distinct banks; the grid is sized to
//    be resident and each block loops over row groups, so x is copied once per block, not per row.
//    Read straight through L1 instead, those strided reads touch 32 cache lines per instruction:
//    the first version did that and streamed only 20-25 % of HBM bandwidth (docs/BENCHMARKS.md).
//    Larger T·ne0 still takes that path (TODO: stage x per step for it).
//  * Block bytes are staged in shared memory by cp.async (16-byte lines, L1 bypassed, coalesced
//    whatever the block size): the blocks of Q8_0 (34 bytes), Q4_0 (18), Q6_K (210) ... are only
//    2-byte aligned, so lanes cannot load their own block with 16-byte loads, but the warp can load
//    the row's byte range with them. A 4-stage pipeline (2 for R = 4) keeps up to 3 steps of every
//    row in flight per warp while it decodes the current one.
//  * Decode without integer-to-float conversions (I2F runs at a quarter of the FMA rate): each
//    quant is first made an unsigned byte (q + bias) with a few 32-bit mask/shift/permute ops per 4
//    or 8 quants, then PRMT places the byte in the mantissa of 2^23, and one FADD of -(2^23 + bias)
//    gives the exact integer value. Per weight: PRMT + FADD + T FFMAs, plus shared mask work.
//    Scales (and K-quant mins, through Σx of the run) are applied once per 16-element run.
//  * Plain types (F32, F16, BF16) need no staging: 16-byte streaming loads straight from global
//    memory, 8 elements a lane; rows whose length is not a multiple of 8 take a scalar path.
//
//  * T ≥ ts_cuda_gemm_min_tokens() (16 by default) is not run here: ts_cuda_matmul hands it to the
//    tiled GEMM of gemm.cu, which decodes each weight once per tile of tokens.
//
//  * Expert products (ts_cuda_matmul_experts) run the same per-block bodies (blocks_product,
//    plain_product, plain_any_product: templated on where a product's rows live) once per item,
//    blockIdx.y the item: its expert id, read from device memory, picks the weight rows, so one
//    launch covers every (token, expert) pair of a MoE layer without a host round trip.
//
// Numerics: weights decode to exactly the values of ts_dequantize_row (integer quants are exact in
// fp32, scales are the same fp32 products); sums are fp32 with a different order than the CPU's,
// so results agree to a few ulps of Σ|w·x| (tests/cuda/test_cuda_matmul.c states the bound).
//
// TODO: the per-weight instruction count (~3.5 for 4-bit types) is near the issue limit at full
// HBM rate; a tensor-core path (integer weights as bf16, x split into bf16 terms) or int8 dot
// products would take it lower. Split-K (ts_cuda_matmul_split) serves few-row products whose caller
// sums the splits (the hyper-connection down|inject rows); a single expert slice is not split yet.
extern "C" {
#include "common/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
}
#include "cuda/cuda_common.h"
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_tc.h"
#include "cuda/gemv_tc.h"
#include "cuda/matmul.h"
#include "cuda/matvec_mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/rows.cuh"
#include "cuda/unit_dot.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

namespace {

using namespace ts_cu;

constexpr int kWarps = 4;      // warps per thread block
constexpr int kMaxT = 8;       // tokens per launch; larger T is sliced on the host
constexpr int kTcMaxRows = 64; // dense products of up to this many tokens run on the tensor-core kernel
                               // (launches of kTcMaxTokens), more on the tiled GEMM

// ---- the block-type kernel -------------------------------------------------------------------

// Sums each accumulator over the warp; lane 0 writes the valid rows.
template <int R, int T>
__device__ __forceinline__ void warp_reduce_store(float (&acc)[R][T], int lane, int o0, int nr, int n_out,
                                                  float *__restrict__ y) {
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = acc[r][t];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            acc[r][t] = v;
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r < nr) {
#pragma unroll
                for (int t = 0; t < T; t++) y[static_cast<size_t>(t) * n_out + o0 + r] = acc[r][t];
            }
        }
    }
}

// Where the rows of one product live: row o (o < n_out) starts at row(o). The dense product
// (ts_cuda_matmul) is one contiguous range of rows; an expert product (ts_cuda_matmul_experts)
// is one or two ranges (gate and up of split tensors) chosen per item from the expert id.
struct dense_rows {
    const uint8_t *w; // row0 applied
    size_t rb;
    __device__ __forceinline__ const uint8_t *row(int o) const { return w + static_cast<size_t>(o) * rb; }
};
struct expert_rows {
    const uint8_t *p0, *p1; // first row of each part (p1 unused when n_part ≥ n_out)
    size_t rb;
    int n_part; // rows of part 0
    __device__ __forceinline__ const uint8_t *row(int o) const {
        return o < n_part ? p0 + static_cast<size_t>(o) * rb : p1 + static_cast<size_t>(o - n_part) * rb;
    }
};

// The block-type product of one thread block: it owns groups g0, g0 + gstep, ... of kWarps·R
// consecutive rows (of n_out), each warp R rows of a group. nb: blocks per row. x (T·ne0 floats)
// is read from xs when XS (staged by the caller), else from global memory through L1.
template <int TYPE, int R, int T, bool XS, class Rows>
__device__ __forceinline__ void blocks_product(const Rows &rows, int n_out, int nb, int ne0,
                                               const float *__restrict__ x, const float4 *xs,
                                               float *__restrict__ y, int g0, int gstep) {
    using Q = qtype<TYPE>;
    constexpr int BPS = 32 / Q::UPB;            // blocks per step
    constexpr int STEP = BPS * Q::BS;           // bytes of one row per step
    constexpr int LINES = (STEP + 15) / 16 + 1; // 16-byte lines that can cover a step at any offset
    constexpr int BUF = LINES * 16 + 16;        // + slack read by lds_words_a2
    constexpr int NS = R >= 4 ? 2 : 4;          // pipeline stages
    __shared__ __align__(16) uint8_t stage[kWarps][NS][R][BUF];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nsteps = (nb + BPS - 1) / BPS;
    const int ngroups = (n_out + kWarps * R - 1) / (kWarps * R);

    for (int g = g0; g < ngroups; g += gstep) {
        const int o0 = (g * kWarps + warp) * R;
        if (o0 >= n_out) break; // only in the last group; warps never wait for each other below
        const int nr = min(R, n_out - o0);
        const uint8_t *rowp[R];
#pragma unroll
        for (int r = 0; r < R; r++) rowp[r] = rows.row(min(o0 + r, n_out - 1));

        // Copies the bytes of step s of every row into stage s % NS; always commits a group
        // (possibly empty) so that group s holds step s.
        auto issue = [&](int s) {
            if (s < nsteps) {
                const int b0 = s * BPS, b1 = min(b0 + BPS, nb);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint8_t *start = rowp[r] + static_cast<size_t>(b0) * Q::BS;
                    const uint8_t *a0 = align_down16(start);
                    const int nl =
                        static_cast<int>((start + static_cast<size_t>(b1 - b0) * Q::BS - a0 + 15) >> 4);
                    uint8_t *dst = stage[warp][s % NS][r];
                    for (int l = lane; l < nl; l += 32) cp_async16(dst + 16 * l, a0 + 16 * l);
                }
            }
            cp_async_commit();
        };

#pragma unroll
        for (int s = 0; s < NS - 1; s++) issue(s);

        float acc[R][T];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

        for (int s = 0; s < nsteps; s++) {
            issue(s + NS - 1);
            cp_async_wait<NS - 1>(); // this lane's copies of step s have landed
            __syncwarp();            // ... and every other lane's
            const int b = s * BPS + lane / Q::UPB;
            if (b < nb) {
                const int k = lane % Q::UPB;
                const uint8_t *blk[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint8_t *start = rowp[r] + static_cast<size_t>(s) * STEP;
                    blk[r] = stage[warp][s % NS][r] + (reinterpret_cast<uintptr_t>(start) & 15u) +
                             (lane / Q::UPB) * Q::BS;
                }
                unit_dot<Q, R, T, XS>(blk, k, x, xs, b * Q::QK, ne0, acc);
            }
            __syncwarp(); // stage s % NS is refilled by the next iteration's issue
        }
        // The groups still pending here are empty (steps past the end): stages are free.
        warp_reduce_store<R, T>(acc, lane, o0, nr, n_out, y);
    }
}

// W: first row of the product (row0 applied); rb: bytes per row; nb: blocks per row. A block
// owns groups of kWarps·R consecutive rows (group g, g + gridDim.x, ...: the grid is sized to be
// resident, so x is staged once per block, not once per group). XS: x (T·ne0 floats) is first
// copied to dynamic shared memory, swizzled.
template <int TYPE, int R, int T, bool XS>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_blocks_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int nb, int ne0,
                         const float *__restrict__ x, float *__restrict__ y) {
    extern __shared__ float4 xs[]; // XS: T·ne0/4 float4s
    pdl_trigger();
    pdl_wait();
    if constexpr (XS) {
        stage_x<qtype<TYPE>, T>(xs, x, ne0, ne0, kWarps * 32);
        __syncthreads();
    }
    blocks_product<TYPE, R, T, XS>(dense_rows{W, rb}, n_out, nb, ne0, x, xs, y, static_cast<int>(blockIdx.x),
                                   static_cast<int>(gridDim.x));
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

// ---- plain types -----------------------------------------------------------------------------

template <int TYPE> struct ptype;
template <> struct ptype<TS_TYPE_F32> {
    static constexpr int ESZ = 4;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const float4 a = __ldcs(reinterpret_cast<const float4 *>(p));
        const float4 b = __ldcs(reinterpret_cast<const float4 *>(p) + 1);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return reinterpret_cast<const float *>(row)[i];
    }
};
template <> struct ptype<TS_TYPE_F16> {
    static constexpr int ESZ = 2;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(p));
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = ts_cu_half_to_float(a[i] & 0xFFFFu);
            w[2 * i + 1] = ts_cu_half_to_float(a[i] >> 16);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return ts_cu_half_to_float(reinterpret_cast<const uint16_t *>(row)[i]);
    }
};
template <> struct ptype<TS_TYPE_BF16> {
    static constexpr int ESZ = 2;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(p));
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = __uint_as_float(a[i] << 16);
            w[2 * i + 1] = __uint_as_float(a[i] & 0xFFFF0000u);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t *>(row)[i]) << 16);
    }
};

// ne0 % 8 == 0: lane handles 8 consecutive elements per iteration with one or two 16-byte loads.
// The thread block computes row group g (kWarps·R rows) of n_out.
template <int TYPE, int R, int T, class Rows>
__device__ __forceinline__ void plain_product(const Rows &rows, int n_out, int ne0,
                                              const float *__restrict__ x, float *__restrict__ y, int g) {
    using P = ptype<TYPE>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o0 = (g * kWarps + warp) * R;
    if (o0 >= n_out) return;
    const int nr = min(R, n_out - o0);
    const uint8_t *rowp[R];
#pragma unroll
    for (int r = 0; r < R; r++) rowp[r] = rows.row(min(o0 + r, n_out - 1));
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

    // U units a lane in flight: their loads are all issued before the first FMA, so each warp keeps
    // U·R·16 bytes a lane outstanding (with few rows per SM, memory parallelism is the limit).
    constexpr int U = 4;
    const int nu = ne0 / 8;
    for (int u0 = lane; u0 < nu; u0 += 32 * U) {
        float w[U][R][8];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int u = u0 + 32 * j;
            if (u < nu) {
#pragma unroll
                for (int r = 0; r < R; r++) P::load8(rowp[r] + static_cast<size_t>(u) * 8 * P::ESZ, w[j][r]);
            }
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int u = u0 + 32 * j;
            if (u >= nu) break;
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 *xp = reinterpret_cast<const float4 *>(x + static_cast<size_t>(t) * ne0 + 8 * u);
                const float4 a = __ldg(xp), b = __ldg(xp + 1);
                const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i += 2) {
                        s0 = fmaf(w[j][r][i], xv[i], s0);
                        s1 = fmaf(w[j][r][i + 1], xv[i + 1], s1);
                    }
                    acc[r][t] += s0 + s1;
                }
            }
        }
    }
    warp_reduce_store<R, T>(acc, lane, o0, nr, n_out, y);
}

template <int TYPE, int R, int T>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_plain_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0,
                        const float *__restrict__ x, float *__restrict__ y) {
    pdl_trigger();
    pdl_wait();
    plain_product<TYPE, R, T>(dense_rows{W, rb}, n_out, ne0, x, y, static_cast<int>(blockIdx.x));
}

// Any row length: one warp a row, element by element, any T (the slow path; rare shapes only).
// The thread block computes rows g·kWarps .. g·kWarps + kWarps − 1.
template <int TYPE, class Rows>
__device__ __forceinline__ void plain_any_product(const Rows &rows, int n_out, int ne0,
                                                  const float *__restrict__ x, int T, float *__restrict__ y,
                                                  int g) {
    using P = ptype<TYPE>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o = g * kWarps + warp;
    if (o >= n_out) return;
    const uint8_t *row = rows.row(o);
    for (int t = 0; t < T; t++) {
        const float *xt = x + static_cast<size_t>(t) * ne0;
        float s = 0.0f;
        for (int i = lane; i < ne0; i += 32) s = fmaf(P::at(row, i), __ldg(xt + i), s);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) y[static_cast<size_t>(t) * n_out + o] = s;
    }
}

template <int TYPE>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_plain_any_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0,
                            const float *__restrict__ x, int T, float *__restrict__ y) {
    pdl_trigger();
    pdl_wait();
    plain_any_product<TYPE>(dense_rows{W, rb}, n_out, ne0, x, T, y, static_cast<int>(blockIdx.x));
}

// ---- expert products (ts_cuda_matmul_experts) -------------------------------------------------
//
// The same bodies as above, one product per item. Grid: blockIdx.y walks the items (i, i +
// gridDim.y, ...; gridDim.y = min(n_items, 65535)), blockIdx.x the row groups of one item as in the
// dense kernels (block types: a resident grid looping over groups, plain types: one group a
// block). Each item reads its expert id from device memory, so the launch is the same whatever
// the router chose (capturable in a CUDA graph); x is restaged per item (T = 1: items of
// different experts share no weights).

// Arguments of one expert launch; bind_item resolves an item's rows, x row and y row from them.
struct expert_args {
    const uint8_t *w0, *w1; // W->data, W2->data (w1 NULL: one part)
    size_t rb;              // bytes per row, both tensors
    const int32_t *ids;     // [n_items] expert ids, or NULL: expert 0 for every item
    int n_items;
    int64_t rows_per_expert, row_off;
    int e_max;  // largest id whose rows lie inside both tensors
    int n_part; // rows per part (the API's n_out)
    int n_out;  // rows per item: n_part, or 2·n_part with w1
    int x_div;  // items ⌊i / x_div⌋·x_div .. share one x row
    int64_t x_stride, y_stride;
    const float *x;
    float *y;
};

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

// ---- dispatch --------------------------------------------------------------------------------

struct launch_args {
    const uint8_t *w; // row0 applied
    size_t rb;
    int n_out, ne0;
    const float *x;
    float *y;
    cudaStream_t s;
};

inline int blocks_for(int n_out, int R) {
    return ((n_out + R - 1) / R + kWarps - 1) / kWarps;
}

// x is staged in shared memory when T·ne0 floats fit this (all T = 1 shapes of the model; T = 2 up
// to 6144): beyond it the block kernels read x through L1, uncoalesced (see the design note).
constexpr int kXsBudgetBytes = 48 * 1024;
constexpr int kMaxSplitT = 4; // tokens of one ts_cuda_matmul_split launch (more: several launches)

bool g_x_shared = true;

// Blocks for a grid that is resident at once (the block kernel loops over row groups). The caller
// keeps the cache, one per kernel instantiation and thread.
struct occupancy_cache {
    bool opted_in = false;
    size_t dyn = ~static_cast<size_t>(0);
    int blocks = 1;
};

template <typename K> int resident_blocks(K kernel, size_t dyn_smem, bool needs_opt_in, occupancy_cache &c) {
    if (needs_opt_in && !c.opted_in) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kXsBudgetBytes);
        c.opted_in = true;
    }
    if (dyn_smem != c.dyn) {
        int per_sm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, dyn_smem) !=
                cudaSuccess ||
            per_sm < 1)
            per_sm = 1;
        c.dyn = dyn_smem;
        c.blocks = per_sm * ts_cuda_sm_count();
    }
    return c.blocks;
}

template <int TYPE, int R, int T> void launch_one(const launch_args &a) {
    if constexpr (TYPE == TS_TYPE_F32 || TYPE == TS_TYPE_F16 || TYPE == TS_TYPE_BF16) {
        launch(matmul_plain_kernel<TYPE, R, T>, blocks_for(a.n_out, R), kWarps * 32, 0, a.s, a.w, a.rb,
               a.n_out, a.ne0, a.x, a.y);
    } else {
        const int nb = a.ne0 / qtype<TYPE>::QK;
        const size_t xbytes = static_cast<size_t>(T) * a.ne0 * sizeof(float);
        const int want = blocks_for(a.n_out, R);
        if (g_x_shared && xbytes <= static_cast<size_t>(kXsBudgetBytes)) {
            const auto kernel = matmul_blocks_kernel<TYPE, R, T, true>;
            thread_local occupancy_cache cache;
            const int blocks = min(want, resident_blocks(kernel, xbytes, true, cache));
            launch(kernel, blocks, kWarps * 32, xbytes, a.s, a.w, a.rb, a.n_out, nb, a.ne0, a.x, a.y);
        } else {
            const auto kernel = matmul_blocks_kernel<TYPE, R, T, false>;
            thread_local occupancy_cache cache;
            const int blocks = min(want, resident_blocks(kernel, 0, false, cache));
            launch(kernel, blocks, kWarps * 32, 0, a.s, a.w, a.rb, a.n_out, nb, a.ne0, a.x, a.y);
        }
    }
}

template <int TYPE, int R> void launch_T(int T, const launch_args &a) {
    switch (T) {
    case 1:
        launch_one<TYPE, R, 1>(a);
        break;
    case 2:
        launch_one<TYPE, R, 2>(a);
        break;
    case 3:
        launch_one<TYPE, R, 3>(a);
        break;
    case 4:
        launch_one<TYPE, R, 4>(a);
        break;
    case 5:
        launch_one<TYPE, R, 5>(a);
        break;
    case 6:
        launch_one<TYPE, R, 6>(a);
        break;
    case 7:
        launch_one<TYPE, R, 7>(a);
        break;
    default:
        launch_one<TYPE, R, 8>(a);
        break;
    }
}

// R = 4 is compiled for T = 1 only (its extra registers do not pay for more tokens).
template <int TYPE> void launch_type(int R, int T, const launch_args &a) {
    if (R == 4 && T == 1)
        launch_one<TYPE, 4, 1>(a);
    else if (R >= 2)
        launch_T<TYPE, 2>(T, a);
    else
        launch_T<TYPE, 1>(T, a);
}

int g_forced_rows_per_warp = 0;

bool is_plain(uint32_t type) {
    return type == TS_TYPE_F32 || type == TS_TYPE_F16 || type == TS_TYPE_BF16;
}

// Rows per warp: for block types two rows share each x load and Σx sum but halve the number of
// warps, so two only when there are rows enough to fill the GPU anyway; plain types need no x
// reuse (2 or 4 bytes a weight) and want the warps.
int rows_per_warp(uint32_t type, int n_out, int T) {
    if (g_forced_rows_per_warp == 1 || g_forced_rows_per_warp == 2 || g_forced_rows_per_warp == 4)
        return g_forced_rows_per_warp;
    if (is_plain(type)) return 1;
    // Four rows a warp pay at one token on ≥ 8192 rows for the 4- and 5-bit types (H200, 2560 → 10240,
    // bench_cuda_matmul, session 3: Q4_K 973 → 1198 GB/s, Q5_K 1093 → 1317, Q5_0 1385 → 1638), not
    // for Q8_0 and Q6_K (equal or slower) nor on fewer rows (6144 → 2560: 40 % slower).
    if (T == 1 && n_out >= 8192 && type != TS_TYPE_Q8_0 && type != TS_TYPE_Q6_K) return 4;
    return (T <= 2 && n_out >= 4096) ? 2 : 1;
}

// ---- expert dispatch ---------------------------------------------------------------------------

constexpr int kMaxGridY = 65535;

// The expert kernels alternate between row lengths (gate/up: H, down: F), hence shared-memory
// sizes: one occupancy entry per size, a few sizes per kernel.
struct occupancy_cache_set {
    occupancy_cache slot[4];
    int next = 0;
};

template <typename K>
int resident_blocks_keyed(K kernel, size_t dyn_smem, bool needs_opt_in, occupancy_cache_set &c) {
    for (occupancy_cache &sl : c.slot)
        if (sl.dyn == dyn_smem) return resident_blocks(kernel, dyn_smem, needs_opt_in, sl);
    occupancy_cache &sl = c.slot[c.next];
    c.next = (c.next + 1) % 4;
    return resident_blocks(kernel, dyn_smem, needs_opt_in, sl); // sl.dyn ≠ dyn_smem: recomputed
}

struct expert_launch {
    expert_args a;
    int ne0;
    cudaStream_t s;
};

template <int TYPE, int R> void launch_experts_one(const expert_launch &L) {
    const int gy = min(L.a.n_items, kMaxGridY);
    const int groups = (L.a.n_out + kWarps * R - 1) / (kWarps * R);
    if constexpr (TYPE == TS_TYPE_F32 || TYPE == TS_TYPE_F16 || TYPE == TS_TYPE_BF16) {
        launch(matmul_experts_plain_kernel<TYPE, R>, dim3(groups, gy), kWarps * 32, 0, L.s, L.a, L.ne0);
    } else {
        const int nb = L.ne0 / qtype<TYPE>::QK;
        const size_t xbytes = static_cast<size_t>(L.ne0) * sizeof(float);
        // A resident grid: the items of one wave share it (gx blocks an item, each looping over
        // groups), so every block stages its item's x once.
        if (g_x_shared && xbytes <= static_cast<size_t>(kXsBudgetBytes)) {
            const auto kernel = matmul_experts_blocks_kernel<TYPE, R, true>;
            thread_local occupancy_cache_set cache;
            const int res = resident_blocks_keyed(kernel, xbytes, true, cache);
            const int gx = max(1, min(groups, (res + gy - 1) / gy));
            launch(kernel, dim3(gx, gy), kWarps * 32, xbytes, L.s, L.a, nb, L.ne0);
        } else {
            const auto kernel = matmul_experts_blocks_kernel<TYPE, R, false>;
            thread_local occupancy_cache_set cache;
            const int res = resident_blocks_keyed(kernel, 0, false, cache);
            const int gx = max(1, min(groups, (res + gy - 1) / gy));
            launch(kernel, dim3(gx, gy), kWarps * 32, 0, L.s, L.a, nb, L.ne0);
        }
    }
}

// Expert products are T = 1 per item: R = 1 or 2 (a forced 4 runs as 2).
template <int TYPE> void launch_experts_type(int R, const expert_launch &L) {
    if (R >= 2)
        launch_experts_one<TYPE, 2>(L);
    else
        launch_experts_one<TYPE, 1>(L);
}

// ---- integer-MMA dispatch (matvec_mma.cuh; TURBOSPARK_CUDA_MMA=1) ----------------------------

bool mma_type(uint32_t type) {
    return type == TS_TYPE_Q4_K || type == TS_TYPE_Q5_K || type == TS_TYPE_Q8_0 || type == TS_TYPE_Q5_0 ||
           type == TS_TYPE_Q4_0;
}

// TYPE is a template parameter so that each kernel instantiation gets its own flag (the kernels of
// all types share one function-pointer type K).
template <int TYPE, typename K> void mma_opt_in(K kernel) {
    thread_local bool done = false; // one flag per kernel instantiation and thread
    if (!done)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kXsBudgetBytes),
            done = true;
}

template <int TYPE>
int launch_mma_t(const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, float *y, cudaStream_t s) {
    const auto kernel = matmul_mma_kernel<TYPE>;
    mma_opt_in<TYPE>(kernel);
    return launch(kernel, dim3(static_cast<unsigned>((n_out + 15) / 16)), dim3(kMmaWarps * 32),
                  mma_smem_bytes(ne0), s, w, rb, n_out, ne0, x, y) == cudaSuccess
               ? 0
               : -1;
}

int launch_mma(uint32_t type, const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, float *y,
               cudaStream_t s) {
    switch (type) {
    case TS_TYPE_Q4_K:
        return launch_mma_t<TS_TYPE_Q4_K>(w, rb, n_out, ne0, x, y, s);
    case TS_TYPE_Q5_K:
        return launch_mma_t<TS_TYPE_Q5_K>(w, rb, n_out, ne0, x, y, s);
    case TS_TYPE_Q8_0:
        return launch_mma_t<TS_TYPE_Q8_0>(w, rb, n_out, ne0, x, y, s);
    case TS_TYPE_Q5_0:
        return launch_mma_t<TS_TYPE_Q5_0>(w, rb, n_out, ne0, x, y, s);
    default:
        return launch_mma_t<TS_TYPE_Q4_0>(w, rb, n_out, ne0, x, y, s);
    }
}

template <int TYPE> int launch_mma_experts_t(const expert_args &a, int ne0, cudaStream_t s) {
    const auto kernel = matmul_experts_mma_kernel<TYPE>;
    mma_opt_in<TYPE>(kernel);
    const dim3 grid(static_cast<unsigned>((a.n_out + 15) / 16),
                    a.n_items < kMaxGridY ? a.n_items : kMaxGridY);
    return launch(kernel, grid, dim3(kMmaWarps * 32), mma_smem_bytes(ne0), s, a, ne0) == cudaSuccess ? 0 : -1;
}

int launch_mma_experts(uint32_t type, const expert_args &a, int ne0, cudaStream_t s) {
    switch (type) {
    case TS_TYPE_Q4_K:
        return launch_mma_experts_t<TS_TYPE_Q4_K>(a, ne0, s);
    case TS_TYPE_Q5_K:
        return launch_mma_experts_t<TS_TYPE_Q5_K>(a, ne0, s);
    case TS_TYPE_Q8_0:
        return launch_mma_experts_t<TS_TYPE_Q8_0>(a, ne0, s);
    case TS_TYPE_Q5_0:
        return launch_mma_experts_t<TS_TYPE_Q5_0>(a, ne0, s);
    default:
        return launch_mma_experts_t<TS_TYPE_Q4_0>(a, ne0, s);
    }
}

// The tensor-core GEMV takes the product unless it is switched off or a test forces a SIMT variant.
bool tc_applies(uint32_t type, int64_t ne0, int64_t x_rows, size_t row_bytes, bool whole_chunks) {
    return tc_gemv_enabled() && g_forced_rows_per_warp == 0 && g_x_shared &&
           tc_gemv_takes(type, ne0, x_rows, row_bytes, whole_chunks);
}

// Whether every chunk of 8 rows of a dense product / an expert product is whole and starts at a
// multiple of 8 rows (gemv_tc.h: rows that are not a multiple of 16 bytes).
bool dense_whole_chunks(int64_t row0, int64_t n_out) {
    return row0 % 8 == 0 && n_out % 8 == 0;
}

// The tokens of one tensor-core launch for a dense product of T tokens, or 0 when the product does not
// run there: 1 ≤ T ≤ kTcMaxRows, in launches of up to kTcMaxTokens tokens (8 where the x staging of 16 rows
// does not fit, e.g. 6144 inputs). The rounding of x is per token, so neither T nor the launch width
// changes a token's result.
int dense_tc(uint32_t type, int64_t ne0, int64_t T, size_t row_bytes, int64_t row0, int64_t n_out) {
    if (T < tc_gemv_min_tokens() || T > kTcMaxRows) return 0;
    const bool whole = dense_whole_chunks(row0, n_out);
    if (T > kMaxT && tc_applies(type, ne0, kTcMaxTokens, row_bytes, whole)) return kTcMaxTokens;
    return tc_applies(type, ne0, T < kMaxT ? T : kMaxT, row_bytes, whole) ? kMaxT : 0;
}
// A dense product of T tokens beyond the GEMV's (T ≥ the GEMM threshold) goes to the tensor-core GEMM when it
// takes the type and its x records fit the thread's scratch (gemm_tc.h); a test forcing a SIMT variant keeps
// it on the fp32 GEMM.
bool gemm_tc_applies(uint32_t type, int64_t ne0, int64_t T) {
    return g_forced_rows_per_warp == 0 && g_x_shared && T >= ts_cuda_gemm_min_tokens() &&
           ts_cuda_gemm_tc_takes(type, ne0, T);
}
bool expert_whole_chunks(int64_t rows_per_expert, int64_t row_off, int64_t n_out) {
    return rows_per_expert % 8 == 0 && row_off % 8 == 0 && n_out % 8 == 0;
}

// An expert product goes to the tensor cores when its items share their x rows (x_div > 1: the routed
// gate/up products, whose x rows are the tokens) or it has no ids (the shared expert's gate and up as
// one launch). Routed products with an x row per item (the down products: N·k rows) stay on the SIMT
// kernel, which reads each item's own row, where every tensor-core block would stage all of them.
bool expert_tc(uint32_t type, int64_t ne0, int64_t n_items, int64_t x_div, bool routed,
               int64_t rows_per_expert, int64_t row_off, int64_t n_out, size_t row_bytes) {
    const int64_t xd = x_div < n_items ? x_div : n_items, x_rows = (n_items + xd - 1) / xd;
    return (!routed || xd > 1) &&
           tc_applies(type, ne0, x_rows, row_bytes,
                      expert_whole_chunks(routed ? rows_per_expert : 8, row_off, n_out));
}

} // namespace

extern "C" int64_t ts_cuda_matmul_rounds_x(uint32_t type, int64_t ne0, int64_t T, int64_t row0,
                                           int64_t n_out) {
    if (dense_tc(type, ne0, T, ts_row_size(type, ne0), row0, n_out) > 0) return tc_gemv_group(type);
    return gemm_tc_applies(type, ne0, T) ? tc_gemv_group(type) : 0;
}

extern "C" int64_t ts_cuda_matmul_experts_rounds_x(uint32_t type, int64_t ne0, int64_t n_items, int64_t x_div,
                                                   bool routed, int64_t rows_per_expert, int64_t row_off,
                                                   int64_t n_out) {
    return n_items > 0 && x_div > 0 &&
                   expert_tc(type, ne0, n_items, x_div, routed, rows_per_expert, row_off, n_out,
                             ts_row_size(type, ne0))
               ? tc_gemv_group(type)
               : 0;
}

extern "C" bool ts_cuda_matmul_supports(uint32_t type) {
    return row_type_supported(type); // one list of the types the decoders take (rows.cuh)
}

extern "C" void ts_cuda_matmul_force_rows_per_warp(int rows) {
    g_forced_rows_per_warp = rows;
}

extern "C" void ts_cuda_matmul_allow_x_shared(bool allow) {
    g_x_shared = allow;
}

extern "C" int ts_cuda_tensor_upload(const ts_gguf_tensor *t, ts_cuda_tensor *out, char *err, size_t errlen) {
    if (!t || !out) return ts_errf(err, errlen, "ts_cuda_tensor_upload: no tensor given");
    const char *name = t->name.ptr ? t->name.ptr : "";
    const int name_len = static_cast<int>(t->name.ptr ? (t->name.len > 200 ? 200 : t->name.len) : 0);
    if (!ts_cuda_matmul_supports(t->type))
        return ts_errf(err, errlen, "tensor '%.*s' has type %s, which the CUDA matrix kernels do not support",
                       name_len, name, ts_type_name(t->type));
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t rb = ts_row_size(t->type, t->ne[0]);
    if (rb == 0 || rows <= 0 || t->ne[0] > INT_MAX)
        return ts_errf(err, errlen, "tensor '%.*s' (%s, %lld elements a row) cannot be used as a matrix",
                       name_len, name, ts_type_name(t->type), static_cast<long long>(t->ne[0]));
    const size_t bytes = rb * static_cast<size_t>(rows), padded = (bytes + 15) & ~static_cast<size_t>(15);
    void *d = nullptr;
    cudaError_t e = cudaMalloc(&d, padded);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return ts_errf(err, errlen,
                       "out of GPU memory for tensor '%.*s': asked %.1f MiB, %.1f MiB free of %.1f MiB",
                       name_len, name, padded / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
    }
    e = cudaMemcpy(d, t->data, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && padded > bytes)
        e = cudaMemset(static_cast<uint8_t *>(d) + bytes, 0, padded - bytes);
    if (e != cudaSuccess) {
        cudaFree(d);
        return ts_errf(err, errlen, "copying tensor '%.*s' to the GPU failed: %s", name_len, name,
                       cudaGetErrorString(e));
    }
    out->type = t->type;
    out->ne0 = t->ne[0];
    out->rows = rows;
    out->row_bytes = rb;
    out->data = d;
    out->owned = d;
    return 0;
}

extern "C" void ts_cuda_tensor_free(ts_cuda_tensor *t) {
    if (!t) return;
    if (t->owned) cudaFree(t->owned);
    t->owned = nullptr;
    t->data = nullptr;
}

namespace {

// ts_cuda_matmul (may_round) and ts_cuda_matmul_unrounded (never the tensor cores, which round x).
int matmul(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev, int64_t T, float *y_dev,
           bool may_round, cudaStream_t s) {
    if (!W || !W->data || !ts_cuda_matmul_supports(W->type)) return -1;
    if (row0 < 0 || n_out < 0 || T < 0 || row0 > W->rows || n_out > W->rows - row0) return -1;
    if (W->ne0 <= 0 || W->ne0 > INT_MAX / kMaxT || n_out > INT_MAX) return -1;
    if (n_out == 0 || T == 0) return 0;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u) || (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return -1;
    const ts_type_traits *tr = ts_type_get(W->type);
    if (!tr || W->ne0 % tr->block_size != 0 || W->row_bytes != ts_row_size(W->type, W->ne0)) return -1;
    const int ne0 = static_cast<int>(W->ne0), no = static_cast<int>(n_out);
    const uint8_t *w = static_cast<const uint8_t *>(W->data) + static_cast<size_t>(row0) * W->row_bytes;
    if (const int width = may_round ? dense_tc(W->type, W->ne0, T, W->row_bytes, row0, n_out)
                                    : 0) { // tensor cores (gemv_tc.h)
        for (int64_t t0 = 0; t0 < T; t0 += width) {
            const int tc = static_cast<int>(T - t0 < width ? T - t0 : width);
            if (tc_gemv(W->type, w, W->row_bytes, no, ne0, x_dev + t0 * W->ne0, tc, y_dev + t0 * n_out, s))
                return -1;
        }
        return 0;
    }
    // prefill-sized T: the tensor-core GEMM for its types (src/cuda/gemm_tc.cu, x rounded as above), else
    // the fp32 tiled GEMM; both read W once per tile of up to 64 / 128 tokens
    if (may_round && gemm_tc_applies(W->type, W->ne0, T))
        return ts_cuda_gemm_tc(W, row0, n_out, x_dev, T, y_dev, s);
    if (T >= ts_cuda_gemm_min_tokens()) return ts_cuda_gemm(W, row0, n_out, x_dev, T, y_dev, s);
    if (T == 1 && mma_enabled() && mma_type(W->type) &&
        mma_smem_bytes(ne0) <= static_cast<size_t>(kXsBudgetBytes))
        return launch_mma(W->type, w, W->row_bytes, no, ne0, x_dev, y_dev, s); // integer MMA (matvec_mma.cuh)
    if (is_plain(W->type) && ne0 % 8 != 0) {
        const int blocks = (no + kWarps - 1) / kWarps;
        switch (W->type) {
        case TS_TYPE_F32:
            launch(matmul_plain_any_kernel<TS_TYPE_F32>, blocks, kWarps * 32, 0, s, w, W->row_bytes, no, ne0,
                   x_dev, static_cast<int>(T), y_dev);
            break;
        case TS_TYPE_F16:
            launch(matmul_plain_any_kernel<TS_TYPE_F16>, blocks, kWarps * 32, 0, s, w, W->row_bytes, no, ne0,
                   x_dev, static_cast<int>(T), y_dev);
            break;
        default:
            launch(matmul_plain_any_kernel<TS_TYPE_BF16>, blocks, kWarps * 32, 0, s, w, W->row_bytes, no, ne0,
                   x_dev, static_cast<int>(T), y_dev);
            break;
        }
        return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
    }
    for (int64_t t0 = 0; t0 < T; t0 += kMaxT) {
        const int tc = static_cast<int>(T - t0 < kMaxT ? T - t0 : kMaxT);
        const launch_args a = {w, W->row_bytes, no, ne0, x_dev + t0 * W->ne0, y_dev + t0 * n_out, s};
        const int R = rows_per_warp(W->type, no, tc);
        if (!with_type(W->type, [&](auto t) { launch_type<decltype(t)::value>(R, tc, a); })) return -1;
    }
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

} // namespace

extern "C" int ts_cuda_matmul(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev,
                              int64_t T, float *y_dev, cudaStream_t s) {
    return matmul(W, row0, n_out, x_dev, T, y_dev, true, s);
}

extern "C" int ts_cuda_matmul_unrounded(const ts_cuda_tensor *W, int64_t row0, int64_t n_out,
                                        const float *x_dev, int64_t T, float *y_dev, cudaStream_t s) {
    return matmul(W, row0, n_out, x_dev, T, y_dev, false, s);
}

extern "C" int ts_cuda_matmul_experts(const ts_cuda_tensor *W, const ts_cuda_tensor *W2,
                                      const int32_t *ids_dev, int64_t n_items, int64_t rows_per_expert,
                                      int64_t row_off, int64_t n_out, const float *x_dev, int64_t x_div,
                                      int64_t x_stride, float *y_dev, int64_t y_stride, cudaStream_t s) {
    if (!W || !W->data || !ts_cuda_matmul_supports(W->type)) return -1;
    if (n_items < 0 || n_items > INT_MAX || rows_per_expert < 0 || row_off < 0 || n_out < 0 || x_div < 1)
        return -1;
    if (W->ne0 <= 0 || W->ne0 > INT_MAX / kMaxT) return -1;
    const ts_type_traits *tr = ts_type_get(W->type);
    if (!tr || W->ne0 % tr->block_size != 0 || W->row_bytes != ts_row_size(W->type, W->ne0)) return -1;
    if (reinterpret_cast<uintptr_t>(W->data) & 15u) return -1;
    int64_t rows = W->rows;
    if (W2) {
        if (!W2->data || W2->type != W->type || W2->ne0 != W->ne0 || W2->row_bytes != W->row_bytes ||
            (reinterpret_cast<uintptr_t>(W2->data) & 15u))
            return -1;
        if (W2->rows < rows) rows = W2->rows;
    }
    const int64_t parts = W2 ? 2 : 1;
    if (n_out > INT_MAX / parts) return -1;
    if (row_off > rows || n_out > rows - row_off) return -1; // expert 0's slice must exist
    int64_t e_max = 0;
    if (ids_dev) {
        if (rows_per_expert < 1 || row_off > rows_per_expert || n_out > rows_per_expert - row_off) return -1;
        e_max = (rows - row_off - n_out) / rows_per_expert;
        if (e_max > INT_MAX) e_max = INT_MAX;
    }
    if (n_out == 0 || n_items == 0) return 0;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u))
        return -1;
    if (x_stride < W->ne0 || x_stride % 4 != 0 || y_stride < parts * n_out || y_stride % 4 != 0) return -1;

    expert_args a;
    a.w0 = static_cast<const uint8_t *>(W->data);
    a.w1 = W2 ? static_cast<const uint8_t *>(W2->data) : nullptr;
    a.rb = W->row_bytes;
    a.ids = ids_dev;
    a.n_items = static_cast<int>(n_items);
    a.rows_per_expert = rows_per_expert;
    a.row_off = row_off;
    a.e_max = static_cast<int>(e_max);
    a.n_part = static_cast<int>(n_out);
    a.n_out = static_cast<int>(parts * n_out);
    a.x_div = static_cast<int>(x_div < n_items ? x_div : n_items);
    a.x_stride = x_stride;
    a.y_stride = y_stride;
    a.x = x_dev;
    a.y = y_dev;
    const expert_launch L = {a, static_cast<int>(W->ne0), s};

    if (is_plain(W->type) && L.ne0 % 8 != 0) {
        const dim3 grid((a.n_out + kWarps - 1) / kWarps, a.n_items < kMaxGridY ? a.n_items : kMaxGridY);
        switch (W->type) {
        case TS_TYPE_F32:
            launch(matmul_experts_plain_any_kernel<TS_TYPE_F32>, grid, kWarps * 32, 0, s, a, L.ne0);
            break;
        case TS_TYPE_F16:
            launch(matmul_experts_plain_any_kernel<TS_TYPE_F16>, grid, kWarps * 32, 0, s, a, L.ne0);
            break;
        default:
            launch(matmul_experts_plain_any_kernel<TS_TYPE_BF16>, grid, kWarps * 32, 0, s, a, L.ne0);
            break;
        }
        return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
    }
    if (expert_tc(W->type, W->ne0, a.n_items, a.x_div, ids_dev != nullptr, rows_per_expert, row_off, n_out,
                  W->row_bytes)) {
        // tensor cores, x in fp16 (gemv_tc.h)
        const tc_expert_job j = {a.w0,       a.w1,
                                 a.rb,       a.ids,
                                 a.n_items,  a.rows_per_expert,
                                 a.row_off,  a.e_max,
                                 a.n_part,   static_cast<int>(parts),
                                 a.x_div,    a.x_stride,
                                 a.y_stride, a.x,
                                 a.y};
        return tc_gemv_experts(W->type, j, L.ne0, s);
    }
    if (mma_enabled() && mma_type(W->type) && mma_smem_bytes(L.ne0) <= static_cast<size_t>(kXsBudgetBytes))
        return launch_mma_experts(W->type, a, L.ne0, s); // integer MMA (matvec_mma.cuh)
    // Rows per warp from all the rows of the launch (what fills the GPU).
    const int64_t total = n_items * parts * n_out;
    const int R = rows_per_warp(W->type, total > INT_MAX ? INT_MAX : static_cast<int>(total), 1);
    if (!with_type(W->type, [&](auto t) { launch_experts_type<decltype(t)::value>(R, L); })) return -1;
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

// ---- split-K ----------------------------------------------------------------------------------

namespace {

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
