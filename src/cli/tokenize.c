/* turbospark tokenize: text -> token ids with a model's tokenizer (or a Hugging Face folder's),
 * for checking the tokenizer against transformers and for feeding `perplexity --tokens-npy`. */
#include "cli/cli.h"

#include "cli/args.h"

#include "common/npy.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark tokenize (-m FILE.gguf | --hf HF_DIR) (-p TEXT | -f FILE) [--no-special]\n"
        "                           [--pieces | --npy OUT.npy | --count]\n"
        "Prints the token ids of the text, space-separated on one line.\n"
        "  -m FILE.gguf   the tokenizer of a GGUF file (tokenizer.ggml.*)\n"
        "  --hf HF_DIR    a Hugging Face folder's tokenizer.json (+ tokenizer_config.json), read the way\n"
        "                 `turbospark convert` writes it\n"
        "  -p TEXT        the text; -f FILE: the bytes of a file (any bytes: invalid UTF-8 becomes U+FFFD);\n"
        "                 several -f: one line of ids per file\n"
        "  --no-special   written special tokens (<|im_start|>) are plain text, not their ids\n"
        "  --pieces       one token a line: id, then its bytes (C-escaped)\n"
        "  --npy OUT.npy  write the ids as an int32 1-D array (for perplexity --tokens-npy)\n"
        "  --count        print the number of tokens only\n");
}

static char *read_all(const char *path, size_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) {
            char *b = cap < ((size_t)1 << 40) ? realloc(buf, cap * 2) : NULL;
            if (!b) free(buf);
            buf = b, cap *= 2;
        }
    }
    if (!buf || ferror(f)) {
        snprintf(err, errlen, buf ? "cannot read %s" : "out of memory reading %s", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = len;
    return buf;
}

/* The tokenizer of a Hugging Face folder: its keys written to a temporary GGUF, then loaded. */
static int load_hf(const char *dir, ts_tokenizer **t, char *err, size_t errlen) {
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/turbospark-tokenizer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a temporary file in %s: %s", tmp && *tmp ? tmp : "/tmp",
                 strerror(errno));
        return -1;
    }
    close(fd);
    ts_gguf_writer *w = ts_gguf_writer_new(TS_GGUF_DEFAULT_ALIGNMENT, err, errlen);
    int rc = w ? 0 : -1;
    if (!rc) rc = ts_tokenizer_write_gguf(w, dir, 0, err, errlen);
    if (!rc && (ts_gguf_writer_set_str(w, "general.architecture", "tokenizer") ||
                ts_gguf_writer_begin_data(w, path) || ts_gguf_writer_finish(w)))
        rc = -1, snprintf(err, errlen, "%s", ts_gguf_writer_error(w));
    ts_gguf_writer_free(w);
    ts_gguf *g = NULL;
    if (!rc) rc = ts_gguf_open(path, &g, err, errlen);
    if (!rc) rc = ts_tokenizer_load(g, t, err, errlen);
    ts_gguf_close(g);
    unlink(path);
    return rc;
}

int ts_cli_tokenize_file(const char *gguf_path, const char *text_path, bool parse_special, int32_t **ids,
                         int64_t *n, char *err, size_t errlen) {
    ts_gguf *g = NULL;
    ts_tokenizer *t = NULL;
    ts_tokens v = {0};
    size_t len = 0;
    char *text = NULL;
    int rc = ts_gguf_open(gguf_path, &g, err, errlen);
    if (!rc) rc = ts_tokenizer_load(g, &t, err, errlen);
    ts_gguf_close(g);
    if (!rc) rc = (text = ts_cli_read_text(text_path, &len, err, errlen)) ? 0 : -1; /* "-": stdin */
    if (!rc) rc = ts_tokenize(t, text, len, parse_special, &v, err, errlen);
    free(text);
    ts_tokenizer_free(t);
    if (rc) {
        ts_tokens_free(&v);
        return -1;
    }
    *ids = v.ids ? v.ids : malloc(sizeof(int32_t));
    *n = (int64_t)v.n;
    return *ids ? 0 : -1;
}

static void put_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

int ts_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *hf = NULL, *prompt = NULL, *npy = NULL;
    const char **files = calloc((size_t)argc, sizeof *files);
    int n_files = 0;
    if (!files) return 1;
    bool special = true, pieces = false, count_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool v = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") && v)
            model = argv[++i];
        else if (!strcmp(a, "--hf") && v)
            hf = argv[++i];
        else if (!strcmp(a, "-p") && v)
            prompt = argv[++i];
        else if (!strcmp(a, "-f") && v)
            files[n_files++] = argv[++i];
        else if (!strcmp(a, "--npy") && v)
            npy = argv[++i];
        else if (!strcmp(a, "--no-special"))
            special = false;
        else if (!strcmp(a, "--pieces"))
            pieces = true;
        else if (!strcmp(a, "--count"))
            count_only = true;
        else {
            fprintf(stderr, "turbospark tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            free(files);
            return 2;
        }
    }
    if (!model == !hf || !prompt == !n_files || (npy && n_files > 1)) {
        fprintf(stderr,
                "turbospark tokenize: give one of -m / --hf and one of -p / -f (one -f with --npy)\n");
        usage(stderr);
        free(files);
        return 2;
    }
    char err[1024];
    ts_tokenizer *t = NULL;
    char *text = NULL;
    size_t n = 0;
    ts_tokens ids = {0};
    int rc = 0;
    if (model) {
        ts_gguf *g = NULL;
        rc = ts_gguf_open(model, &g, err, sizeof err);
        if (!rc) rc = ts_tokenizer_load(g, &t, err, sizeof err);
        ts_gguf_close(g);
    } else {
        rc = load_hf(hf, &t, err, sizeof err);
    }
    for (int k = 0; !rc && k < (prompt ? 1 : n_files); k++) {
        free(text);
        text = NULL;
        ids.n = 0;
        if (prompt)
            text = strdup(prompt), n = strlen(prompt),
            rc = text ? 0 : (snprintf(err, sizeof err, "out of memory"), -1);
        else
            rc = (text = read_all(files[k], &n, err, sizeof err)) ? 0 : -1;
        if (!rc) rc = ts_tokenize(t, text, n, special, &ids, err, sizeof err);
        if (!rc && npy) {
            FILE *f = fopen(npy, "wb");
            int64_t shape[1] = {(int64_t)ids.n};
            rc = !f ? (snprintf(err, sizeof err, "cannot create %s", npy), -1)
                    : ts_npy_write_header(f, "<i4", 1, shape, err, sizeof err);
            if (!rc && ids.n && fwrite(ids.ids, sizeof(int32_t), ids.n, f) != ids.n)
                rc = -1, snprintf(err, sizeof err, "cannot write %s", npy);
            if (f && fclose(f) && !rc) rc = -1, snprintf(err, sizeof err, "cannot write %s", npy);
            if (!rc) fprintf(stderr, "tokenize: %zu tokens -> %s\n", ids.n, npy);
        } else if (!rc && count_only) {
            printf("%zu\n", ids.n);
        } else if (!rc && pieces) {
            for (size_t i = 0; i < ids.n; i++) {
                size_t len;
                const char *b = ts_token_bytes(t, ids.ids[i], true, &len);
                printf("%d\t", (int)ids.ids[i]);
                put_escaped(b, len);
                putchar('\n');
            }
        } else if (!rc) {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", (int)ids.ids[i]);
            putchar('\n');
        }
    }
    if (rc) fprintf(stderr, "turbospark tokenize: %s\n", err);
    ts_tokens_free(&ids);
    free(text);
    free(files);
    ts_tokenizer_free(t);
    return rc ? 1 : 0;
}
