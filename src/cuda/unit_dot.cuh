// The inner loop of the quantized matrix-vector kernels (matmul.cu, and the fused hyper-connection
// product of hc.cu): one "unit" of 32 weights of R rows (src/cuda/quant_decode.cuh) against T
// tokens of x, x either in global memory or staged in shared memory, swizzled (x_swizzle);
// stage_x, which stages x (the cp.async helpers are in cp_async.cuh).
// Design and numerics: see the header of matmul.cu.
#ifndef TS_CUDA_UNIT_DOT_CUH
#define TS_CUDA_UNIT_DOT_CUH

#include "cuda/cp_async.cuh"
#include "cuda/quant_decode.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace ts_cu {

__device__ __forceinline__ const uint8_t *align_down16(const uint8_t *p) {
    return p - (reinterpret_cast<uintptr_t>(p) & 15u);
}

// One unit of R rows against T tokens: acc[r][t] += Σ over the unit's 32 elements. eb: index of
// the block's first element in a row of x. x comes from global memory (x, through L1) or, when XS,
// from the swizzled copy in shared memory (xs, see x_swizzle).
template <class Q, int R, int T, bool XS>
__device__ __forceinline__ void unit_dot(const uint8_t *const (&blk)[R], int k, const float *__restrict__ x,
                                         const float4 *xs, int eb, int ne0, float (&acc)[R][T]) {
    unit_t u[R];
#pragma unroll
    for (int r = 0; r < R; r++) Q::decode(blk[r], k, u[r]);
    constexpr float kMagic = 8388608.0f + static_cast<float>(Q::BIAS);
#pragma unroll
    for (int run = 0; run < 2; run++) {
        float w[R][16];
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                w[r][4 * i + 0] = byte_plus_2p23<0>(u[r].q[run][i]) - kMagic;
                w[r][4 * i + 1] = byte_plus_2p23<1>(u[r].q[run][i]) - kMagic;
                w[r][4 * i + 2] = byte_plus_2p23<2>(u[r].q[run][i]) - kMagic;
                w[r][4 * i + 3] = byte_plus_2p23<3>(u[r].q[run][i]) - kMagic;
            }
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            const int e = t * ne0 + eb + u[0].e[run]; // a multiple of 16
            float xv[16];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 v;
                if constexpr (XS)
                    v = xs[x_swizzle<Q>(static_cast<uint32_t>(e >> 2)) ^ static_cast<uint32_t>(i)];
                else
                    v = __ldg(reinterpret_cast<const float4 *>(x + e) + i);
                xv[4 * i + 0] = v.x;
                xv[4 * i + 1] = v.y;
                xv[4 * i + 2] = v.z;
                xv[4 * i + 3] = v.w;
            }
            float sx = 0.0f;
            if (Q::HAS_MIN) {
                float s4[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    s4[i] = (xv[4 * i] + xv[4 * i + 1]) + (xv[4 * i + 2] + xv[4 * i + 3]);
                sx = (s4[0] + s4[1]) + (s4[2] + s4[3]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int i = 0; i < 16; i += 2) {
                    s0 = fmaf(w[r][i], xv[i], s0);
                    s1 = fmaf(w[r][i + 1], xv[i + 1], s1);
                }
                acc[r][t] = fmaf(u[r].scale[run], s0 + s1, acc[r][t]);
                if (Q::HAS_MIN) acc[r][t] = fmaf(u[r].min[run], sx, acc[r][t]);
            }
        }
    }
}

// Copies x (T rows of ne0 floats, row t at x + t·xstride, 16-byte aligned) into the swizzled
// shared copy xs (rows back to back) with `threads` threads; the caller syncs.
template <class Q, int T>
__device__ __forceinline__ void stage_x(float4 *xs, const float *__restrict__ x, int ne0, int xstride,
                                        int threads) {
    const int n4 = ne0 / 4, s4 = xstride / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    if (xstride == ne0) { // rows back to back: one range
        for (int f = threadIdx.x; f < T * n4; f += threads)
            xs[x_swizzle<Q>(static_cast<uint32_t>(f))] = __ldg(x4 + f);
        return;
    }
    for (int f = threadIdx.x; f < T * n4; f += threads) {
        const int t = f / n4, j = f - t * n4;
        xs[x_swizzle<Q>(static_cast<uint32_t>(f))] = __ldg(x4 + static_cast<size_t>(t) * s4 + j);
    }
}

} // namespace ts_cu

#endif
