// PLE on the GPU (MODEL.md §5.4), the twin of src/cpu/ple.c: the hashed n-gram embedding of one layer,
// added to the wide residual R. Everything runs on the device from b->ids and the per-sequence
// states, with no host round trip, so a decode step is capturable in a CUDA graph.
//
// Math, per row t of a sequence (H hidden, C streams, W = C·H, E = NH·dh, n-gram order n,
// n1 = n − 1, conv taps Kp with dilation n, hist = (Kp − 1)·n carried rows):
//   ctx      ctx[0] = id_t; ctx[k] = id_{t−k} for k = 1..n1, reaching back into earlier rows of the
//            sequence, then into its PLE_CTX state (n1 ids, most recent last); once an EOS has been
//            passed every further ctx[k] reads EOS (a token still sees the EOS right before it)
//   row_h    (XOR_{j < 2 + h/P} ctx[j]·m[j]) mod S_h (+ O_h in the joined table), uint64 wrapping
//   e        the NH table rows of width dh, concatenated (N × E)
//   K        grouped_rmsnorm(ple_key·e; ple_norm_key)        Q = grouped_rmsnorm(R; ple_norm_query)
//   V        ple_value·e (N × H)
//   gate_s   σ(sign(a)·sqrt(max(|a|, 1e−6))), a = (K_s·Q_s) / √H  (sign(0) = 0: gate ½)
//   G_s      gate_s · V                                       Nn = grouped_rmsnorm(G; ple_norm_conv)
//   out[c]   G[c] + silu(Σ_k conv[c][k] · Nn_{t − (Kp−1−k)·n}[c]) over [PLE_CONV history ; this
//            micro-batch's rows of the same sequence]
//   R       += out; then the last hist rows of Nn go to PLE_CONV and the last n1 ids to PLE_CTX.
//
// Launches and grid mapping (every grid from N, n_seq and the hyperparameters only):
//   1. ple_gather_kernel  one block per row: threads h < NH each build the row's n-gram context
//                         and hash head h into a table-row pointer (shared memory), then the block
//                         dequantizes the E elements (rows.cuh) into w->emb. The table may sit in
//                         mapped pinned host memory: kernels just read through the pointer.
//   2. ts_cuda_matmul     keys ple_key·e → w->mix (N × W), values ple_value·e → w->pv (N × H)
//   3. ple_gate_kernel    one block per (row, stream): both norms, the dot, the gate, G_s → w->xn
//                         and its normalised Nn_s → w->mix in place of the keys (only this block
//                         reads that key segment, and it has finished reading it by then)
//   4. ple_conv_kernel    one thread per element of R: the dilated causal conv, R += out; history
//                         rows are read straight from each sequence's PLE_CONV state
//   5. ple_state_kernel   one thread per (sequence, channel): shifts PLE_CONV in place (row j takes
//                         row j + T_s of [history ; new rows], in increasing j, so a thread never
//                         overwrites a row it still has to read); thread 0 of each sequence shifts
//                         PLE_CTX the same way.
// Kernels 1 and 4 read the old states; only kernel 5, last on the stream, writes them. No scratch
// beyond the ts_cuda_work buffers is needed. The per-thread index logic (context, hash, conv taps,
// state shifts) sits in __host__ __device__ helpers, so a host test can run it against
// src/cpu/ple.c over multi-sequence micro-batches without a GPU.
//
// Numerics: fp32 throughout with the CPU's formulas (true divisions and sqrtf, expf sigmoid); sums
// are block reductions, so results agree with the CPU to fp32 rounding. The gathered rows are
// bit-identical to ts_cpu_get_row.
#include "cuda/layers.h"
#include "cuda/rows.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20; // grid-stride beyond this

// Shapes and constants of the PLE layer, from the host hparams (kernel argument).
struct ple_shape {
    int64_t H, C, W;   // hidden, streams, W = C·H
    int64_t NH, dh, E; // heads, row width, E = NH·dh
    int n, n1;         // n-gram order and n − 1 (≤ TS_MAX_NGRAM)
    int P;             // heads per order
    int Kp, hist;      // conv taps, hist = (Kp − 1)·n history rows (dilation n)
    int32_t eos;       // segment-reset token
    float eps;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sums of v[0..K) over the thread block, returned to every thread. blockDim.x a multiple of 32;
// safe to call repeatedly in one kernel.
template <int K> __device__ void block_sum(float (&v)[K]) {
    __shared__ float part[K][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = warp_sum(v[k]);
    __syncthreads();
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < K; k++) part[k][warp] = v[k];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = warp_sum(lane < nwarps ? part[k][lane] : 0.0f);
}

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

// ---- 1. context, hash and gather ---------------------------------------------------------------

// The n-gram context of the row at index t of its sequence (ngram_context of src/cpu/ple.c):
// ctx[0] = the token, ctx[k] the token k back (ids[row0 + t − k] while t − k ≥ 0, then the
// sequence's PLE_CTX state hist[n1 + t − k], EOS where the state is missing), or EOS once an EOS has
// been passed. Ids convert to uint64 as C converts int32 (sign-extended); EOS zero-extended.
TS_HD void ngram_context(const int32_t *ids, int64_t row0, int64_t t, const int32_t *hist, const ple_shape &p,
                         uint64_t (&ctx)[TS_MAX_NGRAM]) {
    ctx[0] = static_cast<uint64_t>(ids[row0 + t]);
    bool cut = false;
#pragma unroll
    for (int k = 1; k < TS_MAX_NGRAM; k++) {
        ctx[k] = 0;
        if (k > p.n1) continue;
        const int64_t q = t - k; // negative: reaches into the state
        const int32_t tok = q >= 0 ? ids[row0 + q] : hist ? hist[p.n1 + q] : p.eos;
        ctx[k] = cut ? static_cast<uint64_t>(static_cast<uint32_t>(p.eos)) : static_cast<uint64_t>(tok);
        if (tok == p.eos) cut = true;
    }
}

// Row of head h inside its own table: (XOR_{j < order} ctx[j]·m[j]) mod S_h, order = 2 + h / P
// (≤ n), uint64 wrapping products (ngram_row of src/cpu/ple.c without the joined offset).
TS_HD uint64_t ngram_row_in_head(const uint64_t (&ctx)[TS_MAX_NGRAM], int64_t h, const ple_shape &p,
                                 const uint64_t *sizes, const uint64_t *mult) {
    const int64_t order = 2 + h / p.P;
    uint64_t mixed = 0;
#pragma unroll
    for (int j = 0; j < TS_MAX_NGRAM; j++)
        if (j < order && j < p.n) mixed ^= ctx[j] * mult[j];
    return mixed % sizes[h];
}

// Block r: emb[r, h·dh + i] = element i of table row row_h(ctx of r).
// Dynamic shared memory: NH row pointers (NULL for a row outside its table), then NH types.
__global__ void ple_gather_kernel(ts_cuda_batch b, int l, ple_shape p, ts_cuda_tensor joined,
                                  const ts_cuda_tensor *__restrict__ heads,
                                  const uint64_t *__restrict__ sizes, const uint64_t *__restrict__ offsets,
                                  const uint64_t *__restrict__ mult, float *__restrict__ emb) {
    extern __shared__ __align__(16) unsigned char smem[];
    const uint8_t **rowp = reinterpret_cast<const uint8_t **>(smem);
    uint32_t *rtype = reinterpret_cast<uint32_t *>(rowp + p.NH);
    const int64_t r = blockIdx.x;

    const int s = b.row_seq[r];
    const int64_t row0 = b.seq_row0[s];
    const int32_t *hist = static_cast<const int32_t *>(ts_cuda_state(b, s, l, TS_CUDA_PLE_CTX));
    for (int64_t h = threadIdx.x; h < p.NH; h += blockDim.x) {
        uint64_t ctx[TS_MAX_NGRAM];
        ngram_context(b.ids, row0, r - row0, hist, p, ctx);
        const uint64_t in_head = ngram_row_in_head(ctx, h, p, sizes, mult);
        const uint8_t *data;
        size_t row_bytes;
        uint64_t row, rows;
        if (joined.data) { // one table, head h at its offset
            data = static_cast<const uint8_t *>(joined.data), row_bytes = joined.row_bytes;
            row = in_head + offsets[h], rows = static_cast<uint64_t>(joined.rows), rtype[h] = joined.type;
        } else { // a table per head
            data = static_cast<const uint8_t *>(heads[h].data), row_bytes = heads[h].row_bytes;
            row = in_head, rows = static_cast<uint64_t>(heads[h].rows), rtype[h] = heads[h].type;
        }
        rowp[h] = row < rows ? data + row * row_bytes : nullptr;
    }
    __syncthreads();

    float *er = emb + r * p.E;
    for (int64_t e = threadIdx.x; e < p.E; e += blockDim.x) {
        const int64_t h = e / p.dh, i = e % p.dh;
        er[e] = rowp[h] ? ts_cu::row_value(rtype[h], rowp[h], i) : 0.0f;
    }
}

// ---- 3. norms, gate, gated value and its norm ------------------------------------------------

// Block (r, c) = blockIdx.x = r·C + c, the H elements of stream c of row r:
//   K = rmsnorm(KN; gk), Q = rmsnorm(R; gq), a = K·Q / √H, gate = σ(signed_sqrt(a)),
//   G = gate·V → G (w->xn), Nn = rmsnorm(G; gc) → KN (w->mix, over the raw keys).
__global__ void ple_gate_kernel(float *KN, const float *__restrict__ R, const float *__restrict__ V,
                                const float *__restrict__ gk, const float *__restrict__ gq,
                                const float *__restrict__ gc, ple_shape p, float *__restrict__ G) {
    const int64_t r = blockIdx.x / p.C, c = blockIdx.x % p.C, H = p.H;
    const int64_t off = r * p.W + c * H;
    float *K = KN + off, *Gs = G + off;
    const float *Q = R + off, *Vr = V + r * H;
    gk += c * H, gq += c * H, gc += c * H;
    const float fH = static_cast<float>(H);

    float ss[2] = {0.0f, 0.0f}; // Σ K², Σ Q²
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        ss[0] += K[i] * K[i];
        ss[1] += Q[i] * Q[i];
    }
    block_sum(ss);
    const float rk = 1.0f / sqrtf(ss[0] / fH + p.eps), rq = 1.0f / sqrtf(ss[1] / fH + p.eps);

    float dot[1] = {0.0f};
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dot[0] += (K[i] * rk * gk[i]) * (Q[i] * rq * gq[i]);
    block_sum(dot);
    float a = dot[0] / sqrtf(fH);
    const float sa = static_cast<float>((a > 0.0f) - (a < 0.0f));
    a = sa * sqrtf(fmaxf(fabsf(a), 1e-6f)); // sign(0) = 0 → gate σ(0) = ½
    const float gate = ts_dsigmoid(a);

    float sg[1] = {0.0f};
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        const float g = gate * Vr[i];
        Gs[i] = g;
        sg[0] += g * g;
    }
    block_sum(sg); // also the barrier after every thread's last read of K
    const float rg = 1.0f / sqrtf(sg[0] / fH + p.eps);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) K[i] = (gate * Vr[i]) * rg * gc[i];
}

// ---- 4. dilated causal conv ------------------------------------------------------------------

// The conv input Σ_k w[c][k]·Nn_{t − (Kp−1−k)·n}[c] of channel c at index t of a sequence whose
// micro-batch rows start at Nn row row0; rows before the micro-batch (j < 0) are row hist + j of
// its PLE_CONV state (zeros if the state is missing).
TS_HD float ple_conv_sum(const float *Nn, int64_t row0, int64_t t, const float *hist, const float *cw,
                         int64_t c, const ple_shape &p) {
    float acc = 0.0f;
    for (int k = 0; k < p.Kp; k++) {
        const int64_t j = t - static_cast<int64_t>(p.Kp - 1 - k) * p.n;
        const float v = j >= 0 ? Nn[(row0 + j) * p.W + c] : hist ? hist[(p.hist + j) * p.W + c] : 0.0f;
        acc += cw[c * p.Kp + k] * v;
    }
    return acc;
}

// One thread per element (r, c) of R: R[r, c] += G[r, c] + silu(conv sum), t = r's index in its
// sequence.
__global__ void ple_conv_kernel(ts_cuda_batch b, int l, ple_shape p, const float *__restrict__ Nn,
                                const float *__restrict__ G, const float *__restrict__ cw,
                                float *__restrict__ R) {
    const int64_t W = p.W, n = (int64_t)b.n_rows * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / W, c = e % W;
        const int s = b.row_seq[r];
        const int64_t row0 = b.seq_row0[s];
        const float *hist = static_cast<const float *>(ts_cuda_state(b, s, l, TS_CUDA_PLE_CONV));
        R[e] += G[e] + ts_dsilu(ple_conv_sum(Nn, row0, r - row0, hist, cw, c, p));
    }
}

// ---- 5. carried states -----------------------------------------------------------------------

// Channel c of a PLE_CONV state after a sequence's T rows (from Nn row row0): new row j = row
// j + T of [old hist rows ; the T new rows]. Increasing j reads only rows ≥ j + T > j, never one
// already overwritten, so the shift runs in place.
TS_HD void ple_shift_conv(float *conv, const float *Nn, int64_t row0, int64_t T, int64_t c,
                          const ple_shape &p) {
    for (int64_t j = 0; j < p.hist; j++) {
        const int64_t src = j + T;
        conv[j * p.W + c] = src < p.hist ? conv[src * p.W + c] : Nn[(row0 + src - p.hist) * p.W + c];
    }
}

// The same for the n1 ids of PLE_CTX (most recent last).
TS_HD void ple_shift_ctx(int32_t *ctx, const int32_t *ids, int64_t row0, int64_t T, const ple_shape &p) {
    for (int64_t j = 0; j < p.n1; j++) {
        const int64_t src = j + T;
        ctx[j] = src < p.n1 ? ctx[src] : ids[row0 + src - p.n1];
    }
}

// Block (s, channel chunk): thread c of sequence s shifts channel c of its PLE_CONV; thread 0 of
// chunk 0 shifts its PLE_CTX.
__global__ void ple_state_kernel(ts_cuda_batch b, int l, ple_shape p, const float *__restrict__ Nn) {
    const int s = blockIdx.x;
    const int64_t row0 = b.seq_row0[s], T = b.seq_row0[s + 1] - row0;
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    float *conv = static_cast<float *>(ts_cuda_state(b, s, l, TS_CUDA_PLE_CONV));
    if (conv && c < p.W) ple_shift_conv(conv, Nn, row0, T, c, p);
    int32_t *ctx = static_cast<int32_t *>(ts_cuda_state(b, s, l, TS_CUDA_PLE_CTX));
    if (ctx && blockIdx.y == 0 && threadIdx.x == 0) ple_shift_ctx(ctx, b.ids, row0, T, p);
}

// Threads for a block that loops over n elements: whole warps, up to kThreads.
int threads_for(int64_t n) {
    const int64_t t = (n + 31) / 32 * 32;
    return static_cast<int>(t < 32 ? 32 : t > kThreads ? kThreads : t);
}

bool table_ok(const ts_cuda_tensor &t, int64_t dh) {
    return t.data && ts_cu::row_type_supported(t.type) && t.ne0 == dh;
}

} // namespace

extern "C" int ts_cuda_ple(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l, float *R,
                           cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const ts_cuda_ple_table *tab = &w->cm->ple;
    ple_shape p;
    p.H = hp->n_embd, p.C = hp->hc_count, p.W = p.C * p.H;
    p.NH = hp->ple_nh, p.dh = hp->ple_dh, p.E = p.NH * p.dh;
    p.n = static_cast<int>(hp->ple_n), p.n1 = p.n - 1, p.P = static_cast<int>(hp->ple_p);
    p.Kp = static_cast<int>(hp->ple_conv), p.hist = (p.Kp - 1) * p.n;
    p.eos = static_cast<int32_t>(hp->ple_eos), p.eps = hp->eps;
    const int64_t N = b->n_rows;

    if (p.n < 1 || p.n > TS_MAX_NGRAM || p.P < 1 || p.NH < 1 || p.dh < 1 || p.Kp < 1) return -1;
    if (!tab->sizes_dev || !tab->mult_dev) return -1;
    if (tab->joined.data) {
        if (!table_ok(tab->joined, p.dh) || !tab->offsets_dev) return -1;
    } else {
        if (!tab->heads || !tab->heads_dev) return -1;
        for (int64_t h = 0; h < p.NH; h++)
            if (!table_ok(tab->heads[h], p.dh)) return -1;
    }
    if (N <= 0 || b->n_seq <= 0) return 0;
    if (N * p.C > INT32_MAX) return -1;

    // 1. n-gram context, hash and gather (reads PLE_CTX)
    const size_t smem = static_cast<size_t>(p.NH) * (sizeof(const uint8_t *) + sizeof(uint32_t));
    ple_gather_kernel<<<static_cast<unsigned>(N), threads_for(p.E), smem, s>>>(
        *b, l, p, tab->joined, tab->heads_dev, tab->sizes_dev, tab->offsets_dev, tab->mult_dev, w->emb);
    if (cudaGetLastError() != cudaSuccess) return -1;

    // 2. keys and values
    if (ts_cuda_matmul(&L->ple_key, 0, p.W, w->emb, N, w->mix, s)) return -1;
    if (ts_cuda_matmul(&L->ple_value, 0, p.H, w->emb, N, w->pv, s)) return -1;

    // 3. gate: G → xn, normalised G → mix
    ple_gate_kernel<<<static_cast<unsigned>(N * p.C), threads_for((p.H + 3) / 4), 0, s>>>(
        w->mix, R, w->pv, L->ple_norm_key, L->ple_norm_query, L->ple_norm_conv, p, w->xn);
    if (cudaGetLastError() != cudaSuccess) return -1;

    // 4. conv, R += out (reads PLE_CONV)
    ple_conv_kernel<<<blocks_for(N * p.W), kThreads, 0, s>>>(*b, l, p, w->mix, w->xn, L->ple_conv1d, R);
    if (cudaGetLastError() != cudaSuccess) return -1;

    // 5. carry the states (the only writer of PLE_CONV and PLE_CTX)
    const dim3 grid(static_cast<unsigned>(b->n_seq), static_cast<unsigned>((p.W + kThreads - 1) / kThreads));
    ple_state_kernel<<<grid, kThreads, 0, s>>>(*b, l, p, w->mix);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
