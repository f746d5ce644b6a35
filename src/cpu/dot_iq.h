/* Chunk decoders of the lattice i-quants for the SIMD kernels of dot.c: IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. Included by dot.c inside its x86 section only (it uses that file's
 * AI/TGT2/DEC/NO_CX macros and bit_bytes/h2f helpers); not a header of its own.
 *
 * Chunk c is the c-th 32 elements of a 256-element block. Each decoder gathers the chunk's grid
 * entries (4 of 8 bytes, or 8 of 4 bytes for IQ3) into 32 bytes and applies the signs, so that
 * weight = fp32(q)·s, exactly the reference's value (src/quant/dequant_iq.c):
 *   IQ2/IQ3: the reference computes (db·g)·(±1), and db·(±g) rounds to the same float;
 *   IQ1:     the reference computes dl·(g ± 1/8) with g in {-1, 0, 1}; we take q = 8g ± 1 and
 *            s = dl·0.125 (exact: |dl| ≥ 2^-24, so dl/8 is a normal float), the same real product
 *            rounded once. */

/* Conditional negation of bytes: -g where m is 0xff, g where it is 0. */
AI TGT2 __m256i negate_where(__m256i g, __m256i m) {
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

/* 32 sign bits (bit j: element j negative) -> 0xff / 0x00 bytes. */
AI TGT2 __m256i sign_mask(uint32_t bits) {
    uint8_t p[4];
    ts_st_u32(p, bits);
    return bit_bytes(p);
}

/* Four 7-bit sign indices (bits 7l..7l+6 of aux) -> the 32 sign bits of four groups of 8. */
AI TGT2 uint32_t ksigns4(uint32_t aux) {
    return (uint32_t)ts_ksigns_iq2xs[aux & 127] | (uint32_t)ts_ksigns_iq2xs[(aux >> 7) & 127] << 8 |
           (uint32_t)ts_ksigns_iq2xs[(aux >> 14) & 127] << 16 |
           (uint32_t)ts_ksigns_iq2xs[(aux >> 21) & 127] << 24;
}

AI TGT2 __m256i grid8x4(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3) {
    return _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
}

AI TGT2 uint16_t u16_at(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

NO_CX(iq2_xxs)
DEC(iq2_xxs) { /* 4 grid indices, then a uint32: 4 sign indices and the scale */
    const ts_block_iq2_xxs *B = (const void *)b;
    (void)cx, (void)o;
    const uint8_t *q8 = B->qs + 8 * c;
    const uint32_t aux = ts_ld_u32(q8 + 4);
    const __m256i g =
        grid8x4(ts_iq2xxs_grid[q8[0]], ts_iq2xxs_grid[q8[1]], ts_iq2xxs_grid[q8[2]], ts_iq2xxs_grid[q8[3]]);
    *q = negate_where(g, sign_mask(ksigns4(aux)));
    *s0 = *s1 = h2f(B->d) * (0.5f + (aux >> 28)) * 0.25f;
}

NO_CX(iq2_xs)
DEC(iq2_xs) { /* 4 uint16: 9-bit grid index | sign index << 9; a scale nibble per 16 elements */
    const ts_block_iq2_xs *B = (const void *)b;
    (void)cx, (void)o;
    uint16_t v[4];
    for (int l = 0; l < 4; l++) v[l] = u16_at(B->qs + 8 * c + 2 * l);
    const __m256i g = grid8x4(ts_iq2xs_grid[v[0] & 511], ts_iq2xs_grid[v[1] & 511], ts_iq2xs_grid[v[2] & 511],
                              ts_iq2xs_grid[v[3] & 511]);
    const uint32_t signs = (uint32_t)ts_ksigns_iq2xs[v[0] >> 9] | (uint32_t)ts_ksigns_iq2xs[v[1] >> 9] << 8 |
                           (uint32_t)ts_ksigns_iq2xs[v[2] >> 9] << 16 |
                           (uint32_t)ts_ksigns_iq2xs[v[3] >> 9] << 24;
    *q = negate_where(g, sign_mask(signs));
    const float d = h2f(B->d);
    *s0 = d * (0.5f + (B->scales[c] & 0xf)) * 0.25f;
    *s1 = d * (0.5f + (B->scales[c] >> 4)) * 0.25f;
}

NO_CX(iq2_s)
DEC(iq2_s) { /* index qs[4c+l] | 2 bits of qh[c]; 8 sign bits a group in qs[32 + 4c + l] */
    const ts_block_iq2_s *B = (const void *)b;
    (void)cx, (void)o;
    int idx[4];
    for (int l = 0; l < 4; l++) idx[l] = B->qs[4 * c + l] | ((B->qh[c] >> (2 * l)) & 3) << 8;
    const __m256i g =
        grid8x4(ts_iq2s_grid[idx[0]], ts_iq2s_grid[idx[1]], ts_iq2s_grid[idx[2]], ts_iq2s_grid[idx[3]]);
    *q = negate_where(g, sign_mask(ts_ld_u32(B->qs + 32 + 4 * c)));
    const float d = h2f(B->d);
    *s0 = d * (0.5f + (B->scales[c] & 0xf)) * 0.25f;
    *s1 = d * (0.5f + (B->scales[c] >> 4)) * 0.25f;
}

NO_CX(iq3_xxs)
DEC(iq3_xxs) { /* 8 indices of 4 elements; a uint32 at qs[64 + 4c]: 4 sign indices and the scale */
    const ts_block_iq3_xxs *B = (const void *)b;
    (void)cx, (void)o;
    const uint8_t *q8 = B->qs + 8 * c;
    const uint32_t aux = ts_ld_u32(B->qs + 64 + 4 * c);
    const __m256i g =
        _mm256_set_epi32((int)ts_iq3xxs_grid[q8[7]], (int)ts_iq3xxs_grid[q8[6]], (int)ts_iq3xxs_grid[q8[5]],
                         (int)ts_iq3xxs_grid[q8[4]], (int)ts_iq3xxs_grid[q8[3]], (int)ts_iq3xxs_grid[q8[2]],
                         (int)ts_iq3xxs_grid[q8[1]], (int)ts_iq3xxs_grid[q8[0]]);
    *q = negate_where(g, sign_mask(ksigns4(aux)));
    *s0 = *s1 = h2f(B->d) * (0.5f + (aux >> 28)) * 0.5f;
}

NO_CX(iq3_s)
DEC(iq3_s) { /* index qs[8c+k] | bit k of qh[c]; one sign bit an element; a scale nibble per 32 */
    const ts_block_iq3_s *B = (const void *)b;
    (void)cx, (void)o;
    uint32_t g[8];
    for (int k = 0; k < 8; k++) g[k] = ts_iq3s_grid[B->qs[8 * c + k] | ((B->qh[c] >> k) & 1) << 8];
    const __m256i gv = _mm256_set_epi32((int)g[7], (int)g[6], (int)g[5], (int)g[4], (int)g[3], (int)g[2],
                                        (int)g[1], (int)g[0]);
    *q = negate_where(gv, sign_mask(ts_ld_u32(B->signs + 4 * c)));
    *s0 = *s1 = h2f(B->d) * (1 + 2 * ((B->scales[c / 2] >> (4 * (c % 2))) & 0xf));
}

/* 8g + δ8 bytes for grid entries of signed bytes g in {-1, 0, 1}; delta: 8 bytes of ±1 a group. */
AI TGT2 __m256i iq1_codes(__m256i g, __m256i delta) {
    return _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta);
}

NO_CX(iq1_s)
DEC(iq1_s) { /* a uint16 qh[c]: 4 x 3 high index bits, the scale (12-14), the sign of δ (15) */
    const ts_block_iq1_s *B = (const void *)b;
    (void)cx, (void)o;
    const unsigned qh = u16_at(B->qh + 2 * c);
    uint64_t e[4];
    for (int l = 0; l < 4; l++) e[l] = ts_iq1s_grid[B->qs[4 * c + l] | ((qh >> (3 * l)) & 7) << 8];
    *q = iq1_codes(grid8x4(e[0], e[1], e[2], e[3]), _mm256_set1_epi8(qh & 0x8000 ? -1 : 1));
    const float dl = h2f(B->d) * (2 * ((qh >> 12) & 7) + 1);
    *s0 = *s1 = dl * 0.125f;
}

NO_CX(iq1_m)
DEC(iq1_m) { /* super-scale from the scale words' top nibbles; 3-bit scales per 16 elements; a
              * nibble of qh per group: 3 high index bits and the sign of δ */
    const ts_block_iq1_m *B = (const void *)b;
    (void)cx, (void)o;
    uint16_t sc[4];
    for (int w = 0; w < 4; w++) sc[w] = u16_at(B->scales + 2 * w);
    const uint16_t dbits =
        (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    const float d = ts_fp16_to_fp32(dbits);
    uint64_t e[4], dm[4];
    for (int l = 0; l < 4; l++) {
        const int gi = 4 * c + l;
        const unsigned nib = (B->qh[gi / 2] >> (4 * (gi % 2))) & 0xf;
        e[l] = ts_iq1s_grid[B->qs[gi] | (nib & 7) << 8];
        dm[l] = nib & 8 ? 0xffffffffffffffffull : 0x0101010101010101ull;
    }
    *q = iq1_codes(grid8x4(e[0], e[1], e[2], e[3]), grid8x4(dm[0], dm[1], dm[2], dm[3]));
    *s0 = d * (2 * ((sc[c / 2] >> (6 * (c % 2))) & 7) + 1) * 0.125f;
    *s1 = d * (2 * ((sc[c / 2] >> (6 * (c % 2) + 3)) & 7) + 1) * 0.125f;
}
