// Host emulation of the integer-MMA matrix-vector products (src/cuda/matvec_mma.cuh): the very
// per-type fragment builders (mma_frag<TYPE>::get), digit split (mma_digits) and digit combine
// (mma_digit_value) of the kernels, run on the CPU around an mma.m16n8k32.s8 emulated from the PTX
// fragment layout (A rows g, g + 8 at k = 4t.., 16 + 4t..; B column g at the same k; C rows g, g + 8 at
// columns 2t, 2t + 1; g = lane / 4, t = lane % 4) and the kernel's per-lane arithmetic, against
// Σ dequant(w)·x in double on random rows of every type and x over three decades (zero sub-blocks
// included). It checks the layouts and the arithmetic; the kernels themselves run on a GPU in
// test_cuda_matmul with TURBOSPARK_CUDA_MMA=1.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/matvec_mma.cuh"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>

#pragma nv_diag_suppress 177

using namespace ts_cu;

static uint64_t rs = 88172645463325252ull;
static double urand() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}
static double gauss() {
    const double u = urand() + 1e-300, v = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static int8_t byte_of(uint32_t w, int i) {
    return (int8_t)((w >> (8 * i)) & 0xFF);
}

// one m16n8k32 s8 MMA of a warp, from and to the lanes' registers (C accumulates)
static void mma_emul(int c[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    int A[16][32], B[32][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = byte_of(a[lane][0], i), A[g + 8][4 * t + i] = byte_of(a[lane][1], i);
            A[g][16 + 4 * t + i] = byte_of(a[lane][2], i), A[g + 8][16 + 4 * t + i] = byte_of(a[lane][3], i);
            B[4 * t + i][g] = byte_of(b[lane][0], i), B[16 + 4 * t + i][g] = byte_of(b[lane][1], i);
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3, rows[4] = {g, g, g + 8, g + 8},
                  cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int r = 0; r < 4; r++) {
            int s = 0;
            for (int k = 0; k < 32; k++) s += A[rows[r]][k] * B[k][cols[r]];
            c[lane][r] += s;
        }
    }
}

// The kernel (mma_stage_digits + mma_tile, kMmaWarps warps a tile) for one type on the CPU.
template <int TYPE> static double check(const char *name, int ne0, int n_out) {
    using F = mma_frag<TYPE>;
    const size_t rb = ts_row_size(TYPE, ne0);
    std::vector<uint8_t> W(rb * n_out + 16);
    std::vector<float> row(ne0), deq(ne0), x(ne0);
    char err[256];
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < ne0; i++) row[i] = (float)(gauss() * (1 + (r % 5)) + (r % 3 == 0 ? 0.7 : 0.0));
        if (ts_quantize_row(TYPE, row.data(), W.data() + rb * r, ne0, err, sizeof err)) {
            printf("%s: quantize: %s\n", name, err);
            return 1;
        }
    }
    for (int i = 0; i < ne0; i++) x[i] = (float)(gauss() * pow(10.0, 3 * urand() - 1.5));
    for (int i = 64; i < 96; i++) x[i] = 0.0f; // a zero sub-block
    const int nsb = ne0 / 32;
    std::vector<int8_t> dg(4 * (size_t)ne0);
    std::vector<float> xsc(nsb), xsum(nsb);
    for (int sb = 0; sb < nsb; sb++) { // mma_stage_digits (warp sums in the butterfly's order)
        float v[32], mx[32], s[32];
        for (int l = 0; l < 32; l++) v[l] = x[sb * 32 + l], mx[l] = fabsf(v[l]), s[l] = v[l];
        for (int o = 16; o > 0; o >>= 1) {
            float m2[32], s2[32];
            for (int l = 0; l < 32; l++) m2[l] = fmaxf(mx[l], mx[l ^ o]), s2[l] = s[l] + s[l ^ o];
            memcpy(mx, m2, sizeof mx), memcpy(s, s2, sizeof s);
        }
        int E = 0;
        if (mx[0] > 0.0f) frexpf(mx[0], &E);
        for (int l = 0; l < 32; l++) {
            int8_t d[4];
            mma_digits(v[l], E, d);
            long long back = 0;
            for (int p = 3; p >= 0; p--) back = back * 128 + d[p];
            if (back != (long long)nearbyintf(ldexpf(v[l], 26 - E))) {
                printf("%s: digits do not add up\n", name);
                return 1;
            }
            for (int p = 0; p < 4; p++) dg[(size_t)p * ne0 + sb * 32 + l] = d[p];
        }
        xsc[sb] = ldexpf(1.0f, E - 26), xsum[sb] = s[0];
    }
    double worst = 0;
    for (int tile = 0; tile < (n_out + 15) / 16; tile++) {
        float part[kMmaWarps][16] = {{0}};
        for (int warp = 0; warp < kMmaWarps; warp++) {
            float acc0[32] = {0}, acc1[32] = {0};
            for (int sb = warp; sb < nsb; sb += kMmaWarps) {
                uint32_t a[32][4], b[32][2];
                float sc0[32], mn0[32], sc1[32], mn1[32];
                int c[32][4] = {{0}};
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, t = lane & 3, r0 = tile * 16 + g, r1 = r0 + 8;
                    const uint8_t *row0 = W.data() + rb * (r0 < n_out ? r0 : n_out - 1);
                    const uint8_t *row1 = W.data() + rb * (r1 < n_out ? r1 : n_out - 1);
                    F::get(row0, sb, t, a[lane][0], a[lane][2], sc0[lane], mn0[lane]);
                    F::get(row1, sb, t, a[lane][1], a[lane][3], sc1[lane], mn1[lane]);
                    b[lane][0] = b[lane][1] = 0;
                    if (g < 4) {
                        memcpy(&b[lane][0], &dg[(size_t)g * ne0 + sb * 32 + 4 * t], 4);
                        memcpy(&b[lane][1], &dg[(size_t)g * ne0 + sb * 32 + 16 + 4 * t], 4);
                    }
                }
                mma_emul(c, a, b);
                float v0[32], v1[32];
                for (int lane = 0; lane < 32; lane++)
                    v0[lane] = mma_digit_value(c[lane][0], c[lane][1], lane & 3),
                    v1[lane] = mma_digit_value(c[lane][2], c[lane][3], lane & 3);
                for (int lane = 0; lane < 32; lane++) {
                    const float w0 = v0[lane] + v0[lane ^ 1], w1 = v1[lane] + v1[lane ^ 1];
                    acc0[lane] = fmaf(sc0[lane], w0 * xsc[sb], acc0[lane]);
                    acc1[lane] = fmaf(sc1[lane], w1 * xsc[sb], acc1[lane]);
                    if (mn0[lane] != 0.0f || mn1[lane] != 0.0f)
                        acc0[lane] = fmaf(mn0[lane], xsum[sb], acc0[lane]),
                        acc1[lane] = fmaf(mn1[lane], xsum[sb], acc1[lane]);
                }
            }
            for (int lane = 0; lane < 32; lane += 4)
                part[warp][lane >> 2] = acc0[lane], part[warp][(lane >> 2) + 8] = acc1[lane];
        }
        for (int i = 0; i < 16; i++) {
            const int r = tile * 16 + i;
            if (r >= n_out) continue;
            float s = part[0][i];
            for (int w = 1; w < kMmaWarps; w++) s += part[w][i];
            if (ts_dequantize_row(TYPE, W.data() + rb * r, deq.data(), ne0, err, sizeof err)) {
                printf("%s: dequantize: %s\n", name, err);
                return 1;
            }
            double ref = 0, mag = 0;
            for (int k = 0; k < ne0; k++) ref += (double)deq[k] * x[k], mag += fabs((double)deq[k] * x[k]);
            const double e = fabs(s - ref) / mag;
            if (!(e <= worst)) worst = e;
        }
    }
    printf("%-5s ne0 %4d rows %3d: worst |mma - ref| / sum|w*x| = %.3g\n", name, ne0, n_out, worst);
    return worst;
}

int main() {
    const double bound = 2e-5; // test_cuda_matmul's bound for the SIMT kernels
    double worst = 0, e;
    e = check<TS_TYPE_Q4_K>("q4_K", 768, 37), worst = e > worst ? e : worst;
    e = check<TS_TYPE_Q5_K>("q5_K", 512, 21), worst = e > worst ? e : worst;
    e = check<TS_TYPE_Q8_0>("q8_0", 640, 19), worst = e > worst ? e : worst;
    e = check<TS_TYPE_Q5_0>("q5_0", 320, 33), worst = e > worst ? e : worst;
    e = check<TS_TYPE_Q4_0>("q4_0", 96, 17), worst = e > worst ? e : worst;
    printf(worst <= bound ? "test_mma_emul: all passed\n" : "test_mma_emul: FAILED (bound %g)\n", bound);
    return worst <= bound ? 0 : 1;
}
