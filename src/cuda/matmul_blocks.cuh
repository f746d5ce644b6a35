// The block-type SIMT product of the quantized GEMV (matmul.cu, whose top comment is the design):
// blocks_product, the per-block body that the dense, expert and split-K kernels all run, the dense
// kernel matmul_blocks_kernel, and the host helpers of their launches that matmul.cu and
// matmul_split.cu share (resident grids, the x staging budget and switch, is_plain).
// Both files include this header, so its anonymous namespace holds only what both use: nvcc warns
// about a non-template function there that a file does not call.
#ifndef TS_CUDA_MATMUL_BLOCKS_CUH
#define TS_CUDA_MATMUL_BLOCKS_CUH

extern "C" {
#include "quant/quant.h"
}
#include "cuda/cuda_device.h"
#include "cuda/pdl.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/unit_dot.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace ts_cu {
// Whether the block kernels stage x in shared memory (ts_cuda_matmul_allow_x_shared; defined in matmul.cu).
extern bool g_x_shared;
} // namespace ts_cu

namespace {

using namespace ts_cu;

constexpr int kWarps = 4; // warps per thread block

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
// is one or two ranges (gate and up of split tensors) chosen per item from the expert id
// (expert_rows, matmul_experts.cuh).
struct dense_rows {
    const uint8_t *w; // row0 applied
    size_t rb;
    __device__ __forceinline__ const uint8_t *row(int o) const { return w + static_cast<size_t>(o) * rb; }
};

// The pipeline of blocks_product: a step is BPS blocks of a row, NS stages a warp and row in shared memory (one
// array a kernel and shape: __shared__ in a device function is the block's, whichever call names it).
template <int TYPE, int R> struct blocks_pipe {
    using Q = qtype<TYPE>;
    static constexpr int BPS = 32 / Q::UPB;            // blocks per step
    static constexpr int STEP = BPS * Q::BS;           // bytes of one row per step
    static constexpr int LINES = (STEP + 15) / 16 + 1; // 16-byte lines that can cover a step at any offset
    static constexpr int BUF = LINES * 16 + 16;        // + slack read by lds_words_a2
    static constexpr int NS = R >= 4 ? 2 : 4;          // pipeline stages
};
template <int TYPE, int R, int KW>
__device__ __forceinline__
uint8_t (*blocks_stages())[blocks_pipe<TYPE, R>::NS][R][blocks_pipe<TYPE, R>::BUF] {
    using P = blocks_pipe<TYPE, R>;
    __shared__ __align__(16) uint8_t stage[KW][P::NS][R][P::BUF];
    return stage;
}

// Copies the bytes of step s of this warp's rows (rowp) into stage s % NS; always commits a group (possibly
// empty) so that group s holds step s.
template <int TYPE, int R, int KW>
__device__ __forceinline__ void blocks_issue(const uint8_t *const (&rowp)[R], int nb, int s, int warp,
                                             int lane) {
    using P = blocks_pipe<TYPE, R>;
    using Q = typename P::Q;
    const int nsteps = (nb + P::BPS - 1) / P::BPS;
    if (s < nsteps) {
        const int b0 = s * P::BPS, b1 = min(b0 + P::BPS, nb);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint8_t *start = rowp[r] + static_cast<size_t>(b0) * Q::BS;
            const uint8_t *a0 = align_down16(start);
            const int nl = static_cast<int>((start + static_cast<size_t>(b1 - b0) * Q::BS - a0 + 15) >> 4);
            uint8_t *dst = blocks_stages<TYPE, R, KW>()[warp][s % P::NS][r];
            for (int l = lane; l < nl; l += 32) cp_async16(dst + 16 * l, a0 + 16 * l);
        }
    }
    cp_async_commit();
}

// This warp's rows of group g (the last row repeated past n_out), or false when the group has none of them.
template <int R, int KW, class Rows>
__device__ __forceinline__ bool blocks_rows(const Rows &rows, int n_out, int g, int warp,
                                            const uint8_t *(&rowp)[R]) {
    const int o0 = (g * KW + warp) * R;
    if (o0 >= n_out) return false;
#pragma unroll
    for (int r = 0; r < R; r++) rowp[r] = rows.row(min(o0 + r, n_out - 1));
    return true;
}

// The first NS − 1 steps of group g0's rows, issued before the kernel's dependency wait (weights only): a caller
// that makes no other cp.async group before blocks_product<..., PRE = true> (whose first group then skips them).
template <int TYPE, int R, int KW = kWarps, class Rows>
__device__ __forceinline__ void blocks_issue_first(const Rows &rows, int n_out, int nb, int g0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint8_t *rowp[R];
    if (!blocks_rows<R, KW>(rows, n_out, g0, warp, rowp)) return;
#pragma unroll
    for (int s = 0; s < blocks_pipe<TYPE, R>::NS - 1; s++) blocks_issue<TYPE, R, KW>(rowp, nb, s, warp, lane);
}

// The block-type product of one thread block: it owns groups g0, g0 + gstep, ... of KW·R consecutive rows
// (of n_out), each of its KW warps R rows of a group (a row's sums do not depend on KW). nb: blocks per row.
// x (T·ne0 floats) is read from xs when XS (staged by the caller), else from global memory through L1.
// PRE: blocks_issue_first made group g0's first steps' copies.
template <int TYPE, int R, int T, bool XS, int KW = kWarps, bool PRE = false, class Rows>
__device__ __forceinline__ void blocks_product(const Rows &rows, int n_out, int nb, int ne0,
                                               const float *__restrict__ x, const float4 *xs,
                                               float *__restrict__ y, int g0, int gstep) {
    using P = blocks_pipe<TYPE, R>;
    using Q = typename P::Q;
    constexpr int NS = P::NS;
    auto stage = blocks_stages<TYPE, R, KW>();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nsteps = (nb + P::BPS - 1) / P::BPS;
    const int ngroups = (n_out + KW * R - 1) / (KW * R);

    for (int g = g0; g < ngroups; g += gstep) {
        const uint8_t *rowp[R];
        if (!blocks_rows<R, KW>(rows, n_out, g, warp, rowp))
            break; // only in the last group; warps never wait for each other below
        const int o0 = (g * KW + warp) * R, nr = min(R, n_out - o0);

        if (!PRE || g != g0)
#pragma unroll
            for (int s = 0; s < NS - 1; s++) blocks_issue<TYPE, R, KW>(rowp, nb, s, warp, lane);

        float acc[R][T];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

        for (int s = 0; s < nsteps; s++) {
            blocks_issue<TYPE, R, KW>(rowp, nb, s + NS - 1, warp, lane);
            cp_async_wait<NS - 1>(); // this lane's copies of step s have landed
            __syncwarp();            // ... and every other lane's
            const int b = s * P::BPS + lane / Q::UPB;
            if (b < nb) {
                const int k = lane % Q::UPB;
                const uint8_t *blk[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint8_t *start = rowp[r] + static_cast<size_t>(s) * P::STEP;
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

// ---- launch helpers (host; matmul.cu and matmul_split.cu) ---------------------------------

inline int blocks_for(int n_out, int R) {
    return ((n_out + R - 1) / R + kWarps - 1) / kWarps;
}

// x is staged in shared memory when T·ne0 floats fit this (all T = 1 shapes of the model; T = 2 up
// to 6144): beyond it the block kernels read x through L1, uncoalesced (see the design note).
constexpr int kXsBudgetBytes = 48 * 1024;

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

bool is_plain(uint32_t type) {
    return type == TS_TYPE_F32 || type == TS_TYPE_F16 || type == TS_TYPE_BF16;
}

} // namespace

#endif
