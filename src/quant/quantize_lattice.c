/* Quantization to the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, as ggml's
 * quantize_row_iq2_*_impl / quantize_row_iq3_*_impl (ggml-quants.c), with or without importance
 * weights. ggml quantizes IQ2_XXS and IQ2_XS only with weights (an imatrix); the others also
 * without (quantize_row_*_ref).
 *
 * Per super-block of 256: sigma2 = f·mean x² (f = 1 for IQ2_XXS/IQ2_XS, 2 otherwise); each element
 * weighs qw·sqrt(sigma2 + x²) with importance weights qw, else x² (IQ3) or sigma2/4 + x² (IQ2_S).
 * Per sub-block of 32 (16 for IQ2_XS, IQ2_S): the signs are taken out (groups of 8; with 7 stored
 * bits the eighth follows from parity, see ts_lattice_signs), the magnitudes are fitted to the
 * format's lattice by trial scales (ts_lattice_fit; IQ2_XXS starts from make_qp_quants' scale),
 * and the sub-block scales are coded in 4 bits against the largest: l = round((s/d - 1)/2),
 * d = max/31, d stored as fp16 times a fudge factor (IQ3_XXS 1.0125, IQ3_S 1.033, IQ2_S 0.9875).
 * Float operations and their order are ggml's, so the bytes are identical for finite input (the
 * unit tests compare them with ggml's), with one deliberate exception: ggml's IQ3_S quantizer
 * forgets to advance its quant and sign pointers past a sub-block of 32 zeros, so the later
 * sub-blocks of such a block are written 8 index bytes / 4 sign bytes early and decode to the wrong
 * values; we write each sub-block in its place (the block then decodes to what was meant). */
#include "quant/blocks.h"
#include "quant/lattice.h"
#include "quant/quant.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>

typedef struct lattice_format {
    uint32_t type;
    int n;         /* elements of a sub-block */
    bool parity;   /* 7 sign bits a group of 8, the eighth by parity */
    float eps;     /* a sub-block whose largest magnitude is below this is left empty */
    float sigma;   /* sigma2 = sigma · mean x² */
    float plain;   /* without importance weights: weight = plain · sigma2 + x² */
    bool qp_start; /* IQ2_XXS: trial scales around make_qp_quants' fit */
    int steps;
    float step;
    bool on_grid;
    int refit;
    bool needs_weights; /* ggml has no quantizer without them */
} lattice_format;

static const lattice_format k_iq2_xxs = {TS_TYPE_IQ2_XXS, 32,  true, 1e-15f, 1, 0, true, 6, 0.1f, true,
                                         TS_REFIT_ALL,    true};
static const lattice_format k_iq2_xs = {TS_TYPE_IQ2_XS,    16,  true, 1e-15f, 1, 0, false, 9, 0.1f, true,
                                        TS_REFIT_OFF_GRID, true};
static const lattice_format k_iq2_s = {TS_TYPE_IQ2_S,     16,   false, 1e-8f, 2, 0.25f, false, 9, 0.1f, true,
                                       TS_REFIT_OFF_GRID, false};
static const lattice_format k_iq3_xxs = {TS_TYPE_IQ3_XXS,   32,   true, 1e-8f, 2, 0, false, 15, 0.2f, true,
                                         TS_REFIT_OFF_GRID, false};
static const lattice_format k_iq3_s = {
    TS_TYPE_IQ3_S, 32, false, FLT_TRUE_MIN, 2, 0, false, 9, 0.2f, false, TS_REFIT_ALL_IF_OFF, false};

/* One super-block fitted: per sub-block its scale, grid indices and sign bytes (empty sub-blocks:
 * all zero), and the largest scale. */
typedef struct fitted {
    float scale[16], max_scale;
    int grid_index[16][8];
    unsigned signs[16][4];
} fitted;

static void fit_block(const lattice_format *f, const ts_lattice *lat, const float *x, const float *qw,
                      fitted *out) {
    float sumx2 = 0;
    for (int i = 0; i < TS_QK_K; i++) sumx2 += x[i] * x[i];
    const float sigma2 = f->sigma * sumx2 / TS_QK_K;
    memset(out, 0, sizeof *out);
    for (int ib = 0; ib < TS_QK_K / f->n; ib++) {
        const float *xb = x + f->n * ib;
        float weight[32], xval[32] = {0};
        int8_t L[32];
        for (int i = 0; i < f->n; i++)
            weight[i] = qw         ? qw[f->n * ib + i] * sqrtf(sigma2 + xb[i] * xb[i])
                        : f->plain ? f->plain * sigma2 + xb[i] * xb[i]
                                   : xb[i] * xb[i];
        unsigned signs[4];
        for (int k = 0; k < f->n / 8; k++)
            signs[k] = ts_lattice_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k, f->parity);
        float max = xval[0];
        for (int i = 1; i < f->n; i++) max = max > xval[i] ? max : xval[i];
        if (max < f->eps) continue;
        ts_lattice_search s = {f->n,       max,     f->steps, f->step, max / (2 * lat->max_level + 1),
                               f->on_grid, f->refit};
        if (f->qp_start) {
            const int kmax = lat->max_level + 1; /* ggml's kMaxQ */
            s.scale = ts_fit_positive(f->n, kmax + 1, xval, (uint8_t *)L, weight);
            s.max = s.scale * kmax;
            if (s.max <= 0) continue;
        }
        float scale = ts_lattice_fit(lat, &s, xval, weight, L, out->grid_index[ib]);
        if (scale < 0) { /* ggml's guard; cannot happen with weights >= 0 */
            scale = -scale;
            for (int k = 0; k < f->n / 8; k++) signs[k] = ~signs[k] & (f->parity ? 127u : 255u);
        }
        memcpy(out->signs[ib], signs, sizeof signs);
        out->scale[ib] = scale;
        out->max_scale = out->max_scale > scale ? out->max_scale : scale;
    }
}

static unsigned scale_code(float id, float scale) {
    const int l = ts_nearest_int(0.5f * (id * scale - 1));
    return (unsigned)(l < 0 ? 0 : l > 15 ? 15 : l);
}

/* IQ2_XS / IQ2_S: 16 sub-block scale codes, two a byte (low nibble first). */
static void pack_scales16(const fitted *b, float id, uint8_t scales[8]) {
    for (int ib = 0; ib < 16; ib += 2)
        scales[ib / 2] = (uint8_t)(scale_code(id, b->scale[ib]) | scale_code(id, b->scale[ib + 1]) << 4);
}

static void pack(const lattice_format *f, const fitted *b, void *dst) {
    const float d = b->max_scale / 31, id = 1 / d;
    switch (f->type) {
    case TS_TYPE_IQ2_XXS: {
        ts_block_iq2_xxs *y = dst;
        memset(y, 0, sizeof *y);
        if (!b->max_scale) return;
        ts_st_half(y->d, d);
        for (int ib = 0; ib < 8; ib++) {
            for (int k = 0; k < 4; k++) y->qs[8 * ib + k] = (uint8_t)b->grid_index[ib][k];
            const uint32_t w =
                b->signs[ib][0] | b->signs[ib][1] << 7 | b->signs[ib][2] << 14 | b->signs[ib][3] << 21;
            ts_st_u32(y->qs + 8 * ib + 4, w | (uint32_t)scale_code(id, b->scale[ib]) << 28);
        }
        return;
    }
    case TS_TYPE_IQ2_XS: {
        ts_block_iq2_xs *y = dst;
        memset(y, 0, sizeof *y);
        if (!b->max_scale) return;
        ts_st_half(y->d, d);
        for (int ib = 0; ib < 16; ib++)
            for (int k = 0; k < 2; k++) {
                const unsigned v = (unsigned)b->grid_index[ib][k] | b->signs[ib][k] << 9;
                y->qs[4 * ib + 2 * k] = (uint8_t)(v & 0xff);
                y->qs[4 * ib + 2 * k + 1] = (uint8_t)(v >> 8);
            }
        pack_scales16(b, id, y->scales);
        return;
    }
    case TS_TYPE_IQ2_S: {
        ts_block_iq2_s *y = dst;
        memset(y, 0, sizeof *y);
        for (int ib = 0; ib < 16; ib++)
            for (int k = 0; k < 2; k++) {
                const int i8 = 2 * ib + k, gi = b->grid_index[ib][k];
                y->qs[i8] = (uint8_t)(gi & 255);
                y->qh[i8 / 4] |= (uint8_t)((gi >> 8) << 2 * (i8 % 4));
                y->qs[32 + i8] = (uint8_t)b->signs[ib][k];
            }
        if (!b->max_scale) return;
        ts_st_half(y->d, d * 0.9875f);
        pack_scales16(b, id, y->scales);
        return;
    }
    case TS_TYPE_IQ3_XXS: {
        ts_block_iq3_xxs *y = dst;
        memset(y, 0, sizeof *y);
        if (!b->max_scale) return;
        ts_st_half(y->d, d * 1.0125f);
        for (int ib = 0; ib < 8; ib++) {
            for (int k = 0; k < 8; k++) y->qs[8 * ib + k] = (uint8_t)b->grid_index[ib][k];
            const uint32_t w =
                b->signs[ib][0] | b->signs[ib][1] << 7 | b->signs[ib][2] << 14 | b->signs[ib][3] << 21;
            ts_st_u32(y->qs + 64 + 4 * ib, w | (uint32_t)scale_code(id, b->scale[ib]) << 28);
        }
        return;
    }
    default: { /* IQ3_S: each sub-block in its place (see the note above) */
        ts_block_iq3_s *y = dst;
        memset(y, 0, sizeof *y);
        for (int ib = 0; ib < 8; ib++) {
            for (int k = 0; k < 8; k++) {
                y->qs[8 * ib + k] = (uint8_t)(b->grid_index[ib][k] & 255);
                y->qh[ib] |= (uint8_t)((b->grid_index[ib][k] >> 8) << k);
            }
            for (int k = 0; k < 4; k++) y->signs[4 * ib + k] = (uint8_t)b->signs[ib][k];
        }
        if (!b->max_scale) return;
        ts_st_half(y->d, d * 1.033f);
        for (int ib = 0; ib < 8; ib += 2)
            y->scales[ib / 2] =
                (uint8_t)(scale_code(id, b->scale[ib]) | scale_code(id, b->scale[ib + 1]) << 4);
        return;
    }
    }
}

static void quantize(const lattice_format *f, const float *x, void *dst, int64_t nb, const float *qw) {
    const ts_lattice *lat = ts_lattice_get(f->type);
    const size_t block_bytes = ts_row_size(f->type, TS_QK_K);
    assert(lat && (qw || !f->needs_weights));
    for (int64_t i = 0; i < nb; i++) {
        fitted b;
        fit_block(f, lat, x + TS_QK_K * i, qw ? qw + TS_QK_K * i : NULL, &b);
        pack(f, &b, (uint8_t *)dst + block_bytes * (size_t)i);
    }
}

void ts_quantize_iq2_xxs_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize(&k_iq2_xxs, x, dst, nb, qw);
}
void ts_quantize_iq2_xs_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize(&k_iq2_xs, x, dst, nb, qw);
}
void ts_quantize_iq2_s_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize(&k_iq2_s, x, dst, nb, qw);
}
void ts_quantize_iq2_s(const float *x, void *dst, int64_t nb) {
    quantize(&k_iq2_s, x, dst, nb, NULL);
}
void ts_quantize_iq3_xxs_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize(&k_iq3_xxs, x, dst, nb, qw);
}
void ts_quantize_iq3_xxs(const float *x, void *dst, int64_t nb) {
    quantize(&k_iq3_xxs, x, dst, nb, NULL);
}
void ts_quantize_iq3_s_w(const float *x, void *dst, int64_t nb, const float *qw) {
    quantize(&k_iq3_s, x, dst, nb, qw);
}
void ts_quantize_iq3_s(const float *x, void *dst, int64_t nb) {
    quantize(&k_iq3_s, x, dst, nb, NULL);
}
