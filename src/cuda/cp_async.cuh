// Asynchronous copies global → shared memory (cp.async, sm_80+), used by the kernels that stage
// weight bytes (matmul.cu, hc.cu, gemm_tc.cu) or the next row's vectors (gdn.cu) ahead of their use. (gemm.cu keeps
// its own inside dev_env, the device half of the environment that test_cuda_gemm_host emulates: the
// same instructions; routing them through these changed the tiled kernel's PTX, so it stays.)
#ifndef TS_CUDA_CP_ASYNC_CUH
#define TS_CUDA_CP_ASYNC_CUH

#include <cuda_runtime.h>
#include <stdint.h>

namespace ts_cu {

// 4 bytes (through L1: .ca is the only mode for sizes below 16).
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
// 16 bytes, both addresses 16-byte aligned (bypassing L1).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// Closes the group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N committed groups are still in flight (this thread's copies only).
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace ts_cu

#endif
