/* Quantized matrix products on the GPU (C interface of src/cuda/matmul.cu), the CUDA twin of
 * ts_cpu_matmul (src/cpu/cpu.h):
 *
 *     y[t, o] = Σ_i W[row0 + o, i] · x[t, i]      t < T, o < n_out, i < ne0
 *
 * W stays in its GGUF encoding on the device (ggml block bytes, rows back to back); x and y are
 * fp32, token-major (x: T × ne0, y: T × n_out), and every sum is accumulated in fp32. The kernels
 * are GEMVs meant for decode and small batches (T ≤ 8 per launch; larger T runs in slices of 8);
 * from T = ts_cuda_gemm_min_tokens() (16) on, ts_cuda_matmul runs the tiled GEMM of
 * src/cuda/gemm.h instead (same contract and numerics, within fp32 rounding).
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q4_K, Q5_K, Q6_K (tier 1),
 * and the low-bit types of the community's MoE files: Q2_K, Q3_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S (SIMT GEMV and GEMM only: no tensor-core or integer-MMA path; their kernels
 * are compiled and their decoders host-tested, tests/cuda/test_cuda_decode.cu, but have not yet run
 * on a GPU). Q4_1 and IQ4_XS are in the same state: SIMT GEMV and GEMM, decoders host-tested bit for
 * bit, no GPU run yet. */
#ifndef TS_CUDA_MATMUL_H
#define TS_CUDA_MATMUL_H

#include "gguf/gguf.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix resident on the device, in its file encoding. Higher dimensions of the GGUF
 * tensor (experts) are folded into rows: expert e's row r is row e·ne1 + r. */
typedef struct ts_cuda_tensor {
    uint32_t type;    /* ggml type id (src/quant/quant.h) */
    int64_t ne0;      /* elements per row (a multiple of the type's block) */
    int64_t rows;     /* ne1·ne2·ne3 */
    size_t row_bytes; /* ts_row_size(type, ne0) */
    const void *data; /* device pointer, 16-byte aligned; readable up to the next 16-byte boundary after
                         the last row (the kernels fetch whole aligned 16-byte lines) */
    void *owned;      /* what ts_cuda_tensor_free releases (NULL when data points into someone else's
                         buffer) */
} ts_cuda_tensor;

/* Whether ts_cuda_matmul has kernels for this type. */
bool ts_cuda_matmul_supports(uint32_t type);

/* Copies a GGUF tensor (host bytes, e.g. the mmap) to a new device allocation padded to 16 bytes
 * and fills *out. Returns 0, or -1 with a sentence in err (unsupported type, out of device
 * memory with the sizes). Synchronous. */
int ts_cuda_tensor_upload(const ts_gguf_tensor *t, ts_cuda_tensor *out, char *err, size_t errlen);
void ts_cuda_tensor_free(ts_cuda_tensor *t);

/* y = W[row0 .. row0+n_out) · x for T tokens, enqueued on stream s (asynchronous; no allocation, no
 * host synchronization, capturable in a CUDA graph). The first call of a thread for a given type,
 * T and row count sets the kernel's shared-memory attribute: make it once outside stream capture
 * (a warm-up step) before capturing.
 * PRECONDITIONS: x_dev and y_dev device pointers, 16-byte aligned; W as documented above.
 * Returns 0, or -1 when the arguments are invalid (unsupported type, rows out of range, misaligned
 * pointers) or the launch failed; nothing is enqueued for invalid arguments. */
int ts_cuda_matmul(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev, int64_t T,
                   float *y_dev, cudaStream_t s);

/* ts_cuda_matmul without the tensor-core kernels, which round x to fp16 (gemv_tc.h, gemm_tc.h): fp32
 * products for the hyper-connection reads, whose CPU twin never rounds (src/cpu/hc.c). */
int ts_cuda_matmul_unrounded(const ts_cuda_tensor *W, int64_t row0, int64_t n_out, const float *x_dev,
                             int64_t T, float *y_dev, cudaStream_t s);

/* Expert products: n_items independent GEMVs (T = 1 each) whose weight rows are picked on the
 * device, for MoE layers (src/cuda/moe.cu). Item i (i < n_items) with expert e = ids_dev[i]:
 *
 *     y[i·y_stride + p·n_out + o] = Σ_c W_p[e·rows_per_expert + row_off + o, c] · x[⌊i / x_div⌋·x_stride + c]
 *
 * for o < n_out, c < ne0, p < P: W_0 = W and, when W2 is not NULL, W_1 = W2 (P = 2: the same rows
 * of a second tensor, e.g. the up rows of split gate/up expert tensors, written after the n_out gate
 * values of each item; W2 must have W's type, ne0 and row_bytes). x_div: how many consecutive
 * items share one x row (k for gate/up, whose k items of token t all read x row t; 1 when each
 * item has its own input row, as for down). ids_dev NULL: expert 0 for every item
 * (rows_per_expert is then ignored; a plain matrix applied to n_items rows without weight reuse).
 * Numerics and types as ts_cuda_matmul. Asynchronous, no allocation, no host synchronization; the
 * ids are read by the kernels, so the launch is capturable in a CUDA graph and stays valid for
 * any ids. The first call of a thread for a given type and row length sets kernel attributes, as
 * for ts_cuda_matmul: warm up outside stream capture.
 * An item whose id is negative or names an expert whose rows are not all inside W (and W2) gets
 * NaN outputs and reads no weight (a bad id shows instead of reading out of bounds).
 * PRECONDITIONS: x_dev and y_dev device pointers, 16-byte aligned; x_stride ≥ ne0 and y_stride ≥
 * P·n_out, both multiples of 4 floats (every item's x and y row is 16-byte aligned); ids_dev:
 * n_items int32 in device memory. With ids_dev, row_off + n_out ≤ rows_per_expert.
 * Returns 0, or -1 when the arguments are invalid (unsupported or mismatched types, rows out of
 * range, misaligned pointers or strides) or the launch failed; nothing is enqueued for invalid
 * arguments. */
int ts_cuda_matmul_experts(const ts_cuda_tensor *W, const ts_cuda_tensor *W2, const int32_t *ids_dev,
                           int64_t n_items, int64_t rows_per_expert, int64_t row_off, int64_t n_out,
                           const float *x_dev, int64_t x_div, int64_t x_stride, float *y_dev,
                           int64_t y_stride, cudaStream_t s);

/* The routed gate/up products of ts_cuda_matmul_experts (ids set, row_off 0, x_div = k items a token) and the
 * shared expert's in one launch: the tensor-core GEMV takes each token's shared product as one more item
 * (one launch fewer a layer at decode). Its parts·n_out rows are the rows of Sg, then those of Su (each
 * exactly F = parts·n_out / 2 rows, F a multiple of 16; the type and width of W), token t's at sy + t·sy_stride,
 * as ts_cuda_matmul_experts(Sg, Su, NULL, n_items / x_div, 0, 0, F, x_dev, 1, x_stride, sy, sy_stride)
 * would write them (the same chunk sums). Returns 1, enqueuing nothing, where the tensor-core GEMV does
 * not take the routed product or the shapes differ: the caller then makes the two calls. */
int ts_cuda_matmul_experts_shared(const ts_cuda_tensor *W, const ts_cuda_tensor *W2, const int32_t *ids_dev,
                                  int64_t n_items, int64_t rows_per_expert, int64_t n_out, const float *x_dev,
                                  int64_t x_div, int64_t x_stride, float *y_dev, int64_t y_stride,
                                  const ts_cuda_tensor *Sg, const ts_cuda_tensor *Su, float *sy,
                                  int64_t sy_stride, cudaStream_t s);

/* The MoE's steps around its down launch at one token that ts_cuda_matmul_experts_shared_down can take:
 *   up_off > 0 (a multiple of 4): x_dev's rows and sx hold gate values and the up values lie up_off floats
 *     further; the products read h = silu(gate)·up, computed as the MoE's SwiGLU kernel computes it, whose
 *     rounding of the routed rows the products' own rounding of x leaves as it is (the same sums as that
 *     kernel and then the launch);
 *   count set: the MoE combine, sy[o] = σ(sg[0])·sy[o] + Σ_j tw[j]·y_dev[j·y_stride + o] in slot order (as the
 *     MoE's combine kernel), by the block that completes each row tile (count: ⌈n_out / 8⌉ counters, zero,
 *     left zero). */
typedef struct ts_cuda_moe_down_fused {
    int64_t up_off;
    int pre_round; /* with up_off: the routed rows' h rounded per x group first, as that kernel does where it
                    * rounds them (moe.cu: round_a), so that the launch reads the very values it would write */
    unsigned *count;
    const float *sg, *tw;
} ts_cuda_moe_down_fused;

/* The routed down products of ts_cuda_matmul_experts (ids set, x_div 1, one part) and the shared expert's
 * down of one token (n_tok 1) in one launch: the shared product as one more item, reading its x at sx and
 * writing sy, as ts_cuda_matmul(Sd, 0, n_out, sx, 1, sy) would (the same sums); with f, also the steps f
 * names. Returns 1, enqueuing nothing, for more tokens and where the tensor-core GEMV would not run both
 * alone with the merged launch's chunks: the caller then makes the two calls (and the SwiGLU and combine). */
int ts_cuda_matmul_experts_shared_down(const ts_cuda_tensor *W, const int32_t *ids_dev, int64_t n_items,
                                       int64_t rows_per_expert, int64_t n_out, const float *x_dev,
                                       int64_t x_stride, float *y_dev, int64_t y_stride,
                                       const ts_cuda_tensor *Sd, const float *sx, int64_t sx_stride,
                                       int64_t n_tok, float *sy, const ts_cuda_moe_down_fused *f,
                                       cudaStream_t s);

/* ts_cuda_matmul_experts for the items of an expert plan (gemm.h) of tiles of up to 8 items
 * (ts_cuda_expert_plan_build_tile(..., 8, ...)): the same arguments and outputs for every item i of the plan
 * (expert ids_dev[i] of the ids the plan was built from), computed on the tensor-core GEMV with a tile's
 * items as one chunk's tokens, so that each expert's rows are read once a tile rather than once an item;
 * each item's sums are those ts_cuda_matmul_experts gives it, bit for bit. Returns 1, enqueuing nothing,
 * where ts_cuda_matmul_experts would not run the product on the tensor cores with the weights as the MMAs' A
 * operand (gemv_tc.h) or the plan's tiles are larger: the caller then calls ts_cuda_matmul_experts. 0 when
 * enqueued, -1 for invalid arguments or a failed launch. PRECONDITIONS: those of ts_cuda_matmul_experts; the
 * plan built on the same stream before this call. */
typedef struct ts_cuda_expert_plan ts_cuda_expert_plan;
/* Whether ts_cuda_matmul_experts_planned runs such a product (n_items items of n_experts experts, x_div,
 * rows_per_expert, n_out, W2 or not; row_off 0) for a plan of tiles of 8, from the shapes alone (no plan needed:
 * the caller builds one only where it is used). */
bool ts_cuda_matmul_experts_planned_takes(const ts_cuda_tensor *W, const ts_cuda_tensor *W2, int64_t n_items,
                                          int64_t n_experts, int64_t rows_per_expert, int64_t n_out,
                                          int64_t x_div);
int ts_cuda_matmul_experts_planned(const ts_cuda_expert_plan *plan, const ts_cuda_tensor *W,
                                   const ts_cuda_tensor *W2, int64_t rows_per_expert, int64_t row_off,
                                   int64_t n_out, const float *x_dev, int64_t x_div, int64_t x_stride,
                                   float *y_dev, int64_t y_stride, cudaStream_t s);

/* Split-K partial products, for few-row products at decode (a hyper-connection's down and inject
 * rows: 324 rows of 10240 columns would give one warp a row and leave most of the GPU idle):
 *
 *     y[q·T·n_out + t·n_out + o] = Σ_{c < ne0/splits} W[o, q·ne0/splits + c] · x[t·x_stride + q·ne0/splits + c]
 *
 * for q < splits, t < T, o < n_out (rows 0 .. n_out − 1 of W). The caller sums the splits (in a fixed
 * order, so results are deterministic). Returns 1, enqueuing nothing, when the shape is not one
 * the split kernel takes (plain types, ne0/splits not a multiple of the block size, a split of x of
 * min(T, 4) tokens beyond the 48 KiB staged in shared memory): the caller then uses ts_cuda_matmul.
 * More than 4 tokens run as launches of up to 4, each token as it would alone. 0 when enqueued, -1 for invalid arguments or a failed launch. Capturable; warm up outside capture as
 * for ts_cuda_matmul. PRECONDITIONS: x_dev, y_dev device pointers, 16-byte aligned; x_stride a
 * multiple of 4, ≥ ne0. */
int ts_cuda_matmul_split(const ts_cuda_tensor *W, int64_t n_out, int splits, const float *x_dev, int64_t T,
                         int64_t x_stride, float *y_dev, cudaStream_t s);

/* Whether ts_cuda_matmul_split enqueues this shape (true) or refuses it (returns 1); false for invalid
 * arguments too. */
bool ts_cuda_matmul_split_takes(const ts_cuda_tensor *W, int64_t n_out, int splits, int64_t T,
                                int64_t x_stride);

/* ts_cuda_matmul_split of C = splits streams of ne0 = W->ne0 / C inputs whose x is made on the way in from
 * a hyper-connection write (hc.cu, the fused read): for token t and stream q,
 *
 *     v_q = R_q + y_t ⊙ inj[t, q] (one fmaf an element),   x_q = v_q ⊙ g_q,
 *
 * where y_t is the block output (16-byte aligned rows). v goes to r_out, not to R (other blocks still read R), and its
 * sums of squares, `slice` elements at a time, to ss[(t·⌈ne0 / slice⌉ + i)·C + q], each summed in
 * hc_write_ss_kernel's order, so that the read that follows sees what that write would have left.
 * Returns as ts_cuda_matmul_split. */
typedef struct ts_cuda_hc_write_in {
    const float *R;   /* T × C·ne0 the residual streams before the write */
    const float *y;   /* T × ne0 the block output */
    const float *inj; /* T × C inject weights */
    const float *g;   /* C·ne0 the next read's norm weights */
    int slice;        /* elements a partial sum of squares: a multiple of 32 up to 512 */
    float *r_out;     /* T × C·ne0 the written streams */
    float *ss;        /* T × ⌈ne0 / slice⌉ × C partial sums of squares */
} ts_cuda_hc_write_in;
int ts_cuda_matmul_split_hc_write(const ts_cuda_tensor *W, int64_t n_out, int splits,
                                  const ts_cuda_hc_write_in *in, int64_t T, float *y_dev, cudaStream_t s);

/* Whether ts_cuda_matmul with T tokens (rows row0 .. row0 + n_out − 1), or ts_cuda_matmul_experts with
 * n_items items, x_div and ids (routed) or none (its rows_per_expert, row_off and n_out), runs this product
 * on the tensor cores (src/cuda/gemv_tc.h: Q4_K, Q5_K, Q6_K, Q8_0 and Q5_0; dense products of 1-64 tokens:
 * the same kernel at every batch size, so a token's result does not depend on its batch; expert products
 * of those types, the routed downs only without TURBOSPARK_TC_XROW=0), where x enters rounded to
 * fp16 after a power-of-two scale per token and group of inputs: max|x| of the group scaled into
 * [2^14, 2^15), the exponent s of the scale 2^s clamped to −113 .. 126. Returns the group (256 inputs,
 * or 128 for Q8_0 and Q5_0), or 0 when x is not rounded. Otherwise sums are as documented above. Twin
 * tests round their reference's x the same way. */
int64_t ts_cuda_matmul_rounds_x(uint32_t type, int64_t ne0, int64_t T, int64_t row0, int64_t n_out);
int64_t ts_cuda_matmul_experts_rounds_x(uint32_t type, int64_t ne0, int64_t n_items, int64_t x_div,
                                        bool routed, int64_t rows_per_expert, int64_t row_off, int64_t n_out);

/* Benchmarks and tests only, not thread-safe against concurrent ts_cuda_matmul calls:
 * force the rows each warp handles (1, 2 or 4; 0 = automatic), and allow (default) or forbid
 * staging x in shared memory (forbidden: x is read through L1, the path of large T·ne0). Both
 * apply to ts_cuda_matmul_experts too (which runs 1 or 2 rows a warp: a forced 4 runs as 2). */
void ts_cuda_matmul_force_rows_per_warp(int rows);
void ts_cuda_matmul_allow_x_shared(bool allow);
/* The tensor-core GEMV's phase stamps (gemv_tc.cu, kStampWords = 24 words a block: clock64 at entry, after the
 * first copies, after the dependency wait, after x is staged and at the end; %globaltimer at entry and end;
 * the block's chunks; then for its first 8 chunks clock64 when their weights landed and after their barrier)
 * into stamps (device memory for `blocks` blocks), or none with NULL. 0, or -1 if CUDA failed. */
enum { TS_CUDA_TC_STAMP_WORDS = 24 };
int ts_cuda_matmul_tc_stamps(long long *stamps, int blocks);

#ifdef __cplusplus
}
#endif

#endif
