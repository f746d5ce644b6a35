// Tiled fp32 GEMM on quantized weights, dense (ts_cuda_gemm) and grouped by expert
// (ts_cuda_expert_plan_build + ts_cuda_gemm_experts). See gemm.h for the contract.
//
// Why: the GEMVs of matmul.cu decode every weight once per launch and reuse it for T ≤ 8 tokens.
// For prefill that means every weight byte read and decoded N/8 times (dense), or once per
// (token, expert) item (MoE), and at T = 8 they run far below the FP32 rate (docs/BENCHMARKS.md:
// 2560→10240 Q4_K at T = 8 takes ~116 µs, 3.6 TFLOP/s). Here a thread block decodes a tile of
// weight rows once into shared memory and multiplies it with up to 128 tokens.
//
// ---- kernel (gemm_kernel<TYPE, C>) ------------------------------------------------------------------
//
// Block tile BM rows (outputs o) × BN columns (tokens or expert items), K in steps of BK = 32.
// Shared memory per block:
//   As [2][BK][BM]      fp32 weights, k-major (double-buffered)
//   Bs [2][BK][BN + 4]  fp32 x, k-major (double-buffered; +4 makes the transposing stores
//                       conflict-free)
//   raw[2][BM][RAWB]    the weight bytes of one "chunk" of KC elements of each of the BM rows
//                       (double-buffered): aligned 16-byte lines copied by cp.async, the way
//                       matmul.cu stages blocks (block formats are only 2-byte aligned; a warp
//                       copies consecutive lines of a row, so the copy is coalesced). KC is one
//                       super-block for K-quants (256), 128 elements for the 32-element types,
//                       256 bytes of plain elements; RAWB = gdec_row_bytes (gemm_decode.cuh).
// Per step of 32 elements: every thread decodes one or two "half steps" (16 elements of one row,
// gdec<TYPE>::decode16: exactly ts_dequantize_row's values) from raw into As, and stores the x
// values it prefetched into registers into Bs. Then each thread accumulates a TM × TN register tile
// with fp32 FMAs: per k, TM/4 float4 loads of As and TN/4 float4 loads of Bs (lanes as an 8 × 4
// grid over rows × columns: a warp's loads touch 128 and 64 contiguous bytes, conflict-free),
// TM·TN FFMAs. Pipeline, one barrier per step: x of step s + 1 is loaded from global memory into
// registers before the FMAs of step s, decoded / stored after them into the other buffers; the raw
// bytes of chunk c + 1 are in flight during all the steps of chunk c (one extra barrier per chunk).
//
// Configurations (rows × columns, threads, thread tile TM × TN, warps WM × WN; shared memory for
// Q4_K / Q6_K = As + Bs + raw, RAWB 176 / 272 bytes; registers from ptxas -v, CUDA 13, sm_90a):
//   0: 128 × 128, 256 threads, 8 × 8, 2 × 4   109 / 133 KiB  ~190 regs   large T
//   1: 128 × 64,  256 threads, 8 × 4, 2 × 4    93 / 117 KiB  ~180 regs   mid T; expert tiles of 64
//   2: 64 × 64,   256 threads, 4 × 4, 2 × 4    55 / 67 KiB   80-145      few rows (more blocks)
//   3: 128 × 32,  128 threads, 4 × 8, 4 × 1    85 / 109 KiB  ~170        small T; expert tiles of 32
//   4: 128 × 16,  128 threads, 4 × 4, 4 × 1    81 / 105 KiB  96-124      T ≈ 16; expert tiles of 16
// (As = 2·32·BM floats, Bs = 2·32·(BN + 4) floats, raw = 2·BM·RAWB bytes; the plain types' RAWB is
// 304.) So mostly 8 resident warps an SM; __launch_bounds__ minimums of 2 blocks would cap the
// registers at 128 and spill in the 8 × 8 / 8 × 4 tiles (tried; to measure).
// The thread-block bodies (gemm_block, expert_plan_block) live in gemm_tile.cuh, written against a
// small environment (barrier, cp.async, loads, warp intrinsics) so that
// tests/cuda/test_cuda_gemm_host.cu runs the very same code on the CPU, one OS thread per CUDA
// thread; the weight decoders (gemm_decode.cuh) are checked bit for bit on the host by
// tests/cuda/test_cuda_gemm_decode.cu.
// Dense GEMMs pick one with a small cost model (pick_config): the busiest SM's share of tile
// area ⌈blocks / SMs⌉·BM·BN, divided by an assumed efficiency of the configuration (kCfgEff:
// smaller thread tiles need more shared-memory loads per FMA) and by how full the SM is with the
// blocks it holds (fewer than 8 resident warps count as less than full). These are estimates to
// be tuned on the H200 (ts_cuda_gemm_force_config forces one for measurements).
//
// Numerics: each output is one thread's sum Σ_k w·x in increasing k with fp32 FMAs (acc =
// fma(w, x, acc)), w exactly ts_dequantize_row's value; no split-K, no atomics: the result is the
// same whatever the grid, the tile or (for experts) the tile and position an item lands in.
// Compared with the GEMV (which applies a block's scale to a partial sum) results differ only by
// fp32 rounding. K-tail: plain types may have rows that end inside a step; the missing weights and
// x values are 0 (never read from memory).
//
// ---- dispatch -----------------------------------------------------------------------------------------
//
// ts_cuda_matmul (matmul.cu) calls ts_cuda_gemm when T ≥ TS_CUDA_GEMM_MIN_TOKENS (16) and the product
// runs neither on the tensor-core GEMV (types and widths it takes, up to 64 tokens) nor on the
// tensor-core GEMM (gemm_tc.h: the same types beyond; and ts_cuda_moe its grouped gate/up): from there on the
// SIMT GEMV runs at least two launches that each read all of W, at T = 8 already far below the FP32
// rate (the x-through-L1 path), while the 128 × 16 tile reads W once.
//
// ---- grouped expert products ------------------------------------------------------------------------
//
// expert_plan_kernel (one block of 32·R threads, R ≤ 32 warps, every id read from device memory):
//   1. warp w counts the ids of its contiguous range of items per expert (__match_any_sync groups
//      lanes of one expert; the group's first lane adds its size) into shared cnt[w][e];
//      ids outside [0, E) count as expert E (the "bad" group);
//   2. per expert, the ranges' counts become running offsets (in range order), totals tot[e];
//   3. block-wide exclusive scans over experts of tot (item offsets off[e]) and of ⌈tot / TT⌉
//      (tile offsets toff[e]);
//   4. warp w scatters its items again, in order: position = off[e] + offset of its range +
//      rank among the equal lanes before it: sorted[] is a stable sort by expert;
//   5. tiles: tile q (< total) of expert e (binary search in toff) = {e (−1 for the bad group),
//      off[e] + j·TT, min(TT, tot[e] − j·TT), j}; n_tiles = total.
// R = min(32, what fits kPlanSmem (96 KiB) of counters): 32 for E up to ~700, fewer beyond, none
// past E ≈ 6100 (ts_cuda_expert_plan_supported; ts_cuda_moe then keeps the GEMV path).
// Plan scratch (ts_cuda_expert_plan_bytes): align256(4·n) + align256(16·max over TT (8 .. 64) of max_tiles)
// + 256 bytes (the n_tiles counter).
// Tiles per launch: Σ_e ⌈c_e / TT⌉ ≤ (n + min(n, E + 1)·(TT − 1)) / TT = max_tiles. The GEMM
// grid is (⌈rows / 128⌉, min(max_tiles, 65535)); blockIdx.y loops over tiles q < *n_tiles and blocks
// past the work list exit. TT (the tile's column count) from the mean items per expert n / E:
// 16 up to 16, 32 up to 32, else 64 (configurations 4, 3, 1; all 128 rows; see plan_tile); or as the caller
// asks (ts_cuda_expert_plan_build_tile: 8 for the tensor-core GEMV's planned expert products, gemv_tc.h).
//
// ts_cuda_gemm_experts then runs gemm_kernel on the plan: column j of tile q is item
// sorted[start + j]; its x row is x + ⌊item / x_div⌋·x_stride, its outputs go to
// y + item·y_stride + o, the weight rows are those of expert e (both parts for split gate/up
// tensors: output rows o < n_part from W, the rest from W2), exactly where the GEMV path puts them.
//
// TODO (tuning on the H200): the fp32 products left here in prefill (the routed experts' down, the
// hyper-connections', the types gemm_tc.cu does not take) to the tensor cores, with their decode twins; a 3-stage
// pipeline or 256-row tiles for large T; split-K for tiny n_out with long rows (the HC inject,
// 10240 → 4) where 16 outputs a thread × K FMAs is the latency floor.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_decode.cuh"
#include "cuda/gemm_tile.cuh"
#include "model/memplan.h"

#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

namespace {

using namespace ts_cu;

using Cfg0 = gcfg<8, 8, 2, 4>; // 128 × 128
using Cfg1 = gcfg<8, 4, 2, 4>; // 128 × 64
using Cfg2 = gcfg<4, 4, 2, 4>; // 64 × 64
using Cfg3 = gcfg<4, 8, 4, 1>; // 128 × 32
using Cfg4 = gcfg<4, 4, 4, 1>; // 128 × 16
constexpr int kNumCfg = 5;
constexpr int kCfgBM[kNumCfg] = {Cfg0::BM, Cfg1::BM, Cfg2::BM, Cfg3::BM, Cfg4::BM};
constexpr int kCfgBN[kNumCfg] = {Cfg0::BN, Cfg1::BN, Cfg2::BN, Cfg3::BN, Cfg4::BN};
constexpr int kCfgWarps[kNumCfg] = {Cfg0::NT / 32, Cfg1::NT / 32, Cfg2::NT / 32, Cfg3::NT / 32,
                                    Cfg4::NT / 32};
constexpr double kCfgEff[kNumCfg] = {1.0, 0.92, 0.8, 0.8, 0.65}; // assumed relative FMA efficiency

// ---- device environment of the bodies (gemm_tile.cuh) -------------------------------------------------

struct dev_env {
    int tid, bx, by, gy;
    float *smem;
    int *items;
    int *psm;
    int (*wsum)[32];
    __device__ __forceinline__ void sync() const { __syncthreads(); }
    __device__ __forceinline__ void syncwarp() const { __syncwarp(); }
    __device__ __forceinline__ void cp16(void *dst, const void *src) const {
        const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
    }
    __device__ __forceinline__ void commit() const { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
    __device__ __forceinline__ void wait0() const { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
    __device__ __forceinline__ void wait1() const { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
    __device__ __forceinline__ float ld1(const float *p) const { return __ldg(p); }
    __device__ __forceinline__ float4 ld4(const float *p) const {
        return __ldg(reinterpret_cast<const float4 *>(p));
    }
    __device__ __forceinline__ uint32_t match_any(int v) const { return __match_any_sync(0xffffffffu, v); }
    __device__ __forceinline__ int shfl_up(int v, int d) const { return __shfl_up_sync(0xffffffffu, v, d); }
};

template <int TYPE, class C> __global__ void __launch_bounds__(C::NT) gemm_kernel(const gemm_args a) {
    extern __shared__ __align__(16) float smem[];
    __shared__ int items[C::BN];
    dev_env env = {static_cast<int>(threadIdx.x),
                   static_cast<int>(blockIdx.x),
                   static_cast<int>(blockIdx.y),
                   static_cast<int>(gridDim.y),
                   smem,
                   items,
                   nullptr,
                   nullptr};
    gemm_block<TYPE, C>(a, env);
}

__global__ void __launch_bounds__(1024)
    expert_plan_kernel(const int32_t *__restrict__ ids, int n, int E, int TT, int32_t *__restrict__ sorted,
                       int4 *__restrict__ tiles, int32_t *__restrict__ n_tiles) {
    extern __shared__ int psm[];
    __shared__ int wsum[2][32];
    dev_env env = {static_cast<int>(threadIdx.x), 0, 0, 1, nullptr, nullptr, psm, wsum};
    expert_plan_block(ids, n, E, TT, static_cast<int>(blockDim.x >> 5), sorted, tiles, n_tiles, env);
}

// ---- expert plan sizes ----------------------------------------------------------------------------

// The plan's sizes are the memory plan's (src/model/memplan.h), which the workspaces reserve.
constexpr int kPlanSmem = TS_MEMPLAN_EXPERT_PLAN_SMEM; // counters in shared memory

// Warps (item ranges) of the plan kernel for E experts; 0 if the counters do not fit.
int plan_ranges(int64_t E) {
    return ts_memplan_expert_plan_ranges(E);
}
// Items a tile from the mean items per expert m = n / E: the TT of least padded columns per unit of
// efficiency, ⌈m / TT⌉·TT / kCfgEff, for balanced experts (16: 0.65, 32: 0.8, 64: 0.92):
// m ≤ 16 → 16, m ≤ 32 → 32, else 64.
int plan_tile(int64_t n, int64_t E) {
    return n <= 16 * E ? 16 : (n <= 32 * E ? 32 : 64);
}
int64_t plan_max_tiles(int64_t n, int64_t E, int tt) {
    return ts_memplan_expert_plan_max_tiles(n, E, tt);
}
inline size_t align256(size_t b) {
    return ts_memplan_align(b);
}
size_t plan_bytes_for(int64_t n, int64_t max_tiles) {
    return ts_memplan_expert_plan_bytes_for(n, max_tiles);
}

// ---- host: launches ---------------------------------------------------------------------------------

int64_t g_min_tokens = TS_CUDA_GEMM_MIN_TOKENS;
int g_forced_cfg = -1;

// Sets the kernel's shared-memory limit (once per thread and device) and returns how many blocks
// of it an SM holds (0: it cannot run on this device).
template <int TYPE, class C> int prepare() {
    thread_local int dev = -1, blocks = 0;
    int d = 0;
    cudaGetDevice(&d);
    if (d != dev) {
        const auto k = gemm_kernel<TYPE, C>;
        constexpr size_t smem = gemm_smem_bytes<TYPE, C>();
        blocks = 0;
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, C::NT, smem) != cudaSuccess)
            blocks = 0;
        cudaGetLastError(); // a refusal here is reported as 0 blocks, not left pending
        dev = d;
    }
    return blocks;
}

template <int TYPE, class C> int launch_cfg(const gemm_args &a, unsigned gx, unsigned gy, cudaStream_t s) {
    if (prepare<TYPE, C>() < 1) return -1;
    gemm_kernel<TYPE, C><<<dim3(gx, gy), C::NT, gemm_smem_bytes<TYPE, C>(), s>>>(a);
    return cudaPeekAtLastError() == cudaSuccess ? 0 : -1;
}

template <int TYPE> int launch_type(int cfg, const gemm_args &a, unsigned gx, unsigned gy, cudaStream_t s) {
    switch (cfg) {
    case 0:
        return launch_cfg<TYPE, Cfg0>(a, gx, gy, s);
    case 1:
        return launch_cfg<TYPE, Cfg1>(a, gx, gy, s);
    case 2:
        return launch_cfg<TYPE, Cfg2>(a, gx, gy, s);
    case 3:
        return launch_cfg<TYPE, Cfg3>(a, gx, gy, s);
    case 4:
        return launch_cfg<TYPE, Cfg4>(a, gx, gy, s);
    default:
        return -1;
    }
}
template <int TYPE> int resident_type(int cfg) {
    switch (cfg) {
    case 0:
        return prepare<TYPE, Cfg0>();
    case 1:
        return prepare<TYPE, Cfg1>();
    case 2:
        return prepare<TYPE, Cfg2>();
    case 3:
        return prepare<TYPE, Cfg3>();
    case 4:
        return prepare<TYPE, Cfg4>();
    default:
        return 0;
    }
}

#define TS_GEMM_TYPES(X)                                                                                     \
    X(TS_TYPE_F32)                                                                                           \
    X(TS_TYPE_F16)                                                                                           \
    X(TS_TYPE_BF16)                                                                                          \
    X(TS_TYPE_Q8_0)                                                                                          \
    X(TS_TYPE_Q4_0)                                                                                          \
    X(TS_TYPE_Q4_1)                                                                                          \
    X(TS_TYPE_Q5_0)                                                                                          \
    X(TS_TYPE_Q5_1)                                                                                          \
    X(TS_TYPE_IQ4_NL)                                                                                        \
    X(TS_TYPE_IQ4_XS)                                                                                        \
    X(TS_TYPE_Q4_K)                                                                                          \
    X(TS_TYPE_Q5_K)                                                                                          \
    X(TS_TYPE_Q6_K)                                                                                          \
    X(TS_TYPE_Q2_K)                                                                                          \
    X(TS_TYPE_Q3_K)                                                                                          \
    X(TS_TYPE_IQ2_XXS)                                                                                       \
    X(TS_TYPE_IQ2_XS)                                                                                        \
    X(TS_TYPE_IQ2_S)                                                                                         \
    X(TS_TYPE_IQ3_XXS)                                                                                       \
    X(TS_TYPE_IQ3_S)                                                                                         \
    X(TS_TYPE_IQ1_S)                                                                                         \
    X(TS_TYPE_IQ1_M)

int launch(uint32_t type, int cfg, const gemm_args &a, unsigned gx, unsigned gy, cudaStream_t s) {
    switch (type) {
#define X(T)                                                                                                 \
    case T:                                                                                                  \
        return launch_type<T>(cfg, a, gx, gy, s);
        TS_GEMM_TYPES(X)
#undef X
    default:
        return -1;
    }
}
int resident(uint32_t type, int cfg) {
    switch (type) {
#define X(T)                                                                                                 \
    case T:                                                                                                  \
        return resident_type<T>(cfg);
        TS_GEMM_TYPES(X)
#undef X
    default:
        return 0;
    }
}

// The dense configuration with the smallest estimated time (see the header); -1 if none can run.
int pick_config(uint32_t type, int64_t n_out, int64_t T) {
    if (g_forced_cfg >= 0 && g_forced_cfg < kNumCfg)
        return resident(type, g_forced_cfg) > 0 ? g_forced_cfg : -1;
    const int64_t sms = ts_cuda_sm_count();
    double best = 0;
    int pick = -1;
    for (int c = 0; c < kNumCfg; c++) {
        const int occ = resident(type, c);
        if (occ < 1) continue;
        const int64_t blocks = ((n_out + kCfgBM[c] - 1) / kCfgBM[c]) * ((T + kCfgBN[c] - 1) / kCfgBN[c]);
        const int64_t per_sm = (blocks + sms - 1) / sms;
        const int64_t active = per_sm < occ ? per_sm : occ;
        double fill = static_cast<double>(active * kCfgWarps[c]) / 8.0;
        if (fill > 1.0) fill = 1.0;
        const double t = static_cast<double>(per_sm) * kCfgBM[c] * kCfgBN[c] / (kCfgEff[c] * fill);
        if (pick < 0 || t < best * (1.0 - 1e-9)) best = t, pick = c;
    }
    return pick;
}

bool type_ok(const ts_cuda_tensor *W) {
    if (!W || !W->data || !ts_cuda_matmul_supports(W->type)) return false;
    const ts_type_traits *tr = ts_type_get(W->type);
    return tr && W->ne0 > 0 && W->ne0 <= INT_MAX - 256 && W->ne0 % tr->block_size == 0 &&
           W->row_bytes == ts_row_size(W->type, W->ne0) && (reinterpret_cast<uintptr_t>(W->data) & 15u) == 0;
}

} // namespace

extern "C" void ts_cuda_gemm_set_min_tokens(int64_t min_T) {
    g_min_tokens = min_T <= 0 ? TS_CUDA_GEMM_MIN_TOKENS : min_T;
}
extern "C" int64_t ts_cuda_gemm_min_tokens(void) {
    return g_min_tokens;
}
extern "C" void ts_cuda_gemm_force_config(int config) {
    g_forced_cfg = config >= 0 && config < kNumCfg ? config : -1;
}

extern "C" int ts_cuda_gemm(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev,
                            int64_t T, float *y_dev, cudaStream_t s) {
    if (!type_ok(W)) return -1;
    if (row0 < 0 || n_out < 0 || T < 0 || row0 > W->rows || n_out > W->rows - row0) return -1;
    if (n_out > INT_MAX - 256 || T > INT_MAX - 256) return -1;
    if (n_out == 0 || T == 0) return 0;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u))
        return -1;
    const int cfg = pick_config(W->type, n_out, T);
    if (cfg < 0) return -1;
    gemm_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data) + static_cast<size_t>(row0) * W->row_bytes;
    a.w1 = nullptr;
    a.rb = W->row_bytes;
    a.ne0 = static_cast<int>(W->ne0);
    a.n_out = static_cast<int>(n_out);
    a.n_part = a.n_out;
    a.rows_per_expert = 0;
    a.row_off = 0;
    a.e_max = 0;
    a.x = x_dev;
    a.x_stride = W->ne0;
    a.x_div = 1;
    a.xvec = W->ne0 % 4 == 0;
    a.y = y_dev;
    a.y_stride = n_out;
    a.yvec = n_out % 4 == 0;
    a.T = static_cast<int>(T);
    a.dense_tiles = static_cast<int>((T + kCfgBN[cfg] - 1) / kCfgBN[cfg]);
    const int64_t gx = (n_out + kCfgBM[cfg] - 1) / kCfgBM[cfg];
    const unsigned gy = static_cast<unsigned>(a.dense_tiles < 65535 ? a.dense_tiles : 65535);
    return launch(W->type, cfg, a, static_cast<unsigned>(gx), gy, s);
}

extern "C" bool ts_cuda_expert_plan_supported(int64_t n_experts) {
    return plan_ranges(n_experts) > 0;
}

extern "C" size_t ts_cuda_expert_plan_bytes(int64_t n_items, int64_t n_experts) {
    return ts_memplan_expert_plan_bytes(n_items, n_experts);
}

extern "C" int ts_cuda_expert_plan_build(const int32_t *ids_dev, int64_t n_items, int64_t n_experts,
                                         void *scratch, size_t scratch_bytes, ts_cuda_expert_plan *plan,
                                         cudaStream_t s) {
    return ts_cuda_expert_plan_build_tile(ids_dev, n_items, n_experts, 0, scratch, scratch_bytes, plan, s);
}

extern "C" int ts_cuda_expert_plan_build_tile(const int32_t *ids_dev, int64_t n_items, int64_t n_experts,
                                              int tile, void *scratch, size_t scratch_bytes,
                                              ts_cuda_expert_plan *plan, cudaStream_t s) {
    const int R = plan_ranges(n_experts);
    if (!plan || R == 0 || n_items < 0 || n_items > INT_MAX / 2 || !scratch ||
        (reinterpret_cast<uintptr_t>(scratch) & 15u) || (n_items > 0 && !ids_dev) ||
        (tile != 0 && tile != 8 && tile != 16 && tile != 32 && tile != 64))
        return -1;
    const int tt = tile ? tile : plan_tile(n_items, n_experts);
    const int64_t mt = plan_max_tiles(n_items, n_experts, tt);
    if (plan_bytes_for(n_items, mt) > scratch_bytes || mt > INT_MAX) return -1;
    uint8_t *p = static_cast<uint8_t *>(scratch);
    int32_t *sorted = reinterpret_cast<int32_t *>(p);
    p += align256(static_cast<size_t>(n_items) * sizeof(int32_t));
    int4 *tiles = reinterpret_cast<int4 *>(p);
    p += align256(static_cast<size_t>(mt) * 16);
    int32_t *n_tiles = reinterpret_cast<int32_t *>(p);

    const size_t smem = expert_plan_smem(n_experts, R);
    thread_local int dev = -1;
    int d = 0;
    cudaGetDevice(&d);
    if (d != dev) {
        cudaFuncSetAttribute(expert_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kPlanSmem);
        cudaGetLastError();
        dev = d;
    }
    expert_plan_kernel<<<1, 32 * R, smem, s>>>(ids_dev, static_cast<int>(n_items),
                                               static_cast<int>(n_experts), tt, sorted, tiles, n_tiles);
    if (cudaPeekAtLastError() != cudaSuccess) return -1;
    plan->sorted = sorted;
    plan->tiles = tiles;
    plan->n_tiles = n_tiles;
    plan->n_items = n_items;
    plan->n_experts = n_experts;
    plan->max_tiles = mt;
    plan->tile = tt;
    return 0;
}

extern "C" int ts_cuda_expert_gemm_check(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                         const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                                         int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                                         const float *y_dev, int64_t y_stride, int64_t *parts_out,
                                         int64_t *e_max_out) {
    if (!plan || !plan->sorted || !plan->tiles || !plan->n_tiles || !W || !W->data ||
        (reinterpret_cast<uintptr_t>(W->data) & 15u))
        return -1;
    if (rows_per_expert < 1 || row_off < 0 || n_out < 0 || x_div < 1 || row_off > rows_per_expert ||
        n_out > rows_per_expert - row_off)
        return -1;
    int64_t rows = W->rows;
    if (W2) {
        if (!W2->data || W2->type != W->type || W2->ne0 != W->ne0 || W2->row_bytes != W->row_bytes ||
            (reinterpret_cast<uintptr_t>(W2->data) & 15u))
            return -1;
        if (W2->rows < rows) rows = W2->rows;
    }
    const int64_t parts = W2 ? 2 : 1;
    if (n_out > (INT_MAX - 256) / parts) return -1;
    if (row_off > rows || n_out > rows - row_off) return -1; // expert 0's slice must exist
    int64_t e_max = (rows - row_off - n_out) / rows_per_expert;
    if (e_max > INT_MAX) e_max = INT_MAX;
    if (n_out == 0 || plan->n_items == 0 || plan->max_tiles == 0) return 0;
    if (!x_dev || !y_dev || (reinterpret_cast<uintptr_t>(x_dev) & 15u) ||
        (reinterpret_cast<uintptr_t>(y_dev) & 15u))
        return -1;
    if (x_stride < W->ne0 || x_stride % 4 != 0 || y_stride < parts * n_out || y_stride % 4 != 0) return -1;
    *parts_out = parts, *e_max_out = e_max;
    return 1;
}

extern "C" int ts_cuda_gemm_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                    const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                                    int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                                    float *y_dev, int64_t y_stride, cudaStream_t s) {
    if (!type_ok(W)) return -1;
    int64_t parts, e_max;
    const int ok = ts_cuda_expert_gemm_check(plan, W, W2, rows_per_expert, row_off, n_out, x_dev, x_div,
                                             x_stride, y_dev, y_stride, &parts, &e_max);
    if (ok <= 0) return ok;
    const int cfg = plan->tile == 16 ? 4 : (plan->tile == 32 ? 3 : (plan->tile == 64 ? 1 : -1));
    if (cfg < 0) return -1;

    gemm_args a = {};
    a.w0 = static_cast<const uint8_t *>(W->data);
    a.w1 = W2 ? static_cast<const uint8_t *>(W2->data) : nullptr;
    a.rb = W->row_bytes;
    a.ne0 = static_cast<int>(W->ne0);
    a.n_part = static_cast<int>(n_out);
    a.n_out = static_cast<int>(parts * n_out);
    a.rows_per_expert = rows_per_expert;
    a.row_off = row_off;
    a.e_max = static_cast<int>(e_max);
    a.x = x_dev;
    a.x_stride = x_stride;
    a.x_div = static_cast<int>(x_div < plan->n_items ? x_div : plan->n_items);
    a.xvec = true;
    a.y = y_dev;
    a.y_stride = y_stride;
    a.yvec = true;
    a.T = 0;
    a.dense_tiles = 0;
    a.sorted = plan->sorted;
    a.tiles = static_cast<const int4 *>(plan->tiles);
    a.n_tiles = plan->n_tiles;
    const int64_t gx = (a.n_out + kCfgBM[cfg] - 1) / kCfgBM[cfg];
    const unsigned gy = static_cast<unsigned>(plan->max_tiles < 65535 ? plan->max_tiles : 65535);
    return launch(W->type, cfg, a, static_cast<unsigned>(gx), gy, s);
}
