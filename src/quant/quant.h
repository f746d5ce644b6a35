/* ggml tensor types: the type table, and reference dequantize/quantize of one row.
 *
 * Type ids, block sizes and block byte sizes are ggml's (ggml.h / ggml.c type_traits, checked
 * against ggml-org/llama.cpp of 2026 including NVFP4, Q1_0 and Q2_0), because the files users
 * bring were written by ggml: every block layout here is byte-identical to ggml's. Ids that ggml
 * removed (4, 5, 31-33, 36-38) are not types.
 *
 * Dequantize: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS,
 * MXFP4, NVFP4, Q1_0, Q2_0, and the lattice i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S (bit-identical to ggml's dequantize_row_*).
 * Quantize: the same less Q8_K and IQ1_S, IQ2_XXS, IQ2_XS (ggml quantizes those three only with
 * importance weights: ts_quantize_row_imatrix), as ggml's quantize_row_*_ref (no importance
 * matrix): bit-identical for finite input. Non-finite input to a block type is refused rather than
 * quantized to garbage. */
#ifndef TS_QUANT_H
#define TS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ts_type {
    TS_TYPE_F32 = 0,
    TS_TYPE_F16 = 1,
    TS_TYPE_Q4_0 = 2,
    TS_TYPE_Q4_1 = 3,
    TS_TYPE_Q5_0 = 6,
    TS_TYPE_Q5_1 = 7,
    TS_TYPE_Q8_0 = 8,
    TS_TYPE_Q8_1 = 9,
    TS_TYPE_Q2_K = 10,
    TS_TYPE_Q3_K = 11,
    TS_TYPE_Q4_K = 12,
    TS_TYPE_Q5_K = 13,
    TS_TYPE_Q6_K = 14,
    TS_TYPE_Q8_K = 15,
    TS_TYPE_IQ2_XXS = 16,
    TS_TYPE_IQ2_XS = 17,
    TS_TYPE_IQ3_XXS = 18,
    TS_TYPE_IQ1_S = 19,
    TS_TYPE_IQ4_NL = 20,
    TS_TYPE_IQ3_S = 21,
    TS_TYPE_IQ2_S = 22,
    TS_TYPE_IQ4_XS = 23,
    TS_TYPE_I8 = 24,
    TS_TYPE_I16 = 25,
    TS_TYPE_I32 = 26,
    TS_TYPE_I64 = 27,
    TS_TYPE_F64 = 28,
    TS_TYPE_IQ1_M = 29,
    TS_TYPE_BF16 = 30,
    TS_TYPE_TQ1_0 = 34,
    TS_TYPE_TQ2_0 = 35,
    TS_TYPE_MXFP4 = 39,
    TS_TYPE_NVFP4 = 40, /* 64-element blocks: four 16-element sub-blocks with UE4M3 scales */
    TS_TYPE_Q1_0 = 41,
    TS_TYPE_Q2_0 = 42,
    TS_TYPE_COUNT = 43, /* one past the largest id; not every id below is a type */
} ts_type;

typedef struct ts_type_traits {
    const char *name;   /* ggml's name, e.g. "q4_K" */
    int64_t block_size; /* elements per block (1 for plain types) */
    size_t type_size;   /* bytes per block */
} ts_type_traits;

/* The traits of a type id, or NULL when the id is not a ggml type (removed or unknown). */
const ts_type_traits *ts_type_get(uint32_t type);

/* Name of a type id for messages: ggml's name, or "unknown" for ids that are not types. */
const char *ts_type_name(uint32_t type);

/* Type id from ggml's name (case-insensitive, e.g. "Q4_K", "bf16"); -1 if none. */
int ts_type_from_name(const char *name);

/* Bytes of a row of n elements; 0 if the type is unknown or n is not a multiple of the block. */
size_t ts_row_size(uint32_t type, int64_t n);

/* Whether ts_dequantize_row / ts_quantize_row support this type. */
bool ts_can_dequantize(uint32_t type);
bool ts_can_quantize(uint32_t type);

/* Dequantize n elements (a multiple of the block size) from src into dst.
 * Returns 0, or -1 with a sentence in err for an unsupported type or a ragged n. */
int ts_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n, char *err, size_t errlen);

/* Reference quantization of n elements (a multiple of the block size), as ggml's
 * quantize_row_*_ref. Returns 0, or -1 with a sentence in err. */
int ts_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, char *err, size_t errlen);

/* Whether ts_quantize_row_imatrix uses importance weights for this type (Q2_K .. Q6_K, IQ1_S,
 * IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS). */
bool ts_can_quantize_imatrix(uint32_t type);

/* Whether the type is quantized only with importance weights (IQ1_S, IQ2_XXS, IQ2_XS: ggml has no
 * quantizer without them); ts_quantize_row refuses it with a sentence saying how to make them. */
bool ts_quantize_needs_imatrix(uint32_t type);

/* Quantization with importance weights qw[n] (ggml's quant_weights: the imatrix's mean of x² for
 * each column of the row), as ggml's quantize_<type> with an imatrix, bit for bit; qw NULL is
 * ts_quantize_row. Refuses a type without such a quantizer and weights that are negative or not
 * finite. */
int ts_quantize_row_imatrix(uint32_t type, const float *src, void *dst, int64_t n, const float *qw, char *err,
                            size_t errlen);

/* The one rounding of the CUDA tensor-core GEMV (src/cuda/gemv_tc.cuh: tc_x_scale, tc_x_quarter,
 * tc_x_inorder), as a host reference: per group of G consecutive inputs of one token, x is scaled by
 * the power of two 2^s that puts the group's max|x| in [2^14, 2^15) (s = 14 − e for a max of exponent e,
 * clamped to −113 … 126 so that 2^s and 2^-s stay normal), rounded to fp16 (nearest even) and scaled
 * back by 2^-s. What the kernel then sums is exactly these values times the weights, in fp32.
 *
 * ts_tc_x_group: the inputs that share one scale for weights of this type in that kernel — 256 for
 * Q4_K, Q5_K and Q6_K, 128 for Q8_0 and Q5_0 — or 0 for a type it does not take (the CUDA backend's
 * tc_gemv_group). ts_round_x_like_tc rounds x[0 … n) as n / G such groups (n a multiple of G; a
 * token's ne0 inputs a multiple of G, so groups never straddle tokens) into out; out may be x.
 * Users: the CUDA twin tests' references (tests/cuda/test_cuda_matmul.c) and the CPU backend's
 * diagnostic emulation of the decode products, TURBOSPARK_CPU_ROUND_X=1 (src/cpu/ops.c). */
int64_t ts_tc_x_group(uint32_t type);
void ts_round_x_like_tc(const float *x, int64_t n, int64_t G, float *out);

#endif
