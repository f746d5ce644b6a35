// Decode products on the tensor cores: y = W·x for up to 16 tokens (or the items of an expert
// product), Q4_K, Q5_K (K-quant super-blocks) and Q6_K, Q8_0, Q5_0 (MMAs in input order) weights in
// their file encoding. The contract is gemv_tc.h's; the lane arithmetic
// (fragments, x in fp16, exactness) is gemv_tc.cuh's, shared with a host emulation test.
//
// Schedule. Decode products are memory-bound: everything here serves keeping enough weight bytes in
// flight from the first cycle on.
//  * Output rows are cut into chunks of 8 (one MMA tile, all its inputs); chunk c belongs to thread
//    block c mod grid, and the grid is resident (1-2 blocks an SM, as shared memory allows). Chunks are 16
//    rows with the weights as the MMAs' A operand, the tokens as B in groups of 8 (two groups for dense
//    products of 9–16 tokens: the weights decoded once, each group its own MMAs, so a token's sums do not
//    depend on the tokens beside it); TURBOSPARK_TC_WA=0: 8 rows, the weights as B, up to 16 tokens in the
//    MMAs' rows.
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
//    rotates from chunk to chunk, so uneven splits even out), then the warp of the last class (the least
//    work) adds the partial sums in class order: results are deterministic and independent of the grid.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/cuda_device.h"
#include "cuda/gemv_tc_dot.cuh"
#include "cuda/layers.h"
#include "cuda/gemv_tc.h"
#include "cuda/matmul.h"
#include "cuda/tc_stage.cuh"
#include "cuda/pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
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
    const float *xp;  // XROW: its x row where that is not the kernel's x + xrow·x_stride, else nullptr
    // planned chunks: the items of its tile (nt of them, in a plan's sorted list): token i is item
    // items[i], its x row x + ⌊items[i] / x_div⌋·x_stride (gathered into staged rows 0 .. nt − 1), its
    // outputs y + items[i]·ystride; nullptr for the other chunks
    const int32_t *items;
    int tile; // expert chunks: the chunk's row tile within its part (the MoE combine's counter)
};

// ts_cuda_matmul: chunk c is rows R·c .. R·c + R − 1 for all T tokens.
template <int ROWS> struct dense_chunks {
    static constexpr int R = ROWS;
    static constexpr bool kDense = true, kXRow = false, kGather = false, kFused = false;
    const uint8_t *w;
    size_t rb;
    int n_out, T;
    float *y;
    __device__ bool after_wait() const { return false; } // weights never depend on the kernel before
    __device__ chunk_t at(int c) const {
        return {w + static_cast<size_t>(c) * R * rb,
                min(R, n_out - c * R),
                0,
                T,
                y + c * R,
                n_out,
                false,
                nullptr,
                nullptr,
                0};
    }
};

// A job's chunks of R rows, counted for the chunk lists below: cpp a part, per = parts·cpp an item (or a plan's
// tile), as divisors by launch constants (tc_div); split(c) gives chunk c's item or tile, part and chunk in it.
struct job_chunks {
    tc_div cpp, per;
    job_chunks() = default;
    job_chunks(const tc_expert_job &j, int R)
        : cpp(static_cast<uint32_t>((j.n_part + R - 1) / R)), per(static_cast<uint32_t>(j.parts()) * cpp.d) {}
    __device__ void split(int c, int &i, int &part, int &cc) const {
        i = per.div(c);
        const int r = c - i * static_cast<int>(per.d);
        part = cpp.div(r), cc = r - part * static_cast<int>(cpp.d);
    }
};

// ts_cuda_matmul_experts: item i's chunks are those of its part 0, then of its part 1. XROW: the block
// stages one x row at a time, its chunks' (a block takes a contiguous range of chunks, so an item's chunks
// mostly fall to one block and its x row is staged once there). FUSED: the MoE's down launch at one token,
// with the SwiGLU of gate and up rows (j.up_off) and the combine (j.cmb_count) as the job says.
template <int ROWS, bool XROW, bool FUSED = false> struct expert_chunks {
    static constexpr int R = ROWS;
    static constexpr bool kDense = false, kXRow = XROW, kGather = false, kFused = FUSED;
    static_assert(!FUSED || XROW, "the MoE's down launch stages one x row at a time");
    tc_expert_job j;
    job_chunks n; // its items' chunks
    tc_div xd;    // j.x_div
    expert_chunks(const tc_expert_job &job) : j(job), n(job, R), xd(static_cast<uint32_t>(job.x_div)) {}
    __device__ bool after_wait() const { return j.ids != nullptr; } // the ids come from the router kernel
    __device__ chunk_t at(int c) const {
        int i, part, cc;
        n.split(c, i, part, cc);
        if (i >= j.n_items) { // the shared expert's item of token s (sh_rows is a multiple of R)
            const int s = i - j.n_items, o = part * j.n_part + cc * R;
            const uint8_t *w = o < j.sh_rows ? j.sw0 + static_cast<size_t>(o) * j.rb
                                             : j.sw1 + static_cast<size_t>(o - j.sh_rows) * j.rb;
            return {w,
                    min(R, j.n_part - cc * R),
                    s,
                    1,
                    j.sy + static_cast<size_t>(s) * j.sy_stride + o,
                    0,
                    false,
                    j.sx ? j.sx + static_cast<size_t>(s) * static_cast<size_t>(j.sx_stride) : nullptr,
                    nullptr,
                    cc};
        }
        const int e = j.ids ? __ldg(j.ids + i) : 0;
        const bool bad = e < 0 || e > j.e_max;
        const size_t row = static_cast<size_t>(bad ? 0 : e) * static_cast<size_t>(j.rows_per_expert) +
                           static_cast<size_t>(j.row_off) + static_cast<size_t>(cc) * R;
        return {(part ? j.w1 : j.w0) + row * j.rb,
                min(R, j.n_part - cc * R),
                xd.div(i),
                1,
                j.y + static_cast<size_t>(i) * static_cast<size_t>(j.y_stride) + part * j.n_part + cc * R,
                0,
                bad,
                nullptr,
                nullptr,
                cc};
    }
};

// ts_cuda_matmul_experts_planned: the tiles of a grouped expert plan (gemm.h; up to kTcPlanTile items of one
// expert each), tile q's chunks those of its part 0, then of its part 1, every chunk taking all the tile's
// items as its tokens, so that an expert's weights are read once a tile instead of once an item. The tiles
// in use (*n_tiles) are known on the device only: the launch is sized for the plan's bound and a block takes
// a contiguous range of the chunks in use, read after the wait (the plan is built by the kernel before).
template <int ROWS> struct planned_chunks {
    static constexpr int R = ROWS;
    static constexpr bool kDense = false, kXRow = false, kGather = true, kFused = false;
    tc_expert_job j; // the plan's items stand for ids
    const int32_t *sorted;
    const int4 *tiles; // {expert or −1, first position in sorted, count, index among the expert's tiles}
    const int32_t *n_tiles;
    job_chunks n; // its tiles' chunks
    __device__ bool after_wait() const { return true; }
    __device__ int count() const { return *n_tiles * static_cast<int>(n.per.d); } // the chunks in use
    __device__ chunk_t at(int c) const {
        int q, part, cc;
        n.split(c, q, part, cc);
        const int4 ti = tiles[q];
        const bool bad = ti.x < 0 || ti.x > j.e_max;
        const size_t row = static_cast<size_t>(bad ? 0 : ti.x) * static_cast<size_t>(j.rows_per_expert) +
                           static_cast<size_t>(j.row_off) + static_cast<size_t>(cc) * R;
        return {(part ? j.w1 : j.w0) + row * j.rb,
                min(R, j.n_part - cc * R),
                0,
                ti.z,
                j.y + part * j.n_part + cc * R,
                j.y_stride,
                bad,
                nullptr,
                sorted + ti.y,
                cc};
    }
};

// The gathered x rows of a planned chunk: row r of the staging is item items[r]'s, x + ⌊item / xd⌋·stride.
struct listed_rows {
    const float *x;
    int64_t stride;
    const int32_t *items;
    int xd;
    __device__ static constexpr bool pre_round() { return false; }
    __device__ const float *operator()(int r) const {
        return x + static_cast<size_t>(__ldg(items + r) / xd) * static_cast<size_t>(stride);
    }
    template <bool COH> __device__ void load(const float *p, bool ok, float (&v)[16]) const {
        load_unit<COH>(p, ok, v);
    }
};

// Rows of gate values with the up values up floats further: a unit's inputs are h = silu(gate)·up, as the
// MoE's swiglu_kernel computes them (moe.cu; zeros past the row, as silu(0)·0), and with pre (the routed rows
// where that kernel rounds h per x group) rounded as it rounds them, so that the staging's own rounding sees
// the very values it would have read (once rounded, a value mostly stays put, but where a group's max rounds
// up to 2^15 the staging picks the next scale down and tiny values or sums may lose a last bit).
struct swiglu_rows {
    strided_rows rows;
    int64_t up;
    bool pre;
    __device__ const float *operator()(int r) const { return rows(r); }
    __device__ bool pre_round() const { return pre; }
    template <bool COH> __device__ void load(const float *p, bool ok, float (&v)[16]) const {
        float u[16];
        load_unit<COH>(p, ok, v);
        load_unit<COH>(ok ? p + up : p, ok, u);
#pragma unroll
        for (int i = 0; i < 16; i++) v[i] = ts_dsilu(v[i]) * u[i];
    }
};

// The MoE combine in its down launch (tc_expert_job.cmb_count), by warp 0 of a block once all its chunks'
// outputs are stored (by several warps: a block barrier before it): the warp's fence (release, cumulative over
// the stores the barrier ordered before it), then each chunk counts itself in its row
// tile's counter, a lane a chunk; the block that completes a tile combines its rows, reading the other blocks'
// outputs through L2 (count, fence, loads). Counting at the end keeps fences out of the chunk loop, where warp 0
// would stall every chunk while the others wait for it at the next barrier.
template <int R, class Chunks> __device__ void combine_tiles(const Chunks &ch, int c0, int n_mine, int lane) {
    const tc_expert_job &j = ch.j;
    const unsigned total = static_cast<unsigned>(j.n_items + j.sh_items);
    __syncwarp();
    __threadfence();
    for (int m0 = 0; m0 < n_mine; m0 += 32) {
        const int m = m0 + lane;
        int tile = 0;
        bool last = false;
        if (m < n_mine) {
            tile = ch.at(c0 + m).tile;
            last = atomicAdd(j.cmb_count + tile, 1u) + 1u == total;
        }
        unsigned done = __ballot_sync(0xffffffffu, last);
        if (!done) continue;
        __threadfence(); // every contributor's stores, before the loads (acquire)
        __syncwarp();
        while (done) {
            const int src = __ffs(done) - 1;
            done &= done - 1;
            const int t = __shfl_sync(0xffffffffu, tile, src), o = t * R + lane;
            if (lane < R && o < j.n_part) {
                float *sy = j.sy + o;
                *sy = ts_dmoe_combine(__ldcg(sy), *j.cmb_sg, j.y + o, j.y_stride, j.cmb_tw, j.n_items,
                                      ts_dload_l2{});
            }
            if (lane == src) j.cmb_count[t] = 0; // the next launch's (a kernel boundary away)
        }
    }
}

// Where token i of chunk k puts its outputs (row 0): its item's row (planned chunks) or the i-th at ystride.
__device__ __forceinline__ float *out_row(const chunk_t &k, int i) {
    const size_t r = k.items ? static_cast<size_t>(__ldg(k.items + i)) : static_cast<size_t>(i);
    return k.y + r * static_cast<size_t>(k.ystride);
}

// A weights-as-A chunk's sums of lane (g, t) into its outputs: rows g (s.x, s.y) and g + 8 (s.z, s.w) of tokens
// t0 and t0 + 1 (x, z and y, w), NaN for a bad chunk.
__device__ __forceinline__ void store_wa(const chunk_t &k, int t0, int g, float4 s) {
    if (t0 >= k.nt) return;
    if (k.bad) s.x = s.y = s.z = s.w = __int_as_float(0x7fffffff);
    float *y0 = out_row(k, t0);
    if (g < k.nr) y0[g] = s.x;
    if (g + 8 < k.nr) y0[g + 8] = s.z;
    if (t0 + 1 < k.nt) {
        float *y1 = out_row(k, t0 + 1);
        if (g < k.nr) y1[g] = s.y;
        if (g + 8 < k.nr) y1[g + 8] = s.w;
    }
}

// ---- phase stamps (bench_cuda_matmul; ts_cuda_matmul_tc_stamps) ---------------------------------
//
// Thread 0 of a block keeps kStampWords stamps in shared memory: clock64 at entry (0), after issuing the
// first copies (1), after the dependency wait (2), after staging x (3), at the end (4); %globaltimer at entry
// and end (5, 6); its chunks (7); and for its first kStampChunks chunks j, clock64 when the weights had landed
// (8 + 2j) and after the chunk's barrier (9 + 2j). With a buffer set, block b copies them to c_stamps +
// b·kStampWords at its end. (A stamp is a register read and a shared store by one thread; a pointer held for
// them through the kernel cost up to 30 registers.)
constexpr int kStampChunks = 8, kStampWords = 8 + 2 * kStampChunks;
static_assert(kStampWords == TS_CUDA_TC_STAMP_WORDS, "matmul.h tells the stamps' size");
// the kernel's static shared memory: the stamps, padded to 128 bytes (the dynamic array's alignment follows)
constexpr size_t kStaticSmem = (kStampWords * sizeof(long long) + 127) & ~static_cast<size_t>(127);
__constant__ long long *c_stamps;
__constant__ int c_stamp_blocks;

__device__ __forceinline__ long long global_ns() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- the kernel ----------------------------------------------------------------------------------

// Chunks::R = kTileWa: the weights as the MMAs' A operand (chunk_part_wa: rows g and g + 8 of lane (g, t),
// tokens 2t and 2t + 1 of up to 8, lane (g, t)'s B column token g's x).
template <int TYPE, class Chunks, int kWarps, bool PAIR, bool W16>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_tc_kernel(const Chunks ch, int n_chunks, int ne0, const float *__restrict__ x, int nx,
                   int64_t x_stride, int ns, int ahead, int row_stride, uint32_t rb, int lanes) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int nsb = ne0 / kTcSuper;
    constexpr int R = Chunks::R;
    constexpr bool WA = R == kTileWa;
    constexpr int NG = WA && W16 ? 2 : 1; // token groups of 8 a chunk (the weights as A: 9–16 tokens in two)
    const tc_layout L(kWarps, nx, ne0, ns, row_stride, NG);
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm);
    float4 *red = reinterpret_cast<float4 *>(sm + L.red);
    float *xsc = reinterpret_cast<float *>(sm + L.xsc);
    uint2 *xsum = reinterpret_cast<uint2 *>(sm + L.xsum);
    uint32_t *xs = reinterpret_cast<uint32_t *>(sm + L.xs);
    uint8_t *stages = sm + L.stages;
    static_assert(!WA || !PAIR, "the weights-as-A chunks take one super-block a pass");
    // this block's chunks: c0, c0 + cstep, ... (n_mine of them): every grid-th, or (XROW, planned chunks) a
    // contiguous range; planned chunks count theirs after the wait
    constexpr bool XR = Chunks::kXRow, GA = Chunks::kGather, RANGE = XR || GA;
    const int b = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
    int c0, cstep, n_mine;
    auto mine = [&](int n) {
        c0 = RANGE ? static_cast<int>(static_cast<int64_t>(b) * n / grid) : b;
        cstep = RANGE ? 1 : grid;
        n_mine =
            RANGE ? static_cast<int>(static_cast<int64_t>(b + 1) * n / grid) - c0 : (n - b + grid - 1) / grid;
    };
    mine(n_chunks);
    __shared__ long long stamps[kStampWords]; // thread 0's, copied out at the end where a buffer is set
    auto stamp = [&](int i) {
        if (threadIdx.x == 0) stamps[i] = clock64();
    };
    stamp(0);
    if (threadIdx.x == 0) stamps[5] = global_ns();

    pdl_trigger();
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns; s++) mbar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    // warp 0: chunk j of this block into stage sl = j % ns, lane 0 announcing its bytes, then one copy a row,
    // the rows' copies issued side by side by the first `lanes` lanes (32; 1 as one thread issued them, one
    // after another, holding warp 0 and so the chunk's barrier: TURBOSPARK_TC_ISSUE_LANES, measurements)
    auto issue = [&](int j, int sl) {
        const chunk_t k = ch.at(c0 + j * cstep);
        uint64_t *bar = &bars[sl];
        if (k.bad) {
            if (lane == 0) mbar_arrive(bar);
            return;
        }
        if (lane == 0) mbar_expect(bar, static_cast<uint32_t>(k.nr) * rb);
        __syncwarp(); // the bytes announced before any lane's copy can complete on the barrier
        uint8_t *dst = stages + static_cast<size_t>(sl) * R * row_stride;
        if (row_stride == static_cast<int>(rb)) { // rows not a multiple of 16 bytes: the whole chunk at once
            if (lane == 0) bulk_copy(dst, k.w, static_cast<uint32_t>(k.nr) * rb, bar);
        } else {
            for (int r = lane; r < k.nr && lane < lanes; r += lanes)
                bulk_copy(dst + r * row_stride, k.w + static_cast<size_t>(r) * rb, rb, bar);
        }
        __syncwarp();
    };
    // `ahead` chunks in flight at the start (1 .. ns): with ahead = ns a stage is refilled when its chunk's
    // sums are done; with fewer, chunk j + ahead is issued as soon as chunk j has landed (its stage held
    // chunk j + ahead − ns ≤ j − 1, whose sums every warp is past)
    const bool after = ch.after_wait();
    if (!after && warp == 0)
        for (int j = 0; j < ahead && j < n_mine; j++) issue(j, j);
    stamp(1);
    pdl_wait();
    if constexpr (GA) mine(min(ch.count(), n_chunks)); // after_wait() holds: nothing issued yet
    if (after && warp == 0)
        for (int j = 0; j < ahead && j < n_mine; j++) issue(j, j);
    stamp(2);

    // x rows r0 .. r0 + n − 1 into the staging (all of them up front, or XROW each chunk's when it changes,
    // one round of loads at a time: the staging then sits inside the chunk loop)
    constexpr int kRounds = XR || GA ? 1 : kStageRounds; // inside the chunk loop: one round (registers)
    auto stage_rows = [&](auto rows, int n) {
        if constexpr (tc_kind<TYPE>::kInorder)
            stage_x_inorder_rows<tc_kind<TYPE>::G, false, false, 0, kRounds>(rows, n, ne0, xs, xsc);
        else
            stage_x_kquant_rows<false, false, 0, kRounds>(rows, n, nsb, xs, xsum, xsc);
        __syncthreads();
    };
    // (routed: an item's row, not the shared expert's own, which the SwiGLU kernel does not round)
    auto stage = [&](const float *xr0, int n, bool routed = true) {
        if constexpr (Chunks::kFused)
            if (ch.j.up_off)
                return stage_rows(
                    swiglu_rows{strided_rows{xr0, x_stride}, ch.j.up_off, routed && ch.j.pre_round}, n);
        stage_rows(strided_rows{xr0, x_stride}, n);
    };
    if constexpr (!XR && !GA) stage(x, nx);
    stamp(3);
    const float *staged = nullptr;         // XROW: the x row in the staging
    const int32_t *staged_items = nullptr; // planned chunks: the tile whose items' rows are in the staging

    const int g = lane >> 2, t = lane & 3;
    int sl = 0;          // chunk j's stage, j % ns
    uint32_t phase = 0u; // the parity of ⌊j / ns⌋, its stage's barrier phase
    for (int j = 0; j < n_mine; j++) {
        const chunk_t k = ch.at(c0 + j * cstep);
        if constexpr (XR) {
            const float *xp = k.xp ? k.xp : x + static_cast<size_t>(k.xrow) * static_cast<size_t>(x_stride);
            if (xp != staged) { // every warp is past the last chunk's sums (the barrier at its end)
                stage(xp, 1, !k.xp);
                staged = xp;
            }
        }
        if constexpr (GA)
            if (k.items != staged_items) { // the same rule; the tile's items are its tokens 0 .. nt − 1
                stage_rows(listed_rows{x, x_stride, k.items, ch.j.x_div}, k.nt);
                staged_items = k.items;
            }
        const int x0 = XR || GA ? 0 : k.xrow; // the chunk's first token's row in the staging
        mbar_wait(&bars[sl], phase);
        if (j < kStampChunks) stamp(8 + 2 * j);
        if (ahead < ns && warp == 0 && j + ahead < n_mine)
            issue(j + ahead, sl + ahead < ns ? sl + ahead : sl + ahead - ns);
        const uint8_t *st = stages + static_cast<size_t>(sl) * R * row_stride;
        // lane (g, t) computes the sums of token g (and, W16, of token g + 8: MMA rows g and g + 8 depend on
        // A rows g and g + 8 only); lanes of a token beyond the chunk's read token 0's x and their sums are
        // never stored, so the loads need no branch. WA: x row xr is the lane's B column (token g), x0 and x1
        // its C columns' (tokens 2t, 2t + 1), the same rule for tokens beyond the chunk's.
        // WA, W16: a second group of 8 tokens, 8 .. 15, with the same rule (NG groups, their partial sums apart)
        const int xr = x0 + (g < k.nt ? g : 0), xr8 = x0 + (g + 8 < k.nt ? g + 8 : 0);
        float4 acc[NG];
        if constexpr (WA) {
            int xrs[NG], x0s[NG], x1s[NG];
#pragma unroll
            for (int q = 0; q < NG; q++) {
                const int b8 = 8 * q;
                xrs[q] = x0 + (b8 + g < k.nt ? b8 + g : 0);
                x0s[q] = x0 + (b8 + 2 * t < k.nt ? b8 + 2 * t : 0);
                x1s[q] = x0 + (b8 + 2 * t + 1 < k.nt ? b8 + 2 * t + 1 : 0);
            }
            chunk_part_wa<TYPE, kWarps, NG>(st, row_stride, xs, xsum, xsc, ne0, xrs, x0s, x1s, j, warp, g, t,
                                            acc);
        } else {
            acc[0] = chunk_part<TYPE, kWarps, PAIR, W16>(st, row_stride, xs, xsum, xsc, ne0, xr, xr8, j, warp,
                                                         g, t);
        }
        float4 *part = red + (j & 1) * NG * kWarps * 32; // group q's at part + q·kWarps·32
#pragma unroll
        for (int q = 0; q < NG; q++) part[q * kWarps * 32 + warp * 32 + lane] = acc[q];
        __syncthreads(); // every warp is done with stage j % ns and has written its partial sums
        if (j < kStampChunks) stamp(9 + 2 * j);
        if (ahead == ns && warp == 0 && j + ns < n_mine) issue(j + ns, sl);
        if (++sl == ns) sl = 0, phase ^= 1u;
        // the chunk's sums by the warp of the last class (kWarps − 1, the fewest super-blocks or groups, none
        // where a row has fewer than kWarps): the others go on to the next chunk, warp 0 issuing its copies
        const int rw = (2 * kWarps - 1 - j % kWarps) % kWarps;
#pragma unroll
        for (int q = 0; q < NG; q++) {
            const int t0 = 8 * q + 2 * t; // rows g, g + 8 of tokens t0 (s.x, s.z) and t0 + 1 (s.y, s.w)
            if (WA && warp == rw && t0 < k.nt)
                store_wa(k, t0, g, sum_classes<kWarps>(part + q * kWarps * 32, j, lane));
        }
        if (!WA && warp == rw && g < k.nt) {
            float4 s = sum_classes<kWarps>(part, j, lane);
            if (k.bad) s.x = s.y = s.z = s.w = __int_as_float(0x7fffffff);
            float *yt = out_row(k, g);
            if (2 * t < k.nr) yt[2 * t] = s.x;
            if (2 * t + 1 < k.nr) yt[2 * t + 1] = s.y;
            if (W16 && g + 8 < k.nt) {
                float *y8 = out_row(k, g + 8);
                if (2 * t < k.nr) y8[2 * t] = s.z;
                if (2 * t + 1 < k.nr) y8[2 * t + 1] = s.w;
            }
        }
    }
    if constexpr (Chunks::kFused) // (a contiguous range of chunks: XROW)
        if (ch.j.cmb_count) {     // every warp's stores of the block's outputs before warp 0's fence
            __syncthreads();
            if (warp == 0) combine_tiles<R>(ch, c0, n_mine, lane);
        }
    stamp(4);
    if (threadIdx.x == 0 && c_stamps && b < c_stamp_blocks) {
        stamps[6] = global_ns(), stamps[7] = n_mine;
        for (int i = 0; i < kStampWords; i++) c_stamps[static_cast<size_t>(b) * kStampWords + i] = stamps[i];
    }
}

// ---- launch --------------------------------------------------------------------------------------

struct tc_plan {
    int ns;         // stages of the weight ring
    int ahead;      // chunks in flight at a block's start (≤ ns)
    int blocks;     // the grid
    int row_stride; // bytes of a stage row
    int warps;      // warps a block
    size_t smem;    // shared memory a block
};

// Tuning knobs for measurements (read once): TURBOSPARK_TC_WARPS (4 or 8 warps a block),
// TURBOSPARK_TC_PER_SM (the most blocks an SM, 1..8), TURBOSPARK_TC_AHEAD and TURBOSPARK_TC_PAIR (below).
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
// At most kAhead chunks of a block in flight at its start, the next issued as one lands: the first chunks
// land sooner, so their sums overlap the later ones' copies (BENCHMARKS.md, run 82). TURBOSPARK_TC_AHEAD=n
// (1 .. 7) for measurements, 0: every stage's at once, each refilled when its sums are done. The same sums.
constexpr int kAhead = 2;
int tc_ahead() {
    static const int n = env_int("TURBOSPARK_TC_AHEAD", kAhead, 0, kMaxStages - 1);
    return n;
}
// The lanes of warp 0 that issue a chunk's row copies side by side: 32, or TURBOSPARK_TC_ISSUE_LANES=1 for
// measurements (one thread, as before). The same sums.
int tc_issue_lanes() {
    static const int n = env_int("TURBOSPARK_TC_ISSUE_LANES", 32, 1, 32) == 1 ? 1 : 32;
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
} // namespace

// Dense products of 9–16 tokens a launch take the weights as A too, two groups of 8 tokens a chunk, so every
// token's sums are those it gets alone (TURBOSPARK_TC_WA16=0: as B, 16 tokens in the MMAs' rows; measurements).
bool tc_wa16() {
    static const bool on = env_int("TURBOSPARK_TC_WA16", 1, 0, 1) == 1;
    return on;
}

namespace {

// Blocks and stages for nx staged x rows and chunks of R rows: as many blocks an SM as shared memory allows
// (up to tc_max_per_sm(): more warps hide the MMA and load latencies) while each keeps two stages, or all
// of its chunks in flight.
// Rows whose bytes are not a multiple of 16 are staged as whole chunks of R back-to-back rows (row stride =
// rb; the callers make sure every chunk is a whole number of 8 rows and starts 16-byte aligned).
bool plan(int nx, int ne0, size_t rb, int n_chunks, int R, tc_plan &p, int max_per_sm = 0) {
    p.warps = tc_warps();
    p.row_stride = rb % 16 == 0 ? stage_row_stride(rb) : static_cast<int>(rb);
    const size_t fixed = tc_layout(p.warps, nx, ne0, 0, p.row_stride, R == kTileWa && nx > 8 ? 2 : 1).total,
                 slot = static_cast<size_t>(R) * p.row_stride;
    const int top = max_per_sm > 0 && max_per_sm < tc_max_per_sm() ? max_per_sm : tc_max_per_sm();
    for (int per_sm = top; per_sm >= 1; per_sm--) {
        // (1 KiB a block the system keeps, and the block's stamps: static shared memory)
        const size_t budget = kSmemPerSm / per_sm - 1024 - kStaticSmem;
        if (fixed + slot > budget) continue;
        p.blocks = per_sm * ts_cuda_sm_count();
        if (p.blocks > n_chunks) p.blocks = n_chunks;
        const int mine = (n_chunks + p.blocks - 1) / p.blocks;
        p.ns = static_cast<int>((budget - fixed) / slot);
        if (p.ns > kMaxStages) p.ns = kMaxStages;
        if (p.ns > mine) p.ns = mine;
        if (p.ns < 2 && mine > 1) continue;
        p.smem = fixed + static_cast<size_t>(p.ns) * slot;
        p.ahead = tc_ahead() > 0 && tc_ahead() < p.ns ? tc_ahead() : p.ns;
        return true;
    }
    return false;
}

// The blocks an SM are planned within what the kernel's registers allow too, not shared memory alone (at 8
// warps the kernels take 88–120 registers a thread: two blocks an SM, where shared memory may plan four, and a
// grid of four an SM ran in two waves); TURBOSPARK_TC_OCC=0 plans by shared memory alone (measurements; read
// once). The sums do not depend on it.
bool tc_occ() {
    static const bool on = env_int("TURBOSPARK_TC_OCC", 1, 0, 1) == 1;
    return on;
}

template <int TYPE, class Chunks, int NW, bool PAIR, bool W16>
int launch_tc_w(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
                const tc_plan &p0, cudaStream_t s) {
    const auto kernel = gemv_tc_kernel<TYPE, Chunks, NW, PAIR, W16>;
    static bool opted_in = false; // one flag per instantiation
    static int by_regs = 0;       // blocks an SM the registers (and warps) allow, without shared memory
    if (!opted_in) {
        cudaFuncAttributes fa; // the plan leaves kStaticSmem a block for the static shared memory
        if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.sharedSizeBytes > kStaticSmem ||
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kSmemPerSm - kStaticSmem)) != cudaSuccess)
            return -1;
        if (tc_occ() &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&by_regs, kernel, NW * 32, 0) != cudaSuccess)
            by_regs = 0, cudaGetLastError();
        opted_in = true;
    }
    tc_plan p = p0, q;
    if (tc_occ() && by_regs > 0 && p.blocks > by_regs * ts_cuda_sm_count() &&
        plan(nx, ne0, rb, n_chunks, Chunks::R, q, by_regs))
        p = q;
    return launch(kernel, dim3(static_cast<unsigned>(p.blocks)), dim3(NW * 32), p.smem, s, ch, n_chunks, ne0,
                  x, nx, x_stride, p.ns, p.ahead, p.row_stride, static_cast<uint32_t>(rb),
                  tc_issue_lanes()) == cudaSuccess
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

// w16: a chunk has 9–16 tokens (dense products only): the MMAs' A rows g + 8 carry tokens 8–15, or (chunks of
// kTileWa rows, the weights as A, never pairs) a second group of MMAs does.
template <int TYPE, class Chunks>
int launch_tc(const Chunks &ch, int n_chunks, int ne0, const float *x, int nx, int64_t x_stride, size_t rb,
              bool w16, cudaStream_t s) {
    tc_plan p;
    if (n_chunks <= 0) return 0;
    if (!plan(nx, ne0, rb, n_chunks, Chunks::R, p)) return -1;
    constexpr bool kDense = Chunks::kDense, kPair = !tc_kind<TYPE>::kInorder && Chunks::R == kTile;
    if constexpr (kPair)
        if (tc_pair()) {
            if constexpr (kDense && Chunks::R == kTile)
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

bool tc_gemv_takes(uint32_t type, int64_t ne0, int64_t x_rows, size_t row_bytes, bool whole_chunks,
                   int64_t n_chunks) {
    const int G = tc_gemv_group(type);
    if (!G || ne0 <= 0 || ne0 % G != 0 || ne0 > (1 << 20) || x_rows < 1 || x_rows > 1024) return false;
    if (row_bytes != ts_row_size(type, ne0)) return false;
    if (row_bytes % 16 != 0 && !(whole_chunks && (kTile * row_bytes) % 16 == 0)) return false;
    tc_plan p;
    return plan(static_cast<int>(x_rows), static_cast<int>(ne0), row_bytes,
                static_cast<int>(n_chunks < 1         ? 1
                                 : n_chunks > INT_MAX ? INT_MAX
                                                      : n_chunks),
                kTile, p);
}

int tc_gemv(uint32_t type, const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, int T, float *y,
            cudaStream_t s) {
    if (T < 1 || T > kTcMaxTokens) return -1;
    const int n_chunks = (n_out + kTile - 1) / kTile, n_wa = (n_out + kTileWa - 1) / kTileWa;
    const bool wa = tc_dense_wa(ne0, rb, n_out, T);
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        if (wa)
            rc = launch_tc<decltype(t)::value>(dense_chunks<kTileWa>{w, rb, n_out, T, y}, n_wa, ne0, x, T,
                                               ne0, rb, T > 8, s);
        else
            rc = launch_tc<decltype(t)::value>(dense_chunks<kTile>{w, rb, n_out, T, y}, n_chunks, ne0, x, T,
                                               ne0, rb, T > kTile, s);
    });
    return rc;
}

namespace {

// Runs an expert job with chunks of R rows, staging all nx x rows or (XROW) one at a time (FUSED: the MoE's
// down launch, job.up_off and job.cmb_count).
template <int R, bool XROW, bool FUSED>
int experts_r(uint32_t type, const tc_expert_job &job, int ne0, int nx, cudaStream_t s) {
    const expert_chunks<R, XROW, FUSED> ch(job);
    const int n_chunks = (job.n_items + job.sh_items) * static_cast<int>(ch.n.per.d);
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        rc = launch_tc<decltype(t)::value>(ch, n_chunks, ne0, job.x, XROW ? 1 : nx, job.x_stride, job.rb,
                                           false, s);
    });
    return rc;
}

// The job's x rows, and whether they are staged one at a time.
int job_x_rows(const tc_expert_job &job, bool *xrow) {
    const int nx = (job.n_items + job.x_div - 1) / job.x_div;
    *xrow = tc_xrow_mode() == 2 || tc_experts_staged_rows(nx) < nx;
    return nx;
}

template <bool XROW, bool FUSED = false>
int experts_x(uint32_t type, const tc_expert_job &job, int ne0, int nx, cudaStream_t s) {
    if (tc_experts_wa(job, ne0)) return experts_r<kTileWa, XROW, FUSED>(type, job, ne0, nx, s);
    return experts_r<kTile, XROW, FUSED>(type, job, ne0, nx, s);
}

} // namespace

bool tc_dense_wa(int ne0, size_t rb, int n_out, int T) {
    tc_plan p;
    return tc_wa() && (T <= 8 || (T <= kTcMaxTokens && tc_wa16())) &&
           plan(T, ne0, rb, (n_out + kTileWa - 1) / kTileWa, kTileWa, p);
}

bool tc_experts_one_row(const tc_expert_job &job) {
    bool xrow;
    job_x_rows(job, &xrow);
    return xrow;
}

bool tc_experts_wa(const tc_expert_job &job, int ne0) {
    bool xrow;
    const int nx = job_x_rows(job, &xrow);
    const int n_wa = (job.n_items + job.sh_items) * job.parts() * ((job.n_part + kTileWa - 1) / kTileWa);
    tc_plan p;
    return tc_wa() && plan(xrow ? 1 : nx, ne0, job.rb, n_wa, kTileWa, p);
}

int tc_xrow_mode() {
    static const int m = env_int("TURBOSPARK_TC_XROW", 1, 0, 2);
    return m;
}

int64_t tc_experts_staged_rows(int64_t x_rows) {
    const int m = tc_xrow_mode();
    return m == 2 || (m == 1 && x_rows > kTcExpertXRows) ? 1 : x_rows;
}

int tc_gemv_experts(uint32_t type, const tc_expert_job &job, int ne0, cudaStream_t s) {
    bool xrow;
    const int nx = job_x_rows(job, &xrow);
    if (job.up_off || job.cmb_count) { // the MoE's down launch at one token (tc_expert_job)
        if (!xrow || (job.cmb_count && (job.parts() != 1 || job.sh_items != 1 || !job.cmb_sg || !job.cmb_tw)))
            return -1;
        return experts_x<true, true>(type, job, ne0, nx, s);
    }
    return xrow ? experts_x<true>(type, job, ne0, nx, s) : experts_x<false>(type, job, ne0, nx, s);
}

namespace {
// The planned launch's chunks for a plan of up to max_tiles tiles: a bound (the tiles in use are known on the
// device only), or 0 past INT_MAX.
int planned_chunks_bound(const tc_expert_job &job, int64_t max_tiles) {
    const int64_t n = max_tiles * job.parts() * ((job.n_part + kTileWa - 1) / kTileWa);
    return n > INT_MAX ? 0 : static_cast<int>(n);
}
} // namespace

bool tc_planned_takes(const tc_expert_job &job, int ne0, int64_t max_tiles) {
    const int n = planned_chunks_bound(job, max_tiles);
    tc_plan p;
    return tc_wa() && n > 0 && job.sh_items == 0 && job.up_off == 0 && !job.cmb_count &&
           plan(kTcPlanTile, ne0, job.rb, n, kTileWa, p);
}

int tc_gemv_experts_planned(uint32_t type, const tc_expert_job &job, const ts_cuda_expert_plan &plan, int ne0,
                            cudaStream_t s) {
    if (plan.tile < 1 || plan.tile > kTcPlanTile || !plan.sorted || !plan.tiles || !plan.n_tiles ||
        !tc_planned_takes(job, ne0, plan.max_tiles))
        return -1;
    planned_chunks<kTileWa> ch;
    ch.j = job;
    ch.sorted = plan.sorted;
    ch.tiles = static_cast<const int4 *>(plan.tiles);
    ch.n_tiles = plan.n_tiles;
    ch.n = job_chunks(job, kTileWa);
    const int n_chunks = planned_chunks_bound(job, plan.max_tiles);
    int rc = -1; // -1 for a type not in the list
    with_tc_type(type, [&](auto t) {
        rc = launch_tc<decltype(t)::value>(ch, n_chunks, ne0, job.x, kTcPlanTile, job.x_stride, job.rb, false,
                                           s);
    });
    return rc;
}

} // namespace ts_cu

extern "C" int ts_cuda_matmul_tc_stamps(long long *stamps, int blocks) {
    const int n = stamps ? blocks : 0; // (the device synchronized: launches on any stream see the new values)
    return cudaMemcpyToSymbol(ts_cu::c_stamps, &stamps, sizeof stamps) == cudaSuccess &&
                   cudaMemcpyToSymbol(ts_cu::c_stamp_blocks, &n, sizeof n) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess
               ? 0
               : -1;
}
