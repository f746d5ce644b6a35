/* Tool-call parsing (engine/toolcall.h) on text fixtures: Qwen's JSON form and the XML form, several
 * calls, content around them, malformed blocks (kept as content), parameter types from the tools,
 * and every fixture fed whole, in every two-piece split and byte by byte (the same result). The
 * expected calls are the rule of toolcall.h applied by hand; arguments are compared as JSON values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/toolcall.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"zip\":{\"type\":"
    "\"string\"}}}}}]";

typedef struct fixture {
    const char *text, *content;
    int n_calls;
    const char *names[3], *args[3];
} fixture;

static const fixture k_fix[] = {
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     1,
     {"get_weather"},
     {"{\"city\":\"Paris\"}"}},
    {"Let me look.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
     "{}}\n</tool_call>\n<tool_call>\n{\"name\": "
     "\"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>\n",
     "Let me look.",
     2,
     {"a", "b"},
     {"{}", "{\"x\":[1,2]}"}},
    {"<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n<parameter=zip>\n10001\n</parameter>\n</function>\n</tool_call>",
     "",
     1,
     {"get_weather"},
     {"{\"city\":\"New York\",\"days\":3,\"zip\":\"10001\"}"}},
    /* an undeclared parameter: JSON when the text is JSON, else a string */
    {"<tool_call><function=f><parameter=a>\n{\"k\": true}\n</parameter><parameter=b>\nhello "
     "world\n</parameter>"
     "</function></tool_call>",
     "",
     1,
     {"f"},
     {"{\"a\":{\"k\":true},\"b\":\"hello world\"}"}},
    /* arguments given as a JSON string are passed through */
    {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
     "",
     1,
     {"f"},
     {"{\"q\": 1}"}},
    /* a block cut off by the end of the text (a stop string ate the closing tag) */
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 2}}\n", "", 1, {"f"}, {"{\"q\":2}"}},
    /* malformed blocks stay content as written */
    {"<tool_call>\nnot json\n</tool_call> after", "<tool_call>\nnot json\n</tool_call> after", 0, {0}, {0}},
    {"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", 0, {0}, {0}},
    /* a string cJSON would cut short (\u0000) or misread (\uZZZZ reads as \u0000): no call, the block
     * stays content as written (ts_json_check) */
    {"<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"a\\u0000b\"}}</tool_call>",
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"a\\u0000b\"}}</tool_call>",
     0,
     {0},
     {0}},
    {"<tool_call>{\"name\": \"f\\u0000g\"}</tool_call>",
     "<tool_call>{\"name\": \"f\\u0000g\"}</tool_call>",
     0,
     {0},
     {0}},
    {"<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"\\uZZZZ\"}}</tool_call>",
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"\\uZZZZ\"}}</tool_call>",
     0,
     {0},
     {0}},
    /* an escaped backslash before u0000 is text; an XML value holding \u0000 stays the text it is */
    {"<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"\\\\u0000\"}}</tool_call>",
     "",
     1,
     {"f"},
     {"{\"q\":\"\\\\u0000\"}"}},
    {"<tool_call><function=f><parameter=a>\n{\"k\": \"\\u0000\"}\n</parameter></function></tool_call>",
     "",
     1,
     {"f"},
     {"{\"a\":\"{\\\"k\\\": \\\"\\\\u0000\\\"}\"}"}},
    /* no blocks: all content, whitespace included */
    {"And it came to pass <tool_ca", "And it came to pass <tool_ca", 0, {0}, {0}},
    {"  text  \n", "  text  \n", 0, {0}, {0}},
};

static void run(const fixture *f, const size_t *cuts, size_t n_cuts, const char *how) {
    ts_toolcall_parser p;
    char err[128];
    assert_int_equal(ts_toolcall_init(&p, k_tools, err, sizeof err), 0);
    ts_text c = {0};
    size_t at = 0, n = strlen(f->text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        assert_int_equal(ts_toolcall_push(&p, f->text + at, end - at, &c), 0);
        at = end;
    }
    assert_int_equal(ts_toolcall_finish(&p, &c), 0);
    if (c.n != strlen(f->content) || (c.n && memcmp(c.s, f->content, c.n)))
        fail_msg("%s of \"%s\": content \"%.*s\"", how, f->text, (int)c.n, c.s ? c.s : "");
    if (p.n_calls != f->n_calls) fail_msg("%s of \"%s\": %d calls", how, f->text, p.n_calls);
    for (int i = 0; i < p.n_calls; i++) {
        assert_string_equal(p.calls[i].name, f->names[i]);
        cJSON *got = cJSON_Parse(p.calls[i].arguments), *want = cJSON_Parse(f->args[i]);
        if (!got || !cJSON_Compare(got, want, true))
            fail_msg("%s of \"%s\": arguments %s, expected %s", how, f->text, p.calls[i].arguments,
                     f->args[i]);
        cJSON_Delete(got), cJSON_Delete(want);
    }
    ts_text_free(&c);
    ts_toolcall_free(&p);
}

static void test_fixtures(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof k_fix / sizeof *k_fix; k++) {
        const fixture *f = &k_fix[k];
        size_t n = strlen(f->text), cuts[512];
        run(f, NULL, 0, "whole");
        for (size_t cut = 0; cut <= n; cut++) run(f, &cut, 1, "two pieces");
        assert_true(n < 512);
        for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
        run(f, cuts, n ? n - 1 : 0, "byte by byte");
    }
}

/* A NUL byte the model wrote inside an XML call (names and values are C strings): no call, the block
 * stays content, NUL included. */
static void test_nul_byte(void **state) {
    (void)state;
    static const char text[] =
        "<tool_call><function=f><parameter=a>\nx\0y\n</parameter></function></tool_call>";
    ts_toolcall_parser p;
    char err[128];
    assert_int_equal(ts_toolcall_init(&p, k_tools, err, sizeof err), 0);
    ts_text c = {0};
    assert_int_equal(ts_toolcall_push(&p, text, sizeof text - 1, &c), 0);
    assert_int_equal(ts_toolcall_finish(&p, &c), 0);
    assert_int_equal(p.n_calls, 0);
    assert_int_equal(c.n, sizeof text - 1);
    assert_memory_equal(c.s, text, sizeof text - 1);
    ts_text_free(&c);
    ts_toolcall_free(&p);
    assert_int_equal(ts_toolcall_init(&p, "[{\"function\":{\"name\":\"\\u0000\"}}]", err, sizeof err), -1);
    assert_non_null(strstr(err, "the tools: '[0].function.name' contains a NUL"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fixtures), cmocka_unit_test(test_nul_byte)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
