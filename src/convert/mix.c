/* Quantization mixes (see mix.h). */
#include "convert/mix.h"

#include "common/error.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The UD-style recipes (see mix.h). Routed down projections 640 wide (the released shapes) fall
 * back to a 32-element type (ts_synth_fallback_type). */
static const ts_ud_recipe k_ud_q3_k_xl = {.experts = {TS_TYPE_Q3_K, TS_TYPE_Q4_K},
                                          .down = {TS_TYPE_Q4_K, TS_TYPE_Q5_K},
                                          .shared = TS_TYPE_Q6_K,
                                          .attention = TS_TYPE_Q5_K,
                                          .attn_v = TS_TYPE_Q6_K,
                                          .hc = TS_TYPE_Q8_0,
                                          .ple = TS_TYPE_Q6_K,
                                          .ple_table = TS_TYPE_Q4_0,
                                          .token_embd = TS_TYPE_Q4_K,
                                          .output = TS_TYPE_Q6_K};
static const ts_ud_recipe k_ud_q2_k_xl = {.experts = {TS_TYPE_Q2_K, TS_TYPE_Q3_K},
                                          .down = {TS_TYPE_Q3_K, TS_TYPE_Q4_K},
                                          .shared = TS_TYPE_Q5_K,
                                          .attention = TS_TYPE_Q4_K,
                                          .attn_v = TS_TYPE_Q5_K,
                                          .hc = TS_TYPE_Q8_0,
                                          .ple = TS_TYPE_Q6_K,
                                          .ple_table = TS_TYPE_Q4_0,
                                          .token_embd = TS_TYPE_Q4_K,
                                          .output = TS_TYPE_Q6_K};
static const ts_ud_recipe k_ud_iq2_m = {.experts = {TS_TYPE_IQ2_S, TS_TYPE_IQ3_S},
                                        .down = {TS_TYPE_IQ3_S, TS_TYPE_IQ4_XS},
                                        .shared = TS_TYPE_Q5_K,
                                        .attention = TS_TYPE_Q4_K,
                                        .attn_v = TS_TYPE_Q5_K,
                                        .hc = TS_TYPE_Q8_0,
                                        .ple = TS_TYPE_Q6_K,
                                        .ple_table = TS_TYPE_IQ4_NL,
                                        .token_embd = TS_TYPE_Q4_K,
                                        .output = TS_TYPE_Q6_K};
static const ts_ud_recipe k_ud_iq2_xxs = {.experts = {TS_TYPE_IQ2_XXS, TS_TYPE_IQ3_XXS},
                                          .down = {TS_TYPE_IQ2_XS, TS_TYPE_IQ3_XXS},
                                          .shared = TS_TYPE_Q4_K,
                                          .attention = TS_TYPE_Q4_K,
                                          .attn_v = TS_TYPE_Q5_K,
                                          .hc = TS_TYPE_Q8_0,
                                          .ple = TS_TYPE_Q6_K,
                                          .ple_table = TS_TYPE_IQ4_NL,
                                          .token_embd = TS_TYPE_Q4_K,
                                          .output = TS_TYPE_Q6_K};

static const ts_ud_recipe k_ud_iq1_m = {.experts = {TS_TYPE_IQ1_M, TS_TYPE_IQ2_XXS},
                                        .down = {TS_TYPE_IQ2_XXS, TS_TYPE_IQ3_XXS},
                                        .shared = TS_TYPE_Q4_K,
                                        .attention = TS_TYPE_Q4_K,
                                        .attn_v = TS_TYPE_Q5_K,
                                        .hc = TS_TYPE_Q8_0,
                                        .ple = TS_TYPE_Q6_K,
                                        .ple_table = TS_TYPE_IQ4_NL,
                                        .token_embd = TS_TYPE_Q4_K,
                                        .output = TS_TYPE_Q6_K};

/* llama.cpp's LLAMA_FTYPE_* values for general.file_type (the UD recipes: the nearest llama.cpp mix) */
static const ts_mix k_mixes[] = {
    {"f32", TS_TYPE_F32, 0, TS_MIX_PLAIN, NULL},
    {"f16", TS_TYPE_F16, 1, TS_MIX_PLAIN, NULL},
    {"bf16", TS_TYPE_BF16, 32, TS_MIX_PLAIN, NULL},
    {"q8_0", TS_TYPE_Q8_0, 7, TS_MIX_PLAIN, NULL},
    {"q6_k", TS_TYPE_Q6_K, 18, TS_MIX_PLAIN, NULL},
    {"q5_k_m", TS_TYPE_Q5_K, 17, TS_MIX_K_M, NULL},
    {"q4_k_m", TS_TYPE_Q4_K, 15, TS_MIX_K_M, NULL},
    {"q5_0", TS_TYPE_Q5_0, 8, TS_MIX_PLAIN, NULL},
    {"q4_0", TS_TYPE_Q4_0, 2, TS_MIX_PLAIN, NULL},
    {"iq4_nl", TS_TYPE_IQ4_NL, 25, TS_MIX_PLAIN, NULL},
    {"iq3_s", TS_TYPE_IQ3_S, 26, TS_MIX_PLAIN, NULL},
    {"iq3_xxs", TS_TYPE_IQ3_XXS, 23, TS_MIX_IQ3_XXS, NULL},
    {"ud_q3_k_xl", TS_TYPE_Q3_K, 12, TS_MIX_UD, &k_ud_q3_k_xl},
    {"ud_q2_k_xl", TS_TYPE_Q2_K, 10, TS_MIX_UD, &k_ud_q2_k_xl},
    {"ud_iq2_m", TS_TYPE_IQ2_S, 29, TS_MIX_UD, &k_ud_iq2_m},
    {"ud_iq2_xxs", TS_TYPE_IQ2_XXS, 19, TS_MIX_UD, &k_ud_iq2_xxs},
    {"ud_iq1_m", TS_TYPE_IQ1_M, 31, TS_MIX_UD, &k_ud_iq1_m},
};

const ts_mix *ts_mix_from_name(const char *name) {
    for (size_t i = 0; i < sizeof k_mixes / sizeof *k_mixes; i++)
        if (strcasecmp(name, k_mixes[i].name) == 0) return &k_mixes[i];
    return NULL;
}

const char *ts_mix_names(void) {
    return "f32 f16 bf16 q8_0 q6_k q5_k_m q4_k_m q5_0 q4_0 iq4_nl iq3_s iq3_xxs ud_q3_k_xl ud_q2_k_xl "
           "ud_iq2_m "
           "ud_iq2_xxs ud_iq1_m";
}

uint32_t ts_mix_router_type(uint32_t planned, bool bf16_exact) {
    return planned == TS_TYPE_BF16 && !bf16_exact ? TS_TYPE_F32 : planned;
}

bool ts_values_bf16_exact(const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        if (u & 0xffffu) return false;
    }
    return true;
}

int ts_rows_bf16_exact(ts_row_fn fn, const void *ctx, int64_t ne0, int64_t rows, int64_t scratch_len,
                       char *err, size_t errlen) {
    float *row = malloc((size_t)(ne0 + scratch_len) * sizeof *row);
    if (!row) return ts_errf(err, errlen, "out of memory");
    int exact = 1;
    for (int64_t r = 0; exact == 1 && r < rows; r++)
        exact = fn(ctx, r, row, row + ne0, err, errlen) ? -1 : ts_values_bf16_exact(row, ne0);
    free(row);
    return exact;
}

int ts_mix_is_router(const char *name) {
    size_t n = strlen(name);
    const char *suf = ".ffn_gate_inp.weight";
    return n >= strlen(suf) && strcmp(name + n - strlen(suf), suf) == 0;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third in between. */
static int use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* llama.cpp's choices for LLAMA_FTYPE_MOSTLY_IQ3_XXS without an importance matrix (see mix.h). */
static uint32_t iq3_xxs_type(const ts_hparams *hp, const char *n, bool in_block, unsigned layer) {
    if (strcmp(n, "output.weight") == 0) return TS_TYPE_Q5_K;
    if (strcmp(n, "token_embd.weight") == 0) return TS_TYPE_IQ3_S;
    if (!in_block) return TS_TYPE_IQ3_XXS;
    if (has_suffix(n, ".attn_v.weight") || has_suffix(n, ".attn_qkv.weight"))
        return hp->n_head_kv && hp->n_head >= 4 * hp->n_head_kv ? TS_TYPE_Q4_K : TS_TYPE_IQ3_S;
    if (has_suffix(n, ".attn_output.weight")) return TS_TYPE_IQ3_S;
    if (has_suffix(n, ".attn_q.weight") || has_suffix(n, ".attn_k.weight")) return TS_TYPE_IQ2_S;
    if (strstr(n, ".ffn_down")) return layer < hp->n_block / 8 ? TS_TYPE_Q4_K : TS_TYPE_Q3_K;
    return TS_TYPE_IQ3_XXS;
}

ts_mix_role ts_mix_role_of(const ts_tensor_spec *spec) {
    const char *n = spec->name;
    if (spec->role != 'm') return TS_ROLE_VECTOR;
    if (ts_mix_is_router(n)) return TS_ROLE_ROUTER;
    if (!strcmp(n, "token_embd.weight")) return TS_ROLE_TOKEN_EMBD;
    if (!strcmp(n, "output.weight")) return TS_ROLE_OUTPUT;
    if (!strcmp(n, "per_layer_token_embd.weight") || !strncmp(n, "ple_ngram_embd.", 15))
        return TS_ROLE_PLE_TABLE;
    if (strstr(n, "_exps.")) return strstr(n, ".ffn_down_exps.") ? TS_ROLE_EXPERTS_DOWN : TS_ROLE_EXPERTS;
    if (strstr(n, "_shexp.")) return TS_ROLE_SHARED;
    if (strstr(n, ".hc_") || !strncmp(n, "output_hc", 9)) return TS_ROLE_HC;
    if (strstr(n, ".ple_")) return TS_ROLE_PLE;
    if (has_suffix(n, ".attn_v.weight") || has_suffix(n, ".attn_qkv.weight")) return TS_ROLE_ATTN_V;
    return TS_ROLE_ATTENTION;
}

const char *ts_mix_role_name(ts_mix_role role) {
    static const char *names[TS_ROLE_COUNT] = {"routed experts gate/up",
                                               "routed experts down",
                                               "shared expert",
                                               "attention, GDN, MTP",
                                               "attn_v, attn_qkv",
                                               "hyper-connections",
                                               "PLE key/value",
                                               "PLE tables",
                                               "token_embd",
                                               "output",
                                               "routers",
                                               "vectors (norms, conv)"};
    return role < TS_ROLE_COUNT ? names[role] : "unknown";
}

/* A UD recipe's type for a matrix (see mix.h); edge: the first and last eighth of the blocks. */
static uint32_t ud_type(const ts_ud_recipe *r, ts_mix_role role, bool edge) {
    switch (role) {
    case TS_ROLE_EXPERTS:
        return r->experts[edge];
    case TS_ROLE_EXPERTS_DOWN:
        return r->down[edge];
    case TS_ROLE_SHARED:
        return r->shared;
    case TS_ROLE_ATTN_V:
        return r->attn_v;
    case TS_ROLE_HC:
        return r->hc;
    case TS_ROLE_PLE:
        return r->ple;
    case TS_ROLE_PLE_TABLE:
        return r->ple_table;
    case TS_ROLE_TOKEN_EMBD:
        return r->token_embd;
    case TS_ROLE_OUTPUT:
        return r->output;
    default:
        return r->attention;
    }
}

uint32_t ts_mix_type(const ts_mix *mix, const ts_hparams *hp, const ts_tensor_spec *spec) {
    if (spec->role != 'm') return TS_TYPE_F32;
    if (ts_mix_is_router(spec->name)) return mix->base == TS_TYPE_F32 ? TS_TYPE_F32 : TS_TYPE_BF16;
    if (mix->rules == TS_MIX_UD) {
        unsigned layer = 0;
        const bool in_block = sscanf(spec->name, "blk.%u.", &layer) == 1 && layer < hp->n_block;
        const bool edge = in_block && (layer < hp->n_block / 8 || layer >= 7 * hp->n_block / 8);
        return ts_synth_fallback_type(ud_type(mix->ud, ts_mix_role_of(spec), edge), spec->ne[0]);
    }
    uint32_t type = mix->base;
    bool quantized = ts_type_get(type)->block_size > 1;
    const char *n = spec->name;
    unsigned layer = 0;
    bool in_block = sscanf(n, "blk.%u.", &layer) == 1 && layer < hp->n_block;
    if (mix->rules == TS_MIX_IQ3_XXS) {
        type = iq3_xxs_type(hp, n, in_block, layer);
    } else if (quantized && type != TS_TYPE_Q8_0 && type != TS_TYPE_Q6_K &&
               (strcmp(n, "output.weight") == 0 || strcmp(n, "token_embd.weight") == 0)) {
        type = TS_TYPE_Q6_K;
    } else if (mix->rules == TS_MIX_K_M && in_block) {
        if (has_suffix(n, ".attn_qkv.weight")) {
            type = mix->base == TS_TYPE_Q4_K ? TS_TYPE_Q5_K : TS_TYPE_Q6_K;
        } else if (has_suffix(n, ".attn_v.weight")) {
            int i = 0, count = 0;
            for (uint32_t l = 0; l < hp->n_block; l++) {
                if (hp->kind[l] != TS_LAYER_QSA) continue;
                if (l < layer) i++;
                count++;
            }
            if (use_more_bits(i, count)) type = TS_TYPE_Q6_K;
        } else if (strstr(n, ".ffn_down")) {
            if (use_more_bits((int)layer, (int)hp->n_block)) type = TS_TYPE_Q6_K;
        }
    }
    return ts_synth_fallback_type(type, spec->ne[0]);
}

typedef struct sizes_ctx {
    const ts_mix *mix;
    const ts_hparams *hp;
    ts_mix_sizes *out;
    char *name; /* ts_mix_needs_imatrix: the first tensor that needs one, and its type */
    size_t len;
    bool found;
    uint32_t type;
} sizes_ctx;

static int add_size(void *ctx, const ts_tensor_spec *spec) {
    sizes_ctx *c = ctx;
    const uint32_t type = ts_mix_type(c->mix, c->hp, spec);
    if (c->name) {
        if (!c->found && ts_quantize_needs_imatrix(type)) {
            snprintf(c->name, c->len, "%s", spec->name);
            c->found = true;
            c->type = type;
        }
        return 0;
    }
    uint64_t rows = 1;
    for (uint32_t d = 1; d < spec->n_dims; d++) rows *= (uint64_t)spec->ne[d];
    const ts_mix_role role = ts_mix_role_of(spec);
    const uint64_t bytes = ts_row_size(type, spec->ne[0]) * rows, elements = (uint64_t)spec->ne[0] * rows;
    c->out->bytes[role] += bytes, c->out->elements[role] += elements;
    c->out->total_bytes += bytes, c->out->total_elements += elements;
    int i = 0, *n = &c->out->n_types[role];
    while (i < *n && c->out->types[role][i] != type) i++;
    if (i == *n && *n < 4) c->out->types[role][(*n)++] = type;
    return 0;
}

int ts_mix_sizes_of(const ts_mix *mix, const ts_hparams *hp, ts_layout layout, ts_mix_sizes *out) {
    memset(out, 0, sizeof *out);
    sizes_ctx c = {mix, hp, out, NULL, 0, false, 0};
    return ts_qwen4exp_visit_tensors(hp, layout, NULL, add_size, &c);
}

bool ts_mix_needs_imatrix(const ts_mix *mix, const ts_hparams *hp, ts_layout layout, char *name, size_t len,
                          uint32_t *type) {
    sizes_ctx c = {mix, hp, NULL, name, len, false, 0};
    ts_qwen4exp_visit_tensors(hp, layout, NULL, add_size, &c);
    if (c.found) *type = c.type;
    return c.found;
}
