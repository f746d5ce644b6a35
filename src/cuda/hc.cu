// Hyper-connections on the GPU (MODEL.md §5.2), the twin of src/cpu/hc.c: read the C residual streams
// into one block input, write the block output back into every stream with its inject weight.
//
// Math, per token (W = C·H, streams s = 0..C−1 of H floats each):
//   Xn  = grouped_rmsnorm(R; norm, group H, eps)              → w->xn   (N × W)
//   lr  = silu((Dn·Xn) / C)                                   → w->lr   (N × r)
//   M   = Up·lr                                               → w->mix  (N × W)
//   x   = (Σ_s σ(M_s) ⊙ Xn_s) / C                             → x       (N × H)
//   inj = 2σ((Inj·Xn) / C)  (skipped for the final mixer)     → inj     (N × C)
// and the write: R_s += y ⊙ inj_s.
//
// Launches of hc_read: rmsnorm (ops.cu), the down and inject products (ts_cuda_matmul; one launch
// when the upload placed the inject rows right after the down rows, hc->down_inject), one
// elementwise kernel for both activations (lr and inj), the up product, and one kernel for the
// stream mix. Decode is latency-bound (96 reads a token), so fusions save launches: the write of a
// block followed by the read of the next one is one kernel (ts_cuda_hc_write_norm: R += y·inj, then
// the next read's norm into w->xn), ts_cuda_hc_read_xn starts from that w->xn, and for N ≤ 64 rows
// with block-quantized weights the read itself is two launches (the fused read below: a split-K
// down|inject product and hc_up_mix_kernel), and for up to 4 rows the write of a block output before it
// goes into them too (not a MoE's, whose combine every block of the split product would redo): the split
// product computes the written streams while staging its x (ts_cuda_matmul_split_hc_write) and leaves
// them in w->xn, and hc_up_mix_kernel copies them into R (the write is enqueued by the read it precedes:
// w->hc_defer; TURBOSPARK_CUDA_HC_DEFER=0 keeps it a kernel of its own). At one token such a read is one
// launch: the two kernels' blocks in one grid with a grid barrier between them (hc_read_one_kernel below).
// Beyond 64 rows the down|inject product runs on the tensor cores as a split product (gemm_tc.h: x as
// hi + lo fp16, about fp32's precision, as the CPU twin's fp32) when the type allows, its parts added by
// the activation kernel, and so does the up product (one part). Elementwise kernels map one thread to one
// output element (grid-stride, 256 threads a block); every grid depends only on N and the shapes, so the
// whole sequence is graph-capturable.
// Formulas follow the CPU operation for operation (true divisions by C, expf-based sigmoid); the
// products sum in a different order, so results agree to fp32 rounding, not bit for bit.
#include "cuda/gemm_tc.h"
#include "cuda/cuda_device.h"
#include "cuda/hc_split.cuh"
#include "cuda/layers.h"
#include "cuda/matmul.h"
#include "cuda/pdl.cuh"
#include "cuda/unit_dot.cuh"

#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>

namespace {

using namespace ts_cu;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20; // grid-stride beyond this

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// lr[i] = silu(lr[i] / C) for i < n_lr; inj[j] = 2σ(inj[j] / C) for j < n_inj (n_inj = 0 without inject).
__global__ void hc_act_kernel(float *__restrict__ lr, int64_t n_lr, float *__restrict__ inj, int64_t n_inj,
                              float C) {
    const int64_t n = n_lr + n_inj;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        if (e < n_lr)
            lr[e] = ts_dsilu(lr[e] / C);
        else
            inj[e - n_lr] = 2.0f * ts_dsigmoid(inj[e - n_lr] / C);
    }
}

// The down|inject product P (N × (r + ni), ni = C with the inject rows, 0 without) split: lr =
// silu(P[:, :r] / C), inj = 2σ(P[:, r:] / C). P is the sum of `parts` partial products pstride floats
// apart, added in order (the split products of gemm_tc.h; one part: P itself).
__global__ void hc_act_split_kernel(const float *__restrict__ P, int parts, int64_t pstride, int64_t N,
                                    int64_t r, int64_t ni, int64_t C, float *__restrict__ lr,
                                    float *__restrict__ inj) {
    const int64_t w = r + ni, n = N * w;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / w, j = e % w;
        float p = P[e];
        for (int q = 1; q < parts; q++) p += P[q * pstride + e];
        if (j < r)
            lr[t * r + j] = ts_dsilu(p / (float)C);
        else
            inj[t * C + (j - r)] = 2.0f * ts_dsigmoid(p / (float)C);
    }
}

// The write before a fused read made by that read's split product (ts_cuda_matmul_split_hc_write: one
// launch fewer a read), unless TURBOSPARK_CUDA_HC_DEFER=0 (then hc_write_ss_kernel, as before).
// Read at every write (host work at graph capture, or an eager step's), so that a test can compare both.
bool hc_defer_enabled() {
    return ts_cuda_switch_on("TURBOSPARK_CUDA_HC_DEFER");
}

// The hyper-connection products on the tensor cores as split products (gemm_tc.h), unless
// TURBOSPARK_CUDA_HC_SPLIT=0 (then the fp32 GEMM).
bool hc_split_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_HC_SPLIT");
    return on;
}

// R_s += y ⊙ inj_s, then xn_s = R_s · rsqrt(mean(R_s²) + eps) · g_s: one block per (row, stream), block
// b = t·C + s, so the C blocks of a row run side by side and a row's y (or the k expert outputs its MoE
// combine reads, 10 × H floats at the released shapes) comes from DRAM once and from L2 for the others.
// The parts of a MoE output still to be combined (ts_cuda_moe_uncombined), or eo NULL: y is final.
struct moe_parts {
    const float *sg, *eo, *tw; // [N], [N·k × H], [N × k]
    int k;
};

__global__ void hc_write_norm_kernel(float *__restrict__ R, const float *__restrict__ y,
                                     const float *__restrict__ inj, int64_t H, int64_t C,
                                     const float *__restrict__ g, float eps, float *__restrict__ xn,
                                     moe_parts m) {
    pdl_trigger();
    pdl_wait();
    const int64_t t = blockIdx.x / C, c = blockIdx.x % C, W = C * H;
    float *Rs = R + t * W + c * H, *Xs = xn + t * W + c * H;
    const float *yt = y + t * H, *gs = g + c * H;
    const float k = inj[t * C + c];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        const float yv =
            m.eo ? ts_dmoe_combine(yt[i], m.sg[t], m.eo + t * m.k * H + i, H, m.tw + t * m.k, m.k) : yt[i];
        const float v = Rs[i] + yv * k;
        Rs[i] = v;
        ss += v * v;
    }
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float rs = 1.0f / sqrtf(part[0] / (float)H + eps);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) Xs[i] = (Rs[i] * rs) * gs[i];
}

// The write for the fused read (N ≤ kFusedMaxRows): R_s += y ⊙ inj_s as above, but one block a slice of
// kThreads elements of every stream (grid ⌈H / kThreads⌉ × N), so the block output y (or the MoE combine)
// is computed once for all C streams and the row is spread over many SMs. The norm is left to the
// read: xg_s = R_s ⊙ g_s → xn and the slice's Σ R_s² → ss[t][slice][s]; hc_up_mix_kernel scales the
// split products and Xn by rs_s = 1 / sqrt(Σ_slices ss / H + eps) (the products are linear in Xn_s).
constexpr int kMaxStreams = 8;

__global__ void __launch_bounds__(kThreads)
    hc_write_ss_kernel(float *__restrict__ R, const float *__restrict__ y, const float *__restrict__ inj,
                       int64_t H, int C, const float *__restrict__ g, float *__restrict__ xg,
                       float *__restrict__ ss, moe_parts m) {
    pdl_trigger();
    pdl_wait();
    const int64_t t = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, W = C * H;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float sq[kMaxStreams];
    if (i < H) {
        const float yv =
            m.eo ? ts_dmoe_combine(y[t * H + i], m.sg[t], m.eo + t * m.k * H + i, H, m.tw + t * m.k, m.k)
                 : y[t * H + i];
#pragma unroll
        for (int c = 0; c < kMaxStreams; c++) {
            if (c >= C) break;
            float *r = R + t * W + c * H + i;
            const float v = *r + yv * inj[t * C + c];
            *r = v;
            xg[t * W + c * H + i] = v * g[c * H + i];
            sq[c] = v * v;
        }
    } else {
#pragma unroll
        for (int c = 0; c < kMaxStreams; c++) sq[c] = 0.0f;
    }
    __shared__ float part[kThreads / 32][kMaxStreams];
#pragma unroll
    for (int c = 0; c < kMaxStreams; c++) {
        if (c >= C) break;
        float v = sq[c];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) part[warp][c] = v;
    }
    __syncthreads();
    if (threadIdx.x < C) {
        float v = 0.0f;
        for (int wi = 0; wi < kThreads / 32; wi++) v += part[wi][threadIdx.x];
        ss[(t * gridDim.x + blockIdx.x) * C + threadIdx.x] = v;
    }
}

// x[t, i] = (Σ_c σ(M[t, c·H + i]) · Xn[t, c·H + i]) / C, one thread per (t, i).
__global__ void hc_mix_kernel(const float *__restrict__ M, const float *__restrict__ Xn, int64_t N, int64_t H,
                              int64_t C, float *__restrict__ x) {
    const int64_t n = N * H, W = C * H;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / H, i = e % H;
        const float *Mt = M + t * W + i, *Xt = Xn + t * W + i;
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) s += ts_dsigmoid(Mt[c * H]) * Xt[c * H];
        x[e] = s / static_cast<float>(C);
    }
}

// R[t, c·H + i] += y[t, i] · inj[t, c], one thread per element of R.
__global__ void hc_write_kernel(float *__restrict__ R, const float *__restrict__ y,
                                const float *__restrict__ inj, int64_t N, int64_t H, int64_t C) {
    const int64_t W = C * H, n = N * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / W, j = e % W, c = j / H, i = j % H;
        R[e] += y[t * H + i] * inj[t * C + c];
    }
}

// ---- decode: the fused read --------------------------------------------------------------------
//
// For N ≤ kFusedMaxRows a read is two launches instead of five:
//  1. ts_cuda_matmul_split of the down (or down|inject) rows, one split per stream (C splits of H
//     columns): P[q][t][j] = Σ_{c < H} D[j, q·H + c] · Xn[t, q·H + c]. Few rows (r + C = 324) of long
//     rows (W = 10240) would otherwise run one warp a row on a third of the GPU.
//  2. hc_up_mix_kernel: each block stages lr = silu((Σ_q P[q][t][:r]) / C) in shared memory (the
//     splits summed in order q = 0 .. C−1), block 0 also writes inj = 2σ((Σ_q P[q][t][r:]) / C); then
//     for its IB outputs i it computes the C up rows c·H + i (their bytes staged by cp.async, one
//     thread per (row, unit of 32 weights), unit sums added in unit order) and the mix
//     x[t, i] = (Σ_c σ(M_c) · Xn[t, c·H + i]) / C.
// Same math as the five-launch path up to fp32 summation order; deterministic.
// Up to 64 rows (batched decode; the split product runs in launches of 4 tokens), fp32 as the CPU twin's
// hyper-connections; larger micro-batches (prefill) take the five launches.
constexpr int kFusedMaxRows = 64;

// The rows up to which a read is fused: kFusedRows, or TURBOSPARK_CUDA_HC_FUSED_ROWS=n (0 .. kFusedMaxRows) for
// measurements; beyond it the products run on the tensor cores as split products (below). On the H200 at the
// released shapes the split products win from 9 rows on (BENCHMARKS.md, run 91: 64 rows 730 → 1,005 t/s, 16
// rows +2 %; at 1 and 8 rows the fused read wins, 0 rows loses 28 % at batch 1). The two forms sum in other
// orders, so a sequence decoded among more than 8 others differs from alone in its last bits (DECISIONS.md).
constexpr int kFusedRows = 8;
int fused_max_rows() {
    static const int n = [] {
        const char *v = getenv("TURBOSPARK_CUDA_HC_FUSED_ROWS");
        const int r = v && *v ? atoi(v) : kFusedRows;
        return r < 0 ? 0 : r > kFusedMaxRows ? kFusedMaxRows : r;
    }();
    return n;
}
constexpr int kMaxDeferRows = 4; // a deferred write's rows: one launch of the split product (matmul_split.cu)
constexpr int kMaxSumsOfSquares = kThreads; // slices × streams of the partial sums a fused read takes
constexpr int kLoadsAtOnce = 8;             // global loads a thread has in flight in hc_up_mix_kernel
constexpr int kFusedMaxIB = 8;
constexpr size_t kFusedSmemBudget = 44 * 1024;

// The up+mix kernel's outputs a block: kFusedMaxIB (fewer where shared memory asks), or
// TURBOSPARK_CUDA_HC_IB=n (1 .. kFusedMaxIB) for measurements; the same sums either way (read once).
int up_mix_ib() {
    static const int n = [] {
        const char *v = getenv("TURBOSPARK_CUDA_HC_IB");
        const int ib = v && *v ? atoi(v) : kFusedMaxIB;
        return ib < 1 || ib > kFusedMaxIB ? kFusedMaxIB : ib;
    }();
    return n;
}

__host__ __device__ inline size_t round16(size_t b) {
    return (b + 15) & ~static_cast<size_t>(15);
}

// Shared memory a stream's IB up rows take (rows of rb bytes, 32 bytes of alignment and decoder slack).
__host__ __device__ inline size_t up_range(int IB, size_t rb) {
    return round16(static_cast<size_t>(IB) * rb + 32);
}

// Shared memory of one block: lr (r floats), C weight ranges of IB rows (+ 32 bytes of alignment and
// decoder slack each), unit partial sums (C·IB·upr floats), the C splits of P's lr columns (C·r floats).
inline size_t up_mix_smem(int64_t r, int64_t C, int IB, size_t rb, int upr) {
    return static_cast<size_t>(r) * sizeof(float) + static_cast<size_t>(C) * up_range(IB, rb) +
           static_cast<size_t>(C * IB * upr + C * r) * sizeof(float);
}

// The up rows of up+mix block bx (outputs i0 = bx·IB .. i0 + ni − 1): the C ranges of rows c·H + i0 ..
// c·H + i0 + ni − 1 into its region sm, after lr (up_mix_block's layout), as aligned 16-byte lines, one
// cp.async group.
__device__ __forceinline__ void up_rows_issue(const uint8_t *__restrict__ up, size_t rb, int r, int H, int C,
                                              int IB, int bx, uint8_t *sm) {
    const int i0 = bx * IB, ni = min(IB, H - i0);
    const size_t range = up_range(IB, rb);
    uint8_t *wb = sm + static_cast<size_t>(r) * sizeof(float);
    for (int c = 0; c < C; c++) {
        const uint8_t *start = up + (static_cast<size_t>(c) * H + i0) * rb;
        const uint8_t *a0 = align_down16(start);
        const int nl = static_cast<int>((start + static_cast<size_t>(ni) * rb - a0 + 15) >> 4);
        for (int l = static_cast<int>(threadIdx.x); l < nl; l += kThreads)
            cp_async16(wb + c * range + 16 * l, a0 + 16 * l);
    }
    cp_async_commit();
}

// One block of the up+mix step: outputs i0 = bx·IB .. of token t, with its up rows issued into its shared
// memory region sm (lr, then the weight ranges at sm + r floats, then the partial sums: up_mix_smem) by
// up_rows_issue and their copies the only ones pending. P, xn and ss are read through L2 (ld.global.cg): in
// the one-launch read (below) other blocks of the same grid wrote them.
template <int TYPE>
__device__ __forceinline__ void up_mix_block(const uint8_t *__restrict__ up, size_t rb, int nb, int r, int H,
                                             int C, int IB, const float *P, int np, int N, const float *xn,
                                             float *__restrict__ x, float *__restrict__ inj, const float *ss,
                                             int nss, float eps, const float *__restrict__ g,
                                             float *__restrict__ R, int t, int bx, uint8_t *sm) {
    using Q = qtype<TYPE>;
    const int i0 = bx * IB, ni = min(IB, H - i0);
    const int tid = static_cast<int>(threadIdx.x), upr = nb * Q::UPB;
    const size_t range = up_range(IB, rb);
    float4 *xs = reinterpret_cast<float4 *>(sm);
    uint8_t *wb = sm + static_cast<size_t>(r) * sizeof(float);
    float *part = reinterpret_cast<float *>(wb + static_cast<size_t>(C) * range);

    // Every input from global memory at once (one round of L2 latency, not one a stream or slice), into
    // shared memory: a partial sum of squares and an element of xn (and of g) of this block's outputs a
    // thread, then the splits of P's lr columns, kLoadsAtOnce a thread at a time
    __shared__ float ssv[kMaxSumsOfSquares], xv[kMaxStreams * kFusedMaxIB], gv[kMaxStreams * kFusedMaxIB];
    const int nssc = ss ? nss * C : 0, nx = C * ni, c = tid / max(ni, 1);
    const size_t e0 = static_cast<size_t>(t) * C * H + i0, ex = static_cast<size_t>(c) * H + tid - c * ni;
    const float sv = tid < nssc ? __ldcg(ss + static_cast<size_t>(t) * nssc + tid) : 0.0f;
    const float xq = tid < nx ? __ldcg(xn + e0 + ex) : 0.0f, gq = g && tid < nx ? g[i0 + ex] : 0.0f;
    float *pl = part + C * IB * upr; // [q][j], j < r
    const size_t qs = static_cast<size_t>(N) * np;
    const float *Pt = P + static_cast<size_t>(t) * np;
    for (int base = 0; base < C * r; base += kThreads * kLoadsAtOnce) {
        float v[kLoadsAtOnce];
#pragma unroll
        for (int k = 0; k < kLoadsAtOnce; k++) {
            const int i = base + k * kThreads + tid, q = i / r;
            v[k] = i < C * r ? __ldcg(Pt + q * qs + i - q * r) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kLoadsAtOnce; k++)
            if (base + k * kThreads + tid < C * r) pl[base + k * kThreads + tid] = v[k];
    }
    if (tid < nssc) ssv[tid] = sv;
    if (tid < nx) xv[tid] = xq, gv[tid] = gq;
    __syncthreads();

    // rs_q: 1 when xn holds Xn, else (after hc_write_ss_kernel) the norm's scale from the partial sums
    __shared__ float rs[kMaxStreams];
    if (tid < C) {
        float a = 0.0f;
        for (int q = 0; q < nss && ss; q++) a += ssv[q * C + tid];
        rs[tid] = ss ? 1.0f / sqrtf(a / static_cast<float>(H) + eps) : 1.0f;
    }
    __syncthreads();

    // lr (swizzled as unit_dot reads it) and, the block of outputs 0, the inject weights
    const float fc = static_cast<float>(C);
    for (int f = tid; f < r / 4; f += kThreads) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float a = pl[4 * f + e] * rs[0];
            for (int q = 1; q < C; q++) a += pl[q * r + 4 * f + e] * rs[q];
            v[e] = ts_dsilu(a / fc);
        }
        xs[x_swizzle<Q>(static_cast<uint32_t>(f))] = make_float4(v[0], v[1], v[2], v[3]);
    }
    if (inj && bx == 0 && tid < C) {
        float a = __ldcg(Pt + r + tid) * rs[0];
        for (int q = 1; q < C; q++) a += __ldcg(Pt + q * qs + r + tid) * rs[q];
        inj[static_cast<size_t>(t) * C + tid] = 2.0f * ts_dsigmoid(a / fc);
    }
    cp_async_wait<0>();
    __syncthreads();

    // one thread per (row, unit); consecutive threads take the same unit of different rows
    const int rows = C * ni;
    for (int idx = tid; idx < rows * upr; idx += kThreads) {
        const int u = idx / rows, row = idx - u * rows, c = row / ni, il = row - c * ni;
        const int b = u / Q::UPB, k = u - b * Q::UPB;
        const uint8_t *start = up + (static_cast<size_t>(c) * H + i0) * rb;
        const uint8_t *blk[1] = {wb + c * range + (reinterpret_cast<uintptr_t>(start) & 15u) + il * rb +
                                 b * Q::BS};
        float acc[1][1] = {{0.0f}};
        unit_dot<Q, 1, 1, true>(blk, k, nullptr, xs, b * Q::QK, r, acc);
        part[row * upr + u] = acc[0][0];
    }
    __syncthreads();

    // the mix: thread (il, c) = (tid / kMaxStreams, tid mod kMaxStreams) adds stream c's unit sums of output il in
    // unit order and takes their sigmoid; the group's lane c = 0 then adds the C streams' terms in stream order
    // (whole warps: kFusedMaxIB·kMaxStreams threads, groups of kMaxStreams lanes)
    static_assert(kFusedMaxIB * kMaxStreams % 32 == 0 && 32 % kMaxStreams == 0, "the mix's lane groups");
    if (tid < kFusedMaxIB * kMaxStreams) {
        const int il = tid / kMaxStreams, c = tid % kMaxStreams;
        float term = 0.0f;
        if (il < ni && c < C) {
            const float *pr = part + (c * ni + il) * upr;
            float m = 0.0f;
            for (int u = 0; u < upr; u++) m += pr[u];
            float xg = xv[c * ni + il]; // R ⊙ g, or (a deferred write) R, copied into place and then times g
            if (g) {
                R[e0 + static_cast<size_t>(c) * H + il] = xg;
                xg = xg * gv[c * ni + il];
            }
            term = ts_dsigmoid(m) * (xg * rs[c]);
        }
        const int base = (tid & 31) - c;
        float s = 0.0f;
        for (int q = 0; q < C; q++) s += __shfl_sync(0xffffffffu, term, base + q);
        if (c == 0 && il < ni) x[static_cast<size_t>(t) * H + i0 + il] = s / fc;
    }
}

template <int TYPE>
__global__ void __launch_bounds__(kThreads)
    hc_up_mix_kernel(const uint8_t *__restrict__ up, size_t rb, int nb, int r, int H, int C, int IB,
                     const float *__restrict__ P, int np, int N, const float *__restrict__ xn,
                     float *__restrict__ x, float *__restrict__ inj, const float *__restrict__ ss, int nss,
                     float eps, const float *__restrict__ g, float *__restrict__ R) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int t = static_cast<int>(blockIdx.y), bx = static_cast<int>(blockIdx.x);
    // the weights: issued before waiting for the kernel that wrote P
    pdl_trigger();
    up_rows_issue(up, rb, r, H, C, IB, bx, smem);
    pdl_wait();
    up_mix_block<TYPE>(up, rb, nb, r, H, C, IB, P, np, N, xn, x, inj, ss, nss, eps, g, R, t, bx, smem);
}

// The fused read's kernel and block shape for this read, or nullptr when the shapes or types do not
// allow it (N > kFusedMaxRows, a tensor missing or not block-quantized, too little shared memory).
using up_mix_fn = void (*)(const uint8_t *, size_t, int, int, int, int, int, const float *, int, int,
                           const float *, float *, float *, const float *, int, float, const float *,
                           float *);
struct fused_shape {
    up_mix_fn kernel;
    int nb, IB;
    size_t smem;
};

fused_shape hc_fused_shape(const ts_cuda_work *w, const ts_cuda_hc *hc, int64_t N, bool with_inj) {
    const fused_shape none = {nullptr, 0, 0, 0};
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    const ts_cuda_tensor *D = with_inj ? &hc->down_inject : &hc->down;
    const ts_cuda_tensor &U = hc->up;
    const int64_t np = with_inj ? r + C : r;
    if (N > fused_max_rows() || C > kMaxStreams || !D->data || D->ne0 != W || D->rows < np || !U.data ||
        U.ne0 != r || U.rows < W || r % 4 != 0 || r > 4 * kThreads || C * np > W ||
        (H + kThreads - 1) / kThreads * C > kMaxSumsOfSquares)
        return none;
    const ts_type_traits *tr = ts_type_get(U.type);
    if (!tr || tr->block_size < 32 || r % tr->block_size != 0 || U.row_bytes != ts_row_size(U.type, r))
        return none;
    fused_shape f = {nullptr, static_cast<int>(r / tr->block_size), up_mix_ib(), 0};
    const int upr = f.nb * (tr->block_size / 32);
    while (f.IB > 1 && up_mix_smem(r, C, f.IB, U.row_bytes, upr) > kFusedSmemBudget) f.IB /= 2;
    f.smem = up_mix_smem(r, C, f.IB, U.row_bytes, upr);
    if (f.smem > kFusedSmemBudget) return none;
    if (!with_block_type(U.type, [&](auto t) { f.kernel = hc_up_mix_kernel<decltype(t)::value>; }))
        return none;
    return f;
}

// Slices of hc_write_ss_kernel: partial sums a row and stream.
int64_t write_slices(const ts_hparams *hp) {
    return (hp->n_embd + kThreads - 1) / kThreads;
}

// ---- decode: the read in one launch ----------------------------------------------------------------
//
// At one token, a fused read that makes the write before it (most reads of a batch-1 step) runs as one launch
// instead of two. Every block first runs a block of the split product with the write (split_hc_write_block,
// hc_split.cuh) on its kOneWarps warps: split q = b mod C, row groups b / C, b / C + G / C, ... (G blocks, a
// multiple of C); then a barrier of the whole grid (a count and a generation in global memory, w->route_count
// after the MoE's counters); then the up+mix blocks, as virtual blocks b, b + G, ... of this grid
// (up_mix_block). A block's first two virtual blocks have their up rows copied into shared memory before the
// dependency wait, so they stream during the wait and the write's staging (the split product's first wait for
// its own copies retires them too). The grid fits the GPU at once (sized from the occupancy), and the launch
// lets the next kernel start (PDL) only after the barrier, when all its blocks are resident: no block waits
// at the barrier for one that cannot be scheduled. Each row's sums and each output are computed by the same
// code as in the two launches, so the results are the same bit for bit (test_cuda_forward 4f).
// Off by default: on the H200 at the released shapes the one launch took 22.1 µs a read against 19.7 µs for the
// two (BENCHMARKS.md, runs 90-92: batch 1 151.6 t/s with it, 155.6 without). TURBOSPARK_CUDA_HC_ONE=1 turns
// it on (read at every read).
constexpr int kOneWarps = kThreads / 32;

bool hc_one_enabled() {
    const char *v = getenv("TURBOSPARK_CUDA_HC_ONE");
    return v && v[0] == '1';
}

struct hc_one_args {
    const uint8_t *D;       // the down|inject rows (np of them)
    size_t drb, dsplit;     // bytes a row of D, a split (H columns) of a row
    int np, dnb, H, C;      // rows of D, blocks a split of a row, H, streams
    ts_cuda_hc_write_in in; // the write (slice kThreads; r_out = w->xn, ss = w->hc_ss)
    float *P;               // C × np partial sums, split q at q·np (w->mix)
    const uint8_t *U;       // the up rows (C·H of r)
    size_t urb;             // bytes a row of U
    int unb, r, IB, nss;    // blocks a row of U, rank, outputs a virtual block, slices of the write's sums
    float eps;
    float *x, *inj;         // the read's outputs: H and C floats
    float *R;               // the streams the write is copied into (in.R, writable)
    unsigned *bar;          // the barrier: count, generation
    int xs_bytes, vb_bytes; // dynamic shared memory: the split's x, then two virtual blocks' regions
};

// Every block of the grid past every block's stores before it (bar[0] counts the arrivals, bar[1] is the
// generation: the last block to arrive sets the count back to 0 and then advances the generation; the others
// wait for it to move).
__device__ __forceinline__ void grid_barrier(unsigned *bar) {
    __syncthreads(); // the block's stores before thread 0's fence
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (ld_acquire(bar + 1) == gen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

template <int TD, int TU>
__global__ void __launch_bounds__(kThreads) hc_read_one_kernel(const hc_one_args a) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int b = static_cast<int>(blockIdx.x), G = static_cast<int>(gridDim.x);
    const int nvb = (a.H + a.IB - 1) / a.IB;
    uint8_t *vbs = smem + a.xs_bytes; // virtual block j's region: vbs + (j mod 2)·vb_bytes
    auto issue = [&](int j) {
        up_rows_issue(a.U, a.urb, a.r, a.H, a.C, a.IB, b + j * G, vbs + (j & 1) * a.vb_bytes);
    };
    for (int j = 0; j < 2 && b + j * G < nvb; j++) issue(j); // (weights: before the dependency wait)
    const int q = b % a.C, bx = b / a.C, gx = G / a.C;
    prefetch_split_rows<kOneWarps>(a.D, a.drb, a.dsplit, a.np, q, bx, gx);
    pdl_wait();
    split_hc_write_block<TD, 1, kOneWarps>(a.D, a.drb, a.dsplit, a.np, a.dnb, a.H, a.in, a.C, 0, a.P, a.np, q,
                                           bx, gx, reinterpret_cast<float4 *>(smem));
    grid_barrier(a.bar);
    pdl_trigger();
    for (int j = 0; b + j * G < nvb; j++) {
        if (j > 0) __syncthreads(); // every thread is done with the last virtual block's shared arrays
        if (j >= 2) issue(j);
        up_mix_block<TU>(a.U, a.urb, a.unb, a.r, a.H, a.C, a.IB, a.P, a.np, 1, a.in.r_out, a.x, a.inj,
                         a.in.ss, a.nss, a.eps, a.in.g, a.R, 0, b + j * G, vbs + (j & 1) * a.vb_bytes);
    }
}

// The kernel for a down and an up type: the pairs of the released mixes and of the CUDA tests' models (a
// K-quant or Q8_0 down, its up of the same type or of the 32-element type the quantizer falls back to where
// the rank is not a multiple of 256), or nullptr (two launches).
using one_fn = void (*)(hc_one_args);
one_fn hc_one_kernel(uint32_t td, uint32_t tu) {
#define TS_HC_ONE(D, U)                                                                                      \
    if (td == (D) && tu == (U)) return hc_read_one_kernel<(D), (U)>;
    TS_HC_ONE(TS_TYPE_Q4_K, TS_TYPE_Q5_0)
    TS_HC_ONE(TS_TYPE_Q4_K, TS_TYPE_Q4_K)
    TS_HC_ONE(TS_TYPE_Q5_K, TS_TYPE_Q5_1)
    TS_HC_ONE(TS_TYPE_Q5_K, TS_TYPE_Q5_K)
    TS_HC_ONE(TS_TYPE_Q6_K, TS_TYPE_Q8_0)
    TS_HC_ONE(TS_TYPE_Q6_K, TS_TYPE_Q6_K)
    TS_HC_ONE(TS_TYPE_Q8_0, TS_TYPE_Q8_0)
#undef TS_HC_ONE
    return nullptr;
}

// The blocks of the one-launch read with `smem` bytes of dynamic shared memory that fit the current device at
// once (the occupancy, asked once a device, kernel and size); 0 where it cannot run. The kernel is opted in,
// once a device, to all the dynamic shared memory the device allows beside its static arrays, so that no
// later size lowers the limit an earlier one was planned under (the attribute is the kernel's, for every
// thread).
int one_resident_blocks(one_fn k, size_t smem) {
    struct entry {
        int dev;
        one_fn k;
        size_t smem;
        int blocks;
    };
    static std::mutex mu;
    static entry cache[32];
    static int n = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    const std::lock_guard<std::mutex> lock(mu);
    bool opted = false;
    for (int i = 0; i < n; i++) {
        if (cache[i].dev != dev || cache[i].k != k) continue;
        if (cache[i].smem == smem) return cache[i].blocks;
        opted = true;
    }
    int per_sm = 0, optin = 0;
    cudaFuncAttributes fa;
    if (!opted &&
        (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
         cudaFuncGetAttributes(&fa, k) != cudaSuccess ||
         cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              optin - static_cast<int>(fa.sharedSizeBytes)) != cudaSuccess))
        return cudaGetLastError(), 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem) != cudaSuccess)
        per_sm = 0, cudaGetLastError();
    const int blocks = per_sm * ts_cuda_sm_count();
    if (n < 32) cache[n++] = {dev, k, smem, blocks};
    return blocks;
}

// How the one-launch read is launched: -1 not yet tried, 2 cooperative with PDL, 1 cooperative only, 0 not at
// all (two launches). Found at the first launch, made outside a graph capture (the forward captures a step
// only after an eager one); lowered by ts_cuda_hc_one_weaken when a graph would not take the launch.
std::atomic<int> g_one_mode{-1};

// The one-launch read's launch: cooperative (the runtime keeps every block of the grid resident at once, so
// the barrier never waits for a block that is not scheduled, whatever else runs on the GPU), and with the PDL
// attribute too where the runtime takes both (g_one_mode); 1: the path is unavailable (nothing enqueued).
int one_launch(one_fn k, unsigned G, size_t smem, cudaStream_t s, const hc_one_args &a) {
    const int mode = g_one_mode.load();
    if (mode == 0) return 1;
    if (mode < 0) { // (not over an error already pending: not the probe's to clear; two launches meanwhile)
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaPeekAtLastError() != cudaSuccess) return 1;
        if (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return 1;
    }
    for (int m = mode < 0 ? 2 : mode; m >= 1; m--) {
        cudaLaunchAttribute attr[2];
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[1].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(G);
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = m == 2 && pdl_enabled() ? 2 : 1;
        if (cudaLaunchKernelEx(&cfg, k, a) == cudaSuccess) {
            if (mode < 0) g_one_mode.store(m);
            return 0;
        }
        if (mode > 0) return -1; // a launch that worked before
        cudaGetLastError();      // (a refused configuration: not sticky)
    }
    g_one_mode.store(0);
    return 1;
}

// The read in one launch (above), or 1 where it does not apply (nothing enqueued): more than one token,
// TURBOSPARK_CUDA_HC_ONE=0, a type pair without a kernel, a shape the split product does not take, or a grid
// that would not fit the GPU at once. in: the write the split product makes, R its streams (in.R).
int hc_read_one(ts_cuda_work *w, const ts_cuda_hc *hc, const fused_shape &f, const ts_cuda_hc_write_in &in,
                float *R, int64_t N, float *x, float *inj, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, r = hp->hc_rank, np = r + C;
    const ts_cuda_tensor *D = &hc->down_inject, &U = hc->up;
    if (N != 1 || !inj || !hc_one_enabled() || !w->hc_bar ||
        !ts_cuda_matmul_split_takes(D, np, static_cast<int>(C), 1, C * H))
        return 1;
    const one_fn k = hc_one_kernel(D->type, U.type);
    if (!k) return 1;
    const ts_type_traits *td = ts_type_get(D->type);
    const size_t xs_bytes = round16(static_cast<size_t>(H) * sizeof(float)), vb_bytes = round16(f.smem);
    const size_t smem = xs_bytes + 2 * vb_bytes;
    const int resident = one_resident_blocks(k, smem);
    // a row group of kOneWarps rows a block of each split, or as many as fit (or at most
    // TURBOSPARK_CUDA_HC_ONE_BLOCKS a split, read at every read: a test's small grid, whose blocks take
    // several row groups and virtual blocks each)
    int G = static_cast<int>(C * ((np + kOneWarps - 1) / kOneWarps));
    const char *cap = getenv("TURBOSPARK_CUDA_HC_ONE_BLOCKS");
    if (cap && atoi(cap) > 0 && G > atoi(cap) * C) G = static_cast<int>(atoi(cap) * C);
    if (G > resident) G = resident;
    G -= G % static_cast<int>(C);
    if (G < C) return 1;
    const hc_one_args a = {static_cast<const uint8_t *>(D->data),
                           D->row_bytes,
                           ts_row_size(D->type, H),
                           static_cast<int>(np),
                           static_cast<int>(H / td->block_size),
                           static_cast<int>(H),
                           static_cast<int>(C),
                           in,
                           w->mix,
                           static_cast<const uint8_t *>(U.data),
                           U.row_bytes,
                           f.nb,
                           static_cast<int>(r),
                           f.IB,
                           static_cast<int>(write_slices(hp)),
                           hp->eps,
                           x,
                           inj,
                           R,
                           w->hc_bar,
                           static_cast<int>(xs_bytes),
                           static_cast<int>(vb_bytes)};
    const int rc = one_launch(k, static_cast<unsigned>(G), smem, s, a);
    if (rc == 0) w->hc_one++;
    return rc;
}

// The fused read (see above), or 1 when hc_fused_shape refuses it (nothing enqueued). With
// w->xn_unnormed, w->xn holds R ⊙ g and w->hc_ss the partial sums of hc_write_ss_kernel.
int hc_read_fused(ts_cuda_work *w, const ts_cuda_hc *hc, int64_t N, float *x, float *inj, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    const auto d = w->hc_defer;
    w->hc_defer.next = nullptr;
    if (d.next && (d.next != hc || !inj)) return -1; // a deferred write belongs to the read it was made for
    const fused_shape f = hc_fused_shape(w, hc, N, inj != nullptr);
    if (!f.kernel) return d.next ? -1 : 1;
    const ts_cuda_tensor *D = inj ? &hc->down_inject : &hc->down;
    const ts_cuda_tensor &U = hc->up;
    const int64_t np = inj ? r + C : r;
    int rc;
    if (d.next) { // the write first: its v into w->xn, its sums of squares into w->hc_ss
        const ts_cuda_hc_write_in in = {d.R, d.y, d.inj, hc->norm, kThreads, w->xn, w->hc_ss};
        const int one = hc_read_one(w, hc, f, in, d.R, N, x, inj, s);
        if (one <= 0) return one;
        rc = ts_cuda_matmul_split_hc_write(D, np, static_cast<int>(C), &in, N, w->mix, s);
        if (rc != 0) return -1;
    } else {
        rc = ts_cuda_matmul_split(D, np, static_cast<int>(C), w->xn, N, W, w->mix, s);
        if (rc != 0) return rc;
    }

    const dim3 grid(static_cast<unsigned>((H + f.IB - 1) / f.IB), static_cast<unsigned>(N));
    const float *ss = w->xn_unnormed ? w->hc_ss : nullptr;
    const cudaError_t e =
        launch(f.kernel, grid, dim3(kThreads), f.smem, s, static_cast<const uint8_t *>(U.data), U.row_bytes,
               f.nb, static_cast<int>(r), static_cast<int>(H), static_cast<int>(C), f.IB,
               static_cast<const float *>(w->mix), static_cast<int>(np), static_cast<int>(N),
               static_cast<const float *>(w->xn), x, inj, ss, static_cast<int>(write_slices(hp)), hp->eps,
               d.next ? hc->norm : nullptr, d.next ? d.R : nullptr);
    return e == cudaSuccess ? 0 : -1;
}

} // namespace

extern "C" bool ts_cuda_hc_one_weaken(void) {
    int m = g_one_mode.load();
    while (m > 0 && !g_one_mode.compare_exchange_weak(m, m - 1)) {
    }
    return m > 0;
}

extern "C" int ts_cuda_hc_one_mode(void) {
    return g_one_mode.load();
}

extern "C" int ts_cuda_hc_read_xn(ts_cuda_work *w, const ts_cuda_hc *hc, int64_t N, float *x, float *inj,
                                  cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    if (N <= 0) return 0;
    const bool with_inj = inj != nullptr;
    if (with_inj && !hc->inject.data) return -1;
    const int fused = hc_read_fused(w, hc, N, x, inj, s);
    if (fused <= 0) return fused;
    if (w->xn_unnormed) return -1; // the write chose hc_write_ss_kernel for a read it could not fuse

    const ts_cuda_tensor *D = with_inj ? &hc->down_inject : &hc->down;
    const int64_t ni = with_inj ? C : 0;
    if (D->data && hc_split_enabled() && ts_cuda_gemm_tc_split_takes(D->type, D->ne0, N)) {
        // the parts in w->mix (N × W floats: the up product's output, written after they are added)
        const int parts = ts_cuda_gemm_tc_split(D, r + ni, w->xn, N, w->mix, N * (r + ni),
                                                static_cast<int>(W / (r + ni)), s);
        if (parts < 0) return -1;
        hc_act_split_kernel<<<blocks_for(N * (r + ni)), kThreads, 0, s>>>(w->mix, parts, N * (r + ni), N, r,
                                                                          ni, C, w->lr, inj);
    } else if (with_inj && hc->down_inject.data) { /* one product for both, split by the activation kernel */
        if (ts_cuda_matmul_unrounded(&hc->down_inject, 0, r + C, w->xn, N, w->mix, s)) return -1;
        hc_act_split_kernel<<<blocks_for(N * (r + C)), kThreads, 0, s>>>(w->mix, 1, 0, N, r, C, C, w->lr,
                                                                         inj);
    } else {
        if (ts_cuda_matmul_unrounded(&hc->down, 0, r, w->xn, N, w->lr, s)) return -1;
        if (with_inj && ts_cuda_matmul_unrounded(&hc->inject, 0, C, w->xn, N, inj, s)) return -1;
        const int64_t n_lr = N * r, n_inj = with_inj ? N * C : 0;
        hc_act_kernel<<<blocks_for(n_lr + n_inj), kThreads, 0, s>>>(w->lr, n_lr, inj, n_inj,
                                                                    static_cast<float>(C));
    }
    if (cudaGetLastError() != cudaSuccess) return -1;

    // the up product: a split product too when the type allows (one part: its K, the rank, is a few groups)
    const bool up_tc = hc_split_enabled() && hc->up.rows >= W && hc->up.ne0 == r &&
                       ts_cuda_gemm_tc_split_takes(hc->up.type, r, N);
    if (up_tc ? ts_cuda_gemm_tc_split(&hc->up, W, w->lr, N, w->mix, N * W, 1, s) != 1
              : ts_cuda_matmul_unrounded(&hc->up, 0, W, w->lr, N, w->mix, s) != 0)
        return -1;
    hc_mix_kernel<<<blocks_for(N * H), kThreads, 0, s>>>(w->mix, w->xn, N, H, C, x);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int ts_cuda_hc_read(ts_cuda_work *w, const ts_cuda_hc *hc, const float *R, int64_t N, float *x,
                               float *inj, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, W = (int64_t)hp->hc_count * H;
    if (N <= 0) return 0;
    if (w->hc_defer.next) return -1; // a write left to another read
    if (ts_cuda_rmsnorm(R, W, hc->norm, N, W, H, hp->eps, w->xn, W, s)) return -1;
    w->xn_unnormed = false;
    return ts_cuda_hc_read_xn(w, hc, N, x, inj, s);
}

namespace {

// The write of a block and the norm of the read that follows (of hc_next): the slice-parallel kernel
// when that read is fused, else one block a (row, stream).
int write_norm(ts_cuda_work *w, float *R, const float *y, const float *inj, int64_t N, const ts_cuda_hc *next,
               moe_parts m, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count;
    if (N <= 0) return 0;
    if (w->hc_defer.next) return -1; // a write left to a read that never came
    w->xn_unnormed = w->hc_ss && hc_fused_shape(w, next, N, true).kernel;
    // Deferred: the writes of a block output y (not of a MoE combine, which every block of the split product
    // would redo from the k expert outputs) of up to kMaxDeferRows rows (one launch of the split product;
    // each of its blocks makes its stream's x from R, y and g, three reads where the separate write's xn is
    // one).
    if (w->xn_unnormed && !w->hc_defer.off && hc_defer_enabled() && !m.eo && N <= kMaxDeferRows &&
        next->down_inject.data && next->norm && !(reinterpret_cast<uintptr_t>(R) & 15u) &&
        !(reinterpret_cast<uintptr_t>(y) & 15u) && !(reinterpret_cast<uintptr_t>(next->norm) & 15u) &&
        ts_cuda_matmul_split_takes(&next->down_inject, hp->hc_rank + C, static_cast<int>(C), N, C * H)) {
        w->hc_defer = {false, next, R, y, inj, w->hc_defer.count + 1};
        return 0;
    }
    if (w->xn_unnormed) {
        const dim3 grid(static_cast<unsigned>(write_slices(hp)), static_cast<unsigned>(N));
        return launch(hc_write_ss_kernel, grid, dim3(kThreads), 0, s, R, y, inj, H, static_cast<int>(C),
                      next->norm, w->xn, w->hc_ss, m) == cudaSuccess
                   ? 0
                   : -1;
    }
    if (N * C > INT_MAX) return -1;
    const dim3 grid(static_cast<unsigned>(N * C));
    const int threads = H >= 1024 ? 512 : H >= 256 ? 256 : 64;
    return launch(hc_write_norm_kernel, grid, dim3(threads), 0, s, R, y, inj, H, C, next->norm, hp->eps,
                  w->xn, m) == cudaSuccess
               ? 0
               : -1;
}

} // namespace

extern "C" int ts_cuda_hc_write_norm(ts_cuda_work *w, float *R, const float *y, const float *inj, int64_t N,
                                     const ts_cuda_hc *next, cudaStream_t s) {
    return write_norm(w, R, y, inj, N, next, moe_parts{nullptr, nullptr, nullptr, 0}, s);
}

extern "C" int ts_cuda_hc_write_norm_moe(ts_cuda_work *w, float *R, const float *y, const float *inj,
                                         int64_t N, const ts_cuda_hc *next, cudaStream_t s) {
    if (!w->sg || !w->eo || !w->topk_w) return -1;
    return write_norm(w, R, y, inj, N, next,
                      moe_parts{w->sg, w->eo, w->topk_w, static_cast<int>(w->hp->n_expert_used)}, s);
}

extern "C" int ts_cuda_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t N,
                                cudaStream_t s) {
    const int64_t H = hp->n_embd, C = hp->hc_count;
    if (N <= 0) return 0;
    hc_write_kernel<<<blocks_for(N * C * H), kThreads, 0, s>>>(R, y, inj, N, H, C);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
