/* GGUF writer -> reader round trips, typed getters, and the writer's refusals.
 * (Malformed files are covered by tests/fixtures/broken and the fuzz replay.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_path[256];

static int setup(void **state) {
    snprintf(g_path, sizeof g_path, "/tmp/ts_test_gguf_%d.gguf", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    unlink(g_path);
    return 0;
}

/* Writes a file with every metadata type and three tensors; returns the data bytes used. */
static void write_sample(uint32_t alignment, bool sparse_middle) {
    char err[256];
    ts_gguf_writer *w = ts_gguf_writer_new(alignment, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(ts_gguf_writer_set_str(w, "general.architecture", "qwen4exp"), 0);
    assert_int_equal(ts_gguf_writer_set_u8(w, "t.u8", 200), 0);
    assert_int_equal(ts_gguf_writer_set_i8(w, "t.i8", -100), 0);
    assert_int_equal(ts_gguf_writer_set_u16(w, "t.u16", 60000), 0);
    assert_int_equal(ts_gguf_writer_set_i16(w, "t.i16", -30000), 0);
    assert_int_equal(ts_gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(ts_gguf_writer_set_i32(w, "t.i32", -2000000000), 0);
    assert_int_equal(ts_gguf_writer_set_u64(w, "t.u64", UINT64_C(23703573157769)), 0);
    assert_int_equal(ts_gguf_writer_set_i64(w, "t.i64", INT64_MIN), 0);
    assert_int_equal(ts_gguf_writer_set_f32(w, "t.f32", 1e-6f), 0);
    assert_int_equal(ts_gguf_writer_set_f64(w, "t.f64", 0.1), 0);
    assert_int_equal(ts_gguf_writer_set_bool(w, "t.bool", true), 0);
    assert_int_equal(ts_gguf_writer_set_u32(w, "t.replaced", 1), 0);
    assert_int_equal(ts_gguf_writer_set_u32(w, "t.replaced", 2), 0); /* last value wins */
    const uint64_t mult[3] = {UINT64_C(23703573157769), UINT64_C(20109073645365), UINT64_C(8052911324071)};
    assert_int_equal(ts_gguf_writer_set_arr(w, "t.arr_u64", TS_GGUF_U64, mult, 3), 0);
    const int32_t ratios[4] = {0, 0, -3, 4};
    assert_int_equal(ts_gguf_writer_set_arr(w, "t.arr_i32", TS_GGUF_I32, ratios, 4), 0);
    const float fl[2] = {0.5f, -2.25f};
    assert_int_equal(ts_gguf_writer_set_arr(w, "t.arr_f32", TS_GGUF_F32, fl, 2), 0);
    const char *toks[3] = {"<|endoftext|>", "", "\xc4\xa0the"};
    assert_int_equal(ts_gguf_writer_set_arr_str(w, "t.arr_str", toks, 3), 0);
    assert_int_equal(ts_gguf_writer_set_arr(w, "t.arr_empty", TS_GGUF_U8, NULL, 0), 0);

    int64_t ne_a[2] = {64, 3}, ne_b[1] = {5}, ne_c[3] = {32, 2, 2};
    assert_int_equal(ts_gguf_writer_add_tensor(w, "a.weight", TS_TYPE_Q8_0, 2, ne_a), 0);
    assert_int_equal(ts_gguf_writer_add_tensor(w, "b", TS_TYPE_F32, 1, ne_b), 0);
    assert_int_equal(ts_gguf_writer_add_tensor(w, "c", TS_TYPE_BF16, 3, ne_c), 0);
    assert_int_equal(ts_gguf_writer_begin_data(w, g_path), 0);

    uint8_t a[2 * 34 * 3];
    for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i * 7 + 1);
    /* in pieces that do not follow tensor boundaries: the writer pads between tensors */
    assert_int_equal(ts_gguf_writer_write(w, a, 100), 0);
    assert_int_equal(ts_gguf_writer_write(w, a + 100, sizeof a - 100), 0);
    float b[5] = {1, 2, 3, 4, 5};
    if (sparse_middle)
        assert_int_equal(ts_gguf_writer_skip(w, sizeof b), 0);
    else
        assert_int_equal(ts_gguf_writer_write(w, b, sizeof b), 0);
    uint16_t c[128];
    for (int i = 0; i < 128; i++) c[i] = (uint16_t)(0x3f80 + i);
    assert_int_equal(ts_gguf_writer_write(w, c, sizeof c), 0);
    assert_int_equal(ts_gguf_writer_finish(w), 0);
    ts_gguf_writer_free(w);
}

static void test_round_trip(void **state) {
    write_sample(32, false);
    char err[256];
    ts_gguf *g;
    assert_int_equal(ts_gguf_open(g_path, &g, err, sizeof err), 0);
    assert_int_equal(ts_gguf_version(g), 3);
    assert_int_equal(ts_gguf_alignment(g), 32);
    assert_int_equal(ts_gguf_data_offset(g) % 32, 0);

    char s[64];
    assert_int_equal(ts_gguf_get_str(g, "general.architecture", s, sizeof s, err, sizeof err), 0);
    assert_string_equal(s, "qwen4exp");
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    assert_int_equal(ts_gguf_get_u32(g, "t.u8", &u32, err, sizeof err), 0);
    assert_int_equal(u32, 200);
    assert_int_equal(ts_gguf_get_i64(g, "t.i8", &i64, err, sizeof err), 0);
    assert_int_equal(i64, -100);
    assert_int_equal(ts_gguf_get_u32(g, "t.u16", &u32, err, sizeof err), 0);
    assert_int_equal(u32, 60000);
    assert_int_equal(ts_gguf_get_i64(g, "t.i16", &i64, err, sizeof err), 0);
    assert_int_equal(i64, -30000);
    assert_int_equal(ts_gguf_get_u32(g, "t.u32", &u32, err, sizeof err), 0);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(ts_gguf_get_i64(g, "t.i32", &i64, err, sizeof err), 0);
    assert_int_equal(i64, -2000000000);
    assert_int_equal(ts_gguf_get_u64(g, "t.u64", &u64, err, sizeof err), 0);
    assert_true(u64 == UINT64_C(23703573157769));
    assert_int_equal(ts_gguf_get_i64(g, "t.i64", &i64, err, sizeof err), 0);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(ts_gguf_get_f32(g, "t.f32", &f, err, sizeof err), 0);
    assert_true(f == 1e-6f);
    assert_int_equal(ts_gguf_get_f32(g, "t.f64", &f, err, sizeof err), 0);
    assert_true(f == 0.1f);
    assert_int_equal(ts_gguf_get_bool(g, "t.bool", &b, err, sizeof err), 0);
    assert_true(b);
    assert_int_equal(ts_gguf_get_u32(g, "t.replaced", &u32, err, sizeof err), 0);
    assert_int_equal(u32, 2);
    assert_int_equal(ts_gguf_kv_count(g), 18);

    const ts_gguf_value *arr;
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_u64", TS_GGUF_U64, &arr, err, sizeof err), 0);
    assert_int_equal(arr->arr.count, 3);
    assert_true(ts_gguf_arr_u64(arr, 0) == UINT64_C(23703573157769));
    assert_true(ts_gguf_arr_u64(arr, 2) == UINT64_C(8052911324071));
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_i32", TS_GGUF_I32, &arr, err, sizeof err), 0);
    assert_int_equal(ts_gguf_arr_i64(arr, 2), -3);
    assert_int_equal(ts_gguf_arr_i64(arr, 3), 4);
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_f32", -1, &arr, err, sizeof err), 0);
    assert_true(ts_gguf_arr_f64(arr, 1) == -2.25);
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_str", TS_GGUF_STRING, &arr, err, sizeof err), 0);
    assert_int_equal(arr->arr.count, 3);
    assert_true(ts_gguf_str_eq(arr->arr.items[0].str, "<|endoftext|>"));
    assert_int_equal(arr->arr.items[1].str.len, 0);
    assert_true(ts_gguf_str_eq(arr->arr.items[2].str, "\xc4\xa0the"));
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_empty", TS_GGUF_U8, &arr, err, sizeof err), 0);
    assert_int_equal(arr->arr.count, 0);

    assert_int_equal(ts_gguf_tensor_count(g), 3);
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, "a.weight");
    assert_non_null(t);
    assert_int_equal(t->type, TS_TYPE_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->nbytes, 2 * 34 * 3);
    for (size_t i = 0; i < t->nbytes; i++)
        assert_int_equal(((const uint8_t *)t->data)[i], (uint8_t)(i * 7 + 1));
    t = ts_gguf_find_tensor(g, "b");
    assert_non_null(t);
    assert_int_equal(t->offset % 32, 0);
    assert_true(((const float *)t->data)[4] == 5.0f);
    t = ts_gguf_find_tensor(g, "c");
    assert_non_null(t);
    assert_int_equal(t->nelements, 128);
    assert_int_equal(((const uint16_t *)t->data)[127], 0x3f80 + 127);
    assert_null(ts_gguf_find_tensor(g, "missing"));
    assert_null(ts_gguf_find_tensor(g, "a.weigh"));
    assert_true(ts_gguf_str_eq(ts_gguf_tensor_at(g, 0)->name, "a.weight")); /* file order kept */
    assert_true(ts_gguf_str_eq(ts_gguf_tensor_at(g, 2)->name, "c"));
    ts_gguf_close(g);
}

static void test_getter_errors(void **state) {
    write_sample(32, false);
    char err[256];
    ts_gguf *g;
    assert_int_equal(ts_gguf_open(g_path, &g, err, sizeof err), 0);
    uint32_t u32;
    float f;
    char s[4];
    const ts_gguf_value *arr;
    assert_int_equal(ts_gguf_get_u32(g, "absent.key", &u32, err, sizeof err), -1);
    assert_non_null(strstr(err, "'absent.key' is missing"));
    assert_int_equal(ts_gguf_get_u32(g, "t.u64", &u32, err, sizeof err), -1); /* does not fit */
    assert_non_null(strstr(err, "larger than the maximum"));
    assert_int_equal(ts_gguf_get_u32(g, "t.i8", &u32, err, sizeof err), -1); /* negative */
    assert_non_null(strstr(err, "non-negative"));
    assert_int_equal(ts_gguf_get_f32(g, "t.u32", &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "expected a float"));
    assert_int_equal(ts_gguf_get_str(g, "general.architecture", s, sizeof s, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 3"));
    assert_int_equal(ts_gguf_get_arr(g, "t.arr_u64", TS_GGUF_F32, &arr, err, sizeof err), -1);
    assert_non_null(strstr(err, "array of u64, expected an array of f32"));
    assert_int_equal(ts_gguf_get_arr(g, "t.u32", -1, &arr, err, sizeof err), -1);
    assert_non_null(strstr(err, "expected an array"));
    ts_gguf_close(g);
}

static void test_alignment_and_sparse(void **state) {
    write_sample(64, true);
    char err[256];
    ts_gguf *g;
    assert_int_equal(ts_gguf_open(g_path, &g, err, sizeof err), 0);
    assert_int_equal(ts_gguf_alignment(g), 64);
    uint32_t al;
    assert_int_equal(ts_gguf_get_u32(g, "general.alignment", &al, err, sizeof err), 0);
    assert_int_equal(al, 64);
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        assert_int_equal(t->offset % 64, 0);
        assert_int_equal(((uintptr_t)t->data - (uintptr_t)ts_gguf_tensor_at(g, 0)->data) % 64, 0);
    }
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, "b");
    for (int i = 0; i < 5; i++)
        assert_true(((const float *)t->data)[i] == 0.0f); /* the hole reads as zeros */
    ts_gguf_close(g);
}

static void test_copy_metadata(void **state) {
    /* set_value copies every value type, nested arrays included, from a reader into a writer. */
    write_sample(32, false);
    char err[256], path2[300];
    snprintf(path2, sizeof path2, "%s.copy", g_path);
    ts_gguf *g;
    assert_int_equal(ts_gguf_open(g_path, &g, err, sizeof err), 0);
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    for (int64_t i = 0; i < ts_gguf_kv_count(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        assert_int_equal(ts_gguf_writer_set_value(w, key, &kv->value), 0);
    }
    ts_gguf_value inner[2] = {{.type = TS_GGUF_ARRAY}, {.type = TS_GGUF_ARRAY}};
    const uint16_t x[2] = {7, 9};
    inner[0].arr.elem_type = TS_GGUF_U16, inner[0].arr.count = 2, inner[0].arr.data = (const uint8_t *)x;
    inner[1].arr.elem_type = TS_GGUF_U16, inner[1].arr.count = 0;
    ts_gguf_value nested = {.type = TS_GGUF_ARRAY};
    nested.arr.elem_type = TS_GGUF_ARRAY, nested.arr.count = 2, nested.arr.items = inner;
    assert_int_equal(ts_gguf_writer_set_value(w, "t.nested", &nested), 0);
    assert_int_equal(ts_gguf_writer_begin_data(w, path2), 0);
    assert_int_equal(ts_gguf_writer_finish(w), 0);
    ts_gguf_writer_free(w);

    ts_gguf *g2;
    assert_int_equal(ts_gguf_open(path2, &g2, err, sizeof err), 0);
    assert_int_equal(ts_gguf_kv_count(g2), ts_gguf_kv_count(g) + 1);
    for (int64_t i = 0; i < ts_gguf_kv_count(g); i++) {
        const ts_gguf_kv *a = ts_gguf_kv_at(g, i), *b = ts_gguf_kv_at(g2, i);
        assert_int_equal(a->key.len, b->key.len);
        assert_memory_equal(a->key.ptr, b->key.ptr, a->key.len);
        assert_int_equal(a->value.type, b->value.type);
        if (a->value.type != TS_GGUF_ARRAY && a->value.type != TS_GGUF_STRING)
            assert_memory_equal(&a->value.u64, &b->value.u64, 8);
    }
    const ts_gguf_value *n;
    assert_int_equal(ts_gguf_get_arr(g2, "t.nested", TS_GGUF_ARRAY, &n, err, sizeof err), 0);
    assert_int_equal(n->arr.count, 2);
    assert_int_equal(n->arr.items[0].arr.elem_type, TS_GGUF_U16);
    assert_int_equal(ts_gguf_arr_u64(&n->arr.items[0], 1), 9);
    assert_int_equal(n->arr.items[1].arr.count, 0);
    assert_int_equal(ts_gguf_tensor_count(g2), 0);
    ts_gguf_close(g2);
    ts_gguf_close(g);
    unlink(path2);
}

static void test_writer_refusals(void **state) {
    char err[256];
    assert_null(ts_gguf_writer_new(48, err, sizeof err));
    assert_non_null(strstr(err, "not a power of two"));
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    int64_t ne[2] = {33, 2};
    assert_int_equal(ts_gguf_writer_add_tensor(w, "ragged", TS_TYPE_Q8_0, 2, ne), -1);
    assert_non_null(strstr(ts_gguf_writer_error(w), "not a multiple of 32"));
    ts_gguf_writer_free(w);

    w = ts_gguf_writer_new(32, err, sizeof err);
    ne[0] = 32;
    assert_int_equal(ts_gguf_writer_add_tensor(w, "x", 4, 2, ne), -1); /* removed type id */
    assert_non_null(strstr(ts_gguf_writer_error(w), "unknown ggml type"));
    ts_gguf_writer_free(w);

    w = ts_gguf_writer_new(32, err, sizeof err);
    assert_int_equal(ts_gguf_writer_add_tensor(w, "x", TS_TYPE_F32, 2, ne), 0);
    assert_int_equal(ts_gguf_writer_add_tensor(w, "x", TS_TYPE_F32, 2, ne), -1);
    assert_non_null(strstr(ts_gguf_writer_error(w), "declared twice"));
    ts_gguf_writer_free(w);

    /* finishing before every tensor got its bytes fails and leaves no file behind */
    w = ts_gguf_writer_new(32, err, sizeof err);
    assert_int_equal(ts_gguf_writer_add_tensor(w, "x", TS_TYPE_F32, 2, ne), 0);
    assert_int_equal(ts_gguf_writer_begin_data(w, g_path), 0);
    float z[10] = {0};
    assert_int_equal(ts_gguf_writer_write(w, z, sizeof z), 0);
    assert_int_equal(ts_gguf_writer_finish(w), -1);
    assert_non_null(strstr(ts_gguf_writer_error(w), "got 40 of its 256 bytes"));
    ts_gguf_writer_free(w);
    struct stat st;
    assert_int_not_equal(stat(g_path, &st), 0);

    /* too many bytes */
    w = ts_gguf_writer_new(32, err, sizeof err);
    int64_t one = 2;
    assert_int_equal(ts_gguf_writer_add_tensor(w, "x", TS_TYPE_F32, 1, &one), 0);
    assert_int_equal(ts_gguf_writer_begin_data(w, g_path), 0);
    assert_int_equal(ts_gguf_writer_write(w, z, sizeof z), -1);
    assert_non_null(strstr(ts_gguf_writer_error(w), "beyond the last tensor"));
    ts_gguf_writer_free(w);
}

static void test_open_errors(void **state) {
    char err[256];
    ts_gguf *g;
    assert_int_equal(ts_gguf_open("/nonexistent/x.gguf", &g, err, sizeof err), -1);
    assert_null(g);
    assert_non_null(strstr(err, "cannot open /nonexistent/x.gguf"));
    assert_int_equal(ts_gguf_open("/tmp", &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    /* buffers: the minimal valid file is a header with no metadata and no tensors */
    uint8_t hdr[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    assert_int_equal(ts_gguf_open_buffer(hdr, sizeof hdr, "mem", &g, err, sizeof err), 0);
    assert_int_equal(ts_gguf_kv_count(g), 0);
    assert_int_equal(ts_gguf_tensor_count(g), 0);
    ts_gguf_close(g);
    hdr[4] = 2; /* version 2 reads the same way */
    assert_int_equal(ts_gguf_open_buffer(hdr, sizeof hdr, "mem", &g, err, sizeof err), 0);
    assert_int_equal(ts_gguf_version(g), 2);
    ts_gguf_close(g);
    for (size_t n = 0; n < sizeof hdr; n++) { /* every truncation of it is refused with a sentence */
        err[0] = 0;
        assert_int_equal(ts_gguf_open_buffer(hdr, n, "mem", &g, err, sizeof err), -1);
        assert_true(strlen(err) > 10);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_getter_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alignment_and_sparse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_metadata, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_refusals, setup, teardown),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
