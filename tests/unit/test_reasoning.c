/* The <think> splitter (engine/reasoning.h) on text fixtures: with and without the opening tag in
 * the prompt, tags and newlines split at every byte boundary (streaming), unfinished thoughts, text
 * that only looks like a tag. Every fixture's split is the rule of reasoning.h applied by hand; each
 * is also fed in every two-piece split and byte by byte, which must give the same result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/reasoning.h"

#include <stdio.h>
#include <string.h>

typedef struct fixture {
    bool opened;
    const char *text, *reasoning, *content;
} fixture;

static const fixture k_fix[] = {
    /* the thinking template opened the block: no opening tag in the output */
    {true, "\nLet me count.\n</think>\n\nTwelve tribes.", "Let me count.", "Twelve tribes."},
    {true, "a</think>b", "a", "b"},
    {true, "one\n\ntwo\n\n</think>\n\n\nthree\n", "one\n\ntwo", "three\n"},
    {true, "still thinking when the budget ran out\n", "still thinking when the budget ran out", ""},
    {true, "x </thin y </think>z", "x </thin y ", "z"}, /* newlines only are trimmed */
    {true, "</think>only an answer", "", "only an answer"},
    {true, "a\n</think>\n\n<think>not again</think>", "a", "<think>not again</think>"},
    /* the output opens the block itself */
    {false, "<think>\nhmm\n</think>\n\nAnswer.", "hmm", "Answer."},
    {false, "\n <think>hmm</think>Answer.", "hmm", "Answer."},
    {false, "<think>\n\n</think>\n\nAnswer.", "", "Answer."},
    {false, "<think>unfinished", "unfinished", ""},
    /* no block: everything is content, as written */
    {false, "And it came to pass.", "", "And it came to pass."},
    {false, "  <thinking>", "", "  <thinking>"},
    {false, "<thi", "", "<thi"},
    {false, "a <think>b</think>c", "", "a <think>b</think>c"},
    {false, "", "", ""},
    {true, "", "", ""},
};

static void run(const fixture *f, const size_t *cuts, size_t n_cuts, ts_text *r, ts_text *c) {
    ts_think_split t;
    ts_think_init(&t, f->opened);
    size_t at = 0, n = strlen(f->text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        assert_int_equal(ts_think_push(&t, f->text + at, end - at, r, c), 0);
        at = end;
    }
    assert_int_equal(ts_think_finish(&t, r, c), 0);
    ts_think_free(&t);
}

static void expect(const fixture *f, const ts_text *r, const ts_text *c, const char *how) {
    if (r->n != strlen(f->reasoning) || (r->n && memcmp(r->s, f->reasoning, r->n)) ||
        c->n != strlen(f->content) || (c->n && memcmp(c->s, f->content, c->n)))
        fail_msg("%s of \"%s\" (opened %d): reasoning \"%.*s\" content \"%.*s\"", how, f->text, f->opened,
                 (int)r->n, r->s ? r->s : "", (int)c->n, c->s ? c->s : "");
}

static void test_fixtures_whole_and_split(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof k_fix / sizeof *k_fix; k++) {
        const fixture *f = &k_fix[k];
        size_t n = strlen(f->text);
        ts_text r = {0}, c = {0};
        run(f, NULL, 0, &r, &c);
        expect(f, &r, &c, "whole");
        for (size_t cut = 0; cut <= n; cut++) { /* every two-piece split */
            r.n = c.n = 0;
            run(f, &cut, 1, &r, &c);
            expect(f, &r, &c, "two pieces");
        }
        size_t cuts[256];
        assert_true(n < 256);
        for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
        r.n = c.n = 0;
        run(f, cuts, n ? n - 1 : 0, &r, &c);
        expect(f, &r, &c, "byte by byte");
        ts_text_free(&r), ts_text_free(&c);
    }
}

/* What is released while streaming is final: a prefix of the whole result at every step. */
static void test_released_bytes_are_final(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof k_fix / sizeof *k_fix; k++) {
        const fixture *f = &k_fix[k];
        ts_think_split t;
        ts_think_init(&t, f->opened);
        ts_text r = {0}, c = {0};
        for (const char *p = f->text; *p; p++) {
            assert_int_equal(ts_think_push(&t, p, 1, &r, &c), 0);
            assert_true(r.n <= strlen(f->reasoning) && (!r.n || !memcmp(r.s, f->reasoning, r.n)));
            assert_true(c.n <= strlen(f->content) && (!c.n || !memcmp(c.s, f->content, c.n)));
        }
        ts_think_free(&t);
        ts_text_free(&r), ts_text_free(&c);
    }
}

static void test_prompt_opens_think(void **state) {
    (void)state;
    const char *open = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n";
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *history =
        "<|im_start|>assistant\n<think>\nx\n</think>\n\ny<|im_end|>\n<|im_start|>assistant\n";
    assert_true(ts_prompt_opens_think(open, strlen(open)));
    assert_false(ts_prompt_opens_think(closed, strlen(closed)));
    assert_false(ts_prompt_opens_think(history, strlen(history)));
    assert_false(ts_prompt_opens_think("", 0));
    ts_reasoning_format fm;
    char err[128];
    assert_int_equal(ts_reasoning_format_from_name("deepseek", &fm, err, sizeof err), 0);
    assert_int_equal(fm, TS_REASONING_DEEPSEEK);
    assert_int_equal(ts_reasoning_format_from_name("none", &fm, err, sizeof err), 0);
    assert_int_equal(fm, TS_REASONING_NONE);
    assert_int_equal(ts_reasoning_format_from_name("qwen", &fm, err, sizeof err), -1);
    assert_non_null(strstr(err, "none or deepseek"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_whole_and_split),
        cmocka_unit_test(test_released_bytes_are_final),
        cmocka_unit_test(test_prompt_opens_think),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
