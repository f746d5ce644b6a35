/* Tokenizer and chat templates against Hugging Face (fixtures made by tools/demo/train_demo.py on
 * the GPU machine with tokenizers 0.23 / transformers 5.17):
 *   tests/fixtures/tokenizer/parity.json  433 texts (English, CJK, code, emoji, whitespace runs,
 *       digits, decomposed accents, combining marks, invalid UTF-8, special tokens, 400 random
 *       mixes): ids with and without specials, the qwen35 and qwen2 pre-tokenizer pieces, NFC,
 *       the U+FFFD replacement of invalid input, decode with and without specials;
 *   tests/fixtures/chat/chat.json  apply_chat_template renderings (3 templates x 14 conversations
 *       x generation prompt / enable_thinking) and their ids.
 * The tokenizer is built the way `convert` will: ts_tokenizer_write_gguf into a GGUF, then loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test_files.h"

static char g_fixtures[4096];
static ts_tokenizer *g_tok;
static cJSON *g_parity;

static cJSON *load_json(const char *rel) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_fixtures, rel);
    char *s = ts_test_slurp(path, NULL);
    if (!s) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

/* hex -> bytes (malloc'd, *n set). */
static char *unhex(const char *h, size_t *n) {
    size_t l = strlen(h) / 2;
    char *b = malloc(l + 1);
    for (size_t i = 0; i < l; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        b[i] = (char)v;
    }
    b[l] = 0;
    *n = l;
    return b;
}

/* Writes the tokenizer of an HF folder to a temporary GGUF (ts_tokenizer_write_gguf) and loads it. */
static ts_tokenizer *build(const char *hf_dir, uint32_t n_vocab, ts_gguf **keep) {
    char path[] = "/tmp/ts-test-tokenizer-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[512] = "";
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    assert_non_null(w);
    int rc = ts_tokenizer_write_gguf(w, hf_dir, n_vocab, err, sizeof err);
    if (rc) fail_msg("ts_tokenizer_write_gguf(%s): %s", hf_dir, err);
    assert_int_equal(ts_gguf_writer_begin_data(w, path), 0);
    assert_int_equal(ts_gguf_writer_finish(w), 0);
    ts_gguf_writer_free(w);
    ts_gguf *g = NULL;
    if (ts_gguf_open(path, &g, err, sizeof err)) fail_msg("open: %s", err);
    unlink(path);
    ts_tokenizer *t = NULL;
    if (ts_tokenizer_load(g, &t, err, sizeof err)) fail_msg("ts_tokenizer_load: %s", err);
    if (keep)
        *keep = g;
    else
        ts_gguf_close(g);
    return t;
}

static int setup(void **state) {
    (void)state;
    const char *fx = getenv("TS_FIXTURES");
    snprintf(g_fixtures, sizeof g_fixtures, "%s", fx ? fx : "tests/fixtures");
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/tokenizer", g_fixtures);
    g_tok = build(dir, 4160, NULL);
    g_parity = load_json("tokenizer/parity.json");
    return g_tok && g_parity ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    ts_tokenizer_free(g_tok);
    cJSON_Delete(g_parity);
    return 0;
}

static bool ids_equal(const ts_tokens *got, const cJSON *want) {
    if (got->n != (size_t)cJSON_GetArraySize(want)) return false;
    size_t i = 0;
    for (const cJSON *e = want->child; e; e = e->next, i++)
        if (got->ids[i] != e->valueint) return false;
    return true;
}

static void print_ids(const char *what, const ts_tokens *got, const cJSON *want) {
    fprintf(stderr, "  %s: got", what);
    for (size_t i = 0; i < got->n && i < 40; i++) fprintf(stderr, " %d", got->ids[i]);
    char *w = cJSON_PrintUnformatted(want);
    fprintf(stderr, "\n  want %.400s\n", w);
    free(w);
}

typedef struct pieces {
    char buf[1 << 16];
    size_t n;
    const char *s;
} pieces;

static void collect(void *ctx, size_t start, size_t len) {
    pieces *p = ctx;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len && p->n + 3 < sizeof p->buf; i++) {
        unsigned char c = (unsigned char)p->s[start + i];
        p->buf[p->n++] = hex[c >> 4];
        p->buf[p->n++] = hex[c & 15];
    }
    if (p->n + 1 < sizeof p->buf) p->buf[p->n++] = '|';
}

static void join_hex(const cJSON *arr, pieces *p) {
    p->n = 0;
    for (const cJSON *e = arr->child; e; e = e->next) {
        size_t l = strlen(e->valuestring);
        memcpy(p->buf + p->n, e->valuestring, l);
        p->n += l;
        p->buf[p->n++] = '|';
    }
}

static bool hex_equal(const ts_text *t, const char *hex) {
    size_t n;
    char *b = unhex(hex, &n);
    bool ok = n == t->n && (n == 0 || !memcmp(b, t->s, n));
    free(b);
    return ok;
}

/* Every parity case: ids (specials on/off), sanitizing, NFC, both pre-tokenizers, decode. */
static void test_parity(void **state) {
    (void)state;
    const cJSON *cases = cJSON_GetObjectItem(g_parity, "cases");
    int n = 0, bad = 0;
    char err[512];
    static pieces got, want;
    for (const cJSON *c = cases->child; c; c = c->next, n++) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        size_t len;
        char *raw = unhex(cJSON_GetObjectItem(c, "bytes_hex")->valuestring, &len);
        ts_tokens ids = {0}, ids_ns = {0};
        assert_int_equal(ts_tokenize(g_tok, raw, len, true, &ids, err, sizeof err), 0);
        if (!ids_equal(&ids, cJSON_GetObjectItem(c, "ids"))) {
            fprintf(stderr, "parity %s: ids differ\n", name);
            print_ids("ids", &ids, cJSON_GetObjectItem(c, "ids"));
            bad++;
        }
        const cJSON *ns = cJSON_GetObjectItem(c, "ids_no_special");
        assert_int_equal(ts_tokenize(g_tok, raw, len, false, &ids_ns, err, sizeof err), 0);
        if (cJSON_IsArray(ns) && !ids_equal(&ids_ns, ns)) {
            fprintf(stderr, "parity %s: ids without specials differ\n", name);
            print_ids("ids_no_special", &ids_ns, ns);
            bad++;
        }
        ts_text clean = {0}, nfc = {0}, dec = {0}, dec_ns = {0};
        assert_true(ts_utf8_sanitize(raw, len, &clean) >= 0);
        if (!hex_equal(&clean, cJSON_GetObjectItem(c, "sanitized_hex")->valuestring))
            fprintf(stderr, "parity %s: U+FFFD replacement differs\n", name), bad++;
        assert_int_equal(ts_utf8_nfc(clean.s ? clean.s : "", clean.n, &nfc, err, sizeof err), 0);
        if (!hex_equal(&nfc, cJSON_GetObjectItem(c, "nfc_hex")->valuestring))
            fprintf(stderr, "parity %s: NFC differs\n", name), bad++;
        const char *pres[2] = {"qwen35", "qwen2"};
        for (int k = 0; k < 2; k++) {
            char key[64];
            snprintf(key, sizeof key, "pieces_%s_hex", pres[k]);
            got.n = 0;
            got.s = clean.s ? clean.s : "";
            assert_int_equal(ts_pretokenize(pres[k], got.s, clean.n, collect, &got, err, sizeof err), 0);
            join_hex(cJSON_GetObjectItem(c, key), &want);
            if (got.n != want.n || memcmp(got.buf, want.buf, got.n)) {
                fprintf(stderr, "parity %s: %s pieces differ\n  got  %.*s\n  want %.*s\n", name, pres[k],
                        (int)(got.n > 300 ? 300 : got.n), got.buf, (int)(want.n > 300 ? 300 : want.n),
                        want.buf);
                bad++;
            }
        }
        assert_int_equal(ts_detokenize(g_tok, ids.ids, ids.n, true, &dec, err, sizeof err), 0);
        if (!hex_equal(&dec, cJSON_GetObjectItem(c, "decoded_hex")->valuestring))
            fprintf(stderr, "parity %s: decode differs\n", name), bad++;
        assert_int_equal(ts_detokenize(g_tok, ids.ids, ids.n, false, &dec_ns, err, sizeof err), 0);
        if (!hex_equal(&dec_ns, cJSON_GetObjectItem(c, "decoded_skip_special_hex")->valuestring))
            fprintf(stderr, "parity %s: decode without specials differs\n", name), bad++;
        /* Round trip: decoding gives back the sanitized, NFC-normalized text. */
        if (!strstr(name, "special") && !(dec.n == nfc.n && (!dec.n || !memcmp(dec.s, nfc.s, dec.n))))
            fprintf(stderr, "parity %s: decode(encode(x)) != NFC(x)\n", name), bad++;
        ts_text_free(&clean), ts_text_free(&nfc), ts_text_free(&dec), ts_text_free(&dec_ns);
        ts_tokens_free(&ids), ts_tokens_free(&ids_ns);
        free(raw);
    }
    fprintf(stderr, "parity: %d cases, %d mismatches\n", n, bad);
    assert_true(n > 400);
    assert_int_equal(bad, 0);
}

static bool valid_utf8(const ts_text *t) {
    ts_text x = {0};
    long r = ts_utf8_sanitize(t->s ? t->s : "", t->n, &x);
    ts_text_free(&x);
    return r == 0;
}

/* Streaming: feeding the ids of every parity case one at a time gives the whole decode, and the
 * output is valid UTF-8 after every step (a character split across tokens waits for its end). */
static void test_stream_tokens(void **state) {
    (void)state;
    char err[256];
    for (const cJSON *c = cJSON_GetObjectItem(g_parity, "cases")->child; c; c = c->next) {
        const cJSON *want_ids = cJSON_GetObjectItem(c, "ids");
        ts_detok d;
        ts_detok_init(&d, g_tok, true);
        ts_text out = {0};
        for (const cJSON *e = want_ids->child; e; e = e->next) {
            assert_int_equal(ts_detok_push(&d, e->valueint, &out, err, sizeof err), 0);
            assert_true(valid_utf8(&out));
        }
        assert_int_equal(ts_detok_flush(&d, &out), 0);
        assert_true(hex_equal(&out, cJSON_GetObjectItem(c, "decoded_hex")->valuestring));
        ts_text_free(&out);
    }
}

/* An emoji (4 bytes) and a CJK character (3 bytes) made of byte tokens: nothing comes out until
 * the last byte; a token id out of range is an error. */
static void test_stream_split_chars(void **state) {
    (void)state;
    char err[256];
    const char *texts[] = {"\xf0\x9f\x99\x82", "\xe4\xb8\x96", "a\xc3\xa9"};
    for (int k = 0; k < 3; k++) {
        ts_tokens ids = {0};
        assert_int_equal(ts_tokenize(g_tok, texts[k], strlen(texts[k]), true, &ids, err, sizeof err), 0);
        ts_detok d;
        ts_detok_init(&d, g_tok, true);
        ts_text out = {0};
        size_t emitted_before_last = 0;
        for (size_t i = 0; i < ids.n; i++) {
            assert_int_equal(ts_detok_push(&d, ids.ids[i], &out, err, sizeof err), 0);
            assert_true(valid_utf8(&out));
            if (i + 1 < ids.n) emitted_before_last = out.n;
        }
        assert_int_equal(ts_detok_flush(&d, &out), 0);
        assert_int_equal(out.n, strlen(texts[k]));
        assert_memory_equal(out.s, texts[k], out.n);
        if (k < 2) { /* no merges for these in the demo vocabulary: one token a byte */
            assert_int_equal(ids.n, strlen(texts[k]));
            assert_int_equal(emitted_before_last, 0);
        }
        ts_tokens_free(&ids);
        ts_text_free(&out);
    }
    ts_detok d;
    ts_detok_init(&d, g_tok, true);
    ts_text out = {0};
    assert_int_not_equal(ts_detok_push(&d, 999999, &out, err, sizeof err), 0);
    assert_int_not_equal(ts_detok_push(&d, -1, &out, err, sizeof err), 0);
    ts_text_free(&out);
}

/* Streaming raw bytes cut at random points equals Python's bytes.decode('utf-8', 'replace') of
 * the whole (= ts_utf8_sanitize, itself checked against Python by the parity fixture). */
static void test_stream_bytes_random(void **state) {
    (void)state;
    srand(12345);
    const unsigned char alphabet[] = {'a',  ' ',  0x80, 0xBF, 0xC2, 0xC3, 0xA9, 0xE0, 0xE4, 0xB8, 0x96,
                                      0xED, 0xA0, 0xF0, 0x9F, 0x99, 0x82, 0xF4, 0x90, 0xFF, 0xC0};
    for (int iter = 0; iter < 3000; iter++) {
        unsigned char buf[64];
        size_t n = (size_t)(rand() % 64);
        for (size_t i = 0; i < n; i++) buf[i] = alphabet[rand() % (int)sizeof alphabet];
        ts_text whole = {0}, out = {0};
        assert_true(ts_utf8_sanitize((const char *)buf, n, &whole) >= 0);
        ts_detok d;
        ts_detok_init(&d, g_tok, true);
        for (size_t i = 0; i < n;) {
            size_t k = 1 + (size_t)(rand() % 5);
            if (k > n - i) k = n - i;
            assert_int_equal(ts_detok_push_bytes(&d, buf + i, k, &out), 0);
            assert_true(valid_utf8(&out));
            i += k;
        }
        assert_int_equal(ts_detok_flush(&d, &out), 0);
        assert_int_equal(out.n, whole.n);
        if (whole.n) assert_memory_equal(out.s, whole.s, whole.n);
        ts_text_free(&whole), ts_text_free(&out);
    }
}

/* Specials: CONTROL tokens only when allowed; USER_DEFINED (<think>) always; partial ones never. */
static void test_specials(void **state) {
    (void)state;
    char err[256];
    int32_t im_start = ts_tokenizer_find(g_tok, "<|im_start|>"), think = ts_tokenizer_find(g_tok, "<think>");
    assert_int_equal(im_start, 4092);
    assert_int_equal(think, 4094);
    assert_int_equal(ts_tokenizer_token_type(g_tok, im_start), TS_TOKEN_CONTROL);
    assert_int_equal(ts_tokenizer_token_type(g_tok, think), TS_TOKEN_USER_DEFINED);
    assert_int_equal(ts_tokenizer_token_type(g_tok, 4100), TS_TOKEN_UNUSED); /* [PAD4100] */
    ts_tokens a = {0}, b = {0}, c = {0};
    const char *s = "<|im_start|>user<think>";
    assert_int_equal(ts_tokenize(g_tok, s, strlen(s), true, &a, err, sizeof err), 0);
    assert_int_equal(ts_tokenize(g_tok, s, strlen(s), false, &b, err, sizeof err), 0);
    assert_true(a.n >= 3);
    assert_int_equal(a.ids[0], im_start);
    assert_int_equal(a.ids[a.n - 1], think);
    assert_true(b.n > a.n);
    for (size_t i = 0; i < b.n; i++) assert_int_not_equal(b.ids[i], im_start);
    assert_int_equal(b.ids[b.n - 1], think);
    const char *partial = "<|im_start <|im_end|x";
    assert_int_equal(ts_tokenize(g_tok, partial, strlen(partial), true, &c, err, sizeof err), 0);
    for (size_t i = 0; i < c.n; i++) assert_true(c.ids[i] < 4091);
    /* Decoding: a CONTROL token is text only when specials are rendered. */
    size_t len;
    assert_non_null(ts_token_bytes(g_tok, im_start, false, &len));
    assert_int_equal(len, 0);
    ts_token_bytes(g_tok, im_start, true, &len);
    assert_int_equal(len, strlen("<|im_start|>"));
    ts_token_bytes(g_tok, think, false, &len);
    assert_int_equal(len, strlen("<think>"));
    assert_null(ts_token_bytes(g_tok, 5000, true, &len));
    ts_tokens_free(&a), ts_tokens_free(&b), ts_tokens_free(&c);
}

/* Arbitrary bytes never fail; decode(encode(x)) = NFC(replace(x)) when no special is written. */
static void test_random_bytes(void **state) {
    (void)state;
    char err[256];
    srand(777);
    for (int iter = 0; iter < 2000; iter++) {
        char buf[96];
        size_t n = (size_t)(rand() % 96);
        for (size_t i = 0; i < n; i++) {
            int r = rand() % 4;
            buf[i] = (char)(r == 0   ? rand() % 256
                            : r == 1 ? 0x80 + rand() % 64
                            : r == 2 ? 'a' + rand() % 26
                                     : " \n\t'"[rand() % 4]);
            if (buf[i] == '<') buf[i] = '>';
        }
        ts_tokens ids = {0};
        ts_text clean = {0}, nfc = {0}, dec = {0};
        assert_int_equal(ts_tokenize(g_tok, buf, n, true, &ids, err, sizeof err), 0);
        assert_true(ts_utf8_sanitize(buf, n, &clean) >= 0);
        assert_int_equal(ts_utf8_nfc(clean.s ? clean.s : "", clean.n, &nfc, err, sizeof err), 0);
        assert_int_equal(ts_detokenize(g_tok, ids.ids, ids.n, true, &dec, err, sizeof err), 0);
        assert_int_equal(dec.n, nfc.n);
        if (dec.n) assert_memory_equal(dec.s, nfc.s, dec.n);
        ts_tokens_free(&ids), ts_text_free(&clean), ts_text_free(&nfc), ts_text_free(&dec);
    }
    /* A long run of letters is one pre-token: BPE stays fast (heap merges). */
    size_t big = 300000;
    char *s = malloc(big);
    for (size_t i = 0; i < big; i++) s[i] = "the"[i % 3];
    ts_tokens ids = {0};
    assert_int_equal(ts_tokenize(g_tok, s, big, true, &ids, err, sizeof err), 0);
    assert_true(ids.n > 0 && ids.n < big);
    ts_tokens_free(&ids);
    free(s);
}

/* The keys ts_tokenizer_write_gguf writes for models/demo, as llama.cpp's converter would. */
static void test_writer_keys(void **state) {
    (void)state;
    char dir[8192], err[256], buf[64];
    snprintf(dir, sizeof dir, "%s/../../models/demo", g_fixtures);
    ts_gguf *g = NULL;
    ts_tokenizer *t = build(dir, 4160, &g);
    assert_int_equal(ts_gguf_get_str(g, "tokenizer.ggml.model", buf, sizeof buf, err, sizeof err), 0);
    assert_string_equal(buf, "gpt2");
    assert_int_equal(ts_gguf_get_str(g, "tokenizer.ggml.pre", buf, sizeof buf, err, sizeof err), 0);
    assert_string_equal(buf, "qwen35");
    const ts_gguf_value *toks = ts_gguf_find(g, "tokenizer.ggml.tokens");
    assert_int_equal(toks->arr.count, 4160);
    assert_true(ts_gguf_str_eq(toks->arr.items[4096].str, "[PAD4096]"));
    assert_true(ts_gguf_str_eq(toks->arr.items[4159].str, "[PAD4159]"));
    assert_true(ts_gguf_str_eq(toks->arr.items[4093].str, "<|im_end|>"));
    const ts_gguf_value *types = ts_gguf_find(g, "tokenizer.ggml.token_type");
    assert_int_equal(types->arr.elem_type, TS_GGUF_I32);
    assert_int_equal(ts_gguf_arr_i64(types, 0), TS_TOKEN_NORMAL);
    assert_int_equal(ts_gguf_arr_i64(types, 4091), TS_TOKEN_CONTROL);
    assert_int_equal(ts_gguf_arr_i64(types, 4095), TS_TOKEN_USER_DEFINED);
    assert_int_equal(ts_gguf_arr_i64(types, 4100), TS_TOKEN_UNUSED);
    const ts_gguf_value *merges = ts_gguf_find(g, "tokenizer.ggml.merges");
    assert_int_equal(merges->arr.count, 4091 - 256);
    uint32_t v;
    assert_int_equal(ts_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v, err, sizeof err),
                     0); /* tokenizer_config */
    assert_int_equal(v, 4093);
    assert_int_equal(ts_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &v, err, sizeof err), 0);
    assert_int_equal(v, 4091);
    assert_int_equal(ts_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v, err, sizeof err),
                     0); /* config.json */
    assert_int_equal(v, 4091);
    bool b = true;
    assert_int_equal(ts_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, err, sizeof err), 0);
    assert_false(b);
    assert_null(ts_gguf_find(g, "tokenizer.ggml.unknown_token_id"));
    const char *tmpl = ts_tokenizer_chat_template(t);
    assert_non_null(tmpl);
    assert_non_null(strstr(tmpl, "enable_thinking"));
    /* End of generation: eos (<|im_end|>) and <|endoftext|>. */
    assert_true(ts_tokenizer_is_eog(t, 4093));
    assert_true(ts_tokenizer_is_eog(t, 4091));
    assert_false(ts_tokenizer_is_eog(t, 4092));
    assert_false(ts_tokenizer_is_eog(t, 100));
    assert_int_equal(ts_tokenizer_bos(t), 4091);
    assert_int_equal(ts_tokenizer_eos(t), 4093);
    assert_false(ts_tokenizer_add_bos(t));
    ts_tokenizer_free(t);
    ts_gguf_close(g);
    /* n_vocab 0: the largest id + 1, no padding; n_vocab too small: refused by name. */
    t = build(dir, 0, NULL);
    assert_int_equal(ts_tokenizer_n_tokens(t), 4096);
    ts_tokenizer_free(t);
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    assert_int_not_equal(ts_tokenizer_write_gguf(w, dir, 4000, err, sizeof err), 0);
    assert_non_null(strstr(err, "4000"));
    assert_int_not_equal(ts_tokenizer_write_gguf(w, "/nonexistent-dir", 0, err, sizeof err), 0);
    assert_non_null(strstr(err, "tokenizer.json"));
    /* a token cJSON would cut at \u0000 (and so pass for another) is refused with its place */
    char tmp[] = "/tmp/ts_tok_nul_XXXXXX", file[64];
    assert_non_null(mkdtemp(tmp));
    snprintf(file, sizeof file, "%s/tokenizer.json", tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\\u0000\":1},\"merges\":[]}}", f);
    fclose(f);
    assert_int_not_equal(ts_tokenizer_write_gguf(w, tmp, 0, err, sizeof err), 0);
    if (!strstr(err, "tokenizer.json: a key of 'model.vocab' contains a NUL character")) fail_msg("%s", err);
    unlink(file), rmdir(tmp);
    ts_gguf_writer_free(w);
}

/* Files the loader must refuse with a sentence naming the key. */
static void test_bad_files(void **state) {
    (void)state;
    struct {
        const char *model, *pre;
        bool merges;
        const char *want;
    } cases[] = {
        {"llama", "qwen35", true, "tokenizer.ggml.model"},
        {"gpt2", "gpt-4o", true, "tokenizer.ggml.pre"},
        {"gpt2", "qwen35", false, "tokenizer.ggml.merges"},
        {NULL, "qwen35", true, "tokenizer.ggml.model"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char path[] = "/tmp/ts-test-badtok-XXXXXX", err[512] = "";
        int fd = mkstemp(path);
        close(fd);
        ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
        const char *tokens[] = {"a", "b", "ab"};
        const char *merges[] = {"a b"};
        if (cases[k].model) ts_gguf_writer_set_str(w, "tokenizer.ggml.model", cases[k].model);
        ts_gguf_writer_set_str(w, "tokenizer.ggml.pre", cases[k].pre);
        ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 3);
        if (cases[k].merges) ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
        assert_int_equal(ts_gguf_writer_begin_data(w, path), 0);
        assert_int_equal(ts_gguf_writer_finish(w), 0);
        ts_gguf_writer_free(w);
        ts_gguf *g = NULL;
        assert_int_equal(ts_gguf_open(path, &g, err, sizeof err), 0);
        ts_tokenizer *t = NULL;
        assert_int_not_equal(ts_tokenizer_load(g, &t, err, sizeof err), 0);
        assert_null(t);
        if (!strstr(err, cases[k].want)) fail_msg("case %zu: '%s' does not name %s", k, err, cases[k].want);
        ts_gguf_close(g);
        unlink(path);
    }
}

/* Chat renderings equal transformers' apply_chat_template byte for byte, and their ids HF's. */
static void test_chat_fixture(void **state) {
    (void)state;
    cJSON *doc = load_json("chat/chat.json");
    assert_non_null(doc);
    const cJSON *templates = cJSON_GetObjectItem(doc, "templates"),
                *convs = cJSON_GetObjectItem(doc, "conversations");
    struct {
        const char *name;
        ts_chat_kind kind;
    } want_kind[] = {
        {"demo", TS_CHAT_QWEN3}, {"chatml", TS_CHAT_CHATML}, {"think_open", TS_CHAT_QWEN3_THINKING}};
    char err[512];
    for (size_t k = 0; k < 3; k++) {
        ts_chat_kind kind;
        const cJSON *tp = cJSON_GetObjectItem(templates, want_kind[k].name);
        assert_non_null(tp);
        if (ts_chat_detect(tp->valuestring, &kind, err, sizeof err))
            fail_msg("%s: %s", want_kind[k].name, err);
        assert_int_equal(kind, want_kind[k].kind);
    }
    int n = 0, bad = 0;
    for (const cJSON *c = cJSON_GetObjectItem(doc, "cases")->child; c; c = c->next, n++) {
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *cname = cJSON_GetObjectItem(c, "conversation")->valuestring;
        ts_chat_kind kind;
        assert_int_equal(
            ts_chat_detect(cJSON_GetObjectItem(templates, tname)->valuestring, &kind, err, sizeof err), 0);
        const cJSON *conv = cJSON_GetObjectItem(convs, cname);
        ts_chat_msg msgs[16];
        size_t nm = 0;
        for (const cJSON *m = conv->child; m && nm < 16; m = m->next, nm++) {
            const cJSON *rc = cJSON_GetObjectItem(m, "reasoning_content");
            msgs[nm] = (ts_chat_msg){.role = cJSON_GetObjectItem(m, "role")->valuestring,
                                     .content = cJSON_GetObjectItem(m, "content")->valuestring,
                                     .reasoning_content = cJSON_IsString(rc) ? rc->valuestring : NULL};
        }
        const cJSON *et = cJSON_GetObjectItem(c, "enable_thinking");
        ts_chat_opts o = {.add_generation_prompt =
                              cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                          .enable_thinking = cJSON_IsBool(et) ? cJSON_IsTrue(et) : -1};
        ts_text out = {0};
        assert_int_equal(ts_chat_render(kind, msgs, nm, &o, &out, err, sizeof err), 0);
        const char *want = cJSON_GetObjectItem(c, "expected")->valuestring;
        if (strlen(want) != out.n || memcmp(want, out.s ? out.s : "", out.n)) {
            fprintf(stderr, "chat %s/%s gen=%d thinking=%d differs:\n--- got\n%s\n--- want\n%s\n---\n", tname,
                    cname, o.add_generation_prompt, o.enable_thinking, out.s ? out.s : "", want);
            bad++;
        }
        ts_tokens ids = {0};
        assert_int_equal(ts_tokenize(g_tok, out.s ? out.s : "", out.n, true, &ids, err, sizeof err), 0);
        if (!ids_equal(&ids, cJSON_GetObjectItem(c, "ids"))) {
            fprintf(stderr, "chat %s/%s: ids of the rendering differ\n", tname, cname);
            bad++;
        }
        ts_tokens_free(&ids);
        ts_text_free(&out);
    }
    fprintf(stderr, "chat: %d cases, %d mismatches\n", n, bad);
    assert_true(n >= 150);
    assert_int_equal(bad, 0);
    cJSON_Delete(doc);
}

static void test_chat_select(void **state) {
    (void)state;
    char err[512];
    ts_chat_kind k;
    assert_int_not_equal(ts_chat_detect(NULL, &k, err, sizeof err), 0);
    assert_non_null(strstr(err, "--chat-template"));
    const char *llama3 = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{{ "
                         "m.content }}<|eot_id|>{% endfor %}";
    assert_int_not_equal(ts_chat_detect(llama3, &k, err, sizeof err), 0);
    assert_non_null(strstr(err, "--chat-template chatml"));
    const char *qwen25 = "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                         "assistant.<|im_end|>' }}";
    assert_int_not_equal(ts_chat_detect(qwen25, &k, err, sizeof err), 0);
    /* the override wins, even over an unknown template */
    assert_int_equal(ts_chat_select("chatml", llama3, &k, err, sizeof err), 0);
    assert_int_equal(k, TS_CHAT_CHATML);
    assert_int_equal(ts_chat_select("qwen3-thinking", NULL, &k, err, sizeof err), 0);
    assert_int_equal(k, TS_CHAT_QWEN3_THINKING);
    assert_int_not_equal(ts_chat_select("vicuna", NULL, &k, err, sizeof err), 0);
    assert_non_null(strstr(err, "vicuna"));
    assert_int_equal(ts_chat_select(NULL, ts_tokenizer_chat_template(g_tok), &k, err, sizeof err), 0);
    assert_int_equal(k, TS_CHAT_QWEN3);
    /* a message without a role is refused */
    ts_chat_msg m = {.role = NULL, .content = "x"};
    ts_text out = {0};
    assert_int_not_equal(ts_chat_render(TS_CHAT_CHATML, &m, 1, NULL, &out, err, sizeof err), 0);
    ts_text_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_stream_tokens),
        cmocka_unit_test(test_stream_split_chars),
        cmocka_unit_test(test_stream_bytes_random),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_writer_keys),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_chat_fixture),
        cmocka_unit_test(test_chat_select),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
