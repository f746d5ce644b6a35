// The two kernels of the tensor-core prefill GEMM (gemm_tc.cu, whose top comment is their design): the
// per-type steps and x records, the launch arguments, tc_x_prep_kernel (x into records) and gemm_tc_kernel.
// Included by gemm_tc.cu, which plans and launches them.
#ifndef TS_CUDA_GEMM_TC_KERNELS_CUH
#define TS_CUDA_GEMM_TC_KERNELS_CUH

extern "C" {
#include "quant/quant.h"
}
#include "cuda/cp_async.cuh"
#include "cuda/tc_stage.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

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

// The arguments of a launch (validated by the host functions of gemm_tc.cu).
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
        const int3 tile = gemm_tile_items(a.tiles, a.sorted, q, a.T, TT, a.x_div, items, xrows);
        const int e = tile.x, cnt = tile.z;
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

} // namespace

} // namespace ts_cu

#endif
