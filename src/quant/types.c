#include "quant/quant.h"

#include <strings.h>

/* Indexed by ggml type id; a NULL name marks an id ggml removed. Names, block sizes and block
 * bytes are ggml's type_traits (ggml.c) and block structs (ggml-common.h), every row checked
 * against ggml-org/llama.cpp sources of 2026 and its built libggml-base (ggml_blck_size,
 * ggml_type_size, ggml_type_name for ids 0..42). */
static const ts_type_traits k_types[TS_TYPE_COUNT] = {
    [TS_TYPE_F32] = {"f32", 1, 4},
    [TS_TYPE_F16] = {"f16", 1, 2},
    [TS_TYPE_Q4_0] = {"q4_0", 32, 18},
    [TS_TYPE_Q4_1] = {"q4_1", 32, 20},
    [TS_TYPE_Q5_0] = {"q5_0", 32, 22},
    [TS_TYPE_Q5_1] = {"q5_1", 32, 24},
    [TS_TYPE_Q8_0] = {"q8_0", 32, 34},
    [TS_TYPE_Q8_1] = {"q8_1", 32, 36},
    [TS_TYPE_Q2_K] = {"q2_K", 256, 84},
    [TS_TYPE_Q3_K] = {"q3_K", 256, 110},
    [TS_TYPE_Q4_K] = {"q4_K", 256, 144},
    [TS_TYPE_Q5_K] = {"q5_K", 256, 176},
    [TS_TYPE_Q6_K] = {"q6_K", 256, 210},
    [TS_TYPE_Q8_K] = {"q8_K", 256, 292},
    [TS_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [TS_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [TS_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [TS_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [TS_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [TS_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [TS_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [TS_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [TS_TYPE_I8] = {"i8", 1, 1},
    [TS_TYPE_I16] = {"i16", 1, 2},
    [TS_TYPE_I32] = {"i32", 1, 4},
    [TS_TYPE_I64] = {"i64", 1, 8},
    [TS_TYPE_F64] = {"f64", 1, 8},
    [TS_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [TS_TYPE_BF16] = {"bf16", 1, 2},
    [TS_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [TS_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [TS_TYPE_MXFP4] = {"mxfp4", 32, 17},
    [TS_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [TS_TYPE_Q1_0] = {"q1_0", 128, 18},
    [TS_TYPE_Q2_0] = {"q2_0", 64, 18},
};

const ts_type_traits *ts_type_get(uint32_t type) {
    if (type >= TS_TYPE_COUNT || k_types[type].name == NULL) return NULL;
    return &k_types[type];
}

const char *ts_type_name(uint32_t type) {
    const ts_type_traits *t = ts_type_get(type);
    return t ? t->name : "unknown";
}

int ts_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TS_TYPE_COUNT; i++)
        if (k_types[i].name && strcasecmp(k_types[i].name, name) == 0) return i;
    return -1;
}

size_t ts_row_size(uint32_t type, int64_t n) {
    const ts_type_traits *t = ts_type_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * t->type_size;
}
