// Quantized GEMV and small-batch matrix products, the CUDA twin of ts_cpu_matmul (see matmul.h).
// This file: the dispatch (which kernel runs a product: the tensor-core GEMV and GEMM, the integer
// MMA or the SIMT kernels), the entry points ts_cuda_matmul, _unrounded and _experts, and the tensor
// upload. The SIMT kernels this note describes are in matmul_blocks.cuh (block types, with the launch
// helpers the split-K product of matmul_split.cu shares), matmul_plain.cuh (plain types) and
// matmul_experts.cuh (expert products).
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
#include "cuda/matmul_blocks.cuh"
#include "cuda/matmul_experts.cuh"
#include "cuda/matmul_plain.cuh"
#include "cuda/matvec_mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quant_decode.cuh"
#include "cuda/rows.cuh"
#include "model/memplan.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

namespace ts_cu {
bool g_x_shared = true; // matmul_blocks.cuh
} // namespace ts_cu

namespace {

using namespace ts_cu;

constexpr int kMaxT = 8;       // tokens per launch; larger T is sliced on the host
constexpr int kTcMaxRows = 64; // dense products of up to this many tokens run on the tensor-core kernel
                               // (launches of kTcMaxTokens), more on the tiled GEMM

// ---- dispatch --------------------------------------------------------------------------------

struct launch_args {
    const uint8_t *w; // row0 applied
    size_t rb;
    int n_out, ne0;
    const float *x;
    float *y;
    cudaStream_t s;
};

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
bool tc_applies(uint32_t type, int64_t ne0, int64_t x_rows, size_t row_bytes, bool whole_chunks,
                int64_t n_chunks) {
    return tc_gemv_enabled() && g_forced_rows_per_warp == 0 && g_x_shared &&
           tc_gemv_takes(type, ne0, x_rows, row_bytes, whole_chunks, n_chunks);
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
    const int64_t chunks = (n_out + 7) / 8;
    // launches of 16 only where they take the weights as the launches of 1–8 tokens do (as A, in two groups, or
    // as B both), so that a token's sums do not depend on the launch's width
    const int no = static_cast<int>(n_out), ne = static_cast<int>(ne0);
    const bool same_form =
        !tc_wa16() || tc_dense_wa(ne, row_bytes, no, kTcMaxTokens) == tc_dense_wa(ne, row_bytes, no, kMaxT);
    if (T > kMaxT && tc_applies(type, ne0, kTcMaxTokens, row_bytes, whole, chunks) && same_form)
        return kTcMaxTokens;
    return tc_applies(type, ne0, T < kMaxT ? T : kMaxT, row_bytes, whole, chunks) ? kMaxT : 0;
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

// An expert product goes to the tensor cores whenever the GEMV takes its type and width: up to
// kTcExpertXRows x rows are staged whole, more (the down products' N·k rows, the gate/up products' N
// tokens beyond 8) one at a time, the row of the chunk at hand (gemv_tc.h). With TURBOSPARK_TC_XROW=0
// the routed products with an x row an item (the downs) stay on the SIMT kernel, which reads each item's
// own row, where every tensor-core block would stage all of them.
bool expert_tc(uint32_t type, int64_t ne0, int64_t n_items, int64_t x_div, bool routed,
               int64_t rows_per_expert, int64_t row_off, int64_t n_out, size_t row_bytes) {
    const int64_t xd = x_div < n_items ? x_div : n_items, x_rows = (n_items + xd - 1) / xd;
    if (tc_xrow_mode() == 0 && routed && xd == 1) return false;
    return tc_applies(type, ne0, tc_experts_staged_rows(x_rows), row_bytes,
                      expert_whole_chunks(routed ? rows_per_expert : 8, row_off, n_out),
                      n_items * ((n_out + 7) / 8));
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
        with_plain_type(W->type, [&](auto t) { // is_plain: one of its types
            launch(matmul_plain_any_kernel<decltype(t)::value>, blocks, kWarps * 32, 0, s, w, W->row_bytes,
                   no, ne0, x_dev, static_cast<int>(T), y_dev);
        });
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

namespace {

// The arguments of ts_cuda_matmul_experts checked and laid out for the kernels: 0 (a filled), 1 for an empty
// product (nothing to do), -1 for invalid arguments.
int expert_job(const ts_cuda_tensor *W, const ts_cuda_tensor *W2, const int32_t *ids_dev, int64_t n_items,
               int64_t rows_per_expert, int64_t row_off, int64_t n_out, const float *x_dev, int64_t x_div,
               int64_t x_stride, float *y_dev, int64_t y_stride, expert_args *out) {
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
    if (n_out == 0 || n_items == 0) return 1;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u))
        return -1;
    if (x_stride < W->ne0 || x_stride % 4 != 0 || y_stride < parts * n_out || y_stride % 4 != 0) return -1;

    expert_args &a = *out;
    a = expert_args{};
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
    return 0;
}

} // namespace

extern "C" int ts_cuda_matmul_experts(const ts_cuda_tensor *W, const ts_cuda_tensor *W2,
                                      const int32_t *ids_dev, int64_t n_items, int64_t rows_per_expert,
                                      int64_t row_off, int64_t n_out, const float *x_dev, int64_t x_div,
                                      int64_t x_stride, float *y_dev, int64_t y_stride, cudaStream_t s) {
    expert_args a;
    const int rc = expert_job(W, W2, ids_dev, n_items, rows_per_expert, row_off, n_out, x_dev, x_div,
                              x_stride, y_dev, y_stride, &a);
    if (rc != 0) return rc < 0 ? -1 : 0;
    const int64_t parts = W2 ? 2 : 1;
    const expert_launch L = {a, static_cast<int>(W->ne0), s};

    if (is_plain(W->type) && L.ne0 % 8 != 0) {
        const dim3 grid((a.n_out + kWarps - 1) / kWarps, a.n_items < kMaxGridY ? a.n_items : kMaxGridY);
        with_plain_type(W->type, [&](auto t) { // is_plain: one of its types
            launch(matmul_experts_plain_any_kernel<decltype(t)::value>, grid, kWarps * 32, 0, s, a, L.ne0);
        });
        return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
    }
    if (expert_tc(W->type, W->ne0, a.n_items, a.x_div, ids_dev != nullptr, rows_per_expert, row_off, n_out,
                  W->row_bytes)) {
        return tc_gemv_experts(W->type, a, L.ne0, s); // tensor cores, x in fp16 (gemv_tc.h)
    }
    if (mma_enabled() && mma_type(W->type) && mma_smem_bytes(L.ne0) <= static_cast<size_t>(kXsBudgetBytes))
        return launch_mma_experts(W->type, a, L.ne0, s); // integer MMA (matvec_mma.cuh)
    // Rows per warp from all the rows of the launch (what fills the GPU).
    const int64_t total = n_items * parts * n_out;
    const int R = rows_per_warp(W->type, total > INT_MAX ? INT_MAX : static_cast<int>(total), 1);
    if (!with_type(W->type, [&](auto t) { launch_experts_type<decltype(t)::value>(R, L); })) return -1;
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int ts_cuda_matmul_experts_shared(const ts_cuda_tensor *W, const ts_cuda_tensor *W2,
                                             const int32_t *ids_dev, int64_t n_items, int64_t rows_per_expert,
                                             int64_t n_out, const float *x_dev, int64_t x_div,
                                             int64_t x_stride, float *y_dev, int64_t y_stride,
                                             const ts_cuda_tensor *Sg, const ts_cuda_tensor *Su, float *sy,
                                             int64_t sy_stride, cudaStream_t s) {
    expert_args a;
    const int rc = expert_job(W, W2, ids_dev, n_items, rows_per_expert, 0, n_out, x_dev, x_div, x_stride,
                              y_dev, y_stride, &a);
    if (rc < 0 || !Sg || !Su || !sy) return -1;
    if (rc > 0 || !ids_dev) return 1;
    const int64_t rows = a.n_out, fs = rows / 2, ne0 = W->ne0;
    const auto same = [&](const ts_cuda_tensor *T) {
        return T->data && T->type == W->type && T->ne0 == ne0 && T->row_bytes == W->row_bytes &&
               T->rows == fs && !(reinterpret_cast<uintptr_t>(T->data) & 15u);
    };
    if (rows % 2 != 0 || fs % 16 != 0 || !same(Sg) || !same(Su) || n_items % a.x_div != 0 ||
        sy_stride < rows || sy_stride % 4 != 0 || (reinterpret_cast<uintptr_t>(sy) & 15u))
        return 1;
    // the shared expert's product as ts_cuda_matmul_experts(Sg, Su, NULL, n_items / x_div, 0, 0, fs, x_dev,
    // 1, ...) would run it alone
    const int64_t n_tok = n_items / a.x_div;
    expert_args sh = a;
    sh.w0 = static_cast<const uint8_t *>(Sg->data), sh.w1 = static_cast<const uint8_t *>(Su->data);
    sh.ids = nullptr, sh.n_items = static_cast<int>(n_tok), sh.rows_per_expert = 0, sh.e_max = 0;
    sh.n_part = static_cast<int>(fs), sh.x_div = 1, sh.y = sy, sh.y_stride = sy_stride;
    expert_args merged = a;
    merged.sw0 = sh.w0, merged.sw1 = sh.w1, merged.sh_items = sh.n_items, merged.sh_rows = sh.n_part;
    merged.sy = sy, merged.sy_stride = sy_stride;
    // both alone on the tensor cores, and all three with the same chunks (the weights as A or as B: they
    // sum in different orders), so that the merged launch's sums are theirs
    const int ni = static_cast<int>(ne0);
    if (!expert_tc(W->type, ne0, a.n_items, a.x_div, true, rows_per_expert, 0, n_out, W->row_bytes) ||
        !expert_tc(W->type, ne0, n_tok, 1, false, 0, 0, fs, W->row_bytes) ||
        tc_experts_wa(a, ni) != tc_experts_wa(sh, ni) || tc_experts_wa(a, ni) != tc_experts_wa(merged, ni))
        return 1;
    return tc_gemv_experts(W->type, merged, ni, s);
}

namespace {
// Whether the planned launch runs job a (its shapes) with the sums ts_cuda_matmul_experts would give it: that
// function's product on the tensor cores with the weights as A, and the planned chunks fitting.
bool planned_takes(const expert_args &a, const ts_cuda_tensor *W, int64_t rows_per_expert, int64_t row_off,
                   int64_t n_out, int64_t max_tiles) {
    const int ne0 = static_cast<int>(W->ne0);
    return expert_tc(W->type, W->ne0, a.n_items, a.x_div, true, rows_per_expert, row_off, n_out,
                     W->row_bytes) &&
           tc_experts_wa(a, ne0) && tc_planned_takes(a, ne0, max_tiles);
}
} // namespace

extern "C" int ts_cuda_matmul_experts_planned(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                              const ts_cuda_tensor *W2, int64_t rows_per_expert,
                                              int64_t row_off, int64_t n_out, const float *x_dev,
                                              int64_t x_div, int64_t x_stride, float *y_dev, int64_t y_stride,
                                              cudaStream_t s) {
    if (!plan || !plan->sorted || !plan->tiles || !plan->n_tiles || plan->n_items < 0) return -1;
    // the job as ts_cuda_matmul_experts would make it for the plan's items (a stand-in id pointer: the
    // items' ids are the plan's)
    expert_args a;
    const int32_t *ids = plan->sorted;
    const int rc = expert_job(W, W2, ids, plan->n_items, rows_per_expert, row_off, n_out, x_dev, x_div,
                              x_stride, y_dev, y_stride, &a);
    if (rc != 0) return rc < 0 ? -1 : 0;
    // the plan makes ids outside [0, n_experts) NaN rows, ts_cuda_matmul_experts those outside the tensors
    if (plan->tile > kTcPlanTile || plan->n_experts != static_cast<int64_t>(a.e_max) + 1 ||
        !planned_takes(a, W, rows_per_expert, row_off, n_out, plan->max_tiles))
        return 1;
    a.ids = nullptr;
    return tc_gemv_experts_planned(W->type, a, *plan, static_cast<int>(W->ne0), s);
}

extern "C" bool ts_cuda_matmul_experts_planned_takes(const ts_cuda_tensor *W, const ts_cuda_tensor *W2,
                                                     int64_t n_items, int64_t n_experts,
                                                     int64_t rows_per_expert, int64_t n_out, int64_t x_div) {
    if (!W || n_items < 1 || n_experts < 1 || !ts_cuda_expert_plan_supported(n_experts)) return false;
    // the job's shapes, with stand-ins for the ids, x and y (16-byte aligned; never read)
    alignas(16) static float stand_in[4];
    const int64_t parts = W2 ? 2 : 1, xs = (W->ne0 + 3) / 4 * 4, ys = (parts * n_out + 3) / 4 * 4;
    expert_args a;
    if (expert_job(W, W2, reinterpret_cast<const int32_t *>(stand_in), n_items, rows_per_expert, 0, n_out,
                   stand_in, x_div, xs, stand_in, ys, &a) != 0 ||
        n_experts != static_cast<int64_t>(a.e_max) + 1)
        return false;
    return planned_takes(a, W, rows_per_expert, 0, n_out,
                         ts_memplan_expert_plan_max_tiles(n_items, n_experts, kTcPlanTile));
}

extern "C" int ts_cuda_matmul_experts_shared_down(const ts_cuda_tensor *W, const int32_t *ids_dev,
                                                  int64_t n_items, int64_t rows_per_expert, int64_t n_out,
                                                  const float *x_dev, int64_t x_stride, float *y_dev,
                                                  int64_t y_stride, const ts_cuda_tensor *Sd, const float *sx,
                                                  int64_t sx_stride, int64_t n_tok, float *sy,
                                                  const ts_cuda_moe_down_fused *f, cudaStream_t s) {
    expert_args a;
    const int rc = expert_job(W, nullptr, ids_dev, n_items, rows_per_expert, 0, n_out, x_dev, 1, x_stride,
                              y_dev, y_stride, &a);
    const int64_t up_off = f ? f->up_off : 0;
    if (rc < 0 || !Sd || !sx || !sy || n_tok < 1 || up_off < 0 || up_off % 4 != 0 ||
        (f && f->count && (!f->sg || !f->tw)))
        return -1;
    if (rc > 0 || !ids_dev) return 1;
    const int64_t ne0 = W->ne0;
    const auto misaligned = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
    if (!Sd->data || Sd->type != W->type || Sd->ne0 != ne0 || Sd->row_bytes != W->row_bytes ||
        Sd->rows != n_out || misaligned(Sd->data) || misaligned(sx) || misaligned(sy) || sx_stride < ne0 ||
        sx_stride % 4 != 0 || n_tok != 1)
        return 1;
    expert_args merged = a;
    merged.sw0 = static_cast<const uint8_t *>(Sd->data), merged.sw1 = nullptr;
    merged.sh_items = static_cast<int>(n_tok), merged.sh_rows = static_cast<int>(n_out);
    merged.sy = sy, merged.sy_stride = n_out, merged.sx = sx, merged.sx_stride = sx_stride;
    merged.up_off = up_off;
    merged.pre_round = up_off && f->pre_round;
    if (f && f->count) merged.cmb_count = f->count, merged.cmb_sg = f->sg, merged.cmb_tw = f->tw;
    // the routed downs alone as ts_cuda_matmul_experts and the shared one as ts_cuda_matmul(Sd, 0, n_out, sx, 1,
    // sy) both on the tensor-core GEMV (at one token never the GEMM), with the merged launch's chunks
    const int ni = static_cast<int>(ne0);
    if (!expert_tc(W->type, ne0, n_items, 1, true, rows_per_expert, 0, n_out, W->row_bytes) ||
        ts_cuda_matmul_rounds_x(Sd->type, ne0, n_tok, 0, n_out) == 0 || !tc_experts_one_row(merged) ||
        tc_experts_wa(a, ni) != tc_experts_wa(merged, ni) ||
        tc_dense_wa(ni, W->row_bytes, static_cast<int>(n_out), static_cast<int>(n_tok)) !=
            tc_experts_wa(merged, ni))
        return 1;
    return tc_gemv_experts(W->type, merged, ni, s);
}
