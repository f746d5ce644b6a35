// The tensor-core decode GEMV (gemv_tc.cu), called by ts_cuda_matmul and ts_cuda_matmul_experts
// (matmul.cu) for the shapes it takes; internal to the CUDA backend.
//
// Same products and contract as those two (matmul.h), with the precision policy's one rounding of
// the activations: x is rounded to fp16 per (token, 256-input super-block) after scaling by a power
// of two (gemv_tc.cuh says how, and why the rest is exact up to fp32 accumulation).
// It runs whenever it takes the shape, one token or several: a token's result then does not depend
// on how many tokens share the launch (batched decode equals decoding alone, bit for bit).
// TURBOSPARK_CUDA_GEMV_TC=0 turns it off (the exact fp32 SIMT kernels then run).
#ifndef TS_CUDA_GEMV_TC_H
#define TS_CUDA_GEMV_TC_H

#include "cuda/gemm.h"

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace ts_cu {

// The expert products' arguments (see ts_cuda_matmul_experts in matmul.h), already validated: this
// kernel's and the SIMT expert kernels' (matmul_experts.cuh: expert_args).
struct tc_expert_job {
    const uint8_t *w0, *w1; // W->data, W2->data (w1 NULL: one part)
    size_t rb;              // bytes per row, both tensors
    const int32_t *ids;     // [n_items] expert ids, or NULL: expert 0 for every item
    int n_items;
    int64_t rows_per_expert, row_off;
    int e_max;  // largest id whose rows lie inside both tensors
    int n_part; // rows per part (the API's n_out)
    int n_out;  // rows per item: n_part, or 2·n_part with w1
    int x_div;  // items ⌊i / x_div⌋·x_div .. share one x row
    int64_t x_stride, y_stride;
    const float *x;
    float *y;
    // The shared expert as items n_items .. n_items + sh_items − 1, one a token s reading x row s (the
    // tensor-core GEMV only; sh_items 0: none): row o of such an item's parts·n_part outputs is row o of sw0
    // for o < sh_rows, else row o − sh_rows of sw1, and lands at sy + s·sy_stride + o.
    // With sx set those items read x row s at sx + s·sx_stride instead (one x row at a time only).
    const uint8_t *sw0, *sw1;
    int sh_items, sh_rows;
    float *sy;
    int64_t sy_stride;
    const float *sx;
    int64_t sx_stride;
    // up_off > 0 (one x row at a time only): every x row (sx's too) holds gate values, the up values lie
    // up_off floats further, and the kernel stages h = silu(gate)·up, as the MoE's SwiGLU kernel computes
    // it (moe.cu: the x rounding that follows leaves that kernel's own rounding of h as it is)
    int64_t up_off;
    bool pre_round; // with up_off: the routed rows' h rounded per x group first, as the SwiGLU kernel does
    // cmb_count set (one token, one part, the shared expert as item n_items, one x row at a time only): the MoE
    // combine in the launch. Each chunk counts itself in cmb_count[its row tile] (zero between launches); the
    // block that completes a tile's n_items + 1 chunks writes sy[o] = σ(cmb_sg[0])·sy[o] + Σ_j cmb_tw[j]·y[j·y_stride
    // + o] for its rows o (ts_dmoe_combine, as the MoE's combine kernel) and sets the count back to zero.
    unsigned *cmb_count;
    const float *cmb_sg, *cmb_tw;
    __host__ __device__ int parts() const { return w1 ? 2 : 1; }
};

// The inputs that share one scale of x for this type (256 for Q4_K, Q5_K, Q6_K; 128 for Q8_0, Q5_0),
// or 0 for a type the kernel does not take.
int tc_gemv_group(uint32_t type);

// Whether the kernel takes this product: T tokens (dense) or x rows (experts) of ne0 inputs of this
// type, n_chunks chunks of 8 rows; the x staging must fit in shared memory beside two weight stages (one
// where every block has one chunk). Rows whose bytes are not a multiple of 16 (Q8_0, Q5_0, Q6_K at some
// widths) only when whole_chunks: every 8 rows of the product start at a multiple of 8 rows of a 16-byte
// aligned tensor.
bool tc_gemv_takes(uint32_t type, int64_t ne0, int64_t x_rows, size_t row_bytes, bool whole_chunks,
                   int64_t n_chunks);

// Tokens of one dense launch: the 16 rows of the MMAs' A operand (tokens 8–15 in rows g + 8).
constexpr int kTcMaxTokens = 16;

// y = W·x for T ≤ kTcMaxTokens tokens (w: the first row, row0 applied; rb bytes a row). 0, or -1 when
// the launch failed.
int tc_gemv(uint32_t type, const uint8_t *w, size_t rb, int n_out, int ne0, const float *x, int T, float *y,
            cudaStream_t s);

// Expert products of more x rows than kTcExpertXRows stage one x row at a time, the row of the chunk at
// hand (a block takes a contiguous range of chunks); fewer are staged whole, once a block.
// TURBOSPARK_TC_XROW (read once): 0 none does (and the routed products with an x row an item, the downs,
// stay off the tensor cores), 2 every expert product does (measurements); tc_xrow_mode() returns it, 1
// when unset.
constexpr int64_t kTcExpertXRows = 8;
int tc_xrow_mode();
// The x rows an expert product of x_rows rows stages at once.
int64_t tc_experts_staged_rows(int64_t x_rows);

// The expert products of ts_cuda_matmul_experts. 0, or -1 when the launch failed.
int tc_gemv_experts(uint32_t type, const tc_expert_job &job, int ne0, cudaStream_t s);
// Whether tc_gemv_experts runs this job with the weights as the MMAs' A operand (chunks of 16 rows) or as B
// (chunks of 8): the two sum in different orders.
bool tc_experts_wa(const tc_expert_job &job, int ne0);
// Whether it stages the job's x one row at a time.
bool tc_experts_one_row(const tc_expert_job &job);
// Whether tc_gemv takes the weights as A for a dense product of T tokens.
bool tc_dense_wa(int ne0, size_t rb, int n_out, int T);
// Whether dense products of 9–16 tokens may take the weights as A (TURBOSPARK_TC_WA16, default on; read once).
bool tc_wa16();

// Grouped expert products (ts_cuda_matmul_experts_planned): the items of a plan's tile (gemm.h, tiles of at
// most kTcPlanTile items of one expert) are one chunk's tokens, so an expert's rows are read once a tile. The
// chunks are those of tc_gemv_experts with the weights as A, so an item's sums are the ones it gets there, bit
// for bit. Whether the kernel takes the job for a plan of up to max_tiles tiles (the weights as A fit with the
// launch's stages; no shared items), and the launch.
constexpr int kTcPlanTile = 8;
bool tc_planned_takes(const tc_expert_job &job, int ne0, int64_t max_tiles);
int tc_gemv_experts_planned(uint32_t type, const tc_expert_job &job, const ts_cuda_expert_plan &plan, int ne0,
                            cudaStream_t s);

// TURBOSPARK_CUDA_GEMV_TC, default on (read once).
bool tc_gemv_enabled();
// The fewest tokens of a dense product that the kernel runs: 1, or 0 when it is off.
int tc_gemv_min_tokens();

} // namespace ts_cu

#endif
