/* The CPU blocks of one qwen4exp layer (internal to src/cpu). Each takes a chunk of T tokens. */
#ifndef TS_CPU_LAYERS_H
#define TS_CPU_LAYERS_H

#include "cpu/cpu.h"
#include "cpu/forward.h"

/* Workspaces, sized at creation for T ≤ ubatch tokens and n_ctx positions (W = C·H). */
struct ts_cpu_work {
    const ts_model *m;
    int64_t ubatch, n_ctx;
    size_t bytes;
    float *R;       /* T × W   wide residual */
    float *xn;      /* T × W   normalised streams (HC read, PLE query) */
    float *mix;     /* T × W   HC mix weights / PLE keys */
    float *lr;      /* T × r   HC low-rank */
    float *x, *y;   /* T × H   block input / output */
    float *inj;     /* T × C   HC inject weights */
    float *vec;     /* scratch for one dequantized weight vector (max over vectors) */
    float *vec2;    /* a second one */
    /* GDN */
    float *qkv;     /* (Kc − 1 + T) × conv_dim: history then the chunk's raw projections */
    float *u;       /* T × conv_dim after conv + SiLU */
    float *z, *o;   /* T × nv·dv */
    float *ba;      /* T × 2·nv: β logits then α logits */
    /* QSA */
    float *qg;      /* T × nh·2·hd */
    float *kv;      /* T × 2·nkv·hd: k then v of each token */
    float *iq;      /* T × ni·di */
    float *att;     /* T × nh·hd */
    float *scores;  /* n_ctx / B block scores, then n_ctx attention weights */
    float *probs;   /* n_ctx */
    int64_t *order; /* n_ctx / B block order; n_ctx selected positions */
    int64_t *allowed; /* n_ctx */
    /* MoE */
    float *router;  /* E */
    float *gu;      /* 2·max(F, Fs) × T */
    float *eo;      /* T × H */
    /* PLE */
    float *emb;     /* T × NH·dh gathered n-gram rows */
    float *pv;      /* T × H PLE value */
    float *pn;      /* ((Kp − 1)·n + T) × W normalised gated rows with history */
};

void ts_cpu_hc_read(ts_cpu_work *w, const ts_hc_weights *hc, const float *R, int64_t T, float *x, float *inj);
void ts_cpu_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t T);
void ts_cpu_ple(ts_cpu_work *w, const ts_layer_weights *L, ts_seq_state *st, const int32_t *ids, int64_t T, float *R);
void ts_cpu_gdn(ts_cpu_work *w, const ts_layer_weights *L, float *conv, float *S, const float *x, int64_t T, float *y);
void ts_cpu_qsa(ts_cpu_work *w, const ts_layer_weights *L, ts_seq_state *st, uint32_t l, const float *x, int64_t T,
                float *y);
void ts_cpu_moe(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const float *x, int64_t T, float *y);

#endif
