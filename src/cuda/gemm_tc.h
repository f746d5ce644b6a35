/* Prefill products on the tensor cores (src/cuda/gemm_tc.cu): the dense and grouped expert products of
 * gemm.h for the types the tensor-core GEMV takes (Q4_K, Q5_K, Q6_K: groups of 256 inputs; Q8_0, Q5_0:
 * 128), with its numerics: x rounded to fp16 once per (row, group) after a power-of-two scale, weights
 * exact, fp32 accumulation (gemv_tc.cuh). So a token's result is the GEMV's up to the order of fp32
 * additions, whatever the batch.
 *
 * The x rows are first converted into records in a device scratch that the caller registers for its
 * thread (ts_cuda_tc_scratch_set: the CUDA forward gives its workspace's TCX region, tests their own);
 * without one large enough, ts_cuda_gemm_tc_takes says no and the fp32 GEMM (gemm.h) runs instead. Record sizes:
 * ts_memplan_tc_x_bytes (src/model/memplan.h).
 * ts_cuda_matmul (matmul.h) and the MoE block (src/cuda/moe.cu) call these by themselves. */
#ifndef TS_CUDA_GEMM_TC_H
#define TS_CUDA_GEMM_TC_H

#include "cuda/gemm.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread's scratch for x records (device memory, 16-byte aligned; NULL: none). */
void ts_cuda_tc_scratch_set(void *dev, size_t bytes);

/* Whether a product of x_rows rows of ne0 inputs of this type runs here: a type and width it takes, the
 * tensor-core products not switched off (TURBOSPARK_CUDA_GEMV_TC=0), the thread's scratch large enough. */
bool ts_cuda_gemm_tc_takes(uint32_t type, int64_t ne0, int64_t x_rows);

/* ts_cuda_gemm's contract (gemm.h) when ts_cuda_gemm_tc_takes(W->type, W->ne0, T); -1 otherwise. */
int ts_cuda_gemm_tc(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev, int64_t T,
                    float *y_dev, cudaStream_t s);

/* The dense products of Q4_K, Q5_K, Q8_0 and Q5_0 (widths of whole groups) on Hopper's warpgroup MMAs
 * (src/cuda/gemm_wg.cu): ts_cuda_gemm_tc's
 * numerics and contract, y rows y_stride floats apart, x converted into the given device scratch of at
 * least ts_cuda_gemm_wg_x_bytes(type, ne0, T) bytes (x's chunks: T rounded up to 128 rows; a Hopper GPU and a
 * build for sm_90a). Returns -1 where
 * not taken (ts_cuda_gemm_wg_takes) or on a bad argument. ts_cuda_gemm_tc tries it first when
 * ts_cuda_gemm_wg_on(false). ts_cuda_gemm_wg_on(experts): whether the dense (grouped) products take the
 * warpgroup MMAs: TURBOSPARK_CUDA_GEMM_WG unset, the dense ones; =1, both; =0, neither. */
bool ts_cuda_gemm_wg_on(bool experts);
size_t ts_cuda_gemm_wg_x_bytes(uint32_t type, int64_t ne0, int64_t T);
bool ts_cuda_gemm_wg_takes(uint32_t type, int64_t ne0, int64_t T, size_t scratch_bytes);
int ts_cuda_gemm_wg(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev, int64_t T,
                    float *y_dev, int64_t y_stride, void *scratch, size_t scratch_bytes, cudaStream_t s);
/* The grouped expert products of the same types on the warpgroup MMAs: ts_cuda_gemm_tc_experts's contract for
 * plans of 64-item tiles (prefill), x's rows converted into the given scratch (ts_cuda_gemm_wg_x_bytes of
 * ⌈n_items / x_div⌉ rows). -1 where not taken or on a bad argument; ts_cuda_gemm_tc_experts tries it first
 * when ts_cuda_gemm_wg_on(true). */
int ts_cuda_gemm_wg_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                            const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off, int64_t n_out,
                            const float *x_dev, int64_t x_div, int64_t x_stride, float *y_dev,
                            int64_t y_stride, void *scratch, size_t scratch_bytes, cudaStream_t s);

/* Whether ts_cuda_gemm_tc_experts runs a plan's product: ts_cuda_gemm_tc_takes for its x rows (items
 * sharing x rows, x_div = k: the routed gate/up products; an x row an item, x_div = 1: the routed down
 * products, whose inputs the MoE block has already rounded alike for every kernel that may take them,
 * src/cuda/moe.cu). */
bool ts_cuda_gemm_tc_experts_takes(const ts_cuda_expert_plan *plan, uint32_t type, int64_t ne0,
                                   int64_t x_div);

/* ts_cuda_gemm_experts's contract (gemm.h) when ts_cuda_gemm_tc_experts_takes; -1 otherwise. */
int ts_cuda_gemm_tc_experts(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                            const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off, int64_t n_out,
                            const float *x_dev, int64_t x_div, int64_t x_stride, float *y_dev,
                            int64_t y_stride, cudaStream_t s);

/* Split products, y ≈ W·x to about fp32's precision on the tensor cores (the hyper-connection products,
 * which stay fp32, DESIGN.md): x and the residual of its fp16 rounding (x − hi) are each rounded to fp16
 * at their own power-of-two scale, so hi + lo carries ~22 bits of x; both run against the exact weights
 * with fp32 accumulation, over K in a few ranges (enough blocks for the GPU's multiprocessors). The
 * parts, T × n_out floats each at parts + p·part_stride (p = 0, 1, ...: x's ranges, then the residual's),
 * are left for the caller to add in that order. Returns the number of parts (even, ≤ max_parts), or -1
 * (not taken or a bad argument): rows 0 .. n_out − 1 of W. max_parts = 1: one part, the sum itself
 * (every block runs both halves over all of K; for products with few groups of K, such as the
 * hyper-connection up, 320 inputs), part_stride unused. Needs x records for 2·T rows in the thread's
 * scratch. Unlike the other products here, Q8_0 and Q5_0 widths need not be whole groups of 128: the
 * missing inputs of the last group are zeros (blocks of 32). */
bool ts_cuda_gemm_tc_split_takes(uint32_t type, int64_t ne0, int64_t T);
int ts_cuda_gemm_tc_split(const ts_cuda_tensor *W, int64_t n_out, const float *x_dev, int64_t T, float *parts,
                          int64_t part_stride, int max_parts, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
