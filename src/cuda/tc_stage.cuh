// Pieces the tensor-core products share (the decode GEMV, gemv_tc.cu; the prefill GEMMs, gemm_tc.cu and
// gemm_wg.cu): the MMA, the two kinds of weight types, x rounded to fp16 A fragments (gemv_tc.cuh says
// how and why), a GEMM block's tile of items and the grouped products' arguments. The staging functions
// write a (row, group)'s fragments, sums and scale at the given steps: the GEMV packs them in three arrays
// of shared memory, the GEMM in one record per (row, group) in global memory (gemm_tc.cu).
#ifndef TS_CUDA_TC_STAGE_CUH
#define TS_CUDA_TC_STAGE_CUH

#include "cuda/gemm.h"
#include "cuda/gemv_tc.cuh"

#include <cuda_fp16.h>
#include <stdint.h>

namespace ts_cu {

// The grouped products' fields of their kernels' arguments (gemm_tc.cu's tc_gemm_args and gemm_wg.cu's
// wg_args name them alike): the weights (rows ≥ n_out of a part from W2), the plan, x's rows (item i's is
// ⌊i / xd⌋) and the outputs; parts and e_max as ts_cuda_expert_gemm_check returned them.
template <class A>
void fill_expert_args(A &a, const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                      const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off, int64_t n_out,
                      int64_t parts, int64_t e_max, int64_t xd, float *y, int64_t y_stride) {
    a.w0 = static_cast<const uint8_t *>(W->data);
    a.w1 = W2 ? static_cast<const uint8_t *>(W2->data) : nullptr;
    a.rb = W->row_bytes;
    a.n_part = static_cast<int>(n_out);
    a.n_out = static_cast<int>(parts * n_out);
    a.rows_per_expert = rows_per_expert;
    a.row_off = row_off;
    a.e_max = static_cast<int>(e_max);
    a.x_div = static_cast<int>(xd);
    a.y = y;
    a.y_stride = y_stride;
    a.sorted = plan->sorted;
    a.tiles = static_cast<const int4 *>(plan->tiles);
    a.n_tiles = plan->n_tiles;
}

// C += A·B, m16n8k16, fp16 operands, fp32 accumulation.
// A rows g (a01: k-slots 2t, 2t+1; a45: 2t+8, 2t+9) and g + 8 (a23, a67): tokens g and g + 8.
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a01, uint32_t a23, uint32_t a45, uint32_t a67,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b0), "r"(b1));
}

// Tile q of a grouped expert plan (tiles: {expert, first position in sorted, count, index among the
// expert's tiles}) or, with tiles NULL, of T tokens in tiles of TT; its items (tokens) and their x rows into
// items[0 .. TT) and xrows (past the tile's count, its last item again: computed, never stored). With
// pairs, the expert's next tile (of the plan's n_tiles in use) joins tile q when there is one (the caller
// takes an expert's tiles in pairs 2j, 2j + 1 and TT is twice the plan's tile). Every thread of the block
// calls it; returns {expert (0 for dense products), first position, count}.
__device__ __forceinline__ int3 gemm_tile_items(const int4 *tiles, const int32_t *sorted, int q, int T,
                                                int TT, int x_div, int *items, int *xrows, bool pairs = false,
                                                int n_tiles = 0) {
    int3 r;
    if (tiles) {
        const int4 ti = tiles[q];
        r = make_int3(ti.x, ti.y, ti.z);
        if (pairs && q + 1 < n_tiles) {
            const int4 tn = tiles[q + 1];
            if (tn.x == ti.x && tn.w == ti.w + 1) r.z += tn.z; // consecutive in sorted
        }
    } else {
        r = make_int3(0, q * TT, min(TT, T - q * TT));
    }
    __syncthreads(); // the previous tile is done with items and the stages
    const int tid = static_cast<int>(threadIdx.x);
    if (tid < TT) {
        const int j = min(tid, r.z - 1);
        const int it = tiles ? sorted[r.y + j] : r.y + j;
        items[tid] = it;
        xrows[tid] = it / x_div;
    }
    __syncthreads();
    return r;
}

// ---- the two kinds of types ------------------------------------------------------------------------
//
// Q4_K, Q5_K: 256-input super-blocks, the scales folded into B (kquant_b_frags). Q8_0, Q5_0, Q6_K: MMAs
// in input order, each scaled after the fact (inorder_b_frag); x staged per group of G inputs.
template <int TYPE> struct tc_kind {
    static constexpr bool kInorder = TYPE == TS_TYPE_Q8_0 || TYPE == TS_TYPE_Q5_0 || TYPE == TS_TYPE_Q6_K;
    static constexpr int G =
        TYPE == TS_TYPE_Q8_0 || TYPE == TS_TYPE_Q5_0 ? 128 : kTcSuper; // inputs a scale of x
    static_assert(G % 128 == 0, "x groups are whole multiples of 128 inputs");
};

// The types of both kinds, in one list: the tensor-core products (the GEMV, gemv_tc.cu, and the GEMM,
// gemm_tc.cu) launch a kernel templated on the type for a run-time type by
//   with_tc_type(type, f)  f(type_tag<TYPE>{}) for Q4_K, Q5_K, Q6_K, Q8_0 or Q5_0, then true; false otherwise
// (type_tag and the same dispatch over every type the SIMT kernels take: with_type, quant_decode.cuh).
#define TS_CU_TC_TYPES(X) X(TS_TYPE_Q4_K) X(TS_TYPE_Q5_K) X(TS_TYPE_Q6_K) X(TS_TYPE_Q8_0) X(TS_TYPE_Q5_0)
#define TS_CU_TC_TYPE_CASE(T)                                                                                \
    case T:                                                                                                  \
        f(type_tag<T>{});                                                                                    \
        return true;

template <class F> bool with_tc_type(uint32_t type, F &&f) {
    switch (type) {
        TS_CU_TC_TYPES(TS_CU_TC_TYPE_CASE)
    default:
        return false;
    }
}
#undef TS_CU_TC_TYPE_CASE

// x staging loads kStageRounds rounds of units (one unit a thread a round) before converting any, so
// their L2 round trips overlap instead of following one another (one round was ~1 µs of a launch).
constexpr int kStageRounds = 4;

// The 16 inputs of a unit at p (16-byte aligned) and their max |x|; zeros when !ok. COH: x may have been
// written during this kernel (by another block: persist.cu's chain), so it is read through L2 (ld.global.cg),
// not the read-only path, which may hold lines from before the write.
template <bool COH = false>
__device__ __forceinline__ void load_unit(const float *p, bool ok, float (&v)[16]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 *q = reinterpret_cast<const float4 *>(p) + i;
        const float4 f = ok ? (COH ? __ldcg(q) : __ldg(q)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
}
__device__ __forceinline__ float unit_amax(const float (&v)[16]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(v[i]));
    return amax;
}

// The scale 2^s of the group that v's unit belongs to (tc_x_scale of the group's max |v|; 2^-s into inv).
// LANES: the neighbouring lanes whose units make up the group (they share its max).
template <int LANES> __device__ __forceinline__ float tc_group_scale(const float (&v)[16], float &inv) {
    float amax = unit_amax(v);
#pragma unroll
    for (int off = 1; off < LANES; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    return tc_x_scale(amax, inv);
}

// v ← its residual after the fp16 rounding at its group's scale: v − fp16(v·2^s)·2^-s (exact in fp32). The
// split products (gemm_tc.h) stage x and then this residual, each rounded at its own scale, so the two
// carry ~22 bits of x.
template <int LANES> __device__ __forceinline__ void tc_x_residual(float (&v)[16]) {
    float inv;
    const float scale = tc_group_scale<LANES>(v, inv);
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] -= __half2float(__float2half_rn(v[i] * scale)) * inv;
}

// v ← v rounded at its group's scale and back, fp16(v·2^s)·2^-s: what the MoE's SwiGLU kernel does to the routed
// rows' h (moe.cu), which a staging that makes h itself does first to stage the same values.
template <int LANES> __device__ __forceinline__ void tc_x_preround(float (&v)[16]) {
    float inv;
    const float scale = tc_group_scale<LANES>(v, inv);
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = __half2float(__float2half_rn(v[i] * scale)) * inv;
}

// The rows of a staging: rows(r) is the first input of x row r, rows.load<COH>(p, ok, v) a unit's 16 inputs
// from p (zeros when !ok), and rows.pre_round() whether the inputs are rounded once at their group's scale
// before the staging's own rounding (tc_x_preround). strided_rows: x + r·stride, the inputs as they are; the
// GEMV's gathered rows and its SwiGLU of gate and up rows (gemv_tc.cu) are others.
struct strided_rows {
    const float *x;
    int64_t stride;
    __device__ const float *operator()(int r) const { return x + static_cast<size_t>(r) * stride; }
    __device__ static constexpr bool pre_round() { return false; }
    template <bool COH> __device__ void load(const float *p, bool ok, float (&v)[16]) const {
        load_unit<COH>(p, ok, v);
    }
};

// The rounds of a staging: for units u < units (one a thread a round), at(u) is the unit's first input (or
// nullptr for a unit past the row's inputs, staged as zeros) and
// convert(u, ok, v) turns its 16 inputs v into fragments; every thread of the block calls convert for every
// round (the shuffles inside need all lanes), ok = u < units. NT: only threads 0 .. NT − 1 stage (whole
// warps; the persistent chain's copy warp does not), 0: the whole block. ROUNDS: the rounds loaded before
// any is converted (fewer registers where one round covers x, as the GEMV's one-row staging).
// load(p, ok, v): a unit's inputs (load_unit by default).
template <bool COH> struct unit_load {
    __device__ void operator()(const float *p, bool ok, float (&v)[16]) const { load_unit<COH>(p, ok, v); }
};
template <bool COH = false, int NT = 0, int ROUNDS = kStageRounds, class At, class Convert,
          class Load = unit_load<COH>>
__device__ __forceinline__ void stage_rounds(int units, At at, Convert convert, Load load = Load{}) {
    const int nt = NT ? NT : static_cast<int>(blockDim.x); // the staging threads: 0 .. nt − 1
    for (int u0 = 0; u0 < units; u0 += ROUNDS * nt) {
        float v[ROUNDS][16];
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            if (u0 + r * nt >= units) break; // the same for the whole block
            const int u = u0 + r * nt + static_cast<int>(threadIdx.x);
            const float *p = u < units ? at(u) : nullptr; // nullptr: no inputs (zeros)
            load(p, p != nullptr, v[r]);
        }
#pragma unroll
        for (int r = 0; r < ROUNDS; r++) {
            if (u0 + r * nt >= units) break;
            const int u = u0 + r * nt + static_cast<int>(threadIdx.x);
            convert(u, u < units, v[r]);
        }
    }
}

// x of the K-quants → fp16 A fragments: unit u = (row, super-block, lane t, quarter q) converts 16 inputs;
// the 16 units of a (row, super-block) are neighbouring lanes and share its max. store(rs, t, q, a, sum,
// other, inv) puts a unit's eight words a (rs = row·nsb + super-block; quarter q = 2j + h: sub-block 2t + h,
// its elements 16j .. 16j + 15, the words of MMAs 2(4j + ii) + h for ii = 0..3: a[2ii] k-slots 2t, 2t + 1,
// a[2ii + 1] 2t + 8, 2t + 9), and with q = 0 the sums of sub-blocks 2t and 2t + 1 (sum, other) and 2^-s
// (inv); it is called for units inside the rows only. RES: stage the residual of x's own rounding instead
// (tc_x_residual). COH: as load_unit.
// rows: the staging's rows (strided_rows above).
template <bool RES, bool COH = false, int NT = 0, int ROUNDS = kStageRounds, class Rows, class Store>
__device__ inline void stage_x_kquant_rows_each(Rows rows, int nx, int nsb, Store store) {
    const int units = nx * nsb * 16;
    auto at = [&](int u) { // unit u's first input
        const int q = u & 3, t = (u >> 2) & 3, rs = u >> 4;
        return rows(rs / nsb) + (rs % nsb) * kTcSuper + 64 * t + 32 * (q >> 1) + 16 * (q & 1);
    };
    const auto load = [&](const float *p, bool ok, float(&v)[16]) { rows.template load<COH>(p, ok, v); };
    stage_rounds<COH, NT, ROUNDS>(
        units, at,
        [&](int u, bool ok, const float(&x16)[16]) {
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = x16[i];
            if constexpr (RES) tc_x_residual<16>(v);
            if (rows.pre_round()) tc_x_preround<16>(v);
            const int q = u & 3, t = (u >> 2) & 3, rs = u >> 4; // rs = row·nsb + super-block
            float amax = unit_amax(v);
#pragma unroll
            for (int off = 1; off < 16; off <<= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            float inv;
            const float scale = tc_x_scale(amax, inv);
            uint32_t a[8];
            float sum = tc_x_quarter(v, scale, a);
            sum += __shfl_xor_sync(0xffffffffu, sum, 1); // the sub-block's sum (quarters j = 0, 1)
            const float other = __shfl_xor_sync(0xffffffffu, sum, 2); // the other sub-block's
            if (!ok) return;
            store(rs, t, q, a, sum, other, inv);
        },
        load);
}
template <bool RES, bool COH = false, int NT = 0, int ROUNDS = kStageRounds, class Store>
__device__ inline void stage_x_kquant_each(const float *__restrict__ x, int nx, int nsb, int64_t x_stride,
                                           Store store) {
    stage_x_kquant_rows_each<RES, COH, NT, ROUNDS>(strided_rows{x, x_stride}, nx, nsb, store);
}

// The GEMV's and the prefill GEMM's layout: per (row, super-block), lane t's words at xs + t·kTcXsLane,
// word ii of quarter (h, j) in the lane's 16-byte group 4j + ii, stored at group (4j + ii) ^ t, slots 2h,
// 2h + 1; the sums' hi and lo words in xsum, 2^-s in xsc.
template <bool RES = false, bool COH = false, int NT = 0, int ROUNDS = kStageRounds, class Rows>
__device__ inline void stage_x_kquant_rows(Rows rows, int nx, int nsb, uint32_t *xs, uint2 *xsum, float *xsc,
                                           int xs_step = kTcXsSuper, int sum_step = 4, int sc_step = 1) {
    stage_x_kquant_rows_each<RES, COH, NT, ROUNDS>(
        rows, nx, nsb, [&](int rs, int t, int q, const uint32_t(&a)[8], float sum, float other, float inv) {
            const int h = q >> 1, j = q & 1;
            uint32_t *lane_xs = xs + static_cast<size_t>(rs) * xs_step + t * kTcXsLane;
#pragma unroll
            for (int ii = 0; ii < 4; ii++)
                *reinterpret_cast<uint2 *>(lane_xs + (((4 * j + ii) ^ t) << 2) + 2 * h) =
                    make_uint2(a[2 * ii], a[2 * ii + 1]);
            if (q == 0) {
                uint2 hl;
                tc_x_sums(sum, other, hl.x, hl.y);
                xsum[static_cast<size_t>(rs) * sum_step + t] = hl;
                if (t == 0) xsc[static_cast<size_t>(rs) * sc_step] = inv;
            }
        });
}
template <bool RES = false, bool COH = false, int NT = 0, int ROUNDS = kStageRounds>
__device__ inline void stage_x_kquant(const float *__restrict__ x, int nx, int nsb, int64_t x_stride,
                                      uint32_t *xs, uint2 *xsum, float *xsc, int xs_step = kTcXsSuper,
                                      int sum_step = 4, int sc_step = 1) {
    stage_x_kquant_rows<RES, COH, NT, ROUNDS>(strided_rows{x, x_stride}, nx, nsb, xs, xsum, xsc, xs_step,
                                              sum_step, sc_step);
}

// x of the in-order types → fp16 A fragments: unit u = (row, group, MMA m) converts the 16 inputs of MMA m
// for the four lanes t (words (m·4 + t)·2 + 0, 1 of the group); the G/16 units of a group are neighbouring
// lanes and share its max. A last group past ne0 (ne0 a multiple of 16, not of G) is staged with zeros
// for the missing inputs. RES: the residual of x's own rounding (tc_x_residual). COH: as load_unit.
template <int G, bool RES = false, bool COH = false, int NT = 0, int ROUNDS = kStageRounds, class Rows>
__device__ inline void stage_x_inorder_rows(Rows rows, int nx, int ne0, uint32_t *xs, float *xsc,
                                            int xs_step = G / 2, int sc_step = 1) {
    constexpr int UPG = G / 16; // units (MMAs) a group: 8 or 16, so a group never straddles two warps
    const int ng = (ne0 + G - 1) / G, units = nx * ng * UPG;
    auto at = [&](int u) -> const float * { // unit u's first input; rg = row·ng + group
        const int rg = u / UPG, i = (rg % ng) * G + 16 * (u % UPG);
        return i < ne0 ? rows(rg / ng) + i : nullptr;
    };
    const auto load = [&](const float *p, bool ok, float(&v)[16]) { rows.template load<COH>(p, ok, v); };
    stage_rounds<COH, NT, ROUNDS>(
        units, at,
        [&](int u, bool ok, const float(&x16)[16]) {
            float v[16];
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = x16[i];
            if constexpr (RES) tc_x_residual<UPG>(v);
            if (rows.pre_round()) tc_x_preround<UPG>(v);
            const int m = u % UPG, rg = u / UPG;
            float amax = unit_amax(v);
#pragma unroll
            for (int off = 1; off < UPG; off <<= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            float inv;
            const float scale = tc_x_scale(amax, inv);
            if (!ok) return;
            uint32_t *w = xs + static_cast<size_t>(rg) * xs_step + m * 8;
#pragma unroll
            for (int t = 0; t < 4; t++) tc_x_inorder(v, scale, t, w[2 * t], w[2 * t + 1]);
            if (m == 0) xsc[static_cast<size_t>(rg) * sc_step] = inv;
        },
        load);
}
template <int G, bool RES = false, bool COH = false, int NT = 0, int ROUNDS = kStageRounds>
__device__ inline void stage_x_inorder(const float *__restrict__ x, int nx, int ne0, int64_t x_stride,
                                       uint32_t *xs, float *xsc, int xs_step = G / 2, int sc_step = 1) {
    stage_x_inorder_rows<G, RES, COH, NT, ROUNDS>(strided_rows{x, x_stride}, nx, ne0, xs, xsc, xs_step,
                                                  sc_step);
}

} // namespace ts_cu

#endif
