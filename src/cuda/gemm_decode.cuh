// Weight decoders of the tiled GEMM (src/cuda/gemm.cu): 16 consecutive elements of a row, from the
// row's bytes staged in shared memory, to exactly the fp32 values of ts_dequantize_row.
//
// The GEMM stages the bytes of a "chunk" of KC elements of each of its rows in shared memory
// (aligned 16-byte lines copied by cp.async, see gemm.cu), then expands every 32-element step of
// the chunk into an fp32 tile. decode16 does one half step: elements e .. e + 15 of the chunk.
// Unlike the GEMV units of quant_decode.cuh (scale applied to a sum, runs of 16 spread over a
// block), these produce each weight on its own, bit-identical to src/quant/dequant.c: the scale
// arithmetic is done in the reference's order with explicitly rounded operations (mul_rn,
// add_rn, sub_rn of rows.cuh: nvcc would otherwise contract d·q + m into an FMA). Integer quants
// become floats exactly through the PRMT trick of quant_decode.cuh (byte under the exponent of
// 2^23, then one exact FADD).
//
// gdec<TYPE>: QK elements and BS bytes a block (1 and the element size for plain types), KC
// elements a chunk (a multiple of 32 and of QK: one super-block for K-quants, 128 elements for the
// 32-element types, 256 bytes of plain elements), and
//   decode16(base, e, nvalid, w)   w[i] = element e + i of the chunk whose first byte is at base
//                                  (e a multiple of 16, < KC); elements i ≥ nvalid are 0 (only
//                                  plain types have row lengths that end inside a step).
// Alignment of base: whatever the row had in global memory modulo 16 (the staging keeps it): 16
// for Q4_K / Q5_K (their rows are 16-byte multiples), 2 for the other block types, the element
// size for plain types. Reads may run up to 4 bytes past the chunk's last byte (lds_words_a2):
// the staging buffer keeps a spare line per row. Q4_1 and IQ4_XS are checked on the host only (no
// GPU run yet). The low-bit 256-element types (Q2_K, Q3_K,
// IQ1_S .. IQ3_S) decode through the run decoders of quant_decode.cuh (gdec_runs).
//
// Everything is __host__ __device__: tests/cuda/test_cuda_gemm_decode.cu runs the staging
// arithmetic (chunk_bytes, raw_lines) and these decoders on the host against ts_dequantize_row.
#ifndef TS_CUDA_GEMM_DECODE_CUH
#define TS_CUDA_GEMM_DECODE_CUH

#include "cuda/quant_decode.cuh"
#include "cuda/rows.cuh"

#include <stdint.h>

namespace ts_cu {

// Four bytes of w as floats byte − BIAS, exactly.
template <int BIAS> TS_HD void gdec_bytes(uint32_t w, float *out) {
    constexpr float kMagic = 8388608.0f + static_cast<float>(BIAS);
    out[0] = byte_plus_2p23<0>(w) - kMagic;
    out[1] = byte_plus_2p23<1>(w) - kMagic;
    out[2] = byte_plus_2p23<2>(w) - kMagic;
    out[3] = byte_plus_2p23<3>(w) - kMagic;
}

// The 16 nibbles of a 32-element block's 16 qs bytes at qs (2-byte aligned), low (sh 0: elements 0–15)
// or high (sh 4: 16–31), as floats q − BIAS.
template <int BIAS> TS_HD void gdec_nibbles16(const uint8_t *qs, int sh, float (&v)[16]) {
    uint32_t q[4];
    lds_words_a2<4>(qs, q);
#pragma unroll
    for (int i = 0; i < 4; i++) gdec_bytes<BIAS>((q[i] >> sh) & 0x0F0F0F0Fu, v + 4 * i);
}

template <int TYPE> struct gdec;

// ---- plain types ------------------------------------------------------------------------------

template <> struct gdec<TS_TYPE_F32> {
    static constexpr int QK = 1, BS = 4, KC = 64;
    static constexpr bool PLAIN = true;
    static TS_HD void decode16(const uint8_t *base, int e, int nvalid, float (&w)[16]) {
        const float *p = reinterpret_cast<const float *>(base) + e;
#pragma unroll
        for (int i = 0; i < 16; i++) w[i] = i < nvalid ? p[i] : 0.0f;
    }
};

template <> struct gdec<TS_TYPE_F16> {
    static constexpr int QK = 1, BS = 2, KC = 128;
    static constexpr bool PLAIN = true;
    static TS_HD void decode16(const uint8_t *base, int e, int nvalid, float (&w)[16]) {
        const uint8_t *p = base + 2 * e;
#pragma unroll
        for (int i = 0; i < 16; i++) w[i] = i < nvalid ? ts_cu_half_to_float(lds_u16(p + 2 * i)) : 0.0f;
    }
};

template <> struct gdec<TS_TYPE_BF16> {
    static constexpr int QK = 1, BS = 2, KC = 128;
    static constexpr bool PLAIN = true;
    static TS_HD void decode16(const uint8_t *base, int e, int nvalid, float (&w)[16]) {
        const uint8_t *p = base + 2 * e;
#pragma unroll
        for (int i = 0; i < 16; i++) w[i] = i < nvalid ? ts_cu_bits_to_float(lds_u16(p + 2 * i) << 16) : 0.0f;
    }
};

// ---- 32-element blocks (KC = 4 blocks) ----------------------------------------------------------

// Q8_0: fp16 d, 32 int8; y = q·d.
template <> struct gdec<TS_TYPE_Q8_0> {
    static constexpr int QK = 32, BS = 34, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b));
        uint32_t q[4];
        lds_words_a2<4>(b + 2 + (e & 16), q);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<128>(q[i] ^ 0x80808080u, v); // int8 q -> q + 128
#pragma unroll
            for (int j = 0; j < 4; j++) w[4 * i + j] = mul_rn(v[j], d);
        }
    }
};

// Q4_0: byte j of qs holds element j (low nibble) and j + 16 (high); y = (q − 8)·d.
template <> struct gdec<TS_TYPE_Q4_0> {
    static constexpr int QK = 32, BS = 18, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b));
        float v[16];
        gdec_nibbles16<8>(b + 2, (e & 16) ? 4 : 0, v);
#pragma unroll
        for (int j = 0; j < 16; j++) w[j] = mul_rn(v[j], d);
    }
};

// Q4_1: fp16 d, fp16 m, nibbles as Q4_0; y = q·d + m.
template <> struct gdec<TS_TYPE_Q4_1> {
    static constexpr int QK = 32, BS = 20, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b)), m = ts_cu_half_to_float(lds_u16(b + 2));
        float v[16];
        gdec_nibbles16<0>(b + 4, (e & 16) ? 4 : 0, v);
#pragma unroll
        for (int j = 0; j < 16; j++) w[j] = add_rn(mul_rn(v[j], d), m);
    }
};

// IQ4_NL: nibbles placed as Q4_0, each an index into the codebook; y = d·kv[q].
template <> struct gdec<TS_TYPE_IQ4_NL> {
    static constexpr int QK = 32, BS = 18, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b));
        const int sh = (e & 16) ? 4 : 0;
        uint32_t q[4];
        lds_words_a2<4>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t n = (q[i] >> sh) & 0x0F0F0F0Fu; // 4 nibbles, one a byte
            const uint32_t y = n | (n >> 4);               // byte 0: n0 | n1 << 4, byte 2: n2 | n3 << 4
            float v[4];
            gdec_bytes<128>(iq4nl_lookup4((y & 0xFFu) | ((y >> 8) & 0xFF00u)), v);
#pragma unroll
            for (int j = 0; j < 4; j++) w[4 * i + j] = mul_rn(d, v[j]);
        }
    }
};

// Q5_0: nibbles as Q4_0, the fifth bit of element j is bit j of the little-endian qh; y = (q − 16)·d.
template <> struct gdec<TS_TYPE_Q5_0> {
    static constexpr int QK = 32, BS = 22, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b));
        const int h16 = e & 16, sh = h16 ? 4 : 0;
        const uint32_t qh = lds_u32_a2(b + 2) >> h16;
        uint32_t q[4];
        lds_words_a2<4>(b + 6, q);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<16>(((q[i] >> sh) & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (4 * i)), v);
#pragma unroll
            for (int j = 0; j < 4; j++) w[4 * i + j] = mul_rn(v[j], d);
        }
    }
};

// Q5_1: bits as Q5_0; y = q·d + m.
template <> struct gdec<TS_TYPE_Q5_1> {
    static constexpr int QK = 32, BS = 24, KC = 128;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 5) * BS;
        const float d = ts_cu_half_to_float(lds_u16(b)), m = ts_cu_half_to_float(lds_u16(b + 2));
        const int h16 = e & 16, sh = h16 ? 4 : 0;
        const uint32_t qh = lds_u32_a2(b + 4) >> h16;
        uint32_t q[4];
        lds_words_a2<4>(b + 8, q);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<0>(((q[i] >> sh) & 0x0F0F0F0Fu) | spread4_to_bit4(qh >> (4 * i)), v);
#pragma unroll
            for (int j = 0; j < 4; j++) w[4 * i + j] = add_rn(mul_rn(v[j], d), m);
        }
    }
};

// ---- K-quants (KC = one 256-element super-block) ------------------------------------------------

// Q4_K: sub-block sb = j / 32 (6-bit scale sc and min m, ts_scale_min_k4), element l of it is
// nibble sb % 2 of qs[32·(sb / 2) + l] (qs at 16); y = (d·sc)·q − (dmin·m). 16-byte aligned.
template <> struct gdec<TS_TYPE_Q4_K> {
    static constexpr int QK = 256, BS = 144, KC = 256;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 8) * BS;
        const int j = e & 255, sb = j >> 5;
        const uint32_t dd = *reinterpret_cast<const uint32_t *>(b);
        int sc, mn;
        scale_min_k4(sb, b + 4, sc, mn);
        const float dl = mul_rn(ts_cu_half_to_float(dd & 0xFFFFu), static_cast<float>(sc));
        const float ml = mul_rn(ts_cu_half_to_float(dd >> 16), static_cast<float>(mn));
        uint32_t q[4];
        lds_words_a16(b + 16 + 32 * (sb >> 1) + (j & 16), q);
        const int sh = 4 * (sb & 1);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<0>((q[i] >> sh) & 0x0F0F0F0Fu, v);
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = sub_rn(mul_rn(dl, v[k]), ml);
        }
    }
};

// Q5_K: low 4 bits as Q4_K (qs at 48), the fifth bit of element l of sub-block sb is bit sb of
// qh[l] (qh at 16). 16-byte aligned.
template <> struct gdec<TS_TYPE_Q5_K> {
    static constexpr int QK = 256, BS = 176, KC = 256;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 8) * BS;
        const int j = e & 255, sb = j >> 5;
        const uint32_t dd = *reinterpret_cast<const uint32_t *>(b);
        int sc, mn;
        scale_min_k4(sb, b + 4, sc, mn);
        const float dl = mul_rn(ts_cu_half_to_float(dd & 0xFFFFu), static_cast<float>(sc));
        const float ml = mul_rn(ts_cu_half_to_float(dd >> 16), static_cast<float>(mn));
        uint32_t q[4], qh[4];
        lds_words_a16(b + 48 + 32 * (sb >> 1) + (j & 16), q);
        lds_words_a16(b + 16 + (j & 16), qh);
        const int sh = 4 * (sb & 1);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<0>(((q[i] >> sh) & 0x0F0F0F0Fu) | (((qh[i] >> sb) & 0x01010101u) << 4), v);
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = sub_rn(mul_rn(dl, v[k]), ml);
        }
    }
};

// IQ4_XS: sub-block ib = j / 32 of the super-block (6-bit scale ls, qtype<IQ4_XS>::scale6), its
// nibbles placed as IQ4_NL in qs[16ib ..] (qs at 8); y = (d·(ls − 32))·kv[q]. 136-byte blocks:
// 2-byte aligned for the decoder (8 at best).
template <> struct gdec<TS_TYPE_IQ4_XS> {
    static constexpr int QK = 256, BS = 136, KC = 256;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 8) * BS;
        const int j = e & 255, ib = j >> 5, sh = (j & 16) ? 4 : 0;
        const float dl = mul_rn(ts_cu_half_to_float(lds_u16(b)),
                                static_cast<float>(qtype<TS_TYPE_IQ4_XS>::scale6(b, ib) - 32));
        uint32_t q[4];
        lds_words_a2<4>(b + 8 + 16 * ib, q);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t n = (q[i] >> sh) & 0x0F0F0F0Fu;
            const uint32_t y = n | (n >> 4);
            float v[4];
            gdec_bytes<128>(iq4nl_lookup4((y & 0xFFu) | ((y >> 8) & 0xFF00u)), v);
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = mul_rn(dl, v[k]);
        }
    }
};

// Q6_K: ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, fp16 d at 208. Element j: half
// h = j / 128, quarter s = (j % 128) / 32, l = j % 32: low nibble s / 2 of ql[64h + 32·(s % 2) + l],
// bits 2s..2s+1 of qh[32h + l]; y = (d·scale[j / 16])·(q − 32). Only 2-byte aligned.
template <> struct gdec<TS_TYPE_Q6_K> {
    static constexpr int QK = 256, BS = 210, KC = 256;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        const uint8_t *b = base + (e >> 8) * BS;
        const int j = e & 255, h = j >> 7, s = (j >> 5) & 3, l0 = j & 16;
        uint32_t ql[4], qh[4];
        lds_words_a2<4>(b + 64 * h + 32 * (s & 1) + l0, ql);
        lds_words_a2<4>(b + 128 + 32 * h + l0, qh);
        const float ds = mul_rn(ts_cu_half_to_float(lds_u16(b + 208)),
                                static_cast<float>(static_cast<int8_t>(b[192 + (j >> 4)])));
        const int sl = 4 * (s >> 1), shh = 2 * s;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<32>(((ql[i] >> sl) & 0x0F0F0F0Fu) | (((qh[i] >> shh) & 0x03030303u) << 4), v);
#pragma unroll
            for (int k = 0; k < 4; k++) w[4 * i + k] = mul_rn(ds, v[k]);
        }
    }
};

// ---- the run-form types of quant_decode.cuh (Q2_K, Q3_K, IQ1_S .. IQ3_S; KC = one super-block) ----

// Half step e .. e + 15 is run (e % 256) / 16 of its block: the unit decoder's run, then each
// weight as the one rounded product scale·q (+ min, Q2_K), which is the reference's value bit for
// bit (the header of quant_decode.cuh says why for each type, IQ1's scaled codes included).
// Blocks are 2-byte aligned (84 .. 110 bytes).
template <int TYPE> struct gdec_runs {
    using Q = qtype<TYPE>;
    static constexpr int QK = 256, BS = Q::BS, KC = 256;
    static constexpr bool PLAIN = false;
    static TS_HD void decode16(const uint8_t *base, int e, int, float (&w)[16]) {
        uint32_t q[4];
        float sc, mn;
        Q::run(base + (e >> 8) * BS, (e & 255) >> 4, q, sc, mn);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v[4];
            gdec_bytes<Q::BIAS>(q[i], v);
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[4 * i + k] = Q::HAS_MIN ? add_rn(mul_rn(sc, v[k]), mn) : mul_rn(sc, v[k]);
        }
    }
};
template <> struct gdec<TS_TYPE_Q2_K> : gdec_runs<TS_TYPE_Q2_K> {};
template <> struct gdec<TS_TYPE_Q3_K> : gdec_runs<TS_TYPE_Q3_K> {};
template <> struct gdec<TS_TYPE_IQ2_XXS> : gdec_runs<TS_TYPE_IQ2_XXS> {};
template <> struct gdec<TS_TYPE_IQ2_XS> : gdec_runs<TS_TYPE_IQ2_XS> {};
template <> struct gdec<TS_TYPE_IQ2_S> : gdec_runs<TS_TYPE_IQ2_S> {};
template <> struct gdec<TS_TYPE_IQ3_XXS> : gdec_runs<TS_TYPE_IQ3_XXS> {};
template <> struct gdec<TS_TYPE_IQ3_S> : gdec_runs<TS_TYPE_IQ3_S> {};
template <> struct gdec<TS_TYPE_IQ1_S> : gdec_runs<TS_TYPE_IQ1_S> {};
template <> struct gdec<TS_TYPE_IQ1_M> : gdec_runs<TS_TYPE_IQ1_M> {};

// ---- staging arithmetic --------------------------------------------------------------------------

// Chunk c of a row of ne0 elements: elements [k0, k1), bytes [b0, b1) of the row.
template <int TYPE> TS_HD void gdec_chunk(int ne0, int c, int &k0, int &k1, int &b0, int &b1) {
    using D = gdec<TYPE>;
    k0 = c * D::KC;
    k1 = ne0 - k0 < D::KC ? ne0 : k0 + D::KC;
    b0 = (k0 / D::QK) * D::BS;
    b1 = (k1 / D::QK) * D::BS;
}

// 16-byte lines that can cover one chunk of a row at any alignment, and the bytes a row takes in
// the staging buffer: those lines plus one spare (the 4-byte over-read of lds_words_a2), rounded to
// an odd number of lines so that 16-byte reads of 8 consecutive rows fall in distinct bank groups.
template <int TYPE> __host__ __device__ constexpr int gdec_lines() {
    return (gdec<TYPE>::KC / gdec<TYPE>::QK * gdec<TYPE>::BS + 15 + 15) / 16;
}
template <int TYPE> __host__ __device__ constexpr int gdec_row_bytes() {
    return 16 * ((gdec_lines<TYPE>() + 1) | 1);
}

} // namespace ts_cu

#endif
