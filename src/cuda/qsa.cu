// Qwen Sparse Attention on the GPU (MODEL.md §5.6–5.7), the twin of src/cpu/qsa.c: gated GQA
// attention whose keys are chosen per query by a block indexer. Same math, same state layout
// (src/cuda/layers.h); every position, sequence and block index is read on the device, so the
// launches below depend only on N, b->max_ctx and the hyperparameters (a decode step is captured
// once as a CUDA graph and replayed).
//
// Symbols: nh/nkv/hd attention heads, G = nh/nkv query heads per kv head (contiguous groups),
// ni/di indexer heads, B tokens per indexer block, Kb top blocks, p = pos[r] the row's position,
// nb = ⌊(p+1)/B⌋ its complete blocks.
//
// Launches, in stream order:
//   1. ts_cuda_matmul ×5   qg = attn_q·x (N × nh·2·hd: per head hd query values, then hd gate
//                          values), k/v → w->kv (keys, then values; the values go to scratch when
//                          N·nkv·hd is not a multiple of 4, i.e. not 16-byte aligned), iq = idx_q·x,
//                          raw indexer keys → w->ik. At one row, where the upload joined their rows
//                          (L->qsa_in), one product (two with v apart) into scratch after the row's
//                          regions: qg, k, v, iq and the raw key back to back there, every kernel
//                          below reading them where they are (TURBOSPARK_CUDA_QSA_JOIN=0: five).
//   2. qsa_prep_kernel     grid (N, nh + nkv + ni + 1), one block per (row, item): query head h →
//                          rmsnorm(attn_q_norm) + NeoX rope at p, in place in qg; kv head j →
//                          rmsnorm(attn_k_norm) + rope into the record TS_CUDA_K[p][j], the value into
//                          TS_CUDA_V[p][j] (fp16 records, q.kv_rec; q rounded alike in place);
//                          indexer head → rmsnorm(idx_q_norm) + rope in place in
//                          iq; the last item copies the raw indexer key to TS_CUDA_IDX_RAW[p].
//   3. qsa_block_kernel    grid (N): the rows with (p+1) % B == 0 complete block b = (p+1)/B − 1:
//                          rope(rmsnorm(mean of raw keys bB .. bB+B−1; idx_k_norm), bB) →
//                          TS_CUDA_IDX_BLK[b]. It runs after every raw key of the micro-batch is
//                          cached (a block may straddle micro-batches or rows of this one), and
//                          before any selection: a row only reads blocks < its own nb, all of which
//                          are complete by then.
//   4. selection           skipped entirely when no row can be sparse (TURBOSPARK_QSA_FORCE_DENSE
//                          set, or max_ctx/B ≤ Kb). Rows are taken in passes of rows_pass rows so
//                          the score buffer stays bounded (ts_memplan_qsa):
//      qsa_score_kernel    grid (⌈(max_ctx/B)/64⌉, rows_pass): 64 blocks of one row per thread
//                          block (early exit past the row's nb, or when the row is dense). A warp
//                          scores 4 blocks at a time against 4 indexer heads at a time: lanes
//                          stride over di (coalesced reads of the block keys, 16 independent loads
//                          in flight), 16 partial dots per lane, summed over the warp with a
//                          transposed butterfly (16 shuffles for 16 sums). score =
//                          Σ_h ReLU(q_h·K_b) / √di + 0, the heads summed in order as the CPU does.
//      qsa_topk_kernel     grid (rows_pass), 1024 threads, one row a block (src/cuda/qsa_select.cuh,
//                          as the next): exact top-Kb by an MSB-first radix select on order-preserving keys of the float bits (4
//                          passes of 8 bits, warp-aggregated shared-memory histograms, early stop
//                          once the threshold digit's bin is taken whole), then one ordered
//                          compaction: every block above the threshold, plus the threshold-equal
//                          ones with the LOWEST indices, written in ascending block order to
//                          sel[r][0 .. Kb). The same set as the CPU's sort (score desc, index asc).
//      qsa_sel_*_kernel    in its place when max_ctx/B ≥ TS_MEMPLAN_QSA_SEL_MIN (8,192): the same select
//                          over ⌈nbm/2,048⌉ thread blocks a row, in sub-passes of ≤ 64 rows: a memset
//                          of the work area, four digit launches (each block adds its 2,048 scores'
//                          histogram into the row's, in global memory; every block derives the digits
//                          so far from those), a count of each block's keys above and at the
//                          threshold, then the ordered writes, each block after the ones before it.
//                          The same set and order (TURBOSPARK_CUDA_QSA_SEL_BLOCKS=0: one block a row).
//   5. qsa_attn_kernel     grid (N, nkv·ngroups, nsplit), 256 threads: one kv head (and a group of
//                          ≤ 16 of its query heads, which share every K/V read), one slice of the
//                          row's allowed positions (dense: 0..p; sparse: the Kb selected blocks,
//                          then the tail nb·B .. p). The slice is walked in sub-chunks of 32
//                          positions with an online softmax (flash-decoding): each thread first
//                          issues the loads of its V column for the sub-chunk (kept in registers),
//                          each warp loads the K rows of 4 positions (float4, coalesced 1 KiB
//                          rows) and dots them with the group's queries (shared memory), the 16
//                          head sums reduced by the transposed butterfly; then a warp per head
//                          updates the running max/sum, and thread d accumulates Σ p·v for every
//                          head of the group from its registers. A split covers at least 64
//                          positions, so short lists leave the last splits empty (they only write
//                          m = −inf, l = 0). nsplit = 1 (large N): the result times σ(gate) goes
//                          straight to w->att; otherwise the unnormalised partials (acc, m, l) go
//                          to scratch and
//      qsa_attn_tc_kernel  (src/cuda/qsa_attn_tc.cuh) in its place from kTcMinRows = 64 rows on, for
//                          head dims 32, 64, 128, 256 and G ≤ 16: the same lists, softmax and outputs,
//                          one block per (row, kv head, split), the products as split TF32 MMAs
//                          (TURBOSPARK_CUDA_QSA_TC=0 keeps qsa_attn_kernel).
//   6. qsa_combine_kernel  grid (N, nh) merges the nsplit partials: o = Σ_s e^{m_s−M}·acc_s /
//                          Σ_s e^{m_s−M}·l_s, times σ(gate) → w->att.
//   7. ts_cuda_matmul      y = attn_output·att.
//
// nsplit = min(⌈max_n / 64⌉, ⌈256 / (N·nkv·ngroups)⌉) with max_n the longest allowed list any
// row can have: min(max_ctx, (Kb+1)·B) (max_ctx under FORCE_DENSE). Batch-1 decode at the released
// shapes (≤ 2,052 positions, nkv = 2) runs 33 splits of ≤ 64 positions: 66 thread blocks stream
// the 8 MiB of K/V, partials add ~10 %.
//
// Numerics: the CPU's formulas (true divisions, sqrtf, expf, the rope of ts_drope_pair) in fp32, with
// the attention operands in 16 bits as the precision policy allows: the K/V caches hold fp16 records at
// a power-of-two scale per (position, kv head) (ts_memplan_qsa_kv_record; the products' x rule), and the prep kernel
// rounds q the same way, so q·k products are exact and summed in fp32; the CPU twin
// (TURBOSPARK_CPU_ROUND_X) rounds q, k and v alike. Reductions are warp/block trees, so results agree
// with the twin to fp32 rounding (a score within rounding of a tie may therefore pick a different block
// than the CPU). The tensor-core attention's P enters as two TF32 parts (~22 bits, fp32 accumulation).
// The selected lists are in ascending order and every sum has a fixed order: runs are deterministic.
//
// TODO (prefill speed): scoring reads the block keys (fp32) and attention the K/V records once per row
// and kv head, ~12.5 GB a layer at 4,096 rows of the released shapes; rows of one sequence sharing a
// block would read it once.
// One block a row, the selection is bound by that SM's instruction issue: 94 µs a row at 32,768 blocks (128K
// tokens), 224 µs at 65,536 on an H100 (test_cuda_qsa --bench); hence the many-block form at long contexts.
#include "cuda/cp_async.cuh"
#include "cuda/cuda_device.h"
#include "cuda/gemv_tc.cuh"
#include "cuda/layers.h"
#include "model/memplan.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr unsigned kFull = 0xffffffffu;

constexpr int kPrepThreads = 128;  // prep and block-completion kernels
constexpr int kScoreWarps = 8;     // score kernel: warps per thread block
constexpr int kScoreChunk = 64;    // blocks scored per thread block (2 rounds of 8 warps × 4)
constexpr int kTopkThreads = 1024; // top-k kernel
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kAttThreads = 256; // attention kernel
constexpr int kAttWarps = kAttThreads / 32;
constexpr int kAttCh = 32;  // positions per sub-chunk (one per lane in the softmax step)
constexpr int kQLoads = 16; // query loads a thread has in flight in qsa_attn_kernel
// the scratch layout, the split count and the head groups are the memory plan's (src/model/memplan.h)
constexpr int kMaxGH = TS_MEMPLAN_QSA_MAX_GH;          // query heads per attention thread block
constexpr int kMinSplitLen = TS_MEMPLAN_QSA_MIN_SPLIT; // positions per split at least
constexpr int kCombineThreads = 256;
constexpr int kMaxHeadDim = 2 * kAttThreads; // hd ≤ 512

// Shapes of the layer, from the host hparams (kernel argument).
struct qsa_shape {
    int nh, nkv, hd, G; // attention heads, kv heads, head dim, G = nh / nkv
    int ni, di;         // indexer heads and head dim
    int n_rot;          // rotary dims
    int B;              // tokens per indexer block
    int Kb;             // top blocks
    float eps, theta;
    int64_t nbm; // row stride of the score buffer: max_ctx / B
    int kv_rec;  // bytes of a K or V cache record (ts_memplan_qsa_kv_record)
};

// ---- small device helpers ----------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

// Sums 16 values over the 32 lanes of a warp with 16 shuffles (a transposed butterfly: at each
// step a lane keeps half of its values and sends the other half to its partner). On return lane l
// holds the full sum of value (l >> 1) & 15.
__device__ __forceinline__ float warp_sum16(float (&v)[16]) {
    const int lane = threadIdx.x & 31;
    bool up = lane & 16;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float send = up ? v[k] : v[k + 8], keep = up ? v[k + 8] : v[k];
        v[k] = keep + __shfl_xor_sync(kFull, send, 16);
    }
    up = lane & 8;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const float send = up ? v[k] : v[k + 4], keep = up ? v[k + 4] : v[k];
        v[k] = keep + __shfl_xor_sync(kFull, send, 8);
    }
    up = lane & 4;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const float send = up ? v[k] : v[k + 2], keep = up ? v[k + 2] : v[k];
        v[k] = keep + __shfl_xor_sync(kFull, send, 4);
    }
    up = lane & 2;
    {
        const float send = up ? v[0] : v[1], keep = up ? v[1] : v[0];
        v[0] = keep + __shfl_xor_sync(kFull, send, 2);
    }
    return v[0] + __shfl_xor_sync(kFull, v[0], 1);
}

// One sub-chunk of the online softmax (flash-decoding) of both attention kernels: a warp per head (warps
// w, w + nw, ... of the block take heads w, ...), a lane per position (cnt ≤ 32 of them). Head h's scores
// p[h·ps + lane] become e^(s − m_new)·pv[lane], pv the positions' V scales (powers of two, exact), 0 past
// cnt (so the P·V that follows needs no guard); its running max m_s[h] and sum l_s[h] (of the unscaled
// e^(s − m_new)) move on, and c_s[h] = e^(m_old − m_new) rescales its accumulators (0 on the first
// sub-chunk, m_old = −inf).
__device__ __forceinline__ void online_softmax_step(float *p, int ps, const float *pv, float *m_s, float *l_s,
                                                    float *c_s, int gh, int cnt, int nw) {
    const int lane = threadIdx.x & 31;
    for (int h = threadIdx.x >> 5; h < gh; h += nw) {
        const float s = lane < cnt ? p[h * ps + lane] : -INFINITY;
        const float m_old = m_s[h], m_new = fmaxf(m_old, warp_max(s));
        const float e = lane < cnt ? expf(s - m_new) : 0.0f;
        p[h * ps + lane] = lane < cnt ? e * pv[lane] : 0.0f;
        const float sum = warp_sum(e);
        if (lane == 0) {
            const float c = expf(m_old - m_new);
            c_s[h] = c;
            l_s[h] = l_s[h] * c + sum;
            m_s[h] = m_new;
        }
    }
}

// K/V cache records (q.kv_rec bytes, ts_memplan_qsa_kv_record): a (position, kv head)'s hd values as fp16
// at a power of two (tc_x_scale: their max|v| put in [2^14, 2^15), the products' x rule), then in the
// record's last 16 bytes the float inverse of that power. A cached value is half · inverse, exactly.
__device__ __forceinline__ float *kv_inv_at(uint8_t *rec, const qsa_shape &q) {
    return reinterpret_cast<float *>(rec + q.kv_rec - 16);
}
__device__ __forceinline__ float kv_inv(const uint8_t *rec, const qsa_shape &q) {
    return *reinterpret_cast<const float *>(rec + q.kv_rec - 16);
}

// Sum (MAX: max) over the thread block (any multiple of 32 threads), the warps' partials reduced by warp 0;
// red: ≥ 33 floats of shared memory.
template <bool MAX> __device__ float block_reduce(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? red[lane] : 0.0f;
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}
// The max (of values ≥ 0: warps past the block count as 0), red free again on return.
__device__ float block_max(float v, float *red) {
    const float m = block_reduce<true>(v, red);
    __syncthreads(); // red is free again
    return m;
}
__device__ float block_sum(float v, float *red) {
    return block_reduce<false>(v, red);
}

// sh[0 .. n) (complete, synchronised) rounded as the products round x: fp16 at the power of two of its
// max|·| (tc_x_scale); returns that power's inverse, *scale_out the power.
__device__ float round_shared(const float *sh, int n, float *red, float *scale_out) {
    float amax = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) amax = fmaxf(amax, fabsf(sh[i]));
    float inv;
    *scale_out = ts_cu::tc_x_scale(block_max(amax, red), inv);
    return inv;
}

// sh[0..n) ← rope(rmsnorm(sh; g, eps), pos) over the block, as ts_cpu_rmsnorm + ts_cpu_rope with
// one group of n. sh holds the input (written before the call, not yet synchronised).
__device__ void norm_rope_shared(float *sh, int n, const float *__restrict__ g, float eps, int n_rot,
                                 float theta, int64_t pos, float *red) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += sh[i] * sh[i];
    ss = block_sum(ss, red); // synchronises: sh is complete from here on
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sh[i] = sh[i] * r * g[i];
    __syncthreads();
    const int half = n_rot / 2;
    for (int d = threadIdx.x; d < half; d += blockDim.x) {
        float a = sh[d], c = sh[d + half];
        ts_drope_pair(a, c, d, n_rot, theta, pos);
        sh[d] = a, sh[d + half] = c;
    }
    __syncthreads();
}

// Allowed-list length of a row: dense p+1, sparse Kb·B + the tail.
__device__ __forceinline__ int64_t allowed_count(const qsa_shape &q, int64_t p, int64_t nb, bool dense) {
    return dense ? p + 1 : (int64_t)q.Kb * q.B + (p + 1 - nb * q.B);
}

// The a-th allowed position of a row (nb its complete blocks, selr its Kb selected blocks): dense a;
// sparse the selected blocks' tokens in order, then the tail nb·B .. p.
__device__ __forceinline__ int64_t allowed_position(const qsa_shape &q, const int32_t *selr, bool dense,
                                                    int64_t nb, int64_t a) {
    const int64_t sparse_len = (int64_t)q.Kb * q.B;
    if (dense) return a;
    if (a < sparse_len) return (int64_t)selr[a / q.B] * q.B + a % q.B;
    return nb * q.B + (a - sparse_len);
}

// What the attention kernels know of their row r, kv head j and split.
struct att_row {
    int64_t nb;           // the row's complete indexer blocks
    bool dense;           // every position up to the row's (else the selected blocks and the tail)
    int64_t a0, a1;       // this split's allowed positions [a0, a1)
    const uint8_t *K, *V; // the kv head's records of position 0 (q.kv_rec bytes each)
    int64_t rs;           // bytes from a position's records to the next: nkv records
    const int32_t *selr;  // the row's Kb selected blocks
};

// The row's setup. The split is an even share of the allowed list but at least kMinSplitLen
// positions (short lists leave the last splits empty); an empty split (never the first one) writes
// m = −inf, l = 0 for its gh heads from h0 (weight 0 in the combine) and returns false.
__device__ __forceinline__ bool att_row_begin(const ts_cuda_batch &b, int l, const qsa_shape &q,
                                              const int32_t *sel, int all_dense, int nsplit, int r, int j,
                                              int split, int h0, int gh, float *part_ml, att_row &o) {
    const int64_t p = b.pos[r];
    o.nb = (p + 1) / q.B;
    o.dense = all_dense || o.nb <= q.Kb;
    const int64_t n = allowed_count(q, p, o.nb, o.dense);
    int64_t chunk = (n + nsplit - 1) / nsplit;
    if (chunk < kMinSplitLen) chunk = kMinSplitLen;
    o.a0 = split * chunk, o.a1 = o.a0 + chunk < n ? o.a0 + chunk : n;
    if (o.a0 >= o.a1) {
        if ((int)threadIdx.x < gh) {
            float *ml = part_ml + (((int64_t)r * q.nh + h0 + threadIdx.x) * nsplit + split) * 2;
            ml[0] = -INFINITY, ml[1] = 0.0f;
        }
        return false;
    }
    const int seq = b.row_seq[r];
    o.K = (const uint8_t *)ts_cuda_state(b, seq, l, TS_CUDA_K) + (int64_t)j * q.kv_rec;
    o.V = (const uint8_t *)ts_cuda_state(b, seq, l, TS_CUDA_V) + (int64_t)j * q.kv_rec;
    o.rs = (int64_t)q.nkv * q.kv_rec;
    o.selr = sel + (int64_t)r * q.Kb;
    return true;
}

// ---- 2. per-row norms, rope and cache writes --------------------------------------------------

__global__ void __launch_bounds__(kPrepThreads)
    qsa_prep_kernel(ts_cuda_batch b, int l, qsa_shape q, float *__restrict__ qg,
                    const float *__restrict__ kraw, const float *__restrict__ vraw, float *__restrict__ iq,
                    const float *__restrict__ ikraw, const float *__restrict__ qnorm,
                    const float *__restrict__ knorm, const float *__restrict__ iqnorm) {
    extern __shared__ float sh[]; // max(hd, di) floats
    __shared__ float red[33];
    const int r = blockIdx.x, item = blockIdx.y;
    const int64_t p = b.pos[r];
    const int seq = b.row_seq[r];
    const int hd = q.hd, di = q.di;

    if (item < q.nh) { // query head: in place in qg, rounded as the cached keys are (fp32 values of fp16)
        float *v = qg + ((int64_t)r * q.nh + item) * 2 * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = v[i];
        norm_rope_shared(sh, hd, qnorm, q.eps, q.n_rot, q.theta, p, red);
        float scale;
        const float inv = round_shared(sh, hd, red, &scale);
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            v[i] = __half2float(__float2half_rn(sh[i] * scale)) * inv;
    } else if (item < q.nh + q.nkv) { // kv head j: key and value records into the caches
        const int j = item - q.nh;
        const int64_t src = ((int64_t)r * q.nkv + j) * hd, at = (p * q.nkv + j) * q.kv_rec;
        uint8_t *K = (uint8_t *)ts_cuda_state(b, seq, l, TS_CUDA_K) + at;
        uint8_t *V = (uint8_t *)ts_cuda_state(b, seq, l, TS_CUDA_V) + at;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = kraw[src + i];
        norm_rope_shared(sh, hd, knorm, q.eps, q.n_rot, q.theta, p, red);
        float scale;
        float inv = round_shared(sh, hd, red, &scale);
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            reinterpret_cast<__half *>(K)[i] = __float2half_rn(sh[i] * scale);
        if (threadIdx.x == 0) *kv_inv_at(K, q) = inv;
        __syncthreads(); // sh is read before the value overwrites it
        for (int i = threadIdx.x; i < hd; i += blockDim.x) sh[i] = vraw[src + i];
        __syncthreads();
        inv = round_shared(sh, hd, red, &scale);
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            reinterpret_cast<__half *>(V)[i] = __float2half_rn(sh[i] * scale);
        if (threadIdx.x == 0) *kv_inv_at(V, q) = inv;
    } else if (item < q.nh + q.nkv + q.ni) { // indexer query head: in place in iq
        const int h = item - q.nh - q.nkv;
        float *v = iq + ((int64_t)r * q.ni + h) * di;
        for (int i = threadIdx.x; i < di; i += blockDim.x) sh[i] = v[i];
        norm_rope_shared(sh, di, iqnorm, q.eps, q.n_rot, q.theta, p, red);
        for (int i = threadIdx.x; i < di; i += blockDim.x) v[i] = sh[i];
    } else { // raw indexer key into its cache
        float *raw = (float *)ts_cuda_state(b, seq, l, TS_CUDA_IDX_RAW) + p * di;
        for (int i = threadIdx.x; i < di; i += blockDim.x) raw[i] = ikraw[(int64_t)r * di + i];
    }
}

// ---- 3. block completion -----------------------------------------------------------------------

__global__ void __launch_bounds__(kPrepThreads)
    qsa_block_kernel(ts_cuda_batch b, int l, qsa_shape q, const float *__restrict__ kblknorm) {
    extern __shared__ float sh[]; // di floats
    __shared__ float red[33];
    const int r = blockIdx.x;
    const int64_t p = b.pos[r];
    if ((p + 1) % q.B != 0) return; // uniform over the block
    const int64_t blk = (p + 1) / q.B - 1;
    const int seq = b.row_seq[r], di = q.di;
    const float *raw = (const float *)ts_cuda_state(b, seq, l, TS_CUDA_IDX_RAW) + blk * q.B * di;
    float *K = (float *)ts_cuda_state(b, seq, l, TS_CUDA_IDX_BLK) + blk * di;
    for (int i = threadIdx.x; i < di; i += blockDim.x) {
        float s = 0.0f;
        for (int t = 0; t < q.B; t++) s += raw[(int64_t)t * di + i]; // in token order, as the CPU
        sh[i] = s / (float)q.B;
    }
    norm_rope_shared(sh, di, kblknorm, q.eps, q.n_rot, q.theta, blk * q.B,
                     red); // at the block's first position
    for (int i = threadIdx.x; i < di; i += blockDim.x) K[i] = sh[i];
}

// ---- 4a. block scores --------------------------------------------------------------------------

__global__ void __launch_bounds__(kScoreWarps * 32)
    qsa_score_kernel(ts_cuda_batch b, int l, qsa_shape q, const float *__restrict__ iq, int r0,
                     float *__restrict__ scores) {
    const int r = r0 + blockIdx.y;
    const int64_t p = b.pos[r], nb = (p + 1) / q.B;
    if (nb <= q.Kb) return; // dense row: nothing to select
    const int64_t c0 = (int64_t)blockIdx.x * kScoreChunk;
    if (c0 >= nb) return;
    const int64_t c1 = c0 + kScoreChunk < nb ? c0 + kScoreChunk : nb;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, di = q.di, ni = q.ni;
    const float *Kblk = (const float *)ts_cuda_state(b, b.row_seq[r], l, TS_CUDA_IDX_BLK);
    const float *qr = iq + (int64_t)r * ni * di;
    float *out = scores + (int64_t)blockIdx.y * q.nbm;
    const float sq = sqrtf((float)di);

    for (int64_t b0 = c0 + warp * 4; b0 < c1; b0 += kScoreWarps * 4) {
        // lane l ends up owning block (l >> 3) & 3 of this group of 4
        float s = 0.0f;
        for (int h0 = 0; h0 < ni; h0 += 4) {
            float a[16]; // a[4·k + hh]: block b0 + k, head h0 + hh
#pragma unroll
            for (int k = 0; k < 16; k++) a[k] = 0.0f;
#pragma unroll 2
            for (int i = lane; i < di; i += 32) {
                float kv[4], qv[4];
#pragma unroll
                for (int k = 0; k < 4; k++) kv[k] = b0 + k < c1 ? Kblk[(b0 + k) * di + i] : 0.0f;
#pragma unroll
                for (int hh = 0; hh < 4; hh++) qv[hh] = h0 + hh < ni ? qr[(int64_t)(h0 + hh) * di + i] : 0.0f;
#pragma unroll
                for (int k = 0; k < 4; k++)
#pragma unroll
                    for (int hh = 0; hh < 4; hh++) a[4 * k + hh] += qv[hh] * kv[k];
            }
            const float tot =
                warp_sum16(a); // lane l: value (l >> 1) & 15 = block (l >> 3) & 3, head (l >> 1) & 3
            const int kb = (lane >> 3) & 3;
#pragma unroll
            for (int hh = 0; hh < 4; hh++) { // the heads of my block, in order
                const float d = __shfl_sync(kFull, tot, 8 * kb + 2 * hh);
                if (h0 + hh < ni) s += d > 0.0f ? d : 0.0f; // ReLU per head, then the sum
            }
        }
        const int kb = (lane >> 3) & 3;
        if ((lane & 7) == 0 && b0 + kb < c1) out[b0 + kb] = s / sq + 0.0f; // + 0 turns −0 into +0
    }
}

// ---- 4b. exact top-Kb (qsa_select.cuh) ------------------------------------------------------------

#include "cuda/qsa_select.cuh"

// ---- 5. attention ------------------------------------------------------------------------------

// NV: float4 K loads per lane per row (hd = 128·NV), 0 = scalar loads (any hd); SL: head-dim
// slices of kAttThreads per thread (hd ≤ SL·256).
template <int NV, int SL>
__global__ void __launch_bounds__(kAttThreads)
    qsa_attn_kernel(ts_cuda_batch b, int l, qsa_shape q, const float *__restrict__ qg,
                    const int32_t *__restrict__ sel, int all_dense, int ngroups, int gh_max, int nsplit,
                    float *__restrict__ att, float *__restrict__ part_o, float *__restrict__ part_ml) {
    constexpr int PF = NV <= 2 ? 4 : 2; // K rows a warp loads at once
    extern __shared__ float4 smem4[];
    float *q_s = reinterpret_cast<float *>(smem4);          // [gh_max][hd] queries of the group (padded to 4)
    float *p_s = q_s + ((size_t)gh_max * q.hd + 3) / 4 * 4; // [gh_max][kAttCh] scores, then probabilities
    float *m_s = p_s + (size_t)gh_max * kAttCh;             // [kMaxGH] running max
    float *l_s = m_s + kMaxGH;                              // [kMaxGH] running sum
    float *c_s = l_s + kMaxGH;                              // [kMaxGH] rescale of this sub-chunk
    int64_t *pos_s = reinterpret_cast<int64_t *>(c_s + kMaxGH); // [kAttCh] positions of the sub-chunk
    float *ik_s = reinterpret_cast<float *>(pos_s + kAttCh);    // [kAttCh] their K records' inverse scales
    float *iv_s = ik_s + kAttCh;                                // [kAttCh] and their V records'

    const int r = blockIdx.x, j = blockIdx.y / ngroups, grp = blockIdx.y % ngroups, split = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hd = q.hd, nh = q.nh;
    const int h0 = j * q.G + grp * gh_max;
    const int gh = min(gh_max, q.G - grp * gh_max);
    if (gh <= 0) return;

    att_row ar;
    if (!att_row_begin(b, l, q, sel, all_dense, nsplit, r, j, split, h0, gh, part_ml, ar)) return;
    const float scale = 1.0f / sqrtf((float)hd);

    // the group's queries (up to 16 heads × hd floats, ~16 a thread): kQLoads loads a thread in flight at once,
    // not one L2 round trip each
    const float *qrow = qg + (int64_t)r * nh * 2 * hd;
    for (int i0 = tid; i0 < gh * hd; i0 += kAttThreads * kQLoads) {
        float v[kQLoads];
#pragma unroll
        for (int u = 0; u < kQLoads; u++) {
            const int i = i0 + u * kAttThreads, h = i / hd, d = i - h * hd;
            v[u] = i < gh * hd ? qrow[(int64_t)(h0 + h) * 2 * hd + d] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kQLoads; u++)
            if (i0 + u * kAttThreads < gh * hd) q_s[i0 + u * kAttThreads] = v[u];
    }
    if (tid < kMaxGH) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;

    float acc[SL][kMaxGH];
#pragma unroll
    for (int sl = 0; sl < SL; sl++)
#pragma unroll
        for (int h = 0; h < kMaxGH; h++) acc[sl][h] = 0.0f;

    for (int64_t c0 = ar.a0; c0 < ar.a1; c0 += kAttCh) {
        const int cnt = (int)(ar.a1 - c0 < kAttCh ? ar.a1 - c0 : kAttCh);
        if (tid < cnt) {
            const int64_t pos = allowed_position(q, ar.selr, ar.dense, ar.nb, c0 + tid);
            pos_s[tid] = pos;
            ik_s[tid] = kv_inv(ar.K + pos * ar.rs, q), iv_s[tid] = kv_inv(ar.V + pos * ar.rs, q);
        }
        __syncthreads(); // pos_s and the scales (and, the first time, q_s / m_s / l_s) ready

        // V column of this thread for the sub-chunk (the records' fp16 values; their scales go into P):
        // issued now, consumed after the softmax step
        float vpre[SL][kAttCh];
#pragma unroll
        for (int sl = 0; sl < SL; sl++) {
            const int d = tid + sl * kAttThreads;
#pragma unroll
            for (int t = 0; t < kAttCh; t++)
                vpre[sl][t] = (d < hd && t < cnt)
                                  ? __half2float(reinterpret_cast<const __half *>(ar.V + pos_s[t] * ar.rs)[d])
                                  : 0.0f;
        }

        // scores: a warp per position, all gh heads at once
        if constexpr (NV > 0) {
            for (int t0 = warp * PF; t0 < cnt; t0 += kAttWarps * PF) {
                float4 kr[PF][NV];
#pragma unroll
                for (int u = 0; u < PF; u++) {
                    const uint2 *src =
                        reinterpret_cast<const uint2 *>(ar.K + (t0 + u < cnt ? pos_s[t0 + u] : 0) * ar.rs);
#pragma unroll
                    for (int v = 0; v < NV; v++) {
                        const uint2 hv = t0 + u < cnt ? src[v * 32 + lane] : make_uint2(0u, 0u);
                        const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&hv.x));
                        const float2 c = __half22float2(*reinterpret_cast<const __half2 *>(&hv.y));
                        kr[u][v] = make_float4(a.x, a.y, c.x, c.y);
                    }
                }
#pragma unroll
                for (int u = 0; u < PF; u++) {
                    float part[kMaxGH];
#pragma unroll
                    for (int h = 0; h < kMaxGH; h++) {
                        part[h] = 0.0f;
                        if (h < gh) {
                            const float4 *qs4 = reinterpret_cast<const float4 *>(q_s + h * hd);
#pragma unroll
                            for (int v = 0; v < NV; v++) {
                                const float4 qv = qs4[v * 32 + lane], kv = kr[u][v];
                                part[h] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
                            }
                        }
                    }
                    const float tot = warp_sum16(part);
                    const int hv = (lane >> 1) & 15;
                    if ((lane & 1) == 0 && hv < gh && t0 + u < cnt)
                        p_s[hv * kAttCh + t0 + u] = tot * ik_s[t0 + u] * scale;
                }
            }
        } else {
            for (int t = warp; t < cnt; t += kAttWarps) {
                const __half *kr = reinterpret_cast<const __half *>(ar.K + pos_s[t] * ar.rs);
                float part[kMaxGH];
#pragma unroll
                for (int h = 0; h < kMaxGH; h++) part[h] = 0.0f;
                for (int d = lane; d < hd; d += 32) {
                    const float kv = __half2float(kr[d]);
#pragma unroll
                    for (int h = 0; h < kMaxGH; h++)
                        if (h < gh) part[h] += q_s[h * hd + d] * kv;
                }
                const float tot = warp_sum16(part);
                const int hv = (lane >> 1) & 15;
                if ((lane & 1) == 0 && hv < gh) p_s[hv * kAttCh + t] = tot * ik_s[t] * scale;
            }
        }
        __syncthreads();

        // online softmax; P carries the positions' V scales, the sums do not
        online_softmax_step(p_s, kAttCh, iv_s, m_s, l_s, c_s, gh, cnt, kAttWarps);
        __syncthreads();

        // o += Σ p·v for every head of the group, thread = head-dim element
#pragma unroll
        for (int sl = 0; sl < SL; sl++) {
#pragma unroll
            for (int h = 0; h < kMaxGH; h++)
                if (h < gh) acc[sl][h] *= c_s[h];
#pragma unroll
            for (int t = 0; t < kAttCh; t += 4) {
#pragma unroll
                for (int h = 0; h < kMaxGH; h++) {
                    if (h < gh) {
                        const float4 pv = *reinterpret_cast<const float4 *>(p_s + h * kAttCh + t);
                        acc[sl][h] += pv.x * vpre[sl][t] + pv.y * vpre[sl][t + 1] + pv.z * vpre[sl][t + 2] +
                                      pv.w * vpre[sl][t + 3];
                    }
                }
            }
        }
        __syncthreads(); // pos_s and p_s are rewritten by the next sub-chunk
    }

    // output: final (one split) or partial
#pragma unroll
    for (int sl = 0; sl < SL; sl++) {
        const int d = tid + sl * kAttThreads;
        if (d >= hd) continue;
#pragma unroll
        for (int h = 0; h < kMaxGH; h++) {
            if (h >= gh) continue;
            const int hq = h0 + h;
            if (nsplit == 1) {
                const float gate = qrow[(int64_t)hq * 2 * hd + hd + d];
                att[((int64_t)r * nh + hq) * hd + d] = acc[sl][h] / l_s[h] * ts_dsigmoid(gate);
            } else {
                part_o[(((int64_t)r * nh + hq) * nsplit + split) * hd + d] = acc[sl][h];
            }
        }
    }
    if (nsplit > 1 && tid < gh) {
        float *ml = part_ml + (((int64_t)r * nh + h0 + tid) * nsplit + split) * 2;
        ml[0] = m_s[tid], ml[1] = l_s[tid];
    }
}

// the tensor-core attention of many rows (qsa_attn_tc_kernel)
#include "cuda/qsa_attn_tc.cuh"

// ---- 6. split combine --------------------------------------------------------------------------

__global__ void __launch_bounds__(kCombineThreads)
    qsa_combine_kernel(qsa_shape q, int nsplit, const float *__restrict__ qg,
                       const float *__restrict__ part_o, const float *__restrict__ part_ml,
                       float *__restrict__ att) {
    extern __shared__ float wsh[]; // [nsplit] weights, then L
    const int r = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int hd = q.hd;
    const int64_t base = ((int64_t)r * q.nh + h) * nsplit;
    if (tid < 32) {
        float M = -INFINITY;
        for (int s = lane; s < nsplit; s += 32)
            if (part_ml[(base + s) * 2 + 1] > 0.0f) M = fmaxf(M, part_ml[(base + s) * 2]);
        M = warp_max(M);
        float L = 0.0f;
        for (int s = lane; s < nsplit; s += 32) {
            const float m = part_ml[(base + s) * 2], ls = part_ml[(base + s) * 2 + 1];
            const float wgt = ls > 0.0f ? expf(m - M) : 0.0f;
            wsh[s] = wgt;
            L += wgt * ls;
        }
        L = warp_sum(L);
        if (lane == 0) wsh[nsplit] = L;
    }
    __syncthreads();
    const float L = wsh[nsplit];
    const float *gate = qg + ((int64_t)r * q.nh + h) * 2 * hd + hd;
    for (int d = tid; d < hd; d += kCombineThreads) {
        float o = 0.0f;
        for (int s = 0; s < nsplit; s++)
            if (wsh[s] != 0.0f) o += wsh[s] * part_o[(base + s) * hd + d]; // empty splits wrote no partial
        att[((int64_t)r * q.nh + h) * hd + d] = o / L * ts_dsigmoid(gate[d]);
    }
}

// ---- host side ---------------------------------------------------------------------------------

// At one row, the projections of the input as one product where the upload joined their rows
// (TURBOSPARK_CUDA_QSA_JOIN=0: five products; read at every call, as test_cuda_forward switches it).
bool join_enabled() {
    return ts_cuda_switch_on("TURBOSPARK_CUDA_QSA_JOIN");
}

bool force_dense() {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("TURBOSPARK_QSA_FORCE_DENSE");
        cached = e && *e && strcmp(e, "0") != 0;
    }
    return cached != 0;
}

bool launched() {
    return cudaGetLastError() == cudaSuccess;
}

// TURBOSPARK_CUDA_QSA_SEL_BLOCKS=0 keeps the selection one thread block a row at every context length.
bool sel_blocks_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_QSA_SEL_BLOCKS");
    return on;
}

// TURBOSPARK_CUDA_QSA_TC=0 keeps every attention launch on qsa_attn_kernel (fp32 SIMT).
bool attn_tc_enabled() {
    static const bool on = ts_cuda_switch_on("TURBOSPARK_CUDA_QSA_TC");
    return on;
}

template <int NV, int SL>
bool launch_attn(dim3 grid, size_t smem, cudaStream_t s, const ts_cuda_batch &b, int l, const qsa_shape &q,
                 const float *qg, const int32_t *sel, int dense, int ngroups, int gh_max, int nsplit,
                 float *att, float *part_o, float *part_ml) {
    qsa_attn_kernel<NV, SL><<<grid, kAttThreads, smem, s>>>(b, l, q, qg, sel, dense, ngroups, gh_max, nsplit,
                                                            att, part_o, part_ml);
    return launched();
}

} // namespace

extern "C" int ts_cuda_qsa(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l,
                           const float *x, float *y, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t N = b->n_rows;
    if (N <= 0) return 0;
    const int64_t H = hp->n_embd, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, kvw = nkv * hd;
    const int64_t ni = hp->idx_n_head, di = hp->idx_head_dim;
    if (nkv < 1 || nh % nkv != 0 || hd < 1 || hd > kMaxHeadDim || di < 1 || ni < 1 || hp->compress < 1 ||
        hp->n_rot % 2 != 0 || hp->n_rot > hd || hp->n_rot > di || b->max_ctx < 1)
        return -1;
    const bool dense = force_dense();
    ts_memplan_qsa lay;
    ts_memplan_qsa_layout(hp, N, b->max_ctx, dense, &lay);
    if (ts_memplan_qsa_total(&lay) > w->scratch_bytes) return -1;

    qsa_shape q;
    q.nh = (int)nh, q.nkv = (int)nkv, q.hd = (int)hd, q.G = (int)(nh / nkv);
    q.ni = (int)ni, q.di = (int)di, q.n_rot = (int)hp->n_rot, q.B = (int)hp->compress;
    q.Kb = (int)hp->idx_top_blocks, q.eps = hp->eps, q.theta = hp->rope_base;
    q.nbm = b->max_ctx / hp->compress;
    q.kv_rec = (int)ts_memplan_qsa_kv_record(hp);

    uint8_t *sp = static_cast<uint8_t *>(w->scratch);
    float *vbuf = lay.vbuf ? reinterpret_cast<float *>(sp) : nullptr;
    sp += lay.vbuf;
    int32_t *sel = reinterpret_cast<int32_t *>(sp);
    sp += lay.sel;
    float *scores = reinterpret_cast<float *>(sp);
    sp += lay.scores;
    uint32_t *sel_work = lay.sel_work && sel_blocks_enabled() ? reinterpret_cast<uint32_t *>(sp) : nullptr;
    sp += lay.sel_work;
    float *part_o = reinterpret_cast<float *>(sp);
    sp += lay.part_o;
    float *part_ml = reinterpret_cast<float *>(sp);

    // 1. projections (at one row joined: qg, k, v, iq, ik back to back after the row's scratch regions)
    float *qg = w->qg, *iq = w->iq, *ik = w->ik;
    float *kraw = w->kv;
    float *vraw = (N * kvw) % 4 == 0 ? w->kv + N * kvw : vbuf;
    const size_t jo = ts_memplan_align(ts_memplan_qsa_total(&lay));
    // (each part a whole number of 16-row chunks: alone it takes the same kernel and chunk form as joined)
    if (N == 1 && L->qsa_in.data && join_enabled() && (nh * 2 * hd) % 16 == 0 && kvw % 16 == 0 &&
        (ni * di) % 16 == 0 && di % 16 == 0 && jo + ts_memplan_qsa_in_out_bytes(hp) <= w->scratch_bytes) {
        qg = reinterpret_cast<float *>(static_cast<uint8_t *>(w->scratch) + jo);
        kraw = qg + nh * 2 * hd;
        if (L->qsa_in_v) // q|k|v|idx_q|idx_k
            vraw = kraw + kvw, iq = vraw + kvw, ik = iq + ni * di;
        else // q|k|idx_q|idx_k, then v's own product
            iq = kraw + kvw, ik = iq + ni * di, vraw = ik + di;
        if (ts_cuda_matmul(&L->qsa_in, 0, L->qsa_in.rows, x, 1, qg, s) ||
            (!L->qsa_in_v && ts_cuda_matmul(&L->attn_v, 0, kvw, x, 1, vraw, s)))
            return -1;
        w->qsa_joined++;
    } else {
        if (!vraw) return -1;
        if (ts_cuda_matmul(&L->attn_q, 0, nh * 2 * hd, x, N, qg, s) ||
            ts_cuda_matmul(&L->attn_k, 0, kvw, x, N, kraw, s) ||
            ts_cuda_matmul(&L->attn_v, 0, kvw, x, N, vraw, s) ||
            ts_cuda_matmul(&L->idx_q, 0, ni * di, x, N, iq, s) ||
            ts_cuda_matmul(&L->idx_k, 0, di, x, N, ik, s))
            return -1;
    }

    // 2. norms, rope, cache writes
    {
        const dim3 grid((unsigned)N, (unsigned)(nh + nkv + ni + 1));
        const size_t smem = (size_t)(hd > di ? hd : di) * sizeof(float);
        qsa_prep_kernel<<<grid, kPrepThreads, smem, s>>>(*b, l, q, qg, kraw, vraw, iq, ik, L->attn_q_norm,
                                                         L->attn_k_norm, L->idx_q_norm);
        if (!launched()) return -1;
    }

    // 3. indexer blocks completed by this micro-batch
    qsa_block_kernel<<<(unsigned)N, kPrepThreads, (size_t)di * sizeof(float), s>>>(*b, l, q, L->idx_k_norm);
    if (!launched()) return -1;

    // 4. block selection, in passes of rows_pass rows
    if (ts_memplan_qsa_can_be_sparse(hp, b->max_ctx, dense) && q.Kb > 0) {
        const unsigned chunks = (unsigned)((q.nbm + kScoreChunk - 1) / kScoreChunk);
        for (int64_t r0 = 0; r0 < N; r0 += lay.rows_pass) {
            const int64_t rp = N - r0 < lay.rows_pass ? N - r0 : lay.rows_pass;
            qsa_score_kernel<<<dim3(chunks, (unsigned)rp), kScoreWarps * 32, 0, s>>>(*b, l, q, iq, (int)r0,
                                                                                     scores);
            if (!launched()) return -1;
            // (many blocks a row: in sub-passes of the work area's rows)
            const int64_t sr = sel_work ? lay.sel_rows : rp;
            for (int64_t s0 = 0; s0 < rp; s0 += sr)
                if (!launch_select(*b, q, (int)(r0 + s0), (int)(rp - s0 < sr ? rp - s0 : sr),
                                   scores + s0 * q.nbm, sel_work, sel, s))
                    return -1;
        }
    }

    // 5. attention (6. combine when split)
    {
        int ngroups, gh_max;
        ts_memplan_qsa_head_groups(q.G, &ngroups, &gh_max);
        const int nsplit = lay.nsplit;
        const dim3 grid((unsigned)N, (unsigned)(nkv * ngroups), (unsigned)nsplit);
        const size_t smem =
            (((size_t)gh_max * hd + 3) / 4 * 4 + (size_t)gh_max * kAttCh + 3 * kMaxGH) * sizeof(float) +
            kAttCh * sizeof(int64_t) + 2 * kAttCh * sizeof(float);
        const int fd = dense ? 1 : 0;
        bool ok;
        const int tc =
            attn_tc_enabled() ? launch_attn_tc(*b, l, q, qg, sel, fd, nsplit, w->att, part_o, part_ml, s) : 0;
        if (tc)
            ok = tc > 0;
        else if (hd <= kAttThreads) {
            if (hd == 256)
                ok = launch_attn<2, 1>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
            else if (hd == 128)
                ok = launch_attn<1, 1>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
            else
                ok = launch_attn<0, 1>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
        } else {
            if (hd == 512)
                ok = launch_attn<4, 2>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
            else if (hd == 384)
                ok = launch_attn<3, 2>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
            else
                ok = launch_attn<0, 2>(grid, smem, s, *b, l, q, qg, sel, fd, ngroups, gh_max, nsplit, w->att,
                                       part_o, part_ml);
        }
        if (!ok) return -1;
        if (nsplit > 1) {
            qsa_combine_kernel<<<dim3((unsigned)N, (unsigned)nh), kCombineThreads,
                                 (size_t)(nsplit + 1) * sizeof(float), s>>>(q, nsplit, qg, part_o, part_ml,
                                                                            w->att);
            if (!launched()) return -1;
        }
    }

    // 7. output projection
    return ts_cuda_matmul(&L->attn_output, 0, H, w->att, N, y, s) ? -1 : 0;
}

extern "C" int ts_cuda_qsa_topk(const float *scores, int rows, int64_t nbm, const int32_t *pos, int B, int Kb,
                                int32_t *sel, uint32_t *work, cudaStream_t s) {
    if (rows < 1 || nbm < 1 || B < 1 || Kb < 1) return -1;
    ts_cuda_batch b = {};
    b.n_rows = rows, b.pos = pos;
    qsa_shape q = {};
    q.B = B, q.Kb = Kb, q.nbm = nbm;
    return launch_select(b, q, 0, rows, scores, work, sel, s) ? 0 : -1;
}
