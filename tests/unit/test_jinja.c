/* The Jinja engine (tokenizer/jinja.c) against transformers' renderer: every case of
 * tests/fixtures/templates/cases.json (made by tools/fixtures/make_template_cases.py) byte for byte,
 * including the cases where the reference raised (then the engine must fail too). Then the error
 * paths: templates outside the subset, broken templates, runaway loops and recursion, and Jinja2's
 * Undefined semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer/jinja.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_files.h"

static const char *fixtures(void) {
    return getenv("TS_FIXTURES") ? getenv("TS_FIXTURES") : "tests/fixtures";
}

/* Renders src with the variables in JSON text vars; returns 0 or -1 (err filled). */
static int render(const char *src, const char *vars, ts_text *out, char *err, size_t errlen) {
    ts_jinja *t;
    if (ts_jinja_parse(src, strlen(src), &t, err, errlen)) return -1;
    cJSON *v = cJSON_Parse(vars ? vars : "{}");
    assert_non_null(v);
    int rc = ts_jinja_render(t, v, out, err, errlen);
    cJSON_Delete(v);
    ts_jinja_free(t);
    return rc;
}

static void expect_text(const char *src, const char *vars, const char *want) {
    ts_text out = {0};
    char err[512] = "";
    int rc = render(src, vars, &out, err, sizeof err);
    if (rc) fprintf(stderr, "template %s failed: %s\n", src, err);
    assert_int_equal(rc, 0);
    assert_string_equal(out.n ? out.s : "", want);
    ts_text_free(&out);
}

static void expect_error(const char *src, const char *vars, const char *needle) {
    ts_text out = {0};
    char err[512] = "";
    int rc = render(src, vars, &out, err, sizeof err);
    if (rc == 0 || !strstr(err, needle))
        fprintf(stderr, "template %.80s: rc %d, error '%s', wanted '%s'\n", src, rc, err, needle);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, needle));
    assert_int_equal(out.n, 0); /* nothing is appended on failure */
    ts_text_free(&out);
}

static void test_fixture_cases(void **state) {
    (void)state;
    char path[4096];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/templates/cases.json", fixtures());
    char *text = ts_test_slurp(path, &len);
    assert_non_null(text);
    cJSON *d = cJSON_Parse(text);
    free(text);
    assert_non_null(d);
    const cJSON *convs = cJSON_GetObjectItem(d, "conversations"), *c;
    int n_ok = 0, n_err = 0, n_bad = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(d, "cases")) {
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *cname = cJSON_GetObjectItem(c, "conversation")->valuestring;
        snprintf(path, sizeof path, "%s/templates/%s.jinja", fixtures(), tname);
        char *src = ts_test_slurp(path, &len);
        assert_non_null(src);
        /* the variables: the conversation's members, then the case's options */
        cJSON *vars = cJSON_CreateObject(), *m;
        const cJSON *conv = cJSON_GetObjectItem(convs, cname);
        cJSON_ArrayForEach(m, conv) cJSON_AddItemToObject(vars, m->string, cJSON_Duplicate(m, 1));
        if (!cJSON_GetObjectItem(vars, "tools")) cJSON_AddNullToObject(vars, "tools");
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(c, "options"))
            cJSON_AddItemToObject(vars, m->string, cJSON_Duplicate(m, 1));
        ts_jinja *t;
        char err[512] = "";
        ts_text out = {0};
        int rc = ts_jinja_parse(src, len, &t, err, sizeof err);
        if (!rc) rc = ts_jinja_render(t, vars, &out, err, sizeof err), ts_jinja_free(t);
        const cJSON *want = cJSON_GetObjectItem(c, "expected");
        char *opts = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "options"));
        if (want) {
            if (rc || out.n != strlen(want->valuestring) ||
                (out.n && memcmp(out.s, want->valuestring, out.n))) {
                n_bad++;
                fprintf(stderr, "case %s / %s %s: %s\n--- got ---\n%.*s\n--- want ---\n%s\n", tname, cname,
                        opts, rc ? err : "differs", (int)out.n, out.s ? out.s : "", want->valuestring);
            } else
                n_ok++;
        } else {
            if (!rc) {
                n_bad++;
                fprintf(stderr, "case %s / %s %s: rendered, but the reference raised %s\n", tname, cname,
                        opts, cJSON_GetObjectItem(c, "error")->valuestring);
            } else
                n_err++;
        }
        free(opts);
        ts_text_free(&out);
        cJSON_Delete(vars);
        free(src);
    }
    cJSON_Delete(d);
    fprintf(stderr, "%d renderings equal, %d refusals equal, %d differ\n", n_ok, n_err, n_bad);
    assert_int_equal(n_bad, 0);
    assert_true(n_ok > 150 && n_err > 10);
}

static void test_unsupported(void **state) {
    (void)state;
    expect_error("{% extends 'base.html' %}", NULL, "{% extends %} is not supported");
    expect_error("{% include 'x' %}", NULL, "{% include %} is not supported");
    expect_error("{{ x | wordcount }}", NULL, "the filter 'wordcount' is not supported");
    expect_error("{{ x is divisible }}", NULL, "the test 'divisible' is not supported");
    expect_error("{% for x in y recursive %}{% endfor %}", NULL, "recursive for loops are not supported");
    expect_error("{% set x %}a{% endset %}", NULL, "block 'set'");
    expect_error("{{ 'a'.zfill(3) }}", NULL, "'str object' has no attribute 'zfill'");
    expect_error("{{ '%s' % 1 }}", NULL, "string formatting with '%' is not supported");
    expect_error("{% for x in [1] %}{{ loop.cycle('a') }}{% endfor %}", NULL, "loop.cycle is not supported");
}

static void test_broken(void **state) {
    (void)state;
    expect_error("{% if x %}open", NULL, "{% endif %} is missing");
    expect_error("{% for x in y %}", NULL, "{% endfor %} is missing");
    expect_error("{% macro m() %}", NULL, "{% endmacro %} is missing");
    expect_error("text {% endif %}", NULL, "{% endif %} does not close any open block");
    expect_error("{{ 'unclosed }}", NULL, "string literal is not closed");
    expect_error("{{ x ", NULL, "found the end of the template (a tag is not closed)");
    expect_error("{{ }}", NULL, "an expression is missing before the end of the tag");
    expect_error("{{ (1 + }}", NULL, "unexpected");
    expect_error("{# never closed", NULL, "comment {# is not closed");
    expect_error("{{ 1 $ 2 }}", NULL, "unexpected character '$'");
    expect_error("{% set = 1 %}", NULL, "expected a variable name after 'set'");
    expect_error("line1\nline2\n{{ 'a' + 1 }}", NULL,
                 "line 3: unsupported operand types for +: 'str' and 'int'");
    char deep[4096] = "{{ ";
    for (int i = 0; i < 1000; i++) strcat(deep, "(");
    expect_error(deep, NULL, "nests blocks or expressions more than");
}

static void test_bounds(void **state) {
    (void)state;
    expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "more than 2000000 loop iterations");
    expect_error("{{ range(1000000) }}", NULL, "range() is limited to 100000 items");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL,
                 "macro calls nest more than 32 deep");
    expect_error(
        "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s | length }}",
        NULL, "MiB");
    expect_error("{{ 'x' * 100000000000 }}", NULL, "a repetition would exceed");
    expect_error("{{ raise_exception('No user query found.') }}", NULL,
                 "the template raised an error: No user query found.");
}

static void test_undefined(void **state) {
    (void)state;
    /* Jinja2's default Undefined: prints as "", is falsy, iterates as empty, has length 0 ... */
    expect_text(
        "[{{ nope }}][{{ 'y' if nope else 'n' }}][{% for x in nope %}x{% endfor %}][{{ nope | length }}]"
        "[{{ nope is defined }}][{{ nope ~ 'a' }}][{{ nope == nope }}][{{ 'a' in nope }}][{{ nope | trim }}]",
        NULL, "[][n][][0][False][a][True][False][]");
    expect_text("{{ d.missing }}|{{ d.missing is defined }}|{{ l[5] is defined }}", "{\"d\": {}, \"l\": [1]}",
                "|False|False");
    /* ... but looking into it, adding to it or calling it fails with its own sentence */
    expect_error("{{ nope.attr }}", NULL, "'nope' is undefined");
    expect_error("{{ d.missing.deeper }}", "{\"d\": {}}", "'dict object' has no attribute 'missing'");
    expect_error("{{ nope + 1 }}", NULL, "'nope' is undefined");
    expect_error("{{ nope() }}", NULL, "'nope' is undefined");
    expect_error("{{ nope | tojson }}", NULL, "not JSON serializable");
    expect_error("{{ nope < 1 }}", NULL, "'nope' is undefined");
    expect_error("{{ none.attr.more }}", NULL, "'NoneType object' has no attribute 'attr'");
    expect_error("{% for x in 3 %}{% endfor %}", NULL, "'int' object is not iterable");
    expect_error("{{ 'a' in none }}", NULL, "argument of type 'NoneType' is not iterable");
    expect_error("{% set x = 1 %}{% set x.y = 2 %}", NULL, "only a namespace() can have attributes assigned");
}

static void test_variables(void **state) {
    (void)state;
    char err[256];
    ts_text out = {0};
    ts_jinja *t;
    assert_int_equal(ts_jinja_parse("x", 1, &t, err, sizeof err), 0);
    cJSON *arr = cJSON_CreateArray();
    assert_int_equal(ts_jinja_render(t, arr, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "must be a JSON object"));
    cJSON_Delete(arr);
    assert_int_equal(ts_jinja_render(t, NULL, &out, err, sizeof err), 0); /* no variables at all */
    assert_string_equal(out.s, "x");
    ts_jinja_free(t);
    ts_text_free(&out);
    assert_int_equal(ts_jinja_parse("a\0b", 3, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL byte"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_cases), cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_broken),        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_undefined),     cmocka_unit_test(test_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
