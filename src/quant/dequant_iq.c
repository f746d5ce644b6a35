/* Reference dequantization of the lattice i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M.
 *
 * Each weight is scale · grid byte · sign, where a group of 8 (IQ3: 4) weights shares one index
 * into a lattice table (quant/iq_grids.h). The float operations are ggml's, in ggml's order
 * (dequantize_row_iq* in ggml-quants.c), so results are bit-identical to ggml's:
 *   IQ2_*:   db = d · (0.5 + s) · 0.25,  y = db · g · (±1)      s: 4-bit scale, g in {8, 25, 43}
 *   IQ3_XXS: db = d · (0.5 + s) · 0.5,   y = db · g · (±1)      g in {4, 12, ..., 62}
 *   IQ3_S:   db = d · (1 + 2s),          y = db · g · (±1)      g in {1, 3, ..., 15}
 *   IQ1_*:   dl = d · (2s + 1),          y = dl · (g + δ)       g in {-1, 0, 1}, δ = ±1/8
 * Tests: tests/unit/test_iq.c against ggml's own output (tests/fixtures/quant). */
#include "quant/blocks.h"
#include "quant/iq_grids.h"

static uint16_t ld_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* The 8 weights of one group: y[j] = scale · g_j, negated where bit j of signs is set. */
static void put_group8(float *y, float scale, uint64_t grid, unsigned signs) {
    for (int j = 0; j < 8; j++) y[j] = scale * ts_grid_u8(grid, j) * ((signs >> j) & 1 ? -1.f : 1.f);
}

/* IQ2_XXS: per 32 elements, bytes 0-3 of the 8 are grid indices of its four groups of 8, and the
 * uint32 in bytes 4-7 holds the groups' 7-bit sign indices (bits 7l..7l+6) and the scale (28-31). */
void ts_dequantize_iq2_xxs(const void *src, float *y, int64_t nb) {
    const ts_block_iq2_xxs *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b[i].qs + 8 * ib;
            const uint32_t aux = ts_ld_u32(q + 4);
            const float db = d * (0.5f + (aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                put_group8(y, db, ts_iq2xxs_grid[q[l]], ts_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        }
    }
}

/* IQ2_XS: a uint16 per group of 8: 9-bit grid index, 7-bit sign index above it. Elements 0-15 of
 * each 32 use the low nibble of its scale byte, 16-31 the high one. */
void ts_dequantize_iq2_xs(const void *src, float *y, int64_t nb) {
    const ts_block_iq2_xs *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {d * (0.5f + (b[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (b[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t v = ld_u16(b[i].qs + 2 * (4 * ib + l));
                put_group8(y, db[l / 2], ts_iq2xs_grid[v & 511], ts_ksigns_iq2xs[v >> 9]);
            }
        }
    }
}

/* IQ2_S: group g (0..31) has index qs[g] | bits 2(g%4)..+1 of qh[g/4] as bits 8-9, and its 8
 * sign bits in qs[32 + g] (no parity rule). Scales as IQ2_XS. */
void ts_dequantize_iq2_s(const void *src, float *y, int64_t nb) {
    const ts_block_iq2_s *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db[2] = {d * (0.5f + (b[i].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (b[i].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const int g = 4 * ib + l;
                const int idx = b[i].qs[g] | (((b[i].qh[ib] >> (2 * l)) & 3) << 8);
                put_group8(y, db[l / 2], ts_iq2s_grid[idx], b[i].qs[32 + g]);
            }
        }
    }
}

/* IQ3_XXS: per 32 elements, 8 grid indices of 4 elements (qs[8ib..8ib+7]) and a uint32 at
 * qs[64 + 4ib]: the 7-bit sign indices of its four groups of 8 (bits 7l..7l+6), the scale (28-31). */
void ts_dequantize_iq3_xxs(const void *src, float *y, int64_t nb) {
    const ts_block_iq3_xxs *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b[i].qs + 8 * ib;
            const uint32_t aux = ts_ld_u32(b[i].qs + 64 + 4 * ib);
            const float db = d * (0.5f + (aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const unsigned signs = ts_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint64_t grid = ts_iq3xxs_grid[q[2 * l]] | (uint64_t)ts_iq3xxs_grid[q[2 * l + 1]] << 32;
                put_group8(y, db, grid, signs);
            }
        }
    }
}

/* IQ3_S: index k (4 elements) is qs[k] | bit k%8 of qh[k/8] as bit 8; element e's sign is bit
 * e%8 of signs[e/8]. 32-element block ib has the nibble ib%2 of scales[ib/2]. */
void ts_dequantize_iq3_s(const void *src, float *y, int64_t nb) {
    const ts_block_iq3_s *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (1 + 2 * ((b[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xf));
            for (int l = 0; l < 4; l++, y += 8) {
                const int k = 8 * ib + 2 * l; /* indices k and k+1 code this group of 8 */
                const int i0 = b[i].qs[k] | (((b[i].qh[ib] >> (2 * l)) & 1) << 8);
                const int i1 = b[i].qs[k + 1] | (((b[i].qh[ib] >> (2 * l + 1)) & 1) << 8);
                const uint64_t grid = ts_iq3s_grid[i0] | (uint64_t)ts_iq3s_grid[i1] << 32;
                put_group8(y, db, grid, b[i].signs[4 * ib + l]);
            }
        }
    }
}

/* IQ1_S: per 32 elements a uint16 qh[ib]: bits 3l..3l+2 are bits 8-10 of group l's index,
 * 12-14 the scale, 15 the sign of δ. */
void ts_dequantize_iq1_s(const void *src, float *y, int64_t nb) {
    const ts_block_iq1_s *b = src;
    for (int64_t i = 0; i < nb; i++) {
        const float d = ts_ld_half(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const unsigned qh = ld_u16(b[i].qh + 2 * ib);
            const float dl = d * (2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = ts_iq1s_grid[b[i].qs[4 * ib + l] | ((qh >> (3 * l)) & 7) << 8];
                for (int j = 0; j < 8; j++) y[j] = dl * (ts_grid_i8(grid, j) + delta);
            }
        }
    }
}

/* IQ1_M: no stored d; the fp16 super-scale is the top nibbles of the four uint16 scale words
 * (word 0 the lowest). Word w holds 3-bit scales of 16-element halves 4w..4w+3 in bits 0-11.
 * Group g's index: qs[g] | its nibble of qh[g/2] (low for even g) bits 0-2 as bits 8-10; bit 3 of
 * the nibble is the sign of δ. */
void ts_dequantize_iq1_m(const void *src, float *y, int64_t nb) {
    const ts_block_iq1_m *b = src;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t sc[4];
        for (int w = 0; w < 4; w++) sc[w] = ld_u16(b[i].scales + 2 * w);
        const uint16_t dbits =
            (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        const float d = ts_fp16_to_fp32(dbits);
        for (int ib = 0; ib < 8; ib++) {
            const float dl[2] = {d * (2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1),
                                 d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1)};
            for (int l = 0; l < 4; l++, y += 8) {
                const int g = 4 * ib + l;
                const unsigned nib = (b[i].qh[g / 2] >> (4 * (g % 2))) & 0xf;
                const uint64_t grid = ts_iq1s_grid[b[i].qs[g] | (nib & 7) << 8];
                const float delta = nib & 8 ? -0.125f : 0.125f;
                for (int j = 0; j < 8; j++) y[j] = dl[l / 2] * (ts_grid_i8(grid, j) + delta);
            }
        }
    }
}
