/* turbospark inspect FILE.gguf [--tensors] [--dump NAME -o OUT.npy]
 *
 * Works on any structurally valid GGUF of any architecture: it reads through the validating
 * reader, so a bad file gets the reader's one sentence on stderr and exit status 1. */
#include "cli/cli.h"

#include "cli/npy.h"
#include "gguf/gguf.h"
#include "model/qwen4exp.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inspect_usage(FILE *f) {
    fprintf(f,
            "usage: turbospark inspect FILE.gguf [--tensors] [--dump NAME -o OUT.npy]\n"
            "\n"
            "Prints the file's architecture, metadata (hyperparameters, tokenizer summary), tensor count,\n"
            "a histogram of tensor types and the total bytes.\n"
            "  --tensors          also list every tensor: name, type, shape (ggml ne order), bytes\n"
            "  --dump NAME -o F   write tensor NAME dequantized to float32 as a .npy file\n"
            "                     (numpy shape = ggml ne reversed)\n"
            "Exit status: 0 for a valid GGUF, 1 with one sentence on stderr otherwise, 2 for bad usage.\n");
}

static void print_str(FILE *f, ts_gguf_str s, size_t max) {
    fputc('"', f);
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    if (s.len > max) fprintf(f, "... (%" PRIu64 " bytes)", s.len);
}

static void print_value(FILE *f, const ts_gguf_value *v, int depth) {
    switch (v->type) {
    case TS_GGUF_U8:
    case TS_GGUF_U16:
    case TS_GGUF_U32:
    case TS_GGUF_U64:
        fprintf(f, "%" PRIu64, v->u64);
        break;
    case TS_GGUF_I8:
    case TS_GGUF_I16:
    case TS_GGUF_I32:
    case TS_GGUF_I64:
        fprintf(f, "%" PRId64, v->i64);
        break;
    case TS_GGUF_F32:
    case TS_GGUF_F64:
        fprintf(f, "%.9g", v->f64);
        break;
    case TS_GGUF_BOOL:
        fputs(v->u64 ? "true" : "false", f);
        break;
    case TS_GGUF_STRING:
        print_str(f, v->str, depth ? 24 : 72);
        break;
    case TS_GGUF_ARRAY: {
        uint32_t et = v->arr.elem_type;
        const uint64_t show = depth ? 3 : 8;
        fprintf(f, "[%s x %" PRIu64 "]", ts_gguf_vtype_name(et), v->arr.count);
        if (depth >= 2 || v->arr.count == 0) break;
        fputs(" ", f);
        for (uint64_t i = 0; i < v->arr.count && i < show; i++) {
            if (i) fputs(", ", f);
            if (et == TS_GGUF_STRING || et == TS_GGUF_ARRAY)
                print_value(f, &v->arr.items[i], depth + 1);
            else if (et == TS_GGUF_F32 || et == TS_GGUF_F64)
                fprintf(f, "%.9g", ts_gguf_arr_f64(v, i));
            else if (et == TS_GGUF_BOOL)
                fputs(ts_gguf_arr_u64(v, i) ? "true" : "false", f);
            else if (et == TS_GGUF_I8 || et == TS_GGUF_I16 || et == TS_GGUF_I32 || et == TS_GGUF_I64)
                fprintf(f, "%" PRId64, ts_gguf_arr_i64(v, i));
            else
                fprintf(f, "%" PRIu64, ts_gguf_arr_u64(v, i));
        }
        if (v->arr.count > show) fputs(", ...", f);
        break;
    }
    }
}

static void print_bytes(FILE *f, uint64_t b) {
    if (b >= (UINT64_C(1) << 30))
        fprintf(f, "%.2f GiB", b / 1073741824.0);
    else if (b >= (UINT64_C(1) << 20))
        fprintf(f, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024)
        fprintf(f, "%.2f KiB", b / 1024.0);
    else
        fprintf(f, "%" PRIu64 " B", b);
}

static void print_shape(FILE *f, const ts_gguf_tensor *t) {
    fputc('[', f);
    for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    fputc(']', f);
}

static void print_summary(const ts_gguf *g) {
    char arch[128] = "(none)", name[256] = "";
    ts_gguf_get_str(g, "general.architecture", arch, sizeof arch, NULL, 0);
    ts_gguf_get_str(g, "general.name", name, sizeof name, NULL, 0);
    printf("file          %s\n", ts_gguf_path(g));
    printf("size          %" PRIu64 " bytes (", ts_gguf_file_size(g));
    print_bytes(stdout, ts_gguf_file_size(g));
    printf("), GGUF v%" PRIu32 ", alignment %" PRIu64 ", data at byte %" PRIu64 "\n", ts_gguf_version(g),
           ts_gguf_alignment(g), ts_gguf_data_offset(g));
    printf("architecture  %s\n", arch);
    if (*name) printf("name          %s\n", name);

    printf("metadata      %" PRId64 " keys\n", ts_gguf_kv_count(g));
    for (int64_t i = 0; i < ts_gguf_kv_count(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        printf("  %.*s = ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr);
        print_value(stdout, &kv->value, 0);
        printf("\n");
    }

    uint64_t total = 0, count[TS_TYPE_COUNT] = {0}, bytes[TS_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        total += t->nbytes;
        count[t->type]++;
        bytes[t->type] += t->nbytes;
    }
    printf("tensors       %" PRId64 ", ", ts_gguf_tensor_count(g));
    print_bytes(stdout, total);
    printf(" of data (%" PRIu64 " bytes)\n", total);
    printf("types\n");
    for (int ty = 0; ty < TS_TYPE_COUNT; ty++) {
        if (!count[ty]) continue;
        printf("  %-8s %6" PRIu64 " tensors  ", ts_type_name((uint32_t)ty), count[ty]);
        print_bytes(stdout, bytes[ty]);
        printf("\n");
    }
}

/* For a qwen4exp file: whether the engine can bind it, and its shape in a line. */
static void print_binding(const ts_gguf *g) {
    char arch[64] = "", err[1024];
    if (ts_gguf_get_str(g, "general.architecture", arch, sizeof arch, NULL, 0) || strcmp(arch, TS_ARCH) != 0)
        return;
    ts_model *m;
    if (ts_model_load(ts_gguf_path(g), &m, err, sizeof err)) {
        printf("model         does NOT bind as qwen4exp: %s\n", err);
        return;
    }
    const ts_hparams *hp = &m->hp;
    uint32_t qsa = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) qsa += hp->kind[l] == TS_LAYER_QSA;
    printf("model         qwen4exp binds: %" PRIu32 " layers (%" PRIu32 " GDN, %" PRIu32
           " QSA)%s, hidden %" PRIu32 " x %" PRIu32 " streams, vocab %" PRIu32 ", %" PRIu32
           " experts top-%" PRIu32,
           hp->n_layer, hp->n_layer - qsa, qsa, hp->n_mtp ? " + MTP" : "", hp->n_embd, hp->hc_count,
           hp->n_vocab, hp->n_expert, hp->n_expert_used);
    if (qsa) printf(", QSA budget %" PRIu32 " tokens in blocks of %" PRIu32, hp->idx_top_k, hp->compress);
    if (hp->ple_layer >= 0)
        printf(", PLE on layer %" PRId32 " (%" PRIu32 "-grams, %" PRIu32 " heads)", hp->ple_layer, hp->ple_n,
               hp->ple_nh);
    printf("\n");
    ts_model_free(m);
}

static void print_tensors(const ts_gguf *g) {
    printf("tensor list   (index, name, type, shape as ggml ne, bytes, offset in data section)\n");
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        printf("  %5" PRId64 "  %-48.*s %-8s ", i, (int)(t->name.len > 200 ? 200 : t->name.len), t->name.ptr,
               ts_type_name(t->type));
        print_shape(stdout, t);
        printf("  %" PRIu64 "  @%" PRIu64 "\n", t->nbytes, t->offset);
    }
}

/* Dequantizes one tensor row by row into a float32 .npy (shape = ne reversed). */
static int dump_tensor(const ts_gguf *g, const char *name, const char *out) {
    char err[512];
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, name);
    if (!t) {
        fprintf(stderr, "turbospark inspect: %s has no tensor named '%s'\n", ts_gguf_path(g), name);
        return 1;
    }
    if (!ts_can_dequantize(t->type)) {
        fprintf(stderr,
                "turbospark inspect: tensor '%s' has type %s, which turbospark cannot dequantize yet\n", name,
                ts_type_name(t->type));
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "turbospark inspect: cannot create %s\n", out);
        return 1;
    }
    int64_t shape[TS_GGUF_MAX_DIMS];
    for (uint32_t d = 0; d < t->n_dims; d++) shape[d] = t->ne[t->n_dims - 1 - d];
    int rc = ts_npy_write_header(f, "<f4", (int)t->n_dims, shape, err, sizeof err);
    int64_t ne0 = t->ne[0], rows = t->nelements / ne0;
    size_t row_bytes = ts_row_size(t->type, ne0);
    float *row = malloc((size_t)ne0 * sizeof *row);
    if (!row) rc = -1, snprintf(err, sizeof err, "out of memory for a row of %" PRId64 " floats", ne0);
    for (int64_t r = 0; rc == 0 && r < rows; r++) {
        rc = ts_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * row_bytes, row, ne0, err,
                               sizeof err);
        if (rc == 0 && fwrite(row, sizeof *row, (size_t)ne0, f) != (size_t)ne0)
            rc = -1, snprintf(err, sizeof err, "cannot write %s (disk full?)", out);
    }
    free(row);
    if (fclose(f) != 0 && rc == 0) rc = -1, snprintf(err, sizeof err, "cannot write %s", out);
    if (rc) {
        fprintf(stderr, "turbospark inspect: %s\n", err);
        remove(out);
        return 1;
    }
    fprintf(stderr, "wrote %s: tensor '%s' (%s) as float32, shape (", out, name, ts_type_name(t->type));
    for (uint32_t d = 0; d < t->n_dims; d++) fprintf(stderr, "%s%" PRId64, d ? ", " : "", shape[d]);
    fprintf(stderr, ")\n");
    return 0;
}

int ts_cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *dump = NULL, *out = NULL;
    int tensors = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            inspect_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--tensors") == 0) {
            tensors = 1;
        } else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) {
            dump = argv[++i];
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "turbospark inspect: unknown or incomplete option '%s'\n", argv[i]);
            inspect_usage(stderr);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "turbospark inspect: more than one file given ('%s' and '%s')\n", path, argv[i]);
            return 2;
        }
    }
    if (!path || (dump && !out) || (out && !dump)) {
        fprintf(stderr, "turbospark inspect: %s\n",
                !path ? "no file given" : "--dump NAME and -o OUT.npy go together");
        inspect_usage(stderr);
        return 2;
    }
    char err[1024];
    ts_gguf *g;
    if (ts_gguf_open(path, &g, err, sizeof err)) {
        fprintf(stderr, "turbospark inspect: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (dump) {
        rc = dump_tensor(g, dump, out);
    } else {
        print_summary(g);
        print_binding(g);
        if (tensors) print_tensors(g);
    }
    ts_gguf_close(g);
    return rc;
}
