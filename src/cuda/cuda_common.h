/* The one checked-call macro of the CUDA backend (llm.c's cudaCheck, calm's CUDA_CHECK).
 *
 * TS_CUDA_CHECK(call) is for tests, benchmarks and internal invariants: on failure it prints the
 * call, file, line and CUDA's message, then exits. Library entry points that a user's input can
 * reach return a status instead (see ts_cuda_matmul). Plain C, so C tests and tools include it
 * too. */
#ifndef TS_CUDA_COMMON_H
#define TS_CUDA_COMMON_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static inline void ts_cuda_check_(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: CUDA call %s failed: %s (%s)\n", file, line, call, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(EXIT_FAILURE);
}

#define TS_CUDA_CHECK(call) ts_cuda_check_((call), #call, __FILE__, __LINE__)

/* After a kernel launch: catches launch-configuration errors now (asynchronous faults surface at
 * the next synchronizing call). */
#define TS_CUDA_CHECK_LAUNCH() TS_CUDA_CHECK(cudaGetLastError())

#endif
