// The lane arithmetic of the tensor-core decode GEMV (gemv_tc.cu), host- and device-callable so that
// tests/cuda/test_gemv_tc_emul.cu runs the very same fragment builders on the CPU around an emulated
// mma.m16n8k16.f32.f16.f16.f32.
//
// The product y[t, o] = Σ_i W[o, i]·x[t, i] is cut into super-blocks of 256 inputs (the K-quants') and tiles of
// 8 output rows; one warp computes a (super-block, tile) with 16 + 1 MMAs of shape m16n8k16:
//   A (16 × 16, row-major): tokens × inputs, x in fp16, rows t ≥ T zero;
//   B (16 × 8, column-major): inputs × output rows, the integer weight q·sc (≤ 15·63 = 945, exact in fp16);
//   C (16 × 8, fp32): tokens × output rows.
// In the PTX fragment layout lane (g, t) = (lane / 4, lane % 4) holds A row g at k-slots 2t, 2t+1 (a0a1)
// and 2t+8, 2t+9 (a4a5), B column g at the same k-slots, and C row g at columns 2t, 2t+1.
// Which input sits in which k-slot is ours to choose (x is staged in the same order): lane t feeds
// sub-blocks 2t and 2t+1 of the super-block, so it needs only their two 6-bit scales and mins, and the
// 64 inputs 64t .. 64t+63 are exactly the low (sub-block 2t) and high (2t+1) nibbles of the qs bytes
// 32t .. 32t+31 (Q4_K, Q5_K). MMA m = 2i + h (i = 0..7, h = 0 low / 1 high nibbles) takes word i of those bytes:
// elements 4i, 4i+2 of the sub-block in slots 2t, 2t+1 and 4i+1, 4i+3 in slots 2t+8, 2t+9.
//
// Exactness: the nibbles become fp16 1024 + q (low) or 1024 + 16q (high) by OR-ing them under 0x6400,
// and one HFMA2 each, (1024 + q)·sc − 1024·sc or (1024 + 16q)·(sc/16) − 64·sc, gives q·sc exactly (the
// fused result is an integer ≤ 945). x is scaled per (token, super-block) by a power of two 2^s that
// puts max|x| in [2^14, 2^15) and rounded to fp16 once (the precision policy's one rounding of an
// activation; relative error ≤ 2^-11 per element); the MMA sums exactly-representable products in fp32.
// The K-quant min term dmin·Σ_j m_j·Σx_j is a 17th MMA: B = m_j in slots of sub-block j (both halves),
// A = Σx_j·2^-6 split into fp16 hi + lo (≈ 2^-22 relative). Per super-block the warp then adds
//     y += 2^-s · (d·C − 64·dmin·C_min)
// in fp32 for token g, rows 2t and 2t + 1.
#ifndef TS_CUDA_GEMV_TC_CUH
#define TS_CUDA_GEMV_TC_CUH

#include "cuda/quant_decode.cuh"

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

namespace ts_cu {

constexpr int kTcSuper = 256; // inputs a super-block
constexpr int kTcXsLane = 32; // u32 of staged x per (token, super-block, lane t): 16 MMAs × a0a1, a4a5
constexpr int kTcXsSuper = 4 * kTcXsLane; // u32 per (token, super-block)

// ---- fp16 pairs (a u32 holds two fp16: low half first) ---------------------------------------------
#ifdef __CUDA_ARCH__
TS_HD uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
    __half2 r = __hfma2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b),
                        *reinterpret_cast<__half2 *>(&c));
    return *reinterpret_cast<uint32_t *>(&r);
}
TS_HD uint32_t h2_mul(uint32_t a, uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}
TS_HD uint32_t h2_sub(uint32_t a, uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<__half2 *>(&a), *reinterpret_cast<__half2 *>(&b));
    return *reinterpret_cast<uint32_t *>(&r);
}
TS_HD uint32_t h2_pack(float lo, float hi) {
    __half2 r = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&r);
}
#else
// Host emulation: the operations the kernel uses are exact or round once; double then fp16 rounding is
// the same single rounding for the magnitudes involved (the tests use it on exact integers and on x).
static inline float h_lo(uint32_t a) {
    return ts_fp16_to_fp32((uint16_t)(a & 0xFFFFu));
}
static inline float h_hi(uint32_t a) {
    return ts_fp16_to_fp32((uint16_t)(a >> 16));
}
static inline uint32_t h_pair(double lo, double hi) {
    return (uint32_t)ts_fp32_to_fp16((float)lo) | ((uint32_t)ts_fp32_to_fp16((float)hi) << 16);
}
static inline uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
    return h_pair((double)h_lo(a) * h_lo(b) + h_lo(c), (double)h_hi(a) * h_hi(b) + h_hi(c));
}
static inline uint32_t h2_mul(uint32_t a, uint32_t b) {
    return h_pair((double)h_lo(a) * h_lo(b), (double)h_hi(a) * h_hi(b));
}
static inline uint32_t h2_sub(uint32_t a, uint32_t b) {
    return h_pair((double)h_lo(a) - h_lo(b), (double)h_hi(a) - h_hi(b));
}
static inline uint32_t h2_pack(float lo, float hi) {
    return h_pair(lo, hi);
}
#endif

// ---- division by a launch's constant ---------------------------------------------------------------
//
// n / d for 0 ≤ n < 2^31 as one multiply-high and a shift (the chunk lists divide a chunk's index by counts
// known at launch; a division by a runtime int is ~25 instructions, and every warp makes several a chunk):
// with l = ⌈log2 d⌉ and m = ⌈2^(31+l) / d⌉ < 2^32, m·d − 2^(31+l) < d, so n·m / 2^(31+l) exceeds n / d by
// less than n / 2^(31+l) < 1/d and has the same floor.
struct tc_div {
    uint32_t d = 1, mul = 0, shr = 0; // d = 1: n itself
    tc_div() = default;
    explicit tc_div(uint32_t den) : d(den < 1 ? 1 : den) {
        if (d == 1) return;
        uint32_t l = 0;
        while ((1ull << l) < d) l++;
        mul = static_cast<uint32_t>(((1ull << (31 + l)) + d - 1) / d);
        shr = l - 1;
    }
    TS_HD int div(int n) const {
#ifdef __CUDA_ARCH__
        return d == 1 ? n : static_cast<int>(__umulhi(static_cast<uint32_t>(n), mul) >> shr);
#else
        return d == 1 ? n : static_cast<int>(((static_cast<uint64_t>(n) * mul) >> 32) >> shr);
#endif
    }
};

// ---- Q4_K, Q5_K: the B fragments of one (super-block, tile) for lane (g, t) -------------------------
//
// Both start with d, dmin (fp16) and the 12 bytes of 6-bit scales and mins; Q4_K's 128 qs bytes follow at
// 16, Q5_K's at 48 after 32 qh bytes whose bit j of byte l is the fifth bit of element l of sub-block j.
// Q5_K's fifth bit lands at bit 4 (low nibbles: 1024 + q) or bit 8 (high nibbles: 1024 + 16q) of the
// fp16, so q ≤ 31 and q·sc ≤ 1953 stay exact.
template <int TYPE> struct tc_kquant;
template <> struct tc_kquant<TS_TYPE_Q4_K> {
    static constexpr int BS = 144, QS = 16;
    static constexpr bool QH = false;
};
template <> struct tc_kquant<TS_TYPE_Q5_K> {
    static constexpr int BS = 176, QS = 48;
    static constexpr bool QH = true;
};

// The 16-byte words of one (super-block, row) that lane t decodes: the header (d, dmin, the scales and mins),
// qs bytes 32t .. 32t + 31 and (Q5_K) the 32 qh bytes; zeros where the type has none.
struct kq_words {
    uint4 hdr, qa, qb, ha, hb;
};
// sb: the super-block of row g, 16-byte aligned.
template <int TYPE> TS_HD kq_words kq_words_at(const uint8_t *sb, int t) {
    using Q = tc_kquant<TYPE>;
    const uint4 *v = reinterpret_cast<const uint4 *>(sb);
    const uint4 zero = {0u, 0u, 0u, 0u};
    return {v[0], v[Q::QS / 16 + 2 * t], v[Q::QS / 16 + 2 * t + 1], Q::QH ? v[1] : zero, Q::QH ? v[2] : zero};
}

// B[m][0..1]: b0b1, b2b3 of MMA m (m = 2i + h); Bmin: b0b1 (= b2b3) of the min MMA; from the words of the
// super-block of row g (kq_words_at).
template <int TYPE>
TS_HD void kquant_b_frags(const kq_words &w, int t, uint32_t (&B)[16][2], uint32_t &Bmin) {
    using Q = tc_kquant<TYPE>;
    const uint4 hdr = w.hdr, qa = w.qa, qb = w.qb;
    const uint32_t s0 = hdr.y, s1 = hdr.z, s2 = hdr.w;
    // the 6-bit scales and mins of sub-blocks 4(t/2) .. 4(t/2)+3 as bytes (ts_scale_min_k4)
    // (both forms, then a select: lanes t differ within a warp, and a branch here splits the MMA chains'
    // basic block)
    const uint32_t scw_lo = s0 & 0x3F3F3F3Fu, mw_lo = s1 & 0x3F3F3F3Fu;
    const uint32_t scw_hi = (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t mw_hi = ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
    const uint32_t scw = t < 2 ? scw_lo : scw_hi, mw = t < 2 ? mw_lo : mw_hi;
    const uint32_t ba = static_cast<uint32_t>(2 * t) & 3u; // byte of sub-block 2t in those words
    const uint32_t k1024 = 0x64006400u;
    // {sc, sc} and {m_2t, m_2t+1} as fp16: the bytes under 0x64 (1024 + v), minus 1024
    const uint32_t sca = h2_sub(ts_cu_prmt(scw, 0x64u, ba | 0x40u | (ba << 8) | 0x4000u), k1024);
    const uint32_t scb = h2_sub(ts_cu_prmt(scw, 0x64u, (ba + 1) | 0x40u | ((ba + 1) << 8) | 0x4000u), k1024);
    Bmin = h2_sub(ts_cu_prmt(mw, 0x64u, ba | 0x40u | ((ba + 1) << 8) | 0x4000u), k1024);
    const uint32_t ka = h2_mul(sca, 0xE400E400u);    // −1024·sc_a
    const uint32_t scb16 = h2_mul(scb, 0x2C002C00u); // sc_b / 16
    const uint32_t kb = h2_mul(scb, 0xD400D400u);    // −64·sc_b
    const uint32_t qs[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    uint32_t qh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (Q::QH) {
        const uint4 ha = w.ha, hb = w.hb;
        const uint32_t h[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
        for (int i = 0; i < 8; i++) qh[i] = h[i] >> (2 * t); // bits 2t, 2t+1 of each byte at 0, 1
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t q = qs[i], q8 = q >> 8, h = qh[i], h8 = h >> 8;
        // the fifth bits: bit 0 → 4 (low nibbles), bit 1 → 8 (high nibbles), bytes 0, 2 (h) and 1, 3 (h8)
        // (one LOP3 each for Q4_K, two for Q5_K: ts_cu_and_or)
        const uint32_t lo02 =
            ts_cu_and_or(q, 0x000F000Fu, Q::QH ? ts_cu_and_or(h << 4, 0x00100010u, k1024) : k1024);
        const uint32_t lo13 =
            ts_cu_and_or(q8, 0x000F000Fu, Q::QH ? ts_cu_and_or(h8 << 4, 0x00100010u, k1024) : k1024);
        const uint32_t hi02 =
            ts_cu_and_or(q, 0x00F000F0u, Q::QH ? ts_cu_and_or(h << 7, 0x01000100u, k1024) : k1024);
        const uint32_t hi13 =
            ts_cu_and_or(q8, 0x00F000F0u, Q::QH ? ts_cu_and_or(h8 << 7, 0x01000100u, k1024) : k1024);
        B[2 * i][0] = h2_fma(lo02, sca, ka);       // elements 4i, 4i+2 of sub-block 2t
        B[2 * i][1] = h2_fma(lo13, sca, ka);       // 4i+1, 4i+3
        B[2 * i + 1][0] = h2_fma(hi02, scb16, kb); // the same of sub-block 2t+1
        B[2 * i + 1][1] = h2_fma(hi13, scb16, kb);
    }
}
template <int TYPE>
TS_HD void kquant_b_frags(const uint8_t *sb, int t, uint32_t (&B)[16][2], uint32_t &Bmin) {
    kquant_b_frags<TYPE>(kq_words_at<TYPE>(sb, t), t, B, Bmin);
}

// ---- x: one staging unit = (token, super-block, lane t, quarter q): 16 inputs ----------------------
//
// Lane t's 64 inputs 64t .. 64t+63 are four quarters q: sub-block half h = q / 2 (sub-block 2t + h),
// its elements 16j .. 16j+15 with j = q % 2: words i = 4j .. 4j+3 of MMAs 2i + h.

// The power of two that puts amax in [2^14, 2^15) (1 for zero; inf and NaN pass through as they are):
// returns 2^s and sets inv = 2^-s.
TS_HD float tc_x_scale(float amax, float &inv) {
#ifdef __CUDA_ARCH__
    const uint32_t bits = __float_as_uint(amax);
#else
    uint32_t bits;
    memcpy(&bits, &amax, sizeof bits);
#endif
    int e = static_cast<int>((bits >> 23) & 0xFF); // biased exponent of amax
    e = e < 15 ? 15 : e > 254 ? 254 : e;           // 2^s and 2^-s both normal
    const int s = 141 - e;                         // 14 − (e − 127)
    inv = ts_cu_bits_to_float(static_cast<uint32_t>(127 - s) << 23);
    return ts_cu_bits_to_float(static_cast<uint32_t>(127 + s) << 23);
}

// x16: the quarter's inputs (fp32), scale = 2^s. Writes its 8 A words, a[2ii] = a0a1 and a[2ii + 1] =
// a4a5 of MMA 2(4j + ii) + h (ii = 0..3), and returns the sum of its 16 rounded values.
TS_HD float tc_x_quarter(const float *x16, float scale, uint32_t (&a)[8]) {
    float sum = 0.0f;
#pragma unroll
    for (int ii = 0; ii < 4; ii++) {
        const float *e = x16 + 4 * ii;
        const uint32_t p02 = h2_pack(e[0] * scale, e[2] * scale), p13 = h2_pack(e[1] * scale, e[3] * scale);
        a[2 * ii] = p02;
        a[2 * ii + 1] = p13;
#ifdef __CUDA_ARCH__
        const float2 f02 = __half22float2(*reinterpret_cast<const __half2 *>(&p02));
        const float2 f13 = __half22float2(*reinterpret_cast<const __half2 *>(&p13));
        sum += (f02.x + f13.x) + (f02.y + f13.y);
#else
        sum += (h_lo(p02) + h_lo(p13)) + (h_hi(p02) + h_hi(p13));
#endif
    }
    return sum;
}

// The min MMA's A words from the sums of sub-blocks 2t and 2t + 1: a0a1 = hi, a4a5 = lo of Σ·2^-6
// (the factor keeps 32 values of up to 2^15 within fp16's range; hi + lo carries ~22 bits).
TS_HD void tc_x_sums(float sum0, float sum1, uint32_t &hi, uint32_t &lo) {
    const float s0 = sum0 * 0.015625f, s1 = sum1 * 0.015625f;
    hi = h2_pack(s0, s1);
#ifdef __CUDA_ARCH__
    const float2 h = __half22float2(*reinterpret_cast<const __half2 *>(&hi));
    lo = h2_pack(s0 - h.x, s1 - h.y);
#else
    lo = h2_pack(s0 - h_lo(hi), s1 - h_hi(hi));
#endif
}

// ---- 16-input MMAs in input order: Q8_0, Q5_0, Q6_K -------------------------------------------------
//
// Types whose scales change every 16 or 32 inputs (Q6_K: an int8 scale per 16, Q8_0 and Q5_0: an fp16 d
// per 32) cannot fold the scale into an exact fp16 B (31·127 is odd and above 2048). So here MMA m takes
// the inputs 16m .. 16m + 15 of a group, in order (lane (g, t): inputs 2t, 2t+1 in a0a1 / b0b1 and 2t+8,
// 2t+9 in a4a5 / b2b3), B holds the quant itself (an integer ≤ 128 in magnitude, exact in fp16), and
// each MMA's fp32 result is scaled by its own scale: Q6_K acc += sc_m·C_m over the super-block's 16
// MMAs, then y += 2^-s·d·acc; Q8_0 / Q5_0 y += 2^-s·d·(C_2b + C_2b+1) per block b. x is staged per group
// of 16·M inputs with one power-of-two scale (tc_x_scale), as above.

// A words of lane t for one MMA: x16 are its 16 inputs (fp32), scale = 2^s.
TS_HD void tc_x_inorder(const float *x16, float scale, int t, uint32_t &a01, uint32_t &a45) {
    a01 = h2_pack(x16[2 * t] * scale, x16[2 * t + 1] * scale);
    a45 = h2_pack(x16[2 * t + 8] * scale, x16[2 * t + 9] * scale);
}

template <int TYPE> struct tc_inorder;
template <> struct tc_inorder<TS_TYPE_Q8_0> {
    static constexpr int BS = 34, QK = 32; // d, then 32 int8
};
template <> struct tc_inorder<TS_TYPE_Q5_0> {
    static constexpr int BS = 22, QK = 32; // d, 32 fifth bits, 16 bytes of nibbles
};
template <> struct tc_inorder<TS_TYPE_Q6_K> {
    static constexpr int BS = 210, QK = 256; // ql[128], qh[64], int8 scales[16], d
};

// The fp16 pair (u0 − off, u1 − off) of u01's bytes 0 and 1 (each < 256): one PRMT puts them under 0x64
// (1024 + u0, 1024 + u1), one exact subtraction; off16 = {1024 + off, 1024 + off} in fp16.
TS_HD uint32_t tc_pair_u8x2(uint32_t u01, uint32_t off16) {
    return h2_sub(ts_cu_prmt(u01, 0x64u, 0x4140u), off16);
}

// B words of lane t for MMA m of the block at blk (Q8_0, Q5_0: m = 0, 1, the block's halves; Q6_K:
// m = 0 .. 15, its sub-blocks): the quants of inputs 16m + 2t, +1 (b01) and 16m + 2t + 8, +9 (b23).
// Each pair of inputs is two neighbouring bytes (blk is 2-byte aligned: the block sizes are even), read
// as one 16-bit word, and the pair's two unsigned quants are made in that word's bytes (tc_pair_u8x2).
// Callers unroll m, so the shifts that depend on it are constants.
template <int TYPE>
TS_HD void inorder_b_frag(const uint8_t *blk, int m, int t, uint32_t &b01, uint32_t &b23) {
    const int j = 2 * t;        // inputs j, j + 1, j + 8, j + 9 of the MMA
    if (TYPE == TS_TYPE_Q8_0) { // int8 q → 128 + q as a byte: (1024 + 128 + q) − 1152
        const uint8_t *q = blk + 2 + 16 * m + j;
        b01 = tc_pair_u8x2(lds_u16(q) ^ 0x8080u, 0x64806480u);
        b23 = tc_pair_u8x2(lds_u16(q + 8) ^ 0x8080u, 0x64806480u);
    } else if (TYPE == TS_TYPE_Q5_0) {
        // element e = 16m + j + k: nibble (low for m = 0) of qs[j + k], fifth bit = bit e of qh; the fifth
        // bits of a pair (h bits 0, 1) go to bits 4 and 12 by one multiply: (h & 3)·0x810 has bit 0 at 4
        // and 11, bit 1 at 5 and 12, so & 0x1010 keeps bits 4 and 12
        const uint32_t qh = lds_u32_a2(blk + 2), sh = 4u * static_cast<uint32_t>(m);
        const uint8_t *qs = blk + 6 + j;
        const uint32_t h = qh >> (16 * m + j), h8 = qh >> (16 * m + j + 8);
        const uint32_t u = ((lds_u16(qs) >> sh) & 0x0F0Fu) | (((h & 3u) * 0x810u) & 0x1010u);
        const uint32_t u8 = ((lds_u16(qs + 8) >> sh) & 0x0F0Fu) | (((h8 & 3u) * 0x810u) & 0x1010u);
        b01 = tc_pair_u8x2(u, 0x64106410u); // u − 16
        b23 = tc_pair_u8x2(u8, 0x64106410u);
    } else { // Q6_K: element 128n + 32q + l from ql[64n + 32(q & 1) + l] (high nibble for q ≥ 2) and qh[32n + l]
        const int n = m >> 3, q = (m & 7) >> 1, l = 16 * (m & 1) + j;
        const uint8_t *ql = blk + 64 * n + 32 * (q & 1) + l, *qh = blk + 128 + 32 * n + l;
        const int sl = q >= 2 ? 4 : 0, sh = 2 * q; // qh bits sh, sh + 1 of each byte → bits 4, 5
        auto pair = [&](int k) {
            const uint32_t h = lds_u16(qh + k), hs = sh <= 4 ? h << (4 - sh) : h >> (sh - 4);
            return ((lds_u16(ql + k) >> sl) & 0x0F0Fu) | (hs & 0x3030u);
        };
        b01 = tc_pair_u8x2(pair(0), 0x64206420u); // u − 32
        b23 = tc_pair_u8x2(pair(8), 0x64206420u);
    }
}

// Both MMAs of a Q8_0 or Q5_0 block (m = 0, 1; the words of inorder_b_frag). Q5_0's pairs share their loads:
// the four quant bytes of lane t (qs[j], qs[j + 1], qs[j + 8], qs[j + 9]) as one word, whose low nibbles are
// MMA 0's and high nibbles MMA 1's, and qh >> j, whose bytes 0..3 hold the fifth bits of MMA 0's pairs
// (bits 0, 1 and 8, 9) and MMA 1's (16, 17 and 24, 25); each MMA's two bytes of fifth bits go to the 16-bit
// halves of one word, and (h & 3)·0x810 & 0x1010 moves a half's bits 0, 1 to 4 and 12, as inorder_b_frag does
// a pair at a time.
template <int TYPE>
TS_HD void inorder_b_frags2(const uint8_t *blk, int t, uint32_t (&b01)[2], uint32_t (&b23)[2]) {
    if (TYPE == TS_TYPE_Q5_0) {
        const int j = 2 * t;
        const uint32_t qh = lds_u32_a2(blk + 2) >> j;
        const uint32_t w = ts_cu_prmt(lds_u16(blk + 6 + j), lds_u16(blk + 14 + j), 0x5410u);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            const uint32_t h = ts_cu_prmt(qh, 0u, m ? 0x4342u : 0x4140u); // its two bytes in the two halves
            const uint32_t f = ((h & 0x00030003u) * 0x810u) & 0x10101010u;
            const uint32_t u = ts_cu_and_or(m ? w >> 4 : w, 0x0F0F0F0Fu, f);
            b01[m] = h2_sub(ts_cu_prmt(u, 0x64u, 0x4140u), 0x64106410u); // u − 16, bytes 0, 1
            b23[m] = h2_sub(ts_cu_prmt(u, 0x64u, 0x4342u), 0x64106410u); // bytes 2, 3
        }
    } else {
        inorder_b_frag<TYPE>(blk, 0, t, b01[0], b23[0]);
        inorder_b_frag<TYPE>(blk, 1, t, b01[1], b23[1]);
    }
}

} // namespace ts_cu

#endif
