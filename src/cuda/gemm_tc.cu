// Prefill products on the tensor cores: y = W·x for many tokens (dense) or for the items of a grouped
// expert plan (gemm.h), Q4_K, Q5_K, Q6_K, Q8_0 and Q5_0 weights in their file encoding. The contract is
// gemm_tc.h's. The numerics are the decode GEMV's (gemv_tc.cuh): x rounded to fp16 once per (row,
// group of 256 or 128 inputs) after a power-of-two scale, the weights exact in fp16 (q·sc for the
// K-quants, q for the in-order types), fp32 accumulation in the MMAs, the scales applied in fp32 per
// super-block (K-quants), block (Q8_0, Q5_0) or sub-block (Q6_K). A token's result differs from the
// GEMV's only by the order of fp32 additions, and the CPU twin with TURBOSPARK_CPU_ROUND_X rounds the
// same operands the same way.
//
// Two kernels a product:
//  1. tc_x_prep_kernel: every x row, once, into one record per (row, group) in the scratch
//     (ts_cuda_tc_scratch_set): the A fragments in the GEMV's lane order, then (K-quants) the four
//     sub-block-sum words, then the scale 2^-s. Records are 576 bytes (K-quants: 512 + 32 + 4, padded)
//     or G/2·4 + 32 bytes (in-order: 288 for Q8_0 / Q5_0, 544 for Q6_K): strides that put the lanes'
//     16-byte (8-byte) fragment loads of 8 (4) consecutive tokens on distinct banks.
//  2. gemm_tc_kernel: a block of 8 warps computes 128 output rows × a tile of up to TT tokens (items),
//     K in steps of one group. TT is 64 for the expert plans; for the dense and split products, 64 or
//     128, whichever makes the launch's waves take less time (dense_shape_for). Warp w owns rows
//     16w .. 16w + 15 (two MMA n-tiles of 8 rows) and all the block's token tiles of 16. Per step it
//     builds the B fragments of its two row tiles once from the staged weight bytes (kquant_b_frags /
//     inorder_b_frag, the GEMV's builders) and runs them against each token tile's A fragments from
//     shared memory: per K-quant step and (row tile, token tile) 16 + 1 MMAs, then
//     acc += 2^-s·(d·C − 64·dmin·C_min) in fp32.
//     Shared memory is a ring of NS stages, each the x records of the block's token tiles in use for
//     one group and the weight bytes of the 128 rows for that group (aligned 16-byte lines covering
//     them: Q6_K, Q8_0 and Q5_0 blocks are only 2-byte aligned; the byte offset is recomputed when
//     read), filled by cp.async NS − 1 steps ahead, one barrier a step.
// Expert tiles take their items from the plan (tile q: expert e, items sorted[start .. start + cnt)),
// the x record of item i is that of x row ⌊i / x_div⌋, its outputs go to y + i·y_stride; a bad expert
// id gives NaN outputs and reads no weight.
// Split products (ts_cuda_gemm_tc_split): the prep kernel runs twice, for x and for the residual of
// x's own rounding (tc_x_residual, records after x's), and the GEMM's grid has a third dimension of
// parts: part p takes the records of half p / ksplit and the steps of K range p % ksplit, and writes
// its own T × n_out outputs, which the caller adds.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cp_async.cuh"
#include "cuda/cuda_device.h"
#include "cuda/gemm_tc.h"
#include "cuda/gemv_tc.h"
#include "cuda/tc_stage.cuh"
#include "model/memplan.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace ts_cu {

namespace {

constexpr int kWarpsTc = 8;             // warps a block
constexpr int kRowsTc = 16 * kWarpsTc;  // output rows a block
constexpr int kTokTc = 64;              // tokens (items) a block tile of the expert products
constexpr int kTokTcDense = 128;        // of the dense products (TURBOSPARK_CUDA_GEMM_TT=64: 64)
constexpr size_t kSmemMax = 227 * 1024; // shared memory a block may use
constexpr int kPrepRows = 8;            // x rows a block of the prep kernel stages

// ---- per type: the step (one x group), its record and its weight bytes --------------------------------

// A block's bytes and inputs, from the GEMV's tables of the two kinds.
template <int TYPE, bool INORDER> struct tc_block {
    static constexpr int BS = tc_kquant<TYPE>::BS, QK = kTcSuper;
};
template <int TYPE> struct tc_block<TYPE, true> {
    static constexpr int BS = tc_inorder<TYPE>::BS, QK = tc_inorder<TYPE>::QK;
};

template <int TYPE> struct tc_step {
    static constexpr bool kInorder = tc_kind<TYPE>::kInorder;
    static constexpr int G = tc_kind<TYPE>::G;                        // inputs a step
    static constexpr int REC = kInorder ? G / 2 * 4 + 32 : 576;       // bytes of an x record
    static constexpr int SC = kInorder ? G / 2 : 136;                 // u32 offset of the scale
    static constexpr int BS = tc_block<TYPE, kInorder>::BS;           // bytes a block
    static constexpr int QK = tc_block<TYPE, kInorder>::QK;           // inputs a block
    static constexpr int SB = G / QK * BS;                            // weight bytes a step and row
    static constexpr bool kWholeLines = SB % 16 == 0;                 // (with rows a multiple of 16 bytes)
    static constexpr int LINES = kWholeLines ? SB / 16 : SB / 16 + 2; // 16-byte lines covering a step's row
    // row stride in shared memory: 16 past a multiple of 128, so 8 rows' loads at one offset spread
    static constexpr int RS = LINES * 16 + (16 - (LINES * 16) % 128 + 128) % 128;
    // bytes of a ring stage for token tiles of TT
    __host__ __device__ static constexpr size_t stage(int TT) {
        return static_cast<size_t>(TT) * REC + static_cast<size_t>(kRowsTc) * RS;
    }
};

// The arguments of a launch (validated by the host functions below).
struct tc_gemm_args {
    const uint8_t *w0, *w1; // dense: W->data + row0·rb, NULL; experts: W->data, W2->data or NULL
    size_t rb;              // bytes per row (both tensors)
    int ng;                 // steps (groups) a row
    int nb_last;       // blocks of the last step (Q8_0, Q5_0: fewer than 4 when K ends in a partial group)
    int n_out, n_part; // output rows (P·n_part); rows ≥ n_part come from w1
    int64_t rows_per_expert, row_off;
    int e_max;           // largest expert whose rows lie inside both tensors
    const uint8_t *xrec; // the x records: [x rows][ng][REC bytes]
    int x_div;           // item i's x row is ⌊i / x_div⌋ (dense: 1)
    float *y;
    int64_t y_stride;      // floats from one token's (item's) outputs to the next
    int T;                 // dense: tokens
    const int32_t *sorted; // experts: the plan (tiles == NULL: dense)
    const int4 *tiles;
    const int32_t *n_tiles;
    // split products (blockIdx.z = part p): half p / ksplit (0: x, 1: the residual of its rounding, whose
    // records lie lo_off bytes after x's), K range p % ksplit of ksplit, outputs at y + p·part_stride;
    // fused (one part, ksplit 1): every block runs x's steps, then the residual's, into one sum
    int ksplit;
    size_t lo_off;
    int64_t part_stride;
    bool fused;
};

// acc += a group's sums times its x scales: 2^-s of token g (rows 2t, 2t + 1: v0, v1) and of token g + 8 (v2, v3).
__device__ __forceinline__ void add_scaled(float4 &acc, float e0, float e8, float v0, float v1, float v2,
                                           float v3) {
    acc.x = fmaf(e0, v0, acc.x);
    acc.y = fmaf(e0, v1, acc.y);
    acc.z = fmaf(e8, v2, acc.z);
    acc.w = fmaf(e8, v3, acc.w);
}
__device__ __forceinline__ float half_at(const uint8_t *p) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | p[1] << 8)));
}

// ---- kernel 1: x records ----------------------------------------------------------------------------

template <int TYPE, bool RES>
__global__ void __launch_bounds__(256) tc_x_prep_kernel(const float *__restrict__ x, int nx, int ne0,
                                                        int64_t x_stride, uint8_t *__restrict__ rec) {
    using S = tc_step<TYPE>;
    const int r0 = static_cast<int>(blockIdx.x) * kPrepRows, n = min(kPrepRows, nx - r0);
    const int ng = (ne0 + S::G - 1) / S::G; // a partial last group: Q8_0, Q5_0 (stage_x_inorder)
    uint32_t *base = reinterpret_cast<uint32_t *>(rec + static_cast<size_t>(r0) * ng * S::REC);
    constexpr int step = S::REC / 4; // u32 a record
    if constexpr (S::kInorder)
        stage_x_inorder<S::G, RES>(x + static_cast<size_t>(r0) * x_stride, n, ne0, x_stride, base,
                                   reinterpret_cast<float *>(base + S::SC), step, step);
    else
        stage_x_kquant<RES>(x + static_cast<size_t>(r0) * x_stride, n, ng, x_stride, base,
                            reinterpret_cast<uint2 *>(base + 128), reinterpret_cast<float *>(base + S::SC),
                            step, step / 2, step);
}

// ---- kernel 2: the GEMM -------------------------------------------------------------------------------

// acc[r][tt] (r: row tile, tt: token tile): tokens 16tt + g (.x rows 2t, .y 2t + 1) and 16tt + g + 8 (.z, .w).
// XR (x resident): the tile's x records for all its steps are staged once into shared memory, and the
// block walks row blocks blockIdx.x, blockIdx.x + gridDim.x, ... with only weights in the ring, one
// pipeline across them (products of few steps: the routed downs, K = 640, read their x once instead
// of once a row block). Otherwise the block computes row block blockIdx.x, x and weights in the ring.
template <int TYPE, int NS, int TT, bool XR>
__global__ void __launch_bounds__(kWarpsTc * 32, 1) gemm_tc_kernel(const tc_gemm_args a) {
    using S = tc_step<TYPE>;
    constexpr int kTokTiles = TT / 16; // MMA token tiles of 16
    // a ring stage: the x records and the weight lines of a step, or (XR) the weight lines only
    constexpr size_t STAGE = XR ? static_cast<size_t>(kRowsTc) * S::RS : S::stage(TT);
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ int items[TT]; // the block tile's items (dense: tokens)
    __shared__ int xrows[TT]; // their x rows
    const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2,
              t = lane & 3;
    const int n_rb = (a.n_out + kRowsTc - 1) / kRowsTc; // row blocks of the product
    // this block's row blocks: blockIdx.x + j·gridDim.x for j < nrb_mine (one without XR)
    const int nrb_mine = XR ? (n_rb - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                                  static_cast<int>(gridDim.x)
                            : 1;
    const int part = static_cast<int>(blockIdx.z), kz = part % a.ksplit;
    const int s0 = kz * a.ng / a.ksplit, nst = (kz + 1) * a.ng / a.ksplit - s0; // this block's K steps
    const int nsteps = a.fused ? 2 * nst : nst; // its steps: K steps s0 .. s0 + nst − 1 of each half
    const uint8_t *xrec = a.xrec + static_cast<size_t>(part / a.ksplit) * a.lo_off;
    float *y = a.y + part * a.part_stride;
    const int n_tiles = a.tiles ? *a.n_tiles : (a.T + TT - 1) / TT;
    uint8_t *ring = XR ? sm + static_cast<size_t>(nsteps) * TT * S::REC : sm; // XR: after the x records

    for (int q = static_cast<int>(blockIdx.y); q < n_tiles; q += static_cast<int>(gridDim.y)) {
        int e = 0, start, cnt;
        if (a.tiles) {
            const int4 ti = a.tiles[q];
            e = ti.x, start = ti.y, cnt = ti.z;
        } else {
            start = q * TT, cnt = min(TT, a.T - start);
        }
        __syncthreads(); // the previous tile is done with items and the stages
        if (tid < TT) {
            const int j = min(tid, cnt - 1); // tokens past the tile repeat its last one (never stored)
            const int it = a.tiles ? a.sorted[start + j] : start + j;
            items[tid] = it;
            xrows[tid] = it / a.x_div;
        }
        __syncthreads();
        if (e < 0 || e > a.e_max) { // bad expert id: NaN outputs, no weight read
            const float nan = __int_as_float(0x7fffffff);
            for (int jr = 0; jr < nrb_mine; jr++) {
                const int o0 = (static_cast<int>(blockIdx.x) + jr * static_cast<int>(gridDim.x)) * kRowsTc;
                for (int idx = tid; idx < kRowsTc * cnt; idx += kWarpsTc * 32) {
                    const int j = idx / kRowsTc, m = idx - j * kRowsTc;
                    if (o0 + m < a.n_out) y[static_cast<int64_t>(items[j]) * a.y_stride + o0 + m] = nan;
                }
            }
            continue;
        }
        const size_t r0 = (static_cast<size_t>(e) * static_cast<size_t>(a.rows_per_expert) +
                           static_cast<size_t>(a.row_off)) *
                          a.rb;
        // first byte of row m of the row block at o0 (rows past n_out repeat the last row: computed, never
        // stored)
        auto row_of = [&](int o0, int m) -> const uint8_t * {
            const int o = min(o0 + m, a.n_out - 1);
            return o < a.n_part ? a.w0 + r0 + static_cast<size_t>(o) * a.rb
                                : (a.w1 ? a.w1 : a.w0) + r0 + static_cast<size_t>(o - a.n_part) * a.rb;
        };
        const int ntt = (cnt + 15) / 16; // token tiles in use (the same for the whole block)
        // Step i of the block: row block blockIdx.x + (i / nsteps)·gridDim.x, and k = i % nsteps, K step
        // s = s0 + k of x's half (k < nst) or the residual's (k ≥ nst, fused split products).
        auto o0_of = [&](int i) {
            return (static_cast<int>(blockIdx.x) + (i / nsteps) * static_cast<int>(gridDim.x)) * kRowsTc;
        };
        auto kstep = [&](int k) { return s0 + k - (k >= nst) * nst; };
        // the x records of the token tiles in use (a tile of an expert plan is often partly filled) of
        // block step k into xs
        constexpr int XL = S::REC / 16;
        auto issue_x = [&](int k, uint8_t *xs) {
            const uint8_t *xh = xrec + (k >= nst) * a.lo_off;
            const int s = kstep(k);
            for (int idx = tid; idx < 16 * ntt * XL; idx += kWarpsTc * 32) {
                const int j = idx / XL, l = idx - j * XL;
                cp_async16(xs + j * S::REC + 16 * l,
                           xh + (static_cast<size_t>(xrows[j]) * a.ng + s) * S::REC + 16 * l);
            }
        };
        // stage i % NS of the ring ← step i: its x records (without XR), the weight lines of its rows
        auto issue = [&](int i) {
            const int k = i % nsteps, s = kstep(k), o0 = o0_of(i);
            const int sb = s == a.ng - 1 ? a.nb_last * S::BS : S::SB; // the step's weight bytes a row
            uint8_t *st = ring + static_cast<size_t>(i % NS) * STAGE;
            uint8_t *ws = XR ? st : st + static_cast<size_t>(TT) * S::REC;
            if (!XR) issue_x(k, st);
            for (int idx = tid; idx < kRowsTc * S::LINES; idx += kWarpsTc * 32) {
                const int m = idx / S::LINES, l = idx - m * S::LINES;
                const uintptr_t p =
                    reinterpret_cast<uintptr_t>(row_of(o0, m)) + static_cast<size_t>(s) * S::SB;
                const uintptr_t first = p & ~static_cast<uintptr_t>(15);
                if (first + 16 * l < p + sb) // lines past the step's bytes are not read
                    cp_async16(ws + m * S::RS + 16 * l, reinterpret_cast<const void *>(first + 16 * l));
            }
        };
        const int n_i = nrb_mine * nsteps;
        if (XR) // the tile's x records, in the first commit group with the ring's first stage
            for (int k = 0; k < nsteps; k++) issue_x(k, sm + static_cast<size_t>(k) * TT * S::REC);
        float4 acc[2][kTokTiles];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int tt = 0; tt < kTokTiles; tt++) acc[r][tt] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

#pragma unroll
        for (int i = 0; i < NS - 1; i++) {
            if (i < n_i) issue(i);
            cp_async_commit();
        }
        for (int i = 0; i < n_i; i++) {
            const int k = i % nsteps, s = kstep(k), o0 = o0_of(i);
            cp_async_wait<NS - 2>();
            __syncthreads(); // step i has landed for every thread; stage (i − 1) % NS is free
            if (i + NS - 1 < n_i) issue(i + NS - 1);
            cp_async_commit();
            const uint8_t *st = ring + static_cast<size_t>(i % NS) * STAGE;
            const uint8_t *xs = XR ? sm + static_cast<size_t>(k) * TT * S::REC : st;
            const uint8_t *ws = XR ? st : st + static_cast<size_t>(TT) * S::REC;
            // this warp's rows: tile r holds rows 16·warp + 8r + (0..7); lane g builds row g's fragments,
            // lane t reads the scales of rows 2t and 2t + 1
            auto wrow = [&](int m) { // the staged bytes of block row m at step s
                const uintptr_t p =
                    reinterpret_cast<uintptr_t>(row_of(o0, m)) + static_cast<size_t>(s) * S::SB;
                return ws + m * S::RS + (p & 15u);
            };
            if constexpr (!S::kInorder) {
                uint32_t B[2][16][2], Bmin[2];
                float2 f0[2], f1[2]; // {d, dmin} of rows 2t, 2t + 1
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int rb = 16 * warp + 8 * r;
                    kquant_b_frags<TYPE>(wrow(rb + g), t, B[r], Bmin[r]);
                    const uint32_t dd0 = *reinterpret_cast<const uint32_t *>(wrow(rb + 2 * t));
                    const uint32_t dd1 = *reinterpret_cast<const uint32_t *>(wrow(rb + 2 * t + 1));
                    f0[r] = __half22float2(*reinterpret_cast<const __half2 *>(&dd0));
                    f1[r] = __half22float2(*reinterpret_cast<const __half2 *>(&dd1));
                }
#pragma unroll
                for (int tt = 0; tt < kTokTiles; tt++) {
                    if (tt >= ntt) break;
                    const uint8_t *rg = xs + (16 * tt + g) * S::REC, *rg8 = rg + 8 * S::REC;
                    const uint4 *xa = reinterpret_cast<const uint4 *>(rg) + 8 * t;
                    const uint4 *xa8 = reinterpret_cast<const uint4 *>(rg8) + 8 * t;
                    float c[2][4] = {}, c1[2][4] = {}, cm[2][4] = {};
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        const uint4 av = xa[i ^ t], a8 = xa8[i ^ t];
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            mma_f16(c[r], av.x, a8.x, av.y, a8.y, B[r][2 * i][0], B[r][2 * i][1]);
                            mma_f16(c1[r], av.z, a8.z, av.w, a8.w, B[r][2 * i + 1][0], B[r][2 * i + 1][1]);
                        }
                    }
                    const uint2 sx = reinterpret_cast<const uint2 *>(rg + 512)[t],
                                sx8 = reinterpret_cast<const uint2 *>(rg8 + 512)[t];
                    const float e0 = reinterpret_cast<const float *>(rg)[S::SC],
                                e8 = reinterpret_cast<const float *>(rg8)[S::SC];
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        mma_f16(cm[r], sx.x, sx8.x, sx.y, sx8.y, Bmin[r], Bmin[r]);
                        const float v0 = fmaf(f0[r].x, c[r][0] + c1[r][0], -64.0f * f0[r].y * cm[r][0]);
                        const float v1 = fmaf(f1[r].x, c[r][1] + c1[r][1], -64.0f * f1[r].y * cm[r][1]);
                        const float v2 = fmaf(f0[r].x, c[r][2] + c1[r][2], -64.0f * f0[r].y * cm[r][2]);
                        const float v3 = fmaf(f1[r].x, c[r][3] + c1[r][3], -64.0f * f1[r].y * cm[r][3]);
                        add_scaled(acc[r][tt], e0, e8, v0, v1, v2, v3);
                    }
                }
            } else if constexpr (TYPE == TS_TYPE_Q6_K) { // 16 MMAs, each its sub-block's int8 scale; d once
                using Q = tc_inorder<TYPE>;
                uint32_t B[2][16][2];
                float d0[2], d1[2];
                const uint8_t *s0[2], *s1[2]; // rows 2t, 2t + 1 of each tile
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int rb = 16 * warp + 8 * r;
                    const uint8_t *rw = wrow(rb + g);
#pragma unroll
                    for (int m = 0; m < 16; m++) inorder_b_frag<TYPE>(rw, m, t, B[r][m][0], B[r][m][1]);
                    s0[r] = wrow(rb + 2 * t), s1[r] = wrow(rb + 2 * t + 1);
                    d0[r] = half_at(s0[r] + Q::BS - 2), d1[r] = half_at(s1[r] + Q::BS - 2);
                }
#pragma unroll
                for (int tt = 0; tt < kTokTiles; tt++) {
                    if (tt >= ntt) break;
                    const uint8_t *rg = xs + (16 * tt + g) * S::REC, *rg8 = rg + 8 * S::REC;
                    const uint2 *xa = reinterpret_cast<const uint2 *>(rg) + t;
                    const uint2 *xa8 = reinterpret_cast<const uint2 *>(rg8) + t;
                    float qv[2][4] = {};
#pragma unroll
                    for (int m = 0; m < 16; m++) {
                        const uint2 av = xa[m * 4], a8 = xa8[m * 4];
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            mma_f16(c, av.x, a8.x, av.y, a8.y, B[r][m][0], B[r][m][1]);
                            const float sc0 = static_cast<float>(static_cast<int8_t>(s0[r][192 + m]));
                            const float sc1 = static_cast<float>(static_cast<int8_t>(s1[r][192 + m]));
                            qv[r][0] = fmaf(sc0, c[0], qv[r][0]), qv[r][1] = fmaf(sc1, c[1], qv[r][1]);
                            qv[r][2] = fmaf(sc0, c[2], qv[r][2]), qv[r][3] = fmaf(sc1, c[3], qv[r][3]);
                        }
                    }
                    const float e0 = reinterpret_cast<const float *>(rg)[S::SC],
                                e8 = reinterpret_cast<const float *>(rg8)[S::SC];
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        add_scaled(acc[r][tt], e0, e8, d0[r] * qv[r][0], d1[r] * qv[r][1], d0[r] * qv[r][2],
                                   d1[r] * qv[r][3]);
                    }
                }
            } else { // Q8_0, Q5_0: a step is 4 blocks of 2 MMAs, each block its d
                using Q = tc_inorder<TYPE>;
                constexpr int NB = S::G / Q::QK; // 4
                // blocks past a partial last group: x is zero there, d is taken as 0 (the staged bytes are
                // an earlier step's)
                const int nbv = s == a.ng - 1 ? a.nb_last : NB;
                uint32_t B[2][2 * NB][2];
                float d0[2][NB], d1[2][NB];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int rb = 16 * warp + 8 * r;
                    const uint8_t *rw = wrow(rb + g), *w0 = wrow(rb + 2 * t), *w1 = wrow(rb + 2 * t + 1);
#pragma unroll
                    for (int b = 0; b < NB; b++) {
#pragma unroll
                        for (int m = 0; m < 2; m++)
                            inorder_b_frag<TYPE>(rw + b * Q::BS, m, t, B[r][2 * b + m][0],
                                                 B[r][2 * b + m][1]);
                        d0[r][b] = b < nbv ? half_at(w0 + b * Q::BS) : 0.0f;
                        d1[r][b] = b < nbv ? half_at(w1 + b * Q::BS) : 0.0f;
                    }
                }
#pragma unroll
                for (int tt = 0; tt < kTokTiles; tt++) {
                    if (tt >= ntt) break;
                    const uint8_t *rg = xs + (16 * tt + g) * S::REC, *rg8 = rg + 8 * S::REC;
                    const uint2 *xa = reinterpret_cast<const uint2 *>(rg) + t;
                    const uint2 *xa8 = reinterpret_cast<const uint2 *>(rg8) + t;
                    float sv[2][4] = {};
#pragma unroll
                    for (int b = 0; b < NB; b++) {
                        const uint2 av0 = xa[(2 * b) * 4], a80 = xa8[(2 * b) * 4];
                        const uint2 av1 = xa[(2 * b + 1) * 4], a81 = xa8[(2 * b + 1) * 4];
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            mma_f16(c, av0.x, a80.x, av0.y, a80.y, B[r][2 * b][0], B[r][2 * b][1]);
                            mma_f16(c, av1.x, a81.x, av1.y, a81.y, B[r][2 * b + 1][0], B[r][2 * b + 1][1]);
                            sv[r][0] = fmaf(d0[r][b], c[0], sv[r][0]),
                            sv[r][1] = fmaf(d1[r][b], c[1], sv[r][1]);
                            sv[r][2] = fmaf(d0[r][b], c[2], sv[r][2]),
                            sv[r][3] = fmaf(d1[r][b], c[3], sv[r][3]);
                        }
                    }
                    const float e0 = reinterpret_cast<const float *>(rg)[S::SC],
                                e8 = reinterpret_cast<const float *>(rg8)[S::SC];
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        add_scaled(acc[r][tt], e0, e8, sv[r][0], sv[r][1], sv[r][2], sv[r][3]);
                    }
                }
            }
            if (k < nsteps - 1) continue;
                // the row block's last step: outputs of token 16tt + g (and + 8), rows o0 + 16·warp + 8r + 2t,
                // + 1; the sums start again for the next row block
#pragma unroll
            for (int tt = 0; tt < kTokTiles; tt++) {
                if (tt >= ntt) break;
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int o = o0 + 16 * warp + 8 * r + 2 * t;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int j = 16 * tt + g + 8 * h;
                        if (j >= cnt) continue;
                        float *yr = y + static_cast<int64_t>(items[j]) * a.y_stride;
                        const float v0 = h ? acc[r][tt].z : acc[r][tt].x,
                                    v1 = h ? acc[r][tt].w : acc[r][tt].y;
                        if (o < a.n_out) yr[o] = v0;
                        if (o + 1 < a.n_out) yr[o + 1] = v1;
                    }
                    acc[r][tt] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
        }
        cp_async_wait<0>();
    }
}

// ---- host ----------------------------------------------------------------------------------------------

thread_local void *g_scratch = nullptr;
thread_local size_t g_scratch_bytes = 0;

template <int TYPE, int TT> constexpr int stages_for() {
    const int ns = static_cast<int>((kSmemMax - 1024) / tc_step<TYPE>::stage(TT));
    return ns >= 4 ? 4 : ns;
}

// The x-resident form (gemm_tc_kernel's XR): Q8_0 and Q5_0 (records of 288 bytes), token tiles of kTokTc,
// at most kXrMaxSteps block steps (K ≤ 768, or a split product of up to 3 groups in one part), so the
// records stay under 111 KiB; a ring of weights only, as deep as the rest of shared memory allows, up
// to 4. TURBOSPARK_CUDA_GEMM_XR=0 keeps the usual form.
constexpr int kXrMaxSteps = 6;
template <int TYPE> constexpr bool xr_type() {
    return TYPE == TS_TYPE_Q8_0 || TYPE == TS_TYPE_Q5_0;
}
template <int TYPE> constexpr int xr_stages() {
    const size_t x = static_cast<size_t>(kXrMaxSteps) * kTokTc * tc_step<TYPE>::REC;
    const int ns =
        static_cast<int>((kSmemMax - 1024 - x) / (static_cast<size_t>(kRowsTc) * tc_step<TYPE>::RS));
    return ns >= 4 ? 4 : ns;
}
bool xr_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_GEMM_XR");
    return on;
}
// Whether a product of this type, ne0 inputs and `halves` halves of x (2: a split product in one part)
// may take the x-resident form: the type's, its block steps few enough, not switched off.
bool xr_takes(uint32_t type, int64_t ne0, int halves) {
    const int64_t steps = halves * ((ne0 + 127) / 128); // Q8_0, Q5_0: groups of 128
    return xr_enabled() && (type == TS_TYPE_Q8_0 || type == TS_TYPE_Q5_0) && steps <= kXrMaxSteps;
}

// smem: this launch's dynamic shared memory; smem_max: the most any launch of the instantiation takes
template <int TYPE, int NS, int TT, bool XR>
int launch_gemm(const tc_gemm_args &a, dim3 grid, size_t smem, size_t smem_max, cudaStream_t s) {
    const auto kernel = gemm_tc_kernel<TYPE, NS, TT, XR>;
    static bool opted_in = false; // one flag per instantiation
    if (!opted_in) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem_max)) != cudaSuccess)
            return -1;
        opted_in = true;
    }
    kernel<<<grid, kWarpsTc * 32, smem, s>>>(a);
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

// the ring of as many stages as fit shared memory, up to 4 (at least 2)
template <int TYPE, int TT> int launch_stages(const tc_gemm_args &a, dim3 grid, cudaStream_t s) {
    constexpr int ns = stages_for<TYPE, TT>();
    static_assert(ns >= 2, "two stages of the ring fit shared memory");
    constexpr size_t smem = static_cast<size_t>(ns) * tc_step<TYPE>::stage(TT);
    return launch_gemm<TYPE, ns, TT, false>(a, grid, smem, smem, s);
}

// the x-resident form: nsteps block steps of x records, then the ring
template <int TYPE> int launch_xr(const tc_gemm_args &a, dim3 grid, int nsteps, cudaStream_t s) {
    using S = tc_step<TYPE>;
    constexpr int ns = xr_stages<TYPE>();
    static_assert(ns >= 2, "two stages of the ring fit shared memory");
    constexpr size_t ring = static_cast<size_t>(ns) * kRowsTc * S::RS;
    const size_t smem = static_cast<size_t>(nsteps) * kTokTc * S::REC + ring;
    return launch_gemm<TYPE, ns, kTokTc, true>(a, grid, smem,
                                               static_cast<size_t>(kXrMaxSteps) * kTokTc * S::REC + ring, s);
}

// The shape of a dense or split launch: token tiles of tt (kTokTc or kTokTcDense), gy of them in the grid,
// K in ks ranges.
struct dense_shape {
    int tt;
    unsigned gy;
    int ks;
};

// A block of kTokTcDense tokens takes ~1.76 times one of kTokTc (runs 46 and 49: the dense launches of a
// 4,096-row prompt 11-14 % faster a token with tiles of 128).
constexpr double kDenseTileCost = 1.76;

// The shape whose waves (one block an SM) take the least time, waves × a block's work (its tile's cost ×
// 1/ks of K), for gx row blocks, T tokens and `halves` parts a K range (1 dense, 2 split), with at most
// ks_max ranges; xr: tiles of kTokTc only (the x-resident form will run, xr_takes).
// TURBOSPARK_CUDA_GEMM_TT=64 or 128 fixes the tile.
dense_shape dense_shape_for(int64_t gx, int64_t T, int halves, int64_t ks_max, bool xr) {
    static const int forced = [] {
        const char *e = getenv("TURBOSPARK_CUDA_GEMM_TT");
        return !e ? 0 : !strcmp(e, "64") ? kTokTc : !strcmp(e, "128") ? kTokTcDense : 0;
    }();
    const int64_t sm = ts_cuda_sm_count() > 0 ? ts_cuda_sm_count() : 1;
    ks_max = ks_max < 1 ? 1 : ks_max < 16 ? ks_max : 16;
    dense_shape best = {kTokTc, 1, 1};
    double best_time = -1.0;
    for (const int tt : {kTokTc, kTokTcDense}) {
        if ((forced && tt != forced) || (xr && tt != kTokTc)) continue;
        const int64_t tiles = (T + tt - 1) / tt, gy = tiles < 65535 ? tiles : 65535;
        for (int64_t ks = 1; ks <= ks_max; ks++) {
            const int64_t waves = (gx * gy * halves * ks + sm - 1) / sm;
            const double time = static_cast<double>(waves) * (tt == kTokTc ? 1.0 : kDenseTileCost) / ks;
            if (best_time < 0.0 || time < best_time)
                best = {tt, static_cast<unsigned>(gy), static_cast<int>(ks)}, best_time = time;
        }
    }
    return best;
}

// x records, then the GEMM in token tiles of tt (kTokTc or kTokTcDense). split > 0: the split product (the
// residual's records after x's, K in split ranges, 2·split parts; a.fused: one part).
template <int TYPE>
int run(const float *x, int nx, int64_t x_stride, int ne0, tc_gemm_args a, unsigned gx, unsigned gy,
        int split, int tt, cudaStream_t s) {
    using S = tc_step<TYPE>;
    uint8_t *rec = static_cast<uint8_t *>(g_scratch);
    const unsigned pb = static_cast<unsigned>((nx + kPrepRows - 1) / kPrepRows);
    tc_x_prep_kernel<TYPE, false><<<pb, 256, 0, s>>>(x, nx, ne0, x_stride, rec);
    a.xrec = rec;
    a.ng = (ne0 + S::G - 1) / S::G;
    a.nb_last = (ne0 - (a.ng - 1) * S::G) / S::QK;
    a.ksplit = split > 0 ? split : 1;
    a.lo_off = 0;
    if (split > 0) {
        a.lo_off = static_cast<size_t>(nx) * static_cast<size_t>(a.ng) * S::REC;
        tc_x_prep_kernel<TYPE, true><<<pb, 256, 0, s>>>(x, nx, ne0, x_stride, rec + a.lo_off);
    }
    if (cudaPeekAtLastError() != cudaSuccess) return -1;
    if constexpr (xr_type<TYPE>()) {
        // x resident when its records fit and the product has several row blocks: the blocks then walk
        // the row blocks, as many blocks as make two waves with the token tiles (one, for expert plans)
        const int nsteps = (a.fused ? 2 : 1) * a.ng;
        if (xr_takes(TYPE, ne0, a.fused ? 2 : 1) && tt == kTokTc && (split == 0 || a.fused) && gx > 1) {
            const unsigned want = static_cast<unsigned>((2 * ts_cuda_sm_count() + gy - 1) / gy);
            return launch_xr<TYPE>(a, dim3(want < 1 ? 1 : want < gx ? want : gx, gy, 1), nsteps, s);
        }
    }
    const dim3 grid(gx, gy, split > 0 && !a.fused ? 2u * static_cast<unsigned>(split) : 1u);
    return tt == kTokTcDense ? launch_stages<TYPE, kTokTcDense>(a, grid, s)
                             : launch_stages<TYPE, kTokTc>(a, grid, s);
}

int run_type(uint32_t type, const float *x, int nx, int64_t x_stride, int ne0, const tc_gemm_args &a,
             unsigned gx, unsigned gy, int split, int tt, cudaStream_t s) {
    int rc = -1; // -1 for a type not in the list
    with_tc_type(
        type, [&](auto t) { rc = run<decltype(t)::value>(x, nx, x_stride, ne0, a, gx, gy, split, tt, s); });
    return rc;
}

size_t record_bytes(uint32_t type) {
    size_t rec = 0; // 0 for a type not in the list
    with_tc_type(type, [&](auto t) { rec = tc_step<decltype(t)::value>::REC; });
    return rec;
}

} // namespace

} // namespace ts_cu

using namespace ts_cu;

extern "C" void ts_cuda_tc_scratch_set(void *dev, size_t bytes) {
    g_scratch = (reinterpret_cast<uintptr_t>(dev) & 15u) ? nullptr : dev;
    g_scratch_bytes = g_scratch ? bytes : 0;
}

namespace {
// Whether x_rows rows of ne0 inputs fit the thread's scratch as records; partial: Q8_0 and Q5_0 widths
// may end in a partial group (whole blocks of 32).
bool records_fit(uint32_t type, int64_t ne0, int64_t x_rows, bool partial) {
    const size_t need = ts_memplan_tc_x_bytes(type, ne0, x_rows); // the records' sizes: the memory plan's
    const int G = tc_gemv_group(type);
    if (!tc_gemv_enabled() || need == 0 || G <= 0 || (ne0 % G != 0 && !partial)) return false;
    // the plan's record size must be this file's (a mismatch refuses rather than overrun the region)
    return need ==
               static_cast<size_t>(x_rows) * static_cast<size_t>((ne0 + G - 1) / G) * record_bytes(type) &&
           x_rows <= INT_MAX / 2 && ne0 <= (1 << 20) && g_scratch && need <= g_scratch_bytes;
}
} // namespace

extern "C" bool ts_cuda_gemm_tc_takes(uint32_t type, int64_t ne0, int64_t x_rows) {
    return records_fit(type, ne0, x_rows, false);
}

extern "C" int ts_cuda_gemm_tc(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev,
                               int64_t T, float *y_dev, cudaStream_t s) {
    if (!W || !W->data || row0 < 0 || n_out < 0 || T < 0 || row0 > W->rows || n_out > W->rows - row0)
        return -1;
    if (n_out > INT_MAX - 256 || T > INT_MAX - 256) return -1;
    if (n_out == 0 || T == 0) return 0;
    if (!ts_cuda_gemm_tc_takes(W->type, W->ne0, T) || W->row_bytes != ts_row_size(W->type, W->ne0)) return -1;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return -1;
    if (ts_cuda_gemm_wg_on() && ts_cuda_gemm_wg_takes(W->type, W->ne0, T, g_scratch_bytes) &&
        ts_cuda_gemm_wg(W, row0, n_out, x_dev, T, y_dev, n_out, g_scratch, g_scratch_bytes, s) == 0)
        return 0;
    tc_gemm_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data) + static_cast<size_t>(row0) * W->row_bytes;
    a.rb = W->row_bytes;
    a.n_out = a.n_part = static_cast<int>(n_out);
    a.x_div = 1;
    a.y = y_dev;
    a.y_stride = n_out;
    a.T = static_cast<int>(T);
    const int64_t gx = (n_out + kRowsTc - 1) / kRowsTc;
    const dense_shape d = dense_shape_for(gx, T, 1, 1, xr_takes(W->type, W->ne0, 1));
    return run_type(W->type, x_dev, static_cast<int>(T), W->ne0, static_cast<int>(W->ne0), a,
                    static_cast<unsigned>(gx), d.gy, 0, d.tt, s);
}

extern "C" bool ts_cuda_gemm_tc_experts_takes(const ts_cuda_expert_plan *plan, uint32_t type, int64_t ne0,
                                              int64_t x_div) {
    if (!plan || x_div < 1 || plan->tile > kTokTc) return false;
    const int64_t xd = x_div < plan->n_items ? x_div : plan->n_items;
    return ts_cuda_gemm_tc_takes(type, ne0, (plan->n_items + xd - 1) / xd);
}

extern "C" int ts_cuda_gemm_tc_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                       const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                                       int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                                       float *y_dev, int64_t y_stride, cudaStream_t s) {
    if (!W || !ts_cuda_gemm_tc_experts_takes(plan, W->type, W->ne0, x_div) ||
        W->row_bytes != ts_row_size(W->type, W->ne0))
        return -1;
    int64_t parts, e_max;
    const int ok = ts_cuda_expert_gemm_check(plan, W, W2, rows_per_expert, row_off, n_out, x_dev, x_div,
                                             x_stride, y_dev, y_stride, &parts, &e_max);
    if (ok <= 0) return ok;
    const int64_t xd = x_div < plan->n_items ? x_div : plan->n_items;
    tc_gemm_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data);
    a.w1 = W2 ? static_cast<const uint8_t *>(W2->data) : nullptr;
    a.rb = W->row_bytes;
    a.n_part = static_cast<int>(n_out);
    a.n_out = static_cast<int>(parts * n_out);
    a.rows_per_expert = rows_per_expert;
    a.row_off = row_off;
    a.e_max = static_cast<int>(e_max);
    a.x_div = static_cast<int>(xd);
    a.y = y_dev;
    a.y_stride = y_stride;
    a.sorted = plan->sorted;
    a.tiles = static_cast<const int4 *>(plan->tiles);
    a.n_tiles = plan->n_tiles;
    const int nx = static_cast<int>((plan->n_items + xd - 1) / xd);
    return run_type(W->type, x_dev, nx, x_stride, static_cast<int>(W->ne0), a,
                    static_cast<unsigned>((a.n_out + kRowsTc - 1) / kRowsTc),
                    static_cast<unsigned>(plan->max_tiles < 65535 ? plan->max_tiles : 65535), 0, kTokTc, s);
}

extern "C" bool ts_cuda_gemm_tc_split_takes(uint32_t type, int64_t ne0, int64_t T) {
    return T > 0 && T <= INT_MAX / 4 && records_fit(type, ne0, 2 * T, true);
}

extern "C" int ts_cuda_gemm_tc_split(const ts_cuda_tensor *W, int64_t n_out, const float *x_dev, int64_t T,
                                     float *parts, int64_t part_stride, int max_parts, cudaStream_t s) {
    if (!W || !W->data || n_out <= 0 || n_out > W->rows || n_out > INT_MAX - 256 || T <= 0 || max_parts < 1 ||
        (max_parts > 1 && part_stride < n_out * T))
        return -1;
    if (!ts_cuda_gemm_tc_split_takes(W->type, W->ne0, T) || W->row_bytes != ts_row_size(W->type, W->ne0))
        return -1;
    if (!x_dev || !parts || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return -1;
    tc_gemm_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data);
    a.rb = W->row_bytes;
    a.n_out = a.n_part = static_cast<int>(n_out);
    a.x_div = 1;
    a.y = parts;
    a.y_stride = n_out;
    a.part_stride = part_stride;
    a.T = static_cast<int>(T);
    a.fused = max_parts == 1;
    // K ranges of at least 4 steps (fused: one, both halves in each block)
    const int64_t gx = (n_out + kRowsTc - 1) / kRowsTc, ng = W->ne0 / tc_gemv_group(W->type);
    const dense_shape d =
        a.fused ? dense_shape_for(gx, T, 1, 1, xr_takes(W->type, W->ne0, 2))
                : dense_shape_for(gx, T, 2, ng / 4 < max_parts / 2 ? ng / 4 : max_parts / 2, false);
    const int rc = run_type(W->type, x_dev, static_cast<int>(T), W->ne0, static_cast<int>(W->ne0), a,
                            static_cast<unsigned>(gx), d.gy, d.ks, d.tt, s);
    return rc != 0 ? -1 : a.fused ? 1 : 2 * d.ks;
}
