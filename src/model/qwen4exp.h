/* qwen4exp: hyperparameters from GGUF metadata, validated (docs/MODEL.md §3), and every tensor bound
 * by name with its expected shape and allowed types (MODEL.md §4).
 *
 * Nothing here is a constant of the released checkpoint: every size comes from the file, so the
 * same code binds the 176 B release, the tiny golden fixtures and any config of the family.
 * Symbols in the shape comments follow MODEL.md §2 (H hidden, C streams, W = C·H, r HC rank, V vocab,
 * nk/nv GDN key/value heads, dk/dv their dims, nh/nkv/hd attention heads, ni/di indexer heads,
 * E/k experts, F/Fs expert widths, NH = (n−1)·P PLE heads of width dh). ggml shapes are ne order:
 * ne[0] is the contiguous input dimension of a weight matrix. */
#ifndef TS_MODEL_QWEN4EXP_H
#define TS_MODEL_QWEN4EXP_H

#include "gguf/gguf.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_ARCH "qwen4exp"
#define TS_MAX_NGRAM 8 /* PLE n-gram order n ≤ 8 */
/* Architecture limits checked on every size read from a file, before anything it sizes is allocated
 * (the released model: 48 layers, width 2560, 512 experts, 262,144 tokens of context). */
#define TS_MAX_LAYERS 1024          /* block_count */
#define TS_MAX_WIDTH (1u << 20)     /* hidden and feed-forward widths, HC rank */
#define TS_MAX_HEADS 4096           /* attention, indexer, GDN and PLE heads */
#define TS_MAX_HEAD_DIM 4096        /* head and state dimensions */
#define TS_MAX_STREAMS 16           /* hyper-connection streams */
#define TS_MAX_CONV 64              /* convolution kernels */
#define TS_MAX_EXPERTS 65536        /* experts */
#define TS_MAX_CONTEXT (1u << 24)   /* context_length, indexer budget */
#define TS_MIN_TENSORS_PER_BLOCK 16 /* a block holds at least 2 HC modules, its mixer and its MoE */
#define TS_MODEL_BACKENDS 2         /* ts_backend values (include/turbospark.h) */

typedef enum ts_layer_kind { TS_LAYER_GDN = 0, TS_LAYER_QSA = 1 } ts_layer_kind;

typedef struct ts_hparams {
    uint32_t n_vocab;     /* V: rows of token_embd */
    uint32_t n_embd;      /* H */
    uint32_t n_block;     /* block_count: trunk layers + MTP blocks */
    uint32_t n_layer;     /* L: trunk layers = n_block − n_mtp */
    uint32_t n_mtp;       /* nextn_predict_layers (0 if absent) */
    uint32_t n_ctx_train; /* context_length */
    float eps;            /* every RMS/L2 norm */

    uint32_t hc_count; /* C: residual streams */
    uint32_t hc_rank;  /* r: HC low rank */

    uint32_t n_head;          /* nh: QSA query heads */
    uint32_t n_head_kv;       /* nkv */
    uint32_t head_dim;        /* hd (key_length == value_length) */
    uint32_t n_rot;           /* rotary dims (NeoX, first n_rot of each head) */
    float rope_base;          /* θ */
    int32_t rope_sections[4]; /* mRoPE sections (text: reduces to 1-D rope) */

    uint32_t idx_n_head;     /* ni: indexer query heads */
    uint32_t idx_head_dim;   /* di */
    uint32_t idx_top_k;      /* Tb: token budget */
    uint32_t compress;       /* B: tokens per indexer block (same for all QSA layers) */
    uint32_t idx_top_blocks; /* Kb = Tb / B */

    uint32_t ssm_conv; /* GDN conv kernel */
    uint32_t ssm_dk;   /* dk = state_size */
    uint32_t ssm_nk;   /* nk = group_count */
    uint32_t ssm_nv;   /* nv = time_step_rank */
    uint32_t ssm_dv;   /* dv = inner_size / nv */
    uint32_t full_attn_interval;

    uint32_t n_expert;      /* E */
    uint32_t n_expert_used; /* k */
    uint32_t n_ff_shexp;    /* Fs */
    uint32_t *n_ff_exp;     /* F per trunk layer [n_layer] (the key may be a scalar or an array) */

    ts_layer_kind *kind; /* [n_block]; MTP blocks are QSA-shaped */

    int32_t ple_layer;               /* 0-based PLE layer, or −1 if the model has no PLE */
    uint32_t ple_n;                  /* n: n-gram order */
    uint32_t ple_p;                  /* P: heads per order */
    uint32_t ple_nh;                 /* NH = (n−1)·P */
    uint32_t ple_dh;                 /* dh: table row width */
    uint32_t ple_conv;               /* Kp: conv kernel (dilation = n) */
    uint32_t ple_eos;                /* segment-reset token id */
    uint64_t ple_mult[TS_MAX_NGRAM]; /* m[0..n−1] */
    uint64_t *ple_sizes;             /* [NH] prime modulus per head */
    uint64_t *ple_offsets;           /* [NH] row offset per head (prefix sums of sizes) */
    uint64_t ple_rows;               /* rows of the joined table (≥ Σ sizes; padded by converters) */
} ts_hparams;

/* One hyper-connection module. */
typedef struct ts_hc_weights {
    const ts_gguf_tensor *norm;   /* [W] (1+w folded) */
    const ts_gguf_tensor *down;   /* [W, r] */
    const ts_gguf_tensor *up;     /* [r, W] */
    const ts_gguf_tensor *inject; /* [W, C]; NULL for the final mixer */
} ts_hc_weights;

typedef struct ts_layer_weights {
    ts_layer_kind kind;
    ts_hc_weights hc_attn, hc_ffn;

    /* GDN (kind == TS_LAYER_GDN) */
    const ts_gguf_tensor *attn_qkv;   /* [H, 2·nk·dk + nv·dv] */
    const ts_gguf_tensor *attn_gate;  /* [H, nv·dv] (z) */
    const ts_gguf_tensor *ssm_beta;   /* [H, nv] */
    const ts_gguf_tensor *ssm_alpha;  /* [H, nv] */
    const ts_gguf_tensor *ssm_a;      /* [nv] A = −exp(A_log), f32 */
    const ts_gguf_tensor *ssm_dt;     /* [nv] dt bias */
    const ts_gguf_tensor *ssm_conv1d; /* [Kc, 2·nk·dk + nv·dv] */
    const ts_gguf_tensor *ssm_norm;   /* [dv] plain gamma */
    const ts_gguf_tensor *ssm_out;    /* [nv·dv, H] */

    /* QSA (kind == TS_LAYER_QSA) */
    const ts_gguf_tensor *attn_q;      /* [H, nh·2·hd] per head: hd query rows then hd gate rows */
    const ts_gguf_tensor *attn_k;      /* [H, nkv·hd] */
    const ts_gguf_tensor *attn_v;      /* [H, nkv·hd] */
    const ts_gguf_tensor *attn_output; /* [nh·hd, H] */
    const ts_gguf_tensor *attn_q_norm; /* [hd] */
    const ts_gguf_tensor *attn_k_norm; /* [hd] */
    const ts_gguf_tensor *idx_q;       /* [H, ni·di] */
    const ts_gguf_tensor *idx_k;       /* [H, di] */
    const ts_gguf_tensor *idx_q_norm;  /* [di] */
    const ts_gguf_tensor *idx_k_norm;  /* [di] */

    /* MoE (every layer) */
    const ts_gguf_tensor *ffn_gate_inp;       /* [H, E] router */
    const ts_gguf_tensor *ffn_gate_exps;      /* [H, F, E]; NULL when fused */
    const ts_gguf_tensor *ffn_up_exps;        /* [H, F, E]; NULL when fused */
    const ts_gguf_tensor *ffn_gate_up_exps;   /* [H, 2F, E] gate rows first; NULL when split */
    const ts_gguf_tensor *ffn_down_exps;      /* [F, H, E] */
    const ts_gguf_tensor *ffn_gate_inp_shexp; /* [H] scalar gate of the shared expert */
    const ts_gguf_tensor *ffn_gate_shexp;     /* [H, Fs] */
    const ts_gguf_tensor *ffn_up_shexp;       /* [H, Fs] */
    const ts_gguf_tensor *ffn_down_shexp;     /* [Fs, H] */

    /* PLE (only on hparams.ple_layer) */
    const ts_gguf_tensor *ple_key;        /* [NH·dh, W] */
    const ts_gguf_tensor *ple_value;      /* [NH·dh, H] */
    const ts_gguf_tensor *ple_norm_key;   /* [W] */
    const ts_gguf_tensor *ple_norm_query; /* [W] */
    const ts_gguf_tensor *ple_norm_conv;  /* [W] */
    const ts_gguf_tensor *ple_conv1d;     /* [Kp, W] */

    /* MTP head (only on MTP blocks) */
    const ts_gguf_tensor *nextn_eh_proj; /* [2H, H] embedding columns first */
    const ts_gguf_tensor *nextn_enorm;   /* [H] */
    const ts_gguf_tensor *nextn_hnorm;   /* [W] */
    ts_hc_weights nextn_hc_head;         /* norm/down/up as the final mixer */
} ts_layer_weights;

/* The sampling a model file recommends (general.sampling.*, as llama.cpp reads them). */
typedef struct ts_sampling_defaults {
    bool has[TS_SAMPLING_N_KEYS]; /* which of the fields below the file gives (TS_SAMPLING_* indexes) */
    float temperature;            /* general.sampling.temp (f32) */
    int32_t top_k;                /* general.sampling.top_k (i32; any integer type, < 0 read as 0) */
    float top_p;                  /* general.sampling.top_p (f32) */
    float min_p;                  /* general.sampling.min_p (f32) */
} ts_sampling_defaults;

typedef struct ts_model {
    ts_gguf *gguf; /* owned: every tensor points into its mapping */
    ts_hparams hp;
    /* the file's tokenizer (tokenizer.ggml.*), read once with the model and owned by it (about 100
     * bytes a vocabulary entry); NULL when the file has none or it cannot be read: tokenizer_err
     * then holds the sentence that says why */
    ts_tokenizer *tokenizer;
    char tokenizer_err[320];
    ts_sampling_defaults sampling;          /* read once with the model */
    const ts_gguf_tensor *token_embd;       /* [H, V] */
    const ts_gguf_tensor *output;           /* [H, V]; token_embd when the file has no output */
    ts_hc_weights output_hc;                /* final mixer (no inject) */
    const ts_gguf_tensor *ple_table;        /* [dh, rows] joined table; NULL with the per-head layout */
    const ts_gguf_tensor **ple_head_tables; /* [NH] per-head tables (split layout), else NULL */
    ts_layer_weights *layers;               /* [n_block] */
    /* the backends' contexts by ts_backend value (src/engine/backend.h: for CUDA the weights on the
     * GPU), made on first use, and what releases each (set with it: the model needs no backend code) */
    void *backend_ctx[TS_MODEL_BACKENDS];
    void (*backend_ctx_free[TS_MODEL_BACKENDS])(void *ctx);
} ts_model;

/* ---- layout arithmetic ------------------------------------------------------------------------
 * The sizes of a sequence's state that every backend derives from the hyperparameters, written
 * once (floats, per layer of the kind that has them). */

/* GDN: channels of the raw q|k|v row that the short convolution runs over, 2·nk·dk + nv·dv. */
static inline int64_t ts_gdn_conv_dim(const ts_hparams *hp) {
    return 2 * (int64_t)hp->ssm_nk * hp->ssm_dk + (int64_t)hp->ssm_nv * hp->ssm_dv;
}
/* GDN: the convolution's history, the last Kc − 1 raw rows. */
static inline int64_t ts_gdn_conv_floats(const ts_hparams *hp) {
    return (int64_t)(hp->ssm_conv - 1) * ts_gdn_conv_dim(hp);
}
/* GDN: the fp32 recurrent state, nv × dk × dv. */
static inline int64_t ts_gdn_state_floats(const ts_hparams *hp) {
    return (int64_t)hp->ssm_nv * hp->ssm_dk * hp->ssm_dv;
}
/* QSA: K (and V) of one position, nkv × hd. */
static inline int64_t ts_qsa_kv_width(const ts_hparams *hp) {
    return (int64_t)hp->n_head_kv * hp->head_dim;
}
/* QSA: rows of pooled indexer keys that n tokens can fill (complete blocks, plus one). */
static inline int64_t ts_qsa_block_rows(const ts_hparams *hp, int64_t n) {
    return n / hp->compress + 1;
}
/* PLE: the convolution's history, (Kp − 1)·n rows of the wide residual W = C·H (dilation n). */
static inline int64_t ts_ple_conv_floats(const ts_hparams *hp) {
    return (int64_t)(hp->ple_conv - 1) * hp->ple_n * hp->hc_count * hp->n_embd;
}

/* Reads and validates the hyperparameters of a qwen4exp GGUF (MODEL.md §3.3). hp owns two arrays:
 * free with ts_hparams_free. */
int ts_hparams_read(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen);
void ts_hparams_free(ts_hparams *hp);

/* Writes hp as qwen4exp GGUF metadata (the inverse of ts_hparams_read; used by convert and synth). */
int ts_hparams_write(const ts_hparams *hp, ts_gguf_writer *w);

/* Opens a GGUF file, reads its hyperparameters and binds every tensor, then reads its tokenizer and
 * recommended sampling. Refuses, by name, another architecture, a vision projector, a missing or
 * misshapen tensor, a type the engine cannot read, and any tensor the engine would not use. A file
 * without a usable tokenizer still loads (ts_model_tokenizer says why it has none). */
int ts_model_load(const char *path, ts_model **out, char *err, size_t errlen);
/* Same on an already-open file; takes ownership of g on success and on failure. */
int ts_model_bind(ts_gguf *g, ts_model **out, char *err, size_t errlen);
void ts_model_free(ts_model *m);

/* One tensor a qwen4exp file holds: name, expected shape and which element types fit.
 * role: 'm' a matrix (any type the engine reads, quantized included), 'v' a 1-D or conv vector
 * (F32, F16 or BF16), 'f' an F32-only vector (ssm_a, ssm_dt). */
typedef struct ts_tensor_spec {
    char name[64];
    uint32_t n_dims; /* 1..3 */
    int64_t ne[3];
    char role;
    bool optional;               /* may be absent (output, MTP indexer tensors) */
    const ts_gguf_tensor **slot; /* where ts_model keeps it; NULL when visiting without a model */
} ts_tensor_spec;

typedef struct ts_layout {
    bool ple_split;     /* per-head PLE tables (MODEL.md §4.6) instead of one joined table */
    bool fused_experts; /* ffn_gate_up_exps instead of ffn_gate_exps + ffn_up_exps */
} ts_layout;

/* Calls fn for every tensor a file of hp holds, in the order a converter writes them (used by synth,
 * convert and the binder; m may be NULL). Returns the first non-zero fn result. */
typedef int (*ts_tensor_visit_fn)(void *ctx, const ts_tensor_spec *spec);
int ts_qwen4exp_visit_tensors(const ts_hparams *hp, ts_layout layout, ts_model *m, ts_tensor_visit_fn fn,
                              void *ctx);

/* Whether a tensor of this role may have this ggml type. */
bool ts_role_allows(char role, uint32_t type);

/* The released checkpoint's hyperparameters (MODEL.md §2, §3.1), for synth and tests. Free with ts_hparams_free. */
int ts_hparams_released(ts_hparams *hp, char *err, size_t errlen);

/* A small config with every feature on (4 layers: GDN, GDN+PLE, GDN, QSA), for tests and demos. */
int ts_hparams_tiny(ts_hparams *hp, char *err, size_t errlen);

/* A mid-size config (hidden 1024, 8 layers, 64 experts top-8, vocab 32768) for CPU benchmarks. */
int ts_hparams_mid(ts_hparams *hp, char *err, size_t errlen);

/* The decode cost of one token (ts_model_decode_cost_batch of include/turbospark.h at batch 1). */
ts_decode_cost ts_model_decode_cost(const ts_model *m, int64_t ctx, int kv_value_bytes);

/* Changes the layer count (kinds follow full_attn_interval; MTP blocks are QSA-shaped). */
int ts_hparams_set_layers(ts_hparams *hp, uint32_t n_layer, uint32_t n_mtp, char *err, size_t errlen);

/* PLE n-gram hash multipliers of the reference (MODEL.md §5.4), from seed and PLE layer index. */
void ts_ple_multipliers(uint32_t n_vocab, uint32_t n, uint64_t seed, uint32_t ple_index, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
