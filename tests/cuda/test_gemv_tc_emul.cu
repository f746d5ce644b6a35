// Host emulation of the tensor-core decode GEMV (src/cuda/gemv_tc.cu): the very fragment builders of
// the kernel (kquant_b_frags, tc_x_scale, tc_x_quarter, tc_x_sums in src/cuda/gemv_tc.cuh) run on the CPU around an
// mma.m16n8k16.f32.f16.f16.f32 emulated from the PTX fragment layout (A row g at k-slots 2t, 2t+1 and
// 2t+8, 2t+9; B column g at the same slots; C row g at columns 2t, 2t+1; g = lane / 4, t = lane % 4),
// with the kernel's per-super-block epilogue, for Q4_K and Q5_K, against Σ dequant(w)·x̃ in double, where x̃ is x rounded
// the way the kernel rounds it (fp16 after a power-of-two scale per token and super-block). Rows of 8,
// 1 to 8 tokens, x over six decades with zero and tiny super-blocks. It checks the layouts and the
// exactness argument; the kernel itself runs on a GPU in test_cuda_matmul. Also the input-order MMAs
// of Q8_0, Q5_0 and Q6_K (run_inorder). x̃ is the host reference ts_round_x_like_tc (src/quant/round_x.c,
// which test_cuda_matmul and the CPU's TURBOSPARK_CPU_ROUND_X emulation use too), and every fp16 value
// the kernel's staging helpers (tc_x_quarter, tc_x_inorder) produce must equal it bit for bit once scaled
// back.
extern "C" {
#include "common/half.h"
#include "quant/quant.h"
}
#include "cuda/gemm_wg.cuh"
#include "cuda/gemv_tc.cuh"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <vector>

using namespace ts_cu;

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double urand() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}
static double gauss() {
    const double u = urand() + 1e-300, v = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static double half_at(uint32_t w, int hi) {
    return ts_fp16_to_fp32((uint16_t)(hi ? w >> 16 : w & 0xFFFFu));
}

// rows quantized rows of K random weights (a per-row scale, and an offset on every third row so that
// the K-quants' mins matter) into W, and their dequantized values into wf. 0, or 1 (printed) on failure.
static int random_rows(uint32_t type, int rows, int K, std::vector<uint8_t> &W, std::vector<float> &wf) {
    const size_t rb = ts_row_size(type, K);
    std::vector<float> src(K);
    char err[256];
    W.assign(rows * rb, 0), wf.assign((size_t)rows * K, 0.0f);
    for (int r = 0; r < rows; r++) {
        const double sc = 0.05 + urand(), off = (r % 3 == 0) ? sc : 0.0;
        for (int i = 0; i < K; i++) src[i] = (float)(sc * gauss() + off);
        if (ts_quantize_row(type, src.data(), W.data() + r * rb, K, err, sizeof err) ||
            ts_dequantize_row(type, W.data() + r * rb, wf.data() + (size_t)r * K, K, err, sizeof err)) {
            printf("quantize: %s\n", err);
            return 1;
        }
    }
    return 0;
}

// C[lane][0..3] += A·B of one warp, in double: A rows g (a01: k-slots 2t, 2t+1; a45: 2t+8, 2t+9) and g + 8
// (a23, a67; null: zero, as the B-form kernel's tokens 8-15), B column g (b01, b23), C rows g (c0, c1) and
// g + 8 (c2, c3) at columns 2t, 2t+1.
static void mma_emul(double c[32][4], const uint32_t a01[32], const uint32_t a45[32], const uint32_t b0[32],
                     const uint32_t b1[32], const uint32_t *a23 = nullptr, const uint32_t *a67 = nullptr) {
    double A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        A[g][2 * t] = half_at(a01[lane], 0), A[g][2 * t + 1] = half_at(a01[lane], 1);
        A[g][2 * t + 8] = half_at(a45[lane], 0), A[g][2 * t + 9] = half_at(a45[lane], 1);
        A[g + 8][2 * t] = a23 ? half_at(a23[lane], 0) : 0,
                     A[g + 8][2 * t + 1] = a23 ? half_at(a23[lane], 1) : 0;
        A[g + 8][2 * t + 8] = a67 ? half_at(a67[lane], 0) : 0;
        A[g + 8][2 * t + 9] = a67 ? half_at(a67[lane], 1) : 0;
        B[2 * t][g] = half_at(b0[lane], 0), B[2 * t + 1][g] = half_at(b0[lane], 1);
        B[2 * t + 8][g] = half_at(b1[lane], 0), B[2 * t + 9][g] = half_at(b1[lane], 1);
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int n = 0; n < 4; n++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += A[g + 8 * (n >> 1)][k] * B[k][2 * t + (n & 1)];
            c[lane][n] += s;
        }
    }
}

// Where result n (0..3) of lane (g, t) belongs: B form (weights as B: C = tokens × rows) token g, row 2t + n
// (n < 2); WA (weights as A, C = rows × tokens) row g + 8·(n / 2), token 2t + n % 2.
static void c_place(bool wa, int lane, int n, int &token, int &row) {
    const int g = lane >> 2, t = lane & 3;
    if (wa)
        row = g + 8 * (n >> 1), token = 2 * t + (n & 1);
    else
        token = g, row = n < 2 ? 2 * t + n : -1;
}

// WA: the weights as the MMAs' A operand (gemv_tc_dot.cuh's kquant_super_wa: rows g and g + 8 of a tile of 16).
template <int TYPE, bool WA = false> static int run_type(void) {
    const int K = 512, NSB = K / 256, ROWS = WA ? 16 : 8, BS = tc_kquant<TYPE>::BS;
    const size_t rb = ts_row_size(TYPE, K);
    int fails = 0, staged_bad = 0;
    double worst = 0, worst_raw = 0;
    for (int trial = 0; trial < 40; trial++) {
        const int T = 1 + trial % 8;
        std::vector<uint8_t> W;
        std::vector<float> wf;
        if (random_rows(TYPE, ROWS, K, W, wf)) return 1;
        // x: each (token, super-block) at its own magnitude; some all zero
        std::vector<float> x(T * K);
        for (int t = 0; t < T; t++)
            for (int sb = 0; sb < NSB; sb++) {
                const double mag = pow(10.0, -3.0 + 6.0 * urand());
                const bool zero = urand() < 0.1;
                for (int i = 0; i < 256; i++) x[t * K + sb * 256 + i] = zero ? 0.0f : (float)(mag * gauss());
            }

        // the kernel's staging: per (token, super-block, lane t) unit
        std::vector<uint32_t> xs(T * NSB * kTcXsSuper);
        std::vector<uint32_t> xsum(T * NSB * 4 * 2);
        std::vector<float> xsc(T * NSB), xr(T * K); // xr: x as the kernel rounds it (the host reference)
        ts_round_x_like_tc(x.data(), T * K, 256, xr.data());
        for (int t = 0; t < T; t++)
            for (int sb = 0; sb < NSB; sb++) {
                float amax = 0;
                for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[t * K + sb * 256 + i]));
                float inv;
                const float scale = tc_x_scale(amax, inv);
                xsc[t * NSB + sb] = inv;
                for (int l = 0; l < 4; l++) {
                    uint32_t *a = &xs[(t * NSB + sb) * kTcXsSuper + l * kTcXsLane];
                    uint32_t hi, lo;
                    float qsum[4];
                    for (int q = 0; q < 4;
                         q++) { // words i = 4j + ii of MMA 2i + h at a[4i + 2h], a[4i + 2h + 1]
                        uint32_t w[8];
                        const int h = q >> 1, j = q & 1, i0 = t * K + sb * 256 + 64 * l + 32 * h + 16 * j;
                        qsum[q] = tc_x_quarter(&x[i0], scale, w);
                        // the staged fp16 values, scaled back, are the reference's bit for bit: element
                        // 4ii + e of the quarter sits in word 2ii + (e & 1), half e >> 1
                        for (int ii = 0; ii < 4; ii++)
                            for (int e = 0; e < 4; e++)
                                if ((float)half_at(w[2 * ii + (e & 1)], e >> 1) * inv != xr[i0 + 4 * ii + e])
                                    staged_bad++;
                        for (int ii = 0; ii < 4; ii++)
                            a[4 * (4 * j + ii) + 2 * h] = w[2 * ii],
                                                     a[4 * (4 * j + ii) + 2 * h + 1] = w[2 * ii + 1];
                    }
                    tc_x_sums(qsum[0] + qsum[1], qsum[2] + qsum[3], hi, lo);
                    xsum[((t * NSB + sb) * 4 + l) * 2] = hi, xsum[((t * NSB + sb) * 4 + l) * 2 + 1] = lo;
                }
            }

        // the warp: per super-block 16 + 1 MMAs and the epilogue; acc[token·ROWS + row]
        std::vector<double> acc((size_t)T * ROWS, 0.0);
        for (int sb = 0; sb < NSB; sb++) {
            static uint32_t F[16][4][16][2], Fmin[16][4]; // each row's fragments for each lane t
            for (int r = 0; r < ROWS; r++)
                for (int t = 0; t < 4; t++)
                    kquant_b_frags<TYPE>(W.data() + r * rb + sb * BS, t, F[r][t], Fmin[r][t]);
            double c[32][4] = {{0}}, cm[32][4] = {{0}};
            uint32_t x0[32], x1[32], w0[32], w1[32], w8a[32], w8b[32];
            for (int m = 0; m < 16; m++) {
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, t = lane & 3;
                    const uint32_t *xa = &xs[(g * NSB + sb) * kTcXsSuper + t * kTcXsLane];
                    x0[lane] = g < T ? xa[2 * m] : 0, x1[lane] = g < T ? xa[2 * m + 1] : 0;
                    w0[lane] = F[g][t][m][0], w1[lane] = F[g][t][m][1];
                    if (WA) w8a[lane] = F[g + 8][t][m][0], w8b[lane] = F[g + 8][t][m][1];
                }
                if (WA)
                    mma_emul(c, w0, w1, x0, x1, w8a, w8b);
                else
                    mma_emul(c, x0, x1, w0, w1);
            }
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                x0[lane] = g < T ? xsum[((g * NSB + sb) * 4 + t) * 2] : 0;
                x1[lane] = g < T ? xsum[((g * NSB + sb) * 4 + t) * 2 + 1] : 0;
                w0[lane] = Fmin[g][t];
                if (WA) w8a[lane] = Fmin[g + 8][t];
            }
            if (WA)
                mma_emul(cm, w0, w0, x0, x1, w8a, w8a);
            else
                mma_emul(cm, x0, x1, w0, w0);
            for (int lane = 0; lane < 32; lane++)
                for (int n = 0; n < 4; n++) {
                    int token, row;
                    c_place(WA, lane, n, token, row);
                    if (row < 0 || token >= T) continue;
                    const uint8_t *blk = W.data() + row * rb + sb * BS;
                    const double d = ts_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
                    const double dmin = ts_fp16_to_fp32((uint16_t)(blk[2] | blk[3] << 8));
                    acc[token * ROWS + row] +=
                        xsc[token * NSB + sb] * (d * c[lane][n] - 64.0 * dmin * cm[lane][n]);
                }
        }
        for (int tok = 0; tok < T; tok++)
            for (int o = 0; o < ROWS; o++) {
                double ref = 0, raw = 0, mag = 0;
                for (int i = 0; i < K; i++) {
                    ref += (double)wf[o * K + i] * xr[tok * K + i];
                    raw += (double)wf[o * K + i] * x[tok * K + i];
                    mag += fabs((double)wf[o * K + i] * x[tok * K + i]);
                }
                const double got = acc[tok * ROWS + o];
                const double e = fabs(got - ref) / (mag > 0 ? mag : 1e-300);
                const double er = fabs(got - raw) / (mag > 0 ? mag : 1e-300);
                if (!(e <= 1e-6)) {
                    if (fails < 5)
                        printf("  FAIL trial %d T %d token %d row %d: got %.9g, rounded-x reference %.9g (S "
                               "%.3g)\n",
                               trial, T, tok, o, got, ref, mag);
                    fails++;
                }
                if (e > worst || e != e) worst = e;
                if (er > worst_raw) worst_raw = er;
            }
    }
    printf("%s%s: 40 trials of %d rows x %d inputs, T = 1..8: max |emulated - sum(w*x~)| / sum|w*x| = %.2e "
           "(bound 1e-6); against unrounded x %.2e; staged x != ts_round_x_like_tc at %d inputs%s\n",
           ts_type_name(TYPE), WA ? " (weights as A)" : "", ROWS, K, worst, worst_raw, staged_bad,
           fails || staged_bad ? "  FAIL" : "");
    return fails + staged_bad;
}

// Q8_0, Q5_0, Q6_K: 16-input MMAs in input order (gemv_tc.cuh, tc_x_inorder / inorder_b_frag), x staged
// per group of G inputs with one power-of-two scale, each MMA's result scaled by its block's d (Q8_0,
// Q5_0) or its sub-block's scale and the super-block's d (Q6_K), against Σ dequant(w)·x̃ in double.
// WA: the weights as the MMAs' A operand (dot_inorder_wa: rows g and g + 8 of a tile of 16).
template <int TYPE, bool WA = false> static int run_inorder(int K, int G) {
    using Q = tc_inorder<TYPE>;
    const int ROWS = WA ? 16 : 8, NG = K / G;
    const size_t rb = ts_row_size(TYPE, K);
    int fails = 0, staged_bad = 0;
    double worst = 0;
    for (int trial = 0; trial < 40; trial++) {
        const int T = 1 + trial % 8;
        std::vector<uint8_t> W;
        std::vector<float> wf;
        if (random_rows(TYPE, ROWS, K, W, wf)) return 1;
        std::vector<float> x(T * K), xr(T * K), scale(T * NG), inv(T * NG);
        for (int t = 0; t < T; t++)
            for (int gi = 0; gi < NG; gi++) {
                const double mag = pow(10.0, -3.0 + 6.0 * urand());
                const bool zero = urand() < 0.1;
                float amax = 0;
                for (int i = 0; i < G; i++) {
                    const float v = zero ? 0.0f : (float)(mag * gauss());
                    x[t * K + gi * G + i] = v;
                    amax = fmaxf(amax, fabsf(v));
                }
                scale[t * NG + gi] = tc_x_scale(amax, inv[t * NG + gi]);
            }
        ts_round_x_like_tc(x.data(), T * K, G, xr.data()); // x as the kernel rounds it (the host reference)
        std::vector<double> acc((size_t)T * ROWS, 0.0);    // acc[token·ROWS + row]
        for (int gi = 0; gi < NG; gi++)
            for (int mm = 0; mm < G / 16; mm++) {
                const int in0 = gi * G + 16 * mm;                    // the MMA's first input
                const int blk = in0 / Q::QK, m = (in0 % Q::QK) / 16; // its block and MMA within the block
                uint32_t x0[32], x1[32], w0[32], w1[32], w8a[32], w8b[32];
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, t = lane & 3;
                    x0[lane] = x1[lane] = 0;
                    if (g < T) {
                        tc_x_inorder(&x[g * K + in0], scale[g * NG + gi], t, x0[lane], x1[lane]);
                        // the staged fp16 values, scaled back, are the reference's bit for bit
                        const float *r = &xr[g * K + in0 + 2 * t], iv = inv[g * NG + gi];
                        if ((float)half_at(x0[lane], 0) * iv != r[0] ||
                            (float)half_at(x0[lane], 1) * iv != r[1] ||
                            (float)half_at(x1[lane], 0) * iv != r[8] ||
                            (float)half_at(x1[lane], 1) * iv != r[9])
                            staged_bad++;
                    }
                    inorder_b_frag<TYPE>(W.data() + g * rb + blk * Q::BS, m, t, w0[lane], w1[lane]);
                    if (WA)
                        inorder_b_frag<TYPE>(W.data() + (g + 8) * rb + blk * Q::BS, m, t, w8a[lane],
                                             w8b[lane]);
                }
                double c[32][4] = {{0}};
                if (WA)
                    mma_emul(c, w0, w1, x0, x1, w8a, w8b);
                else
                    mma_emul(c, x0, x1, w0, w1);
                for (int lane = 0; lane < 32; lane++)
                    for (int n = 0; n < 4; n++) {
                        int token, row;
                        c_place(WA, lane, n, token, row);
                        if (row < 0 || token >= T) continue;
                        const uint8_t *b = W.data() + row * rb + blk * Q::BS;
                        double f;
                        if (TYPE == TS_TYPE_Q6_K)
                            f = ts_fp16_to_fp32((uint16_t)(b[208] | b[209] << 8)) *
                                (double)(int8_t)b[192 + m];
                        else
                            f = ts_fp16_to_fp32((uint16_t)(b[0] | b[1] << 8));
                        acc[token * ROWS + row] += inv[token * NG + gi] * f * c[lane][n];
                    }
            }
        for (int tok = 0; tok < T; tok++)
            for (int o = 0; o < ROWS; o++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < K; i++) {
                    ref += (double)wf[o * K + i] * xr[tok * K + i];
                    mag += fabs((double)wf[o * K + i] * x[tok * K + i]);
                }
                const double got = acc[tok * ROWS + o];
                const double e = fabs(got - ref) / (mag > 0 ? mag : 1e-300);
                if (!(e <= 1e-6)) {
                    if (fails < 5)
                        printf("  FAIL trial %d T %d token %d row %d: got %.9g, rounded-x reference %.9g (S "
                               "%.3g)\n",
                               trial, T, tok, o, got, ref, mag);
                    fails++;
                }
                if (e > worst || e != e) worst = e;
            }
    }
    printf(
        "%s%s: 40 trials of %d rows x %d inputs (groups of %d), T = 1..8, MMAs in input order: max |emulated "
        "- sum(w*x~)| / sum|w*x| = %.2e (bound 1e-6); staged x != ts_round_x_like_tc at %d inputs%s\n",
        ts_type_name(TYPE), WA ? " (weights as A)" : "", ROWS, K, G, worst, staged_bad,
        fails || staged_bad ? "  FAIL" : "");
    return fails + staged_bad;
}

// ---- the warpgroup-MMA prefill products (src/cuda/gemm_wg.cu) -------------------------------------------
//
// The kernel's layouts (gemm_wg.cuh) end to end for one warpgroup: x's chunk written as its prep kernel
// writes it (the GEMV's staging units, placed by wg_x_word), copied into the A stages as its cp.async copies
// do (dense: the chunk's halves as they are; experts: each token's core rows gathered, both checked), B decoded by kquant_b_frags into the canonical B tile, the min tiles and {d, dmin},
// then m64n128k16 MMAs emulated from wgmma's shared-memory layout (an element (r, k) of a K-major operand
// without swizzle at start + (r / 8)·SBO + (k / 8)·LBO + (r % 8)·16 + (k % 8)·2) and the kernel's
// epilogue, against Σ dequant(w)·x̃ in double. Token counts below 64: the gather repeats the last token, as
// the kernel's expert tiles do; the dense copy takes the chunk's unwritten rows (tokens never stored).
// Stage `half` of the A stages (first and second half of a group) from one chunk: dense, the chunk's bytes
// of that half as they are; gathered, token r's core rows (and with the second half its min-term rows and
// 2^-s) from x row min(r, T − 1) of the chunk.
template <int HS> static void wg_stage_x(const uint8_t *c, int half, bool gather, int M, int T, uint8_t *a) {
    using C = wg_chunk<HS>;
    if (!gather) {
        memcpy(a, c + half * C::HALF, half ? C::STAGE : C::HALF);
        return;
    }
    for (int r = 0; r < M; r++) {
        const int xr = r < T ? r : T - 1;
        for (int j = 0; j < HS; j++)
            for (int kc = 0; kc < 2; kc++)
                memcpy(a + canon(r, j, kc, 0), c + half * C::HALF + canon(xr, j, kc, 0), 16);
        if (half) {
            if (HS == 8)
                for (int kc = 0; kc < 2; kc++)
                    memcpy(a + C::MIN - C::HALF + canon(r, 0, kc, 0), c + C::MIN + canon(xr, 0, kc, 0), 16);
            memcpy(a + C::SCALE - C::HALF + 4 * r, c + C::SCALE + 4 * xr, 4);
        }
    }
}
static double canon_at(const std::vector<uint8_t> &img, size_t start, int r, int k) {
    uint16_t h;
    memcpy(&h, &img[start + (size_t)((r / 8) * kSbo + (k / 8) * kLbo + (r % 8) * 16 + (k % 8) * 2)], 2);
    return ts_fp16_to_fp32(h);
}
// The emulated products acc (T tokens × rows) against Σ dequant(w)·x̃ in double, relative to Σ|w·x|
// (bound 1e-6): the failures (the first five of a type printed, `printed` so far) and the worst into
// worst.
static int wg_check(int trial, int T, int rows, int K, const std::vector<double> &acc,
                    const std::vector<float> &wf, const std::vector<float> &x, const std::vector<float> &xr,
                    int printed, double &worst) {
    int fails = 0;
    for (int m = 0; m < T; m++)
        for (int n = 0; n < rows; n++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < K; i++) {
                ref += (double)wf[n * K + i] * xr[m * K + i];
                mag += fabs((double)wf[n * K + i] * x[m * K + i]);
            }
            const double e = fabs(acc[(size_t)m * rows + n] - ref) / (mag > 0 ? mag : 1e-300);
            if (!(e <= 1e-6)) {
                if (printed + fails < 5)
                    printf("  FAIL wg trial %d token %d row %d: got %.9g, reference %.9g (S %.3g)\n", trial,
                           m, n, acc[(size_t)m * rows + n], ref, mag);
                fails++;
            }
            if (e > worst || e != e) worst = e;
        }
    return fails;
}
template <int TYPE> static int run_wg(void) {
    const int K = 512, NSB = K / 256, ROWS = kWgRows, M = 64, BS = tc_kquant<TYPE>::BS;
    const size_t rb = ts_row_size(TYPE, K);
    int fails = 0;
    double worst = 0;
    using C = wg_chunk<8>;
    for (int trial = 0; trial < 6; trial++) {
        const int T = trial % 3 == 0 ? M : trial % 3 == 1 ? 37 : 1;
        const bool gather = trial >= 3;
        std::vector<uint8_t> W;
        std::vector<float> wf;
        if (random_rows(TYPE, ROWS, K, W, wf)) return 1;
        std::vector<float> x(T * K), xr(T * K);
        for (int t = 0; t < T; t++)
            for (int sb = 0; sb < NSB; sb++) {
                const double mag = pow(10.0, -3.0 + 6.0 * urand());
                const bool zero = urand() < 0.1;
                for (int i = 0; i < 256; i++) x[t * K + sb * 256 + i] = zero ? 0.0f : (float)(mag * gauss());
            }
        ts_round_x_like_tc(x.data(), T * K, 256, xr.data());
        // the tile's chunks (wg_x_prep_kernel)
        std::vector<uint8_t> chunk((size_t)NSB * C::BYTES, 0);
        for (int t = 0; t < T; t++)
            for (int sb = 0; sb < NSB; sb++) {
                uint8_t *c = &chunk[(size_t)sb * C::BYTES];
                float amax = 0;
                for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[t * K + sb * 256 + i]));
                float inv;
                const float scale = tc_x_scale(amax, inv);
                for (int l = 0; l < 4; l++) {
                    float qsum[4];
                    for (int q = 0; q < 4; q++) {
                        uint32_t w[8];
                        const int h = q >> 1, j = q & 1, i0 = t * K + sb * 256 + 64 * l + 32 * h + 16 * j;
                        qsum[q] = tc_x_quarter(&x[i0], scale, w);
                        for (int ii = 0; ii < 4; ii++) {
                            memcpy(c + wg_x_word<8>(t, 2 * (4 * j + ii) + h, 0, l), &w[2 * ii], 4);
                            memcpy(c + wg_x_word<8>(t, 2 * (4 * j + ii) + h, 1, l), &w[2 * ii + 1], 4);
                        }
                    }
                    uint32_t hi, lo;
                    tc_x_sums(qsum[0] + qsum[1], qsum[2] + qsum[3], hi, lo);
                    memcpy(c + C::MIN + canon(t, 0, 0, l), &hi, 4);
                    memcpy(c + C::MIN + canon(t, 0, 1, l), &lo, 4);
                }
                memcpy(c + C::SCALE + 4 * t, &inv, 4);
            }
        std::vector<double> acc((size_t)M * ROWS, 0.0), tmp((size_t)M * ROWS);
        for (int sb = 0; sb < NSB; sb++) {
            std::vector<uint8_t> A(2 * (size_t)C::STAGE), B(2 * (size_t)kHalfBytes), Bm(kStepBytes);
            std::vector<float> d(ROWS), dmin(ROWS);
            for (int half = 0; half < 2; half++) { // the copies (issue_x) and the decode (decode)
                wg_stage_x<8>(&chunk[(size_t)sb * C::BYTES], half, gather, M, T, &A[(size_t)half * C::STAGE]);
                for (int m = 0; m < ROWS; m++)
                    for (int tt = 0; tt < 4; tt++) {
                        uint32_t Bf[16][2], Bmin;
                        kquant_b_frags<TYPE>(W.data() + m * rb + sb * BS, tt, Bf, Bmin);
                        for (int j = 0; j < 8; j++)
                            for (int kc = 0; kc < 2; kc++)
                                memcpy(&B[(size_t)half * kHalfBytes + canon(m, j, kc, tt)],
                                       &Bf[8 * half + j][kc], 4);
                        for (int kc = 0; kc < 2; kc++) memcpy(&Bm[canon(m, 0, kc, tt)], &Bmin, 4);
                    }
            }
            for (int m = 0; m < ROWS; m++) {
                const uint8_t *blk = W.data() + m * rb + sb * BS;
                d[m] = ts_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
                dmin[m] = ts_fp16_to_fp32((uint16_t)(blk[2] | blk[3] << 8));
            }
            std::fill(tmp.begin(), tmp.end(), 0.0);
            for (int step = 0; step < 16; step++) { // 16 MMAs m64n128k16
                const size_t sa = (size_t)(step / 8) * C::STAGE + (size_t)(step % 8) * kStepBytes,
                             sbb = (size_t)(step / 8) * kHalfBytes + (size_t)(step % 8) * kStepBytes;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < ROWS; n++) {
                        double s = 0;
                        for (int k = 0; k < 16; k++) s += canon_at(A, sa, m, k) * canon_at(B, sbb, n, k);
                        tmp[(size_t)m * ROWS + n] += s;
                    }
            }
            for (int m = 0; m < M; m++) {
                float e;
                memcpy(&e, &A[(size_t)C::STAGE + C::SCALE - C::HALF + 4 * m], 4);
                for (int n = 0; n < ROWS; n++) {
                    double cm = 0;
                    for (int k = 0; k < 16; k++)
                        cm += canon_at(A, (size_t)C::STAGE + C::MIN - C::HALF, m, k) * canon_at(Bm, 0, n, k);
                    acc[(size_t)m * ROWS + n] +=
                        (double)e * d[n] * tmp[(size_t)m * ROWS + n] - 64.0 * e * dmin[n] * cm;
                }
            }
        }
        fails += wg_check(trial, T, ROWS, K, acc, wf, x, xr, fails, worst);
    }
    printf("%s, warpgroup layouts: 6 trials of %d rows x %d inputs, 64 / 37 / 1 tokens, copied and gathered: "
           "max |emulated - sum(w*x~)| / sum|w*x| = %.2e (bound 1e-6)%s\n",
           ts_type_name(TYPE), ROWS, K, worst, fails ? "  FAIL" : "");
    return fails;
}

// The in-order types on the warpgroup MMAs: chunks of the inputs in order at the group's scale
// (wg_x_prep_inorder_kernel), copied or gathered 4 k-steps a half-step, B as hi = fp16(d·q) and lo =
// fp16(d·q − hi) from inorder_b_frag (k-step slots j and 4 + j of the stage), both MMAs into one sum, and
// acc += 2^-s·tmp after each group of 128.
template <int TYPE> static int run_wg_inorder(void) {
    const int K = 256, NG = K / 128, ROWS = kWgRows, M = 64, BS = tc_inorder<TYPE>::BS;
    using C = wg_chunk<4>;
    const size_t rb = ts_row_size(TYPE, K);
    int fails = 0;
    double worst = 0;
    for (int trial = 0; trial < 6; trial++) {
        const int T = trial % 3 == 0 ? M : trial % 3 == 1 ? 37 : 1;
        const bool gather = trial >= 3;
        std::vector<uint8_t> W;
        std::vector<float> wf;
        if (random_rows(TYPE, ROWS, K, W, wf)) return 1;
        std::vector<float> x(T * K), xr(T * K);
        for (int t = 0; t < T; t++)
            for (int g = 0; g < NG; g++) {
                const double mag = pow(10.0, -3.0 + 6.0 * urand());
                for (int i = 0; i < 128; i++) x[t * K + g * 128 + i] = (float)(mag * gauss());
            }
        ts_round_x_like_tc(x.data(), T * K, 128, xr.data());
        std::vector<uint8_t> chunk((size_t)NG * C::BYTES, 0);
        for (int t = 0; t < T; t++)
            for (int g = 0; g < NG; g++) {
                uint8_t *c = &chunk[(size_t)g * C::BYTES];
                const float *v = &x[t * K + g * 128];
                float amax = 0;
                for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(v[i]));
                float inv;
                const float scale = tc_x_scale(amax, inv);
                for (int step = 0; step < 8; step++)
                    for (int kc = 0; kc < 2; kc++)
                        for (int w = 0; w < 4; w++) {
                            const int i = 16 * step + 8 * kc + 2 * w;
                            const uint32_t word = h2_pack(v[i] * scale, v[i + 1] * scale);
                            memcpy(c + wg_x_word<4>(t, step, kc, w), &word, 4);
                        }
                memcpy(c + C::SCALE + 4 * t, &inv, 4);
            }
        std::vector<double> acc((size_t)M * ROWS, 0.0), tmp((size_t)M * ROWS);
        for (int g = 0; g < NG; g++) {
            std::fill(tmp.begin(), tmp.end(), 0.0);
            std::vector<uint8_t> A(2 * (size_t)C::STAGE), B(2 * (size_t)kHalfBytes);
            for (int half = 0; half < 2; half++) {
                wg_stage_x<4>(&chunk[(size_t)g * C::BYTES], half, gather, M, T, &A[(size_t)half * C::STAGE]);
                uint8_t *b = &B[(size_t)half * kHalfBytes];
                for (int m = 0; m < ROWS; m++)
                    for (int tt = 0; tt < 4; tt++)
                        for (int j = 0; j < 4; j++) {
                            const uint8_t *blk =
                                W.data() + m * rb + (size_t)(4 * g + 2 * half + (j >> 1)) * BS;
                            const float d = ts_fp16_to_fp32((uint16_t)(blk[0] | blk[1] << 8));
                            uint32_t q[2];
                            inorder_b_frag<TYPE>(blk, j & 1, tt, q[0], q[1]);
                            for (int kc = 0; kc < 2; kc++) {
                                const float p0 = d * (float)half_at(q[kc], 0),
                                            p1 = d * (float)half_at(q[kc], 1);
                                const uint16_t h0 = ts_fp32_to_fp16(p0), h1 = ts_fp32_to_fp16(p1);
                                const uint16_t l0 = ts_fp32_to_fp16(p0 - ts_fp16_to_fp32(h0)),
                                               l1 = ts_fp32_to_fp16(p1 - ts_fp16_to_fp32(h1));
                                const uint32_t hi = h0 | (uint32_t)h1 << 16, lo = l0 | (uint32_t)l1 << 16;
                                memcpy(b + canon(m, j, kc, tt), &hi, 4);
                                memcpy(b + canon(m, 4 + j, kc, tt), &lo, 4);
                            }
                        }
                for (int j = 0; j < 4; j++) // k-step j against hi (slot j) and lo (slot 4 + j)
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < ROWS; n++) {
                            double sum = 0;
                            for (int k = 0; k < 16; k++)
                                sum +=
                                    canon_at(A, (size_t)half * C::STAGE + (size_t)j * kStepBytes, m, k) *
                                    (canon_at(B, (size_t)half * kHalfBytes + (size_t)j * kStepBytes, n, k) +
                                     canon_at(B, (size_t)half * kHalfBytes + (size_t)(4 + j) * kStepBytes, n,
                                              k));
                            tmp[(size_t)m * ROWS + n] += sum;
                        }
            }
            for (int m = 0; m < M; m++) {
                float e;
                memcpy(&e, &A[(size_t)C::STAGE + C::SCALE - C::HALF + 4 * m], 4);
                for (int n = 0; n < ROWS; n++)
                    acc[(size_t)m * ROWS + n] += (double)e * tmp[(size_t)m * ROWS + n];
            }
        }
        fails += wg_check(trial, T, ROWS, K, acc, wf, x, xr, fails, worst);
    }
    printf("%s, warpgroup layouts (B as hi + lo of d*q): 6 trials of %d rows x %d inputs, 64 / 37 / 1 "
           "tokens, copied and gathered: "
           "max |emulated - sum(w*x~)| / sum|w*x| = %.2e (bound 1e-6)%s\n",
           ts_type_name(TYPE), ROWS, K, worst, fails ? "  FAIL" : "");
    return fails;
}

// inorder_b_frag builds each pair of quants in a 16-bit word at once; here, for every MMA m and lane t of
// random blocks, its words equal the element-at-a-time form of the same rule (each quant u of the type's
// layout as 1024 + u in fp16, minus 1024 + the type's bias), bit for bit.
template <int TYPE> static int frag_equal(void) {
    using Q = tc_inorder<TYPE>;
    const int M = TYPE == TS_TYPE_Q6_K ? 16 : 2;
    int bad = 0;
    std::vector<uint8_t> blk(Q::BS + 2);
    for (int trial = 0; trial < 20000; trial++) {
        uint8_t *b = blk.data(); // 2-byte aligned, as every caller's blocks
        for (int i = 0; i < Q::BS; i++) b[i] = (uint8_t)(urand() * 256);
        for (int m = 0; m < M; m++)
            for (int t = 0; t < 4; t++) {
                uint32_t w01, w23, want[2];
                inorder_b_frag<TYPE>(b, m, t, w01, w23);
                for (int half = 0; half < 2; half++) {
                    int u[2];
                    for (int k = 0; k < 2; k++) {
                        const int e = 16 * m + 2 * t + 8 * half + k; // the input's index in the block
                        if (TYPE == TS_TYPE_Q8_0) {
                            u[k] = (int8_t)b[2 + e] + 128;
                        } else if (TYPE == TS_TYPE_Q5_0) {
                            const uint32_t qh = b[2] | b[3] << 8 | b[4] << 16 | (uint32_t)b[5] << 24;
                            u[k] = ((b[6 + e % 16] >> (e < 16 ? 0 : 4)) & 15) | (((qh >> e) & 1) << 4);
                        } else { // Q6_K: element e = 128n + 32q + l
                            const int n = e / 128, q = (e % 128) / 32, l = e % 32;
                            u[k] = ((b[64 * n + 32 * (q & 1) + l] >> (q >= 2 ? 4 : 0)) & 15) |
                                   (((b[128 + 32 * n + l] >> (2 * q)) & 3) << 4);
                        }
                    }
                    const int bias = TYPE == TS_TYPE_Q8_0 ? 128 : TYPE == TS_TYPE_Q5_0 ? 16 : 32;
                    want[half] = h2_sub((uint32_t)u[0] | (uint32_t)u[1] << 16 | 0x64006400u,
                                        ts_fp32_to_fp16((float)(1024 + bias)) * 0x10001u);
                }
                if (M == 2) { // the two-MMA builder gives the same words
                    uint32_t p01[2], p23[2];
                    inorder_b_frags2<TYPE>(b, t, p01, p23);
                    if ((p01[m] != w01 || p23[m] != w23) && bad++ < 3)
                        printf("  FAIL %s inorder_b_frags2 m %d t %d: %08x %08x, inorder_b_frag %08x %08x\n",
                               ts_type_name(TYPE), m, t, p01[m], p23[m], w01, w23);
                }
                if (w01 != want[0] || w23 != want[1]) {
                    if (bad < 3)
                        printf("  FAIL %s m %d t %d: %08x %08x, element-wise %08x %08x\n", ts_type_name(TYPE),
                               m, t, w01, w23, want[0], want[1]);
                    bad++;
                }
            }
    }
    printf("%s: inorder_b_frag (and inorder_b_frags2) = the element-at-a-time quants on 20000 random blocks, "
           "every MMA and lane: %s\n",
           ts_type_name(TYPE), bad ? "FAIL" : "equal");
    return bad;
}

// tc_div (gemv_tc.cuh) against integer division: every divisor up to 4,096 and some large ones, for numerators
// near 0, near multiples of the divisor, and near 2^31 − 1 (the bound it is exact for), plus random ones.
static int run_div(void) {
    int fails = 0;
    long long checked = 0;
    auto check = [&](uint32_t d, long long n) {
        if (n < 0 || n > 0x7fffffffLL) return;
        const tc_div f(d);
        const int want = static_cast<int>(n / d), got = f.div(static_cast<int>(n));
        checked++;
        if (got != want && fails++ < 8) printf("  tc_div: %lld / %u = %d, it gives %d\n", n, d, want, got);
    };
    for (uint32_t d = 1; d <= 4096; d++) {
        for (long long n = 0; n < 3 * (long long)d + 3; n++) check(d, n);
        for (long long k = 0; k < 64; k++) check(d, 0x7fffffffLL - k);
        for (long long m = 1; m < 64; m++) {
            const long long c = (0x7fffffffLL / d - m) * d;
            check(d, c - 1), check(d, c), check(d, c + 1);
        }
        for (int r = 0; r < 64; r++) check(d, (long long)(urand() * 2147483647.0));
    }
    const uint32_t big[] = {65535, 65536, 65537, 1000003, 1u << 20, (1u << 30) - 1, 1u << 30, 0x7fffffffu};
    for (uint32_t d : big)
        for (int r = 0; r < 100000; r++) {
            const long long n = r < 50000 ? (long long)(urand() * 2147483647.0) : 0x7fffffffLL - (r - 50000);
            check(d, n);
        }
    printf("  tc_div: %lld quotients, %d wrong\n", checked, fails);
    return fails ? 1 : 0;
}

int main(void) {
    const int fails = run_div() + run_type<TS_TYPE_Q4_K>() + run_type<TS_TYPE_Q5_K>() +
                      run_inorder<TS_TYPE_Q8_0>(640, 128) + run_inorder<TS_TYPE_Q5_0>(640, 128) +
                      run_inorder<TS_TYPE_Q6_K>(512, 256) + run_wg<TS_TYPE_Q4_K>() + run_wg<TS_TYPE_Q5_K>() +
                      run_wg_inorder<TS_TYPE_Q8_0>() + run_wg_inorder<TS_TYPE_Q5_0>() +
                      run_type<TS_TYPE_Q4_K, true>() + run_type<TS_TYPE_Q5_K, true>() +
                      run_inorder<TS_TYPE_Q8_0, true>(640, 128) + run_inorder<TS_TYPE_Q5_0, true>(640, 128) +
                      run_inorder<TS_TYPE_Q6_K, true>(512, 256) + frag_equal<TS_TYPE_Q8_0>() +
                      frag_equal<TS_TYPE_Q5_0>() + frag_equal<TS_TYPE_Q6_K>();
    printf(fails ? "test_gemv_tc_emul: FAILED\n" : "test_gemv_tc_emul: all passed\n");
    return fails ? 1 : 0;
}
