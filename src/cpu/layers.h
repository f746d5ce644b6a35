/* The CPU blocks of one qwen4exp layer (internal to src/cpu). Each takes a micro-batch of N rows:
 * one or more sequences, each a chunk of consecutive tokens, their rows one after the other.
 * Row-wise work (matrix products, norms, HC, MoE) runs over all N rows at once, so every weight is
 * read once per micro-batch; what carries a sequence's state (GDN conv + recurrence, QSA caches and
 * attention, PLE n-gram context + conv) runs per sequence on its own rows. */
#ifndef TS_CPU_LAYERS_H
#define TS_CPU_LAYERS_H

#include "cpu/cpu.h"
#include "cpu/forward.h"

/* A micro-batch: sequence s (s < n_seq) runs ids[s][0..T[s]) at positions st[s]->pos … in rows
 * r0 … r0 + T[s] − 1, r0 = Σ_{q<s} T[q]; N = Σ T[s] ≤ ubatch. The states are distinct. */
typedef struct ts_cpu_batch {
    int n_seq;
    int64_t N;
    ts_seq_state *const *st;
    const int32_t *const *ids;
    const int64_t *T;
} ts_cpu_batch;

/* Workspaces, sized at creation for T ≤ ubatch rows and n_ctx positions (W = C·H). */
struct ts_cpu_work {
    const ts_model *m;
    int64_t ubatch, n_ctx;
    size_t bytes;
    float *R;     /* T × W   wide residual */
    float *xn;    /* T × W   normalised streams (HC read, PLE query) */
    float *mix;   /* T × W   HC mix weights / PLE keys */
    float *lr;    /* T × r   HC low-rank */
    float *x, *y; /* T × H   block input / output */
    float *inj;   /* T × C   HC inject weights */
    float *vec;   /* scratch for one dequantized weight vector (max over vectors) */
    float *vec2;  /* a second one */
    /* GDN */
    float *qkv;   /* T × conv_dim raw projections */
    float *u;     /* T × conv_dim after conv + SiLU */
    float *z, *o; /* T × nv·dv */
    float *ba;    /* T × 2·nv: β logits then α logits */
    /* QSA */
    float *qg;        /* T × nh·2·hd */
    float *kv;        /* T × 2·nkv·hd: the k rows of all tokens, then their v rows */
    float *ik;        /* T × di raw indexer keys (copied into each sequence's cache) */
    float *iq;        /* T × ni·di */
    float *att;       /* T × nh·hd */
    float *scores;    /* n_ctx / B block scores, then n_ctx attention weights */
    float *probs;     /* n_ctx */
    int64_t *order;   /* n_ctx / B block order; n_ctx selected positions */
    int64_t *allowed; /* n_ctx */
    /* MoE: the routed experts run for groups of G = min(T, MOE_GROUP) tokens */
    float *router; /* G × E */
    float *moe_w;  /* G × k routing weights */
    int64_t *moe_idx; /* 3·G·k + E + 1: chosen experts, (token, rank) → pair, pair → token, expert offsets */
    float *xg;        /* G × H inputs of one expert's tokens */
    float *gu;        /* 2·max(F, Fs) × T */
    float *eo;        /* G·k × H expert outputs, by pair (sorted by expert) */
    /* PLE */
    float *emb; /* T × NH·dh gathered n-gram rows */
    float *pv;  /* T × H PLE value */
    float *pn;  /* T × W normalised gated rows */
    /* causal convs (GDN, PLE): one sequence's input rows, its carried history first */
    const float **hist; /* max(Kc − 1, (Kp − 1)·n) + T row pointers */
    /* logits of several sequences (ts_cpu_forward_batch), a slice of the vocabulary at a time */
    float *lg; /* n_lg = T × min(V, LOGIT_SLICE) */
    int64_t n_lg;
    /* the micro-batch being run (set by the forward, NULL outside it): rows → sequence, position */
    const ts_cpu_batch *batch;
    /* TURBOSPARK_CHECK_FINITE=1: the residual is checked after every block of the forward */
    bool check_finite;
    int bad_layer, bad_block; /* where a non-finite value first appeared (bad_layer −2: not yet) */
};

enum { LOGIT_SLICE = 2048, MOE_GROUP = 64 };

/* Discrete choices (forward.h, ts_cpu_set_choice_hook; choices.c): whether anyone records them
 * (a hook, or TURBOSPARK_CPU_CHOICES), one choice to record, and the sequence and position of row r of
 * the micro-batch being run (−1 and r outside a forward). */
bool ts_cpu_choices_on(void);
void ts_cpu_choice(int kind, int layer, int seq, int64_t pos, float margin, int64_t n, const int64_t *ids);
void ts_cpu_row_position(const ts_cpu_work *w, int64_t r, int *seq, int64_t *pos);

void ts_cpu_hc_read(ts_cpu_work *w, const ts_hc_weights *hc, const float *R, int64_t T, float *x, float *inj);
void ts_cpu_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t T);
void ts_cpu_ple(ts_cpu_work *w, const ts_layer_weights *L, const ts_cpu_batch *b, float *R);
void ts_cpu_gdn(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const ts_cpu_batch *b, const float *x,
                float *y);
void ts_cpu_qsa(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const ts_cpu_batch *b, const float *x,
                float *y);
void ts_cpu_moe(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const float *x, int64_t T, float *y);

/* One GDN value head over the T rows of one sequence (gdn.c; MODEL.md §5.5, §7). Row t: q̂ at q + t·qs
 * (L2-normalised, 1/√dk included), k̂ at k + t·qs, v at v + t·vs (dv), β = beta[t·gs], log-decay
 * g = lg[t·gs] = A·softplus(a + dt) ≤ 0. S: dk × dv (S[i·dv + e]), updated; o + t·os gets Sᵀq̂
 * (before the gated norm). */
typedef struct {
    int64_t T, dk, dv;
    const float *q, *k;
    int64_t qs;
    const float *v;
    int64_t vs;
    const float *beta, *lg;
    int64_t gs;
    float *o;
    int64_t os;
} ts_gdn_head;

/* Rows of a chunk in the chunked form (the reference's chunk size). */
enum { TS_GDN_CHUNK = 64 };

/* The token recurrence (what the CPU forward runs): S ← e^g·S; δ = β(v − Sᵀk̂); S ← S + k̂δᵀ; o = Sᵀq̂.
 * scratch: dv floats. */
void ts_cpu_gdn_recur(const ts_gdn_head *h, float *S, float *scratch);
/* The chunked WY/UT form of the same recurrence, chunks of TS_GDN_CHUNK rows (the twin of the CUDA
 * prefill kernel; equal to ts_cpu_gdn_recur to fp32 rounding). scratch: ts_cpu_gdn_chunk_scratch floats. */
void ts_cpu_gdn_chunked(const ts_gdn_head *h, float *S, float *scratch);
int64_t ts_cpu_gdn_chunk_scratch(int64_t dv);

/* The causal depthwise conv + SiLU of one sequence (GDN, PLE; in gdn.c): with h = (K − 1)·dil
 * carried rows hist (oldest first) before the T rows of x (n channels each), for t < T, c < n:
 *     out[t·n + c] = silu(Σ_{k<K} cw[c·K + k] · row(t + k·dil)[c]),
 *     row(j) = hist row j (j < h), else x row j − h
 * then hist becomes the last h of those rows. rows: h + T pointers of scratch. */
void ts_cpu_conv_silu(const float **rows, float *hist, const float *cw, int64_t K, int64_t dil, int64_t n,
                      const float *x, int64_t T, float *out);

#endif
