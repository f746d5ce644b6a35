// The device pieces of the tensor-core decode GEMV that the kernels running it share (gemv_tc.cu's
// launch-per-product kernel, persist.cu's persistent chain): the bulk copies of weight rows into shared
// memory and their mbarriers, the shared-memory layout of x and the weight stages, and a chunk's sums
// (a chunk: 8 output rows, all their inputs; gemv_tc.cuh has the lane arithmetic and why it is exact).
#ifndef TS_CUDA_GEMV_TC_DOT_CUH
#define TS_CUDA_GEMV_TC_DOT_CUH

extern "C" {
#include "quant/quant.h"
}
#include "cuda/gemv_tc.cuh"
#include "cuda/tc_stage.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace ts_cu {

constexpr int kTcTile = 8; // output rows a chunk

// ---- PTX -----------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
template <int COUNT = 1> __device__ __forceinline__ void mbar_init(uint64_t *b) { // COUNT arrivals a phase
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "n"(COUNT) : "memory");
}
// The producer's arrival, announcing `bytes` still to land by bulk copies.
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(b)) : "memory");
}
// Each thread spins on its own result (a plain branch: the lanes of a warp that arrive at different times
// may see the phase complete at different tries, so the exit is not uniform).
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "TS_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@p bra TS_DONE;\n"
                 "bra.uni TS_WAIT;\n"
                 "TS_DONE:\n"
                 "}\n" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}
// bytes (a multiple of 16) from global src to shared dst, both 16-byte aligned; completes on bar.
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

// ---- shared memory -------------------------------------------------------------------------------

// [barriers | partial sums | x scales | x sums | x | weight stages], each 16-byte aligned (stages 128).
// Partial sums: two chunks' (double-buffered) of ng token groups (the weights-as-A chunks of 9–16 tokens: 2).
// x: nx rows of ne0 inputs staged as 2 bytes each (fp16), a scale per group of 128 or 256 inputs, and
// (K-quants) four sub-block sums per super-block.
struct tc_layout {
    size_t red, xsc, xsum, xs, stages, total;
    __host__ __device__ tc_layout(int nw, int nx, int ne0, int ns, int row_stride, int ng = 1) {
        const size_t groups = static_cast<size_t>(nx) * (ne0 / 128),
                     supers = static_cast<size_t>(nx) * (ne0 / kTcSuper);
        red = 128;                                                          // kMaxStages barriers
        xsc = red + 2 * static_cast<size_t>(ng) * nw * 32 * sizeof(float4); // 2 × ng × nw × 32 float4
        xsum = xsc + ((groups * 4 + 15) & ~15ul);                           // up to one float a group
        xs = xsum + supers * 4 * sizeof(uint2);                             // 4 uint2 a super-block
        stages = (xs + static_cast<size_t>(nx) * ne0 * 2 + 127) & ~127ul;
        total = stages + static_cast<size_t>(ns) * kTcTile * row_stride;
    }
};

// Smallest stride ≥ rb that is 16 past a multiple of 128 (bank-conflict-free row loads).
inline int stage_row_stride(size_t rb) {
    const size_t r16 = (rb + 15) & ~static_cast<size_t>(15);
    return static_cast<int>(r16 + ((16 + 128 - r16 % 128) % 128));
}

// ---- per kind: x staging and a chunk's sums ---------------------------------------------------

// One super-block's part of a chunk for lane (g, t): its 17 MMAs and d·C − 64·dmin·C_min for rows 2t and
// 2t + 1 of token g (.x, .y) and, W16, of token g + 8 (.z, .w; x row xr8) (the caller adds them times the
// x scale 2^-s).
template <int TYPE, bool W16>
__device__ __forceinline__ float4 kquant_super(const uint8_t *st, int row_stride, const uint32_t *xs,
                                               const uint2 *xsum, int nsb, int xr, int xr8, int sb, int g,
                                               int t) {
    constexpr int BS = tc_kquant<TYPE>::BS;
    uint32_t B[16][2], Bmin;
    kquant_b_frags<TYPE>(st + g * row_stride + sb * BS, t, B, Bmin);
    const uint4 *xa =
        reinterpret_cast<const uint4 *>(xs + static_cast<size_t>(xr * nsb + sb) * kTcXsSuper + t * kTcXsLane);
    const uint4 *xa8 = reinterpret_cast<const uint4 *>(xs + static_cast<size_t>(xr8 * nsb + sb) * kTcXsSuper +
                                                       t * kTcXsLane);
    // two accumulators (sub-blocks 2t and 2t + 1): two independent chains of MMAs
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint4 a = xa[i ^ t], a8 = W16 ? xa8[i ^ t] : make_uint4(0u, 0u, 0u, 0u);
        mma_f16(c, a.x, a8.x, a.y, a8.y, B[2 * i][0], B[2 * i][1]);
        mma_f16(c1, a.z, a8.z, a.w, a8.w, B[2 * i + 1][0], B[2 * i + 1][1]);
    }
    c[0] += c1[0], c[1] += c1[1], c[2] += c1[2], c[3] += c1[3];
    const uint2 sx = xsum[(xr * nsb + sb) * 4 + t],
                sx8 = W16 ? xsum[(xr8 * nsb + sb) * 4 + t] : make_uint2(0u, 0u);
    mma_f16(cm, sx.x, sx8.x, sx.y, sx8.y, Bmin, Bmin);
    const uint32_t dd0 = *reinterpret_cast<const uint32_t *>(st + (2 * t) * row_stride + sb * BS);
    const uint32_t dd1 = *reinterpret_cast<const uint32_t *>(st + (2 * t + 1) * row_stride + sb * BS);
    const float2 f0 = __half22float2(*reinterpret_cast<const __half2 *>(&dd0));
    const float2 f1 = __half22float2(*reinterpret_cast<const __half2 *>(&dd1));
    return make_float4(fmaf(f0.x, c[0], -64.0f * f0.y * cm[0]), fmaf(f1.x, c[1], -64.0f * f1.y * cm[1]),
                       fmaf(f0.x, c[2], -64.0f * f0.y * cm[2]), fmaf(f1.x, c[3], -64.0f * f1.y * cm[3]));
}

// acc += e · v for token g (.x, .y) and, W16, e8 · v for token g + 8 (.z, .w).
template <bool W16> __device__ __forceinline__ void add_scaled(float4 &acc, float e, float e8, float4 v) {
    acc.x = fmaf(e, v.x, acc.x);
    acc.y = fmaf(e, v.y, acc.y);
    if (W16) {
        acc.z = fmaf(e8, v.z, acc.z);
        acc.w = fmaf(e8, v.w, acc.w);
    }
}

// One chunk's partial sums for lane (g, t), K-quants: the super-blocks first, first + step, ... of row g
// (token rows xr, and xr8 with W16) into rows 2t, 2t + 1: y += 2^-s·(d·C − 64·dmin·C_min) a super-block.
// PAIR: two super-blocks a pass, both computed before either is added, so that their loads, decoding and
// MMA chains overlap; the additions are the same in the same order (an odd count's last pass computes its
// one super-block twice and adds it once).
template <int TYPE, bool PAIR, bool W16>
__device__ __forceinline__ void dot_kquant(const uint8_t *st, int row_stride, const uint32_t *xs,
                                           const uint2 *xsum, const float *xsc, int nsb, int xr, int xr8,
                                           int first, int step, int g, int t, float4 &acc) {
    for (int sb = first; sb < nsb; sb += (PAIR ? 2 : 1) * step) {
        const bool two = PAIR && sb + step < nsb;
        const int sb2 = two ? sb + step : sb;
        const float4 v = kquant_super<TYPE, W16>(st, row_stride, xs, xsum, nsb, xr, xr8, sb, g, t);
        float4 v2 = v;
        if (PAIR) v2 = kquant_super<TYPE, W16>(st, row_stride, xs, xsum, nsb, xr, xr8, sb2, g, t);
        add_scaled<W16>(acc, xsc[xr * nsb + sb], xsc[xr8 * nsb + sb], v);
        if (PAIR) { // selected, not branched on: a branch would sink the second super-block's work into it
            float4 a = acc;
            add_scaled<W16>(a, xsc[xr * nsb + sb2], xsc[xr8 * nsb + sb2], v2);
            acc = two ? a : acc;
        }
    }
}

// The same for the in-order types: groups first, first + step, ...; per MMA (Q6_K: sub-block) or pair of
// MMAs (Q8_0, Q5_0: block) its scale in fp32, per group the x scale.
template <int TYPE, bool W16>
__device__ __forceinline__ void dot_inorder(const uint8_t *st, int row_stride, const uint32_t *xs,
                                            const float *xsc, int ne0, int xr, int xr8, int first, int step,
                                            int g, int t, float4 &acc) {
    using Q = tc_inorder<TYPE>;
    constexpr int G = tc_kind<TYPE>::G, UPG = G / 16, BPG = G / Q::QK; // MMAs and blocks a group
    const int ng = ne0 / G;
    const uint8_t *r0 = st + (2 * t) * row_stride, *r1 = st + (2 * t + 1) * row_stride,
                  *rg = st + g * row_stride;
    auto half_at = [](const uint8_t *p) {
        return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | p[1] << 8)));
    };
    for (int gi = first; gi < ng; gi += step) {
        const uint2 *xa =
            reinterpret_cast<const uint2 *>(xs + static_cast<size_t>(xr * ng + gi) * UPG * 8) + t;
        const uint2 *xa8 =
            reinterpret_cast<const uint2 *>(xs + static_cast<size_t>(xr8 * ng + gi) * UPG * 8) + t;
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f); // tokens g (x, y) and g + 8 (z, w), rows 2t, 2t + 1
#pragma unroll
        for (int b = 0; b < BPG; b++) {
            const int blk = gi * BPG + b;
            if (TYPE == TS_TYPE_Q6_K) { // 16 MMAs, each its sub-block's int8 scale; d once
                float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (int m = 0; m < 16; m++) {
                    uint32_t b01, b23;
                    inorder_b_frag<TYPE>(rg + blk * Q::BS, m, t, b01, b23);
                    const uint2 a = xa[m * 4], a8 = W16 ? xa8[m * 4] : make_uint2(0u, 0u);
                    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_f16(c, a.x, a8.x, a.y, a8.y, b01, b23);
                    const float sc0 = static_cast<float>(static_cast<int8_t>(r0[blk * Q::BS + 192 + m]));
                    const float sc1 = static_cast<float>(static_cast<int8_t>(r1[blk * Q::BS + 192 + m]));
                    q.x = fmaf(sc0, c[0], q.x), q.y = fmaf(sc1, c[1], q.y);
                    if (W16) q.z = fmaf(sc0, c[2], q.z), q.w = fmaf(sc1, c[3], q.w);
                }
                const float d0 = half_at(r0 + blk * Q::BS + 208), d1 = half_at(r1 + blk * Q::BS + 208);
                s.x = fmaf(d0, q.x, s.x), s.y = fmaf(d1, q.y, s.y);
                if (W16) s.z = fmaf(d0, q.z, s.z), s.w = fmaf(d1, q.w, s.w);
            } else { // Q8_0, Q5_0: two MMAs a block, its d
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t b01, b23;
                    inorder_b_frag<TYPE>(rg + blk * Q::BS, m, t, b01, b23);
                    const uint2 a = xa[(2 * b + m) * 4], a8 = W16 ? xa8[(2 * b + m) * 4] : make_uint2(0u, 0u);
                    mma_f16(c, a.x, a8.x, a.y, a8.y, b01, b23);
                }
                const float d0 = half_at(r0 + blk * Q::BS), d1 = half_at(r1 + blk * Q::BS);
                s.x = fmaf(d0, c[0], s.x), s.y = fmaf(d1, c[1], s.y);
                if (W16) s.z = fmaf(d0, c[2], s.z), s.w = fmaf(d1, c[3], s.w);
            }
        }
        add_scaled<W16>(acc, xsc[xr * ng + gi], xsc[xr8 * ng + gi], s);
    }
}

// ---- weights as the MMA's A operand (WA): a chunk of 16 rows ---------------------------------------
//
// The same fragments with the roles swapped: A = the weights of rows g (a0a1, a4a5) and g + 8 (a2a3, a6a7)
// at lane t's k-slots (kquant_b_frags / inorder_b_frag of each row: what was a B column is an A row), B =
// x of token g at those slots (the staged words that are A row g above), C = rows × tokens: lane (g, t)
// gets rows g and g + 8 of tokens 2t and 2t + 1. An MMA takes 256 weights instead of 128, so a
// (super-block, 16 rows) is 16 + 1 MMAs and one set of x loads where the form above needs twice that,
// for the same decoding of every weight; the scales and mins are those of the lane's own rows g, g + 8.
// Tokens up to 8 (B's columns). Result of a lane: (row g, token 2t), (row g, 2t + 1), (row g + 8, 2t),
// (row g + 8, 2t + 1).

// NG token groups of 8 (1, or 2 for chunks of 9–16 tokens): the weights are decoded into A once and each group
// runs its own MMAs with its own B (x of token 8q + g), so a token's sums are the same whatever group it falls in
// and however many tokens share the chunk. xr[q]: the lane's B column's x row in group q; x0[q], x1[q]: its C
// columns' (tokens 8q + 2t and 8q + 2t + 1).

// One super-block: 16 + 1 MMAs a group, then d·C − 64·dmin·C_min per (row, token) (times 2^-s by the caller);
// rows g and g + 8 of the stage st, row_stride bytes apart (d, dmin read from the header words kq_words_at loads).
template <int TYPE, int NG>
__device__ __forceinline__ void kquant_super_wa(const uint8_t *st, int row_stride, const uint32_t *xs,
                                                const uint2 *xsum, int nsb, const int (&xr)[NG], int sb,
                                                int g, int t, float4 (&out)[NG]) {
    constexpr int BS = tc_kquant<TYPE>::BS;
    const kq_words w0 = kq_words_at<TYPE>(st + g * row_stride + sb * BS, t),
                   w8 = kq_words_at<TYPE>(st + (g + 8) * row_stride + sb * BS, t);
    uint32_t A0[16][2], A8[16][2], Amin0, Amin8;
    kquant_b_frags<TYPE>(w0, t, A0, Amin0);
    kquant_b_frags<TYPE>(w8, t, A8, Amin8);
    const float2 f0 = __half22float2(*reinterpret_cast<const __half2 *>(&w0.hdr.x)); // d, dmin of row g
    const float2 f8 = __half22float2(*reinterpret_cast<const __half2 *>(&w8.hdr.x)); // of row g + 8
#pragma unroll
    for (int q = 0; q < NG; q++) {
        const uint4 *xa = reinterpret_cast<const uint4 *>(
            xs + static_cast<size_t>(xr[q] * nsb + sb) * kTcXsSuper + t * kTcXsLane);
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f},
              cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint4 a = xa[i ^ t];
            mma_f16(c, A0[2 * i][0], A8[2 * i][0], A0[2 * i][1], A8[2 * i][1], a.x, a.y);
            mma_f16(c1, A0[2 * i + 1][0], A8[2 * i + 1][0], A0[2 * i + 1][1], A8[2 * i + 1][1], a.z, a.w);
        }
        c[0] += c1[0], c[1] += c1[1], c[2] += c1[2], c[3] += c1[3];
        const uint2 sx = xsum[(xr[q] * nsb + sb) * 4 + t];
        mma_f16(cm, Amin0, Amin8, Amin0, Amin8, sx.x, sx.y);
        out[q] =
            make_float4(fmaf(f0.x, c[0], -64.0f * f0.y * cm[0]), fmaf(f0.x, c[1], -64.0f * f0.y * cm[1]),
                        fmaf(f8.x, c[2], -64.0f * f8.y * cm[2]), fmaf(f8.x, c[3], -64.0f * f8.y * cm[3]));
    }
}

// acc += (e0, e1, e0, e1) · v: tokens 2t (x, z) and 2t + 1 (y, w).
__device__ __forceinline__ void add_scaled_wa(float4 &acc, float e0, float e1, float4 v) {
    acc.x = fmaf(e0, v.x, acc.x);
    acc.y = fmaf(e1, v.y, acc.y);
    acc.z = fmaf(e0, v.z, acc.z);
    acc.w = fmaf(e1, v.w, acc.w);
}

// A chunk's partial sums, K-quants: the super-blocks first, first + step, ...
template <int TYPE, int NG>
__device__ __forceinline__ void dot_kquant_wa(const uint8_t *st, int row_stride, const uint32_t *xs,
                                              const uint2 *xsum, const float *xsc, int nsb,
                                              const int (&xr)[NG], const int (&x0)[NG], const int (&x1)[NG],
                                              int first, int step, int g, int t, float4 (&acc)[NG]) {
    for (int sb = first; sb < nsb; sb += step) {
        float4 v[NG];
        kquant_super_wa<TYPE, NG>(st, row_stride, xs, xsum, nsb, xr, sb, g, t, v);
#pragma unroll
        for (int q = 0; q < NG; q++)
            add_scaled_wa(acc[q], xsc[x0[q] * nsb + sb], xsc[x1[q] * nsb + sb], v[q]);
    }
}

// The same for the in-order types: per MMA (Q6_K: sub-block) or pair of MMAs (Q8_0, Q5_0: block) the scale
// of rows g and g + 8 in fp32, per group the tokens' x scales.
template <int TYPE, int NG>
__device__ __forceinline__ void dot_inorder_wa(const uint8_t *st, int row_stride, const uint32_t *xs,
                                               const float *xsc, int ne0, const int (&xr)[NG],
                                               const int (&x0)[NG], const int (&x1)[NG], int first, int step,
                                               int g, int t, float4 (&acc)[NG]) {
    using Q = tc_inorder<TYPE>;
    constexpr int G = tc_kind<TYPE>::G, UPG = G / 16, BPG = G / Q::QK; // MMAs and blocks a group
    const int ng = ne0 / G;
    const uint8_t *r0 = st + g * row_stride, *r8 = st + (g + 8) * row_stride;
    auto half_at = [](const uint8_t *p) { return ts_cu_half_to_float(lds_u16(p)); }; // (2-byte aligned)
    for (int gi = first; gi < ng; gi += step) {
        const uint2 *xa[NG];
        float4 s[NG]; // (row g: tokens 2t, 2t + 1; row g + 8: the same)
#pragma unroll
        for (int q = 0; q < NG; q++) {
            xa[q] = reinterpret_cast<const uint2 *>(xs + static_cast<size_t>(xr[q] * ng + gi) * UPG * 8) + t;
            s[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int b = 0; b < BPG; b++) {
            const int blk = gi * BPG + b;
            if (TYPE == TS_TYPE_Q6_K) { // 16 MMAs, each its sub-block's int8 scale; d once
                float4 qa[NG];
#pragma unroll
                for (int q = 0; q < NG; q++) qa[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (int m = 0; m < 16; m++) {
                    uint32_t a01, a45, a23, a67;
                    inorder_b_frag<TYPE>(r0 + blk * Q::BS, m, t, a01, a45);
                    inorder_b_frag<TYPE>(r8 + blk * Q::BS, m, t, a23, a67);
                    const float sc0 = static_cast<float>(static_cast<int8_t>(r0[blk * Q::BS + 192 + m]));
                    const float sc8 = static_cast<float>(static_cast<int8_t>(r8[blk * Q::BS + 192 + m]));
#pragma unroll
                    for (int q = 0; q < NG; q++) {
                        const uint2 bx = xa[q][m * 4];
                        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        mma_f16(c, a01, a23, a45, a67, bx.x, bx.y);
                        qa[q].x = fmaf(sc0, c[0], qa[q].x), qa[q].y = fmaf(sc0, c[1], qa[q].y);
                        qa[q].z = fmaf(sc8, c[2], qa[q].z), qa[q].w = fmaf(sc8, c[3], qa[q].w);
                    }
                }
                const float d0 = half_at(r0 + blk * Q::BS + 208), d8 = half_at(r8 + blk * Q::BS + 208);
#pragma unroll
                for (int q = 0; q < NG; q++) {
                    s[q].x = fmaf(d0, qa[q].x, s[q].x), s[q].y = fmaf(d0, qa[q].y, s[q].y);
                    s[q].z = fmaf(d8, qa[q].z, s[q].z), s[q].w = fmaf(d8, qa[q].w, s[q].w);
                }
            } else { // Q8_0, Q5_0: two MMAs a block, its d
                float c[NG][4];
#pragma unroll
                for (int q = 0; q < NG; q++) c[q][0] = c[q][1] = c[q][2] = c[q][3] = 0.0f;
                uint32_t a01[2], a45[2], a23[2], a67[2];
                inorder_b_frags2<TYPE>(r0 + blk * Q::BS, t, a01, a45);
                inorder_b_frags2<TYPE>(r8 + blk * Q::BS, t, a23, a67);
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int q = 0; q < NG; q++) {
                        const uint2 bx = xa[q][(2 * b + m) * 4];
                        mma_f16(c[q], a01[m], a23[m], a45[m], a67[m], bx.x, bx.y);
                    }
                const float d0 = half_at(r0 + blk * Q::BS), d8 = half_at(r8 + blk * Q::BS);
#pragma unroll
                for (int q = 0; q < NG; q++) {
                    s[q].x = fmaf(d0, c[q][0], s[q].x), s[q].y = fmaf(d0, c[q][1], s[q].y);
                    s[q].z = fmaf(d8, c[q][2], s[q].z), s[q].w = fmaf(d8, c[q][3], s[q].w);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < NG; q++) add_scaled_wa(acc[q], xsc[x0[q] * ng + gi], xsc[x1[q] * ng + gi], s[q]);
    }
}

// chunk_part's WA form (chunks of 16 rows, NG groups of 8 tokens; xr, x0, x1 as above).
template <int TYPE, int kWarps, int NG>
__device__ __forceinline__ void chunk_part_wa(const uint8_t *st, int row_stride, const uint32_t *xs,
                                              const uint2 *xsum, const float *xsc, int ne0,
                                              const int (&xr)[NG], const int (&x0)[NG], const int (&x1)[NG],
                                              int j, int warp, int g, int t, float4 (&acc)[NG]) {
#pragma unroll
    for (int q = 0; q < NG; q++) acc[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (tc_kind<TYPE>::kInorder)
        dot_inorder_wa<TYPE, NG>(st, row_stride, xs, xsc, ne0, xr, x0, x1, (warp + j) % kWarps, kWarps, g, t,
                                 acc);
    else
        dot_kquant_wa<TYPE, NG>(st, row_stride, xs, xsum, xsc, ne0 / kTcSuper, xr, x0, x1,
                                (warp + j) % kWarps, kWarps, g, t, acc);
}

// A chunk's partial sums for lane (g, t) of warp `warp`: the super-blocks (K-quants) or groups (in-order
// types) ≡ warp + j (mod kWarps), where j is the chunk's place in the block's list (the classes rotate
// from chunk to chunk, so uneven splits even out).
template <int TYPE, int kWarps, bool PAIR, bool W16>
__device__ __forceinline__ float4 chunk_part(const uint8_t *st, int row_stride, const uint32_t *xs,
                                             const uint2 *xsum, const float *xsc, int ne0, int xr, int xr8,
                                             int j, int warp, int g, int t) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (tc_kind<TYPE>::kInorder)
        dot_inorder<TYPE, W16>(st, row_stride, xs, xsc, ne0, xr, xr8, (warp + j) % kWarps, kWarps, g, t, acc);
    else
        dot_kquant<TYPE, PAIR, W16>(st, row_stride, xs, xsum, xsc, ne0 / kTcSuper, xr, xr8,
                                    (warp + j) % kWarps, kWarps, g, t, acc);
    return acc;
}

// The chunk's sums for lane `lane` from the warps' partial sums (part[w·32 + lane]): warp w summed the
// classes ≡ w + j (mod kWarps), added here in class order 0, 1, 2, ..., so the result does not depend on
// where the chunk fell.
template <int kWarps> __device__ __forceinline__ float4 sum_classes(const float4 *part, int j, int lane) {
    float4 s = part[((kWarps - j % kWarps) % kWarps) * 32 + lane];
#pragma unroll
    for (int r = 1; r < kWarps; r++) {
        const float4 p = part[((r - j % kWarps + kWarps) % kWarps) * 32 + lane];
        s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    return s;
}

} // namespace ts_cu

#endif
