/* A model without a file, for memory plans of shapes no file exists for yet (model/memplan.h).
 * Apart from src/model/memplan.c, which the standalone CUDA test build links alone. */
#include "model/memplan.h"

#include "common/error.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct virtual_model {
    ts_model m; /* first: the model handed out is this */
    ts_gguf_tensor *t;
    char (*names)[64];
    int64_t n, cap;
    bool tied_output;
    ts_memplan_type_fn type_of;
    void *ctx;
} virtual_model;

static int count_one(void *ctx, const ts_tensor_spec *s) {
    (void)s;
    ((virtual_model *)ctx)->cap++;
    return 0;
}

static int bind_virtual(void *ctx, const ts_tensor_spec *s) {
    virtual_model *v = ctx;
    if (v->tied_output && strcmp(s->name, "output.weight") == 0) return 0;
    if (v->n >= v->cap) return -1;
    ts_gguf_tensor *t = &v->t[v->n];
    snprintf(v->names[v->n], sizeof v->names[v->n], "%s", s->name);
    v->n++;
    t->name.ptr = v->names[v->n - 1], t->name.len = strlen(s->name);
    t->n_dims = s->n_dims;
    for (int d = 0; d < TS_GGUF_MAX_DIMS; d++) t->ne[d] = d < (int)s->n_dims ? s->ne[d] : 1;
    t->type = v->type_of(v->ctx, s);
    t->nelements = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    t->nbytes = ts_row_size(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    if (s->slot) *s->slot = t;
    return 0;
}

int ts_memplan_model_new(ts_hparams *hp, ts_layout layout, bool tied_output, ts_memplan_type_fn type_of,
                         void *ctx, ts_model **out, char *err, size_t errlen) {
    *out = NULL;
    virtual_model *v = calloc(1, sizeof *v);
    if (!v) {
        ts_hparams_free(hp);
        return ts_errf(err, errlen, "out of memory");
    }
    v->m.hp = *hp;
    memset(hp, 0, sizeof *hp);
    v->tied_output = tied_output, v->type_of = type_of, v->ctx = ctx;
    ts_model *m = &v->m;
    const ts_hparams *h = &m->hp;
    layout.ple_split = layout.ple_split && h->ple_layer >= 0;
    ts_qwen4exp_visit_tensors(h, layout, NULL, count_one, v);
    v->t = calloc((size_t)v->cap + 1, sizeof *v->t);
    v->names = calloc((size_t)v->cap + 1, sizeof *v->names);
    m->layers = calloc(h->n_block ? h->n_block : 1, sizeof *m->layers);
    m->ple_head_tables = layout.ple_split ? calloc(h->ple_nh, sizeof *m->ple_head_tables) : NULL;
    if (!v->t || !v->names || !m->layers || (layout.ple_split && !m->ple_head_tables)) {
        ts_memplan_model_free(m);
        return ts_errf(err, errlen, "out of memory");
    }
    for (uint32_t l = 0; l < h->n_block; l++) m->layers[l].kind = h->kind[l];
    if (ts_qwen4exp_visit_tensors(h, layout, m, bind_virtual, v)) {
        ts_memplan_model_free(m);
        return ts_errf(err, errlen, "the tensors of this configuration could not be listed");
    }
    if (!m->output) m->output = m->token_embd; /* tied embeddings, as ts_model_bind does */
    *out = m;
    return 0;
}

void ts_memplan_model_free(ts_model *m) {
    if (!m) return;
    virtual_model *v = (virtual_model *)m;
    ts_hparams_free(&m->hp);
    free(m->layers);
    free(m->ple_head_tables);
    free(v->t);
    free(v->names);
    free(v);
}
