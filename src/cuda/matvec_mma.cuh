// Q4_K matrix-vector product on the integer matrix units (mma.sync.m16n8k32.s32.s8.s8.s32), exact
// in the sense of docs/CUDA_DECODE_PLAN.md §2: the 4-bit quants are int8 A operands as they are, x
// is staged per 32-element sub-block as x_int = round(x · 2^(26 − E)) (max|x| < 2^E) split into
// four balanced base-128 int8 digits (the B columns 0..3), the MMA sums in int32 without rounding,
// and the row value Σ_p C_p·128^p · 2^(E − 26) · d·sc − dmin·m·Σx is formed in fp32. Error per
// element of x ≤ 2^−26 of its sub-block's max|x|.
//
// STATUS: written in session 3 without a GPU to run it; opt-in (TURBOSPARK_CUDA_MMA=1) until
// test_cuda_matmul and bench_cuda_matmul have run it on the H200. tests/cuda/test_mma_emul.cu runs
// its per-lane arithmetic on the host against the dequantized dot product (4.8e-8 of Σ|w·x|).
//
// Layout: one thread block of kMmaWarps warps per 16-row tile; warp w takes super-blocks w, w +
// kMmaWarps, ... of the tile's rows, and the warps' partial sums are added in warp order (fixed:
// deterministic). In the m16n8k32 fragments a lane (g = lane / 4, t = lane % 4) holds A rows g and
// g + 8 at k = 4t..4t+3 and 16+4t..16+4t+3, B column g at the same k, C rows g and g + 8 at columns
// 2t and 2t + 1. For Q4_K the A words are qs[32p + 4t] and qs[32p + 16 + 4t] of the row's
// super-block: low nibbles are sub-block 2p, high nibbles sub-block 2p + 1.
#ifndef TS_CUDA_MATVEC_MMA_CUH
#define TS_CUDA_MATVEC_MMA_CUH

#include "cuda/pdl.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace ts_cu {

constexpr int kMmaWarps = 4;

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Byte i of the 12 packed scale bytes held as three little-endian words.
__device__ __forceinline__ int scale_byte(const uint32_t (&q)[3], int i) {
    return static_cast<int>((q[i >> 2] >> (8 * (i & 3))) & 0xFFu);
}
// K-quant 6-bit scale and min j (as scale_min_k4 of quant_decode.cuh).
__device__ __forceinline__ void scale_min_words(int j, const uint32_t (&q)[3], int &sc, int &m) {
    if (j < 4) {
        sc = scale_byte(q, j) & 63;
        m = scale_byte(q, j + 4) & 63;
    } else {
        sc = (scale_byte(q, j + 4) & 0xF) | ((scale_byte(q, j - 4) >> 6) << 4);
        m = (scale_byte(q, j + 4) >> 4) | ((scale_byte(q, j) >> 6) << 4);
    }
}

// Shared memory: four digit planes of ne0 int8 (plane p: the digit of 128^p), then per sub-block
// 2^(E − 26) and Σx.
inline size_t mma_q4k_smem(int ne0) {
    return 4 * static_cast<size_t>(ne0) + 2 * static_cast<size_t>(ne0 / 32) * sizeof(float);
}

// x (ne0 floats) → the digit planes, 2^(E − 26) and Σx of every sub-block, one warp a sub-block;
// the caller syncs.
__device__ __forceinline__ void mma_stage_digits(const float *__restrict__ x, int ne0, int8_t *dg, float *xsc,
                                                 float *xsum) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int sb = warp; sb < ne0 / 32; sb += kMmaWarps) {
        const float v = x[sb * 32 + lane];
        float mx = fabsf(v), s = v;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        int E = 0;
        if (mx > 0.0f) frexpf(mx, &E); // mx = f·2^E, f in [0.5, 1): mx < 2^E
        int xi = __float2int_rn(ldexpf(v, 26 - E)); // |xi| ≤ 2^26
#pragma unroll
        for (int p = 0; p < 4; p++) {
            int r = xi & 127;
            if (r >= 64) r -= 128;
            dg[p * ne0 + sb * 32 + lane] = static_cast<int8_t>(r);
            xi = (xi - r) >> 7;
        }
        if (lane == 0) xsc[sb] = ldexpf(1.0f, E - 26), xsum[sb] = s;
    }
}

// Rows tile·16 .. tile·16 + 15 of n_out (rows.row(o): the first byte of row o) against the staged x;
// writes y[o]. Every thread of the block calls it (it syncs once).
template <class Rows>
__device__ __forceinline__ void mma_q4k_tile(const Rows &rows, int n_out, int ne0, const int8_t *dg, const float *xsc,
                                             const float *xsum, float *__restrict__ y, int tile) {
    __shared__ float part[kMmaWarps][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = tile * 16 + g, r1 = r0 + 8;
    const uint8_t *row0 = rows.row(min(r0, n_out - 1)), *row1 = rows.row(min(r1, n_out - 1));
    const int nb = ne0 / 256;
    float acc0 = 0.0f, acc1 = 0.0f; // rows r0, r1 (lanes t == 0 after the reduction below)
    for (int b = warp; b < nb; b += kMmaWarps) {
        const uint8_t *B0 = row0 + static_cast<size_t>(b) * 144, *B1 = row1 + static_cast<size_t>(b) * 144;
        const uint32_t h0 = __ldg(reinterpret_cast<const uint32_t *>(B0)), h1 = __ldg(reinterpret_cast<const uint32_t *>(B1));
        uint32_t s0[3], s1[3], q0[8], q1[8];
#pragma unroll
        for (int i = 0; i < 3; i++) {
            s0[i] = __ldg(reinterpret_cast<const uint32_t *>(B0 + 4) + i);
            s1[i] = __ldg(reinterpret_cast<const uint32_t *>(B1 + 4) + i);
        }
#pragma unroll
        for (int p = 0; p < 4; p++) {
            q0[2 * p] = __ldg(reinterpret_cast<const uint32_t *>(B0 + 16 + 32 * p + 4 * t));
            q0[2 * p + 1] = __ldg(reinterpret_cast<const uint32_t *>(B0 + 16 + 32 * p + 16 + 4 * t));
            q1[2 * p] = __ldg(reinterpret_cast<const uint32_t *>(B1 + 16 + 32 * p + 4 * t));
            q1[2 * p + 1] = __ldg(reinterpret_cast<const uint32_t *>(B1 + 16 + 32 * p + 16 + 4 * t));
        }
        const float d0 = __half2float(__ushort_as_half(static_cast<unsigned short>(h0 & 0xFFFFu)));
        const float m0 = __half2float(__ushort_as_half(static_cast<unsigned short>(h0 >> 16)));
        const float d1 = __half2float(__ushort_as_half(static_cast<unsigned short>(h1 & 0xFFFFu)));
        const float m1 = __half2float(__ushort_as_half(static_cast<unsigned short>(h1 >> 16)));
#pragma unroll
        for (int j = 0; j < 8; j++) { // sub-block j of the super-block: pair j / 2, nibble j % 2
            const int p = j >> 1, sh = 4 * (j & 1), sb = b * 8 + j;
            const uint32_t a[4] = {(q0[2 * p] >> sh) & 0x0F0F0F0Fu, (q1[2 * p] >> sh) & 0x0F0F0F0Fu,
                                   (q0[2 * p + 1] >> sh) & 0x0F0F0F0Fu, (q1[2 * p + 1] >> sh) & 0x0F0F0F0Fu};
            uint32_t b0 = 0, b1 = 0;
            if (g < 4) {
                b0 = *reinterpret_cast<const uint32_t *>(dg + g * ne0 + sb * 32 + 4 * t);
                b1 = *reinterpret_cast<const uint32_t *>(dg + g * ne0 + sb * 32 + 16 + 4 * t);
            }
            int c[4] = {0, 0, 0, 0};
            mma_s8(c, a, b0, b1);
            // lane t = 0 holds digits 0, 1, lane t = 1 digits 2, 3 (columns 2t, 2t + 1); t ≥ 2: zeros
            float v0 = static_cast<float>(c[0]) + 128.0f * static_cast<float>(c[1]);
            float v1 = static_cast<float>(c[2]) + 128.0f * static_cast<float>(c[3]);
            if (t == 1) v0 *= 16384.0f, v1 *= 16384.0f;
            v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
            v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
            int sc0, mn0, sc1, mn1;
            scale_min_words(j, s0, sc0, mn0);
            scale_min_words(j, s1, sc1, mn1);
            const float xs = xsc[sb], sx = xsum[sb];
            acc0 = fmaf(d0 * static_cast<float>(sc0), v0 * xs, acc0);
            acc0 = fmaf(-(m0 * static_cast<float>(mn0)), sx, acc0);
            acc1 = fmaf(d1 * static_cast<float>(sc1), v1 * xs, acc1);
            acc1 = fmaf(-(m1 * static_cast<float>(mn1)), sx, acc1);
        }
    }
    if (t == 0) part[warp][g] = acc0, part[warp][g + 8] = acc1;
    __syncthreads();
    if (threadIdx.x < 16) {
        float s = part[0][threadIdx.x];
        for (int w = 1; w < kMmaWarps; w++) s += part[w][threadIdx.x];
        const int r = tile * 16 + static_cast<int>(threadIdx.x);
        if (r < n_out) y[r] = s;
    }
}

// The shared-memory carve-up of mma_q4k_smem.
struct mma_smem {
    int8_t *dg;
    float *xsc, *xsum;
    __device__ __forceinline__ mma_smem(uint8_t *sm, int ne0)
        : dg(reinterpret_cast<int8_t *>(sm)), xsc(reinterpret_cast<float *>(sm + 4 * static_cast<size_t>(ne0))),
          xsum(xsc + ne0 / 32) {}
};

struct mma_dense_rows {
    const uint8_t *w;
    size_t rb;
    __device__ __forceinline__ const uint8_t *row(int o) const { return w + static_cast<size_t>(o) * rb; }
};

// grid ⌈n_out / 16⌉ blocks of kMmaWarps·32 threads; ne0 a multiple of 256; T = 1.
__global__ void __launch_bounds__(kMmaWarps * 32)
    matmul_q4k_mma_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0, const float *__restrict__ x,
                          float *__restrict__ y) {
    extern __shared__ __align__(16) uint8_t sm[];
    const mma_smem m(sm, ne0);
    pdl_trigger();
    pdl_wait();
    mma_stage_digits(x, ne0, m.dg, m.xsc, m.xsum);
    __syncthreads();
    mma_q4k_tile(mma_dense_rows{W, rb}, n_out, ne0, m.dg, m.xsc, m.xsum, y, static_cast<int>(blockIdx.x));
}

} // namespace ts_cu

#endif
