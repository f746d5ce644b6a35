// Mixture of experts on the GPU (ts_cuda_moe, src/cuda/layers.h), the twin of ts_cpu_moe
// (src/cpu/moe.c): the same math, in fp32, with every expert choice made and consumed on the
// device (no host synchronization, no allocation: a decode step is captured as a CUDA graph).
//
// Math, per row t of x (N × H), as the CPU:
//   shared  y_t = σ(gate_inp_shexp · x_t) · down_shexp(silu(gate_shexp · x_t) ⊙ (up_shexp · x_t))
//   router  p_t = softmax(ffn_gate_inp · x_t) over the E experts (max-subtracted, fp32);
//           the k experts of largest p (ties: lower id) in that order, slot j = 0 .. k−1;
//           w_tj = p_t[e_j] / Σ_j' p_t[e_j'] (the sum in slot order)
//   experts y_t += w_tj · down_e(silu(gate_e · x_t) ⊙ (up_e · x_t)), j = 0 .. k−1 in order.
//
// Launches (one stream, in order; "item" i = t·k + j is one (row, slot) pair):
//   1. router logits   ts_cuda_matmul(ffn_gate_inp) → w->router (N × E)
//   2. router_kernel   grid N × 512 threads, one block a row: sg_t = gate_inp_shexp · x_t, softmax,
//                      top-k (topk_block: warp bitonic sorts, then the few candidates ranked),
//                      renormalisation → w->sg (N), w->topk_id and w->topk_w (N × k)
//      (1 and 2 are one launch, router_fused_kernel, for N ≤ kRouterFusedMaxRows and an F32 or BF16 router)
//   3. shared gate/up  two ts_cuda_matmul (N rows), or at N = 1 one ts_cuda_matmul_experts of both
//                      tensors → scratch "sh"; where the tensor-core GEMV takes it and step 4's product
//                      alike, as one more item a token of step 4's launch (ts_cuda_matmul_experts_shared;
//                      TURBOSPARK_CUDA_MOE_SHARED_MERGE=0: on its own)
//   4. expert gate/up  ts_cuda_matmul_experts, all N·k items in one launch (fused gate_up tensor,
//                      or split gate and up tensors of one type; two launches only when their types
//                      differ), ids read from w->topk_id → "gu" (N·k rows of G floats: gate at 0,
//                      up at uoff). Prefill-sized batches (grouped, below) first build an expert
//                      plan (ts_cuda_expert_plan_build: items sorted by expert, a work list of
//                      tiles) and run ts_cuda_gemm_experts instead, same arguments, same outputs
//   5. swiglu_kernel   h = silu(gate) ⊙ up over both the expert rows and the shared rows, written
//                      over the gate values (a warp a slice of 256 or 128 of a row, grid-stride); the
//                      experts' h rounded as the tensor-core products round x (below)
//   6. shared down     ts_cuda_matmul(ffn_down_shexp) → y (N × H); at N = 1, where the tensor-core GEMV
//                      takes it and step 7's product alike, as one more item of step 7's launch
//                      (ts_cuda_matmul_experts_shared_down; TURBOSPARK_CUDA_MOE_SHARED_MERGE=0: on its own)
//   7. expert down     ts_cuda_matmul_experts (or, grouped, ts_cuda_gemm_tc_experts or
//                      ts_cuda_gemm_experts on the same plan), N·k items, x row i = item i's h → w->eo
//                      (N·k × H)
// The experts' down products: where the tensor-core GEMM may take them (types with a rounding group that
// divides F, the tensor-core products on), step 5 rounds each h row once per group as those kernels
// round x (tc_x_scale, fp16, back; the CPU twin: ts_round_x_like_tc). Every kernel that may then run
// the product, the prefill GEMM on the tensor cores (whose own rounding leaves rounded values as they
// are) or the fp32 GEMV and GEMM of decode, sees the same inputs: a token's result does not depend on
// the batch it came in.
//   8. combine_kernel  y[t, c] = y[t, c]·σ(sg_t), then += w_tj·eo[t, j, c] for j = 0 .. k−1
//                      (grid-stride over N·H, 256 threads)
// Grid sizes depend on N and the hyperparameters only (plus the device's SM count inside the
// matrix products), never on the ids.
//
// Grouped expert products (src/cuda/gemm.h): with one GEMV per item every item re-reads its
// expert's rows; the grouped GEMM reads them once per tile of up to 16-64 items of that expert, but
// pads every tile to its width, so it pays once experts get several items each. It runs when
// N ≥ kGroupedMinRows (64: decode batches never change) and N·k ≥ kGroupedMinItemsPerExpert·E (4:
// below that most tiles would hold one or two items; released shapes: N ≥ 205), and when the plan
// fits the scratch (ts_memplan_moe_scratch reserves it whenever the plan is supported). Both
// constants are estimates to be measured on the H200 (TURBOSPARK_CUDA_MOE_GROUPED=1 always takes the
// grouped path, =0 never; ts_cuda_moe_force_grouped does the same from a test). The results do not depend on the path beyond fp32 rounding, nor, on the
// grouped path, on how the items fall into tiles.
//
// Planned expert products (batched decode, below the grouped GEMMs): from kPlannedMinRows rows the same
// plan with tiles of up to 8 items feeds the tensor-core GEMV (ts_cuda_matmul_experts_planned), a tile's
// items as one chunk's tokens, so an expert's rows are read once a tile rather than once an item (at 64
// rows, ~365 distinct experts a layer for 640 items); every item's sums are those of one GEMV per item, bit
// for bit, so a token's result still does not depend on its batch. One plan kernel a layer, and the shared
// expert's gate/up stays a launch of its own. TURBOSPARK_CUDA_MOE_PLANNED=0 never, =n from n rows (≥ 2).
//
// Buffers: w->router (N × E logits; left holding the logits), w->topk_id / w->topk_w (N × k),
// w->sg (N), w->eo (N·k × H), w->gu (N·k × 2F: expert gate/up rows of stride G = 2F, used when
// that stride is a multiple of 4 floats, i.e. every x/y row 16-byte aligned), and from w->scratch
// (ts_memplan_moe_scratch): the shared expert's gate/up values and, for expert widths F that
// are not a multiple of 4, the expert gate/up rows with a padded stride.
//
// Numerics: fp32 everywhere but the products' one rounding of x (the tensor-core kernels', and the
// experts' h of step 5). Sums run in a different order than the CPU's (parallel reductions;
// the softmax denominator and the shared gate logit are block reductions in a fixed order, so
// results are deterministic run to run); everything after the matrix products (softmax
// division, the top-k order, the renormalisation sum in slot order, silu, the combine in slot
// order with separate fp32 products and sums) follows the CPU's operations one for one. No
// fast-math intrinsics: expf and IEEE division.
#include "cuda/cuda_device.h"
#include "cuda/gemm.h"
#include "cuda/gemm_tc.h"
#include "cuda/gemv_tc.cuh"
#include "cuda/gemv_tc.h"
#include "cuda/layers.h"
#include "cuda/matmul.h"
#include "cuda/pdl.cuh"
#include "model/memplan.h"

extern "C" {
#include "quant/quant.h"
}

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

namespace {

constexpr int kRouterThreads = 512; // one block a row
constexpr int kRouterWarps = kRouterThreads / 32;
constexpr int kMaxK = 64;                        // as the CPU's idx[64]
constexpr int64_t kRouterSmemE = 8192;           // p in shared memory up to this E (32 KiB)
constexpr int kEltThreads = 256;                 // elementwise kernels
constexpr int64_t kEltMaxBlocks = 65536;         // grid-stride beyond
constexpr int64_t kRouterFusedMaxRows = 8;       // router product and routing as one launch up to this N
constexpr int kSharedFusedMaxRows = 1;           // shared gate+up as one expert launch up to this N (else two
                                                 // ts_cuda_matmul, which reuse each weight for up to 8 rows)
constexpr int64_t kGroupedMinRows = 64;          // grouped expert GEMMs from this N ...
constexpr int64_t kGroupedMinItemsPerExpert = 4; // ... and N·k ≥ this × E (see the header)
constexpr int64_t kPlannedMinRows = 16;          // planned expert GEMVs from this N (see the header)
constexpr int kRouterFusedRows = 8;              // the fewest router rows a block of the fused router

// The fused router's rows a block (a warp each, so the logits do not depend on it): kRouterFusedRows, doubled
// while the grid of N tokens would exceed one block an SM (batch 1: 65 blocks; from 3 tokens on 132 SMs: 16
// rows, 33 blocks a token), or TURBOSPARK_CUDA_ROUTER_ROWS=n (1 .. kRouterWarps) for measurements (read
// once). On an H100 (BENCHMARKS.md, run 84) 8 rows gave batch 1 307.8 t/s against 304.1 with 16 and 305.0
// with 4, and 16 rows batch 8 853.3 against 835.2 and 823.1.
int router_fused_rows(int64_t E, int64_t N) {
    static const int fixed = [] {
        const char *v = getenv("TURBOSPARK_CUDA_ROUTER_ROWS");
        const int r = v && *v ? atoi(v) : 0;
        return r < 1 || r > kRouterWarps ? 0 : r;
    }();
    if (fixed) return fixed;
    int rows = kRouterFusedRows;
    while (rows < kRouterWarps && (E + rows) / rows * N > ts_cuda_sm_count()) rows *= 2;
    return rows;
}

// The shared expert's products as more items of the routed launches (steps 3 and 6), unless
// TURBOSPARK_CUDA_MOE_SHARED_MERGE=0 (read once).
bool shared_merge_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_MOE_SHARED_MERGE");
    return on;
}

// The SwiGLU computed by the down launch at one token (steps 5–7), unless TURBOSPARK_CUDA_SWIGLU_STAGED=0 (read
// at every layer's host work, so a test may compare both in one process).
bool swiglu_staged_enabled() {
    return ts_cuda_switch_on("TURBOSPARK_CUDA_SWIGLU_STAGED");
}

// The MoE combine in the down launch at one token (steps 5–8), unless TURBOSPARK_CUDA_MOE_DOWN_COMBINE=0 (read at
// every layer's host work).
bool down_combine_enabled() {
    return ts_cuda_switch_on("TURBOSPARK_CUDA_MOE_DOWN_COMBINE");
}

// The fewest rows of the planned expert products: kPlannedMinRows, or TURBOSPARK_CUDA_MOE_PLANNED (0: never;
// read at every layer's host work, so a test may compare both in one process).
int64_t planned_min_rows() {
    const char *v = getenv("TURBOSPARK_CUDA_MOE_PLANNED");
    if (!v || !v[0]) return kPlannedMinRows;
    const long n = strtol(v, nullptr, 10);
    return n <= 0 ? INT64_MAX : n < 2 ? 2 : n;
}

// ts_cuda_moe_force_grouped, else TURBOSPARK_CUDA_MOE_GROUPED: -1 thresholds, 0 never, 1 always
int g_moe_grouped = -2; // -2: not set yet (the environment is read at the first product)

int moe_grouped_mode() {
    if (g_moe_grouped == -2) {
        const char *v = getenv("TURBOSPARK_CUDA_MOE_GROUPED");
        g_moe_grouped = !v || !v[0] ? -1 : v[0] == '0' ? 0 : 1;
    }
    return g_moe_grouped;
}

inline int64_t round_up4(int64_t n) {
    return ts_memplan_round_up4(n);
}
inline size_t align256(size_t b) {
    return ts_memplan_align(b);
}

// ---- router ----------------------------------------------------------------------------------

// Whether (pa, ea) ranks before (pb, eb): higher probability, then lower id; e < 0 is "none".
__device__ __forceinline__ bool ranks_before(float pa, int ea, float pb, int eb) {
    return ea >= 0 && (eb < 0 || pa > pb || (pa == pb && ea < eb));
}

// Block-wide sum and max, every thread gets the result; fixed order (warp butterflies, then the
// warps' partials in warp order), so the result does not depend on scheduling. red: kRouterWarps
// floats of shared memory, free again on return.
__device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int w = 1; w < kRouterWarps; w++) r += red[w];
    __syncthreads();
    return r;
}
__device__ __forceinline__ float block_max(float v, float *red) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int w = 1; w < kRouterWarps; w++) r = fmaxf(r, red[w]);
    __syncthreads();
    return r;
}

// The router's rank order (p desc, id asc; NaN after every number, NaNs by id, as the CPU's top_k
// takes them: a round with no candidate left takes the lowest id not chosen yet) as one unsigned key,
// larger first. Distinct experts have distinct keys; 0 is below every expert (a lane with none).
// p ≥ 0 (a softmax), so its bits order like its values.
__device__ __forceinline__ unsigned long long route_key(float p, int e) {
    const unsigned long long lo = 0xFFFFFFFFull - static_cast<unsigned>(e);
    return p == p ? (static_cast<unsigned long long>(__float_as_uint(p) + 1u) << 32) | lo : lo;
}

constexpr int kTopkBlockMaxK = 32;

// The k picks in rank order by the whole block, thread i holding expert i (E ≤ kRouterThreads, k ≤ 32):
// each warp sorts its 32 keys (a bitonic network of shuffles); the best of the warps' k-th keys bounds
// the k-th key overall from below, so only the keys at or above it (at most k a warp) can be picked,
// and each of those counts the candidates ranked before it. The result does not depend on scheduling.
// sel_p/sel_e[r] for r < k; cand: kRouterThreads keys of shared memory.
__device__ __forceinline__ void topk_block(const float *p, int E, int k, float *sel_p, int *sel_e,
                                           unsigned long long *cand, unsigned long long *thr, int *n) {
    const int tid = threadIdx.x, lane = tid & 31;
    unsigned long long key = tid < E ? route_key(p[tid], tid) : 0ull;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1)
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const unsigned long long o = __shfl_xor_sync(0xffffffffu, key, stride);
            const bool keep_max = ((lane & size) == 0) == ((lane & stride) == 0); // descending at size 32
            key = keep_max ? (o > key ? o : key) : (o < key ? o : key);
        }
    if (tid == 0) *thr = 0ull, *n = 0;
    __syncthreads();
    if (lane == k - 1) atomicMax(thr, key);
    __syncthreads();
    const unsigned long long t = *thr; // > 0: warp 0 holds min(E, 32) ≥ k experts
    if (key >= t) cand[atomicAdd(n, 1)] = key;
    __syncthreads();
    if (key >= t) {
        int rank = 0;
        for (int i = 0, nc = *n; i < nc; i++) rank += cand[i] > key;
        if (rank < k) {
            const int e = static_cast<int>(0xFFFFFFFFu - static_cast<unsigned>(key));
            sel_e[rank] = e, sel_p[rank] = p[e];
        }
    }
    __syncthreads();
}

// The same picks by warp 0 alone, with p read from memory every round (larger E or k).
__device__ __forceinline__ void topk_shared(const float *p, int E, int k, int lane, float *sel_p,
                                            int *sel_e) {
    float p_last = 0.0f;
    int e_last = -1; // none yet: every non-NaN expert is a candidate
    for (int r = 0; r < k; r++) {
        float bp = 0.0f;
        int be = -1;
        for (int e = lane; e < E; e += 32) {
            const float v = p[e];
            const bool cand = v == v && (e_last < 0 || v < p_last || (v == p_last && e > e_last));
            if (cand && ranks_before(v, e, bp, be)) bp = v, be = e;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float op = __shfl_xor_sync(0xffffffffu, bp, off);
            const int oe = __shfl_xor_sync(0xffffffffu, be, off);
            if (ranks_before(op, oe, bp, be)) bp = op, be = oe;
        }
        if (be < 0) { // no candidate left: lowest id not chosen yet
            if (lane == 0) {
                auto chosen = [&](int e) {
                    for (int q = 0; q < r; q++)
                        if (sel_e[q] == e) return true;
                    return false;
                };
                int e = 0;
                while (chosen(e)) e++; // r < k ≤ E ids are taken: e < E
                be = e;
                bp = p[e];
            }
            be = __shfl_sync(0xffffffffu, be, 0);
            bp = __shfl_sync(0xffffffffu, bp, 0);
        } else if (bp == bp) {
            p_last = bp, e_last = be;
        }
        if (lane == 0) sel_e[r] = be, sel_p[r] = bp;
        __syncwarp();
    }
}

// Shared memory of the routing step.
struct route_smem {
    float red[kRouterWarps];
    float sel_p[kMaxK];
    int sel_e[kMaxK];
    unsigned long long cand[kRouterThreads], thr;
    int n;
};

// Routing of row t from its logits l = router[t, :] (written by another kernel or another block:
// read through L2), by the whole block (thread i owns experts i, i + kRouterThreads, ...):
//   p[e]         = exp(l[e] − max l) / Σ exp(l − max l)
//   picks        the CPU's top_k: the k best by (p desc, id asc), NaN after every number (route_key);
//                topk_block for E ≤ kRouterThreads and k ≤ 32, else k rounds of a warp arg-max (warp 0)
//                over the candidates ranked after the previous pick
//   topk_w[t, s] = p[e_s] / Σ_s' p[e_s'] (the sum in slot order, by one thread)
// p: E floats of shared memory, or the logits row itself (each thread only touches its own entries).
__device__ void route_row(const float *logit, float *p, int E, int k, int t, int32_t *__restrict__ topk_id,
                          float *__restrict__ topk_w, route_smem &sm) {
    const int tid = threadIdx.x;
    // (E ≤ kRouterThreads: a thread's one logit read once, for both passes; the same values)
    const bool one = E <= kRouterThreads;
    const float l0 = one && tid < E ? __ldcg(logit + tid) : -INFINITY;
    float mx = fmaxf(-INFINITY, l0); // (as the max of a loop from -inf: a NaN logit leaves -inf)
    for (int e = tid; !one && e < E; e += kRouterThreads) mx = fmaxf(mx, __ldcg(logit + e));
    mx = block_max(mx, sm.red);
    float sum = 0.0f;
    for (int e = tid; e < E; e += kRouterThreads) {
        const float v = expf((one ? l0 : __ldcg(logit + e)) - mx);
        p[e] = v;
        sum += v;
    }
    sum = block_sum(sum, sm.red);
    for (int e = tid; e < E; e += kRouterThreads) p[e] = p[e] / sum;
    __syncthreads(); // p complete
    if (E <= kRouterThreads && k <= kTopkBlockMaxK)
        topk_block(p, E, k, sm.sel_p, sm.sel_e, sm.cand, &sm.thr, &sm.n);
    else if (tid < 32)
        topk_shared(p, E, k, tid, sm.sel_p, sm.sel_e);
    __syncthreads();
    if (tid == 0) {
        float wsum = 0.0f;
        for (int r = 0; r < k; r++) wsum += sm.sel_p[r];
        for (int r = 0; r < k; r++) {
            topk_id[static_cast<size_t>(t) * k + r] = sm.sel_e[r];
            topk_w[static_cast<size_t>(t) * k + r] = sm.sel_p[r] / wsum;
        }
    }
}

// One block per row t after the router product (ts_cuda_matmul):
//   sg[t] = Σ_c gate_inp_shexp[c] · x[t, c]   (the shared expert's gate logit), then route_row.
// p lives in dynamic shared memory (E floats) when E ≤ kRouterSmemE, else in the logits row.
__global__ void __launch_bounds__(kRouterThreads)
    router_kernel(const float *__restrict__ x, int H, const float *__restrict__ gate_inp_shexp,
                  float *__restrict__ sg, float *router, int E, int k, int32_t *__restrict__ topk_id,
                  float *__restrict__ topk_w) {
    extern __shared__ float p_smem[];
    __shared__ route_smem sm;

    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    const int t = blockIdx.x, tid = threadIdx.x;
    const float *xt = x + static_cast<size_t>(t) * H;
    float *logit = router + static_cast<size_t>(t) * E;

    // (H % 4 == 0, rows 16-byte aligned: float4 loads, unrolled so that a thread's loads are all in
    // flight at once; the weight vector is cold in every layer)
    float s = 0.0f;
    const float4 *g4 = reinterpret_cast<const float4 *>(gate_inp_shexp),
                 *x4 = reinterpret_cast<const float4 *>(xt);
#pragma unroll 8
    for (int c = tid; c < H / 4; c += kRouterThreads) {
        const float4 a = __ldg(g4 + c), b = __ldg(x4 + c);
        s = fmaf(a.x, b.x, s);
        s = fmaf(a.y, b.y, s);
        s = fmaf(a.z, b.z, s);
        s = fmaf(a.w, b.w, s);
    }
    s = block_sum(s, sm.red);
    if (tid == 0) sg[t] = s;
    route_row(logit, E <= kRouterSmemE ? p_smem : logit, E, k, t, topk_id, topk_w, sm);
}

// Four consecutive weights of a router row, at float4 index c: F32 rows, or BF16 rows (uint16_t, the bf16
// bits), whose values are fp32 numbers exactly, so that the sums equal those of the same values as F32.
__device__ __forceinline__ float4 router_w4(const float *w, int c) {
    return __ldg(reinterpret_cast<const float4 *>(w) + c);
}
__device__ __forceinline__ float4 router_w4(const uint16_t *w, int c) {
    const uint2 u = __ldg(reinterpret_cast<const uint2 *>(w) + c);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

// One warp's dot product of a row of H weights (H a multiple of 4) with x: lane l sums the float4 groups l,
// l + 32, ... in order, then the lanes are added by a butterfly; lane 0's result (every lane's, in fact).
template <typename Wt> __device__ float router_dot(const Wt *w, const float *x, int H, int lane) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float s = 0.0f;
    // 10 iterations' loads in flight at once (a row of 2,560 is 20 a lane: two rounds of memory latency);
    // the FMAs stay in order, so the sum is the same
#pragma unroll 10
    for (int c = lane; c < H / 4; c += 32) {
        const float4 a = router_w4(w, c), b = x4[c];
        s = fmaf(a.x, b.x, s);
        s = fmaf(a.y, b.y, s);
        s = fmaf(a.z, b.z, s);
        s = fmaf(a.w, b.w, s);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

// The router product, the shared expert's gate logit and the routing in one launch, for few rows and
// an F32 or BF16 router (Wt: float or uint16_t) with E ≤ kRouterThreads: grid (ceil((E + 1) / rows), N).
// Warp w < rows of block b computes row b·rows + w of [router rows; gate_inp_shexp] for token t = blockIdx.y
// (its weights prefetched into L2 before the dependency wait; the other warps only route); the last block
// of token t to finish (count[t], back to 0 when it is done) routes the token as router_kernel does, with all
// its kRouterThreads threads. ld: elements from one router row to the next.
template <typename Wt>
__global__ void __launch_bounds__(kRouterThreads)
    router_fused_kernel(const Wt *__restrict__ Wr, int64_t ld, const float *__restrict__ x, int H,
                        const float *__restrict__ gate_inp_shexp, float *__restrict__ sg, float *router,
                        int E, int k, int32_t *__restrict__ topk_id, float *__restrict__ topk_w,
                        unsigned *__restrict__ count, int rows) {
    __shared__ float p[kRouterThreads];
    __shared__ route_smem sm;
    __shared__ bool last;

    ts_cu::pdl_trigger();
    const int t = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int row = static_cast<int>(blockIdx.x) * rows + (tid >> 5);
    const bool mine = tid >> 5 < rows && row <= E; // row E: the shared expert's gate (fp32)
    if (mine && row < E) ts_cu::prefetch_l2(Wr + row * ld, static_cast<size_t>(H) * sizeof(Wt), lane, 32);
    if (mine && row == E)
        ts_cu::prefetch_l2(gate_inp_shexp, static_cast<size_t>(H) * sizeof(float), lane, 32);
    ts_cu::pdl_wait();

    float *logit = router + static_cast<size_t>(t) * E;
    if (mine) {
        const float *xt = x + static_cast<size_t>(t) * H;
        const float s =
            row < E ? router_dot(Wr + row * ld, xt, H, lane) : router_dot(gate_inp_shexp, xt, H, lane);
        if (lane == 0) *(row < E ? logit + row : sg + t) = s;
    }
    __threadfence(); // this block's logits visible device-wide before it counts itself
    __syncthreads();
    if (tid == 0) last = atomicAdd(count + t, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    route_row(logit, p, E, k, t, topk_id, topk_w, sm);
    if (tid == 0) count[t] = 0;
}

// ---- SwiGLU and combine ------------------------------------------------------------------------

// rows of width gate values at g + r·stride and up values at u + r·stride; h = silu(gate) ⊙ up
// replaces the gate values.
struct swiglu_part {
    float *g;
    const float *u;
    int64_t rows, stride;
    int64_t width;
};

// Both parts (the experts' rows, then the shared expert's) in one grid-stride pass, a warp a slice of
// kSwigluSlice (or round_a) elements of a row, each lane every 32nd: as the CPU's g[i] = ts_silu(g[i]) * u[i].
// round_a > 0 (a multiple of 32, ≤ kSwigluSlice): part a's slices are its groups, each rounded as the
// tensor-core products round x (the group's max|h| → tc_x_scale, h·2^s to fp16 and back, as
// ts_round_x_like_tc on the host).
constexpr int kSwigluSlice = 256;

__global__ void __launch_bounds__(kEltThreads) swiglu_kernel(swiglu_part a, swiglu_part b, int round_a) {
    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int sa = round_a > 0 ? round_a : kSwigluSlice;
    const int64_t per_a = (a.width + sa - 1) / sa, per_b = (b.width + kSwigluSlice - 1) / kSwigluSlice;
    const int64_t na = a.rows * per_a, n = na + b.rows * per_b;
    const int64_t step = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < n;
         i += step) { // warp-uniform
        const bool in_a = i < na;
        float *g = in_a ? a.g : b.g;
        const float *u = in_a ? a.u : b.u;
        const int64_t stride = in_a ? a.stride : b.stride, pw = in_a ? a.width : b.width;
        const int64_t per = in_a ? per_a : per_b, j = in_a ? i : i - na, r = j / per;
        const int width = in_a ? sa : kSwigluSlice;
        const int64_t c0 = (j - r * per) * width;
        float h[kSwigluSlice / 32];
#pragma unroll
        for (int q = 0; q < kSwigluSlice / 32; q++) {
            const int64_t c = c0 + lane + 32 * q;
            h[q] = 0.0f;
            if (32 * q < width && c < pw) {
                const int64_t off = r * stride + c;
                h[q] = ts_dsilu(g[off]) * u[off];
            }
        }
        if (in_a && round_a > 0) { // a whole group (width % round_a == 0)
            float amax = 0.0f;
#pragma unroll
            for (int q = 0; q < kSwigluSlice / 32; q++) amax = fmaxf(amax, fabsf(h[q]));
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            float inv;
            const float scale = ts_cu::tc_x_scale(amax, inv);
#pragma unroll
            for (int q = 0; q < kSwigluSlice / 32; q++)
                h[q] = __half2float(__float2half_rn(h[q] * scale)) * inv;
        }
#pragma unroll
        for (int q = 0; q < kSwigluSlice / 32; q++) {
            const int64_t c = c0 + lane + 32 * q;
            if (32 * q < width && c < pw) g[r * stride + c] = h[q];
        }
    }
}

// y[t, c] = y[t, c]·σ(sg[t]) (the shared expert's output, scaled), then y[t, c] += w[t, j]·eo[t, j, c]
// for j = 0 .. k−1 in order, each a rounded product and a rounded sum as the CPU's
// y += we * eo. One thread an element, grid-stride over N·H.
__global__ void __launch_bounds__(kEltThreads)
    combine_kernel(float *__restrict__ y, const float *__restrict__ sg, const float *__restrict__ eo,
                   const float *__restrict__ tw, int64_t N, int64_t H, int k) {
    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    const int64_t n = N * H, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
        const int64_t t = i / H, c = i - t * H;
        y[i] = ts_dmoe_combine(y[i], sg[t], eo + t * k * H + c, H, tw + t * k, k);
    }
}

inline int elt_blocks(int64_t n) {
    const int64_t b = (n + kEltThreads - 1) / kEltThreads;
    return static_cast<int>(b < 1 ? 1 : (b > kEltMaxBlocks ? kEltMaxBlocks : b));
}

// ---- layout ------------------------------------------------------------------------------------

bool same_encoding(const ts_cuda_tensor &a, const ts_cuda_tensor &b) {
    return a.type == b.type && a.ne0 == b.ne0 && a.row_bytes == b.row_bytes;
}

// The shared expert's gate/up region and the expert gate/up rows' stride are the memory plan's
// (src/model/memplan.h): gate N × Fs at 0, up N × Fs at round_up4(N·Fs) (the fused N = 1 launch puts
// up at Fs, inside the same region); item stride G and up offset uoff (one launch writes gate then up
// back to back, uoff = F; two launches, of different types, each start 16-byte aligned), the rows in
// w->gu when G == 2F, else in scratch (neither happens to F % 4 == 0).
int64_t shared_floats(int64_t N, int64_t Fs) {
    return ts_memplan_moe_shared_floats(N, Fs);
}
void expert_layout(int64_t F, bool one_launch, int64_t *G, int64_t *uoff) {
    ts_memplan_moe_expert_layout(F, one_launch, G, uoff);
}

} // namespace

extern "C" void ts_cuda_moe_force_grouped(int mode) {
    g_moe_grouped = mode < 0 ? -1 : (mode > 0 ? 1 : 0);
}

namespace {

// Step 5: swiglu_kernel over parts a (its groups of `round` rounded, or none) and b, a warp a slice.
int launch_swiglu(const swiglu_part &a, const swiglu_part &b, int round, cudaStream_t s) {
    const int64_t per_a =
        round ? a.width / round : (a.width + kSwigluSlice - 1) / kSwigluSlice; // the kernel's
    const int64_t slices = a.rows * per_a + b.rows * ((b.width + kSwigluSlice - 1) / kSwigluSlice);
    return ts_cu::launch(swiglu_kernel, dim3(elt_blocks(slices * 32)), dim3(kEltThreads), 0, s, a, b,
                         round) == cudaSuccess
               ? 0
               : -1;
}

// Step 8: y = σ(sg)·y + Σ_j w_j·eo_j.
int launch_combine(ts_cuda_work *w, float *y, int64_t N, int64_t H, int64_t k, cudaStream_t s) {
    const cudaError_t e = ts_cu::launch(combine_kernel, dim3(elt_blocks(N * H)), dim3(kEltThreads), 0, s, y,
                                        static_cast<const float *>(w->sg), static_cast<const float *>(w->eo),
                                        static_cast<const float *>(w->topk_w), N, H, static_cast<int>(k));
    return e == cudaSuccess ? 0 : -1;
}

// 0, 1 where the down launch combined y although combine was false (ts_cuda_moe_uncombined), or −1.
int moe(ts_cuda_work *w, const ts_cuda_layer *L, int l, const float *x, int64_t N, float *y, bool combine,
        cudaStream_t s) {
    if (!w || !w->hp || !L || !x || !y || N < 0 || N > w->max_rows) return -1;
    if (N == 0) return 0;
    const ts_hparams *hp = w->hp;
    if (l < 0 || static_cast<uint32_t>(l) >= hp->n_layer || !hp->n_ff_exp) return -1;
    const int64_t H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp[l],
                  Fs = hp->n_ff_shexp;
    if (H <= 0 || H % 4 != 0 || H > INT32_MAX || E < 1 || E > INT32_MAX || k < 1 || k > kMaxK || k > E ||
        F <= 0 || Fs <= 0 || N > INT32_MAX / k)
        return -1;

    // weights present and shaped as the layer says
    const bool fused = L->ffn_gate_up_exps.data != nullptr;
    const ts_cuda_tensor &gate = fused ? L->ffn_gate_up_exps : L->ffn_gate_exps;
    if (!L->ffn_gate_inp.data || L->ffn_gate_inp.ne0 != H || L->ffn_gate_inp.rows < E) return -1;
    if (!gate.data || gate.ne0 != H || gate.rows < E * (fused ? 2 * F : F)) return -1;
    if (!fused && (!L->ffn_up_exps.data || L->ffn_up_exps.ne0 != H || L->ffn_up_exps.rows < E * F)) return -1;
    if (!L->ffn_down_exps.data || L->ffn_down_exps.ne0 != F || L->ffn_down_exps.rows < E * H) return -1;
    if (!L->ffn_gate_shexp.data || !L->ffn_up_shexp.data || !L->ffn_down_shexp.data ||
        !L->ffn_gate_inp_shexp || L->ffn_gate_shexp.ne0 != H || L->ffn_up_shexp.ne0 != H ||
        L->ffn_gate_shexp.rows < Fs || L->ffn_up_shexp.rows < Fs || L->ffn_down_shexp.ne0 != Fs ||
        L->ffn_down_shexp.rows < H)
        return -1;
    if (!w->router || !w->topk_id || !w->topk_w || !w->gu || !w->eo || !w->sg) return -1;

    // layout: shared gate/up at the start of scratch, expert gate/up rows in w->gu or after it
    const bool one_launch = fused || same_encoding(L->ffn_gate_exps, L->ffn_up_exps);
    int64_t G, uoff;
    expert_layout(F, one_launch, &G, &uoff);
    const int64_t NK = N * k;
    const size_t sh_bytes = align256(static_cast<size_t>(shared_floats(N, Fs)) * sizeof(float));
    const size_t gu_bytes = G == 2 * F ? 0 : static_cast<size_t>(NK * G) * sizeof(float);
    if (!w->scratch || sh_bytes + gu_bytes > w->scratch_bytes) return -1;
    float *sh = static_cast<float *>(w->scratch);
    float *gu = G == 2 * F ? w->gu : reinterpret_cast<float *>(static_cast<char *>(w->scratch) + sh_bytes);
    const bool sh_fused = N <= kSharedFusedMaxRows && same_encoding(L->ffn_gate_shexp, L->ffn_up_shexp);
    const int64_t sh_uoff = sh_fused ? Fs : round_up4(N * Fs);

    // 1–2. router logits, then softmax / top-k / renormalisation and the shared gate logit
    const bool bf16 = L->ffn_gate_inp.type == TS_TYPE_BF16;
    if (N <= kRouterFusedMaxRows && (bf16 || L->ffn_gate_inp.type == TS_TYPE_F32) && H % 4 == 0 &&
        E <= kRouterThreads && k <= kTopkBlockMaxK && w->route_count) {
        const int rows = router_fused_rows(E, N);
        const dim3 grid(static_cast<unsigned>((E + 1 + rows - 1) / rows), static_cast<unsigned>(N));
        const auto launch_router = [&](auto weight) { // the kernel for the router's element type
            using Wt = decltype(weight);
            return ts_cu::launch(router_fused_kernel<Wt>, grid, dim3(kRouterThreads), 0, s,
                                 static_cast<const Wt *>(L->ffn_gate_inp.data),
                                 static_cast<int64_t>(L->ffn_gate_inp.row_bytes / sizeof(Wt)), x,
                                 static_cast<int>(H), L->ffn_gate_inp_shexp, w->sg, w->router,
                                 static_cast<int>(E), static_cast<int>(k), w->topk_id, w->topk_w,
                                 w->route_count, rows);
        };
        if ((bf16 ? launch_router(uint16_t{}) : launch_router(float{})) != cudaSuccess) return -1;
    } else {
        if (ts_cuda_matmul(&L->ffn_gate_inp, 0, E, x, N, w->router, s) != 0) return -1;
        const size_t p_smem = E <= kRouterSmemE ? static_cast<size_t>(E) * sizeof(float) : 0;
        if (ts_cu::launch(router_kernel, dim3(static_cast<unsigned>(N)), dim3(kRouterThreads), p_smem, s, x,
                          static_cast<int>(H), L->ffn_gate_inp_shexp, w->sg, w->router, static_cast<int>(E),
                          static_cast<int>(k), w->topk_id, w->topk_w) != cudaSuccess)
            return -1;
    }

    // 3–4. shared expert gate and up, then the experts' for all N·k items (items t·k .. t·k + k − 1 read x
    //    row t): one GEMV per item, or (grouped) an expert plan and grouped GEMMs, with the same arguments
    //    and outputs; the shared expert's rides in the routed launch as one more item a token where the
    //    tensor-core GEMV takes both (ts_cuda_matmul_experts_shared: the same sums, one launch fewer)
    const int32_t *ids = w->topk_id;
    const ts_cuda_tensor *up = &L->ffn_up_exps;
    const size_t plan_off = sh_bytes + align256(gu_bytes);
    const size_t plan_bytes = ts_cuda_expert_plan_bytes(NK, E);
    const int mode = moe_grouped_mode();
    bool grouped = mode == 1 || (mode < 0 && N >= kGroupedMinRows && NK >= kGroupedMinItemsPerExpert * E);
    const bool plan_fits = plan_bytes > 0 && plan_off + plan_bytes <= w->scratch_bytes;
    grouped = grouped && plan_fits;
    // planned where the GEMV takes every routed product so (else the plan would go unused)
    const auto plans = [&](const ts_cuda_tensor *Wp, const ts_cuda_tensor *W2, int64_t rows_per_expert,
                           int64_t n_out, int64_t x_div) {
        return ts_cuda_matmul_experts_planned_takes(Wp, W2, NK, E, rows_per_expert, n_out, x_div);
    };
    const bool planned = !grouped && plan_fits && N >= planned_min_rows() &&
                         (fused        ? plans(&gate, nullptr, 2 * F, 2 * F, k)
                          : one_launch ? plans(&gate, up, F, F, k)
                                       : plans(&gate, nullptr, F, F, k) && plans(up, nullptr, F, F, k)) &&
                         plans(&L->ffn_down_exps, nullptr, H, H, 1);
    int merged = 1; // 0: both gate/up products enqueued as one
    if (!grouped && !planned && sh_fused && (fused || one_launch) && Fs == F && shared_merge_enabled())
        merged = ts_cuda_matmul_experts_shared(&gate, fused ? nullptr : up, ids, NK, fused ? 2 * F : F,
                                               fused ? 2 * F : F, x, k, H, gu, G, &L->ffn_gate_shexp,
                                               &L->ffn_up_shexp, sh, round_up4(2 * Fs), s);
    if (merged < 0) return -1;
    if (merged > 0 && sh_fused &&
        ts_cuda_matmul_experts(&L->ffn_gate_shexp, &L->ffn_up_shexp, nullptr, N, 0, 0, Fs, x, 1, H, sh,
                               round_up4(2 * Fs), s) != 0)
        return -1;
    if (merged > 0 && !sh_fused &&
        (ts_cuda_matmul(&L->ffn_gate_shexp, 0, Fs, x, N, sh, s) != 0 ||
         ts_cuda_matmul(&L->ffn_up_shexp, 0, Fs, x, N, sh + sh_uoff, s) != 0))
        return -1;
    ts_cuda_expert_plan plan;
    if ((grouped || planned) &&
        ts_cuda_expert_plan_build_tile(ids, NK, E, grouped ? 0 : ts_cu::kTcPlanTile,
                                       static_cast<char *>(w->scratch) + plan_off, plan_bytes, &plan, s) != 0)
        return -1;
    auto experts = [&](const ts_cuda_tensor *Wp, const ts_cuda_tensor *W2, int64_t rows_per_expert,
                       int64_t n_out, const float *xs, int64_t x_div, int64_t x_stride, float *ys,
                       int64_t y_stride) {
        if (grouped && ts_cuda_gemm_tc_experts_takes(&plan, Wp->type, Wp->ne0, x_div)) // gemm_tc.h
            return ts_cuda_gemm_tc_experts(&plan, Wp, W2, rows_per_expert, 0, n_out, xs, x_div, x_stride, ys,
                                           y_stride, s);
        if (grouped)
            return ts_cuda_gemm_experts(&plan, Wp, W2, rows_per_expert, 0, n_out, xs, x_div, x_stride, ys,
                                        y_stride, s);
        if (planned) { // 1: the GEMV would not run it with the weights as A (the same sums as below otherwise)
            const int rc = ts_cuda_matmul_experts_planned(&plan, Wp, W2, rows_per_expert, 0, n_out, xs, x_div,
                                                          x_stride, ys, y_stride, s);
            w->moe_planned += rc == 0;
            if (rc <= 0) return rc;
        }
        return ts_cuda_matmul_experts(Wp, W2, ids, NK, rows_per_expert, 0, n_out, xs, x_div, x_stride, ys,
                                      y_stride, s);
    };
    int rc = 0;
    if (merged == 0) // enqueued above with the shared expert's
        rc = 0;
    else if (fused) // rows 2F·e .. 2F·e + 2F − 1: gate then up, as one part
        rc = experts(&gate, nullptr, 2 * F, 2 * F, x, k, H, gu, G);
    else if (one_launch) // gate rows F·e .., then the same rows of up
        rc = experts(&gate, up, F, F, x, k, H, gu, G);
    else
        rc = experts(&gate, nullptr, F, F, x, k, H, gu, G) ||
             experts(up, nullptr, F, F, x, k, H, gu + uoff, G);
    if (rc != 0) return -1;

    // 5–7 at one token, where the down launch below takes the shared expert's down too: that launch computes
    //    h = silu(gate) ⊙ up while staging its x rows, the routed rows rounded as step 5 rounds them (the same h,
    //    the same sums: ts_cuda_matmul_experts_shared_down with up_off), no SwiGLU kernel;
    //    TURBOSPARK_CUDA_SWIGLU_STAGED=0 keeps the kernel
    //    and, with the route counters' room, the combine too (8: y is then the MoE output whether asked or not,
    //    so ts_cuda_moe_uncombined returns 1; TURBOSPARK_CUDA_MOE_DOWN_COMBINE=0 leaves it to its kernel or the
    //    next write)
    // (step 5's rounding of the routed rows: per x group of the down products' type, where the tensor cores may
    // take them)
    const int64_t rg = ts_cu::tc_gemv_enabled() ? ts_tc_x_group(L->ffn_down_exps.type) : 0;
    const int round_a = rg > 0 && rg <= kSwigluSlice && F % rg == 0 ? static_cast<int>(rg) : 0;
    if (!grouped && N == 1 && shared_merge_enabled() && swiglu_staged_enabled() && uoff == sh_uoff &&
        uoff > 0) {
        const bool cmb = down_combine_enabled() && w->route_count;
        const ts_cuda_moe_down_fused f = {uoff, round_a > 0, cmb ? w->route_count + w->max_rows : nullptr,
                                          w->sg, w->topk_w};
        const int m = ts_cuda_matmul_experts_shared_down(&L->ffn_down_exps, ids, NK, H, H, gu, G, w->eo, H,
                                                         &L->ffn_down_shexp, sh, Fs, N, y, &f, s);
        if (m < 0) return -1;
        w->swiglu_staged += m == 0;
        if (m == 0 && cmb) return 1;
        if (m == 0) return combine ? launch_combine(w, y, N, H, k, s) : 0;
    }

    // 5. h = silu(gate) ⊙ up, experts and shared expert in one pass, the experts' rows rounded for their
    //    down products where the tensor-core GEMM may take those (see the top of this file)
    if (launch_swiglu({gu, gu + uoff, NK, G, F}, {sh, sh + sh_uoff, N, Fs, Fs}, round_a, s)) return -1;

    // 6–7. shared down into y, expert down into w->eo (item i reads its own h row); at one token the shared
    //    down rides in the routed launch where the tensor-core GEMV takes both alike
    //    (ts_cuda_matmul_experts_shared_down: the same sums, one launch fewer)
    int merged_down = 1;
    if (!grouped && N == 1 && shared_merge_enabled())
        merged_down = ts_cuda_matmul_experts_shared_down(&L->ffn_down_exps, ids, NK, H, H, gu, G, w->eo, H,
                                                         &L->ffn_down_shexp, sh, Fs, N, y, nullptr, s);
    if (merged_down < 0) return -1;
    if (merged_down > 0 && (ts_cuda_matmul(&L->ffn_down_shexp, 0, H, sh, N, y, s) != 0 ||
                            experts(&L->ffn_down_exps, nullptr, H, H, gu, 1, G, w->eo, H) != 0))
        return -1;

    // 8. y = σ(sg)·y + Σ_j w_j·eo_j (or, uncombined, in the next hyper-connection write)
    return combine ? launch_combine(w, y, N, H, k, s) : 0;
}

} // namespace

extern "C" int ts_cuda_moe(ts_cuda_work *w, const ts_cuda_layer *L, int l, const float *x, int64_t N,
                           float *y, cudaStream_t s) {
    const int rc = moe(w, L, l, x, N, y, true, s);
    return rc > 0 ? 0 : rc; // 1: combined by the down launch
}

extern "C" int ts_cuda_moe_swiglu(float *g, const float *u, int64_t rows, int64_t stride, int64_t width,
                                  int round, cudaStream_t s) {
    if (!g || !u || rows < 0 || width < 1 || stride < width || round < 0 || round > kSwigluSlice ||
        (round && (round % 32 != 0 || width % round != 0)))
        return -1;
    if (rows == 0) return 0;
    return launch_swiglu({g, u, rows, stride, width}, {g, u, 0, stride, 1}, round, s);
}

extern "C" int ts_cuda_moe_uncombined(ts_cuda_work *w, const ts_cuda_layer *L, int l, const float *x,
                                      int64_t N, float *y, cudaStream_t s) {
    return moe(w, L, l, x, N, y, false, s);
}
