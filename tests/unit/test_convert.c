/* turbospark convert's pieces that need no checkpoint from transformers: the safetensors reader on
 * hand-made good and broken files, config.json → hparams (the released config must give exactly
 * the released hyperparameters; what GGUF cannot express is refused by name), the quantization
 * mix policy, and quantize on a synthetic model. The end-to-end conversion of the golden fixtures
 * is tests/cli/convert.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "convert/convert.h"
#include "convert/hf_config.h"
#include "convert/mix.h"
#include "convert/safetensors.h"
#include "model/qwen4exp.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256], g_file[300], g_cfg[300];

static int setup(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ts_test_convert_%d", (int)getpid());
    mkdir(g_dir, 0755);
    snprintf(g_file, sizeof g_file, "%s/model.safetensors", g_dir);
    snprintf(g_cfg, sizeof g_cfg, "%s/config.json", g_dir);
    return 0;
}

static int teardown(void **state) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes a safetensors file: header JSON (padded to 8 bytes) then data; hlen_override ≠ 0 lies about
 * the header length; truncate cuts bytes off the end. */
static void write_st(const char *path, const char *header, const void *data, size_t n, uint64_t hlen_override,
                     size_t truncate) {
    size_t hl = strlen(header);
    size_t pad = (8 - hl % 8) % 8;
    uint64_t hlen = hlen_override ? hlen_override : hl + pad;
    size_t total = 8 + hl + pad + n;
    uint8_t *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', pad);
    if (n) memcpy(buf + 8 + hl + pad, data, n);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(buf, 1, total - truncate, f);
    fclose(f);
    free(buf);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void st_fails(const char *header, const void *data, size_t n, uint64_t hlen, size_t truncate,
                     const char *want) {
    write_st(g_file, header, data, n, hlen, truncate);
    ts_st *st = NULL;
    char err[512] = "";
    assert_int_equal(ts_st_open_file(g_file, &st, err, sizeof err), -1);
    assert_null(st);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    assert_null(strchr(err, '\n'));
}

static void test_safetensors_good(void **state) {
    /* a: bf16 [2,3] = 1..6, b: f32 [2] = {0.5, -2}, c: i64 [1] = 7; "__metadata__" ignored */
    uint8_t data[12 + 8 + 8];
    const float av[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &av[i], 4);
        data[2 * i] = (uint8_t)(u >> 16), data[2 * i + 1] = (uint8_t)(u >> 24);
    }
    const float bv[2] = {0.5f, -2.0f};
    memcpy(data + 12, bv, 8);
    const int64_t cv = 7;
    memcpy(data + 20, &cv, 8);
    write_st(g_file,
             "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_"
             "offsets\":[0,12]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
             "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[20,28]}}",
             data, sizeof data, 0, 0);
    ts_st *st;
    char err[512];
    if (ts_st_open_file(g_file, &st, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ts_st_count(st), 3);
    const ts_st_tensor *a = ts_st_find(st, "a"), *b = ts_st_find(st, "b"), *c = ts_st_find(st, "c");
    assert_non_null(a), assert_non_null(b), assert_non_null(c);
    assert_null(ts_st_find(st, "__metadata__"));
    assert_int_equal(a->dtype, TS_ST_BF16);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2), assert_int_equal(a->shape[1], 3);
    float row[3];
    ts_st_read_f32(a, 3, 3, row);
    assert_true(row[0] == 4 && row[1] == 5 && row[2] == 6);
    ts_st_read_f32(b, 0, 2, row);
    assert_true(row[0] == 0.5f && row[1] == -2.0f);
    int64_t v;
    assert_true(ts_st_read_i64(c, 0, &v));
    assert_int_equal(v, 7);
    ts_st_close(st);
}

static void test_safetensors_broken(void **state) {
    uint8_t data[16] = {0};
    st_fails("{}", NULL, 0, 0, 16, "shorter than the 8-byte header"); /* 8 + 8 − 16 = 0 bytes */
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 1u << 30, 0,
             "runs past the end");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 4, "outside");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", data, 8, 0, 0,
             "not valid JSON");
    st_fails("[1,2]", data, 8, 0, 0, "does not start with a JSON object");
    st_fails("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0, "dtype 'Q4'");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "needs 12 bytes, but its data_offsets span 8");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "shape entry");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", data, 8, 0, 0, "outside");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             data, 16, 0, 0, "overlap");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             data, 16, 0, 0, "appears twice");
    st_fails(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}",
        data, 8, 0, 0, "overflows");
    st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", data, 8, 0, 0, "data_offsets");
    st_fails("{\"a\":5}", data, 8, 0, 0, "not an object");
    /* a name cJSON would cut at \u0000 (and so pass for "a"), and the other strings it misreads */
    st_fails("{\"a\\u0000x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "the header: a key of the top-level object contains a NUL character (\\u0000)");
    st_fails("{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "'a.dtype' contains a NUL");
    st_fails("{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "lone surrogate");
    st_fails("{\"a\xc0\x80\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0,
             "not valid UTF-8");
}

/* Random byte edits of a valid file (header and data): every result opens cleanly or is refused with
 * a sentence, and whatever opens reads in bounds (the sanitizer build checks the reads). */
static void test_safetensors_mutations(void **state) {
    const char *hdr = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]},"
                      "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[20,28]}}";
    uint8_t data[28];
    for (int i = 0; i < 28; i++) data[i] = (uint8_t)(i * 37 + 1);
    write_st(g_file, hdr, data, sizeof data, 0, 0);
    FILE *f = fopen(g_file, "rb");
    assert_non_null(f);
    uint8_t orig[1024];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    uint64_t rng = 12345;
    int opened = 0;
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t buf[1024];
        memcpy(buf, orig, n);
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % n;
            const char *chars = "0123456789{}[],:\"-.eE ";
            buf[at] = (rng >> 20) & 1 ? (uint8_t)(rng >> 40) : (uint8_t)chars[(rng >> 24) % 23];
        }
        size_t len = n - ((rng >> 50) % 3 == 0 ? (size_t)(rng >> 13) % n : 0);
        f = fopen(g_file, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
        ts_st *st = NULL;
        char err[512] = "";
        if (ts_st_open_file(g_file, &st, err, sizeof err)) {
            assert_non_null(err[0] ? err : NULL);
            assert_null(strchr(err, '\n'));
            continue;
        }
        opened++;
        for (size_t i = 0; i < ts_st_count(st); i++) {
            const ts_st_tensor *t = ts_st_at(st, i);
            float tmp[64];
            if (ts_st_dtype_is_float(t->dtype))
                for (int64_t k = 0; k < t->nelements; k += 64)
                    ts_st_read_f32(t, k, t->nelements - k < 64 ? t->nelements - k : 64, tmp);
            int64_t v;
            if (t->dtype == TS_ST_I64 || t->dtype == TS_ST_F64)
                for (int64_t k = 0; k < t->nelements; k++) (void)ts_st_read_i64(t, k, &v);
        }
        ts_st_close(st);
    }
    assert_true(opened > 0);
}

static void test_safetensors_index(void **state) {
    uint8_t data[8] = {0};
    char path[400], err[512] = "";
    snprintf(path, sizeof path, "%s/part-1.safetensors", g_dir);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0);
    snprintf(path, sizeof path, "%s/part-2.safetensors", g_dir);
    write_st(path, "{\"y\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", data, 8, 0, 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", g_dir);
    write_text(
        path, "{\"metadata\":{},\"weight_map\":{\"x\":\"part-1.safetensors\",\"y\":\"part-2.safetensors\"}}");
    ts_st *st;
    if (ts_st_open_dir(g_dir, &st, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(ts_st_count(st), 2);
    assert_int_equal(ts_st_find(st, "y")->dtype, TS_ST_F16);
    ts_st_close(st);
    write_text(path, "{\"weight_map\":{\"x\":\"part-2.safetensors\",\"y\":\"part-2.safetensors\"}}");
    assert_int_equal(ts_st_open_dir(g_dir, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "'x' should be in part-2.safetensors"));
    write_text(path, "{\"weight_map\":{\"x\":\"../part-1.safetensors\"}}");
    assert_int_equal(ts_st_open_dir(g_dir, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a plain file name"));
    write_text(path, "{\"weight_map\":{\"x\":\"part-1.safetensors\\u0000x\"}}");
    assert_int_equal(ts_st_open_dir(g_dir, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "'weight_map.x' contains a NUL"));
    write_text(path, "{\"weight_map\":{\"x\":\"missing.safetensors\"}}");
    assert_int_equal(ts_st_open_dir(g_dir, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    /* the same tensor in two shards */
    snprintf(path, sizeof path, "%s/part-2.safetensors", g_dir);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8, 0, 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", g_dir);
    write_text(path, "{\"weight_map\":{\"x\":\"part-1.safetensors\",\"z\":\"part-2.safetensors\"}}");
    assert_int_equal(ts_st_open_dir(g_dir, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "in two files"));
    unlink(path);
}

/* The released checkpoint's config.json, in the multimodal packaging (values of docs/MODEL.md §3.1). */
static const char *k_released_config =
    "{\"architectures\":[\"Qwen4ExpForConditionalGeneration\"],\"model_type\":\"qwen4_exp\",\"image_token_"
    "id\":248056,"
    "\"tie_word_embeddings\":false,\"text_config\":{\"model_type\":\"qwen4_exp_text\",\"vocab_size\":248320,"
    "\"hidden_size\":2560,\"num_hidden_layers\":48,\"num_attention_heads\":24,\"num_key_value_heads\":2,"
    "\"head_dim\":256,\"hidden_act\":\"silu\",\"output_gate_type\":\"sigmoid\",\"max_position_embeddings\":"
    "262144,"
    "\"rms_norm_eps\":1e-6,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10],\"mrope_interleaved\":true},"
    "\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,"
    "\"linear_num_key_heads\":16,\"linear_num_value_heads\":48,\"moe_intermediate_size\":640,"
    "\"shared_expert_intermediate_size\":640,\"num_experts\":512,\"num_experts_per_tok\":10,\"hc_count\":4,"
    "\"hc_lowrank\":320,\"ple_layer_ids\":[2],\"ple_embed_dim\":2560,\"ngram_size\":3,\"heads_per_ngram\":8,"
    "\"ngram_vocab_size_base\":20000000,\"make_ngram_vocab_size_divisible_by\":128,\"split_ngram_parts\":128,"
    "\"indexer_n_heads\":4,\"indexer_kv_heads\":1,\"indexer_head_dim\":128,\"indexer_budget\":2048,"
    "\"indexer_compress_ratio\":4,\"eos_token_id\":[248044,248046],\"full_attention_interval\":4,"
    "\"mtp_num_hidden_layers\":1,\"layer_types\":[%s]}}";

static void write_released_config(const char *edit_from, const char *edit_to) {
    char lt[48 * 32] = "", *buf = malloc(8192), *out = malloc(8192);
    for (int l = 0; l < 48; l++) strcat(lt, (l + 1) % 4 ? "\"linear_attention\"," : "\"full_attention\",");
    lt[strlen(lt) - 1] = '\0';
    snprintf(buf, 8192, k_released_config, lt);
    if (edit_from) {
        char *p = strstr(buf, edit_from);
        assert_non_null(p);
        snprintf(out, 8192, "%.*s%s%s", (int)(p - buf), buf, edit_to, p + strlen(edit_from));
        strcpy(buf, out);
    }
    write_text(g_cfg, buf);
    free(buf), free(out);
}

static void test_config_released(void **state) {
    write_released_config(NULL, NULL);
    ts_hf_config c;
    char err[512];
    if (ts_hf_config_read(g_cfg, &c, err, sizeof err)) fail_msg("%s", err);
    ts_hparams r;
    assert_int_equal(ts_hparams_released(&r, err, sizeof err), 0);
    const ts_hparams *h = &c.hp;
    assert_true(c.multimodal);
    assert_string_equal(c.prefix, "model.language_model.");
    assert_int_equal(c.image_token_id, 248056);
    assert_int_equal(c.mtp_layers, 1);
#define SAME(f) assert_int_equal(h->f, r.f)
    SAME(n_vocab), SAME(n_embd), SAME(n_block), SAME(n_layer), SAME(n_ctx_train), SAME(hc_count),
        SAME(hc_rank);
    SAME(n_head), SAME(n_head_kv), SAME(head_dim), SAME(n_rot), SAME(idx_n_head), SAME(idx_head_dim);
    SAME(idx_top_k), SAME(compress), SAME(idx_top_blocks), SAME(ssm_conv), SAME(ssm_dk), SAME(ssm_nk),
        SAME(ssm_nv);
    SAME(ssm_dv), SAME(full_attn_interval), SAME(n_expert), SAME(n_expert_used), SAME(n_ff_shexp),
        SAME(ple_layer);
    SAME(ple_n), SAME(ple_p), SAME(ple_nh), SAME(ple_dh), SAME(ple_conv), SAME(ple_eos), SAME(ple_rows);
#undef SAME
    assert_true(h->eps == r.eps && h->rope_base == r.rope_base);
    for (int i = 0; i < 4; i++) assert_int_equal(h->rope_sections[i], r.rope_sections[i]);
    for (uint32_t i = 0; i < 3; i++) assert_true(h->ple_mult[i] == r.ple_mult[i]);
    for (uint32_t i = 0; i < 16; i++)
        assert_true(h->ple_sizes[i] == r.ple_sizes[i] && h->ple_offsets[i] == r.ple_offsets[i]);
    for (uint32_t l = 0; l < 48; l++)
        assert_int_equal(h->kind[l], r.kind[l]), assert_int_equal(h->n_ff_exp[l], 640);
    assert_int_equal(c.ple_total_rows, 320001446);
    ts_hparams_free(&r);
    ts_hf_config_free(&c);
}

static void config_fails(const char *from, const char *to, const char *want) {
    write_released_config(from, to);
    ts_hf_config c;
    char err[512] = "";
    assert_int_equal(ts_hf_config_read(g_cfg, &c, err, sizeof err), -1);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
}

static void test_config_refusals(void **state) {
    config_fails("\"output_gate_type\":\"sigmoid\"", "\"output_gate_type\":\"silu\"",
                 "output gate is 'silu'");
    config_fails("\"output_gate_type\":\"sigmoid\",", "", "output_gate_type unset, so hidden_act");
    config_fails("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", "hidden_act 'gelu'");
    /* "silu\u0000x" would read as "silu" */
    config_fails("\"hidden_act\":\"silu\"", "\"hidden_act\":\"silu\\u0000x\"",
                 "'text_config.hidden_act' contains a NUL character");
    config_fails("\"num_experts\":512,", "\"num_experts\":512,\"norm_topk_prob\":false,", "norm_topk_prob");
    config_fails("\"indexer_kv_heads\":1", "\"indexer_kv_heads\":2", "indexer_kv_heads is 2");
    config_fails("\"ple_layer_ids\":[2]", "\"ple_layer_ids\":[2,3]", "more than one layer");
    config_fails("\"ple_layer_ids\":[2]", "\"ple_layer_ids\":[4]", "not a linear_attention layer");
    config_fails("\"head_dim\":256,", "\"head_dim\":256,\"attention_bias\":true,", "attention_bias");
    config_fails("\"rope_type\":\"default\"", "\"rope_type\":\"yarn\"", "RoPE type 'yarn'");
    config_fails("\"indexer_budget\":2048,", "", "all of indexer_n_heads");
    config_fails("\"eos_token_id\":[248044,248046],", "", "eos_token_id");
    config_fails("\"model_type\":\"qwen4_exp\"", "\"model_type\":\"llama\"", "model_type is 'llama'");
    config_fails("\"hidden_size\":2560", "\"hidden_size\":\"big\"",
                 "'text_config.hidden_size' must be an integer");
    config_fails("\"full_attention\",", "\"mamba\",", "layer_types[3] is 'mamba'");
}

static void test_config_defaults_and_causal(void **state) {
    /* flat CausalLM config: omitted keys take transformers' defaults; eos list → first element */
    write_text(
        g_cfg,
        "{\"model_type\":\"qwen4_exp_text\",\"output_gate_type\":\"sigmoid\",\"vocab_size\":1000,"
        "\"num_hidden_layers\":8,\"full_attention_interval\":4,\"indexer_n_heads\":2,\"indexer_kv_heads\":1,"
        "\"indexer_head_dim\":64,\"indexer_budget\":64,\"indexer_compress_ratio\":8,"
        "\"ple_layer_ids\":[3,3],\"eos_token_id\":[7,9],\"tie_word_embeddings\":true,"
        "\"rope_theta\":500000,\"partial_rotary_factor\":0.25}");
    ts_hf_config c;
    char err[512];
    if (ts_hf_config_read(g_cfg, &c, err, sizeof err)) fail_msg("%s", err);
    assert_false(c.multimodal);
    assert_true(c.tie_embeddings);
    assert_string_equal(c.prefix, "model.");
    assert_int_equal(c.hp.n_embd, 2048);
    assert_int_equal(c.hp.ssm_nv, 32);
    assert_int_equal(c.hp.n_rot, 64);
    assert_true(c.hp.rope_base == 500000.0f);
    assert_int_equal(c.hp.ple_layer, 2);
    assert_int_equal(c.hp.ple_eos, 7);
    assert_int_equal(c.hp.ple_dh, 2048 / 16);
    assert_int_equal(c.hp.kind[3], TS_LAYER_QSA);
    assert_int_equal(c.hp.kind[2], TS_LAYER_GDN);
    assert_int_equal(c.hp.compress, 8);
    ts_hf_config_free(&c);
    assert_true(ts_nth_prime_after(19999999, 1) == 20000003);
    assert_true(ts_nth_prime_after(19999999, 16) == 20000171);
}

static ts_tensor_spec spec_of(const char *name, char role, int64_t ne0, int64_t ne1) {
    ts_tensor_spec s = {.n_dims = 2, .ne = {ne0, ne1, 1}, .role = role};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

static void test_mix_policy(void **state) {
    ts_hparams hp;
    char err[256];
    assert_int_equal(ts_hparams_released(&hp, err, sizeof err), 0);
    const ts_mix *q4km = ts_mix_from_name("Q4_K_M"), *q8 = ts_mix_from_name("q8_0"),
                 *f16 = ts_mix_from_name("f16");
    assert_non_null(q4km), assert_non_null(q8), assert_non_null(f16);
    assert_null(ts_mix_from_name("q3_k_s"));
    ts_tensor_spec s;
#define TYPE(mix, name, role, ne0, ne1) (s = spec_of(name, role, ne0, ne1), ts_mix_type(mix, &hp, &s))
    assert_int_equal(TYPE(q4km, "blk.5.attn_gate.weight", 'm', 2560, 6144), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(q4km, "blk.5.attn_qkv.weight", 'm', 2560, 10240), TS_TYPE_Q5_K);
    assert_int_equal(TYPE(q4km, "output.weight", 'm', 2560, 248320), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q4km, "token_embd.weight", 'm', 2560, 248320), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q4km, "blk.5.ffn_gate_inp.weight", 'm', 2560, 512), TS_TYPE_BF16);
    assert_int_equal(TYPE(ts_mix_from_name("f32"), "blk.5.ffn_gate_inp.weight", 'm', 2560, 512), TS_TYPE_F32);
    assert_int_equal(TYPE(f16, "blk.5.ffn_gate_inp.weight", 'm', 2560, 512), TS_TYPE_BF16);
    assert_int_equal(ts_mix_router_type(TS_TYPE_BF16, false), TS_TYPE_F32); /* values that bf16 would round */
    assert_int_equal(ts_mix_router_type(TS_TYPE_BF16, true), TS_TYPE_BF16);
    assert_int_equal(ts_mix_router_type(TS_TYPE_F32, true), TS_TYPE_F32);
    assert_true(ts_values_bf16_exact((const float[]){1.0f, -0.5f, 0x1.fep-3f, 0.0f}, 4));
    assert_false(ts_values_bf16_exact((const float[]){1.0f, 0x1.ffp-3f}, 2));
    assert_int_equal(TYPE(q4km, "blk.5.ssm_norm.weight", 'v', 128, 1), TS_TYPE_F32);
    /* narrow rows fall back (MODEL.md §8) */
    assert_int_equal(TYPE(q4km, "per_layer_token_embd.weight", 'm', 160, 320001536), TS_TYPE_Q5_0);
    assert_int_equal(TYPE(q4km, "blk.5.hc_attn_up.weight", 'm', 320, 10240), TS_TYPE_Q5_0);
    /* ffn_down: Q6_K (→ Q8_0 at 640 wide) on use_more_bits layers 0..5, 8, 11, ..., 42..47; else Q4_K → Q5_0
     */
    assert_int_equal(TYPE(q4km, "blk.0.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(q4km, "blk.6.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q5_0);
    assert_int_equal(TYPE(q4km, "blk.8.ffn_down_shexp.weight", 'm', 640, 2560), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(q4km, "blk.47.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q8_0);
    /* attn_v over the 12 QSA layers: ordinals 0, 1 (n/8 = 1 → i < 1; i ≥ 10), every third: 3 → ordinal 3 =
     * layer 15 */
    assert_int_equal(TYPE(q4km, "blk.3.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q4km, "blk.7.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(q4km, "blk.15.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q4km, "blk.47.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q8, "output.weight", 'm', 2560, 248320), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(q8, "per_layer_token_embd.weight", 'm', 160, 320001536), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(f16, "output.weight", 'm', 2560, 248320), TS_TYPE_F16);
    assert_int_equal(TYPE(ts_mix_from_name("q4_0"), "output.weight", 'm', 2560, 248320), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(ts_mix_from_name("q6_k"), "blk.1.ffn_down_exps.weight", 'm', 640, 2560),
                     TS_TYPE_Q8_0);
    /* iq3_xxs: llama.cpp's IQ3_XXS rules (24 query heads share 2 K/V heads: attn_v, attn_qkv Q4_K);
     * 640-wide rows fall back: IQ3_XXS/IQ3_S -> IQ4_NL, Q4_K -> Q5_0, Q3_K -> Q4_0 */
    const ts_mix *iq3xxs = ts_mix_from_name("IQ3_XXS"), *iq3s = ts_mix_from_name("iq3_s");
    assert_non_null(iq3xxs), assert_non_null(iq3s);
    assert_int_equal(TYPE(iq3xxs, "output.weight", 'm', 2560, 248320), TS_TYPE_Q5_K);
    assert_int_equal(TYPE(iq3xxs, "token_embd.weight", 'm', 2560, 248320), TS_TYPE_IQ3_S);
    assert_int_equal(TYPE(iq3xxs, "blk.5.attn_qkv.weight", 'm', 2560, 10240), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(iq3xxs, "blk.3.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(iq3xxs, "blk.3.attn_q.weight", 'm', 2560, 12288), TS_TYPE_IQ2_S);
    assert_int_equal(TYPE(iq3xxs, "blk.3.attn_k.weight", 'm', 2560, 512), TS_TYPE_IQ2_S);
    assert_int_equal(TYPE(iq3xxs, "blk.3.indexer.q_proj.weight", 'm', 2560, 1024), TS_TYPE_IQ3_XXS);
    assert_int_equal(TYPE(iq3xxs, "blk.3.attn_output.weight", 'm', 6144, 2560), TS_TYPE_IQ3_S);
    assert_int_equal(TYPE(iq3xxs, "blk.5.ffn_gate_exps.weight", 'm', 2560, 640), TS_TYPE_IQ3_XXS);
    assert_int_equal(TYPE(iq3xxs, "blk.5.ffn_gate_inp.weight", 'm', 2560, 512), TS_TYPE_BF16);
    assert_int_equal(TYPE(iq3xxs, "blk.5.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q5_0); /* 5 < 48/8 */
    assert_int_equal(TYPE(iq3xxs, "blk.6.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q4_0);
    assert_int_equal(TYPE(iq3xxs, "blk.6.hc_attn_up.weight", 'm', 320, 10240), TS_TYPE_IQ4_NL);
    assert_int_equal(TYPE(iq3s, "output.weight", 'm', 2560, 248320), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(iq3s, "blk.5.attn_qkv.weight", 'm', 2560, 10240), TS_TYPE_IQ3_S);
    assert_int_equal(TYPE(iq3s, "blk.5.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_IQ4_NL);
    assert_int_equal(TYPE(iq3s, "per_layer_token_embd.weight", 'm', 160, 320001536), TS_TYPE_IQ4_NL);
    /* UD recipes: experts low (one step up in blocks 0..5 and 42..47 of 48), the rest by role */
    const ts_mix *q2xl = ts_mix_from_name("UD_Q2_K_XL"), *xxs = ts_mix_from_name("ud_iq2_xxs");
    assert_non_null(q2xl), assert_non_null(xxs);
    assert_int_equal(TYPE(q2xl, "blk.6.ffn_gate_exps.weight", 'm', 2560, 640), TS_TYPE_Q2_K);
    assert_int_equal(TYPE(q2xl, "blk.41.ffn_up_exps.weight", 'm', 2560, 640), TS_TYPE_Q2_K);
    assert_int_equal(TYPE(q2xl, "blk.5.ffn_gate_exps.weight", 'm', 2560, 640), TS_TYPE_Q3_K);
    assert_int_equal(TYPE(q2xl, "blk.42.ffn_gate_up_exps.weight", 'm', 2560, 1280), TS_TYPE_Q3_K);
    assert_int_equal(TYPE(q2xl, "blk.6.ffn_down_exps.weight", 'm', 640, 2560),
                     TS_TYPE_Q4_0); /* Q3_K, 640 wide */
    assert_int_equal(TYPE(q2xl, "blk.0.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_Q5_0); /* Q4_K */
    assert_int_equal(TYPE(q2xl, "blk.9.ffn_up_shexp.weight", 'm', 2560, 1024), TS_TYPE_Q5_K);
    assert_int_equal(TYPE(q2xl, "blk.9.attn_gate.weight", 'm', 2560, 6144), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(q2xl, "blk.11.indexer.q_proj.weight", 'm', 2560, 1024), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(q2xl, "blk.9.attn_qkv.weight", 'm', 2560, 10240), TS_TYPE_Q5_K);
    assert_int_equal(TYPE(q2xl, "blk.11.attn_v.weight", 'm', 2560, 512), TS_TYPE_Q5_K);
    assert_int_equal(TYPE(q2xl, "blk.9.hc_ffn_down.weight", 'm', 10240, 32), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(q2xl, "output_hc_up.weight", 'm', 320, 10240), TS_TYPE_Q8_0);
    assert_int_equal(TYPE(q2xl, "blk.1.ple_value.weight", 'm', 2560, 2560), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q2xl, "ple_ngram_embd.3.weight", 'm', 160, 20000003), TS_TYPE_Q4_0);
    assert_int_equal(TYPE(q2xl, "token_embd.weight", 'm', 2560, 248320), TS_TYPE_Q4_K);
    assert_int_equal(TYPE(q2xl, "output.weight", 'm', 2560, 248320), TS_TYPE_Q6_K);
    assert_int_equal(TYPE(q2xl, "blk.9.ffn_gate_inp.weight", 'm', 2560, 512), TS_TYPE_BF16);
    assert_int_equal(TYPE(xxs, "blk.20.ffn_gate_exps.weight", 'm', 2560, 640), TS_TYPE_IQ2_XXS);
    assert_int_equal(TYPE(xxs, "blk.47.ffn_gate_exps.weight", 'm', 2560, 640), TS_TYPE_IQ3_XXS);
    assert_int_equal(TYPE(xxs, "blk.20.ffn_down_exps.weight", 'm', 640, 2560), TS_TYPE_IQ4_NL);
    assert_int_equal(TYPE(xxs, "blk.20.ffn_down_exps.weight", 'm', 1024, 2560), TS_TYPE_IQ2_XS);
    /* bytes by role at the released shapes, against a count by hand: IQ2_XXS gate and up (66 bytes a
     * 256-block) in 36 blocks, IQ3_XXS (98) in 12; 512 experts x 2 x 640 rows x 10 blocks a row */
    ts_mix_sizes z;
    assert_int_equal(ts_mix_sizes_of(xxs, &hp, (ts_layout){0}, &z), 0);
    assert_true(z.bytes[TS_ROLE_EXPERTS] == 6553600ull * (36 * 66 + 12 * 98));
    assert_true(z.elements[TS_ROLE_EXPERTS] == 6553600ull * 256 * 48);
    assert_int_equal(z.n_types[TS_ROLE_EXPERTS], 2);
    assert_true(z.bytes[TS_ROLE_ROUTER] == 48ull * 2560 * 512 * 2); /* BF16 */
    uint64_t sum = 0;
    for (int r = 0; r < TS_ROLE_COUNT; r++) sum += z.bytes[r];
    assert_true(sum == z.total_bytes);
    char name[64];
    uint32_t type = 0;
    assert_true(ts_mix_needs_imatrix(xxs, &hp, (ts_layout){0}, name, sizeof name, &type));
    assert_string_equal(name, "blk.6.ffn_gate_exps.weight"); /* blocks 0..5: IQ3_XXS; downs: IQ4_NL */
    assert_int_equal(type, TS_TYPE_IQ2_XXS);
    const ts_mix *iq1m = ts_mix_from_name("ud_iq1_m");
    assert_non_null(iq1m);
    assert_int_equal(TYPE(iq1m, "blk.20.ffn_up_exps.weight", 'm', 2560, 640), TS_TYPE_IQ1_M);
    assert_int_equal(TYPE(iq1m, "blk.3.ffn_up_exps.weight", 'm', 2560, 640), TS_TYPE_IQ2_XXS);
    assert_true(ts_mix_needs_imatrix(iq1m, &hp, (ts_layout){0}, name, sizeof name, &type));
    assert_string_equal(name, "blk.0.ffn_gate_exps.weight");
    assert_int_equal(type, TS_TYPE_IQ2_XXS);
    assert_false(ts_mix_needs_imatrix(q2xl, &hp, (ts_layout){0}, name, sizeof name, &type));
    assert_false(
        ts_mix_needs_imatrix(ts_mix_from_name("ud_iq2_m"), &hp, (ts_layout){0}, name, sizeof name, &type));
#undef TYPE
    ts_hparams_free(&hp);
}

static void test_quantize_refuses(void **state) {
    char in[400], out[400], err[512] = "";
    snprintf(in, sizeof in, "%s/in.gguf", g_dir);
    snprintf(out, sizeof out, "%s/out.gguf", g_dir);
    ts_hparams hp;
    assert_int_equal(ts_hparams_tiny(&hp, err, sizeof err), 0);
    ts_synth_opts o = {.type = TS_TYPE_F32, .seed = 3};
    assert_int_equal(ts_synth_write(&hp, &o, in, err, sizeof err), 0);
    ts_hparams_free(&hp);
    assert_int_equal(ts_quantize_gguf(in, in, ts_mix_from_name("q8_0"), NULL, true, err, sizeof err), -1);
    assert_non_null(strstr(err, "is the input file"));
    assert_int_equal(ts_quantize_gguf(in, out, ts_mix_from_name("q4_k_m"), NULL, true, err, sizeof err), 0);
    ts_model *m;
    if (ts_model_load(out, &m, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(m->layers[0].attn_qkv->type, TS_TYPE_Q5_1); /* Q5_K for attn_qkv; ne0 = 64 falls back */
    assert_int_equal(m->layers[0].ffn_gate_inp->type, TS_TYPE_F32); /* synth's fp32 values: not bf16 */
    ts_model_free(m);
    /* values that are bf16 numbers (a bf16 file) keep them: the router is stored as BF16, unrounded */
    assert_int_equal(ts_hparams_tiny(&hp, err, sizeof err), 0);
    o.type = TS_TYPE_BF16;
    assert_int_equal(ts_synth_write(&hp, &o, in, err, sizeof err), 0);
    ts_hparams_free(&hp);
    assert_int_equal(ts_quantize_gguf(in, out, ts_mix_from_name("q4_k_m"), NULL, true, err, sizeof err), 0);
    if (ts_model_load(out, &m, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(m->layers[0].ffn_gate_inp->type, TS_TYPE_BF16);
    ts_model_free(m);
    assert_int_equal(ts_quantize_gguf(in, out, ts_mix_from_name("f32"), NULL, true, err, sizeof err), 0);
    if (ts_model_load(out, &m, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(m->layers[0].ffn_gate_inp->type, TS_TYPE_F32);
    ts_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_good),
        cmocka_unit_test(test_safetensors_broken),
        cmocka_unit_test(test_safetensors_mutations),
        cmocka_unit_test(test_safetensors_index),
        cmocka_unit_test(test_config_released),
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_config_defaults_and_causal),
        cmocka_unit_test(test_mix_policy),
        cmocka_unit_test(test_quantize_refuses),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
