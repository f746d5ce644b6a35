/* A chain of decode products run by one persistent kernel (persist.cu): the first piece of issue 21's
 * one-kernel decode step. Each product is y = W·x for one token, W in its file encoding (Q4_K, Q5_K,
 * Q6_K, Q8_0, Q5_0) on the tensor-core GEMV's arithmetic (gemv_tc.cuh: x rounded to fp16 once per
 * group, fp32 sums), and its results equal ts_cuda_matmul's for the same product bit for bit (the same
 * chunk sums, added in the same order). TURBOSPARK_PERSIST_WA=1 puts the weights in the MMAs' A operand
 * instead (tiles of 16 rows, half the MMAs for the same decoding: gemv_tc_dot.cuh), equal to ts_cuda_matmul's
 * up to the order of the fp32 sums inside an MMA.
 *
 * One launch runs the whole chain: the blocks stay resident, each takes its tiles of 8 (or 16) output rows in
 * chain order (persist_sched.h), streams their weights into shared memory as far ahead as its ring
 * allows, across product boundaries, and waits only where a product reads the output of an earlier one
 * (a counter per product in global memory), so the weight copies of the next products overlap the
 * wait, the x staging and the sums of this one.
 *
 * Internal to the CUDA backend; C-callable for the tests. */
#ifndef TS_CUDA_PERSIST_H
#define TS_CUDA_PERSIST_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_cuda_chain_product {
    uint32_t type;      /* Q4_K, Q5_K, Q6_K, Q8_0 or Q5_0 */
    int64_t ne0, n_out; /* inputs (a multiple of the type's x group: 256, or 128 for Q8_0 and Q5_0), rows */
    size_t row_bytes;   /* ts_row_size(type, ne0) */
    const void *w;      /* device: row 0, 16-byte aligned, with 16 readable bytes past the last row */
    const float *x;     /* device: ne0 inputs, 16-byte aligned */
    float *y;           /* device: n_out outputs */
    int dep;            /* the earlier product whose y holds x, or −1: x is ready when the chain starts */
    /* An expert product when ids is not NULL: w is then expert 0's first row, and the product uses the
     * rows of expert e = ids[0] at w + e · expert_stride bytes (ids: device memory, written before the
     * chain starts, as the router's top-k); an e outside 0 .. n_experts − 1 reads no weights and makes
     * every output NaN. */
    const int32_t *ids;
    int n_experts;
    size_t expert_stride; /* a multiple of 16, at least n_out · row_bytes */
} ts_cuda_chain_product;

typedef struct ts_cuda_chain ts_cuda_chain;

/* Checks the products and builds the chain's device tables (x must lie inside y of dep, or, with dep
 * −1, outside every product's y; the y ranges must not overlap). The shared memory a block gets: all
 * of an SM's; TURBOSPARK_PERSIST_PER_SM=2 asks for two blocks an SM with half each, granted when the
 * largest tile fits and the registers let two stay resident. 0, or −1 with a sentence in err. */
int ts_cuda_chain_new(const ts_cuda_chain_product *p, int n, ts_cuda_chain **out, char *err, size_t errlen);

/* Runs the chain on s (a counter reset and one launch; capturable in a CUDA graph). 0, or −1 when a
 * launch failed. */
int ts_cuda_chain_run(const ts_cuda_chain *c, cudaStream_t s);

/* The launch: blocks, blocks an SM, shared memory a block, of which the weight ring. */
void ts_cuda_chain_geometry(const ts_cuda_chain *c, int *blocks, int *per_sm, size_t *smem, size_t *ring);

/* Where a block's time went in the last run (call after it finished), when the chain was made with
 * TURBOSPARK_PERSIST_STAMPS=1 (the kernel then writes five clock64 stamps a tile): SM cycles, summed over
 * a block's tiles and averaged over the blocks that had tiles: [0] waiting for a product's input, [1]
 * staging its x, [2] waiting for the tile's weights, [3] the tile's sums (up to the summing warps'
 * barrier), [4] between tiles (the stores, the count); [5] the longest block's first-to-last span. 0, or
 * −1 without stamps. */
int ts_cuda_chain_phases(const ts_cuda_chain *c, double cycles[6]);

void ts_cuda_chain_free(ts_cuda_chain *c);

#ifdef __cplusplus
}
#endif

#endif
