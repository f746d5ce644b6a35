/* Reference quantization of IQ3_XXS and IQ3_S without an importance matrix, as ggml's
 * quantize_row_iq3_xxs_ref / quantize_row_iq3_s_ref (ggml-quants.c, quantize_row_iq3_*_impl).
 *
 * Both code groups of 4 magnitudes as points of a lattice: a point is 4 levels l in 0..7 (weight
 * magnitude ∝ 2l + 1), 12 bits, and only the 256 (IQ3_XXS) or 512 (IQ3_S) points of the grid can be
 * stored. Per 32 elements: signs are taken out, then 31 (19) trial scales are tried; at each, every
 * group is rounded to its nearest lattice point, and a point off the grid is replaced by the best
 * of its grid neighbours (the grid points at the 2 (3) smallest squared distances, precomputed).
 * The scale with the best weighted fit wins; groups still off the grid are re-fitted at it. The
 * sub-block scales are then coded in 4 bits against the block's largest.
 *
 * The lattice levels of each grid entry are read back from the dequantization tables (IQ3_S: the
 * magnitude is 2l + 1; IQ3_XXS: 8l + 4, except 62 for l = 7), which is ggml's kgrid_256/512 (the
 * unit tests compare the output with ggml's bytes). Float operations and their order are ggml's,
 * so results are bit-identical for finite input, with one deliberate exception: ggml's IQ3_S
 * quantizer forgets to advance its quant and sign pointers past a sub-block of 32 zeros, so the
 * later sub-blocks of such a block are written 8 index bytes / 4 sign bytes early and decode to
 * the wrong values; we write each sub-block in its place (the block then decodes to what was
 * meant). Rows without an all-zero 32-element sub-block are byte-identical to ggml's. */
#include "quant/blocks.h"
#include "quant/iq_grids.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

enum { LATTICE_POINTS = 4096, MAX_Q = 8 };

/* The quantizer's view of one grid. map[u] for lattice point u: its grid index, or -(o + 1) where
 * neighbours[o] is the count n and neighbours[o + 1 .. o + n] are the grid indices to try. */
typedef struct {
    int size;
    uint8_t level[512][4];
    int map[LATTICE_POINTS];
    uint16_t *neighbours;
    int n_neighbours;
} iq3_lattice;

/* Exact sizes of the neighbour lists for ggml's two grids (a changed table would not fit). */
static uint16_t g_neighbours_256[22825], g_neighbours_512[28317];
static iq3_lattice g_lat256 = {.size = 256, .neighbours = g_neighbours_256, .n_neighbours = 22825};
static iq3_lattice g_lat512 = {.size = 512, .neighbours = g_neighbours_512, .n_neighbours = 28317};
static pthread_once_t g_once256 = PTHREAD_ONCE_INIT, g_once512 = PTHREAD_ONCE_INIT;

static int cmp_dist(const void *a, const void *b) { /* (distance², index) pairs, ascending */
    const int *l = a, *r = b;
    return l[0] < r[0] ? -1 : l[0] > r[0] ? 1 : l[1] < r[1] ? -1 : l[1] > r[1] ? 1 : 0;
}

static void lattice_init(iq3_lattice *L) {
    const int n = L->size, nwant = n == 256 ? 2 : 3;
    for (int k = 0; k < n; k++) {
        const uint32_t e = n == 256 ? ts_iq3xxs_grid[k] : ts_iq3s_grid[k];
        for (int i = 0; i < 4; i++) {
            const int v = (int)((e >> (8 * i)) & 0xff);
            L->level[k][i] = (uint8_t)(n == 256 ? (v - 4) / 8 : (v - 1) / 2);
        }
    }
    for (int u = 0; u < LATTICE_POINTS; u++) L->map[u] = -1;
    for (int k = 0; k < n; k++) {
        int u = 0;
        for (int i = 0; i < 4; i++) u |= L->level[k][i] << (3 * i);
        L->map[u] = k;
    }
    static int dist[512][2]; /* under pthread_once: one initializer at a time per grid */
    int o = 0;
    for (int u = 0; u < LATTICE_POINTS; u++) {
        if (L->map[u] >= 0) continue;
        for (int j = 0; j < n; j++) {
            int d2 = 0;
            for (int i = 0; i < 4; i++) {
                const int diff = 2 * L->level[j][i] - 2 * ((u >> (3 * i)) & 7);
                d2 += diff * diff;
            }
            dist[j][0] = d2, dist[j][1] = j;
        }
        qsort(dist, (size_t)n, sizeof dist[0], cmp_dist);
        const int start = o++;
        int d2 = dist[0][0], nhave = 1, count = 0;
        for (int j = 0; j < n; j++) {
            if (dist[j][0] > d2) {
                if (nhave == nwant) break;
                d2 = dist[j][0];
                nhave++;
            }
            assert(o < L->n_neighbours);
            L->neighbours[o++] = (uint16_t)dist[j][1];
            count++;
        }
        L->neighbours[start] = (uint16_t)count;
        L->map[u] = -(start + 1);
    }
    assert(o == L->n_neighbours);
}

static void init256(void) {
    lattice_init(&g_lat256);
}
static void init512(void) {
    lattice_init(&g_lat512);
}

/* Of the grid neighbours of an off-grid point, the one nearest (weighted) to scale * (2l + 1);
 * the first wins a tie. Its levels go to Lq. */
static int best_neighbour(const iq3_lattice *lat, int u, const float *xval, const float *w, float scale,
                          int8_t *Lq) {
    const uint16_t *nb = lat->neighbours - lat->map[u] - 1;
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            const float q = 2 * lat->level[nb[j]][i] + 1;
            const float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    for (int i = 0; i < 4; i++) Lq[i] = (int8_t)lat->level[best][i];
    return best;
}

static int clamp_level(float v) {
    const int l = ts_nearest_int(v);
    return l < 0 ? 0 : l > MAX_Q - 1 ? MAX_Q - 1 : l;
}

/* Level of a 4-element group at inverse scale id; its lattice point. */
static int round_group(const float *xval, float id, int8_t *Lq) {
    int u = 0;
    for (int i = 0; i < 4; i++) {
        Lq[i] = (int8_t)clamp_level(0.5f * (id * xval[i] - 1));
        u |= Lq[i] << (3 * i);
    }
    return u;
}

static void fit(const float *w, const float *xval, const int8_t *Lq, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < 32; i++) {
        const float q = 2 * Lq[i] + 1;
        a += w[i] * xval[i] * q;
        b += w[i] * q * q;
    }
    *sumqx = a, *sumq2 = b;
}

/* One 32-element sub-block: levels L (32, on the grid in groups of 4), grid indices and *scale;
 * false for a sub-block ggml leaves empty (largest |x| below 1e-8 for IQ3_XXS, 0 for IQ3_S).
 * xval: |x| with the signs (and, for IQ3_XXS, the parity flip) taken out; weight = x². */
static bool quantize_sub_block(const iq3_lattice *lat, const float *xval, const float *weight, int8_t *L,
                               int *grid_index, float *scale_out) {
    const bool xxs = lat->size == 256;
    float waux[32];
    for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
    float max = xval[0];
    for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
    memset(L, 0, 32);
    for (int k = 0; k < 8; k++) grid_index[k] = 0; /* levels 0 are grid point 0 in both grids */
    if (xxs ? max < 1e-8f : !max) return false;

    float best = 0, scale = max / (2 * MAX_Q - 1);
    bool on_grid[8];
    for (int k = 0; k < 8; k++) on_grid[k] = xxs; /* IQ3_S re-fits every group below */
    const int steps = xxs ? 15 : 9;
    for (int is = -steps; is <= steps; is++) {
        const float id = (2 * MAX_Q - 1 + is * 0.2f) / max, this_scale = 1 / id;
        int8_t Laux[32];
        bool aux_on_grid[8];
        for (int k = 0; k < 8; k++) {
            const int u = round_group(xval + 4 * k, id, Laux + 4 * k);
            aux_on_grid[k] = lat->map[u] >= 0;
            if (!aux_on_grid[k]) best_neighbour(lat, u, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
        }
        float sumqx, sumq2;
        fit(weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
            memcpy(on_grid, aux_on_grid, sizeof on_grid);
        }
    }
    int n_off = 0;
    for (int k = 0; k < 8; k++) n_off += !on_grid[k];
    if (n_off > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 8; k++) {
            if (xxs && on_grid[k]) continue;
            const int u = round_group(xval + 4 * k, id, L + 4 * k);
            if (lat->map[u] < 0) best_neighbour(lat, u, xval + 4 * k, waux + 4 * k, scale, L + 4 * k);
        }
        float sumqx, sumq2;
        fit(weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    for (int k = 0; k < 8; k++) {
        int u = 0;
        for (int i = 0; i < 4; i++) u |= L[4 * k + i] << (3 * i);
        assert(lat->map[u] >= 0); /* every path above ends on the grid */
        grid_index[k] = lat->map[u];
    }
    *scale_out = scale;
    return true;
}

/* Signs of 8 elements out of x into xval; the sign bits. IQ3_XXS stores 7 and infers the eighth
 * from even parity: with an odd count, the element of least weight·x² is flipped to fit. */
static unsigned take_signs(const float *x, const float *weight, float *xval, bool parity) {
    unsigned s = 0;
    int nflip = 0;
    for (int i = 0; i < 8; i++) {
        if (x[i] >= 0)
            xval[i] = x[i];
        else
            xval[i] = -x[i], s |= 1u << i, nflip++;
    }
    if (parity && nflip % 2) {
        int imin = 0;
        float min = weight[0] * x[0] * x[0];
        for (int i = 1; i < 8; i++) {
            const float ax = weight[i] * x[i] * x[i];
            if (ax < min) min = ax, imin = i;
        }
        xval[imin] = -xval[imin];
        s ^= 1u << imin;
    }
    return parity ? s & 127 : s;
}

/* The shared per-super-block driver: per sub-block scales, then their 4-bit codes. */
static void quantize_block(const iq3_lattice *lat, const float *x, float scales[8], int8_t L[8][32],
                           int grid_index[8][8], unsigned signs[8][4], float *max_scale) {
    const bool xxs = lat->size == 256;
    *max_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        float weight[32], xval[32];
        for (int i = 0; i < 32; i++) weight[i] = xb[i] * xb[i];
        for (int k = 0; k < 4; k++) signs[ib][k] = take_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, xxs);
        float scale;
        if (!quantize_sub_block(lat, xval, weight, L[ib], grid_index[ib], &scale)) { /* empty: all zero */
            for (int k = 0; k < 4; k++) signs[ib][k] = 0;
            scales[ib] = 0;
            continue;
        }
        if (scale < 0) { /* ggml's guard; cannot happen with weights x² */
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[ib][k] = ~signs[ib][k] & (xxs ? 127u : 255u);
        }
        scales[ib] = scale;
        *max_scale = *max_scale > scale ? *max_scale : scale;
    }
}

static unsigned scale_code(float id, float scale) {
    const int l = ts_nearest_int(0.5f * (id * scale - 1));
    return (unsigned)(l < 0 ? 0 : l > 15 ? 15 : l);
}

void ts_quantize_iq3_xxs(const float *x, void *dst, int64_t nb) {
    pthread_once(&g_once256, init256);
    ts_block_iq3_xxs *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K) {
        float scales[8], max_scale;
        int8_t L[8][32];
        int gi[8][8];
        unsigned signs[8][4];
        quantize_block(&g_lat256, x, scales, L, gi, signs, &max_scale);
        memset(&y[i], 0, sizeof y[i]);
        if (!max_scale) continue;
        const float d = max_scale / 31;
        ts_st_half(y[i].d, d * 1.0125f);
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ib++) {
            for (int k = 0; k < 8; k++) y[i].qs[8 * ib + k] = (uint8_t)gi[ib][k];
            uint32_t w = signs[ib][0] | signs[ib][1] << 7 | signs[ib][2] << 14 | signs[ib][3] << 21;
            w |= (uint32_t)scale_code(id, scales[ib]) << 28;
            ts_st_u32(y[i].qs + 64 + 4 * ib, w);
        }
    }
}

void ts_quantize_iq3_s(const float *x, void *dst, int64_t nb) {
    pthread_once(&g_once512, init512);
    ts_block_iq3_s *y = dst;
    for (int64_t i = 0; i < nb; i++, x += TS_QK_K) {
        float scales[8], max_scale;
        int8_t L[8][32];
        int gi[8][8];
        unsigned signs[8][4];
        quantize_block(&g_lat512, x, scales, L, gi, signs, &max_scale);
        memset(&y[i], 0, sizeof y[i]);
        for (int ib = 0; ib < 8; ib++) { /* each sub-block in its place (see the note above) */
            for (int k = 0; k < 8; k++) {
                y[i].qs[8 * ib + k] = (uint8_t)(gi[ib][k] & 255);
                y[i].qh[ib] |= (uint8_t)((gi[ib][k] >> 8) << k);
            }
            for (int k = 0; k < 4; k++) y[i].signs[4 * ib + k] = (uint8_t)signs[ib][k];
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        ts_st_half(y[i].d, d * 1.033f);
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ib += 2)
            y[i].scales[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
    }
}
