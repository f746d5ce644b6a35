/* turbospark tokenize: text -> token ids with a model's tokenizer (or a Hugging Face folder's),
 * for checking the tokenizer against transformers and for feeding `perplexity --tokens-npy`. */
#include "cli/cli.h"

#include "cli/args.h"

#include "cli/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The tokenizer of -m FILE.gguf or --hf HF_DIR. */
static int load_tokenizer(const char *gguf_path, const char *hf_dir, ts_tokenizer **t, char *err,
                          size_t errlen) {
    return gguf_path ? ts_tokenizer_load_gguf(gguf_path, t, err, errlen)
                     : ts_tokenizer_load_hf(hf_dir, t, err, errlen);
}

int ts_cli_encode(const ts_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                  int64_t *n, char *err, size_t errlen) {
    *ids = NULL, *n = 0;
    int64_t cap = (int64_t)len + 16, k = -1; /* enough but for invalid UTF-8 (a byte becomes U+FFFD) */
    for (int pass = 0; pass < 2; pass++) {
        int32_t *v = malloc((size_t)cap * sizeof *v);
        if (!v) return ts_errf(err, errlen, "out of memory for %lld tokens", (long long)cap);
        k = ts_tokenizer_encode(t, text, len, parse_special, v, cap, err, errlen);
        if (k >= 0 && k <= cap) {
            *ids = v, *n = k;
            return 0;
        }
        free(v);
        if (k < 0) return -1;
        cap = k;
    }
    return ts_errf(err, errlen, "the tokenizer gave %lld tokens, then more, for one text", (long long)k);
}

int ts_cli_tokenize_file(const ts_tokenizer *t, const char *text_path, bool parse_special, int32_t **ids,
                         int64_t *n, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ts_cli_read_text(text_path, &len, err, errlen); /* "-": stdin */
    int rc = text ? ts_cli_encode(t, text, len, parse_special, ids, n, err, errlen) : -1;
    free(text);
    return rc;
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
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    int rc = load_tokenizer(model, hf, &t, err, sizeof err);
    for (int k = 0; !rc && k < (prompt ? 1 : n_files); k++) {
        free(text), free(ids);
        text = NULL, ids = NULL;
        if (prompt)
            text = strdup(prompt), n = strlen(prompt),
            rc = text ? 0 : ts_errf(err, sizeof err, "out of memory");
        else
            rc = (text = ts_cli_read_text(files[k], &n, err, sizeof err)) ? 0 : -1;
        if (!rc) rc = ts_cli_encode(t, text, n, special, &ids, &n_ids, err, sizeof err);
        if (!rc && npy) {
            FILE *f = fopen(npy, "wb");
            int64_t shape[1] = {n_ids};
            rc = !f ? ts_errf(err, sizeof err, "cannot create %s", npy)
                    : ts_npy_write_header(f, "<i4", 1, shape, err, sizeof err);
            if (!rc && n_ids && fwrite(ids, sizeof(int32_t), (size_t)n_ids, f) != (size_t)n_ids)
                rc = ts_errf(err, sizeof err, "cannot write %s", npy);
            if (f && fclose(f) && !rc) rc = ts_errf(err, sizeof err, "cannot write %s", npy);
            if (!rc) fprintf(stderr, "tokenize: %lld tokens -> %s\n", (long long)n_ids, npy);
        } else if (!rc && count_only) {
            printf("%lld\n", (long long)n_ids);
        } else if (!rc && pieces) {
            for (int64_t i = 0; i < n_ids; i++) {
                size_t len;
                const char *b = ts_token_bytes(t, ids[i], true, &len);
                printf("%d\t", (int)ids[i]);
                put_escaped(b, len);
                putchar('\n');
            }
        } else if (!rc) {
            for (int64_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            putchar('\n');
        }
    }
    if (rc) fprintf(stderr, "turbospark tokenize: %s\n", err);
    free(ids);
    free(text);
    free(files);
    ts_tokenizer_free(t);
    return rc ? 1 : 0;
}
