// Decoders of ggml block formats for the CUDA kernels: a "unit" of 32 weights of one row, as
// unsigned bytes plus per-run scales, ready for the exact byte-to-float trick of matmul.cu.
//
// Shared by every kernel that reads quantized weights (matmul.cu now; MoE and the others later)
// and by tests/cuda/test_cuda_decode.cu, which runs these same functions on the host against
// ts_dequantize_row (src/quant/dequant.c, the byte-exact reference of each layout) with no GPU:
// every function here is __host__ __device__, with portable host versions of the intrinsics.
//
// A unit is two runs of 16 consecutive elements that each share one scale (and one min):
//   q[r][i]   quants of elements e[r] + 4i .. e[r] + 4i + 3 of run r, one unsigned byte each,
//             holding q + BIAS (BIAS makes signed quants and codebook values non-negative)
//   weight    scale[r] · (byte − BIAS)  (+ min[r] for types with mins, HAS_MIN)
// which is the value ts_dequantize_row gives, up to the rounding of one fp32 product.
// Block pointers address shared memory in the kernels (plain memory on the host); blocks of
// A16 types (Q4_K, Q5_K) must be 16-byte aligned, the others 2-byte aligned.
//
// The 256-element types added for the low-bit files (Q2_K, Q3_K and the lattice i-quants IQ1_S,
// IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) are written as one function per run,
// run(b, j, q, scale, min): run j (0..15) is elements 16j .. 16j + 15 of the block, and unit k is
// runs 2k and 2k + 1 (elements 32k .. 32k + 31, decode_runs). gemm_decode.cuh reuses run() for the
// prefill GEMM. Each of them fits the unit form exactly: in every one the reference computes a
// weight as one fp32 product of a per-run scale and a small integer (plus, for Q2_K, a per-run
// min: reference d·sc·q − dmin·m = scale·q + min with min = −(dmin·m)), so scale·(byte − BIAS)
// (+ min) rounds to the very float ts_dequantize_row gives:
//   Q2_K     2-bit q, scale d·sc, min −(dmin·m) per 16 elements             (BIAS 0)
//   Q3_K     3-bit q − 4, scale d·(sc − 32) per 16 elements                  (BIAS 4)
//   IQ2_*    ±g, g the grid magnitude, scale d·(0.5 + s)·0.25 per 16 or 32  (BIAS 128)
//   IQ3_XXS  ±g, scale d·(0.5 + s)·0.5 per 32                                (BIAS 128)
//   IQ3_S    ±g, scale d·(1 + 2s) per 32                                     (BIAS 128)
//   IQ1_*    8g ± 1, g in {−1, 0, 1}, scale d·(2s + 1)/8 per 32 (IQ1_M: 16)  (BIAS 16)
// IQ1's weight dl·(g ± 1/8) has a per-group (8 elements) delta, which no per-run min can hold;
// scaling the codes by 8 makes it an integer: (dl/8)·(8g ± 1) is the same real number as the
// reference's dl·(g ± 1/8) (whose g ± 1/8 is exact), so one rounding gives the same float, and dl/8
// is exact (dl is 0 or at least 2^-24, far above fp32's subnormals). The grids come from
// iq_tables.cuh (ggml's values, shared with src/quant); the sign bytes of IQ2_XXS/IQ2_XS/IQ3_XXS
// are computed (iq_ksigns).
#ifndef TS_CUDA_QUANT_DECODE_CUH
#define TS_CUDA_QUANT_DECODE_CUH

extern "C" {
#include "common/half.h"
#include "quant/quant.h"
}

#include "cuda/iq_tables.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define TS_HD __host__ __device__ __forceinline__

namespace ts_cu {

// ---- the types, in one list ------------------------------------------------------------------
//
// The tier-1 types the CUDA kernels take: the plain ones, then the block-quantized ones. A kernel
// templated on the type is launched for a run-time type by
//   with_type(type, f)        f(type_tag<TYPE>{}) for any listed type, then true; false otherwise
//   with_block_type(type, f)  the same for the block-quantized types only
// (f is usually a generic lambda: [&](auto t) { launch<decltype(t)::value>(...); }).
// clang-format off
#define TS_CU_PLAIN_TYPES(X) X(TS_TYPE_F32) X(TS_TYPE_F16) X(TS_TYPE_BF16)
#define TS_CU_BLOCK_TYPES(X)                                                                      \
    X(TS_TYPE_Q8_0) X(TS_TYPE_Q4_0) X(TS_TYPE_Q4_1) X(TS_TYPE_Q5_0) X(TS_TYPE_Q5_1)              \
    X(TS_TYPE_IQ4_NL) X(TS_TYPE_IQ4_XS) X(TS_TYPE_Q4_K) X(TS_TYPE_Q5_K) X(TS_TYPE_Q6_K)          \
    X(TS_TYPE_Q2_K) X(TS_TYPE_Q3_K) X(TS_TYPE_IQ2_XXS) X(TS_TYPE_IQ2_XS) X(TS_TYPE_IQ2_S)        \
    X(TS_TYPE_IQ3_XXS) X(TS_TYPE_IQ3_S) X(TS_TYPE_IQ1_S) X(TS_TYPE_IQ1_M)
// clang-format on

template <uint32_t TYPE> struct type_tag { static constexpr uint32_t value = TYPE; };

#define TS_CU_TYPE_CASE(T)                                                                                   \
    case T:                                                                                                  \
        f(type_tag<T>{});                                                                                    \
        return true;

#pragma nv_exec_check_disable
template <class F> TS_HD bool with_block_type(uint32_t type, F &&f) {
    switch (type) {
        TS_CU_BLOCK_TYPES(TS_CU_TYPE_CASE)
    default:
        return false;
    }
}

#pragma nv_exec_check_disable
template <class F> TS_HD bool with_type(uint32_t type, F &&f) {
    switch (type) {
        TS_CU_PLAIN_TYPES(TS_CU_TYPE_CASE)
    default:
        return with_block_type(type, f);
    }
}
#undef TS_CU_TYPE_CASE

// ---- intrinsics with host versions -----------------------------------------------------------

// PRMT: byte n of the result is byte (s >> 4n) & 7 of the 8 bytes {y:x} (callers never set the
// sign-replicate bit 3 of a selector nibble).
TS_HD uint32_t ts_cu_prmt(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}

// (a & m) | c as one LOP3: written as two operations, the compiler emits an AND and an OR whenever m and c
// are both constants (a LOP3 takes one immediate), and the weight decoding is ~half such pairs.
TS_HD uint32_t ts_cu_and_or(uint32_t a, uint32_t m, uint32_t c) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(m), "r"(c)); // 0xEA = (F0 & CC) | AA
    return r;
#else
    return (a & m) | c;
#endif
}

// Low word of {hi:lo} >> (sh & 31).
TS_HD uint32_t ts_cu_funnel_r(uint32_t lo, uint32_t hi, uint32_t sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> (sh & 31));
#endif
}

TS_HD float ts_cu_bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
#endif
}

TS_HD float ts_cu_half_to_float(uint32_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
#else
    return ts_fp16_to_fp32(static_cast<uint16_t>(h));
#endif
}

// ---- helpers ---------------------------------------------------------------------------------

TS_HD uint32_t lds_u16(const uint8_t *p) {
    return *reinterpret_cast<const uint16_t *>(p);
}

// 32-bit little-endian word at a 2-byte aligned address.
TS_HD uint32_t lds_u32_a2(const uint8_t *p) {
    return lds_u16(p) | (lds_u16(p + 2) << 16);
}

// N consecutive little-endian words starting at a 2-byte aligned address: N + 1 aligned
// 32-bit loads and N funnel shifts (shift 0 when the address happens to be 4-byte aligned; the one
// extra word read then is unused and lies in the buffer's slack).
template <int N> TS_HD void lds_words_a2(const uint8_t *p, uint32_t (&w)[N]) {
    const unsigned mis = static_cast<unsigned>(reinterpret_cast<uintptr_t>(p) & 3u);
    const uint32_t *a = reinterpret_cast<const uint32_t *>(p - mis);
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) v[i] = a[i];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = ts_cu_funnel_r(v[i], v[i + 1], mis * 8);
}

// Four words from a 16-byte aligned address.
TS_HD void lds_words_a16(const uint8_t *p, uint32_t (&w)[4]) {
    const uint4 v = *reinterpret_cast<const uint4 *>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}

// Byte i of w as the float 2^23 + byte (exact): PRMT of the byte under the exponent of 2^23.
template <int I> TS_HD float byte_plus_2p23(uint32_t w) {
    return ts_cu_bits_to_float((ts_cu_prmt(w, 0x4B000000u, 0x7650u | I)));
}

// Spreads the 4 low bits of h to bit 4 of each byte (bit j -> bit 8j + 4): the fifth bit of 4
// quants. The four shifted copies of h occupy disjoint bit ranges, so the product has no carries.
TS_HD uint32_t spread4_to_bit4(uint32_t h) {
    return ((h & 0xFu) * 0x02040810u) & 0x10101010u;
}

// IQ4_NL codebook + 128 as unsigned bytes, four to a word (little-endian).
constexpr uint32_t iq4nl_word(int a, int b, int c, int d) {
    return static_cast<uint32_t>(a + 128) | static_cast<uint32_t>(b + 128) << 8 |
           static_cast<uint32_t>(c + 128) << 16 | static_cast<uint32_t>(d + 128) << 24;
}
constexpr uint32_t kIq4nl0 = iq4nl_word(-127, -104, -83, -65), kIq4nl1 = iq4nl_word(-49, -35, -22, -10),
                   kIq4nl2 = iq4nl_word(1, 13, 25, 38), kIq4nl3 = iq4nl_word(53, 69, 89, 113);

// The codebook bytes of the 4 nibbles in the low 16 bits of n (nibble i -> byte i): two
// permutes pick entry (nibble & 7) from each half of the table, a third picks the half by bit 3.
// Selectors are masked to 3 bits so no permute ever sees the sign-replicate bit.
TS_HD uint32_t iq4nl_lookup4(uint32_t n) {
    const uint32_t lo = ts_cu_prmt(kIq4nl0, kIq4nl1, n & 0x7777u);
    const uint32_t hi = ts_cu_prmt(kIq4nl2, kIq4nl3, n & 0x7777u);
    return ts_cu_prmt(lo, hi, 0x3210u | ((n & 0x8888u) >> 1));
}

// K-quant 6-bit scale and min j (0..7) of Q4_K / Q5_K from the 12 packed bytes (ts_scale_min_k4).
TS_HD void scale_min_k4(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q3_K 6-bit signed scale k (0..15) from the 12 packed bytes (dequant.c's q3_K_scale): low nibble
// from byte k (k < 8) or the high nibble of byte k − 8, top 2 bits from byte 8 + k % 4 at bit 2·(k / 4).
TS_HD int q3k_scale(const uint8_t *sc, int k) {
    const int low = k < 8 ? (sc[k] & 0xF) : (sc[k - 8] >> 4);
    const int high = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (low | (high << 4)) - 32;
}

// Four bytes 128 ± m: byte j of mag (each < 128) negated where bit j of s (its low 4 bits) is
// set, then + 128. The mask spreads bits j to bit 8j (shifted copies of s at 0, 7, 14, 21: no
// carries) and fills the byte; 0x80 − m never borrows (m ≤ 0x80).
TS_HD uint32_t signed_bytes_128(uint32_t mag, uint32_t s) {
    const uint32_t m = (((s & 0xFu) * 0x00204081u) & 0x01010101u) * 0xFFu;
    return ((0x80808080u - mag) & m) | ((0x80808080u | mag) & ~m);
}

// IQ1: four signed grid bytes g in {−1, 0, 1} (0xFF, 0, 1) as 8g ± 1 + 16, the sign of the ±1 by
// neg: g + 1 by a carry-free byte add (the top bit of each byte added apart), then 8(g + 1) + 8 ± 1.
TS_HD uint32_t iq1_bytes(uint32_t g, bool neg) {
    const uint32_t gp1 = ((g & 0x7F7F7F7Fu) + 0x01010101u) ^ (g & 0x80808080u); // 0, 1 or 2 a byte
    return (gp1 << 3) + (neg ? 0x07070707u : 0x09090909u);
}

// ---- per-type unit decoders ------------------------------------------------------------------
//
// qtype<T>: QK elements and BS bytes a block, UPB units a block (decode's k < UPB), BIAS,
// HAS_MIN, A16 (blocks 16-byte aligned whenever the row is) and XSW (which x_swizzle, below).

struct unit_t {
    uint32_t q[2][4];
    float scale[2];
    float min[2];
    int e[2]; // element offset of each run inside the block
};

// 16 bytes of packed nibbles into a unit's two runs: the low nibbles (run 0) and the high ones (run 1),
// one a byte.
TS_HD void nibble_runs(const uint32_t (&w)[4], unit_t &u) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        u.q[0][i] = w[i] & 0x0F0F0F0Fu;
        u.q[1][i] = (w[i] >> 4) & 0x0F0F0F0Fu;
    }
}

template <int TYPE> struct qtype;

// Q8_0: fp16 d, 32 int8 quants; w = d·q.
template <> struct qtype<TS_TYPE_Q8_0> {
    static constexpr int QK = 32, BS = 34, UPB = 1, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b));
        uint32_t w[8];
        lds_words_a2<8>(b + 2, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u.q[0][i] = w[i] ^ 0x80808080u; // int8 q -> q + 128
            u.q[1][i] = w[4 + i] ^ 0x80808080u;
        }
        u.scale[0] = u.scale[1] = d;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// Q4_0: byte j holds element j (low nibble) and j + 16 (high); w = d·(q − 8).
template <> struct qtype<TS_TYPE_Q4_0> {
    static constexpr int QK = 32, BS = 18, UPB = 1, BIAS = 8;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b));
        uint32_t w[4];
        lds_words_a2<4>(b + 2, w);
        nibble_runs(w, u);
        u.scale[0] = u.scale[1] = d;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// Q4_1: fp16 d, fp16 m, nibbles placed as Q4_0; w = d·q + m.
template <> struct qtype<TS_TYPE_Q4_1> {
    static constexpr int QK = 32, BS = 20, UPB = 1, BIAS = 0;
    static constexpr bool HAS_MIN = true, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b)), m = ts_cu_half_to_float(lds_u16(b + 2));
        uint32_t w[4];
        lds_words_a2<4>(b + 4, w);
        nibble_runs(w, u);
        u.scale[0] = u.scale[1] = d;
        u.min[0] = u.min[1] = m;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// IQ4_NL: nibbles placed as Q4_0, each an index into the codebook; w = d·kv[q].
template <> struct qtype<TS_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BS = 18, UPB = 1, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b));
        uint32_t w[4];
        lds_words_a2<4>(b + 2, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // nibbles of w in order: lo(qs[4i]), hi(qs[4i]), lo(qs[4i+1]), hi(qs[4i+1]), ...
            const uint32_t a = iq4nl_lookup4(w[i] & 0xFFFFu), c = iq4nl_lookup4(w[i] >> 16);
            u.q[0][i] = ts_cu_prmt(a, c, 0x6420u); // low nibbles: elements 4i .. 4i+3
            u.q[1][i] = ts_cu_prmt(a, c, 0x7531u); // high nibbles: elements 16+4i ..
        }
        u.scale[0] = u.scale[1] = d;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// IQ4_XS (136 bytes: fp16 d, uint16 scales_h at 2 — 2 high scale bits per 32 elements —,
// scales_l[4] at 4 — a low scale nibble per 32 elements, sub-block ib in nibble ib % 2 of byte
// ib / 2 —, qs[128] at 8): eight IQ4_NL blocks without their d. Unit k is sub-block k, nibbles of
// qs[16k .. 16k + 16) placed as IQ4_NL; w = (d·(ls − 32))·kv[q] with the 6-bit ls, the reference's
// two roundings (dl = d·(ls − 32) is the unit's scale). 136-byte blocks: 8-byte aligned at most.
template <> struct qtype<TS_TYPE_IQ4_XS> {
    static constexpr int QK = 256, BS = 136, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD int scale6(const uint8_t *b, int ib) {
        return ((b[4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xF) |
               static_cast<int>(((lds_u16(b + 2) >> (2 * ib)) & 3u) << 4);
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        const float dl = ts_cu_half_to_float(lds_u16(b)) * static_cast<float>(scale6(b, k) - 32);
        uint32_t w[4];
        lds_words_a2<4>(b + 8 + 16 * k, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t a = iq4nl_lookup4(w[i] & 0xFFFFu), c = iq4nl_lookup4(w[i] >> 16);
            u.q[0][i] = ts_cu_prmt(a, c, 0x6420u);
            u.q[1][i] = ts_cu_prmt(a, c, 0x7531u);
        }
        u.scale[0] = u.scale[1] = dl;
        u.e[0] = 32 * k;
        u.e[1] = 32 * k + 16;
    }
};

// Q5_0: nibbles as Q4_0, fifth bit of element j is bit j of the little-endian qh; w = d·(q − 16).
template <> struct qtype<TS_TYPE_Q5_0> {
    static constexpr int QK = 32, BS = 22, UPB = 1, BIAS = 16;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b));
        const uint32_t qh = lds_u32_a2(b + 2);
        uint32_t w[4];
        lds_words_a2<4>(b + 6, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u.q[0][i] = (w[i] & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (4 * i));
            u.q[1][i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (16 + 4 * i));
        }
        u.scale[0] = u.scale[1] = d;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// Q5_1: bits as Q5_0; w = d·q + m.
template <> struct qtype<TS_TYPE_Q5_1> {
    static constexpr int QK = 32, BS = 24, UPB = 1, BIAS = 0;
    static constexpr bool HAS_MIN = true, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void decode(const uint8_t *b, int, unit_t &u) {
        const float d = ts_cu_half_to_float(lds_u16(b)), m = ts_cu_half_to_float(lds_u16(b + 2));
        const uint32_t qh = lds_u32_a2(b + 4);
        uint32_t w[4];
        lds_words_a2<4>(b + 8, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u.q[0][i] = (w[i] & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (4 * i));
            u.q[1][i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (16 + 4 * i));
        }
        u.scale[0] = u.scale[1] = d;
        u.min[0] = u.min[1] = m;
        u.e[0] = 0;
        u.e[1] = 16;
    }
};

// Q4_K: unit k = (pair p = k/2, half l0 = 16·(k%2)) reads qs[32p + l0 .. +16): low nibbles are
// elements 64p + l0 + i (sub-block 2p), high nibbles 64p + 32 + l0 + i (sub-block 2p + 1).
// w = d·sc·q − dmin·m. Blocks are 144 bytes, so rows and blocks are 16-byte aligned.
template <> struct qtype<TS_TYPE_Q4_K> {
    static constexpr int QK = 256, BS = 144, UPB = 8, BIAS = 0;
    static constexpr bool HAS_MIN = true, A16 = true;
    static constexpr int XSW = 1;
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        const int p = k >> 1, l0 = 16 * (k & 1);
        const uint32_t dd = *reinterpret_cast<const uint32_t *>(b);
        const float d = ts_cu_half_to_float(dd & 0xFFFFu), dmin = ts_cu_half_to_float(dd >> 16);
        uint32_t w[4];
        lds_words_a16(b + 16 + 32 * p + l0, w);
        nibble_runs(w, u);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int sc, m;
            scale_min_k4(2 * p + r, b + 4, sc, m);
            u.scale[r] = d * static_cast<float>(sc);
            u.min[r] = -(dmin * static_cast<float>(m));
            u.e[r] = 64 * p + 32 * r + l0;
        }
    }
};

// Q5_K: low 4 bits as Q4_K (qs at 48), the fifth bit of element l of sub-block sb is bit sb of
// qh[l] (qh at 16). 176-byte blocks: 16-byte aligned.
template <> struct qtype<TS_TYPE_Q5_K> {
    static constexpr int QK = 256, BS = 176, UPB = 8, BIAS = 0;
    static constexpr bool HAS_MIN = true, A16 = true;
    static constexpr int XSW = 1;
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        const int p = k >> 1, l0 = 16 * (k & 1);
        const uint32_t dd = *reinterpret_cast<const uint32_t *>(b);
        const float d = ts_cu_half_to_float(dd & 0xFFFFu), dmin = ts_cu_half_to_float(dd >> 16);
        uint32_t w[4], h[4];
        lds_words_a16(b + 48 + 32 * p + l0, w);
        lds_words_a16(b + 16 + l0, h);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t hs = h[i] >> (2 * p); // bit 2p of each byte -> bit 0 of that byte
            u.q[0][i] = (w[i] & 0x0F0F0F0Fu) | ((hs << 4) & 0x10101010u);
            u.q[1][i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | ((hs << 3) & 0x10101010u);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int sc, m;
            scale_min_k4(2 * p + r, b + 4, sc, m);
            u.scale[r] = d * static_cast<float>(sc);
            u.min[r] = -(dmin * static_cast<float>(m));
            u.e[r] = 64 * p + 32 * r + l0;
        }
    }
};

// Q6_K: unit k = (half h = k/4, sp = (k/2)%2, hl = k%2, l0 = 16·hl) reads ql[64h + 32sp + l0 ..
// +16) and qh[32h + l0 .. +16): the low nibbles with qh bits 2sp are elements 128h + 32sp + l0 + i
// (s = sp), the high nibbles with qh bits 2sp + 4 are the same + 64 (s = sp + 2).
// w = d·scale[e/16]·(q − 32). 210-byte blocks: only 2-byte aligned.
template <> struct qtype<TS_TYPE_Q6_K> {
    static constexpr int QK = 256, BS = 210, UPB = 8, BIAS = 32;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 2;
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        const int h = k >> 2, sp = (k >> 1) & 1, hl = k & 1, l0 = 16 * hl;
        const float d = ts_cu_half_to_float(lds_u16(b + 208));
        uint32_t w[4], qh[4];
        lds_words_a2<4>(b + 64 * h + 32 * sp + l0, w);
        lds_words_a2<4>(b + 128 + 32 * h + l0, qh);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u.q[0][i] = (w[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sp)) & 0x03030303u) << 4);
            u.q[1][i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sp + 4)) & 0x03030303u) << 4);
        }
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192);
        u.scale[0] = d * static_cast<float>(sc[8 * h + 2 * sp + hl]);
        u.scale[1] = d * static_cast<float>(sc[8 * h + 2 * sp + 4 + hl]);
        u.e[0] = 128 * h + 32 * sp + l0;
        u.e[1] = u.e[0] + 64;
    }
};

// ---- the low-bit 256-element types: one run a call (see the header) --------------------------

// Unit k of a run-form type: runs 2k and 2k + 1, elements 32k .. 32k + 31 in order.
template <class Q> TS_HD void decode_runs(const uint8_t *b, int k, unit_t &u) {
    Q::run(b, 2 * k, u.q[0], u.scale[0], u.min[0]);
    Q::run(b, 2 * k + 1, u.q[1], u.scale[1], u.min[1]);
    u.e[0] = 32 * k;
    u.e[1] = 32 * k + 16;
}

// Q2_K (84 bytes: scales[16] at 0, qs[64] at 16, fp16 d at 80, dmin at 82): element 32s + l of
// half h (128 elements) is bits 2s..2s+1 of qs[32h + l]; run j (= sub-block j) has scale byte j:
// low nibble times d, high nibble times dmin the min. w = d·sc·q − dmin·m.
template <> struct qtype<TS_TYPE_Q2_K> {
    static constexpr int QK = 256, BS = 84, UPB = 8, BIAS = 0;
    static constexpr bool HAS_MIN = true, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int h = j >> 3, s = (j >> 1) & 3, l0 = 16 * (j & 1);
        uint32_t w[4];
        lds_words_a2<4>(b + 16 + 32 * h + l0, w);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (w[i] >> (2 * s)) & 0x03030303u;
        const uint32_t dd = lds_u32_a2(b + 80), sc = b[j];
        scale = ts_cu_half_to_float(dd & 0xFFFFu) * static_cast<float>(sc & 0xFu);
        min = -(ts_cu_half_to_float(dd >> 16) * static_cast<float>(sc >> 4));
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// Q3_K (110 bytes: hmask[32] at 0, qs[64] at 32, scales[12] at 96, fp16 d at 108): low 2 bits
// placed as Q2_K; the third bit of element 32s + l of half h is bit 4h + s of hmask[l] (clear:
// subtract 4). w = d·(sc − 32)·q, q in −4..3, stored as q + 4.
template <> struct qtype<TS_TYPE_Q3_K> {
    static constexpr int QK = 256, BS = 110, UPB = 8, BIAS = 4;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int h = j >> 3, s = (j >> 1) & 3, l0 = 16 * (j & 1);
        uint32_t w[4], hm[4];
        lds_words_a2<4>(b + 32 + 32 * h + l0, w);
        lds_words_a2<4>(b + l0, hm);
#pragma unroll
        for (int i = 0; i < 4; i++)
            q[i] = ((w[i] >> (2 * s)) & 0x03030303u) | (((hm[i] >> (4 * h + s)) & 0x01010101u) << 2);
        scale = ts_cu_half_to_float(lds_u16(b + 108)) * static_cast<float>(q3k_scale(b + 96, j));
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ2_XXS (66 bytes: fp16 d, then 8 bytes per 32 elements: 4 grid indices of its groups of 8, a
// uint32 of 4 × 7 sign bits and the scale in bits 28-31). w = d·(0.5 + s)·0.25·(±g).
template <> struct qtype<TS_TYPE_IQ2_XXS> {
    static constexpr int QK = 256, BS = 66, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const uint8_t *p = b + 2 + 8 * (j >> 1);
        const int r = j & 1;
        const uint32_t aux = lds_u32_a2(p + 4);
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int l = 2 * r + t;
            const uint64_t g = iq2xxs_grid(p[l]);
            const uint32_t sg = iq_ksigns(aux >> (7 * l));
            q[2 * t] = signed_bytes_128(static_cast<uint32_t>(g), sg);
            q[2 * t + 1] = signed_bytes_128(static_cast<uint32_t>(g >> 32), sg >> 4);
        }
        scale = ts_cu_half_to_float(lds_u16(b)) * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ2_XS (74 bytes: fp16 d, 32 uint16 at 2 — 9-bit grid index | 7-bit sign index << 9 — and
// scales[8] at 66: elements 0-15 of each 32 take the low nibble, 16-31 the high one).
template <> struct qtype<TS_TYPE_IQ2_XS> {
    static constexpr int QK = 256, BS = 74, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const uint32_t vv = lds_u32_a2(b + 2 + 4 * j); // groups 2j and 2j + 1
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t v = (vv >> (16 * t)) & 0xFFFFu;
            const uint64_t g = iq2xs_grid(v & 511u);
            const uint32_t sg = iq_ksigns(v >> 9);
            q[2 * t] = signed_bytes_128(static_cast<uint32_t>(g), sg);
            q[2 * t + 1] = signed_bytes_128(static_cast<uint32_t>(g >> 32), sg >> 4);
        }
        const uint32_t sc = (b[66 + (j >> 1)] >> (4 * (j & 1))) & 0xFu;
        scale = ts_cu_half_to_float(lds_u16(b)) * (0.5f + static_cast<float>(sc)) * 0.25f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ2_S (82 bytes: fp16 d, qs[64] at 2 — bytes 0-31 the low 8 bits of the 32 grid indices, 32-63
// their 8 sign bits — qh[8] at 66, 2 high index bits per group, scales[8] at 74 as IQ2_XS).
template <> struct qtype<TS_TYPE_IQ2_S> {
    static constexpr int QK = 256, BS = 82, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int ib = j >> 1, r = j & 1;
        const uint32_t qh = b[66 + ib];
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int g = 2 * j + t; // = 4·ib + 2r + t
            const uint32_t idx = b[2 + g] | (((qh >> (2 * (2 * r + t))) & 3u) << 8);
            const uint64_t gr = iq2s_grid(idx);
            const uint32_t sg = b[34 + g];
            q[2 * t] = signed_bytes_128(static_cast<uint32_t>(gr), sg);
            q[2 * t + 1] = signed_bytes_128(static_cast<uint32_t>(gr >> 32), sg >> 4);
        }
        const uint32_t sc = (b[74 + ib] >> (4 * r)) & 0xFu;
        scale = ts_cu_half_to_float(lds_u16(b)) * (0.5f + static_cast<float>(sc)) * 0.25f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ3_XXS (98 bytes: fp16 d, 64 grid indices of 4 elements at 2, then at 66 a uint32 per 32
// elements: 4 × 7 sign bits of its groups of 8 and the scale in bits 28-31).
// w = d·(0.5 + s)·0.5·(±g).
template <> struct qtype<TS_TYPE_IQ3_XXS> {
    static constexpr int QK = 256, BS = 98, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int ib = j >> 1, r = j & 1;
        const uint32_t aux = lds_u32_a2(b + 66 + 4 * ib), idx = lds_u32_a2(b + 2 + 4 * j);
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t sg = iq_ksigns(aux >> (7 * (2 * r + t)));
            q[2 * t] = signed_bytes_128(iq3xxs_grid((idx >> (16 * t)) & 0xFFu), sg);
            q[2 * t + 1] = signed_bytes_128(iq3xxs_grid((idx >> (16 * t + 8)) & 0xFFu), sg >> 4);
        }
        scale = ts_cu_half_to_float(lds_u16(b)) * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ3_S (110 bytes: fp16 d, qs[64] at 2 the low 8 bits of 64 grid indices of 4 elements, qh[8] at
// 66 their ninth bits (bit m of qh[ib] for index 8ib + m), signs[32] at 74 one bit an element,
// scales[4] at 106 a nibble per 32 elements). w = d·(1 + 2s)·(±g).
template <> struct qtype<TS_TYPE_IQ3_S> {
    static constexpr int QK = 256, BS = 110, UPB = 8, BIAS = 128;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int ib = j >> 1, r = j & 1;
        const uint32_t idx = lds_u32_a2(b + 2 + 4 * j), sg = lds_u16(b + 74 + 2 * j);
        const uint32_t qh = static_cast<uint32_t>(b[66 + ib]) >> (4 * r);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t id = ((idx >> (8 * i)) & 0xFFu) | (((qh >> i) & 1u) << 8);
            q[i] = signed_bytes_128(iq3s_grid(id), sg >> (4 * i));
        }
        const int sc = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xF;
        scale = ts_cu_half_to_float(lds_u16(b)) * static_cast<float>(1 + 2 * sc);
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ1_S (50 bytes: fp16 d, qs[32] at 2 the low 8 bits of 32 grid indices, at 34 a uint16 per 32
// elements: 3 high index bits per group, the scale in bits 12-14, the delta's sign in bit 15).
// w = d·(2s + 1)·(g ± 1/8) = (d·(2s + 1)/8)·(8g ± 1).
template <> struct qtype<TS_TYPE_IQ1_S> {
    static constexpr int QK = 256, BS = 50, UPB = 8, BIAS = 16;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int ib = j >> 1, r = j & 1;
        const uint32_t qh = lds_u16(b + 34 + 2 * ib);
        const bool neg = (qh & 0x8000u) != 0;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int l = 2 * r + t;
            const uint64_t g = iq1s_grid(b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8));
            q[2 * t] = iq1_bytes(static_cast<uint32_t>(g), neg);
            q[2 * t + 1] = iq1_bytes(static_cast<uint32_t>(g >> 32), neg);
        }
        const float dl = ts_cu_half_to_float(lds_u16(b)) * static_cast<float>(2 * ((qh >> 12) & 7u) + 1);
        scale = dl * 0.125f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// IQ1_M (56 bytes: qs[32] at 0 the low 8 bits of 32 grid indices, qh[16] at 32 a nibble per
// group — 3 high index bits and the delta's sign —, at 48 four uint16: 3-bit scales per 16
// elements in bits 0-11 and the fp16 super-scale d in their top nibbles, word 0 the lowest).
// w = d·(2s + 1)·(g ± 1/8), coded as IQ1_S.
template <> struct qtype<TS_TYPE_IQ1_M> {
    static constexpr int QK = 256, BS = 56, UPB = 8, BIAS = 16;
    static constexpr bool HAS_MIN = false, A16 = false;
    static constexpr int XSW = 0;
    static TS_HD void run(const uint8_t *b, int j, uint32_t (&q)[4], float &scale, float &min) {
        const int ib = j >> 1, r = j & 1;
        const uint32_t qh = b[32 + j]; // the nibbles of groups 2j and 2j + 1
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint32_t nib = (qh >> (4 * t)) & 0xFu;
            const uint64_t g = iq1s_grid(b[2 * j + t] | ((nib & 7u) << 8));
            q[2 * t] = iq1_bytes(static_cast<uint32_t>(g), (nib & 8u) != 0);
            q[2 * t + 1] = iq1_bytes(static_cast<uint32_t>(g >> 32), (nib & 8u) != 0);
        }
        const uint32_t s0 = lds_u16(b + 48), s1 = lds_u16(b + 50), s2 = lds_u16(b + 52), s3 = lds_u16(b + 54);
        const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u);
        const uint32_t sw = lds_u16(b + 48 + 2 * (ib >> 1));
        const uint32_t sc = (sw >> (6 * (ib & 1) + 3 * r)) & 7u;
        const float dl = ts_cu_half_to_float(dbits) * static_cast<float>(2 * sc + 1);
        scale = dl * 0.125f;
        min = 0.0f;
    }
    static TS_HD void decode(const uint8_t *b, int k, unit_t &u) {
        decode_runs<qtype>(b, k, u);
    }
};

// ---- x in shared memory ----------------------------------------------------------------------
//
// The kernels give each lane one unit, so in one 16-byte load of x the lanes of a quarter-warp
// read float4s 32, 64 or 128 bytes apart: in a plain layout they all hit the same 4 banks (an
// 8-way conflict). Staged x is therefore stored with float4 f at f ^ H((f >> 3) & 7), an XOR of
// the low 3 bits (a permutation inside each aligned group of 8 float4s, so any prefix of whole
// groups maps onto itself), with H chosen per unit layout so that the 8 lanes of a quarter-warp
// land in 8 distinct bank groups:
//   XSW 0, 32-element blocks, IQ4_XS and the run-form types (unit k = elements 32k .. 32k + 31):
//                             lane j reads f = 8j + c          -> H(v) = v
//   XSW 1, Q4_K / Q5_K:       lane k reads 16(k/2) + 4(k%2) + c -> H(v) = rotate v right by 1
//   XSW 2, Q6_K:              lane k reads 32(k/4) + 8((k/2)%2) + 4(k%2) + c -> H(v) = 2(v&1) + v/4
// (tests/cuda/test_cuda_decode.cu checks both properties). A run's 4 float4s f0 + i (f0 a
// multiple of 4) sit at x_swizzle(f0) ^ i.
template <int XSW> TS_HD uint32_t x_swizzle_h(uint32_t v) {
    if (XSW == 0) return v;
    if (XSW == 1) return (v >> 1) | ((v & 1u) << 2);
    return ((v & 1u) << 1) | ((v >> 2) & 1u);
}

template <class Q> TS_HD uint32_t x_swizzle(uint32_t f) {
    return f ^ x_swizzle_h<Q::XSW>((f >> 3) & 7u);
}

} // namespace ts_cu

#endif
