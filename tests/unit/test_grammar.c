/* Grammar-constrained decoding (engine/grammar.h, engine/json_schema.h) on the demo tokenizer:
 *   - texts the schema allows are accepted whole and can end; texts it forbids are refused;
 *   - the token mask equals brute force (every token tried from a fresh matcher) at every step of
 *     random walks, and every walk that ends is JSON that validates against its schema (a small
 *     validator of the schema subset written here, independent of the compiler);
 *   - unsupported keywords are refused by name; tool-call grammars give Qwen's call syntax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/gbnf.h"
#include "engine/json_schema.h"
#include "engine/toolcall.h"
#include "gguf/gguf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ts_gguf *g_gguf;
static ts_tokenizer *g_tok;
static ts_grammar_vocab *g_voc;

/* ---- an independent validator of the supported subset ---------------------------------------- */

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static bool is_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer"))
        return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return false;
}

static bool validates(const cJSON *v, const cJSON *sc) {
    if (cJSON_IsTrue(sc)) return true;
    const cJSON *k;
    if ((k = cJSON_GetObjectItem(sc, "const")) && !cJSON_Compare(v, k, true)) return false;
    if ((k = cJSON_GetObjectItem(sc, "enum"))) {
        bool any = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) any |= cJSON_Compare(v, e, true);
        if (!any) return false;
    }
    if ((k = cJSON_GetObjectItem(sc, "anyOf")) || (k = cJSON_GetObjectItem(sc, "oneOf"))) {
        bool any = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) any |= validates(v, e);
        if (!any) return false;
    }
    if ((k = cJSON_GetObjectItem(sc, "type"))) {
        bool any = false;
        if (cJSON_IsString(k)) any = is_type(v, k->valuestring);
        const cJSON *e;
        cJSON_ArrayForEach(e, k) any |= is_type(v, e->valuestring);
        if (!any) return false;
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_chars(v->valuestring);
        if ((k = cJSON_GetObjectItem(sc, "minLength")) && n < (size_t)k->valuedouble) return false;
        if ((k = cJSON_GetObjectItem(sc, "maxLength")) && n > (size_t)k->valuedouble) return false;
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if ((k = cJSON_GetObjectItem(sc, "minItems")) && n < k->valuedouble) return false;
        if ((k = cJSON_GetObjectItem(sc, "maxItems")) && n > k->valuedouble) return false;
        const cJSON *it = cJSON_GetObjectItem(sc, "items"), *e;
        if (it) cJSON_ArrayForEach(e, v) if (!validates(e, it)) return false;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *pr = cJSON_GetObjectItem(sc, "properties"),
                    *ap = cJSON_GetObjectItem(sc, "additionalProperties");
        const cJSON *e;
        cJSON_ArrayForEach(
            e, cJSON_GetObjectItem(sc, "required")) if (!cJSON_GetObjectItem(v, e->valuestring)) return false;
        cJSON_ArrayForEach(e, v) {
            const cJSON *ps = cJSON_GetObjectItem(pr, e->string);
            if (ps && !validates(e, ps)) return false;
            if (!ps && cJSON_IsFalse(ap)) return false;
            if (!ps && cJSON_IsObject(ap) && !validates(e, ap)) return false;
        }
    }
    return true;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static ts_grammar *compile(const char *schema) {
    ts_grammar *g;
    char err[512];
    if (ts_json_schema_grammar(schema, &g, err, sizeof err)) fail_msg("%s: %s", schema, err);
    return g;
}

/* Whether the grammar takes the whole text (and can end after it). */
static bool takes(ts_grammar *g, const char *text) {
    ts_matcher *m;
    char err[256];
    assert_int_equal(ts_matcher_new(g, g_voc, &m, err, sizeof err), 0);
    bool ok = ts_matcher_accept_bytes(m, text, strlen(text), err, sizeof err) == 0 && ts_matcher_can_end(m);
    ts_matcher_free(m);
    return ok;
}

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1]},"
    "\"maxItems\":3},\"ok\":{\"type\":[\"boolean\",\"null\"]},\"pos\":{\"type\":\"object\",\"properties\":"
    "{\"x\":{\"type\":\"number\"},\"y\":{\"const\":\"\xc3\xa9\"}},\"required\":[\"x\",\"y\"],"
    "\"additionalProperties\":false},\"v\":{\"anyOf\":[{\"type\":\"string\",\"minLength\":2,\"maxLength\":2},"
    "{\"type\":\"array\",\"minItems\":1,\"maxItems\":2,\"items\":{\"type\":\"integer\"}}]}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static void test_accepts_and_refuses(void **state) {
    (void)state;
    ts_grammar *g = compile(k_schema);
    const char *good[] = {
        "{\"name\":\"Moses\",\"age\":120}",
        " \n{ \"name\" : \"\", \"age\": -0, \"tags\": [], \"ok\": null }",
        "{\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\",\"age\":1,\"tags\":[\"a\",1,\"b\"],"
        "\"ok\":true,"
        "\"pos\":{\"x\":-1.5e+3,\"y\":\"\xc3\xa9\"},\"v\":\"\\u00e9!\"}",
        "{\n  \"name\": \"a\\\"b\",\n  \"age\": 7,\n  \"v\": [1, 2]\n}",
    };
    const char *bad[] = {
        "{\"age\":1}",                                    /* name is required */
        "{\"age\":1,\"name\":\"x\"}",                     /* properties come in the schema's order */
        "{\"name\":\"Abraham\",\"age\":1}",               /* maxLength 6 */
        "{\"name\":\"x\",\"age\":1.5}",                   /* integer */
        "{\"name\":\"x\",\"age\":01}",                    /* no leading zeros */
        "{\"name\":\"x\",\"age\":1,\"tags\":[\"c\"]}",    /* enum */
        "{\"name\":\"x\",\"age\":1,\"tags\":[1,1,1,1]}",  /* maxItems */
        "{\"name\":\"x\",\"age\":1,\"pos\":{\"x\":1}}",   /* y required */
        "{\"name\":\"x\",\"age\":1,\"v\":[]}",            /* minItems 1 */
        "{\"name\":\"x\",\"age\":1,\"extra\":1}",         /* additionalProperties false */
        "{\"name\":\"x\",\"age\":1}x",                    /* nothing after the value */
        "{\"name\":\"x\",\"age\":1",                      /* not finished */
        "{\"name\":\"x\n\",\"age\":1}",                   /* control byte in a string */
        "{\"name\":\"x\",\"age\":1,  \n\n  \"ok\":true}", /* two newlines of whitespace */
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (!takes(g, good[i])) fail_msg("refused: %s", good[i]);
        cJSON *v = cJSON_Parse(good[i]), *sc = cJSON_Parse(k_schema);
        assert_true(v && validates(v, sc)); /* the validator agrees */
        cJSON_Delete(v), cJSON_Delete(sc);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (takes(g, bad[i])) fail_msg("accepted: %s", bad[i]);
    ts_grammar_free(g);
}

/* Random walks over the mask: the mask equals brute force, and a finished walk validates. */
static bool walk_grammar(ts_grammar *g, const char *schema, uint64_t seed, int max_steps, bool brute);

static bool walk(const char *schema, uint64_t seed, int max_steps, bool brute) {
    return walk_grammar(compile(schema), schema, seed, max_steps, brute);
}

/* A random walk over g (freed here); a finished walk is checked against schema unless it is "". */
static bool walk_grammar(ts_grammar *g, const char *schema, uint64_t seed, int max_steps, bool brute) {
    ts_matcher *m;
    char err[256];
    int32_t V = ts_tokenizer_n_tokens(g_tok);
    uint32_t *allow = calloc((size_t)V / 32 + 1, sizeof *allow);
    int32_t *cand = malloc((size_t)V * sizeof *cand);
    ts_text text = {0};
    assert_int_equal(ts_matcher_new(g, g_voc, &m, err, sizeof err), 0);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    bool ended = false;
    for (int step = 0; step < max_steps && !ended; step++) {
        if (ts_matcher_mask(m, allow, err, sizeof err)) fail_msg("%s", err);
        int nc = 0;
        for (int32_t id = 0; id < V; id++) {
            bool a = ts_mask_get(allow, id);
            if (brute) { /* a fresh matcher over the text so far, then the token */
                ts_matcher *b;
                assert_int_equal(ts_matcher_new(g, g_voc, &b, err, sizeof err), 0);
                assert_int_equal(ts_matcher_accept_bytes(b, text.s ? text.s : "", text.n, err, sizeof err),
                                 0);
                size_t n;
                const char *tb = ts_token_bytes(g_tok, id, false, &n);
                bool want = ts_tokenizer_is_eog(g_tok, id)
                                ? ts_matcher_can_end(b)
                                : n && !ts_matcher_accept_bytes(b, tb, n, err, sizeof err);
                ts_matcher_free(b);
                if (a != want)
                    fail_msg("token %d after \"%.*s\": mask %d, brute force %d", id, (int)text.n, text.s, a,
                             want);
            }
            if (a) cand[nc++] = id;
        }
        assert_true(nc > 0);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* prefer ending and short tokens half the time, so walks finish */
        int32_t id = cand[x % (uint64_t)nc];
        if ((x >> 32) & 1)
            for (int i = 0; i < nc; i++)
                if (ts_tokenizer_is_eog(g_tok, cand[i]) ||
                    (ts_token_bytes(g_tok, cand[i], false, &(size_t){0}) &&
                     strchr("]}\"0123456789tfn", *ts_token_bytes(g_tok, cand[i], false, &(size_t){0}))))
                    id = cand[i];
        if (ts_tokenizer_is_eog(g_tok, id)) {
            ended = true;
            break;
        }
        size_t n;
        const char *tb = ts_token_bytes(g_tok, id, false, &n);
        assert_int_equal(ts_text_append(&text, tb, n), 0);
        if (ts_matcher_accept(m, id, err, sizeof err)) fail_msg("%s", err);
        if (ts_matcher_must_end(m)) ended = true;
    }
    if (ended && !(schema && !*schema)) {
        assert_int_equal(ts_text_append(&text, "", 1), 0);
        cJSON *v = cJSON_Parse(text.s), *sc = cJSON_Parse(schema);
        if (!v || !validates(v, sc)) fail_msg("the walk wrote \"%s\", which does not validate", text.s);
        cJSON_Delete(v), cJSON_Delete(sc);
    }
    ts_text_free(&text);
    ts_matcher_free(m);
    ts_grammar_free(g);
    free(allow), free(cand);
    return ended;
}

static void test_mask_equals_brute_force(void **state) {
    (void)state;
    walk(k_schema, 1, 12, true);
    walk("{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2}", 2, 10, true);
    walk(NULL, 3, 10, true); /* json_object */
}

static void test_walks_validate(void **state) {
    (void)state;
    int ended = 0;
    for (uint64_t seed = 0; seed < 40; seed++) ended += walk(k_schema, seed, 400, false);
    for (uint64_t seed = 0; seed < 20; seed++)
        ended += walk("{\"anyOf\":[{\"type\":\"number\"},{\"enum\":[\"x\",null]}]}", seed, 200, false);
    printf("%d of 60 walks ended (each validated)\n", ended);
    assert_true(ended >= 50); /* the walks are meant to finish: a grammar that never ends would show here */
}

/* \u escapes: any Unicode character but NUL; a surrogate pair is one character, a lone surrogate none
 * (a C-string reader such as the tool-call parser would cut the string at \u0000 or refuse it). */
static void test_unicode_escapes(void **state) {
    (void)state;
    ts_grammar *free_ = compile("{\"type\":\"string\"}"),
               *one = compile("{\"type\":\"string\",\"maxLength\":1}");
    static const char *const good[] = {
        "\"\\u0001\"",        "\"\\u001f\"",        "\"\\u0041\"",       "\"\\u00E9\"", "\"\\u0fff\"",
        "\"\\u1000\"",        "\"\\ucfff\"",        "\"\\uD7FF\"",       "\"\\ue000\"", "\"\\uFFFF\"",
        "\"\\ud83d\\ude00\"", "\"\\uDBFF\\uDFFF\"", "\"\\uD800\\uDC00\""};
    static const char *const bad[] = {"\"\\u0000\"",  "\"a\\u0000b\"",      "\"\\ud800\"",
                                      "\"\\udc00\"",  "\"\\ud83d\\u0041\"", "\"\\ude00\\ud83d\"",
                                      "\"\\ud83dx\"", "\"\\u00g0\""};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (!takes(free_, good[i]) || !takes(one, good[i])) fail_msg("refused: %s", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (takes(free_, bad[i])) fail_msg("taken: %s", bad[i]);
    assert_false(takes(one, "\"\\u0041\\u0042\"")); /* two characters */
    ts_grammar_free(free_), ts_grammar_free(one);
}

static void test_refusals(void **state) {
    (void)state;
    const char *cases[][2] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern' (at $)"},
        {"{\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"}}}", "'$ref' (at $.properties.a)"},
        {"{\"type\":\"integer\",\"minimum\":0}", "'minimum'"},
        {"{\"allOf\":[{}]}", "'allOf'"},
        {"{\"type\":\"string\",\"format\":\"date\"}", "'format'"},
        {"{\"type\":\"object\",\"required\":[\"b\"],\"properties\":{\"a\":{}}}", "names 'b'"},
        {"{\"type\":\"strin\"}", "'strin'"},
        {"[1]", "must be an object"},
        {"{\"type\":\"string\",\"maxLength\":100000}", "more than 100000 grammar rules"},
        {"{", "not valid JSON"},
        /* strings cJSON would cut short or misread (ts_json_check) */
        {"{\"const\":\"a\\u0000b\"}", "the JSON schema: 'const' contains a NUL character"},
        {"{\"properties\":{\"a\\u0000\":{}}}", "a key of 'properties' contains a NUL"},
        {"{\"enum\":[\"\\udc00\"]}", "'enum[0]' holds the lone surrogate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ts_grammar *g = NULL;
        char err[512] = "";
        assert_int_equal(ts_json_schema_grammar(cases[i][0], &g, err, sizeof err), -1);
        if (!strstr(err, cases[i][1])) fail_msg("%s: \"%s\" does not say %s", cases[i][0], err, cases[i][1]);
    }
}

static ts_grammar *gbnf(const char *text) {
    ts_grammar *g;
    char err[512];
    if (ts_gbnf_grammar(text, strlen(text), &g, err, sizeof err)) fail_msg("%s: %s", text, err);
    return g;
}

/* GBNF: llama.cpp's syntax, checked on texts, and its mask against brute force. */
static void test_gbnf(void **state) {
    (void)state;
    const char *json = "# a JSON subset\n"
                       "root   ::= object\n"
                       "object ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\n"
                       "pair   ::= string \":\" ws value ws\n"
                       "value  ::= object | string | num | (\"true\" | \"false\")\n"
                       "string ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,8} \"\\\"\"\n"
                       "num    ::= \"-\"? [0-9]+\n"
                       "ws     ::= [ \\t\\n]{0,2}\n";
    ts_grammar *g = gbnf(json);
    const char *good[] = {"{}", "{\"a\":1}", "{ \"ab\": {\"c\": true} , \"\": -12}", "{\"\xc3\xa9\":false}"};
    const char *badt[] = {"{",          "{\"a\":}", "{\"a\" :1}",     "{\"123456789\":1}",
                          "{\"a\":1,}", "{}}",      "{\"a\":\n\n\n1}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!takes(g, good[i])) fail_msg("refused: %s", good[i]);
    for (size_t i = 0; i < sizeof badt / sizeof *badt; i++)
        if (takes(g, badt[i])) fail_msg("accepted: %s", badt[i]);
    ts_grammar_free(g);
    walk_grammar(gbnf(json), "", 5, 12, true); /* fails inside when the mask differs from brute force */
    g = gbnf("root ::= \"a\" \"\\u00e9\"{2} [x-z]{1,} (\"|\" | \".\")? .");
    assert_true(takes(g, "a\xc3\xa9\xc3\xa9xz|q"));
    assert_true(takes(g, "a\xc3\xa9\xc3\xa9y\x80"));
    assert_false(takes(g, "a\xc3\xa9xz|q"));
    ts_grammar_free(g);
    const char *refused[][2] = {
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= x\nx ::= \"a\"? root", "left-recursive"},
        {"root ::= thing", "'thing'"},
        {"start ::= \"a\"", "no 'root'"},
        {"root ::= [\\u00e0-\\u00ff]", "non-ASCII"},
        {"root ::= \"a\nb ::= \"b\"", "line 2: a literal is not closed"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= \"a\"{3,1}", "repetition"},
        {"root ::= ( \"a\"", "')'"},
        {"::= \"a\"", "was expected"},
        {"root ::= \"a\"{0,60000} \"b\"{0,60000}", "more than 100000 rules"},
    };
    /* a chain of 50000 optional items compiles (not left-recursive) but is too deep to start: an
     * error, not a crash */
    const char *deep = "root ::= (\"a\"?){0,50000} \"b\"";
    ts_grammar *dg = gbnf(deep);
    ts_matcher *dm = NULL;
    char derr[256];
    assert_int_equal(ts_matcher_new(dg, g_voc, &dm, derr, sizeof derr), -1);
    assert_non_null(strstr(derr, "too deep"));
    ts_grammar_free(dg);
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char err[512] = "";
        ts_grammar *h = NULL;
        assert_int_equal(ts_gbnf_grammar(refused[i][0], strlen(refused[i][0]), &h, err, sizeof err), -1);
        if (!strstr(err, refused[i][1]))
            fail_msg("%s: \"%s\" does not say %s", refused[i][0], err, refused[i][1]);
    }
}

static void test_tool_call_grammar(void **state) {
    (void)state;
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"count\"}}]";
    ts_grammar *g;
    char err[256];
    assert_int_equal(ts_tool_call_grammar("[{\"type\":\"function\",\"function\":{\"name\":\"f\\u0000\"}}]",
                                          NULL, true, &g, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "the tools: '[0].function.name' contains a NUL"));
    assert_int_equal(ts_tool_call_grammar(tools, NULL, true, &g, err, sizeof err), 0);
    const char *one =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ur\"}}\n</tool_call>";
    const char *two =
        "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ur\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"n\": [1]}}\n</tool_call>";
    assert_true(takes(g, one));
    assert_true(takes(g, two));
    assert_false(takes(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
    assert_false(takes(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
    ts_grammar_free(g);
    assert_int_equal(ts_tool_call_grammar(tools, "count", false, &g, err, sizeof err), 0);
    assert_false(takes(g, one));
    assert_true(takes(g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {}}\n</tool_call>"));
    assert_false(takes(
        g, "<tool_call>\n{\"name\": \"count\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
           "\"count\", \"arguments\": {}}\n</tool_call>"));
    ts_grammar_free(g);
    /* what the grammar writes, the parser reads back */
    ts_toolcall_parser p;
    ts_text content = {0};
    assert_int_equal(ts_toolcall_init(&p, tools, err, sizeof err), 0);
    assert_int_equal(ts_toolcall_push(&p, two, strlen(two), &content), 0);
    assert_int_equal(ts_toolcall_finish(&p, &content), 0);
    assert_int_equal(p.n_calls, 2);
    assert_int_equal(content.n, 0);
    assert_string_equal(p.calls[1].name, "count");
    assert_string_equal(p.calls[0].arguments, "{\"city\":\"Ur\"}");
    ts_toolcall_free(&p);
    ts_text_free(&content);
    assert_int_equal(ts_tool_call_grammar(tools, "nope", false, &g, err, sizeof err), -1);
    assert_int_equal(
        ts_tool_call_grammar("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                             "{\"type\":\"string\",\"pattern\":\"x\"}}}]",
                             NULL, false, &g, err, sizeof err),
        -1);
    assert_non_null(strstr(err, "tool 'f'"));
}

static int setup(void **state) {
    (void)state;
    const char *fx = getenv("TS_FIXTURES");
    char dir[4096], path[] = "/tmp/ts_test_grammar_XXXXXX", err[512];
    snprintf(dir, sizeof dir, "%s/../../models/demo", fx ? fx : "tests/fixtures");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    int rc = !w || ts_tokenizer_write_gguf(w, dir, 4160, err, sizeof err) ||
             ts_gguf_writer_begin_data(w, path) || ts_gguf_writer_finish(w);
    ts_gguf_writer_free(w);
    if (!rc)
        rc = ts_gguf_open(path, &g_gguf, err, sizeof err) ||
             ts_tokenizer_load(g_gguf, &g_tok, err, sizeof err) ||
             ts_grammar_vocab_new(g_tok, &g_voc, err, sizeof err);
    unlink(path);
    if (rc) fprintf(stderr, "the demo tokenizer from %s: %s\n", dir, err);
    return rc ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    ts_grammar_vocab_free(g_voc);
    ts_tokenizer_free(g_tok);
    ts_gguf_close(g_gguf);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_and_refuses),
        cmocka_unit_test(test_mask_equals_brute_force),
        cmocka_unit_test(test_walks_validate),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_unicode_escapes),
        cmocka_unit_test(test_tool_call_grammar),
        cmocka_unit_test(test_gbnf),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
