/* Private to src/quant: the quantizer's view of the i-quant lattices (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, and the one of IQ1_S / IQ1_M), as ggml's iq2xs_init_impl / iq3xs_init_impl build
 * it, and the search that fits one sub-block to a lattice (the common core of ggml's
 * quantize_row_iq2_* / iq3_*_impl; IQ1 has its own, quantize_iq1.c).
 *
 * A lattice point codes a group of 8 (IQ2) or 4 (IQ3) magnitudes as levels l in 0..max_level,
 * each magnitude ∝ 2l + 1; its index u packs the levels, `bits` bits each, first element lowest.
 * Only the points of the format's grid can be stored. A point off the grid is replaced by the best
 * (weighted nearest) of its grid neighbours: the grid points at the `nwant` smallest squared
 * distances, listed by distance then grid index, as ggml lists them. The levels of each grid point
 * are read back from the dequantization tables (quant/iq_grids.h), which are ggml's kgrid_* tables
 * in another form. */
#ifndef TS_QUANT_LATTICE_H
#define TS_QUANT_LATTICE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct ts_lattice {
    int size;            /* grid points */
    int group;           /* elements a point codes: 8 or 4 */
    int bits;            /* bits of one level in an index */
    int max_level;       /* levels run 0..max_level */
    int nwant;           /* distinct neighbour distances kept for an off-grid point */
    uint8_t (*level)[8]; /* [size]: the levels of each grid point */
    int *map;            /* [index]: the grid point, or -(o + 1) with neighbours[o] = count n and
                          * neighbours[o + 1 .. o + n] the grid points to try */
    uint16_t *neighbours;
    int n_neighbours; /* exact length of neighbours for ggml's grid (checked at initialisation) */
} ts_lattice;

/* The lattice of TS_TYPE_IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S or IQ1_M (one for both),
 * built on first use (thread-safe); NULL for other types. */
const ts_lattice *ts_lattice_get(uint32_t type);

/* Signs of the 8 values x into s (bit i: x[i] < 0) and their magnitudes into xval. With parity
 * (IQ2_XXS, IQ2_XS, IQ3_XXS store 7 sign bits and infer the eighth from an even count of minus
 * signs), an odd count flips the element of least weight·x² (the first of equals) and the 7 low
 * bits are returned. */
unsigned ts_lattice_signs(const float *x, const float *weight, float *xval, bool parity);

/* How a sub-block search ends (ggml's variants): re-round, at the best scale, only the groups that
 * were off the grid there (IQ2_XS, IQ2_S, IQ3_XXS); all groups when one was (IQ3_S); or all groups
 * always (IQ2_XXS). */
enum { TS_REFIT_OFF_GRID, TS_REFIT_ALL_IF_OFF, TS_REFIT_ALL };

typedef struct ts_lattice_search {
    int n;     /* elements of the sub-block: a multiple of the group */
    float max; /* trial inverse scales (2·max_level + 1 + is·step) / max, ... */
    int steps; /* ... for is = -steps .. steps */
    float step;
    float scale;  /* the scale kept if no trial fits (ggml: max / (2·max_level + 1)) */
    bool on_grid; /* what "on the grid" says before any trial is kept (false: IQ3_S) */
    int refit;    /* TS_REFIT_* */
} ts_lattice_search;

/* Fits the magnitudes xval[n] with weights weight[n]: levels into L[n] (every group a grid point),
 * grid indices into grid_index[n / group]; returns the scale (the weighted least-squares scale of
 * the final levels). */
float ts_lattice_fit(const ts_lattice *lat, const ts_lattice_search *s, const float *xval,
                     const float *weight, int8_t *L, int *grid_index);

#endif
