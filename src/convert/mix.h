/* Quantization mixes: which ggml type each tensor of a qwen4exp file gets, for `convert --type`
 * and `quantize`. One function decides (ts_mix_type), so the two commands cannot disagree.
 *
 * The policy follows llama.cpp's llama_tensor_get_type in simplified, documented form:
 *   - vectors (norms, biases, conv kernels, ssm_a/ssm_dt, the shared-expert gate) stay F32;
 *   - routers (ffn_gate_inp) are never rounded, since top-k selection is sensitive to their rounding:
 *     BF16 in every mix but f32 when their values are bf16 numbers (the released checkpoint stores them
 *     as bf16; bf16 → fp32 is exact, so the logits are those of F32 rows and a token reads half the
 *     bytes), else F32 (ts_mix_router_type; convert and quantize both look at the values);
 *   - f32 / f16 / bf16 / q8_0 / q6_k / q4_0 / q5_0 / iq4_nl: every other matrix gets the type,
 *     except that in the quantized mixes below 8 bits output.weight and token_embd.weight get Q6_K
 *     (llama.cpp bumps output to Q6_K in every mix but Q8_0; it leaves token_embd at the base type
 *     unless embeddings are tied — we bump both, the embedding table is gathered one row a token so
 *     its precision costs memory, not bandwidth);
 *   - q4_k_m / q5_k_m: base Q4_K / Q5_K; attn_qkv (the GDN fused projection) one step up (Q5_K /
 *     Q6_K, llama.cpp's rule for attn_qkv); attn_v and every ffn_down (routed and shared) Q6_K on
 *     llama.cpp's "use_more_bits" layers — the first and last eighth of the layers and every third
 *     layer in between (about half) — counted over QSA layers for attn_v and over all blocks for
 *     ffn_down; output / token_embd Q6_K;
 *   - iq3_s: every matrix IQ3_S, output / token_embd Q6_K (as q4_0);
 *   - iq3_xxs: llama.cpp's IQ3_XXS rules without an importance matrix: base IQ3_XXS; output Q5_K,
 *     token_embd IQ3_S; attn_v and attn_qkv Q4_K when a QSA layer has >= 4 query heads a K/V head
 *     (else IQ3_S); attn_output IQ3_S; ffn_down (routed and shared) Q4_K in the first eighth of the
 *     blocks and Q3_K after; QSA attn_q / attn_k IQ2_S. llama.cpp counts ffn_down tensors, not
 *     blocks, for "the first eighth"; we count blocks, as q4_k_m does;
 *   - ud_q3_k_xl, ud_q2_k_xl, ud_iq2_m, ud_iq2_xxs, ud_iq1_m: UD-style recipes after Unsloth's "Dynamic"
 *     files (routed experts at 2-3 bits, everything else kept higher), one type a role
 *     (ts_mix_role_of; the recipes are in mix.c): routed experts' gate/up and down projections get
 *     the recipe's low types, one step higher in the first and last eighth of the blocks; shared
 *     experts, attention (QSA and its indexer, the GDN projections), attn_v / attn_qkv, the
 *     hyper-connections (Q8_0), PLE key/value projections, PLE tables, token_embd and output get
 *     their own higher types (docs/DECISIONS.md has the table, bits per weight and the released
 *     model's bytes: `turbospark synth --released --type MIX --sizes`). ud_iq2_xxs puts experts at
 *     IQ2_XXS / IQ2_XS and ud_iq1_m at IQ1_M / IQ2_XXS, which need an importance matrix
 *     (quantize --imatrix);
 *   - a type whose block does not divide the row (ne0 = 160 PLE table, 320 HC up, 640 expert down)
 *     falls back as llama.cpp does (MODEL.md §8): Q2_K/Q3_K→Q4_0, Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0, the
 *     i-quants (IQ1_S .. IQ4_XS)→IQ4_NL, anything else→Q8_0, and F16 when even 32 does not divide the row
 *     (ts_synth_fallback_type). At the released shapes this sends the routed experts' down
 *     projections (640 wide) of the i-quant mixes to IQ4_NL. */
#ifndef TS_CONVERT_MIX_H
#define TS_CONVERT_MIX_H

#include "convert/stream.h"
#include "model/qwen4exp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a matrix is for, by its name (for the UD recipes and the size report). */
typedef enum ts_mix_role {
    TS_ROLE_EXPERTS,      /* routed experts' gate and up projections (split or fused) */
    TS_ROLE_EXPERTS_DOWN, /* routed experts' down projections */
    TS_ROLE_SHARED,       /* the shared expert's gate, up, down */
    TS_ROLE_ATTENTION,    /* QSA q, k, output and indexer; GDN gate, alpha, beta, out; MTP eh_proj */
    TS_ROLE_ATTN_V,       /* QSA attn_v and GDN attn_qkv (llama.cpp's attn_v-like tensors) */
    TS_ROLE_HC,           /* hyper-connection down / up / inject (blocks, output, MTP head) */
    TS_ROLE_PLE,          /* PLE key and value projections */
    TS_ROLE_PLE_TABLE,    /* the PLE n-gram tables (joined or per head) */
    TS_ROLE_TOKEN_EMBD,
    TS_ROLE_OUTPUT,
    TS_ROLE_ROUTER, /* ffn_gate_inp: BF16 or F32, never rounded */
    TS_ROLE_VECTOR, /* norms, biases, conv kernels, ssm_a/dt: always F32 */
    TS_ROLE_COUNT
} ts_mix_role;

/* A UD-style recipe: the type of each matrix role. Routed experts take experts[1] / down[1] in the
 * first and last eighth of the blocks, experts[0] / down[0] elsewhere. */
typedef struct ts_ud_recipe {
    uint32_t experts[2], down[2];
    uint32_t shared, attention, attn_v, hc, ple, ple_table, token_embd, output;
} ts_ud_recipe;

typedef struct ts_mix {
    const char *name;       /* as typed on the command line, e.g. "q4_k_m" */
    uint32_t base;          /* ggml type of most matrices */
    uint32_t ftype;         /* llama.cpp general.file_type (LLAMA_FTYPE_*) */
    int rules;              /* which per-tensor rules apply on top of base */
    const ts_ud_recipe *ud; /* TS_MIX_UD: the recipe */
} ts_mix;

enum {
    TS_MIX_PLAIN = 0,   /* base everywhere (output / token_embd Q6_K below 8 bits) */
    TS_MIX_K_M = 1,     /* the _M rules (attn_qkv up a step, attn_v/ffn_down Q6_K on half the layers) */
    TS_MIX_IQ3_XXS = 2, /* llama.cpp's IQ3_XXS rules without an importance matrix */
    TS_MIX_UD = 3,      /* a UD-style recipe (mix->ud) */
};

/* The mix of a name (case-insensitive: f32 f16 bf16 q8_0 q6_k q5_k_m q4_k_m q5_0 q4_0 iq4_nl iq3_s
 * iq3_xxs ud_q3_k_xl ud_q2_k_xl ud_iq2_m ud_iq2_xxs ud_iq1_m), or NULL. */
const ts_mix *ts_mix_from_name(const char *name);

/* The role of a tensor (spec->role 'v'/'f' tensors are TS_ROLE_VECTOR), and its name for reports. */
ts_mix_role ts_mix_role_of(const ts_tensor_spec *spec);
const char *ts_mix_role_name(ts_mix_role role);

/* Bytes and elements of each role in a file of hp written with `mix` (tensors absent from `layout`
 * are not counted; vectors at F32, as convert writes them). */
typedef struct ts_mix_sizes {
    uint64_t bytes[TS_ROLE_COUNT], elements[TS_ROLE_COUNT];
    uint32_t types[TS_ROLE_COUNT][4]; /* the distinct types of the role, in order met (the first 4) */
    int n_types[TS_ROLE_COUNT];
    uint64_t total_bytes, total_elements;
} ts_mix_sizes;
int ts_mix_sizes_of(const ts_mix *mix, const ts_hparams *hp, ts_layout layout, ts_mix_sizes *out);

/* Whether some matrix of the mix, for a model of hp, gets a type that ggml quantizes only with an
 * importance matrix (IQ2_XXS, IQ2_XS); the first such tensor's name into name[len] and its type into
 * *type when so. */
bool ts_mix_needs_imatrix(const ts_mix *mix, const ts_hparams *hp, ts_layout layout, char *name, size_t len,
                          uint32_t *type);

/* A list of the mix names, for usage messages. */
const char *ts_mix_names(void);

/* Whether a tensor of role 'm' is a router (ffn_gate_inp), which the mix never quantizes. */
int ts_mix_is_router(const char *name);

/* A router's type once its values are known: the mix's BF16 only when every value is a bf16 number
 * (bf16_exact), else F32, so that no mix rounds a router. */
uint32_t ts_mix_router_type(uint32_t planned, bool bf16_exact);

/* Whether each of the n values is a bf16 number (its low 16 bits zero): stored as BF16 it is unchanged. */
bool ts_values_bf16_exact(const float *v, int64_t n);

/* Whether every value of the rows 0 .. rows − 1 that fn makes (ts_row_fn, with scratch_len floats of scratch:
 * the rows convert and quantize write) is a bf16 number: 1 or 0, −1 with err set. */
int ts_rows_bf16_exact(ts_row_fn fn, const void *ctx, int64_t ne0, int64_t rows, int64_t scratch_len,
                       char *err, size_t errlen);

/* The ggml type `spec` gets in `mix` for a model of hp. */
uint32_t ts_mix_type(const ts_mix *mix, const ts_hparams *hp, const ts_tensor_spec *spec);

#endif
