/* GGUF → GGUF re-quantization (see convert.h): the input must bind as a qwen4exp model (so every
 * tensor has a known role), matrices get ts_mix_type's type, vectors and metadata are kept. */
#include "convert/convert.h"

#include "common/error.h"
#include "convert/imatrix.h"
#include "convert/stream.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct qjob {
    const ts_gguf_tensor *t;
    uint32_t type;
    size_t src_row_bytes;
    float *qw; /* importance weights: [n_mat × ne0], or NULL */
} qjob;

typedef struct qctx {
    const ts_model *m;
    const ts_mix *mix;
    const ts_imatrix *im; /* or NULL */
    size_t n_weighted;    /* tensors quantized with importance weights */
    ts_gguf_writer *w;
    qjob *jobs;
    size_t n_jobs;
    char *err;
    size_t errlen;
} qctx;

static int q_row(const void *ctx, int64_t r, float *out, float *scratch, char *err, size_t errlen) {
    const qjob *j = ctx;
    (void)scratch;
    return ts_dequantize_row(j->t->type, (const uint8_t *)j->t->data + (uint64_t)r * j->src_row_bytes, out,
                             j->t->ne[0], err, errlen);
}

static int q_plan(void *ctx, const ts_tensor_spec *s) {
    qctx *q = ctx;
    const ts_gguf_tensor *t = ts_gguf_find_tensor(q->m->gguf, s->name);
    if (!t) return 0; /* optional and absent (the binder checked the rest) */
    qjob *j = &q->jobs[q->n_jobs++];
    j->t = t;
    j->type = s->role == 'm' ? ts_mix_type(q->mix, &q->m->hp, s) : t->type;
    j->src_row_bytes = ts_row_size(t->type, t->ne[0]);
    if (s->role == 'm' && ts_mix_is_router(s->name) && j->type == TS_TYPE_BF16) {
        char why[256] = "";
        const int exact = ts_rows_bf16_exact(q_row, j, t->ne[0], t->nelements / t->ne[0], 0, why, sizeof why);
        if (exact < 0) return ts_errf(q->err, q->errlen, "reading the router %s: %s", s->name, why);
        j->type = ts_mix_router_type(j->type, exact);
    }
    const ts_imatrix_entry *e = q->im && j->type != t->type && ts_can_quantize_imatrix(j->type)
                                    ? ts_imatrix_find(q->im, s->name)
                                    : NULL;
    const int64_t n_mat = t->n_dims >= 3 ? t->ne[2] : 1;
    if (e && !ts_imatrix_fits(e, t->ne[0], n_mat))
        return ts_errf(q->err, q->errlen,
                       "the importance matrix of %s has %" PRId64 " x %" PRId64 " values, the tensor %" PRId64
                       " columns x %" PRId64 " matrices (another model?)",
                       s->name, e->n_in, e->n_mat, t->ne[0], n_mat);
    if (!e && j->type != t->type && ts_quantize_needs_imatrix(j->type)) {
        const char *tn = ts_type_name(j->type);
        if (q->im)
            return ts_errf(
                q->err, q->errlen,
                "the importance matrix has no entry for %s, which the mix puts at %s: ggml quantizes %s "
                "only with importance weights (make the matrix with this model)",
                s->name, tn, tn);
        return ts_errf(
            q->err, q->errlen,
            "the mix puts %s at %s, which ggml quantizes only with importance weights: make them with "
            "`turbospark imatrix -m MODEL.gguf -f TEXT` and pass --imatrix FILE",
            s->name, tn);
    }
    if (e) {
        j->qw = malloc((size_t)(t->ne[0] * n_mat) * sizeof(float));
        if (!j->qw)
            return ts_errf(q->err, q->errlen, "out of memory for the importance weights of %s", s->name);
        for (int64_t m = 0; m < n_mat; m++) ts_imatrix_weights(e, t->ne[0], m, j->qw + m * t->ne[0]);
        q->n_weighted++;
    }
    if (ts_gguf_writer_add_tensor(q->w, s->name, j->type, t->n_dims, t->ne))
        return ts_errf(q->err, q->errlen, "%s", ts_gguf_writer_error(q->w));
    return 0;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int ts_quantize_gguf(const char *in_path, const char *out_path, const ts_mix *mix, const char *imatrix,
                     bool quiet, char *err, size_t errlen) {
    if (same_file(in_path, out_path))
        return ts_errf(err, errlen, "the output %s is the input file; write to another path", out_path);
    ts_imatrix im = {0};
    if (imatrix && ts_imatrix_read(&im, imatrix, 512, err, errlen)) {
        ts_imatrix_free(&im);
        return -1;
    }
    ts_model *m;
    if (ts_model_load(in_path, &m, err, errlen)) {
        ts_imatrix_free(&im);
        return -1;
    }
    const ts_gguf *g = m->gguf;
    qctx q = {.m = m, .mix = mix, .im = imatrix ? &im : NULL, .err = err, .errlen = errlen};
    bool started = false;
    int rc = 0;
    q.jobs = calloc((size_t)ts_gguf_tensor_count(g) + 1, sizeof *q.jobs);
    q.w = q.jobs ? ts_gguf_writer_new((uint32_t)ts_gguf_alignment(g), err, errlen) : NULL;
    if (!q.jobs)
        rc = ts_errf(err, errlen, "out of memory");
    else if (!q.w)
        rc = -1;
    for (int64_t i = 0; !rc && i < ts_gguf_kv_count(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (!strcmp(key, "general.alignment") || !strcmp(key, "general.file_type") ||
            !strcmp(key, "general.quantization_version") || !strncmp(key, "quantize.imatrix.", 17))
            continue;
        if (ts_gguf_writer_set_value(q.w, key, &kv->value))
            rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(q.w));
    }
    if (!rc && (ts_gguf_writer_set_u32(q.w, "general.file_type", mix->ftype) ||
                (ts_type_get(mix->base)->block_size > 1 &&
                 ts_gguf_writer_set_u32(q.w, "general.quantization_version", 2))))
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(q.w));
    ts_layout lay = {
        .ple_split = ts_gguf_find_tensor(g, "ple_ngram_embd.0.weight") != NULL,
        .fused_experts = ts_gguf_find_tensor(g, "blk.0.ffn_gate_up_exps.weight") != NULL,
    };
    if (!rc) rc = ts_qwen4exp_visit_tensors(&m->hp, lay, NULL, q_plan, &q);
    if (!rc && imatrix) { /* llama-quantize's keys */
        const char *ds = im.n_datasets ? im.datasets[0] : "";
        if (ts_gguf_writer_set_str(q.w, "quantize.imatrix.file", imatrix) ||
            ts_gguf_writer_set_str(q.w, "quantize.imatrix.dataset", ds) ||
            ts_gguf_writer_set_i32(q.w, "quantize.imatrix.entries_count", (int32_t)im.n) ||
            ts_gguf_writer_set_i32(q.w, "quantize.imatrix.chunks_count", (int32_t)im.chunk_count))
            rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(q.w));
        if (!quiet)
            fprintf(stderr,
                    "quantize: importance weights from %s for %zu tensors (%zu entries in the file)\n",
                    imatrix, q.n_weighted, im.n);
    }
    if (!rc && q.n_jobs != (size_t)ts_gguf_tensor_count(g))
        rc = ts_errf(err, errlen, "internal: %zu of %" PRId64 " tensors planned", q.n_jobs,
                     ts_gguf_tensor_count(g));
    uint64_t total = 0;
    for (size_t i = 0; !rc && i < q.n_jobs; i++) {
        const qjob *j = &q.jobs[i];
        total += ts_row_size(j->type, j->t->ne[0]) * (uint64_t)(j->t->nelements / j->t->ne[0]);
    }
    if (!rc && ts_gguf_writer_begin_data(q.w, out_path))
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(q.w));
    started = !rc;
    ts_progress prog;
    ts_progress_init(&prog, "quantize", total);
    for (size_t i = 0; !rc && i < q.n_jobs; i++) {
        const qjob *j = &q.jobs[i];
        const char *name = j->t->name.ptr; /* for messages: copy to a C string */
        char nbuf[128];
        snprintf(nbuf, sizeof nbuf, "%.*s", (int)j->t->name.len, name);
        if (j->type == j->t->type)
            rc = ts_stream_bytes(q.w, nbuf, j->t->data, j->t->nbytes, quiet ? NULL : &prog, err, errlen);
        else
            rc = ts_stream_rows(q.w, nbuf, j->type, j->t->ne[0], j->t->nelements / j->t->ne[0], 0, q_row,
                                NULL, j, j->qw, j->t->ne[1], quiet ? NULL : &prog, err, errlen);
    }
    if (!rc && ts_gguf_writer_finish(q.w)) rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(q.w));
    if (!quiet && started) ts_progress_finish(&prog);
    ts_gguf_writer_free(q.w);
    ts_model_free(m);
    if (!rc) {
        ts_model *check;
        char berr[1024];
        if (ts_model_load(out_path, &check, berr, sizeof berr))
            rc = ts_errf(err, errlen, "the written file does not bind (quantizer bug): %s", berr);
        else
            ts_model_free(check);
    }
    if (rc && started) unlink(out_path);
    for (size_t i = 0; q.jobs && i < q.n_jobs; i++) free(q.jobs[i].qw);
    free(q.jobs);
    ts_imatrix_free(&im);
    return rc;
}
