/* The CUDA blocks of one qwen4exp layer: each the twin of the CPU block of the same name
 * (src/cpu/layers.h, src/cpu/<block>.c beside src/cuda/<block>.cu), same math, same state layout.
 *
 * A call runs one micro-batch of N rows (tokens) that may come from several sequences: the rows
 * of sequence s are rows seq_row0[s] .. seq_row0[s+1]−1, consecutive and in position order
 * (prefill: one sequence, N rows; batched decode: N sequences, one row each). Everything that
 * depends on a position or on a sequence's state is read from device memory (ts_cuda_batch), so
 * a block enqueues the same launches whatever the positions are: a decode step is captured once as
 * a CUDA graph and replayed. Blocks never synchronize with the host and never allocate.
 *
 * Buffers are fp32, row-major, token-major ("N × n" = N rows of n floats), device pointers,
 * 16-byte aligned. Weights stay in their file encoding (ts_cuda_tensor, src/cuda/matmul.h);
 * 1-D vectors and conv weights are uploaded as fp32 arrays (`const float *`).
 *
 * Symbols as in src/model/qwen4exp.h: H hidden, C streams, W = C·H, r HC rank, nk/nv/dk/dv GDN,
 * cd = 2·nk·dk + nv·dv conv channels, Kc GDN conv taps, nh/nkv/hd attention, ni/di indexer, B
 * tokens per indexer block, Kb = top blocks, E/k experts, F/Fs expert widths, NH·dh PLE row, Kp
 * PLE conv taps (dilation n). */
#ifndef TS_CUDA_LAYERS_H
#define TS_CUDA_LAYERS_H

#include "cuda/matmul.h"
#include "model/qwen4exp.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights on the device ------------------------------------------------------------------ */

typedef struct ts_cuda_hc {
    const float *norm;          /* [W] */
    ts_cuda_tensor down;        /* W → r */
    ts_cuda_tensor up;          /* r → W */
    ts_cuda_tensor inject;      /* W → C; data NULL for the final mixer */
    ts_cuda_tensor down_inject; /* W → r + C: the down rows then the inject rows, one product for both
                                   (the upload places them back to back when they share a type), else
                                   data NULL */
} ts_cuda_hc;

typedef struct ts_cuda_layer {
    ts_layer_kind kind;
    ts_cuda_hc hc_attn, hc_ffn;
    /* GDN */
    ts_cuda_tensor attn_qkv;        /* H → cd */
    ts_cuda_tensor attn_gate;       /* H → nv·dv (z) */
    ts_cuda_tensor ssm_beta;        /* H → nv */
    ts_cuda_tensor ssm_alpha;       /* H → nv */
    ts_cuda_tensor gate_beta_alpha; /* H → nv·dv + 2·nv: the z, β and α rows back to back (the three above
                                       are views into it), one product at batch 1; data NULL when their
                                       encodings differ */
    ts_cuda_tensor ssm_out;         /* nv·dv → H */
    const float *ssm_a;             /* [nv] A (negative) */
    const float *ssm_dt;            /* [nv] dt bias */
    const float *ssm_conv1d;        /* [cd][Kc] tap Kc−1 = the current token */
    const float *ssm_norm;          /* [dv] */
    /* QSA */
    ts_cuda_tensor attn_q;      /* H → nh·2·hd, per head hd query rows then hd gate rows */
    ts_cuda_tensor attn_k;      /* H → nkv·hd */
    ts_cuda_tensor attn_v;      /* H → nkv·hd */
    ts_cuda_tensor attn_output; /* nh·hd → H */
    ts_cuda_tensor idx_q;       /* H → ni·di */
    ts_cuda_tensor idx_k;       /* H → di */
    /* H → nh·2·hd + 2·nkv·hd + ni·di + di: the q, k, v, idx_q and idx_k rows back to back (those five are
       views into it), or the four but v (qsa_in_v false) where v's encoding differs; one product at batch 1;
       data NULL when their encodings differ */
    ts_cuda_tensor qsa_in;
    bool qsa_in_v;
    const float *attn_q_norm, *attn_k_norm; /* [hd] */
    const float *idx_q_norm, *idx_k_norm;   /* [di] */
    /* MoE */
    ts_cuda_tensor ffn_gate_inp; /* H → E router */
    ts_cuda_tensor
        ffn_gate_exps; /* H → F per expert: expert e is rows e·F .. e·F+F−1; data NULL when fused */
    ts_cuda_tensor ffn_up_exps; /* same layout; data NULL when fused */
    ts_cuda_tensor
        ffn_gate_up_exps; /* H → 2F per expert: rows 2F·e .. (gate F rows, then up F rows); NULL when split */
    ts_cuda_tensor ffn_down_exps;                /* F → H per expert: rows e·H .. e·H+H−1 */
    ts_cuda_tensor ffn_gate_shexp, ffn_up_shexp; /* H → Fs */
    ts_cuda_tensor ffn_down_shexp;               /* Fs → H */
    const float *ffn_gate_inp_shexp;             /* [H] scalar gate of the shared expert */
    /* PLE (only on hparams.ple_layer) */
    ts_cuda_tensor ple_key;                                     /* NH·dh → W */
    ts_cuda_tensor ple_value;                                   /* NH·dh → H */
    const float *ple_norm_key, *ple_norm_query, *ple_norm_conv; /* [W] */
    const float *ple_conv1d;                                    /* [W][Kp] */
} ts_cuda_layer;

/* The n-gram PLE table, readable by kernels: in device memory, or in pinned host memory mapped
 * into the device's address space (the same kernels read either). Joined layout: one tensor, row
 * offsets[h] + (hash mod sizes[h]); split layout: one tensor per head, row hash mod sizes[h]. */
typedef struct ts_cuda_ple_table {
    ts_cuda_tensor joined;           /* [rows] × dh; data NULL with the split layout */
    ts_cuda_tensor *heads;           /* [NH] per-head tables (split layout), else NULL */
    const ts_cuda_tensor *heads_dev; /* device copy of heads[] (kernels index it), else NULL */
    const uint64_t *sizes_dev;       /* [NH] prime modulus per head */
    const uint64_t *offsets_dev;     /* [NH] row offset per head (joined layout) */
    const uint64_t *mult_dev;        /* [n] hash multipliers */
    bool in_host_memory;             /* mapped pinned host memory rather than device memory */
} ts_cuda_ple_table;

typedef struct ts_cuda_model {
    const ts_model *m;         /* the host model (hyperparameters, file) */
    ts_cuda_tensor token_embd; /* V × H */
    ts_cuda_tensor output;     /* H → V (aliases token_embd when tied) */
    ts_cuda_hc output_hc;      /* final mixer (inject NULL) */
    ts_cuda_ple_table ple;
    ts_cuda_layer *layers;   /* [n_layer] trunk layers (MTP blocks are not uploaded) */
    size_t weight_bytes;     /* device memory held by weights */
    size_t host_table_bytes; /* pinned host memory held by the PLE table */
    void *arena;             /* internal: allocations to free */
} ts_cuda_model;

/* ---- per-sequence state and the micro-batch ---------------------------------------------------- */

/* Kinds of per-sequence, per-layer state (index of the pointer in ts_cuda_batch.state). */
enum {
    TS_CUDA_K = 0,    /* QSA: [n_ctx, nkv, hd] post-norm post-rope keys */
    TS_CUDA_V,        /* QSA: [n_ctx, nkv, hd] values */
    TS_CUDA_IDX_RAW,  /* QSA: [n_ctx, di] raw indexer keys */
    TS_CUDA_IDX_BLK,  /* QSA: [n_ctx / B + 1, di] pooled, normed, roped block keys */
    TS_CUDA_CONV,     /* GDN: [Kc − 1, cd] last raw qkv rows, oldest first */
    TS_CUDA_SSM,      /* GDN: [nv, dk, dv] fp32 recurrent state, S[j][i][e] */
    TS_CUDA_PLE_CONV, /* PLE layer: [(Kp − 1)·n, W] last normalised gated rows, oldest first */
    TS_CUDA_PLE_CTX,  /* PLE layer: int32 [n − 1] last ids, most recent last (starts all EOS) */
    TS_CUDA_STATE_KINDS
};

/* The micro-batch as the kernels see it. Device arrays, except the host counts n_rows / n_seq. */
typedef struct ts_cuda_batch {
    int n_rows;              /* N (host) */
    int n_seq;               /* sequences in the micro-batch (host) */
    int64_t max_ctx;         /* the largest n_ctx of any sequence (host): bounds grid sizes and scratch */
    const int32_t *ids;      /* [N] token ids */
    const int32_t *pos;      /* [N] position of each row */
    const int32_t *row_seq;  /* [N] sequence index of each row */
    const int32_t *seq_row0; /* [n_seq + 1] first row of each sequence; seq_row0[n_seq] = N */
    void *const *state;      /* [n_seq · n_layer · TS_CUDA_STATE_KINDS] state pointers:
                                state[(s·n_layer + l)·TS_CUDA_STATE_KINDS + kind], NULL where unused */
    int n_layer;             /* L (host), the stride above */
} ts_cuda_batch;

/* Device helper: the state pointer of sequence s, layer l. */
#ifdef __CUDACC__
__device__ __forceinline__ void *ts_cuda_state(const ts_cuda_batch &b, int s, int l, int kind) {
    return b.state[((size_t)s * b.n_layer + l) * TS_CUDA_STATE_KINDS + kind];
}
#endif

/* ---- workspaces ------------------------------------------------------------------------------ */

/* Device workspaces for micro-batches of up to max_rows rows (allocated by the forward, see
 * src/cuda/forward.cu; the blocks only use them). */
typedef struct ts_cuda_work {
    const ts_cuda_model *cm;
    const ts_hparams *hp;
    int64_t max_rows; /* N ≤ max_rows */
    float *R;         /* N × W wide residual */
    float *xn;        /* N × W normalised streams (HC read; PLE query), or R ⊙ g when xn_unnormed (R itself
                         after a read that made a deferred write, below) */
    float *hc_ss;     /* N × ⌈H / 256⌉ × C partial Σ R² of the write that left xn unnormalised */
    bool xn_unnormed; /* host side: the last HC write left xn = R ⊙ g for the fused read to scale */
    /* host side: an HC write left to the fused read that follows it (ts_cuda_hc_write_norm): its operands,
     * and that read's module (next, NULL when none is pending); the read's split product makes its x
     * from them, leaves the written R in xn, and its second kernel copies it into R. off: every write
     * stores R itself (the forward sets it while tracing R between blocks) */
    struct {
        bool off;
        const ts_cuda_hc *next;
        float *R;
        const float *y, *inj;
        int64_t count; /* writes left to reads so far (ts_cuda_hc_writes_deferred) */
    } hc_defer;
    float *mix;   /* N × W HC mix logits; PLE keys */
    float *lr;    /* N × r HC low rank */
    float *x, *y; /* N × H block input / output */
    float *inj;   /* N × C inject weights */
    /* GDN */
    float *qkv;   /* N × cd raw projections */
    float *u;     /* N × cd after conv + SiLU */
    float *z, *o; /* N × nv·dv */
    float *ba;    /* N × 2·nv: β logits then α logits (β rows first: ba[0 .. N·nv) is β) */
    /* QSA */
    float *qg;  /* N × nh·2·hd */
    float *kv;  /* N × 2·nkv·hd: N × nkv·hd keys, then N × nkv·hd values */
    float *iq;  /* N × ni·di */
    float *ik;  /* N × di raw indexer keys */
    float *att; /* N × nh·hd */
    /* MoE */
    float *router;         /* N × E */
    int32_t *topk_id;      /* N × k selected experts */
    float *topk_w;         /* N × k their renormalised weights */
    float *gu;             /* N × k × 2F gate/up products (also the shared expert: N × 2Fs) */
    float *eo;             /* N × k × H expert outputs */
    float *sg;             /* N shared-expert gate logits */
    unsigned *route_count; /* N block counters of the fused router kernel, then ⌈H / 8⌉ of the MoE combine in
                            * its down launch (at route_count + max_rows), 0 between launches */
    unsigned *hc_bar;      /* 2: the one-launch hyper-connection read's barrier, after those counters (count,
                            * 0 between launches, and generation) */
    int64_t moe_planned;   /* host side: expert products run as planned GEMVs so far (moe.cu) */
    int64_t swiglu_staged; /* host side: MoE blocks whose down launch computed the SwiGLU so far (moe.cu) */
    int64_t qsa_joined;    /* host side: QSA blocks whose projections ran as one product so far (qsa.cu) */
    int64_t hc_one;        /* host side: hyper-connection reads run as one launch so far (hc.cu) */
    /* PLE */
    float *emb; /* N × NH·dh gathered rows */
    float *pv;  /* N × H PLE value */
    /* per-block scratch, bytes as asked by ts_memplan_<block>_scratch (src/model/memplan.h; the max
     * over blocks) */
    void *scratch;
    size_t scratch_bytes;
    /* x records of the tensor-core prefill products (src/cuda/gemm_tc.h), registered for the forward's
     * thread with ts_cuda_tc_scratch_set */
    void *tcx;
    size_t tcx_bytes;
} ts_cuda_work;

/* ---- the blocks (each enqueues on stream s; returns 0, or -1 if a launch failed) ------------- */

/* Embedding rows of ids (any tier-1 type, dequantized) replicated into the C streams: R = N × W. */
int ts_cuda_embed(ts_cuda_work *w, const ts_cuda_batch *b, float *R, cudaStream_t s);

/* HC read: x = mean_s σ(M_s) ⊙ Xn_s with Xn = grouped_rmsnorm(R), M = Up·silu(Dn·Xn / C);
 * inj_s = 2σ((Inj·Xn)_s / C), skipped when inj is NULL (final mixer). R: N × W, x: N × H, inj: N × C. */
int ts_cuda_hc_read(ts_cuda_work *w, const ts_cuda_hc *hc, const float *R, int64_t N, float *x, float *inj,
                    cudaStream_t s);
/* HC write: R_s += y ⊙ inj_s. */
int ts_cuda_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t N,
                     cudaStream_t s);
/* The write followed by the norm of the next read (of hc next) in one kernel: R_s += y ⊙ inj_s, then
 * w->xn = grouped_rmsnorm(R; next->norm), or, when that read is the fused one (few rows), w->xn = R ⊙ g
 * and w->hc_ss its partial sums of squares, the scale applied by the read (w->xn_unnormed). The next
 * read is then ts_cuda_hc_read_xn (no norm). */
int ts_cuda_hc_write_norm(ts_cuda_work *w, float *R, const float *y, const float *inj, int64_t N,
                          const ts_cuda_hc *next, cudaStream_t s);
/* The same after ts_cuda_moe_uncombined: the block output is first combined from its parts, as
 * ts_cuda_moe's last step would (y = σ(w->sg)·y + Σ_j w->topk_w[j]·w->eo[j], slot order). */
int ts_cuda_hc_write_norm_moe(ts_cuda_work *w, float *R, const float *y, const float *inj, int64_t N,
                              const ts_cuda_hc *next, cudaStream_t s);
/* Lowers ts_cuda_hc_one_mode (forward.h) by one: the forward calls it when a decode graph captured while it
 * was above 0 failed to capture or instantiate, then captures again. False when it was not above 0. */
bool ts_cuda_hc_one_weaken(void);
/* HC read from w->xn as ts_cuda_hc_write_norm left it. */
int ts_cuda_hc_read_xn(ts_cuda_work *w, const ts_cuda_hc *hc, int64_t N, float *x, float *inj,
                       cudaStream_t s);

/* PLE of layer l: n-gram context (carried per sequence in TS_CUDA_PLE_CTX), hash, row gather,
 * gated value, dilated conv (history TS_CUDA_PLE_CONV); adds its output to R (N × W) and updates
 * both states. */
int ts_cuda_ple(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l, float *R,
                cudaStream_t s);

/* GDN of layer l: x (N × H) → y (N × H); updates TS_CUDA_CONV and TS_CUDA_SSM of each sequence,
 * the rows of one sequence in order (the recurrence). */
int ts_cuda_gdn(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l, const float *x,
                float *y, cudaStream_t s);

/* QSA of layer l: x (N × H) → y (N × H); writes K/V and indexer caches at each row's position,
 * completes indexer blocks, selects blocks (dense while nb ≤ Kb or TURBOSPARK_QSA_FORCE_DENSE=1;
 * ties: higher score, then lower block index) and attends. */
int ts_cuda_qsa(ts_cuda_work *w, const ts_cuda_layer *L, const ts_cuda_batch *b, int l, const float *x,
                float *y, cudaStream_t s);

/* The selection of ts_cuda_qsa alone (for the twin test): for each of `rows` rows whose nb = (pos[r] + 1) / B
 * complete blocks exceed Kb, the Kb best of scores[r][0 .. nb) (ties: lower index) in ascending block order
 * into sel[r][0 .. Kb); other rows are left as they are. scores: rows × nbm floats, pos, sel: device memory.
 * work NULL: one thread block a row; else many (the form ts_cuda_qsa takes from TS_MEMPLAN_QSA_SEL_MIN blocks),
 * work holding rows × ts_memplan_qsa_sel_row_words(nbm) uint32 of device memory. 0, or −1 when a launch failed. */
int ts_cuda_qsa_topk(const float *scores, int rows, int64_t nbm, const int32_t *pos, int B, int Kb,
                     int32_t *sel, uint32_t *work, cudaStream_t s);

/* MoE of layer l: router softmax over E (fp32), top-k (ties: lower expert id), renormalised,
 * SwiGLU experts chosen on the device (no host sync), plus the shared expert scaled by
 * σ(gate_inp_shexp · x). x: N × H → y: N × H. */
int ts_cuda_moe(ts_cuda_work *w, const ts_cuda_layer *L, int l, const float *x, int64_t N, float *y,
                cudaStream_t s);
/* Everything but the final combine: y holds the shared expert's output, unscaled, and w->sg, w->eo,
 * w->topk_w the rest; ts_cuda_hc_write_norm_moe combines them (one launch fewer a layer). Returns 0 so, 1
 * where the down launch made the combine itself (one token: y is the MoE output, for ts_cuda_hc_write_norm),
 * −1 on failure. */
int ts_cuda_moe_uncombined(ts_cuda_work *w, const ts_cuda_layer *L, int l, const float *x, int64_t N,
                           float *y, cudaStream_t s);
/* Tests: the MoE's SwiGLU kernel on rows of width gate values at g + r·stride and up values at u + r·stride:
 * h = silu(gate) ⊙ up over the gate values, each group of `round` values (0: none; a multiple of 32 dividing
 * width, at most 256) rounded as the tensor-core products round x, as the MoE rounds the routed rows. */
int ts_cuda_moe_swiglu(float *g, const float *u, int64_t rows, int64_t stride, int64_t width, int round,
                       cudaStream_t s);

/* ---- shared small ops (src/cuda/ops.cu) ----------------------------------------------------- */

/* y = x · rsqrt(mean(x²) + eps) · g over each group of `group` elements of every row; rows of n
 * (a multiple of group) floats, x and y with row strides sx, sy; g: [n] or NULL. In place allowed. */
int ts_cuda_rmsnorm(const float *x, int64_t sx, const float *g, int64_t rows, int64_t n, int64_t group,
                    float eps, float *y, int64_t sy, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* Device math shared by the kernels, the same formulas as src/cpu (no fast-math: expf, powf, sinf,
 * cosf are the accurate ones). */
__device__ __forceinline__ float ts_dsigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float ts_dsilu(float x) {
    return x * ts_dsigmoid(x);
}
__device__ __forceinline__ float ts_dsoftplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
/* The MoE output at one element (as the CPU's y = σ(sg)·y, then y += w_j·eo_j in slot order, each
 * product and sum rounded on its own): y the shared expert's output, eo the element's first expert
 * output (slots H apart, read with ld: plain loads, or ts_dload_l2 where other blocks of the same kernel
 * wrote them), w the row's k renormalised weights. */
struct ts_dload_plain {
    __device__ float operator()(const float *p) const { return *p; }
};
struct ts_dload_l2 {
    __device__ float operator()(const float *p) const { return __ldcg(p); }
};
template <class Ld = ts_dload_plain>
__device__ __forceinline__ float ts_dmoe_combine(float y, float sg, const float *eo, int64_t H,
                                                 const float *w, int k, Ld ld = Ld{}) {
    float acc = y * ts_dsigmoid(sg);
    for (int j = 0; j < k; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], ld(eo + j * H)));
    return acc;
}
/* NeoX rope of one (d, d + n_rot/2) pair at position pos, as ts_cpu_rope. */
__device__ __forceinline__ void ts_drope_pair(float &a, float &b, int d, int n_rot, float theta,
                                              int64_t pos) {
    const float inv = 1.0f / powf(theta, (float)(2 * d) / (float)n_rot);
    const float ang = (float)pos * inv;
    const float c = cosf(ang), sn = sinf(ang);
    const float x0 = a, x1 = b;
    a = x0 * c - x1 * sn;
    b = x1 * c + x0 * sn;
}
#endif

#endif
