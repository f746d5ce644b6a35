/* qwen4exp hyperparameters and tensor binding: the released shapes, the tiny config, the optional
 * layouts, and a refusal by name for every kind of bad model file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/qwen4exp.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_path[256], g_path2[256];

static int setup(void **state) {
    snprintf(g_path, sizeof g_path, "/tmp/ts_test_model_%d.gguf", (int)getpid());
    snprintf(g_path2, sizeof g_path2, "/tmp/ts_test_model_%d_b.gguf", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    unlink(g_path);
    unlink(g_path2);
    return 0;
}

static void synth(bool released, const ts_synth_opts *o, uint32_t mtp) {
    char err[512];
    ts_hparams hp;
    assert_int_equal(
        released ? ts_hparams_released(&hp, err, sizeof err) : ts_hparams_tiny(&hp, err, sizeof err), 0);
    if (mtp) assert_int_equal(ts_hparams_set_layers(&hp, hp.n_layer, mtp, err, sizeof err), 0);
    if (ts_synth_write(&hp, o, g_path, err, sizeof err)) fail_msg("synth: %s", err);
    ts_hparams_free(&hp);
}

static ts_model *load_ok(void) {
    char err[512];
    ts_model *m;
    if (ts_model_load(g_path, &m, err, sizeof err)) fail_msg("load: %s", err);
    return m;
}

static void load_fails(const char *want) {
    char err[512] = "";
    ts_model *m = NULL;
    assert_int_equal(ts_model_load(g_path, &m, err, sizeof err), -1);
    assert_null(m);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
}

static void test_released_multipliers(void **state) {
    /* MODEL.md §5.4: the reference's buffer for seed 1234, PLE index 0, V = 248320 */
    uint64_t m[3];
    ts_ple_multipliers(248320, 3, 1234, 0, m);
    assert_true(m[0] == UINT64_C(23703573157769));
    assert_true(m[1] == UINT64_C(20109073645365));
    assert_true(m[2] == UINT64_C(8052911324071));
}

static void test_released_shapes_bind(void **state) {
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .sparse = true};
    synth(true, &o, 0);
    struct stat st;
    assert_int_equal(stat(g_path, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 < (UINT64_C(1) << 24)); /* sparse: no real disk used */
    ts_model *m = load_ok();
    const ts_hparams *hp = &m->hp;
    assert_int_equal(ts_gguf_tensor_count(m->gguf), 1224);
    assert_int_equal(hp->n_layer, 48);
    assert_int_equal(hp->n_vocab, 248320);
    assert_int_equal(hp->compress, 4);
    assert_int_equal(hp->idx_top_blocks, 512);
    assert_int_equal(hp->ssm_dv, 128);
    assert_int_equal(hp->ple_layer, 1);
    assert_int_equal(hp->ple_nh, 16);
    assert_true(hp->ple_rows == UINT64_C(320001536));
    assert_true(hp->ple_offsets[15] == UINT64_C(300001275));
    int qsa = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) qsa += hp->kind[l] == TS_LAYER_QSA;
    assert_int_equal(qsa, 12);
    assert_int_equal(m->layers[3].kind, TS_LAYER_QSA);
    assert_non_null(m->layers[3].idx_k);
    assert_null(m->layers[3].attn_qkv);
    assert_non_null(m->layers[1].ple_key);
    assert_null(m->layers[2].ple_key);
    assert_int_equal(m->layers[0].attn_qkv->ne[1], 10240);
    assert_int_equal(m->layers[0].ffn_down_exps->type, TS_TYPE_Q8_0);
    assert_int_equal(m->ple_table->ne[0], 160);
    assert_true(m->output != m->token_embd);
    ts_model_free(m);
}

static void test_released_optional_layouts(void **state) {
    ts_synth_opts o = {
        .type = TS_TYPE_Q4_K, .sparse = true, .layout = {.ple_split = true, .fused_experts = true}};
    synth(true, &o, 1);
    ts_model *m = load_ok();
    /* MODEL.md §4.8: + 32 MTP tensors, + 15 for the split table, − 49 for the fused experts (48 + MTP) */
    assert_int_equal(ts_gguf_tensor_count(m->gguf), 1224 + 32 + 15 - 49);
    assert_int_equal(m->hp.n_layer, 48);
    assert_int_equal(m->hp.n_mtp, 1);
    assert_null(m->ple_table);
    assert_true(m->ple_head_tables[15]->ne[1] == 20000171);
    assert_non_null(m->layers[48].nextn_eh_proj);
    assert_non_null(m->layers[48].nextn_hc_head.up);
    assert_non_null(m->layers[48].ffn_gate_up_exps);
    assert_null(m->layers[48].ffn_gate_exps);
    /* narrow rows fell back to 32-element blocks (MODEL.md §8) */
    assert_int_equal(m->layers[0].ffn_down_exps->type, TS_TYPE_Q5_0);
    assert_int_equal(m->layers[0].hc_attn.up->type, TS_TYPE_Q5_0);
    assert_int_equal(m->layers[0].attn_qkv->type, TS_TYPE_Q4_K);
    ts_model_free(m);
}

static void test_tiny_with_data(void **state) {
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .seed = 7, .tied_output = true};
    synth(false, &o, 0);
    ts_model *m = load_ok();
    assert_int_equal(m->hp.n_layer, 4);
    assert_true(m->output == m->token_embd); /* tied */
    /* the data is really there: dequantize a row of the router and see non-zero values */
    float row[64];
    char err[256];
    const ts_gguf_tensor *t = m->layers[0].ffn_gate_inp;
    assert_int_equal(ts_dequantize_row(t->type, t->data, row, 64, err, sizeof err), 0);
    float s = 0;
    for (int i = 0; i < 64; i++) s += row[i] * row[i];
    assert_true(s > 0.01f);
    assert_true(((const float *)m->layers[0].ssm_a->data)[0] < 0);
    ts_model_free(m);
}

/* ---- refusals of bad tensors, through the synth edit hook ---- */

typedef struct edit {
    const char *name;
    int what;
} edit;
enum { DROP, RESHAPE, RETYPE, RENAME };

static int do_edit(void *ctx, ts_tensor_spec *s, uint32_t *type) {
    const edit *e = ctx;
    if (strcmp(s->name, e->name) != 0) return 1;
    switch (e->what) {
    case DROP:
        return 0;
    case RESHAPE:
        s->ne[1] += 1;
        return 1;
    case RETYPE:
        *type = TS_TYPE_F16;
        return 1;
    default:
        snprintf(s->name, sizeof s->name, "output_norm.weight");
        return 1;
    }
}

static void bad_tensor(const char *name, int what, const char *want) {
    edit e = {name, what};
    ts_synth_opts o = {.type = TS_TYPE_F32, .sparse = true, .edit = do_edit, .edit_ctx = &e};
    synth(false, &o, 0);
    load_fails(want);
}

static void test_bad_tensors(void **state) {
    bad_tensor("blk.2.ssm_a", DROP, "tensor 'blk.2.ssm_a' is missing");
    bad_tensor("blk.3.indexer.k_proj.weight", DROP, "tensor 'blk.3.indexer.k_proj.weight' is missing");
    bad_tensor("per_layer_token_embd.weight", DROP, "'per_layer_token_embd.weight' is missing");
    bad_tensor("blk.0.ssm_out.weight", RESHAPE,
               "tensor 'blk.0.ssm_out.weight' has shape [96, 65, 1, 1], expected [96, 64, 1]");
    bad_tensor("blk.1.ssm_a", RETYPE,
               "tensor 'blk.1.ssm_a' has type f16, which turbospark cannot use there (it must be f32)");
    bad_tensor("output.weight", RENAME, "tensor 'output_norm.weight' is not part of a qwen4exp text model");
}

/* ---- refusals of bad metadata: copy the tiny file with one key changed ---- */

typedef int (*kv_edit_fn)(ts_gguf_writer *w, const char *key, const ts_gguf_value *v);

static void copy_with(kv_edit_fn fn) {
    char err[512];
    ts_gguf *g;
    assert_int_equal(ts_gguf_open(g_path, &g, err, sizeof err), 0);
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    for (int64_t i = 0; i < ts_gguf_kv_count(g); i++) {
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        assert_int_equal(fn(w, key, &kv->value), 0);
    }
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(ts_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne), 0);
    }
    assert_int_equal(ts_gguf_writer_begin_data(w, g_path2), 0);
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++)
        assert_int_equal(
            ts_gguf_writer_write(w, ts_gguf_tensor_at(g, i)->data, ts_gguf_tensor_at(g, i)->nbytes), 0);
    assert_int_equal(ts_gguf_writer_finish(w), 0);
    ts_gguf_writer_free(w);
    ts_gguf_close(g);
    assert_int_equal(rename(g_path2, g_path), 0);
}

static int keep(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return ts_gguf_writer_set_value(w, k, v);
}
static int arch_llama(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "general.architecture") ? keep(w, k, v) : ts_gguf_writer_set_str(w, k, "llama");
}
static int arch_clip(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "general.architecture") ? keep(w, k, v) : ts_gguf_writer_set_str(w, k, "clip");
}
static int mult_float(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    const float f[3] = {1, 2, 3};
    return strcmp(k, "qwen4exp.ple.layer_multipliers") ? keep(w, k, v)
                                                       : ts_gguf_writer_set_arr(w, k, TS_GGUF_F32, f, 3);
}
static int no_head_count(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "qwen4exp.attention.head_count") ? keep(w, k, v) : 0;
}
static int ratio_on_gdn(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    const int32_t r[4] = {4, 0, 0, 4};
    return strcmp(k, "qwen4exp.attention.compress_ratios") ? keep(w, k, v)
                                                           : ts_gguf_writer_set_arr(w, k, TS_GGUF_I32, r, 4);
}
static int bad_offsets(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    const uint64_t o[4] = {0, 101, 205, 311};
    return strcmp(k, "qwen4exp.ple.head_offsets") ? keep(w, k, v)
                                                  : ts_gguf_writer_set_arr(w, k, TS_GGUF_U64, o, 4);
}
static int ple_on_qsa(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    const int32_t l = 3;
    return strcmp(k, "qwen4exp.ple.layers") ? keep(w, k, v)
                                            : ts_gguf_writer_set_arr(w, k, TS_GGUF_I32, &l, 1);
}
static int eos_too_big(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "qwen4exp.ple.eos_token_id") ? keep(w, k, v) : ts_gguf_writer_set_u32(w, k, 512);
}
static int odd_rot(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "qwen4exp.rope.dimension_count") ? keep(w, k, v) : ts_gguf_writer_set_u32(w, k, 15);
}
static int yarn(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    if (keep(w, k, v)) return -1;
    return strcmp(k, "general.architecture")
               ? 0
               : ts_gguf_writer_set_f32(w, "qwen4exp.rope.scaling.factor", 4.0f);
}
static int topk_ragged(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "qwen4exp.attention.indexer.top_k") ? keep(w, k, v) : ts_gguf_writer_set_u32(w, k, 18);
}
static int too_many_used(ts_gguf_writer *w, const char *k, const ts_gguf_value *v) {
    return strcmp(k, "qwen4exp.expert_used_count") ? keep(w, k, v) : ts_gguf_writer_set_u32(w, k, 9);
}

static void bad_meta(kv_edit_fn fn, const char *want) {
    ts_synth_opts o = {.type = TS_TYPE_F32, .sparse = true};
    synth(false, &o, 0);
    copy_with(fn);
    load_fails(want);
}

static void test_bad_metadata(void **state) {
    ts_synth_opts o = {.type = TS_TYPE_F32, .sparse = true};
    synth(false, &o, 0);
    copy_with(keep); /* the copy itself is fine */
    ts_model_free(load_ok());
    bad_meta(arch_llama, "is a 'llama' model; turbospark runs only 'qwen4exp'");
    bad_meta(arch_clip, "vision projector (mmproj)");
    bad_meta(mult_float, "'qwen4exp.ple.layer_multipliers' is an array of f32, expected u64");
    bad_meta(no_head_count, "'qwen4exp.attention.head_count' is missing");
    bad_meta(ratio_on_gdn, "compress ratio of block 0 is 4, expected 0 for a GDN layer");
    bad_meta(bad_offsets, "offsets must be the prefix sums");
    bad_meta(ple_on_qsa, "PLE layer 3 must be a GDN trunk layer");
    bad_meta(eos_too_big, "ple.eos_token_id 512 is not below the vocabulary size 512");
    bad_meta(odd_rot, "rope.dimension_count 15 must be even");
    bad_meta(yarn, "rope scaling ('qwen4exp.rope.scaling.factor') is not supported");
    bad_meta(topk_ragged, "indexer top_k 18 is not a multiple of the compress ratio 4");
    bad_meta(too_many_used, "expert_used_count 9 exceeds expert_count 8");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_released_multipliers),
        cmocka_unit_test_setup_teardown(test_released_shapes_bind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_released_optional_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tiny_with_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_metadata, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
