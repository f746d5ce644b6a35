/* ts_json_check (include/turbospark.h): the strings of a JSON text checked before cJSON reads them.
 *   - \u0000 is found in values and keys, with the path of the field ("messages[1].content"), and
 *     not behind an escaped backslash; a carried path may hold it and its token decodes to the
 *     whole text, NUL bytes included (the first of equal keys, as cJSON reads them);
 *   - \u escapes without four hex digits, lone surrogates and raw bytes that are not well-formed
 *     UTF-8 (overlong forms, encoded surrogates, past U+10FFFF, cut) are reported where they are;
 *   - paths quote keys that are not plain names and end in "..." when too long;
 *   - ts_json_decode gives cJSON's bytes for every string cJSON reads whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/json_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Expects one issue of this kind, key-ness and path in s (a C string). */
static void issue(const char *s, ts_json_issue_kind kind, bool in_key, const char *path) {
    ts_json_issue is;
    if (ts_json_check(s, strlen(s), NULL, 0, &is) != 1) fail_msg("no issue found in %s", s);
    if (is.kind != kind || is.in_key != in_key || strcmp(is.path, path) != 0)
        fail_msg("%s\n  -> kind %d key %d path '%s'; expected kind %d key %d path '%s'", s, is.kind,
                 is.in_key, is.path, kind, in_key, path);
    assert_true(is.at < strlen(s));
}

static void fine(const char *s) {
    ts_json_issue is;
    if (ts_json_check(s, strlen(s), NULL, 0, &is) != 0) fail_msg("%s: kind %d at '%s'", s, is.kind, is.path);
}

static void test_nul(void **state) {
    (void)state;
    issue("{\"prompt\":\"ab\\u0000cd\"}", TS_JSON_NUL, false, "prompt");
    issue(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"a\\u0000\"}]}",
        TS_JSON_NUL, false, "messages[1].content");
    issue("{\"m\":[{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"\\u0000\"}]"
          "}]}",
          TS_JSON_NUL, false, "m[0].content[1].text");
    issue("{\"stream\\u0000x\":true}", TS_JSON_NUL, true, "");
    issue("{\"a\":{\"b\":1,\"c\\u0000\":2}}", TS_JSON_NUL, true, "a");
    issue("[[1,\"a\"],[\"\\u0000\"]]", TS_JSON_NUL, false, "[1][0]");
    issue("\"\\u0000\"", TS_JSON_NUL, false, "");
    issue("{\"logit_bias\":{\"50256\\u0000\":-100}}", TS_JSON_NUL, true, "logit_bias");
    issue("{\"a\":[{},[],{\"b\":[1,{\"c\":\"\\u0000\"}]}]}", TS_JSON_NUL, false, "a[2].b[1].c");
    static const char raw[] = "{\"a\":\"x\0y\"}"; /* a raw NUL byte cuts cJSON's string as well */
    ts_json_issue is0;
    assert_int_equal(ts_json_check(raw, sizeof raw - 1, NULL, 0, &is0), 1);
    assert_int_equal(is0.kind, TS_JSON_NUL);
    assert_int_equal(is0.at, 7);
    fine("{\"a\":\"\\\\u0000\"}");                             /* an escaped backslash, then the text u0000 */
    fine("{\"a\":\"\\\\\\\\u0000\"}");                         /* two of them */
    issue("{\"a\":\"\\\\\\u0000\"}", TS_JSON_NUL, false, "a"); /* a backslash, then \u0000 */
    fine("{\"a\":\"\\u0100\\u0001\",\"b\":[1,2,{\"c\":null}],\"d\":\"{\\\"e\\\":1}\"}");
    /* the message names the field */
    ts_json_issue is;
    const char *s = "{\"messages\":[{},{},{\"content\":\"abc\\u0000def\"}]}";
    assert_int_equal(ts_json_check(s, strlen(s), NULL, 0, &is), 1);
    char msg[512];
    assert_string_equal(
        ts_json_issue_text(&is, "this server", msg, sizeof msg),
        "'messages[2].content' contains a NUL character (\\u0000), which this server cannot carry");
    assert_int_equal(is.at, (size_t)(strstr(s, "\\u0000") - s));
}

static void test_carry(void **state) {
    (void)state;
    ts_json_issue is;
    ts_json_carry c[2] = {{.path = "prompt"}, {.path = "prompt[0]"}};
    const char *s = "{\"max_tokens\":3,\"prompt\":\"ab\\u0000c\\u0000\\n\"}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 0);
    assert_non_null(c[0].tok);
    assert_true(c[0].nul);
    assert_null(c[1].tok);
    ts_text t = {0};
    assert_int_equal(ts_json_decode(c[0].tok, c[0].n, &t), 0);
    assert_int_equal(t.n, 6);
    assert_memory_equal(t.s, "ab\0c\0\n", 6);
    ts_text_free(&t);
    s = "{\"prompt\":[\"x\\u0000y\"]}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 0);
    assert_null(c[0].tok);
    assert_true(c[1].nul && c[1].n == 8);
    /* the first of equal keys, the one cJSON_GetObjectItemCaseSensitive returns */
    s = "{\"prompt\":\"x\",\"prompt\":\"y\\u0000\"}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 0);
    assert_false(c[0].nul);
    assert_int_equal(c[0].n, 1);
    /* a key is matched by what it decodes to */
    s = "{\"pr\\u006fmpt\":\"a\\u0000\"}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 0);
    assert_true(c[0].nul);
    /* a key that only looks like a carried path is not one; nor is a nested "prompt" */
    s = "{\"prompt[0]\":\"a\\u0000\"}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 1);
    assert_string_equal(is.path, "[\"prompt[0]\"]");
    s = "{\"x\":{\"prompt\":\"a\\u0000\"}}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 1);
    assert_string_equal(is.path, "x.prompt");
    /* a key is never carried */
    ts_json_carry k = {.path = ""};
    s = "{\"a\\u0000\":1}";
    assert_int_equal(ts_json_check(s, strlen(s), &k, 1, &is), 1);
    assert_true(is.in_key);
    /* other problems still count in a carried string */
    s = "{\"prompt\":\"a\\u0000\\ud800\"}";
    assert_int_equal(ts_json_check(s, strlen(s), c, 2, &is), 1);
    assert_int_equal(is.kind, TS_JSON_SURROGATE);
}

static void test_escapes_and_utf8(void **state) {
    (void)state;
    issue("{\"a\":\"\\uZZZZ\"}", TS_JSON_BAD_ESCAPE, false, "a"); /* cJSON reads it as \u0000 */
    issue("{\"a\":\"\\u12G4\"}", TS_JSON_BAD_ESCAPE, false, "a");
    issue("{\"a\":\"\\u12\"}", TS_JSON_BAD_ESCAPE, false, "a");
    issue("{\"k\\u00\":1}", TS_JSON_BAD_ESCAPE, true, "");
    issue("{\"a\":{\"\\x\":1}}", TS_JSON_BAD_ESCAPE, true, "a"); /* an escape JSON does not have */
    issue("{\"a\":\"\\\xaf\"}", TS_JSON_BAD_ESCAPE, false, "a");
    issue("{\"a\":\"x\\ud800\"}", TS_JSON_SURROGATE, false, "a");
    issue("{\"a\":\"\\udc00x\"}", TS_JSON_SURROGATE, false, "a");
    issue("{\"a\":\"\\ud800\\u0041\"}", TS_JSON_SURROGATE, false, "a");
    issue("{\"a\":\"\\ud800\\ud800\"}", TS_JSON_SURROGATE, false, "a");
    issue("{\"a\":\"\\uDBFFx\\uDC00\"}", TS_JSON_SURROGATE, false, "a");
    fine("{\"a\":\"\\ud83d\\ude00 \\uD83D\\uDE00 \\uffff \\u00e9\"}");
    issue("{\"a\":\"\xc0\x80\"}", TS_JSON_BAD_UTF8, false, "a"); /* overlong NUL ("modified UTF-8") */
    issue("{\"a\":\"\xc1\xbf\"}", TS_JSON_BAD_UTF8, false, "a");
    issue("{\"a\":\"\xe0\x80\x80\"}", TS_JSON_BAD_UTF8, false, "a");
    issue("{\"a\":\"\xf0\x80\x80\x80\"}", TS_JSON_BAD_UTF8, false, "a");
    issue("{\"a\":\"\xed\xa0\x80\"}", TS_JSON_BAD_UTF8, false, "a");     /* an encoded surrogate */
    issue("{\"a\":\"\xf4\x90\x80\x80\"}", TS_JSON_BAD_UTF8, false, "a"); /* past U+10FFFF */
    issue("{\"a\":\"\xff\"}", TS_JSON_BAD_UTF8, false, "a");
    issue("{\"a\":\"x\xc3\"}", TS_JSON_BAD_UTF8, false, "a"); /* cut at the end of the string */
    issue("{\"a\":\"\xe6\x97\"}", TS_JSON_BAD_UTF8, false, "a");
    issue("{\"\xe9\":1}", TS_JSON_BAD_UTF8, true, "");
    fine("{\"a\":\"\xc3\xa9\xe6\x97\xa5\xf0\x9f\x99\x82\xef\xbf\xbd\xf4\x8f\xbf\xbf\"}");
    fine("\xef\xbb\xbf{\"a\":1}"); /* a byte order mark outside strings is cJSON's business */
    /* the message of each kind */
    ts_json_issue is;
    char msg[512];
    const char *s = "{\"stop\":[\"a\",\"\\ud800\"]}";
    assert_int_equal(ts_json_check(s, strlen(s), NULL, 0, &is), 1);
    assert_non_null(
        strstr(ts_json_issue_text(&is, "x", msg, sizeof msg), "'stop[1]' holds the lone surrogate"));
    assert_non_null(strstr(msg, "\\ud800"));
    s = "{\"a\":{\"\xc0\xaf\":1}}";
    assert_int_equal(ts_json_check(s, strlen(s), NULL, 0, &is), 1);
    assert_non_null(strstr(ts_json_issue_text(&is, "x", msg, sizeof msg), "a key of 'a' is not valid UTF-8"));
}

static void test_paths_and_limits(void **state) {
    (void)state;
    issue("{\"a.b\":{\"c\":\"\\u0000\"}}", TS_JSON_NUL, false, "[\"a.b\"].c");
    issue("{\"\":[\"\\u0000\"]}", TS_JSON_NUL, false, "[\"\"][0]");
    issue("{\"x\":{\"\\n\":\"\\u0000\"}}", TS_JSON_NUL, false, "x[\"\n\"]");
    /* brackets and quotes inside strings are text */
    issue("{\"a\":\"[{,:}]\\\"\",\"b\":[\"]\",\"\\u0000\"]}", TS_JSON_NUL, false, "b[1]");
    /* a long path ends in "..." and stays within the buffer */
    char s[4096];
    size_t k = 0;
    for (int i = 0; i < 40; i++) k += (size_t)snprintf(s + k, sizeof s - k, "{\"key_number_%02d\":", i);
    k += (size_t)snprintf(s + k, sizeof s - k, "\"\\u0000\"");
    for (int i = 0; i < 40; i++) s[k++] = '}';
    s[k] = 0;
    ts_json_issue is;
    assert_int_equal(ts_json_check(s, k, NULL, 0, &is), 1);
    assert_int_equal(is.kind, TS_JSON_NUL);
    assert_true(strlen(is.path) < sizeof is.path);
    assert_memory_equal(is.path, "key_number_00.key_number_01.", 28);
    assert_string_equal(is.path + strlen(is.path) - 3, "...");
    /* deep arrays: paths past 64 levels are "...", past 1,024 the scan leaves the text to cJSON */
    k = 0;
    for (int i = 0; i < 100; i++) s[k++] = '[';
    k += (size_t)snprintf(s + k, sizeof s - k, "\"\\u0000\"");
    for (int i = 0; i < 100; i++) s[k++] = ']';
    assert_int_equal(ts_json_check(s, k, NULL, 0, &is), 1);
    assert_string_equal(is.path + strlen(is.path) - 3, "...");
    memset(s, '[', 2000);
    memcpy(s + 2000, "\"\\u0000\"", 8);
    assert_int_equal(ts_json_check(s, 2008, NULL, 0, &is), 0);
    /* not closed, or not JSON at all: nothing to report */
    fine("{\"a\":\"\\u0000");
    fine("{\"a\":\"x\\");
    fine("");
    fine("]]}}:,,");
    /* a second top-level value (not JSON) is at the root, whatever came before */
    ts_json_carry c = {.path = "prompt"};
    const char *two = "{\"prompt\":1} \"a\\u0000\"";
    assert_int_equal(ts_json_check(two, strlen(two), &c, 1, &is), 1);
    assert_string_equal(is.path, "");
}

/* ts_json_decode against cJSON, on random strings of escapes and characters. */
static void test_decode(void **state) {
    (void)state;
    static const char *const pieces[] = {"a",
                                         "\\n",
                                         "\\t",
                                         "\\\"",
                                         "\\\\",
                                         "\\/",
                                         "\\b",
                                         "\\f",
                                         "\\r",
                                         "\\u0041",
                                         "\\u00e9",
                                         "\\u20AC",
                                         "\\uffff",
                                         "\xc3\xa9",
                                         "\xf0\x9f\x99\x82",
                                         "\\ud83d\\ude00",
                                         " ",
                                         "\\u0000",
                                         "\\u0001",
                                         "\x01"};
    const size_t np = sizeof pieces / sizeof *pieces;
    uint64_t rng = 12345;
    for (int it = 0; it < 3000; it++) {
        char text[1024] = "\"";
        size_t k = 1;
        bool nul = false;
        int len = (int)(rng % 12);
        for (int i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            const char *p = pieces[rng % np];
            nul |= !strcmp(p, "\\u0000");
            k += (size_t)snprintf(text + k, sizeof text - k, "%s", p);
        }
        text[k++] = '"', text[k] = 0;
        ts_json_carry c = {.path = ""};
        ts_json_issue is;
        assert_int_equal(ts_json_check(text, k, &c, 1, &is), 0);
        assert_int_equal(c.nul, nul);
        ts_text t = {0};
        assert_int_equal(ts_json_decode(c.tok, c.n, &t), 0);
        cJSON *j = cJSON_ParseWithLength(text, k);
        assert_non_null(j);
        if (!nul) assert_int_equal(t.n, strlen(j->valuestring));
        assert_string_equal(t.s, j->valuestring); /* up to the first NUL: cJSON's */
        if (nul) assert_true(t.n > strlen(j->valuestring));
        cJSON_Delete(j);
        ts_text_free(&t);
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    }
    ts_text t = {0};
    assert_int_equal(ts_json_decode("", 0, &t), 0); /* empty: an empty C string */
    assert_non_null(t.s);
    assert_int_equal(t.n, 0);
    ts_text_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nul),
        cmocka_unit_test(test_carry),
        cmocka_unit_test(test_escapes_and_utf8),
        cmocka_unit_test(test_paths_and_limits),
        cmocka_unit_test(test_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
