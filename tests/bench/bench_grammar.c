/* Grammar mask time at the released vocabulary's size (a benchmark, not a test: nothing asserted).
 *
 *   build/tests/bench_grammar [KJV.txt]     (default: the words of tools/demo/kjv.txt.gz, unpacked)
 *
 * The released tokenizer is not on the CI machines, so this builds a synthetic byte-level vocabulary
 * of 248,320 tokens shaped like Qwen's: 256 bytes, the corpus's words with and without a leading
 * space and capitalised, 100,000 CJK strings of 1-4 characters, runs of blanks and newlines, JSON
 * punctuation with quotes and brackets, and random letter strings to fill up. It then times
 * ts_matcher_mask (median of 200) in the states a JSON answer passes through. Compare with a decode
 * step: 7.75 ms at batch 1 on the H200 (129 tokens/s, docs/BENCHMARKS.md); the goal is <= 10 %. */
#include "engine/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define V 248320

static char *g_tok[V];
static uint32_t g_len[V];
static bool g_eog[V];
static int g_n;

static uint64_t g_x = 88172645463325252ull;
static uint64_t rnd(void) {
    g_x ^= g_x << 13, g_x ^= g_x >> 7, g_x ^= g_x << 17;
    return g_x;
}

static void add(const char *s, size_t n) {
    if (g_n >= V || !n) return;
    g_tok[g_n] = malloc(n), memcpy(g_tok[g_n], s, n), g_len[g_n++] = (uint32_t)n;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void build_vocab(const char *corpus) {
    char b[64];
    for (int i = 0; i < 256; i++) b[0] = (char)i, add(b, 1);
    FILE *f = corpus ? fopen(corpus, "r") : popen("gzip -dc tools/demo/kjv.txt.gz", "r");
    char word[48];
    int wn = 0, c, words = 0;
    while (f && (c = fgetc(f)) != EOF && g_n < 60000) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            if (wn < 40) word[wn++] = (char)c;
            continue;
        }
        if (wn >= 2) { /* the word, " word", " Word" (duplicates are fine: a real vocabulary has none, the
                          trie merges them) */
            b[0] = ' ', memcpy(b + 1, word, (size_t)wn);
            add(word, (size_t)wn), add(b, (size_t)wn + 1);
            b[1] = (char)(b[1] >= 'a' ? b[1] - 32 : b[1]), add(b, (size_t)wn + 1), words++;
        }
        wn = 0;
    }
    if (f) corpus ? fclose(f) : pclose(f);
    for (int i = 0; i < 100000; i++) { /* CJK */
        int k = 1 + (int)(rnd() % 4), n = 0;
        for (int j = 0; j < k; j++) {
            unsigned cp = 0x4E00 + (unsigned)(rnd() % 0x5200);
            b[n++] = (char)(0xE0 | (cp >> 12)), b[n++] = (char)(0x80 | ((cp >> 6) & 63)),
            b[n++] = (char)(0x80 | (cp & 63));
        }
        add(b, (size_t)n);
    }
    for (int i = 1; i <= 64; i++) { /* blanks, newlines + indent */
        memset(b, ' ', (size_t)i), add(b, (size_t)i);
        b[0] = '\n', add(b, (size_t)i);
    }
    static const char punct[] = " \n\t\"{}[],:.\\";
    for (int i = 0; i < 12000; i++) {
        int k = 2 + (int)(rnd() % 3);
        for (int j = 0; j < k; j++) b[j] = punct[rnd() % (sizeof punct - 1)];
        add(b, (size_t)k);
    }
    while (g_n < V - 20) { /* letters */
        int k = 2 + (int)(rnd() % 11), n = 0;
        if (rnd() & 1) b[n++] = ' ';
        for (int j = 0; j < k; j++) b[n++] = (char)('a' + rnd() % 26);
        add(b, (size_t)n);
    }
    while (g_n < V) g_eog[g_n] = true, g_tok[g_n] = NULL, g_len[g_n++] = 0; /* specials */
    fprintf(stderr, "vocabulary: %d tokens (%d corpus words)\n", g_n, words);
}

static void time_state(ts_grammar *g, ts_grammar_vocab *v, const char *prefix, const char *what) {
    ts_matcher *m;
    char err[256];
    if (ts_matcher_new(g, v, &m, err, sizeof err) ||
        ts_matcher_accept_bytes(m, prefix, strlen(prefix), err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", what, err);
        exit(1);
    }
    static uint32_t allow[V / 32 + 1];
    double t[200];
    for (int i = 0; i < 200; i++) {
        double t0 = now();
        ts_matcher_mask(m, allow, err, sizeof err);
        t[i] = now() - t0;
    }
    qsort(t, 200, sizeof *t, cmp);
    int n = 0;
    for (int i = 0; i < V; i++) n += ts_mask_get(allow, i);
    printf("%-34s median %8.1f us  p90 %8.1f us  (%.1f %% of a 7.75 ms step)  %6d tokens allowed\n", what,
           t[100] * 1e6, t[180] * 1e6, t[100] / 7.75e-3 * 100, n);
    ts_matcher_free(m);
}

int main(int argc, char **argv) {
    build_vocab(argc > 1 ? argv[1] : NULL);
    ts_grammar_vocab *v;
    char err[256];
    double t0 = now();
    if (ts_grammar_vocab_from_bytes(V, (const char *const *)g_tok, g_len, g_eog, &v, err, sizeof err))
        return 1;
    printf("vocabulary tries built in %.0f ms\n", (now() - t0) * 1e3);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"count\":{"
                         "\"type\":\"integer\"},"
                         "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]}},\"ok\":{"
                         "\"type\":\"boolean\"}},"
                         "\"required\":[\"name\",\"count\"]}";
    ts_grammar *g, *any;
    if (ts_json_schema_grammar(schema, &g, err, sizeof err) ||
        ts_json_schema_grammar(NULL, &any, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    time_state(g, v, "", "schema: start");
    time_state(g, v, "{", "schema: after {");
    time_state(g, v, "{\"name\": \"Mo", "schema: inside a free string");
    time_state(g, v, "{\"name\": \"Moses\", \"count\": ", "schema: an integer's place");
    time_state(g, v, "{\"name\": \"Moses\", \"count\": 12", "schema: inside an integer");
    time_state(g, v, "{\"name\": \"Moses\", \"count\": 12, \"tags\": [\"r", "schema: inside an enum string");
    time_state(any, v, "{\"a\": [1, {\"b\": \"x", "json_object: inside a nested string");
    time_state(any, v, "{\"a\": [1, {\"b\": \"x\"}", "json_object: after a nested value");
    ts_grammar_free(g), ts_grammar_free(any);
    ts_grammar_vocab_free(v);
    return 0;
}
