// Host-only check of the CUDA block decoders (src/cuda/quant_decode.cuh) and of the row gathers'
// element decoders (src/cuda/rows.cuh): no GPU needed, so it runs in the default suite wherever the
// CUDA backend is built.
//
// For every block type the CUDA kernels read, on blocks from the reference quantizer (with equal
// importance weights for IQ1_S / IQ2_XXS / IQ2_XS, which ggml quantizes only with them) and on random
// bytes (every bit pattern of quants, scales and high bits; fp16 scales kept finite), at every
// alignment the kernels can meet (2-byte steps; 16 for A16 types): each unit k < UPB and run r must
//   - name each of the block's QK elements exactly once (e[r] + i),
//   - decode to scale·(byte − BIAS) (+ min) equal to ts_dequantize_row's value within 2 ulps of
//     |scale·q| + |min| (the reference rounds one product or one difference in fp32; we compare in
//     double), and, rounded as one fp32 product (+ one fp32 sum for a min), to the very float of
//     ts_dequantize_row (required for the low-bit types Q2_K, Q3_K, IQ1_S .. IQ3_S and for Q4_1 and
//     IQ4_XS, whose decoders are exact by construction; counted and reported for the others), and
//   - convert each byte exactly with the PRMT trick (2^23 + byte − (2^23 + BIAS) = byte − BIAS);
// and row_format<TYPE>::value (rows.cuh) must give ts_dequantize_row's float bit for bit.
// The lattice types also get swept blocks: every grid index of their table, every sign index /
// sign byte, both signs of IQ1's delta, under super-scales ±0, ±the smallest subnormal, the largest
// subnormal, the smallest normal, ±65504 and 1 (Q2_K / Q3_K: the same d and dmin values); Q4_1 and
// IQ4_XS get swept blocks too: every nibble at every element, every 6-bit IQ4_XS scale in every
// sub-block, under the same d (and Q4_1's m) values.
// Also exhaustive checks of the IQ4_NL permute lookup, of the fifth-bit spread, of the computed
// i-quant sign bytes (iq_ksigns against ggml's ksigns_iq2xs table), and of the shared-memory layout
// of x (x_swizzle): a permutation of the staged float4s, and for the loads the kernel makes (lane ->
// unit -> run -> 4 float4s) conflict-free within every quarter-warp.
extern "C" {
#include "common/half.h"
#include "quant/quant.h"
}
#include "cuda/quant_decode.cuh"
#include "cuda/rows.cuh"

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

template <int TYPE> void fix_scales(uint8_t *b) {
    rng_fix_scales(&g_rng, TYPE, b);
}

// The 4-bit Q4_1 and IQ4_XS: like the run-form types, their units must reproduce the reference bit
// for bit (one rounded product, plus one sum for Q4_1's min), and they get swept blocks
// (sweep_nibble_block of test_util.h).
bool is_nibble_type(int type) {
    return type == TS_TYPE_Q4_1 || type == TS_TYPE_IQ4_XS;
}

bool is_run_type(int type) {
    switch (type) {
    case TS_TYPE_Q2_K:
    case TS_TYPE_Q3_K:
    case TS_TYPE_IQ2_XXS:
    case TS_TYPE_IQ2_XS:
    case TS_TYPE_IQ2_S:
    case TS_TYPE_IQ3_XXS:
    case TS_TYPE_IQ3_S:
    case TS_TYPE_IQ1_S:
    case TS_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

// Extreme super-scales: ±0, ±the smallest subnormal, the largest subnormal, the smallest normal,
// ±65504, 1.
const uint16_t kEdgeScales[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00};
constexpr int kNumEdge = sizeof kEdgeScales / sizeof kEdgeScales[0];

uint32_t get_u32(const uint8_t *p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
void put_u32(uint8_t *p, uint32_t v) {
    put_u16(p, static_cast<uint16_t>(v));
    put_u16(p + 2, static_cast<uint16_t>(v >> 16));
}
uint32_t set_bits(uint32_t v, int at, int n, uint32_t x) {
    const uint32_t m = ((1u << n) - 1u) << at;
    return (v & ~m) | ((x << at) & m);
}

// Sweep block t (over a block of random bytes): group g (0..31, 8 elements; IQ3 indices m 0..63, 4
// elements) takes grid index (t·G + g) mod N, sign index (or sign byte) (t·32 + g) mod 128 (256),
// IQ1 the delta sign ((t·32 + g) >> 11) & 1; super-scale kEdgeScales[t % kNumEdge] (the last entry
// of the cycle keeps the random finite one). Over 128 blocks every index, sign pattern and IQ1
// (index, delta) pair appears.
template <int TYPE> void sweep_block(uint8_t *b, int t) {
    const uint16_t d = t % (kNumEdge + 1) < kNumEdge ? kEdgeScales[t % (kNumEdge + 1)] : 0;
    const bool set_d = t % (kNumEdge + 1) < kNumEdge;
    sweep_nibble_block(TYPE, b, t);
    for (int g = 0; g < 32; g++) {
        const uint32_t n = static_cast<uint32_t>(t * 32 + g);
        switch (TYPE) {
        case TS_TYPE_IQ2_XXS: {
            uint8_t *p = b + 2 + 8 * (g / 4);
            p[g % 4] = static_cast<uint8_t>(n);
            put_u32(p + 4, set_bits(get_u32(p + 4), 7 * (g % 4), 7, n % 128));
            break;
        }
        case TS_TYPE_IQ2_XS:
            put_u16(b + 2 + 2 * g, static_cast<uint16_t>((n % 512) | ((n % 128) << 9)));
            break;
        case TS_TYPE_IQ2_S:
            b[2 + g] = static_cast<uint8_t>(n);
            b[66 + g / 4] = static_cast<uint8_t>(set_bits(b[66 + g / 4], 2 * (g % 4), 2, (n % 1024) >> 8));
            b[34 + g] = static_cast<uint8_t>(n);
            break;
        case TS_TYPE_IQ3_XXS: {
            uint8_t *aux = b + 66 + 4 * (g / 4);
            put_u32(aux, set_bits(get_u32(aux), 7 * (g % 4), 7, n % 128));
            for (int h = 0; h < 2; h++) b[2 + 2 * g + h] = static_cast<uint8_t>(2 * n + h);
            break;
        }
        case TS_TYPE_IQ3_S:
            b[74 + g] = static_cast<uint8_t>(n);
            for (int h = 0; h < 2; h++) {
                const int m = 2 * g + h;
                const uint32_t idx = (2 * n + h) % 512;
                b[2 + m] = static_cast<uint8_t>(idx);
                b[66 + m / 8] = static_cast<uint8_t>(set_bits(b[66 + m / 8], m % 8, 1, idx >> 8));
            }
            break;
        case TS_TYPE_IQ1_S: {
            b[2 + g] = static_cast<uint8_t>(n);
            uint8_t *qh = b + 34 + 2 * (g / 4);
            uint32_t v = set_bits(qh[0] | (qh[1] << 8), 3 * (g % 4), 3, (n % 2048) >> 8);
            v = set_bits(v, 15, 1, (n >> 11) & 1);
            put_u16(qh, static_cast<uint16_t>(v));
            break;
        }
        case TS_TYPE_IQ1_M:
            b[g] = static_cast<uint8_t>(n);
            b[32 + g / 2] = static_cast<uint8_t>(
                set_bits(b[32 + g / 2], 4 * (g % 2), 4, ((n % 2048) >> 8) | (((n >> 11) & 1) << 3)));
            break;
        default:
            break;
        }
    }
    if (!set_d) return;
    switch (TYPE) {
    case TS_TYPE_Q2_K:
        put_u16(b + 80, d);
        put_u16(b + 82, kEdgeScales[(t / 3) % kNumEdge]);
        break;
    case TS_TYPE_Q3_K:
        put_u16(b + 108, d);
        break;
    case TS_TYPE_Q4_1:
        put_u16(b, d);
        put_u16(b + 2, kEdgeScales[(t / 3) % kNumEdge]);
        break;
    case TS_TYPE_IQ1_M:
        for (int w = 0; w < 4; w++)
            b[48 + 2 * w + 1] =
                static_cast<uint8_t>((b[48 + 2 * w + 1] & 0x0F) | (((d >> (4 * w)) & 0xF) << 4));
        break;
    default:
        put_u16(b, d);
        break;
    }
}

uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

template <int TYPE> int check_type(const char *name) {
    using Q = qtype<TYPE>;
    using F = row_format<TYPE>;
    static_assert(F::QK == Q::QK && F::BS == Q::BS, "row_format and qtype agree on the block");
    alignas(16) uint8_t buf[Q::BS + 64];
    float src[Q::QK], qw[Q::QK], ref[Q::QK];
    char err[256];
    double worst = 0;
    int fails = 0;
    long inexact = 0, row_bad = 0, weights = 0;
    const bool must_be_exact = is_run_type(TYPE) || is_nibble_type(TYPE);
    const int sweeps = must_be_exact ? 128 : 0, trials = sweeps + 4000;
    for (int trial = 0; trial < trials && fails < 10; trial++) {
        const int off = Q::A16 ? 16 * (trial % 2) : 2 * (trial % 8);
        uint8_t *b = buf + off;
        memset(buf, 0xA5, sizeof buf);
        if (trial < sweeps) {
            for (int i = 0; i < Q::BS; i++) b[i] = static_cast<uint8_t>(next_u64());
            fix_scales<TYPE>(b);
            sweep_block<TYPE>(b, trial);
        } else if (trial % 2 == 0) {
            const double scale = 0.01 + 3.0 * next_unit(), shift = (trial % 6 == 0) ? 2.0 * scale : 0.0;
            for (int i = 0; i < Q::QK; i++) src[i] = static_cast<float>(scale * next_gauss() + shift);
            int rc;
            if (ts_quantize_needs_imatrix(TYPE)) { // random importance weights
                for (int i = 0; i < Q::QK; i++) qw[i] = static_cast<float>(0.1 + next_unit());
                rc = ts_quantize_row_imatrix(TYPE, src, b, Q::QK, qw, err, sizeof err);
            } else {
                rc = ts_quantize_row(TYPE, src, b, Q::QK, err, sizeof err);
            }
            if (rc != 0) {
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
                    // the weight as fp32 arithmetic gives it: one product (+ one sum), no FMA
                    volatile float wf = u.scale[r] * q;
                    if (Q::HAS_MIN) wf = wf + u.min[r];
                    const bool exact = float_bits(wf) == float_bits(ref[e]);
                    inexact += !exact;
                    weights++;
                    if (!(d <= 2.0 * 1.1920929e-07 * mag) || (must_be_exact && !exact)) {
                        if (fails++ < 10)
                            printf("%s: trial %d (offset %d) unit %d run %d element %d: decoded %.9g (fp32 "
                                   "%.9g), "
                                   "reference %.9g\n",
                                   name, trial, off, k, r, e, w, static_cast<double>(wf),
                                   static_cast<double>(ref[e]));
                    }
                }
            }
        }
        for (int e = 0; e < Q::QK; e++) {
            if (seen[e] != 1) {
                printf("%s: element %d is decoded %d times by the units of a block\n", name, e, seen[e]);
                return 1;
            }
            const float v = F::value(b, e);
            if (float_bits(v) != float_bits(ref[e])) {
                if (row_bad++ < 5)
                    printf("%s: trial %d row_format element %d: %.9g, reference %.9g\n", name, trial, e,
                           static_cast<double>(v), static_cast<double>(ref[e]));
                fails++;
            }
        }
    }
    char exact_note[64];
    if (inexact == 0)
        snprintf(exact_note, sizeof exact_note, "all %ld weights bit-exact", weights);
    else
        snprintf(exact_note, sizeof exact_note, "%ld of %ld weights not bit-exact", inexact, weights);
    printf("%-7s %s  %d blocks (%d swept), max |decoded - reference| / (|scale*q| + |min|) = %.3g, %s; "
           "rows.cuh %s\n",
           name, fails ? "FAIL" : "ok  ", trials, sweeps, worst, exact_note, row_bad ? "FAIL" : "bit-exact");
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
    for (uint32_t i = 0; i < 128; i++) {
        if (iq_ksigns(i) != ts_ksigns_iq2xs[i]) {
            printf("iq_ksigns(%u) = %u, ksigns_iq2xs says %u\n", i, iq_ksigns(i), ts_ksigns_iq2xs[i]);
            return 1;
        }
    }
    printf("lookups ok (IQ4_NL permute lookup: all 65536 nibble quadruples; fifth-bit spread: all 16; "
           "i-quant sign bytes: all 128)\n");
    return 0;
}

} // namespace

// The type list (quant_decode.cuh): with_type / with_block_type call f with the tag of exactly the
// listed types (the plain ones only through with_type) and return false for every other id, and the
// row decoders dispatched through it give row_elem's value for every element.
int check_type_list() {
    static const uint32_t plain[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_BF16};
    static const uint32_t block[] = {TS_TYPE_Q8_0,    TS_TYPE_Q4_0,   TS_TYPE_Q4_1,   TS_TYPE_Q5_0,
                                     TS_TYPE_Q5_1,    TS_TYPE_IQ4_NL, TS_TYPE_IQ4_XS, TS_TYPE_Q4_K,
                                     TS_TYPE_Q5_K,    TS_TYPE_Q6_K,   TS_TYPE_Q2_K,   TS_TYPE_Q3_K,
                                     TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ2_S,  TS_TYPE_IQ3_XXS,
                                     TS_TYPE_IQ3_S,   TS_TYPE_IQ1_S,  TS_TYPE_IQ1_M};
    int fails = 0;
    for (uint32_t t = 0; t < TS_TYPE_COUNT + 8; t++) {
        bool is_plain = false, is_block = false;
        for (uint32_t p : plain) is_plain |= p == t;
        for (uint32_t b : block) is_block |= b == t;
        uint32_t got = UINT32_MAX, got_block = UINT32_MAX;
        const bool any = with_type(t, [&](auto tag) { got = decltype(tag)::value; });
        const bool blk = with_block_type(t, [&](auto tag) { got_block = decltype(tag)::value; });
        if (any != (is_plain || is_block) || blk != is_block || (any && got != t) ||
            (blk && got_block != t) || row_type_supported(t) != any) {
            printf("type list: id %u dispatched as %d/%d (tags %u, %u), expected %d/%d\n", t, any, blk, got,
                   got_block, is_plain || is_block, is_block);
            fails++;
        }
        if (!any) continue;
        // one row of 512 elements from random bytes (any scale, NaN included: compared bit for bit)
        static uint8_t row[4096];
        uint64_t rng = 0x1234567ull + t;
        for (uint8_t &b : row)
            rng = rng * 6364136223846793005ull + 1442695040888963407ull, b = uint8_t(rng >> 56);
        with_type(t, [&](auto tag) {
            constexpr uint32_t T = decltype(tag)::value;
            int64_t visited = 0;
            row_for_each(T, row, 512, 0, 1, [&](int64_t i, float v) {
                const float want = row_elem<T>(row, i);
                if (float_bits(v) != float_bits(want) ||
                    float_bits(row_value(T, row, i)) != float_bits(want)) {
                    if (fails++ < 5)
                        printf("type list: type %u element %ld decoded differently\n", T, (long)i);
                }
                visited++;
            });
            if (visited != 512) {
                printf("type list: type %u, row_for_each visited %ld of 512 elements\n", T, (long)visited);
                fails++;
            }
        });
    }
    printf("type list %s  %zu plain and %zu block types dispatched, every other id refused\n",
           fails ? "FAIL" : "ok  ", sizeof plain / sizeof plain[0], sizeof block / sizeof block[0]);
    return fails ? 1 : 0;
}

int main() {
    int bad = check_lookups();
    bad += check_type_list();
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
    bad += check_swizzle<TS_TYPE_Q8_0>("q8_0");
    bad += check_swizzle<TS_TYPE_Q4_0>("q4_0");
    bad += check_swizzle<TS_TYPE_Q4_1>("q4_1");
    bad += check_swizzle<TS_TYPE_Q5_0>("q5_0");
    bad += check_swizzle<TS_TYPE_Q5_1>("q5_1");
    bad += check_swizzle<TS_TYPE_IQ4_NL>("iq4_nl");
    bad += check_swizzle<TS_TYPE_IQ4_XS>("iq4_xs");
    bad += check_swizzle<TS_TYPE_Q4_K>("q4_K");
    bad += check_swizzle<TS_TYPE_Q5_K>("q5_K");
    bad += check_swizzle<TS_TYPE_Q6_K>("q6_K");
    bad += check_swizzle<TS_TYPE_Q2_K>("q2_K");
    bad += check_swizzle<TS_TYPE_Q3_K>("q3_K");
    bad += check_swizzle<TS_TYPE_IQ2_XXS>("iq2_xxs");
    bad += check_swizzle<TS_TYPE_IQ2_XS>("iq2_xs");
    bad += check_swizzle<TS_TYPE_IQ2_S>("iq2_s");
    bad += check_swizzle<TS_TYPE_IQ3_XXS>("iq3_xxs");
    bad += check_swizzle<TS_TYPE_IQ3_S>("iq3_s");
    bad += check_swizzle<TS_TYPE_IQ1_S>("iq1_s");
    bad += check_swizzle<TS_TYPE_IQ1_M>("iq1_m");
    printf(bad ? "test_cuda_decode: FAILED\n" : "test_cuda_decode: all decoders match ts_dequantize_row\n");
    return bad ? 1 : 0;
}
