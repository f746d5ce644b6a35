// Host emulation of matmul_q4k_mma_kernel (src/cuda/matvec_mma.cuh): its per-lane code transcribed, the
// mma.m16n8k32.s8 emulated from the PTX fragment layout (A rows g, g + 8 at k = 4t.., 16 + 4t..; B column g;
// C rows g, g + 8 at columns 2t, 2t + 1), checked against Σ dequant(w)·x in double on random Q4_K rows and
// x over three decades (a zero sub-block included). Checks the index and digit arithmetic of the design;
// the kernel itself still has to run on a GPU (test_cuda_matmul with TURBOSPARK_CUDA_MMA=1).
extern "C" {
#include "quant/quant.h"
#include "common/half.h"
}
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static uint64_t rs = 88172645463325252ull;
static double urand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (rs >> 11) * (1.0 / 9007199254740992.0); }
static double gauss() { double u = urand() + 1e-300, v = urand(); return sqrt(-2 * log(u)) * cos(6.283185307179586 * v); }

static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int scale_byte(const uint32_t q[3], int i) { return (int)((q[i >> 2] >> (8 * (i & 3))) & 0xFFu); }
static void scale_min_words(int j, const uint32_t q[3], int &sc, int &m) {
    if (j < 4) { sc = scale_byte(q, j) & 63; m = scale_byte(q, j + 4) & 63; }
    else { sc = (scale_byte(q, j + 4) & 0xF) | ((scale_byte(q, j - 4) >> 6) << 4); m = (scale_byte(q, j + 4) >> 4) | ((scale_byte(q, j) >> 6) << 4); }
}
static float h2f(uint16_t h) { return ts_fp16_to_fp32(h); }
static int8_t byte_of(uint32_t w, int i) { return (int8_t)((w >> (8 * i)) & 0xFF); }

// PTX m16n8k32 s8: A[16][32], B[32][8] from the lanes' registers, C[16][8] back to the lanes
static void mma_emul(int c[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    int A[16][32], B[32][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            A[g][4 * t + i] = byte_of(a[lane][0], i);
            A[g + 8][4 * t + i] = byte_of(a[lane][1], i);
            A[g][16 + 4 * t + i] = byte_of(a[lane][2], i);
            A[g + 8][16 + 4 * t + i] = byte_of(a[lane][3], i);
            B[4 * t + i][g] = byte_of(b[lane][0], i);
            B[16 + 4 * t + i][g] = byte_of(b[lane][1], i);
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int r = 0; r < 4; r++) {
            int s = 0;
            for (int k = 0; k < 32; k++) s += A[rows[r]][k] * B[k][cols[r]];
            c[lane][r] += s;
        }
    }
}

int main() {
    const int ne0 = 768, n_out = 37, nb = ne0 / 256, kW = 4;
    const size_t rb = ts_row_size(TS_TYPE_Q4_K, ne0);
    std::vector<uint8_t> W(rb * n_out);
    std::vector<float> row(ne0), deq(ne0), x(ne0);
    char err[256];
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < ne0; i++) row[i] = (float)(gauss() * (1 + (r % 5)) + (r % 3 == 0 ? 0.7 : 0.0));
        if (ts_quantize_row(TS_TYPE_Q4_K, row.data(), W.data() + rb * r, ne0, err, sizeof err)) { puts(err); return 1; }
    }
    for (int i = 0; i < ne0; i++) x[i] = (float)(gauss() * pow(10.0, 3 * urand() - 1.5));
    x[5] = 0; for (int i = 64; i < 96; i++) x[i] = 0; // a zero sub-block
    // staging (transcribed)
    std::vector<int8_t> dg(4 * ne0);
    std::vector<float> xsc(ne0 / 32), xsum(ne0 / 32);
    for (int sb = 0; sb < ne0 / 32; sb++) {
        float mx = 0, s = 0;
        for (int l = 0; l < 32; l++) mx = fmaxf(mx, fabsf(x[sb * 32 + l]));
        for (int l = 0; l < 32; l++) s += x[sb * 32 + l];
        int E = 0;
        if (mx > 0) frexpf(mx, &E);
        for (int l = 0; l < 32; l++) {
            int xi = (int)nearbyintf(ldexpf(x[sb * 32 + l], 26 - E));
            for (int p = 0; p < 4; p++) { int r = xi & 127; if (r >= 64) r -= 128; dg[p * ne0 + sb * 32 + l] = (int8_t)r; xi = (xi - r) >> 7; }
            if (xi != 0) { printf("digit overflow\n"); return 1; }
        }
        xsc[sb] = ldexpf(1.0f, E - 26), xsum[sb] = s;
    }
    double worst = 0;
    for (int tile = 0; tile < (n_out + 15) / 16; tile++) {
        float part[4][16] = {{0}};
        for (int warp = 0; warp < kW; warp++) {
            float acc0[32] = {0}, acc1[32] = {0};
            for (int b = warp; b < nb; b += kW) {
                for (int j = 0; j < 8; j++) {
                    uint32_t a[32][4], bf[32][2];
                    int c[32][4] = {{0}};
                    for (int lane = 0; lane < 32; lane++) {
                        const int g = lane >> 2, t = lane & 3, r0 = tile * 16 + g, r1 = r0 + 8;
                        const uint8_t *B0 = W.data() + rb * (r0 < n_out ? r0 : n_out - 1) + b * 144;
                        const uint8_t *B1 = W.data() + rb * (r1 < n_out ? r1 : n_out - 1) + b * 144;
                        const int p = j >> 1, sh = 4 * (j & 1), sb = b * 8 + j;
                        a[lane][0] = (ld32(B0 + 16 + 32 * p + 4 * t) >> sh) & 0x0F0F0F0Fu;
                        a[lane][1] = (ld32(B1 + 16 + 32 * p + 4 * t) >> sh) & 0x0F0F0F0Fu;
                        a[lane][2] = (ld32(B0 + 16 + 32 * p + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu;
                        a[lane][3] = (ld32(B1 + 16 + 32 * p + 16 + 4 * t) >> sh) & 0x0F0F0F0Fu;
                        bf[lane][0] = bf[lane][1] = 0;
                        if (g < 4) { memcpy(&bf[lane][0], &dg[g * ne0 + sb * 32 + 4 * t], 4); memcpy(&bf[lane][1], &dg[g * ne0 + sb * 32 + 16 + 4 * t], 4); }
                    }
                    mma_emul(c, a, bf);
                    float v0[32], v1[32];
                    for (int lane = 0; lane < 32; lane++) {
                        const int t = lane & 3;
                        v0[lane] = (float)c[lane][0] + 128.0f * (float)c[lane][1];
                        v1[lane] = (float)c[lane][2] + 128.0f * (float)c[lane][3];
                        if (t == 1) v0[lane] *= 16384.0f, v1[lane] *= 16384.0f;
                    }
                    float w0[32], w1[32];
                    for (int lane = 0; lane < 32; lane++) w0[lane] = v0[lane] + v0[lane ^ 1], w1[lane] = v1[lane] + v1[lane ^ 1];
                    for (int lane = 0; lane < 32; lane++) {
                        const int g = lane >> 2, r0 = tile * 16 + g, r1 = r0 + 8, sb = b * 8 + j;
                        const uint8_t *B0 = W.data() + rb * (r0 < n_out ? r0 : n_out - 1) + b * 144;
                        const uint8_t *B1 = W.data() + rb * (r1 < n_out ? r1 : n_out - 1) + b * 144;
                        const uint32_t h0 = ld32(B0), h1 = ld32(B1);
                        uint32_t s0[3] = {ld32(B0 + 4), ld32(B0 + 8), ld32(B0 + 12)}, s1[3] = {ld32(B1 + 4), ld32(B1 + 8), ld32(B1 + 12)};
                        int sc0, mn0, sc1, mn1;
                        scale_min_words(j, s0, sc0, mn0), scale_min_words(j, s1, sc1, mn1);
                        const float d0 = h2f(h0 & 0xFFFF), m0 = h2f(h0 >> 16), d1 = h2f(h1 & 0xFFFF), m1 = h2f(h1 >> 16);
                        acc0[lane] = fmaf(d0 * (float)sc0, w0[lane] * xsc[sb], acc0[lane]);
                        acc0[lane] = fmaf(-(m0 * (float)mn0), xsum[sb], acc0[lane]);
                        acc1[lane] = fmaf(d1 * (float)sc1, w1[lane] * xsc[sb], acc1[lane]);
                        acc1[lane] = fmaf(-(m1 * (float)mn1), xsum[sb], acc1[lane]);
                    }
                }
            }
            for (int lane = 0; lane < 32; lane++) if ((lane & 3) == 0) part[warp][lane >> 2] = acc0[lane], part[warp][(lane >> 2) + 8] = acc1[lane];
        }
        for (int i = 0; i < 16; i++) {
            const int r = tile * 16 + i;
            if (r >= n_out) continue;
            float s = part[0][i];
            for (int w = 1; w < kW; w++) s += part[w][i];
            if (ts_dequantize_row(TS_TYPE_Q4_K, W.data() + rb * r, deq.data(), ne0, err, sizeof err)) { puts(err); return 1; }
            double ref = 0, mag = 0;
            for (int k = 0; k < ne0; k++) ref += (double)deq[k] * x[k], mag += fabs((double)deq[k] * x[k]);
            const double e = fabs(s - ref) / mag;
            if (e > worst) worst = e;
        }
    }
    printf("worst |mma - ref| / sum|w*x| = %.3g (bound 2e-5)\n", worst);
    return worst <= 2e-5 ? 0 : 1;
}
