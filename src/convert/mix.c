/* Quantization mixes (see mix.h). */
#include "convert/mix.h"

#include "model/synth.h"
#include "quant/quant.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* llama.cpp's LLAMA_FTYPE_* values for general.file_type */
static const ts_mix k_mixes[] = {
    {"f32", TS_TYPE_F32, 0, TS_MIX_PLAIN},      {"f16", TS_TYPE_F16, 1, TS_MIX_PLAIN},
    {"bf16", TS_TYPE_BF16, 32, TS_MIX_PLAIN},   {"q8_0", TS_TYPE_Q8_0, 7, TS_MIX_PLAIN},
    {"q6_k", TS_TYPE_Q6_K, 18, TS_MIX_PLAIN},   {"q5_k_m", TS_TYPE_Q5_K, 17, TS_MIX_K_M},
    {"q4_k_m", TS_TYPE_Q4_K, 15, TS_MIX_K_M},   {"q5_0", TS_TYPE_Q5_0, 8, TS_MIX_PLAIN},
    {"q4_0", TS_TYPE_Q4_0, 2, TS_MIX_PLAIN},    {"iq4_nl", TS_TYPE_IQ4_NL, 25, TS_MIX_PLAIN},
    {"iq3_s", TS_TYPE_IQ3_S, 26, TS_MIX_PLAIN}, {"iq3_xxs", TS_TYPE_IQ3_XXS, 23, TS_MIX_IQ3_XXS},
};

const ts_mix *ts_mix_from_name(const char *name) {
    for (size_t i = 0; i < sizeof k_mixes / sizeof *k_mixes; i++)
        if (strcasecmp(name, k_mixes[i].name) == 0) return &k_mixes[i];
    return NULL;
}

const char *ts_mix_names(void) {
    return "f32 f16 bf16 q8_0 q6_k q5_k_m q4_k_m q5_0 q4_0 iq4_nl iq3_s iq3_xxs";
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
    if (strstr(n, ".ffn_down")) return layer < hp->n_block / 8 ? TS_TYPE_Q4_K : TS_TYPE_Q3_K;
    return TS_TYPE_IQ3_XXS;
}

uint32_t ts_mix_type(const ts_mix *mix, const ts_hparams *hp, const ts_tensor_spec *spec) {
    if (spec->role != 'm' || ts_mix_is_router(spec->name)) return TS_TYPE_F32;
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
