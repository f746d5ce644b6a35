/* The qwen3 chat template with tools, tool calls and tool results (tokenizer/chat.c) against Qwen3's
 * official template rendered by Jinja2 as transformers sets it up (tests/fixtures/chat/tools.json,
 * made by tools/fixtures/make_chat_tools.py): every case byte for byte. Tools are written with
 * ts_chat_tojson, as the server writes them; the chatml kind refuses tools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer/chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_files.h"

static const char *str_or_empty(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void test_fixture(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/chat/tools.json",
             getenv("TS_FIXTURES") ? getenv("TS_FIXTURES") : "tests/fixtures");
    char *text = ts_test_slurp(path, NULL);
    assert_non_null(text);
    cJSON *d = cJSON_Parse(text);
    free(text);
    assert_non_null(d);
    const cJSON *convs = cJSON_GetObjectItem(d, "conversations"), *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(d, "cases")) {
        const cJSON *conv = cJSON_GetObjectItem(convs, cJSON_GetObjectItem(c, "conversation")->valuestring);
        const cJSON *ms = cJSON_GetObjectItem(conv, "messages"), *tools = cJSON_GetObjectItem(conv, "tools");
        ts_chat_msg msgs[16];
        ts_chat_tool_call calls[16][4];
        ts_text tool_text[8] = {{0}};
        const char *tool_ptr[8];
        size_t n = 0, nt = 0;
        const cJSON *m, *t;
        cJSON_ArrayForEach(m, ms) {
            assert_true(n < 16);
            ts_chat_msg *cm = &msgs[n];
            memset(cm, 0, sizeof *cm);
            cm->role = str_or_empty(m, "role");
            cm->content = str_or_empty(m, "content");
            const cJSON *rc = cJSON_GetObjectItem(m, "reasoning_content");
            cm->reasoning_content = cJSON_IsString(rc) ? rc->valuestring : NULL;
            const cJSON *tc;
            cJSON_ArrayForEach(tc, cJSON_GetObjectItem(m, "tool_calls")) {
                const cJSON *f = cJSON_GetObjectItem(tc, "function");
                calls[n][cm->n_tool_calls++] =
                    (ts_chat_tool_call){str_or_empty(f, "name"), str_or_empty(f, "arguments")};
            }
            cm->tool_calls = calls[n];
            n++;
        }
        cJSON_ArrayForEach(t, tools) {
            assert_int_equal(ts_chat_tojson(t, &tool_text[nt]), 0);
            tool_ptr[nt] = tool_text[nt].s;
            nt++;
        }
        const cJSON *think = cJSON_GetObjectItem(c, "enable_thinking");
        ts_chat_opts o = {.add_generation_prompt =
                              cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                          .enable_thinking = cJSON_IsBool(think) ? cJSON_IsTrue(think) : -1,
                          .tools = tool_ptr,
                          .n_tools = nt};
        ts_text out = {0};
        char err[256];
        assert_int_equal(ts_chat_render(TS_CHAT_QWEN3, msgs, n, &o, &out, err, sizeof err), 0);
        const char *want = cJSON_GetObjectItem(c, "expected")->valuestring;
        if (out.n != strlen(want) || memcmp(out.s, want, out.n))
            fail_msg("case %d (%s):\n--- got\n%.*s\n--- expected\n%s", n_cases,
                     cJSON_GetObjectItem(c, "conversation")->valuestring, (int)out.n, out.s, want);
        if (nt) { /* chatml cannot list tools */
            ts_text x = {0};
            assert_int_equal(ts_chat_render(TS_CHAT_CHATML, msgs, n, &o, &x, err, sizeof err), -1);
            assert_non_null(strstr(err, "qwen3"));
            ts_text_free(&x);
        }
        ts_text_free(&out);
        for (size_t i = 0; i < nt; i++) ts_text_free(&tool_text[i]);
        n_cases++;
    }
    assert_int_equal(n_cases, 28);
    cJSON_Delete(d);
}

static void test_tojson(void **state) {
    (void)state;
    /* json.dumps({"a": [1, 2.5, -0.1, 1e+300, true, null], "é\"\n\u0001": {}}, ensure_ascii=False) */
    cJSON *v = cJSON_Parse("{\"a\":[1,2.5,-0.1,1e300,true,null],\"\xc3\xa9\\\"\\n\\u0001\":{}}");
    ts_text t = {0};
    assert_int_equal(ts_chat_tojson(v, &t), 0);
    assert_string_equal(t.s, "{\"a\": [1, 2.5, -0.1, 1e+300, true, null], \"\xc3\xa9\\\"\\n\\u0001\": {}}");
    ts_text_free(&t);
    cJSON_Delete(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fixture), cmocka_unit_test(test_tojson)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
