// Matrix-vector products on the integer matrix units (Q4_K, Q5_K, Q8_0, Q5_0, Q4_0) (mma.sync.m16n8k32.s32.s8.s8.s32), exact
// in the sense of docs/CUDA_DECODE_PLAN.md §2: the 4-bit quants are int8 A operands as they are, x
// is staged per 32-element sub-block as x_int = round(x · 2^(26 − E)) (max|x| < 2^E) split into
// four balanced base-128 int8 digits (the B columns 0..3), the MMA sums in int32 without rounding,
// and the row value Σ_p C_p·128^p · 2^(E − 26) · d·sc − dmin·m·Σx is formed in fp32. Error per
// element of x ≤ 2^−26 of its sub-block's max|x|.
//
// STATUS: exact on the H200 (test_cuda_matmul, test_cuda_forward and cuda_golden pass with
// TURBOSPARK_CUDA_MMA=1, session 4) but 4x slower than the SIMT kernel in this first layout (78 us for
// Q4_K 2560 -> 10240: each block stages all of x before its first weight load, one sub-block load in
// flight a warp), so it stays opt-in; docs/CUDA_DECODE_PLAN.md section 2 has the next layout.
// tests/cuda/test_mma_emul.cu runs its per-lane arithmetic on the host against the dequantized dot.
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
#include "cuda/quant_decode.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace ts_cu {

constexpr int kMmaWarps = 4;

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// ---- per-type A fragments (host and device: tests/cuda/test_mma_emul.cu runs these very functions) ----
//
// mma_frag<TYPE>::get(row, sb, t, w0, w1, scale, mn): for 32-element sub-block sb of a row, the int8
// quants of elements 4t..4t+3 (w0) and 16+4t..16+4t+3 (w1), and the sub-block's weight as
// w = scale·q + mn (mn = 0 for the signed types, whose quants come out with their bias removed).
// Loads are 2-byte-aligned 32-bit reads (lds_u32_a2): block sizes 34, 22, 18 and 210 are not
// multiples of 4. Types whose scales change inside 32 elements (Q6_K: every 16) are not here.

TS_HD uint32_t mma_ld32(const uint8_t *p) {
    return lds_u32_a2(p);
}
// Unsigned bytes (each < 128 − bias... i.e. 0..31) minus a per-byte bias, as int8, without borrows
// between bytes: (v + (128 − bias)) ^ 0x80 per byte.
TS_HD uint32_t sub_bias4(uint32_t v, uint32_t bias) {
    return (v + 0x01010101u * (128u - bias)) ^ 0x80808080u;
}

// Byte i of the 12 packed scale bytes held as three little-endian words.
TS_HD int scale_byte(const uint32_t (&q)[3], int i) {
    const uint32_t w = i < 4 ? q[0] : i < 8 ? q[1] : q[2];
    return static_cast<int>((w >> (8u * static_cast<unsigned>(i & 3))) & 0xFFu);
}
// K-quant 6-bit scale and min j (as scale_min_k4 of quant_decode.cuh).
TS_HD void scale_min_words(int j, const uint32_t (&q)[3], int &sc, int &m) {
    if (j < 4) {
        sc = scale_byte(q, j) & 63;
        m = scale_byte(q, j + 4) & 63;
    } else {
        sc = (scale_byte(q, j + 4) & 0xF) | ((scale_byte(q, j - 4) >> 6) << 4);
        m = (scale_byte(q, j + 4) >> 4) | ((scale_byte(q, j) >> 6) << 4);
    }
}
// d·sc and −dmin·m of sub-block j of a Q4_K/Q5_K super-block (header: d, dmin, 12 scale bytes).
TS_HD void kquant_scale(const uint8_t *blk, int j, float &scale, float &mn) {
    const uint32_t dd = mma_ld32(blk);
    const uint32_t q[3] = {mma_ld32(blk + 4), mma_ld32(blk + 8), mma_ld32(blk + 12)};
    int sc, m;
    scale_min_words(j, q, sc, m);
    scale = ts_cu_half_to_float(dd & 0xFFFFu) * static_cast<float>(sc);
    mn = -(ts_cu_half_to_float(dd >> 16) * static_cast<float>(m));
}

template <int TYPE> struct mma_frag;

// Q4_K: qs at 16; pair p = j/2 of a super-block: byte 32p + l holds element l of sub-block 2p (low
// nibble) and of 2p + 1 (high).
template <> struct mma_frag<TS_TYPE_Q4_K> {
    static constexpr int QK = 256, BS = 144;
    static TS_HD void get(const uint8_t *row, int sb, int t, uint32_t &w0, uint32_t &w1, float &scale,
                          float &mn) {
        const uint8_t *blk = row + static_cast<size_t>(sb >> 3) * BS;
        const int j = sb & 7, p = j >> 1, sh = 4 * (j & 1);
        w0 = (mma_ld32(blk + 16 + 32 * p + 4 * t) >> sh) & 0x0F0F0F0Fu;
        w1 = (mma_ld32(blk + 16 + 32 * p + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu;
        kquant_scale(blk, j, scale, mn);
    }
};

// Q5_K: low 4 bits as Q4_K (qs at 48); the fifth bit of element l of sub-block j is bit j of qh[l]
// (qh at 16).
template <> struct mma_frag<TS_TYPE_Q5_K> {
    static constexpr int QK = 256, BS = 176;
    static TS_HD void get(const uint8_t *row, int sb, int t, uint32_t &w0, uint32_t &w1, float &scale,
                          float &mn) {
        const uint8_t *blk = row + static_cast<size_t>(sb >> 3) * BS;
        const int j = sb & 7, p = j >> 1, sh = 4 * (j & 1);
        w0 = ((mma_ld32(blk + 48 + 32 * p + 4 * t) >> sh) & 0x0F0F0F0Fu) |
             (((mma_ld32(blk + 16 + 4 * t) >> j) & 0x01010101u) << 4);
        w1 = ((mma_ld32(blk + 48 + 32 * p + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu) |
             (((mma_ld32(blk + 16 + 16 + 4 * t) >> j) & 0x01010101u) << 4);
        kquant_scale(blk, j, scale, mn);
    }
};

// Q8_0: fp16 d, 32 int8 quants.
template <> struct mma_frag<TS_TYPE_Q8_0> {
    static constexpr int QK = 32, BS = 34;
    static TS_HD void get(const uint8_t *row, int sb, int t, uint32_t &w0, uint32_t &w1, float &scale,
                          float &mn) {
        const uint8_t *blk = row + static_cast<size_t>(sb) * BS;
        w0 = mma_ld32(blk + 2 + 4 * t);
        w1 = mma_ld32(blk + 2 + 16 + 4 * t);
        scale = ts_cu_half_to_float(lds_u16(blk)), mn = 0.0f;
    }
};

// Q5_0: fp16 d, qh (32 bits) at 2, qs[16] at 6: element j < 16 is the low nibble of qs[j] with bit j
// of qh, element j + 16 the high nibble with bit j + 16; w = d·(q − 16).
template <> struct mma_frag<TS_TYPE_Q5_0> {
    static constexpr int QK = 32, BS = 22;
    static TS_HD void get(const uint8_t *row, int sb, int t, uint32_t &w0, uint32_t &w1, float &scale,
                          float &mn) {
        const uint8_t *blk = row + static_cast<size_t>(sb) * BS;
        const uint32_t qh = mma_ld32(blk + 2), v = mma_ld32(blk + 6 + 4 * t);
        w0 = sub_bias4((v & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (4 * t)), 16);
        w1 = sub_bias4(((v >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (16 + 4 * t)), 16);
        scale = ts_cu_half_to_float(lds_u16(blk)), mn = 0.0f;
    }
};

// Q4_0: fp16 d, qs[16] at 2 (element j low nibble, j + 16 high); w = d·(q − 8).
template <> struct mma_frag<TS_TYPE_Q4_0> {
    static constexpr int QK = 32, BS = 18;
    static TS_HD void get(const uint8_t *row, int sb, int t, uint32_t &w0, uint32_t &w1, float &scale,
                          float &mn) {
        const uint8_t *blk = row + static_cast<size_t>(sb) * BS;
        const uint32_t v = mma_ld32(blk + 2 + 4 * t);
        w0 = sub_bias4(v & 0x0F0F0F0Fu, 8);
        w1 = sub_bias4((v >> 4) & 0x0F0F0F0Fu, 8);
        scale = ts_cu_half_to_float(lds_u16(blk)), mn = 0.0f;
    }
};

// x → balanced base-128 digits: x_int = round(x · 2^(26 − E)), digit p of 128^p in −64..63.
TS_HD void mma_digits(float v, int E, int8_t (&d)[4]) {
#ifdef __CUDA_ARCH__
    int xi = __float2int_rn(ldexpf(v, 26 - E));
#else
    int xi = static_cast<int>(nearbyintf(ldexpf(v, 26 - E)));
#endif
    for (int p = 0; p < 4; p++) {
        int r = xi & 127;
        if (r >= 64) r -= 128;
        d[p] = static_cast<int8_t>(r);
        xi = (xi - r) >> 7;
    }
}

// The row value of one sub-block from the lane's C registers after the xor-1 exchange: lanes t = 0
// and 1 hold digits 0, 1 and 2, 3 (columns 2t, 2t + 1); v0 + 128·v1, times 128² on lane 1.
TS_HD float mma_digit_value(int c_even, int c_odd, int t) {
    float v = static_cast<float>(c_even) + 128.0f * static_cast<float>(c_odd);
    return t == 1 ? v * 16384.0f : v;
}

// Shared memory: four digit planes of ne0 int8 (plane p: the digit of 128^p), then per sub-block
// 2^(E − 26) and Σx.
inline size_t mma_smem_bytes(int ne0) {
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
        int8_t d[4];
        mma_digits(v, E, d);
#pragma unroll
        for (int p = 0; p < 4; p++) dg[p * ne0 + sb * 32 + lane] = d[p];
        if (lane == 0) xsc[sb] = ldexpf(1.0f, E - 26), xsum[sb] = s;
    }
}

// Rows tile·16 .. tile·16 + 15 of n_out (rows.row(o): the first byte of row o) against the staged x;
// writes y[o]. Warp w takes sub-blocks w, w + kMmaWarps, ...; every thread of the block calls it (it
// syncs once).
template <int TYPE, class Rows>
__device__ __forceinline__ void mma_tile(const Rows &rows, int n_out, int ne0, const int8_t *dg,
                                         const float *xsc, const float *xsum, float *__restrict__ y,
                                         int tile) {
    using F = mma_frag<TYPE>;
    __shared__ float part[kMmaWarps][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int r0 = tile * 16 + g, r1 = r0 + 8;
    const uint8_t *row0 = rows.row(min(r0, n_out - 1)), *row1 = rows.row(min(r1, n_out - 1));
    float acc0 = 0.0f, acc1 = 0.0f; // rows r0, r1 (lanes t == 0 after the exchange below)
    for (int sb = warp; sb < ne0 / 32; sb += kMmaWarps) {
        uint32_t a[4];
        float sc0, mn0, sc1, mn1;
        F::get(row0, sb, t, a[0], a[2], sc0, mn0); // A rows g (a0: k 4t.., a2: k 16+4t..)
        F::get(row1, sb, t, a[1], a[3], sc1, mn1); // and g + 8
        uint32_t b0 = 0, b1 = 0;
        if (g < 4) {
            b0 = *reinterpret_cast<const uint32_t *>(dg + g * ne0 + sb * 32 + 4 * t);
            b1 = *reinterpret_cast<const uint32_t *>(dg + g * ne0 + sb * 32 + 16 + 4 * t);
        }
        int c[4] = {0, 0, 0, 0};
        mma_s8(c, a, b0, b1);
        float v0 = mma_digit_value(c[0], c[1], t), v1 = mma_digit_value(c[2], c[3], t);
        v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
        v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
        const float xs = xsc[sb], sx = xsum[sb];
        acc0 = fmaf(sc0, v0 * xs, acc0);
        acc1 = fmaf(sc1, v1 * xs, acc1);
        if (mn0 != 0.0f || mn1 != 0.0f) acc0 = fmaf(mn0, sx, acc0), acc1 = fmaf(mn1, sx, acc1);
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

// The shared-memory carve-up of mma_smem_bytes.
struct mma_smem {
    int8_t *dg;
    float *xsc, *xsum;
    __device__ __forceinline__ mma_smem(uint8_t *sm, int ne0)
        : dg(reinterpret_cast<int8_t *>(sm)),
          xsc(reinterpret_cast<float *>(sm + 4 * static_cast<size_t>(ne0))), xsum(xsc + ne0 / 32) {}
};

struct mma_dense_rows {
    const uint8_t *w;
    size_t rb;
    __device__ __forceinline__ const uint8_t *row(int o) const { return w + static_cast<size_t>(o) * rb; }
};

// grid ⌈n_out / 16⌉ blocks of kMmaWarps·32 threads; ne0 a multiple of the type's block; T = 1.
template <int TYPE>
__global__ void __launch_bounds__(kMmaWarps * 32)
    matmul_mma_kernel(const uint8_t *__restrict__ W, size_t rb, int n_out, int ne0,
                      const float *__restrict__ x, float *__restrict__ y) {
    extern __shared__ __align__(16) uint8_t sm[];
    const mma_smem m(sm, ne0);
    pdl_trigger();
    pdl_wait();
    mma_stage_digits(x, ne0, m.dg, m.xsc, m.xsum);
    __syncthreads();
    mma_tile<TYPE>(mma_dense_rows{W, rb}, n_out, ne0, m.dg, m.xsc, m.xsum, y, static_cast<int>(blockIdx.x));
}

} // namespace ts_cu

#endif
