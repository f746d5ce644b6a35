/* The i-quant lattices and the sub-block search (see lattice.h). */
#include "quant/lattice.h"

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/quant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

enum { IQ2_INDICES = 43691, IQ3_INDICES = 4096 }; /* largest index with every level <= max_level, + 1 */

/* Storage: exact neighbour counts for ggml's grids (a changed table would not fit: asserted). */
static uint8_t g_level_2xxs[256][8], g_level_2xs[512][8], g_level_2s[1024][8], g_level_3xxs[256][8],
    g_level_3s[512][8], g_level_1[2048][8];
static int g_map_2xxs[IQ2_INDICES], g_map_2xs[IQ2_INDICES], g_map_2s[IQ2_INDICES], g_map_3xxs[IQ3_INDICES],
    g_map_3s[IQ3_INDICES], g_map_1[IQ2_INDICES];
static uint16_t g_nb_2xxs[417375], g_nb_2xs[551719], g_nb_2s[209098], g_nb_3xxs[22825], g_nb_3s[28317],
    g_nb_1[1375316];

static ts_lattice g_lat[6] = {
    {256, 8, 2, 2, 2, g_level_2xxs, g_map_2xxs, g_nb_2xxs, 417375},
    {512, 8, 2, 2, 2, g_level_2xs, g_map_2xs, g_nb_2xs, 551719},
    {1024, 8, 2, 2, 1, g_level_2s, g_map_2s, g_nb_2s, 209098},
    {256, 4, 3, 7, 2, g_level_3xxs, g_map_3xxs, g_nb_3xxs, 22825},
    {512, 4, 3, 7, 3, g_level_3s, g_map_3s, g_nb_3s, 28317},
    {2048, 8, 2, 2, 3, g_level_1, g_map_1, g_nb_1, 1375316},
};
static pthread_once_t g_once[6] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                   PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

/* Level of byte v of a grid entry: IQ2 magnitudes 8, 25, 43; IQ3_XXS 8l + 4 (62 for l = 7);
 * IQ3_S 2l + 1; IQ1 signed bytes -1, 0, 1. */
static int grid_level(int which, int v) {
    if (which < 3) return v == 8 ? 0 : v == 25 ? 1 : 2;
    if (which == 5) return v == 0xff ? 0 : v == 0 ? 1 : 2;
    return which == 3 ? (v - 4) / 8 : (v - 1) / 2;
}

static uint64_t grid_entry(int which, int k) {
    switch (which) {
    case 0:
        return ts_iq2xxs_grid[k];
    case 1:
        return ts_iq2xs_grid[k];
    case 2:
        return ts_iq2s_grid[k];
    case 3:
        return ts_iq3xxs_grid[k];
    case 4:
        return ts_iq3s_grid[k];
    default:
        return ts_iq1s_grid[k];
    }
}

static int index_of(const ts_lattice *lat, const uint8_t *level) {
    int u = 0;
    for (int i = 0; i < lat->group; i++) u |= level[i] << (lat->bits * i);
    return u;
}

static void lattice_init(int which) {
    ts_lattice *L = &g_lat[which];
    const int n_index = L->bits == 2 ? IQ2_INDICES : IQ3_INDICES, mask = (1 << L->bits) - 1;
    for (int k = 0; k < L->size; k++)
        for (int i = 0; i < L->group; i++)
            L->level[k][i] = (uint8_t)grid_level(which, ts_grid_u8(grid_entry(which, k), i));
    for (int u = 0; u < n_index; u++) L->map[u] = -1;
    for (int k = 0; k < L->size; k++) L->map[index_of(L, L->level[k])] = k;
    int d2[2048], o = 0;
    for (int u = 0; u < n_index; u++) {
        if (L->map[u] >= 0) continue;
        for (int j = 0; j < L->size; j++) {
            int s = 0;
            for (int i = 0; i < L->group; i++) {
                const int diff = 2 * L->level[j][i] - 2 * ((u >> (L->bits * i)) & mask);
                s += diff * diff;
            }
            d2[j] = s;
        }
        /* The points at the nwant smallest distinct distances, by distance then index. */
        const int start = o++;
        int below = -1;
        for (int w = 0; w < L->nwant; w++) {
            int next = INT32_MAX;
            for (int j = 0; j < L->size; j++)
                if (d2[j] > below && d2[j] < next) next = d2[j];
            if (next == INT32_MAX) break;
            for (int j = 0; j < L->size; j++)
                if (d2[j] == next) {
                    assert(o < L->n_neighbours);
                    L->neighbours[o++] = (uint16_t)j;
                }
            below = next;
        }
        L->neighbours[start] = (uint16_t)(o - start - 1);
        L->map[u] = -(start + 1);
    }
    assert(o == L->n_neighbours);
}

static void init0(void) {
    lattice_init(0);
}
static void init1(void) {
    lattice_init(1);
}
static void init2(void) {
    lattice_init(2);
}
static void init3(void) {
    lattice_init(3);
}
static void init4(void) {
    lattice_init(4);
}
static void init5(void) {
    lattice_init(5);
}

const ts_lattice *ts_lattice_get(uint32_t type) {
    static void (*const init[6])(void) = {init0, init1, init2, init3, init4, init5};
    const int which = type == TS_TYPE_IQ2_XXS                          ? 0
                      : type == TS_TYPE_IQ2_XS                         ? 1
                      : type == TS_TYPE_IQ2_S                          ? 2
                      : type == TS_TYPE_IQ3_XXS                        ? 3
                      : type == TS_TYPE_IQ3_S                          ? 4
                      : type == TS_TYPE_IQ1_S || type == TS_TYPE_IQ1_M ? 5
                                                                       : -1;
    if (which < 0) return NULL;
    pthread_once(&g_once[which], init[which]);
    return &g_lat[which];
}

unsigned ts_lattice_signs(const float *x, const float *weight, float *xval, bool parity) {
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

/* Of the grid neighbours of off-grid point u, the one nearest (weighted) to scale · (2l + 1); the
 * first wins a tie. Its levels go to Lq. */
static void best_neighbour(const ts_lattice *lat, int u, const float *xval, const float *w, float scale,
                           int8_t *Lq) {
    const uint16_t *nb = lat->neighbours - lat->map[u] - 1;
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        float d2 = 0;
        for (int i = 0; i < lat->group; i++) {
            const float q = 2 * lat->level[nb[j]][i] + 1;
            const float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    for (int i = 0; i < lat->group; i++) Lq[i] = (int8_t)lat->level[best][i];
}

/* Levels of a group at inverse scale id (nearest, clamped); true when the point is on the grid,
 * else Lq is moved to its best grid neighbour at `scale`. */
static bool round_group(const ts_lattice *lat, const float *xval, const float *waux, float id, float scale,
                        int8_t *Lq) {
    int u = 0;
    for (int i = 0; i < lat->group; i++) {
        int l = ts_nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > lat->max_level ? lat->max_level : l;
        Lq[i] = (int8_t)l;
        u |= l << (lat->bits * i);
    }
    if (lat->map[u] >= 0) return true;
    best_neighbour(lat, u, xval, waux, scale, Lq);
    return false;
}

static void fit_sums(int n, const float *w, const float *xval, const int8_t *L, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const float q = 2 * L[i] + 1;
        a += w[i] * xval[i] * q;
        b += w[i] * q * q;
    }
    *sumqx = a, *sumq2 = b;
}

float ts_lattice_fit(const ts_lattice *lat, const ts_lattice_search *s, const float *xval,
                     const float *weight, int8_t *L, int *grid_index) {
    const int n = s->n, groups = n / lat->group;
    float waux[32];
    int8_t Laux[32];
    bool on_grid[8], aux_on_grid[8];
    assert(n <= 32 && groups <= 8 && n % lat->group == 0);
    for (int i = 0; i < n; i++) waux[i] = sqrtf(weight[i]);
    memset(L, 0, (size_t)n);
    for (int k = 0; k < groups; k++) on_grid[k] = s->on_grid;
    float best = 0, scale = s->scale, sumqx, sumq2;
    for (int is = -s->steps; is <= s->steps; is++) {
        const float id = (2 * lat->max_level + 1 + is * s->step) / s->max, this_scale = 1 / id;
        for (int k = 0; k < groups; k++) {
            const int g = lat->group * k;
            aux_on_grid[k] = round_group(lat, xval + g, waux + g, id, this_scale, Laux + g);
        }
        fit_sums(n, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)n);
            memcpy(on_grid, aux_on_grid, sizeof on_grid);
        }
    }
    int n_off = 0;
    for (int k = 0; k < groups; k++) n_off += !on_grid[k];
    if ((s->refit == TS_REFIT_ALL || n_off > 0) && scale > 0) {
        for (int k = 0; k < groups; k++) {
            if (s->refit == TS_REFIT_OFF_GRID && on_grid[k]) continue;
            const int g = lat->group * k;
            round_group(lat, xval + g, waux + g, 1 / scale, scale, L + g);
        }
        fit_sums(n, weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    for (int k = 0; k < groups; k++) {
        uint8_t level[8];
        for (int i = 0; i < lat->group; i++) level[i] = (uint8_t)L[lat->group * k + i];
        grid_index[k] = lat->map[index_of(lat, level)];
        assert(grid_index[k] >= 0); /* every path above ends on the grid */
    }
    return scale;
}
