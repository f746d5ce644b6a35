// Decode products on the tensor cores: y = W·x for up to 16 tokens (or the items of an expert
// product), Q4_K, Q5_K (K-quant super-blocks) and Q6_K, Q8_0, Q5_0 (MMAs in input order) weights in
// their file encoding. The contract is gemv_tc.h's; the lane arithmetic
// (fragments, x in fp16, exactness) is gemv_tc.cuh's, shared with a host emulation test.
//
// Schedule. Decode products are memory-bound: everything here serves keeping enough weight bytes in
// flight from the first cycle on.
//  * Output rows are cut into chunks of 8 (one MMA tile, all its inputs); chunk c belongs to thread
//    block c mod grid, and the grid is resident (1-2 blocks an SM, as shared memory allows). Chunks of up
//    to 8 tokens are 16 rows with the weights as the MMAs' A operand (TURBOSPARK_TC_WA=0: 8 rows, the
//    weights as B).
//  * A block streams its chunks' rows into a ring of NS stages in shared memory with bulk copies
//    (cp.async.bulk: the copy engine moves a whole row per instruction and counts the bytes on an
//    mbarrier per stage). Dense products issue their first NS chunks before waiting for the previous
//    kernel (programmatic dependent launch): weights never depend on it, so the DRAM round trip
//    overlaps its tail. Expert products must read the expert ids first.
//  * Rows land 16 bytes past a multiple of 128 apart, so the lanes' 16-byte loads of 8 rows hit
//    distinct banks.
//  * x is staged once per block, after the wait, in the MMA's A-fragment order (gemv_tc.cuh), one
//    16-byte load per lane and MMA pair; a (token, super-block) scale keeps it in fp16's range.
//  * The warps of a block (8; TURBOSPARK_TC_WARPS=4 for 4: 8 measured faster at batch 1, 8 and 64 on the
//    H200) split a chunk's super-blocks by their index mod the warp count (which warp takes which class
//    rotates from chunk to chunk, so uneven splits even out), then warp 0 adds the partial sums in
//    class order: results are deterministic and independent of the grid.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cuda_device.h"
#include "cuda/gemv_tc_dot.cuh"
#include "cuda/gemv_tc.h"
#include "cuda/tc_stage.cuh"
#include "cuda/pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

namespace ts_cu {

namespace {

constexpr int kTile = kTcTile; // output rows a chunk (the weights as the MMAs' B operand)
constexpr int kTileWa = 16;    // output rows a chunk with the weights as A (TURBOSPARK_TC_WA=1)
constexpr int kMaxStages = 8;  // stages of the weight ring
constexpr size_t kSmemPerSm = 227 * 1024;

// ---- chunks --------------------------------------------------------------------------------------

struct chunk_t {
    const uint8_t *w; // first weight row
    int nr;           // rows (≤ R, the chunks' rows)
    int xrow, nt;     // staged x rows xrow .. xrow + nt − 1 are its tokens
    float *y;         // output of token 0, row 0
    int64_t ystride;  // floats from one token's outputs to the next
    bool bad;         // an out-of-range expert id: NaN outputs, no weight read
};

// ts_cuda_matmul: chunk c is rows R·c .. R·c + R − 1 for all T tokens.
template <int ROWS> struct dense_chunks {
    static constexpr int R = ROWS;
    static constexpr bool kDense = true, kXRow = false;
    const uint8_t *w;
    size_t rb;
    int n_out, T;
    float *y;
    __device__ bool after_wait() const { return false; } // weights never depend on the kernel before
    __device__ chunk_t at(int c) const {
        return {w + static_cast<size_t>(c) * R * rb, min(R, n_out - c * R), 0, T, y + c * R, n_out, false};
    }
};

// ts_cuda_matmul_experts: item i's chunks are those of its part 0, then of its part 1. XROW: the block
// stages one x row at a time, its chunks' (a block takes a contiguous range of chunks, so an item's chunks
// mostly fall to one block and its x row is staged once there).
template <int ROWS, bool XROW> struct expert_chunks {
    static constexpr int R = ROWS;
    static constexpr bool kDense = false, kXRow = XROW;
    tc_expert_job j;
    int cpp;                                                        // chunks per part
    __device__ bool after_wait() const { return j.ids != nullptr; } // the ids come from the router kernel
    __device__ chunk_t at(int c) const {
        const int per_item = j.parts() * cpp, i = c / per_item, r = c % per_item, part = r / cpp,
                  cc = r % cpp;
        const int e = j.ids ? __ldg(j.ids + i) : 0;
        const bool bad = e < 0 || e > j.e_max;
        const size_t row = static_cast<size_t>(bad ? 0 : e) * static_cast<size_t>(j.rows_per_expert) +
                           static_cast<size_t>(j.row_off) + static_cast<size_t>(cc) * R;
        return {(part ? j.w1 : j.w0) + row * j.rb,
                min(R, j.n_part - cc * R),
                i / j.x_div,
                1,
                j.y + static_cast<size_t>(i) * static_cast<size_t>(j.y_stride) + part * j.n_part + cc * R,
                0,
                bad};
    }
};

// ---- the kernel ----------------------------------------------------------------------------------

// Chunks::R = kTileWa: the weights as the MMAs' A operand (chunk_part_wa: rows g and g + 8 of lane (g, t),
// tokens 2t and 2t + 1 of up to 8, lane (g, t)'s B column token g's x).
template <int TYPE, class Chunks, int kWarps, bool PAIR, bool W16>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_tc_kernel(const Chunks ch, int n_chunks, int ne0, const float *__restrict__ x, int nx,
                   int64_t x_stride, int ns, int row_stride, uint32_t rb) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int nsb = ne0 / kTcSuper;
    const tc_layout L(kWarps, nx, ne0, ns, row_stride);
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm);
    float4 *red = reinterpret_cast<float4 *>(sm + L.red);
    float *xsc = reinterpret_cast<float *>(sm + L.xsc);
    uint2 *xsum = reinterpret_cast<uint2 *>(sm + L.xsum);
    uint32_t *xs = reinterpret_cast<uint32_t *>(sm + L.xs);
    uint8_t *stages = sm + L.stages;
    constexpr int R = Chunks::R;
    constexpr bool WA = R == kTileWa;
    static_assert(!WA || (!PAIR && !W16),
                  "the weights-as-A chunks take up to 8 tokens, one super-block a pass");
    // this block's chunks: c0, c0 + cstep, ... (n_mine of them): every grid-th, or XROW a contiguous range
    constexpr bool XR = Chunks::kXRow;
    const int b = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
    const int c0 = XR ? static_cast<int>(static_cast<int64_t>(b) * n_chunks / grid) : b,
              cstep = XR ? 1 : grid;
    const int n_mine = XR ? static_cast<int>(static_cast<int64_t>(b + 1) * n_chunks / grid) - c0
                          : (n_chunks - b + grid - 1) / grid;

    pdl_trigger();
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns; s++) mbar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // thread 0: chunk j of this block into stage j % ns
    auto issue = [&](int j) {
        const chunk_t k = ch.at(c0 + j * cstep);
        uint64_t *bar = &bars[j % ns];
        if (k.bad) {
            mbar_arrive(bar);
            return;
        }
        mbar_expect(bar, static_cast<uint32_t>(k.nr) * rb);
        uint8_t *dst = stages + static_cast<size_t>(j % ns) * R * row_stride;
        if (row_stride ==
            static_cast<int>(rb)) // rows not a multiple of 16 bytes: the whole chunk (R rows) at once
            bulk_copy(dst, k.w, static_cast<uint32_t>(k.nr) * rb, bar);
        else
            for (int r = 0; r < k.nr; r++)
                bulk_copy(dst + r * row_stride, k.w + static_cast<size_t>(r) * rb, rb, bar);
    };
    const bool after = ch.after_wait();
    if (!after && threadIdx.x == 0)
        for (int j = 0; j < ns && j < n_mine; j++) issue(j);
    pdl_wait();
    if (after && threadIdx.x == 0)
        for (int j = 0; j < ns && j < n_mine; j++) issue(j);

    // x rows r0 .. r0 + n − 1 into the staging (all of them up front, or XROW each chunk's when it changes,
    // one round of loads at a time: the staging then sits inside the chunk loop)
    constexpr int kRounds = XR ? 1 : kStageRounds;
    auto stage = [&](int r0, int n) {
        const float *xr0 = x + static_cast<size_t>(r0) * static_cast<size_t>(x_stride);
        if constexpr (tc_kind<TYPE>::kInorder)
            stage_x_inorder<tc_kind<TYPE>::G, false, false, 0, kRounds>(xr0, n, ne0, x_stride, xs, xsc);
        else
            stage_x_kquant<false, false, 0, kRounds>(xr0, n, nsb, x_stride, xs, xsum, xsc);
        __syncthreads();
    };
    if constexpr (!XR) stage(0, nx);
    int staged = -1; // XROW: the x row in the staging

    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    const int g = lane >> 2, t = lane & 3;
    for (int j = 0; j < n_mine; j++) {
        const chunk_t k = ch.at(c0 + j * cstep);
        if constexpr (XR)
            if (k.xrow != staged) { // every warp is past the last chunk's sums (the barrier at its end)
                stage(k.xrow, 1);
                staged = k.xrow;
            }
        const int x0 = XR ? 0 : k.xrow; // the chunk's first token's row in the staging
        mbar_wait(&bars[j % ns], static_cast<uint32_t>(j / ns) & 1u);
        const uint8_t *st = stages + static_cast<size_t>(j % ns) * R * row_stride;
        // lane (g, t) computes the sums of token g (and, W16, of token g + 8: MMA rows g and g + 8 depend on
        // A rows g and g + 8 only); lanes of a token beyond the chunk's read token 0's x and their sums are
        // never stored, so the loads need no branch. WA: x row xr is the lane's B column (token g), x0 and x1
        // its C columns' (tokens 2t, 2t + 1), the same rule for tokens beyond the chunk's.
        const int xr = x0 + (g < k.nt ? g : 0), xr8 = x0 + (g + 8 < k.nt ? g + 8 : 0);
        float4 acc;
        if constexpr (WA)
            acc = chunk_part_wa<TYPE, kWarps>(st, row_stride, xs, xsum, xsc, ne0, xr,
                                              x0 + (2 * t < k.nt ? 2 * t : 0),
                                              x0 + (2 * t + 1 < k.nt ? 2 * t + 1 : 0), j, warp, g, t);
        else
            acc = chunk_part<TYPE, kWarps, PAIR, W16>(st, row_stride, xs, xsum, xsc, ne0, xr, xr8, j, warp, g,
                                                      t);
        float4 *part = red + (j & 1) * kWarps * 32;
        part[warp * 32 + lane] = acc;
        __syncthreads(); // every warp is done with stage j % ns and has written its partial sums
        if (threadIdx.x == 0 && j + ns < n_mine) issue(j + ns);
        if (WA && warp == 0 && 2 * t < k.nt) { // rows g, g + 8 of tokens 2t (s.x, s.z) and 2t + 1 (s.y, s.w)
            float4 s = sum_classes<kWarps>(part, j, lane);
            if (k.bad) s.x = s.y = s.z = s.w = __int_as_float(0x7fffffff);
            float *y0 = k.y + static_cast<size_t>(2 * t) * static_cast<size_t>(k.ystride);
            if (g < k.nr) y0[g] = s.x;
            if (g + 8 < k.nr) y0[g + 8] = s.z;
            if (2 * t + 1 < k.nt) {
                float *y1 = y0 + k.ystride;
                if (g < k.nr) y1[g] = s.y;
                if (g + 8 < k.nr) y1[g + 8] = s.w;
            }
        }
        if (!WA && warp == 0 && g < k.nt) {
            float4 s = sum_classes<kWarps>(part, j, lane);
            if (k.bad) s.x = s.y = s.z = s.w = __int_as_float(0x7fffffff);
            float *yt = k.y + static_cast<size_t>(g) * static_cast<size_t>(k.ystride);
            if (2 * t < k.nr) yt[2 * t] = s.x;
            if (2 * t + 1 < k.nr) yt[2 * t + 1] = s.y;
            if (W16 && g + 8 < k.nt) {
                float *y8 = k.y + static_cast<size_t>(g + 8) * static_cast<size_t>(k.ystride);
                if (2 * t < k.nr) y8[2 * t] = s.z;
                if (2 * t + 1 < k.nr) y8[2 * t + 1] = s.w;
            }
        }
    }
}

// ---- launch --------------------------------------------------------------------------------------

struct tc_plan {
    int ns, blocks, row_stride, warps;
    size_t smem;
};

// Tuning knobs for measurements (read once): TURBOSPARK_TC_WARPS (4 or 8 warps a block),
// TURBOSPARK_TC_PER_SM (the most blocks an SM, 1..8) and TURBOSPARK_TC_PAIR (below).
int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    const int n = v && v[0] ? atoi(v) : dflt; // set but empty: the default
    return n < lo || n > hi ? dflt : n;
}
int tc_warps() {
    static const int w = env_int("TURBOSPARK_TC_WARPS", 8, 4, 8) >= 8 ? 8 : 4;
    return w;
}
int tc_max_per_sm() {
    static const int n = env_int("TURBOSPARK_TC_PER_SM", 4, 1, 8);
    return n;
}
// TURBOSPARK_TC_PAIR=1: the K-quant kernels take two super-blocks a pass (dot_kquant); same results.
bool tc_pair() {
    static const bool on = env_int("TURBOSPARK_TC_PAIR", 0, 0, 1) == 1;
    return on;
}
// Products of up to 8 tokens a chunk (dense ones of 1–8 tokens, every expert product) take the weights as
// the MMAs' A operand, chunks of 16 rows (half the MMAs and x loads for the same decoding;
// gemv_tc_dot.cuh); where no plan fits their larger stages, chunks of 8 with the weights as B, as every
// product with TURBOSPARK_TC_WA=0 (measurements).
bool tc_wa() {
    static const bool on = env_int("TURBOSPARK_TC_WA", 1, 0, 1) == 1;
    return on;
}

// Blocks and stages for nx staged x rows and chunks of R rows: as many blocks an SM as shared memory allows
// (up to tc_max_per_sm(): more warps hide the MMA and load latencies) while each keeps two stages, or all
// of its chunks in flight.
// Rows whose bytes are not a multiple of 16 are staged as whole chunks of R back-to-back rows (row stride =
// rb; the callers make sure every chunk is a whole number of 8 rows and starts 16-byte aligned).
bool plan(int nx, int ne0, size_t rb, int n_chunks, int R, tc_plan &p) {
    p.warps = tc_warps();
    p.row_stride = rb % 16 == 0 ? stage_row_stride(rb) : static_cast<int>(rb);
    const size_t fixed = tc_layout(p.warps, nx, ne0, 0, p.row_stride).total,
                 slot = static_cast<size_t>(R) * p.row_stride;
    for (int per_sm = tc_max_per_sm(); per_sm >= 1; per_sm--) {
        const size_t budget = kSmemPerSm / per_sm - 1024;
        if (fixed + slot > budget) continue;
        p.blocks = per_sm * ts_cuda_sm_count();
        if (p.blocks > n_chunks) p.blocks = n_chunks;
        const int mine = (n_chunks + p.blocks - 1) / p.blocks;
        p.ns = static_cast<int>((budget - fixed) / slot);
        if (p.ns > kMaxStages) p.ns = kMaxStages;
        if (p.ns > mine) p.ns = mine;
        if (p.ns < 2 && mine > 1) continue;
        p.smem = fixed + static_cast<size_t>(p.ns) * slot;
        return true;
    }
    return false;
}

template <int TYPE, class Chunks, int NW, bool PAIR, bool W16>
int launch_tc_w(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
                const tc_plan &p, cudaStream_t s) {
    const auto kernel = gemv_tc_kernel<TYPE, Chunks, NW, PAIR, W16>;
    static bool opted_in = false; // one flag per instantiation
    if (!opted_in) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kSmemPerSm)) != cudaSuccess)
            return -1;
        opted_in = true;
    }
    return launch(kernel, dim3(static_cast<unsigned>(p.blocks)), dim3(NW * 32), p.smem, s, ch, n_chunks, ne0,
                  x, nx, x_stride, p.ns, p.row_stride, static_cast<uint32_t>(rb)) == cudaSuccess
               ? 0
               : -1;
}

template <int TYPE, class Chunks, bool PAIR, bool W16>
int launch_tc_pw(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
                 const tc_plan &p, cudaStream_t s) {
    return p.warps == 8
               ? launch_tc_w<TYPE, Chunks, 8, PAIR, W16>(ch, n_chunks, ne0, x, nx, x_stride, rb, p, s)
               : launch_tc_w<TYPE, Chunks, 4, PAIR, W16>(ch, n_chunks, ne0, x, nx, x_stride, rb, p, s);
}

// w16: a chunk has 9–16 tokens (dense products only), the MMAs' A rows g + 8 carry tokens 8–15. Chunks of
// kTileWa rows: the weights as A, neither w16 nor pairs.
template <int TYPE, class Chunks>
int launch_tc(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
              bool w16, cudaStream_t s) {
    tc_plan p;
    if (n_chunks <= 0) return 0;
    if (!plan(nx, ne0, rb, n_chunks, Chunks::R, p)) return -1;
    constexpr bool kDense = Chunks::kDense && Chunks::R == kTile,
                   kPair = !tc_kind<TYPE>::kInorder && Chunks::R == kTile;
    if constexpr (kPair)
        if (tc_pair()) {
            if constexpr (kDense)
                if (w16)
                    return launch_tc_pw<TYPE, Chunks, true, true>(ch, n_chunks, ne0, x, nx, x_stride, rb, p,
                                                                  s);
            return launch_tc_pw<TYPE, Chunks, true, false>(ch, n_chunks, ne0, x, nx, x_stride, rb, p, s);
        }
    if constexpr (kDense)
        if (w16) return launch_tc_pw<TYPE, Chunks, false, true>(ch, n_chunks, ne0, x, nx, x_stride, rb, p, s);
    return launch_tc_pw<TYPE, Chunks, false, false>(ch, n_chunks, ne0, x, nx, x_stride, rb, p, s);
}

} // namespace

bool tc_gemv_enabled() {
    return tc_gemv_min_tokens() > 0;
}

int tc_gemv_min_tokens() {
    static const int t = ts_cuda_switch_on("TURBOSPARK_CUDA_GEMV_TC");
    return t;
}

int tc_gemv_group(uint32_t type) {
    int G = 0; // kTcSuper for the K-quants and Q6_K, 128 for Q8_0 and Q5_0 (tc_kind)
    with_tc_type(type, [&](auto t) { G = tc_kind<decltype(t)::value>::G; });
    return G;
}

bool tc_gemv_takes(uint32_t type, int64_t ne0, int64_t x_rows, size_t row_bytes, bool whole_chunks) {
    const int G = tc_gemv_group(type);
    if (!G || ne0 <= 0 || ne0 % G != 0 || ne0 > (1 << 20) || x_rows < 1 || x_rows > 1024) return false;
    if (row_bytes != ts_row_size(type, ne0)) return false;
    if (row_bytes % 16 != 0 && !(whole_chunks && (kTile * row_bytes) % 16 == 0)) return false;
    tc_plan p;
    return plan(static_cast<int>(x_rows), static_cast<int>(ne0), row_bytes, 1, kTile, p);
}

int tc_gemv(uint32_t type, const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, int T, float *y,
            cudaStream_t s) {
    if (T < 1 || T > kTcMaxTokens) return -1;
    const int n_chunks = (n_out + kTile - 1) / kTile, n_wa = (n_out + kTileWa - 1) / kTileWa;
    tc_plan p;
    const bool wa = tc_wa() && T <= 8 && plan(T, ne0, rb, n_wa, kTileWa, p);
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        if (wa)
            rc = launch_tc<decltype(t)::value>(dense_chunks<kTileWa>{w, rb, n_out, T, y}, n_wa, ne0, x, T,
                                               ne0, rb, false, s);
        else
            rc = launch_tc<decltype(t)::value>(dense_chunks<kTile>{w, rb, n_out, T, y}, n_chunks, ne0, x, T,
                                               ne0, rb, T > kTile, s);
    });
    return rc;
}

namespace {

// Runs an expert job with chunks of R rows, staging all nx x rows or (XROW) one at a time.
template <int R, bool XROW>
int experts_r(uint32_t type, const tc_expert_job &job, int ne0, int nx, cudaStream_t s) {
    expert_chunks<R, XROW> ch;
    ch.j = job;
    ch.cpp = (job.n_part + R - 1) / R;
    const int n_chunks = job.n_items * job.parts() * ch.cpp;
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        rc = launch_tc<decltype(t)::value>(ch, n_chunks, ne0, job.x, XROW ? 1 : nx, job.x_stride, job.rb,
                                           false, s);
    });
    return rc;
}

template <bool XROW> int experts_x(uint32_t type, const tc_expert_job &job, int ne0, int nx, cudaStream_t s) {
    const int n_wa = job.n_items * job.parts() * ((job.n_part + kTileWa - 1) / kTileWa);
    tc_plan p;
    if (tc_wa() && plan(XROW ? 1 : nx, ne0, job.rb, n_wa, kTileWa, p))
        return experts_r<kTileWa, XROW>(type, job, ne0, nx, s);
    return experts_r<kTile, XROW>(type, job, ne0, nx, s);
}

} // namespace

int tc_xrow_mode() {
    static const int m = env_int("TURBOSPARK_TC_XROW", 1, 0, 2);
    return m;
}

int64_t tc_experts_staged_rows(int64_t x_rows) {
    const int m = tc_xrow_mode();
    return m == 2 || (m == 1 && x_rows > kTcExpertXRows) ? 1 : x_rows;
}

int tc_gemv_experts(uint32_t type, const tc_expert_job &job, int ne0, cudaStream_t s) {
    const int nx = (job.n_items + job.x_div - 1) / job.x_div;
    if (tc_xrow_mode() == 2 || tc_experts_staged_rows(nx) < nx) return experts_x<true>(type, job, ne0, nx, s);
    return experts_x<false>(type, job, ne0, nx, s);
}

} // namespace ts_cu
