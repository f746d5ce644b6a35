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
// The kernels are in gemm_tc_kernels.cuh; this file sizes and launches them (the host functions).
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cuda_device.h"
#include "cuda/gemm_tc.h"
#include "cuda/gemm_tc_kernels.cuh"
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
    if (ts_cuda_gemm_wg_on(false) && ts_cuda_gemm_wg_takes(W->type, W->ne0, T, g_scratch_bytes) &&
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
    if (ts_cuda_gemm_wg_on(true) &&
        ts_cuda_gemm_wg_experts(plan, W, W2, rows_per_expert, row_off, n_out, x_dev, x_div, x_stride, y_dev,
                                y_stride, g_scratch, g_scratch_bytes, s) == 0)
        return 0;
    const int64_t xd = x_div < plan->n_items ? x_div : plan->n_items;
    tc_gemm_args a = {};
    fill_expert_args(a, plan, W, W2, rows_per_expert, row_off, n_out, parts, e_max, xd, y_dev, y_stride);
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
