// Prefill products of Q4_K, Q5_K, Q8_0 and Q5_0, dense and grouped by expert, on Hopper's warpgroup MMAs
// (wgmma, sm_90a), with the numerics of gemm_tc.cu: x rounded to fp16 once per (row, group) after a
// power-of-two scale, fp32 accumulation, the weights never rounded. K-quants: B is the exact q·sc (the
// GEMV's B fragments, kquant_b_frags), d and dmin applied in fp32 once a super-block; in-order types: B is
// d·q exactly as two fp16 tiles, hi and lo (wg_kind). Only the order of the fp32 additions differs from
// gemm_tc_kernel's.
//
// Two kernels a product:
//  1. x into chunks in the scratch (wg_chunk, gemm_wg.cuh): per (tile of 128 x rows, group) the tile's
//     canonical A tiles of the group's two halves, then (K-quants) the min term's tile and 2^-s a row. Sized
//     by ts_cuda_gemm_wg_x_bytes (the x rows rounded up to 128); where the scratch is smaller the product
//     runs on gemm_tc.cu. The K-quants' k-slots are the GEMV's (lane t's inputs 64t .. 64t + 63,
//     wg_x_prep_kernel), so B decoded by kquant_b_frags lines up with them; the in-order types' are the
//     inputs in order (wg_x_prep_inorder_kernel).
//  2. gemm_wg_kernel: a block of two warpgroups computes 128 rows × 128 tokens (each warpgroup 64 tokens,
//     m64n128k16), K in half groups. All 256 threads copy the tile's chunk of a half-step into shared
//     memory (wgmma's canonical layout, `canon`: no swizzle, core matrices of 8 rows × 16 bytes; cp.async
//     two half-steps ahead, three stages; expert tiles gather their items' 16-byte core rows) and the weights' raw groups (two ahead), and decode B for the
//     next half-step into the same layout (two stages) while the warpgroups' MMAs of this one run. After a
//     group: K-quants acc += 2^-s·d·tmp, then one MMA of the sums against the mins, acc −= 64·2^-s·dmin·that;
//     in-order types acc += 2^-s·tmp. Expert plans (tiles of up to 64 items of one expert): a block takes
//     an expert's tiles two at a time (up to 128 items), the x rows gathered by the plan.
// The dense products take it by default on Hopper, the grouped ones with TURBOSPARK_CUDA_GEMM_WG=1 (slower
// than gemm_tc.cu's for now: BENCHMARKS.md); =0: neither.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cp_async.cuh"
#include "cuda/cuda_device.h"
#include "cuda/gemm_tc.h"
#include "cuda/gemm_wg.cuh"
#include "cuda/tc_stage.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

namespace ts_cu {

namespace {

constexpr int kWgThreads = 256; // two warpgroups
static_assert(kWgThreads == 2 * kWgRows && kWgThreads == 2 * kWgTok, "a thread pair a row and a token");
constexpr int kWgPrepRows = 8; // x rows a block of the prep kernel
constexpr int kSmemMax = 227 * 1024;

// Per type: K-quants (Q4_K, Q5_K) step over super-blocks of 256 inputs, 8 k-steps a half-step, B the
// exact q·sc (one tile) with d and the min term after the super-block; the in-order types (Q8_0, Q5_0)
// over groups of 128 inputs (x's scale group; 4 blocks of 32), 4 k-steps a half-step, B as two fp16
// tiles hi = fp16(d·q), lo = fp16(d·q − hi) (both MMAs into one sum: d·q exactly, for every fp16 d and q)
// and only x's scale after the group. A group's raw bytes: K-quants one 16-byte aligned super-block; the
// in-order types 4 blocks at any 2-byte offset, staged as the 16-byte lines that cover them.
template <int TYPE> constexpr int wg_block_bytes() {
    if constexpr (TYPE == TS_TYPE_Q4_K || TYPE == TS_TYPE_Q5_K)
        return tc_kquant<TYPE>::BS;
    else
        return tc_inorder<TYPE>::BS;
}
template <int TYPE> struct wg_kind {
    static constexpr bool KQ = TYPE == TS_TYPE_Q4_K || TYPE == TS_TYPE_Q5_K;
    static constexpr int HS = KQ ? 8 : 4; // k-steps a half-step
    using C = wg_chunk<HS>;               // x's chunks
    static constexpr int BS = wg_block_bytes<TYPE>();
    static constexpr int RAWB = KQ ? BS : 4 * BS;                // raw bytes of a row's group
    static constexpr int LINES = KQ ? RAWB / 16 : RAWB / 16 + 2; // 16-byte lines staged a row
    static constexpr int SBB = 16 * LINES;                       // their row stride in shared memory
};

template <int TYPE> struct wg_layout {
    static constexpr int SBB = wg_kind<TYPE>::SBB;              // raw bytes a row in shared memory
    static constexpr int A0 = 0;                                // three A stages
    static constexpr int B0 = A0 + 3 * wg_kind<TYPE>::C::STAGE; // two B stages
    static constexpr int RAW0 = B0 + 2 * kHalfBytes;            // two stages of raw groups
    static constexpr int BMIN = RAW0 + 2 * kWgRows * SBB;
    static constexpr int DD = BMIN + kStepBytes; // {d, dmin} a row
    static constexpr int BYTES = DD + kWgRows * 8;
    static_assert(BYTES <= kSmemMax, "the stages fit shared memory");
};

struct wg_args {
    const uint8_t *w0, *w1; // dense: row 0 of the product, NULL; experts: W->data, W2->data or NULL
    size_t rb;              // bytes a row (both tensors)
    int nsb;                // groups a row (K-quants: super-blocks)
    int n_out, n_part;      // output rows (experts: P·n_part); rows ≥ n_part come from w1
    int64_t rows_per_expert, row_off;
    int e_max;         // experts: the largest expert whose rows lie inside both tensors
    int T;             // dense: tokens
    int x_div;         // experts: item i's x row is ⌊i / x_div⌋
    const uint8_t *xw; // x chunks: [x rows / 128][nsb][wg_chunk BYTES]
    float *y;
    int64_t y_stride;      // floats from one token's (item's) outputs to the next
    const int32_t *sorted; // experts: the plan (tiles == NULL: dense)
    const int4 *tiles;
    const int32_t *n_tiles;
};

__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// A shared-memory operand: no swizzle, K-major core matrices (canon).
__device__ __forceinline__ uint64_t wg_desc(const uint8_t *p) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    return static_cast<uint64_t>((a & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(kLbo >> 4) << 16) |
           (static_cast<uint64_t>(kSbo >> 4) << 32);
}
// d = A·B (+ d when accumulate), m64n128k16, fp16 operands from shared memory, fp32 accumulators.
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}
// The accumulators as of this point (the MMAs write them asynchronously: keep the compiler from moving
// their uses across the wait).
template <int NA> __device__ __forceinline__ void wg_pin(float (&d)[NA]) {
#pragma unroll
    for (int i = 0; i < NA; i++) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

// ---- kernel 1: x records ------------------------------------------------------------------------------

__global__ void __launch_bounds__(256) wg_x_prep_kernel(const float *__restrict__ x, int nx, int nsb,
                                                        int64_t x_stride, uint8_t *__restrict__ xw) {
    const int r0 = static_cast<int>(blockIdx.x) * kWgPrepRows, n = min(kWgPrepRows, nx - r0);
    stage_x_kquant_each<false>(
        x + static_cast<size_t>(r0) * x_stride, n, nsb, x_stride,
        [&](int rs, int t, int q, const uint32_t(&a)[8], float sum, float other, float inv) {
            using C = wg_chunk<8>;
            const int row = r0 + rs / nsb, rt = row % kWgTok, h = q >> 1, j = q & 1; // rs = row·nsb + sb
            uint8_t *c = xw + (static_cast<size_t>(row / kWgTok) * nsb + rs % nsb) * C::BYTES;
        // quarter (h, j): k-steps 2(4j + ii) + h; a[2ii] k-half 0, a[2ii + 1] k-half 1, word t
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int step = 2 * (4 * j + ii) + h;
                *reinterpret_cast<uint32_t *>(c + wg_x_word<8>(rt, step, 0, t)) = a[2 * ii];
                *reinterpret_cast<uint32_t *>(c + wg_x_word<8>(rt, step, 1, t)) = a[2 * ii + 1];
            }
            if (q == 0) {
                uint32_t hi, lo;
                tc_x_sums(sum, other, hi, lo);
                *reinterpret_cast<uint32_t *>(c + C::MIN + canon(rt, 0, 0, t)) = hi;
                *reinterpret_cast<uint32_t *>(c + C::MIN + canon(rt, 0, 1, t)) = lo;
                if (t == 0) reinterpret_cast<float *>(c + C::SCALE)[rt] = inv;
            }
        });
}

// The in-order types' chunks (wg_chunk<4>): per (tile, group of 128) the group's inputs as fp16 at its
// scale, in input order (k-step j's k-half kc: inputs 16j + 8kc .. + 7), then 2^-s. A unit is 16 inputs
// (one k-step); the 8 units of a group are neighbouring lanes and share its max.
__global__ void __launch_bounds__(256) wg_x_prep_inorder_kernel(const float *__restrict__ x, int nx, int ng,
                                                                int64_t x_stride, uint8_t *__restrict__ xw) {
    const int r0 = static_cast<int>(blockIdx.x) * kWgPrepRows, n = min(kWgPrepRows, nx - r0);
    const float *xb = x + static_cast<size_t>(r0) * x_stride;
    auto at = [&](int u) { // unit u's first input; u >> 3 = row·ng + group
        const int rg = u >> 3;
        return xb + static_cast<size_t>(rg / ng) * x_stride + (rg % ng) * 128 + 16 * (u & 7);
    };
    stage_rounds(n * ng * 8, at, [&](int u, bool ok, const float(&v)[16]) {
        float amax = unit_amax(v);
#pragma unroll
        for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        float inv;
        const float scale = tc_x_scale(amax, inv);
        if (!ok) return;
        using C = wg_chunk<4>;
        const int row = r0 + (u >> 3) / ng, rt = row % kWgTok;
        uint8_t *c = xw + (static_cast<size_t>(row / kWgTok) * ng + (u >> 3) % ng) * C::BYTES;
        uint32_t w[8];
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = h2_pack(v[2 * i] * scale, v[2 * i + 1] * scale);
        *reinterpret_cast<uint4 *>(c + wg_x_word<4>(rt, u & 7, 0, 0)) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4 *>(c + wg_x_word<4>(rt, u & 7, 1, 0)) = make_uint4(w[4], w[5], w[6], w[7]);
        if ((u & 7) == 0) reinterpret_cast<float *>(c + C::SCALE)[rt] = inv;
    });
}

// ---- kernel 2: the GEMM -------------------------------------------------------------------------------

// A block: 128 rows × a tile of 128 tokens, warpgroup wg takes tokens 64wg .. 64wg + 63 and all 128 rows
// (m64n128). Dense (EXP false): the T tokens in tiles of 128. Experts (EXP): an expert's plan tiles (of 64
// items) in pairs, 2j and 2j + 1 as one tile of up to 128 items, so that each decoded weight tile serves
// twice the items (the block of an odd tile has nothing to do). Thread (warp w of its warpgroup, lane
// g·4 + t) holds tokens 16w + g (acc[4j], acc[4j + 1]: rows 8j + 2t, 8j + 2t + 1) and 16w + g + 8 (acc[4j +
// 2], acc[4j + 3]) of its warpgroup's tokens.
template <int TYPE, bool EXP>
__global__ void __launch_bounds__(kWgThreads, 1) gemm_wg_kernel(const wg_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = wg_layout<TYPE>;
    using KD = wg_kind<TYPE>;
    using C = typename KD::C;
    constexpr int NW = 128, TOK = kWgTok; // rows of a warpgroup's MMAs, tokens (items) a block tile
    constexpr int NA = NW / 2;            // accumulators a thread
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ int items[TOK]; // the tile's items (dense: tokens); past the tile, its last one
    __shared__ int xrows[TOK]; // their x rows
    const int tid = static_cast<int>(threadIdx.x), wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = static_cast<int>(blockIdx.x) * kWgRows, nh = 2 * a.nsb; // nh: half-steps
    const int rt0 = 64 * wg + 16 * warp + g; // this thread's first token of the tile
    const int a_off = wg * 2048;             // its tokens in a k-step's tile
    const int n_tiles = EXP ? *a.n_tiles : (a.T + TOK - 1) / TOK;

    for (int q = static_cast<int>(blockIdx.y); q < n_tiles; q += static_cast<int>(gridDim.y)) {
        if (EXP && (a.tiles[q].w & 1)) continue; // taken with the expert's tile before it
        const int3 tile = gemm_tile_items(EXP ? a.tiles : nullptr, a.sorted, q, a.T, TOK, a.x_div, items,
                                          xrows, EXP, n_tiles);
        const int e = tile.x, cnt = tile.z;
        if (EXP && (e < 0 || e > a.e_max)) { // bad expert id: NaN outputs, no weight read
            for (int idx = tid; idx < kWgRows * cnt; idx += kWgThreads) {
                const int j = idx / kWgRows, o = row0 + idx - j * kWgRows;
                if (o < a.n_out)
                    a.y[static_cast<int64_t>(items[j]) * a.y_stride + o] = __int_as_float(0x7fffffff);
            }
            continue;
        }
        const size_t r0b = EXP ? (static_cast<size_t>(e) * static_cast<size_t>(a.rows_per_expert) +
                                  static_cast<size_t>(a.row_off)) *
                                     a.rb
                               : 0;
        auto row_ptr = [&](int m) { // rows past n_out repeat the last one (computed, never stored)
            const int o = min(row0 + m, a.n_out - 1);
            return o < a.n_part ? a.w0 + r0b + static_cast<size_t>(o) * a.rb
                                : (a.w1 ? a.w1 : a.w0) + r0b + static_cast<size_t>(o - a.n_part) * a.rb;
        };
        // x of half-step h into A stage h % 3: the part of the group's chunk for that half (wg_chunk). Dense:
        // one contiguous copy (the tile's chunk). Experts: token r's core rows gathered from its x row's
        // chunk; copy k of a thread: token xr, k-half xkc, k-step xj + k·128/TOK of the half, and with the
        // second half its min-term rows and 2^-s (the thread's chunk and row in it fixed for the tile).
        const int xr = (tid >> 1) % TOK, xkc = tid & 1, xj = (tid >> 1) / TOK;
        const int xrow = xrows[xr], xrt = xrow % kWgTok;
        const uint8_t *xch = a.xw + static_cast<size_t>(EXP ? xrow / kWgTok : q) * a.nsb * C::BYTES;
        auto issue_x = [&](int h) {
            const int half = h & 1;
            uint8_t *dst = sm + L::A0 + (h % 3) * C::STAGE;
            const uint8_t *src = xch + static_cast<size_t>(h >> 1) * C::BYTES + half * C::HALF;
            if constexpr (!EXP) {
                for (int i = 16 * tid; i < (half ? C::STAGE : C::HALF); i += 16 * kWgThreads)
                    cp_async16(dst + i, src + i);
            } else {
#pragma unroll
                for (int k = 0; k < TOK * 2 * KD::HS / kWgThreads; k++) {
                    const int j = xj + k * (128 / TOK);
                    cp_async16(dst + canon(xr, j, xkc, 0), src + canon(xrt, j, xkc, 0));
                }
                if (half && tid < 2 * TOK) {                                          // tokens × 2 k-halves
                    constexpr int MIN = C::MIN - C::HALF, SCALE = C::SCALE - C::HALF; // in the stage
                    if (KD::KQ)
                        cp_async16(dst + MIN + canon(xr, 0, xkc, 0), src + MIN + canon(xrt, 0, xkc, 0));
                    if (xkc == 0) cp_async4(dst + SCALE + 4 * xr, src + SCALE + 4 * xrt);
                }
            }
        };
        // group s of the block's rows (raw bytes) into raw stage s % 2: the 16-byte lines covering each
        // row's group (its first byte at the line's offset (p & 15) when read; lines past the row's bytes
        // not read). Thread pair (row wm, lines wl, wl + 2, ...), the row's pointer fixed for the tile.
        const int wm = tid >> 1, wl = tid & 1;
        const uint8_t *wrow = row_ptr(wm);
        auto raw_at = [&](int m, int s) {
            return reinterpret_cast<uintptr_t>(row_ptr(m)) + static_cast<size_t>(s) * KD::RAWB;
        };
        auto issue_raw = [&](int s) {
            uint8_t *dst = sm + L::RAW0 + (s & 1) * kWgRows * L::SBB + wm * L::SBB;
            const uintptr_t p = reinterpret_cast<uintptr_t>(wrow) + static_cast<size_t>(s) * KD::RAWB,
                            first = p & ~static_cast<uintptr_t>(15);
#pragma unroll
            for (int l = wl; l < KD::LINES; l += 2)
                if (KD::KQ || first + 16 * l < p + KD::RAWB)
                    cp_async16(dst + 16 * l, reinterpret_cast<const void *>(first + 16 * l));
        };
        // B of half-step h into B stage h % 2, thread pair (row m, lane t). K-quants: k-steps 8·HALF .. + 7 of
        // super-block h / 2; with HALF = 1 its min tile (the mins, both k-halves) and {d, dmin} too. In-order
        // types: k-steps 4·HALF .. + 3 of group h / 2 (blocks 2·HALF, 2·HALF + 1), hi at k-step slots 0..3
        // of the stage, lo at 4..7.
        auto decode = [&](int h, auto half_c) {
            constexpr int HALF = decltype(half_c)::value;
            const uint8_t *raw = sm + L::RAW0 + ((h >> 1) & 1) * kWgRows * L::SBB;
            uint8_t *bt = sm + L::B0 + (h & 1) * kHalfBytes;
            for (int p = tid; p < 4 * kWgRows; p += kWgThreads) {
                const int m = p >> 2, tt = p & 3;
                if constexpr (KD::KQ) {
                    const uint8_t *sb = raw + m * L::SBB;
                    uint32_t B[16][2], Bmin;
                    kquant_b_frags<TYPE>(sb, tt, B, Bmin);
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        *reinterpret_cast<uint32_t *>(bt + canon(m, j, 0, tt)) = B[8 * HALF + j][0];
                        *reinterpret_cast<uint32_t *>(bt + canon(m, j, 1, tt)) = B[8 * HALF + j][1];
                    }
                    if (HALF) {
                        *reinterpret_cast<uint32_t *>(sm + L::BMIN + canon(m, 0, 0, tt)) = Bmin;
                        *reinterpret_cast<uint32_t *>(sm + L::BMIN + canon(m, 0, 1, tt)) = Bmin;
                        if (tt == 0)
                            reinterpret_cast<float2 *>(sm + L::DD)[m] =
                                __half22float2(*reinterpret_cast<const __half2 *>(sb));
                    }
                } else {
                    const uint8_t *grp = raw + m * L::SBB + (raw_at(m, h >> 1) & 15u);
#pragma unroll
                    for (int j = 0; j < 4; j++) { // k-step 4·HALF + j: half j & 1 of block 2·HALF + (j >> 1)
                        const uint8_t *blk = grp + (2 * HALF + (j >> 1)) * KD::BS;
                        const float d =
                            __half2float(__ushort_as_half(static_cast<unsigned short>(blk[0] | blk[1] << 8)));
                        uint32_t q[2]; // fp16 quants: k-half 0 (inputs 2t, 2t + 1), k-half 1 (2t + 8, 2t + 9)
                        inorder_b_frag<TYPE>(blk, j & 1, tt, q[0], q[1]);
#pragma unroll
                        for (int kc = 0; kc < 2; kc++) {
                            const float2 qq = __half22float2(*reinterpret_cast<const __half2 *>(&q[kc]));
                            const float p0 = d * qq.x, p1 = d * qq.y; // exact in fp32
                            const __half2 hi = __floats2half2_rn(p0, p1);
                            const float2 hf = __half22float2(hi);
                            const __half2 lo = __floats2half2_rn(p0 - hf.x, p1 - hf.y);
                            *reinterpret_cast<__half2 *>(bt + canon(m, j, kc, tt)) = hi;
                            *reinterpret_cast<__half2 *>(bt + canon(m, 4 + j, kc, tt)) = lo;
                        }
                    }
                }
            }
            fence_async_smem(); // these generic stores, before the MMAs (the async proxy) read them
        };

        float acc[NA], tmp[NA];
#pragma unroll
        for (int i = 0; i < NA; i++) acc[i] = 0.0f, tmp[i] = 0.0f;

        // commit groups: G0 = {x 0, raw 0}, G1 = {x 1, raw 1}, then one a half-step h: {x h + 2, raw
        // (h + 3) / 2 for odd h}; at the top of half-step h, G(h) has landed (all but the newest group)
        issue_x(0);
        issue_raw(0);
        cp_async_commit();
        if (nh > 1) issue_x(1);
        if (a.nsb > 1) issue_raw(1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        decode(0, std::integral_constant<int, 0>());
        for (int h = 0; h < nh; h++) {
            cp_async_wait<1>();
            fence_async_smem(); // the copies' bytes, before the MMAs read them
            __syncthreads();    // every thread's copies and decoded B of h; the MMAs of h − 1 are done
            if (h + 2 < nh) issue_x(h + 2);
            if ((h & 1) && (h + 3) / 2 < a.nsb) issue_raw((h + 3) / 2);
            cp_async_commit();
            const uint8_t *as = sm + L::A0 + (h % 3) * C::STAGE, *bs = sm + L::B0 + (h & 1) * kHalfBytes;
            wg_fence();
            // K-quants: 8 k-steps against B; in-order types: 4 k-steps, each against hi (slot j) and lo (4 + j)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int ka = KD::KQ ? j : j >> 1, kb = KD::KQ ? j : (j >> 1) + 4 * (j & 1);
                wgmma_m64n128(tmp, wg_desc(as + ka * kStepBytes + a_off), wg_desc(bs + kb * kStepBytes),
                              (h & 1) | j);
            }
            wg_commit();
            wg_pin(tmp);
            if (h + 1 < nh) { // the next half-step's B while the MMAs run
                if (h & 1)
                    decode(h + 1, std::integral_constant<int, 0>());
                else
                    decode(h + 1, std::integral_constant<int, 1>());
            }
            wg_wait_all();
            wg_pin(tmp);
            if (!KD::KQ && (h & 1)) { // the group's sums: acc += 2^-s·tmp (d is in B)
                const float *esc = reinterpret_cast<const float *>(as + C::SCALE - C::HALF);
                const float e0 = esc[rt0], e8 = esc[rt0 + 8];
#pragma unroll
                for (int j = 0; j < NA / 4; j++) {
                    acc[4 * j] = fmaf(e0, tmp[4 * j], acc[4 * j]);
                    acc[4 * j + 1] = fmaf(e0, tmp[4 * j + 1], acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(e8, tmp[4 * j + 2], acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(e8, tmp[4 * j + 3], acc[4 * j + 3]);
                }
            }
            if (KD::KQ && (h & 1)) { // the super-block's sums: acc += 2^-s·d·tmp, then the min term
                const float *esc = reinterpret_cast<const float *>(as + C::SCALE - C::HALF);
                const float e0 = esc[rt0], e8 = esc[rt0 + 8];
                // rows 2i, 2i + 1: {d, dmin, d, dmin}
                const float4 *dd = reinterpret_cast<const float4 *>(sm + L::DD);
#pragma unroll
                for (int j = 0; j < NA / 4; j++) {
                    const float4 f = dd[4 * j + t];
                    acc[4 * j] = fmaf(e0 * f.x, tmp[4 * j], acc[4 * j]);
                    acc[4 * j + 1] = fmaf(e0 * f.z, tmp[4 * j + 1], acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(e8 * f.x, tmp[4 * j + 2], acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(e8 * f.z, tmp[4 * j + 3], acc[4 * j + 3]);
                }
                wg_fence();
                wgmma_m64n128(tmp, wg_desc(as + C::MIN - C::HALF + a_off), wg_desc(sm + L::BMIN), 0);
                wg_commit();
                wg_wait_all();
                wg_pin(tmp);
#pragma unroll
                for (int j = 0; j < NA / 4; j++) {
                    const float4 f = dd[4 * j + t];
                    acc[4 * j] = fmaf(-64.0f * e0 * f.y, tmp[4 * j], acc[4 * j]);
                    acc[4 * j + 1] = fmaf(-64.0f * e0 * f.w, tmp[4 * j + 1], acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(-64.0f * e8 * f.y, tmp[4 * j + 2], acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(-64.0f * e8 * f.w, tmp[4 * j + 3], acc[4 * j + 3]);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NA / 4; j++) {
            const int c = row0 + 8 * j + 2 * t;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int r = rt0 + 8 * (k >> 1), o = c + (k & 1);
                if (r < cnt && o < a.n_out)
                    a.y[static_cast<int64_t>(items[r]) * a.y_stride + o] = acc[4 * j + k];
            }
        }
    }
#else
    __trap(); // built without sm_90a (TS_CUDA_ARCHITECTURES other than 90a): not for this build
#endif
}

template <int TYPE, bool EXP> int launch_wg(const wg_args &a, unsigned gx, unsigned gy, cudaStream_t s) {
    const auto kernel = gemm_wg_kernel<TYPE, EXP>;
    static bool opted_in = false; // one flag per instantiation
    if (!opted_in) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 wg_layout<TYPE>::BYTES) != cudaSuccess)
            return -1;
        opted_in = true;
    }
    kernel<<<dim3(gx, gy, 1), kWgThreads, wg_layout<TYPE>::BYTES, s>>>(a);
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

// x records, then the GEMM.
template <bool EXP>
int run_wg(uint32_t type, const float *x, int nx, int64_t x_stride, const wg_args &a, unsigned gx,
           unsigned gy, cudaStream_t s) {
    const unsigned pb = static_cast<unsigned>((nx + kWgPrepRows - 1) / kWgPrepRows);
    uint8_t *xw = const_cast<uint8_t *>(a.xw);
    if (type == TS_TYPE_Q4_K || type == TS_TYPE_Q5_K)
        wg_x_prep_kernel<<<pb, 256, 0, s>>>(x, nx, a.nsb, x_stride, xw);
    else
        wg_x_prep_inorder_kernel<<<pb, 256, 0, s>>>(x, nx, a.nsb, x_stride, xw);
    if (cudaPeekAtLastError() != cudaSuccess) return -1;
    switch (type) {
    case TS_TYPE_Q4_K:
        return launch_wg<TS_TYPE_Q4_K, EXP>(a, gx, gy, s);
    case TS_TYPE_Q5_K:
        return launch_wg<TS_TYPE_Q5_K, EXP>(a, gx, gy, s);
    case TS_TYPE_Q8_0:
        return launch_wg<TS_TYPE_Q8_0, EXP>(a, gx, gy, s);
    case TS_TYPE_Q5_0:
        return launch_wg<TS_TYPE_Q5_0, EXP>(a, gx, gy, s);
    default:
        return -1;
    }
}

// Inputs a group of the type (x's scale; K-quants: a super-block), 0 if not a type of these products.
int wg_group(uint32_t type) {
    return type == TS_TYPE_Q4_K || type == TS_TYPE_Q5_K   ? 256
           : type == TS_TYPE_Q8_0 || type == TS_TYPE_Q5_0 ? 128
                                                          : 0;
}

bool wg_hopper() {
    static const bool yes = [] {
        int major = 0, dev = 0;
        return cudaGetDevice(&dev) == cudaSuccess &&
               cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
               major == 9;
    }();
    return yes;
}

} // namespace

} // namespace ts_cu

using namespace ts_cu;

extern "C" size_t ts_cuda_gemm_wg_x_bytes(uint32_t type, int64_t ne0, int64_t T) {
    const int G = wg_group(type);
    if (G == 0 || ne0 <= 0 || ne0 % G != 0 || T <= 0) return 0;
    const size_t chunk = G == 256 ? wg_chunk<8>::BYTES : wg_chunk<4>::BYTES;
    return static_cast<size_t>((T + kWgTok - 1) / kWgTok) * static_cast<size_t>(ne0 / G) * chunk;
}

extern "C" bool ts_cuda_gemm_wg_on(bool experts) {
    static const int mode = [] { // 0: none, 1: dense products, 2: dense and grouped
        const char *e = getenv("TURBOSPARK_CUDA_GEMM_WG");
        return !e || !e[0] ? 1 : e[0] == '0' ? 0 : e[0] == '1' ? 2 : 1;
    }();
    return mode >= (experts ? 2 : 1);
}

extern "C" bool ts_cuda_gemm_wg_takes(uint32_t type, int64_t ne0, int64_t T, size_t scratch_bytes) {
    const size_t need = ts_cuda_gemm_wg_x_bytes(type, ne0, T);
    return wg_hopper() && need > 0 && need <= scratch_bytes && T <= INT_MAX - kWgTok && ne0 <= (1 << 20);
}

extern "C" int ts_cuda_gemm_wg(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev,
                               int64_t T, float *y_dev, int64_t y_stride, void *scratch, size_t scratch_bytes,
                               cudaStream_t s) {
    if (!W || !W->data || !x_dev || !y_dev || !scratch || row0 < 0 || n_out <= 0 || T <= 0 ||
        row0 > W->rows || n_out > W->rows - row0 || n_out > INT_MAX - kWgRows || y_stride < n_out)
        return -1;
    if (!ts_cuda_gemm_wg_takes(W->type, W->ne0, T, scratch_bytes) ||
        W->row_bytes != ts_row_size(W->type, W->ne0) || (reinterpret_cast<uintptr_t>(W->data) & 15u) ||
        (reinterpret_cast<uintptr_t>(x_dev) & 15u) || (reinterpret_cast<uintptr_t>(scratch) & 15u))
        return -1;
    wg_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data) + static_cast<size_t>(row0) * W->row_bytes;
    a.rb = W->row_bytes;
    a.nsb = static_cast<int>(W->ne0 / wg_group(W->type));
    a.n_out = a.n_part = static_cast<int>(n_out);
    a.T = static_cast<int>(T);
    a.x_div = 1;
    a.xw = static_cast<const uint8_t *>(scratch);
    a.y = y_dev;
    a.y_stride = y_stride;
    const int64_t tiles = (T + kWgTok - 1) / kWgTok;
    return run_wg<false>(W->type, x_dev, a.T, W->ne0, a,
                         static_cast<unsigned>((n_out + kWgRows - 1) / kWgRows),
                         static_cast<unsigned>(tiles < 65535 ? tiles : 65535), s);
}

extern "C" int ts_cuda_gemm_wg_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                       const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                                       int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                                       float *y_dev, int64_t y_stride, void *scratch, size_t scratch_bytes,
                                       cudaStream_t s) {
    if (!plan || !W || !scratch || x_div < 1 || plan->tile != 64 ||
        (reinterpret_cast<uintptr_t>(scratch) & 15u))
        return -1;
    const int64_t xd = x_div < plan->n_items ? x_div : plan->n_items, nx = (plan->n_items + xd - 1) / xd;
    if (!ts_cuda_gemm_wg_takes(W->type, W->ne0, nx, scratch_bytes) ||
        W->row_bytes != ts_row_size(W->type, W->ne0))
        return -1;
    int64_t parts, e_max;
    const int ok = ts_cuda_expert_gemm_check(plan, W, W2, rows_per_expert, row_off, n_out, x_dev, x_div,
                                             x_stride, y_dev, y_stride, &parts, &e_max);
    if (ok <= 0) return ok;
    if (parts * n_out > INT_MAX - kWgRows) return -1;
    wg_args a = {};
    fill_expert_args(a, plan, W, W2, rows_per_expert, row_off, n_out, parts, e_max, xd, y_dev, y_stride);
    a.nsb = static_cast<int>(W->ne0 / wg_group(W->type));
    a.xw = static_cast<const uint8_t *>(scratch);
    return run_wg<true>(W->type, x_dev, static_cast<int>(nx), x_stride, a,
                        static_cast<unsigned>((a.n_out + kWgRows - 1) / kWgRows),
                        static_cast<unsigned>(plan->max_tiles < 65535 ? plan->max_tiles : 65535), s);
}
