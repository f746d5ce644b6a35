// Gated DeltaNet on the GPU (MODEL.md §5.5), the twin of src/cpu/gdn.c (ts_cpu_gdn): same math, same
// state layout, file head order (value head j uses key head j mod nk).
//
// Symbols (src/model/qwen4exp.h): H hidden, nk/nv key/value heads, dk/dv head dims, key_dim =
// nk·dk, vdim = nv·dv, cd = 2·key_dim + vdim conv channels (q | k | v), Kc conv taps. The micro-batch
// has N rows from n_seq sequences; the rows of sequence s are seq_row0[s] .. seq_row0[s+1]−1.
//
// Per row t of a sequence, per value head j (κ = j mod nk):
//   qkv   = attn_qkv·x, z = attn_gate·x, b = ssm_beta·x, a = ssm_alpha·x
//   u     = silu(causal depthwise conv over [Kc−1 history rows ; the sequence's rows])   (N × cd)
//   q̂     = q_κ · (1/√dk) / √(Σq² + 1e-6),   k̂ = k_κ / √(Σk² + 1e-6)
//   β     = σ(b_j),   g = exp(A_j · softplus(a_j + dt_j))
//   S     ← g·S;   δ = β·(v_j − Sᵀk̂);   S ← S + k̂ ⊗ δ;   o = Sᵀq̂            (S: dk × dv, S[i][e])
//   o     ← o · rsqrt(mean(o²) + eps) · γ · σ(z_j)
//   y     = ssm_out·o
//
// Launches (all on stream s; grids depend only on N, n_seq and the hparams: graph-capturable, no
// host synchronization, no allocation):
//  1. four ts_cuda_matmul: qkv → w->qkv, z → w->z, β logits → w->ba[0 .. N·nv), α logits → the
//     scratch (w->ba + N·nv is not 16-byte aligned when N·nv % 4 != 0, and ts_cuda_matmul needs
//     aligned outputs). At one row, when the upload joined the z, β and α rows
//     (L->gate_beta_alpha), those three are one product into the scratch: z, β, α back to back.
//  2. gdn_conv_kernel, grid (N, 2·nk + ⌈vdim/128⌉ + 1), 128 threads. blockIdx.x = row r,
//     blockIdx.y = segment: segments 0 .. 2nk−1 are the q heads then the k heads (dk channels each):
//     conv + SiLU per channel, then a block sum of squares and the L2 normalisation (q with its
//     1/√dk) written in place into w->u, so the recurrence reads q̂, k̂ directly (each key head is
//     normalised once, not once per value head; the products equal the CPU's qh/kh for the same
//     sum). The next ⌈vdim/128⌉ segments are v channels (one per thread). The last segment turns
//     the row's nv gate logits into β (in place in w->ba) and the log-decay (in place over the α
//     logits in the scratch). History rows come from the row's sequence TS_CUDA_CONV state.
//  3. gdn_conv_state_kernel (only when Kc > 1, and not at decode, where every sequence has one row
//     and kernel 2's thread for a channel shifts that channel's history after reading it), grid
//     ⌈cd/256⌉·n_seq, 256 threads: one thread per (sequence, channel) sets the history to the last
//     Kc−1 rows of [history ; rows], in increasing history order (row h reads extended row n+h > h,
//     not yet overwritten, when n < Kc−1). It runs after kernel 2 on the stream, so every row saw
//     the old history.
//  4. the recurrence, one thread block per (sequence, value head): grid n_seq·nv. The block loops
//     over the sequence's rows in order (prefill: many; decode: one), so S is read once and written
//     once per launch whatever the row count. Two variants:
//     - gdn_recur_reg<P, M> (dk ≤ 128, dv ≤ 256): P threads per value column e (adjacent lanes of
//       one warp), thread (e, p) holds S[i][e] for i = p, p+P, p+2P, ... (M registers, zero beyond
//       dk). Per row: Sᵀk̂ and Sᵀq̂ are per-thread partial dot products over the thread's M keys,
//       reduced over the P lanes by xor shuffles (every lane gets the same sum); the mean(o²) of the
//       gated norm is a block sum (one barrier a row). q̂/k̂ of the next row are copied to a second
//       shared buffer by cp.async while the current row computes; β, g, v, z of the next row are
//       prefetched into registers. P = 4 for dv ≤ 128 (128 columns: 512 threads), P = 2 for dv ≤ 256.
//     - gdn_recur_global (any other dk, dv): one thread per column (looping when dv > 512), S
//       updated in place in global memory (two reads and one write of S per row), q̂/k̂ staged in
//       dynamic shared memory (2·dk floats).
//     Both write the gated output into w->o. Sequences of ≥ kChunk rows are left to 4b when it runs.
//  4b. gdn_chunk_prep_kernel and gdn_chunk_kernel (N ≥ kChunk, dk ≤ kChunkDk, unless
//     TURBOSPARK_CUDA_GDN_CHUNKED=0): the chunked WY/UT form of the same recurrence for every sequence
//     of ≥ kChunk rows: each chunk's matrices at once (one block per sequence, chunk and value head,
//     into the scratch after the α logits), then one block per (sequence, value head, slice of kSlice
//     value columns) walking the chunks in order; writes o before the gated norm. Twin of
//     ts_cpu_gdn_chunked (src/cpu/gdn.c); see the kernels.
//  4c. gdn_gate_norm_kernel (with 4b), grid (N, nv): the gated norm of those sequences' rows.
//  5. ts_cuda_matmul: y = ssm_out·o.
//
// Numerics: fp32 everywhere, accurate expf/log1pf/sqrtf (no fast-math intrinsics), the CPU's
// formulas operation for operation (decay applied to S before the read, the same products and
// association for the gates and the norm); sums run in a different order (and FMAs contract), so
// results agree with ts_cpu_gdn to fp32 rounding, not bit for bit. The chunked form agrees with the
// recurrence to fp32 rounding too (tests/unit/test_gdn.c on the CPU twins), so a prefill of ≥ kChunk
// rows is not bit-identical to the same rows decoded one by one (as in the reference).
#include "cuda/cp_async.cuh"
#include "cuda/cuda_device.h"
#include "cuda/layers.h"
#include "cuda/pdl.cuh"
#include "model/memplan.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

// Shapes as the kernels see them.
struct GdnDims {
    int nk, nv, dk, dv, Kc;
    int64_t key_dim, vdim, cd;
    float eps;
    int one_row;       // every sequence has exactly one row (decode): kernel 2 also shifts the conv history
    int64_t chunk_min; // sequences with at least this many rows run the chunked form (kernel 4b)
};

constexpr int kConvThreads = 128;  // gdn_conv_kernel
constexpr int kStateThreads = 256; // gdn_conv_state_kernel
constexpr int kRecMaxThreads = 512;

// Sum of v over the warp; every lane gets the same value (xor butterfly: partners add the same two
// operands, and fp32 addition is commutative).
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// Sum of v over the block (blockDim a multiple of 32, all threads calling), returned to every thread
// identically (the warp sums are added in warp order). One barrier. red: 32 floats of shared memory
// that no thread may still be reading from an earlier call: the caller guarantees it (a barrier in
// between, or alternating buffers).
__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

// ---- 2. conv + SiLU, q/k L2 norms, gates --------------------------------------------------------

// Causal depthwise conv of channel c at row r (the t-th row of its sequence, r0 its first row) and
// SiLU. Extended index t + k over [Kc−1 history rows ; the sequence's rows]; tap Kc−1 = row r.
__device__ __forceinline__ float conv_silu(const float *__restrict__ qkv, const float *hist,
                                           const float *__restrict__ cw, const GdnDims &d, int64_t r,
                                           int64_t t, int64_t c) {
    float acc = 0.0f;
    for (int k = 0; k < d.Kc; k++) {
        const int64_t e = t + k; // extended index
        const float xv = e < d.Kc - 1 ? hist[e * d.cd + c] : qkv[(r + k - (d.Kc - 1)) * d.cd + c];
        acc += cw[c * d.Kc + k] * xv;
    }
    return ts_dsilu(acc);
}

// Decode (one row per sequence): the thread that convolved channel c of row r moves the history
// up one row and appends the row's input, as kernel 3 would (it read the old history already).
__device__ __forceinline__ void shift_history(const float *__restrict__ qkv, float *hist, const GdnDims &d,
                                              int64_t r, int64_t c) {
    for (int h = 0; h + 1 < d.Kc - 1; h++) hist[h * d.cd + c] = hist[(h + 1) * d.cd + c];
    if (d.Kc > 1) hist[(d.Kc - 2) * d.cd + c] = qkv[r * d.cd + c];
}

// grid (N, 2·nk + ⌈vdim/kConvThreads⌉ + 1), block kConvThreads. See the header, launch 2.
__global__ void __launch_bounds__(kConvThreads)
    gdn_conv_kernel(const float *__restrict__ qkv, float *__restrict__ u, float *__restrict__ beta,
                    float *__restrict__ lg, const float *__restrict__ cw, const float *__restrict__ A,
                    const float *__restrict__ dt, const ts_cuda_batch b, int l, GdnDims d) {
    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const int g = blockIdx.y;
    const int tid = threadIdx.x;

    if (g == (int)gridDim.y - 1) { // gates of row r: β = σ(b), log-decay A·softplus(a + dt)
        for (int j = tid; j < d.nv; j += blockDim.x) {
            const int64_t i = r * d.nv + j;
            beta[i] = ts_dsigmoid(beta[i]);
            lg[i] = A[j] * ts_dsoftplus(lg[i] + dt[j]);
        }
        return;
    }

    const int s = b.row_seq[r];
    const int64_t t = r - b.seq_row0[s];
    float *hist = d.Kc > 1 ? static_cast<float *>(ts_cuda_state(b, s, l, TS_CUDA_CONV)) : nullptr;
    float *urow = u + r * d.cd;

    if (g < 2 * d.nk) { // a q head (g < nk) or a k head: channels g·dk .. g·dk + dk − 1
        const int64_t c0 = (int64_t)g * d.dk;
        float sq = 0.0f;
        for (int i = tid; i < d.dk; i += blockDim.x) {
            const float v = conv_silu(qkv, hist, cw, d, r, t, c0 + i);
            if (d.one_row) shift_history(qkv, hist, d, r, c0 + i);
            urow[c0 + i] = v;
            sq += v * v;
        }
        const float ss = block_sum(sq, red);
        // as the CPU: rq = (1/√dk) / √(qq + 1e-6), rk = 1 / √(kk + 1e-6) (eps inside the sum)
        const float scale =
            g < d.nk ? (1.0f / sqrtf((float)d.dk)) / sqrtf(ss + 1e-6f) : 1.0f / sqrtf(ss + 1e-6f);
        for (int i = tid; i < d.dk; i += blockDim.x) urow[c0 + i] = urow[c0 + i] * scale; // own writes
        return;
    }

    const int64_t c = 2 * d.key_dim + (int64_t)(g - 2 * d.nk) * blockDim.x + tid; // a v channel
    if (c < d.cd) {
        urow[c] = conv_silu(qkv, hist, cw, d, r, t, c);
        if (d.one_row) shift_history(qkv, hist, d, r, c);
    }
}

// ---- 3. conv history update -------------------------------------------------------------------

// grid ⌈cd/kStateThreads⌉·n_seq, block kStateThreads: thread (s, c) sets history rows h = 0 .. Kc−2
// of sequence s to extended row n + h of [history ; its n rows].
__global__ void __launch_bounds__(kStateThreads)
    gdn_conv_state_kernel(const float *__restrict__ qkv, const ts_cuda_batch b, int l, GdnDims d,
                          int chunks) {
    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    const int s = blockIdx.x / chunks;
    const int64_t c = (int64_t)(blockIdx.x % chunks) * blockDim.x + threadIdx.x;
    if (c >= d.cd) return;
    const int64_t r0 = b.seq_row0[s], n = b.seq_row0[s + 1] - r0;
    float *hist = static_cast<float *>(ts_cuda_state(b, s, l, TS_CUDA_CONV));
    for (int64_t h = 0; h < d.Kc - 1; h++) {
        const int64_t e = n + h; // ≥ h: when it is a history row, it has not been overwritten yet
        hist[h * d.cd + c] = e < d.Kc - 1 ? hist[e * d.cd + c] : qkv[(r0 + e - (d.Kc - 1)) * d.cd + c];
    }
}

// ---- 4. the recurrence ------------------------------------------------------------------------

struct RecArgs {
    const float *u;     // N × cd, q̂ and k̂ already normalised (kernel 2)
    const float *z;     // N × vdim
    const float *beta;  // N × nv, β
    const float *lg;    // N × nv, log-decay (the decay is its exp)
    const float *gamma; // [dv]
    float *o;           // N × vdim
    int l;
};

// Register variant. grid n_seq·nv, block round_up(dv·P, 32) ≤ 512. Thread t: column e = t / P,
// key slice p = t % P, keys i = p + P·m for m < M (P·M ≥ dk).
template <int P, int M>
__global__ void __launch_bounds__(kRecMaxThreads) gdn_recur_reg(RecArgs a, const ts_cuda_batch b, GdnDims d) {
    static_assert(32 % P == 0, "the P lanes of a column must share a warp");
    constexpr int K = P * M;
    __shared__ float qs[2][K], ks[2][K]; // q̂, k̂ of the current / next row, zero beyond dk
    __shared__ float red[2][32];         // block sums, alternating by row parity

    ts_cu::pdl_trigger();
    const int tid = threadIdx.x, e = tid / P, p = tid % P;
    const int s = blockIdx.x / d.nv, j = blockIdx.x % d.nv, kappa = j % d.nk;
    const int64_t r0 = b.seq_row0[s], r1 = b.seq_row0[s + 1];
    if (r0 >= r1 || r1 - r0 >= d.chunk_min) { // no rows, or the chunked kernel's: uniform over the block
        ts_cu::pdl_wait();
        return;
    }
    const bool col = e < d.dv;
    float *S = static_cast<float *>(ts_cuda_state(b, s, a.l, TS_CUDA_SSM)) + (int64_t)j * d.dk * d.dv;
    const int64_t qoff = (int64_t)kappa * d.dk, koff = d.key_dim + qoff,
                  voff = 2 * d.key_dim + (int64_t)j * d.dv;
    const int64_t zoff = (int64_t)j * d.dv + e;

    // this thread's keys (its own state: no kernel of this step writes it before this one, so it is
    // read before waiting for the previous kernel): i = p + P·m for m < mc; its column pointer steps P rows of S
    const int mc = col ? (d.dk - p + P - 1) / P : 0;
    const int64_t step = (int64_t)P * d.dv;
    float st[M]; // S[p + P·m][e]
    {
        const float *sp = S + (int64_t)p * d.dv + e;
#pragma unroll
        for (int m = 0; m < M; m++, sp += step) st[m] = m < mc ? *sp : 0.0f;
    }
    ts_cu::pdl_wait();

    // zero the padding of both buffers, fetch row r0's q̂/k̂
    for (int i = d.dk + tid; i < K; i += blockDim.x) qs[0][i] = qs[1][i] = ks[0][i] = ks[1][i] = 0.0f;
    for (int i = tid; i < d.dk; i += blockDim.x) {
        ts_cu::cp_async4(&qs[0][i], a.u + r0 * d.cd + qoff + i);
        ts_cu::cp_async4(&ks[0][i], a.u + r0 * d.cd + koff + i);
    }
    ts_cu::cp_async_commit();

    const float gam = col ? a.gamma[e] : 0.0f;
    // row r0's scalars; later rows are prefetched one row ahead
    float bt = a.beta[r0 * d.nv + j], dc = expf(a.lg[r0 * d.nv + j]);
    float v = col ? a.u[r0 * d.cd + voff + e] : 0.0f, zz = col ? a.z[r0 * d.vdim + zoff] : 0.0f;

    ts_cu::cp_async_wait<0>(); // every group is committed
    __syncthreads();

    for (int64_t r = r0; r < r1; r++) {
        const int buf = (int)((r - r0) & 1);
        // next row: q̂/k̂ into the other buffer (its last readers, row r−1, passed row r−1's barrier)
        float bt_n = 0.0f, dc_n = 0.0f, v_n = 0.0f, z_n = 0.0f;
        if (r + 1 < r1) {
            for (int i = tid; i < d.dk; i += blockDim.x) {
                ts_cu::cp_async4(&qs[buf ^ 1][i], a.u + (r + 1) * d.cd + qoff + i);
                ts_cu::cp_async4(&ks[buf ^ 1][i], a.u + (r + 1) * d.cd + koff + i);
            }
            ts_cu::cp_async_commit();
            bt_n = a.beta[(r + 1) * d.nv + j], dc_n = expf(a.lg[(r + 1) * d.nv + j]);
            if (col) v_n = a.u[(r + 1) * d.cd + voff + e], z_n = a.z[(r + 1) * d.vdim + zoff];
        }
        const float *qh = qs[buf], *kh = ks[buf];

        // S ← g·S (before the read); kv = Sᵀk̂ (column e)
        float kv = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++) {
            st[m] = st[m] * dc;
            kv = fmaf(st[m], kh[p + P * m], kv);
        }
#pragma unroll
        for (int off = 1; off < P; off <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, off);
        const float delta = bt * (v - kv);
        // pass 2 re-reads k̂ from shared memory (volatile: not kept in M more live registers)
        const volatile float *kh2 = kh;

        // S ← S + k̂ ⊗ δ; o = Sᵀq̂
        float o = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++) {
            st[m] = fmaf(kh2[p + P * m], delta, st[m]);
            o = fmaf(st[m], qh[p + P * m], o);
        }
#pragma unroll
        for (int off = 1; off < P; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);

        // gated norm; the barrier inside block_sum also publishes the next row's q̂/k̂
        ts_cu::cp_async_wait<0>(); // every group is committed
        const float ss = block_sum(col && p == 0 ? o * o : 0.0f, red[buf]);
        const float rn = 1.0f / sqrtf(ss / (float)d.dv + d.eps);
        if (col && p == 0) a.o[r * d.vdim + zoff] = o * rn * gam * ts_dsigmoid(zz);

        bt = bt_n, dc = dc_n, v = v_n, zz = z_n;
    }

    {
        float *sp = S + (int64_t)p * d.dv + e;
#pragma unroll
        for (int m = 0; m < M; m++, sp += step)
            if (m < mc) *sp = st[m];
    }
}

// General variant (any dk, dv). grid n_seq·nv, block min(round_up(dv, 32), 512), dynamic shared
// memory 2·dk floats (q̂ then k̂). Thread t owns columns e = t, t + blockDim, ...; S is updated in
// place in global memory.
__global__ void __launch_bounds__(kRecMaxThreads, 1)
    gdn_recur_global(RecArgs a, const ts_cuda_batch b, GdnDims d) {
    extern __shared__ float sh[];
    __shared__ float red[32];
    float *qs = sh, *ks = sh + d.dk;

    const int tid = threadIdx.x;
    const int s = blockIdx.x / d.nv, j = blockIdx.x % d.nv, kappa = j % d.nk;
    const int64_t r0 = b.seq_row0[s], r1 = b.seq_row0[s + 1];
    if (r1 - r0 >= d.chunk_min) return; // the chunked kernel's
    float *S = static_cast<float *>(ts_cuda_state(b, s, a.l, TS_CUDA_SSM)) + (int64_t)j * d.dk * d.dv;
    const int64_t dv = d.dv;

    for (int64_t r = r0; r < r1; r++) {
        const float *urow = a.u + r * d.cd;
        __syncthreads(); // the previous row is done with qs, ks and red
        for (int i = tid; i < d.dk; i += blockDim.x) {
            qs[i] = urow[(int64_t)kappa * d.dk + i];
            ks[i] = urow[d.key_dim + (int64_t)kappa * d.dk + i];
        }
        __syncthreads();
        const float bt = a.beta[r * d.nv + j], dc = expf(a.lg[r * d.nv + j]);
        const float *v = urow + 2 * d.key_dim + (int64_t)j * dv;
        float *orow = a.o + r * d.vdim + (int64_t)j * dv;

        float sq = 0.0f;
        for (int64_t e = tid; e < dv; e += blockDim.x) {
            float kv = 0.0f; // (g·S)ᵀk̂, column e
            for (int i = 0; i < d.dk; i++) kv = fmaf(S[i * dv + e] * dc, ks[i], kv);
            const float delta = bt * (v[e] - kv);
            float o = 0.0f;
            for (int i = 0; i < d.dk; i++) {
                const float sv = fmaf(ks[i], delta, S[i * dv + e] * dc);
                S[i * dv + e] = sv;
                o = fmaf(sv, qs[i], o);
            }
            orow[e] = o; // raw, scaled below by this same thread
            sq += o * o;
        }
        const float ss = block_sum(sq, red);
        const float rn = 1.0f / sqrtf(ss / (float)dv + d.eps);
        const float *z = a.z + r * d.vdim + (int64_t)j * dv;
        for (int64_t e = tid; e < dv; e += blockDim.x)
            orow[e] = orow[e] * rn * a.gamma[e] * ts_dsigmoid(z[e]);
    }
}

// ---- 4b. the chunked form (sequences of ≥ chunk_min rows) -----------------------------------------
//
// The twin of ts_cpu_gdn_chunked (src/cpu/gdn.c): per chunk of n ≤ kChunk rows, G_t = Σ_{s≤t} g_s,
// A[t][s] = β_t·e^(G_t−G_s)·k̂_t·k̂_s (s < t), P[t][s] = e^(G_t−G_s)·q̂_t·k̂_s (s ≤ t),
// δ = (I + A)⁻¹·β(v − e^G·K S), o = e^G·Q S + P δ, S ← e^(G_{n−1})·S + Σ_t e^(G_{n−1}−G_t) k̂_t δ_tᵀ.
// Two kernels:
//  - gdn_chunk_prep_kernel, grid (n_seq·qmax, nv), qmax = ⌈N / kChunk⌉: every (sequence, chunk, value
//    head) at once, A and P, and T = (I + A)⁻¹ by forward substitution (T is unit lower triangular), into
//    the scratch: for each row of the chunk and value head, its row of T then its row of P (tp,
//    2·kChunk floats). Only these depend on the chunk alone, and they are most of its arithmetic.
//  - gdn_chunk_kernel, grid n_seq·nv·⌈dv/kSlice⌉: one block per (sequence, value head, slice of kSlice
//    value columns); the columns of S are independent, so a block walks its sequence's chunks in order
//    with its slice of S in shared memory: δ = T·R with R = β(v − e^G·K S), then o and S as above.
// dk ≤ kChunkDk. The output is o before the gated norm (kernel 4c).

constexpr int kChunk = 64;         // rows of a chunk (= TS_GDN_CHUNK of the CPU twin, TS_MEMPLAN_GDN_CHUNK)
constexpr int kSlice = 32;         // value columns of a block
constexpr int kChunkThreads = 256; // 8 warps
constexpr int kChunkDk = 128;      // largest dk of the chunked form
constexpr int kDs = kSlice + 8;    // row stride of δ
constexpr int CP = kChunk + 1;     // row stride of A, T, P
static_assert(kChunk == TS_MEMPLAN_GDN_CHUNK, "the memory plan sizes the chunks' matrices");
static_assert(kChunkThreads == 4 * kChunk && kSlice == 32 && kChunkDk <= 128,
              "the walk's register tiles: 8 threads of 4 columns a row pair, 4 keys a thread");

// acc[i] += a·v_i for the four components of v (in order x, y, z, w)
__device__ __forceinline__ void fma4(float (&acc)[4], float a, const float4 v) {
    acc[0] = fmaf(a, v.x, acc[0]), acc[1] = fmaf(a, v.y, acc[1]);
    acc[2] = fmaf(a, v.z, acc[2]), acc[3] = fmaf(a, v.w, acc[3]);
}

// The walk's: K̂, Q̂, T and P in one kChunk × CP square (T[t][c] at [t][c] for c < t, its unit diagonal
// implied; P[t][c] at [c][t] for c ≤ t), δ, the slice of S, G, β, e^(G_{n−1}−G_t). Under 113 KiB at
// dk = 128: two blocks an SM.
struct ChunkSmem { // offsets in floats into dynamic shared memory; ks = dk + 1 (row stride of K̂, Q̂)
    int ks, K, Q, TP, D, S, G, B, E;
    __host__ __device__ explicit ChunkSmem(int dk) {
        ks = dk + 1;
        K = 0, Q = K + kChunk * ks, TP = Q + kChunk * ks;
        D = TP + kChunk * CP, S = D + kChunk * kDs, G = S + dk * kSlice, B = G + kChunk, E = B + kChunk;
    }
    __host__ __device__ int floats() const { return E + kChunk; }
};
// The prep kernel's: K̂, Q̂, A, P, T, G, β.
struct PrepSmem {
    int ks, K, Q, A, P, T, G, B;
    __host__ __device__ explicit PrepSmem(int dk) {
        ks = dk + 1;
        K = 0, Q = K + kChunk * ks, A = Q + kChunk * ks, P = A + kChunk * CP, T = P + kChunk * CP;
        G = T + kChunk * CP, B = G + kChunk;
    }
    __host__ __device__ int floats() const { return B + kChunk; }
};

// The rows c0 .. c0 + n − 1 of a chunk (zero beyond n): q̂ and k̂ of key head κ into Qs, Ks (row stride
// ks) by asynchronous copies (committed, not waited for: the caller waits and synchronizes), β_t into Bs
// and G_t (the running sum of the log-decays in row order, as the CPU) into Gs. Every thread calls it
// (one barrier inside: the log-decays are loaded in parallel, then summed by one thread).
__device__ __forceinline__ void load_chunk_qk(const RecArgs &a, const GdnDims &d, int64_t c0, int n,
                                              int kappa, int j, int ks, float *Qs, float *Ks, float *Bs,
                                              float *Gs) {
    const int tid = threadIdx.x;
    const int64_t qoff = (int64_t)kappa * d.dk, koff = d.key_dim + qoff;
    for (int i = tid; i < kChunk * d.dk; i += blockDim.x) {
        const int t = i / d.dk, k = i % d.dk;
        const float *u = a.u + (c0 + t) * d.cd;
        if (t < n) {
            ts_cu::cp_async4(&Qs[t * ks + k], u + qoff + k);
            ts_cu::cp_async4(&Ks[t * ks + k], u + koff + k);
        } else {
            Qs[t * ks + k] = Ks[t * ks + k] = 0.0f;
        }
    }
    ts_cu::cp_async_commit();
    if (tid < kChunk) {
        Bs[tid] = tid < n ? a.beta[(c0 + tid) * d.nv + j] : 0.0f;
        Gs[tid] = tid < n ? a.lg[(c0 + tid) * d.nv + j] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) {
        float g = 0.0f;
        for (int t = 0; t < kChunk; t++) Gs[t] = g = t < n ? g + Gs[t] : g;
    }
}

// grid (n_seq·qmax, nv), block kChunkThreads. See above; tp: the scratch, 2·kChunk floats per (row, head).
__global__ void __launch_bounds__(kChunkThreads, 1)
    gdn_chunk_prep_kernel(RecArgs a, const ts_cuda_batch b, GdnDims d, float *__restrict__ tp, int qmax) {
    extern __shared__ __align__(16) float sm[];
    const PrepSmem L(d.dk);
    float *Ks = sm + L.K, *Qs = sm + L.Q, *As = sm + L.A, *Ps = sm + L.P, *Ts = sm + L.T, *Gs = sm + L.G,
          *Bs = sm + L.B;
    ts_cu::pdl_trigger();
    const int s = blockIdx.x / qmax, q = blockIdx.x % qmax, j = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = b.seq_row0[s], r1 = b.seq_row0[s + 1], c0 = r0 + (int64_t)q * kChunk;
    ts_cu::pdl_wait();
    if (r1 - r0 < d.chunk_min || c0 >= r1) return; // the recurrence's, or past the sequence's chunks
    const int n = (int)min((int64_t)kChunk, r1 - c0);
    load_chunk_qk(a, d, c0, n, j % d.nk, j, L.ks, Qs, Ks, Bs, Gs);
    ts_cu::cp_async_wait<0>();
    __syncthreads();

    // A and P: thread (ty, tx) has rows t = ty + 16α and columns s = tx + 16β' (α, β' < 4)
    {
        const int ty = tid / 16, tx = tid % 16;
        float kk[4][4] = {}, qk[4][4] = {};
        for (int k = 0; k < d.dk; k++) {
            float kt[4], qt[4], kc[4];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                kt[x] = Ks[(ty + 16 * x) * L.ks + k], qt[x] = Qs[(ty + 16 * x) * L.ks + k];
                kc[x] = Ks[(tx + 16 * x) * L.ks + k];
            }
#pragma unroll
            for (int x = 0; x < 4; x++)
#pragma unroll
                for (int y = 0; y < 4; y++)
                    kk[x][y] = fmaf(kt[x], kc[y], kk[x][y]), qk[x][y] = fmaf(qt[x], kc[y], qk[x][y]);
        }
#pragma unroll
        for (int x = 0; x < 4; x++)
#pragma unroll
            for (int y = 0; y < 4; y++) {
                const int t = ty + 16 * x, c = tx + 16 * y;
                const float w = c <= t ? expf(Gs[t] - Gs[c]) : 0.0f;
                As[t * CP + c] = c < t ? Bs[t] * w * kk[x][y] : 0.0f;
                Ps[t * CP + c] = w * qk[x][y];
            }
    }
    __syncthreads();

    // T = (I + A)⁻¹: T[t][c] = [t = c] − Σ_{c ≤ x < t} A[t][x]·T[x][c], in row order; column c =
    // 8·warp + lane/4 (one warp), its 4 lanes ph split the sum over x ≡ ph (mod 4)
    {
        const int c = 8 * warp + lane / 4, ph = lane % 4;
        for (int t = 0; t < kChunk; t++) {
            float acc = 0.0f;
            for (int x = c + ph; x < t; x += 4) acc = fmaf(As[t * CP + x], Ts[x * CP + c], acc);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (ph == 0) Ts[t * CP + c] = t == c ? 1.0f : t > c ? -acc : 0.0f;
            __syncwarp();
        }
    }
    __syncthreads();
    for (int i = tid; i < n * kChunk; i += kChunkThreads) {
        const int t = i / kChunk, c = i % kChunk;
        float *row = tp + ((c0 + t) * d.nv + j) * (2 * kChunk);
        row[c] = Ts[t * CP + c];
        row[kChunk + c] = Ps[t * CP + c];
    }
}

__global__ void __launch_bounds__(kChunkThreads, 2)
    gdn_chunk_kernel(RecArgs a, const ts_cuda_batch b, GdnDims d, const float *__restrict__ tp) {
    extern __shared__ __align__(16) float sm[];
    const ChunkSmem L(d.dk);
    float *Ks = sm + L.K, *Qs = sm + L.Q, *TPs = sm + L.TP, *Ds = sm + L.D, *Ss = sm + L.S;
    float *Gs = sm + L.G, *Bs = sm + L.B, *Es = sm + L.E; // G_t, β_t, e^(G_{n−1}−G_t)

    ts_cu::pdl_trigger();
    const int slices = (d.dv + kSlice - 1) / kSlice;
    const int s = blockIdx.x / (d.nv * slices), j = (blockIdx.x / slices) % d.nv,
              e0 = (blockIdx.x % slices) * kSlice;
    const int kappa = j % d.nk, tid = threadIdx.x;
    const int ncol = min(kSlice, d.dv - e0);
    const int64_t r0 = b.seq_row0[s], r1 = b.seq_row0[s + 1];
    if (r1 - r0 < d.chunk_min) { // the recurrence's: uniform over the block
        ts_cu::pdl_wait();
        return;
    }
    float *S = static_cast<float *>(ts_cuda_state(b, s, a.l, TS_CUDA_SSM)) + (int64_t)j * d.dk * d.dv + e0;
    const int64_t voff = 2 * d.key_dim + (int64_t)j * d.dv + e0;
    ts_cu::pdl_wait();
    for (int i = tid; i < d.dk * kSlice; i += kChunkThreads) {
        const int k = i / kSlice, e = i % kSlice;
        Ss[i] = e < ncol ? S[(int64_t)k * d.dv + e] : 0.0f;
    }

    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
        const int n = (int)min((int64_t)kChunk, r1 - c0);
        // load the chunk: q̂, k̂ rows (zero beyond n), β, G, the v slice into δ, and the rows of T and P
        // (all by asynchronous copies, in flight together: waited for once)
        for (int i = tid; i < kChunk * kSlice; i += kChunkThreads) {
            const int t = i / kSlice, e = i % kSlice;
            if (t < n && e < ncol)
                ts_cu::cp_async4(&Ds[t * kDs + e], a.u + (c0 + t) * d.cd + voff + e);
            else
                Ds[t * kDs + e] = 0.0f;
        }
        for (int i = tid; i < kChunk * kChunk; i += kChunkThreads) {
            const int t = i / kChunk, c = i % kChunk;
            const float *row = tp + ((c0 + t) * d.nv + j) * (2 * kChunk);
            // T's strict lower triangle in place, P's lower triangle transposed (rows past n zero)
            if (c < t) {
                if (t < n)
                    ts_cu::cp_async4(&TPs[t * CP + c], row + c);
                else
                    TPs[t * CP + c] = 0.0f;
            }
            if (c <= t) {
                if (t < n)
                    ts_cu::cp_async4(&TPs[c * CP + t], row + kChunk + c);
                else
                    TPs[c * CP + t] = 0.0f;
            }
        }
        load_chunk_qk(a, d, c0, n, kappa, j, L.ks, Qs, Ks, Bs, Gs); // commits the copies above with its own
        ts_cu::cp_async_wait<0>();
        __syncthreads();
        if (tid < kChunk) Es[tid] = tid < n ? expf(Gs[n - 1] - Gs[tid]) : 0.0f; // read after the next barrier

        // The products below are register tiles: thread (rg, c4) = (tid / 8, 4·(tid % 8)) has the columns
        // c4 .. c4 + 3 of the slice and the chunk rows rg and rg + 32 (R, δ, o) or the keys rg + 32i (S),
        // each sum over its index in increasing order.
        const int rg = tid >> 3, c4 = (tid & 7) * 4;

        // R = β(v − e^G·K S) into δ, and e^G·Q S kept for o
        float oq[2][4];
        {
            float sk[2][4] = {}, sq[2][4] = {};
            const float *k0 = Ks + rg * L.ks, *k1 = k0 + 32 * L.ks, *q0 = Qs + rg * L.ks,
                        *q1 = q0 + 32 * L.ks;
#pragma unroll 4
            for (int k = 0; k < d.dk; k++) {
                const float4 sv = *reinterpret_cast<const float4 *>(&Ss[k * kSlice + c4]);
                fma4(sk[0], k0[k], sv), fma4(sk[1], k1[k], sv);
                fma4(sq[0], q0[k], sv), fma4(sq[1], q1[k], sv);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int t = rg + 32 * h;
                const float eg = expf(Gs[t]), bt = Bs[t];
                float *dp = &Ds[t * kDs + c4];
#pragma unroll
                for (int i = 0; i < 4; i++) dp[i] = bt * (dp[i] - eg * sk[h][i]), oq[h][i] = eg * sq[h][i];
            }
        }
        __syncthreads();

        // δ = T·R (T unit lower triangular: its diagonal is not stored)
        {
            float dl[2][4] = {};
            const float *t0 = TPs + rg * CP, *t1 = t0 + 32 * CP;
            for (int c = 0; c <= rg + 32; c++) {
                const float4 rv = *reinterpret_cast<const float4 *>(&Ds[c * kDs + c4]);
                if (c <= rg) fma4(dl[0], c < rg ? t0[c] : 1.0f, rv);
                fma4(dl[1], c < rg + 32 ? t1[c] : 1.0f, rv);
            }
            __syncthreads(); // every thread has read R
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 4; i++) Ds[(rg + 32 * h) * kDs + c4 + i] = dl[h][i];
        }
        __syncthreads();

        // o = e^G·Q S + P δ (raw, before the gated norm)
        {
            const int cmax = min(rg + 32, n - 1);
            for (int c = 0; c <= cmax; c++) {
                const float4 dv = *reinterpret_cast<const float4 *>(&Ds[c * kDs + c4]);
                const float *pc = TPs + c * CP + rg; // P[rg][c], and P[rg + 32][c] 32 floats on
                if (c <= rg) fma4(oq[0], pc[0], dv);
                fma4(oq[1], pc[32], dv);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int t = rg + 32 * h;
                float *op = a.o + (c0 + t) * d.vdim + (int64_t)j * d.dv + e0;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (t < n && c4 + i < ncol) op[c4 + i] = oq[h][i];
            }
        }

        // S ← e^(G_{n−1})·S + Σ_t e^(G_{n−1}−G_t)·k̂_t δ_tᵀ
        {
            const float el = expf(Gs[n - 1]);
            float acc[4][4];
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[m][i] = rg + 32 * m < d.dk ? Ss[(rg + 32 * m) * kSlice + c4 + i] * el : 0.0f;
            for (int t = 0; t < n; t++) {
                const float4 dv = *reinterpret_cast<const float4 *>(&Ds[t * kDs + c4]);
                const float et = Es[t], *kt = Ks + t * L.ks + rg;
#pragma unroll
                for (int m = 0; m < 4; m++) fma4(acc[m], et * kt[32 * m], dv);
            }
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (rg + 32 * m < d.dk) Ss[(rg + 32 * m) * kSlice + c4 + i] = acc[m][i];
        }
        __syncthreads(); // before the next chunk's loads
    }
    for (int i = tid; i < d.dk * kSlice; i += kChunkThreads) {
        const int k = i / kSlice, e = i % kSlice;
        if (e < ncol) S[(int64_t)k * d.dv + e] = Ss[i];
    }
}

// 4c. The gated norm of the chunked sequences' rows: grid (N, nv), block kConvThreads; o in place.
__global__ void __launch_bounds__(kConvThreads)
    gdn_gate_norm_kernel(RecArgs a, const ts_cuda_batch b, GdnDims d) {
    ts_cu::pdl_trigger();
    ts_cu::pdl_wait();
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const int s = b.row_seq[r], j = blockIdx.y;
    if (b.seq_row0[s + 1] - b.seq_row0[s] < d.chunk_min) return; // normed by the recurrence
    float *o = a.o + r * d.vdim + (int64_t)j * d.dv;
    const float *z = a.z + r * d.vdim + (int64_t)j * d.dv;
    float sq = 0.0f;
    for (int e = threadIdx.x; e < d.dv; e += blockDim.x) sq += o[e] * o[e];
    const float ss = block_sum(sq, red);
    const float rn = 1.0f / sqrtf(ss / (float)d.dv + d.eps);
    for (int e = threadIdx.x; e < d.dv; e += blockDim.x) o[e] = o[e] * rn * a.gamma[e] * ts_dsigmoid(z[e]);
}

template <int P, int M>
void launch_reg(const RecArgs &a, const ts_cuda_batch &b, const GdnDims &d, cudaStream_t s) {
    const int threads = (d.dv * P + 31) / 32 * 32;
    ts_cu::launch(gdn_recur_reg<P, M>, dim3((unsigned)b.n_seq * d.nv), dim3(threads), 0, s, a, b, d);
}

} // namespace

extern "C" int ts_cuda_gdn(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l,
                           const float *x, float *y, cudaStream_t s) {
    const ts_hparams *hp = w->hp;
    const int64_t N = b->n_rows;
    if (N <= 0) return 0;
    if (N > w->max_rows || b->n_seq <= 0) return -1;

    GdnDims d;
    d.nk = (int)hp->ssm_nk, d.nv = (int)hp->ssm_nv, d.dk = (int)hp->ssm_dk, d.dv = (int)hp->ssm_dv;
    d.Kc = (int)hp->ssm_conv, d.eps = hp->eps;
    d.one_row = b->n_rows == b->n_seq; // every packed sequence has at least one row
    d.chunk_min = INT64_MAX;           // set below when the chunked form runs
    d.key_dim = (int64_t)d.nk * d.dk, d.vdim = (int64_t)d.nv * d.dv, d.cd = ts_gdn_conv_dim(hp);
    if (d.nk <= 0 || d.nv <= 0 || d.dk <= 0 || d.dv <= 0 || d.Kc <= 0) return -1;
    if (!w->scratch || w->scratch_bytes < ts_memplan_gdn_alpha_bytes(hp, N)) return -1;
    const int64_t vseg = (d.vdim + kConvThreads - 1) / kConvThreads, segs = 2 * (int64_t)d.nk + vseg + 1;
    const int64_t chunks = (d.cd + kStateThreads - 1) / kStateThreads;
    if (segs > 65535 || N > INT32_MAX || chunks * b->n_seq > INT32_MAX ||
        (int64_t)b->n_seq * d.nv > INT32_MAX)
        return -1;

    float *z = w->z, *beta = w->ba, *lg = static_cast<float *>(w->scratch);

    // 1. projections (z, β and α as one product of their joined rows at one row: z, β and α then
    //    lie back to back in scratch; the kernels below index row 0 only)
    if (ts_cuda_matmul(&L->attn_qkv, 0, d.cd, x, N, w->qkv, s)) return -1;
    if (N == 1 && L->gate_beta_alpha.data && w->scratch_bytes >= ts_memplan_gdn_zba_bytes(hp)) {
        z = static_cast<float *>(w->scratch), beta = z + d.vdim, lg = beta + d.nv;
        if (ts_cuda_matmul(&L->gate_beta_alpha, 0, d.vdim + 2 * d.nv, x, 1, z, s)) return -1;
    } else {
        if (ts_cuda_matmul(&L->attn_gate, 0, d.vdim, x, N, z, s)) return -1;
        if (ts_cuda_matmul(&L->ssm_beta, 0, d.nv, x, N, beta, s)) return -1;
        if (ts_cuda_matmul(&L->ssm_alpha, 0, d.nv, x, N, lg, s)) return -1;
    }

    // 2. conv + SiLU, q/k norms, gates
    ts_cu::launch(gdn_conv_kernel, dim3((unsigned)N, (unsigned)segs), dim3(kConvThreads), 0, s,
                  static_cast<const float *>(w->qkv), w->u, beta, lg, L->ssm_conv1d, L->ssm_a, L->ssm_dt, *b,
                  l, d);
    if (cudaPeekAtLastError() != cudaSuccess) return -1;

    // 3. conv history (decode: done by kernel 2)
    if (d.Kc > 1 && !d.one_row) {
        ts_cu::launch(gdn_conv_state_kernel, dim3((unsigned)(chunks * b->n_seq)), dim3(kStateThreads), 0, s,
                      static_cast<const float *>(w->qkv), *b, l, d, (int)chunks);
        if (cudaPeekAtLastError() != cudaSuccess) return -1;
    }

    // 4. recurrence + gated norm → w->o; sequences of ≥ kChunk rows take the chunked form (4b, 4c)
    //    unless TURBOSPARK_CUDA_GDN_CHUNKED=0 or dk > kChunkDk (never at decode: one row a sequence)
    RecArgs a;
    a.u = w->u, a.z = z, a.beta = beta, a.lg = lg, a.gamma = L->ssm_norm, a.o = w->o, a.l = l;
    const bool chunked =
        N >= kChunk && !d.one_row && d.dk <= kChunkDk && ts_cuda_switch_on("TURBOSPARK_CUDA_GDN_CHUNKED");
    d.chunk_min = chunked ? kChunk : INT64_MAX;
    if (chunked) {
        // the chunks' T and P after the α logits (the memory plan's layout, for max_rows rows)
        const size_t tp_off = ts_memplan_align(ts_memplan_gdn_alpha_bytes(hp, w->max_rows));
        if (w->scratch_bytes < tp_off + ts_memplan_gdn_chunk_bytes(hp, N)) return -1;
        float *tp = reinterpret_cast<float *>(static_cast<char *>(w->scratch) + tp_off);
        const int slices = (d.dv + kSlice - 1) / kSlice;
        const int64_t qmax = (N + kChunk - 1) / kChunk;
        const size_t shm = (size_t)ChunkSmem(d.dk).floats() * sizeof(float),
                     shp = (size_t)PrepSmem(d.dk).floats() * sizeof(float);
        thread_local size_t opted = 0, opted_prep = 0; // the opt-ins already made (they depend on dk only)
        if ((int64_t)b->n_seq * d.nv * slices > INT32_MAX || (int64_t)b->n_seq * qmax > INT32_MAX ||
            d.nv > 65535)
            return -1;
        if (shm > opted) {
            if (cudaFuncSetAttribute(gdn_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)shm) != cudaSuccess)
                return -1;
            opted = shm;
        }
        if (shp > opted_prep) {
            if (cudaFuncSetAttribute(gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)shp) != cudaSuccess)
                return -1;
            opted_prep = shp;
        }
        ts_cu::launch(gdn_chunk_prep_kernel, dim3((unsigned)(b->n_seq * qmax), (unsigned)d.nv),
                      dim3(kChunkThreads), shp, s, a, *b, d, tp, (int)qmax);
        if (cudaPeekAtLastError() != cudaSuccess) return -1;
        ts_cu::launch(gdn_chunk_kernel, dim3((unsigned)(b->n_seq * d.nv * slices)), dim3(kChunkThreads), shm,
                      s, a, *b, d, static_cast<const float *>(tp));
        if (cudaPeekAtLastError() != cudaSuccess) return -1;
    }
    if (d.dk <= 128 && d.dv <= 128) {
        if (d.dk <= 32)
            launch_reg<4, 8>(a, *b, d, s);
        else if (d.dk <= 64)
            launch_reg<4, 16>(a, *b, d, s);
        else
            launch_reg<4, 32>(a, *b, d, s);
    } else if (d.dk <= 128 && d.dv <= 256) {
        if (d.dk <= 64)
            launch_reg<2, 32>(a, *b, d, s);
        else
            launch_reg<2, 64>(a, *b, d, s);
    } else {
        const size_t shm = 2 * (size_t)d.dk * sizeof(float);
        if (shm > 48 * 1024) return -1; // dk > 6144
        const int threads = d.dv < kRecMaxThreads ? (d.dv + 31) / 32 * 32 : kRecMaxThreads;
        gdn_recur_global<<<(unsigned)b->n_seq * d.nv, threads, shm, s>>>(a, *b, d);
    }
    if (cudaPeekAtLastError() != cudaSuccess) return -1;
    if (chunked) {
        ts_cu::launch(gdn_gate_norm_kernel, dim3((unsigned)N, (unsigned)d.nv), dim3(kConvThreads), 0, s, a,
                      *b, d);
        if (cudaPeekAtLastError() != cudaSuccess) return -1;
    }

    // 5. output projection
    if (ts_cuda_matmul(&L->ssm_out, 0, hp->n_embd, w->o, N, y, s)) return -1;
    return 0;
}
