/* The public API beyond evaluation (include/turbospark.h), used as a program outside the library
 * would use it:
 *   ts_chat_apply      every rendering of tests/fixtures/chat (transformers' apply_chat_template and
 *                      Qwen3's template through Jinja2) with the built-in templates, and those of
 *                      tests/fixtures/templates with the Jinja engine, byte for byte, from JSON
 *                      text; bad input refused;
 *   session states     to bytes and to a file and back: the restored session continues bit-identically;
 *                      damaged, truncated and foreign states refused with a sentence;
 *   backend info       what a CPU backend reports; what the CPU backend refuses (profiling) and what a
 *                      model refuses before its CUDA backend is set up;
 *   tokenizers         from a GGUF (a model file without tokenizer keys is refused by name) and from a
 *                      Hugging Face folder (a missing one is refused);
 *   a model's own      its tokenizer and recommended sampling, read once at load: the same tokenizer
 *                      every time, the file's sampling where the caller gave none; a file without a
 *                      tokenizer, or with one that cannot be read, loads and says why it has none.
 * Model: the tiny config with random weights (src/model/synth.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "turbospark.h"

#include "model/qwen4exp.h" /* the tiny config and the synthetic file, for the test's model only */
#include "model/synth.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h" /* a Hugging Face tokenizer written into the test's model */

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[256], g_other[256];
static ts_model *g_m, *g_other_m;

static const char *fixtures(void) {
    return getenv("TS_FIXTURES") ? getenv("TS_FIXTURES") : "tests/fixtures";
}

static int synth(const char *path, uint32_t n_layer, ts_model **m) {
    char err[512];
    ts_hparams hp;
    if (ts_hparams_tiny(&hp, err, sizeof err)) return -1;
    int rc = n_layer ? ts_hparams_set_layers(&hp, n_layer, 0, err, sizeof err) : 0;
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .seed = 11};
    if (!rc) rc = ts_synth_write(&hp, &o, path, err, sizeof err);
    ts_hparams_free(&hp);
    if (rc || ts_model_load(path, m, err, sizeof err)) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/ts_test_api_%d.gguf", (int)getpid());
    snprintf(g_other, sizeof g_other, "/tmp/ts_test_api_other_%d.gguf", (int)getpid());
    return synth(g_path, 0, &g_m) || synth(g_other, 8, &g_other_m) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    ts_model_free(g_m), ts_model_free(g_other_m);
    unlink(g_path), unlink(g_other);
    return 0;
}

static cJSON *load_json(const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fixtures(), rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cJSON *j = s && fread(s, 1, (size_t)n, f) == (size_t)n ? (s[n] = 0, cJSON_Parse(s)) : NULL;
    free(s);
    fclose(f);
    return j;
}

static ts_tokenizer *fixture_tokenizer(void) {
    char dir[4096], err[512];
    snprintf(dir, sizeof dir, "%s/tokenizer", fixtures());
    ts_tokenizer *t = NULL;
    if (ts_tokenizer_load_hf(dir, &t, err, sizeof err)) fail_msg("tokenizer: %s", err);
    return t;
}

static ts_chat *new_chat(const ts_tokenizer *t, const char *name, const char *file) {
    char err[512];
    ts_chat *c = NULL;
    if (ts_chat_new(t, name, file, true, &c, NULL, 0, err, sizeof err)) fail_msg("chat template: %s", err);
    return c;
}

/* One case: the conversation's messages and tools as JSON text through ts_chat_apply, compared
 * byte for byte with what the reference rendered. */
static void check_case(const ts_chat *chat, const cJSON *conv, const cJSON *opts, const char *want,
                       const char *what) {
    const cJSON *msgs = cJSON_IsArray(conv) ? conv : cJSON_GetObjectItem(conv, "messages");
    const cJSON *tools = cJSON_IsArray(conv) ? NULL : cJSON_GetObjectItem(conv, "tools");
    const cJSON *think = cJSON_GetObjectItem(opts, "enable_thinking");
    char *mj = cJSON_PrintUnformatted(msgs), *tj = tools ? cJSON_PrintUnformatted(tools) : NULL;
    const char *kw = cJSON_IsTrue(think)    ? "{\"enable_thinking\": true}"
                     : cJSON_IsFalse(think) ? "{\"enable_thinking\": false}"
                                            : NULL;
    char *out = NULL, err[512];
    size_t len = 0;
    if (ts_chat_apply(chat, mj, tj, kw, cJSON_IsTrue(cJSON_GetObjectItem(opts, "add_generation_prompt")),
                      &out, &len, err, sizeof err))
        fail_msg("%s: %s", what, err);
    if (len != strlen(want) || memcmp(out, want, len)) fail_msg("%s: got\n%s\nwant\n%s", what, out, want);
    free(out), free(mj), free(tj);
}

/* tests/fixtures/chat (transformers and Jinja2 renderings) with the built-in templates. */
static int check_builtin(const ts_tokenizer *t, const char *rel, const char *fixed_template) {
    cJSON *d = load_json(rel);
    assert_non_null(d);
    const cJSON *convs = cJSON_GetObjectItem(d, "conversations"), *c;
    const char *names[] = {"qwen3", "chatml", "qwen3-thinking"};
    ts_chat *chats[3];
    for (int k = 0; k < 3; k++) chats[k] = new_chat(t, names[k], NULL);
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(d, "cases")) {
        const cJSON *tmpl = cJSON_GetObjectItem(c, "template");
        const int k = fixed_template || !strcmp(tmpl->valuestring, "demo") ? 0
                      : !strcmp(tmpl->valuestring, "chatml")               ? 1
                                                                           : 2;
        char what[128];
        snprintf(what, sizeof what, "%s case %d (%s)", rel, n, names[k]);
        check_case(chats[k], cJSON_GetObjectItem(convs, cJSON_GetObjectItem(c, "conversation")->valuestring),
                   c, cJSON_GetObjectItem(c, "expected")->valuestring, what);
        n++;
    }
    for (int k = 0; k < 3; k++) ts_chat_free(chats[k]);
    cJSON_Delete(d);
    return n;
}

/* tests/fixtures/templates (transformers' renderings) with the Jinja engine, each template read from
 * its file; the conversation with content parts is left out (ts_chat_apply joins the parts into one
 * string, as the server does) and so is the one with its own variables. */
static int check_jinja(const ts_tokenizer *t) {
    cJSON *d = load_json("templates/cases.json");
    assert_non_null(d);
    const cJSON *convs = cJSON_GetObjectItem(d, "conversations"), *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(d, "cases")) {
        const char *tmpl = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *conv = cJSON_GetObjectItem(c, "conversation")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "expected");
        if (!cJSON_IsString(want) || !strcmp(conv, "content_parts") || !strcmp(tmpl, "features")) continue;
        char file[4096], what[160];
        snprintf(file, sizeof file, "%s/templates/%s.jinja", fixtures(), tmpl);
        snprintf(what, sizeof what, "templates/cases.json: %s, %s", tmpl, conv);
        ts_chat *chat = new_chat(t, NULL, file);
        assert_string_equal(ts_chat_name(chat), "jinja");
        check_case(chat, cJSON_GetObjectItem(convs, conv), cJSON_GetObjectItem(c, "options"),
                   want->valuestring, what);
        ts_chat_free(chat);
        n++;
    }
    cJSON_Delete(d);
    return n;
}

static void test_chat_apply_fixtures(void **state) {
    (void)state;
    ts_tokenizer *t = fixture_tokenizer();
    assert_int_equal(check_builtin(t, "chat/chat.json", NULL), 196);
    assert_int_equal(check_builtin(t, "chat/tools.json", "qwen3"), 28);
    const int n = check_jinja(t);
    print_message("%d Jinja renderings equal to transformers'\n", n);
    assert_true(n >= 150);
    ts_tokenizer_free(t);
}

static void expect_chat_error(const ts_chat *chat, const char *msgs, const char *tools, const char *kwargs,
                              const char *phrase) {
    char *out = (char *)"unchanged", err[512] = "";
    assert_int_equal(ts_chat_apply(chat, msgs, tools, kwargs, true, &out, NULL, err, sizeof err), -1);
    assert_null(out);
    if (!strstr(err, phrase)) fail_msg("expected '%s' in: %s", phrase, err);
}

static void test_chat_apply_refusals(void **state) {
    (void)state;
    ts_tokenizer *t = fixture_tokenizer();
    ts_chat *qwen3 = new_chat(t, "qwen3", NULL), *chatml = new_chat(t, "chatml", NULL), *c = NULL;
    const char *user = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    expect_chat_error(qwen3, "[{\"role\": \"user\"", NULL, NULL, "not valid JSON");
    expect_chat_error(qwen3, "{\"role\": \"user\"}", NULL, NULL, "must be a JSON array");
    expect_chat_error(qwen3, "[{\"role\": \"wizard\", \"content\": \"x\"}]", NULL, NULL,
                      "messages[0].role is 'wizard'");
    expect_chat_error(qwen3, "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", NULL, NULL,
                      "messages[0].content[0] is not a text part");
    expect_chat_error(qwen3, "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": 3}]}]", NULL, NULL,
                      "messages[0].tool_calls[0]");
    expect_chat_error(qwen3, user, "{}", NULL, "the tools must be a JSON array");
    expect_chat_error(qwen3, user, NULL, "{\"enable_thinking\": \"yes\"}",
                      "enable_thinking must be true or false");
    expect_chat_error(chatml, user, "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", NULL,
                      "tools");
    /* a NUL (\u0000) would end a cJSON string early: refused by its place (ts_json_check) */
    expect_chat_error(qwen3, "[{\"role\": \"user\", \"content\": \"a\\u0000b\"}]", NULL, NULL,
                      "the messages: '[0].content' contains a NUL character (\\u0000)");
    expect_chat_error(qwen3, user, "[{\"type\": \"function\", \"function\": {\"name\": \"f\\u0000\"}}]", NULL,
                      "the tools: '[0].function.name' contains a NUL");
    expect_chat_error(qwen3, user, NULL, "{\"x\": \"\\ud800\"}",
                      "the template variables: 'x' holds the lone surrogate");
    expect_chat_error(qwen3, "[{\"role\": \"user\", \"content\": \"\xc0\x80\"}]", NULL, NULL,
                      "'[0].content' is not valid UTF-8");
    char err[512];
    assert_int_equal(ts_chat_new(t, "jinja9", NULL, true, &c, NULL, 0, err, sizeof err), -1);
    assert_null(c);
    assert_non_null(strstr(err, "jinja9"));
    assert_int_equal(ts_chat_new(t, NULL, "/nonexistent.jinja", true, &c, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent.jinja"));
    /* content parts are joined by newlines; developer is system; unknown template variables are ignored */
    char *out = NULL;
    assert_int_equal(
        ts_chat_apply(chatml,
                      "[{\"role\": \"developer\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
                      "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]",
                      NULL, "{\"other\": 1}", false, &out, NULL, err, sizeof err),
        0);
    assert_string_equal(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n");
    free(out);
    /* tool-call arguments: a string as given, an object as the template's tojson writes it */
    assert_int_equal(ts_chat_apply(qwen3,
                                   "[{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", "
                                   "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                                   "\"arguments\": {\"b\":[true,1.5]}}}, {\"function\": {\"name\": \"g\", "
                                   "\"arguments\": \"{\\\"a\\\":1}\"}}]}]",
                                   NULL, NULL, false, &out, NULL, err, sizeof err),
                     0);
    if (!strstr(out, "{\"name\": \"f\", \"arguments\": {\"b\": [true, 1.5]}}") ||
        !strstr(out, "{\"name\": \"g\", \"arguments\": {\"a\":1}}"))
        fail_msg("tool calls rendered as:\n%s", out);
    free(out);
    /* arguments text holding \u0000 is not turned into an object (cJSON would cut the string): a
     * Jinja template gets the text as given */
    char file[4096];
    snprintf(file, sizeof file, "%s/templates/qwen3.jinja", fixtures());
    ts_chat *jq = new_chat(t, NULL, file);
    const char *nul_args =
        "[{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", \"content\": "
        "null, \"tool_calls\": [{\"function\": {\"name\": \"g\", \"arguments\": "
        "\"{\\\"a\\\": \\\"x\\\\u0000y\\\"}\"}}]}]";
    assert_int_equal(ts_chat_apply(jq, nul_args, NULL, NULL, false, &out, NULL, err, sizeof err), 0);
    if (!strstr(out, "\"arguments\": {\"a\": \"x\\u0000y\"}}")) fail_msg("arguments rendered as:\n%s", out);
    free(out);
    ts_chat_free(jq);
    /* a Jinja template reads the template variables it mentions */
    char path[300];
    snprintf(path, sizeof path, "/tmp/ts_test_api_%d.jinja", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("{{ greeting }}:{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}", f);
    fclose(f);
    ts_chat *own = new_chat(t, NULL, path);
    unlink(path);
    assert_int_equal(
        ts_chat_apply(own, user, NULL, "{\"greeting\": \"hello\"}", false, &out, NULL, err, sizeof err), 0);
    assert_string_equal(out, "hello:user=hi;");
    free(out);
    ts_chat_free(own), ts_chat_free(qwen3), ts_chat_free(chatml);
    ts_tokenizer_free(t);
}

static ts_session *new_session(ts_model *m, int64_t n_ctx) {
    char err[512];
    ts_session_params p = {.n_ctx = n_ctx, .ubatch = 8, .backend = TS_BACKEND_CPU};
    ts_session *s = NULL;
    if (ts_session_new(m, &p, &s, err, sizeof err)) fail_msg("session: %s", err);
    return s;
}

static void fill_ids(int32_t *ids, int n, int32_t V, uint32_t seed) {
    for (int i = 0; i < n; i++)
        seed = seed * 1664525u + 1013904223u, ids[i] = (int32_t)((seed >> 8) % (uint32_t)V);
}

/* The next token's logits of a and b are bit-identical (both continue with the same token). */
static void expect_same_continuation(ts_session *a, ts_session *b) {
    const int32_t V = ts_model_n_vocab(g_m), next = 5;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    char err[512];
    assert_int_equal(ts_session_eval(a, &next, 1, la, false, err, sizeof err), 0);
    assert_int_equal(ts_session_eval(b, &next, 1, lb, false, err, sizeof err), 0);
    assert_memory_equal(la, lb, (size_t)V * sizeof *la);
    free(la), free(lb);
}

static void test_state_bytes_and_files(void **state) {
    (void)state;
    char err[512], path[300];
    int32_t ids[37];
    fill_ids(ids, 37, ts_model_n_vocab(g_m), 3);
    ts_session *a = new_session(g_m, 64), *b = new_session(g_m, 64), *small = new_session(g_m, 16);
    assert_int_equal(ts_session_eval(a, ids, 37, NULL, false, err, sizeof err), 0);

    /* to a file and back */
    snprintf(path, sizeof path, "/tmp/ts_test_api_state_%d.bin", (int)getpid());
    assert_int_equal(ts_session_save_file(a, path, err, sizeof err), 0);
    assert_int_equal(ts_session_load_file(b, path, err, sizeof err), 0);
    assert_int_equal(ts_session_pos(b), 37);
    expect_same_continuation(a, b);
    assert_int_equal(ts_session_load_file(small, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than the session's context of 16"));

    /* to bytes and back */
    ts_snapshot *snap = NULL, *back = NULL;
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(ts_session_snapshot(a, &snap, err, sizeof err), 0);
    assert_int_equal(ts_snapshot_encode(snap, &data, &size, err, sizeof err), 0);
    assert_int_equal(ts_snapshot_decode(g_m, data, size, &back, err, sizeof err), 0);
    assert_int_equal(ts_snapshot_pos(back), 38);
    /* a CPU snapshot is in host memory: all its bytes counted there, moving it there does nothing;
     * GPU memory for one is refused by name */
    assert_int_equal(ts_snapshot_where(snap), TS_SNAPSHOT_HOST);
    assert_int_equal(ts_snapshot_device_bytes(snap), 0);
    assert_int_equal(ts_snapshot_bytes(snap), ts_session_snapshot_bytes(a));
    assert_int_equal(ts_snapshot_to_host(snap, err, sizeof err), 0);
    assert_int_equal(ts_snapshot_where(snap), TS_SNAPSHOT_HOST);
    ts_snapshot *dev = NULL;
    assert_false(ts_session_snapshot_fits_device(a));
    assert_int_equal(ts_session_snapshot_device(a, &dev, err, sizeof err), -1);
    assert_null(dev);
    assert_non_null(strstr(err, "the CPU backend keeps no snapshots in device memory"));
    ts_session_reset(b);
    assert_int_equal(ts_session_restore(b, back, err, sizeof err), 0);
    expect_same_continuation(a, b);
    ts_snapshot_free(back);

    /* refusals: another format, a truncated state, another model, a damaged header */
    unsigned char *bad = malloc(size);
    memcpy(bad, data, size);
    bad[0] = 'X';
    assert_int_equal(ts_snapshot_decode(g_m, bad, size, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a turbospark session state"));
    assert_null(back);
    assert_int_equal(ts_snapshot_decode(g_m, data, size - 4, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated or damaged"));
    assert_int_equal(ts_snapshot_decode(g_m, data, 10, &back, err, sizeof err), -1);
    assert_int_equal(ts_snapshot_decode(g_other_m, data, size, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, "saved with another model"));
    memcpy(bad, data, size);
    bad[8] = 9; /* format version */
    assert_int_equal(ts_snapshot_decode(g_m, bad, size, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, "format version 9"));
    memcpy(bad, data, size);
    bad[16] = 200; /* the position: the size of the state no longer matches it */
    assert_int_equal(ts_snapshot_decode(g_m, bad, size, &back, err, sizeof err), 0);
    assert_int_equal(ts_session_restore(a, back, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than the session's context"));
    ts_snapshot_free(back);
    bad[16] = 30;
    assert_int_equal(ts_snapshot_decode(g_m, bad, size, &back, err, sizeof err), 0);
    assert_int_equal(ts_session_restore(a, back, err, sizeof err), -1);
    assert_non_null(strstr(err, "bytes of state where 30 tokens"));
    assert_int_equal(ts_session_pos(a), 39); /* a refused restore changes nothing */
    ts_snapshot_free(back);
    free(bad);

    /* a file that is not a state, and one that is not there */
    FILE *f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(ts_session_load_file(b, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a turbospark session state"));
    unlink(path);
    assert_int_equal(ts_session_load_file(b, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));

    free(data);
    ts_snapshot_free(snap);
    ts_session_free(a), ts_session_free(b), ts_session_free(small);
}

static void test_backend_info(void **state) {
    (void)state;
    char err[512];
    ts_session *s = new_session(g_m, 16);
    ts_backend_info info;
    assert_int_equal(ts_session_backend(s), TS_BACKEND_CPU);
    assert_int_equal(ts_session_n_ctx(s), 16);
    assert_int_equal(ts_session_ubatch(s), 8);
    /* ubatch 0: the backend's choice, at most the context; a negative one is refused */
    ts_session_params ap = {.n_ctx = 16, .ubatch = 0, .backend = TS_BACKEND_CPU};
    ts_session *a = NULL;
    assert_int_equal(ts_session_new(g_m, &ap, &a, err, sizeof err), 0);
    assert_int_equal(ts_session_ubatch(a), 16);
    ts_session_free(a);
    ap.n_ctx = 1000;
    assert_int_equal(ts_session_new(g_m, &ap, &a, err, sizeof err), 0);
    assert_int_equal(ts_session_ubatch(a), TS_UBATCH_AUTO_CPU);
    ts_session_free(a);
    ap.ubatch = -1;
    assert_int_equal(ts_session_new(g_m, &ap, &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "ubatch ≥ 1 or 0 for the backend's choice"));
    assert_true(ts_model_backend_ready(g_m, TS_BACKEND_CPU));
    assert_int_equal(ts_model_backend_info(g_m, TS_BACKEND_CPU, &info, err, sizeof err), 0);
    assert_string_equal(info.device, "CPU");
    assert_int_equal(info.weight_bytes, 0);
    assert_false(ts_model_backend_ready(g_m, TS_BACKEND_CUDA));
    assert_int_equal(ts_model_backend_info(g_m, TS_BACKEND_CUDA, &info, err, sizeof err), -1);
    assert_non_null(strstr(err, ts_have_cuda() ? "not set up yet" : "no backend"));
    const char *names[TS_PROFILE_MAX_KINDS];
    double ms[TS_PROFILE_MAX_KINDS];
    assert_int_equal(ts_session_profile_step(s, 1, names, ms, err, sizeof err), -1);
    assert_non_null(strstr(err, "not available on the CPU backend"));
    const int32_t two[2] = {1, 2};
    ts_session *pair[2] = {s, s};
    assert_int_equal(ts_batch_profile_step(pair, two, 0, names, ms, err, sizeof err), -1);
    assert_non_null(strstr(err, "the count must be ≥ 1"));
    assert_int_equal(ts_batch_profile_step(pair, two, 2, names, ms, err, sizeof err), -1);
    assert_non_null(strstr(err, "not available on the CPU backend"));
    double bw;
    assert_int_equal(ts_model_measure_bandwidth(g_m, (ts_backend)7, &bw, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown backend 7"));
    ts_session_free(s);
}

static void test_tokenizer_sources(void **state) {
    (void)state;
    char err[512];
    ts_tokenizer *t = NULL;
    assert_int_equal(ts_tokenizer_load_gguf(g_path, &t, err, sizeof err),
                     -1); /* the synthetic file has none */
    assert_non_null(strstr(err, "tokenizer.ggml"));
    assert_null(t);
    assert_int_equal(ts_tokenizer_load_hf("/nonexistent/hf", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "tokenizer.json"));
    t = fixture_tokenizer();
    int32_t ids[8];
    const int64_t n = ts_tokenizer_encode(t, "<|im_start|>", 12, true, ids, 8, err, sizeof err);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], ts_tokenizer_find(t, "<|im_start|>"));
    assert_true(ts_tokenizer_n_tokens(t) > ids[0]);
    ts_tokenizer_free(t);
}

/* Metadata of the test's model file: the fixture tokenizer (ctx: the vocabulary size) and three of the
 * four recommended sampling values (min_p left out), with the types llama.cpp writes. */
static int tokenizer_and_sampling(void *ctx, ts_gguf_writer *w, char *err, size_t errlen) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tokenizer", fixtures());
    if (ts_tokenizer_write_gguf(w, dir, *(const uint32_t *)ctx, err, errlen)) return -1;
    if (ts_gguf_writer_set_f32(w, "general.sampling.temp", 0.6f) ||
        ts_gguf_writer_set_i32(w, "general.sampling.top_k", 20) ||
        ts_gguf_writer_set_f32(w, "general.sampling.top_p", 0.9f))
        return ts_errf(err, errlen, "writing the sampling keys: %s", ts_gguf_writer_error(w));
    return 0;
}

/* A negative top_k (llama.cpp: the whole vocabulary), a u32 temperature (not a float: ignored). */
static int odd_sampling(void *ctx, ts_gguf_writer *w, char *err, size_t errlen) {
    (void)ctx;
    if (ts_gguf_writer_set_i32(w, "general.sampling.top_k", -1) ||
        ts_gguf_writer_set_u32(w, "general.sampling.temp", 1))
        return ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    return 0;
}

/* A tokenizer this runtime cannot read (a SentencePiece model). */
static int unreadable_tokenizer(void *ctx, ts_gguf_writer *w, char *err, size_t errlen) {
    (void)ctx;
    if (ts_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"))
        return ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    return 0;
}

/* The tiny config with a vocabulary of n_vocab, written with the meta hook and loaded. */
static ts_model *synth_with_meta(const char *path, uint32_t n_vocab,
                                 int (*meta)(void *, ts_gguf_writer *, char *, size_t)) {
    char err[512];
    ts_hparams hp;
    if (ts_hparams_tiny(&hp, err, sizeof err)) fail_msg("%s", err);
    hp.n_vocab = n_vocab;
    ts_ple_multipliers(hp.n_vocab, hp.ple_n, 1234, 0, hp.ple_mult);
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .seed = 5, .meta = meta, .meta_ctx = &n_vocab};
    ts_model *m = NULL;
    int rc = ts_synth_write(&hp, &o, path, err, sizeof err);
    ts_hparams_free(&hp);
    if (rc || ts_model_load(path, &m, err, sizeof err)) fail_msg("%s", err);
    return m;
}

static void test_model_tokenizer_and_sampling(void **state) {
    (void)state;
    char err[512] = "", path[256];
    snprintf(path, sizeof path, "/tmp/ts_test_api_tok_%d.gguf", (int)getpid());

    /* no tokenizer keys: the model works, its tokenizer is refused by name; no sampling keys */
    const ts_tokenizer *t = (const ts_tokenizer *)&err;
    assert_int_equal(ts_model_tokenizer(g_m, &t, err, sizeof err), -1);
    assert_null(t);
    assert_non_null(strstr(err, g_path));
    assert_non_null(strstr(err, "no tokenizer.ggml.* keys"));
    ts_sampler_params p = ts_sampler_default_params();
    const ts_sampler_params p0 = p;
    ts_model_sampling(g_m, &p, NULL);
    assert_memory_equal(&p, &p0, sizeof p);

    /* a tokenizer that cannot be read: the model loads all the same and says why */
    ts_model *m = synth_with_meta(path, 512, unreadable_tokenizer);
    assert_int_equal(ts_model_tokenizer(m, &t, err, sizeof err), -1);
    assert_null(t);
    assert_non_null(strstr(err, "has no usable tokenizer"));
    assert_non_null(strstr(err, "'llama'"));
    float logits[512];
    const int32_t id = 7;
    ts_session_params sp = {.n_ctx = 4, .ubatch = 4};
    ts_session *s = NULL;
    assert_int_equal(ts_session_new(m, &sp, &s, err, sizeof err), 0);
    assert_int_equal(ts_session_eval(s, &id, 1, logits, false, err, sizeof err), 0);
    ts_session_free(s);
    ts_model_free(m);

    /* a tokenizer and recommended sampling: read once, the same tokenizer every time */
    m = synth_with_meta(path, 4096, tokenizer_and_sampling);
    const ts_tokenizer *t2 = NULL;
    assert_int_equal(ts_model_tokenizer(m, &t, err, sizeof err), 0);
    assert_int_equal(ts_model_tokenizer(m, &t2, err, sizeof err), 0);
    assert_non_null(t);
    assert_ptr_equal(t, t2);
    int32_t ids[4];
    assert_int_equal(ts_tokenizer_encode(t, "<|im_start|>", 12, true, ids, 4, err, sizeof err), 1);
    assert_int_equal(ids[0], ts_tokenizer_find(t, "<|im_start|>"));
    ts_model_sampling(m, &p, NULL);
    assert_true(p.temperature == 0.6f && p.top_k == 20 && p.top_p == 0.9f);
    assert_true(p.min_p == p0.min_p); /* not in the file */
    p = p0;
    const bool given[TS_SAMPLING_N_KEYS] = {[TS_SAMPLING_TEMP] = true, [TS_SAMPLING_TOP_P] = true};
    ts_model_sampling(m, &p, given);
    assert_true(p.temperature == p0.temperature && p.top_p == p0.top_p && p.top_k == 20);
    ts_model_free(m);

    /* a negative top_k is off (0, which the sampler takes); a key of another type is ignored */
    m = synth_with_meta(path, 512, odd_sampling);
    p = p0;
    ts_model_sampling(m, &p, NULL);
    assert_int_equal(p.top_k, 0);
    assert_true(p.temperature == p0.temperature);
    assert_int_equal(ts_sampler_check(&p, err, sizeof err), 0);
    ts_model_free(m);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_apply_fixtures),   cmocka_unit_test(test_chat_apply_refusals),
        cmocka_unit_test(test_state_bytes_and_files), cmocka_unit_test(test_backend_info),
        cmocka_unit_test(test_tokenizer_sources),     cmocka_unit_test(test_model_tokenizer_and_sampling),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
