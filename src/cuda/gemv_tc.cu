// Decode products on the tensor cores: y = W·x for up to 16 tokens (or the items of an expert
// product), Q4_K, Q5_K (K-quant super-blocks) and Q6_K, Q8_0, Q5_0 (MMAs in input order) weights in
// their file encoding. The contract is gemv_tc.h's; the lane arithmetic
// (fragments, x in fp16, exactness) is gemv_tc.cuh's, shared with a host emulation test.
//
// Schedule. Decode products are memory-bound: everything here serves keeping enough weight bytes in
// flight from the first cycle on.
//  * Output rows are cut into chunks of 8 (one MMA tile, all its inputs); chunk c belongs to thread
//    block c mod grid, and the grid is resident (1-2 blocks an SM, as shared memory allows).
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
#include <type_traits>

namespace ts_cu {

namespace {

constexpr int kTile = kTcTile; // output rows a chunk
constexpr int kMaxStages = 8;  // stages of the weight ring
constexpr size_t kSmemPerSm = 227 * 1024;

// ---- chunks --------------------------------------------------------------------------------------

struct chunk_t {
    const uint8_t *w; // first weight row
    int nr;           // rows (≤ kTile)
    int xrow, nt;     // staged x rows xrow .. xrow + nt − 1 are its tokens
    float *y;         // output of token 0, row 0
    int64_t ystride;  // floats from one token's outputs to the next
    bool bad;         // an out-of-range expert id: NaN outputs, no weight read
};

// ts_cuda_matmul: chunk c is rows 8c .. 8c + 7 for all T tokens.
struct dense_chunks {
    const uint8_t *w;
    size_t rb;
    int n_out, T;
    float *y;
    __device__ bool after_wait() const { return false; } // weights never depend on the kernel before
    __device__ chunk_t at(int c) const {
        return {w + static_cast<size_t>(c) * kTile * rb,
                min(kTile, n_out - c * kTile),
                0,
                T,
                y + c * kTile,
                n_out,
                false};
    }
};

// ts_cuda_matmul_experts: item i's chunks are those of its part 0, then of its part 1.
struct expert_chunks {
    tc_expert_job j;
    int cpp;                                                        // chunks per part
    __device__ bool after_wait() const { return j.ids != nullptr; } // the ids come from the router kernel
    __device__ chunk_t at(int c) const {
        const int per_item = j.parts * cpp, i = c / per_item, r = c % per_item, part = r / cpp, cc = r % cpp;
        const int e = j.ids ? __ldg(j.ids + i) : 0;
        const bool bad = e < 0 || e > j.e_max;
        const size_t row = static_cast<size_t>(bad ? 0 : e) * static_cast<size_t>(j.rows_per_expert) +
                           static_cast<size_t>(j.row_off) + static_cast<size_t>(cc) * kTile;
        return {(part ? j.w1 : j.w0) + row * j.rb,
                min(kTile, j.n_part - cc * kTile),
                i / j.x_div,
                1,
                j.y + static_cast<size_t>(i) * static_cast<size_t>(j.y_stride) + part * j.n_part + cc * kTile,
                0,
                bad};
    }
};

// ---- the kernel ----------------------------------------------------------------------------------

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
    const int n_mine = (n_chunks - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                       static_cast<int>(gridDim.x);

    pdl_trigger();
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns; s++) mbar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // thread 0: chunk j of this block into stage j % ns
    auto issue = [&](int j) {
        const chunk_t k = ch.at(static_cast<int>(blockIdx.x) + j * static_cast<int>(gridDim.x));
        uint64_t *bar = &bars[j % ns];
        if (k.bad) {
            mbar_arrive(bar);
            return;
        }
        mbar_expect(bar, static_cast<uint32_t>(k.nr) * rb);
        uint8_t *dst = stages + static_cast<size_t>(j % ns) * kTile * row_stride;
        if (row_stride ==
            static_cast<int>(rb)) // rows not a multiple of 16 bytes: the whole chunk (8 rows) at once
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

    if constexpr (tc_kind<TYPE>::kInorder)
        stage_x_inorder<tc_kind<TYPE>::G>(x, nx, ne0, x_stride, xs, xsc);
    else
        stage_x_kquant(x, nx, nsb, x_stride, xs, xsum, xsc);
    __syncthreads();

    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    const int g = lane >> 2, t = lane & 3;
    for (int j = 0; j < n_mine; j++) {
        const chunk_t k = ch.at(static_cast<int>(blockIdx.x) + j * static_cast<int>(gridDim.x));
        mbar_wait(&bars[j % ns], static_cast<uint32_t>(j / ns) & 1u);
        const uint8_t *st = stages + static_cast<size_t>(j % ns) * kTile * row_stride;
        // lane (g, t) computes the sums of token g (and, W16, of token g + 8: MMA rows g and g + 8 depend on
        // A rows g and g + 8 only); lanes of a token beyond the chunk's read token 0's x and their sums are
        // never stored, so the loads need no branch
        const int xr = k.xrow + (g < k.nt ? g : 0), xr8 = k.xrow + (g + 8 < k.nt ? g + 8 : 0);
        const float4 acc =
            chunk_part<TYPE, kWarps, PAIR, W16>(st, row_stride, xs, xsum, xsc, ne0, xr, xr8, j, warp, g, t);
        float4 *part = red + (j & 1) * kWarps * 32;
        part[warp * 32 + lane] = acc;
        __syncthreads(); // every warp is done with stage j % ns and has written its partial sums
        if (threadIdx.x == 0 && j + ns < n_mine) issue(j + ns);
        if (warp == 0 && g < k.nt) {
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
    const int n = v ? atoi(v) : dflt;
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

// Blocks and stages for nx staged x rows: as many blocks an SM as shared memory allows (up to
// tc_max_per_sm(): more warps hide the MMA and load latencies) while each keeps two stages, or all of
// its chunks in flight.
// Rows whose bytes are not a multiple of 16 are staged as whole chunks of 8 back-to-back rows (row stride =
// rb; the callers make sure every chunk is whole and starts 16-byte aligned).
bool plan(int nx, int ne0, size_t rb, int n_chunks, tc_plan &p) {
    p.warps = tc_warps();
    p.row_stride = rb % 16 == 0 ? stage_row_stride(rb) : static_cast<int>(rb);
    const size_t fixed = tc_layout(p.warps, nx, ne0, 0, p.row_stride).total,
                 slot = static_cast<size_t>(kTile) * p.row_stride;
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
        p.smem = tc_layout(p.warps, nx, ne0, p.ns, p.row_stride).total;
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

// w16: a chunk has 9–16 tokens (dense products only), the MMAs' A rows g + 8 carry tokens 8–15.
template <int TYPE, class Chunks>
int launch_tc(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
              bool w16, cudaStream_t s) {
    tc_plan p;
    if (n_chunks <= 0) return 0;
    if (!plan(nx, ne0, rb, n_chunks, p)) return -1;
    constexpr bool kDense = std::is_same<Chunks, dense_chunks>::value;
    if constexpr (!tc_kind<TYPE>::kInorder)
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
    return plan(static_cast<int>(x_rows), static_cast<int>(ne0), row_bytes, 1, p);
}

int tc_gemv(uint32_t type, const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, int T, float *y,
            cudaStream_t s) {
    if (T < 1 || T > kTcMaxTokens) return -1;
    const dense_chunks ch = {w, rb, n_out, T, y};
    const int n_chunks = (n_out + kTile - 1) / kTile;
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        rc = launch_tc<decltype(t)::value>(ch, n_chunks, ne0, x, T, ne0, rb, T > kTile, s);
    });
    return rc;
}

int tc_gemv_experts(uint32_t type, const tc_expert_job &job, int ne0, cudaStream_t s) {
    expert_chunks ch;
    ch.j = job;
    ch.cpp = (job.n_part + kTile - 1) / kTile;
    const int nx = (job.n_items + job.x_div - 1) / job.x_div, n_chunks = job.n_items * job.parts * ch.cpp;
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        rc = launch_tc<decltype(t)::value>(ch, n_chunks, ne0, job.x, nx, job.x_stride, job.rb, false, s);
    });
    return rc;
}

} // namespace ts_cu
