// Host-only check of the CUDA block decoders (src/cuda/quant_decode.cuh): no GPU needed, so it
// runs in the default suite wherever the CUDA backend is built.
//
// For every block type the CUDA kernels read, on blocks from ts_quantize_row and on random bytes
// (every bit pattern of quants, scales and high bits; fp16 scales kept finite), at every alignment
// the kernels can meet (2-byte steps; 16 for A16 types): each unit k < UPB and run r must
//   - name each of the block's QK elements exactly once (e[r] + i),
//   - decode to scale·(byte − BIAS) (+ min) equal to ts_dequantize_row's value within 2 ulps of
//     |scale·q| + |min| (the reference rounds one product or one difference in fp32; we compare in
//     double), and
//   - convert each byte exactly with the PRMT trick (2^23 + byte − (2^23 + BIAS) = byte − BIAS).
// Also exhaustive checks of the IQ4_NL permute lookup and of the fifth-bit spread, and of the
// shared-memory layout of x (x_swizzle): a permutation of the staged float4s, and for the loads
// the kernel makes (lane -> unit -> run -> 4 float4s) conflict-free within every quarter-warp.
extern "C" {
#include "common/half.h"
#include "quant/quant.h"
}
#include "cuda/quant_decode.cuh"

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

using namespace ts_cu;

namespace {

rng_t g_rng = {0x9E3779B97F4A7C15ull};
uint64_t next_u64() {
    return rng_u64(&g_rng);
}
double next_unit() {
    return rng_unit(&g_rng);
}
double next_gauss() {
    return rng_gauss(&g_rng);
}

uint16_t random_scale_fp16() {
    return rng_scale_fp16(&g_rng);
}

template <int TYPE> void fix_scales(uint8_t *b) {
    switch (TYPE) {
    case TS_TYPE_Q5_1:
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
        put_u16(b, random_scale_fp16());
        put_u16(b + 2, random_scale_fp16());
        break;
    case TS_TYPE_Q6_K:
        put_u16(b + 208, random_scale_fp16());
        break;
    default:
        put_u16(b, random_scale_fp16());
        break;
    }
}

template <int TYPE> int check_type(const char *name) {
    using Q = qtype<TYPE>;
    alignas(16) uint8_t buf[Q::BS + 64];
    float src[Q::QK], ref[Q::QK];
    char err[256];
    double worst = 0;
    int fails = 0;
    const int trials = 4000;
    for (int trial = 0; trial < trials && fails < 10; trial++) {
        const int off = Q::A16 ? 16 * (trial % 2) : 2 * (trial % 8);
        uint8_t *b = buf + off;
        memset(buf, 0xA5, sizeof buf);
        if (trial % 2 == 0) {
            const double scale = 0.01 + 3.0 * next_unit(), shift = (trial % 6 == 0) ? 2.0 * scale : 0.0;
            for (int i = 0; i < Q::QK; i++) src[i] = static_cast<float>(scale * next_gauss() + shift);
            if (ts_quantize_row(TYPE, src, b, Q::QK, err, sizeof err) != 0) {
                printf("%s: quantize failed: %s\n", name, err);
                return 1;
            }
        } else {
            for (int i = 0; i < Q::BS; i++) b[i] = static_cast<uint8_t>(next_u64());
            fix_scales<TYPE>(b);
        }
        if (ts_dequantize_row(TYPE, b, ref, Q::QK, err, sizeof err) != 0) {
            printf("%s: dequantize failed: %s\n", name, err);
            return 1;
        }
        int seen[Q::QK] = {0};
        for (int k = 0; k < Q::UPB; k++) {
            unit_t u;
            Q::decode(b, k, u);
            for (int r = 0; r < 2; r++) {
                for (int i = 0; i < 16; i++) {
                    const int e = u.e[r] + i;
                    if (e < 0 || e >= Q::QK) {
                        printf("%s: unit %d run %d names element %d outside the block\n", name, k, r, e);
                        return 1;
                    }
                    seen[e]++;
                    const uint32_t word = u.q[r][i / 4];
                    const int byte = static_cast<int>((word >> (8 * (i % 4))) & 0xFF);
                    float f;
                    switch (i % 4) {
                    case 0:
                        f = byte_plus_2p23<0>(word);
                        break;
                    case 1:
                        f = byte_plus_2p23<1>(word);
                        break;
                    case 2:
                        f = byte_plus_2p23<2>(word);
                        break;
                    default:
                        f = byte_plus_2p23<3>(word);
                        break;
                    }
                    const float q = f - (8388608.0f + static_cast<float>(Q::BIAS));
                    if (q != static_cast<float>(byte - Q::BIAS)) {
                        printf("%s: byte %d converts to %g, not %d\n", name, byte, q, byte - Q::BIAS);
                        return 1;
                    }
                    const double mn = Q::HAS_MIN ? static_cast<double>(u.min[r]) : 0.0;
                    const double w = static_cast<double>(u.scale[r]) * q + mn;
                    const double mag = fabs(static_cast<double>(u.scale[r]) * q) + fabs(mn);
                    const double d = fabs(w - static_cast<double>(ref[e]));
                    const double rel = mag > 0 ? d / mag : d;
                    if (rel > worst) worst = rel;
                    if (!(d <= 2.0 * 1.1920929e-07 * mag)) {
                        if (fails++ < 10)
                            printf(
                                "%s: trial %d (offset %d) unit %d run %d element %d: decoded %.9g, reference "
                                "%.9g\n",
                                name, trial, off, k, r, e, w, static_cast<double>(ref[e]));
                    }
                }
            }
        }
        for (int e = 0; e < Q::QK; e++) {
            if (seen[e] != 1) {
                printf("%s: element %d is decoded %d times by the units of a block\n", name, e, seen[e]);
                return 1;
            }
        }
    }
    printf("%-7s %s  %d blocks, worst |decoded - reference| / (|scale*q| + |min|) = %.3g\n", name,
           fails ? "FAIL" : "ok  ", trials, worst);
    return fails ? 1 : 0;
}

// The kernel's x reads, replayed: step s, lane j reads the 4 float4s of each run of its unit.
template <int TYPE> int check_swizzle(const char *name) {
    using Q = qtype<TYPE>;
    constexpr int T = 3;
    const int ne0 = Q::QK == 256 ? 2048 : 1024, n4 = T * ne0 / 4, nb = ne0 / Q::QK, bps = 32 / Q::UPB;
    static int hit[T * 2048 / 4];
    memset(hit, 0, sizeof hit);
    for (int f = 0; f < n4; f++) {
        const uint32_t p = x_swizzle<Q>(static_cast<uint32_t>(f));
        if (p >= static_cast<uint32_t>(n4) || hit[p]++) {
            printf("%s: x_swizzle is not a permutation (f %d -> %u)\n", name, f, p);
            return 1;
        }
    }
    alignas(16) uint8_t blk[Q::BS + 16] = {0};
    int e_of[32][2];
    for (int k = 0; k < Q::UPB; k++) {
        unit_t u;
        Q::decode(blk, k, u);
        e_of[k][0] = u.e[0];
        e_of[k][1] = u.e[1];
    }
    for (int t = 0; t < T; t++)
        for (int s = 0; s * bps < nb; s++)
            for (int run = 0; run < 2; run++)
                for (int i = 0; i < 4; i++)
                    for (int q = 0; q < 4; q++) {
                        int seen = 0;
                        for (int j = 8 * q; j < 8 * q + 8; j++) {
                            const int b = s * bps + j / Q::UPB, k = j % Q::UPB;
                            const uint32_t f0 =
                                static_cast<uint32_t>((t * ne0 + b * Q::QK + e_of[k][run]) / 4);
                            const uint32_t p = x_swizzle<Q>(f0) ^ static_cast<uint32_t>(i);
                            if (f0 % 4 != 0 || p != x_swizzle<Q>(f0 + static_cast<uint32_t>(i))) {
                                printf("%s: run start %u is not a whole float4 group\n", name, f0);
                                return 1;
                            }
                            seen |= 1 << (p & 7);
                        }
                        if (seen != 0xFF) {
                            printf("%s: bank conflict in quarter-warp %d (step %d run %d load %d)\n", name, q,
                                   s, run, i);
                            return 1;
                        }
                    }
    printf("%-7s x layout ok (permutation; conflict-free quarter-warps)\n", name);
    return 0;
}

int check_lookups() {
    static const int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (uint32_t n = 0; n < 65536; n++) {
        const uint32_t v = iq4nl_lookup4(n);
        for (int i = 0; i < 4; i++) {
            const int got = static_cast<int>((v >> (8 * i)) & 0xFF) - 128;
            if (got != kv[(n >> (4 * i)) & 0xF]) {
                printf("iq4nl_lookup4(0x%04x) byte %d = %d, codebook says %d\n", n, i, got,
                       kv[(n >> (4 * i)) & 0xF]);
                return 1;
            }
        }
    }
    for (uint32_t h = 0; h < 16; h++) {
        uint32_t want = 0;
        for (int j = 0; j < 4; j++) want |= ((h >> j) & 1u) << (8 * j + 4);
        if (spread4_to_bit4(h) != want) {
            printf("spread4_to_bit4(%u) = 0x%08x, want 0x%08x\n", h, spread4_to_bit4(h), want);
            return 1;
        }
    }
    printf("lookups ok (IQ4_NL permute lookup: all 65536 nibble quadruples; fifth-bit spread: all 16)\n");
    return 0;
}

} // namespace

int main() {
    int bad = check_lookups();
    bad += check_type<TS_TYPE_Q8_0>("q8_0");
    bad += check_type<TS_TYPE_Q4_0>("q4_0");
    bad += check_type<TS_TYPE_Q5_0>("q5_0");
    bad += check_type<TS_TYPE_Q5_1>("q5_1");
    bad += check_type<TS_TYPE_IQ4_NL>("iq4_nl");
    bad += check_type<TS_TYPE_Q4_K>("q4_K");
    bad += check_type<TS_TYPE_Q5_K>("q5_K");
    bad += check_type<TS_TYPE_Q6_K>("q6_K");
    bad += check_swizzle<TS_TYPE_Q8_0>("q8_0");
    bad += check_swizzle<TS_TYPE_Q4_0>("q4_0");
    bad += check_swizzle<TS_TYPE_Q5_0>("q5_0");
    bad += check_swizzle<TS_TYPE_Q5_1>("q5_1");
    bad += check_swizzle<TS_TYPE_IQ4_NL>("iq4_nl");
    bad += check_swizzle<TS_TYPE_Q4_K>("q4_K");
    bad += check_swizzle<TS_TYPE_Q5_K>("q5_K");
    bad += check_swizzle<TS_TYPE_Q6_K>("q6_K");
    printf(bad ? "test_cuda_decode: FAILED\n" : "test_cuda_decode: all decoders match ts_dequantize_row\n");
    return bad ? 1 : 0;
}
