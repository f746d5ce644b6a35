/* Private to src/quant and src/cpu: the lattice tables of ggml's i-quants (iq_grids.c).
 *
 * Each i-quant codes a group of 8 (IQ2_*, IQ1_*) or 4 (IQ3_*) weights as an index into one of
 * these grids plus sign bits; byte j of an entry (least significant first) is element j. */
#ifndef TS_QUANT_IQ_GRIDS_H
#define TS_QUANT_IQ_GRIDS_H

#include <stdint.h>

/* ksigns_iq2xs: a 7-bit sign index -> 8 sign bits (bit j set: element j negative); the eighth
 * bit is the parity of the seven, so every group has an even number of minus signs. */
extern const uint8_t ts_ksigns_iq2xs[128];

extern const uint64_t ts_iq2xxs_grid[256]; /* IQ2_XXS: 8 magnitudes from {8, 25, 43} */
extern const uint64_t ts_iq2xs_grid[512];  /* IQ2_XS: the same three magnitudes */
extern const uint64_t ts_iq2s_grid[1024];  /* IQ2_S: the same three magnitudes */
extern const uint32_t ts_iq3xxs_grid[256]; /* IQ3_XXS: 4 magnitudes from {4, 12, ..., 52, 62} */
extern const uint32_t ts_iq3s_grid[512];   /* IQ3_S: 4 magnitudes from {1, 3, ..., 15} */
extern const uint64_t ts_iq1s_grid[2048];  /* IQ1_S / IQ1_M: 8 signed bytes from {-1, 0, 1} */

/* Byte j of a grid entry: element j of the group it codes. */
static inline int ts_grid_u8(uint64_t entry, int j) {
    return (int)((entry >> (8 * j)) & 0xff);
}
static inline int ts_grid_i8(uint64_t entry, int j) {
    return (int)(int8_t)(uint8_t)(entry >> (8 * j));
}

#endif
