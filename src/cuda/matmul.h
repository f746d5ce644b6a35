/* Quantized matrix products on the GPU (C interface of src/cuda/matmul.cu), the CUDA twin of
 * ts_cpu_matmul (src/cpu/cpu.h):
 *
 *     y[t, o] = Σ_i W[row0 + o, i] · x[t, i]      t < T, o < n_out, i < ne0
 *
 * W stays in its GGUF encoding on the device (ggml block bytes, rows back to back); x and y are
 * fp32, token-major (x: T × ne0, y: T × n_out), and every sum is accumulated in fp32. The kernels
 * are GEMVs meant for decode and small batches (T ≤ 8 per launch; larger T runs in slices of 8):
 * prefill-sized T belongs to a dense GEMM path, not here.
 *
 * Types: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K (tier 1). */
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

/* Benchmarks and tests only, not thread-safe against concurrent ts_cuda_matmul calls:
 * force the rows each warp handles (1, 2 or 4; 0 = automatic), and allow (default) or forbid
 * staging x in shared memory (forbidden: x is read through L1, the path of large T·ne0). */
void ts_cuda_matmul_force_rows_per_warp(int rows);
void ts_cuda_matmul_allow_x_shared(bool allow);

#ifdef __cplusplus
}
#endif

#endif
