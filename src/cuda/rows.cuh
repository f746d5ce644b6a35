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
//   row_type_supported(type)              whether the type is one of the tier-1 types below
//   row_elem<TYPE>(row, i)                element i of a row of a compile-time type
//   row_value(type, row, i)               the same with a run-time type (one switch)
//   row_for_each(type, row, n, first, step, store)
//                                         store(i, value) for i = first, first + step, ... < n,
//                                         the type switched on once (a thread's share of a row)
//   tensor_row(t, r)                      first byte of row r of a ts_cuda_tensor
// Types: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K. `row` is the first byte
// of the row (F32 rows 4-byte aligned, F16/BF16 2-byte aligned; block formats any alignment).
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

// IQ4_NL: nibbles placed as Q4_0, each an index into the codebook; y = d·kv[q].
template <> struct row_format<TS_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BS = 18;
    static TS_HD float value(const uint8_t *b, int j) {
        const int q = (b[2 + (j & 15)] >> (j < 16 ? 0 : 4)) & 0xf;
        return mul_rn(ld_half(b), static_cast<float>(iq4nl_value(q)));
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

// ---- rows ------------------------------------------------------------------------------------

template <uint32_t TYPE> TS_HD float row_elem(const uint8_t *row, int64_t i) {
    using F = row_format<TYPE>;
    return F::value(row + (i / F::QK) * F::BS, static_cast<int>(i % F::QK));
}

TS_HD bool row_type_supported(uint32_t type) {
    switch (type) {
    case TS_TYPE_F32:
    case TS_TYPE_F16:
    case TS_TYPE_BF16:
    case TS_TYPE_Q8_0:
    case TS_TYPE_Q4_0:
    case TS_TYPE_Q5_0:
    case TS_TYPE_Q5_1:
    case TS_TYPE_IQ4_NL:
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
    case TS_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

// Element i of a row of a run-time type; 0 for a type row_type_supported refuses (callers check
// the type on the host first).
TS_HD float row_value(uint32_t type, const uint8_t *row, int64_t i) {
    switch (type) {
    case TS_TYPE_F32:
        return row_elem<TS_TYPE_F32>(row, i);
    case TS_TYPE_F16:
        return row_elem<TS_TYPE_F16>(row, i);
    case TS_TYPE_BF16:
        return row_elem<TS_TYPE_BF16>(row, i);
    case TS_TYPE_Q8_0:
        return row_elem<TS_TYPE_Q8_0>(row, i);
    case TS_TYPE_Q4_0:
        return row_elem<TS_TYPE_Q4_0>(row, i);
    case TS_TYPE_Q5_0:
        return row_elem<TS_TYPE_Q5_0>(row, i);
    case TS_TYPE_Q5_1:
        return row_elem<TS_TYPE_Q5_1>(row, i);
    case TS_TYPE_IQ4_NL:
        return row_elem<TS_TYPE_IQ4_NL>(row, i);
    case TS_TYPE_Q4_K:
        return row_elem<TS_TYPE_Q4_K>(row, i);
    case TS_TYPE_Q5_K:
        return row_elem<TS_TYPE_Q5_K>(row, i);
    case TS_TYPE_Q6_K:
        return row_elem<TS_TYPE_Q6_K>(row, i);
    default:
        return 0.0f;
    }
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
    switch (type) {
    case TS_TYPE_F32:
        row_for_each_t<TS_TYPE_F32>(row, n, first, step, store);
        break;
    case TS_TYPE_F16:
        row_for_each_t<TS_TYPE_F16>(row, n, first, step, store);
        break;
    case TS_TYPE_BF16:
        row_for_each_t<TS_TYPE_BF16>(row, n, first, step, store);
        break;
    case TS_TYPE_Q8_0:
        row_for_each_t<TS_TYPE_Q8_0>(row, n, first, step, store);
        break;
    case TS_TYPE_Q4_0:
        row_for_each_t<TS_TYPE_Q4_0>(row, n, first, step, store);
        break;
    case TS_TYPE_Q5_0:
        row_for_each_t<TS_TYPE_Q5_0>(row, n, first, step, store);
        break;
    case TS_TYPE_Q5_1:
        row_for_each_t<TS_TYPE_Q5_1>(row, n, first, step, store);
        break;
    case TS_TYPE_IQ4_NL:
        row_for_each_t<TS_TYPE_IQ4_NL>(row, n, first, step, store);
        break;
    case TS_TYPE_Q4_K:
        row_for_each_t<TS_TYPE_Q4_K>(row, n, first, step, store);
        break;
    case TS_TYPE_Q5_K:
        row_for_each_t<TS_TYPE_Q5_K>(row, n, first, step, store);
        break;
    case TS_TYPE_Q6_K:
        row_for_each_t<TS_TYPE_Q6_K>(row, n, first, step, store);
        break;
    default:
        break;
    }
}

// First byte of row r of a weight on the device (or in mapped host memory).
TS_HD const uint8_t *tensor_row(const ts_cuda_tensor &t, int64_t r) {
    return static_cast<const uint8_t *>(t.data) + static_cast<size_t>(r) * t.row_bytes;
}

} // namespace ts_cu

#endif
