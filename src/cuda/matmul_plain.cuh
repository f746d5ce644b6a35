// The plain-type (F32, F16, BF16) SIMT products of the quantized GEMV (matmul.cu, whose top comment is
// the design): plain_product (rows a multiple of 8 elements, 16-byte streaming loads), plain_any_product
// (any row length), their dense kernels, and with_plain_type, which launches them for a run-time type.
// The expert kernels (matmul_experts.cuh) run the same bodies. Included by matmul.cu.
#ifndef TS_CUDA_MATMUL_PLAIN_CUH
#define TS_CUDA_MATMUL_PLAIN_CUH

#include "cuda/matmul_blocks.cuh"
#include "cuda/pdl.cuh"
#include "cuda/quant_decode.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

// ---- plain types -----------------------------------------------------------------------------

template <int TYPE> struct ptype;
template <> struct ptype<TS_TYPE_F32> {
    static constexpr int ESZ = 4;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const float4 a = __ldcs(reinterpret_cast<const float4 *>(p));
        const float4 b = __ldcs(reinterpret_cast<const float4 *>(p) + 1);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return reinterpret_cast<const float *>(row)[i];
    }
};
template <> struct ptype<TS_TYPE_F16> {
    static constexpr int ESZ = 2;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(p));
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = ts_cu_half_to_float(a[i] & 0xFFFFu);
            w[2 * i + 1] = ts_cu_half_to_float(a[i] >> 16);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return ts_cu_half_to_float(reinterpret_cast<const uint16_t *>(row)[i]);
    }
};
template <> struct ptype<TS_TYPE_BF16> {
    static constexpr int ESZ = 2;
    static __device__ __forceinline__ void load8(const uint8_t *p, float (&w)[8]) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(p));
        const uint32_t a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w[2 * i] = __uint_as_float(a[i] << 16);
            w[2 * i + 1] = __uint_as_float(a[i] & 0xFFFF0000u);
        }
    }
    static __device__ __forceinline__ float at(const uint8_t *row, int i) {
        return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t *>(row)[i]) << 16);
    }
};

// ne0 % 8 == 0: lane handles 8 consecutive elements per iteration with one or two 16-byte loads.
// The thread block computes row group g (kWarps·R rows) of n_out.
template <int TYPE, int R, int T, class Rows>
__device__ __forceinline__ void plain_product(const Rows &rows, int n_out, int ne0,
                                              const float *__restrict__ x, float *__restrict__ y, int g) {
    using P = ptype<TYPE>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o0 = (g * kWarps + warp) * R;
    if (o0 >= n_out) return;
    const int nr = min(R, n_out - o0);
    const uint8_t *rowp[R];
#pragma unroll
    for (int r = 0; r < R; r++) rowp[r] = rows.row(min(o0 + r, n_out - 1));
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

    // U units a lane in flight: their loads are all issued before the first FMA, so each warp keeps
    // U·R·16 bytes a lane outstanding (with few rows per SM, memory parallelism is the limit).
    constexpr int U = 4;
    const int nu = ne0 / 8;
    for (int u0 = lane; u0 < nu; u0 += 32 * U) {
        float w[U][R][8];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int u = u0 + 32 * j;
            if (u < nu) {
#pragma unroll
                for (int r = 0; r < R; r++) P::load8(rowp[r] + static_cast<size_t>(u) * 8 * P::ESZ, w[j][r]);
            }
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int u = u0 + 32 * j;
            if (u >= nu) break;
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 *xp = reinterpret_cast<const float4 *>(x + static_cast<size_t>(t) * ne0 + 8 * u);
                const float4 a = __ldg(xp), b = __ldg(xp + 1);
                const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i += 2) {
                        s0 = fmaf(w[j][r][i], xv[i], s0);
                        s1 = fmaf(w[j][r][i + 1], xv[i + 1], s1);
                    }
                    acc[r][t] += s0 + s1;
                }
            }
        }
    }
    warp_reduce_store<R, T>(acc, lane, o0, nr, n_out, y);
}

template <int TYPE, int R, int T>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_plain_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0,
                        const float *__restrict__ x, float *__restrict__ y) {
    pdl_trigger();
    pdl_wait();
    plain_product<TYPE, R, T>(dense_rows{W, rb}, n_out, ne0, x, y, static_cast<int>(blockIdx.x));
}

// Any row length: one warp a row, element by element, any T (the slow path; rare shapes only).
// The thread block computes rows g·kWarps .. g·kWarps + kWarps − 1.
template <int TYPE, class Rows>
__device__ __forceinline__ void plain_any_product(const Rows &rows, int n_out, int ne0,
                                                  const float *__restrict__ x, int T, float *__restrict__ y,
                                                  int g) {
    using P = ptype<TYPE>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int o = g * kWarps + warp;
    if (o >= n_out) return;
    const uint8_t *row = rows.row(o);
    for (int t = 0; t < T; t++) {
        const float *xt = x + static_cast<size_t>(t) * ne0;
        float s = 0.0f;
        for (int i = lane; i < ne0; i += 32) s = fmaf(P::at(row, i), __ldg(xt + i), s);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) y[static_cast<size_t>(t) * n_out + o] = s;
    }
}

template <int TYPE>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_plain_any_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0,
                            const float *__restrict__ x, int T, float *__restrict__ y) {
    pdl_trigger();
    pdl_wait();
    plain_any_product<TYPE>(dense_rows{W, rb}, n_out, ne0, x, T, y, static_cast<int>(blockIdx.x));
}

// The plain types' kernels for a run-time type, as with_type (quant_decode.cuh) over its plain list
// TS_CU_PLAIN_TYPES: f(type_tag<TYPE>{}) for F32, F16 or BF16, then true; false for any other type.
#define TS_CU_PLAIN_TYPE_CASE(T)                                                                             \
    case T:                                                                                                  \
        f(type_tag<T>{});                                                                                    \
        return true;

template <class F> bool with_plain_type(uint32_t type, F &&f) {
    switch (type) {
        TS_CU_PLAIN_TYPES(TS_CU_PLAIN_TYPE_CASE)
    default:
        return false;
    }
}
#undef TS_CU_PLAIN_TYPE_CASE

} // namespace

#endif
