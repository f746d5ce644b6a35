/* Synthetic qwen4exp GGUFs: the exact metadata, tensor set and shapes of a config, filled with
 * seeded random data in a chosen quantization, or left as holes (sparse files that take no disk
 * space) for loader tests of the full-size model.
 *
 * Values are plausible, not trained: matrices uniform in ±1/√(ne0), (1+w) norms near 1, A < 0. */
#include "model/synth.h"

#include "common/error.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Narrow rows (160/320/640) cannot hold 256-element super-blocks: ggml's quantizer falls back to a
 * 32-element type of similar size (MODEL.md §8). */
uint32_t ts_synth_fallback_type(uint32_t type, int64_t ne0) {
    const ts_type_traits *t = ts_type_get(type);
    if (!t || ne0 % t->block_size == 0) return type;
    uint32_t fb;
    switch (type) {
    case TS_TYPE_Q4_K:
        fb = TS_TYPE_Q5_0;
        break;
    case TS_TYPE_Q5_K:
        fb = TS_TYPE_Q5_1;
        break;
    case TS_TYPE_Q6_K:
        fb = TS_TYPE_Q8_0;
        break;
    case TS_TYPE_Q2_K:
    case TS_TYPE_Q3_K:
        fb = TS_TYPE_Q4_0;
        break;
    case TS_TYPE_IQ1_S:
    case TS_TYPE_IQ1_M:
    case TS_TYPE_IQ2_XXS:
    case TS_TYPE_IQ2_XS:
    case TS_TYPE_IQ2_S:
    case TS_TYPE_IQ3_XXS:
    case TS_TYPE_IQ3_S:
    case TS_TYPE_IQ4_XS:
        fb = TS_TYPE_IQ4_NL;
        break;
    default:
        fb = TS_TYPE_Q8_0;
        break;
    }
    return ne0 % ts_type_get(fb)->block_size == 0 ? fb : TS_TYPE_F16; /* rows too short for any block */
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s) {
    return (float)((rng_next(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static uint32_t type_of(const ts_synth_opts *o, const ts_tensor_spec *s) {
    if (s->role != 'm') return TS_TYPE_F32;
    return ts_synth_fallback_type(o->type, s->ne[0]);
}

typedef struct synth_ctx {
    const ts_synth_opts *o;
    ts_gguf_writer *w;
    int pass; /* 0: declare, 1: data */
    uint64_t seed;
    float *row, *ones; /* ones: equal importance weights for the types that need some */
    uint8_t *qrow;
    int64_t row_cap;
    char *err;
    size_t errlen;
} synth_ctx;

/* A row of random values fitting the tensor's role and name. */
static void fill_row(const ts_tensor_spec *s, uint64_t *rng, float *row, int64_t n) {
    bool is_norm = strstr(s->name, "norm") != NULL && strstr(s->name, "ssm_norm") == NULL;
    float scale = s->role == 'm' ? 1.0f / sqrtf((float)s->ne[0]) : 0.5f;
    for (int64_t i = 0; i < n; i++) {
        float u = rng_uniform(rng);
        if (is_norm || strstr(s->name, "ssm_norm"))
            row[i] = 1.0f + 0.1f * u;
        else if (strstr(s->name, "ssm_a"))
            row[i] = -expf(u);
        else
            row[i] = scale * u;
    }
}

static int synth_tensor(void *ctx, const ts_tensor_spec *orig) {
    synth_ctx *c = ctx;
    ts_tensor_spec spec = *orig;
    const ts_tensor_spec *s = &spec;
    uint32_t type = type_of(c->o, s);
    if (c->o->tied_output && strcmp(s->name, "output.weight") == 0) return 0;
    if (c->o->edit && !c->o->edit(c->o->edit_ctx, &spec, &type)) return 0; /* called alike in both passes */
    if (c->pass == 0) {
        if (ts_gguf_writer_add_tensor(c->w, s->name, type, s->n_dims, s->ne))
            return ts_errf(c->err, c->errlen, "%s", ts_gguf_writer_error(c->w));
        return 0;
    }
    int64_t ne0 = s->ne[0], rows = 1;
    for (uint32_t d = 1; d < s->n_dims; d++) rows *= s->ne[d];
    size_t rb = ts_row_size(type, ne0);
    if (c->o->sparse) {
        if (ts_gguf_writer_skip(c->w, rb * (uint64_t)rows))
            return ts_errf(c->err, c->errlen, "%s", ts_gguf_writer_error(c->w));
        return 0;
    }
    if (ne0 > c->row_cap) {
        free(c->row), free(c->qrow), free(c->ones);
        c->row = malloc((size_t)ne0 * sizeof *c->row);
        c->ones = malloc((size_t)ne0 * sizeof *c->ones);
        c->qrow = malloc((size_t)ne0 * 8);
        c->row_cap = ne0;
        for (int64_t i = 0; c->ones && i < ne0; i++) c->ones[i] = 1.0f;
        if (!c->row || !c->qrow || !c->ones)
            return ts_errf(c->err, c->errlen, "out of memory for a row of %" PRId64, ne0);
    }
    for (int64_t r = 0; r < rows; r++) {
        fill_row(s, &c->seed, c->row, ne0);
        const float *qw = ts_quantize_needs_imatrix(type) ? c->ones : NULL; /* random data: equal weights */
        if (ts_quantize_row_imatrix(type, c->row, c->qrow, ne0, qw, c->err, c->errlen)) return -1;
        if (ts_gguf_writer_write(c->w, c->qrow, rb))
            return ts_errf(c->err, c->errlen, "%s", ts_gguf_writer_error(c->w));
    }
    return 0;
}

int ts_synth_write(const ts_hparams *hp, const ts_synth_opts *o, const char *path, char *err, size_t errlen) {
    if (!ts_can_quantize(o->type) && !ts_quantize_needs_imatrix(o->type))
        return ts_errf(err, errlen, "synth: cannot write matrices of type %s (no quantizer for it)",
                       ts_type_name(o->type));
    ts_gguf_writer *w = ts_gguf_writer_new(TS_GGUF_DEFAULT_ALIGNMENT, err, errlen);
    if (!w) return -1;
    synth_ctx c = {.o = o, .w = w, .seed = o->seed, .err = err, .errlen = errlen};
    int rc = ts_hparams_write(hp, w);
    if (rc) ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    rc = rc || ts_gguf_writer_set_str(w, "general.name", "turbospark synthetic qwen4exp");
    uint32_t n_tokens;
    if (!rc && o->tokenizer)
        rc = ts_tokenizer_copy_gguf(w, o->tokenizer, hp->n_vocab, &n_tokens, err, errlen);
    if (!rc && o->meta) rc = o->meta(o->meta_ctx, w, err, errlen);
    if (!rc) rc = ts_qwen4exp_visit_tensors(hp, o->layout, NULL, synth_tensor, &c);
    if (!rc && ts_gguf_writer_begin_data(w, path)) rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    c.pass = 1;
    if (!rc) rc = ts_qwen4exp_visit_tensors(hp, o->layout, NULL, synth_tensor, &c);
    if (!rc && ts_gguf_writer_finish(w)) rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    free(c.row);
    free(c.ones);
    free(c.qrow);
    ts_gguf_writer_free(w);
    return rc ? -1 : 0;
}
