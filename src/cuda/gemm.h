/* Tiled fp32 GEMM on quantized weights (C interface of src/cuda/gemm.cu): the prefill-sized
 * counterpart of the GEMVs of src/cuda/matmul.h, same math and same numerics contract:
 *
 *     y[t, o] = Σ_i W[row0 + o, i] · x[t, i]      t < T, o < n_out, i < ne0
 *
 * W stays in its GGUF encoding; each thread block expands a tile of its rows to fp32 in shared
 * memory (exactly the values of ts_dequantize_row) and multiplies it with a tile of tokens, so a
 * weight is read once per tile of up to 128 tokens instead of once per 8 (dense) or once per
 * (token, expert) item (MoE). Sums are plain fp32 FMAs in increasing i, one thread per output:
 * deterministic, and within fp32 rounding of the GEMV path (tests/cuda/test_cuda_gemm.c).
 *
 * ts_cuda_matmul (matmul.h) calls ts_cuda_gemm by itself when T ≥ ts_cuda_gemm_min_tokens()
 * (TS_CUDA_GEMM_MIN_TOKENS = 16 by default); ts_cuda_moe (src/cuda/moe.cu) uses the grouped expert
 * products below for prefill-sized batches. Types: those of matmul.h. */
#ifndef TS_CUDA_GEMM_H
#define TS_CUDA_GEMM_H

#include "cuda/matmul.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default of the T from which ts_cuda_matmul runs ts_cuda_gemm instead of GEMV launches of 8
 * tokens (see the measurements in gemm.cu's header). */
#define TS_CUDA_GEMM_MIN_TOKENS 16

/* Dense GEMM, the contract of ts_cuda_matmul (matmul.h) for any T ≥ 1: asynchronous, no allocation,
 * no host synchronization, capturable once warmed up (the first call of a thread for a type sets
 * the kernels' shared-memory attribute and queries their occupancy: make it outside capture).
 * PRECONDITIONS: x_dev, y_dev and W->data 16-byte aligned; W as in matmul.h.
 * Returns 0, or -1 for invalid arguments (nothing enqueued) or a failed launch. */
int ts_cuda_gemm(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev, int64_t T,
                 float *y_dev, cudaStream_t s);

/* ---- grouped expert products (MoE prefill) -------------------------------------------------------
 *
 * A plan groups the n_items expert ids (one per (token, slot) item, in device memory) by expert, on
 * the device: item indices sorted by expert (ascending item within an expert, a stable order), then
 * a work list of tiles of up to `tile` items of one expert. Ids outside [0, n_experts) form one more
 * group whose outputs are NaN. The plan is built by one kernel, from the ids as they are when it
 * runs (graph-capturable); the launches that use it are sized from n_items and n_experts only. */
typedef struct ts_cuda_expert_plan {
    const int32_t *sorted; /* [n_items] item indices grouped by expert (device) */
    const void *tiles;     /* [max_tiles] int4 {expert or -1, first position in sorted, count, index among the
                             * expert's tiles} (device) */
    const int32_t *n_tiles; /* [1] tiles in use (device) */
    int64_t n_items, n_experts;
    int64_t max_tiles; /* a bound on *n_tiles from n_items and n_experts */
    int tile;          /* items a tile: 16, 32 or 64, from the mean items per expert (or 8 where asked) */
} ts_cuda_expert_plan;

/* Whether plans can be built for this many experts (the sort keeps per-expert counters in shared
 * memory: up to about 6100 experts). */
bool ts_cuda_expert_plan_supported(int64_t n_experts);

/* Device scratch a plan of up to n_items items needs (monotonic in n_items; 0 if unsupported). */
size_t ts_cuda_expert_plan_bytes(int64_t n_items, int64_t n_experts);

/* Builds a plan for ids_dev[0 .. n_items) in scratch (16-byte aligned device memory of at least
 * ts_cuda_expert_plan_bytes bytes) and fills *plan. One single-block kernel on stream s.
 * Returns 0, or -1 for invalid arguments or a failed launch. */
int ts_cuda_expert_plan_build(const int32_t *ids_dev, int64_t n_items, int64_t n_experts, void *scratch,
                              size_t scratch_bytes, ts_cuda_expert_plan *plan, cudaStream_t s);
/* The same with tiles of `tile` items (8, 16, 32 or 64; 0: from the mean items per expert, as above). */
int ts_cuda_expert_plan_build_tile(const int32_t *ids_dev, int64_t n_items, int64_t n_experts, int tile,
                                   void *scratch, size_t scratch_bytes, ts_cuda_expert_plan *plan,
                                   cudaStream_t s);

/* ts_cuda_matmul_experts (matmul.h) computed as grouped GEMMs over a plan: the same arguments and
 * outputs for every item i of the plan (expert ids_dev[i] of the plan's ids):
 *
 *     y[i·y_stride + p·n_out + o] = Σ_c W_p[e·rows_per_expert + row_off + o, c] · x[⌊i / x_div⌋·x_stride + c]
 *
 * (W_0 = W, W_1 = W2 when not NULL). An item whose id is outside [0, n_experts) or names an expert
 * whose rows are not all inside W (and W2) gets NaN outputs. Asynchronous, no allocation, no host
 * synchronization; the grid is sized from plan->max_tiles and the row count; warm up outside
 * capture as for ts_cuda_gemm.
 * PRECONDITIONS: as ts_cuda_matmul_experts (x_stride ≥ ne0 and y_stride ≥ P·n_out, multiples of 4;
 * x_dev, y_dev 16-byte aligned); the plan built on the same stream before this call.
 * Returns 0, or -1 for invalid arguments (nothing enqueued) or a failed launch. */
int ts_cuda_gemm_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W, const ts_cuda_tensor *W2,
                         int64_t rows_per_expert, int64_t row_off, int64_t n_out, const float *x_dev,
                         int64_t x_div, int64_t x_stride, float *y_dev, int64_t y_stride, cudaStream_t s);

/* The argument checks of ts_cuda_gemm_experts (and of the tensor-core twin, gemm_tc.h), past the type:
 * the plan built, W (and W2: same type, width and row bytes) 16-byte aligned, the slice inside both,
 * x and y aligned with strides as documented above. Returns -1 for invalid arguments, 0 when there is
 * nothing to compute (no rows or no items), 1 with *parts (1 or 2) and *e_max (the largest expert whose
 * rows lie inside both tensors) set. */
int ts_cuda_expert_gemm_check(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                              const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                              int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                              const float *y_dev, int64_t y_stride, int64_t *parts, int64_t *e_max);

/* ---- knobs for tests and benchmarks (not thread-safe against concurrent launches) ---------------- */

/* The T from which ts_cuda_matmul switches to the GEMM (≤ 0: back to TS_CUDA_GEMM_MIN_TOKENS;
 * INT64_MAX: never). */
void ts_cuda_gemm_set_min_tokens(int64_t min_T);
int64_t ts_cuda_gemm_min_tokens(void);

/* Force the tile configuration of dense GEMMs: 0 = 128×128, 1 = 128×64, 2 = 64×64, 3 = 128×32,
 * 4 = 128×16 (rows × tokens); -1 = chosen by the cost model (default). */
void ts_cuda_gemm_force_config(int config);

/* Whether ts_cuda_moe uses the grouped GEMMs: -1 = by its threshold (default), 0 = never (one GEMV
 * per item), 1 = whenever the plan is supported. Implemented in src/cuda/moe.cu. */
void ts_cuda_moe_force_grouped(int mode);

#ifdef __cplusplus
}
#endif

#endif
