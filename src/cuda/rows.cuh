// Element-wise dequantization of one row of a weight in its GGUF encoding, for the kernels that
// gather rows rather than multiply them: the token embedding (ops.cu, ts_cuda_embed) and the PLE
// n-gram table (ple.cu).
//
// Design: clarity over speed. row_elem<TYPE>(row, i) decodes element i of a row on its own: it
// finds the element's block (i / QK), reads the block's scale bytes and the element's quant bits
// with plain byte loads (block formats are only 2-byte aligned, and a table may live in mapped
// host memory), and applies the scale arithmetic of ts_dequantize_row (src/quant/dequant.c) in the
// same order with explicitly rounded operations (__fmul_rn, __fadd_rn: nvcc would otherwise fuse
// `d·q − m` into one FMA), so every value is bit-identical to the CPU's ts_cpu_get_row. Threads of
// a warp decode consecutive elements, so the byte loads of a warp coalesce and the shared scale
// bytes are broadcast. Gathers are a negligible part of a forward pass: no staging, no vectors.
//
// Everything is __host__ __device__, so a host test can compare it with ts_dequantize_row without a
// GPU (as tests/cuda/test_cuda_decode.cu does for quant_decode.cuh).
//
// API (namespace ts_cu):
//   row_type_supported(type)              whether the type is one of the types below
//   row_elem<TYPE>(row, i)                element i of a row of a compile-time type
//   row_value(type, row, i)               the same with a run-time type (one switch)
//   row_for_each(type, row, n, first, step, store)
//                                         store(i, value) for i = first, first + step, ... < n,
//                                         the type switched on once (a thread's share of a row)
//   tensor_row(t, r)                      first byte of row r of a ts_cuda_tensor
// Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q4_K, Q5_K, Q6_K, and the
// low-bit Q2_K, Q3_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (grids from
// iq_tables.cuh). Q4_1 and IQ4_XS are checked on the host (test_cuda_decode, test_cuda_gemm_decode)
// but not yet on a GPU. `row` is the first byte of the row (F32 rows 4-byte aligned, F16/BF16
// 2-byte aligned; block formats any alignment).
#ifndef TS_CUDA_ROWS_CUH
#define TS_CUDA_ROWS_CUH

#include "cuda/matmul.h"
#include "cuda/quant_decode.cuh"

#include <stdint.h>
#include <string.h>

namespace ts_cu {

// ---- exactly rounded arithmetic (no contraction into FMA on the device) ----------------------

TS_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float p = a * b; // a separate rounding on the host too
    return p;
#endif
}
TS_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
TS_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// ---- byte loads ------------------------------------------------------------------------------

TS_HD uint32_t ld_u16le(const uint8_t *p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}
TS_HD uint32_t ld_u32le(const uint8_t *p) {
    return ld_u16le(p) | (ld_u16le(p + 2) << 16);
}
TS_HD float ld_half(const uint8_t *p) {
    return ts_cu_half_to_float(ld_u16le(p));
}

// The IQ4_NL codebook entry of nibble q (ggml's kvalues_iq4nl): byte 0 of quant_decode.cuh's
// register-table lookup, which holds the entry + 128 (no array in local memory).
TS_HD int iq4nl_value(int q) {
    return static_cast<int>(iq4nl_lookup4(static_cast<uint32_t>(q) & 0xFu) & 0xFFu) - 128;
}

// ---- one element per format -------------------------------------------------------------------
//
// row_format<TYPE>: QK elements and BS bytes a block; value(blk, j) is element j (< QK) of the
// block at blk, as the matching dequant_* of src/quant/dequant.c computes it.

template <uint32_t TYPE> struct row_format;

template <> struct row_format<TS_TYPE_F32> {
    static constexpr int QK = 1, BS = 4;
    static TS_HD float value(const uint8_t *b, int) { return *reinterpret_cast<const float *>(b); }
};

template <> struct row_format<TS_TYPE_F16> {
    static constexpr int QK = 1, BS = 2;
    static TS_HD float value(const uint8_t *b, int) {
        return ts_cu_half_to_float(*reinterpret_cast<const uint16_t *>(b));
    }
};

template <> struct row_format<TS_TYPE_BF16> {
    static constexpr int QK = 1, BS = 2;
    static TS_HD float value(const uint8_t *b, int) {
        return ts_cu_bits_to_float(static_cast<uint32_t>(*reinterpret_cast<const uint16_t *>(b)) << 16);
    }
};

// Q8_0: fp16 d, 32 int8 quants; y = q·d.
template <> struct row_format<TS_TYPE_Q8_0> {
    static constexpr int QK = 32, BS = 34;
    static TS_HD float value(const uint8_t *b, int j) {
        return mul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), ld_half(b));
    }
};

// Q4_0: fp16 d, byte j of qs holds element j (low nibble) and j + 16 (high); y = (q − 8)·d.
template <> struct row_format<TS_TYPE_Q4_0> {
    static constexpr int QK = 32, BS = 18;
    static TS_HD float value(const uint8_t *b, int j) {
        const int q = (b[2 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf;
        return mul_rn(static_cast<float>(q - 8), ld_half(b));
    }
};

// Q4_1: fp16 d, fp16 m, nibbles as Q4_0; y = q·d + m.
template <> struct row_format<TS_TYPE_Q4_1> {
    static constexpr int QK = 32, BS = 20;
    static TS_HD float value(const uint8_t *b, int j) {
        const int q = (b[4 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf;
        return add_rn(mul_rn(static_cast<float>(q), ld_half(b)), ld_half(b + 2));
    }
};

// IQ4_NL: nibbles placed as Q4_0, each an index into the codebook; y = d·kv[q].
template <> struct row_format<TS_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BS = 18;
    static TS_HD float value(const uint8_t *b, int j) {
        const int q = (b[2 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf;
        return mul_rn(ld_half(b), static_cast<float>(iq4nl_value(q)));
    }
};

// IQ4_XS: fp16 d, uint16 scales_h at 2, scales_l[4] at 4, qs[128] at 8; sub-block ib = j / 32 has
// the 6-bit scale ls (qtype<IQ4_XS>::scale6) and its nibbles placed as IQ4_NL in qs[16ib ..];
// y = (d·(ls − 32))·kv[q].
template <> struct row_format<TS_TYPE_IQ4_XS> {
    static constexpr int QK = 256, BS = 136;
    static TS_HD float value(const uint8_t *b, int j) {
        const int ib = j >> 5, l = j & 31;
        const float dl = mul_rn(ld_half(b), static_cast<float>(qtype<TS_TYPE_IQ4_XS>::scale6(b, ib) - 32));
        const int q = (b[8 + 16 * ib + (l & 15)] >> (l < 16 ? 0 : 4)) & 0xf;
        return mul_rn(dl, static_cast<float>(iq4nl_value(q)));
    }
};

// Q5_0: fp16 d, u32 qh (bit j = fifth bit of element j), nibbles as Q4_0; y = (q − 16)·d.
template <> struct row_format<TS_TYPE_Q5_0> {
    static constexpr int QK = 32, BS = 22;
    static TS_HD float value(const uint8_t *b, int j) {
        const uint32_t qh = ld_u32le(b + 2);
        const int q = ((b[6 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
        return mul_rn(static_cast<float>(q - 16), ld_half(b));
    }
};

// Q5_1: fp16 d, fp16 m, qh and nibbles as Q5_0; y = q·d + m.
template <> struct row_format<TS_TYPE_Q5_1> {
    static constexpr int QK = 32, BS = 24;
    static TS_HD float value(const uint8_t *b, int j) {
        const uint32_t qh = ld_u32le(b + 4);
        const int q = ((b[8 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
        return add_rn(mul_rn(static_cast<float>(q), ld_half(b)), ld_half(b + 2));
    }
};

// Q4_K: fp16 d, fp16 dmin, 12 packed scale/min bytes, 128 bytes qs. Sub-block sb = j / 32 (6-bit
// scale sc, min m); element l of it is nibble sb % 2 of qs[32·(sb / 2) + l];
// y = (d·sc)·q − (dmin·m).
template <> struct row_format<TS_TYPE_Q4_K> {
    static constexpr int QK = 256, BS = 144;
    static TS_HD float value(const uint8_t *b, int j) {
        const int sb = j >> 5, l = j & 31;
        int sc, m;
        scale_min_k4(sb, b + 4, sc, m);
        const float dl = mul_rn(ld_half(b), static_cast<float>(sc));
        const float ml = mul_rn(ld_half(b + 2), static_cast<float>(m));
        const int q = (b[16 + 32 * (sb >> 1) + l] >> (4 * (sb & 1))) & 0xf;
        return sub_rn(mul_rn(dl, static_cast<float>(q)), ml);
    }
};

// Q5_K: as Q4_K with qh[32] at 16 and qs at 48; the fifth bit of element l of sub-block sb is bit
// sb of qh[l].
template <> struct row_format<TS_TYPE_Q5_K> {
    static constexpr int QK = 256, BS = 176;
    static TS_HD float value(const uint8_t *b, int j) {
        const int sb = j >> 5, l = j & 31;
        int sc, m;
        scale_min_k4(sb, b + 4, sc, m);
        const float dl = mul_rn(ld_half(b), static_cast<float>(sc));
        const float ml = mul_rn(ld_half(b + 2), static_cast<float>(m));
        const int q =
            ((b[48 + 32 * (sb >> 1) + l] >> (4 * (sb & 1))) & 0xf) + (((b[16 + l] >> sb) & 1) ? 16 : 0);
        return sub_rn(mul_rn(dl, static_cast<float>(q)), ml);
    }
};

// Q6_K: ql[128], qh[64], int8 scales[16], fp16 d at 208. Element j: half h = j / 128, quarter
// s = (j % 128) / 32, l = j % 32; low nibble s / 2 of ql[64h + l + 32·(s % 2)], high bits 2s..2s+1
// of qh[32h + l]; q = that − 32; y = (d·scale[j / 16])·q.
template <> struct row_format<TS_TYPE_Q6_K> {
    static constexpr int QK = 256, BS = 210;
    static TS_HD float value(const uint8_t *b, int j) {
        const int h = j >> 7, s = (j >> 5) & 3, l = j & 31;
        const int lo = (b[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 0xf;
        const int hi = (b[128 + 32 * h + l] >> (2 * s)) & 3;
        const int q = (lo | (hi << 4)) - 32;
        const float sc = static_cast<float>(static_cast<int8_t>(b[192 + (j >> 4)]));
        return mul_rn(mul_rn(ld_half(b + 208), sc), static_cast<float>(q));
    }
};

// ---- the low-bit 256-element types (layouts: quant_decode.cuh and src/quant/blocks.h) ----------

// Q2_K: scales[16] at 0, qs[64] at 16, fp16 d at 80, dmin at 82. Element j: half h = j / 128,
// s = (j % 128) / 32, l = j % 32: bits 2s..2s+1 of qs[32h + l]; y = (d·(sc & 15))·q − dmin·(sc >> 4)
// with sc = scales[j / 16].
template <> struct row_format<TS_TYPE_Q2_K> {
    static constexpr int QK = 256, BS = 84;
    static TS_HD float value(const uint8_t *b, int j) {
        const int h = j >> 7, s = (j >> 5) & 3, l = j & 31, sc = b[j >> 4];
        const int q = (b[16 + 32 * h + l] >> (2 * s)) & 3;
        const float dl = mul_rn(ld_half(b + 80), static_cast<float>(sc & 0xf));
        return sub_rn(mul_rn(dl, static_cast<float>(q)),
                      mul_rn(ld_half(b + 82), static_cast<float>(sc >> 4)));
    }
};

// Q3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96, fp16 d at 108. Low 2 bits as Q2_K, the
// third bit is bit 4h + s of hmask[l] (clear: subtract 4); y = (d·scale)·q.
template <> struct row_format<TS_TYPE_Q3_K> {
    static constexpr int QK = 256, BS = 110;
    static TS_HD float value(const uint8_t *b, int j) {
        const int h = j >> 7, s = (j >> 5) & 3, l = j & 31;
        const int low = (b[32 + 32 * h + l] >> (2 * s)) & 3, high = (b[l] >> (4 * h + s)) & 1;
        const float dl = mul_rn(ld_half(b + 108), static_cast<float>(q3k_scale(b + 96, j >> 4)));
        return mul_rn(dl, static_cast<float>(low - (high ? 0 : 4)));
    }
};

// The i-quants: y = db·g, negated where the element's sign bit is set (the reference multiplies
// by −1: a negation).
TS_HD float iq_signed(float db, uint32_t g, uint32_t neg) {
    const float v = mul_rn(db, static_cast<float>(g));
    return neg ? -v : v;
}
TS_HD uint32_t grid_byte(uint64_t entry, int e) {
    return static_cast<uint32_t>(entry >> (8 * e)) & 0xFFu;
}

// IQ2_XXS: fp16 d; per 32 elements 8 bytes at 2 + 8ib: grid indices of its 4 groups of 8, then a
// uint32 of 7-bit sign indices (bits 7l..) and the scale (28-31); db = d·(0.5 + s)·0.25.
template <> struct row_format<TS_TYPE_IQ2_XXS> {
    static constexpr int QK = 256, BS = 66;
    static TS_HD float value(const uint8_t *b, int j) {
        const uint8_t *p = b + 2 + 8 * (j >> 5);
        const int l = (j >> 3) & 3, e = j & 7;
        const uint32_t aux = ld_u32le(p + 4);
        const float db = mul_rn(mul_rn(ld_half(b), 0.5f + static_cast<float>(aux >> 28)), 0.25f);
        return iq_signed(db, grid_byte(iq2xxs_grid(p[l]), e), (iq_ksigns(aux >> (7 * l)) >> e) & 1u);
    }
};

// IQ2_XS: fp16 d; group g (8 elements) a uint16 at 2 + 2g: 9-bit grid index, 7-bit sign index;
// scales[8] at 66, low nibble for elements 0-15 of each 32, high for 16-31.
template <> struct row_format<TS_TYPE_IQ2_XS> {
    static constexpr int QK = 256, BS = 74;
    static TS_HD float value(const uint8_t *b, int j) {
        const int g = j >> 3, e = j & 7;
        const uint32_t v = ld_u16le(b + 2 + 2 * g), sc = (b[66 + (j >> 5)] >> (4 * ((j >> 4) & 1))) & 0xFu;
        const float db = mul_rn(mul_rn(ld_half(b), 0.5f + static_cast<float>(sc)), 0.25f);
        return iq_signed(db, grid_byte(iq2xs_grid(v & 511u), e), (iq_ksigns(v >> 9) >> e) & 1u);
    }
};

// IQ2_S: fp16 d; group g's index is qs[g] (at 2) | bits 2(g % 4).. of qh[g / 4] (at 66) as bits 8-9,
// its 8 sign bits are qs[32 + g]; scales[8] at 74 as IQ2_XS.
template <> struct row_format<TS_TYPE_IQ2_S> {
    static constexpr int QK = 256, BS = 82;
    static TS_HD float value(const uint8_t *b, int j) {
        const int g = j >> 3, e = j & 7;
        const uint32_t idx = b[2 + g] | (((b[66 + (g >> 2)] >> (2 * (g & 3))) & 3u) << 8);
        const uint32_t sc = (b[74 + (j >> 5)] >> (4 * ((j >> 4) & 1))) & 0xFu;
        const float db = mul_rn(mul_rn(ld_half(b), 0.5f + static_cast<float>(sc)), 0.25f);
        return iq_signed(db, grid_byte(iq2s_grid(idx), e), (b[34 + g] >> e) & 1u);
    }
};

// IQ3_XXS: fp16 d; grid index m (4 elements) of 32-element block ib at 2 + 8ib + m; at 66 + 4ib a
// uint32 of 7-bit sign indices per group of 8 and the scale (28-31); db = d·(0.5 + s)·0.5.
template <> struct row_format<TS_TYPE_IQ3_XXS> {
    static constexpr int QK = 256, BS = 98;
    static TS_HD float value(const uint8_t *b, int j) {
        const int ib = j >> 5, m = (j >> 2) & 7;
        const uint32_t aux = ld_u32le(b + 66 + 4 * ib);
        const float db = mul_rn(mul_rn(ld_half(b), 0.5f + static_cast<float>(aux >> 28)), 0.5f);
        const uint32_t g = (iq3xxs_grid(b[2 + 8 * ib + m]) >> (8 * (j & 3))) & 0xFFu;
        return iq_signed(db, g, (iq_ksigns(aux >> (7 * (m >> 1))) >> (j & 7)) & 1u);
    }
};

// IQ3_S: fp16 d; grid index m of block ib is qs[8ib + m] (at 2) | bit m of qh[ib] (at 66) as bit 8;
// element j's sign is bit j % 8 of signs[j / 8] (at 74); scales[4] at 106, nibble ib % 2 of byte
// ib / 2; db = d·(1 + 2s).
template <> struct row_format<TS_TYPE_IQ3_S> {
    static constexpr int QK = 256, BS = 110;
    static TS_HD float value(const uint8_t *b, int j) {
        const int ib = j >> 5, m = (j >> 2) & 7;
        const uint32_t idx = b[2 + 8 * ib + m] | (((b[66 + ib] >> m) & 1u) << 8);
        const int sc = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf;
        const float db = mul_rn(ld_half(b), static_cast<float>(1 + 2 * sc));
        return iq_signed(db, (iq3s_grid(idx) >> (8 * (j & 3))) & 0xFFu, (b[74 + (j >> 3)] >> (j & 7)) & 1u);
    }
};

// IQ1: y = dl·(g + δ), g the signed grid byte, δ = ±1/8 (g + δ is exact).
TS_HD float iq1_value(float dl, uint64_t entry, int e, bool neg) {
    const float g = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(entry >> (8 * e))));
    return mul_rn(dl, g + (neg ? -0.125f : 0.125f));
}

// IQ1_S: fp16 d; qs[32] at 2; per 32 elements a uint16 at 34 + 2ib: 3 high index bits per group
// (bits 3l..), the scale (12-14), the sign of δ (15); dl = d·(2s + 1).
template <> struct row_format<TS_TYPE_IQ1_S> {
    static constexpr int QK = 256, BS = 50;
    static TS_HD float value(const uint8_t *b, int j) {
        const int ib = j >> 5, l = (j >> 3) & 3;
        const uint32_t qh = ld_u16le(b + 34 + 2 * ib);
        const float dl = mul_rn(ld_half(b), static_cast<float>(2 * ((qh >> 12) & 7u) + 1));
        return iq1_value(dl, iq1s_grid(b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8)), j & 7,
                         (qh & 0x8000u) != 0);
    }
};

// IQ1_M: qs[32] at 0, qh[16] at 32 (a nibble per group: 3 high index bits, the sign of δ), four
// uint16 at 48: 3-bit scales per 16 elements (bits 0-11) and the fp16 d in their top nibbles.
template <> struct row_format<TS_TYPE_IQ1_M> {
    static constexpr int QK = 256, BS = 56;
    static TS_HD float value(const uint8_t *b, int j) {
        const int ib = j >> 5, g = j >> 3;
        const uint32_t dbits = (ld_u16le(b + 48) >> 12) | ((ld_u16le(b + 50) >> 8) & 0x00F0u) |
                               ((ld_u16le(b + 52) >> 4) & 0x0F00u) | (ld_u16le(b + 54) & 0xF000u);
        const uint32_t sc = (ld_u16le(b + 48 + 2 * (ib >> 1)) >> (6 * (ib & 1) + 3 * ((j >> 4) & 1))) & 7u;
        const float dl = mul_rn(ts_cu_half_to_float(dbits), static_cast<float>(2 * sc + 1));
        const uint32_t nib = (b[32 + (g >> 1)] >> (4 * (g & 1))) & 0xFu;
        return iq1_value(dl, iq1s_grid(b[g] | ((nib & 7u) << 8)), j & 7, (nib & 8u) != 0);
    }
};

// ---- rows ------------------------------------------------------------------------------------

template <uint32_t TYPE> TS_HD float row_elem(const uint8_t *row, int64_t i) {
    using F = row_format<TYPE>;
    return F::value(row + (i / F::QK) * F::BS, static_cast<int>(i % F::QK));
}

TS_HD bool row_type_supported(uint32_t type) {
    return with_type(type, [](auto) {});
}

// Element i of a row of a run-time type; 0 for a type row_type_supported refuses (callers check
// the type on the host first).
TS_HD float row_value(uint32_t type, const uint8_t *row, int64_t i) {
    float v = 0.0f;
    with_type(type, [&](auto t) { v = row_elem<decltype(t)::value>(row, i); });
    return v;
}

// store(i, value) for the elements i = first, first + step, ... < n of a row, the type switched on
// once outside the loop. In a kernel: first = threadIdx.x, step = blockDim.x.
// (nv_exec_check_disable: Store may be a host-only lambda in host tests, a device lambda in kernels.)
#pragma nv_exec_check_disable
template <uint32_t TYPE, class Store>
TS_HD void row_for_each_t(const uint8_t *row, int64_t n, int64_t first, int64_t step, Store &store) {
    for (int64_t i = first; i < n; i += step) store(i, row_elem<TYPE>(row, i));
}

#pragma nv_exec_check_disable
template <class Store>
TS_HD void row_for_each(uint32_t type, const uint8_t *row, int64_t n, int64_t first, int64_t step,
                        Store store) {
    with_type(type, [&](auto t) { row_for_each_t<decltype(t)::value>(row, n, first, step, store); });
}

// First byte of row r of a weight on the device (or in mapped host memory).
TS_HD const uint8_t *tensor_row(const ts_cuda_tensor &t, int64_t r) {
    return static_cast<const uint8_t *>(t.data) + static_cast<size_t>(r) * t.row_bytes;
}

} // namespace ts_cu

#endif
