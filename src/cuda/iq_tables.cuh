// The lattice grids of the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) for the
// CUDA decoders (quant_decode.cuh, rows.cuh), read the same way on the device and on the host.
//
// The values are ggml's (src/quant/iq_grids.inc, the file src/quant/iq_grids.c builds the host
// tables from): included here as static __device__ arrays, one copy per translation unit (the
// CUDA sources are not compiled for relocatable device code, so a kernel can only read a device
// array of its own unit; 33 KiB each). Device reads go through L1: the lanes of a warp index
// different entries, which __constant__ memory would serialize. Host code (tests/cuda) reads the
// host tables of src/quant, so the host tests check the very lookups the kernels make.
//
// The 8-bit sign patterns of IQ2_XXS / IQ2_XS / IQ3_XXS (ggml's ksigns_iq2xs: 7 stored bits and
// their parity as the eighth) are computed, not looked up: tests/cuda/test_cuda_decode.cu checks
// iq_ksigns against ts_ksigns_iq2xs for all 128 indices.
#ifndef TS_CUDA_IQ_TABLES_CUH
#define TS_CUDA_IQ_TABLES_CUH

extern "C" {
#include "quant/iq_grids.h"
}

#include <cuda_runtime.h>
#include <stdint.h>

namespace ts_cu {

#define TS_IQ_TABLE(type, name, n) static __device__ const type kd_##name[n]
#include "quant/iq_grids.inc"
#undef TS_IQ_TABLE

#ifdef __CUDA_ARCH__
#define TS_IQ_READ(name, i) kd_##name[i]
#else
#define TS_IQ_READ(name, i) ts_##name[i]
#endif

__host__ __device__ __forceinline__ uint64_t iq2xxs_grid(uint32_t i) {
    return TS_IQ_READ(iq2xxs_grid, i);
}
__host__ __device__ __forceinline__ uint64_t iq2xs_grid(uint32_t i) {
    return TS_IQ_READ(iq2xs_grid, i);
}
__host__ __device__ __forceinline__ uint64_t iq2s_grid(uint32_t i) {
    return TS_IQ_READ(iq2s_grid, i);
}
__host__ __device__ __forceinline__ uint32_t iq3xxs_grid(uint32_t i) {
    return TS_IQ_READ(iq3xxs_grid, i);
}
__host__ __device__ __forceinline__ uint32_t iq3s_grid(uint32_t i) {
    return TS_IQ_READ(iq3s_grid, i);
}
__host__ __device__ __forceinline__ uint64_t iq1s_grid(uint32_t i) {
    return TS_IQ_READ(iq1s_grid, i);
}

#undef TS_IQ_READ

// ksigns_iq2xs[s7]: bits 0-6 of s7 and their parity as bit 7 (an even number of minus signs).
__host__ __device__ __forceinline__ uint32_t iq_ksigns(uint32_t s7) {
    s7 &= 127u;
#ifdef __CUDA_ARCH__
    return s7 | ((static_cast<uint32_t>(__popc(s7)) & 1u) << 7);
#else
    return s7 | ((static_cast<uint32_t>(__builtin_popcount(s7)) & 1u) << 7);
#endif
}

} // namespace ts_cu

#endif
