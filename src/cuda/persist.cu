// A chain of one-token products as one persistent kernel (persist.h says what; persist_sched.h how the
// tiles and the weight ring are dealt).
//
// A block is 8 summing warps and one copy warp. The copy warp walks the block's tiles in chain order and
// keeps the ring full: it places each tile's bytes (waiting, when there is no room, until every summing
// warp has arrived on the oldest tile's `empty` barrier) and issues its bulk copies (cp.async.bulk, one a
// row, the rows' copies from different lanes, counted on the tile's `full` barrier), whatever product the
// tile belongs to. It takes no part in the summing warps' barriers, so their tiles never wait for a copy
// to be issued. When the summing warps enter a product, each warp's lane 0 waits until the product it
// reads has counted all its tiles (an acquire load of that product's counter), then they stage x as the
// GEMV does (gemv_tc.cu, one token) but through L2, since x was written during this kernel; a product
// that reads the x already staged (the same input, as a layer's expert products) skips both. A tile's
// sums are gemv_tc.cu's chunk sums (chunk_part, sum_classes: the same super-blocks in the same warps'
// classes, added in the same order), so y equals ts_cuda_matmul's. Warp 0 stores the tile's 8 outputs;
// at the block's last tile of a product its lane 0 notes the block's count of that product's tiles, and
// adds the counts it noted to the products' counters together (one fence for all) before the block
// waits for an input, after 8 products, and at the block's end. An expert product's rows are those of the expert
// its id names, read from device memory by both sides when they enter the product; a bad id copies
// nothing (the tiles' full barriers get a plain arrival) and stores NaN.
//
// Launch: as many blocks as are resident at once (a cooperative launch, so the runtime refuses a grid
// that is not): one an SM with all its shared memory, or two where they fit (TURBOSPARK_PERSIST_PER_SM=2). The
// counters are reset by a memset before each launch. TURBOSPARK_PERSIST_WA=1: tiles of 16 rows with the
// weights as the MMAs' A operand (chunk_part_wa).
extern "C" {
#include "quant/quant.h"
}
#include "common/error.h"
#include "cuda/cuda_device.h"
#include "cuda/gemv_tc.h"
#include "cuda/gemv_tc_dot.cuh"
#include "cuda/pdl.cuh"
#include "cuda/persist.h"
#include "cuda/persist_sched.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

namespace ts_cu {

namespace {

constexpr int kWarps = 8;
constexpr size_t kSmemPerSm = 227 * 1024;
constexpr int kMaxNe0 = 16384; // x staged whole in shared memory
constexpr int kStamps = 5;     // clock64 stamps a tile (TURBOSPARK_PERSIST_STAMPS=1)

// A product as the kernel reads it.
struct chain_prod {
    const uint8_t *w; // row 0 (an expert product: expert 0's)
    const float *x;
    float *y;
    const int *ids; // an expert product: its expert at ids[0], else nullptr
    size_t estride; // bytes from one expert's rows to the next's
    uint32_t rb;    // bytes a row
    int row_stride; // staged rows' stride: 16 past a multiple of 128, or rb (then a tile is one copy)
    int type, ne0, n_out, dep, n_exp;
};

// The first weight row of product P as this launch reads it, or nullptr for an expert product whose id
// is out of range (no weights read, NaN outputs).
__device__ __forceinline__ const uint8_t *weights_of(const chain_prod &P) {
    if (!P.ids) return P.w;
    const int e = P.ids[0];
    return e >= 0 && e < P.n_exp ? P.w + static_cast<size_t>(e) * P.estride : nullptr;
}

// The counts of the products whose last tile of this block warp 0 has stored since the block last
// published (lane 0's; kPending at most): published together, one fence for all of them, before the
// block waits for an input (it may be waiting for its own counts), when the list is full, and at its end.
constexpr int kPending = 8;
struct pending_counts {
    int p[kPending], n[kPending];
    int k;
};

// Adds the pending counts after every store this thread has seen (a release pattern at GPU scope: the
// fence, then relaxed adds; the readers' ld_acquire).
__device__ __forceinline__ void publish(pending_counts &pc, int *counters) {
    if (pc.k == 0) return;
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    for (int i = 0; i < pc.k; i++)
        asm volatile("red.relaxed.gpu.global.add.s32 [%0], %1;\n" ::"l"(counters + pc.p[i]), "r"(pc.n[i])
                     : "memory");
    pc.k = 0;
}

// The summing warps' barrier (named barrier 1: the copy warp does not take part).
__device__ __forceinline__ void sum_bar() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kWarps * 32) : "memory");
}

// Bytes a tile of nr rows takes in the ring (128-byte aligned), and those its copies move.
__host__ __device__ __forceinline__ uint32_t copy_bytes(const chain_prod &P, int nr) {
    return P.row_stride == static_cast<int>(P.rb) ? (static_cast<uint32_t>(nr) * P.rb + 15u) & ~15u
                                                  : static_cast<uint32_t>(nr) * P.rb;
}
__host__ __device__ __forceinline__ uint32_t ring_bytes(const chain_prod &P, int nr) {
    return (static_cast<uint32_t>(nr) * static_cast<uint32_t>(P.row_stride) + 15u + 127u) & ~127u;
}

// A tile's partial sums for lane (g, t) (one token): gemv_tc's chunk sums (tiles of 8 rows), or WA, the
// weights as the MMAs' A operand (tiles of 16 rows; gemv_tc_dot.cuh).
template <int TYPE, bool WA>
__device__ __forceinline__ float4 tile_part(const uint8_t *st, int row_stride, const uint32_t *xs,
                                            const uint2 *xsum, const float *xsc, int ne0, int j, int warp,
                                            int g, int t) {
    if constexpr (WA) {
        const int r0[1] = {0};
        float4 acc[1];
        chunk_part_wa<TYPE, kWarps, 1>(st, row_stride, xs, xsum, xsc, ne0, r0, r0, r0, j, warp, g, t, acc);
        return acc[0];
    } else
        return chunk_part<TYPE, kWarps, false, false>(st, row_stride, xs, xsum, xsc, ne0, 0, 0, j, warp, g,
                                                      t);
}

// The chain (the comment at the top of this file). Shared memory: the tiles' full barriers in the first
// 128 bytes, x and the partial sums as the GEMV lays them out (tc_layout), the ring at ring_off. A tile's
// start in the ring is stored by the copy warp before its full barrier's arrival, so the summing warps
// read it after their wait; the slot is reused only after all of them arrived on its empty barrier.
template <bool WA>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1)
    chain_kernel(const chain_prod *__restrict__ prods, const int *__restrict__ tile0, int n, int *counters,
                 uint32_t ring_off, uint32_t ring_size, long long *stamps) {
    constexpr int R = WA ? 16 : kTcTile; // rows a tile
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ ts_ring ring;                // the copy warp's
    __shared__ uint64_t empty[TS_RING_MAX]; // tile j's bytes read by every summing warp (kWarps arrivals)
    uint64_t *full = reinterpret_cast<uint64_t *>(sm); // tile j's bytes landed (TS_RING_MAX, first 128 bytes)
    uint8_t *ring_base = sm + ring_off;
    const int total = tile0[n], grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int mine = ts_tiles_of_block(total, b, grid);
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < TS_RING_MAX; s++) mbar_init(&full[s]), mbar_init<kWarps>(&empty[s]);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        ts_ring_init(&ring, ring_size);
    }
    __syncthreads(); // the last barrier the copy warp takes part in

    if (warp == kWarps) { // the copy warp: every tile's weights, in the block's order, as the ring has room
        ts_tile_cursor pc = {0, 0};
        int pp = -1;
        chain_prod P = {};
        const uint8_t *w = nullptr; // P's rows as this launch reads them
        for (int i = 0; i < mine; i++) {
            ts_tile_seek(tile0, n, b + i * grid, &pc);
            if (pc.p != pp) P = prods[pc.p], pp = pc.p, w = weights_of(P);
            const int nr = min(R, P.n_out - pc.tile * R);
            // room for all R rows even when fewer are copied: the sums read every row of a tile (the rows
            // past nr hold stale bytes and their sums are never stored, but they must lie inside the ring)
            const uint32_t bytes = ring_bytes(P, R);
            uint32_t off = 0;
            if (lane == 0) {
                int64_t o;
                while ((o = ts_ring_place(&ring, bytes)) < 0) { // the oldest tile must be read first
                    const uint32_t r = ring.released;
                    mbar_wait(&empty[r % TS_RING_MAX], (r / TS_RING_MAX) & 1u);
                    ts_ring_release(&ring);
                }
                off = static_cast<uint32_t>(o);
                ts_ring_push(&ring, off, bytes);
                if (w)
                    mbar_expect(&full[i % TS_RING_MAX], copy_bytes(P, nr));
                else // a bad expert id: the tile is "there" at once, its bytes never read for a stored sum
                    mbar_arrive(&full[i % TS_RING_MAX]);
            }
            off = __shfl_sync(0xffffffffu, off, 0);
            if (!w) continue;
            const uint8_t *src = w + static_cast<size_t>(pc.tile) * R * P.rb;
            uint8_t *dst = ring_base + off;
            if (P.row_stride == static_cast<int>(P.rb)) {
                if (lane == 0) bulk_copy(dst, src, copy_bytes(P, nr), &full[i % TS_RING_MAX]);
            } else {
                for (int r = lane; r < nr; r += 32) // one copy a row, the rows' copies issued side by side
                    bulk_copy(dst + r * P.row_stride, src + static_cast<size_t>(r) * P.rb, P.rb,
                              &full[i % TS_RING_MAX]);
            }
            __syncwarp();
        }
        return;
    }

    // the summing warps (threads 0 .. kWarps·32 − 1; their barrier is named barrier 1)
    const int g = lane >> 2, t = lane & 3;
    ts_tile_cursor cc = {0, 0}; // the tile being summed
    int cur = -1;               // its product
    chain_prod P = {};
    const float *sx = nullptr; // the x staged (with its kind: 0 K-quant, 1 Q6_K, 2 groups of 128) ...
    int skind = -1, sne0 = 0;
    int ready = -1;                 // ... and the last product whose output this block saw complete
    int done = 0;                   // warp 0: tiles of product cur summed and stored, not yet counted
    __shared__ pending_counts pend; // warp 0, lane 0
    if (threadIdx.x == 0) pend.k = 0;
    bool bad = false; // product cur is an expert product with an out-of-range id
    const tc_layout L0(kWarps, 1, 0, 0, 0);
    float4 *red = reinterpret_cast<float4 *>(sm + L0.red);
    const uint32_t *xs = nullptr;
    const uint2 *xsum = nullptr;
    const float *xsc = nullptr;
    for (int j = 0; j < mine; j++) {
        const int gt = b + j * grid;
        ts_tile_seek(tile0, n, gt, &cc);
        long long *stamp = stamps ? stamps + kStamps * static_cast<size_t>(gt) : nullptr;
        if (stamp && threadIdx.x == 0) stamp[0] = clock64();
        if (cc.p != cur) { // a new product: its input complete, then x staged unless it is staged already
            P = prods[cc.p], cur = cc.p, bad = weights_of(P) == nullptr;
            if (P.dep >= 0 && P.dep != ready) {
                if (lane == 0) { // each warp's lane 0 sees the input complete, then its lanes read it
                    if (warp == 0) publish(pend, counters);
                    const int need = tile0[P.dep + 1] - tile0[P.dep];
                    while (ld_acquire(&counters[P.dep]) < need) __nanosleep(20);
                }
                __syncwarp();
                ready = P.dep;
            }
            if (stamp && threadIdx.x == 0) stamp[1] = clock64();
            const int kind = P.type == TS_TYPE_Q4_K || P.type == TS_TYPE_Q5_K ? 0
                             : P.type == TS_TYPE_Q6_K                         ? 1
                                                                              : 2;
            if (P.x != sx || kind != skind || P.ne0 != sne0) {
                // every warp is past the last tile's sums (its barrier below), so x can be overwritten
                const tc_layout L(kWarps, 1, P.ne0, 0, 0);
                uint32_t *xw = reinterpret_cast<uint32_t *>(sm + L.xs);
                uint2 *sw = reinterpret_cast<uint2 *>(sm + L.xsum);
                float *cw = reinterpret_cast<float *>(sm + L.xsc);
                if (kind == 0)
                    stage_x_kquant<false, true, kWarps * 32>(P.x, 1, P.ne0 / kTcSuper, P.ne0, xw, sw, cw);
                else if (kind == 1)
                    stage_x_inorder<kTcSuper, false, true, kWarps * 32>(P.x, 1, P.ne0, P.ne0, xw, cw);
                else
                    stage_x_inorder<128, false, true, kWarps * 32>(P.x, 1, P.ne0, P.ne0, xw, cw);
                xs = xw, xsum = sw, xsc = cw, sx = P.x, skind = kind, sne0 = P.ne0;
                sum_bar();
            }
            if (stamp && threadIdx.x == 0) stamp[2] = clock64();
        } else if (stamp && threadIdx.x == 0) {
            stamp[1] = stamp[2] = stamp[0];
        }
        mbar_wait(&full[j % TS_RING_MAX], static_cast<uint32_t>(j / TS_RING_MAX) & 1u);
        if (stamp && threadIdx.x == 0) stamp[3] = clock64();
        const uint8_t *st = ring_base + ts_ring_at(&ring, static_cast<uint32_t>(j));
        float4 acc;
        switch (P.type) {
        case TS_TYPE_Q4_K:
            acc = tile_part<TS_TYPE_Q4_K, WA>(st, P.row_stride, xs, xsum, xsc, P.ne0, j, warp, g, t);
            break;
        case TS_TYPE_Q5_K:
            acc = tile_part<TS_TYPE_Q5_K, WA>(st, P.row_stride, xs, xsum, xsc, P.ne0, j, warp, g, t);
            break;
        case TS_TYPE_Q6_K:
            acc = tile_part<TS_TYPE_Q6_K, WA>(st, P.row_stride, xs, xsum, xsc, P.ne0, j, warp, g, t);
            break;
        case TS_TYPE_Q8_0:
            acc = tile_part<TS_TYPE_Q8_0, WA>(st, P.row_stride, xs, xsum, xsc, P.ne0, j, warp, g, t);
            break;
        default:
            acc = tile_part<TS_TYPE_Q5_0, WA>(st, P.row_stride, xs, xsum, xsc, P.ne0, j, warp, g, t);
            break;
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[j % TS_RING_MAX]); // this warp is done with tile j's bytes
        float4 *part = red + (j & 1) * kWarps * 32;
        part[warp * 32 + lane] = acc;
        sum_bar(); // every warp's partial sums are written
        if (stamp && threadIdx.x == 0) stamp[4] = clock64();
        if (warp == 0) {
            const int nr = min(R, P.n_out - cc.tile * R);
            float *y = P.y + static_cast<size_t>(cc.tile) * R;
            if (WA ? t == 0
                   : g == 0) { // token 0: WA lanes (g, 0) rows g and g + 8, else lanes (0, t) 2t, 2t + 1
                float4 s = sum_classes<kWarps>(part, j, lane);
                if (bad) s.x = s.y = s.z = s.w = __int_as_float(0x7fffffff);
                const int r0 = WA ? g : 2 * t, r1 = WA ? g + 8 : 2 * t + 1;
                if (r0 < nr) y[r0] = s.x;
                if (r1 < nr) y[r1] = WA ? s.z : s.y;
            }
            done++;
            if (ts_tile_last_of_product(tile0, cc.p, gt, grid)) { // this block's count of the product
                __syncwarp();
                if (lane == 0) {
                    pend.p[pend.k] = cc.p, pend.n[pend.k] = done, pend.k++;
                    if (pend.k == kPending) publish(pend, counters);
                }
                done = 0;
            }
        }
    }
    if (threadIdx.x == 0) publish(pend, counters);
}

} // namespace

} // namespace ts_cu

using namespace ts_cu;

using chain_kernel_t = void (*)(const chain_prod *, const int *, int, int *, uint32_t, uint32_t, long long *);

struct ts_cuda_chain {
    chain_prod *prods; // device [n]
    int *tile0;        // device [n + 1]
    int *counters;     // device [n]
    long long *stamps; // device [kStamps · tiles] with TURBOSPARK_PERSIST_STAMPS=1, else NULL
    int *host_tile0;   // [n + 1]
    chain_kernel_t kernel;
    int n, blocks, per_sm;
    uint32_t ring_off, ring_size;
    size_t smem;
};

namespace {

bool overlaps(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) {
    return a0 < b1 && b0 < a1;
}

int check_product(const ts_cuda_chain_product *p, int i, const ts_cuda_chain_product *all, int rows,
                  char *err, size_t errlen) {
    const int G = tc_gemv_group(p->type);
    if (!G)
        return ts_errf(err, errlen,
                       "chain product %d has type %s; the chain takes Q4_K, Q5_K, Q6_K, Q8_0 and Q5_0", i,
                       ts_type_name(p->type));
    if (p->ne0 <= 0 || p->ne0 % G != 0 || p->ne0 > kMaxNe0)
        return ts_errf(err, errlen, "chain product %d has %lld inputs; %s needs a multiple of %d up to %d", i,
                       (long long)p->ne0, ts_type_name(p->type), G, kMaxNe0);
    if (p->n_out <= 0 || p->n_out > (1 << 24))
        return ts_errf(err, errlen, "chain product %d has %lld outputs (1 to 16,777,216)", i,
                       (long long)p->n_out);
    if (p->row_bytes != ts_row_size(p->type, p->ne0) || (rows * p->row_bytes) % 16 != 0)
        return ts_errf(err, errlen, "chain product %d: %zu bytes a row is not %s's row of %lld inputs", i,
                       p->row_bytes, ts_type_name(p->type), (long long)p->ne0);
    if (!p->w || !p->x || !p->y || (reinterpret_cast<uintptr_t>(p->w) & 15u) ||
        (reinterpret_cast<uintptr_t>(p->x) & 15u) || (reinterpret_cast<uintptr_t>(p->y) & 3u))
        return ts_errf(err, errlen,
                       "chain product %d: w and x must be 16-byte aligned device pointers, y 4-byte", i);
    if (p->ids &&
        ((reinterpret_cast<uintptr_t>(p->ids) & 3u) || p->n_experts < 1 || p->expert_stride % 16 != 0 ||
         p->expert_stride < static_cast<size_t>(p->n_out) * p->row_bytes))
        return ts_errf(
            err, errlen,
            "chain product %d: an expert product needs 4-byte aligned ids, at least one expert and an "
            "expert stride that is a multiple of 16 bytes and holds its %lld rows",
            i, (long long)p->n_out);
    if (p->dep < -1 || p->dep >= i)
        return ts_errf(err, errlen,
                       "chain product %d reads product %d: a product reads an earlier one or none", i,
                       p->dep);
    const uintptr_t x0 = reinterpret_cast<uintptr_t>(p->x), x1 = x0 + static_cast<size_t>(p->ne0) * 4;
    for (int k = 0; k < i; k++) {
        const uintptr_t y0 = reinterpret_cast<uintptr_t>(all[k].y),
                        y1 = y0 + static_cast<size_t>(all[k].n_out) * 4;
        if (k == p->dep && (x0 < y0 || x1 > y1))
            return ts_errf(err, errlen, "chain product %d reads product %d, but its x is not inside that y",
                           i, k);
        if (k != p->dep && overlaps(x0, x1, y0, y1))
            return ts_errf(err, errlen,
                           "chain product %d's x overlaps product %d's y, which it does not read", i, k);
    }
    const uintptr_t y0 = reinterpret_cast<uintptr_t>(p->y), y1 = y0 + static_cast<size_t>(p->n_out) * 4;
    // an expert id is read once by each side of the kernel, so it must not change while the chain runs
    const uintptr_t i0 = reinterpret_cast<uintptr_t>(p->ids), i1 = i0 + sizeof(int32_t);
    for (int k = 0; p->ids && k <= i; k++) {
        const uintptr_t a0 = reinterpret_cast<uintptr_t>(all[k].y),
                        a1 = a0 + static_cast<size_t>(all[k].n_out) * 4;
        if (overlaps(i0, i1, a0, a1))
            return ts_errf(err, errlen, "chain product %d's expert id lies in product %d's y", i, k);
    }
    for (int k = 0; k < i; k++) {
        const uintptr_t a0 = reinterpret_cast<uintptr_t>(all[k].y),
                        a1 = a0 + static_cast<size_t>(all[k].n_out) * 4;
        const uintptr_t b0 = reinterpret_cast<uintptr_t>(all[k].x),
                        b1 = b0 + static_cast<size_t>(all[k].ne0) * 4;
        if (overlaps(y0, y1, a0, a1) || overlaps(y0, y1, b0, b1))
            return ts_errf(err, errlen, "chain product %d's y overlaps product %d's x or y", i, k);
    }
    return 0;
}

int env_per_sm() {
    const char *v = getenv("TURBOSPARK_PERSIST_PER_SM");
    return v && v[0] == '2' ? 2 : 1;
}
// TURBOSPARK_PERSIST_WA=1: the weights as the MMAs' A operand, tiles of 16 rows (gemv_tc_dot.cuh)
bool env_wa() {
    const char *v = getenv("TURBOSPARK_PERSIST_WA");
    return v && v[0] == '1';
}

} // namespace

extern "C" int ts_cuda_chain_new(const ts_cuda_chain_product *p, int n, ts_cuda_chain **out, char *err,
                                 size_t errlen) {
    *out = nullptr;
    if (!p || n < 1 || n > (1 << 20)) return ts_errf(err, errlen, "a chain holds 1 to 1,048,576 products");
    chain_prod *hp = static_cast<chain_prod *>(calloc(static_cast<size_t>(n), sizeof *hp));
    int *ht0 = static_cast<int *>(calloc(static_cast<size_t>(n) + 1, sizeof *ht0));
    if (!hp || !ht0) {
        free(hp), free(ht0);
        return ts_errf(err, errlen, "out of host memory building a chain of %d products", n);
    }
    const bool wa = env_wa();
    const int R = wa ? 16 : kTcTile; // rows a tile
    const chain_kernel_t kernel = wa ? chain_kernel<true> : chain_kernel<false>;
    uint32_t ring_off = 128, max_tile = 0;
    int64_t tiles = 0;
    for (int i = 0; i < n; i++) {
        if (check_product(&p[i], i, p, R, err, errlen)) {
            free(hp), free(ht0);
            return -1;
        }
        chain_prod &c = hp[i];
        c.w = static_cast<const uint8_t *>(p[i].w), c.x = p[i].x, c.y = p[i].y;
        c.rb = static_cast<uint32_t>(p[i].row_bytes);
        c.row_stride = p[i].row_bytes % 16 == 0 ? stage_row_stride(p[i].row_bytes) : static_cast<int>(c.rb);
        c.type = static_cast<int>(p[i].type), c.ne0 = static_cast<int>(p[i].ne0);
        c.n_out = static_cast<int>(p[i].n_out), c.dep = p[i].dep;
        c.ids = p[i].ids, c.n_exp = p[i].ids ? p[i].n_experts : 0,
        c.estride = p[i].ids ? p[i].expert_stride : 0;
        const tc_layout L(kWarps, 1, c.ne0, 0, 0);
        if (L.stages > ring_off) ring_off = static_cast<uint32_t>(L.stages);
        if (ring_bytes(c, R) > max_tile) max_tile = ring_bytes(c, R);
        ht0[i] = static_cast<int>(tiles);
        tiles += (p[i].n_out + R - 1) / R;
        if (tiles > INT32_MAX / 2) {
            free(hp), free(ht0);
            return ts_errf(err, errlen, "a chain of more than 1,073,741,823 tiles of 8 rows");
        }
    }
    ht0[n] = static_cast<int>(tiles);
    ring_off = (ring_off + 127u) & ~127u;
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
        free(hp), free(ht0);
        return ts_errf(err, errlen,
                       "the chain kernel is not loadable on this device (an sm_90a build needs Hopper)");
    }
    // blocks an SM: as asked (TURBOSPARK_PERSIST_PER_SM), or fewer when their shared memory would not hold the
    // largest tile beside x, or their registers do not let that many stay resident
    int per_sm = env_per_sm(), resident = 0;
    size_t smem = 0;
    cudaError_t e = cudaSuccess;
    for (; per_sm >= 1; per_sm--) {
        smem =
            kSmemPerSm / per_sm - 1024 - fa.sharedSizeBytes; // the runtime's 1 KiB a block, the static ring
        smem &= ~static_cast<size_t>(127);
        if (smem <= ring_off || smem - ring_off < max_tile) continue;
        // the kernel's limit is one block's whole share, whatever this chain takes, so that no chain made
        // later lowers it below an earlier one's launch
        const size_t whole = (kSmemPerSm - 1024 - fa.sharedSizeBytes) & ~static_cast<size_t>(127);
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(whole));
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, (kWarps + 1) * 32, smem);
        if (e != cudaSuccess) break;
        if (resident >= per_sm) break;
    }
    if (e != cudaSuccess || per_sm < 1) {
        free(hp), free(ht0);
        if (e != cudaSuccess)
            return ts_errf(err, errlen, "sizing the chain kernel's launch failed: %s", cudaGetErrorString(e));
        return ts_errf(err, errlen, "a tile of the chain needs %u bytes of shared memory beside x's %u",
                       max_tile, ring_off);
    }
    const uint32_t ring_size = static_cast<uint32_t>(smem - ring_off);
    ts_cuda_chain *c = static_cast<ts_cuda_chain *>(calloc(1, sizeof *c));
    if (!c) {
        free(hp), free(ht0);
        return ts_errf(err, errlen, "out of host memory building a chain");
    }
    c->kernel = kernel, c->n = n, c->per_sm = per_sm, c->blocks = per_sm * ts_cuda_sm_count();
    c->ring_off = ring_off, c->ring_size = ring_size, c->smem = smem, c->host_tile0 = ht0, ht0 = nullptr;
    const char *sv = getenv("TURBOSPARK_PERSIST_STAMPS");
    e = cudaMalloc(&c->prods, static_cast<size_t>(n) * sizeof *hp);
    if (e == cudaSuccess) e = cudaMalloc(&c->tile0, (static_cast<size_t>(n) + 1) * sizeof *ht0);
    if (e == cudaSuccess) e = cudaMalloc(&c->counters, static_cast<size_t>(n) * sizeof(int));
    if (e == cudaSuccess)
        e = cudaMemcpy(c->prods, hp, static_cast<size_t>(n) * sizeof *hp, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(c->tile0, c->host_tile0, (static_cast<size_t>(n) + 1) * sizeof(int),
                       cudaMemcpyHostToDevice);
    if (e == cudaSuccess && sv && sv[0] == '1')
        e = cudaMalloc(&c->stamps, kStamps * static_cast<size_t>(tiles) * sizeof(long long));
    free(hp);
    if (e != cudaSuccess) {
        ts_cuda_chain_free(c);
        return ts_errf(err, errlen, "allocating the chain's device tables: %s", cudaGetErrorString(e));
    }
    *out = c;
    return 0;
}

extern "C" int ts_cuda_chain_run(const ts_cuda_chain *c, cudaStream_t s) {
    if (!c) return -1;
    if (cudaMemsetAsync(c->counters, 0, static_cast<size_t>(c->n) * sizeof(int), s) != cudaSuccess) return -1;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(c->blocks));
    cfg.blockDim = dim3((kWarps + 1) * 32);
    cfg.dynamicSmemBytes = c->smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, c->kernel, static_cast<const chain_prod *>(c->prods),
                              static_cast<const int *>(c->tile0), c->n, c->counters, c->ring_off,
                              c->ring_size, c->stamps) == cudaSuccess
               ? 0
               : -1;
}

extern "C" void ts_cuda_chain_geometry(const ts_cuda_chain *c, int *blocks, int *per_sm, size_t *smem,
                                       size_t *ring) {
    if (blocks) *blocks = c ? c->blocks : 0;
    if (per_sm) *per_sm = c ? c->per_sm : 0;
    if (smem) *smem = c ? c->smem : 0;
    if (ring) *ring = c ? c->ring_size : 0;
}

extern "C" int ts_cuda_chain_phases(const ts_cuda_chain *c, double cycles[6]) {
    if (!c || !c->stamps) return -1;
    const int total = c->host_tile0[c->n], grid = c->blocks;
    const size_t words = kStamps * static_cast<size_t>(total);
    long long *h = static_cast<long long *>(malloc(words * sizeof *h));
    if (!h || cudaMemcpy(h, c->stamps, words * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return -1;
    }
    double sum[5] = {0, 0, 0, 0, 0}, span = 0;
    int busy = 0;
    for (int b = 0; b < grid; b++) {
        const int mine = ts_tiles_of_block(total, b, grid);
        if (mine == 0) continue;
        busy++;
        for (int j = 0; j < mine; j++) {
            const long long *t = h + kStamps * (static_cast<size_t>(b) + static_cast<size_t>(j) * grid);
            for (int k = 0; k < 4; k++) sum[k] += static_cast<double>(t[k + 1] - t[k]);
            if (j + 1 < mine) sum[4] += static_cast<double>(t[kStamps * static_cast<size_t>(grid)] - t[4]);
        }
        const long long first = h[kStamps * static_cast<size_t>(b)],
                        last =
                            h[kStamps * (static_cast<size_t>(b) + static_cast<size_t>(mine - 1) * grid) + 4];
        if (static_cast<double>(last - first) > span) span = static_cast<double>(last - first);
    }
    free(h);
    for (int k = 0; k < 5; k++) cycles[k] = busy ? sum[k] / busy : 0;
    cycles[5] = span;
    return 0;
}

extern "C" void ts_cuda_chain_free(ts_cuda_chain *c) {
    if (!c) return;
    cudaFree(c->prods);
    cudaFree(c->tile0);
    cudaFree(c->counters);
    cudaFree(c->stamps);
    free(c->host_tile0);
    free(c);
}
