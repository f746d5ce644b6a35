// Programmatic dependent launch (Hopper): a kernel launched with ts_cu::launch may start while the
// kernel before it in the stream is still running, do the work that depends on nothing that kernel
// writes (the fused hyper-connection product stages its weights, the GDN recurrence loads its
// state), then wait for it. At batch 1 a decode step is ~1,000 short kernels in a chain: their
// launch and start-up overlap the previous kernel's tail.
//
// The rules every kernel launched through ts_cu::launch keeps:
//   - pdl_trigger() first (lets the next kernel launch early; it waits for this one anyway);
//   - before pdl_wait(): read only weights (never written during a forward), write nothing;
//   - pdl_wait() in every thread that goes on to touch activations, and in every block before it
//     exits (the next kernel's wait then also covers every kernel before this one).
// Kernels launched with <<<>>> are ordered as usual. TURBOSPARK_CUDA_PDL=0 launches everything
// without the attribute (pdl_wait then returns at once).
#ifndef TS_CUDA_PDL_CUH
#define TS_CUDA_PDL_CUH

#include <cuda_runtime.h>

namespace ts_cu {

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// A load with acquire semantics at GPU scope: a counter another block released its stores with.
__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ int ld_acquire(const int *p) {
    return static_cast<int>(ld_acquire(reinterpret_cast<const unsigned *>(p)));
}

// Asks L2 for the 128-byte lines of [p, p + bytes), thread `i` of `n` taking every n-th line: how a
// kernel starts its weights' DRAM reads before pdl_wait() without holding registers for them.
__device__ __forceinline__ void prefetch_l2(const void *p, size_t bytes, int i, int n) {
    const char *end = static_cast<const char *>(p) + bytes;
    for (const char *c = static_cast<const char *>(p) + 128 * static_cast<size_t>(i); c < end;
         c += 128 * static_cast<size_t>(n))
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c));
}

// Whether launches carry the attribute (TURBOSPARK_CUDA_PDL, default on; read once).
bool pdl_enabled();
// Whether Q4_K products at one token use the integer-MMA kernel (matvec_mma.cuh;
// TURBOSPARK_CUDA_MMA=1, off by default until it has run on a GPU).
bool mma_enabled();

// kernel<<<grid, block, smem, s>>>(args...) as a programmatic dependent launch.
template <typename... KArgs, typename... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

} // namespace ts_cu

#endif
