/* CPU kernels of the qwen4exp forward (docs/MODEL.md §5), one op per function, each the CPU twin of a
 * CUDA kernel of the same name in src/cuda/.
 *
 * Precision: activations and state are fp32 end to end; weights are dequantized from their file
 * encoding to fp32 as they are read. This matches transformers run in fp32 (the golden fixtures)
 * to rounding; against the bf16 reference it drifts slightly because the reference rounds to
 * bf16 after every op (MODEL.md §5.10; docs/DECISIONS.md, "Precision of the CPU backend").
 *
 * Rows: a "T × n" buffer holds T tokens of n values, token-major. */
#ifndef TS_CPU_H
#define TS_CPU_H

#include "gguf/gguf.h"
#include "model/qwen4exp.h"

#include <stdint.h>

/* y[t, o] = Σ_i W[row0 + o, i] · x[t, i]  for t < T, o < n_out. W is any bound matrix (rows of ne0
 * elements, quantized or not; row0 selects e.g. one expert of a 3-D tensor). x: T × ne0, y: T × n_out. */
/* Kernels in src/cpu/dot.c: per-type fused decode + FMA, SIMD path chosen at run time (TS_DOT=scalar|avx2|
 * avx512 overrides); equal to dequantize-then-dot within fp32 rounding (≤ 1e-6 · Σ|w·x|). Products of at
 * least 2^16 multiply-adds are split by rows over a pool of omp_get_max_threads() threads (src/cpu/ops.c). */
void ts_cpu_matmul(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T, float *y);

/* The same product with every token as its own product: y[t] is bit-identical to ts_cpu_matmul over
 * token t alone (the kernels tile by token count, so a product over all T tokens may round
 * differently), while the weights are still streamed from memory once: each chunk of rows serves
 * all T tokens while it is in cache. */
void ts_cpu_matmul_each(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T,
                        float *y);

/* TURBOSPARK_CPU_ROUND_X=1, the twin reference of the CUDA backend (docs/DECISIONS.md, "Emulating the
 * tensor-core products' rounding on the CPU"): ts_cpu_matmul and ts_cpu_matmul_each then take x rounded
 * as the CUDA tensor-core GEMV and GEMM round it at every batch size (ts_round_x_like_tc, per token and group of ts_tc_x_group(W's type) inputs) for
 * the types that kernel reads (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0). The _unrounded variants never round:
 * the products that CUDA runs in fp32 on other kernels at every batch size (the hyper-connections'
 * down, inject and up). Off (the default), the four are the same products. */
bool ts_cpu_round_x_enabled(void);
/* TURBOSPARK_CPU_ROUND_ATT=1 (or TURBOSPARK_CPU_ROUND_X=1): the QSA attention keeps q, k and v as the
 * CUDA backend keeps them, fp16 at a power-of-two scale (src/cpu/qsa.c). Off by default. */
bool ts_cpu_round_att_enabled(void);
void ts_cpu_matmul_unrounded(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T,
                             float *y);
void ts_cpu_matmul_each_unrounded(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x,
                                  int64_t T, float *y);

/* Importance matrices (turbospark imatrix): when set, fn sees the input x (T × ne0) of every
 * ts_cpu_matmul / ts_cpu_matmul_each with W and row0, on the calling thread, before the product.
 * Process-wide, like ts_cpu_set_trace; NULL turns it off (the normal path pays one test a product). */
typedef void (*ts_cpu_matmul_hook)(void *ctx, const ts_gguf_tensor *W, int64_t row0, const float *x,
                                   int64_t T);
void ts_cpu_set_matmul_hook(ts_cpu_matmul_hook fn, void *ctx);

/* Row r of any tensor, dequantized: out[ne0]. */
void ts_cpu_get_row(const ts_gguf_tensor *t, int64_t r, float *out);

/* y = x · rsqrt(mean(x²) + eps) · g over each group of `group` elements; x, y: n (a multiple of
 * group); g: n weights (the stored 1+w) or NULL for no weight. In place allowed. */
void ts_cpu_rmsnorm(const float *x, const float *g, int64_t n, int64_t group, float eps, float *y);

/* The values of a 1-D or conv weight tensor (F32/F16/BF16) as floats: a pointer into the file for
 * F32, else dequantized into scratch (nelements floats). */
const float *ts_cpu_f32(const ts_gguf_tensor *t, float *scratch);

/* NeoX rotary embedding of the first n_rot dims of one head x[head_dim] at position pos:
 * pairs (d, d + n_rot/2), inv_d = θ^(−2d/n_rot). */
void ts_cpu_rope(float *x, int64_t n_rot, float theta, int64_t pos);

static inline float ts_sigmoid(float x) {
    return 1.0f / (1.0f + __builtin_expf(-x));
}
static inline float ts_silu(float x) {
    return x * ts_sigmoid(x);
}
/* softplus as the reference computes it (linear above 20) */
static inline float ts_softplus(float x) {
    return x > 20.0f ? x : __builtin_log1pf(__builtin_expf(x));
}

#endif
