// Host-only check of the GEMM weight path (src/cuda/gemm_decode.cuh): no GPU needed, so it runs in
// the default suite wherever the CUDA backend is built.
//
// For every type the GEMM reads, on rows from the reference quantizer (quantize_row_any) and (block
// types) on random bytes with finite fp16 scales, at every start alignment a row can have in device
// memory (data 16-byte aligned, rows back to back): the staging of gemm.cu is replayed (chunk c of the row: the aligned 16-byte
// lines that cover its bytes, copied into a row buffer of gdec_row_bytes filled with garbage, the
// chunk's first byte at its alignment modulo 16), then every half step (16 elements) is decoded
// with decode16 and compared BIT FOR BIT with ts_dequantize_row; elements past the row's end
// (plain types, row lengths that are not a multiple of 32) must be 0. Checks too that the lines
// never exceed gdec_lines and that the decoders read nothing outside the row buffer (the garbage
// would show).
extern "C" {
#include "common/half.h"
#include "quant/quant.h"
}
#include "cuda/gemm_decode.cuh"

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

using namespace ts_cu;

namespace {

rng_t g_rng = {0x243F6A8885A308D3ull};
uint64_t next_u64() {
    return rng_u64(&g_rng);
}
double next_unit() {
    return rng_unit(&g_rng);
}
double next_gauss() {
    return rng_gauss(&g_rng);
}

// Random bytes for a whole row of blocks, fp16 fields made finite; 4-bit blocks swept.
template <int TYPE> void random_blocks(uint8_t *row, int nb) {
    using D = gdec<TYPE>;
    for (int i = 0; i < nb * D::BS; i++) row[i] = static_cast<uint8_t>(next_u64());
    static int sweep = 0; // Q4_1 / IQ4_XS: swept nibbles and scales (test_util.h)
    for (int b = 0; b < nb; b++) {
        sweep_nibble_block(TYPE, row + b * D::BS, sweep++);
        rng_fix_scales(&g_rng, TYPE, row + b * D::BS);
    }
}

template <int TYPE> int check_row(const char *name, int ne0, int mis0, bool random_bytes) {
    using D = gdec<TYPE>;
    char err[256];
    const size_t rb = ts_row_size(TYPE, ne0);
    // the row at address ≡ mis0 (mod 16), followed by padding as on the device
    uint8_t *mem = static_cast<uint8_t *>(aligned_alloc(16, (rb + 64 + 15) / 16 * 16));
    memset(mem, 0x5A, (rb + 64 + 15) / 16 * 16);
    uint8_t *row = mem + mis0;
    float *ref = static_cast<float *>(malloc(sizeof(float) * ne0));
    if (D::PLAIN || !random_bytes) {
        float *src = static_cast<float *>(malloc(sizeof(float) * ne0));
        const double scale = 0.01 + 3.0 * next_unit(), shift = (next_u64() % 3 == 0) ? 2.0 * scale : 0.0;
        for (int i = 0; i < ne0; i++) src[i] = static_cast<float>(scale * next_gauss() + shift);
        if (quantize_row_any(TYPE, src, row, ne0, err, sizeof err) != 0) {
            printf("%s: quantize failed: %s\n", name, err);
            return 1;
        }
        free(src);
    } else {
        random_blocks<TYPE>(row, ne0 / D::QK);
    }
    if (ts_dequantize_row(TYPE, row, ref, ne0, err, sizeof err) != 0) {
        printf("%s: dequantize failed: %s\n", name, err);
        return 1;
    }
    constexpr int RAWB = gdec_row_bytes<TYPE>(), LINES = gdec_lines<TYPE>();
    alignas(16) uint8_t buf[RAWB];
    int fails = 0;
    const int nc = (ne0 + D::KC - 1) / D::KC;
    for (int c = 0; c < nc && fails < 5; c++) {
        int k0, k1, b0, b1;
        gdec_chunk<TYPE>(ne0, c, k0, k1, b0, b1);
        memset(buf, 0xC3, sizeof buf); // garbage: NaN-ish patterns if read as data
        // the kernel's staging: aligned lines covering bytes [b0, b1) of the row
        const uint8_t *s0 = row + b0;
        const uint8_t *a0 = s0 - (reinterpret_cast<uintptr_t>(s0) & 15u);
        const int nl = static_cast<int>((s0 + (b1 - b0) - a0 + 15) >> 4);
        if (nl > LINES) {
            printf("%s ne0 %d mis %d chunk %d: %d lines, more than gdec_lines = %d\n", name, ne0, mis0, c, nl,
                   LINES);
            return 1;
        }
        for (int l = 0; l < nl; l++) memcpy(buf + 16 * l, a0 + 16 * l, 16);
        const int mis = static_cast<int>((static_cast<uint32_t>(mis0) + static_cast<uint32_t>(b0)) & 15u);
        if (mis != static_cast<int>(reinterpret_cast<uintptr_t>(s0) & 15u)) {
            printf("%s: misalignment arithmetic wrong\n", name);
            return 1;
        }
        for (int e = 0; e < D::KC && k0 + e < ((k1 + 31) / 32) * 32; e += 16) {
            float w[16];
            D::decode16(buf + mis, e, k1 - (k0 + e), w);
            for (int i = 0; i < 16; i++) {
                const int k = k0 + e + i;
                const float want = k < k1 ? ref[k] : 0.0f;
                uint32_t a, bb;
                memcpy(&a, &w[i], 4);
                memcpy(&bb, &want, 4);
                if (a != bb) {
                    if (fails < 5)
                        printf("%s ne0 %d mis %d %s: element %d decodes to %.9g (0x%08x), reference %.9g "
                               "(0x%08x)\n",
                               name, ne0, mis0, random_bytes ? "random" : "quantized", k, w[i], a, want, bb);
                    fails++;
                }
            }
        }
    }
    free(ref);
    free(mem);
    return fails ? 1 : 0;
}

template <int TYPE> int check_type(const char *name) {
    using D = gdec<TYPE>;
    int bad = 0, runs = 0;
    // row lengths: one block, partial chunks, whole chunks, the model's 640 / 2560 / 6144, and for
    // plain types lengths that end inside a step
    const int plain_lens[] = {1, 7, 16, 31, 33, 100, 130, 640, 2560};
    const int block_lens[] = {1, 2, 3, 4, 5, 8, 20, 24};
    const int n_lens = D::PLAIN ? 9 : 8;
    for (int li = 0; li < n_lens; li++) {
        const int ne0 = D::PLAIN ? plain_lens[li] : block_lens[li] * D::QK;
        const int step = D::PLAIN ? D::BS : (D::BS % 16 == 0 ? 16 : 2);
        for (int mis0 = 0; mis0 < 16; mis0 += step) {
            for (int rnd = 0; rnd < (D::PLAIN ? 1 : 2); rnd++) {
                for (int rep = 0; rep < 3; rep++) {
                    bad += check_row<TYPE>(name, ne0, mis0, rnd == 1);
                    runs++;
                }
            }
        }
    }
    printf("%-7s %4d rows (KC %3d, %2d lines, %3d bytes a staged row): %s\n", name, runs, D::KC,
           gdec_lines<TYPE>(), gdec_row_bytes<TYPE>(), bad ? "FAIL" : "bit-exact");
    return bad ? 1 : 0;
}

} // namespace

int main() {
    int bad = 0;
    bad += check_type<TS_TYPE_F32>("f32");
    bad += check_type<TS_TYPE_F16>("f16");
    bad += check_type<TS_TYPE_BF16>("bf16");
    bad += check_type<TS_TYPE_Q8_0>("q8_0");
    bad += check_type<TS_TYPE_Q4_0>("q4_0");
    bad += check_type<TS_TYPE_Q4_1>("q4_1");
    bad += check_type<TS_TYPE_Q5_0>("q5_0");
    bad += check_type<TS_TYPE_Q5_1>("q5_1");
    bad += check_type<TS_TYPE_IQ4_NL>("iq4_nl");
    bad += check_type<TS_TYPE_IQ4_XS>("iq4_xs");
    bad += check_type<TS_TYPE_Q4_K>("q4_K");
    bad += check_type<TS_TYPE_Q5_K>("q5_K");
    bad += check_type<TS_TYPE_Q6_K>("q6_K");
    bad += check_type<TS_TYPE_Q2_K>("q2_K");
    bad += check_type<TS_TYPE_Q3_K>("q3_K");
    bad += check_type<TS_TYPE_IQ2_XXS>("iq2_xxs");
    bad += check_type<TS_TYPE_IQ2_XS>("iq2_xs");
    bad += check_type<TS_TYPE_IQ2_S>("iq2_s");
    bad += check_type<TS_TYPE_IQ3_XXS>("iq3_xxs");
    bad += check_type<TS_TYPE_IQ3_S>("iq3_s");
    bad += check_type<TS_TYPE_IQ1_S>("iq1_s");
    bad += check_type<TS_TYPE_IQ1_M>("iq1_m");
    printf(bad ? "test_cuda_gemm_decode: FAILED\n"
               : "test_cuda_gemm_decode: all GEMM decoders match ts_dequantize_row bit for bit\n");
    return bad ? 1 : 0;
}
