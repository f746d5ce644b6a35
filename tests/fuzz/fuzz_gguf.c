/* Fuzz target for the GGUF reader (libFuzzer), and the body the plain replay test runs.
 *
 * Opens the input with ts_gguf_open_buffer; on refusal checks the error is one non-empty line; on
 * success walks every metadata value (every array element, nested arrays too, every string byte)
 * and every tensor (every data byte) through the public API and checks what the reader promises in
 * gguf.h: views inside the buffer, lookups by name find the same entry, shapes and byte counts
 * consistent, offsets aligned, no overlapping tensors. A broken promise aborts, which libFuzzer
 * reports as a crash; ASan/UBSan catch the rest.
 *
 * libFuzzer passes a heap copy of exactly `size` bytes, so any read past the input is caught. */
#include "fuzz_gguf.h"

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "fuzz_gguf: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

static const uint8_t *g_lo, *g_hi; /* the input buffer */
static volatile uint64_t g_sink;   /* keeps reads from being optimized away */

static void check_span(const void *p, uint64_t n) {
    if (n == 0) return;
    const uint8_t *b = p;
    CHECK(b >= g_lo && b <= g_hi && n <= (uint64_t)(g_hi - b));
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++) s += b[i]; /* touch every byte: ASan checks each */
    g_sink += s;
}

static void walk_value(const ts_gguf_value *v, int depth) {
    CHECK(depth <= TS_GGUF_MAX_ARRAY_DEPTH);
    CHECK(v->type < TS_GGUF_VTYPE_COUNT);
    switch (v->type) {
    case TS_GGUF_BOOL:
        CHECK(v->u64 <= 1);
        break;
    case TS_GGUF_STRING:
        check_span(v->str.ptr, v->str.len);
        break;
    case TS_GGUF_ARRAY: {
        CHECK(depth < TS_GGUF_MAX_ARRAY_DEPTH);
        uint32_t et = v->arr.elem_type;
        CHECK(et < TS_GGUF_VTYPE_COUNT);
        if (et == TS_GGUF_STRING || et == TS_GGUF_ARRAY) {
            CHECK(v->arr.data == NULL);
            CHECK(v->arr.count == 0 || v->arr.items != NULL);
            for (uint64_t i = 0; i < v->arr.count; i++) {
                CHECK(v->arr.items[i].type == et);
                walk_value(&v->arr.items[i], depth + 1);
            }
        } else {
            size_t n = ts_gguf_vtype_size(et);
            CHECK(n > 0 && v->arr.items == NULL);
            CHECK(v->arr.count <= UINT64_MAX / n);
            if (v->arr.count) check_span(v->arr.data, v->arr.count * n);
            for (uint64_t i = 0; i < v->arr.count; i++) {
                if (et == TS_GGUF_F32 || et == TS_GGUF_F64) {
                    double d = ts_gguf_arr_f64(v, i);
                    g_sink += d == d;
                } else if (et == TS_GGUF_BOOL) {
                    CHECK(ts_gguf_arr_u64(v, i) <= 1);
                } else {
                    g_sink += ts_gguf_arr_u64(v, i) + (uint64_t)ts_gguf_arr_i64(v, i);
                }
            }
        }
        break;
    }
    default:
        break;
    }
}

/* A NUL-terminated copy of a key or tensor name (the reader guarantees no NUL inside). */
static char *cstr(ts_gguf_str s) {
    CHECK(s.len > 0 && memchr(s.ptr, 0, s.len) == NULL);
    char *c = malloc(s.len + 1);
    CHECK(c != NULL);
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

static void walk(const ts_gguf *g, size_t size) {
    char err[256], buf[16]; /* small, so long strings take the "does not fit" path */
    CHECK(ts_gguf_version(g) == 2 || ts_gguf_version(g) == 3);
    CHECK(ts_gguf_file_size(g) == size);
    uint64_t al = ts_gguf_alignment(g);
    CHECK(al > 0 && (al & (al - 1)) == 0);
    CHECK(ts_gguf_data_offset(g) % al == 0);
    CHECK(ts_gguf_path(g) != NULL);

    int64_t nkv = ts_gguf_kv_count(g);
    CHECK(nkv >= 0 && ts_gguf_kv_at(g, -1) == NULL && ts_gguf_kv_at(g, nkv) == NULL);
    for (int64_t i = 0; i < nkv; i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        CHECK(kv != NULL);
        check_span(kv->key.ptr, kv->key.len);
        walk_value(&kv->value, 0);
        char *key = cstr(kv->key);
        CHECK(ts_gguf_find(g, key) == &kv->value); /* keys are unique */
        /* The typed getters either succeed or explain; they never crash. */
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        float f;
        bool b;
        const ts_gguf_value *arr;
        if (ts_gguf_get_u32(g, key, &u32, err, sizeof err)) CHECK(err[0] != 0);
        if (ts_gguf_get_u64(g, key, &u64, err, sizeof err)) CHECK(err[0] != 0);
        if (ts_gguf_get_i64(g, key, &i64, err, sizeof err)) CHECK(err[0] != 0);
        if (ts_gguf_get_f32(g, key, &f, err, sizeof err)) CHECK(err[0] != 0);
        if (ts_gguf_get_bool(g, key, &b, err, sizeof err)) CHECK(err[0] != 0);
        if (ts_gguf_get_str(g, key, buf, sizeof buf, err, sizeof err) == 0)
            CHECK(strlen(buf) <= kv->value.str.len);
        if (ts_gguf_get_arr(g, key, -1, &arr, err, sizeof err) == 0) CHECK(arr == &kv->value);
        if (ts_gguf_get_arr(g, key, TS_GGUF_U32, &arr, err, sizeof err) == 0)
            CHECK(arr == &kv->value && arr->arr.elem_type == TS_GGUF_U32);
        (void)ts_gguf_value_as_i64(&kv->value, &i64);
        free(key);
    }
    CHECK(ts_gguf_find(g, "") == NULL);

    int64_t nt = ts_gguf_tensor_count(g);
    CHECK(nt >= 0 && ts_gguf_tensor_at(g, -1) == NULL && ts_gguf_tensor_at(g, nt) == NULL);
    uint64_t data_off = ts_gguf_data_offset(g), total = 0;
    for (int64_t i = 0; i < nt; i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        CHECK(t != NULL);
        check_span(t->name.ptr, t->name.len);
        char *name = cstr(t->name);
        CHECK(ts_gguf_find_tensor(g, name) == t); /* names are unique */
        free(name);
        CHECK(t->n_dims >= 1 && t->n_dims <= TS_GGUF_MAX_DIMS);
        const ts_type_traits *tt = ts_type_get(t->type);
        CHECK(tt != NULL);
        int64_t nel = 1;
        for (int d = 0; d < TS_GGUF_MAX_DIMS; d++) {
            CHECK(t->ne[d] >= 1);
            if (d >= (int)t->n_dims) CHECK(t->ne[d] == 1);
            CHECK(!__builtin_mul_overflow(nel, t->ne[d], &nel));
        }
        CHECK(nel == t->nelements);
        CHECK(t->ne[0] % tt->block_size == 0);
        size_t row = ts_row_size(t->type, t->ne[0]);
        CHECK(row > 0 && t->nbytes / row == (uint64_t)(nel / t->ne[0]) && t->nbytes % row == 0);
        CHECK(t->offset % al == 0);
        CHECK((const uint8_t *)t->data == g_lo + data_off + t->offset);
        check_span(t->data, t->nbytes);
        total += t->nbytes;
    }
    CHECK(total <= size);
    /* No two tensors overlap (quadratic, so only for inputs with few tensors). */
    if (nt <= 512)
        for (int64_t i = 0; i < nt; i++)
            for (int64_t j = i + 1; j < nt; j++) {
                const ts_gguf_tensor *a = ts_gguf_tensor_at(g, i), *b = ts_gguf_tensor_at(g, j);
                CHECK(a->offset + a->nbytes <= b->offset || b->offset + b->nbytes <= a->offset);
            }
    CHECK(ts_gguf_find_tensor(g, "") == NULL);
}

int ts_fuzz_gguf_one(const uint8_t *data, size_t size) {
    char err[1024];
    ts_gguf *g = (ts_gguf *)1;
    memset(err, 0, sizeof err);
    g_lo = data, g_hi = data + size;
    if (ts_gguf_open_buffer(data, size, "fuzz.gguf", &g, err, sizeof err) != 0) {
        CHECK(g == NULL);
        CHECK(err[0] != 0);               /* a sentence, */
        CHECK(strchr(err, '\n') == NULL); /* on one line */
        return 1;
    }
    CHECK(g != NULL);
    walk(g, size);
    ts_gguf_close(g);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ts_fuzz_gguf_one(data, size);
    return 0;
}
