/* Quantization to IQ1_S and IQ1_M, as ggml's quantize_row_iq1_s_impl / quantize_row_iq1_m_impl
 * (ggml-quants.c). ggml quantizes IQ1_S only with importance weights; IQ1_M also without (weights x²).
 *
 * Each value is one of three levels -1, 0, 1 shifted by a delta of ±1/8 (the shift is per
 * sub-block for IQ1_S, per group of 8 for IQ1_M), times the sub-block's scale. Per sub-block (32
 * elements for IQ1_S, 16 for IQ1_M) the best split into the three levels is found exhaustively:
 * the values sorted ascending, every pair of boundaries (i1 <= i2) and every choice of shifts is
 * scored by the weighted least-squares fit, the best kept. Each group of 8 levels must then be a
 * point of the IQ1 grid (quant/lattice.h); one that is not is moved to the neighbour whose values
 * are nearest (weighted), and the scale is re-fitted. Sub-block scales are coded in 3 bits against
 * the block's largest (IQ1_S: d = max/15 · 1.125; IQ1_M: d re-fitted over the whole block, · 1.1125).
 *
 * Float operations and their order are ggml's (IQ1_M's split search in the prefix-sum form of
 * current ggml, which the llama.cpp builds of late 2026 carry). One thing is ours: values that are
 * exactly equal
 * are sorted by position (ggml leaves their order to the C library's qsort, which need not be
 * stable); rows without equal values in a sub-block are byte-identical to ggml's. */
#include "quant/blocks.h"
#include "quant/lattice.h"
#include "quant/quant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>

#define IQ1_DELTA 0.125f

static const float k_plus[3] = {-1 + IQ1_DELTA, IQ1_DELTA, 1 + IQ1_DELTA};
static const float k_minus[3] = {-1 - IQ1_DELTA, -IQ1_DELTA, 1 - IQ1_DELTA};

/* Positions of x[n] in ascending order of value (equal values by position). */
static void sort_order(const float *x, int n, int *idx) {
    for (int j = 0; j < n; j++) {
        int k = j;
        while (k > 0 && x[idx[k - 1]] > x[j]) idx[k] = idx[k - 1], k--;
        idx[k] = j;
    }
}

/* Of the grid neighbours of off-grid point u, the one whose values scale · xx[level] are nearest
 * (weighted) to x; the first wins a tie. Its levels go to L. (ggml's iq1_find_best_neighbour2.) */
static int best_neighbour(const ts_lattice *lat, int u, const float *x, const float *w, float scale,
                          const float *xx, int8_t *L) {
    const uint16_t *nb = lat->neighbours - lat->map[u] - 1;
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= nb[0]; j++) {
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float diff = scale * xx[lat->level[nb[j]][i]] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    assert(best >= 0); /* finite input: some distance is below FLT_MAX */
    for (int i = 0; i < 8; i++) L[i] = (int8_t)lat->level[best][i];
    return best;
}

/* Grid indices of the n/8 groups of L (off-grid ones moved to their best neighbour, group k's
 * values taken from xx[k]); when one was off the grid, *scale is re-fitted to the final levels. */
static void to_grid(const ts_lattice *lat, int n, const float *x, const float *w, const float *const *xx,
                    int8_t *L, float *scale, int *index) {
    bool all_on_grid = true;
    for (int k = 0; k < n / 8; k++) {
        int u = 0;
        for (int j = 0; j < 8; j++) u |= L[8 * k + j] << (2 * j);
        index[k] = lat->map[u];
        if (index[k] < 0) {
            all_on_grid = false;
            index[k] = best_neighbour(lat, u, x + 8 * k, w + 8 * k, *scale, xx[k], L + 8 * k);
        }
    }
    if (all_on_grid) return;
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < n / 8; k++)
        for (int j = 0; j < 8; j++) {
            const float q = xx[k][L[8 * k + j]], wj = w[8 * k + j];
            sumqx += wj * q * x[8 * k + j];
            sumq2 += wj * q * q;
        }
    if (sumqx > 0 && sumq2 > 0) *scale = sumqx / sumq2;
}

/* Levels of a sub-block from the split: positions idx[0 .. i1) -> 0, [i1, i2) -> 1, the rest 2. */
static void split_levels(const int *idx, int n, int i1, int i2, int8_t *L) {
    for (int j = 0; j < n; j++) L[idx[j]] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
}

static float block_sigma2(const float *x) {
    float sumx2 = 0;
    for (int i = 0; i < TS_QK_K; i++) sumx2 += x[i] * x[i];
    return 2 * sumx2 / TS_QK_K;
}

static void weigh(const float *x, const float *qw, float sigma2, int n, float *w) {
    for (int i = 0; i < n; i++) w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : x[i] * x[i];
}

/* IQ1_S: 32-element sub-blocks, one shift each. */
void ts_quantize_iq1_s_w(const float *x, void *dst, int64_t nb, const float *qw) {
    const ts_lattice *lat = ts_lattice_get(TS_TYPE_IQ1_S);
    ts_block_iq1_s *y = dst;
    for (int64_t ibl = 0; ibl < nb; ibl++, x += TS_QK_K, qw += TS_QK_K) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        float scales[8] = {0}, max_scale = 0;
        int shifts[8];
        uint16_t qh[8] = {0};
        const float sigma2 = block_sigma2(x);
        for (int ib = 0; ib < 8; ib++) {
            const float *xb = x + 32 * ib;
            float w[32], sumx[33], sumw[33];
            int idx[32], index[4];
            int8_t L[32];
            shifts[ib] = 1;
            weigh(xb, qw + 32 * ib, sigma2, 32, w);
            float max = fabsf(xb[0]);
            for (int i = 1; i < 32; i++) max = fmaxf(max, fabsf(xb[i]));
            if (max < 1e-12f) continue;
            sort_order(xb, 32, idx);
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < 32; j++) {
                sumx[j + 1] = sumx[j] + w[idx[j]] * xb[idx[j]];
                sumw[j + 1] = sumw[j] + w[idx[j]];
            }
            float best = -FLT_MAX, scale = max;
            int b1 = -1, b2 = -1, shift = 0;
            for (int i1 = 0; i1 <= 32; i1++)
                for (int i2 = i1; i2 <= 32; i2++)
                    for (int s = 1; s >= -1; s -= 2) { /* +delta first, as ggml */
                        const float *xs = s > 0 ? k_plus : k_minus;
                        const float sumqx = (sumx[i1] - sumx[0]) * xs[0] + (sumx[i2] - sumx[i1]) * xs[1] +
                                            (sumx[32] - sumx[i2]) * xs[2];
                        const float sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0] +
                                            (sumw[i2] - sumw[i1]) * xs[1] * xs[1] +
                                            (sumw[32] - sumw[i2]) * xs[2] * xs[2];
                        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                            scale = sumqx / sumq2, best = scale * sumqx;
                            b1 = i1, b2 = i2, shift = s;
                        }
                    }
            if (b1 < 0) continue;
            split_levels(idx, 32, b1, b2, L);
            if (scale < 0) {
                for (int j = 0; j < 32; j++) L[j] = (int8_t)(2 - L[j]);
                scale = -scale, shift = -shift;
            }
            const float *xx = shift == 1 ? k_plus : k_minus;
            const float *const xxs[4] = {xx, xx, xx, xx};
            to_grid(lat, 32, xb, w, xxs, L, &scale, index);
            for (int k = 0; k < 4; k++) {
                y[ibl].qs[4 * ib + k] = (uint8_t)(index[k] & 255);
                qh[ib] |= (uint16_t)((index[k] >> 8) << 3 * k);
            }
            scales[ib] = scale, shifts[ib] = shift;
            max_scale = fmaxf(max_scale, scale);
        }
        if (max_scale) {
            const float d = max_scale / 15, id = 1 / d;
            ts_st_half(y[ibl].d, d * 1.125f);
            for (int ib = 0; ib < 8; ib++) {
                int l = ts_nearest_int(0.5f * (id * scales[ib] - 1));
                l = l < 0 ? 0 : l > 7 ? 7 : l;
                if (shifts[ib] == -1) l |= 8;
                qh[ib] |= (uint16_t)(l << 12);
            }
        }
        for (int ib = 0; ib < 8; ib++)
            y[ibl].qh[2 * ib] = (uint8_t)(qh[ib] & 255), y[ibl].qh[2 * ib + 1] = (uint8_t)(qh[ib] >> 8);
    }
}

/* The shifts of IQ1_M's two groups for choice k (0: +,+ 1: +,- 2: -,+ 3: -,-). */
static const float *m_shift(int k, int group) {
    return (group == 0 ? k < 2 : k % 2 == 0) ? k_plus : k_minus;
}

/* IQ1_M: 16-element sub-blocks, a shift per group of 8; the super-scale re-fitted at the end. */
static void quantize_iq1_m(const float *x, void *dst, int64_t nb, const float *qw) {
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    const ts_lattice *lat = ts_lattice_get(TS_TYPE_IQ1_M);
    ts_block_iq1_m *y = dst;
    for (int64_t ibl = 0; ibl < nb; ibl++, x += TS_QK_K, qw = qw ? qw + TS_QK_K : NULL) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        float scales[16] = {0}, max_scale = 0;
        int shifts[16] = {0}, index[16][2] = {{0}};
        const float sigma2 = block_sigma2(x);
        for (int ib = 0; ib < 16; ib++) {
            const float *xb = x + 16 * ib;
            float w[16];
            int idx[16];
            int8_t L[16];
            weigh(xb, qw ? qw + 16 * ib : NULL, sigma2, 16, w);
            float max = fabsf(xb[0]);
            for (int i = 1; i < 16; i++) max = fmaxf(max, fabsf(xb[i]));
            if (max < 1e-7f) continue;
            sort_order(xb, 16, idx);
            /* Prefix sums of w·x and w over the sorted values, per half (each half has its own
             * shift). The levels' values step by 1 in both shifts, so a split's sums collapse to
             * T·v[2] - px[i1] - px[i2] and W·v[2]² + pw[i1]·(v0² - v1²) + pw[i2]·(v1² - v2²). */
            float px[2][17], pw[2][17];
            px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
            for (int j = 0; j < 16; j++) {
                const int i = idx[j], h = i >= 8;
                px[h][j + 1] = px[h][j] + w[i] * xb[i], px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + w[i], pw[1 - h][j + 1] = pw[1 - h][j];
            }
            const float c1[2] = {k_plus[0] * k_plus[0] - k_plus[1] * k_plus[1],
                                 k_minus[0] * k_minus[0] - k_minus[1] * k_minus[1]};
            const float c2[2] = {k_plus[1] * k_plus[1] - k_plus[2] * k_plus[2],
                                 k_minus[1] * k_minus[1] - k_minus[2] * k_minus[2]};
            const float v2[2] = {k_plus[2], k_minus[2]};
            float best = -FLT_MAX, scale = max;
            int b1 = -1, b2 = -1, best_k = -1;
            for (int i1 = 0; i1 <= 16; i1++)
                for (int i2 = i1; i2 <= 16; i2++) {
                    float qx[2][2], q2[2][2]; /* [half][0: plus, 1: minus] */
                    for (int h = 0; h < 2; h++) {
                        const float sx = px[h][i1] + px[h][i2];
                        for (int m = 0; m < 2; m++) {
                            qx[h][m] = px[h][16] * v2[m] - sx;
                            q2[h][m] = pw[h][16] * v2[m] * v2[m] + pw[h][i1] * c1[m] + pw[h][i2] * c2[m];
                        }
                    }
                    for (int k = 0; k < 4; k++) { /* k: first half minus if k >= 2, second if k odd */
                        const float sumqx = qx[0][k >= 2] + qx[1][k % 2],
                                    sumq2 = q2[0][k >= 2] + q2[1][k % 2];
                        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                            scale = sumqx / sumq2, best = scale * sumqx;
                            b1 = i1, b2 = i2, best_k = k;
                        }
                    }
                }
            if (b1 < 0) continue;
            split_levels(idx, 16, b1, b2, L);
            if (scale < 0) {
                for (int j = 0; j < 16; j++) L[j] = (int8_t)(2 - L[j]);
                scale = -scale, best_k = 3 - best_k;
            }
            const float *const xxs[2] = {m_shift(best_k, 0), m_shift(best_k, 1)};
            to_grid(lat, 16, xb, w, xxs, L, &scale, index[ib]);
            scales[ib] = scale, shifts[ib] = best_k;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) continue;
        uint16_t sc[4] = {0};
        float d = max_scale / 15, sumqx = 0, sumq2 = 0;
        const float id = 1 / d;
        for (int ib = 0; ib < 16; ib++) { /* every sub-block, empty ones as grid point 0 with shift 0 */
            int l = ts_nearest_int(0.5f * (id * scales[ib] - 1));
            l = l < 0 ? 0 : l > 7 ? 7 : l;
            sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
            y[ibl].qs[2 * ib] = (uint8_t)(index[ib][0] & 255);
            y[ibl].qs[2 * ib + 1] = (uint8_t)(index[ib][1] & 255);
            y[ibl].qh[ib] = (uint8_t)((index[ib][0] >> 8) | (index[ib][1] >> 8) << 4 | masks[shifts[ib]]);
            const float *xb = x + 16 * ib;
            float w[16];
            weigh(xb, qw ? qw + 16 * ib : NULL, sigma2, 16, w);
            for (int k = 0; k < 2; k++)
                for (int j = 0; j < 8; j++) {
                    const float q = m_shift(shifts[ib], k)[lat->level[index[ib][k]][j]] * (2 * l + 1);
                    sumqx += w[8 * k + j] * q * xb[8 * k + j];
                    sumq2 += w[8 * k + j] * q * q;
                }
        }
        if (sumq2 > 0) d = sumqx / sumq2;
        uint8_t h[2];
        ts_st_half(h, d * 1.1125f);
        const unsigned s16 = (unsigned)h[0] | (unsigned)h[1] << 8;
        sc[0] |= (uint16_t)((s16 & 0x000f) << 12);
        sc[1] |= (uint16_t)((s16 & 0x00f0) << 8);
        sc[2] |= (uint16_t)((s16 & 0x0f00) << 4);
        sc[3] |= (uint16_t)(s16 & 0xf000);
        for (int i = 0; i < 4; i++)
            y[ibl].scales[2 * i] = (uint8_t)(sc[i] & 255), y[ibl].scales[2 * i + 1] = (uint8_t)(sc[i] >> 8);
    }
}

void ts_quantize_iq1_m(const float *x, void *dst, int64_t nb) {
    quantize_iq1_m(x, dst, nb, NULL);
}

void ts_quantize_iq1_m_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize_iq1_m(x, dst, nb, qw);
}
